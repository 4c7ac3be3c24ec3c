"""mlir_autodiff.nn against reference formulas (and jax.nn where jax is installed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import nn
from mlir_autodiff import numpy as anp

try:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
except ImportError:  # pragma: no cover - jax is an optional oracle
    jax = None

RNG = np.random.default_rng(1)
TOL = {np.float32: {"rtol": 2e-5, "atol": 1e-6}, np.float64: {"rtol": 1e-12, "atol": 1e-14}}


# Reference formulas, written directly from the definitions in float64.
def ref_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


REFS = {
    "relu": lambda x: np.maximum(x.astype(np.float64), 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x.astype(np.float64))),
    "softplus": lambda x: np.log1p(np.exp(x.astype(np.float64))),
    "silu": lambda x: x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64))),
    "log_sigmoid": lambda x: -np.log1p(np.exp(-x.astype(np.float64))),
    "softmax": ref_softmax,
    "log_softmax": lambda x: np.log(ref_softmax(x)),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
}


def _close(got: np.ndarray, want: np.ndarray, dtype: Any) -> None:
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want.astype(dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(REFS))
def test_nn_matches_reference(name: str, dtype: Any) -> None:
    x = (RNG.standard_normal((4, 6)) * 3).astype(dtype)
    got = ad.jit(getattr(nn, name))(x)
    _close(got, REFS[name](x), dtype)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (0, True), ((0, 1), True)])
def test_logsumexp(axis: Any, keepdims: bool) -> None:
    x = RNG.standard_normal((3, 5)) * 4
    got = ad.jit(lambda x: nn.logsumexp(x, axis=axis, keepdims=keepdims))(x)
    np.testing.assert_allclose(got, ref_logsumexp(x, axis, keepdims), rtol=1e-12)
    assert got.shape == ref_logsumexp(x, axis, keepdims).shape


def test_softmax_axis_and_stability() -> None:
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1e4]])

    def f(x: Any) -> Any:
        return (nn.softmax(x), nn.softmax(x, axis=0), nn.log_softmax(x), nn.logsumexp(x, 1),
                nn.sigmoid(x), nn.softplus(x))

    sm, sm0, lsm, lse, sig, sp = ad.jit(f)(x)
    np.testing.assert_allclose(sm, ref_softmax(x), rtol=1e-12)
    np.testing.assert_allclose(sm0, ref_softmax(x, axis=0), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(lsm, x - ref_logsumexp(x, 1, True), rtol=1e-12)
    np.testing.assert_allclose(lse, ref_logsumexp(x, 1), rtol=1e-12)
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm)) and np.all(np.isfinite(lse))
    np.testing.assert_allclose(sig[0], 1.0)
    np.testing.assert_allclose(sig[1], 0.0, atol=1e-300)
    np.testing.assert_allclose(sp, np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))), rtol=1e-12)


def test_logsumexp_of_all_minus_inf() -> None:
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    got = ad.jit(lambda x: nn.logsumexp(x, axis=1))(x)
    np.testing.assert_array_equal(got, [-np.inf, 0.0])


def test_one_hot_and_cross_entropy() -> None:
    logits = RNG.standard_normal((5, 4))
    labels = np.array([0, 3, 1, 1, 2])
    f = ad.jit(lambda z, y: (nn.one_hot(y, 4), nn.cross_entropy(z, y),
                             nn.cross_entropy(z, y, reduction="none"),
                             nn.cross_entropy(z, nn.softmax(z), reduction="sum")))
    oh, ce, ce_none, ce_soft = f(logits, labels)
    np.testing.assert_array_equal(oh, np.eye(4, dtype=np.float32)[labels])
    logp = np.log(ref_softmax(logits))
    want = -logp[np.arange(5), labels]
    np.testing.assert_allclose(ce_none, want, rtol=1e-12)
    np.testing.assert_allclose(ce, want.mean(), rtol=1e-12)
    np.testing.assert_allclose(ce_soft, -(ref_softmax(logits) * logp).sum(), rtol=1e-12)


def test_nn_eager_outside_jit() -> None:
    x = RNG.standard_normal(5)
    np.testing.assert_allclose(nn.softmax(x), ref_softmax(x), rtol=1e-12)
    np.testing.assert_allclose(nn.logsumexp(x), ref_logsumexp(x), rtol=1e-12)


@pytest.mark.skipif(jax is None, reason="jax not installed")
@pytest.mark.parametrize("name", ["relu", "sigmoid", "softplus", "silu", "log_sigmoid",
                                  "softmax", "log_softmax", "logsumexp"])
def test_nn_matches_jax(name: str) -> None:
    x = RNG.standard_normal((3, 7)) * 5
    jfn = {"logsumexp": jax.nn.logsumexp}.get(name) or getattr(jax.nn, name)
    want = np.asarray(jfn(jnp.asarray(x)))
    got = ad.jit(getattr(nn, name))(x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.skipif(jax is None, reason="jax not installed")
def test_gelu_matches_jax_tanh_approximation() -> None:
    x = RNG.standard_normal(9) * 3
    want = np.asarray(jax.nn.gelu(jnp.asarray(x), approximate=True))
    np.testing.assert_allclose(ad.jit(nn.gelu)(x), want, rtol=1e-12, atol=1e-14)


def test_nn_keeps_float32() -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    outs = ad.jit(lambda x: tuple(getattr(nn, n)(x) for n in sorted(REFS)))(x)
    assert all(o.dtype == np.float32 for o in outs)
    _ = anp  # the nn functions are written with mlir_autodiff.numpy


def test_sigmoid_relative_accuracy_far_from_zero() -> None:
    x = np.array([-40.0, -300.0, 40.0, 0.0, -700.0])
    sig = ad.jit(nn.sigmoid)(x)
    np.testing.assert_allclose(sig, 1.0 / (1.0 + np.exp(-x)), rtol=1e-13)


def test_softplus_tiny_values_need_accurate_log1p() -> None:
    x = np.array([-40.0, -300.0, 40.0, 0.0])
    sp, lsig = ad.jit(lambda x: (nn.softplus(x), nn.log_sigmoid(x)))(x)
    np.testing.assert_allclose(sp, [np.exp(-40.0), np.exp(-300.0), 40.0, np.log(2.0)],
                               rtol=1e-13)
    np.testing.assert_allclose(lsig, [-40.0, -300.0, -np.exp(-40.0), -np.log(2.0)], rtol=1e-13)
