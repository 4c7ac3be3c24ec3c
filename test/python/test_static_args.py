"""Plain Python values a transform does not transform reach the function unchanged.

jax's `grad(f)(x, 4)`, `value_and_grad`, `jacrev`, `jacfwd`, `hessian` (the
arguments outside `argnums`) and `vmap(f, (0, None))(x, 4)` (the unmapped
ones) call `f` with the int 4 itself, so `f` may use it as a shape, a head
count or a loop bound. These transforms traced it into an int64 scalar, and
`x.reshape(n, -1)` stopped with a ConcretizationTypeError. Checked inside
`jit` (one compilation for all transforms) and eagerly, against jax in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp

SEEN: list[type] = []


def f(np_, x, n, scale):
    """sum over n rows of (row . row) * scale, then squared; `n` shapes and loops."""
    SEEN.append(type(n))
    rows = x.reshape(n, -1)
    total = 0.0
    for i in range(n):  # a Python loop over the static count
        total = total + np_.sum(rows[i] * rows[i]) * scale
    return total * total


def ours(x, n, scale=0.5):
    return f(anp, x, n, scale)


def _transforms(mod, fun, x):
    return (
        mod.grad(fun)(x, 2),
        mod.value_and_grad(fun)(x, 2, 0.25),
        mod.jacrev(fun)(x, 2),
        mod.jacfwd(fun)(x, 2),
        mod.hessian(fun)(x, 2),
        mod.vmap(fun, in_axes=(0, None))(mod.numpy.stack([x, 2 * x]), 3),
        mod.grad(fun, argnums=(0, 2))(x, 2, 0.5),  # a differentiated Python float
    )


@pytest.fixture(scope="module")
def expected():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)

    def theirs(x, n, scale=0.5):
        return f(jax.numpy, x, n, scale)

    x = np.linspace(-1.0, 2.0, 6)
    return x, jax.tree_util.tree_map(np.asarray, _transforms(jax, theirs, x))


def _check(got, want) -> None:
    got_leaves = ad.tree_util.tree_leaves(got)
    want_leaves = ad.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves) == 9
    for a, b in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)


def test_untransformed_python_values_pass_unchanged_under_jit(expected) -> None:
    x, want = expected
    SEEN.clear()
    got = ad.jit(lambda x: _transforms(ad, ours, x))(x)
    assert SEEN and set(SEEN) == {int}
    _check(got, want)


def test_untransformed_python_values_pass_unchanged_eagerly(expected) -> None:
    x, want = expected
    SEEN.clear()
    _check(_transforms(ad, ours, x), want)
    assert SEEN and set(SEEN) == {int}
    # each value is its own version: a later call with another count is not the first's
    g3 = ad.grad(ours)(x, 3)
    np.testing.assert_allclose(g3, 2 * (0.5 * np.sum(x * x)) * x, rtol=1e-12)
