"""`mlir_autodiff.nn.initializers`: parameter initializers with jax.nn.initializers'
calling convention.

An initializer is a function `init(key, shape, dtype=float32) -> array` of an
explicit key from `mlir_autodiff.random.key` (or `split` / `fold_in`), pure like
any keyed draw: it works eagerly and inside `jit`/`vmap`, and the same key gives
the same array. The factories (`normal(stddev)`, `glorot_uniform()`, ...) return
one; `zeros` and `ones` are initializers themselves, as in jax. The numbers are
this project's Philox stream, not jax's: the distributions match, the draws don't.

`variance_scaling` computes the fans as jax does: `in_axis` / `out_axis` give the
input and output sizes, every other axis (less `batch_axis`) is the receptive
field that multiplies both. Its "truncated_normal" distribution draws from a
normal truncated to [-2, 2] and rescaled to unit variance (std / 0.8796...).
`orthogonal` and `delta_orthogonal` are not provided (they need a QR
decomposition).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from . import numpy as anp
from . import random
from . import special_math as _sm

Initializer = Callable[..., Any]
DEFAULT_DTYPE = np.float32
#: The standard deviation of a standard normal truncated to [-2, 2].
_TRUNCATED_STD = 0.87962566103423978


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def zeros(key: Any, shape: Any, dtype: Any = DEFAULT_DTYPE) -> Any:
    """An array of zeros (the key is ignored)."""
    return anp.zeros(_shape(shape), dtype)


def ones(key: Any, shape: Any, dtype: Any = DEFAULT_DTYPE) -> Any:
    """An array of ones (the key is ignored)."""
    return anp.ones(_shape(shape), dtype)


def constant(value: Any, dtype: Any = DEFAULT_DTYPE) -> Initializer:
    """An initializer filling the array with `value` (broadcast to the shape)."""
    def init(key: Any, shape: Any, dtype: Any = dtype) -> Any:
        return anp.astype(anp.broadcast_to(anp.asarray(value), _shape(shape)), dtype)
    return init


def normal(stddev: float = 1e-2, dtype: Any = DEFAULT_DTYPE) -> Initializer:
    """N(0, stddev^2) entries."""
    def init(key: Any, shape: Any, dtype: Any = dtype) -> Any:
        return random.normal(key, _shape(shape), dtype) * anp.asarray(stddev, dtype)
    return init


def uniform(scale: float = 1e-2, dtype: Any = DEFAULT_DTYPE) -> Initializer:
    """U[0, scale) entries."""
    def init(key: Any, shape: Any, dtype: Any = dtype) -> Any:
        return random.uniform(key, _shape(shape), dtype) * anp.asarray(scale, dtype)
    return init


def _truncated_standard_normal(key: Any, lower: float, upper: float, shape: tuple[int, ...],
                               dtype: Any) -> Any:
    """N(0, 1) conditioned on [lower, upper], by inverting the cdf of a uniform draw."""
    lo = 0.5 * math.erfc(-lower / math.sqrt(2.0))   # the normal cdf at the bounds
    hi = 0.5 * math.erfc(-upper / math.sqrt(2.0))
    u = random.uniform(key, shape, dtype, lo, hi)
    return anp.clip(_sm.ndtri(u), lower, upper)


def truncated_normal(stddev: float = 1e-2, dtype: Any = DEFAULT_DTYPE, lower: float = -2.0,
                     upper: float = 2.0) -> Initializer:
    """stddev * (a standard normal truncated to [lower, upper])."""
    def init(key: Any, shape: Any, dtype: Any = dtype) -> Any:
        z = _truncated_standard_normal(key, lower, upper, _shape(shape), dtype)
        return z * anp.asarray(stddev, dtype)
    return init


def _fans(shape: tuple[int, ...], in_axis: int | Sequence[int], out_axis: int | Sequence[int],
          batch_axis: int | Sequence[int]) -> tuple[float, float]:
    if len(shape) < 1:
        raise ValueError("nn.initializers.variance_scaling: the shape needs at least one "
                         f"axis, got {shape}")
    norm = lambda a: tuple(sorted({int(i) % len(shape) for i in  # noqa: E731
                                   ((a,) if isinstance(a, (int, np.integer)) else a)}))
    ins, outs, batch = norm(in_axis), norm(out_axis), norm(batch_axis)
    fan_in = float(np.prod([shape[i] for i in ins]))
    fan_out = float(np.prod([shape[i] for i in outs]))
    field = float(np.prod([d for i, d in enumerate(shape) if i not in ins + outs + batch]))
    return fan_in * field, fan_out * field


def variance_scaling(scale: float, mode: str, distribution: str,
                     in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                     batch_axis: int | Sequence[int] = (),
                     dtype: Any = DEFAULT_DTYPE) -> Initializer:
    """Entries of variance scale / n, n the fan-in, fan-out or their mean (`mode`
    "fan_in", "fan_out", "fan_avg"), from `distribution` "truncated_normal",
    "normal" or "uniform" (U[-sqrt(3 var), sqrt(3 var)])."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"nn.initializers.variance_scaling: invalid mode {mode!r} "
                         "(fan_in, fan_out or fan_avg)")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"nn.initializers.variance_scaling: invalid distribution "
                         f"{distribution!r} (truncated_normal, normal or uniform)")

    def init(key: Any, shape: Any, dtype: Any = dtype) -> Any:
        shape = _shape(shape)
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / n
        if distribution == "truncated_normal":
            z = _truncated_standard_normal(key, -2.0, 2.0, shape, dtype)
            return z * anp.asarray(np.sqrt(variance) / _TRUNCATED_STD, dtype)
        if distribution == "normal":
            return random.normal(key, shape, dtype) * anp.asarray(np.sqrt(variance), dtype)
        limit = float(np.sqrt(3.0 * variance))
        return random.uniform(key, shape, dtype, -limit, limit)
    return init


def _scaling(scale: float, mode: str, distribution: str, doc: str) -> Callable[..., Initializer]:
    def factory(in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                batch_axis: int | Sequence[int] = (), dtype: Any = DEFAULT_DTYPE
                ) -> Initializer:
        return variance_scaling(scale, mode, distribution, in_axis, out_axis, batch_axis, dtype)
    factory.__doc__ = doc
    return factory


glorot_uniform = _scaling(1.0, "fan_avg", "uniform", "variance_scaling(1, 'fan_avg', 'uniform')")
glorot_normal = _scaling(1.0, "fan_avg", "truncated_normal",
                         "variance_scaling(1, 'fan_avg', 'truncated_normal')")
lecun_uniform = _scaling(1.0, "fan_in", "uniform", "variance_scaling(1, 'fan_in', 'uniform')")
lecun_normal = _scaling(1.0, "fan_in", "truncated_normal",
                        "variance_scaling(1, 'fan_in', 'truncated_normal')")
he_uniform = _scaling(2.0, "fan_in", "uniform", "variance_scaling(2, 'fan_in', 'uniform')")
he_normal = _scaling(2.0, "fan_in", "truncated_normal",
                     "variance_scaling(2, 'fan_in', 'truncated_normal')")
for _n, _f in (("glorot_uniform", glorot_uniform), ("glorot_normal", glorot_normal),
               ("lecun_uniform", lecun_uniform), ("lecun_normal", lecun_normal),
               ("he_uniform", he_uniform), ("he_normal", he_normal)):
    _f.__name__ = _f.__qualname__ = _n
xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal

__all__ = [
    "constant",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "normal",
    "ones",
    "truncated_normal",
    "uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]
