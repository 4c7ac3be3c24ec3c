"""Reverse mode of `scf.while` (a tape of dynamic length) and of `tensor.generate`.

Every function is checked numerically: forward mode against central finite
differences, reverse mode by the dot-product test and against FD, second order
(jvp of vjp, vjp of jvp) against FD of the first-order functions, and against
jax. jax cannot reverse-differentiate `lax.while_loop`, so each jax reference
is the loop unrolled with the trip count a plain numpy run of the same loop
finds (the trip count is piecewise constant; the inputs are random, so the
chance that an FD step of 1e-6 crosses a jump is negligible, and each case
asserts that it does not).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from ad_check import (
    Fn,
    check_against_jax,
    check_first_order,
    check_second_order,
    compile_fns,
    random_args,
)

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

# ----------------------------------------------------------------------------
# scf.while
# ----------------------------------------------------------------------------

# A fixed count (an i32 counter in the condition): h <- sin(h * y), 4 times.
COUNTED = """func.func @w_counted(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %r:2 = scf.while (%h = %x, %i = %c0) : (f64, i32) -> (f64, i32) {
    %go = arith.cmpi slt, %i, %c4 : i32
    scf.condition(%go) %h, %i : f64, i32
  } do {
  ^bb0(%h2: f64, %i2: i32):
    %m = arith.mulf %h2, %y : f64
    %s = math.sin %m : f64
    %n = arith.addi %i2, %c1 : i32
    scf.yield %s, %n : f64, i32
  }
  return %r#0 : f64
}"""


def _counted_np(x, y):
    return 4


def _counted_jax(x, y):
    h = x
    for _ in range(4):
        h = jnp.sin(h * y)
    return h


# Repeated multiply until a threshold (data-dependent trip count): while h < 10,
# h <- h * y + 0.2 * sin(h) (y > 1.1, so h grows).
THRESH = """func.func @w_thresh(%x: f64, %y: f64) -> f64 {
  %lim = arith.constant 10.0 : f64
  %k = arith.constant 0.2 : f64
  %r = scf.while (%h = %x) : (f64) -> f64 {
    %go = arith.cmpf olt, %h, %lim : f64
    scf.condition(%go) %h : f64
  } do {
  ^bb0(%h2: f64):
    %m = arith.mulf %h2, %y : f64
    %s = math.sin %h2 : f64
    %ks = arith.mulf %s, %k : f64
    %a = arith.addf %m, %ks : f64
    scf.yield %a : f64
  }
  %o = arith.mulf %r, %y : f64
  return %o : f64
}"""


def _thresh_trips(x, y):
    h, n = float(x), 0
    while h < 10.0:
        h = h * y + 0.2 * np.sin(h)
        n += 1
        assert n < 1000, "the loop does not terminate for these inputs"
    return n


def _thresh_jax(n):
    def f(x, y):
        h = x
        for _ in range(n):
            h = h * y + 0.2 * jnp.sin(h)
        return h * y
    return f


# Newton's iteration for sqrt(a) until |x^2 - a| < 1e-12 * a, from x0 = a: the
# result is sqrt(a) to rounding, and so is its derivative 1 / (2 sqrt(a)) (the
# iteration converges quadratically, and so do its derivatives).
NEWTON = """func.func @w_newton(%a: f64) -> f64 {
  %half = arith.constant 0.5 : f64
  %tol = arith.constant 1.0e-12 : f64
  %r = scf.while (%x = %a) : (f64) -> f64 {
    %sq = arith.mulf %x, %x : f64
    %d = arith.subf %sq, %a : f64
    %ad = math.absf %d : f64
    %t = arith.mulf %tol, %a : f64
    %go = arith.cmpf ogt, %ad, %t : f64
    scf.condition(%go) %x : f64
  } do {
  ^bb0(%x2: f64):
    %q = arith.divf %a, %x2 : f64
    %s = arith.addf %x2, %q : f64
    %n = arith.mulf %s, %half : f64
    scf.yield %n : f64
  }
  return %r : f64
}"""


def _newton_trips(a):
    x, n = float(a), 0
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
        n += 1
    return n


def _newton_jax(n):
    def f(a):
        x = a
        for _ in range(n):
            x = 0.5 * (x + a / x)
        return x
    return f


# A tensor carried with a captured tensor, and a condition reducing the
# carried tensor (linalg.reduce inside `before`): while sum(h*h) < 40,
# h <- h * w + 0.1 * sin(h).
TENSOR_LOOP = """func.func @w_tensor(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> {
  %lim = arith.constant 40.0 : f64
  %z = arith.constant 0.0 : f64
  %k = arith.constant dense<0.1> : tensor<3xf64>
  %r = scf.while (%h = %x) : (tensor<3xf64>) -> tensor<3xf64> {
    %sq = arith.mulf %h, %h : tensor<3xf64>
    %e = tensor.empty() : tensor<f64>
    %f = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
    %s = linalg.reduce ins(%sq : tensor<3xf64>) outs(%f : tensor<f64>) dimensions = [0]
      (%in: f64, %acc: f64) {
        %p = arith.addf %in, %acc : f64
        linalg.yield %p : f64
      }
    %sv = tensor.extract %s[] : tensor<f64>
    %go = arith.cmpf olt, %sv, %lim : f64
    scf.condition(%go) %h : tensor<3xf64>
  } do {
  ^bb0(%h2: tensor<3xf64>):
    %m = arith.mulf %h2, %w : tensor<3xf64>
    %sn = math.sin %h2 : tensor<3xf64>
    %ks = arith.mulf %sn, %k : tensor<3xf64>
    %a = arith.addf %m, %ks : tensor<3xf64>
    scf.yield %a : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}"""


def _tensor_trips(x, w):
    h, n = np.asarray(x, np.float64), 0
    while float(np.sum(h * h)) < 40.0:
        h = h * w + 0.1 * np.sin(h)
        n += 1
        assert n < 1000, "the loop does not terminate for these inputs"
    return n


def _tensor_jax(n):
    def f(x, w):
        h = x
        for _ in range(n):
            h = h * w + 0.1 * jnp.sin(h)
        return h
    return f


# Two float carried values and a counter, forwarded by `before` in another
# order and transformed (before: u = a * 1.5), a captured scalar in both regions:
# while i < 3: (a, b) <- (tanh(u * b) + c, u - b * c), with u = 1.5 a; result
# (1.5 a) * b at exit.
PERMUTED = """func.func @w_permuted(%x: f64, %y: f64, %c: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %k = arith.constant 1.5 : f64
  %r:3 = scf.while (%a = %x, %i = %c0, %b = %y) : (f64, index, f64) -> (index, f64, f64) {
    %u = arith.mulf %a, %k : f64
    %go = arith.cmpi slt, %i, %c3 : index
    scf.condition(%go) %i, %b, %u : index, f64, f64
  } do {
  ^bb0(%i2: index, %b2: f64, %u2: f64):
    %p = arith.mulf %u2, %b2 : f64
    %t = math.tanh %p : f64
    %na = arith.addf %t, %c : f64
    %q = arith.mulf %b2, %c : f64
    %nb = arith.subf %u2, %q : f64
    %ni = arith.addi %i2, %c1 : index
    scf.yield %na, %ni, %nb : f64, index, f64
  }
  %o = arith.mulf %r#1, %r#2 : f64
  return %o : f64
}"""


def _permuted_jax(x, y, c):
    a, b = x, y
    for _ in range(3):
        u = 1.5 * a
        a, b = jnp.tanh(u * b) + c, u - b * c
    return 1.5 * a * b


# A while loop inside an scf.for (its tape recomputes the while), and an scf.for
# (with its own tape) inside a while: for 3 steps, while h < 2: h <- h * y + 0.1,
# then h <- h * 0.5; the inner for multiplies twice by cos(y) * 0.3 + 1.
NESTED = """func.func @w_nested(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %lim = arith.constant 2.0 : f64
  %tenth = arith.constant 0.1 : f64
  %half = arith.constant 0.5 : f64
  %k = arith.constant 0.3 : f64
  %one = arith.constant 1.0 : f64
  %r = scf.for %j = %c0 to %c3 step %c1 iter_args(%g = %x) -> (f64) {
    %w = scf.while (%h = %g) : (f64) -> f64 {
      %go = arith.cmpf olt, %h, %lim : f64
      scf.condition(%go) %h : f64
    } do {
    ^bb0(%h2: f64):
      %m = arith.mulf %h2, %y : f64
      %in = scf.for %l = %c0 to %c2 step %c1 iter_args(%v = %m) -> (f64) {
        %cy = math.cos %y : f64
        %ck = arith.mulf %cy, %k : f64
        %f = arith.addf %ck, %one : f64
        %vv = arith.mulf %v, %f : f64
        scf.yield %vv : f64
      }
      %a = arith.addf %in, %tenth : f64
      scf.yield %a : f64
    }
    %hh = arith.mulf %w, %half : f64
    scf.yield %hh : f64
  }
  return %r : f64
}"""


def _nested_trips(x, y):
    g, trips = float(x), []
    for _ in range(3):
        h, n = g, 0
        while h < 2.0:
            h = h * y * (np.cos(y) * 0.3 + 1.0) ** 2 + 0.1
            n += 1
            assert n < 1000, "the loop does not terminate for these inputs"
        trips.append(n)
        g = h * 0.5
    return tuple(trips)


def _nested_jax(trips):
    def f(x, y):
        g = x
        for n in trips:
            h = g
            for _ in range(n):
                h = h * y * (jnp.cos(y) * 0.3 + 1.0) ** 2 + 0.1
            g = h * 0.5
        return g
    return f


# A while whose condition is false at once: the gradient flows through
# `before` only (zero iterations, an empty tape).
ZERO_TRIP = """func.func @w_zero(%x: f64, %y: f64) -> f64 {
  %lim = arith.constant -100.0 : f64
  %r = scf.while (%h = %x) : (f64) -> f64 {
    %e = math.exp %h : f64
    %go = arith.cmpf olt, %h, %lim : f64
    scf.condition(%go) %e : f64
  } do {
  ^bb0(%h2: f64):
    %m = arith.mulf %h2, %y : f64
    scf.yield %m : f64
  }
  %o = arith.mulf %r, %y : f64
  return %o : f64
}"""


WHILE_CASES = {
    # id: (Fn, trip-count function or None, jax reference builder)
    "counted": (Fn("w_counted", COUNTED, ["f64", "f64"], ["f64"], (-1.0, 1.0)),
                _counted_np, lambda n: _counted_jax),
    "thresh": (Fn("w_thresh", THRESH, ["f64", "f64"], ["f64"], (1.1, 1.9)),
               _thresh_trips, _thresh_jax),
    "newton": (Fn("w_newton", NEWTON, ["f64"], ["f64"], (0.5, 20.0)),
               _newton_trips, _newton_jax),
    "tensor": (Fn("w_tensor", TENSOR_LOOP, ["tensor<3xf64>"] * 2, ["tensor<3xf64>"],
                  (1.1, 1.8)), _tensor_trips, _tensor_jax),
    "permuted": (Fn("w_permuted", PERMUTED, ["f64"] * 3, ["f64"], (-1.0, 1.0)),
                 None, lambda n: _permuted_jax),
    "nested": (Fn("w_nested", NESTED, ["f64", "f64"], ["f64"], (1.0, 1.5)),
               _nested_trips, _nested_jax),
    "zero": (Fn("w_zero", ZERO_TRIP, ["f64", "f64"], ["f64"], (-1.0, 1.0)),
             lambda x, y: 0, lambda n: lambda x, y: jnp.exp(x) * y),
}

_CACHE: dict = {}


def _module():
    if "while" not in _CACHE:
        _CACHE["while"] = compile_fns([fn for fn, _, _ in WHILE_CASES.values()])
    return _CACHE["while"]


def _seed(case: str, k: int) -> np.random.Generator:
    return np.random.default_rng(k + zlib.crc32(case.encode()))


def _assert_stable_trips(case: str, rng_seed: int, eps: float = 1e-5) -> None:
    """The trip count does not jump within FD range of the drawn inputs."""
    fn, trips, _ = WHILE_CASES[case]
    if trips is None:
        return
    xs = random_args(fn, _seed(case, rng_seed))
    base = trips(*xs)
    for sign in (-1.0, 1.0):
        assert trips(*[x + sign * eps for x in xs]) == base, f"{case}: trip count jumps near x"


@pytest.mark.parametrize("case", list(WHILE_CASES))
def test_while_first_order(case: str) -> None:
    _assert_stable_trips(case, 0)
    fn = WHILE_CASES[case][0]
    check_first_order(_module(), fn, _seed(case, 0), rtol=1e-5)


@pytest.mark.parametrize("case", list(WHILE_CASES))
def test_while_second_order(case: str) -> None:
    _assert_stable_trips(case, 3)
    fn = WHILE_CASES[case][0]
    check_second_order(_module(), fn, _seed(case, 3))


@pytest.mark.parametrize("case", list(WHILE_CASES))
def test_while_against_jax(case: str) -> None:
    """jax on the loop unrolled with the trip count numpy finds for these inputs."""
    fn, trips, ref = WHILE_CASES[case]
    xs = random_args(fn, _seed(case, 7))
    n = trips(*xs) if trips is not None else None
    fn = Fn(fn.name, fn.text, fn.params, fn.results, fn.domain, ref(n))
    check_against_jax(_module(), fn, _seed(case, 7), rtol=1e-9, atol=1e-11)


def test_while_trip_counts_are_data_dependent() -> None:
    """The threshold loop really runs a data-dependent number of times, and the
    compiled loop agrees with numpy's on the value it returns."""
    fn, trips, _ = WHILE_CASES["thresh"]
    assert trips(1.1, 1.2) != trips(1.9, 1.9)
    for x, y in ((1.1, 1.2), (1.9, 1.9)):
        h = x
        for _ in range(trips(x, y)):
            h = h * y + 0.2 * np.sin(h)
        np.testing.assert_allclose(_module()["w_thresh"](x, y), h * y, rtol=1e-14)


def test_newton_gradient_is_half_inverse_sqrt() -> None:
    """d sqrt(a)/da = 1/(2 sqrt(a)): reverse mode through the converged iteration."""
    for a in (2.0, 9.0, 17.5):
        y, g = _module()["vjp_w_newton"](a, 1.0)
        np.testing.assert_allclose(y, np.sqrt(a), rtol=1e-11)  # |x^2 - a| < 1e-12 a
        np.testing.assert_allclose(g, 0.5 / np.sqrt(a), rtol=1e-9)


# ----------------------------------------------------------------------------
# tensor.generate
# ----------------------------------------------------------------------------

# A captured scalar: r[i] = exp(s * i).
GEN_SCALAR = """func.func @g_scalar(%s: f64) -> tensor<4xf64> {
  %v = tensor.generate {
  ^bb0(%i: index):
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %m = arith.mulf %s, %f : f64
    %e = math.exp %m : f64
    tensor.yield %e : f64
  } : tensor<4xf64>
  return %v : tensor<4xf64>
}"""

# A gather from a captured tensor (read only by tensor.extract) and a captured
# scalar, on a 2-D result: r[i, j] = sin(s * i * x[j]) * x[3 - j].
GEN_GATHER = """func.func @g_gather(%s: f64, %x: tensor<4xf64>) -> tensor<3x4xf64> {
  %c3 = arith.constant 3 : index
  %v = tensor.generate {
  ^bb0(%i: index, %j: index):
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %m = arith.mulf %s, %f : f64
    %xe = tensor.extract %x[%j] : tensor<4xf64>
    %p = arith.mulf %m, %xe : f64
    %sn = math.sin %p : f64
    %k = arith.subi %c3, %j : index
    %xr = tensor.extract %x[%k] : tensor<4xf64>
    %r = arith.mulf %sn, %xr : f64
    tensor.yield %r : f64
  } : tensor<3x4xf64>
  return %v : tensor<3x4xf64>
}"""

# A captured tensor used by a whole-tensor op inside the body (the general
# path: its cotangent is a tensor per point), and an scf.if in the body:
# r[i] = (i even ? x[i] * sum(x) : cos(x[i])).
GEN_GENERAL = """func.func @g_general(%x: tensor<3xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %c2 = arith.constant 2 : index
  %c0 = arith.constant 0 : index
  %v = tensor.generate {
  ^bb0(%i: index):
    %e = tensor.empty() : tensor<f64>
    %f = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
    %s = linalg.reduce ins(%x : tensor<3xf64>) outs(%f : tensor<f64>) dimensions = [0]
      (%in: f64, %acc: f64) {
        %p = arith.addf %in, %acc : f64
        linalg.yield %p : f64
      }
    %sv = tensor.extract %s[] : tensor<f64>
    %xi = tensor.extract %x[%i] : tensor<3xf64>
    %rem = arith.remui %i, %c2 : index
    %even = arith.cmpi eq, %rem, %c0 : index
    %r = scf.if %even -> (f64) {
      %m = arith.mulf %xi, %sv : f64
      scf.yield %m : f64
    } else {
      %c = math.cos %xi : f64
      scf.yield %c : f64
    }
    tensor.yield %r : f64
  } : tensor<3xf64>
  return %v : tensor<3xf64>
}"""


def _gen_general_jax(x):
    s = jnp.sum(x)
    return jnp.stack([x[0] * s, jnp.cos(x[1]), x[2] * s])


GEN_CASES = {
    "scalar": Fn("g_scalar", GEN_SCALAR, ["f64"], ["tensor<4xf64>"], (-1.0, 1.0),
                 lambda s: jnp.exp(s * jnp.arange(4.0))),
    "gather": Fn("g_gather", GEN_GATHER, ["f64", "tensor<4xf64>"], ["tensor<3x4xf64>"],
                 (-1.0, 1.0),
                 lambda s, x: jnp.sin(s * jnp.arange(3.0)[:, None] * x[None, :])
                 * x[::-1][None, :]),
    "general": Fn("g_general", GEN_GENERAL, ["tensor<3xf64>"], ["tensor<3xf64>"],
                  (-1.0, 1.0), _gen_general_jax),
}


def _gen_module():
    if "generate" not in _CACHE:
        _CACHE["generate"] = compile_fns(list(GEN_CASES.values()))
    return _CACHE["generate"]


@pytest.mark.parametrize("case", list(GEN_CASES))
def test_generate_first_order(case: str) -> None:
    check_first_order(_gen_module(), GEN_CASES[case], _seed(case, 20))


@pytest.mark.parametrize("case", list(GEN_CASES))
def test_generate_second_order(case: str) -> None:
    check_second_order(_gen_module(), GEN_CASES[case], _seed(case, 21))


@pytest.mark.parametrize("case", list(GEN_CASES))
def test_generate_against_jax(case: str) -> None:
    check_against_jax(_gen_module(), GEN_CASES[case], _seed(case, 22), rtol=1e-10,
                      atol=1e-12)


# ----------------------------------------------------------------------------
# Reshapes, concat and pad with dynamic shapes (tensor.cast hides the static
# sizes inside the function), and an active padding value
# ----------------------------------------------------------------------------


def _dfn(id_, params, result, body, jax_fn):
    """`%v = body(%p...)` of type `result`, then sin(v) * v (so the check is not linear)."""
    args = ", ".join(f"%p{i}: {t}" for i, t in enumerate(params))
    text = (f"func.func @d_{id_}({args}) -> {result} {{\n{body}\n"
            f"%sn = math.sin %v : {result}\n%ret = arith.mulf %sn, %v : {result}\n"
            f"return %ret : {result}\n}}")
    return Fn(f"d_{id_}", text, list(params), [result], (-1.5, 1.5),
              lambda *a: jnp.sin(jax_fn(*a)) * jax_fn(*a))


DYN_CASES = {f.name[2:]: f for f in [
    _dfn("expand", ["tensor<6xf64>"], "tensor<2x3xf64>",
         "%c0 = arith.constant 0 : index\n%c3 = arith.constant 3 : index\n"
         "%d = tensor.cast %p0 : tensor<6xf64> to tensor<?xf64>\n"
         "%n = tensor.dim %d, %c0 : tensor<?xf64>\n%r = arith.divui %n, %c3 : index\n"
         "%e = tensor.expand_shape %d [[0, 1]] output_shape [%r, 3] : tensor<?xf64> into "
         "tensor<?x3xf64>\n%v = tensor.cast %e : tensor<?x3xf64> to tensor<2x3xf64>",
         lambda x: x.reshape(2, 3)),
    _dfn("collapse", ["tensor<2x3xf64>"], "tensor<6xf64>",
         "%d = tensor.cast %p0 : tensor<2x3xf64> to tensor<?x3xf64>\n"
         "%e = tensor.collapse_shape %d [[0, 1]] : tensor<?x3xf64> into tensor<?xf64>\n"
         "%v = tensor.cast %e : tensor<?xf64> to tensor<6xf64>", lambda x: x.reshape(6)),
    _dfn("reshape", ["tensor<6xf64>"], "tensor<3x2xf64>",
         "%s = arith.constant dense<[3, 2]> : tensor<2xi64>\n"
         "%d = tensor.cast %p0 : tensor<6xf64> to tensor<?xf64>\n"
         "%e = tensor.reshape %d(%s) : (tensor<?xf64>, tensor<2xi64>) -> tensor<?x2xf64>\n"
         "%v = tensor.cast %e : tensor<?x2xf64> to tensor<3x2xf64>", lambda x: x.reshape(3, 2)),
    _dfn("concat", ["tensor<2xf64>", "tensor<4xf64>", "tensor<3xf64>"], "tensor<9xf64>",
         "%a = tensor.cast %p0 : tensor<2xf64> to tensor<?xf64>\n"
         "%b = tensor.cast %p1 : tensor<4xf64> to tensor<?xf64>\n"
         "%e = tensor.concat dim(0) %a, %b, %p2 : (tensor<?xf64>, tensor<?xf64>, tensor<3xf64>)"
         " -> tensor<?xf64>\n%v = tensor.cast %e : tensor<?xf64> to tensor<9xf64>",
         lambda a, b, c: jnp.concatenate([a, b, c])),
    _dfn("pad", ["tensor<3x2xf64>"], "tensor<6x3xf64>",
         "%z = arith.constant 0.5 : f64\n%l = arith.constant 1 : index\n"
         "%d = tensor.cast %p0 : tensor<3x2xf64> to tensor<?x2xf64>\n"
         "%e = tensor.pad %d low[%l, 0] high[2, 1] {\n^bb0(%i: index, %j: index):\n"
         "  tensor.yield %z : f64\n} : tensor<?x2xf64> to tensor<?x3xf64>\n"
         "%v = tensor.cast %e : tensor<?x3xf64> to tensor<6x3xf64>",
         lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=0.5)),
    # An active padding value (a function of an argument).
    _dfn("pad_value", ["tensor<3xf64>", "f64"], "tensor<6xf64>",
         "%q = arith.mulf %p1, %p1 : f64\n"
         "%v = tensor.pad %p0 low[1] high[2] {\n^bb0(%i: index):\n"
         "  tensor.yield %q : f64\n} : tensor<3xf64> to tensor<6xf64>",
         lambda x, s: jnp.concatenate([jnp.stack([s * s]), x, jnp.stack([s * s, s * s])])),
]}


def _dyn_module():
    if "dyn" not in _CACHE:
        _CACHE["dyn"] = compile_fns(list(DYN_CASES.values()))
    return _CACHE["dyn"]


@pytest.mark.parametrize("case", list(DYN_CASES))
def test_dynamic_tensor_first_order(case: str) -> None:
    check_first_order(_dyn_module(), DYN_CASES[case], _seed(case, 30))


@pytest.mark.parametrize("case", list(DYN_CASES))
def test_dynamic_tensor_second_order(case: str) -> None:
    check_second_order(_dyn_module(), DYN_CASES[case], _seed(case, 31))


@pytest.mark.parametrize("case", list(DYN_CASES))
def test_dynamic_tensor_against_jax(case: str) -> None:
    check_against_jax(_dyn_module(), DYN_CASES[case], _seed(case, 32), rtol=1e-10,
                      atol=1e-12)
