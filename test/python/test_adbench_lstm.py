"""ADBench's LSTM objective and its gradient, on the published data file.

The objective is written once (benchmarks/adbench/lstm.py) against a
numpy-like module; here it is checked in float64 numpy against ADBench's
published value and an independent scalar-loop form. Under our tracer its
time loop is one `mlir_autodiff.lax.scan`: the full c=1024 objective is
checked against the published value, and its gradient against jax's (also a
`lax.scan`); on a short slice the gradient is also compared with central
finite differences and with the Python loop unrolled by our tracer.
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
from adbench import data_file, lstm

FILE = data_file("lstm/lstm_l2_c1024.txt")

#: ADBench's published objective on lstm_l2_c1024 (8 digits, benchmarks/data/README.md).
PUBLISHED_F = 0.66666518

#: Sequence elements of the finite-difference and unrolled-loop tests.
SLICE = 5


def _args(inp: lstm.LstmInput) -> tuple[np.ndarray, ...]:
    return inp.main, inp.extra, inp.state, inp.sequence


def _loss(main, extra, state, sequence):
    return lstm.objective(anp, main, extra, state, sequence)


@pytest.fixture(scope="module")
def full() -> lstm.LstmInput:
    return lstm.load(FILE)


def test_loader_reads_the_layout(full):
    assert (full.layers, full.steps, full.width) == (2, 1024, 14)
    assert full.main.shape == (4, 56)
    assert full.extra.shape == (3, 14)
    assert full.state.shape == (4, 14)
    assert full.sequence.shape == (1024, 14)


def test_loader_rejects_a_short_file(tmp_path):
    bad = tmp_path / "lstm_bad.txt"
    bad.write_text("1 2 1\n\n1 2 3 4\n5 6 7 8\n\n1 2 3\n")
    with pytest.raises(ValueError, match="expected 15 numbers"):
        lstm.load(bad)


def test_objective_matches_published_value_and_loop_reference(full):
    value = float(lstm.objective(np, *_args(full)))
    assert round(value, 8) == PUBLISHED_F
    np.testing.assert_allclose(lstm.reference(full), value, rtol=1e-13)


def test_traced_objective_matches_numpy_on_a_slice(full):
    inp = lstm.truncated(full, SLICE)
    value = ad.jit(_loss)(*_args(inp))
    np.testing.assert_allclose(value, lstm.reference(inp), rtol=1e-12)


def test_traced_full_objective_matches_published_value(full):
    value = float(ad.jit(_loss)(*_args(full)))
    assert round(value, 8) == PUBLISHED_F
    np.testing.assert_allclose(value, lstm.reference(full), rtol=1e-12)


def test_full_gradient_matches_jax(full):
    jax = pytest.importorskip("jax", reason="jax is the oracle for this test")
    jax.config.update("jax_enable_x64", True)
    value, grads = ad.jit(ad.value_and_grad(_loss, argnums=(0, 1)))(*_args(full))

    def f(main, extra, state, sequence):
        return lstm.objective(jax.numpy, main, extra, state, sequence)  # jax.lax.scan

    jv, jg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(*_args(full))
    np.testing.assert_allclose(value, float(jv), rtol=1e-12)
    for ours, theirs in zip(grads, jg):
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-10, atol=1e-13)
    assert np.abs(grads[0]).max() > 1e-3


def test_scan_and_unrolled_loop_agree_on_a_slice(full):
    inp = lstm.truncated(full, SLICE)

    def unrolled(main, extra, state, sequence):
        return lstm.objective(anp, main, extra, state, sequence, scan=lstm.python_scan)

    ours = ad.jit(ad.value_and_grad(_loss, argnums=(0, 1)))(*_args(inp))
    loop = ad.jit(ad.value_and_grad(unrolled, argnums=(0, 1)))(*_args(inp))
    np.testing.assert_allclose(ours[0], loop[0], rtol=1e-13)
    for a, b in zip(ours[1], loop[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


@pytest.fixture(scope="module")
def our_gradient(full):
    inp = lstm.truncated(full, SLICE)
    value, grads = ad.jit(ad.value_and_grad(_loss, argnums=(0, 1)))(*_args(inp))
    return inp, value, grads


def test_gradient_matches_central_differences(our_gradient):
    inp, value, (g_main, g_extra) = our_gradient
    np.testing.assert_allclose(value, lstm.reference(inp), rtol=1e-12)
    eps = 1e-6
    for which, g in ((0, g_main), (1, g_extra)):
        fd = np.zeros_like(g)
        for idx in np.ndindex(g.shape):
            params = [inp.main.copy(), inp.extra.copy()]
            params[which][idx] += eps
            plus = lstm.objective(np, *params, inp.state, inp.sequence)
            params[which][idx] -= 2 * eps
            minus = lstm.objective(np, *params, inp.state, inp.sequence)
            fd[idx] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert np.abs(g_main).max() > 1e-3  # the check above compares something


def test_gradient_matches_jax_loop_and_scan(our_gradient):
    jax = pytest.importorskip("jax", reason="jax is the oracle for this test")
    jax.config.update("jax_enable_x64", True)
    inp, value, grads = our_gradient
    for scan in (lstm.python_scan, jax.lax.scan):
        def f(main, extra, state, sequence, scan=scan):
            return lstm.objective(jax.numpy, main, extra, state, sequence, scan=scan)

        jv, jg = jax.value_and_grad(f, argnums=(0, 1))(*_args(inp))
        np.testing.assert_allclose(value, float(jv), rtol=1e-12)
        for ours, theirs in zip(grads, jg):
            np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-10, atol=1e-13)
