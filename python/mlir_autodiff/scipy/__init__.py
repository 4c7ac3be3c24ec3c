"""`mlir_autodiff.scipy`: the parts of scipy (as jax.scipy has them) written with
`mlir_autodiff.numpy`, so every transform applies: `special` (logsumexp, erf,
erfc, erfinv, gammaln, digamma, xlogy, xlog1py, expit, logit) and `stats`
(norm, multivariate_normal, bernoulli, categorical).
"""

from __future__ import annotations

from . import special, stats

__all__ = ["special", "stats"]
