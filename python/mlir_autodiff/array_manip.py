"""numpy's everyday array-manipulation and NaN-aware names, as compositions.

`pad`, `repeat`, `tile`, `split` / `array_split`, `diag`, `fliplr` / `flipud`
/ `rot90`, `kron`, `cross`, `meshgrid`, `isclose` / `allclose`, `nan_to_num`,
`nansum` / `nanmean` / `nanmax` / `nanmin`, `average`, `hypot`, `sinc`,
`trace` (any axes), `roll` (tuples of shifts) and the `...` of `einsum`.

Every function here is written with `mlir_autodiff.numpy`'s own functions
(slices, `concatenate`, `where`, reductions, elementwise math), so jvp, vjp,
vmap and every higher order come from the rules those already have; no new
primitive is needed. Semantics, dtypes and promotion follow `jax.numpy`
(x64): the NaN-aware reductions mask with `where` so their derivative is 0
(never NaN) at NaN entries and the usual one elsewhere; `hypot` scales by
the larger leg only where it is nonzero (a finite derivative at 0, the true
one at ties); `sinc`
takes its Maclaurin polynomial exactly at 0, so every derivative there is
the true one (0, -pi^2/3, 0, pi^4/5, ...), as jax's custom rule gives.

Layering: `numpy` (layer 7) re-exports these names, so this module sits
below it (layer 6) and does not import it; `numpy` hands it its namespace
once, at the end of its own import (`bind`), and the functions here call
through that namespace.

Outside a trace each function is numpy's own (`numpy.pad` and so on), as
everywhere in `mlir_autodiff.numpy`.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import ConcretizationTypeError, UnexpectedTracerError, UnsupportedError
from .tracing import Tracer, current_trace, format_site

#: `mlir_autodiff.numpy`, handed over by `bind` when it finishes importing.
anp: Any = None

__all__ = [
    "allclose", "array_split", "average", "cross", "diag", "fliplr", "flipud", "hypot",
    "isclose", "kron", "meshgrid", "nan_to_num", "nanmax", "nanmean", "nanmin", "nansum",
    "linspace", "pad", "repeat", "roll", "rot90", "sinc", "split", "tile", "trace",
]


def bind(namespace: Any) -> None:
    """Give this module the `mlir_autodiff.numpy` namespace it composes."""
    global anp
    anp = namespace


def _eager(np_name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Traced implementation of numpy's `np_name`; outside a trace, numpy itself."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        np_fn = getattr(np, np_name or fn.__name__)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if current_trace() is None:
                if _any_tracer(args) or _any_tracer(kwargs.values()):
                    raise UnexpectedTracerError(
                        f"anp.{fn.__name__} got a traced value outside of any trace at "
                        f"{format_site()}; traced values must not escape their function")
                return np_fn(*args, **kwargs)
            return fn(*args, **kwargs)

        return wrapper

    return deco


def _any_tracer(xs: Any) -> bool:
    for x in xs:
        if isinstance(x, Tracer):
            return True
        if isinstance(x, (list, tuple)) and _any_tracer(x):
            return True
    return False


def _static_ints(name: str, what: str, value: Any) -> np.ndarray:
    """`value` as a static int64 array, or the error a traced shape argument deserves."""
    if _any_tracer([value]):
        raise ConcretizationTypeError(
            f"anp.{name}: `{what}` must be static (Python ints or a numpy array), got a "
            f"traced value at {format_site()}; the result's shape would depend on it")
    arr = np.asarray(value)
    if arr.dtype.kind not in "iub" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise TypeError(f"anp.{name}: `{what}` must be integers, got {value!r} "
                        f"(at {format_site()})")
    return arr.astype(np.int64)


def _axis(axis: int, ndim: int, name: str) -> int:
    return anp._norm_axis(axis, ndim, name)


def _float(t: Any) -> Any:
    """`t` as a traced array of an inexact dtype (ints and bools as numpy computes them)."""
    t = anp._t(t)
    return t if t.dtype.kind == "f" else t.astype(anp._float_of(t.dtype))


def _slice_axis(t: Any, ax: int, start: int, stop: int, step: int = 1) -> Any:
    return t[(slice(None),) * ax + (slice(start, stop, step),)]


# --------------------------------------------------------------------------- pad

def _pad_pairs(name: str, what: str, value: Any, ndim: int) -> np.ndarray:
    """numpy's broadcasting of a per-axis (before, after) argument to shape (ndim, 2)."""
    arr = np.asarray(value)
    try:
        return np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ValueError(f"anp.{name}: `{what}` of shape {arr.shape} cannot be broadcast to "
                         f"({ndim}, 2) (at {format_site()})") from None


def _runs(idx: np.ndarray) -> list[tuple[int, int, int]]:
    """Split an index vector into runs (start, length, step) of step +1 or -1."""
    runs: list[tuple[int, int, int]] = []
    i = 0
    while i < len(idx):
        j = i + 1
        step = int(idx[j] - idx[i]) if j < len(idx) else 1
        if step not in (1, -1):
            step = 1
        while j < len(idx) and idx[j] - idx[j - 1] == step:
            j += 1
        runs.append((int(idx[i]), j - i, step))
        i = j
    return runs


def _take_runs(t: Any, ax: int, idx: np.ndarray) -> Any:
    """`t` indexed by the static `idx` along `ax`, as slices, flips and one concatenate
    (no gather: the derivative is slices too)."""
    pieces = []
    for start, length, step in _runs(idx):
        if step == 1:
            pieces.append(_slice_axis(t, ax, start, start + length))
        else:
            pieces.append(anp.flip(_slice_axis(t, ax, start - length + 1, start + 1), ax))
    return pieces[0] if len(pieces) == 1 else anp.concatenate(pieces, axis=ax)


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "maximum", "minimum", "mean")


@_eager()
def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Any:
    """numpy.pad: modes constant (`constant_values`, may be traced when a scalar),
    edge, reflect and symmetric (`reflect_type` "even" or "odd"), wrap, and
    maximum / minimum / mean over the whole axis. Axes are padded in order,
    each seeing the padding of the axes before it, as numpy does."""
    x = anp._t(array)
    if callable(mode):
        raise UnsupportedError(f"anp.pad: a function as `mode` is not supported "
                               f"(at {format_site()})")
    if mode not in _PAD_MODES:
        raise UnsupportedError(f"anp.pad: mode {mode!r} is not supported; supported modes: "
                               f"{', '.join(_PAD_MODES)} (at {format_site()})")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"},
               "symmetric": {"reflect_type"}}.get(mode, set())
    if mode in ("maximum", "minimum", "mean"):
        allowed = {"stat_length"}
    bad = set(kwargs) - allowed
    if bad:
        raise ValueError(f"anp.pad: unsupported keyword arguments for mode {mode!r}: "
                         f"{sorted(bad)} (at {format_site()})")
    if kwargs.get("stat_length") is not None:
        raise UnsupportedError(f"anp.pad: `stat_length` is not supported (at {format_site()})")
    widths = _pad_pairs("pad", "pad_width", _static_ints("pad", "pad_width", pad_width), x.ndim)
    if np.any(widths < 0):
        raise ValueError(f"anp.pad: index can't contain negative values (at {format_site()})")
    if mode == "constant":
        return _pad_constant(x, widths, kwargs.get("constant_values", 0))
    reflect_type = kwargs.get("reflect_type", "even")
    if reflect_type not in ("even", "odd"):
        raise ValueError(f"anp.pad: reflect_type must be 'even' or 'odd', got "
                         f"{reflect_type!r} (at {format_site()})")
    for ax in range(x.ndim):
        before, after = (int(w) for w in widths[ax])
        if before == after == 0:
            continue
        n = x.shape[ax]
        if n == 0:
            raise ValueError(f"anp.pad: can't extend empty axis {ax} using modes other than "
                             f"'constant' or 'empty' (at {format_site()})")
        if mode in ("maximum", "minimum", "mean"):
            stat = getattr(anp, {"maximum": "max", "minimum": "min", "mean": "mean"}[mode])(
                x, axis=ax, keepdims=True)
            if mode == "mean" and x.dtype.kind != "f":
                stat = anp.round(stat).astype(x.dtype)   # numpy rounds the mean of ints
            shape = list(x.shape)
            pieces = []
            for w, side in ((before, 0), (after, 1)):
                if w:
                    shape[ax] = w
                    block = anp.broadcast_to(stat, tuple(shape))
                    pieces = [block] + pieces if side == 0 else pieces + [block]
                if side == 0:
                    pieces.append(x)
            x = anp.concatenate(pieces, axis=ax)
            continue
        np_mode = "edge" if mode == "edge" else mode
        idx = np.pad(np.arange(n), (before, after), mode=np_mode)
        padded = _take_runs(x, ax, idx)
        if reflect_type == "odd" and mode in ("reflect", "symmetric"):
            most = n - 1 if mode == "reflect" else n   # one reflection's reach
            if before > most or after > most:
                raise UnsupportedError(
                    f"anp.pad: reflect_type='odd' with a pad wider than the axis (axis {ax}: "
                    f"{n} elements, pad ({before}, {after})) is not supported "
                    f"(at {format_site()})")
            edge = _take_runs(x, ax, np.pad(np.arange(n), (before, after), mode="edge"))
            padded = 2 * edge - padded
        x = padded
    return x


def _pad_constant(x: Any, widths: np.ndarray, values: Any) -> Any:
    traced = isinstance(values, Tracer)
    if traced:
        if values.ndim != 0:
            raise UnsupportedError(f"anp.pad: traced `constant_values` must be a scalar "
                                   f"(at {format_site()})")
        vals = None
    else:
        vals = _pad_pairs("pad", "constant_values", np.asarray(values), x.ndim)
    for ax in range(x.ndim):
        before, after = (int(w) for w in widths[ax])
        if before == after == 0:
            continue
        pieces = []
        for side, w in ((0, before), (1, after)):
            if not w:
                continue
            shape = list(x.shape)
            shape[ax] = w
            v = values if traced else np.asarray(vals[ax, side])
            block = anp.full(tuple(shape), anp.asarray(v).astype(x.dtype) if traced
                             else np.asarray(v).astype(x.dtype), x.dtype)
            pieces.append((side, block))
        left = [b for s, b in pieces if s == 0]
        right = [b for s, b in pieces if s == 1]
        x = anp.concatenate(left + [x] + right, axis=ax)
    return x


# --------------------------------------------------------------------------- repeat / tile / split

@_eager()
def repeat(a: Any, repeats: Any, axis: Any = None) -> Any:
    """numpy.repeat with static `repeats` (an int or one count per element)."""
    x = anp._t(a)
    reps = _static_ints("repeat", "repeats", repeats)
    if axis is None:
        x = anp.ravel(x)
        axis = 0
    ax = _axis(axis, x.ndim, "repeat")
    n = x.shape[ax]
    if np.any(reps < 0):
        raise ValueError(f"anp.repeat: repeats may not contain negative values "
                         f"(at {format_site()})")
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        out_shape = x.shape[:ax] + (n * r,) + x.shape[ax + 1:]
        y = anp.expand_dims(x, ax + 1)
        y = anp.broadcast_to(y, x.shape[:ax + 1] + (r,) + x.shape[ax + 1:])
        return anp.reshape(y, out_shape)
    if reps.ndim != 1 or reps.size != n:
        raise ValueError(f"anp.repeat: operands could not be broadcast together: {reps.size} "
                         f"repeats for an axis of {n} elements (at {format_site()})")
    idx = np.repeat(np.arange(n), reps)
    if idx.size == 0:
        return anp.zeros(x.shape[:ax] + (0,) + x.shape[ax + 1:], x.dtype)
    return _take_runs_repeat(x, ax, idx)


def _take_runs_repeat(x: Any, ax: int, idx: np.ndarray) -> Any:
    """Element i of axis `ax` repeated idx.count(i) times: one broadcast per element."""
    pieces = []
    for i in np.unique(idx):
        k = int(np.count_nonzero(idx == i))
        row = _slice_axis(x, ax, int(i), int(i) + 1)
        shape = list(x.shape)
        shape[ax] = k
        pieces.append(anp.broadcast_to(row, tuple(shape)) if k != 1 else row)
    return pieces[0] if len(pieces) == 1 else anp.concatenate(pieces, axis=ax)


@_eager()
def tile(A: Any, reps: Any) -> Any:
    """numpy.tile: `A` repeated `reps` times along each axis (static reps)."""
    x = anp._t(A)
    r = _static_ints("tile", "reps", reps).reshape(-1)
    r = tuple(int(v) for v in r)
    if builtins.any(v < 0 for v in r):
        raise ValueError(f"anp.tile: negative dimensions are not allowed (at {format_site()})")
    nd = builtins.max(len(r), x.ndim)
    r = (1,) * (nd - len(r)) + r
    shape = (1,) * (nd - x.ndim) + x.shape
    inter = []
    for d in shape:
        inter += [1, d]
    y = anp.reshape(x, tuple(inter))
    target = []
    for rep, d in zip(r, shape):
        target += [rep, d]
    y = anp.broadcast_to(y, tuple(target))
    return anp.reshape(y, tuple(rep * d for rep, d in zip(r, shape)))


def _split(name: str, ary: Any, indices_or_sections: Any, axis: int, equal: bool) -> list[Any]:
    x = anp._t(ary)
    ax = _axis(axis, x.ndim, name)
    n = x.shape[ax]
    spec = _static_ints(name, "indices_or_sections", indices_or_sections)
    if spec.ndim == 0:
        k = int(spec)
        if k <= 0:
            raise ValueError(f"anp.{name}: number sections must be larger than 0 "
                             f"(at {format_site()})")
        if equal and n % k:
            raise ValueError(f"anp.{name}: array split does not result in an equal division "
                             f"({n} elements into {k} sections, at {format_site()})")
        q, rem = divmod(n, k)
        sizes = [q + 1] * rem + [q] * (k - rem)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
    else:
        bounds = np.concatenate([[0], spec.reshape(-1), [n]])
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo_i = builtins.min(builtins.max(int(lo) + (n if lo < 0 else 0), 0), n)
        hi_i = builtins.min(builtins.max(int(hi) + (n if hi < 0 else 0), 0), n)
        out.append(_slice_axis(x, ax, lo_i, builtins.max(hi_i, lo_i)))
    return out


@_eager()
def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """numpy.split: `k` equal sections, or pieces between static indices (a list)."""
    return _split("split", ary, indices_or_sections, axis, True)


@_eager()
def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """numpy.array_split: like `split`, `k` sections need not be equal (the first
    `n % k` get one more element)."""
    return _split("array_split", ary, indices_or_sections, axis, False)


# --------------------------------------------------------------------------- diag / flips / rot90

@_eager()
def diag(v: Any, k: int = 0) -> Any:
    """numpy.diag: a 1-D `v` on the k-th diagonal of a square matrix, or the k-th
    diagonal of a 2-D `v`."""
    x = anp._t(v)
    k = int(_static_ints("diag", "k", k))
    if x.ndim == 2:
        return anp.diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"anp.diag: input must be 1- or 2-d, got {x.ndim}-d "
                         f"(at {format_site()})")
    n = x.shape[0] + builtins.abs(k)
    vv = anp.pad(x, (0, builtins.abs(k)))
    # k >= 0: element (i, i + k) is v[i] (row-indexed); k < 0: (j - k, j) is v[j]
    full = anp.broadcast_to(vv[:, None] if k >= 0 else vv[None, :], (n, n))
    return anp.where(np.eye(n, k=k, dtype=bool), full, np.zeros((), x.dtype))


@_eager()
def fliplr(m: Any) -> Any:
    """Reverse the columns (axis 1) of an array of at least 2 dims."""
    x = anp._t(m)
    if x.ndim < 2:
        raise ValueError(f"anp.fliplr: input must be >= 2-d (at {format_site()})")
    return anp.flip(x, 1)


@_eager()
def flipud(m: Any) -> Any:
    """Reverse the rows (axis 0) of an array of at least 1 dim."""
    x = anp._t(m)
    if x.ndim < 1:
        raise ValueError(f"anp.flipud: input must be >= 1-d (at {format_site()})")
    return anp.flip(x, 0)


@_eager()
def rot90(m: Any, k: int = 1, axes: Sequence[int] = (0, 1)) -> Any:
    """numpy.rot90: rotate by 90 degrees `k` times in the plane of `axes`
    (from the first axis towards the second)."""
    x = anp._t(m)
    if len(axes) != 2:
        raise ValueError(f"anp.rot90: len(axes) must be 2 (at {format_site()})")
    a0, a1 = (_axis(a, x.ndim, "rot90") for a in axes)
    if a0 == a1:
        raise ValueError(f"anp.rot90: axes must be different (at {format_site()})")
    k = int(_static_ints("rot90", "k", k)) % 4
    if k == 0:
        return x
    if k == 2:
        return anp.flip(x, (a0, a1))
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return anp.transpose(anp.flip(x, a1), perm)
    return anp.flip(anp.transpose(x, perm), a1)


# --------------------------------------------------------------------------- products

@_eager()
def kron(a: Any, b: Any) -> Any:
    """numpy.kron: the Kronecker product (blocks a[i, j] * b)."""
    (x, y), _, _ = anp._prep(a, b)
    nd = builtins.max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + x.shape
    ys = (1,) * (nd - y.ndim) + y.shape
    xi = anp.reshape(x, tuple(d for s in xs for d in (s, 1)))
    yi = anp.reshape(y, tuple(d for s in ys for d in (1, s)))
    return anp.reshape(xi * yi, tuple(p * q for p, q in zip(xs, ys)))


@_eager()
def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:
    """numpy.cross of 3-vectors (or 2-vectors: z of the product; one 2-vector and
    one 3-vector: the 2-vector's z is 0), the vectors along `axisa` / `axisb`,
    the result's along `axisc` (`axis` sets all three)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    (x, y), _, _ = anp._prep(a, b)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"anp.cross: zero-dimensional arrays have no vectors "
                         f"(at {format_site()})")
    x = anp.moveaxis(x, _axis(axisa, x.ndim, "cross"), -1)
    y = anp.moveaxis(y, _axis(axisb, y.ndim, "cross"), -1)
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError(f"anp.cross: incompatible dimensions for cross product (dimension "
                         f"must be 2 or 3), got {x.shape[-1]} and {y.shape[-1]} "
                         f"(at {format_site()})")
    a0, a1 = x[..., 0], x[..., 1]
    b0, b1 = y[..., 0], y[..., 1]
    if x.shape[-1] == 2 and y.shape[-1] == 2:
        return a0 * b1 - a1 * b0
    a2 = x[..., 2] if x.shape[-1] == 3 else None
    b2 = y[..., 2] if y.shape[-1] == 3 else None
    if a2 is None:
        c = [a1 * b2, -(a0 * b2), a0 * b1 - a1 * b0]
    elif b2 is None:
        c = [-(a2 * b1), a2 * b0, a0 * b1 - a1 * b0]
    else:
        c = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    out = anp.stack(anp.broadcast_arrays(*c), axis=-1)
    return anp.moveaxis(out, -1, _axis(axisc, out.ndim, "cross"))


@_eager()
def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False,
             indexing: str = "xy") -> list[Any]:
    """numpy.meshgrid: coordinate arrays from 1-D coordinate vectors (each input is
    flattened); `indexing` "xy" (Cartesian: the first two outputs' axes swapped)
    or "ij" (matrix); `sparse` leaves them unbroadcast. Returns a list, as jax."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"anp.meshgrid: Valid values for `indexing` are 'xy' and 'ij' "
                         f"(at {format_site()})")
    ts = [anp.ravel(anp._t(x)) for x in xi]
    nd = len(ts)
    out = []
    for i, t in enumerate(ts):
        pos = i
        if indexing == "xy" and nd > 1 and i < 2:
            pos = 1 - i
        shape = [1] * nd
        shape[pos] = t.shape[0]
        out.append(anp.reshape(t, tuple(shape)))
    if not sparse and out:
        out = anp.broadcast_arrays(*out)
    return list(out)


# --------------------------------------------------------------------------- closeness / NaN

@_eager()
def isclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08,
            equal_nan: bool = False) -> Any:
    """|a - b| <= atol + rtol * |b| elementwise; infinities are close only to
    themselves, NaN to nothing (to NaN with `equal_nan`)."""
    (x, y), dt, _ = anp._prep(a, b)
    if dt.kind != "f":
        x, y = x.astype(anp._float_of(dt)), y.astype(anp._float_of(dt))
    finite = anp.isfinite(x) & anp.isfinite(y)
    close = anp.abs(x - y) <= atol + rtol * anp.abs(y)
    out = anp.where(finite, close, x == y)
    if equal_nan:
        out = out | (anp.isnan(x) & anp.isnan(y))
    return out


@_eager()
def allclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08,
             equal_nan: bool = False) -> Any:
    """Whether every element of `isclose(a, b, ...)` holds (a 0-d bool array)."""
    return anp.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


@_eager()
def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """NaN -> `nan`, +inf -> `posinf` (default: the dtype's largest), -inf ->
    `neginf` (default: its most negative); ints and bools unchanged."""
    t = anp._t(x)
    if t.dtype.kind != "f":
        return t
    info = np.finfo(t.dtype)
    hi = info.max if posinf is None else posinf
    lo = info.min if neginf is None else neginf
    out = anp.where(anp.isnan(t), np.asarray(nan, t.dtype) if not isinstance(nan, Tracer)
                    else nan, t)
    out = anp.where(t == np.inf, np.asarray(hi, t.dtype) if not isinstance(hi, Tracer)
                    else hi, out)
    return anp.where(t == -np.inf, np.asarray(lo, t.dtype) if not isinstance(lo, Tracer)
                     else lo, out)


def _nan_masked(a: Any, fill: float) -> tuple[Any, Any]:
    """(a with NaNs replaced by `fill`, the NaN mask) for a float `a`."""
    t = anp._t(a)
    mask = anp.isnan(t)
    return anp.where(mask, np.asarray(fill, t.dtype), t), mask


@_eager()
def nansum(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Sum treating NaN as 0 (derivative 0 at NaN entries, 1 elsewhere)."""
    t = anp._t(a)
    if t.dtype.kind == "f":
        t, _ = _nan_masked(t, 0.0)
    return anp.sum(t, axis=axis, dtype=dtype, keepdims=keepdims)


@_eager()
def nanmean(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Mean of the non-NaN entries (NaN where there are none)."""
    t = anp._t(a)
    if t.dtype.kind != "f":
        return anp.mean(t, axis=axis, dtype=dtype, keepdims=keepdims)
    if dtype is not None:
        t = t.astype(dtype)
    filled, mask = _nan_masked(t, 0.0)
    count = anp.sum(~mask, axis=axis, keepdims=keepdims).astype(t.dtype)
    return anp.sum(filled, axis=axis, keepdims=keepdims) / count


def _nan_extreme(name: str, kind: str, a: Any, axis: Any, keepdims: bool) -> Any:
    t = anp._t(a)
    red = getattr(anp, kind)
    if t.dtype.kind != "f":
        return red(t, axis=axis, keepdims=keepdims)
    filled, mask = _nan_masked(t, -np.inf if kind == "max" else np.inf)
    r = red(filled, axis=axis, keepdims=keepdims)
    all_nan = anp.all(mask, axis=axis, keepdims=keepdims)
    return anp.where(all_nan, np.asarray(np.nan, t.dtype), r)


@_eager()
def nanmax(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Maximum ignoring NaN (NaN where every entry is NaN)."""
    return _nan_extreme("nanmax", "max", a, axis, keepdims)


@_eager()
def nanmin(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Minimum ignoring NaN (NaN where every entry is NaN)."""
    return _nan_extreme("nanmin", "min", a, axis, keepdims)


@_eager()
def average(a: Any, axis: Any = None, weights: Any = None, returned: bool = False,
            keepdims: bool = False) -> Any:
    """numpy.average: the (weighted) mean over `axis`; `weights` of `a`'s shape, or
    1-D along a single `axis`; `returned` also gives the sum of the weights,
    broadcast to the result's shape."""
    t = anp._t(a)
    if weights is None:
        avg = anp.mean(t, axis=axis, keepdims=keepdims)
        axes = anp._norm_axes(axis, t.ndim, "average")
        count = math.prod(t.shape[i] for i in axes)
        scl = anp.full(avg.shape, count, avg.dtype)
    else:
        (t, w), dt, _ = anp._prep(t, weights)
        if dt.kind != "f":
            t, w = t.astype(anp._float_of(dt)), w.astype(anp._float_of(dt))
        if w.shape != t.shape:
            if axis is None:
                raise TypeError(f"anp.average: axis must be specified when shapes of a and "
                                f"weights differ (at {format_site()})")
            if isinstance(axis, (tuple, list)) or w.ndim != 1:
                raise TypeError(f"anp.average: 1D weights expected when shapes of a and "
                                f"weights differ (at {format_site()})")
            ax = _axis(axis, t.ndim, "average")
            if w.shape[0] != t.shape[ax]:
                raise ValueError(f"anp.average: length of weights differs from that of the "
                                 f"array along axis {ax} (at {format_site()})")
            w = anp.reshape(w, tuple(t.shape[ax] if i == ax else 1 for i in range(t.ndim)))
        scl = anp.sum(anp.broadcast_to(w, t.shape), axis=axis, keepdims=keepdims)
        avg = anp.sum(t * w, axis=axis, keepdims=keepdims) / scl
    if returned:
        return avg, anp.broadcast_to(scl, avg.shape)
    return avg


# --------------------------------------------------------------------------- elementwise

@_eager()
def hypot(x1: Any, x2: Any) -> Any:
    """sqrt(x1**2 + x2**2) without overflow or underflow: s * sqrt((x1/s)**2 +
    (x2/s)**2) with s = max(|x1|, |x2|). The expression equals the hypotenuse
    for every s > 0, so its derivatives are the true ones at every order, ties
    |x1| = |x2| included (s's own derivative cancels). Where both legs are 0 it
    is s itself (derivative (1/2, 1/2) * signs, as jax's), the other branch
    kept finite so that no NaN reaches the cotangents."""
    (x, y), _, _ = anp._prep(x1, x2, to_float=True)
    ax, ay = anp.abs(x), anp.abs(y)
    inf = (ax == np.inf) | (ay == np.inf)
    s = anp.maximum(ax, ay)
    zero = s == 0
    one = np.ones((), s.dtype)
    safe = anp.where(zero, one, s)
    ssq = anp.square(x / safe) + anp.square(y / safe)
    r = anp.where(zero, s, safe * anp.sqrt(anp.where(zero, one, ssq)))
    return anp.where(inf, np.asarray(np.inf, r.dtype), r)


#: 1/(2k+1)! with alternating signs: sin(u)/u = sum_k c_k u^(2k)
_SINC_TAYLOR = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]


@_eager()
def sinc(x: Any) -> Any:
    """sin(pi x) / (pi x), 1 at 0. At exactly 0 the value is the Maclaurin
    polynomial of sin(u)/u (to u^16), so derivatives there of every order up to
    16 are the true ones, as with jax's rule; elsewhere the ratio, its
    denominator kept away from 0."""
    t = _float(x)
    u = t * np.pi
    zero = t == 0
    safe = anp.where(zero, np.ones((), t.dtype), u)
    u2 = u * u
    poly = functools.reduce(lambda acc, c: acc * u2 + c, reversed(_SINC_TAYLOR[:-1]),
                            np.asarray(_SINC_TAYLOR[-1], t.dtype))
    return anp.where(zero, poly, anp.sin(safe) / safe)


# --------------------------------------------------------------------------- trace / roll / einsum

@_eager()
def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
    """numpy.trace: the sum of the `offset` diagonal of the (axis1, axis2) planes."""
    t = anp._t(a)
    d = anp.diagonal(t, int(offset), axis1, axis2)
    return anp.sum(d, axis=-1, dtype=dtype)


@_eager()
def roll(a: Any, shift: Any, axis: Any = None) -> Any:
    """numpy.roll: static shifts (an int or one per axis); axis None flattens."""
    t = anp._t(a)
    shifts = _static_ints("roll", "shift", shift)
    if axis is None:
        if shifts.ndim:
            shifts = np.asarray(shifts.sum())
        return anp.reshape(_roll_axis(anp.ravel(t), int(shifts), 0), t.shape)
    axes = np.asarray(axis).reshape(-1) if not isinstance(axis, int) else np.asarray([axis])
    shifts, axes = np.broadcast_arrays(shifts.reshape(-1), axes)
    total: dict[int, int] = {}
    for s, ax in zip(shifts, axes):
        k = _axis(int(ax), t.ndim, "roll")
        total[k] = total.get(k, 0) + int(s)
    for k, s in total.items():
        t = _roll_axis(t, s, k)
    return t


def _roll_axis(t: Any, shift: int, ax: int) -> Any:
    n = t.shape[ax]
    if n == 0 or shift % n == 0:
        return t
    s = shift % n
    return anp.concatenate([_slice_axis(t, ax, n - s, n), _slice_axis(t, ax, 0, n - s)], ax)


def expand_ellipsis(spec: str, shapes: Sequence[tuple[int, ...]]) -> tuple[str, tuple]:
    """An einsum `spec` with `...` rewritten to fresh labels, and the shape each
    operand must be broadcast to (its `...` dims broadcast together, as numpy).
    Implicit output: the broadcast `...` labels first, then the labels seen once."""
    spec = spec.replace(" ", "")
    if "..." not in spec:
        return spec, tuple(shapes)
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands "
                         f"(at {format_site()})")
    used = set(c for c in spec if c.isalpha())
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    ell_shapes = []
    for s, shp in zip(ins, shapes):
        if s.count("...") > 1 or s.replace("...", "").count(".") or \
                ("." in s and "..." not in s):
            raise ValueError(f"einsum: invalid subscripts {s!r} (at {format_site()})")
        named = len(s.replace("...", ""))
        if "..." in s:
            if len(shp) < named:
                raise ValueError(f"einsum: operand with subscripts {s!r} has {len(shp)} "
                                 f"dimensions (at {format_site()})")
            ell_shapes.append(tuple(shp[s.index("..."):s.index("...") + len(shp) - named]))
        else:
            ell_shapes.append(None)
    try:
        bshape = np.broadcast_shapes(*[e for e in ell_shapes if e is not None])
    except ValueError:
        raise ValueError(f"einsum: the dimensions covered by '...' do not broadcast: "
                         f"{[e for e in ell_shapes if e is not None]} (at {format_site()})") \
            from None
    nell = len(bshape)
    if nell > len(free):
        raise ValueError(f"einsum: too many dimensions under '...' (at {format_site()})")
    labels = "".join(free[:nell])
    new_ins, new_shapes = [], []
    for s, shp, e in zip(ins, shapes, ell_shapes):
        if e is None:
            new_ins.append(s)
            new_shapes.append(tuple(shp))
            continue
        k = len(e)
        new_ins.append(s.replace("...", labels[nell - k:]))
        i = s.index("...")
        new_shapes.append(tuple(shp[:i]) + tuple(bshape[nell - k:]) + tuple(shp[i + k:]))
    if arrow:
        out = out.replace("...", labels)
    else:
        joined = "".join(s.replace("...", "") for s in ins)
        singles = sorted(c for c in set(joined) if joined.count(c) == 1)
        out = labels + "".join(singles)
    return ",".join(new_ins) + "->" + out, tuple(new_shapes)



# --------------------------------------------------------------------------- linspace

@_eager()
def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0) -> Any:
    """numpy.linspace; `start` / `stop` may be traced (and arrays: the samples run
    along the new `axis`), so the samples are differentiable in them. Static
    ends give numpy's constant."""
    num = int(_static_ints("linspace", "num", num))
    if num < 0:
        raise ValueError(f"anp.linspace: number of samples, {num}, must be non-negative "
                         f"(at {format_site()})")
    if not _any_tracer([start, stop]):
        return anp._make_result(np.linspace(start, stop, num, endpoint=endpoint,
                                            retstep=retstep, dtype=dtype, axis=axis))
    dt = anp.result_type(start, stop, 1.0)
    a, b = anp.asarray(start).astype(dt), anp.asarray(stop).astype(dt)
    a, b = anp.broadcast_arrays(a, b)
    div = (num - 1) if endpoint else num
    delta = b - a
    shape = (num,) + a.shape
    iota = np.arange(num, dtype=dt).reshape((num,) + (1,) * a.ndim)
    if div > 0:
        step = delta / div
        y = iota * step + a
        if endpoint and num > 1:
            y = anp.concatenate([y[:-1], b[None]], axis=0)
    else:
        step = delta * np.nan
        y = anp.broadcast_to(a[None], shape) if num else anp.zeros(shape, dt)
    y = anp.moveaxis(y, 0, _axis(axis, a.ndim + 1, "linspace"))
    if dtype is not None:
        target = np.dtype(dtype)
        if target.kind in "iu":
            y = anp.floor(y)
        y = y.astype(target)
    return (y, step) if retstep else y
