"""nn's initializers and the accuracy of `mlir_autodiff.scipy.special` / `scipy.stats`.

The differential table (differential_cases.py, section nnscipy) checks every
transform of every function on a few points; these tests check what the table
cannot: the stated accuracy on dense grids and in the tails against scipy,
derivatives beyond the Hessian, the initializers' distributions, and the error
messages.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as ss
import scipy.stats as st

import mlir_autodiff as ad
from mlir_autodiff import nn, random
from mlir_autodiff import numpy as anp
from mlir_autodiff.scipy import special, stats


def _rel(actual, expected, floor=1.0):
    """Largest |actual - expected| / max(floor, |expected|); equal values (infinities
    too) count 0, a NaN on one side only counts inf."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    with np.errstate(all="ignore"):
        err = np.abs(actual - expected) / np.maximum(floor, np.abs(expected))
    return float(np.max(np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))))


# --------------------------------------------------------------------------- special: accuracy

X_GAMMA = np.concatenate([np.linspace(0.01, 30.0, 301), [1e-6, 1.0, 2.0, 1.4616321449683622,
                                                          150.25, 1e5 + 0.5],
                          -np.linspace(0.05, 7.95, 80) - 0.013])
U_ERF = np.concatenate([np.linspace(-0.999, 0.999, 201), [1e-12, -3e-300, 0.5, 0.50000001,
                                                          1 - 1e-9, -(1 - 2 ** -52)]])
Q_NORM = np.concatenate([np.geomspace(1e-300, 0.49, 60), [0.5], 1 - np.geomspace(1e-15, 0.49, 30)])
Z_NORM = np.concatenate([np.linspace(-60.0, 10.0, 281), [-10.0, -9.999, -10.001, 9.5]])


@pytest.fixture(scope="module")
def special_values():
    """Every special function on its grid, float64 and float32, from one compilation."""
    @ad.jit
    def f(x, u, q, z, x32, u32):
        return dict(gammaln=special.gammaln(x), digamma=special.digamma(x),
                    erfinv=special.erfinv(u), erf=special.erf(z / 8), erfc=special.erfc(z / 8),
                    ppf=stats.norm.ppf(q), logcdf=stats.norm.logcdf(z), cdf=stats.norm.cdf(z),
                    gammaln32=special.gammaln(x32), digamma32=special.digamma(x32),
                    erfinv32=special.erfinv(u32))
    return f(X_GAMMA, U_ERF, Q_NORM, Z_NORM, X_GAMMA.astype(np.float32),
             U_ERF.astype(np.float32))


def test_gamma_family_accuracy(special_values):
    v = special_values
    g, d = ss.gammaln(X_GAMMA), ss.digamma(X_GAMMA)
    # relative 1e-14 away from the zeros, absolute 1e-14 near them (the docstring's claim)
    assert _rel(v["gammaln"], g) < 2e-14
    assert _rel(v["digamma"], d) < 2e-14
    far = (np.abs(g) > 2) & (X_GAMMA > 0)
    assert _rel(v["gammaln"][far], g[far], floor=0.0) < 4e-15
    far = (np.abs(d) > 0.5) & (X_GAMMA > 0)
    assert _rel(v["digamma"][far], d[far], floor=0.0) < 2e-15
    x32 = X_GAMMA.astype(np.float32).astype(np.float64)
    assert v["gammaln32"].dtype == np.float32
    assert _rel(v["gammaln32"], ss.gammaln(x32)) < 2e-5
    assert _rel(v["digamma32"], ss.digamma(x32)) < 2e-5


def test_erfinv_accuracy_tails_included(special_values):
    v = special_values
    assert _rel(v["erfinv"], ss.erfinv(U_ERF), floor=0.0) < 1e-14
    u32 = U_ERF.astype(np.float32)
    assert _rel(v["erfinv32"], ss.erfinv(u32.astype(np.float64)), floor=0.0) < 1e-5
    assert _rel(v["erf"], ss.erf(Z_NORM / 8), floor=0.0) < 1e-15
    assert _rel(v["erfc"], ss.erfc(Z_NORM / 8), floor=0.0) < 1e-14   # relative far in the tail
    ends = ad.jit(special.erfinv)(np.array([-1.0, 1.0, 1.5, -2.0, 0.0]))
    np.testing.assert_array_equal(ends[:2], [-np.inf, np.inf])
    assert np.isnan(ends[2:4]).all() and ends[4] == 0.0


def test_normal_quantile_and_log_cdf_tails(special_values):
    v = special_values
    assert _rel(v["ppf"], st.norm.ppf(Q_NORM), floor=0.0) < 1e-14
    # (the rounding of z / sqrt(2) alone moves erfc by 2 z^2 ulp: 3e-14 at z = 10)
    assert _rel(v["logcdf"], st.norm.logcdf(Z_NORM), floor=0.0) < 5e-14
    # cdf's condition number is z^2: relative errors of 2 z^2 ulp (3e-13 at z = -37)
    want = st.norm.cdf(Z_NORM)
    normal = want > 1e-300     # (subnormal results may flush to 0)
    err = np.abs(v["cdf"][normal] - want[normal]) / want[normal]
    assert (err <= 2.3e-16 * (2 + 2 * Z_NORM[normal] ** 2)).all()


def test_higher_derivatives_of_the_gamma_family():
    """gammaln' = digamma, gammaln'' = digamma' = trigamma, digamma'' = polygamma(2)."""
    x = np.array([0.3, 1.0, 2.5, 11.9, 12.1, 40.0, -0.6, -2.5])

    @ad.jit
    def f(x):
        d1 = ad.vmap(ad.grad(special.gammaln))(x)
        d2 = ad.vmap(ad.grad(ad.grad(special.gammaln)))(x)
        dd2 = ad.vmap(ad.grad(ad.grad(special.digamma)))(x)
        return d1, d2, dd2

    d1, d2, dd2 = f(x)
    assert _rel(d1, ss.digamma(x)) < 1e-14
    assert _rel(d2, ss.polygamma(1, x), floor=0.0) < 1e-13
    assert _rel(dd2, ss.polygamma(2, x), floor=0.0) < 1e-11


def test_erfinv_derivatives_closed_form():
    """erfinv' = sqrt(pi)/2 exp(erfinv^2) and its derivative, at 0 too (regression: the
    unused branch of the initial guess made the Hessian NaN at 0)."""
    u = np.array([0.0, 1e-5, -0.3, 0.7, 0.999, -0.999999])

    @ad.jit
    def f(u):
        return (ad.vmap(ad.grad(special.erfinv))(u),
                ad.vmap(ad.grad(ad.grad(special.erfinv)))(u))

    g, h = f(u)
    y = ss.erfinv(u)
    g_exact = np.sqrt(np.pi) / 2 * np.exp(y * y)
    assert _rel(g, g_exact, floor=0.0) < 1e-14
    assert _rel(h, 2 * y * g_exact ** 2, floor=1e-300) < 1e-12
    assert h[0] == 0.0


def test_xlogy_zero_and_eager():
    """0 log 0 = 0; d/dx at x = 0 is log(y) (jax's rule); eager calls give numpy arrays."""
    x, y = np.array([0.0, 0.0, 2.0]), np.array([0.0, 3.0, 0.5])
    out = ad.jit(special.xlogy)(x, y)
    np.testing.assert_allclose(out, [0.0, 0.0, 2 * np.log(0.5)], rtol=1e-15)
    gx = ad.jit(ad.grad(lambda x: anp.sum(special.xlogy(x, 3.0))))(np.zeros(2))
    np.testing.assert_allclose(gx, np.log(3.0), rtol=1e-15)
    eager = special.gammaln(np.array([0.5, 3.0]))
    assert isinstance(eager, np.ndarray)
    np.testing.assert_allclose(eager, ss.gammaln([0.5, 3.0]), rtol=1e-14)
    np.testing.assert_allclose(special.erfinv(np.array([0.25])), ss.erfinv([0.25]), rtol=1e-15)


# --------------------------------------------------------------------------- stats

def test_multivariate_normal_matches_scipy_for_n5_and_rejects_bad_cov():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((5, 5))
    cov = m @ m.T + 0.5 * np.eye(5)
    x, mean = rng.standard_normal((4, 5)), rng.standard_normal(5)
    out = ad.jit(stats.multivariate_normal.logpdf)(x, mean, cov)
    np.testing.assert_allclose(out, st.multivariate_normal.logpdf(x, mean, cov), rtol=1e-12)
    with pytest.raises(ValueError, match="cov must be one \\(n, n\\) matrix"):
        ad.jit(stats.multivariate_normal.logpdf)(x, mean, np.ones(5))
    with pytest.raises(ValueError, match="must end in the covariance's size 5"):
        ad.jit(stats.multivariate_normal.logpdf)(x[:, :3], mean, cov)


def test_categorical_and_bernoulli_support():
    p = np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])

    @ad.jit
    def f(k, p, kb):
        return (stats.categorical.logpmf(k, p), stats.categorical.pmf(k, p),
                stats.bernoulli.pmf(kb, 0.25))

    lp, pm, pb = f(np.array([2, 5]), p, np.array([0, 1, 2, -1]))
    np.testing.assert_allclose(lp, [np.log(0.3), -np.inf])
    np.testing.assert_allclose(pm, [0.3, 0.0])
    np.testing.assert_allclose(pb, st.bernoulli.pmf([0, 1, 2, -1], 0.25), rtol=1e-15)
    with pytest.raises(TypeError, match="labels must be integers"):
        ad.jit(stats.categorical.logpmf)(np.array([0.0, 1.0]), p)


# --------------------------------------------------------------------------- nn

def test_nn_errors_name_the_problem():
    with pytest.raises(ValueError, match="nn.glu: axis -1 has odd size 3"):
        ad.jit(nn.glu)(np.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="nn.standardize: the `where` mask"):
        nn.standardize(np.ones(3), where=np.ones(3, bool))
    q = np.ones((1, 2, 3, 2))
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2"):
        ad.jit(nn.dot_product_attention)(q, np.ones((1, 2, 2, 2)), np.ones((1, 2, 2, 2)))
    with pytest.raises(NotImplementedError, match="local_window_size is not supported"):
        nn.dot_product_attention(q, q, q, local_window_size=(1, 1))


def test_attention_unbatched_matches_batched():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((4, 2, 3)) for _ in range(3))

    @ad.jit
    def f(q, k, v):
        return (nn.dot_product_attention(q, k, v, is_causal=True),
                nn.dot_product_attention(q[None], k[None], v[None], is_causal=True)[0])

    a, b = f(q, k, v)
    np.testing.assert_allclose(a, b, rtol=1e-15)
    # causal: the first query sees only the first key
    np.testing.assert_allclose(a[0], v[0], rtol=1e-14)


def test_initializers_distributions_and_keys():
    import mlir_autodiff.nn.initializers as init_module
    init = nn.initializers
    assert init_module is init
    shape = (3, 3, 64, 96)          # a conv kernel: receptive field 9, fan_in 576, fan_out 864
    fan_in, fan_out = 9 * 64, 9 * 96
    k = random.key(7)

    @ad.jit
    def draw(k):
        return dict(glorot_u=init.glorot_uniform()(k, shape),
                    he_n=init.he_normal()(k, shape, np.float64),
                    lecun_n=init.lecun_normal(dtype=np.float64)(k, shape),
                    trunc=init.truncated_normal(0.5, lower=-1.0, upper=1.5)(k, (20000,)),
                    normal=init.normal(2.0)(k, (20000,), np.float64),
                    uniform=init.uniform(3.0)(k, (20000,)),
                    again=init.glorot_uniform()(k, shape),
                    other=init.glorot_uniform()(random.fold_in(k, 1), shape))

    d = draw(k)
    assert d["glorot_u"].shape == shape and d["glorot_u"].dtype == np.float32
    assert d["he_n"].dtype == np.float64
    np.testing.assert_array_equal(d["glorot_u"], d["again"])
    assert not np.array_equal(d["glorot_u"], d["other"])
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    assert np.abs(d["glorot_u"]).max() <= limit
    assert abs(d["glorot_u"].var() / (limit ** 2 / 3) - 1) < 0.03
    # truncated normals rescaled to the target variance, and bounded by 2 std of the
    # untruncated normal
    for name, var in (("he_n", 2.0 / fan_in), ("lecun_n", 1.0 / fan_in)):
        assert abs(d[name].var() / var - 1) < 0.03, name
        assert np.abs(d[name]).max() <= 2 * np.sqrt(var) / 0.87962566103423978 + 1e-12
    t = d["trunc"] / 0.5
    assert t.min() >= -1.0 and t.max() <= 1.5
    ref = st.truncnorm(-1.0, 1.5)
    assert abs(t.mean() - ref.mean()) < 0.02 and abs(t.var() / ref.var() - 1) < 0.05
    assert abs(d["normal"].std() / 2.0 - 1) < 0.03
    assert d["uniform"].min() >= 0 and d["uniform"].max() < 3.0
    assert abs(d["uniform"].mean() - 1.5) < 0.05
    # eager, constant initializers, errors
    np.testing.assert_array_equal(init.constant(0.5)(k, (2,)), [0.5, 0.5])
    assert np.asarray(init.he_uniform()(k, (4, 3))).shape == (4, 3)
    with pytest.raises(ValueError, match="invalid mode 'fan_sum'"):
        init.variance_scaling(1.0, "fan_sum", "normal")
