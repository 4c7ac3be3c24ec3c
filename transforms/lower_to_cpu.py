"""`--autodiff-lower-to-cpu`: bufferize and lower to the LLVM dialect.

Calling convention (destination passing): every tensor result of a public
function becomes a trailing out-parameter memref that the caller allocates
(numpy owns it), via upstream `buffer-results-to-out-params` with static
allocations hoisted into the caller; scalar results stay results. Every
public function gets a C interface wrapper for the ExecutionEngine. Internal
temporaries are freed by `buffer-deallocation-pipeline`.

Performance (transforms/cpu_schedules.py): before bufferization, large
static linalg ops (matmul, batch_matmul, elementwise, reductions,
transposes) are tiled and vectorized by a transform-dialect schedule chosen
by shape and host vector width, with f32 exp/log/tanh replaced by polynomial
code of documented accuracy; small ops keep the plain loops (compile time).
Results are computed directly in the caller's buffers where possible.
`threads=N` (off by default) distributes large kernels over N OpenMP
threads; the JIT must then load LLVM's OpenMP runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from .cpu_schedules import (
    LOWER_VECTORS,
    ScheduleLinalgForCpu,
    WriteResultsInPlace,
    openmp_lowering,
)
from .diagnostics import fail
from .passes import Pass, PipelineElement, register


@dataclasses.dataclass(frozen=True)
class CheckCpuLowerable(Pass):
    """Reject what the CPU calling convention cannot express, with a diagnostic."""

    name = "autodiff-check-cpu-lowerable"
    summary = "Check that public functions have a CPU-callable signature"

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name.startswith("autodiff.") or op.operation.name == "builtin.module":
                continue
            if op.operation.name != "func.func":
                continue
            ftype = op.attributes["function_type"].value
            for t in ftype.results:
                if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                    raise fail(
                        op,
                        f"autodiff-lower-to-cpu: result type {t} has a dynamic shape; "
                        "results must have static shapes (the caller allocates them)",
                    )
                if isinstance(t, ir.UnrankedTensorType):
                    raise fail(op, f"autodiff-lower-to-cpu: unranked result type {t}")
        for op in _walk(module):
            if op.name.startswith("autodiff."):
                raise fail(
                    op,
                    f"autodiff-lower-to-cpu: '{op.name}' must be removed by its transform pass "
                    "before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)",
                )


def _walk(module: ir.Operation) -> list[ir.Operation]:
    ops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        ops.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return ops


@dataclasses.dataclass(frozen=True)
class ExpandExpm1(Pass):
    """Rewrite scalar `math.expm1` with Kahan's accurate formula.

    Why: convert-math-to-llvm expands expm1 to exp(x) - 1, which loses every
    digit for |x| < 1e-8, and convert-math-to-libm cannot run first in this
    build (it rejects math.copysign and math.absi). With u = exp(x):
    expm1(x) = x if u == 1, -1 if u - 1 == -1, else (u - 1) * x / log(u),
    accurate to a few ulps (Kahan, "Mathematics written in sand").
    """

    name = "autodiff-expand-expm1"
    summary = "Expand math.expm1 accurately (before LLVM lowering)"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, math

        for op in _walk(module):
            if op.name != "math.expm1" or isinstance(op.results[0].type, ir.ShapedType):
                continue
            x = op.operands[0]
            t = x.type
            with ir.InsertionPoint(op), op.location:
                one = arith.constant(t, 1.0)
                u = math.exp(x)
                um1 = arith.subf(u, one)
                general = arith.divf(arith.mulf(um1, x), math.log(u))
                is_one = arith.cmpf(arith.CmpFPredicate.OEQ, u, one)
                minus_one = arith.constant(t, -1.0)
                is_m1 = arith.cmpf(arith.CmpFPredicate.OEQ, um1, minus_one)
                # exp(x) = inf: the general formula gives inf * x / inf = nan.
                is_inf = arith.cmpf(arith.CmpFPredicate.OEQ, u,
                                    arith.constant(t, float("inf")))
                out = arith.select(is_inf, u, general)
                out = arith.select(is_m1, minus_one, out)
                out = arith.select(is_one, x, out)
            op.results[0].replace_all_uses_with(out)
            op.erase()


BUFFERIZE = (
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}"
)

TO_LLVM: tuple[str, ...] = (
    # Before math-to-libm declares libm functions, which must not get wrappers.
    "func.func(llvm-request-c-wrappers)",
    "convert-linalg-to-loops",
    "lower-affine",
    "convert-scf-to-cf",
    "canonicalize",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",
    # math.ipowi/fpowi have no LLVM lowering: outline them as small functions.
    "convert-math-to-funcs",
    # Accuracy: convert-math-to-llvm would turn log1p/expm1 into
    # log(1+x)/exp(x)-1 (losing |x| < 1e-8); log1p is left to libm and expm1
    # is expanded accurately. (math-expand-ops is not used: its tanh
    # underflows to 0 for tiny x.)
    ExpandExpm1(),
    "convert-math-to-llvm{approximate-log1p=false}",
    "convert-math-to-libm",
    "arith-expand",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "reconcile-unrealized-casts",
)


@register
@dataclasses.dataclass(frozen=True)
class LowerToCpu(Pass):
    name = "autodiff-lower-to-cpu"
    summary = "Bufferize (results into caller-owned buffers) and lower to the LLVM dialect"

    threads: int = dataclasses.field(default=1, metadata={
        "help": "threads for large kernels (OpenMP; the JIT must load "
                "cpu_schedules.openmp_runtime_library())"})

    def expand(self) -> Sequence[PipelineElement]:
        # Shared with the GPU pipeline (imported here: lower_to_gpu imports this module).
        from .lower_to_gpu import BoolBuffersToBytes, ElementwiseInitsToInputs

        return [
            CheckCpuLowerable(),
            "canonicalize",
            "cse",
            # arith/math on whole tensors (legal MLIR, not bufferizable as is).
            "func.func(convert-elementwise-to-linalg)",
            # Before fusion: upstream fusion miscompiles producers that read their init.
            ElementwiseInitsToInputs(),
            "func.func(linalg-fuse-elementwise-ops)",
            # Tile + vectorize large ops (transforms/cpu_schedules.py).
            ScheduleLinalgForCpu(threads=self.threads),
            "eliminate-empty-tensors",
            BUFFERIZE,
            # Without hoist-static-allocs: hoisting crashes (updateReturnOps) on
            # some generated modules in MLIR 22 (the ADBench GMM gradient); the
            # cost is one copy per result at function boundaries.
            "buffer-results-to-out-params{modify-public-functions}",
            "canonicalize",
            WriteResultsInPlace(),
            "buffer-deallocation-pipeline",
            *openmp_lowering(self.threads)[0],
            *LOWER_VECTORS,
            *TO_LLVM[:2],  # c wrappers, linalg to loops
            BoolBuffersToBytes(),  # i1 loads/stores abort the LLVM lowering in this build
            *TO_LLVM[2:],
            *openmp_lowering(self.threads)[1],
        ]
