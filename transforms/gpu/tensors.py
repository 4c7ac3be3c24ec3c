"""Tensor-level rewrites before bufferization: splat constants as fills, reductions innermost."""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, linalg
from mlir.dialects import tensor as tensor_d

from ..ad_support import walk_ops
from ..bufferize import ContextPass as _Step
from .support import on_host

# -- step 0b: splat constants are fills -----------------------------------------


@dataclasses.dataclass(frozen=True)
class SplatsToFills(_Step):
    """`arith.constant dense<c> : tensor<...>` becomes `linalg.fill` of a `tensor.empty`.

    Bufferized, a splat constant is a host `memref.global` the device needs a
    copy of (and a second copy when it is an accumulator written in place, as
    the zero-initialised outputs derivative code is full of); a fill is a
    parallel loop that fuses into its consumer's kernel.
    """

    name = "autodiff-gpu-splats-to-fills"
    summary = "Rewrite splat tensor constants into linalg.fill"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name != "arith.constant" or not on_host(op):
                continue
            attr = op.attributes["value"]
            t = op.results[0].type
            if not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat
                    and isinstance(t, ir.RankedTensorType) and t.has_static_shape):
                continue
            # One fill per use, right before it: after bufferization the fill's
            # loop is adjacent to its consumer's and fuses with it.
            for use in list(op.results[0].uses):
                owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
                with ir.InsertionPoint(owner), op.location:
                    scalar = arith.ConstantOp(t.element_type, attr.get_splat_value()).result
                    empty = tensor_d.EmptyOp(t.shape, t.element_type).result
                    fill = linalg.fill(scalar, outs=[empty])
                owner.operands[use.operand_number] = fill
            op.erase()


# -- step 0c: reduction dimensions innermost --------------------------------------


@dataclasses.dataclass(frozen=True)
class ReductionsInnermost(_Step):
    """Permute each linalg.generic's iteration space: parallel dims first.

    `convert-linalg-to-parallel-loops` nests loops in iterator order, so a
    reduction over the leading dimension (a bias gradient summing over the
    batch) would become a host loop launching one kernel per step. With the
    reduction dimensions innermost it is one kernel whose threads each run a
    sequential loop. The order of each reduction's own steps is unchanged.
    """

    name = "autodiff-gpu-reductions-innermost"
    summary = "Interchange linalg.generic loops so reduction dims are innermost"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name != "linalg.generic":
                continue
            iters = list(op.attributes["iterator_types"])
            parallel = ["parallel" in str(a) for a in iters]
            n = len(iters)
            order = [k for k in range(n) if parallel[k]] + [k for k in range(n) if not parallel[k]]
            if order == list(range(n)):
                continue
            new_pos = {old: new for new, old in enumerate(order)}
            perm = ir.AffineMap.get(n, 0, [ir.AffineExpr.get_dim(new_pos[k]) for k in range(n)])
            maps = []
            for attr in op.attributes["indexing_maps"]:
                m = ir.AffineMapAttr(attr).value
                maps.append(ir.AffineMapAttr.get(
                    ir.AffineMap.get(n, m.n_symbols, [e.compose(perm) for e in m.results])))
            op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
            op.attributes["iterator_types"] = ir.ArrayAttr.get([iters[k] for k in order])
            for inner in list(walk_ops(op))[1:]:
                if inner.name == "linalg.index":
                    old = ir.IntegerAttr(inner.attributes["dim"]).value
                    inner.attributes["dim"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), new_pos[old])

