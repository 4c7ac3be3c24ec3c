"""The normal distribution N(loc, scale^2) (jax.scipy.stats.norm)."""

from __future__ import annotations

import math
from typing import Any

from ... import numpy as anp
from ... import special_math as _sm

ArrayLike = Any
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _z(x: ArrayLike, loc: ArrayLike, scale: ArrayLike) -> Any:
    return (_sm.as_float(x) - loc) / scale


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """-(x - loc)^2 / (2 scale^2) - log(scale) - log(2 pi) / 2."""
    z = _z(x, loc, scale)
    return -0.5 * z * z - anp.log(anp.asarray(scale, z.dtype)) - _HALF_LOG_2PI


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """exp(logpdf)."""
    return anp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """Phi((x - loc) / scale) = erfc(-z / sqrt 2) / 2, accurate in the lower tail."""
    return _sm.ndtr(_z(x, loc, scale))


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """log Phi(z), accurate for z far below 0 (an asymptotic series below z = -10)."""
    return _sm.log_ndtr(_z(x, loc, scale))


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
    """The quantile loc + scale * Phi^-1(q) (relative error ~1e-15, tails included)."""
    return loc + scale * _sm.ndtri(q)


__all__ = ["cdf", "logcdf", "logpdf", "pdf", "ppf"]
