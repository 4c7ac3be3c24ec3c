"""`mlir_autodiff.nn`: neural-network functions written with `mlir_autodiff.numpy`.

`dropout` draws its mask from the implicit generator of `mlir_autodiff.random`.
All are numerically stable: softmax, log_softmax and logsumexp subtract the
maximum before exponentiating. Like `mlir_autodiff.numpy`, they trace inside
`jit` and run eagerly on numpy arrays outside it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import nn_initializers as initializers
from . import numpy as anp
from . import random
from .convolution import avg_pool, max_pool
from .differentiate import stop_gradient as _stop_gradient

ArrayLike = Any
# `import mlir_autodiff.nn.initializers` finds the module (it lives beside this file).
sys.modules.setdefault(__name__ + ".initializers", initializers)


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


# --------------------------------------------------------------------------- more activations
# jax.nn's definitions, including the derivative each picks at a kink.

def relu6(x: ArrayLike) -> Any:
    """min(max(x, 0), 6), with derivative 1 on (0, 6) and 0 elsewhere, at 0 and 6 too
    (jax.nn.relu6's choice)."""
    x = anp.asarray(x)
    inside = (x > 0) & (x < 6)
    return anp.where(inside, x, _stop_gradient(anp.minimum(anp.maximum(x, 0), 6)))


def elu(x: ArrayLike, alpha: ArrayLike = 1.0) -> Any:
    """x for x > 0, alpha (exp(x) - 1) otherwise (derivative alpha at 0)."""
    x = anp.asarray(x)
    pos = x > 0
    return anp.where(pos, x, alpha * anp.expm1(anp.where(pos, 0.0, x)))


def celu(x: ArrayLike, alpha: ArrayLike = 1.0) -> Any:
    """max(x, 0) + alpha expm1(min(x, 0) / alpha) (derivative 1 at 0)."""
    x = anp.asarray(x)
    return anp.maximum(x, 0.0) + alpha * anp.expm1(anp.minimum(x, 0.0) / alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x: ArrayLike) -> Any:
    """scale * elu(x, alpha) with the self-normalizing constants (jax.nn.selu)."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def leaky_relu(x: ArrayLike, negative_slope: ArrayLike = 1e-2) -> Any:
    """x for x >= 0, negative_slope * x otherwise (derivative 1 at 0)."""
    x = anp.asarray(x)
    return anp.where(x >= 0, x, negative_slope * x)


swish = silu


def glu(x: ArrayLike, axis: int = -1) -> Any:
    """Gated linear unit: the first half of `x` along `axis` times sigmoid of the second."""
    x = anp.asarray(x)
    n = anp.shape(x)[axis]
    if n % 2:
        raise ValueError(f"nn.glu: axis {axis} has odd size {n}; it must split in two halves")
    ax = axis % anp.ndim(x)
    idx1 = tuple([slice(None)] * ax + [slice(0, n // 2)])
    idx2 = tuple([slice(None)] * ax + [slice(n // 2, n)])
    return x[idx1] * sigmoid(x[idx2])


def mish(x: ArrayLike) -> Any:
    """x * tanh(softplus(x))."""
    x = anp.asarray(x)
    return x * anp.tanh(softplus(x))


def soft_sign(x: ArrayLike) -> Any:
    """x / (|x| + 1)."""
    x = anp.asarray(x)
    return x / (anp.abs(x) + 1)


def hard_sigmoid(x: ArrayLike) -> Any:
    """relu6(x + 3) / 6."""
    return relu6(anp.asarray(x) + 3.0) / 6.0


def hard_silu(x: ArrayLike) -> Any:
    """x * hard_sigmoid(x) (a.k.a. hard_swish)."""
    x = anp.asarray(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def hard_tanh(x: ArrayLike) -> Any:
    """x clipped to [-1, 1], with derivative 1 on [-1, 1] (the ends included, as jax)."""
    x = anp.asarray(x)
    return anp.where(x > 1, 1.0, anp.where(x < -1, -1.0, x))


def squareplus(x: ArrayLike, b: ArrayLike = 4) -> Any:
    """(x + sqrt(x^2 + b)) / 2, a smooth relu."""
    x = anp.asarray(x)
    return (x + anp.sqrt(x * x + b)) / 2


def log1mexp(x: ArrayLike) -> Any:
    """log(1 - exp(-x)) for x > 0: log(-expm1(-x)) below log 2, log1p(-exp(-x)) above
    (each accurate where the other cancels)."""
    x = anp.asarray(x)
    big = x > _LOG2
    xb = anp.where(big, x, 1.0)
    xs = anp.where(big, _LOG2, x)
    return anp.where(big, anp.log1p(-anp.exp(-xb)), anp.log(-anp.expm1(-xs)))


_LOG2 = float(np.log(2.0))


def standardize(x: ArrayLike, axis: Any = -1, mean: ArrayLike | None = None,
                variance: ArrayLike | None = None, epsilon: ArrayLike = 1e-5,
                where: Any = None) -> Any:
    """(x - mean) / sqrt(variance + epsilon) along `axis` (jax.nn.standardize): the mean
    and the variance E[x^2] - E[x]^2 are computed unless given. `where` is not
    supported."""
    if where is not None:
        raise NotImplementedError("nn.standardize: the `where` mask is not supported")
    x = anp.asarray(x)
    if mean is None:
        mean = anp.mean(x, axis=axis, keepdims=True)
    if variance is None:
        variance = anp.mean(x * x, axis=axis, keepdims=True) - mean * mean
    return (x - mean) / anp.sqrt(variance + epsilon)


def dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike,
                          bias: ArrayLike | None = None, mask: ArrayLike | None = None, *,
                          scale: float | None = None, is_causal: bool = False,
                          query_seq_lengths: Any = None, key_value_seq_lengths: Any = None,
                          local_window_size: Any = None, implementation: Any = None) -> Any:
    """Scaled dot-product attention with jax.nn.dot_product_attention's signature.

    query is [B, T, N, H] (or [T, N, H]), key and value [B, S, K, H] with K dividing
    N (grouped-query attention repeats each key/value head N/K times). The logits
    `q.k * scale` (scale defaults to 1/sqrt(H)) plus `bias` (broadcast to
    [B, N, T, S]) are set to a large negative number where `mask` is False and,
    with `is_causal`, above the diagonal; the softmax over S weights `value`.
    Sequence lengths, local windows and `implementation` other than None/"xla"
    are not supported.
    """
    for name, v in (("query_seq_lengths", query_seq_lengths),
                    ("key_value_seq_lengths", key_value_seq_lengths),
                    ("local_window_size", local_window_size)):
        if v is not None:
            raise NotImplementedError(f"nn.dot_product_attention: {name} is not supported")
    if implementation not in (None, "xla"):
        raise NotImplementedError(f"nn.dot_product_attention: implementation="
                                  f"{implementation!r} is not supported (None or 'xla')")
    q, k, v = anp.asarray(query), anp.asarray(key), anp.asarray(value)
    unbatched = anp.ndim(q) == 3
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    if not anp.ndim(q) == anp.ndim(k) == anp.ndim(v) == 4:
        raise ValueError("nn.dot_product_attention: query, key and value must be "
                         "[B, T, N, H] / [B, S, K, H] (or without B)")
    B, T, N, H = anp.shape(q)
    S, K = anp.shape(k)[1], anp.shape(k)[2]
    if anp.shape(k) != anp.shape(v) or anp.shape(k)[0] != B or anp.shape(k)[3] != H:
        raise ValueError(f"nn.dot_product_attention: key {anp.shape(k)} and value "
                         f"{anp.shape(v)} must be [B, S, K, H] for query {anp.shape(q)}")
    if N % K:
        raise ValueError(f"nn.dot_product_attention: {N} query heads are not a multiple "
                         f"of {K} key/value heads")
    if K != N:  # grouped-query attention: head n reads key/value head n // (N / K)
        k, v = (anp.reshape(anp.broadcast_to(a[:, :, :, None], (B, S, K, N // K, H)),
                            (B, S, N, H)) for a in (k, v))
    s = float(1.0 / np.sqrt(H)) if scale is None else scale
    logits = anp.einsum("btnh,bsnh->bnts", q, k) * s
    if bias is not None:
        logits = logits + _attention_operand(bias, unbatched)
    keep = None
    if mask is not None:
        keep = anp.asarray(_attention_operand(mask, unbatched), dtype=bool)
    if is_causal:
        causal = np.tril(np.ones((T, S), dtype=bool))
        keep = causal if keep is None else keep & causal
    if keep is not None:
        big_negative = float(-0.7 * np.finfo(np.dtype(logits.dtype)).max)
        logits = anp.where(keep, logits, big_negative)
    weights = softmax(logits, axis=-1)
    out = anp.einsum("bnts,bsnh->btnh", weights, v)
    return out[0] if unbatched else out


def _attention_operand(x: ArrayLike, unbatched: bool) -> Any:
    """bias / mask as [B?, N?, T, S] (an unbatched call's operand gains the batch axis)."""
    x = anp.asarray(x)
    return x[None] if unbatched and anp.ndim(x) == 3 else x


__all__ = [
    "avg_pool",
    "celu",
    "cross_entropy",
    "dot_product_attention",
    "dropout",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "initializers",
    "leaky_relu",
    "log1mexp",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "max_pool",
    "mish",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "squareplus",
    "standardize",
    "swish",
]
