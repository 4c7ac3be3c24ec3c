"""Batching rules (vmap): their registry, the builder they use, and the generic combinators.

A batching rule is `rule(b, op, vals, batched) -> [(value, batched), ...]`:
`vals` are the op's operands in the batched function, `batched[i]` tells
whether operand i carries the batch dimension. Inside a batched function
every batched value has the batch dimension at axis 0 (`--autodiff-vmap`
moves axes at the boundary), so a batched `f32` is a `tensor<Bxf32>` and a
batched `tensor<3x4xf32>` a `tensor<Bx3x4xf32>`; unbatched values keep their
type. A rule returns, per result, the new value and whether it is batched.

`b` is a `BatchBuilder` (an `ad_support.Builder` that also knows the batch
size) positioned where the batched code goes; `b.bt` is the pass's trace,
which region rules use to batch nested blocks (`batch_block`), to clone a
body lane by lane (`lane_body`), to analyse which values depend on batched
ones (`taint`) and to batch callees (`batched_callee`).

The rules themselves live beside each op's jvp and vjp rules, in
`rules/<dialect>.py`, registered with `defbatch(name, rule)` or one of the
combinators that keep most of them to one line:

* `defvectorized(*names)`: elementwise ops (arith/math on scalars or tensors).
  With every operand batched the op is re-created on the batched types; with
  a mix, it becomes a `linalg.generic` with one more parallel dimension in
  which unbatched operands simply do not index the batch dimension, so no
  broadcast is materialized.
* `defstructured(*names)`: linalg ops with indexing maps; the batch dimension
  becomes an extra parallel loop of the equivalent `linalg.generic`.

An op without a rule is refused: `--autodiff-vmap` reports "no batching rule
for '<op>'" at the op (there is no default rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mlir import ir
from mlir.dialects import linalg

from ...dialects.vocabulary import PHILOX, RANDOM
from ..ad_support import Builder, element_type, is_tensor, op_name
from .registry import load_all
from .structured import PAR, attrs_of, identity_map, make_generic, num_inputs, structure, value_of

Batched = tuple[ir.Value, bool]
BatchRule = Callable[[Any, ir.Operation, list[ir.Value], list[bool]], list[Batched]]

BATCH_RULES: dict[str, BatchRule] = {}

#: Ops sent to their rule even when no operand is batched (a draw differs per lane).
ALWAYS_RULE = (RANDOM, PHILOX)


def defbatch(name: str, rule: BatchRule) -> None:
    """Register the batching rule of `name`."""
    BATCH_RULES[name] = rule


def rule_for(name: str) -> BatchRule | None:
    """The batching rule of `name`; None: vmap refuses the op with a diagnostic."""
    load_all()
    return BATCH_RULES.get(name)


# ----------------------------------------------------------------------------
# The builder
# ----------------------------------------------------------------------------


def batch_type(t: ir.Type, size: int) -> ir.RankedTensorType:
    """`t` with a leading batch dimension of `size` (scalars become 1-d tensors)."""
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get([size, *t.shape], t.element_type)
    return ir.RankedTensorType.get([size], t)


def unbatch_type(t: ir.RankedTensorType, was_tensor: bool) -> ir.Type:
    if not was_tensor:
        return t.element_type
    return ir.RankedTensorType.get(list(t.shape)[1:], t.element_type)


def dim(i: int) -> ir.AffineExpr:
    return ir.AffineDimExpr.get(i)


def shift_map(m: ir.AffineMap, batched: bool) -> ir.AffineMap:
    """`m` over one more leading loop d0 (old d_i become d_{i+1}); batched maps index d0."""
    exprs = [e.shift_dims(m.n_dims, 1) for e in m.results]
    return ir.AffineMap.get(m.n_dims + 1, 0, ([dim(0)] if batched else []) + exprs)


class BatchBuilder(Builder):
    """A `Builder` that knows the batch size and the batching trace `bt`."""

    def __init__(self, ip: ir.InsertionPoint, loc: ir.Location, bt: Any,
                 op: ir.Operation | None = None):
        super().__init__(ip, loc, bt, op)
        self.bt = bt
        self.size: int = bt.size

    def btype(self, t: ir.Type) -> ir.RankedTensorType:
        return batch_type(t, self.size)

    def fail(self, op: Any, msg: str) -> Exception:
        return self.bt.fail(op, msg)

    def static(self, t: ir.Type, what: str) -> None:
        if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
            raise self.fail(self.op, f"cannot batch {what} of dynamic type {t} "
                                     "(batching needs static shapes)")

    def bcast(self, v: ir.Value) -> ir.Value:
        """An unbatched value repeated along a new leading batch dimension.

        Only used where a value must carry the batch dimension (a loop carry,
        a destination written per lane); empty/fill/splat constants are
        re-created batched instead of broadcast.
        """
        t = self.btype(v.type)
        # Dynamic dims (a while loop's tape in its backward code) keep their sizes.
        dyn = self.dims(v) if is_tensor(v.type) else []
        d = v.owner
        if not isinstance(d, ir.Block):
            name = op_name(d)
            if name == "tensor.empty":
                return self.empty(t, list(d.operands))
            if name == "linalg.fill":
                return self.fill(self.empty(t, dyn), d.operands[0])
            if name == "arith.constant":
                attr = d.attributes["value"]
                if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
                    splat = ir.DenseElementsAttr.get_splat(t, attr.get_splat_value())
                    return self.create("arith.constant", [], [t], {"value": splat}).result
        if not is_tensor(v.type):
            return self.fill(self.empty(t), v)
        with self.loc, self.ip:
            return value_of(linalg.broadcast(v, outs=[self.empty(t, dyn)], dimensions=[0]))

    def ensure_batched(self, v: ir.Value, batched: bool) -> ir.Value:
        """`v` if it is batched, else `bcast(v)`."""
        return v if batched else self.bcast(v)


def loop_index(b: Builder, d: int) -> ir.Value:
    """`linalg.index d` at `b` (inside a linalg body; d = 0 is the lane)."""
    return b.create("linalg.index", [], [ir.IndexType.get()],
                    {"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)}).result


def _orig_rank(v: ir.Value, batched: bool) -> int:
    return v.type.rank - (1 if batched else 0) if is_tensor(v.type) else 0


# ----------------------------------------------------------------------------
# Elementwise ops: arith, math (scalars at function level, or tensors)
# ----------------------------------------------------------------------------


def elementwise(b: BatchBuilder, name: str, vals: Sequence[ir.Value], batched: Sequence[bool],
                result_types: Sequence[ir.Type], attrs: dict[str, ir.Attribute]
                ) -> list[Batched]:
    """Batch an elementwise op given its operands and its unbatched result types."""
    ranks = [_orig_rank(v, bb) for v, bb in zip(vals, batched)]
    n = max([0, *ranks, *[t.rank if is_tensor(t) else 0 for t in result_types]])
    out_types = [b.btype(t) for t in result_types]
    if all(batched) and all(r == n for r in ranks):
        new = b.create(name, list(vals), out_types, attrs)
        return [(r, True) for r in new.results]
    maps = []
    for r, bb in zip(ranks, batched):
        if r not in (0, n):
            raise b.fail(b.op, f"cannot batch '{name}' with operands of ranks {ranks}")
        exprs = ([dim(0)] if bb else []) + ([dim(1 + i) for i in range(n)] if r == n else [])
        maps.append(ir.AffineMap.get(n + 1, 0, exprs))
    for t in out_types:
        b.static(t, f"'{name}'")
    inits = [b.empty(t) for t in out_types]
    maps += [identity_map(n + 1)] * len(inits)
    scalar_types = [element_type(t) for t in result_types]

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        return list(bb.create(name, args[: len(vals)], scalar_types, attrs).results)

    gen = make_generic(b, list(vals), inits, maps, [PAR] * (n + 1), body)
    return [(r, True) for r in gen.results]


def _elementwise_rule(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                      batched: list[bool]) -> list[Batched]:
    return elementwise(b, op_name(op), vals, batched, [r.type for r in op.results], attrs_of(op))


def defvectorized(*names: str) -> None:
    """Register elementwise ops (ElementwiseMappable: scalars or same-shape tensors)."""
    for name in names:
        BATCH_RULES[name] = _elementwise_rule


# ----------------------------------------------------------------------------
# Structured ops: every linalg op batches as a generic with one more parallel loop
# ----------------------------------------------------------------------------


def _reads_outputs(op: ir.Operation, n_in: int) -> bool:
    block = op.regions[0].blocks[0]
    return any(len(list(a.uses)) for a in list(block.arguments)[n_in:])


def structured_rule(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                    batched: list[bool]) -> list[Batched]:
    """Any linalg op -> linalg.generic with a leading parallel batch loop.

    Unbatched inputs keep their maps (they do not index the batch loop), so
    nothing is broadcast; outputs are written per lane, so they are batched
    (an unbatched destination is re-created batched by `bcast`).
    """
    n_in = num_inputs(op)
    ins, outs = vals[:n_in], vals[n_in:]
    maps, iters = structure(op)
    if not any(batched[:n_in]) and not b.bt.captures_batched(op) \
            and not _reads_outputs(op, n_in):
        # Only a destination is batched, and its values are overwritten: keep the op unbatched.
        fresh = [b.empty(unbatch_type(v.type, True)) for v in outs]
        new = b.bt.clone_unbatched(op, b.ip, operands=ins + fresh)
        return [(r, False) for r in new.results]
    new_outs = [b.ensure_batched(v, bb) for v, bb in zip(outs, batched[n_in:])]
    new_maps = [shift_map(m, bb) for m, bb in zip(maps[:n_in], batched[:n_in])]
    new_maps += [shift_map(m, True) for m in maps[n_in:]]
    gen = make_generic(b, ins, new_outs, new_maps, [PAR, *iters])
    block = gen.regions[0].blocks[0]
    b.bt.lane_body(op.regions[0].blocks[0], block, list(block.arguments), shift_index=True)
    return [(r, True) for r in gen.results]


def defstructured(*names: str) -> None:
    """Register linalg ops batched by `structured_rule`."""
    for name in names:
        BATCH_RULES[name] = structured_rule
