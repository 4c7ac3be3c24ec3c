"""`--autodiff-lower-to-cpu`: bufferize and lower to the LLVM dialect.

Calling convention (destination passing): every tensor result of a public
function becomes a trailing out-parameter memref that the caller allocates
(numpy owns it), via upstream `buffer-results-to-out-params` with static
allocations hoisted into the caller; scalar results stay results. Every
public function gets a C interface wrapper for the ExecutionEngine. Internal
temporaries are freed by `buffer-deallocation-pipeline`.

This is the straightforward correct pipeline; the performance pipeline
(tiling, packing, vectorization, threads) is layered on top of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

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


BUFFERIZE = (
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}"
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
    "func.func(math-expand-ops)",
    "convert-math-to-llvm",
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

    def expand(self) -> Sequence[PipelineElement]:
        return [
            CheckCpuLowerable(),
            "canonicalize",
            "cse",
            "func.func(linalg-fuse-elementwise-ops)",
            "eliminate-empty-tensors",
            BUFFERIZE,
            "buffer-results-to-out-params{hoist-static-allocs modify-public-functions}",
            "canonicalize",
            "buffer-deallocation-pipeline",
            *TO_LLVM,
        ]
