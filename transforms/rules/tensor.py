"""Derivative rules of the `tensor` dialect.

Data movement is linear: the JVP applies the same op to the tangents, the VJP
is the adjoint movement (extract <-> insert, extract_slice <-> insert_slice,
expand_shape <-> collapse_shape, concat -> slices, pad -> slice). `empty` and
`dim` need no rule: ops without float operands or results are inactive.
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from ..ad_support import Builder, element_type
from .linalg import sum_all
from .registry import defjvp_rule, defvjp


def _attrs(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {k: op.attributes[k] for k in op.attributes}


def _same_op(b: Builder, op: ir.Operation, operands, result_types=None,
             attrs: dict[str, ir.Attribute] | None = None) -> ir.Value:
    """`op` re-created with other operands (and optionally result types/attributes)."""
    types = result_types or [r.type for r in op.results]
    return b.create(op.operation.name, operands, types, attrs or _attrs(op)).result


def _segments(op: ir.Operation) -> list[int]:
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


# -- extract / insert --------------------------------------------------------


def _extract_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    return [_same_op(b, op, [ts[0], *list(op.operands)[1:]])]


def _extract_vjp(b, op, cts):
    src, *idx = list(op.operands)
    z = b.zeros_like(src)
    return [b.create("tensor.insert", [cts[0], z, *idx], [src.type]).result] + [None] * len(idx)


def _insert_jvp(b, op, ts):
    s, dest, *idx = list(op.operands)
    if ts[0] is None and ts[1] is None:
        return [None]
    return [_same_op(b, op, [b.materialize(ts[0], s), b.materialize(ts[1], dest), *idx])]


def _insert_vjp(b, op, cts):
    s, dest, *idx = list(op.operands)
    ct = cts[0]
    g_s = b.create("tensor.extract", [ct, *idx], [s.type]).result
    g_d = b.create("tensor.insert", [b.zeros_like(s), ct, *idx], [dest.type]).result
    return [g_s, g_d] + [None] * len(idx)


defjvp_rule("tensor.extract", _extract_jvp)
defvjp("tensor.extract", _extract_vjp)
defjvp_rule("tensor.insert", _insert_jvp)
defvjp("tensor.insert", _insert_vjp)


# -- splat / from_elements -----------------------------------------------------


def _splat_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    return [_same_op(b, op, [ts[0], *list(op.operands)[1:]])]


def _splat_vjp(b, op, cts):
    return [sum_all(b, cts[0])] + [None] * (len(op.operands) - 1)


def _from_elements_jvp(b, op, ts):
    xs = list(op.operands)
    if all(t is None for t in ts):
        return [None]
    return [_same_op(b, op, [b.materialize(t, x) for t, x in zip(ts, xs)])]


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


defjvp_rule("tensor.splat", _splat_jvp)
defvjp("tensor.splat", _splat_vjp)
defjvp_rule("tensor.from_elements", _from_elements_jvp)
defvjp("tensor.from_elements", _from_elements_vjp)


# -- slices --------------------------------------------------------------------


def _extract_slice_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    return [_same_op(b, op, [ts[0], *list(op.operands)[1:]])]


def _extract_slice_vjp(b, op, cts):
    src, *rest = list(op.operands)
    attrs = _attrs(op)
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1, 1] + _segments(op)[1:])
    g = b.create("tensor.insert_slice", [cts[0], b.zeros_like(src), *rest], [src.type],
                 attrs).result
    return [g] + [None] * len(rest)


def _insert_slice_jvp(b, op, ts):
    src, dest, *rest = list(op.operands)
    if ts[0] is None and ts[1] is None:
        return [None]
    return [_same_op(b, op, [b.materialize(ts[0], src), b.materialize(ts[1], dest), *rest])]


def _insert_slice_vjp(b, op, cts):
    src, dest, *rest = list(op.operands)
    ct = cts[0]
    attrs = _attrs(op)
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1] + _segments(op)[2:])
    g_src = None
    if b.ad.is_active(src):
        g_src = b.create("tensor.extract_slice", [ct, *rest], [src.type], attrs).result
    g_dest = None
    if b.ad.is_active(dest):
        g_dest = _same_op(b, op, [b.zeros_like(src), ct, *rest])
    return [g_src, g_dest] + [None] * len(rest)


defjvp_rule("tensor.extract_slice", _extract_slice_jvp)
defvjp("tensor.extract_slice", _extract_slice_vjp)
defjvp_rule("tensor.insert_slice", _insert_slice_jvp)
defvjp("tensor.insert_slice", _insert_slice_vjp)


# -- reshapes and casts -----------------------------------------------------------


def _first_operand_linear_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    return [_same_op(b, op, [ts[0], *list(op.operands)[1:]])]


def _static(b: Builder, op: ir.Operation, t: ir.Type) -> None:
    if not t.has_static_shape:
        raise b.ad.fail(op, f"reverse mode of '{op.operation.name}' needs static shapes")


def _expand_vjp(b, op, cts):
    src = op.operands[0]
    _static(b, op, src.type)
    g = b.create("tensor.collapse_shape", [cts[0]], [src.type],
                 {"reassociation": op.attributes["reassociation"]}).result
    return [g] + [None] * (len(op.operands) - 1)


def _collapse_vjp(b, op, cts):
    src = op.operands[0]
    _static(b, op, src.type)
    g = b.create("tensor.expand_shape", [cts[0]], [src.type], {
        "reassociation": op.attributes["reassociation"],
        "static_output_shape": ir.DenseI64ArrayAttr.get(list(src.type.shape)),
    }).result
    return [g]


def _reshape_vjp(b, op, cts):
    src, shape = list(op.operands)
    _static(b, op, src.type)
    st = shape.type
    dims = list(src.type.shape)
    stype = ir.RankedTensorType.get([len(dims)], st.element_type)
    attr = ir.DenseElementsAttr.get(np.array(dims, dtype=np.int64), type=stype)
    new_shape = b.create("arith.constant", [], [stype], {"value": attr}).result
    g = b.create("tensor.reshape", [cts[0], new_shape], [src.type]).result
    return [g, None]


def _cast_vjp(b, op, cts):
    src = op.operands[0]
    return [b.create("tensor.cast", [cts[0]], [src.type]).result]


for _name in ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape", "tensor.cast"):
    defjvp_rule(_name, _first_operand_linear_jvp)
defvjp("tensor.expand_shape", _expand_vjp)
defvjp("tensor.collapse_shape", _collapse_vjp)
defvjp("tensor.reshape", _reshape_vjp)
defvjp("tensor.cast", _cast_vjp)


# -- concat and pad ---------------------------------------------------------------


def _concat_jvp(b, op, ts):
    xs = list(op.operands)
    if all(t is None for t in ts):
        return [None]
    return [_same_op(b, op, [b.materialize(t, x) for t, x in zip(ts, xs)])]


def _concat_vjp(b, op, cts):
    dim = ir.IntegerAttr(op.attributes["dim"]).value
    out_t = op.results[0].type
    _static(b, op, out_t)
    off = 0
    grads = []
    for x in op.operands:
        xt = x.type
        offsets = [0] * xt.rank
        offsets[dim] = off
        off += xt.shape[dim]
        if not b.ad.is_active(x):
            grads.append(None)
            continue
        grads.append(b.create("tensor.extract_slice", [cts[0]], [xt], {
            "static_offsets": ir.DenseI64ArrayAttr.get(offsets),
            "static_sizes": ir.DenseI64ArrayAttr.get(list(xt.shape)),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * xt.rank),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
        }).result)
    return grads


defjvp_rule("tensor.concat", _concat_jvp)
defvjp("tensor.concat", _concat_vjp)


def _pad_value(op: ir.Operation) -> ir.Value:
    return list(op.regions[0].blocks[0].operations)[-1].operands[0]


def _pad_jvp(b, op, ts):
    if b.ad.is_active(_pad_value(op)):
        raise b.ad.fail(op, "an active padding value of 'tensor.pad' is not supported")
    if ts[0] is None:
        return [None]
    new = op.operation.clone(ip=b.ip)
    new.operands[0] = ts[0]
    yield_op = list(new.regions[0].blocks[0].operations)[-1]
    et = element_type(op.results[0].type)
    zero = Builder(ir.InsertionPoint(yield_op), b.loc).constant(et, 0.0)
    yield_op.operands[0] = zero
    return [new.results[0]]


def _pad_vjp(b, op, cts):
    if b.ad.is_active(_pad_value(op)):
        raise b.ad.fail(op, "an active padding value of 'tensor.pad' is not supported")
    src = op.operands[0]
    if len(op.operands) != 1:
        raise b.ad.fail(op, "reverse mode of 'tensor.pad' needs static low/high padding")
    _static(b, op, src.type)
    low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
    g = b.create("tensor.extract_slice", [cts[0]], [src.type], {
        "static_offsets": ir.DenseI64ArrayAttr.get(low),
        "static_sizes": ir.DenseI64ArrayAttr.get(list(src.type.shape)),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * src.type.rank),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
    }).result
    return [g]


defjvp_rule("tensor.pad", _pad_jvp)
defvjp("tensor.pad", _pad_vjp)


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
    raise b.ad.fail(op, "reverse mode of 'tensor.generate' is not implemented (forward mode is)")


defjvp_rule("tensor.generate", _generate_jvp)
defvjp("tensor.generate", _generate_vjp)
