"""ADBench's GMM objective and its gradient, on the published data files.

The objective is written once (benchmarks/adbench/gmm.py) against a
numpy-like module; here it runs traced through `ad.value_and_grad`, and is
checked against ADBench's published objective value, an independent loop
implementation, central finite differences and jax's gradient.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from adbench import data_file, gmm  # noqa: E402

#: ADBench's published objective on gmm/test.txt (benchmarks/data/README.md).
PUBLISHED_F = 8.07380408004975791


def make_loss(inp: gmm.GmmInput):
    selector = gmm.lower_selector(inp.d)
    const = gmm.constant_terms(inp)

    def loss(alphas, means, icf, x):
        return gmm.objective(anp, alphas, means, icf, x, selector, inp.gamma, inp.m, const)

    return loss


def test_objective_matches_published_value_and_gradient_matches_fd():
    inp = gmm.load(data_file("gmm/test.txt"))
    loss = make_loss(inp)
    value, grads = ad.value_and_grad(loss, argnums=(0, 1, 2))(
        inp.alphas, inp.means, inp.icf, inp.x)
    np.testing.assert_allclose(value, PUBLISHED_F, rtol=1e-12)
    assert abs(gmm.reference(inp) - PUBLISHED_F) < 1e-10  # the loop form agrees too

    def f(a, m, q):
        return gmm.reference(gmm.GmmInput(inp.d, inp.k, inp.n, a, m, q, inp.x,
                                          inp.gamma, inp.m))

    eps = 1e-6
    params = [inp.alphas, inp.means, inp.icf]
    for which, g in enumerate(grads):
        fd = np.zeros_like(params[which])
        for idx in np.ndindex(params[which].shape):
            plus = [p.copy() for p in params]
            minus = [p.copy() for p in params]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            fd[idx] = (f(*plus) - f(*minus)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


def test_gradient_matches_jax_on_d10_k25():
    jax = pytest.importorskip("jax", reason="jax is the oracle for this test")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    inp = gmm.load(data_file("gmm/1k/gmm_d10_K25.txt"))
    selector = gmm.lower_selector(inp.d)
    const = gmm.constant_terms(inp)
    value, grads = ad.jit(ad.value_and_grad(make_loss(inp), argnums=(0, 1, 2)))(
        inp.alphas, inp.means, inp.icf, inp.x)

    def jloss(a, m, q):
        return gmm.objective(jnp, a, m, q, inp.x, selector, inp.gamma, inp.m, const)

    jvalue, jgrads = jax.value_and_grad(jloss, argnums=(0, 1, 2))(
        inp.alphas, inp.means, inp.icf)
    np.testing.assert_allclose(value, jvalue, rtol=1e-12)
    for g, jg in zip(grads, jgrads):
        rel = np.max(np.abs(g - jg)) / np.max(np.abs(jg))
        assert rel < 1e-10, rel
