"""The multivariate normal N(mean, cov) (jax.scipy.stats.multivariate_normal).

`cov` is one (n, n) covariance (not a batch of them); it is symmetrized,
(cov + cov^T) / 2, and factored by a Cholesky decomposition unrolled over the n
columns at trace time (so the size of the compiled code grows as n^2: meant for
the small n of densities, not for large linear algebra). `x` and `mean` have a
last axis of size n and broadcast against each other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import numpy as anp
from ... import special_math as _sm

ArrayLike = Any
_LOG_2PI = math.log(2.0 * math.pi)


def _cholesky_columns(a: Any) -> list[Any]:
    """The columns of L with L L^T = a (a symmetric positive definite, (n, n))."""
    n = anp.shape(a)[-1]
    rows = np.arange(n)
    cols: list[Any] = []
    for j in range(n):
        c = a[:, j]
        for k in range(j):
            c = c - cols[k] * cols[k][j]
        c = anp.where(rows >= j, c / anp.sqrt(c[j]), 0.0)
        cols.append(c)
    return cols


def logpdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike, allow_singular: Any = None) -> Any:
    """-(n log 2 pi + log det cov + (x - mean)^T cov^-1 (x - mean)) / 2."""
    if allow_singular:
        raise NotImplementedError("scipy.stats.multivariate_normal.logpdf: allow_singular "
                                  "is not supported")
    x = _sm.as_float(x)
    mean = anp.asarray(mean)
    cov = anp.asarray(cov)
    if anp.ndim(cov) != 2 or anp.shape(cov)[0] != anp.shape(cov)[1]:
        raise ValueError(f"scipy.stats.multivariate_normal.logpdf: cov must be one (n, n) "
                         f"matrix, got shape {anp.shape(cov)}")
    n = anp.shape(cov)[0]
    if anp.shape(x)[-1:] != (n,) or anp.shape(mean)[-1:] != (n,):
        raise ValueError(f"scipy.stats.multivariate_normal.logpdf: x {anp.shape(x)} and mean "
                         f"{anp.shape(mean)} must end in the covariance's size {n}")
    cov = (cov + anp.swapaxes(cov, 0, 1)) * 0.5
    cols = _cholesky_columns(cov)
    d = x - mean
    # forward substitution L z = d, one component at a time
    z: list[Any] = []
    for i in range(n):
        acc = d[..., i]
        for k in range(i):
            acc = acc - cols[k][i] * z[k]
        z.append(acc / cols[i][i])
    maha = z[0] * z[0]
    logdet = anp.log(cols[0][0])
    for i in range(1, n):
        maha = maha + z[i] * z[i]
        logdet = logdet + anp.log(cols[i][i])
    return -0.5 * (n * _LOG_2PI + maha) - logdet


def pdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike, allow_singular: Any = None) -> Any:
    """exp(logpdf)."""
    return anp.exp(logpdf(x, mean, cov, allow_singular))


__all__ = ["logpdf", "pdf"]
