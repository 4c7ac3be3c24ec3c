"""The LLVM end of the CPU pipeline: vector lowering (`LOWER_VECTORS`) and `TO_LLVM`.

Also the rewrites some math ops need first because this MLIR build has no
(accurate) LLVM lowering for them: `ExpandExpm1`, `ExpandFloatClassTests`,
and `FlattenNdVectorOps` for ops that LLVM lowers on 1-d vectors only. The
GPU pipeline reuses `TO_LLVM` and `ExpandFloatClassTests`.
"""

from __future__ import annotations

import dataclasses
import math as pymath

from mlir import ir

from ..ad_support import post_order_ops
from ..passes import Pass

#: After bufferization: lower the vector ops the schedules produced. n-D
#: transfers are unrolled to 1-D ones; contractions become outer products
#: (FMAs); reductions reassociate (a vector of partial sums, as numpy's
#: pairwise summation also reorders).
#: Ops a schedule may vectorize (every arith op, `VECTORIZABLE_BODY_OPS`)
#: whose LLVM lowering (convert-arith-to-llvm in MLIR 22) takes scalars and
#: 1-d vectors only: on an n-d vector they were left behind as
#: `builtin.unrealized_conversion_cast`s that LLVM translation rejects.
#: Vectorized Philox code (lower_rng.py) multiplies with `mului_extended`
#: on a 512 x 32 draw's vector<1x16xi32> tiles. test_cpu_to_llvm.py lowers
#: every vectorizable op on n-d vectors.
ONE_D_VECTOR_OPS = frozenset({
    "arith.mului_extended", "arith.mulsi_extended", "arith.addui_extended",
})


def _vector_rank(t: ir.Type) -> int:
    return ir.VectorType(t).rank if isinstance(t, ir.VectorType) else 0


@dataclasses.dataclass(frozen=True)
class FlattenNdVectorOps(Pass):
    """Compute `ONE_D_VECTOR_OPS` on n-d vectors as one 1-d vector op.

    Each n-d vector operand is `vector.shape_cast` to 1-d (the same elements
    in row-major order), the op is rebuilt on the 1-d types and each n-d
    result is cast back; the op is elementwise, so this computes the same.
    Runs before convert-vector-to-llvm, which lowers the casts.
    """

    name = "autodiff-flatten-nd-vector-ops"
    summary = "Rewrite elementwise ops without an n-d vector LLVM lowering onto 1-d vectors"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import vector

        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in ONE_D_VECTOR_OPS and any(
                    _vector_rank(v.type) > 1 for v in [*op.operands, *op.results]):
                found.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for op in found:
            def flat(t: ir.Type) -> ir.Type:
                if _vector_rank(t) < 2:
                    return t
                vt = ir.VectorType(t)
                return ir.VectorType.get([pymath.prod(vt.shape)], vt.element_type)

            with ir.InsertionPoint(op), op.location:
                operands = [vector.shape_cast(flat(v.type), v) if _vector_rank(v.type) > 1
                            else v for v in op.operands]
                attrs = {a.name: a.attr for a in op.attributes}
                new = ir.Operation.create(op.name, results=[flat(r.type) for r in op.results],
                                          operands=operands, attributes=attrs)
                for old, res in zip(op.results, new.results):
                    if _vector_rank(old.type) > 1:
                        res = vector.shape_cast(old.type, res)
                    old.replace_all_uses_with(res)
            op.erase()


LOWER_VECTORS: tuple[str | Pass, ...] = (
    "canonicalize",
    "convert-vector-to-scf{full-unroll=true}",
    FlattenNdVectorOps(),
    ("convert-vector-to-llvm{reassociate-fp-reductions vector-contract-lowering=outerproduct "
     "vector-transpose-lowering=shuffle1d}"),
)


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

        for op in post_order_ops(module):
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


@dataclasses.dataclass(frozen=True)
class ExpandFloatClassTests(Pass):
    """Rewrite `math.isinf` and `math.isnormal` as comparisons of |x|.

    Why: convert-math-to-llvm lowers isnan and isfinite only; the other two
    would stop the lowering. isinf(x) = |x| == inf; isnormal(x) =
    smallest normal <= |x| < inf (ordered compares: false for NaN).
    """

    name = "autodiff-expand-float-class-tests"
    summary = "Expand math.isinf and math.isnormal into arith comparisons"

    _SMALLEST_NORMAL = {"f16": 2.0 ** -14, "bf16": 2.0 ** -126, "f32": 2.0 ** -126,
                        "f64": 2.0 ** -1022}

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, math

        for op in post_order_ops(module):
            if op.name not in ("math.isinf", "math.isnormal"):
                continue
            x = op.operands[0]
            t = x.type
            et = t.element_type if isinstance(t, ir.ShapedType) else t
            tiny = self._SMALLEST_NORMAL.get(str(et))
            if tiny is None:
                continue

            def const(v: float, t=t, et=et) -> ir.Value:
                attr = ir.FloatAttr.get(et, v)
                if isinstance(t, ir.ShapedType):
                    attr = ir.DenseElementsAttr.get_splat(t, attr)
                return arith.ConstantOp(t, attr).result

            with ir.InsertionPoint(op), op.location:
                a = math.absf(x)
                inf = const(float("inf"))
                if op.name == "math.isinf":
                    out = arith.cmpf(arith.CmpFPredicate.OEQ, a, inf)
                else:
                    out = arith.andi(arith.cmpf(arith.CmpFPredicate.OGE, a, const(tiny)),
                                     arith.cmpf(arith.CmpFPredicate.OLT, a, inf))
            op.results[0].replace_all_uses_with(out)
            op.erase()

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
    # math.clampf (upstream's expansion) and isinf/isnormal have no LLVM lowering.
    "func.func(math-expand-ops{ops=clampf})",
    ExpandFloatClassTests(),
    # bfloat16: math and arithmetic compute in f32, rounded per op, and the
    # conversions become integer ops, so neither the JIT nor an exported library
    # needs the C runtime's __truncsfbf2 (missing before GCC 13). float16 math
    # stays f16 for LLVM, which widens it the same way with F16C or libgcc (and
    # extending it here would leave `#arith.fastmath` attributes on llvm.fpext,
    # which mlir-translate rejects).
    "func.func(math-extend-to-supported-types{target-type=f32 extra-types=f16})",
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32})",
    "convert-math-to-llvm{approximate-log1p=false}",
    "convert-math-to-libm",
    "arith-expand{include-bf16=true}",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "reconcile-unrealized-casts",
)
