"""Rules of the named 2-D poolings `linalg.pooling_nhwc_sum` and
`linalg.pooling_nhwc_max` (jvp, vjp, batching).

    y[n, i, j, c] = init[n, i, j, c]
                    + sum_{p < KH, q < KW} x[n, i*s0 + p*d0, j*s1 + q*d1, c]

with `strides` s and `dilations` d; the second operand (KH, KW) only gives
the window's shape (its values are never read). The op is linear in x and
init, and every derivative is again this op, so every order of
differentiation and batching stays on it:

* jvp: the pooling of the input's tangent, accumulated onto the init's.
* vjp, input: each window's cotangent spread back over its elements. That is
  the cotangent dilated by the strides (a strided `tensor.insert_slice` into
  zeros), padded by the dilated window extent and pooled again at stride 1
  with the same dilations (a window of ones needs no flip, as a
  convolution's filter does); the init's cotangent is the cotangent.
* batching: the batch folds into N (a batched window shape operand is
  re-created unbatched: its values are never read).

Max pooling, y = max(init, max over the window), follows the select chain
of the composite (python/mlir_autodiff/convolution.py): each window's
derivative goes to its first NaN if it has one, else to its first maximal
element in row-major window order (jax's select-and-scatter at ties); the
init counts only where it is larger than the window (or NaN where the
window is not). Its rules are built from strided `tensor.extract_slice`s of
the window positions, selects and strided `tensor.insert_slice`s, whose own
rules give every higher order and batching:

* jvp: the chain of selects run on the values and, alongside, on the
  tangent's slices.
* vjp: one elementwise generic runs the chain per output element and
  writes each window position's share of the cotangent; each share is
  added into that position's strided slice of the input's cotangent.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import Builder, element_type, op_name
from .batching import BatchBuilder, defbatch, loop_index
from .linalg_conv import conv_params, strided_to_stride1
from .registry import defjvp_rule, defvjp
from .structured import (
    PAR,
    collapse,
    expand,
    extract_slice,
    identity_map,
    insert_slice,
    make_generic,
    projection,
    value_of,
)

POOL_SUM = "linalg.pooling_nhwc_sum"
POOL_MAX = "linalg.pooling_nhwc_max"


def _tensor(shape, like: ir.Value) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type(like.type))


def pool_sum(b: Builder, x: ir.Value, window: ir.Value, init: ir.Value, strides, dilations
             ) -> ir.Value:
    """`linalg.pooling_nhwc_sum` of x (N, H, W, C) over a `window` (KH, KW) into `init`."""
    with b.loc, b.ip:
        return value_of(linalg.pooling_nhwc_sum(x, window, outs=[init], strides=list(strides),
                                                dilations=list(dilations)))


def _pool_jvp(b, op, ts):
    x, window, init = list(op.operands)
    tx, _tw, tinit = ts
    if tx is None and tinit is None:
        return [None]
    acc = b.materialize(tinit, init)
    if tx is None:
        return [acc]
    s, d = conv_params(op)
    return [pool_sum(b, tx, window, acc, s, d)]


def spread(b: Builder, x: ir.Value, window: ir.Value, ct: ir.Value, s, d) -> ir.Value:
    """dx[n, h, v, c] = the sum of ct over the windows that read x[n, h, v, c]."""
    _, h, wd, _ = x.type.shape
    kh, kw = window.type.shape
    padded = strided_to_stride1(b, ct, h, wd, kh, kw, s, d)
    return pool_sum(b, padded, window, b.zeros_like(x), [1, 1], d)


def _pool_vjp(b, op, cts):
    x, window, _init = list(op.operands)
    (ct,) = cts
    ct = b.materialize(ct, op.results[0])
    s, d = conv_params(op)
    gx = spread(b, x, window, ct, s, d) if b.ad.is_active(x) else None
    return [gx, None, ct]


defjvp_rule(POOL_SUM, _pool_jvp)
defvjp(POOL_SUM, _pool_vjp)


# -- max pooling: the derivative at each window's first maximum --------------------------------


def _window_slices(b: Builder, x: ir.Value, op) -> list[ir.Value]:
    """Every window position's strided slice of x (N, OH, OW, C), row-major."""
    s, d = conv_params(op)
    kh, kw = op.operands[1].type.shape
    n, oh, ow, c = op.results[0].type.shape
    return [extract_slice(b, x, [0, p * d[0], q * d[1], 0], [n, oh, ow, c], [1, s[0], s[1], 1])
            for p in range(kh) for q in range(kw)]


def _keep(b: Builder, acc: ir.Value, other: ir.Value) -> ir.Value:
    """acc >= other, or acc is NaN: the earlier element stays selected (a NaN, once
    chosen, stays: it is the window's value, as `arith.maximumf` propagates it)."""
    return b.binary("arith.ori", b.cmpf("oge", acc, other), b.cmpf("une", acc, acc))


def _first_max(b: Builder, op, carried: list[ir.Value]) -> tuple[ir.Value, list[ir.Value]]:
    """The keep masks of the select chain over the window: (the window maximum,
    for each carried (N, OH, OW, C) list of per-position tensors, the element
    at the first maximal position)."""
    x = op.operands[0]
    vals = _window_slices(b, x, op)
    acc = vals[0]
    out = [c[0] for c in carried]
    for k in range(1, len(vals)):
        keep = _keep(b, acc, vals[k])
        acc = b.select(keep, acc, vals[k])
        out = [b.select(keep, o, c[k]) for o, c in zip(out, carried)]
    return acc, out


def _max_jvp(b, op, ts):
    x, _window, init = list(op.operands)
    tx, _tw, tinit = ts
    if tx is None and tinit is None:
        return [None]
    like = op.results[0]
    tx_slices = _window_slices(b, b.materialize(tx, x), op)
    m, (t,) = _first_max(b, op, [tx_slices])
    # the init is an element before the window (chosen only where it is larger)
    return [b.select(_keep(b, m, init), t, b.materialize(tinit, like))]


def _winner(bb: Builder, args: list[ir.Value], kk: int, et: ir.Type
            ) -> tuple[ir.Value, ir.Value, ir.Value]:
    """In a generic's body over the output reading the `kk` window positions'
    values, the cotangent and the init: (the cotangent the window's first
    maximum takes, that position as a number, the init's share)."""
    xs, c, i0 = args[:kk], args[kk], args[kk + 1]
    zero = bb.constant(et, 0.0)
    acc, idx = xs[0], bb.constant(et, 0.0)
    for k in range(1, kk):
        keep = _keep(bb, acc, xs[k])
        acc = bb.select(keep, acc, xs[k])
        idx = bb.select(keep, idx, bb.constant(et, float(k)))
    keep = _keep(bb, acc, i0)
    return bb.select(keep, c, zero), idx, bb.select(keep, zero, c)


def _max_vjp(b, op, cts):
    """One elementwise generic over the output runs the select chain per window
    and writes each position's share of the cotangent (and the init's); each
    share is then added into its strided slice of the input's cotangent."""
    x, window, init = list(op.operands)
    (ct,) = cts
    ct = b.materialize(ct, op.results[0])
    s, d = conv_params(op)
    kh, kw = window.type.shape
    vals = _window_slices(b, x, op)
    kk = len(vals)
    et = element_type(ct.type)
    rank = ct.type.rank

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        cw, idx, ginit = _winner(bb, args, kk, et)
        zero = bb.constant(et, 0.0)
        parts = [bb.select(bb.cmpf("oeq", idx, bb.constant(et, float(k))), cw, zero)
                 for k in range(kk)]
        return [*parts, ginit]

    if _tiles(x, op, s, d):
        return _max_vjp_tiles(b, op, vals, ct, init)
    gen = make_generic(b, [*vals, ct, init], [b.empty_like(ct) for _ in range(kk + 1)],
                       [identity_map(rank)] * (2 * kk + 3), [PAR] * rank, body)
    parts = list(gen.results)
    gx = None
    if b.ad.is_active(x):
        gx = b.zeros_like(x)
        for k in range(kk):
            p, q = divmod(k, kw)
            # added into the strided slice of position k only (in place)
            gx = b.accumulate(gx, insert_slice(b, parts[k], b.zeros_like(x),
                                               [0, p * d[0], q * d[1], 0], [1, s[0], s[1], 1]))
    return [gx, None, parts[kk]]


def _tiles(x: ir.Value, op, s, d) -> bool:
    """The windows tile the input: stride = window, no dilation (each input
    element is in at most one window: the common 2x2 pool at stride 2)."""
    kh, kw = op.operands[1].type.shape
    return list(s) == [kh, kw] and list(d) == [1, 1]


def _max_vjp_tiles(b: Builder, op, vals: list[ir.Value], ct: ir.Value, init: ir.Value
                   ) -> list[ir.Value | None]:
    """The max pool's vjp where the windows tile the input. One generic over
    the output finds each window's first maximum (its position k as a number)
    and the cotangent it takes (none where the init is larger); a second one,
    over the input viewed as (N, OH, KH, OW, KW, C), writes the cotangent at
    position k of each window and zero elsewhere: two passes over the data,
    no per-position copies."""
    x = op.operands[0]
    kh, kw = op.operands[1].type.shape
    kk = kh * kw
    n, oh, ow, c = ct.type.shape
    et = element_type(ct.type)

    gen = make_generic(b, [*vals, ct, init], [b.empty_like(ct) for _ in range(3)],
                       [identity_map(4)] * (kk + 5), [PAR] * 4,
                       lambda bb, args: list(_winner(bb, args, kk, et)))
    taken, where, ginit = gen.results
    if not b.ad.is_active(x):
        return [None, None, ginit]

    def scatter(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        cv, kv = args[0], args[1]
        p, q = loop_index(bb, 2), loop_index(bb, 4)
        pos = bb.create("arith.addi", [bb.create("arith.muli", [p, bb.index(kw)],
                                                 [p.type]).result, q], [p.type]).result
        i64 = ir.IntegerType.get_signless(64)
        posf = bb.cast("arith.sitofp", bb.cast("arith.index_cast", pos, i64), et)
        return [bb.select(bb.cmpf("oeq", kv, posf), cv, bb.constant(et, 0.0))]

    six = ir.RankedTensorType.get([n, oh, kh, ow, kw, c], et)
    outer = projection(6, [0, 1, 3, 5])
    gen6 = make_generic(b, [taken, where], [b.empty(six)], [outer, outer, identity_map(6)],
                        [PAR] * 6, scatter)
    _, h, w, _ = x.type.shape
    gx = collapse(b, gen6.results[0], [[0], [1, 2], [3, 4], [5]], [n, oh * kh, ow * kw, c])
    if (oh * kh, ow * kw) != (h, w):      # rows/columns past the last window: zero
        gx = insert_slice(b, gx, b.zeros_like(x), [0, 0, 0, 0], [1, 1, 1, 1])
    return [gx, None, ginit]


defjvp_rule(POOL_MAX, _max_jvp)
defvjp(POOL_MAX, _max_vjp)


def pool_max(b: Builder, x: ir.Value, window: ir.Value, init: ir.Value, strides, dilations
             ) -> ir.Value:
    """`linalg.pooling_nhwc_max` of x (N, H, W, C) over a `window` (KH, KW) into `init`."""
    with b.loc, b.ip:
        return value_of(linalg.pooling_nhwc_max(x, window, outs=[init], strides=list(strides),
                                                dilations=list(dilations)))


# -- batching ---------------------------------------------------------------------------------


def _pool_batch(b: BatchBuilder, op, vals, batched):
    x, window, init = vals
    bx, bwin, binit = batched
    s, d = conv_params(op)
    nb = b.size
    for v in vals:
        b.static(v.type, f"an operand of '{op_name(op)}'")
    if bwin:   # only the window's shape matters
        window = b.empty(ir.RankedTensorType.get(list(window.type.shape[1:]),
                                                 element_type(window.type)))
    if not bx and not binit:
        new = b.bt.clone_unbatched(op, b.ip, operands=[x, window, init])
        return [(r, False) for r in new.results]
    x = b.ensure_batched(x, bx)
    init = b.ensure_batched(init, binit)
    _, n, oh, ow, c = init.type.shape
    xs = collapse(b, x, [[0, 1], [2], [3], [4]], [nb * n, *x.type.shape[2:]])
    outs = collapse(b, init, [[0, 1], [2], [3], [4]], [nb * n, oh, ow, c])
    y = (pool_sum if op_name(op) == POOL_SUM else pool_max)(b, xs, window, outs, s, d)
    return [(expand(b, y, [[0, 1], [2], [3], [4]], [nb, n, oh, ow, c]), True)]


defbatch(POOL_SUM, _pool_batch)
defbatch(POOL_MAX, _pool_batch)
