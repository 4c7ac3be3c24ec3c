"""Rules of the named 2-D sum pooling `linalg.pooling_nhwc_sum` (jvp, vjp, batching).

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
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import Builder, element_type
from .batching import BatchBuilder, defbatch
from .linalg_conv import conv_params
from .registry import defjvp_rule, defvjp
from .structured import collapse, expand, insert_slice, value_of

POOL_SUM = "linalg.pooling_nhwc_sum"


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
    n, h, wd, c = x.type.shape
    kh, kw = window.type.shape
    eh, ew = (kh - 1) * d[0], (kw - 1) * d[1]            # dilated window extent - 1
    full = [n, h + eh, wd + ew, c]
    padded = insert_slice(b, ct, b.constant(_tensor(full, ct), 0.0),
                          [0, eh, ew, 0], [1, s[0], s[1], 1])
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


def _pool_batch(b: BatchBuilder, op, vals, batched):
    x, window, init = vals
    bx, bwin, binit = batched
    s, d = conv_params(op)
    nb = b.size
    for v in vals:
        b.static(v.type, f"an operand of '{POOL_SUM}'")
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
    y = pool_sum(b, xs, window, outs, s, d)
    return [(expand(b, y, [[0, 1], [2], [3], [4]], [nb, n, oh, ow, c]), True)]


defbatch(POOL_SUM, _pool_batch)
