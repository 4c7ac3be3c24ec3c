"""Transformer rows for benchmarks/run.py: a character-level transformer's loss and
training step.

The model is examples/char_transformer.py's, run as that file defines it: ours
loads it as it is, jax loads it with its `# <imports>` block replaced by jax's
(the test test/python/test_transformer.py checks that the two train alike).
Two pre-layernorm blocks of causal multi-head attention and a gelu MLP over an
embedding lookup of integer character ids, mean cross-entropy with integer
labels, in float32, at the demo's size (batch 16, context 32, width 64, 4
heads, the bundled text's 43 characters). The step is value_and_grad plus an
SGD update in one compiled call, as jax.jit does it. There is no numpy
builder: results are checked against jax's.
"""

from __future__ import annotations

import functools
import pathlib
import re
import types
from typing import Any

import numpy as np
from frameworks import ours_jit

LR = 0.05
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "char_transformer.py"
_BLOCK = re.compile(r"# <imports>\n(.*?)# </imports>\n", re.S)
_JAX_BLOCK = "import jax as ad\nimport jax.numpy as jnp\nfrom jax import nn\n\n"


@functools.cache
def _program(framework: str) -> types.ModuleType:
    """examples/char_transformer.py with `framework`'s imports (the `optim` it imports
    for training is not used here)."""
    source = EXAMPLE.read_text()
    if framework == "jax":
        source = _BLOCK.sub(_JAX_BLOCK, source, count=1)
    elif framework == "numpy":  # the data and initialisation only (numpy): no compiler
        source = _BLOCK.sub("ad = jnp = nn = optim = None\n", source, count=1)
    module = types.ModuleType(f"char_transformer_{framework}")
    module.__file__ = str(EXAMPLE)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def _inputs(batch: int, context: int, d_model: int, heads: int):
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        program = _program("numpy")  # also where MLIR is not installed (the GPU check)
        data, alphabet = program.load_corpus()
        cfg = program.Config(vocab=len(alphabet), context=context, d_model=d_model,
                             heads=heads)
        params = program.init_params(cfg, rng, np.float32)
        xs, ys = program.batches(data, context, batch, 1, rng)
        return params, xs[0], ys[0]
    return make


def _leaves(tree: Any) -> list[Any]:
    """The arrays of a parameter tree, dict keys sorted (both frameworks' order)."""
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _output(result: Any) -> np.ndarray:
    """The loss, then (for the step) every updated parameter, as one float64 vector."""
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in _leaves(result)])


def _functions(value_and_grad: Any, loss: Any, heads: int) -> tuple[Any, Any]:
    """`(loss, train_step)` of (params, tokens, targets), the head count fixed."""
    def loss_fn(params, tokens, targets):
        return loss(params, tokens, targets, heads)

    def train_step(params, tokens, targets):
        value, grads = value_and_grad(loss_fn)(params, tokens, targets)
        return value, _sgd(params, grads)

    return loss_fn, train_step


def _sgd(p: Any, g: Any) -> Any:
    if isinstance(p, dict):
        return {k: _sgd(p[k], g[k]) for k in p}
    if isinstance(p, (tuple, list)):
        return type(p)(_sgd(a, b) for a, b in zip(p, g))
    return p - LR * g


def _ours(step: bool, heads: int):
    def build(inputs):
        import mlir_autodiff as ad

        fn = ours_jit(_functions(ad.value_and_grad, _program("ours").loss, heads)[step])
        params, tokens, targets = inputs
        return lambda: fn(params, tokens, targets)

    return build


def _jax(step: bool, heads: int):
    def build(inputs):
        import jax

        fn = jax.jit(_functions(jax.value_and_grad, _program("jax").loss, heads)[step])
        params, tokens, targets = (jax.device_put(a) for a in inputs)
        return lambda: jax.block_until_ready(fn(params, tokens, targets))

    return build


def register_cases(Case: Any, register: Any) -> None:
    """Add the transformer rows to benchmarks/run.py's registry (run.py calls this)."""
    # full runs only: --quick (run by test_benchmarks.py) stays cheap
    for batch, context, d_model, heads in ((16, 32, 64, 4),):
        size = f"b{batch} t{context} d{d_model} h{heads} 2 layers"
        inputs = _inputs(batch, context, d_model, heads)
        register(Case(name="transformer loss (f)", size=size, inputs=inputs,
                      ours=_ours(False, heads), jax=_jax(False, heads), rtol=1e-4, atol=1e-5,
                      quick=False, full=True, output=_output))
        register(Case(name="transformer train step (value_and_grad)", size=size,
                      inputs=inputs, ours=_ours(True, heads), jax=_jax(True, heads), rtol=1e-3, atol=1e-5,
                      quick=False, full=True, primal="transformer loss (f)",
                      output=_output))
