"""`mlir_autodiff.scipy`: the parts of scipy (as jax.scipy has them) written with
`mlir_autodiff.numpy`, so every transform applies: `special` (logsumexp, erf,
erfc, erfinv, gammaln, digamma, xlogy, xlog1py, expit, logit), `stats` (norm,
multivariate_normal, bernoulli, categorical) and `linalg` (solve_triangular,
cholesky, cho_factor, cho_solve; loaded on first use).
"""

from __future__ import annotations

from typing import Any

from . import special, stats

__all__ = ["linalg", "special", "stats"]


def __getattr__(name: str) -> Any:
    if name == "linalg":
        import importlib

        mod = importlib.import_module(f"{__name__}.linalg")
        globals()["linalg"] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
