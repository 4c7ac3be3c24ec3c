"""Edge cases of the array-manipulation and NaN-aware names (array_manip.py)
that the differential table (differential_cases.py, section npnames) does not
reach: every pad mode and pad_width form, NaN entries with all-NaN slices under
grad, sinc's derivatives of every order at 0, hypot at the origin, einsum's
`...` forms, dtypes against jax.numpy, eager calls and the errors.

Oracles: numpy for values, jax (x64) for derivatives and dtypes, the known
closed forms (sinc's Maclaurin series) and finite differences. Each test
compiles once (one `ad.jit` returning every output).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp
from mlir_autodiff.errors import (
    ConcretizationTypeError,
    UnexpectedTracerError,
    UnsupportedError,
)

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.random.default_rng(7).standard_normal((3, 4))
NANS = np.array([[1.0, np.nan, -2.0, 0.5], [np.nan, np.nan, np.nan, np.nan],
                 [0.5, 3.0, 3.0, np.nan]])


def _check_all(outs: list, refs: list) -> None:
    for i, (o, r) in enumerate(zip(outs, refs)):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape and o.dtype == r.dtype, (i, o.shape, o.dtype, r.shape, r.dtype)
        np.testing.assert_allclose(o, r, rtol=1e-13, atol=1e-13, equal_nan=True, err_msg=str(i))


PADS = [  # (pad_width, mode, kwargs): every mode, every pad_width form, wide pads
    (1, "constant", {}), ((2,), "constant", {"constant_values": -1.0}),
    ((1, 2), "constant", {"constant_values": (3.0, 4.0)}),
    (((1, 0), (2, 3)), "constant", {"constant_values": ((1.0, 2.0), (3.0, 4.0))}),
    (((1,), (2,)), "edge", {}), (3, "edge", {}),
    (((5, 7), (9, 4)), "reflect", {}), (((2, 2), (1, 3)), "reflect", {"reflect_type": "odd"}),
    (((4, 6), (8, 5)), "symmetric", {}), ((2, 3), "symmetric", {"reflect_type": "odd"}),
    (((7, 8), (9, 10)), "wrap", {}), (((2, 1), (0, 2)), "maximum", {}),
    (((1, 1), (2, 0)), "minimum", {}), (2, "mean", {}), (((0, 0), (0, 0)), "reflect", {}),
]


def test_pad_every_mode_and_width_form() -> None:
    outs = ad.jit(lambda x: [anp.pad(x, w, mode=m, **kw) for w, m, kw in PADS])(X)
    _check_all(outs, [np.pad(X, w, mode=m, **kw) for w, m, kw in PADS])


def test_pad_int_and_bool_dtypes() -> None:
    i = np.arange(12).reshape(3, 4) - 5
    b = i > 0
    f = ad.jit(lambda i, b: [anp.pad(i, 2, mode="mean"), anp.pad(i, 1, constant_values=2.7),
                             anp.pad(b, (1, 2), mode="reflect"), anp.pad(i, 3, mode="wrap")])
    _check_all(f(i, b), [np.pad(i, 2, mode="mean"), np.pad(i, 1, constant_values=2.7),
                         np.pad(b, (1, 2), mode="reflect"), np.pad(i, 3, mode="wrap")])


def test_nan_reductions_grad_is_finite_and_jax() -> None:
    """The derivative at NaN entries (and along all-NaN slices) is 0, never NaN; the
    values of all-NaN slices are NaN (nanmax/nanmin/nanmean) or 0 (nansum)."""
    w = np.array([[1.0], [2.0], [-1.5]])

    def loss(m, x):
        r = [m.nansum(x, axis=1, keepdims=True) ** 2, m.nanmean(3.0 * x, axis=1, keepdims=True),
             m.nanmax(x, axis=1, keepdims=True), m.nanmin(x * 2.0, axis=1, keepdims=True)]
        return sum(m.nan_to_num(v) * w for v in r).sum()

    def ours(x):
        vals = [anp.nansum(x, axis=1), anp.nanmean(x, axis=1), anp.nanmax(x, axis=1),
                anp.nanmin(x, axis=1)]
        return vals, ad.grad(lambda x: loss(anp, x))(x)

    vals, g = ad.jit(ours)(NANS)
    _check_all(vals, [np.nansum(NANS, axis=1), *(
        np.array([fn(r) if not np.isnan(r).all() else np.nan for r in NANS])
        for fn in (np.nanmean, np.nanmax, np.nanmin))])
    g = np.asarray(g)
    assert np.isfinite(g).all(), g   # (x * x inside would give NaN * 0 there, as in jax)
    np.testing.assert_allclose(g, np.asarray(jax.grad(lambda x: loss(jnp, x))(NANS)),
                               rtol=1e-13, atol=0)
    assert (g[np.isnan(NANS)] == 0).all()


def test_sinc_derivatives_at_zero_every_order() -> None:
    """(d/dx)^k sinc at 0 is k! times the Maclaurin coefficient: 0 for odd k,
    (-1)^(k/2) pi^k / (k + 1) for even k (-pi^2/3, pi^4/5, -pi^6/7), as jax."""
    fs, f = [], anp.sinc
    for _ in range(4):
        f = ad.grad(f)
        fs.append(f)
    got = ad.jit(lambda x: [g(x) for g in fs])(np.float64(0.0))
    exact = [0.0 if k % 2 else (-1) ** (k // 2) * math.pi ** k / (k + 1) for k in range(1, 5)]
    np.testing.assert_allclose(np.asarray(got, dtype=float), exact, rtol=1e-12, atol=1e-12)
    fj = jnp.sinc
    for k in range(1, 5):
        fj = jax.grad(fj)
        assert float(got[k - 1]) == pytest.approx(float(fj(0.0)), rel=1e-12, abs=1e-12)


def test_hypot_at_origin_and_ties() -> None:
    """At (0, 0) the gradient is jax's (1/2, 1/2) (no NaN); at a tie |x| = |y| the
    Hessian is the true one (finite differences), the value never overflows."""
    def f(x, y):
        return anp.hypot(x, y)

    g0 = ad.grad(f, argnums=(0, 1))
    h = ad.hessian(lambda v: anp.hypot(v[0], v[1]))
    out = ad.jit(lambda a, b, v, big: (g0(a, b), h(v), anp.hypot(big, big)))(
        np.float64(0.0), np.float64(0.0), np.array([1.5, -1.5]), np.float64(1e300))
    jg = jax.grad(lambda a, b: jnp.hypot(a, b), argnums=(0, 1))(0.0, 0.0)
    assert [float(v) for v in out[0]] == [float(v) for v in jg] == [0.5, 0.5]
    r = math.hypot(1.5, 1.5)
    exact = np.array([[1.5 ** 2, 1.5 ** 2], [1.5 ** 2, 1.5 ** 2]]) / r ** 3
    np.testing.assert_allclose(np.asarray(out[1]), exact, rtol=1e-12)
    assert float(out[2]) == pytest.approx(math.sqrt(2) * 1e300, rel=1e-15)


def test_einsum_ellipsis_forms() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    c, d = rng.standard_normal((3, 3)), rng.standard_normal((4,))
    specs = [("...ij,...jk->...ik", a, b), ("...ii->...i", c), ("...ii", c),
             ("i...j,j->...", a[0], d), ("...,...->...", a, d), ("...j,...j", a, d),
             ("a...->...a", a)]
    outs = ad.jit(lambda *ops: [anp.einsum(s[0], *ops[i]) for i, s in enumerate(specs)])(
        *[s[1:] for s in specs])
    _check_all(outs, [np.einsum(s[0], *s[1:]) for s in specs])
    with pytest.raises(ValueError, match="do not broadcast"):
        ad.jit(lambda x, y: anp.einsum("...i,...i", x, y))(np.ones((2, 3)), np.ones((4, 3)))


def test_dtypes_match_jax() -> None:
    """(Where numpy and jax differ for strong dtypes, int64 with float32, the project
    follows numpy throughout; these calls avoid that pair.)"""
    i = np.array([[1, 2], [3, 4]])
    f32 = np.ones((2, 2), np.float32)
    calls = [lambda m, i, f: m.hypot(i, 3), lambda m, i, f: m.sinc(i),
             lambda m, i, f: m.nanmean(i), lambda m, i, f: m.average(i, axis=0, weights=i[0]),
             lambda m, i, f: m.isclose(i, f), lambda m, i, f: m.kron(i, i),
             lambda m, i, f: m.cross(m.repeat(f[:, :1], 3, 1), f),
             lambda m, i, f: m.nan_to_num(f), lambda m, i, f: m.pad(f, 1, constant_values=2),
             lambda m, i, f: m.repeat(f, 2), lambda m, i, f: m.tile(i, 2),
             lambda m, i, f: m.linspace(0, 1, 3), lambda m, i, f: m.hypot(f, 2.0),
             lambda m, i, f: m.trace(i, dtype=np.float32), lambda m, i, f: m.meshgrid(i[0], f[0])[0]]
    ours = ad.jit(lambda i, f: [c(anp, i, f) for c in calls])(i, f32)
    for k, (o, c) in enumerate(zip(ours, calls)):
        assert np.asarray(o).dtype == np.asarray(c(jnp, i, f32)).dtype, k


def test_eager_calls_are_numpy() -> None:
    assert np.array_equal(anp.pad(X, 1, mode="reflect"), np.pad(X, 1, mode="reflect"))
    assert [p.shape for p in anp.array_split(X, 3, axis=1)] == [(3, 2), (3, 1), (3, 1)]
    assert anp.sinc(0.0) == 1.0 and anp.hypot(3, 4) == 5.0
    assert np.array_equal(anp.einsum("...ij->...ji", X), X.T)
    assert np.array_equal(anp.linspace(0, 1, 3), [0.0, 0.5, 1.0])
    leaked = []
    ad.jit(lambda x: leaked.append(x) or x)(X)
    with pytest.raises(UnexpectedTracerError, match="anp.tile"):
        anp.tile(leaked[0], 2)


def test_split_sections_and_indices() -> None:
    outs = ad.jit(lambda x: [anp.array_split(x, 3, axis=1), anp.split(x, [1, -1, 10]),
                             anp.array_split(x, 5, axis=0)])(X)
    refs = [np.array_split(X, 3, axis=1), np.split(X, [1, -1, 10]), np.array_split(X, 5, axis=0)]
    for o, r in zip(outs, refs):
        assert len(o) == len(r)
        _check_all(o, r)


def test_ndarray_methods() -> None:
    """`x.repeat` and `x.diagonal` trace as numpy's methods run eagerly (`x.trace` is
    taken: a Tracer's `trace` is the trace it belongs to; use `anp.trace`)."""
    x3 = np.arange(24.0).reshape(2, 3, 4)
    calls = [lambda x: x.repeat(2, axis=1), lambda x: x.repeat(np.array([1, 0, 2]), 1),
             lambda x: x.diagonal(1, 1, 2), lambda x: x.diagonal(-1, 2, 0)]
    _check_all(ad.jit(lambda x: [c(x) for c in calls])(x3), [c(x3) for c in calls])


@pytest.mark.parametrize("call,err,match", [
    (lambda x: anp.pad(x, 1, mode="linear_ramp"), UnsupportedError, "mode 'linear_ramp'"),
    (lambda x: anp.pad(x, -1), ValueError, "negative"),
    (lambda x: anp.pad(x, ((1, 2), (3, 4), (5, 6))), ValueError, "cannot be broadcast"),
    (lambda x: anp.pad(x, (4, 4), mode="reflect", reflect_type="odd"), UnsupportedError,
     "wider than the axis"),
    (lambda x: anp.repeat(x, x.astype(int)), ConcretizationTypeError, "repeats"),
    (lambda x: anp.split(x, 3, axis=1), ValueError, "equal division"),
    (lambda x: anp.cross(x, x), ValueError, "dimension must be 2 or 3"),
    (lambda x: anp.diag(x[None]), ValueError, "1- or 2-d"),
    (lambda x: anp.rot90(x, axes=(1, 1)), ValueError, "axes must be different"),
    (lambda x: anp.average(x, weights=x[0]), TypeError, "axis must be specified"),
    (lambda x: anp.meshgrid(x, indexing="xx"), ValueError, "indexing"),
    (lambda x: anp.tril(x[0]), ValueError, "at least 2 dimensions"),
])
def test_errors_name_the_function_and_line(call, err, match) -> None:
    with pytest.raises(err, match=match) as info:
        ad.jit(call)(X)
    assert "test_numpy_manip.py" in str(info.value) or err is TypeError and "average" in str(
        info.value)
