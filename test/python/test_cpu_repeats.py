"""Loop nests a function repeats, outlined into one function each (transforms/cpu/
repeats.py), compute bit for bit what the inline nests computed, on one thread and
on two (OpenMP)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import strict_schedules  # noqa: F401  (autouse)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import repeats

_RNG = np.random.default_rng(5)
X = _RNG.standard_normal((64, 64)).astype(np.float32)
# three layers of the same shape: their forward and backward loops repeat
WS = tuple((0.15 * _RNG.standard_normal((64, 64))).astype(np.float32) for _ in range(3))


def _loss(ws, x):
    h = x
    for w in ws:
        h = anp.tanh(h @ w)
    return anp.mean(h * h)


def _step(ws, x):
    value, grads = ad.value_and_grad(_loss)(ws, x)
    return value, tuple(w - 0.1 * g for w, g in zip(ws, grads))


@pytest.fixture(scope="module")
def step_text() -> str:
    return ad.lower(_step, WS, X).as_text("autodiff")


def _run(text: str, threads: int) -> tuple[str, list[np.ndarray]]:
    pipeline = "autodiff-lower-to-cpu" + (f"{{threads={threads}}}" if threads > 1 else "")
    cm = CompiledModule(text, pipeline=pipeline)
    return cm.lowered_text, [np.asarray(a) for a in cm[cm.function_names[0]](*WS, X)]


@pytest.mark.parametrize("threads", [1, 2])
def test_outlined_repeats_are_bit_identical(step_text, monkeypatch, threads) -> None:
    inline_text, expected = _run(step_text, threads)  # under the size: nothing outlined
    assert "_repeat" not in inline_text
    monkeypatch.setattr(repeats, "REPEAT_MIN_FUNCTION_OPS", 1)
    lowered, got = _run(step_text, threads)
    outlined = {line.split("@")[1].split("(")[0] for line in lowered.splitlines()
                if "llvm.func internal @" in line and "_repeat" in line}
    calls = sum(lowered.count(f"llvm.call @{n}(") for n in outlined)
    assert outlined and calls >= 2 * len(outlined), (outlined, calls)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == e.tobytes()
    # and what both compute is the step (numpy, float64)
    hs = [X.astype(np.float64)]
    for w in WS:
        hs.append(np.tanh(hs[-1] @ w.astype(np.float64)))
    np.testing.assert_allclose(got[0], np.mean(hs[-1] ** 2), rtol=1e-5)
    d = 2 * hs[-1] / hs[-1].size
    grads = []
    for w, h_in, h_out in zip(reversed(WS), reversed(hs[:-1]), reversed(hs[1:])):
        d = d * (1 - h_out ** 2)
        grads.append(h_in.T @ d)
        d = d @ w.astype(np.float64).T
    for w, g, new in zip(WS, reversed(grads), got[1:]):
        np.testing.assert_allclose(new, w - 0.1 * g, rtol=1e-4, atol=1e-6)
