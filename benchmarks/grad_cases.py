"""Gradient rows for benchmarks/run.py: MLP training step, Hessian-vector product, ADBench GMM.

Each gradient row has a matching primal row (`primal=` names it), so the
table can also report time(grad f) / time(f) per framework, the number AD
papers quote. Every framework does the same work inside one compiled call:
jax.jit(value_and_grad) + update, torch eager autograd and torch.compile.
Results are compared against a hand-derived numpy implementation where one
is short enough to be obviously right (MLP, HVP); the GMM gradient is
checked in test/python/test_adbench_gmm.py against ADBench's published
value, finite differences and jax.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adbench import gmm

LR = 0.05
WD = 1e-4


def _flat(*arrays: Any) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


# ----------------------------------------------------------------------------- MLP step

def _mlp_inputs(batch: int, sizes: Sequence[int]):
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        arrays = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            arrays.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
                          .astype(np.float32))
            arrays.append(np.zeros(fan_out, np.float32))
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        onehot = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
        return (*arrays, x, onehot)

    return make


def _mlp_loss(xp: Any, log_softmax: Any, w1, b1, w2, b2, x, onehot):
    h = xp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    nll = -xp.mean(xp.sum(onehot * log_softmax(logits), axis=-1))
    return nll + WD * (xp.sum(w1 * w1) + xp.sum(w2 * w2))


def _numpy_mlp_step(w1, b1, w2, b2, x, onehot):
    """Backpropagation written out by hand (the reference)."""
    n = x.shape[0]
    u = x @ w1 + b1
    h = np.tanh(u)
    z = h @ w2 + b2
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    loss = -np.mean(np.sum(onehot * np.log(p), axis=-1)) + WD * (np.sum(w1 * w1)
                                                                  + np.sum(w2 * w2))
    dz = (p - onehot) / n
    gw2 = h.T @ dz + 2 * WD * w2
    gb2 = dz.sum(axis=0)
    du = (dz @ w2.T) * (1 - h * h)
    gw1 = x.T @ du + 2 * WD * w1
    gb1 = du.sum(axis=0)
    return _flat(loss, w1 - LR * gw1, b1 - LR * gb1, w2 - LR * gw2, b2 - LR * gb2)


def _ours_mlp(step: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp
        from mlir_autodiff import nn

        def loss(params, x, onehot):
            return _mlp_loss(anp, lambda z: nn.log_softmax(z, axis=-1), *params, x, onehot)

        if step:
            def train_step(params, x, onehot):
                value, grads = ad.value_and_grad(loss)(params, x, onehot)
                return value, tuple(p - LR * g for p, g in zip(params, grads))

            fn = ad.jit(train_step)
        else:
            fn = ad.jit(loss)
        params, x, onehot = tuple(inputs[:4]), inputs[4], inputs[5]

        def call():
            out = fn(params, x, onehot)
            return _flat(out[0], *out[1]) if step else np.asarray(out)

        return call

    return build


def _jax_mlp(step: bool):
    def build(inputs):
        import jax
        import jax.numpy as jnp

        def loss(params, x, onehot):
            return _mlp_loss(jnp, lambda z: jax.nn.log_softmax(z, axis=-1), *params, x, onehot)

        if step:
            @jax.jit
            def fn(params, x, onehot):
                value, grads = jax.value_and_grad(loss)(params, x, onehot)
                return value, tuple(p - LR * g for p, g in zip(params, grads))
        else:
            fn = jax.jit(loss)
        params = tuple(jax.device_put(a) for a in inputs[:4])
        x, onehot = jax.device_put(inputs[4]), jax.device_put(inputs[5])

        def call():
            out = fn(params, x, onehot)
            jax.block_until_ready(out)
            return _flat(out[0], *out[1]) if step else np.asarray(out)

        return call

    return build


def _torch_mlp(step: bool, compiled: bool):
    def build(inputs):
        import torch

        def loss(params, x, onehot):
            return _mlp_loss(torch, lambda z: torch.log_softmax(z, dim=-1), *params, x, onehot)

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
        params = [torch.from_numpy(a) for a in inputs[:4]]
        x, onehot = torch.from_numpy(inputs[4]), torch.from_numpy(inputs[5])

        def call():
            out = fn(params, x, onehot)
            if step:
                return _flat(out[0].numpy(), *(p.detach().numpy() for p in out[1]))
            return out.numpy()

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


def _ours_hvp(inputs):
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    w, x, v = inputs

    def f(x, w):
        return anp.sum(anp.tanh(x @ w) ** 2)

    fn = ad.jit(lambda x, v, w: ad.jvp(lambda x: ad.grad(f)(x, w), (x,), (v,))[1])
    return lambda: fn(x, v, w)


def _jax_hvp(inputs):
    import jax
    import jax.numpy as jnp

    w, x, v = (jax.device_put(a) for a in inputs)

    def f(x, w):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    fn = jax.jit(lambda x, v, w: jax.jvp(lambda x: jax.grad(f)(x, w), (x,), (v,))[1])
    return lambda: fn(x, v, w).block_until_ready()


def _torch_hvp(compiled: bool):
    def build(inputs):
        import torch
        from torch.func import grad, jvp

        w, x, v = (torch.from_numpy(a) for a in inputs)

        def f(x):
            return torch.sum(torch.tanh(x @ w) ** 2)

        def hvp(x, v):
            return jvp(grad(f), (x,), (v,))[1]

        fn = torch.compile(hvp) if compiled else hvp
        return lambda: fn(x, v)

    return build




# ----------------------------------------------------------------------------- per-sample grads

def _psg_inputs(batch: int, sizes: Sequence[int]):
    return _mlp_inputs(batch, sizes)


def _numpy_per_sample_grads(w1, b1, w2, b2, x, onehot):
    """Per-example gradients of the MLP loss, by hand (batch of size-1 backprops)."""
    rows = []
    for i in range(x.shape[0]):
        xi, yi = x[i:i + 1], onehot[i:i + 1]
        u = xi @ w1 + b1
        h = np.tanh(u)
        z = h @ w2 + b2
        z = z - z.max(axis=-1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
        dz = p - yi
        gw2 = h.T @ dz + 2 * WD * w2
        du = (dz @ w2.T) * (1 - h * h)
        gw1 = xi.T @ du + 2 * WD * w1
        rows.append(_flat(gw1, du.sum(0), gw2, dz.sum(0)))
    return np.stack(rows)


def _ours_psg(inputs):
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp
    from mlir_autodiff import nn

    def loss(params, x, onehot):
        return _mlp_loss(anp, lambda z: nn.log_softmax(z, axis=-1), *params,
                         anp.expand_dims(x, 0), anp.expand_dims(onehot, 0))

    fn = ad.jit(ad.vmap(ad.grad(loss), in_axes=(None, 0, 0)))
    params, x, onehot = tuple(inputs[:4]), inputs[4], inputs[5]

    def call():
        g = fn(params, x, onehot)
        return np.concatenate([a.reshape(a.shape[0], -1) for a in g], axis=1)

    return call


def _jax_psg(inputs):
    import jax
    import jax.numpy as jnp

    def loss(params, x, onehot):
        return _mlp_loss(jnp, lambda z: jax.nn.log_softmax(z, axis=-1), *params,
                         x[None], onehot[None])

    fn = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    params = tuple(jax.device_put(a) for a in inputs[:4])
    x, onehot = jax.device_put(inputs[4]), jax.device_put(inputs[5])

    def call():
        g = jax.block_until_ready(fn(params, x, onehot))
        return np.concatenate([np.asarray(a).reshape(a.shape[0], -1) for a in g], axis=1)

    return call


def _torch_psg(compiled: bool):
    def build(inputs):
        import torch
        from torch.func import grad, vmap

        def loss(params, x, onehot):
            return _mlp_loss(torch, lambda z: torch.log_softmax(z, dim=-1), *params,
                             x[None], onehot[None])

        fn = vmap(grad(loss), in_dims=(None, 0, 0))
        if compiled:
            fn = torch.compile(fn)
        params = tuple(torch.from_numpy(a) for a in inputs[:4])
        x, onehot = torch.from_numpy(inputs[4]), torch.from_numpy(inputs[5])

        def call():
            g = fn(params, x, onehot)
            return np.concatenate([a.detach().numpy().reshape(a.shape[0], -1) for a in g],
                                  axis=1)

        return call

    return build


# ----------------------------------------------------------------------------- ADBench GMM

def _gmm_file() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "shared" / "data" / "adbench" / "gmm" / "1k" / "gmm_d10_K25.txt"
        if cand.is_file():
            return cand
    return None


_GMM: dict[str, Any] = {}


def _gmm_input() -> gmm.GmmInput:
    if "inp" not in _GMM:
        path = _gmm_file()
        if path is None:
            raise FileNotFoundError("ADBench data (shared/data/adbench/gmm/1k) not found")
        _GMM["inp"] = gmm.load(path)
    return _GMM["inp"]


def _gmm_inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    inp = _gmm_input()
    return inp.alphas, inp.means, inp.icf, inp.x


def _gmm_objective(xp: Any):
    inp = _gmm_input()
    selector = gmm.lower_selector(inp.d)
    const = gmm.constant_terms(inp)
    return lambda a, m, q, x: gmm.objective(xp, a, m, q, x, selector, inp.gamma, inp.m, const)


def _ours_gmm(grad: bool):
    def build(inputs):
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp

        f = _gmm_objective(anp)
        fn = ad.jit(ad.grad(f, argnums=(0, 1, 2)) if grad else f)
        return lambda: _flat(*fn(*inputs)) if grad else np.asarray(fn(*inputs))

    return build


def _jax_gmm(grad: bool):
    def build(inputs):
        import jax

        jax.config.update("jax_enable_x64", True)
        f = _gmm_objective(jax.numpy)
        fn = jax.jit(jax.grad(f, argnums=(0, 1, 2)) if grad else f)
        args = [jax.device_put(a) for a in inputs]

        def call():
            out = fn(*args)
            jax.block_until_ready(out)
            return _flat(*out) if grad else np.asarray(out)

        return call

    return build


def _torch_gmm(grad: bool, compiled: bool):
    def build(inputs):
        import torch

        class _XP:  # the numpy names the objective uses, on torch tensors
            exp, log, einsum = torch.exp, torch.log, torch.einsum

            @staticmethod
            def sum(a, axis=None):
                return torch.sum(a) if axis is None else torch.sum(a, dim=axis)

            @staticmethod
            def max(a, axis=None, keepdims=False):
                return torch.amax(a, dim=axis, keepdim=keepdims)

            @staticmethod
            def expand_dims(a, axis):
                return torch.unsqueeze(a, axis)

            @staticmethod
            def squeeze(a, axis):
                return torch.squeeze(a, axis)

        inp = _gmm_input()
        selector = torch.from_numpy(gmm.lower_selector(inp.d))
        const = gmm.constant_terms(inp)

        def f(a, m, q, x):
            return gmm.objective(_XP, a, m, q, x, selector, inp.gamma, inp.m, const)

        def g(a, m, q, x):
            a, m, q = (t.detach().requires_grad_(True) for t in (a, m, q))
            return torch.autograd.grad(f(a, m, q, x), (a, m, q))

        def primal(a, m, q, x):
            with torch.no_grad():
                return f(a, m, q, x)

        fn = g if grad else primal
        if compiled:
            fn = torch.compile(fn)
        args = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]

        def call():
            out = fn(*args)
            return _flat(*(t.detach().numpy() for t in out)) if grad else out.numpy()

        return call

    return build


def register_cases(Case: Any, register: Any) -> None:
    """Add the gradient rows to benchmarks/run.py's registry (run.py calls this)."""
    for _batch, _sizes, _quick in ((64, (64, 64, 10), True), (128, (784, 256, 10), False)):
        _size = f"b{_batch} " + "-".join(map(str, _sizes))
        register(Case(
            name="mlp loss", size=_size, inputs=_mlp_inputs(_batch, _sizes),
            ours=_ours_mlp(False), jax=_jax_mlp(False), torch=_torch_mlp(False, False),
            torch_compile=_torch_mlp(False, True),
            numpy=lambda inputs: (lambda: np.asarray(_numpy_mlp_step(*inputs)[0])),
            rtol=1e-4, atol=1e-5, quick=_quick,
        ))
        register(Case(
            name="mlp train step", size=_size, inputs=_mlp_inputs(_batch, _sizes),
            ours=_ours_mlp(True), jax=_jax_mlp(True), torch=_torch_mlp(True, False),
            torch_compile=_torch_mlp(True, True),
            numpy=lambda inputs: (lambda: _numpy_mlp_step(*inputs)),
            rtol=1e-3, atol=1e-5, quick=_quick, primal="mlp loss",
        ))
    for _batch, _sizes, _quick in ((64, (64, 32, 10), True), (64, (256, 128, 10), False)):
        register(Case(
            name="per-sample grads (vmap of grad)", size=f"b{_batch} " + "-".join(map(str, _sizes)),
            inputs=_psg_inputs(_batch, _sizes), ours=_ours_psg, jax=_jax_psg,
            torch=_torch_psg(False), torch_compile=_torch_psg(True),
            numpy=lambda inputs: (lambda: _numpy_per_sample_grads(*inputs)),
            rtol=1e-3, atol=1e-5, quick=_quick,
        ))
    for _n, _d, _quick in ((32, 64, True), (128, 256, False)):
        register(Case(
            name="hessian-vector product", size=f"{_n}x{_d}", inputs=_hvp_inputs(_n, _d),
            ours=_ours_hvp, jax=_jax_hvp, torch=_torch_hvp(False), torch_compile=_torch_hvp(True),
            numpy=lambda inputs: (lambda: _numpy_hvp(*inputs)), rtol=2e-3, atol=2e-4,
            quick=_quick,
        ))
    register(Case(
        name="ADBench GMM objective (f64)", size="d10 K25 n1000", inputs=_gmm_inputs,
        ours=_ours_gmm(False), jax=_jax_gmm(False), torch=_torch_gmm(False, False),
        torch_compile=_torch_gmm(False, True),
        numpy=lambda inputs: (lambda: np.asarray(_gmm_objective(np)(*inputs))),
        rtol=1e-10, atol=1e-8, quick=False,
    ))
    register(Case(
        name="ADBench GMM gradient (f64)", size="d10 K25 n1000", inputs=_gmm_inputs,
        ours=_ours_gmm(True), jax=_jax_gmm(True), torch=_torch_gmm(True, False),
        torch_compile=_torch_gmm(True, True), numpy=None, quick=False,
        primal="ADBench GMM objective (f64)",
    ))
