"""Reverse mode of a function that draws replays the generator's stream (issue 18).

`ad.vjp(f, x)` inside a trace uses `f` twice (the primal call and every
pullback): both must draw the numbers one ordinary call of `f` at that point
of the program draws, and the draws after it must continue the stream as they
would after that call. So with one seed, `vjp(f, x)[0]` inside `jit` equals
`f(x)` draw for draw, and the pullback is the derivative of the function those
draws define.

The oracles here are independent of the transforms: the stream's numbers are
drawn eagerly from the same seed (one eager call per draw, which reads the
generator from its current offset), and derivatives are written in closed
form from those numbers (f = sin(x) * r gives df = cos(x) * r) or checked by
central finite differences of `jit(f)` reseeded, so the numbers are fixed.
"""

from __future__ import annotations

import composition_cases as cc
import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax, nn
from mlir_autodiff import numpy as anp

SEED = 11
N = 6
X = np.linspace(-1.2, 1.3, N)
CT = np.linspace(0.5, -0.7, N)

#: Each public stateful draw of `ad.random` as a float array of shape (N,)
#: (the traced form and the same draw made eagerly, for the oracle).
DRAWS = {
    "uniform": lambda: ad.random.uniform((N,), np.float64, 0.5, 2.0),
    "rand": lambda: ad.random.rand(N, dtype=np.float64),
    "normal": lambda: ad.random.normal((N,), np.float64, 1.0, 0.5),
    "randn": lambda: ad.random.randn(N, dtype=np.float64),
    "bernoulli": lambda: anp.astype(ad.random.bernoulli(0.6, (N,)), np.float64),
    "randint": lambda: anp.astype(ad.random.randint(1, 5, (N,)), np.float64),
    "dropout": lambda: nn.dropout(anp.ones(N, np.float64), 0.5),
}

#: Names of `ad.random` that are not draws from the implicit generator.
NOT_DRAWS = {"DEFAULT_SEED", "KEY_DTYPE", "KEY_SHAPE", "call_with_state", "fold_in", "get_state",
             "key", "manual_seed", "pin_draws", "seed", "set_state", "split",
             # keyed-only distributions (jax.random's): they never touch the generator
             "PRNGKey", "categorical", "choice", "exponential", "gumbel", "laplace",
             "multivariate_normal", "permutation", "shuffle", "truncated_normal"}


def test_every_draw_has_a_case():
    assert set(ad.random.__all__) - NOT_DRAWS == set(DRAWS)


def _stream(kind: str, count: int) -> list[np.ndarray]:
    """The first `count` draws of `kind` after seeding, made eagerly one by one."""
    ad.random.manual_seed(SEED)
    return [np.asarray(DRAWS[kind](), np.float64) for _ in range(count)]


def _seeded(fn, *args):
    ad.random.manual_seed(SEED)
    return fn(*args)


def _f(kind):
    def f(x):
        return anp.sin(x) * DRAWS[kind]()
    return f


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_vjp_replays_the_stream(kind):
    """Primal output, pullback and the draw after the vjp, all from one seed."""
    r0, r1 = _stream(kind, 2)
    f = _f(kind)

    def prog(x, ct):
        out, pullback = ad.vjp(f, x)
        after = DRAWS[kind]()
        return out, pullback(ct)[0], after

    out, cot, after = _seeded(ad.jit(prog), X, CT)
    np.testing.assert_array_equal(out, np.sin(X) * r0)
    np.testing.assert_allclose(cot, np.cos(X) * r0 * CT, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(after, r1)
    np.testing.assert_array_equal(_seeded(ad.jit(f), X), out)


@pytest.mark.parametrize("kind", ["normal", "dropout"])
def test_jacobians_and_hessian_of_a_function_that_draws(kind):
    (r,) = _stream(kind, 1)
    f = _f(kind)

    def total(x):
        return anp.sum(f(x))

    jac = np.diag(np.cos(X) * r)
    np.testing.assert_allclose(_seeded(ad.jit(ad.jacrev(f)), X), jac, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(_seeded(ad.jit(ad.jacfwd(f)), X), jac, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(_seeded(ad.jit(ad.hessian(total)), X), np.diag(-np.sin(X) * r),
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(_seeded(ad.jit(ad.grad(total)), X), np.cos(X) * r,
                               rtol=1e-13, atol=1e-15)


def test_pullback_matches_finite_differences_of_the_seeded_function():
    def f(x):
        h = anp.tanh(x) * ad.random.normal((N,), np.float64)
        return nn.dropout(h * h, 0.3) + ad.random.uniform((N,), np.float64)

    jf = ad.jit(f)
    cot = _seeded(ad.jit(lambda x, ct: ad.vjp(f, x)[1](ct)[0]), X, CT)
    eps = 1e-6
    fd = np.zeros(N)
    for i in range(N):
        e = np.zeros(N)
        e[i] = eps
        fd[i] = CT @ (_seeded(jf, X + e) - _seeded(jf, X - e)) / (2 * eps)
    np.testing.assert_allclose(cot, fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_vjp_under_vmap_draws_as_a_loop_of_calls(randomness):
    """vmap of a vjp: "different" gives lane l the draws of the l-th of B calls in a
    row; "same" gives every lane the draws of one call."""
    f = _f("normal")
    xs = np.stack([X + 0.1 * k for k in range(3)])

    def one(x):
        out, pullback = ad.vjp(f, x)
        return out, pullback(CT)[0]

    outs, cots = _seeded(ad.jit(ad.vmap(one, randomness=randomness)), xs)
    draws = _stream("normal", 3) if randomness == "different" else _stream("normal", 1) * 3
    for lane, r in enumerate(draws):
        np.testing.assert_allclose(outs[lane], np.sin(xs[lane]) * r, rtol=1e-14)
        np.testing.assert_allclose(cots[lane], np.cos(xs[lane]) * r * CT, rtol=1e-13,
                                   atol=1e-15)


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_vjp_of_a_vmap_that_draws(randomness):
    """The pinned function itself vmaps a draw: its consumption is static either way."""
    g = _f("normal")

    def f(xs):
        return ad.vmap(g, randomness=randomness)(xs)

    xs = np.stack([X, X + 0.2])

    def prog(xs):
        out, pullback = ad.vjp(f, xs)
        return out, pullback(np.ones(xs.shape))[0]

    out, cot = _seeded(ad.jit(prog), xs)
    np.testing.assert_array_equal(out, _seeded(ad.jit(f), xs))
    draws = _stream("normal", 2) if randomness == "different" else _stream("normal", 1) * 2
    for lane, r in enumerate(draws):
        np.testing.assert_allclose(cot[lane], np.cos(xs[lane]) * r, rtol=1e-13, atol=1e-15)


def test_dynamic_consumption_still_replays_between_primal_and_pullback():
    """A draw in a loop of traced trip count: the key is a fresh draw (the stream
    position after the loop is not static), but primal and pullback agree."""
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * ad.random.uniform((N,), np.float64, 0.5, 1.5),
                             x)

    def prog(x, n):
        out, pullback = ad.vjp(lambda x: f(x, n), x)
        return out, pullback(np.ones(N))[0]

    out, cot = _seeded(ad.jit(prog), X, np.int64(3))
    np.testing.assert_allclose(cot * X, out, rtol=1e-13)  # f is linear in x
    assert np.all((np.abs(cot) > 0.5 ** 3 - 1e-12) & (np.abs(cot) < 1.5 ** 3))


# -- custom rules whose function draws: every rule sees the primal call's numbers


#: The composition table's custom-rule wrappers: each rule re-runs f (bwd calls
#: vjp(f, x), the JVP rules call jvp(f, ...)).
CUSTOM = {name: (lambda make: lambda f: make(f, None, None))(make)
          for name, make in (("custom_vjp", cc._cvjp_ours), ("custom_jvp", cc._cjvp_ours),
                             ("Function", cc._function_ours))}


@pytest.mark.parametrize("wrap", sorted(CUSTOM))
@pytest.mark.parametrize("kind", ["normal", "dropout"])
def test_custom_rules_replay_the_primal_draws(wrap, kind):
    """Value, reverse and forward mode of a custom function that draws (its rules call
    the function again). Every rule starts from the state at the call, so a rule that
    re-runs f sees the primal's numbers; the stream then continues past the most any
    rule draws. Function's jvp rule runs forward and then the user's jvp, which calls
    f again: it draws two calls' worth (the second for the tangent, as in torch),
    so each call of that Function takes two draws' room in the stream."""
    span = 2 if wrap == "Function" else 1  # draws of room one call of cf takes
    r = _stream(kind, 2 * span + 1)
    cf = CUSTOM[wrap](_f(kind))

    def prog(x, t, ct):
        out, pullback = ad.vjp(cf, x)
        tan = ad.jvp(cf, (x,), (t,))[1]  # a second call of cf
        return out, pullback(ct)[0], tan, DRAWS[kind]()

    t = np.linspace(1.0, 2.0, N)
    out, cot, tan, after = _seeded(ad.jit(prog), X, t, CT)
    np.testing.assert_array_equal(out, np.sin(X) * r[0])
    np.testing.assert_allclose(cot, np.cos(X) * r[0] * CT, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(tan, np.cos(X) * r[2 * span - 1] * t, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(after, r[2 * span])
    g = _seeded(ad.jit(ad.grad(lambda x: anp.sum(cf(x) * CT))), X)
    np.testing.assert_allclose(g, np.cos(X) * r[0] * CT, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_custom_vjp_that_draws_under_vmap(randomness):
    cf = CUSTOM["custom_vjp"](_f("normal"))
    xs = np.stack([X + 0.1 * k for k in range(3)])

    def one(x):
        return ad.grad(lambda x: anp.sum(cf(x) * CT))(x)

    got = _seeded(ad.jit(ad.vmap(one, randomness=randomness)), xs)
    draws = _stream("normal", 3) if randomness == "different" else _stream("normal", 1) * 3
    for lane, r in enumerate(draws):
        np.testing.assert_allclose(got[lane], np.cos(xs[lane]) * r * CT, rtol=1e-13,
                                   atol=1e-15)
