"""A process's block of a global random array, drawn without the rest of it.

`mlir_autodiff.random`'s keyed draws take `out_sharding=PartitionSpec(...)`
(jax.random's keyword): inside a `shard_map` body,

    keep = ad.random.bernoulli(key, 0.9, (batch, hidden), out_sharding=P("x"))

is this process's block (rows split over mesh axis "x") of the *global*
draw `bernoulli(key, 0.9, (batch, hidden))`: the values equal the same rows
of the single-process draw with the same key, whatever the number of
processes, and no process draws more than its block (plus at most three
numbers per contiguous run, see below). `shape` is the global shape; the
result has the block's shape, and traced parameters (bernoulli's `p`,
uniform's bounds, ...) broadcast against the block.

How: a draw is counter-based (`--autodiff-lower-rng`'s stream layout):
element i of a draw at key (seed, offset) reads words i * wpe .. of the
Philox stream from block `offset` on (wpe, the words per element, is 2 for
64-bit types and 1 otherwise; four words per 128-bit block, a normal's two
elements of a Box-Muller pair in one block). A block of the global array is
a set of runs contiguous in its row-major order: one run when only the
leading dimension is split, one per index of the dimensions before the
last split one otherwise. A run starting at global element L is a draw at
(seed, offset + floor(L * wpe / 4)) of its length plus the s = L mod (4 /
wpe) elements that precede it in that Philox block, of which the first s
are dropped (s is known only at run time, from the process's position: the
candidates are compared, at most four). Runs are drawn by one draw under
`vmap` over their keys (a loop of draws in the IR).

Outside a shard_map body, an `out_sharding` naming mesh axes is a
`NameError` (the axis is unbound), as for the collectives; `PartitionSpec()`
(nothing split) is the plain draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from mlir import ir

from . import distributed
from . import numpy as anp
from .batching import vmap
from .tracing import ShapedArray, require_trace
from .transforms.lower_rng import words_per_element


def spec_axes(spec: Any, who: str) -> list[tuple[str, ...]]:
    """Per dimension of `spec`, the mesh axes it is split over (empty: not split)."""
    if not isinstance(spec, distributed.PartitionSpec):
        raise TypeError(f"{who}: out_sharding must be an ad.PartitionSpec, got {spec!r}")
    out: list[tuple[str, ...]] = []
    for entry in spec:
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        out.append(names)
    return out


def is_split(spec: Any, who: str) -> bool:
    """Whether `spec` names any mesh axis (a PartitionSpec of Nones is the plain draw)."""
    return spec is not None and any(spec_axes(spec, who))


def _position(names: tuple[str, ...], who: str) -> tuple[Any, int]:
    """(this process's index along the axes `names` taken together, row-major; their
    total size)."""
    index: Any = None
    size = 1
    for name in names:
        ctx, (axis,) = distributed._mesh_for(f"{who} out_sharding", name)
        n = ctx.mesh.shape[axis]
        i = anp.astype(distributed.axis_index(name), np.int64)
        index = i if index is None else index * n + i
        size *= n
    return index, size


def block_draw(k: Any, emit: Callable[..., Any], shape: tuple[int, ...], dtype: np.dtype,
               distribution: str, spec: Any, who: str, **params: float) -> Any:
    """This process's block, split per `spec`, of key `k`'s draw of `shape`.

    `emit(key, shape, dtype, distribution, **params)` emits one keyed draw; it is
    called with keys derived from `k` (its offset moved to each run's block)."""
    axes = spec_axes(spec, who)
    if len(axes) > len(shape):
        raise ValueError(f"{who}: out_sharding {spec!r} has more entries than the shape "
                         f"{shape} has dimensions")
    seen = [n for names in axes for n in names]
    if len(set(seen)) != len(seen):
        raise ValueError(f"{who}: out_sharding {spec!r} names a mesh axis twice")
    local = list(shape)
    starts: list[Any] = [None] * len(shape)   # traced first global index per split dim
    for d, names in enumerate(axes):
        if not names:
            continue
        index, size = _position(names, who)
        if shape[d] % size:
            raise ValueError(f"{who}: dimension {d} of the shape {shape} is split over "
                             f"mesh axes {names} of size {size}, which does not divide it")
        local[d] = shape[d] // size
        starts[d] = index * local[d]
    split = [d for d, s in enumerate(starts) if s is not None]
    if not split:
        return emit(k, shape, dtype, distribution, **params)
    last = split[-1]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    run = local[last] * strides[last]                 # elements of one contiguous run
    lead = local[:last]                               # the runs: one per index of these
    q = 4 // words_per_element(_element_type(dtype, who))  # elements per Philox block
    # the global element index of each run's start: the sum over d <= last of
    # (start_d + i_d) * stride_d, i_d the run's index in dimension d < last
    first: Any = anp.zeros((), np.int64)
    coefficients = []                                 # of the terms that vary
    for d in range(last + 1):
        if starts[d] is not None:
            first = first + starts[d] * strides[d]
            coefficients.append(local[d] * strides[d])
    grid = np.zeros(lead, np.int64)
    for d, n in enumerate(lead):
        grid = grid + (np.arange(n, dtype=np.int64) * strides[d]).reshape(
            [n if j == d else 1 for j in range(len(lead))])
        if n > 1:
            coefficients.append(strides[d])
    firsts = anp.reshape(first + grid, (-1,))
    aligned = all(c % q == 0 for c in coefficients)   # every run starts a Philox block
    extra = 0 if aligned else q - 1
    k = anp.asarray(k)

    def one_run(first: Any) -> Any:
        block = first // q                            # whole Philox blocks before the run
        key = anp.stack([k[0], k[1] + block])
        values = emit(key, (run + extra,), dtype, distribution, **params)
        out = values[:run]
        if extra:
            skip = first - block * q
            for s in range(1, q):
                out = anp.where(skip == s, values[s:s + run], out)
        return out

    flat = one_run(firsts[0]) if firsts.shape[0] == 1 else vmap(one_run)(firsts)
    return anp.reshape(flat, tuple(local))


def _element_type(dtype: np.dtype, who: str) -> ir.Type:
    """The MLIR element type of `dtype` (the stream layout counts its words)."""
    context = require_trace(who).context
    with context, ir.Location.unknown(context):
        return ShapedArray((), dtype).mlir_type().element_type
