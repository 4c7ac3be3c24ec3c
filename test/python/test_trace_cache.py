"""Versions are cached on what was traced, not on the function object (issue 21 item 3).

`jit(grad(h))` built anew in a loop traced to the same module every time and
compiled it every time (5 iterations: 1.4 s). Versions whose traces are the same
module now share one compiled module in the process; AUTODIFF_LOG_COMPILES=1
logs each compilation and why it happened (jax's jax_log_compiles).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import api
from mlir_autodiff import numpy as anp


def h(x):
    return anp.sum(anp.tanh(x) ** 2)


def _count_builds(monkeypatch) -> list[int]:
    calls: list[int] = []
    build = api._build

    def counted(*args, **kwargs):
        calls.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(api, "_build", counted)
    return calls


def test_a_function_recreated_in_a_loop_compiles_once(monkeypatch):
    monkeypatch.setenv("AUTODIFF_CACHE", "0")
    ad.clear_caches()
    builds = _count_builds(monkeypatch)
    x = np.linspace(0.0, 1.0, 33)
    want = 2 * np.tanh(x) * (1 - np.tanh(x) ** 2)
    for _ in range(5):
        np.testing.assert_allclose(ad.jit(ad.grad(h))(x), want, rtol=1e-12)
    for _ in range(3):
        np.testing.assert_allclose(ad.grad(h)(x), want, rtol=1e-12)  # eager: the same
    assert len(builds) == 1
    # another shape, or another function, is another module
    ad.jit(ad.grad(h))(x[:5])
    ad.jit(ad.grad(lambda v: anp.sum(anp.sin(v))))(x)
    assert len(builds) == 3


def test_identical_traces_keep_their_own_outputs_and_donation(monkeypatch):
    """Sharing the compiled module keeps each version's own output plan (constants,
    arguments returned) and donation."""
    monkeypatch.setenv("AUTODIFF_CACHE", "0")
    ad.clear_caches()
    builds = _count_builds(monkeypatch)
    x = np.arange(4.0)
    a = ad.jit(lambda v: (v * 2.0, 1.0))(x)
    b = ad.jit(lambda v: (v * 2.0, 7.0))(x)
    assert a[1] == 1.0 and b[1] == 7.0
    np.testing.assert_array_equal(a[0], b[0])
    w = np.arange(4.0)
    out = ad.jit(lambda v: v * 2.0, donate_argnums=0)(w)  # donation: another key
    assert out is w
    assert len(builds) == 2


def test_clear_caches_forgets_the_shared_modules(monkeypatch):
    monkeypatch.setenv("AUTODIFF_CACHE", "0")
    builds = _count_builds(monkeypatch)
    x = np.ones(3)
    ad.jit(lambda v: anp.cos(v) + 3.0)(x)
    ad.clear_caches()
    ad.jit(lambda v: anp.cos(v) + 3.0)(x)
    assert len(builds) == 2


def test_log_compiles_says_why(monkeypatch, caplog):
    monkeypatch.setenv("AUTODIFF_CACHE", "0")
    monkeypatch.setenv("AUTODIFF_LOG_COMPILES", "1")
    ad.clear_caches()
    x = np.ones(6)
    with caplog.at_level(logging.WARNING, logger="mlir_autodiff"):
        ad.jit(ad.grad(h))(x)
        ad.jit(ad.grad(h))(x)
    msgs = [r.getMessage() for r in caplog.records if r.name == "mlir_autodiff"]
    assert msgs[0] == ("jit(grad_h) for (f64[6]): compiling (no compiled version of this "
                       "module in this process)")
    assert msgs[1] == "jit(grad_h) for (f64[6]): reusing the compiled module of an identical trace"


@pytest.mark.parametrize("value", ["0", ""])
def test_no_log_by_default(monkeypatch, caplog, value):
    monkeypatch.setenv("AUTODIFF_LOG_COMPILES", value)
    with caplog.at_level(logging.WARNING, logger="mlir_autodiff"):
        ad.jit(lambda v: v + 1.0)(np.ones(2))
    assert not [r for r in caplog.records if r.name == "mlir_autodiff"]
