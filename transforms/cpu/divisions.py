"""`ReciprocalOfBroadcastDivisors`: divide by a row's value through one reciprocal per row."""

from __future__ import annotations

import dataclasses

from mlir import ir

from ..passes import Pass
from .classify import loop_ranges, plain_maps

# -- divisions by broadcast values ----------------------------------------------------------------

#: A divisor broadcast along the innermost loop is inverted once and the
#: division becomes a multiplication when that loop has at least this many
#: iterations (one vector of f32 lanes on AVX-512).
RECIPROCAL_MIN_REUSE = 16


def _broadcast_divisor_inputs(op: ir.Operation) -> list[int]:
    """Inputs of generic `op` used in its body only as divisors, broadcast along its last loop."""
    if op.name != "linalg.generic" or not plain_maps(op):
        return []
    ranges = loop_ranges(op)
    if not ranges or ranges[-1] < RECIPROCAL_MIN_REUSE:
        return []
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    last = len(ranges) - 1
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - len(op.results)
    found = []
    for i in range(n_in):
        t = op.operands[i].type
        if not (isinstance(t, ir.RankedTensorType) and t.has_static_shape
                and str(t.element_type) in ("f32", "f64")):
            continue
        if any(isinstance(e, ir.AffineDimExpr) and e.position == last for e in maps[i].results):
            continue
        uses = [(u.owner.operation, u.operand_number) for u in block.arguments[i].uses]
        if uses and all(o.name == "arith.divf" and n == 1 for o, n in uses):
            found.append(i)
    return found


@dataclasses.dataclass(frozen=True)
class ReciprocalOfBroadcastDivisors(Pass):
    """x / s[row] -> x * (1 / s[row]): one division per row, not per element.

    A vector division costs a full pass of the divider (AVX-512 vdivps: one
    per ~10 cycles for 16 lanes), so dividing every element of a row by its
    sum (softmax) or norm (layer norm) is bound by it: softmax's last op ran
    at 10 cycles per 16 floats while the multiply runs at memory speed. The
    reciprocal is a generic over the divisor's shape before the op (which
    joins a row group with it). The result can differ from the division by
    one rounding: at most 1 ulp more error, as numpy's and XLA's softmax
    kernels, which multiply by the reciprocal too, allow themselves.
    """

    name = "autodiff-reciprocal-of-broadcast-divisors"
    summary = "Divide by a broadcast value as a multiplication by its reciprocal"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, linalg, tensor

        found: list[tuple[ir.Operation, list[int]]] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name.startswith("linalg."):
                inputs = _broadcast_divisor_inputs(op)
                if inputs:
                    found.append((op, inputs))
                return ir.WalkResult.SKIP
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        with module.context:
            for op, inputs in found:
                block = op.regions[0].blocks[0]
                for i in inputs:
                    v = op.operands[i]
                    t = v.type
                    with ir.InsertionPoint(op), op.location:
                        rank = t.rank
                        ident = ir.AffineMap.get_identity(rank)
                        gen = linalg.GenericOp_(
                            [v], [tensor.empty(list(t.shape), t.element_type)], [ident, ident],
                            [linalg.IteratorType.parallel] * rank)
                        with ir.InsertionPoint(gen.regions[0].blocks[0]):
                            x, _ = gen.regions[0].blocks[0].arguments
                            one = arith.constant(t.element_type, 1.0)
                            linalg.YieldOp([arith.divf(one, x)])
                    op.operands[i] = gen.results[0]
                    arg = block.arguments[i]
                    for use in list(arg.uses):
                        div = use.owner.operation
                        with ir.InsertionPoint(div), div.location:
                            mul = arith.mulf(div.operands[0], arg)
                        div.results[0].replace_all_uses_with(mul)
                        div.erase()
