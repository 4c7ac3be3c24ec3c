"""Convolution and pooling: `lax.conv_general_dilated`, `lax.conv`,
`lax.conv_with_general_padding`, `lax.reduce_window` (the contracts of
`jax.lax`) and the `nn.max_pool` / `nn.avg_pool` helpers.

- padding and base (lhs) dilation: one strided `tensor.insert_slice` of the
  operand into a tensor filled with the padding value, negative padding a
  crop (`tensor.extract_slice`); on numpy arrays (eager) the same by
  concatenating blocks and interleaving;
- a traced f32/f64 convolution with one or two spatial dimensions and one
  feature group (up to `NAMED_MAX_GROUPS`: one per group, concatenated) is
  then one `linalg.conv_2d_nhwc_hwcf` (window strides and
  kernel dilation are its attributes; 1-D runs at height 1), whose jvp, vjp
  and batching rules (transforms/rules/linalg_conv.py) are again that op,
  and which the CPU pipeline tiles, decomposes to 1-D and vectorizes; a
  depthwise one (`feature_group_count` = input features = output features)
  is one `linalg.depthwise_conv_2d_nhwc_hwc`, again with rules of its own;
- any other convolution is a composite of the ops `mlir_autodiff.numpy`
  already emits, so every transform (jvp, vjp, vmap, any order) comes from
  the rules of those ops: an im2col, one strided `tensor.extract_slice` per
  kernel position (the window offset times the kernel dilation, the window stride
  as the slice's stride), stacked into patches, and one `linalg.matmul`
  (`linalg.batch_matmul` over the groups when `feature_group_count > 1`).
  Reverse mode is then the transposed matmul and strided `insert_slice`s:
  the same sums as jax's transposed convolution (lhs-dilated by the strides,
  flipped kernel), in another order.
- a traced f32/f64 `reduce_window` with add whose windows reduce or stride
  over one or two axes (`nn.avg_pool` among them) is one
  `linalg.pooling_nhwc_sum` (the pooled axes as H, W; the copied ones as N
  and C, through a transpose where needed), whose rules
  (transforms/rules/linalg_pool.py) are again that op;
- other `reduce_window`s read the same strided window slices: `add` sums them;
  `max` / `min` run a chain of selects that keeps the first extremal element
  of each window in row-major window order, so derivatives go to that one
  element, as jax's select-and-scatter (`ge` / `le` selection) does at ties.

Dimension numbers are jax's: `None` (`NCH...`, `OIH...`), three layout
strings such as `("NHWC", "HWIO", "NHWC")`, or three permutations
(`ConvDimensionNumbers`' `lhs_spec`, `rhs_spec`, `out_spec`). Spatial
dimensions are matched by letter and ordered as in the kernel's layout
string; `window_strides`, `padding` and the dilations follow that order. Any
number of spatial dimensions works.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir.dialects import linalg

from . import numpy as anp
from . import primitives
from .tracing import ShapedArray, Tracer, format_site, require_trace

ArrayLike = Any
Padding = str | Sequence[tuple[int, int]]


def _err(who: str, msg: str) -> ValueError:
    return ValueError(f"{who}: {msg} (at {format_site()})")


def _ints(who: str, name: str, v: Any, n: int, default: int = 1) -> list[int]:
    if v is None:
        return [default] * n
    if isinstance(v, (int, np.integer)):
        v = [int(v)] * n
    v = [int(e) for e in v]
    if len(v) != n:
        raise _err(who, f"{name} must have {n} entries (one per spatial dimension), got {v}")
    if any(e < 1 for e in v):
        raise _err(who, f"{name} entries must be positive, got {v}")
    return v


def padtype_to_pads(in_shape: Sequence[int], window: Sequence[int], strides: Sequence[int],
                    padding: str, who: str = "padding") -> list[tuple[int, int]]:
    """jax's 'SAME' / 'SAME_LOWER' / 'VALID' as (low, high) pairs per dimension."""
    kind = padding.upper()
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise _err(who, f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of "
                        f"(low, high) pairs, got {padding!r}")
    pads = []
    for n, k, s in zip(in_shape, window, strides):
        out = -(-n // s)
        total = max((out - 1) * s + k - n, 0)
        lo = total // 2 if kind == "SAME" else total - total // 2
        pads.append((lo, total - lo))
    return pads


def _pairs(who: str, padding: Any, n: int) -> list[tuple[int, int]]:
    try:
        pairs = [(int(lo), int(hi)) for lo, hi in padding]
    except (TypeError, ValueError):
        raise _err(who, f"padding must be a string or a sequence of (low, high) pairs, got "
                        f"{padding!r}") from None
    if len(pairs) != n:
        raise _err(who, f"padding must have {n} (low, high) pairs, got {len(pairs)}")
    return pairs


# --------------------------------------------------------------------------- padding


def _block(x: Any, axis: int, size: int, value: Any) -> Any:
    shape = list(anp.shape(x))
    shape[axis] = size
    return anp.full(tuple(shape), value, dtype=anp.asarray(x).dtype)


def _pad_axis(x: Any, axis: int, lo: int, hi: int, interior: int, value: Any) -> Any:
    """lax.pad along one axis: `interior` copies of `value` between elements,
    `lo` / `hi` at the ends (negative: cropped)."""
    n = anp.shape(x)[axis]
    if interior > 0 and n > 1:
        xe = anp.expand_dims(x, axis + 1)
        inter = anp.concatenate([xe, _block(xe, axis + 1, interior, value)], axis=axis + 1)
        shape = list(anp.shape(x))
        shape[axis] = n * (interior + 1)
        x = anp.reshape(inter, tuple(shape))
        x = x[(slice(None),) * axis + (slice(0, (n - 1) * (interior + 1) + 1),)]
        n = (n - 1) * (interior + 1) + 1
    start, stop = max(-lo, 0), n - max(-hi, 0)
    if start > 0 or stop < n:
        if stop <= start:
            raise ValueError(f"padding ({lo}, {hi}) leaves nothing of a dimension of size {n}")
        x = x[(slice(None),) * axis + (slice(start, stop),)]
    parts = []
    if lo > 0:
        parts.append(_block(x, axis, lo, value))
    parts.append(x)
    if hi > 0:
        parts.append(_block(x, axis, hi, value))
    return anp.concatenate(parts, axis=axis) if len(parts) > 1 else x


def _pad(x: Any, axes: Sequence[int], pads: Sequence[tuple[int, int]],
         interior: Sequence[int], value: Any) -> Any:
    """lax.pad of the listed axes: elements `interior` apart (dilation), (low,
    high) pads of `value` (negative: cropped). Traced: one strided
    `tensor.insert_slice` into a filled tensor (its reverse mode a strided
    `tensor.extract_slice`), then a crop where a pad is negative."""
    if not any(lo or hi or d > 1 for (lo, hi), d in zip(pads, interior)):
        return x
    if not isinstance(x, Tracer):
        for ax, (lo, hi), d in zip(axes, pads, interior):
            if lo or hi or d > 1:
                x = _pad_axis(x, ax, lo, hi, d - 1, value)
        return x
    shape = list(x.shape)
    full = list(shape)
    offsets, strides = [0] * len(shape), [1] * len(shape)
    for ax, (lo, hi), d in zip(axes, pads, interior):
        full[ax] = (shape[ax] - 1) * d + 1 + max(lo, 0) + max(hi, 0)
        offsets[ax], strides[ax] = max(lo, 0), d
    dest = anp.full(tuple(full), value, dtype=x.dtype)
    y = primitives.insert_slice(dest, x, offsets, shape, strides)
    crop = [slice(None)] * len(shape)
    for ax, (lo, hi), _ in zip(axes, pads, interior):
        if lo < 0 or hi < 0:
            start, stop = max(-lo, 0), full[ax] - max(-hi, 0)
            if stop <= start:
                raise ValueError(f"padding ({lo}, {hi}) leaves nothing of a dimension of "
                                 f"size {shape[ax]} (at {format_site()})")
            crop[ax] = slice(start, stop)
    return y[tuple(crop)] if any(c != slice(None) for c in crop) else y


def _windows(who: str, x: Any, axes: Sequence[int], window: Sequence[int],
             strides: Sequence[int], dilation: Sequence[int]) -> tuple[list[Any], list[int]]:
    """Every window position's strided slice of `x` (row-major over the window)."""
    shape = anp.shape(x)
    out = []
    for ax, k, s, d in zip(axes, window, strides, dilation):
        eff = (k - 1) * d + 1
        if shape[ax] < eff:
            raise _err(who, f"the window (size {k}, dilation {d}) is larger than the padded "
                            f"input ({shape[ax]}) along dimension {ax}")
        out.append((shape[ax] - eff) // s + 1)
    slices = []
    for pos in itertools.product(*[range(k) for k in window]):
        idx: list[Any] = [slice(None)] * len(shape)
        for ax, p, s, d, o in zip(axes, pos, strides, dilation, out):
            idx[ax] = slice(p * d, p * d + (o - 1) * s + 1, s)
        slices.append(x[tuple(idx)])
    return slices, out


# --------------------------------------------------------------------------- convolution


def _spec_perms(who: str, dimension_numbers: Any, nd: int
                ) -> tuple[list[int], list[int], list[int]]:
    """(lhs, rhs, out) permutations to (N, C, spatial...), (O, I, spatial...), (N, C, ...)."""
    if dimension_numbers is None:
        p = list(range(nd + 2))
        return p, p, p
    if hasattr(dimension_numbers, "lhs_spec"):
        dimension_numbers = (dimension_numbers.lhs_spec, dimension_numbers.rhs_spec,
                             dimension_numbers.out_spec)
    try:
        lhs, rhs, out = dimension_numbers
    except (TypeError, ValueError):
        raise _err(who, f"dimension_numbers must be None, three layout strings or three "
                        f"permutations, got {dimension_numbers!r}") from None
    if all(isinstance(s, str) for s in (lhs, rhs, out)):
        for s, a, b in ((lhs, "N", "C"), (rhs, "O", "I"), (out, "N", "C")):
            if (len(s) != nd + 2 or len(set(s)) != len(s) or a not in s or b not in s):
                raise _err(who, f"layout {s!r} must name {a}, {b} and {nd} spatial "
                                f"dimension(s) once each")
        spatial = [c for c in rhs if c not in "OI"]
        for s, a, b in ((lhs, "N", "C"), (out, "N", "C")):
            if sorted(c for c in s if c not in (a, b)) != sorted(spatial):
                raise _err(who, f"layouts {lhs!r}, {rhs!r}, {out!r} name different spatial "
                                f"dimensions")
        return ([lhs.index("N"), lhs.index("C")] + [lhs.index(c) for c in spatial],
                [rhs.index("O"), rhs.index("I")] + [rhs.index(c) for c in spatial],
                [out.index("N"), out.index("C")] + [out.index(c) for c in spatial])
    perms = [[int(i) for i in p] for p in (lhs, rhs, out)]
    for p in perms:
        if sorted(p) != list(range(nd + 2)):
            raise _err(who, f"dimension_numbers entries must be permutations of "
                            f"range({nd + 2}), got {perms}")
    return perms[0], perms[1], perms[2]


def conv_general_dilated(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int],
                         padding: Padding, lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: Any = None, feature_group_count: int = 1,
                         batch_group_count: int = 1, precision: Any = None,
                         preferred_element_type: Any = None) -> Any:
    """jax.lax.conv_general_dilated: an N-d cross-correlation (no kernel flip) of
    `lhs` with `rhs`, with window strides, padding ('SAME', 'SAME_LOWER', 'VALID' or
    (low, high) pairs, negative crops), lhs (base) and rhs (kernel) dilation,
    dimension numbers and feature groups. `precision` is accepted and ignored
    (the CPU computes in the operands' dtype)."""
    who = "conv_general_dilated"
    lhs, rhs = anp.asarray(lhs), anp.asarray(rhs)
    if lhs.ndim != rhs.ndim or lhs.ndim < 3:
        raise _err(who, f"lhs and rhs must have one rank of at least 3 (batch, feature and "
                        f"spatial dimensions), got shapes {tuple(lhs.shape)} and "
                        f"{tuple(rhs.shape)}")
    if batch_group_count != 1:
        raise _err(who, f"batch_group_count={batch_group_count} is not supported (only 1)")
    nd = lhs.ndim - 2
    lp, rp, op = _spec_perms(who, dimension_numbers, nd)
    strides = _ints(who, "window_strides", window_strides, nd)
    ldil = _ints(who, "lhs_dilation", lhs_dilation, nd)
    rdil = _ints(who, "rhs_dilation", rhs_dilation, nd)
    g = int(feature_group_count)
    # canonical layouts: lhs (N, spatial..., C), rhs (spatial..., I, O)
    x = anp.transpose(lhs, [lp[0], *lp[2:], lp[1]])
    w = anp.transpose(rhs, [*rp[2:], rp[1], rp[0]])
    n, c = x.shape[0], x.shape[-1]
    ksize, ci, co = list(w.shape[:nd]), w.shape[nd], w.shape[nd + 1]
    if g < 1 or c % g or co % g:
        raise _err(who, f"feature_group_count={feature_group_count} must divide the input "
                        f"features ({c}) and the output features ({co})")
    if c != ci * g:
        raise _err(who, f"lhs has {c} input features but rhs expects {ci} per group x "
                        f"{g} group(s)")
    if isinstance(padding, str):
        if any(d != 1 for d in ldil):
            raise _err(who, f"string padding {padding!r} is not defined with lhs_dilation "
                            f"{ldil} (as in jax): give (low, high) pairs")
        eff = [(k - 1) * d + 1 for k, d in zip(ksize, rdil)]
        pads = padtype_to_pads(list(x.shape[1:-1]), eff, strides, padding, who)
    else:
        pads = _pairs(who, padding, nd)
    axes = list(range(1, nd + 1))
    dtype = anp.result_type(x, w) if preferred_element_type is None else np.dtype(
        preferred_element_type)
    x, w = anp.astype(x, dtype), anp.astype(w, dtype)
    x = _pad(x, axes, pads, ldil, 0)
    if g > 1 and g == c == co and _named_ok(x, w, nd, 1):     # depthwise
        y = _named_conv(who, x, anp.reshape(w, (*ksize, c)), strides, rdil, depthwise=True)
        return _to_out_layout(y, op, nd)
    if _named_ok(x, w, nd, g):
        if g == 1:
            y = _named_conv(who, x, w, strides, rdil)        # (N, out..., O)
        else:   # one named convolution per group, concatenated along the features
            og = co // g
            y = anp.concatenate([_named_conv(who, x[..., i * ci:(i + 1) * ci],
                                             w[..., i * og:(i + 1) * og], strides, rdil)
                                 for i in range(g)], axis=-1)
        return _to_out_layout(y, op, nd)
    slices, out = _windows(who, x, axes, ksize, strides, rdil)
    kk = len(slices)
    m = n * math.prod(out)
    patches = anp.stack(slices, axis=-2)                       # (N, out..., K, C)
    if g == 1:
        y = anp.matmul(anp.reshape(patches, (m, kk * c)), anp.reshape(w, (kk * c, co)))
    else:
        og = co // g
        p = anp.reshape(patches, (m, kk, g, ci))
        p = anp.reshape(anp.transpose(p, (2, 0, 1, 3)), (g, m, kk * ci))
        wg = anp.reshape(w, (kk, ci, g, og))
        wg = anp.reshape(anp.transpose(wg, (2, 0, 1, 3)), (g, kk * ci, og))
        y = anp.reshape(anp.transpose(anp.matmul(p, wg), (1, 0, 2)), (m, co))
    y = anp.reshape(y, (n, *out, co))                          # (N, out..., O)
    return _to_out_layout(y, op, nd)


def _to_out_layout(y: Any, op: Sequence[int], nd: int) -> Any:
    """(N, spatial..., O) to the output layout `op` (a permutation to (N, C, spatial...))."""
    canon = [0, nd + 1, *range(1, nd + 1)]                     # as (N, C, spatial...)
    inv = [0] * (nd + 2)
    for i, p_ in enumerate(op):
        inv[p_] = canon[i]
    return anp.transpose(y, inv)


#: Feature groups up to this many run as one named convolution per group;
#: more (depthwise convolutions) stay the batched im2col matmul.
NAMED_MAX_GROUPS = 4


def _named_ok(x: Any, w: Any, nd: int, groups: int) -> bool:
    """Whether the (padded) convolution is `linalg.conv_2d_nhwc_hwcf` (one per feature
    group): traced f32/f64 operands, one or two spatial dimensions, at most
    `NAMED_MAX_GROUPS` groups."""
    return ((isinstance(x, Tracer) or isinstance(w, Tracer)) and nd in (1, 2)
            and groups <= NAMED_MAX_GROUPS
            and np.dtype(x.dtype) in (np.dtype(np.float32), np.dtype(np.float64)))


def _named_conv(who: str, x: Any, w: Any, strides: Sequence[int],
                dilation: Sequence[int], depthwise: bool = False) -> Any:
    """`linalg.conv_2d_nhwc_hwcf` of x (N, spatial..., C) and w (spatial..., I, O) with
    the window strides and kernel dilation (attributes of the op); one spatial
    dimension runs as a 2-D convolution of height 1. `depthwise`:
    `linalg.depthwise_conv_2d_nhwc_hwc` of w (spatial..., C), each channel
    convolved with its own filter. Their derivatives and batching are rules of
    the ops (transforms/rules/linalg_conv.py)."""
    if x.ndim == 3:
        y = _named_conv(who, anp.expand_dims(x, 1), anp.expand_dims(w, 0),
                        [1, *strides], [1, *dilation], depthwise)
        return anp.squeeze(y, 1)
    trace = require_trace(who)
    x, w = trace.lift(x), trace.lift(w)
    n, f = x.shape[0], w.shape[-1]
    out = []
    for size, k, s, d in zip(x.shape[1:3], w.shape[:2], strides, dilation):
        eff = (k - 1) * d + 1
        if size < eff:
            raise _err(who, f"the window (size {k}, dilation {d}) is larger than the padded "
                            f"input ({size})")
        out.append((size - eff) // s + 1)
    shape = [n, *out, f]
    with trace.emitting():
        init = primitives._filled(shape, x.dtype, 0)
        named = linalg.depthwise_conv_2d_nhwc_hwc if depthwise else linalg.conv_2d_nhwc_hwcf
        v = named(x.value, w.value, outs=[init], strides=list(strides),
                  dilations=list(dilation))
    return Tracer(v, ShapedArray(shape, x.dtype), trace)


def conv(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int], padding: Padding,
         precision: Any = None, preferred_element_type: Any = None) -> Any:
    """jax.lax.conv: `conv_general_dilated` with NC... / OI... layouts and no dilation."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int],
                              padding: Padding, lhs_dilation: Sequence[int] | None,
                              rhs_dilation: Sequence[int] | None, precision: Any = None,
                              preferred_element_type: Any = None) -> Any:
    """jax.lax.conv_with_general_padding: `conv_general_dilated` with NC... / OI... layouts."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


# --------------------------------------------------------------------------- reduce_window

_KINDS: dict[Any, str] = {
    anp.add: "add", np.add: "add", operator.add: "add",
    anp.maximum: "max", np.maximum: "max",
    anp.minimum: "min", np.minimum: "min",
}


def _kind(computation: Any) -> str | None:
    if isinstance(computation, str):
        return computation if computation in ("add", "max", "min") else None
    try:
        kind = _KINDS.get(computation)
    except TypeError:
        return None
    # lax.add / lax.max / lax.min (lax_ops.py, a higher layer) carry their kind
    return kind or getattr(computation, "reduce_window_kind", None)


def _first_extremum(slices: list[Any], kind: str) -> Any:
    """The window's max (min): a chain of selects keeping the earlier element on
    ties (jax's `ge` / `le` selection), so the derivative goes to that one; the
    first NaN of a window is its value."""
    acc = slices[0]
    floating = np.issubdtype(np.dtype(anp.asarray(acc).dtype), np.floating)
    for s in slices[1:]:
        keep = (acc >= s) if kind == "max" else (acc <= s)
        if floating:   # a NaN, once chosen, stays (the value propagates NaN as max does)
            keep = anp.logical_or(keep, acc != acc)
        acc = anp.where(keep, acc, s)
    return acc


def reduce_window(operand: ArrayLike, init_value: Any, computation: Any,
                  window_dimensions: Sequence[int], window_strides: Sequence[int],
                  padding: Padding, base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Any:
    """jax.lax.reduce_window of one array: `computation` over every window.

    `computation` is `add`, `max` or `min` (`lax`'s, `mlir_autodiff.numpy`'s or
    numpy's functions, `operator.add`, or the strings) or any binary function of
    arrays, applied pairwise in row-major window order. Padding and base
    dilation fill with `init_value`, which is also combined into every window
    (for add: added once; for max/min with the identity -inf/+inf: no-op).
    Max and min differentiate as jax's select-and-scatter: each window's
    cotangent goes to its first extremal element."""
    who = "reduce_window"
    x = anp.asarray(operand)
    nd = x.ndim
    window = _ints(who, "window_dimensions", window_dimensions, nd)
    strides = _ints(who, "window_strides", window_strides, nd)
    bdil = _ints(who, "base_dilation", base_dilation, nd)
    wdil = _ints(who, "window_dilation", window_dilation, nd)
    if isinstance(padding, str):
        eff = [(k - 1) * d + 1 for k, d in zip(window, wdil)]
        base = [(s - 1) * b + 1 for s, b in zip(x.shape, bdil)]
        pads = padtype_to_pads(base, eff, strides, padding, who)
    else:
        pads = _pairs(who, padding, nd)
    kind = _kind(computation)
    if kind is None and not callable(computation):
        raise _err(who, f"computation must be add, max, min or a binary function, got "
                        f"{computation!r}")
    init = init_value.item() if isinstance(init_value, np.ndarray) else init_value
    if not isinstance(init, (int, float, np.integer, np.floating, bool)):
        raise _err(who, f"init_value must be a static scalar, got {type(init_value).__name__}")
    axes = list(range(nd))
    x = _pad(x, axes, pads, bdil, init)
    if kind == "add" and _named_pool_ok(x, window, strides, wdil):
        acc = _named_pool(who, "sum", x, window, strides, wdil)
        return acc + init if init != 0 else acc
    if kind == "max" and NAMED_MAX_POOL and _named_pool_ok(x, window, strides, wdil):
        acc = _named_pool(who, "max", x, window, strides, wdil)
        return anp.maximum(acc, init) if float(init) != -math.inf else acc
    slices, _ = _windows(who, x, axes, window, strides, wdil)
    if kind == "add":
        acc = slices[0]
        for s in slices[1:]:
            acc = acc + s
        return acc + init if init != 0 else acc
    if kind in ("max", "min"):
        acc = _first_extremum(slices, kind)
        identity = -math.inf if kind == "max" else math.inf
        if float(init) != identity:
            acc = (anp.maximum if kind == "max" else anp.minimum)(acc, init)
        return acc
    fn: Callable[[Any, Any], Any] = computation
    acc = fn(anp.full(anp.shape(slices[0]), init, dtype=x.dtype), slices[0])
    for s in slices[1:]:
        acc = fn(acc, s)
    return acc


#: Whether max windows of traced floats are `linalg.pooling_nhwc_max` (its rules,
#: transforms/rules/linalg_pool.py, keep the select chain's first-maximum and
#: first-NaN rule) rather than the select chain. On by default: for the CNN of
#: benchmarks/cnn_cases.py (2x2 max pools at stride 2, batch 128, f32) the
#: train step's vjp of tiling windows is two generics (no per-position
#: copies) and the step compiles in less time than the chain's.
NAMED_MAX_POOL = True


def _pooled_axes(window: Sequence[int], strides: Sequence[int],
                 dilation: Sequence[int]) -> list[int]:
    """The axes a window reduces or strides over (the others are copied)."""
    return [ax for ax, k, s, d in zip(itertools.count(), window, strides, dilation)
            if k != 1 or s != 1 or d != 1]


def _named_pool_ok(x: Any, window: Sequence[int], strides: Sequence[int],
                   dilation: Sequence[int]) -> bool:
    """Whether a sum over windows of the (padded) `x` is `linalg.pooling_nhwc_sum`:
    a traced f32/f64 array whose windows span one or two axes."""
    return (isinstance(x, Tracer) and 1 <= len(_pooled_axes(window, strides, dilation)) <= 2
            and np.dtype(x.dtype) in (np.dtype(np.float32), np.dtype(np.float64)))


def _named_pool(who: str, kind: str, x: Any, window: Sequence[int], strides: Sequence[int],
                dilation: Sequence[int]) -> Any:
    """The window sums (maxima) of `x` as one `linalg.pooling_nhwc_sum` (`_max`,
    from -inf, its rules keeping the first maximum as the select chain
    does): the pooled axes
    become H, W (one of them: H of size 1), the copied axes before the last
    of them N, the last copied axis C (a transpose first where the layout is
    not already so, e.g. NCHW). Its derivatives and batching are rules of
    the op (transforms/rules/linalg_pool.py)."""
    pooled = _pooled_axes(window, strides, dilation)
    rest = [ax for ax in range(x.ndim) if ax not in pooled]
    chan, lead = rest[-1:], rest[:-1]
    perm = lead + pooled + chan
    xt = anp.transpose(x, perm) if perm != list(range(x.ndim)) else x
    sizes = [x.shape[ax] for ax in pooled]
    k = [window[ax] for ax in pooled]
    s = [strides[ax] for ax in pooled]
    d = [dilation[ax] for ax in pooled]
    if len(pooled) == 1:
        sizes, k, s, d = [1, *sizes], [1, *k], [1, *s], [1, *d]
    n = math.prod(x.shape[ax] for ax in lead)
    c = math.prod(x.shape[ax] for ax in chan)
    out = []
    for ax in pooled:
        eff = (window[ax] - 1) * dilation[ax] + 1
        if x.shape[ax] < eff:
            raise _err(who, f"the window (size {window[ax]}, dilation {dilation[ax]}) is "
                            f"larger than the padded input ({x.shape[ax]}) along dimension {ax}")
        out.append((x.shape[ax] - eff) // strides[ax] + 1)
    if len(pooled) == 1:
        out = [1, *out]
    trace = require_trace(who)
    x4 = trace.lift(anp.reshape(xt, (n, *sizes, c)))
    shape = [n, *out, c]
    with trace.emitting():
        init = primitives._filled(shape, x4.dtype, 0 if kind == "sum" else -math.inf)
        kernel = primitives._empty(k, x4.dtype)
        pool = linalg.pooling_nhwc_sum if kind == "sum" else linalg.pooling_nhwc_max
        v = pool(x4.value, kernel, outs=[init], strides=s, dilations=d)
    y = Tracer(v, ShapedArray(shape, x4.dtype), trace)
    # back to the copied axes' shapes and the input's axis order
    yshape = [x.shape[ax] for ax in lead] + out[-len(pooled):] + [x.shape[ax] for ax in chan]
    y = anp.reshape(y, tuple(yshape))
    inv = [perm.index(ax) for ax in range(x.ndim)]
    return anp.transpose(y, inv) if perm != list(range(x.ndim)) else y


# --------------------------------------------------------------------------- nn pooling


def _pool_args(who: str, x: Any, window_shape: Sequence[int], strides: Any,
               padding: Padding) -> tuple[list[int], list[int], list[int], Any]:
    x = anp.asarray(x)
    window_shape = [int(k) for k in window_shape]
    nd = len(window_shape)
    if x.ndim < nd + 1:
        raise _err(who, f"inputs of shape {tuple(x.shape)} have no feature dimension after "
                        f"{nd} spatial dimension(s)")
    strides = _ints(who, "strides", strides, nd)
    lead = x.ndim - nd - 1
    window = [1] * lead + window_shape + [1]
    strides = [1] * lead + strides + [1]
    if isinstance(padding, str):
        pads: Any = padding
    else:
        pads = [(0, 0)] * lead + _pairs(who, padding, nd) + [(0, 0)]
    return window, strides, pads, x


def max_pool(inputs: ArrayLike, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Padding = "VALID") -> Any:
    """Max pooling over the spatial dimensions of `inputs` laid out as (batch...,
    spatial..., features) (flax's convention): `window_shape` and `strides`
    (default 1) per spatial dimension, padding as in `lax.reduce_window`. The
    derivative goes to each window's first maximal element (jax's rule)."""
    window, strides_, pads, x = _pool_args("max_pool", inputs, window_shape, strides, padding)
    dt = np.dtype(x.dtype)
    low = -math.inf if np.issubdtype(dt, np.floating) else (
        False if dt == np.bool_ else int(np.iinfo(dt).min))
    return reduce_window(x, low, "max", window, strides_, pads)


def avg_pool(inputs: ArrayLike, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Padding = "VALID", count_include_pad: bool = True) -> Any:
    """Average pooling (flax's convention, as `max_pool`): the window sum divided by
    the window size, or with `count_include_pad=False` by the number of
    non-padding elements in each window."""
    window, strides_, pads, x = _pool_args("avg_pool", inputs, window_shape, strides, padding)
    total = reduce_window(x, 0.0, "add", window, strides_, pads)
    if count_include_pad:
        return total / math.prod(window)
    if isinstance(pads, str):
        pads = padtype_to_pads(list(x.shape), window, strides_, pads, "avg_pool")
    counts = np.ones((), dtype=np.float64)
    for ax, (k, st, (lo, hi)) in enumerate(zip(window, strides_, pads)):
        # the number of non-padding elements in each window along `ax` (static)
        ind = np.concatenate([np.zeros(max(lo, 0)), np.ones(x.shape[ax]), np.zeros(max(hi, 0))])
        ind = ind[max(-lo, 0):len(ind) - max(-hi, 0)]
        c = np.array([ind[i:i + k].sum() for i in range(0, len(ind) - k + 1, st)])
        counts = np.multiply.outer(counts, c)
    return total / anp.asarray(counts.astype(np.dtype(x.dtype)))


__all__ = ["avg_pool", "conv", "conv_general_dilated", "conv_with_general_padding",
           "max_pool", "reduce_window"]
