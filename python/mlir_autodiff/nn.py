"""`mlir_autodiff.nn`: neural-network functions written with `mlir_autodiff.numpy`.

`dropout` draws its mask from the implicit generator of `mlir_autodiff.random`.
All are numerically stable: softmax, log_softmax and logsumexp subtract the
maximum before exponentiating. Like `mlir_autodiff.numpy`, they trace inside
`jit` and run eagerly on numpy arrays outside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import numpy as anp
from . import random
from .convolution import avg_pool, max_pool
from .differentiate import stop_gradient as _stop_gradient

ArrayLike = Any


def relu(x: ArrayLike) -> Any:
    """max(x, 0), with derivative 0 at x == 0 (JAX's and PyTorch's choice).

    Written as `x if x > 0 else max(x, 0) * 0`: the value is max(x, 0)
    everywhere (NaN stays NaN) and the derivative is the indicator of x > 0.
    (anp.maximum would split a tie and give 1/2 at 0.)
    """
    x = anp.asarray(x)
    return anp.where(x > 0, x, anp.maximum(x, 0) * 0)


def _split(x: Any) -> tuple[Any, Any, Any]:
    """(x >= 0, x where x >= 0 else 0, x where x < 0 else 0).

    Each branch of a piecewise formula then only sees inputs where it is
    finite, so neither the value nor a gradient through the unused branch can
    become inf or NaN (the `where` gradient trap).
    """
    pos = x >= 0
    return pos, anp.where(pos, x, 0.0), anp.where(pos, 0.0, x)


def sigmoid(x: ArrayLike) -> Any:
    """1 / (1 + exp(-x)), without overflow and accurate in relative terms for x << 0."""
    x = anp.asarray(x)
    pos, xp, xn = _split(x)
    e = anp.exp(xn)
    return anp.where(pos, 1.0 / (1.0 + anp.exp(-xp)), e / (1.0 + e))


def log_sigmoid(x: ArrayLike) -> Any:
    """log(sigmoid(x)) = -softplus(-x), accurate for large |x|."""
    return -softplus(-anp.asarray(x))


def softplus(x: ArrayLike) -> Any:
    """log(1 + exp(x)): x + log1p(exp(-x)) for x > 0, log1p(exp(x)) otherwise."""
    x = anp.asarray(x)
    pos, xp, xn = _split(x)
    return anp.where(pos, xp + anp.log1p(anp.exp(-xp)), anp.log1p(anp.exp(xn)))


def silu(x: ArrayLike) -> Any:
    """x * sigmoid(x) (a.k.a. swish)."""
    x = anp.asarray(x)
    return x * sigmoid(x)


def gelu(x: ArrayLike, approximate: bool = True) -> Any:
    """GELU, x * Phi(x): the tanh approximation by default (as jax.nn.gelu), or with
    `approximate=False` the exact form 0.5 x (1 + erf(x / sqrt(2))) (math.erf)."""
    if not isinstance(approximate, (bool, np.bool_)):
        raise TypeError(f"nn.gelu: approximate must be a bool, got {approximate!r}")
    x = anp.asarray(x)
    if not approximate:
        return 0.5 * x * (1.0 + anp._erf(x * float(1.0 / np.sqrt(2.0))))
    c = float(np.sqrt(2.0 / np.pi))
    return 0.5 * x * (1.0 + anp.tanh(c * (x + 0.044715 * (x * x * x))))


def logsumexp(x: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """log(sum(exp(x), axis)) without overflow: m + log(sum(exp(x - m))).

    The shift m is the maximum, replaced by 0 where it is not finite, so
    all -inf inputs give -inf and +inf inputs give +inf (as scipy does).
    """
    x = anp.asarray(x)
    # The shift does not change the value's derivative: stop_gradient keeps
    # it out of the derivative code (and ties of the max out of it).
    m = _stop_gradient(anp.max(x, axis=axis, keepdims=True))
    m = anp.where(anp.isfinite(m), m, 0.0)
    s = anp.sum(anp.exp(x - m), axis=axis, keepdims=True)
    out = anp.log(s) + m
    if not keepdims:
        axes = tuple(range(anp.ndim(x))) if axis is None else axis
        out = anp.squeeze(out, axis=axes)
    return out


def softmax(x: ArrayLike, axis: Any = -1) -> Any:
    """exp(x) / sum(exp(x), axis), shifted by the max along `axis` for stability."""
    x = anp.asarray(x)
    e = anp.exp(x - _stop_gradient(anp.max(x, axis=axis, keepdims=True)))
    return e / anp.sum(e, axis=axis, keepdims=True)


def log_softmax(x: ArrayLike, axis: Any = -1) -> Any:
    """x - logsumexp(x, axis), shifted by the max along `axis` for stability."""
    x = anp.asarray(x)
    shifted = x - _stop_gradient(anp.max(x, axis=axis, keepdims=True))
    return shifted - anp.log(anp.sum(anp.exp(shifted), axis=axis, keepdims=True))


def dropout(x: ArrayLike, p: float = 0.5, training: bool = True) -> Any:
    """torch.nn.functional.dropout: zero elements with probability p, scale the rest by 1/(1-p).

    The mask is drawn from the implicit generator (`mlir_autodiff.random`);
    see `mlir_autodiff.random.dropout`.
    """
    return random.dropout(x, p, training)


def one_hot(labels: ArrayLike, num_classes: int, dtype: Any = np.float32) -> Any:
    """(..., num_classes) array with 1 at each integer label (labels outside: all zero)."""
    labels = anp.asarray(labels)
    classes = anp.arange(num_classes)
    return anp.astype(anp.expand_dims(labels, -1) == classes, dtype)


def cross_entropy(logits: ArrayLike, labels: ArrayLike, reduction: str = "mean") -> Any:
    """Softmax cross entropy over the last axis (torch.nn.functional.cross_entropy style).

    `labels` are integer class indices (shape = logits.shape[:-1]) or
    probabilities shaped like `logits`. `reduction` is "mean", "sum" or "none".
    """
    logits = anp.asarray(logits)
    labels = anp.asarray(labels)
    logp = log_softmax(logits, axis=-1)
    if anp.ndim(labels) == anp.ndim(logits) and np.issubdtype(labels.dtype, np.floating):
        target = labels
    else:
        target = one_hot(labels, anp.shape(logits)[-1], logits.dtype)
    losses = -anp.sum(target * logp, axis=-1)
    if reduction == "mean":
        return anp.mean(losses)
    if reduction == "sum":
        return anp.sum(losses)
    if reduction == "none":
        return losses
    raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got "
                     f"{reduction!r}")


__all__ = [
    "avg_pool",
    "cross_entropy",
    "dropout",
    "gelu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "max_pool",
    "one_hot",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
]
