"""ADBench rows for benchmarks/run.py: GMM gradient (two sizes) and LSTM objective gradient.

The objectives are written once against a numpy-like `xp` (adbench/gmm.py,
adbench/lstm.py) and run as they are under our tracer, jax.numpy, numpy
(the float64 value reference) and torch (through adbench/xp.py). Gradient
rows have no numpy builder: run.py checks them across frameworks (against
jax's gradient); test/python/test_adbench_{gmm,lstm}.py check them against
ADBench's published values and finite differences.

LSTM: the sequence loop is one loop op for ours (`mlir_autodiff.lax.scan`,
one scf.for whose step is traced once) and for JAX (`jax.lax.scan`), so
both compile the full lstm_l2_c1024 rows in about a second; numpy and torch
run it as a Python loop. A short slice of the same data (the first
LSTM_SLICE_STEPS elements of the sequence) is timed too. torch.compile is
skipped above TORCH_COMPILE_LSTM_MAX_STEPS steps, where dynamo would unroll
the loop (1023 steps at c=1024).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from adbench import data_file, gmm, lstm
from adbench.xp import torch_namespace
from frameworks import Skipped, configure_torch, ours_jit

TORCH_COMPILE_LSTM_MAX_STEPS = 16
LSTM_SLICE_STEPS = 9


def _jax_call(jax: Any, f: Callable[..., Any], argnums: tuple[int, ...], grad: bool,
              inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
    """A timed thunk: jax.jit of `f` (or of its gradient w.r.t. `argnums`) on
    device-resident inputs, blocking until the result is ready."""
    fn = jax.jit(jax.grad(f, argnums=argnums) if grad else f)
    args = [jax.device_put(a) for a in inputs]

    return lambda: jax.block_until_ready(fn(*args))


_LOADED: dict[str, Any] = {}


def _load(relative: str, loader: Callable[[Path], Any]) -> Any:
    """`loader` applied to the shipped input `relative` (benchmarks/data/adbench), once."""
    if relative not in _LOADED:
        _LOADED[relative] = loader(data_file(relative))
    return _LOADED[relative]


# ----------------------------------------------------------------------------- GMM

class _Gmm:
    """One GMM data file: inputs and the objective per framework namespace."""

    def __init__(self, relative: str):
        self.relative = relative

    @property
    def inp(self) -> gmm.GmmInput:
        return _load(self.relative, gmm.load)

    def inputs(self, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        inp = self.inp
        return inp.alphas, inp.means, inp.icf, inp.x

    def objective(self, xp: Any, selector: Any = None) -> Callable[..., Any]:
        inp = self.inp
        sel = gmm.lower_selector(inp.d) if selector is None else selector
        const = gmm.constant_terms(inp)
        return lambda a, m, q, x: gmm.objective(xp, a, m, q, x, sel, inp.gamma, inp.m, const)

    def numpy(self, inputs):
        f = self.objective(np)
        return lambda: np.asarray(f(*inputs))

    def ours(self, grad: bool):
        def build(inputs):
            import mlir_autodiff as ad
            import mlir_autodiff.numpy as anp

            f = self.objective(anp)
            fn = ours_jit(ad.grad(f, argnums=(0, 1, 2)) if grad else f)
            return lambda: fn(*inputs)

        return build

    def jax(self, grad: bool):
        def build(inputs):
            import jax

            jax.config.update("jax_enable_x64", True)
            return _jax_call(jax, self.objective(jax.numpy), (0, 1, 2), grad, inputs)

        return build

    def torch(self, grad: bool, compiled: bool):
        def build(inputs):
            import torch

            configure_torch(torch)
            f = self.objective(torch_namespace(),
                               torch.from_numpy(gmm.lower_selector(self.inp.d)))

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

            return lambda: fn(*args)

        return build


# ----------------------------------------------------------------------------- LSTM

class _Lstm:
    """lstm_l2_c1024, or the first `steps` elements of its sequence."""

    def __init__(self, relative: str, steps: int | None = None):
        self.relative = relative
        self.steps = steps

    @property
    def inp(self) -> lstm.LstmInput:
        full = _load(self.relative, lstm.load)
        return full if self.steps is None else lstm.truncated(full, self.steps)

    def inputs(self, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        inp = self.inp
        return inp.main, inp.extra, inp.state, inp.sequence

    def numpy(self, inputs):
        return lambda: np.asarray(lstm.objective(np, *inputs))

    def ours(self, grad: bool):
        def build(inputs):
            import mlir_autodiff as ad
            import mlir_autodiff.numpy as anp

            def f(main, extra, state, sequence):
                return lstm.objective(anp, main, extra, state, sequence)  # lax.scan

            fn = ours_jit(ad.grad(f, argnums=(0, 1)) if grad else f)
            return lambda: fn(*inputs)

        return build

    def jax(self, grad: bool):
        def build(inputs):
            import jax

            jax.config.update("jax_enable_x64", True)

            def f(main, extra, state, sequence):
                return lstm.objective(jax.numpy, main, extra, state, sequence)  # lax.scan

            return _jax_call(jax, f, (0, 1), grad, inputs)

        return build

    def torch(self, grad: bool, compiled: bool):
        def build(inputs):
            import torch

            configure_torch(torch)
            if compiled and inputs[3].shape[0] > TORCH_COMPILE_LSTM_MAX_STEPS:
                raise Skipped("dynamo would unroll the whole sequence loop; skipped to "
                              "bound the run's time")
            xp = torch_namespace()

            def g(main, extra, state, sequence):
                main, extra = (t.detach().requires_grad_(True) for t in (main, extra))
                return torch.autograd.grad(lstm.objective(xp, main, extra, state, sequence),
                                           (main, extra))

            def primal(main, extra, state, sequence):
                with torch.no_grad():
                    return lstm.objective(xp, main, extra, state, sequence)

            fn = g if grad else primal
            if compiled:
                fn = torch.compile(fn)
            args = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]

            return lambda: fn(*args)

        return build


# ----------------------------------------------------------------------------- registry

def _register_pair(Case: Any, register: Any, problem: Any, label: str, size: str,
                   quick: bool, full: bool, acceptance: bool, rtol: float) -> None:
    """An objective row and its gradient row (primal of the other)."""
    objective = f"ADBench {label} objective (f64)"
    register(Case(
        name=objective, size=size, inputs=problem.inputs, ours=problem.ours(False),
        jax=problem.jax(False), torch=problem.torch(False, False),
        torch_compile=problem.torch(False, True), numpy=problem.numpy,
        rtol=1e-10, atol=1e-8, quick=quick, full=full,
    ))
    register(Case(
        name=f"ADBench {label} gradient (f64)", size=size, inputs=problem.inputs,
        ours=problem.ours(True), jax=problem.jax(True), torch=problem.torch(True, False),
        torch_compile=problem.torch(True, True), numpy=None, rtol=rtol, atol=1e-8,
        quick=quick, full=full, primal=objective, acceptance=acceptance,
        grad_ratio_limit=3.0 if acceptance else None,
    ))


def register_cases(Case: Any, register: Any) -> None:
    """Add the ADBench rows to benchmarks/run.py's registry (run.py calls this)."""
    _register_pair(Case, register, _Gmm("gmm/test.txt"), "GMM", "test.txt",
                   quick=True, full=False, acceptance=False, rtol=1e-8)
    for d, k in ((10, 25), (20, 50)):
        _register_pair(Case, register, _Gmm(f"gmm/1k/gmm_d{d}_K{k}.txt"), "GMM",
                       f"d{d} K{k} n1000", quick=False, full=True, acceptance=True, rtol=1e-8)
    data = "lstm/lstm_l2_c1024.txt"
    _register_pair(Case, register, _Lstm(data, 4), "LSTM", "l2 c1024[:4]",
                   quick=True, full=False, acceptance=False, rtol=1e-8)
    _register_pair(Case, register, _Lstm(data, LSTM_SLICE_STEPS), "LSTM",
                   f"l2 c1024[:{LSTM_SLICE_STEPS}]", quick=False, full=True,
                   acceptance=False, rtol=1e-8)
    _register_pair(Case, register, _Lstm(data), "LSTM", "l2 c1024", quick=False, full=True,
                   acceptance=True, rtol=1e-8)
