"""Gradient rows for benchmarks/run.py: MLP training step, per-sample gradients, HVP.

Each gradient row has a matching primal row (`primal=` names it), so the
table also reports time(grad f) / time(f) per framework, the number AD
papers quote. Every framework does the same work inside one compiled call:
jax.jit(value_and_grad) + update, torch eager autograd and torch.compile.
Results are compared against a hand-derived numpy backpropagation (short
enough to be obviously right). The ADBench rows live in adbench_cases.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from frameworks import configure_torch, ours_jit

LR = 0.05
WD = 1e-4


def _flat(*arrays: Any) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


# ----------------------------------------------------------------------------- the MLP

def _mlp_inputs(batch: int, sizes: Sequence[int]):
    """(w1, b1, ..., wL, bL, x, onehot) for layer widths `sizes`."""
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        arrays = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            arrays.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
                          .astype(np.float32))
            arrays.append(np.zeros(fan_out, np.float32))
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        onehot = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
        return (*arrays, x, onehot)

    return make


def _mlp_loss(xp: Any, log_softmax: Callable[[Any], Any], params: Sequence[Any], x: Any,
              onehot: Any) -> Any:
    """Mean cross-entropy of a tanh MLP plus weight decay; params = (w1, b1, ..., wL, bL)."""
    h = x
    for w, b in zip(params[0:-2:2], params[1:-2:2]):
        h = xp.tanh(h @ w + b)
    logits = h @ params[-2] + params[-1]
    nll = -xp.mean(xp.sum(onehot * log_softmax(logits), axis=-1))
    weights = params[0::2]
    decay = xp.sum(weights[0] * weights[0])
    for w in weights[1:]:
        decay = decay + xp.sum(w * w)
    return nll + WD * decay


def _numpy_backprop(params: Sequence[np.ndarray], x: np.ndarray,
                    onehot: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """(loss, gradients) of `_mlp_loss`, by backpropagation written out by hand."""
    n = x.shape[0]
    weights, biases = params[0::2], params[1::2]
    acts = [x]
    for w, b in zip(weights[:-1], biases[:-1]):
        acts.append(np.tanh(acts[-1] @ w + b))
    z = acts[-1] @ weights[-1] + biases[-1]
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    loss = -np.mean(np.sum(onehot * np.log(p), axis=-1)) + WD * sum(np.sum(w * w)
                                                                     for w in weights)
    grads: list[np.ndarray] = []
    delta = (p - onehot) / n  # d loss / d pre-activation of the current layer
    for layer in range(len(weights) - 1, -1, -1):
        gw = acts[layer].T @ delta + 2 * WD * weights[layer]
        grads[:0] = [gw, delta.sum(axis=0)]
        if layer:
            delta = (delta @ weights[layer].T) * (1 - acts[layer] ** 2)
    return float(loss), grads


def _numpy_mlp_step(*inputs: np.ndarray) -> np.ndarray:
    params, x, onehot = inputs[:-2], inputs[-2], inputs[-1]
    loss, grads = _numpy_backprop(params, x, onehot)
    return _flat(loss, *(p - LR * g for p, g in zip(params, grads)))


def _numpy_mlp_loss(*inputs: np.ndarray) -> np.ndarray:
    return np.asarray(_numpy_backprop(inputs[:-2], inputs[-2], inputs[-1])[0])


def _ours_mlp(step: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp
        from mlir_autodiff import nn

        def loss(params, x, onehot):
            return _mlp_loss(anp, lambda z: nn.log_softmax(z, axis=-1), params, x, onehot)

        def train_step(params, x, onehot):
            value, grads = ad.value_and_grad(loss)(params, x, onehot)
            return value, tuple(p - LR * g for p, g in zip(params, grads))

        fn = ours_jit(train_step if step else loss)
        params, x, onehot = tuple(inputs[:-2]), inputs[-2], inputs[-1]

        return lambda: fn(params, x, onehot)

    return build


def _jax_mlp(step: bool):
    def build(inputs):
        import jax

        def loss(params, x, onehot):
            return _mlp_loss(jax.numpy, lambda z: jax.nn.log_softmax(z, axis=-1), params, x,
                             onehot)

        def train_step(params, x, onehot):
            value, grads = jax.value_and_grad(loss)(params, x, onehot)
            return value, tuple(p - LR * g for p, g in zip(params, grads))

        fn = jax.jit(train_step if step else loss)
        params = tuple(jax.device_put(a) for a in inputs[:-2])
        x, onehot = jax.device_put(inputs[-2]), jax.device_put(inputs[-1])

        return lambda: jax.block_until_ready(fn(params, x, onehot))

    return build


def _torch_mlp(step: bool, compiled: bool):
    def build(inputs):
        import torch

        configure_torch(torch)

        def loss(params, x, onehot):
            return _mlp_loss(torch, lambda z: torch.log_softmax(z, dim=-1), params, x, onehot)

        def train_step(params, x, onehot):
            params = [p.detach().requires_grad_(True) for p in params]
            value = loss(params, x, onehot)
            grads = torch.autograd.grad(value, params)
            with torch.no_grad():
                return value.detach(), tuple(p - LR * g for p, g in zip(params, grads))

        def primal(params, x, onehot):
            with torch.no_grad():
                return loss(params, x, onehot)

        fn = train_step if step else primal
        if compiled:
            fn = torch.compile(fn)
        params = [torch.from_numpy(a) for a in inputs[:-2]]
        x, onehot = torch.from_numpy(inputs[-2]), torch.from_numpy(inputs[-1])

        return lambda: fn(params, x, onehot)

    return build


# ----------------------------------------------------------------------------- per-sample grads

def _numpy_per_sample(grad: bool):
    """Per-example losses or gradients of the MLP loss (a batch of size-1 backprops)."""
    def run(*inputs: np.ndarray) -> np.ndarray:
        params, x, onehot = inputs[:-2], inputs[-2], inputs[-1]
        rows = []
        for i in range(x.shape[0]):
            loss, grads = _numpy_backprop(params, x[i:i + 1], onehot[i:i + 1])
            rows.append(_flat(*grads) if grad else np.asarray([loss]))
        return np.stack(rows) if grad else np.concatenate(rows)

    return run


def _per_sample_output(g: Any) -> np.ndarray:
    """Stack per-example gradients of every parameter into one (batch, n) array
    (applied to the first call's result, outside the timed calls)."""
    if not isinstance(g, (tuple, list)):
        return np.asarray(g)
    return np.concatenate([np.asarray(a).reshape(a.shape[0], -1) for a in g], axis=1)


def _ours_psg(grad: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp
        from mlir_autodiff import nn

        def loss(params, x, onehot):
            return _mlp_loss(anp, lambda z: nn.log_softmax(z, axis=-1), params,
                             anp.expand_dims(x, 0), anp.expand_dims(onehot, 0))

        fn = ours_jit(ad.vmap(ad.grad(loss) if grad else loss, in_axes=(None, 0, 0)))
        params, x, onehot = tuple(inputs[:-2]), inputs[-2], inputs[-1]
        return lambda: fn(params, x, onehot)

    return build


def _jax_psg(grad: bool):
    def build(inputs):
        import jax

        def loss(params, x, onehot):
            return _mlp_loss(jax.numpy, lambda z: jax.nn.log_softmax(z, axis=-1), params,
                             x[None], onehot[None])

        fn = jax.jit(jax.vmap(jax.grad(loss) if grad else loss, in_axes=(None, 0, 0)))
        params = tuple(jax.device_put(a) for a in inputs[:-2])
        x, onehot = jax.device_put(inputs[-2]), jax.device_put(inputs[-1])
        return lambda: jax.block_until_ready(fn(params, x, onehot))

    return build


def _torch_psg(grad: bool, compiled: bool):
    def build(inputs):
        import torch
        from torch.func import grad as tgrad
        from torch.func import vmap

        configure_torch(torch)

        def loss(params, x, onehot):
            return _mlp_loss(torch, lambda z: torch.log_softmax(z, dim=-1), params,
                             x[None], onehot[None])

        fn = vmap(tgrad(loss) if grad else loss, in_dims=(None, 0, 0))
        if compiled:
            fn = torch.compile(fn)
        params = tuple(torch.from_numpy(a) for a in inputs[:-2])
        x, onehot = torch.from_numpy(inputs[-2]), torch.from_numpy(inputs[-1])

        def call():
            with torch.set_grad_enabled(grad):
                return fn(params, x, onehot)

        return call

    return build


# ----------------------------------------------------------------------------- HVP

def _hvp_inputs(n: int, d: int):
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        w = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
        x = rng.standard_normal((n, d)).astype(np.float32)
        v = rng.standard_normal((n, d)).astype(np.float32)
        return w, x, v

    return make


def _numpy_hvp(w, x, v):
    """H v for f(x) = sum(tanh(x W)^2), derived by hand."""
    t = np.tanh(x @ w)
    return ((2 - 6 * t * t) * (1 - t * t) * (v @ w)) @ w.T


def _hvp_f(xp: Any, x: Any, w: Any) -> Any:
    return xp.sum(xp.tanh(x @ w) ** 2)


def _ours_hvp(hvp: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp

        w, x, v = inputs

        def f(x, w):
            return _hvp_f(anp, x, w)

        if hvp:
            fn = ours_jit(lambda x, v, w: ad.jvp(lambda x: ad.grad(f)(x, w), (x,), (v,))[1])
            return lambda: fn(x, v, w)
        fn = ours_jit(f)
        return lambda: np.asarray(fn(x, w))

    return build


def _jax_hvp(hvp: bool):
    def build(inputs):
        import jax

        w, x, v = (jax.device_put(a) for a in inputs)

        def f(x, w):
            return _hvp_f(jax.numpy, x, w)

        if hvp:
            fn = jax.jit(lambda x, v, w: jax.jvp(lambda x: jax.grad(f)(x, w), (x,), (v,))[1])
            return lambda: np.asarray(jax.block_until_ready(fn(x, v, w)))
        fn = jax.jit(f)
        return lambda: np.asarray(jax.block_until_ready(fn(x, w)))

    return build


def _torch_hvp(hvp: bool, compiled: bool):
    def build(inputs):
        import torch
        from torch.func import grad, jvp

        configure_torch(torch)
        w, x, v = (torch.from_numpy(a) for a in inputs)

        def f(x):
            return _hvp_f(torch, x, w)

        def run(x, v):
            if hvp:
                return jvp(grad(f), (x,), (v,))[1]
            with torch.no_grad():
                return f(x)

        fn = torch.compile(run) if compiled else run
        return lambda: fn(x, v)

    return build


# ----------------------------------------------------------------------------- registry

def register_cases(Case: Any, register: Any) -> None:
    """Add the gradient rows to benchmarks/run.py's registry (run.py calls this)."""
    # (batch, widths, in --quick, in the full run, an acceptance row of issue 7)
    for batch, sizes, quick, full in ((32, (64, 64, 10), True, False),
                                      (128, (784, 512, 512, 10), False, True)):
        size = f"b{batch} " + "-".join(map(str, sizes))
        register(Case(
            name="mlp loss (f)", size=size, inputs=_mlp_inputs(batch, sizes),
            ours=_ours_mlp(False), jax=_jax_mlp(False), torch=_torch_mlp(False, False),
            torch_compile=_torch_mlp(False, True), numpy=_numpy_kernel(_numpy_mlp_loss),
            rtol=1e-4, atol=1e-5, quick=quick, full=full,
        ))
        register(Case(
            name="mlp train step (value_and_grad)", size=size, inputs=_mlp_inputs(batch, sizes),
            ours=_ours_mlp(True), jax=_jax_mlp(True), torch=_torch_mlp(True, False),
            torch_compile=_torch_mlp(True, True), numpy=_numpy_kernel(_numpy_mlp_step),
            rtol=1e-3, atol=1e-5, quick=quick, full=full, primal="mlp loss (f)",
            acceptance=full, grad_ratio_limit=3.0 if full else None,
        ))
    for batch, sizes, quick, full in ((16, (32, 16, 10), True, False),
                                      (64, (256, 128, 10), False, True)):
        size = f"b{batch} " + "-".join(map(str, sizes))
        register(Case(
            name="per-sample loss (vmap f)", size=size, inputs=_mlp_inputs(batch, sizes),
            ours=_ours_psg(False), jax=_jax_psg(False), torch=_torch_psg(False, False),
            torch_compile=_torch_psg(False, True),
            numpy=_numpy_kernel(_numpy_per_sample(False)), rtol=1e-4, atol=1e-5,
            quick=quick, full=full,
        ))
        register(Case(
            name="per-sample grads (vmap of grad)", size=size, inputs=_mlp_inputs(batch, sizes),
            ours=_ours_psg(True), jax=_jax_psg(True), torch=_torch_psg(True, False),
            torch_compile=_torch_psg(True, True), numpy=_numpy_kernel(_numpy_per_sample(True)),
            rtol=1e-3, atol=1e-5, quick=quick, full=full, primal="per-sample loss (vmap f)",
            acceptance=full, output=_per_sample_output,
        ))
    for n, d, quick, full in ((16, 32, True, False), (128, 256, False, True)):
        register(Case(
            name="hvp f: sum(tanh(xW)^2)", size=f"{n}x{d}", inputs=_hvp_inputs(n, d),
            ours=_ours_hvp(False), jax=_jax_hvp(False), torch=_torch_hvp(False, False),
            torch_compile=_torch_hvp(False, True),
            numpy=_numpy_kernel(lambda w, x, v: np.asarray(_hvp_f(np, x, w))),
            rtol=1e-4, atol=1e-4, quick=quick, full=full,
        ))
        register(Case(
            name="hessian-vector product", size=f"{n}x{d}", inputs=_hvp_inputs(n, d),
            ours=_ours_hvp(True), jax=_jax_hvp(True), torch=_torch_hvp(True, False),
            torch_compile=_torch_hvp(True, True), numpy=_numpy_kernel(_numpy_hvp),
            rtol=2e-3, atol=2e-4, quick=quick, full=full, primal="hvp f: sum(tanh(xW)^2)",
            acceptance=full,
        ))


def _numpy_kernel(fn: Callable[..., Any]) -> Callable[[Sequence[np.ndarray]], Callable[[], Any]]:
    return lambda inputs: (lambda: fn(*inputs))
