"""Eager arrays: what `mlir_autodiff.numpy` returns outside a trace, and what
`jit` returns, so that code written for `jit` also runs without it.

`Array` is a thin subclass of `numpy.ndarray` (no copy: a view of numpy's
result). It is an ndarray in every respect — `isinstance(x, np.ndarray)`,
numpy functions and ufuncs, printing (as numpy prints), pickling, and as a
`jit` argument — and adds what traced values have and ndarrays lack:

- `x.at[idx].set(v)` / `.add` / `.subtract` / `.multiply` (`.mul`) /
  `.divide` / `.power` / `.min` / `.max` / `.get()`: functional updates
  returning a new array, with the traced semantics (indexing.py): negative
  array indices wrap once; out of range, `get` clamps and the updates drop;
  duplicate indices combine every update, and `set` keeps the last one in
  row-major order; values are cast to `x.dtype` first (inside a trace the
  update is traced, as its index or values may be);
- `x.sort()` and `x.argsort()` return a (stable) sorted copy, as traced
  values (and jax arrays) do, instead of sorting in place (the same code as
  `anp.sort` / `anp.argsort` outside a trace, below);
- `x.weak_type` (False: an array is strongly typed).

numpy's own functions (`np.sort`, `np.unique`, `np.median`, ...) receive plain
ndarrays (`__array_function__`), so the overridden methods never change
their meaning; their array results come back as `Array`s.

Known difference: plain `x[idx]` keeps numpy's behaviour (an out-of-range
array index raises IndexError where a traced gather clamps); `x.at[idx].get()`
clamps in both. Reductions to a scalar return numpy scalars, as numpy does.
A donated argument's buffer that `jit` hands back is the plain ndarray it
received (the caller's own array when that was a plain ndarray).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import UnsupportedError
from .index_items import expand_ellipsis


class Array(np.ndarray):
    """An ndarray with the traced-value extras (`.at`, jax's `sort`); see the module doc."""

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __array_wrap__(self, arr: np.ndarray, context: Any = None,
                       return_scalar: bool = False) -> Any:
        # As for ndarrays: a reduction to a scalar gives a numpy scalar (hashable,
        # printed as numpy prints it), not a 0-d subclass instance.
        if return_scalar:
            return arr[()]
        return super().__array_wrap__(arr, context, return_scalar)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # numpy's functions see plain ndarrays: several call methods this class
        # overrides with jax's meaning (np.sort, np.unique, np.median sort a copy
        # *in place* with `.sort()`, which here returns a sorted copy instead and
        # would leave theirs unsorted). Array results come back as Arrays.
        return wrap(func(*_plain(args), **_plain(kwargs)))

    def __getitem__(self, idx: Any) -> Any:
        # Inside a trace, an index holding a traced value (`table[i]` with a traced
        # `i`, as jax arrays allow) gathers from this array as a traced constant.
        if traced_getitem is not None:
            out = traced_getitem(self, idx)
            if out is not None:
                return out
        return super().__getitem__(idx)

    @property
    def at(self) -> _IndexUpdateHelper:
        """Functional updates: `x.at[idx].set(v)`, `.add(v)`, `.get()`..."""
        return _IndexUpdateHelper(self)

    @property
    def weak_type(self) -> bool:
        return False

    def sort(self, axis: Any = -1, **kwargs: Any) -> Array:  # type: ignore[override]
        """A stable sorted copy (as traced values and jax), not numpy's in-place sort."""
        return wrap(eager_sort(self, axis, **kwargs))

    def argsort(self, axis: Any = -1, **kwargs: Any) -> Array:  # type: ignore[override]
        """Indices of a stable sort (ties keep their order), as traced values."""
        return wrap(eager_argsort(self, axis, **kwargs))


def _plain(x: Any) -> Any:
    """`x` with every Array (in tuples, lists and dicts too) viewed as an ndarray."""
    if isinstance(x, Array):
        return x.view(np.ndarray)
    t = type(x)
    if t is tuple or t is list:
        return t(_plain(v) for v in x)
    if t is dict:
        return {k: _plain(v) for k, v in x.items()}
    return x


def wrap(x: Any) -> Any:
    """`x` as an `Array` when it is a plain ndarray (a view, no copy); tuples and
    lists of arrays element by element; anything else unchanged."""
    t = type(x)
    if t is np.ndarray:
        return x.view(Array)
    if t is tuple or t is list:
        return t(wrap(v) for v in x)
    return x


# --------------------------------------------------------------------------- sorting
# jax's sort/argsort on numpy values: `anp.sort` outside a trace and `Array.sort`.

def eager_sort(a: Any, axis: Any = -1, *, kind: Any = None, order: Any = None,
               stable: bool = True, descending: bool = False) -> np.ndarray:
    sort_args("sort", kind, order)
    arr = np.asarray(a)
    if axis is None:
        arr, axis = arr.ravel(), 0
    out = np.sort(arr, axis=axis, kind="stable")
    return np.flip(out, axis=axis) if descending else out


def eager_argsort(a: Any, axis: Any = -1, *, kind: Any = None, order: Any = None,
                  stable: bool = True, descending: bool = False) -> np.ndarray:
    sort_args("argsort", kind, order)
    arr = np.asarray(a)
    if axis is None:
        arr, axis = arr.ravel(), 0
    if not descending:
        return np.argsort(arr, axis=axis, kind="stable")
    n = arr.shape[axis]
    idx = np.argsort(np.flip(arr, axis=axis), axis=axis, kind="stable")
    return np.flip(n - 1 - idx, axis=axis)


def sort_args(name: str, kind: Any, order: Any) -> None:
    if kind is not None:
        raise TypeError(f"'kind' argument to {name} is not supported; the sort is always "
                        "stable (use stable=True/False)")
    if order is not None:
        raise TypeError(f"'order' argument to {name} is not supported")


# --------------------------------------------------------------------------- x.at[idx]

_GET_MODES = ("clip", "promise_in_bounds")
_UPDATE_MODES = ("drop", "promise_in_bounds")


def _check_options(opname: str, options: dict[str, Any], modes: tuple[str, ...]) -> None:
    for k, v in options.items():
        if k in ("indices_are_sorted", "unique_indices"):
            continue
        if k == "mode" and (v is None or str(getattr(v, "name", v)).lower() in modes):
            continue
        raise UnsupportedError(
            f"{opname}: option {k}={v!r} is not supported; out-of-range indices "
            f"{'clamp' if opname.endswith('get') else 'are dropped'}")


def _is_array_item(i: Any) -> bool:
    if isinstance(i, (list, tuple, np.ndarray)):
        return not (isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype.kind in "iu")
    return False


def _items(shape: tuple[int, ...], idx: Any) -> list[Any] | None:
    """`idx` as a list of items with integer-array items normalized to int64 arrays
    and the ellipsis expanded; None when numpy's own indexing applies (no
    integer-array item, or a boolean mask)."""
    items = list(idx) if isinstance(idx, tuple) else [idx]
    if not builtins.any(_is_array_item(i) for i in items):
        return None
    arrays = {}
    for k, it in enumerate(items):
        if _is_array_item(it):
            arr = np.asarray(it)
            if arr.dtype.kind == "b":
                return None
            if arr.size == 0 and arr.dtype.kind == "f":
                arr = arr.astype(np.int64)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"indices must be integers, got an array of dtype {arr.dtype}")
            arrays[k] = arr.astype(np.int64)
    return expand_ellipsis([arrays.get(k, it) for k, it in enumerate(items)], len(shape))


def _array_dims(items: list[Any]) -> list[tuple[int, int]]:
    """(item position, operand dim) of the integer-array items."""
    out, dim = [], 0
    for k, it in enumerate(items):
        if it is None:
            continue
        if isinstance(it, np.ndarray) and it.dtype == np.int64 and _is_array_item(it):
            out.append((k, dim))
        dim += 1
    return out


def _gather(x: np.ndarray, idx: Any) -> Any:
    """x[idx]; integer-array indices wrap once when negative and clamp out of range."""
    items = _items(x.shape, idx)
    if items is None:
        return x[idx]
    for k, d in _array_dims(items):
        n = x.shape[d]
        a = items[k]
        items[k] = np.clip(np.where(a < 0, a + n, a), 0, builtins.max(n - 1, 0))
    return x[tuple(items)]


def _scatter(x: np.ndarray, idx: Any, values: Any, ufunc: Any) -> np.ndarray:
    """A copy of `x` with `values` stored (`ufunc` None) or combined by `ufunc.at` at
    x[idx]; integer-array indices wrap once when negative, out of range they drop."""
    out = np.array(x)
    vals = np.asarray(values).astype(x.dtype)
    items = _items(x.shape, idx)
    if items is None:  # basic indices (or masks): numpy's own assignment
        out[idx] = vals if ufunc is None else ufunc(out[idx], vals).astype(x.dtype)
        return out
    # Flat positions of the selected elements, with one extra "sink" slot (-1) per
    # array-indexed dim that out-of-range indices point at.
    dims = _array_dims(items)
    pos = np.arange(math.prod(x.shape), dtype=np.int64).reshape(x.shape)
    pad = [(0, 0)] * x.ndim
    for k, d in dims:
        n = x.shape[d]
        a = items[k]
        a = np.where(a < 0, a + n, a)
        items[k] = np.where((a >= 0) & (a < n), a, n)
        pad[d] = (0, 1)
    pos = np.pad(pos, pad, constant_values=-1)
    sel = pos[tuple(items)]
    flat_sel = sel.ravel()
    flat_v = np.broadcast_to(vals, sel.shape).ravel()
    keep = flat_sel >= 0
    flat = out.reshape(-1)
    if ufunc is None:
        flat[flat_sel[keep]] = flat_v[keep]  # duplicates: the last one stays
    else:
        ufunc.at(flat, flat_sel[keep], flat_v[keep])
    return flat.reshape(x.shape)


class _IndexUpdateRef:
    """`x.at[idx]` of an eager array (the traced one is numpy._IndexUpdateRef)."""

    def __init__(self, x: np.ndarray, idx: Any) -> None:
        self.x = np.asarray(x)
        self.idx = idx

    def get(self, **options: Any) -> Any:
        """x[idx]; out-of-range array indices clamp."""
        _check_options("at[].get", options, _GET_MODES)
        return wrap(np.asarray(_gather(self.x, self.idx)))

    def _update(self, values: Any, ufunc: Any, opname: str, options: dict[str, Any]) -> Array:
        _check_options(opname, options, _UPDATE_MODES)
        return wrap(_scatter(self.x, self.idx, values, ufunc))

    def set(self, values: Any, **options: Any) -> Array:
        return self._update(values, None, "at[].set", options)

    def add(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.add, "at[].add", options)

    def subtract(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.subtract, "at[].subtract", options)

    def multiply(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.multiply, "at[].multiply", options)

    mul = multiply

    def divide(self, values: Any, **options: Any) -> Array:
        return self._update(values, _DIVIDE, "at[].divide", options)

    def power(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.power, "at[].power", options)

    def min(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.minimum, "at[].min", options)

    def max(self, values: Any, **options: Any) -> Array:
        return self._update(values, np.maximum, "at[].max", options)


class _Divide:
    """x / v as the traced update computes it; `.at` (array indices): x * (1 / v)."""

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.true_divide(a, b)

    def at(self, a: np.ndarray, idx: np.ndarray, b: np.ndarray) -> None:
        if a.dtype.kind != "f":
            raise UnsupportedError("at[].divide of an integer array with array indices is "
                                   "not supported")
        np.multiply.at(a, idx, np.reciprocal(b))


_DIVIDE: Callable[..., Any] = _Divide()


#: Set by numpy.py: (x, idx) -> the traced `x[idx]` of the constant `x` when `idx`
#: holds a traced value (inside a trace), else None.
traced_getitem: Callable[[np.ndarray, Any], Any] | None = None

#: Set by numpy.py: (x, idx) -> the traced `x.at[idx]` of the constant `x` while a
#: trace is active (its index or values may be traced), else None.
traced_at: Callable[[np.ndarray, Any], Any] | None = None


class _IndexUpdateHelper:
    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def __getitem__(self, idx: Any) -> Any:
        if traced_at is not None:
            ref = traced_at(self.x, idx)
            if ref is not None:
                return ref
        return _IndexUpdateRef(self.x, idx)


__all__ = ["Array", "eager_argsort", "eager_sort", "sort_args", "wrap"]
