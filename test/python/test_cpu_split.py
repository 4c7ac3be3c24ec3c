"""A large function outlined in runs of top-level ops (transforms/cpu/split.py)
computes bit for bit what the one function computed."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import strict_schedules  # noqa: F401  (autouse)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import nn
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import split

_RNG = np.random.default_rng(3)
# batch 64: the 8-wide layer's matmuls and reductions get their tiled, vectorized
# schedules (views, vector constants and casts crossing the runs), the relu masks
# are boolean buffers, the loss a scalar
X = _RNG.standard_normal((64, 12)).astype(np.float32)
Y = np.eye(5, dtype=np.float32)[_RNG.integers(0, 5, 64)]
PARAMS = (0.4 * _RNG.standard_normal((12, 32)).astype(np.float32),
          0.1 * _RNG.standard_normal(32).astype(np.float32),
          0.3 * _RNG.standard_normal((32, 5)).astype(np.float32),
          np.zeros(5, np.float32))


def _loss(params, x, y):
    w1, b1, w2, b2 = params
    h = anp.tanh(nn.relu(x @ w1 + b1))
    return -anp.mean(anp.sum(y * nn.log_softmax(h @ w2 + b2, axis=-1), axis=-1))


def _step(params, x, y):
    value, grads = ad.value_and_grad(_loss)(params, x, y)
    return value, tuple(p - 0.1 * g for p, g in zip(params, grads))


@pytest.fixture(scope="module")
def step_text() -> str:
    """The train step after the autodiff passes (tensors), for CompiledModule."""
    return ad.lower(_step, PARAMS, X, Y).as_text("autodiff")


def _run(text: str) -> tuple[CompiledModule, list[np.ndarray]]:
    cm = CompiledModule(text)
    out = cm[cm.function_names[0]](*PARAMS, X, Y)
    return cm, [np.asarray(a) for a in out]


def test_split_train_step_is_bit_identical(step_text, monkeypatch) -> None:
    whole, expected = _run(step_text)  # under SPLIT_MIN_OPS: one function
    assert "_part" not in whole.lowered_text
    monkeypatch.setattr(split, "SPLIT_MIN_OPS", 1)
    monkeypatch.setattr(split, "CHUNK_OPS", 60)
    parts, got = _run(step_text)
    lowered = parts.lowered_text
    names = {line.split("@")[1].split("(")[0] for line in lowered.splitlines()
             if "llvm.func internal @" in line}
    assert len(names) >= 4 and all("_part" in n for n in names), names
    assert lowered.count('passthrough = ["noinline"]') == len(names)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == e.tobytes()
    # and what both compute is the loss (numpy, float64)
    w1, b1, w2, b2 = (p.astype(np.float64) for p in PARAMS)
    z = np.tanh(np.maximum(X @ w1 + b1, 0)) @ w2 + b2
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    np.testing.assert_allclose(got[0], -np.mean(np.sum(Y * logp, -1)), rtol=1e-5)
