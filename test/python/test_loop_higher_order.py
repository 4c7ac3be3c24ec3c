"""Higher-order derivatives through loops, and differentiation of recursive functions.

A generated grid: loop kind {`fori_loop` with static bounds, `fori_loop` with
traced bounds, `scan` with xs and ys, `while_loop`} x trip count {1, 2, 3, 5}
x composition {grad.grad, grad.vjp, jacrev.grad, jacrev.jacrev, vjp.grad,
jvp.grad, grad.grad.grad}. Every body is nonlinear in its carry (a vector and
a scalar) and reads a value of the enclosing function that depends on the
input (so the cotangents of captured values are exercised at every level).

Oracles, in float64:
- jax (x64): the gradient g, Hessian H and third derivative T of the same
  program (the same code run with jax.numpy and jax.lax) by nested `jacfwd`
  (forward mode also differentiates jax's while_loop and traced bounds); each
  composition is the algebra it stands for on g, H and T;
- central differences of our own compiled lower-order result (grad.grad
  against FD of sum(sin(S grad f)), jacrev.grad against FD of grad f, ...);
- the transpose identity <u, jvp.grad(v)> = <vjp.grad(u), v>.

One jit per program, shared by all its compositions (the traced-bound kinds
share one across the trip counts too), keeps the grid fast.

Also here: grad.grad of further loop shapes (nested loops, a reversed scan, a
matrix carry through a matmul, a gradient inside the body); the examples of
the issue; and, at the MLIR level, recursion (reverse mode is a diagnostic at
the call that closes the cycle, forward mode works) and the diagnostic for a
dynamically shaped carry whose values reverse mode would need.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from mlir import ir

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import dialects, lax
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.pipeline import run_pipeline

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jlax = jax.lax

KINDS = ("fori_static", "fori_traced", "scan", "while")
TRIPS = (1, 2, 3, 5)
COMPOSITIONS = ("grad_grad", "grad_vjp", "jacrev_grad", "jacrev_jacrev", "vjp_grad",
                "jvp_grad", "grad_grad_grad")

W = np.array([0.7, -0.4])      # a constant the programs close over
X = np.array([0.4, -0.25])     # the point
CT = 0.7                       # the output cotangent of grad.vjp
S = 0.5                        # grad.grad is the gradient of sum(sin(S grad f)), and so on
U = np.array([-0.6, 0.9])      # the cotangent of vjp.grad
V = np.array([0.3, -1.1])      # the tangent of jvp.grad
LO = 3                         # the lower bound of the traced-bound fori_loop
# Central differences of fourth order: f'(x) ~ sum_j WEIGHTS[j] f(x + STENCIL[j] EPS) / EPS,
# truncation error O(EPS^4), so third derivatives are checked to about 1e-9.
EPS = 2e-4
STENCIL = (2, 1, -1, -2)
WEIGHTS = (-1 / 12, 8 / 12, -8 / 12, 1 / 12)


# ----------------------------------------------------------------------------- programs

def program(kind: str, trip: int, np_, lax_):
    """(f, extra args): f(x, *extra) -> scalar, written against (np_, lax_)."""

    def body(c, u):
        h, a = c
        h2 = np_.sin(h * u) * a
        return h2, np_.cos(np_.sum(h2 * h))

    def init(x):
        return x, np_.sum(x) + 1.0

    def finish(x, h, a):
        return np_.sum(h * x) + a

    if kind == "fori_static":
        def f(x):
            u = np_.cos(x) + W
            return finish(x, *lax_.fori_loop(0, trip, lambda i, c: body(c, u), init(x)))
        return f, ()
    if kind == "fori_traced":
        def f(x, lo, hi):
            u = np_.cos(x) + W
            return finish(x, *lax_.fori_loop(lo, hi, lambda i, c: body(c, u), init(x)))
        return f, (np.int64(LO), np.int64(LO + trip))
    if kind == "scan":
        def f(x, xs):
            u = np_.cos(x) + W

            def step(c, xt):
                c = body(c, u + xt)
                return c, c[0]
            (h, a), ys = lax_.scan(step, init(x), xs * x)
            return finish(x, h, a) + np_.sum(ys * ys)
        return f, (np.linspace(-0.5, 0.8, 2 * trip).reshape(trip, 2),)
    assert kind == "while"

    def f(x, n):
        u = np_.cos(x) + W

        def step(c):
            h, a = body(c[:2], u)
            return h, a, c[2] + 1
        h, a, _ = lax_.while_loop(lambda c: c[2] < n, step, (*init(x), 0))
        return finish(x, h, a)
    return f, (np.int64(trip),)


def _bundle(f):
    """Every composition of f (and its gradient) as the outputs of one function."""

    def run(x, *extra):
        fx = lambda x: f(x, *extra)  # noqa: E731
        g = ad.grad(fx)
        gg = ad.grad(lambda x: anp.sum(anp.sin(S * g(x))))
        return {
            "g": g(x),
            "grad_grad": gg(x),
            "grad_vjp": ad.grad(lambda x: anp.sum(anp.sin(ad.vjp(fx, x)[1](CT)[0])))(x),
            "jacrev_grad": ad.jacrev(g)(x),
            "jacrev_jacrev": ad.jacrev(ad.jacrev(fx))(x),
            "vjp_grad": ad.vjp(g, x)[1](U)[0],
            "jvp_grad": ad.jvp(g, (x,), (V,))[1],
            "grad_grad_grad": ad.grad(lambda x: anp.sum(anp.sin(S * gg(x))))(x),
        }
    return run


def _static_trip(kind: str, trip: int) -> int:
    """The trip count the program is compiled for (0: a traced one, any count)."""
    return 0 if kind in ("fori_traced", "while") else trip


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, trip: int):
    """The jitted bundle (one for every trip count of the traced-bound kinds)."""
    f, _ = program(kind, max(trip, 1), anp, lax)
    return ad.jit(_bundle(f))


@functools.lru_cache(maxsize=None)
def _ours(kind: str, trip: int) -> list[dict]:
    """The bundle at X, then at X + s EPS e_m for each m and each s in STENCIL."""
    _, extra = program(kind, trip, anp, lax)
    fn = _compiled(kind, _static_trip(kind, trip))
    points = [X] + [X + s * EPS * e for e in np.eye(X.size) for s in STENCIL]
    return [{k: np.asarray(v) for k, v in fn(p, *extra).items()} for p in points]


@functools.lru_cache(maxsize=None)
def _jax_program(kind: str, trip: int):
    f, _ = program(kind, max(trip, 1), jnp, jlax)
    d1 = jax.jacfwd(f)
    d2 = jax.jacfwd(d1)
    return jax.jit(lambda x, *e: (d1(x, *e), d2(x, *e), jax.jacfwd(d2)(x, *e)))


def _jax_expected(kind: str, trip: int) -> dict:
    """Each composition from jax's g, H (H[i, k] = d g_i / d x_k) and T (T[i, k, m] =
    d H[i, k] / d x_m). The fori_loop and while_loop programs compute the same
    function of x and the trip count: jax's while_loop program stands for all
    three (one jax compilation)."""
    if kind == "scan":
        _, extra = program(kind, trip, np, None)
        g, h, t = (np.asarray(a) for a in _jax_program(kind, trip)(X, *extra))
    else:
        g, h, t = (np.asarray(a) for a in _jax_program("while", 0)(X, np.int64(trip)))
    gg = S * h.T @ np.cos(S * g)                       # grad of sum(sin(S g))
    dgg = S * (np.einsum("ikm,i->km", t, np.cos(S * g))  # its Jacobian
               - S * np.einsum("ik,i,im->km", h, np.sin(S * g), h))
    return {
        "g": g,
        "grad_grad": gg,
        "grad_vjp": CT * h.T @ np.cos(CT * g),
        "jacrev_grad": h,
        "jacrev_jacrev": h,
        "vjp_grad": h.T @ U,
        "jvp_grad": h @ V,
        "grad_grad_grad": S * dgg.T @ np.cos(S * gg),
    }


def _fd_expected(kind: str, trip: int) -> dict:
    """Each composition by central differences of our own lower-order outputs."""
    at = _ours(kind, trip)

    def d(fn):  # the Jacobian of fn(bundle outputs), column m from the stencil along e_m
        k = len(STENCIL)
        cols = [sum(w * np.asarray(fn(at[1 + k * m + j])) for j, w in enumerate(WEIGHTS)) / EPS
                for m in range(X.size)]
        return np.stack(cols, axis=-1)

    jac = d(lambda r: r["g"])
    return {
        "grad_grad": d(lambda r: np.sum(np.sin(S * r["g"]))),
        "grad_vjp": d(lambda r: np.sum(np.sin(CT * r["g"]))),
        "jacrev_grad": jac,
        "jacrev_jacrev": jac,
        "vjp_grad": jac.T @ U,
        "jvp_grad": jac @ V,
        "grad_grad_grad": d(lambda r: np.sum(np.sin(S * r["grad_grad"]))),
    }


# ----------------------------------------------------------------------------- the grid

@pytest.mark.parametrize("comp", COMPOSITIONS)
@pytest.mark.parametrize("trip", TRIPS)
@pytest.mark.parametrize("kind", KINDS)
def test_composition_matches_jax_and_finite_differences(kind, trip, comp):
    got = _ours(kind, trip)[0]
    want = _jax_expected(kind, trip)
    np.testing.assert_allclose(got["g"], want["g"], rtol=1e-10, atol=1e-12,
                               err_msg="the gradient itself")
    assert np.abs(want[comp]).max() > 1e-3  # a zero derivative would prove nothing
    np.testing.assert_allclose(got[comp], want[comp], rtol=1e-9, atol=1e-11,
                               err_msg=f"{comp} vs jax")
    np.testing.assert_allclose(got[comp], _fd_expected(kind, trip)[comp], rtol=1e-7,
                               atol=1e-9, err_msg=f"{comp} vs central differences")


@pytest.mark.parametrize("trip", TRIPS)
@pytest.mark.parametrize("kind", KINDS)
def test_transpose_identity_of_the_hessian_products(kind, trip):
    got = _ours(kind, trip)[0]
    np.testing.assert_allclose(np.dot(U, got["jvp_grad"]), np.dot(got["vjp_grad"], V),
                               rtol=1e-12, atol=1e-12)


def test_the_example_of_the_issue():
    """grad(grad(fori_loop(0, 2, c -> c * c))) at 0.3 is 12 * 0.3^2 (it was 0)."""
    f = lambda z: ad.lax.fori_loop(0, 2, lambda i, c: c * c, z)  # noqa: E731
    jf = lambda z: jlax.fori_loop(0, 2, lambda i, c: c * c, z)  # noqa: E731
    assert jax.grad(jax.grad(jf))(0.3) == pytest.approx(1.08, rel=1e-12)
    assert ad.grad(ad.grad(f))(0.3) == pytest.approx(1.08, rel=1e-12)
    assert ad.jit(ad.grad(ad.grad(f)))(0.3) == pytest.approx(1.08, rel=1e-12)


def test_grad_of_a_nonlinear_function_of_the_grad_through_a_while_loop():
    """The outer function is not a plain sum (it failed to compile: 'scf.yield' op
    using value defined outside the region). jax's reference runs the loop's
    three iterations as a fori_loop."""
    def ours(x):
        c = lax.while_loop(lambda c: c[1] < 3, lambda c: (anp.sin(c[0]) * c[0], c[1] + 1),
                           (x, 0))
        return anp.sum(c[0] ** 2)

    def theirs(x):
        return jnp.sum(jlax.fori_loop(0, 3, lambda i, h: jnp.sin(h) * h, x) ** 2)

    x = np.array([0.3, 0.5, -0.8])
    got = ad.jit(ad.grad(lambda x: anp.sum(anp.tanh(ad.grad(ours)(x)) * x)))(x)
    want = jax.grad(lambda x: jnp.sum(jnp.tanh(jax.grad(theirs)(x)) * x))(x)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


M = np.array([[0.3, -0.2], [0.5, 0.1]])


def patterns(np_, lax_, grad):
    """More carried-value and tape shapes, each f(x) -> scalar (x of shape (2,))."""

    def nested(x):  # a loop in a loop body: tapes of tapes
        def outer(i, h):
            return lax_.fori_loop(0, 2, lambda j, g: np_.sin(g * h) + 0.5 * g + 0.2, h)
        return np_.sum(lax_.fori_loop(0, 3, outer, x) ** 2)

    def scan_reversed(x):
        c, ys = lax_.scan(lambda c, xt: (np_.tanh(c * xt + c), c * c), x,
                          np_.stack([x, x * 2.0, x + 1.0]), reverse=True)
        return np_.sum(c) + np_.sum(ys * ys)

    def matrix_carry(x):  # a rank-2 carry through a matmul
        a = np_.reshape(np_.concatenate([x, x * x]), (2, 2))
        b = lax_.fori_loop(0, 3, lambda i, b: np_.tanh(b @ M + b * a), a)
        return np_.sum(b * b)

    def grad_in_body(x):  # gradient descent steps: reverse mode inside the loop body
        def loss(p):
            return np_.sum(np_.sin(p * x) ** 2)
        return np_.sum(lax_.fori_loop(0, 3, lambda i, p: p - 0.3 * grad(loss)(p), x) ** 2)

    return {"nested": nested, "scan_reversed": scan_reversed, "matrix_carry": matrix_carry,
            "grad_in_body": grad_in_body}


@functools.lru_cache(maxsize=None)
def _patterns_ours() -> list[dict]:
    fs = patterns(anp, lax, ad.grad)

    def run(x):
        return {k: ad.grad(lambda x: anp.sum(anp.sin(S * ad.grad(f)(x))))(x)
                for k, f in fs.items()} | {"g_" + k: ad.grad(f)(x) for k, f in fs.items()}
    fn = ad.jit(run)
    points = [X] + [X + s * EPS * e for e in np.eye(X.size) for s in STENCIL]
    return [{k: np.asarray(v) for k, v in fn(p).items()} for p in points]


@pytest.mark.parametrize("name", ["nested", "scan_reversed", "matrix_carry", "grad_in_body"])
def test_grad_of_grad_of_more_loop_patterns(name):
    f = patterns(jnp, jlax, jax.grad)[name]
    want = jax.grad(lambda x: jnp.sum(jnp.sin(S * jax.grad(f)(x))))(X)
    at = _patterns_ours()
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(at[0][name], want, rtol=1e-9, atol=1e-11, err_msg="vs jax")
    k = len(STENCIL)
    fd = [sum(w * np.sum(np.sin(S * at[1 + k * m + j]["g_" + name]))
              for j, w in enumerate(WEIGHTS)) / EPS for m in range(X.size)]
    np.testing.assert_allclose(at[0][name], fd, rtol=1e-7, atol=1e-9,
                               err_msg="vs central differences")


# ----------------------------------------------------------------------------- MLIR level

def _run(text: str, pipeline: str) -> str:
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module.operation, pipeline)
        return str(module)


def _diagnostics(text: str, pipeline: str) -> list[tuple[str, int]]:
    """(message, line) of each error the pipeline reports on `text`."""
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        with pytest.raises(ir.MLIRError) as info:
            run_pipeline(module.operation, pipeline)
        out = []
        for d in info.value.error_diagnostics:
            m = re.search(r":(\d+):\d+\)$", str(d.location))
            out.append((d.message, int(m.group(1)) if m else -1))
        return out


# f(x, n) = g(x, n - 1) * x for n > 0, else x; g(x, n) = f(sin x, n): so
# f(x, n) = f(sin x, n - 1) * x, which SELF computes with one function.
MUTUAL = """func.func private @f(%x: f64, %n: i64) -> f64 {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %p = arith.cmpi sgt, %n, %c0 : i64
  %r = scf.if %p -> f64 {
    %m = arith.subi %n, %c1 : i64
    %y = func.call @g(%x, %m) : (f64, i64) -> f64
    %z = arith.mulf %y, %x : f64
    scf.yield %z : f64
  } else {
    scf.yield %x : f64
  }
  return %r : f64
}
func.func private @g(%x: f64, %n: i64) -> f64 {
  %s = math.sin %x : f64
  %y = func.call @f(%s, %n) : (f64, i64) -> f64
  return %y : f64
}
"""
MUTUAL_CALL_LINE = 17  # the call of @f in @g, which closes the cycle

SELF = """func.func private @f(%x: f64, %n: i64) -> f64 {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %p = arith.cmpi sgt, %n, %c0 : i64
  %r = scf.if %p -> f64 {
    %m = arith.subi %n, %c1 : i64
    %s = math.sin %x : f64
    %y = func.call @f(%s, %m) : (f64, i64) -> f64
    %z = arith.mulf %y, %x : f64
    scf.yield %z : f64
  } else {
    scf.yield %x : f64
  }
  return %r : f64
}
"""
SELF_CALL_LINE = 8

VJP_MAIN = """func.func @main(%x: f64, %n: i64) -> f64 {
  %one = arith.constant 1.0 : f64
  %0:2 = "autodiff.vjp"(%x, %n, %one) {fn = @f, wrt = array<i64: 0>} : (f64, i64, f64) -> (f64, f64)
  return %0#1 : f64
}
"""

JVP_MAIN = """func.func @main(%x: f64, %n: i64, %t: f64) -> (f64, f64) {
  %z = arith.constant 0 : i64
  %0:2 = "autodiff.jvp"(%x, %n, %t, %z) {fn = @f} : (f64, i64, f64, i64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
"""


@pytest.mark.parametrize("src,line", [(MUTUAL, MUTUAL_CALL_LINE), (SELF, SELF_CALL_LINE)],
                         ids=["mutual", "self"])
def test_reverse_mode_of_recursion_is_a_diagnostic_at_the_call(src, line):
    diags = _diagnostics(src + VJP_MAIN, "autodiff-vjp")
    assert len(diags) == 1, diags
    msg, at = diags[0]
    assert "reverse mode of the recursive function @f is not supported" in msg
    assert at == line


@pytest.mark.parametrize("src", [MUTUAL, SELF], ids=["mutual", "self"])
def test_forward_mode_of_recursion(src):
    cm = CompiledModule(_run(src + JVP_MAIN, "autodiff-jvp"))

    def primal(x, n):  # both recursions compute this one, written in jax
        return x if n <= 0 else primal(jnp.sin(x), n - 1) * x

    for n in (0, 1, 2, 4):
        x = 0.7
        y, dy = cm["main"](x, np.int64(n), 1.0)
        want_y, want_dy = jax.jvp(lambda x: primal(x, n), (x,), (1.0,))
        assert float(y) == pytest.approx(float(want_y), rel=1e-12, abs=1e-14)
        assert float(dy) == pytest.approx(float(want_dy), rel=1e-10, abs=1e-12)
        fd = (float(cm["main"](x + 1e-6, np.int64(n), 0.0)[0]) -
              float(cm["main"](x - 1e-6, np.int64(n), 0.0)[0])) / 2e-6
        assert float(dy) == pytest.approx(fd, rel=1e-6, abs=1e-8)


# A loop carrying a dynamically shaped tensor that its body squares: reverse mode
# needs the value of every iteration, which no static tape row can hold.
DYNAMIC_CARRY = """func.func @f(%x: tensor<?xf64>) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%h = %x) -> (tensor<?xf64>) {
    %s = arith.mulf %h, %h : tensor<?xf64>
    scf.yield %s : tensor<?xf64>
  }
  return %r : tensor<?xf64>
}
func.func @main(%x: tensor<?xf64>, %c: tensor<?xf64>) -> tensor<?xf64> {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f}
      : (tensor<?xf64>, tensor<?xf64>) -> (tensor<?xf64>, tensor<?xf64>)
  return %0#1 : tensor<?xf64>
}
"""


def test_a_dynamically_shaped_carry_that_reverse_mode_must_read_is_a_diagnostic():
    diags = _diagnostics(DYNAMIC_CARRY, "autodiff-vjp")
    assert len(diags) == 1, diags
    msg, at = diags[0]
    assert "reverse mode of 'scf.for' cannot differentiate through carried value #0" in msg
    assert at == 5
