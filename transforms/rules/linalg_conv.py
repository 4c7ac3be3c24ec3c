"""Rules of the named 2-D convolution `linalg.conv_2d_nhwc_hwcf` (jvp, vjp, batching).

    y[n, i, j, f] = init[n, i, j, f]
                    + sum_{p, q, c} x[n, i*s0 + p*d0, j*s1 + q*d1, c] * w[p, q, c, f]

with `strides` s and `dilations` d. Every derivative is again this op, so
every order of differentiation and batching stays on it (and on its CPU
schedule):

* jvp: the op is bilinear: conv(tx, w) + conv(x, tw), accumulated through
  the tangent of the init.
* vjp, filter: a convolution of the input with the cotangent, the roles of
  batch and features exchanged (x as (C, H, W, N), ct as the filter (OH, OW,
  N, F)), strides and dilations swapped; its output rows past the kernel
  (input rows no window reaches) are cut off.
* vjp, input: the cotangent dilated by the strides (a strided
  `tensor.insert_slice` into zeros) and padded by the dilated kernel extent,
  convolved with the flipped filter, its features exchanged (a
  `linalg.generic` reading w[KH-1-p, KW-1-q, c, f] as (p, q, f, c)) at the
  kernel dilation.
* batching: a batched input folds the batch into N, a batched filter into
  F; both batched run one convolution per lane in an `scf.for`.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg, scf

from ..ad_support import Builder, element_type
from .batching import BatchBuilder, defbatch
from .registry import defjvp_rule, defvjp
from .structured import (
    PAR,
    collapse,
    expand,
    extract_slice,
    identity_map,
    insert_slice,
    make_generic,
    sum_to,
    transpose,
    value_of,
)

CONV2D = "linalg.conv_2d_nhwc_hwcf"


def conv_params(op: ir.Operation) -> tuple[list[int], list[int]]:
    """(strides, dilations) of a named convolution (1 where absent)."""
    out = []
    for key in ("strides", "dilations"):
        if key in op.attributes:
            out.append([int(v) for v in ir.DenseIntElementsAttr(op.attributes[key])])
        else:
            out.append([1, 1])
    return out[0], out[1]


def conv2d(b: Builder, x: ir.Value, w: ir.Value, init: ir.Value, strides, dilations
           ) -> ir.Value:
    """`linalg.conv_2d_nhwc_hwcf` of x (N, H, W, C) and w (KH, KW, C, F) into `init`."""
    with b.loc, b.ip:
        return value_of(linalg.conv_2d_nhwc_hwcf(x, w, outs=[init], strides=list(strides),
                                                 dilations=list(dilations)))


def _tensor(shape, like: ir.Value) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type(like.type))


def _bilinear_jvp(conv):
    """The jvp rule of a convolution op built by `conv(b, x, w, init, s, d)`:
    conv(tx, w) + conv(x, tw), accumulated onto the init's tangent."""
    def rule(b, op, ts):
        x, w, init = list(op.operands)
        tx, tw, tinit = ts
        if tx is None and tw is None and tinit is None:
            return [None]
        s, d = conv_params(op)
        acc = b.materialize(tinit, init)
        if tx is not None:
            acc = conv(b, tx, w, acc, s, d)
        if tw is not None:
            acc = conv(b, x, tw, acc, s, d)
        return [acc]
    return rule


def _filter_ct(b: Builder, x: ir.Value, w: ir.Value, ct: ir.Value, s, d) -> ir.Value:
    """dw[p, q, c, f] = sum_{n, i, j} x[n, i*s0 + p*d0, j*s1 + q*d1, c] * ct[n, i, j, f]."""
    n, h, wd, c = x.type.shape
    kh, kw, _, f = w.type.shape
    oh, ow = ct.type.shape[1:3]
    xt = transpose(b, x, [3, 1, 2, 0])                   # (C, H, W, N)
    ctt = transpose(b, ct, [1, 2, 0, 3])                 # (OH, OW, N, F): the filter
    rh = (h - (oh - 1) * s[0] - 1) // d[0] + 1           # >= kh: rows no window reaches
    rw = (wd - (ow - 1) * s[1] - 1) // d[1] + 1
    out = conv2d(b, xt, ctt, b.constant(_tensor([c, rh, rw, f], x), 0.0), d, s)
    if (rh, rw) != (kh, kw):
        out = extract_slice(b, out, [0, 0, 0, 0], [c, kh, kw, f], [1, 1, 1, 1])
    return transpose(b, out, [1, 2, 0, 3])               # (KH, KW, C, F)


def strided_to_stride1(b: Builder, ct: ir.Value, h: int, wd: int, kh: int, kw: int, s, d
                       ) -> ir.Value:
    """A window op's cotangent ct (N, OH, OW, F) dilated by its strides `s`, with
    (kh - 1) * d[0] ((kw - 1) * d[1]) zeros before and enough after that a stride-1
    window op over it, the window dilated by `d`, has h x wd outputs: the input
    cotangent of a strided convolution or sum pooling is a stride-1 one over this."""
    n, f = ct.type.shape[0], ct.type.shape[3]
    eh, ew = (kh - 1) * d[0], (kw - 1) * d[1]            # dilated window extent - 1
    full = [n, h + eh, wd + ew, f]
    return insert_slice(b, ct, b.constant(_tensor(full, ct), 0.0),
                        [0, eh, ew, 0], [1, s[0], s[1], 1])


def _input_ct(b: Builder, x: ir.Value, w: ir.Value, ct: ir.Value, s, d) -> ir.Value:
    """dx[n, h, v, c] = sum over the windows that read x[n, h, v, c] of ct * w."""
    _, h, wd, c = x.type.shape
    kh, kw, _, f = w.type.shape
    padded = strided_to_stride1(b, ct, h, wd, kh, kw, s, d)
    # the flipped filter with its features exchanged: (KH, KW, F, C)
    r = ir.AffineDimExpr.get
    flip = ir.AffineMap.get(4, 0, [ir.AffineConstantExpr.get(kh - 1) - r(0),
                                   ir.AffineConstantExpr.get(kw - 1) - r(1), r(3), r(2)])
    wf = make_generic(b, [w], [b.empty(_tensor([kh, kw, f, c], w))],
                      [flip, identity_map(4)], [PAR] * 4, lambda bb, a: [a[0]]).result
    return conv2d(b, padded, wf, b.zeros_like(x), [1, 1], d)


def _conv_vjp(b, op, cts):
    x, w, _init = list(op.operands)
    (ct,) = cts
    ct = b.materialize(ct, op.results[0])
    s, d = conv_params(op)
    ad = b.ad
    gx = _input_ct(b, x, w, ct, s, d) if ad.is_active(x) else None
    gw = _filter_ct(b, x, w, ct, s, d) if ad.is_active(w) else None
    return [gx, gw, ct]


defjvp_rule(CONV2D, _bilinear_jvp(conv2d))
defvjp(CONV2D, _conv_vjp)


# -- batching ---------------------------------------------------------------------------------


def _conv_batch(b: BatchBuilder, op, vals, batched):
    x, w, init = vals
    bx, bw, binit = batched
    s, d = conv_params(op)
    nb = b.size
    for v in vals:
        b.static(v.type, f"an operand of '{CONV2D}'")
    if not bx and not bw:
        if not binit:
            new = b.bt.clone_unbatched(op, b.ip, operands=[x, w, init])
            return [(r, False) for r in new.results]
        x, bx = b.bcast(x), True   # only the init is batched (rare): every lane's images
    init = b.ensure_batched(init, binit)
    _, n, oh, ow, f = init.type.shape
    if bx and not bw:
        # the batch is more images: (B*N, H, W, C)
        xs = collapse(b, x, [[0, 1], [2], [3], [4]], [nb * n, *x.type.shape[2:]])
        outs = collapse(b, init, [[0, 1], [2], [3], [4]], [nb * n, oh, ow, f])
        y = conv2d(b, xs, w, outs, s, d)
        return [(expand(b, y, [[0, 1], [2], [3], [4]], [nb, n, oh, ow, f]), True)]
    if bw and not bx:
        # the batch is more filters: (KH, KW, C, B*F)
        kh, kw, c = w.type.shape[1:4]
        ws = collapse(b, transpose(b, w, [1, 2, 3, 0, 4]), [[0], [1], [2], [3, 4]],
                      [kh, kw, c, nb * f])
        outs = collapse(b, transpose(b, init, [1, 2, 3, 0, 4]), [[0], [1], [2], [3, 4]],
                        [n, oh, ow, nb * f])
        y = expand(b, conv2d(b, x, ws, outs, s, d), [[0], [1], [2], [3, 4]],
                   [n, oh, ow, nb, f])
        return [(transpose(b, y, [3, 0, 1, 2, 4]), True)]
    return [(_per_lane(b, x, w, init, s, d), True)]


def _lane_slice(b: Builder, v: ir.Value, lane: ir.Value) -> ir.Value:
    """v[lane] of a batched tensor (the leading dim dropped)."""
    shape = list(v.type.shape)
    dyn = ir.ShapedType.get_dynamic_size()
    return b.create("tensor.extract_slice", [v, lane], [_tensor(shape[1:], v)], {
        "static_offsets": ir.DenseI64ArrayAttr.get([dyn] + [0] * (len(shape) - 1)),
        "static_sizes": ir.DenseI64ArrayAttr.get([1] + shape[1:]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * len(shape)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0, 0]),
    }).result


def _per_lane(b: BatchBuilder, x: ir.Value, w: ir.Value, init: ir.Value, s, d,
              conv=None) -> ir.Value:
    """Input and filter both batched: one convolution per lane (an `scf.for`)."""
    conv = conv or conv2d
    loop = scf.ForOp(b.index(0), b.index(b.size), b.index(1), [init], loc=b.loc, ip=b.ip)
    lb = Builder(ir.InsertionPoint(loop.body), b.loc, b.ad, b.op)
    lane = loop.induction_variable
    acc = loop.inner_iter_args[0]
    y = conv(lb, _lane_slice(lb, x, lane), _lane_slice(lb, w, lane),
             _lane_slice(lb, acc, lane), s, d)
    shape = list(init.type.shape)
    dyn = ir.ShapedType.get_dynamic_size()
    row = lb.create("tensor.insert_slice", [y, acc, lane], [init.type], {
        "static_offsets": ir.DenseI64ArrayAttr.get([dyn] + [0] * (len(shape) - 1)),
        "static_sizes": ir.DenseI64ArrayAttr.get([1] + shape[1:]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * len(shape)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0, 0]),
    }).result
    scf.YieldOp([row], loc=b.loc, ip=ir.InsertionPoint(loop.body))
    return loop.results[0]


defbatch(CONV2D, _conv_batch)


# -- depthwise: linalg.depthwise_conv_2d_nhwc_hwc ----------------------------------------------
#
#     y[n, i, j, c] = init[n, i, j, c] + sum_{p, q} x[n, i*s0 + p*d0, j*s1 + q*d1, c] * w[p, q, c]
#
# (jax's feature_group_count = C with one output feature per group). The same
# formulas as the full convolution with the channel sum dropped, each again a
# depthwise convolution: jvp bilinear; the input's cotangent the dilated,
# padded cotangent convolved with the flipped filter; the filter's cotangent a
# depthwise convolution of x with the cotangent as its filter, batch and
# channels folded into one channel dim ((1, H, W, N*C) and (OH, OW, N*C)),
# strides and dilations swapped, then summed over N.

DEPTHWISE = "linalg.depthwise_conv_2d_nhwc_hwc"


def depthwise(b: Builder, x: ir.Value, w: ir.Value, init: ir.Value, strides, dilations
              ) -> ir.Value:
    """`linalg.depthwise_conv_2d_nhwc_hwc` of x (N, H, W, C) and w (KH, KW, C) into `init`."""
    with b.loc, b.ip:
        return value_of(linalg.depthwise_conv_2d_nhwc_hwc(
            x, w, outs=[init], strides=list(strides), dilations=list(dilations)))


def _dw_input_ct(b: Builder, x: ir.Value, w: ir.Value, ct: ir.Value, s, d) -> ir.Value:
    _, h, wd, _ = x.type.shape
    kh, kw, c = w.type.shape
    padded = strided_to_stride1(b, ct, h, wd, kh, kw, s, d)
    r = ir.AffineDimExpr.get
    flip = ir.AffineMap.get(3, 0, [ir.AffineConstantExpr.get(kh - 1) - r(0),
                                   ir.AffineConstantExpr.get(kw - 1) - r(1), r(2)])
    wf = make_generic(b, [w], [b.empty_like(w)], [flip, identity_map(3)], [PAR] * 3,
                      lambda bb, a: [a[0]]).result
    return depthwise(b, padded, wf, b.zeros_like(x), [1, 1], d)


def _dw_filter_ct(b: Builder, x: ir.Value, w: ir.Value, ct: ir.Value, s, d) -> ir.Value:
    n, h, wd, c = x.type.shape
    kh, kw, _ = w.type.shape
    oh, ow = ct.type.shape[1:3]
    xt = collapse(b, transpose(b, x, [1, 2, 0, 3]), [[0], [1], [2, 3]], [h, wd, n * c])
    xt = expand(b, xt, [[0, 1], [2], [3]], [1, h, wd, n * c])       # (1, H, W, N*C)
    ctt = collapse(b, transpose(b, ct, [1, 2, 0, 3]), [[0], [1], [2, 3]], [oh, ow, n * c])
    rh = (h - (oh - 1) * s[0] - 1) // d[0] + 1           # >= kh: rows no window reaches
    rw = (wd - (ow - 1) * s[1] - 1) // d[1] + 1
    out = depthwise(b, xt, ctt, b.constant(_tensor([1, rh, rw, n * c], x), 0.0), d, s)
    out = collapse(b, out, [[0, 1], [2], [3]], [rh, rw, n * c])
    if (rh, rw) != (kh, kw):
        out = extract_slice(b, out, [0, 0, 0], [kh, kw, n * c], [1, 1, 1])
    return sum_to(b, expand(b, out, [[0], [1], [2, 3]], [kh, kw, n, c]), [0, 1, 3])


def _dw_vjp(b, op, cts):
    x, w, _init = list(op.operands)
    (ct,) = cts
    ct = b.materialize(ct, op.results[0])
    s, d = conv_params(op)
    gx = _dw_input_ct(b, x, w, ct, s, d) if b.ad.is_active(x) else None
    gw = _dw_filter_ct(b, x, w, ct, s, d) if b.ad.is_active(w) else None
    return [gx, gw, ct]


def _dw_batch(b: BatchBuilder, op, vals, batched):
    x, w, init = vals
    bx, bw, binit = batched
    s, d = conv_params(op)
    nb = b.size
    for v in vals:
        b.static(v.type, f"an operand of '{DEPTHWISE}'")
    if not bx and not bw:
        if not binit:
            new = b.bt.clone_unbatched(op, b.ip, operands=[x, w, init])
            return [(r, False) for r in new.results]
        x, bx = b.bcast(x), True
    init = b.ensure_batched(init, binit)
    _, n, oh, ow, c = init.type.shape
    if bx and not bw:       # the batch is more images: (B*N, H, W, C)
        xs = collapse(b, x, [[0, 1], [2], [3], [4]], [nb * n, *x.type.shape[2:]])
        outs = collapse(b, init, [[0, 1], [2], [3], [4]], [nb * n, oh, ow, c])
        y = depthwise(b, xs, w, outs, s, d)
        return [(expand(b, y, [[0, 1], [2], [3], [4]], [nb, n, oh, ow, c]), True)]
    x = b.ensure_batched(x, bx)
    return [(_per_lane(b, x, w, init, s, d, depthwise), True)]


defjvp_rule(DEPTHWISE, _bilinear_jvp(depthwise))
defvjp(DEPTHWISE, _dw_vjp)
defbatch(DEPTHWISE, _dw_batch)
