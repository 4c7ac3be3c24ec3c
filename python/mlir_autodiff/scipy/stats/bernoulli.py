"""The Bernoulli distribution (jax.scipy.stats.bernoulli)."""

from __future__ import annotations

from typing import Any

from ... import numpy as anp
from .. import special as _special

ArrayLike = Any


def logpmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
    """k log p + (1 - k) log(1 - p) for k - loc in {0, 1}; -inf for other k."""
    p = anp.asarray(p)
    k = anp.asarray(k)
    kk = k - loc
    kk = anp.astype(kk, p.dtype) if p.dtype.kind == "f" else kk
    lp = _special.xlogy(kk, p) + _special.xlog1py(1 - kk, -p)
    return anp.where((kk < 0) | (kk > 1), -float("inf"), lp)


def pmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
    """exp(logpmf)."""
    return anp.exp(logpmf(k, p, loc))


__all__ = ["logpmf", "pmf"]
