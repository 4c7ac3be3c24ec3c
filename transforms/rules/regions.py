"""Helpers of the rules for ops with regions (scf loops and if, tensor.generate).

Moving and cloning blocks (`move_ops`, `clone_ops`), re-differentiating
recomputed ops in a nested reverse pass (`marker_op`, `sweep_recomputed`),
and the tapes of reverse-mode loops: a tensor with one row per iteration
(`tape_type`, `tape_write`, `tape_read`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mlir import ir
from mlir.dialects import scf

from ..ad_support import Builder, clone_remapped, is_float

DYN = ir.ShapedType.get_dynamic_size()


def move_ops(old: ir.Block, new: ir.Block, arg_map: Sequence[ir.Value]) -> None:
    """Move every op of `old` to the end of `new`, its arguments replaced by `arg_map`."""
    for a, n in zip(old.arguments, arg_map):
        a.replace_all_uses_with(n)
    ip = ir.InsertionPoint(new)
    for o in list(old.operations):
        ip.insert(o.operation.detach_from_parent())


def clone_ops(ops: Sequence[Any], ip: ir.InsertionPoint, vmap: dict) -> list[ir.Operation]:
    """Clone `ops` at `ip`, remapping operands (also inside nested regions) by `vmap`."""
    return [clone_remapped(o, ip, vmap) for o in ops]


def index_op(b: Builder, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.create(name, [x, y], [ir.IndexType.get()]).result


def tape_type(t: ir.Type, trip: int = DYN) -> ir.RankedTensorType:
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get([trip, *t.shape], t.element_type)
    return ir.RankedTensorType.get([trip], t)


def tape_write(b: Builder, tape: ir.Value, v: ir.Value, i: ir.Value) -> ir.Value:
    t = v.type
    if not isinstance(t, ir.RankedTensorType):
        return b.create("tensor.insert", [v, tape, i], [tape.type]).result
    r = t.rank
    return b.create("tensor.insert_slice", [v, tape, i], [tape.type], {
        "static_offsets": ir.DenseI64ArrayAttr.get([DYN] + [0] * r),
        "static_sizes": ir.DenseI64ArrayAttr.get([1, *t.shape]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0, 0]),
    }).result


def tape_read(b: Builder, tape: ir.Value, t: ir.Type, i: ir.Value) -> ir.Value:
    if not isinstance(t, ir.RankedTensorType):
        return b.create("tensor.extract", [tape, i], [t]).result
    r = t.rank
    return b.create("tensor.extract_slice", [tape, i], [t], {
        "static_offsets": ir.DenseI64ArrayAttr.get([DYN] + [0] * r),
        "static_sizes": ir.DenseI64ArrayAttr.get([1, *t.shape]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0, 0]),
    }).result


# -- recomputation in a nested reverse pass ------------------------------------


def ops_between(block: ir.Block, first: ir.Operation, last: ir.Operation) -> list:
    """The ops of `block` strictly between `first` and `last`."""
    out, inside = [], False
    for o in block.operations:
        if o.operation == last:
            break
        if inside:
            out.append(o.operation)
        if o.operation == first:
            inside = True
    return out


def marker_op(b: Builder) -> ir.Operation:
    """A throwaway op delimiting the recomputed ops that follow it."""
    idx = ir.IndexType.get()
    return b.create("arith.constant", [], [idx], {"value": ir.IntegerAttr.get(idx, 0)})


def holder_op(b: Builder, vals: Sequence[ir.Value]) -> ir.Operation:
    """A throwaway op using `vals`: it tracks them if augmentation replaces their op."""
    return b.create("builtin.unrealized_conversion_cast", list(vals), [])


def sweep_recomputed(ad: Any, b: Builder, marker: ir.Operation, outs: Sequence[ir.Value],
                     out_cts: Sequence[ir.Value | None], seeds: set,
                     init_cts: dict | None = None) -> Any:
    """Differentiate the ops cloned at `b.ip` after `marker` in a nested reverse pass.

    `outs` are the recomputed values receiving `out_cts`; `seeds` the values
    the cloned ops may depend on actively; `init_cts` cotangents the nested
    pass starts from (a loop's accumulators of captured values: contributions
    are added into them as they come, see Builder.accumulate). Returns the
    nested pass (read cotangents from its `ct`). Erases `marker`.
    """
    block = b.ip.block
    holder = holder_op(b, outs)
    sub = ad.sub(set(seeds))
    sub.ct.update(init_cts or {})
    clones = ops_between(block, marker, holder)
    sub.propagate(clones)
    sub.prepare_forward(clones)
    clones = ops_between(block, marker, holder)
    sub.propagate(clones)
    outs = list(holder.operands)  # augmentation may have replaced their ops
    holder.erase()
    marker.erase()
    sb = Builder(b.ip, b.loc, sub)
    for y, c in zip(outs, out_cts):
        if c is not None and is_float(y.type):
            sub.add_ct(sb, y, c)
    sub.sweep(clones, b.ip)
    return sub


# -- region terminators and loop carries ------------------------------------------


def scf_yield(vals: list[ir.Value], loc: ir.Location, ip: ir.InsertionPoint) -> None:
    scf.YieldOp(vals, loc=loc, ip=ip)


def terminator(block: ir.Block) -> ir.Operation:
    """The last op of `block`."""
    return list(block.operations)[-1].operation

def fixpoint(flags: list[bool], step: Callable[[list[bool]], list[bool]]) -> list[bool]:
    """Iterate `flags |= step(flags)` until nothing changes (carries only become batched)."""
    while True:
        nxt = step(flags)
        assert len(nxt) == len(flags), "fixpoint: a step changed the number of carries"
        new = [f or g for f, g in zip(flags, nxt)]
        if new == flags:
            return flags
        flags = new
