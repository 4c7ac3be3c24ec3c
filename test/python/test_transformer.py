"""The character-level transformer of examples/char_transformer.py trains like jax's.

The example is written against jax's API; its `# <imports>` block is the only
place it names mlir_autodiff. This test runs it as it is (our `jit` of
`value_and_grad`, `optim.adam`) and a copy whose import block is jax's, with
an Adam written here in jax (Kingma & Ba's Algorithm 1, optax's form
m_hat / (sqrt(v_hat) + eps)), for 100 steps in float64 from the same numpy
initial parameters and minibatches, and checks the two loss curves agree to
1e-6 relative at every step and the final parameters to 1e-6 as well. The
model is small (context 16, width 16, 2 heads, 2 layers) so both sides
compile and run in a few seconds.
"""

from __future__ import annotations

import pathlib
import re
import types

import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "char_transformer.py"
BLOCK = re.compile(r"# <imports>\n(.*?)# </imports>\n", re.S)
OURS_BLOCK = ("import mlir_autodiff as ad\n"
              "import mlir_autodiff.numpy as jnp\n"
              "from mlir_autodiff import nn, optim\n\n")
JAX_BLOCK = ("import jax as ad\n"
             "import jax.numpy as jnp\n"
             "from jax import nn\n\n")
SMALL = dict(steps=100, batch=4, lr=1e-2, seed=3, dtype=np.float64, context=8, d_model=8,
             heads=2, verbose=False)


def _load(source: str, **names) -> types.ModuleType:
    module = types.ModuleType("char_transformer_under_test")
    module.__file__ = str(EXAMPLE)
    module.__dict__.update(names)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def _jax_optim(jax):
    """`adam` and `apply_updates` in jax, optax's shape."""
    jnp = jax.numpy

    def adam(lr, b1=0.9, b2=0.999, eps=1e-8):
        def init(params):
            zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
            return (jnp.zeros((), jnp.int32), zeros, zeros)

        def update(grads, state, params=None):
            count, mu, nu = state
            count = count + 1
            mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
            nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
            c1, c2 = 1 - b1 ** count, 1 - b2 ** count
            updates = jax.tree_util.tree_map(
                lambda m, v: -lr * (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
            return updates, (count, mu, nu)

        return types.SimpleNamespace(init=init, update=update)

    def apply_updates(params, updates):
        return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)

    return types.SimpleNamespace(adam=adam, apply_updates=apply_updates)


def test_example_has_the_expected_import_block() -> None:
    source = EXAMPLE.read_text()
    assert BLOCK.findall(source) == [OURS_BLOCK]
    rest = BLOCK.sub("", source)
    assert "mlir_autodiff" not in rest.split('"""', 2)[2]  # the program names only the block


# the loss curve and parameters, not LLVM's code: -O0 (conftest's llvm_o0) compiles the
# train step in a third of the time; the ports and the CNN tests run optimized code
@pytest.mark.usefixtures("llvm_o0")
def test_loss_curve_matches_jax_for_100_steps() -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    source = EXAMPLE.read_text()
    ours = _load(source).train(**SMALL)
    theirs = _load(BLOCK.sub(JAX_BLOCK, source, count=1), optim=_jax_optim(jax)).train(**SMALL)

    a, b = ours["losses"], theirs["losses"]
    assert a.shape == b.shape == (100,)
    assert a.dtype == np.float64
    # the model learns: the last ten steps' mean loss is well below the first step's
    assert b[-10:].mean() < 0.8 * b[0]
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
    pa = jax.tree_util.tree_leaves(ours["params"])
    pb = jax.tree_util.tree_leaves(theirs["params"])
    assert len(pa) == len(pb) == 5 + 2 * 10  # tok, pos, head, ln_f; 10 per block
    for x, y in zip(pa, pb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype == np.float64
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6 * np.abs(y).max())
