"""Rules of the `tensor` dialect (jvp, vjp and batching side by side).

Data movement is linear: the JVP applies the same op to the tangents, the VJP
is the adjoint movement (extract <-> insert, extract_slice <-> insert_slice,
expand_shape <-> collapse_shape, concat -> slices, pad -> slice; an active
padding value gets the sum over the padding), with dynamic sizes too: those a
backward rule needs are taken in the forward code (tensor.dim before the op), so
only indices, not dynamically shaped tensors, become residuals. The reverse
mode of `generate` is a loop nest that recomputes the body per index. `empty`
and `dim` need no derivative rule: ops without float operands or results are
inactive; they have batching rules.

Batching: a batched tensor gains a leading dimension, so slices, reshapes and
concatenations shift their dimensions by one; an extract at batched indices
is a gather (one `linalg.generic` over the lanes), an insert at batched
indices a loop over the lanes, one element write each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import linalg, scf

from ..ad_support import Builder, captured_values, element_type, is_inside
from .batching import BatchBuilder, Batched, defbatch, loop_index
from .regions import clone_ops, marker_op, sweep_recomputed
from .registry import defjvp_rule, deflinear, defvjp
from .structured import (
    PAR,
    attrs_of,
    identity_map,
    make_generic,
    projection,
    reassociation,
    sum_all,
    value_of,
)


def _same_op(b: Builder, op: ir.Operation, operands, result_types=None,
             attrs: dict[str, ir.Attribute] | None = None) -> ir.Value:
    """`op` re-created with other operands (and optionally result types/attributes)."""
    types = result_types or [r.type for r in op.results]
    return b.create(op.operation.name, operands, types, attrs or attrs_of(op)).result


def _segments(op: ir.Operation) -> list[int]:
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


# -- extract / insert --------------------------------------------------------


def _static_array(op: ir.Operation, key: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[key]))


def _extract_vjp(b, op, cts):
    src, *idx = list(op.operands)
    z = b.zeros_like(src)
    return [b.create("tensor.insert", [cts[0], z, *idx], [src.type]).result] + [None] * len(idx)


def _insert_vjp(b, op, cts):
    s, dest, *idx = list(op.operands)
    ct = cts[0]
    g_s = b.create("tensor.extract", [ct, *idx], [s.type]).result
    g_d = b.create("tensor.insert", [b.zeros_like(s), ct, *idx], [dest.type]).result
    return [g_s, g_d] + [None] * len(idx)


def _extract_batch(b, op, vals, batched):
    """extract from a batched tensor at unbatched indices is a slice; otherwise a gather."""
    src, *idx = vals
    et = op.results[0].type
    t = b.btype(et)
    if batched[0] and not any(batched[1:]):
        rank = src.type.rank - 1
        dyn = ir.ShapedType.get_dynamic_size()
        new = b.create("tensor.extract_slice", [src, *idx], [t], {
            "static_offsets": ir.DenseI64ArrayAttr.get([0] + [dyn] * rank),
            "static_sizes": ir.DenseI64ArrayAttr.get([b.size] + [1] * rank),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * (rank + 1)),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, rank, 0, 0]),
        })
        return [(new.result, True)]
    # Gather: one lane per batch element; batched indices are inputs of the generic.
    ins = [v for v, bb in zip(idx, batched[1:]) if bb]

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        it = iter(args)
        lane = [loop_index(bb, 0)] if batched[0] else []
        ix = [next(it) if flag else v for v, flag in zip(idx, batched[1:])]
        return [bb.create("tensor.extract", [src, *lane, *ix], [et]).result]

    gen = make_generic(b, ins, [b.empty(t)], [identity_map(1)] * (len(ins) + 1), [PAR], body)
    return [(gen.result, True)]


def _insert_batch(b, op, vals, batched):
    """insert at unbatched indices is an insert_slice; at batched indices one
    insert per lane (an `scf.for` over the lanes)."""
    s, dest, *idx = vals
    dest_b = b.ensure_batched(dest, batched[1])
    rank = dest_b.type.rank - 1
    if not any(batched[2:]):
        src = b.ensure_batched(s, batched[0])
        dyn = ir.ShapedType.get_dynamic_size()
        new = b.create("tensor.insert_slice", [src, dest_b, *idx], [dest_b.type], {
            "static_offsets": ir.DenseI64ArrayAttr.get([0] + [dyn] * rank),
            "static_sizes": ir.DenseI64ArrayAttr.get([b.size] + [1] * rank),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * (rank + 1)),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, rank, 0, 0]),
        })
        return [(new.result, True)]
    # Scatter: one insert per lane, a loop over the lanes (each lane writes its
    # own row, so the order does not matter): B element writes, not a pass
    # over the whole batched destination per insert.
    loop = scf.ForOp(b.index(0), b.index(b.size), b.index(1), [dest_b], loc=b.loc, ip=b.ip)
    lb = Builder(ir.InsertionPoint(loop.body), b.loc)
    lane = loop.induction_variable
    sv = lb.create("tensor.extract", [s, lane], [op.operands[0].type]).result \
        if batched[0] else s
    ix = [lb.create("tensor.extract", [v, lane], [ir.IndexType.get()]).result if flag else v
          for v, flag in zip(idx, batched[2:])]
    acc = loop.inner_iter_args[0]
    new = lb.create("tensor.insert", [sv, acc, lane, *ix], [acc.type]).result
    scf.YieldOp([new], loc=b.loc, ip=ir.InsertionPoint(loop.body))
    return [(loop.results[0], True)]


deflinear("tensor.extract", 0)
defvjp("tensor.extract", _extract_vjp)
defbatch("tensor.extract", _extract_batch)
deflinear("tensor.insert", 0, 1)
defvjp("tensor.insert", _insert_vjp)
defbatch("tensor.insert", _insert_batch)


# -- splat / from_elements -----------------------------------------------------


def _splat_vjp(b, op, cts):
    return [sum_all(b, cts[0])] + [None] * (len(op.operands) - 1)


def _from_elements_vjp(b, op, cts):
    t = op.results[0].type
    shape = list(t.shape)
    out = []
    for k, x in enumerate(op.operands):
        if not b.ad.is_active(x):
            out.append(None)
            continue
        idx, rest = [], k
        for d in reversed(shape):
            idx.append(rest % d)
            rest //= d
        idx = [b.index(i) for i in reversed(idx)]
        out.append(b.create("tensor.extract", [cts[0], *idx], [x.type]).result)
    return out


def _splat_batch(b, op, vals, batched):
    """A batched scalar splat: broadcast the lane values along the tensor's dims."""
    if any(batched[1:]):
        raise b.fail(op, "cannot batch 'tensor.splat' with batched dynamic sizes")
    t = b.btype(op.results[0].type)
    b.static(t, "'tensor.splat'")
    with b.loc, b.ip:
        return [(value_of(linalg.broadcast(vals[0], outs=[b.empty(t)],
                                     dimensions=list(range(1, t.rank)))), True)]


def _from_elements_batch(b, op, vals, batched):
    """Stack the (batched) elements as columns, then reshape to the tensor's shape."""
    et = element_type(op.results[0].type)
    cols = []
    col_t = ir.RankedTensorType.get([b.size, 1], et)
    for v, bb in zip(vals, batched):
        lane = b.ensure_batched(v, bb)
        cols.append(b.create("tensor.expand_shape", [lane], [col_t], {
            "reassociation": reassociation([[0, 1]]),
            "static_output_shape": ir.DenseI64ArrayAttr.get([b.size, 1])}).result)
    flat_t = ir.RankedTensorType.get([b.size, len(cols)], et)
    flat = cols[0] if len(cols) == 1 else b.create(
        "tensor.concat", cols, [flat_t],
        {"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}).result
    return [(reshape_batched(b, flat, op.results[0].type), True)]


deflinear("tensor.splat", 0)
defvjp("tensor.splat", _splat_vjp)
defbatch("tensor.splat", _splat_batch)
deflinear("tensor.from_elements")
defvjp("tensor.from_elements", _from_elements_vjp)
defbatch("tensor.from_elements", _from_elements_batch)


# -- slices --------------------------------------------------------------------


def _extract_slice_vjp(b, op, cts):
    src, *rest = list(op.operands)
    attrs = attrs_of(op)
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1, 1] + _segments(op)[1:])
    g = b.create("tensor.insert_slice", [cts[0], b.zeros_like(src), *rest], [src.type],
                 attrs).result
    return [g] + [None] * len(rest)


def _insert_slice_vjp(b, op, cts):
    src, dest, *rest = list(op.operands)
    ct = cts[0]
    attrs = attrs_of(op)
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1] + _segments(op)[2:])
    g_src = None
    if b.ad.is_active(src):
        g_src = b.create("tensor.extract_slice", [ct, *rest], [src.type], attrs).result
    g_dest = None
    if b.ad.is_active(dest):
        g_dest = _same_op(b, op, [b.zeros_like(src), ct, *rest])
    return [g_src, g_dest] + [None] * len(rest)


def _batch_slice_attrs(op: ir.Operation, size: int) -> dict[str, ir.Attribute]:
    attrs = attrs_of(op)
    attrs["static_offsets"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_offsets"))
    attrs["static_sizes"] = ir.DenseI64ArrayAttr.get([size] + _static_array(op, "static_sizes"))
    attrs["static_strides"] = ir.DenseI64ArrayAttr.get([1] + _static_array(op,
                                                                           "static_strides"))
    return attrs


def kept_dims(sizes: Sequence[int], shape: Sequence[int]) -> list[int] | None:
    """The slice dimensions a rank-reducing slice of `sizes` keeps in a result of `shape`.

    Matched greedily from the front, as MLIR infers the dropped dimensions: a size
    equal to the next result dimension is kept, any other must be 1 and is dropped.
    Which of several unit dimensions counts as kept does not change the slice's
    elements (a unit dimension is read at its offset only). None: no such match.
    """
    kept, r = [], 0
    for d, n in enumerate(sizes):
        if r < len(shape) and n == shape[r]:
            kept.append(d)
            r += 1
        elif n != 1:
            return None
    return kept if r == len(shape) else None


def _slice_gather(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                  batched: list[bool]) -> list[Batched]:
    """extract_slice at batched offsets: a gather, one generic over (lane, result element).

    Element (l, i...) reads `src[(l,) offset_l + i * stride]`; sizes and strides
    must be static. A rank-reducing slice reads its dropped (unit) dimensions at
    their offsets (`kept_dims`).
    """
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[2] or seg[3]:
        raise b.fail(op, "cannot batch 'tensor.extract_slice' with batched offsets and "
                         "dynamic sizes or strides")
    dyn = ir.ShapedType.get_dynamic_size()
    offsets = _static_array(op, "static_offsets")
    sizes = _static_array(op, "static_sizes")
    strides = _static_array(op, "static_strides")
    t = op.results[0].type
    kept = kept_dims(sizes, list(t.shape))
    if kept is None:
        raise b.fail(op, f"cannot batch 'tensor.extract_slice': its result type {t} is not "
                         f"its sizes {sizes} with unit dimensions dropped")
    off_vals = list(zip(vals[1:1 + seg[1]], batched[1:1 + seg[1]]))
    ins = [v for v, f in off_vals if f]
    n = t.rank + 1
    idx_t = ir.IndexType.get()

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        it_in, it_off = iter(args), iter(off_vals)
        index = [loop_index(bb, 0)] if batched[0] else []
        for d, (o, st) in enumerate(zip(offsets, strides)):
            if o == dyn:
                v, f = next(it_off)
                base = next(it_in) if f else v
            else:
                base = bb.index(o)
            if d in kept:
                i = loop_index(bb, 1 + kept.index(d))
                if st != 1:
                    i = bb.create("arith.muli", [i, bb.index(st)], [idx_t]).result
                base = bb.create("arith.addi", [base, i], [idx_t]).result
            index.append(base)
        return [bb.create("tensor.extract", [vals[0], *index], [t.element_type]).result]

    rt = b.btype(t)
    maps = [projection(n, [0])] * len(ins) + [identity_map(n)]
    gen = make_generic(b, ins, [b.empty(rt)], maps, [PAR] * n, body)
    return [(gen.result, True)]


def _extract_slice_batch(b, op, vals, batched):
    if any(batched[1:]):
        return _slice_gather(b, op, vals, batched)
    new = b.create("tensor.extract_slice", vals, [b.btype(op.results[0].type)],
                   _batch_slice_attrs(op, b.size))
    return [(new.result, True)]


def _insert_slice_scatter(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                          batched: list[bool]) -> list[Batched]:
    """insert_slice at batched offsets: one insert_slice per lane (an `scf.for` over
    the lanes), lane l writing its source at its offsets into row l of the batched
    destination (rows are disjoint, so the order does not matter)."""
    seg = _segments(op)
    n_off = seg[2]
    if any(batched[2 + n_off:]):
        raise b.fail(op, "cannot batch 'tensor.insert_slice' with batched sizes or strides "
                         "(each lane's slice would have another shape)")
    src_t = op.operands[0].type
    b.static(src_t, "the source of 'tensor.insert_slice' at batched offsets")
    dest = b.ensure_batched(vals[1], batched[1])
    dyn = ir.ShapedType.get_dynamic_size()
    idx_t = ir.IndexType.get()
    loop = scf.ForOp(b.index(0), b.index(b.size), b.index(1), [dest], loc=b.loc, ip=b.ip)
    lb = Builder(ir.InsertionPoint(loop.body), b.loc)
    lane = loop.induction_variable
    src = vals[0]
    if batched[0]:
        r = src_t.rank
        src = lb.create("tensor.extract_slice", [src, lane], [src_t], {
            "static_offsets": ir.DenseI64ArrayAttr.get([dyn] + [0] * r),
            "static_sizes": ir.DenseI64ArrayAttr.get([1, *src_t.shape]),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0, 0]),
        }).result
    offs = [lb.create("tensor.extract", [v, lane], [idx_t]).result if f else v
            for v, f in zip(vals[2:2 + n_off], batched[2:2 + n_off])]
    acc = loop.inner_iter_args[0]
    attrs = _batch_slice_attrs(op, 1)
    attrs["static_offsets"] = ir.DenseI64ArrayAttr.get([dyn] + _static_array(op,
                                                                              "static_offsets"))
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1, 1, 1 + n_off, *seg[3:]])
    new = lb.create("tensor.insert_slice", [src, acc, lane, *offs, *vals[2 + n_off:]],
                    [acc.type], attrs).result
    scf.YieldOp([new], loc=b.loc, ip=ir.InsertionPoint(loop.body))
    return [(loop.results[0], True)]


def _insert_slice_batch(b, op, vals, batched):
    if any(batched[2:]):
        return _insert_slice_scatter(b, op, vals, batched)
    src, dest = b.ensure_batched(vals[0], batched[0]), b.ensure_batched(vals[1], batched[1])
    new = b.create("tensor.insert_slice", [src, dest, *vals[2:]], [dest.type],
                   _batch_slice_attrs(op, b.size))
    return [(new.result, True)]


deflinear("tensor.extract_slice", 0)
defvjp("tensor.extract_slice", _extract_slice_vjp)
defbatch("tensor.extract_slice", _extract_slice_batch)
deflinear("tensor.insert_slice", 0, 1)
defvjp("tensor.insert_slice", _insert_slice_vjp)
defbatch("tensor.insert_slice", _insert_slice_batch)


# -- reshapes and casts -----------------------------------------------------------


DYN = ir.ShapedType.get_dynamic_size()


def _size(b: Builder, v: ir.Value, i: int, op: ir.Operation | None = None) -> ir.Value:
    """Dimension `i` of tensor `v` as an index (a constant when static).

    With `op` (the primal op; `v` a forward value), the tensor.dim is emitted in
    the forward code just before `op`: the backward code then only keeps an
    index alive, so no dynamically shaped tensor becomes a residual (the CPU
    calling convention needs static result shapes, even of @f_fwd)."""
    if not v.type.is_dynamic_dim(i):
        return b.index(v.type.shape[i])
    fb = b.ad.forward_builder(op) if op is not None else b
    return fb.create("tensor.dim", [v, fb.index(i)], [ir.IndexType.get()]).result


def _slice(b: Builder, src: ir.Value, t: ir.RankedTensorType, offsets: list,
           sizes: list) -> ir.Value:
    """tensor.extract_slice of `src` (unit strides); offsets/sizes: ints or index values."""
    static_off = [o if isinstance(o, int) else DYN for o in offsets]
    static_size = [z if isinstance(z, int) else DYN for z in sizes]
    dyn_off = [o for o in offsets if not isinstance(o, int)]
    dyn_size = [z for z in sizes if not isinstance(z, int)]
    return b.create("tensor.extract_slice", [src, *dyn_off, *dyn_size], [t], {
        "static_offsets": ir.DenseI64ArrayAttr.get(static_off),
        "static_sizes": ir.DenseI64ArrayAttr.get(static_size),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * t.rank),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(dyn_off), len(dyn_size), 0]),
    }).result


def _sizes_of(b: Builder, v: ir.Value, op: ir.Operation) -> list:
    """Forward value `v`'s sizes: ints where static, tensor.dim values (taken in
    the forward code before `op`) where dynamic."""
    t = v.type
    return [t.shape[i] if not t.is_dynamic_dim(i) else _size(b, v, i, op)
            for i in range(t.rank)]


def _expand_vjp(b, op, cts):
    src = op.operands[0]
    g = b.create("tensor.collapse_shape", [cts[0]], [src.type],
                 {"reassociation": op.attributes["reassociation"]}).result
    return [g] + [None] * (len(op.operands) - 1)


def _collapse_vjp(b, op, cts):
    src = op.operands[0]
    st = src.type
    dyn = [_size(b, src, i, op) for i in range(st.rank) if st.is_dynamic_dim(i)]
    g = b.create("tensor.expand_shape", [cts[0], *dyn], [st], {
        "reassociation": op.attributes["reassociation"],
        "static_output_shape": ir.DenseI64ArrayAttr.get(
            [DYN if st.is_dynamic_dim(i) else st.shape[i] for i in range(st.rank)]),
    }).result
    return [g]


def _reshape_vjp(b, op, cts):
    src, shape = list(op.operands)
    st = shape.type
    et = st.element_type
    stype = ir.RankedTensorType.get([src.type.rank], et)
    if src.type.has_static_shape:
        dims = list(src.type.shape)
        attr = ir.DenseElementsAttr.get(np.array(dims, dtype=np.int64), type=stype)
        new_shape = b.create("arith.constant", [], [stype], {"value": attr}).result
    else:  # the source's sizes at run time, in the shape operand's element type
        sizes = [_size(b, src, i, op) for i in range(src.type.rank)]
        if not isinstance(et, ir.IndexType):
            sizes = [b.create("arith.index_cast", [z], [et]).result for z in sizes]
        new_shape = b.create("tensor.from_elements", sizes, [stype]).result
    g = b.create("tensor.reshape", [cts[0], new_shape], [src.type]).result
    return [g, None]


def _cast_vjp(b, op, cts):
    src = op.operands[0]
    return [b.create("tensor.cast", [cts[0]], [src.type]).result]


def _batch_reassoc(op: ir.Operation, expanded_rank: int) -> ir.Attribute:
    """The reassociation with the batch dimension as its own leading group.

    Reshaping to or from a 0-d tensor has no groups: the unit dimensions then
    join the batch dimension's group.
    """
    groups = [[ir.IntegerAttr(i).value + 1 for i in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(op.attributes["reassociation"])]
    return reassociation([[0], *groups] if groups else [list(range(expanded_rank + 1))])


def _expand_shape_batch(b, op, vals, batched):
    attrs = attrs_of(op)
    attrs["reassociation"] = _batch_reassoc(op, op.results[0].type.rank)
    attrs["static_output_shape"] = ir.DenseI64ArrayAttr.get(
        [b.size] + _static_array(op, "static_output_shape"))
    new = b.create("tensor.expand_shape", vals, [b.btype(op.results[0].type)], attrs)
    return [(new.result, True)]


def _collapse_shape_batch(b, op, vals, batched):
    attrs = attrs_of(op)
    attrs["reassociation"] = _batch_reassoc(op, op.operands[0].type.rank)
    new = b.create("tensor.collapse_shape", vals, [b.btype(op.results[0].type)], attrs)
    return [(new.result, True)]


def reshape_batched(b: BatchBuilder, x: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """Reshape the per-lane shape of batched `x` to `out` (static), via collapse + expand."""
    t = x.type
    b.static(t, "a reshape")
    r = t.rank - 1
    if r != 1:
        flat_t = ir.RankedTensorType.get([b.size, max(1, _prod(t.shape[1:]))], t.element_type)
        if r == 0:
            x = b.create("tensor.expand_shape", [x], [flat_t], {
                "reassociation": reassociation([[0, 1]]),
                "static_output_shape": ir.DenseI64ArrayAttr.get(list(flat_t.shape))}).result
        else:
            x = b.create("tensor.collapse_shape", [x], [flat_t], {
                "reassociation": reassociation([[0], list(range(1, r + 1))])}).result
    bt = b.btype(out)
    if out.rank == 1:
        return x
    if out.rank == 0:
        return b.create("tensor.collapse_shape", [x], [bt],
                        {"reassociation": reassociation([[0, 1]])}).result
    return b.create("tensor.expand_shape", [x], [bt], {
        "reassociation": reassociation([[0], list(range(1, out.rank + 1))]),
        "static_output_shape": ir.DenseI64ArrayAttr.get(list(bt.shape))}).result


def _prod(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _reshape_batch(b, op, vals, batched):
    """The per-lane shape is the static result type's (a shape operand that differs
    per lane from it would be undefined behaviour), so a batched shape is not read."""
    out = op.results[0].type
    if batched[1] and not out.has_static_shape:
        raise b.fail(op, "cannot batch 'tensor.reshape' with a batched shape operand and "
                         f"the dynamic result type {out}")
    b.static(out, "'tensor.reshape'")
    if not batched[0]:
        st = op.operands[1].type
        shape = b.create("arith.constant", [], [st], {"value": ir.DenseElementsAttr.get(
            np.array(list(out.shape), np.int64), type=st.element_type)}).result
        return [(b.create("tensor.reshape", [vals[0], shape], [out]).result, False)]
    return [(reshape_batched(b, vals[0], out), True)]


def _cast_batch(b, op, vals, batched):
    return [(b.create("tensor.cast", vals, [b.btype(op.results[0].type)]).result, True)]


for _name in ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape", "tensor.cast"):
    deflinear(_name, 0)
defvjp("tensor.expand_shape", _expand_vjp)
defvjp("tensor.collapse_shape", _collapse_vjp)
defvjp("tensor.reshape", _reshape_vjp)
defvjp("tensor.cast", _cast_vjp)
defbatch("tensor.expand_shape", _expand_shape_batch)
defbatch("tensor.collapse_shape", _collapse_shape_batch)
defbatch("tensor.reshape", _reshape_batch)
defbatch("tensor.cast", _cast_batch)


# -- concat and pad ---------------------------------------------------------------


def _concat_vjp(b, op, cts):
    """Each operand's cotangent is its slice of the result's (offsets along `dim`
    add up the operands' sizes, at run time when they are dynamic)."""
    dim = ir.IntegerAttr(op.attributes["dim"]).value
    off: int | ir.Value = 0
    grads = []
    for x in op.operands:
        xt = x.type
        offsets: list = [0] * xt.rank
        offsets[dim] = off
        if b.ad.is_active(x):
            grads.append(_slice(b, cts[0], xt, offsets, _sizes_of(b, x, op)))
        else:
            grads.append(None)
        if isinstance(off, int) and not xt.is_dynamic_dim(dim):
            off += xt.shape[dim]
        else:
            o = b.index(off) if isinstance(off, int) else off
            off = b.create("arith.addi", [o, _size(b, x, dim, op)],
                           [ir.IndexType.get()]).result
    return grads


def _concat_batch(b, op, vals, batched):
    attrs = attrs_of(op)
    d = ir.IntegerAttr(op.attributes["dim"]).value
    attrs["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d + 1)
    ins = [b.ensure_batched(v, bb) for v, bb in zip(vals, batched)]
    return [(b.create("tensor.concat", ins, [b.btype(op.results[0].type)], attrs).result,
             True)]


deflinear("tensor.concat")
defvjp("tensor.concat", _concat_vjp)
defbatch("tensor.concat", _concat_batch)


def _pad_value(op: ir.Operation) -> ir.Value:
    return list(op.regions[0].blocks[0].operations)[-1].operands[0]


def _pad_value_outside(b: Builder, op: ir.Operation) -> ir.Value:
    """The padding value, which an active one must be defined above the pad."""
    pv = _pad_value(op)
    owner = pv.owner
    inside = (owner == op.regions[0].blocks[0]) if isinstance(owner, ir.Block) else \
        is_inside(owner.operation, op.operation)
    if inside and b.ad.is_active(pv):
        raise b.ad.fail(op, "an active padding value of 'tensor.pad' must be defined "
                            "outside its region")
    return pv


def _pad_jvp(b, op, ts):
    pv = _pad_value_outside(b, op)
    tpv = b.ad.tangent(pv) if b.ad.is_active(pv) else None
    if ts[0] is None and tpv is None:
        return [None]
    new = op.operation.clone(ip=b.ip)
    new.operands[0] = b.materialize(ts[0], op.operands[0])
    yield_op = list(new.regions[0].blocks[0].operations)[-1]
    if tpv is None:
        et = element_type(op.results[0].type)
        tpv = Builder(ir.InsertionPoint(yield_op), b.loc).constant(et, 0.0)
    yield_op.operands[0] = tpv
    return [new.results[0]]


def _pad_vjp(b, op, cts):
    """The source's cotangent is the interior slice; an active padding value's is
    the sum over the padding (the whole sum minus the interior's)."""
    pv = _pad_value_outside(b, op)
    src = op.operands[0]
    static_low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
    n_low = _segments(op)[1]
    dyn_low = iter(list(op.operands)[1: 1 + n_low])
    low = [next(dyn_low) if v == DYN else v for v in static_low]
    g = _slice(b, cts[0], src.type, low, _sizes_of(b, src, op))
    if b.ad.is_active(pv):
        # Not an operand (the region yields it): its cotangent goes in directly.
        b.ad.add_ct(b, pv, b.subf(sum_all(b, cts[0]), sum_all(b, g)))
    return [g if b.ad.is_active(src) else None] + [None] * (len(op.operands) - 1)


def _pad_batch(b, op, vals, batched):
    """The pad of the batched source, one more (unpadded) leading dimension; a batched
    padding value is read at the lane, the region's first index argument."""
    if any(batched[1:]):
        raise b.fail(op, "cannot batch 'tensor.pad' with batched low/high sizes")
    vals = [b.ensure_batched(vals[0], batched[0]), *vals[1:]]
    attrs = attrs_of(op)
    attrs["static_low"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_low"))
    attrs["static_high"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_high"))
    new = ir.Operation.create("tensor.pad", results=[b.btype(op.results[0].type)],
                              operands=vals, attributes=attrs, regions=1, loc=b.loc, ip=b.ip)
    old = op.regions[0].blocks[0]
    block = new.regions[0].blocks.append(*([ir.IndexType.get()] * (len(old.arguments) + 1)))
    b.bt.lane_body(old, block, list(block.arguments)[1:], shift_index=False,
                   lane_arg=block.arguments[0])
    return [(new.result, True)]


defjvp_rule("tensor.pad", _pad_jvp)
defvjp("tensor.pad", _pad_vjp)
defbatch("tensor.pad", _pad_batch)


# -- generate ------------------------------------------------------------------


def _generate_jvp(b, op, ts):
    """A second tensor.generate whose body yields the body's tangent."""
    new = op.operation.clone(ip=b.ip)
    block = new.regions[0].blocks[0]
    b.ad.run_block(block)
    y = list(block.operations)[-1]
    v = y.operands[0]
    t = b.ad.tangent(v)
    if t is None:
        t = Builder(ir.InsertionPoint(y), b.loc).zeros_like(v)
    y.operands[0] = t
    return [new.results[0]]


def _generate_vjp(b, op, cts):
    """A loop nest over the result's indices: each point recomputes the body at
    that index and sweeps it with the cotangent's element there, accumulating
    the cotangents of the active values the body captures (iter_args).

    A captured tensor the body only reads with `tensor.extract` (a gather)
    gets each element's cotangent added at its index, not a whole zero tensor
    per point."""
    ad = b.ad
    ct = cts[0]
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    caps = [v for v in captured_values(op) if ad.is_active(v)]
    # Only extracts directly in the body (not nested deeper) are rewritten.
    gathered = [v for v in caps if isinstance(v.type, ir.RankedTensorType) and
                all(u.owner.operation.name == "tensor.extract" and u.operand_number == 0
                    and u.owner.operation.block == block
                    for u in v.uses if is_inside(u.owner.operation, op.operation))]
    t = ct.type
    sizes = [b.index(d) if not t.is_dynamic_dim(i) else
             b.create("tensor.dim", [ct, b.index(i)], [ir.IndexType.get()]).result
             for i, d in enumerate(t.shape)]
    acc = [b.zeros_like(v) for v in caps]
    zero, one = b.index(0), b.index(1)
    loops, ivs = [], []
    ip = b.ip
    for size in sizes:
        loop = scf.ForOp(zero, size, one, acc, loc=b.loc, ip=ip)
        loops.append(loop)
        ivs.append(loop.induction_variable)
        acc = list(loop.inner_iter_args)
        ip = ir.InsertionPoint(loop.body)
    bb = Builder(ip, b.loc, ad)
    g = bb.create("tensor.extract", [ct, *ivs], [element_type(t)]).result
    marker = marker_op(bb)
    vmap = dict(zip(list(block.arguments), ivs))
    clone_ops(body[:-1], ip, vmap)
    out = vmap.get(body[-1].operands[0], body[-1].operands[0])
    # Each element a gathered tensor's extracts read is a seed of its own.
    reads = [o for o in bb.ip.block.operations if o.operation.name == "tensor.extract"
             and o.operands[0] in gathered]
    seeds = {v for v in caps if v not in gathered} | {o.results[0] for o in reads}
    sub = sweep_recomputed(ad, bb, marker, [out], [g], seeds)
    sb = Builder(ip, b.loc, sub)
    new_acc = []
    for a, v in zip(acc, caps):
        if v not in gathered:
            new_acc.append(sb.add_any(a, sub.ct.get(v)))
            continue
        for o in reads:
            c = sub.ct.get(o.results[0])
            if o.operands[0] == v and c is not None:
                idx = list(o.operands)[1:]
                old = sb.create("tensor.extract", [a, *idx], [c.type]).result
                a = sb.create("tensor.insert", [sb.addf(old, c), a, *idx], [a.type]).result
        new_acc.append(a)
    if loops:
        scf.YieldOp(new_acc, loc=b.loc, ip=ip)
    for outer, inner in zip(reversed(loops[:-1]), reversed(loops[1:])):
        scf.YieldOp(list(inner.results), loc=b.loc, ip=ir.InsertionPoint(outer.body))
    res = list(loops[0].results) if loops else new_acc
    for v, gv in zip(caps, res):
        ad.add_ct(b, v, gv)
    return [None] * len(op.operands)


def _generate_batch(b, op, vals, batched):
    """tensor.generate capturing batched values -> a generic with the body per lane."""
    if any(batched):
        raise b.fail(op, "cannot batch 'tensor.generate' with batched dynamic sizes")
    t = b.btype(op.results[0].type)
    b.static(t, "'tensor.generate'")
    n = t.rank
    gen = make_generic(b, [], [b.empty(t)], [identity_map(n)], [PAR] * n)
    block = gen.regions[0].blocks[0]
    idx = [_index_in(b, block, d + 1) for d in range(n - 1)]
    b.bt.lane_body(op.regions[0].blocks[0], block, idx, shift_index=False,
                   terminator="linalg.yield")
    return [(gen.result, True)]


def _index_in(b: BatchBuilder, block: ir.Block, d: int) -> ir.Value:
    """`linalg.index d` appended to `block` (a generic's body under construction)."""
    return loop_index(Builder(ir.InsertionPoint(block), b.loc), d)


defjvp_rule("tensor.generate", _generate_jvp)
defvjp("tensor.generate", _generate_vjp)
defbatch("tensor.generate", _generate_batch)


# -- empty and dim (batching only) ------------------------------------------------


def _empty_batch(b, op, vals, batched):
    """Only reached with a batched size: each lane would need its own shape."""
    raise b.fail(op, "cannot batch 'tensor.empty' whose dynamic size differs per lane "
                     "(e.g. a loop's trip count under vmap); batching needs one shape "
                     "for every lane")

def _dim_batch(b, op, vals, batched):
    """tensor.dim of a batched tensor: the same size, one dimension further."""
    if batched[1]:
        raise b.fail(op, "cannot batch 'tensor.dim' with a batched index")
    one = b.index(1)
    d = b.create("arith.addi", [vals[1], one], [ir.IndexType.get()]).result
    return [(b.create("tensor.dim", [vals[0], d], [ir.IndexType.get()]).result, False)]


defbatch("tensor.empty", _empty_batch)
defbatch("tensor.dim", _dim_batch)
