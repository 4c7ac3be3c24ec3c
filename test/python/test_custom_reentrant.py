"""A custom_vjp whose bwd rule calls the same custom function (issue 18 item 14).

Implicit differentiation of a fixed-point solver, as in jax's custom-derivatives
tutorial: the backward rule solves the adjoint fixed point with `fixed_point`
itself. The rule is traced once (to a bounded depth) and differentiated once and
twice. Oracles: the closed form where there is one, the same program written with
jax.custom_vjp (x64), and central finite differences of our own compiled value.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax
from mlir_autodiff import numpy as anp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def make_fixed_point(custom_vjp, vjp, while_loop, np_):
    """The tutorial's solver for one library (ours or jax): x* = f(a, x*)."""

    @partial(custom_vjp, nondiff_argnums=(0,))
    def fixed_point(f, a, x_guess):
        def cond_fun(carry):
            x_prev, x = carry
            return np_.max(np_.abs(x_prev - x)) > 1e-13

        def body_fun(carry):
            _, x = carry
            return x, f(a, x)

        _, x_star = while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
        return x_star

    def fixed_point_fwd(f, a, x_init):
        x_star = fixed_point(f, a, x_init)
        return x_star, (a, x_star)

    def rev_iter(f, packed, u):
        a, x_star, x_star_bar = packed
        _, vjp_x = vjp(lambda x: f(a, x), x_star)
        return x_star_bar + vjp_x(u)[0]

    def fixed_point_rev(f, res, x_star_bar):
        a, x_star = res
        _, vjp_a = vjp(lambda a: f(a, x_star), a)
        (a_bar,) = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar),
                                     x_star_bar))
        return a_bar, np_.zeros_like(x_star)

    fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)

    def newton_sqrt(a):
        return fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)

    def cos_fixed_point(a):  # x = cos(a x) / 2: a contraction for |a| < 2
        return np_.sum(fixed_point(lambda a, x: 0.5 * np_.cos(a * x), a, np_.zeros_like(a)))

    return {"newton_sqrt": newton_sqrt, "cos_fixed_point": cos_fixed_point}


OURS = make_fixed_point(ad.custom_vjp, ad.vjp, lax.while_loop, anp)
THEIRS = make_fixed_point(jax.custom_vjp, jax.vjp, jax.lax.while_loop, jnp)

POINTS = {
    "newton_sqrt": [np.float64(2.0), np.float64(0.7), np.array([0.5, 1.5, 3.0])],
    "cos_fixed_point": [np.array([0.3, -0.8, 1.1])],
}
CASES = [(name, i) for name, points in POINTS.items() for i in range(len(points))]


def _fd(fun, a, h=1e-5):
    a = np.asarray(a, np.float64)
    out = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        e = np.zeros(a.shape)
        e[idx] = h
        out[idx] = np.sum(fun(a + e) - fun(a - e)) / (2 * h)
    return out


def _scalar(fun):
    return lambda a: anp.sum(fun(a))


@pytest.mark.parametrize("name,i", CASES)
def test_value_and_gradient_against_jax_and_finite_differences(name, i):
    a = POINTS[name][i]
    ours, theirs = OURS[name], THEIRS[name]
    np.testing.assert_allclose(ad.jit(ours)(a), theirs(a), rtol=1e-12)
    g = ad.grad(_scalar(ours))(a)
    np.testing.assert_allclose(g, jax.grad(lambda a: jnp.sum(theirs(a)))(a), rtol=1e-10)
    np.testing.assert_allclose(g, _fd(ad.jit(ours), a), rtol=1e-7, atol=1e-9)
    if name == "newton_sqrt":
        np.testing.assert_allclose(g, 0.5 / np.sqrt(a), rtol=1e-10)


@pytest.mark.parametrize("name,i", CASES)
def test_second_derivative_against_jax_and_finite_differences(name, i):
    a = POINTS[name][i]
    ours, theirs = OURS[name], THEIRS[name]
    gg = ad.grad(_scalar(ad.grad(_scalar(ours))))(a)
    want = jax.grad(lambda a: jnp.sum(jax.grad(lambda a: jnp.sum(theirs(a)))(a)))(a)
    np.testing.assert_allclose(gg, want, rtol=1e-8)
    np.testing.assert_allclose(gg, _fd(ad.jit(ad.grad(_scalar(ours))), a), rtol=1e-6,
                               atol=1e-8)
    if name == "newton_sqrt":
        np.testing.assert_allclose(gg, -0.25 * a ** -1.5, rtol=1e-8)


def test_pullback_of_a_vector_solve_satisfies_the_transpose_identity():
    """<ct, J t> = <J^T ct, t>: J t by finite differences (the function has only a
    custom VJP), J^T ct by our pullback."""
    a = POINTS["newton_sqrt"][2]
    t, ct = np.array([0.3, -1.0, 0.6]), np.array([1.5, 0.2, -0.4])
    ours = OURS["newton_sqrt"]
    jt = (ad.jit(ours)(a + 1e-6 * t) - ad.jit(ours)(a - 1e-6 * t)) / 2e-6
    cot = ad.jit(lambda a, ct: ad.vjp(ours, a)[1](ct)[0])(a, ct)
    assert abs(ct @ jt - cot @ t) <= 1e-8 * max(1.0, abs(ct @ jt))
