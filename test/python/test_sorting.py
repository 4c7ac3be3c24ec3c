"""Sorting and scans: `sort`, `argsort`, `searchsorted`, `cumsum`, `cumprod`, `quantile`,
`percentile`, `median` (mlir_autodiff.numpy) and `lax.sort`, `sort_key_val`, `top_k`,
`cumsum`, `cumprod`, `cummax`, `cummin`, `cumlogsumexp`.

Oracles: numpy (values, stable order), jax x64 (derivatives, including at ties and
through zeros), central finite differences; nothing is compared with our own output
except jit against eager where eager is numpy. The differential table
(test_differential_api.py) covers every transform on generic inputs; this file covers
the edges: stability, ties, NaNs, -0.0, axes, descending, empty and length-1 axes,
large n, traced and batched arguments, loops, errors.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax
from mlir_autodiff import numpy as anp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402


def _fd_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for k in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[k] += h
        xm[k] -= h
        g[k] = (f(xp) - f(xm)) / (2 * h)
    return g


# --------------------------------------------------------------------------- order

@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64, 100])
def test_argsort_is_stable_with_many_ties(n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 3, (4, n)).astype(np.float64)
    got = ad.jit(lambda x: anp.argsort(x))(x)
    np.testing.assert_array_equal(got, np.argsort(x, kind="stable"))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(ad.jit(lambda x: anp.sort(x))(x), np.sort(x))
    got_i = ad.jit(lambda x: anp.argsort(x))(x.astype(np.int32))
    np.testing.assert_array_equal(got_i, np.argsort(x, kind="stable"))


def test_nans_last_and_signed_zeros_tie():
    x = np.array([np.nan, 1.0, -0.0, 0.0, -np.inf, np.nan, np.inf, 0.0, -0.0])
    got = ad.jit(lambda x: anp.argsort(x))(x)
    np.testing.assert_array_equal(got, np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(got, np.asarray(jnp.argsort(x)))
    s = ad.jit(lambda x: anp.sort(x))(x)
    np.testing.assert_array_equal(s, np.sort(x))
    assert np.all(np.signbit(s[1:5]) == np.signbit(np.sort(x, kind="stable")[1:5]))


def test_descending_matches_jax():
    x = np.array([[2.0, np.nan, -1.0, 2.0, 0.5, 2.0, np.nan], [1.0, 1.0, 1.0, 0.0, 3.0, 3.0, -2.0]])
    for axis in (-1, 0, None):
        got = ad.jit(lambda x, a=axis: anp.argsort(x, axis=a, descending=True))(x)
        np.testing.assert_array_equal(got, np.asarray(jnp.argsort(x, axis=axis,
                                                                  descending=True)))
        gs = ad.jit(lambda x, a=axis: anp.sort(x, axis=a, descending=True))(x)
        np.testing.assert_array_equal(gs, np.asarray(jnp.sort(x, axis=axis, descending=True)))
        # eager (numpy) agrees with the compiled code
        np.testing.assert_array_equal(anp.argsort(x, axis=axis, descending=True), got)
        np.testing.assert_array_equal(anp.sort(x, axis=axis, descending=True), gs)


@pytest.mark.parametrize("axis", [0, 1, 2, -2, None])
def test_axes(axis):
    x = np.random.default_rng(0).integers(-3, 3, (3, 5, 6)).astype(np.float64)
    got = ad.jit(lambda x: anp.argsort(x, axis=axis))(x)
    np.testing.assert_array_equal(got, np.argsort(x, axis=axis, kind="stable"))
    np.testing.assert_array_equal(ad.jit(lambda x: anp.sort(x, axis=axis))(x),
                                  np.sort(x, axis=axis))


def test_bool_and_small_int_dtypes():
    b = np.array([True, False, True, False, False])
    np.testing.assert_array_equal(ad.jit(lambda x: anp.sort(x))(b), np.sort(b))
    np.testing.assert_array_equal(ad.jit(lambda x: anp.argsort(x))(b),
                                  np.argsort(b, kind="stable"))
    i8 = np.array([[5, -128, 127, 0, 127]], np.int8)
    out = ad.jit(lambda x: anp.sort(x))(i8)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, np.sort(i8))


@pytest.mark.parametrize("shape,axis", [((0,), -1), ((3, 0), -1), ((0, 4), 0), ((4, 1), -1),
                                        ((1,), 0), ((2, 1, 3), 1)])
def test_empty_and_length_one_axes(shape, axis):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)[::-1] \
        if len(shape) == 1 else np.ones(shape)
    np.testing.assert_array_equal(ad.jit(lambda x: anp.sort(x, axis=axis))(x),
                                  np.sort(x, axis=axis))
    np.testing.assert_array_equal(ad.jit(lambda x: anp.argsort(x, axis=axis))(x),
                                  np.argsort(x, axis=axis, kind="stable"))
    np.testing.assert_array_equal(ad.jit(lambda x: anp.cumsum(x, axis=axis))(x),
                                  np.cumsum(x, axis=axis))
    np.testing.assert_array_equal(ad.jit(lambda x: lax.cummax(x, axis=axis))(x),
                                  np.maximum.accumulate(x, axis=axis))


def test_large_n_compiles_and_runs_fast():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4096))
    t0 = time.perf_counter()
    s = ad.jit(lambda x: anp.sort(x))(x)
    i = ad.jit(lambda x: anp.argsort(x, axis=None))(x)
    g = ad.jit(ad.grad(lambda x: anp.sum(anp.sort(x) * np.arange(4096.0))))(x)
    c = ad.jit(ad.grad(lambda x: anp.sum(anp.cumsum(x, axis=1) ** 2)))(x)
    elapsed = time.perf_counter() - t0
    np.testing.assert_array_equal(s, np.sort(x))
    np.testing.assert_array_equal(i, np.argsort(x, axis=None, kind="stable"))
    np.testing.assert_array_equal(g, np.argsort(np.argsort(x, axis=-1), axis=-1).astype(float))
    cs = np.cumsum(x, axis=1)
    np.testing.assert_allclose(c, 2 * np.flip(np.cumsum(np.flip(cs, 1), 1), 1), rtol=1e-9)
    assert elapsed < 20, f"sorting 4096 elements took {elapsed:.1f} s to compile and run"


# --------------------------------------------------------------------------- derivatives

def test_sort_derivative_is_the_permutation_at_ties():
    x = np.array([[3.0, 1.0, 3.0, 1.0, 3.0], [0.0, -0.0, 2.0, 0.0, 2.0]])
    w = np.arange(10.0).reshape(2, 5)
    for axis in (-1, 0, None):
        for desc in (False, True):
            def f(x, m, a=axis, d=desc):
                return m.sum(m.sort(x, axis=a, descending=d).reshape(-1) * w.reshape(-1))
            got = ad.jit(ad.grad(lambda x: f(x, anp)))(x)
            want = jax.grad(lambda x: f(x, jnp))(x)
            np.testing.assert_array_equal(got, np.asarray(want))
    t = np.random.default_rng(2).standard_normal(x.shape)
    _, tan = ad.jit(lambda x, t: ad.jvp(lambda x: anp.sort(x, axis=0), (x,), (t,)))(x, t)
    np.testing.assert_array_equal(tan, np.asarray(jax.jvp(lambda x: jnp.sort(x, axis=0),
                                                          (x,), (t,))[1]))


def test_sort_hessian_and_vmap_over_another_axis():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6))

    def f(x, m):
        s = m.sort(x)
        return m.sum(m.sin(s) * m.arange(6.0))

    h = ad.jit(ad.hessian(lambda x: f(x, anp)))(x[0])
    np.testing.assert_allclose(h, np.asarray(jax.hessian(lambda x: f(x, jnp))(x[0])),
                               rtol=1e-12, atol=1e-12)
    # batched along axis 1: each column sorted on its own
    vg = ad.jit(ad.vmap(ad.grad(lambda c: f(c, anp)), in_axes=1))(x.T.copy())
    np.testing.assert_allclose(vg, np.asarray(jax.vmap(jax.grad(lambda c: f(c, jnp)),
                                                       in_axes=1)(x.T)), rtol=1e-12)
    vs = ad.jit(ad.vmap(lambda c: anp.argsort(c), in_axes=1, out_axes=1))(x.T.copy())
    np.testing.assert_array_equal(vs, np.argsort(x.T, axis=0, kind="stable"))


def test_sort_inside_a_scan_differentiates():
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((5, 7))

    def loss(w, xs, m, scan):
        def step(c, x):
            s = m.sort(x * w + c)
            return c + s[0] * s[-1], s[3]
        c, ys = scan(step, 0.0, xs)
        return c + m.sum(ys)

    got = ad.jit(ad.grad(lambda w: loss(w, xs, anp, lax.scan)))(0.7)
    want = jax.grad(lambda w: loss(w, xs, jnp, jax.lax.scan))(0.7)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_lax_sort_num_keys_lexicographic_with_payload():
    k1 = np.array([[1.0, 0.0, 1.0, 0.0, np.nan, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]])
    k2 = np.array([[3, 1, 2, 1, 0, 2, 0], [0, 0, 0, 0, 0, 0, 0]], np.int32)
    v = np.arange(14.0).reshape(2, 7) ** 1.5
    for dim in (1, 0):
        got = ad.jit(lambda a, b, c: lax.sort((a, b, c), dimension=dim, num_keys=2))(k1, k2, v)
        want = jax.lax.sort((k1, k2, v), dimension=dim, num_keys=2)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, np.asarray(w))
        eager = lax.sort((k1, k2, v), dimension=dim, num_keys=2)
        for g, e in zip(got, eager):
            np.testing.assert_array_equal(g, e)
        w = np.random.default_rng(15).standard_normal(v.shape)
        gv = ad.jit(ad.grad(lambda c: anp.sum(
            lax.sort((k1, k2, c), dimension=dim, num_keys=2)[2] * w)))(v)
        jv = jax.grad(lambda c: jnp.sum(
            jax.lax.sort((k1, k2, c), dimension=dim, num_keys=2)[2] * w))(v)
        np.testing.assert_array_equal(gv, np.asarray(jv))


def test_top_k_values_indices_and_derivatives():
    x = np.array([[1.0, 3.0, np.nan, 3.0, -2.0, 3.0], [0.5, 0.5, 0.5, 0.0, 9.0, -1.0]])
    v, i = ad.jit(lambda x: lax.top_k(x, 4))(x)
    jv, ji = jax.lax.top_k(x, 4)
    np.testing.assert_array_equal(v, np.asarray(jv))
    np.testing.assert_array_equal(i, np.asarray(ji))
    assert i.dtype == np.int32
    ev, ei = lax.top_k(x, 4)  # eager
    np.testing.assert_array_equal(ev, v)
    np.testing.assert_array_equal(ei, i)
    y = np.where(np.isnan(x), 7.0, x)
    w = np.arange(6.0).reshape(2, 3)
    got = ad.jit(ad.grad(lambda y: anp.sum(lax.top_k(y, 3)[0] * w)))(y)
    want = jax.grad(lambda y: jnp.sum(jax.lax.top_k(y, 3)[0] * w))(y)
    np.testing.assert_array_equal(got, np.asarray(want))


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_ties_split_as_jax(name):
    x = np.array([[1.0, 1.0, 1.0, 0.5, 1.0, 2.0, 2.0], [-1.0, -1.0, -2.0, -2.0, -2.0, 0.0, -2.0]])
    for axis, rev in ((1, False), (1, True), (0, False)):
        f = lambda x, mod, a=axis, r=rev: getattr(mod, name)(x, axis=a, reverse=r)  # noqa: E731
        w = np.random.default_rng(5).standard_normal(x.shape)
        np.testing.assert_array_equal(ad.jit(lambda x: f(x, lax))(x), np.asarray(f(x, jax.lax)))
        got = ad.jit(ad.grad(lambda x: anp.sum(f(x, lax) * w)))(x)
        want = jax.grad(lambda x: jnp.sum(f(x, jax.lax) * w))(x)
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-14, atol=1e-15)


def test_cumprod_with_zeros():
    x = np.array([[2.0, 0.0, 3.0, 0.0, 1.5], [0.0, 1.5, 2.0, -1.0, 4.0], [1.0, 2.0, 0.0, 3.0, 5.0]])
    w = np.random.default_rng(6).standard_normal(x.shape)
    f = lambda x, m: m.sum(m.cumprod(x, axis=1) * w)  # noqa: E731
    got = ad.jit(ad.grad(lambda x: f(x, anp)))(x)
    np.testing.assert_allclose(got, np.asarray(jax.grad(lambda x: f(x, jnp))(x)), rtol=1e-14)
    np.testing.assert_allclose(got, _fd_grad(lambda x: f(x, np), x), rtol=1e-7, atol=1e-8)
    assert np.all(np.isfinite(got))
    f1 = lambda x, m: m.sum(m.cumprod(x) * w[0])  # noqa: E731
    h = ad.jit(ad.hessian(lambda x: f1(x, anp)))(x[0])
    np.testing.assert_allclose(h, np.asarray(jax.hessian(lambda x: f1(x, jnp))(x[0])),
                               rtol=1e-13, atol=1e-13)
    # the flattened default and the lax form (reverse) through zeros
    g2 = ad.jit(ad.grad(lambda x: anp.sum(lax.cumprod(x, axis=1, reverse=True) * w)))(x)
    w2 = jax.grad(lambda x: jnp.sum(jax.lax.cumprod(x, axis=1, reverse=True) * w))(x)
    np.testing.assert_allclose(g2, np.asarray(w2), rtol=1e-14)


def test_cumsum_transpose_is_reversed_cumsum_and_dtypes():
    x = np.random.default_rng(7).standard_normal((3, 9))
    ct = np.random.default_rng(8).standard_normal((3, 9))
    _, g = ad.jit(lambda x, ct: (lambda r: (r[0], r[1](ct)))(ad.vjp(
        lambda x: anp.cumsum(x, axis=1), x)))(x, ct)
    np.testing.assert_allclose(g[0], np.flip(np.cumsum(np.flip(ct, 1), 1), 1), rtol=1e-13)
    i8 = np.array([100, 100, 100], np.int8)
    out = ad.jit(lambda x: anp.cumsum(x))(i8)
    assert out.dtype == np.cumsum(i8).dtype
    np.testing.assert_array_equal(out, np.cumsum(i8))
    out = ad.jit(lambda x: lax.cumsum(x))(i8)
    assert out.dtype == np.int8  # lax keeps the operand's dtype
    np.testing.assert_array_equal(out, np.asarray(jax.lax.cumsum(i8)))


# --------------------------------------------------------------------------- searchsorted

def test_searchsorted_sides_nans_batched_and_integer_valued():
    a = np.array([-np.inf, -1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 5.0, np.nan])
    v = np.array([[-np.inf, 0.0, -0.0, 2.0], [np.nan, 9.0, -9.0, 1.0]])
    for side in ("left", "right"):
        got = ad.jit(lambda a, v: anp.searchsorted(a, v, side=side))(a, v)
        np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
        assert got.dtype == np.int64
    # every insertion point of a large sorted array
    big = np.sort(np.random.default_rng(9).integers(0, 50, 3000)).astype(np.float64)
    q = np.arange(-1.0, 52.0, 0.5)
    np.testing.assert_array_equal(ad.jit(lambda a, q: anp.searchsorted(a, q))(big, q),
                                  np.searchsorted(big, q))
    # vmap over the sorted array and the queries
    A = np.sort(np.random.default_rng(10).standard_normal((3, 6)), axis=1)
    V = np.random.default_rng(11).standard_normal((3, 4))
    got = ad.jit(ad.vmap(lambda a, v: anp.searchsorted(a, v, side="right")))(A, V)
    np.testing.assert_array_equal(got, np.stack([np.searchsorted(A[k], V[k], side="right")
                                                 for k in range(3)]))
    # an integer result: gradients flow only through the other uses of `a`
    f = lambda a, m: m.sum(a * m.searchsorted(a, 0.1))  # noqa: E731
    g = ad.jit(ad.grad(lambda a: f(a, anp)))(A[0])
    np.testing.assert_array_equal(g, np.asarray(jax.grad(lambda a: f(a, jnp))(A[0])))


# --------------------------------------------------------------------------- quantiles

@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_methods(method):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 7))
    q = [0.0, 0.1, 0.5, 2 / 3, 1.0]
    got = ad.jit(lambda x: anp.quantile(x, q, axis=1, method=method))(x)
    np.testing.assert_allclose(got, np.quantile(x, q, axis=1, method=method), rtol=1e-14)
    if method != "nearest":  # jax rounds .5 down; numpy (and we) to even
        np.testing.assert_allclose(got, np.asarray(jnp.quantile(x, jnp.asarray(q), axis=1,
                                                                method=method)), rtol=1e-14)
        w = rng.standard_normal(got.shape)
        g = ad.jit(ad.grad(lambda x: anp.sum(anp.quantile(x, q, axis=1, method=method) * w)))(x)
        want = jax.grad(lambda x: jnp.sum(jnp.quantile(x, jnp.asarray(q), axis=1,
                                                       method=method) * w))(x)
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-13, atol=1e-15)


def test_quantile_nans_keepdims_traced_q_and_median():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 2.0, 0.0]])
    np.testing.assert_array_equal(ad.jit(lambda x: anp.median(x, axis=1))(x),
                                  np.median(x, axis=1))
    np.testing.assert_array_equal(ad.jit(lambda x: anp.percentile(x, 30.0))(x),
                                  np.percentile(x, 30.0))
    y = np.random.default_rng(13).standard_normal((3, 4, 5))
    got = ad.jit(lambda y: anp.quantile(y, [0.2, 0.8], axis=(0, 2), keepdims=True))(y)
    np.testing.assert_allclose(got, np.quantile(y, [0.2, 0.8], axis=(0, 2), keepdims=True),
                               rtol=1e-14)
    # q traced: its derivative is (high - low) (n - 1), as jax's
    dq = ad.jit(ad.grad(lambda q: anp.quantile(y[0, 0], q), argnums=0))(0.33)
    np.testing.assert_allclose(dq, jax.grad(lambda q: jnp.quantile(y[0, 0], q))(0.33),
                               rtol=1e-13)
    gm = ad.jit(ad.grad(lambda y: anp.median(y)))(y)
    np.testing.assert_allclose(gm, np.asarray(jax.grad(lambda y: jnp.median(y))(y)))


# --------------------------------------------------------------------------- errors

def _raises(exc, match, f, *args):
    with pytest.raises(exc, match=match):
        ad.jit(f)(*args)


def test_bad_arguments_are_clear_errors():
    x = np.ones((2, 3))
    _raises(np.exceptions.AxisError, r"sort: axis 2 is out of bounds .*at .*test_sorting",
            lambda x: anp.sort(x, axis=2), x)
    _raises(np.exceptions.AxisError, "argsort: axis", lambda x: anp.argsort(x[0, 0]), x)
    _raises(TypeError, "'kind' argument to sort", lambda x: anp.sort(x, kind="quicksort"), x)
    _raises(ValueError, "method must be one of", lambda x: anp.quantile(x, 0.5, method="x"), x)
    _raises(ValueError, r"range \[0, 1\]", lambda x: anp.quantile(x, 1.5), x)
    _raises(ValueError, r"range \[0, 100\]", lambda x: anp.percentile(x, -5.0), x)
    _raises(ValueError, "rank <= 1", lambda x: anp.quantile(x, np.ones((2, 2)) / 2), x)
    _raises(ValueError, "empty axis", lambda x: anp.median(x[:, :0], axis=1), x)
    _raises(ValueError, "a must be 1-D", lambda x: anp.searchsorted(x, 1.0), x)
    _raises(ValueError, "side must be", lambda x: anp.searchsorted(x[0], 1.0, side="mid"), x)
    _raises(ValueError, r"top_k: k=4 must be within \[0, 3\]", lambda x: lax.top_k(x, 4), x)
    _raises(TypeError, "k must be a static int", lambda x: lax.top_k(x, x[0, 0]), x)
    _raises(ValueError, "dimension 2 is out of bounds", lambda x: lax.cumsum(x, axis=2), x)
    _raises(TypeError, "floating point", lambda x: lax.cumlogsumexp(x.astype(np.int32)), x)
    _raises(ValueError, r"num_keys=3 must be in \[1, 2\]",
            lambda x: lax.sort((x, x), num_keys=3), x)
    _raises(ValueError, "operands must have one shape",
            lambda x: lax.sort((x, x[0])), x)


# --------------------------------------------------------------------------- GPU path

def test_gpu_pipeline_compiles_and_its_parallel_stage_matches_numpy():
    """The sort (its loop and generics), the scans, searchsorted's gathers and their
    gradients go through --autodiff-lower-to-gpu; the pre-mapping program runs on the
    CPU here (no device) and matches numpy."""
    import shutil

    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
    from mlir_autodiff.transforms.pipeline import run_pipeline

    def f(x, a):
        s = anp.sort(x, axis=1)
        g = ad.grad(lambda x: anp.sum(anp.sort(x) * anp.cumprod(x, axis=1)))(x)
        return s, g, anp.searchsorted(a, x), lax.cummax(x, axis=1)

    rng = np.random.default_rng(14)
    x = rng.standard_normal((3, 6))
    a = np.sort(rng.standard_normal(5))
    text = ad.lower(f, x, a).as_text("autodiff")
    want = ad.jit(f)(x, a)
    entry = re.search(r"func\.func @(\w+)\(", text).group(1)
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())[entry](x, a)
    np.testing.assert_array_equal(got[0], np.sort(x, axis=1))
    np.testing.assert_array_equal(got[2], np.searchsorted(a, x))
    np.testing.assert_array_equal(got[3], np.maximum.accumulate(x, axis=1))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas not on PATH: the fatbin step is not checked")
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_90", format="fatbin")])
        assert "gpu.binary" in str(module)
