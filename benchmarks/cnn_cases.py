"""Convolution rows for benchmarks/run.py: a small CNN's loss and training step.

The network is the 8x8-digits classifier of examples/cnn_digits.py (conv 3x3
SAME 1->16, relu, 2x2 max pool, conv 3x3 SAME 16->32, relu, 2x2 max pool,
dense 128->10, mean cross-entropy), NHWC in float32; the step is
value_and_grad plus an SGD update in one compiled call, as jax.jit does it.
There is no numpy builder: results are checked against jax's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from frameworks import ours_jit

LR = 0.05
NHWC = ("NHWC", "HWIO", "NHWC")


def _inputs(batch: int):
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        def he(*shape: int) -> np.ndarray:
            fan_in = int(np.prod(shape[:-1]))
            return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        x = rng.uniform(0, 1, (batch, 8, 8, 1)).astype(np.float32)
        onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
        return (he(3, 3, 1, 16), np.zeros(16, np.float32), he(3, 3, 16, 32),
                np.zeros(32, np.float32), he(128, 10), np.zeros(10, np.float32), x, onehot)
    return make


def cnn_loss(xp: Any, conv: Any, pool: Any, log_softmax: Any, params: Sequence[Any],
             x: Any, onehot: Any) -> Any:
    w1, b1, w2, b2, w3, b3 = params
    h = pool(xp.maximum(conv(x, w1, (1, 1), "SAME", dimension_numbers=NHWC) + b1, 0.0))
    h = pool(xp.maximum(conv(h, w2, (1, 1), "SAME", dimension_numbers=NHWC) + b2, 0.0))
    logits = xp.reshape(h, (h.shape[0], -1)) @ w3 + b3
    return -xp.mean(xp.sum(onehot * log_softmax(logits), axis=-1))


def _ours(step: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp
        from mlir_autodiff import lax, nn

        def loss(params, x, onehot):
            return cnn_loss(anp, lax.conv_general_dilated,
                            lambda h: nn.max_pool(h, (2, 2), (2, 2)),
                            lambda z: nn.log_softmax(z, axis=-1), params, x, onehot)

        def train_step(params, x, onehot):
            value, grads = ad.value_and_grad(loss)(params, x, onehot)
            return value, tuple(p - LR * g for p, g in zip(params, grads))

        fn = ours_jit(train_step if step else loss)
        params, x, onehot = tuple(inputs[:-2]), inputs[-2], inputs[-1]
        return lambda: fn(params, x, onehot)

    return build


def _jax(step: bool):
    def build(inputs):
        import jax

        def pool(h):
            return jax.lax.reduce_window(h, -np.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                         "VALID")

        def loss(params, x, onehot):
            return cnn_loss(jax.numpy, jax.lax.conv_general_dilated, pool,
                            lambda z: jax.nn.log_softmax(z, axis=-1), params, x, onehot)

        def train_step(params, x, onehot):
            value, grads = jax.value_and_grad(loss)(params, x, onehot)
            return value, tuple(p - LR * g for p, g in zip(params, grads))

        fn = jax.jit(train_step if step else loss)
        params = tuple(jax.device_put(a) for a in inputs[:-2])
        x, onehot = jax.device_put(inputs[-2]), jax.device_put(inputs[-1])
        return lambda: jax.block_until_ready(fn(params, x, onehot))

    return build


def register_cases(Case: Any, register: Any) -> None:
    """Add the CNN rows to benchmarks/run.py's registry (run.py calls this)."""
    # full runs only: --quick (run by test_benchmarks.py) stays cheap
    for batch, quick, full in ((128, False, True),):
        size = f"b{batch} 8x8x1 c16-c32-d10"
        register(Case(name="cnn loss (f)", size=size, inputs=_inputs(batch),
                      ours=_ours(False), jax=_jax(False), rtol=1e-4, atol=1e-5,
                      quick=quick, full=full))
        register(Case(name="cnn train step (value_and_grad)", size=size,
                      inputs=_inputs(batch), ours=_ours(True), jax=_jax(True),
                      rtol=1e-3, atol=1e-5, quick=quick, full=full, primal="cnn loss (f)"))
