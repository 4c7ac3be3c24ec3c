"""numpy semantics of the traced API: broadcasting, scalars, promotion, indexing,
`.at[]` updates, einsum and reductions — each checked against numpy itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

RNG = np.random.default_rng(0)


def randn(*shape: int, dtype: Any = np.float64) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def check(got: Any, want: Any, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), type(got)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, f"dtype {got.dtype}, numpy gives {want.dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- broadcasting

@pytest.mark.parametrize("sa,sb", [
    ((3, 1), (1, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (3,)),
    ((5,), (2, 1, 5)),
    ((1,), (3, 3)),
    ((2, 3, 1, 5), (4, 1)),
])
def test_broadcasting_shapes(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = randn(*sa), randn(*sb)

    def f(m: Any, x: Any, y: Any) -> Any:
        return (x * y + x, m.maximum(x, y) - y, m.where(x > y, x, y))

    got = ad.jit(lambda x, y: f(anp, x, y))(a, b)
    for g, w in zip(got, f(np, a, b)):
        check(g, w)


# --------------------------------------------------------------------------- scalars and promotion

def test_python_scalars_are_weak() -> None:
    x = randn(4, dtype=np.float32)
    got = ad.jit(lambda x: (x * 2.0, 1 + x, 3.0 / (x + 10), x ** 2, -x - 0.5))(x)
    want = (x * 2.0, 1 + x, 3.0 / (x + 10), x ** 2, -x - 0.5)
    for g, w in zip(got, want):
        check(g, w, rtol=1e-6)
        assert g.dtype == np.float32


def test_f32_with_f64_promotes_to_f64() -> None:
    a, b = randn(3, dtype=np.float32), randn(3, dtype=np.float64)
    got = ad.jit(lambda a, b: (a + b, a * b, anp.maximum(a, b), a @ b))(a, b)
    for g, w in zip(got, (a + b, a * b, np.maximum(a, b), a @ b)):
        check(g, w, rtol=1e-6)
        assert g.dtype == np.float64


def test_int_and_float_promotion() -> None:
    i32 = np.array([1, -2, 3], np.int32)
    i64 = np.array([4, 5, -6], np.int64)
    f32 = randn(3, dtype=np.float32)
    got = ad.jit(lambda i, j, f: (i + f, j * f, i + 1.5, i + j, i / i, i + 2, j > 0))(i32, i64, f32)
    want = (i32 + f32, i64 * f32, i32 + 1.5, i32 + i64, i32 / i32, i32 + 2, i64 > 0)
    for g, w in zip(got, want):
        check(g, w, rtol=1e-6)


def test_integer_division_and_modulo_follow_python_signs() -> None:
    a = np.array([7, -7, 7, -7, 0, 9], np.int64)
    b = np.array([2, 2, -2, -2, 3, -4], np.int64)
    got = ad.jit(lambda a, b: (a // b, a % b, anp.abs(a), anp.sign(a), -a))(a, b)
    for g, w in zip(got, (a // b, a % b, np.abs(a), np.sign(a), -a)):
        check(g, w)


def test_integer_powers() -> None:
    a = np.array([1, -2, 3, 0], np.int64)
    b = np.array([2, -1, 5, 7], np.int32)
    got = ad.jit(lambda a, b: (a ** 2, a ** 0, b ** 5, 2 ** 3 + a, a.astype(np.float32) ** 3))(a, b)
    for g, w in zip(got, (a ** 2, a ** 0, b ** 5, 2 ** 3 + a, a.astype(np.float32) ** 3)):
        check(g, w)


def test_float_floor_divide_and_remainder_signs() -> None:
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, 6.0, -0.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 2.0])
    got = ad.jit(lambda a, b: (a // b, a % b))(a, b)
    check(got[0], a // b)
    check(got[1], a % b)
    np.testing.assert_array_equal(np.signbit(got[1]), np.signbit(a % b))


def test_bool_arrays_logic_and_reductions() -> None:
    p = np.array([True, False, True, False])
    q = np.array([True, True, False, False])

    def f(m: Any, p: Any, q: Any) -> Any:
        return (p & q, p | q, p ^ q, ~p, m.logical_not(q), p + q, m.sum(p), p == q,
                m.any(p), m.all(q), m.where(p, 1.0, -1.0), p.astype(m.float32))

    got = ad.jit(lambda p, q: f(anp, p, q))(p, q)
    for g, w in zip(got, f(np, p, q)):
        check(g, w)


@pytest.mark.parametrize("src,dst", [
    (np.float32, np.int32), (np.float64, np.int64), (np.float32, np.bool_),
    (np.float64, np.float32), (np.float32, np.float64), (np.int32, np.float32),
    (np.int64, np.int32), (np.bool_, np.float64), (np.int32, np.bool_), (np.bool_, np.int64),
])
def test_astype(src: Any, dst: Any) -> None:
    x = (np.array([-2.7, -0.5, 0.0, 0.4, 1.5, 3.9]) * 3).astype(src)
    got = ad.jit(lambda x: (x.astype(dst), anp.astype(x, dst)))(x)
    check(got[0], x.astype(dst))
    check(got[1], x.astype(dst))


def test_python_scalar_arguments() -> None:
    x = randn(3, dtype=np.float32)
    f = ad.jit(lambda x, s, n: (x * s + n, s * 2, n + 1))
    a, b, c = f(x, 0.5, 3)
    check(a, (x * 0.5 + 3).astype(np.float32), rtol=1e-6)
    check(b, np.float64(1.0))
    check(c, np.int64(4))


def test_numpy_scalars_are_strong() -> None:
    x = randn(3, dtype=np.float32)
    got = ad.jit(lambda x, s: x * s)(x, np.float64(2.0))
    check(got, x * np.float64(2.0))


def test_numpy_array_constants_in_trace() -> None:
    w = randn(3, 4)
    x = randn(2, 3)
    got = ad.jit(lambda x: (x @ w, w.T + 1.0, np.arange(4.0) * x[:, :1]))(x)
    for g, wv in zip(got, (x @ w, w.T + 1.0, np.arange(4.0) * x[:, :1])):
        check(g, wv)


# --------------------------------------------------------------------------- indexing

INDICES = [
    1, -1, slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(3, 0, -2),
    None, (Ellipsis, None), (slice(None), 2, slice(None, None, -3)), (1, Ellipsis, 2),
    (slice(-2, None), None, slice(1, -1, 2)), (0, 0, 0), (slice(2, 2),), (-3, slice(4, 0, -1)),
    (Ellipsis, slice(None, None, -1), slice(5, None, -2)),
]


@pytest.mark.parametrize("idx", INDICES, ids=[repr(i) for i in INDICES])
def test_basic_indexing(idx: Any) -> None:
    x = randn(4, 5, 6)
    got = ad.jit(lambda x: x[idx])(x)
    check(got, x[idx])


def test_iteration_and_len() -> None:
    x = randn(3, 2)

    def f(x: Any) -> Any:
        return [row * i for i, row in enumerate(x)] + [anp.zeros(len(x))]

    got = ad.jit(f)(x)
    for g, w in zip(got, [row * i for i, row in enumerate(x)] + [np.zeros(3)]):
        check(g, w)


UPDATES = [
    ((1,), "set", lambda: randn(5, 6)),
    ((slice(None), slice(1, 3)), "add", lambda: randn(4, 2, 6)),
    ((slice(None, None, -1), 0), "set", lambda: randn(4, 6)),
    ((Ellipsis, -1), "multiply", lambda: 2.0),
    ((slice(1, 3), slice(None, None, 2)), "max", lambda: 0.0),
    ((0, slice(4, 0, -2), 1), "subtract", lambda: randn(2)),
    ((slice(None), 2), "set", lambda: randn(6)),  # broadcast over the first axis
    ((-1, -1, -1), "min", lambda: -5.0),
    ((slice(1, None), Ellipsis), "divide", lambda: 4.0),
]


@pytest.mark.parametrize("idx,op,make", UPDATES, ids=[f"{op}{i}" for i, (_, op, _) in
                                                       enumerate(UPDATES)])
def test_at_updates(idx: Any, op: str, make: Any) -> None:
    x = randn(4, 5, 6)
    v = make()
    got = ad.jit(lambda x, v: getattr(x.at[idx], op)(v))(x, v)
    want = x.copy()
    ufunc = {"set": None, "add": np.add, "multiply": np.multiply, "max": np.maximum,
             "subtract": np.subtract, "min": np.minimum, "divide": np.divide}[op]
    want[idx] = v if ufunc is None else ufunc(want[idx], v)
    check(got, want)
    # the input is not modified (functional update)
    assert not np.shares_memory(got, x)


def test_at_get_and_dtype_cast() -> None:
    x = np.zeros((3, 3), np.float32)
    got = ad.jit(lambda x: (x.at[1, 1].set(2.5), x.at[0].get(), x.at[:, 0].add(1)))(x)
    want = x.copy()
    want[1, 1] = 2.5
    check(got[0], want)
    check(got[1], x[0])
    w2 = x.copy()
    w2[:, 0] += 1
    check(got[2], w2)


# --------------------------------------------------------------------------- einsum

EINSUMS = [
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ii->", [(4, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ba,ca->bc", [(2, 3), (4, 3)]),
]


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum(spec: str, shapes: list[tuple[int, ...]]) -> None:
    ops = [randn(*s) for s in shapes]
    got = ad.jit(lambda *xs: anp.einsum(spec, *xs))(*ops)
    check(got, np.einsum(spec, *ops), rtol=1e-10, atol=1e-12)


def test_matmul_int_and_named_ops_in_ir() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    check(ad.jit(lambda a, b: a @ b)(a, b), a @ b)
    text = str(ad.lower(lambda a, b: (a @ b, anp.matmul(a[None], b[None])), a, b))
    assert "linalg.matmul" in text and "linalg.batch_matmul" in text


# --------------------------------------------------------------------------- reductions

AXES = [None, 0, -1, (0, 2), (1,)]


@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var", "std"])
def test_reductions_axis_keepdims(name: str, keepdims: bool) -> None:
    x = randn(3, 4, 5)
    got = ad.jit(lambda x: tuple(getattr(anp, name)(x, axis=a, keepdims=keepdims)
                                 for a in AXES))(x)
    for a, g in zip(AXES, got):
        check(g, getattr(np, name)(x, axis=a, keepdims=keepdims), rtol=1e-10, atol=1e-12)


def test_integer_reductions_and_argmax_ties() -> None:
    x = np.array([[3, 1, 3], [-2, -2, 0]], np.int32)
    got = ad.jit(lambda x: (x.sum(), x.sum(axis=0), x.max(axis=1), x.min(),
                            anp.argmax(x, axis=1), anp.argmin(x, axis=1), x.mean()))(x)
    want = (x.sum(), x.sum(axis=0), x.max(axis=1), x.min(), np.argmax(x, axis=1),
            np.argmin(x, axis=1), x.mean())
    for g, w in zip(got, want):
        check(g, w)


def test_nan_propagation() -> None:
    x = np.array([1.0, np.nan, 3.0])
    def f(m: Any, x: Any, y: Any) -> Any:  # y is x: NaN != NaN must hold elementwise
        return (m.max(x), m.maximum(x, 2.0), m.argmax(x), x != y, m.isnan(x), m.sign(x))

    got = ad.jit(lambda x: f(anp, x, x))(x)
    want = f(np, x, x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# --------------------------------------------------------------------------- creation & shapes

def test_creation_functions() -> None:
    x = randn(3, dtype=np.float32)

    def f(m: Any, x: Any) -> Any:
        return (m.zeros((2, 3)), m.ones(3, m.int32), m.full((2,), 7), m.eye(3, k=1),
                m.arange(5), m.arange(1, 2, 0.25), m.linspace(0, 1, 5), m.zeros_like(x),
                m.ones_like(x, dtype=m.float64), m.full_like(x, 2.0), m.identity(2))

    got = ad.jit(lambda x: f(anp, x))(x)
    for g, w in zip(got, f(np, x)):
        check(g, w)


def test_full_with_traced_fill_value() -> None:
    got = ad.jit(lambda s: anp.full((2, 2), s))(np.float32(3.0))
    check(got, np.full((2, 2), np.float32(3.0)))


def test_shape_attributes_are_static() -> None:
    x = randn(2, 3, 4, dtype=np.float32)

    def f(x: Any) -> Any:
        assert x.shape == (2, 3, 4) and x.ndim == 3 and x.size == 24
        assert x.dtype == np.float32 and anp.shape(x) == (2, 3, 4) and anp.ndim(x) == 3
        return x.reshape(x.shape[0], -1).T

    check(ad.jit(f)(x), x.reshape(2, -1).T)


def test_concatenate_and_stack_variants() -> None:
    a, b = randn(2, 3), randn(2, 3)

    def f(m: Any, a: Any, b: Any) -> Any:
        return (m.concatenate([a, b]), m.concatenate([a, b], axis=-1),
                m.concatenate([a, b], axis=None), m.stack([a, b]), m.stack([a, b], axis=-1),
                m.hstack([a, b]), m.vstack([a, b[0]]), m.broadcast_arrays(a, b[:1])[1])

    got = ad.jit(lambda a, b: f(anp, a, b))(a, b)
    for g, w in zip(got, f(np, a, b)):
        check(g, w)


def test_eager_fallback_outside_trace() -> None:
    x = randn(3)
    assert isinstance(anp.zeros(3), np.ndarray)
    np.testing.assert_allclose(anp.exp(x), np.exp(x))
    np.testing.assert_allclose(anp.sum(x, axis=0), np.sum(x))


def test_reshape_variants_including_zero_size() -> None:
    x = np.arange(6.0).reshape(2, 3)
    z = np.zeros((0, 3))

    def f(x: Any, z: Any) -> Any:
        return (x.reshape(3, 2), x.reshape(6), x.reshape(1, 6, 1).reshape(2, 1, 3),
                x.reshape(-1), z.reshape(0), z.reshape(3, 0), z.T.reshape(-1, 3), x[:, 1].sum())

    got = ad.jit(f)(x, z)
    for g, w in zip(got, f(x, z)):
        check(g, w)
