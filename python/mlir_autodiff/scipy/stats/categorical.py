"""The categorical distribution over 0..K-1 with probabilities `p` on the last axis.

Not a scipy/jax.scipy name: it is scipy's multinomial with one draw, written
with an integer label instead of a one-hot count vector.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import numpy as anp

ArrayLike = Any


def logpmf(k: ArrayLike, p: ArrayLike) -> Any:
    """log p[..., k] for integer labels k (shape p.shape[:-1], broadcast against it);
    -inf for labels outside 0..K-1."""
    p = anp.asarray(p)
    k = anp.asarray(k)
    if k.dtype.kind not in "iu":
        raise TypeError(f"scipy.stats.categorical.logpmf: labels must be integers, got "
                        f"{k.dtype}")
    K = anp.shape(p)[-1]
    batch = np.broadcast_shapes(anp.shape(k), anp.shape(p)[:-1])
    p = anp.broadcast_to(p, batch + (K,))
    k = anp.broadcast_to(k, batch)
    hit = anp.expand_dims(k, -1) == anp.arange(K)
    picked = anp.sum(anp.where(hit, p, 0.0), axis=-1)
    inside = (k >= 0) & (k < K)
    return anp.where(inside, anp.log(anp.where(inside, picked, 1.0)), -np.inf)


def pmf(k: ArrayLike, p: ArrayLike) -> Any:
    """p[..., k], and 0 for labels outside 0..K-1."""
    return anp.exp(logpmf(k, p))


__all__ = ["logpmf", "pmf"]
