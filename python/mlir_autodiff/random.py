"""`mlir_autodiff.random`: stateful random draws, as `torch.rand` inside a model.

    import mlir_autodiff as ad

    ad.random.manual_seed(0)

    @ad.jit
    def noisy(x):
        return x + ad.random.normal(x.shape, x.dtype, std=0.1)

Inside a trace each draw emits one `autodiff.random` op (a draw from the
implicit generator); nothing random happens in Python. When `jit` compiles a
module with draws it runs `--autodiff-functionalize-rng` before the
transforms, so `grad`, `checkpoint` and `vmap` replay exactly the forward's
numbers, and `--autodiff-lower-rng` after them (Philox4x32-10). The compiled
function then takes the generator state `(seed, offset)` and returns the
advanced offset: the runtime passes this module's process-wide state in and
stores the offset it gets back, so consecutive calls draw fresh numbers and
`manual_seed` replays a run bit for bit, even across separately compiled
programs (the numbers depend only on seed, offset and the draw's shape).

Outside a trace the functions run eagerly: they compile (once per shape,
dtype and parameters) and draw from the same generator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import dialects
from .tracing import ShapedArray, Tracer, canonical_dtype, current_trace

#: torch's default seed, so an unseeded program is still reproducible.
DEFAULT_SEED = 67280421310721
_MASK64 = (1 << 64) - 1

ShapeLike = int | Sequence[int]


class _Generator:
    """The implicit generator: a Philox key and the next free counter block.

    Process-wide, like torch's default generator; `lock` makes a compiled call's
    read-draw-advance of the offset atomic, so threads never share counter blocks.
    """

    def __init__(self) -> None:
        self.seed = DEFAULT_SEED
        self.offset = 0
        self.lock = threading.RLock()


_GEN = _Generator()


def manual_seed(seed: int) -> None:
    """Seed the implicit generator and rewind it (torch.manual_seed).

    `seed` is any Python int; it is taken modulo 2**64.
    """
    if isinstance(seed, (bool, float)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    with _GEN.lock:
        _GEN.seed = int(seed) & _MASK64
        _GEN.offset = 0


def seed(seed: int) -> None:
    """Alias of `manual_seed` (numpy's and torch's spelling)."""
    manual_seed(seed)


def get_state() -> tuple[int, int]:
    """The generator state `(seed, offset)`; pass it to `set_state` to replay from here."""
    with _GEN.lock:
        return _GEN.seed, _GEN.offset


def set_state(state: tuple[int, int]) -> None:
    """Restore a state returned by `get_state`."""
    s, o = state
    with _GEN.lock:
        _GEN.seed = int(s) & _MASK64
        _GEN.offset = int(o) & _MASK64


def call_with_state(call: Callable[[list[Any]], list[Any]], args: list[Any]) -> list[Any]:
    """Run a compiled function whose RNG state was functionalized.

    `call(args + [seed, offset])` must return the function's results with the
    advanced offset last (`--autodiff-functionalize-rng`'s contract); that offset
    is stored, so the next call draws after this one's numbers. Returns the
    other results.
    """
    with _GEN.lock:
        state = [np.array(v, dtype=np.uint64).view(np.int64) for v in (_GEN.seed, _GEN.offset)]
        outs = call(list(args) + state)
        # i64 on the MLIR side, an unsigned block counter here (it wraps mod 2**64).
        _GEN.offset = int(np.asarray(outs[-1], dtype=np.int64).view(np.uint64))
    return outs[:-1]


# --------------------------------------------------------------------------- helpers

def _shape(shape: ShapeLike, who: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{who}: shape must be an int or a sequence of ints, got "
                        f"{shape!r}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"{who}: negative dimensions are not allowed, got {out}")
    return out


def _float_dtype(dtype: Any, who: str) -> np.dtype:
    dt = canonical_dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"{who}: dtype must be float32 or float64, got {dt}")
    return dt


def _is_static_scalar(x: Any) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, bool))


def _eager(fname: str, dynamic: Sequence[Any], static: dict[str, Any]) -> Any:
    """Run `fname(*dynamic, **static)` compiled, outside any trace."""
    return _EAGER(fname, tuple(sorted(static.items())), *dynamic)


def _eager_body(fname: str, static: tuple[tuple[str, Any], ...], *dynamic: Any) -> Any:
    return globals()[fname](*dynamic, **dict(static))


def _make_eager() -> Any:
    from .api import JitFunction

    return JitFunction(_eager_body, static_argnums=(0, 1))


class _LazyEager:
    """The jitted eager entry point, built on first use (api imports are not free)."""

    _fn: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._fn is None:
            self._fn = _make_eager()
        return self._fn(*args)


_EAGER = _LazyEager()


def _draw(shape: tuple[int, ...], dtype: np.dtype, distribution: str,
          **params: float) -> Tracer:
    """Emit `autodiff.random` in the active trace."""
    trace = current_trace()
    assert trace is not None
    aval = ShapedArray(shape, dtype)
    with trace.emitting():
        value = dialects.random(aval.mlir_type(), distribution, **params)
    return trace.wrap(value, aval)


# --------------------------------------------------------------------------- draws

def uniform(shape: ShapeLike = (), dtype: Any = np.float32, low: Any = 0.0,
            high: Any = 1.0) -> Any:
    """Samples from U[low, high) (torch.rand / torch.empty(...).uniform_(low, high)).

    `low`/`high` may be traced values (broadcast against `shape`): the draw is
    then `low + (high - low) * U[0, 1)`, differentiable in both.
    """
    who = "random.uniform"
    shape = _shape(shape, who)
    dt = _float_dtype(dtype, who)
    static = _is_static_scalar(low) and _is_static_scalar(high)
    if current_trace() is None:
        if static:
            return _eager("uniform", [], dict(shape=shape, dtype=dt.str, low=float(low),
                                              high=float(high)))
        return _eager("uniform", [low, high], dict(shape=shape, dtype=dt.str))
    if static:
        if not float(low) <= float(high):
            raise ValueError(f"{who}: expected low <= high, got low={low}, high={high}")
        return _draw(shape, dt, "uniform", low=float(low), high=float(high))
    from . import numpy as anp

    u = _draw(shape, dt, "uniform")
    low, high = anp.asarray(low), anp.asarray(high)
    out = low + (high - low) * u
    return anp.astype(out, dt) if out.dtype != dt else out


def rand(*shape: int, dtype: Any = np.float32) -> Any:
    """torch.rand: U[0, 1) of the given shape."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return uniform(shape, dtype)


def normal(shape: ShapeLike = (), dtype: Any = np.float32, mean: Any = 0.0,
           std: Any = 1.0) -> Any:
    """Samples from N(mean, std**2) (torch.randn * std + mean).

    `mean`/`std` may be traced values: the draw is then `mean + std * z` with
    z ~ N(0, 1) (the reparameterization), differentiable in both.
    """
    who = "random.normal"
    shape = _shape(shape, who)
    dt = _float_dtype(dtype, who)
    static = _is_static_scalar(mean) and _is_static_scalar(std)
    if current_trace() is None:
        if static:
            return _eager("normal", [], dict(shape=shape, dtype=dt.str, mean=float(mean),
                                             std=float(std)))
        return _eager("normal", [mean, std], dict(shape=shape, dtype=dt.str))
    if static:
        if float(std) < 0:
            raise ValueError(f"{who}: std must be >= 0, got {std}")
        return _draw(shape, dt, "normal", mean=float(mean), std=float(std))
    from . import numpy as anp

    z = _draw(shape, dt, "normal")
    out = anp.asarray(mean) + anp.asarray(std) * z
    return anp.astype(out, dt) if out.dtype != dt else out


def randn(*shape: int, dtype: Any = np.float32) -> Any:
    """torch.randn: N(0, 1) of the given shape."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return normal(shape, dtype)


def bernoulli(p: Any = 0.5, shape: ShapeLike | None = None) -> Any:
    """Boolean samples, True with probability `p` (jax.random.bernoulli without a key).

    `shape` defaults to the shape of `p`; `p` broadcasts against it. The
    draw is `U[0, 1) < p`, so p = 0 never and p = 1 always gives True.
    """
    who = "random.bernoulli"
    static = _is_static_scalar(p)
    if static and not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{who}: p must be in [0, 1], got {p}")
    if shape is None:
        shape = () if static else np.shape(p) if not isinstance(p, Tracer) else p.shape
    shape = _shape(shape, who)
    if current_trace() is None:
        if static:
            return _eager("bernoulli", [], dict(p=float(p), shape=shape))
        return _eager("bernoulli", [p], dict(shape=shape))
    from . import numpy as anp

    dt = np.float32
    if not static:
        p = anp.asarray(p)
        dt = p.dtype if np.issubdtype(p.dtype, np.floating) else np.float32
    return _draw(shape, np.dtype(dt), "uniform") < p


def dropout(x: Any, p: float = 0.5, training: bool = True) -> Any:
    """Zero each element of `x` with probability `p`, scale the rest by 1/(1-p).

    torch.nn.functional.dropout's semantics: with `training=False` (or p = 0)
    it is the identity; p = 1 gives zeros. The mask is one `autodiff.random`
    draw, so its gradient (mask / (1 - p)) is the forward's exact mask: the
    backward pass reuses the saved mask or, under `checkpoint`, recomputes it
    from the same seed and offset.
    """
    who = "dropout"
    if not _is_static_scalar(p):
        raise TypeError(f"{who}: p must be a Python float, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{who}: dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if current_trace() is None:
        return _eager("dropout", [x], dict(p=p, training=True))
    from . import numpy as anp

    x = anp.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{who}: x must be a float array, got {x.dtype}")
    if p == 1.0:
        return anp.zeros_like(x)
    keep = _draw(tuple(x.shape), x.dtype, "uniform") >= p  # P(u >= p) = 1 - p for u ~ U[0, 1)
    return anp.where(keep, x * (1.0 / (1.0 - p)), 0.0)


__all__ = [
    "DEFAULT_SEED",
    "bernoulli",
    "call_with_state",
    "dropout",
    "get_state",
    "manual_seed",
    "normal",
    "rand",
    "randn",
    "seed",
    "set_state",
    "uniform",
]
