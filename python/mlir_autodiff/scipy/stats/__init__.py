"""`mlir_autodiff.scipy.stats`: log-densities as in jax.scipy.stats, each a module of
functions: `norm` (logpdf, pdf, cdf, logcdf, ppf), `multivariate_normal`
(logpdf, pdf), `bernoulli` (logpmf, pmf) and `categorical` (logpmf, pmf; not a
scipy name: the one-draw case of scipy's multinomial, with integer labels)."""

from __future__ import annotations

from . import bernoulli, categorical, multivariate_normal, norm

__all__ = ["bernoulli", "categorical", "multivariate_normal", "norm"]
