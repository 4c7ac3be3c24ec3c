"""Gathers and scatters: integer-array and traced indices in `x[idx]` and
`x.at[idx]` (numpy.py calls here), which `numpy.take` / `take_along_axis`
and `lax.dynamic_slice` & co. build on.

Every form lowers to two primitives (`primitives.gather` / `scatter`):

* a gather is one `linalg.generic` over the result whose body computes each
  index from the index tensors and reads the operand with `tensor.extract`;
* a scatter is one `scf.for` over the update elements, in row-major order,
  each step a `tensor.extract` / `tensor.insert` of the carried array.

Semantics (jax's, for traced indices):

* negative indices wrap once (`-1` is the last element);
* out of range, a gather *clamps* to the nearest valid index (`x[idx]`,
  `x.at[idx].get()`); `take` / `take_along_axis` default to jax's
  `mode="fill"` (NaN for floats) and accept `"clip"` and `"wrap"`;
* out of range, a scatter *drops* the update (`x.at[idx].set/add/...`);
* duplicate indices: `add`, `multiply`, `min`, `max` combine every update;
  `set` applies the updates in row-major order of the (broadcast) index
  arrays, so the last duplicate wins (jax leaves the winner unspecified);
* `lax.dynamic_slice` / `dynamic_update_slice` clamp the start so that the
  whole window lies inside the operand, as jax does.

Indexing mixes basic and advanced items as numpy defines it: the integer
arrays (and the integers among them) broadcast together; their dims replace
the indexed dims in place when the advanced items are adjacent, else they
come first. Boolean masks (data-dependent shapes) are not supported.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import primitives as P
from .errors import UnsupportedError
from .index_items import expand_ellipsis
from .tracing import Tracer, as_tracer, format_site

_I64 = np.dtype(np.int64)


# --------------------------------------------------------------------------- index items

def _is_array_item(i: Any) -> bool:
    """Whether `i` is an advanced (array or traced) index item."""
    if isinstance(i, Tracer):
        return True
    if isinstance(i, (list, tuple, np.ndarray)):
        return not (isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype.kind in "iu")
    return False


def has_array_items(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return builtins.any(_is_array_item(i) for i in items)


def _int_tracer(i: Any, what: str = "index") -> Tracer:
    """An integer index item as a traced int array (TypeError for other dtypes)."""
    if isinstance(i, Tracer):
        t = i
    else:
        arr = np.asarray(i)
        if arr.dtype == object:
            raise TypeError(f"{what} must be integers, got {type(i).__name__} at {format_site()}")
        if arr.size == 0 and arr.dtype.kind == "f":  # [] indexes nothing
            arr = arr.astype(np.int64)
        t = P.constant_like(arr)
    if t.dtype.kind == "b":
        raise UnsupportedError(
            f"boolean array indices (masks) are not supported at {format_site()}: the "
            "result's shape would depend on the values; use anp.where")
    if t.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got an array of dtype {t.dtype} at "
                        f"{format_site()}")
    return t


class _Advanced:
    """A numpy index with integer-array or traced items, resolved against a shape.

    `basic` reads/writes the slices (all dims kept); `spec` and `shape` index the
    sliced array with the broadcast integer arrays (primitives.gather/scatter).
    """

    def __init__(self, shape: tuple[int, ...], idx: Any, basic_index: Any) -> None:
        items = expand_ellipsis(list(idx) if isinstance(idx, tuple) else [idx], len(shape),
                                format_site())
        basic: list[Any] = []
        adv: list[tuple[int, int, Tracer]] = []  # (item position, operand dim, indices)
        dim = 0
        for pos, it in enumerate(items):
            if it is None:
                continue
            if isinstance(it, slice):
                for part in (it.start, it.stop, it.step):
                    if isinstance(part, Tracer):
                        raise UnsupportedError(
                            f"slice bounds must be static Python ints, got a traced value at "
                            f"{format_site()}; use lax.dynamic_slice")
                basic.append(it)
            elif isinstance(it, (bool, np.bool_)):
                raise UnsupportedError(f"boolean indices are not supported (at {format_site()})")
            else:
                if isinstance(it, (float, np.floating)):
                    raise TypeError(f"indices must be integers, got {type(it).__name__} at "
                                    f"{format_site()}")
                adv.append((pos, dim, _int_tracer(it)))
                basic.append(slice(None))
            dim += 1
        self.basic = basic_index(shape, tuple(basic))
        sliced = self.basic.result_shape
        self.bshape = P.broadcast_shapes("indexing", *[t.shape for _, _, t in adv])
        positions = [p for p, _, _ in adv]
        adjacent = positions == list(range(positions[0], positions[-1] + 1))
        nb = len(self.bshape)
        out: list[int] = []
        spec: list[Any] = [None] * len(shape)
        start = None
        if not adjacent:
            start = 0
            out.extend(self.bshape)
        dim = 0
        for pos, it in enumerate(items):
            if it is None:
                out.append(1)
                continue
            if pos in positions:
                if start is None:
                    start = len(out)
                    out.extend(self.bshape)
            else:
                spec[dim] = len(out)
                out.append(sliced[dim])
            dim += 1
        bdims = list(range(start, start + nb))
        for _, d, t in adv:
            spec[d] = (P.broadcast_to(t, self.bshape, "indexing") if t.shape != self.bshape
                       else t, bdims)
        self.spec = spec
        self.shape = out

    def read(self, x: Tracer) -> Tracer:
        return P.gather(self.basic.read(x), self.spec, self.shape)

    def update(self, x: Tracer, values: Any, kind: str, opname: str) -> Tracer:
        val = P.convert(as_tracer(values), x.dtype)
        val = P.broadcast_to(val, self.shape, opname)
        part = self.basic.read(x)
        new = P.scatter(part, self.spec, val, kind)
        if part is x:
            return new
        return self.basic.write(x, new)


def check_options(opname: str, options: dict[str, Any], modes: Sequence[str]) -> None:
    """jax's keyword options of `x.at[idx]` methods: the hints are accepted
    (ignored); `mode` may only name what we do (gathers clamp, scatters drop)."""
    for k, v in options.items():
        if k in ("indices_are_sorted", "unique_indices"):
            continue
        if k == "mode" and (v is None or str(getattr(v, "name", v)).lower() in modes):
            continue
        raise UnsupportedError(
            f"{opname}: option {k}={v!r} is not supported (at {format_site()}); out-of-range "
            f"indices {'clamp' if opname.endswith('get') else 'are dropped'}")


def advanced_getitem(x: Tracer, idx: Any, basic_index: Any) -> Tracer:
    """x[idx] with array/traced items; `basic_index` resolves the slices
    (numpy's `_Index`: one extract_slice, flips)."""
    return _Advanced(x.shape, idx, basic_index).read(x)


def advanced_update(x: Tracer, idx: Any, values: Any, kind: str, opname: str,
                    basic_index: Any) -> Tracer:
    """x.at[idx].<kind>(values) with array/traced items (kind: set/add/mul/min/max)."""
    return _Advanced(x.shape, idx, basic_index).update(x, values, kind, opname)
