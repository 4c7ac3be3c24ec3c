"""jax.lax's everyday operations (lax_ops.py) beyond the differential table:
lax's strict typing errors, lax's integer semantics against jax itself
(eagerly and traced), the special functions the table leaves out for compile
time, `reduce_window` with lax's computations, and `eval_shape`.

The table (differential_cases.py, section "laxops") checks every transform
of each name against numpy definitions and jax."""

from __future__ import annotations

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jlax = jax.lax

_XI = np.array([7, -7, 7, -7, 0, 5, -(2 ** 31), 9], np.int32)
_YI = np.array([2, 2, -2, -2, 3, 0, -1, 40], np.int32)
_INT_OPS = ("div", "rem", "shift_left", "shift_right_logical", "shift_right_arithmetic",
            "bitwise_and", "bitwise_xor", "max", "min")


def test_integer_semantics_match_jax() -> None:
    """Truncating div, C remainder, zero divisors, INT_MIN / -1 and out-of-range shifts,
    eagerly and in one traced function, equal jax.lax's results bit for bit."""
    traced = ad.jit(lambda a, b: [getattr(lax, n)(a, b) for n in _INT_OPS])(_XI, _YI)
    for name, got in zip(_INT_OPS, traced):
        want = np.asarray(getattr(jlax, name)(_XI, _YI))
        np.testing.assert_array_equal(got, want, err_msg=f"traced {name}")
        eager = np.asarray(getattr(lax, name)(_XI, _YI))
        assert eager.dtype == want.dtype, name
        np.testing.assert_array_equal(eager, want, err_msg=f"eager {name}")


def test_float_semantics_match_jax() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994, 3e10, -3e10, np.nan, -7.5])
    y = np.array([2.0, -2.0, 0.75, 2.0, -3.0, 1.0, 7.0, 3.0, 1.0, 2.0])

    def f(x: np.ndarray, y: np.ndarray) -> list:
        return [lax.round(x), lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), lax.rem(x, y),
                lax.div(x, y), lax.convert_element_type(x, np.int32),
                lax.convert_element_type(x, np.bool_), lax.clamp(-1.0, x, 2.0),
                lax.logistic(x * 100.0), lax.integer_pow(y, -3), lax.pow(y, 3)]

    def g(x: np.ndarray, y: np.ndarray) -> list:
        return [jlax.round(x), jlax.round(x, jlax.RoundingMethod.TO_NEAREST_EVEN),
                jlax.rem(x, y), jlax.div(x, y), jlax.convert_element_type(x, np.int32),
                jlax.convert_element_type(x, np.bool_), jlax.clamp(-1.0, x, 2.0),
                jlax.logistic(x * 100.0), jlax.integer_pow(y, -3), jlax.pow(y, 3)]

    want = [np.asarray(v) for v in g(x, y)]
    for got_all in (ad.jit(f)(x, y), f(x, y)):
        for i, (got, w) in enumerate(zip(got_all, want)):
            got = np.asarray(got)
            assert got.dtype == w.dtype, (i, got.dtype, w.dtype)
            np.testing.assert_allclose(got, w, rtol=1e-15, atol=1e-300, err_msg=f"result {i}")


def test_special_functions_against_jax() -> None:
    """lgamma, digamma and erf_inv (no table rows: ~30 s of compilation each there):
    values and a gradient in one compilation, against jax."""
    x = np.array([0.3, 1.7, 4.2, -0.4, 2.5])
    u = np.array([-0.9, -0.3, 0.0, 0.45, 0.8])
    t = np.array([0.5, -1.0, 2.0, 0.25, -0.75])
    names = ("lgamma", "digamma", "erf_inv")

    def ours(x: np.ndarray, u: np.ndarray) -> list:
        out = []
        for n, a in zip(names, (x, x, u)):
            fn = getattr(lax, n)
            out += [fn(a), ad.grad(lambda v: (fn(v) * t).sum())(a)]
        return out

    got = ad.jit(ours)(x, u)
    i = 0
    for n, a in zip(names, (x, x, u)):
        fn = getattr(jlax, n)
        want = [fn(a), jax.grad(lambda v: (fn(v) * t).sum())(a)]
        for w in want:
            np.testing.assert_allclose(got[i], np.asarray(w), rtol=1e-12, atol=1e-13,
                                       err_msg=f"{n} output {i % 2}")
            i += 1


@pytest.mark.parametrize("call, message", [
    (lambda: lax.add(np.ones(3), np.ones(3, np.float32)),
     "lax.add requires arguments to have the same dtypes, got float64, float32"),
    (lambda: lax.mul(np.ones(3), 2), "a Python integer scalar does not adopt float64"),
    (lambda: lax.sub(np.ones((3, 4)), np.ones(4)),
     "lax.sub: arrays must have the same number of dimensions"),
    (lambda: lax.max(np.ones((3, 2)), np.ones((1, 4))),
     "lax.max got incompatible shapes for broadcasting"),
    (lambda: lax.exp(np.arange(3)), "lax.exp does not accept dtype int64"),
    (lambda: lax.bitwise_and(np.ones(2), np.ones(2)), "lax.bitwise_and does not accept dtype"),
    (lambda: lax.integer_pow(np.arange(3), -1), "integers cannot be raised to negative powers"),
    (lambda: lax.concatenate([np.ones(2), np.ones(2, np.float32)], 0),
     "lax.concatenate requires arguments to have the same dtypes"),
    (lambda: lax.pad(np.ones(2), 0, [(1, 1, 0)]), "lax.pad requires arguments to have the same"),
    (lambda: lax.transpose(np.ones((2, 3)), (-1, 0)), "is not a permutation"),
    (lambda: lax.broadcast_in_dim(np.ones(3), (2, 4), (1,)), "cannot be broadcast to (2, 4)"),
    (lambda: lax.slice(np.ones(3), (-1,), (3,)), "0 <= start <= limit <= shape"),
    (lambda: lax.dot(np.ones((2, 3, 4)), np.ones((4, 2))), "use dot_general"),
    (lambda: lax.clamp(np.zeros(2), np.ones(3), 1.0), "lax.clamp requires min.shape"),
])
def test_strict_typing_errors(call, message) -> None:
    """Where jax.lax raises a TypeError these do too, naming the op and the user's line."""
    with pytest.raises(TypeError) as info:
        call()
    assert message in str(info.value)
    assert "test_lax_ops.py" in str(info.value)


def test_python_scalars_adopt_the_array_dtype() -> None:
    out = ad.jit(lambda x: (lax.add(x, 1.0), lax.max(x, 0.0), lax.pad(x, 0.0, [(1, 0, 0)])))(
        np.ones(3, np.float32))
    assert [o.dtype for o in out] == [np.float32] * 3


def test_reduce_window_takes_lax_computations() -> None:
    """jax programs pool with lax.max / lax.add and a -inf / 0 init. lax.max is the max
    kind (not a generic function): at ties the cotangent goes to the first element, as
    jax's select-and-scatter does (the rounded input has ties in most windows)."""
    x = np.round(np.random.default_rng(0).standard_normal((1, 5, 5, 2)))
    win, st = (1, 2, 2, 1), (1, 2, 2, 1)

    def ours(x: np.ndarray) -> list:
        mx = lax.reduce_window(x, -np.inf, lax.max, win, st, "SAME")
        sm = lax.reduce_window(x, 0.0, lax.add, win, st, "VALID")
        mn = lax.reduce_window(x, np.inf, lax.min, win, st, "VALID")
        return [mx, sm, mn, ad.grad(lambda v: lax.reduce_window(
            v, -np.inf, lax.max, win, st, "SAME").sum())(x)]

    got = ad.jit(ours)(x)
    want = [jlax.reduce_window(x, -np.inf, jlax.max, win, st, "SAME"),
            jlax.reduce_window(x, 0.0, jlax.add, win, st, "VALID"),
            jlax.reduce_window(x, np.inf, jlax.min, win, st, "VALID"),
            jax.grad(lambda v: jlax.reduce_window(v, -np.inf, jlax.max, win, st,
                                                  "SAME").sum())(x)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-14)


def test_reduce_with_a_general_function_and_max_monoid() -> None:
    x = np.random.default_rng(1).standard_normal((3, 5))
    got = ad.jit(lambda x: (lax.reduce(x, -np.inf, lax.max, (1,)),
                            lax.reduce(x, 0.0, lambda a, b: a + b, (0, 1)),
                            lax.reduce(x, 2.0, lax.min, (0,))))(x)
    want = (jlax.reduce(x, -np.inf, jlax.max, (1,)),
            jlax.reduce(x, 0.0, lambda a, b: a + b, (0, 1)),
            jlax.reduce(x, 2.0, jlax.min, (0,)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-14)


def test_eval_shape() -> None:
    """Shapes and dtypes of a pytree output from ShapeDtypeStructs, arrays and a keyword,
    as jax.eval_shape gives them; nothing is compiled."""
    def f(lx, p, x, *, scale):
        h = lx.dot_general(x, p["w"], (((1,), (0,)), ((), ())))
        return {"y": lx.tanh(h) * scale, "n": lx.argmax(h, 1, np.int32), "x": x}

    out = ad.eval_shape(lambda p, x, scale: f(lax, p, x, scale=scale),
                        {"w": ad.ShapeDtypeStruct((4, 5), np.float32)},
                        np.zeros((2, 4), np.float32), scale=2.0)
    want = jax.eval_shape(lambda p, x: f(jlax, p, x, scale=np.float32(2.0)),
                          {"w": jax.ShapeDtypeStruct((4, 5), np.float32)},
                          jax.ShapeDtypeStruct((2, 4), np.float32))
    assert sorted(out) == sorted(want)
    for k in want:
        assert (out[k].shape, out[k].dtype) == (want[k].shape, want[k].dtype), k
    assert ad.eval_shape(lambda a: 3.0 * a[0], np.ones((3, 2))).shape == (2,)
