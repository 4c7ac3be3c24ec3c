"""jax.random's keyed distributions: PRNGKey, exponential, gumbel, laplace, categorical,
choice, permutation, shuffle, truncated_normal, multivariate_normal.

Oracles, independent of the code under test: scipy.stats (KS tests and
chi-square tests at fixed seeds; each test also shows its power by rejecting
a slightly wrong distribution with the same samples), moments at 5 standard
errors, the analytic inverse-CDF derivatives of a reparameterized sample
(the uniform recovered from the sample with scipy), numpy's Cholesky, central
finite differences in f64, and the transpose identity. Samples are
drawn in one `jit` per test so compilation is shared.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import special, stats

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp
from mlir_autodiff.errors import UnsupportedError

R = ad.random
N = 40_000
ALPHA = 1e-3  # KS / chi-square acceptance level (deterministic: fixed keys)

COV = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
MEAN = np.array([1.0, -2.0, 0.5])
LOGITS = np.log(np.array([0.1, 0.2, 0.3, 0.4]))


@pytest.fixture(scope="module")
def samples() -> dict[str, np.ndarray]:
    @ad.jit
    def draw(k):
        ks = R.split(k, 9)
        return {
            "exponential": R.exponential(ks[0], (N,), np.float64),
            "gumbel": R.gumbel(ks[1], (N,), np.float64),
            "laplace": R.laplace(ks[2], (N,), np.float32),
            "truncnorm": R.truncated_normal(ks[3], -0.5, 1.5, (N,), np.float64),
            "truncnorm_tail": R.truncated_normal(ks[4], 1.0, np.inf, (N,), np.float32),
            "truncnorm_traced": R.truncated_normal(ks[5], anp.asarray(-2.0), anp.asarray(-1.0),
                                                   (N,)),
            "mvn": R.multivariate_normal(ks[6], MEAN, COV, (N // 4,)),
            "categorical": R.categorical(ks[7], np.stack([LOGITS, LOGITS[::-1]]), shape=(N // 8, 2)),
            "categorical_axis0": R.categorical(ks[8], LOGITS[:, None], axis=0, shape=(N // 8, 1)),
        }
    return draw(R.PRNGKey(20))


KS_CASES = {
    "exponential": (stats.expon(), stats.expon(scale=1.04)),
    "gumbel": (stats.gumbel_r(), stats.gumbel_r(loc=0.04)),
    "laplace": (stats.laplace(), stats.laplace(scale=1.08)),
    "truncnorm": (stats.truncnorm(-0.5, 1.5), stats.truncnorm(-0.45, 1.5)),
    "truncnorm_tail": (stats.truncnorm(1.0, np.inf), stats.truncnorm(1.03, np.inf)),
    "truncnorm_traced": (stats.truncnorm(-2.0, -1.0), stats.truncnorm(-2.0, -0.97)),
}


@pytest.mark.parametrize("name", sorted(KS_CASES))
def test_ks_against_scipy(samples, name):
    right, wrong = KS_CASES[name]
    x = np.asarray(samples[name])
    assert x.shape == (N,)
    assert stats.kstest(x, right.cdf).pvalue > ALPHA
    assert stats.kstest(x, wrong.cdf).pvalue < ALPHA  # the test can fail
    if name.startswith("truncnorm"):
        lo, hi = right.support()
        assert np.all((x > lo) & (x < hi))
    assert np.all(np.isfinite(x))


def test_multivariate_normal_moments(samples):
    x = np.asarray(samples["mvn"])
    n = x.shape[0]
    assert x.shape == (N // 4, 3) and x.dtype == np.float64
    se = np.sqrt(np.diag(COV) / n)
    assert np.all(np.abs(x.mean(0) - MEAN) < 5 * se)
    cov = np.cov(x.T)
    se_cov = np.sqrt((COV ** 2 + np.outer(np.diag(COV), np.diag(COV))) / n)
    assert np.all(np.abs(cov - COV) < 5 * se_cov)
    # whitened projections are standard normal; a 3% scale error is rejected
    for w in (np.array([1.0, 0.0, 0.0]), np.array([0.3, -1.0, 2.0])):
        proj = (x - MEAN) @ w / math.sqrt(w @ COV @ w)
        assert stats.kstest(proj, stats.norm().cdf).pvalue > ALPHA
        assert stats.kstest(proj, stats.norm(scale=1.15).cdf).pvalue < ALPHA


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    return stats.chisquare(counts, counts.sum() * probs).pvalue


def test_categorical_frequencies(samples):
    p = np.exp(LOGITS)
    c = np.asarray(samples["categorical"])
    assert c.shape == (N // 8, 2) and c.dtype == np.int64
    for col, probs in ((0, p), (1, p[::-1])):
        counts = np.bincount(c[:, col], minlength=4)
        assert _chi2(counts, probs) > ALPHA
        assert _chi2(counts, np.array([0.13, 0.2, 0.3, 0.37])) < ALPHA
    counts = np.bincount(np.asarray(samples["categorical_axis0"]).ravel(), minlength=4)
    assert _chi2(counts, p) > ALPHA


def test_choice_permutation_frequencies():
    p = np.array([0.5, 0.0, 0.2, 0.3])

    @ad.jit
    def draw(keys):
        one = ad.vmap(lambda k: (R.permutation(k, 3), R.choice(k, 4, (2,), replace=False, p=p),
                                 R.choice(k, np.arange(10, 15), (2,), replace=False)))(keys)
        k0 = keys[0]
        return one, R.choice(k0, 5, (N // 4,)), R.choice(k0, 4, (N // 4,), p=p)

    (perms, pnr, unr), uni, wp = draw(R.split(R.key(3), 6000))
    # permutations of 3 are uniform over the 6 orders
    codes = np.array([list(itertools.permutations(range(3))).index(tuple(q)) for q in perms])
    assert _chi2(np.bincount(codes, minlength=6), np.full(6, 1 / 6)) > ALPHA
    assert _chi2(np.bincount(codes, minlength=6), np.array([.2, .15, .15, .15, .15, .2])) \
        < ALPHA
    # without replacement: distinct; first pick ~ p; a zero-probability entry never first
    assert np.all(pnr[:, 0] != pnr[:, 1]) and np.all(unr[:, 0] != unr[:, 1])
    assert set(np.unique(unr)) == set(range(10, 15))
    nz = p > 0
    assert _chi2(np.bincount(pnr[:, 0], minlength=4)[nz], p[nz]) > ALPHA
    # second pick given the first (x): p / (1 - p[x])
    second = np.bincount(pnr[:, 1], minlength=4)
    want2 = sum(p[x] * np.where(np.arange(4) == x, 0.0, p / (1 - p[x])) for x in range(4))
    assert _chi2(second[nz], want2[nz]) > ALPHA
    assert _chi2(np.bincount(uni, minlength=5), np.full(5, 0.2)) > ALPHA
    counts = np.bincount(wp, minlength=4)
    assert counts[1] == 0 and _chi2(counts[nz], p[nz]) > ALPHA
    assert _chi2(counts[nz], np.array([0.45, 0.22, 0.33])) < ALPHA


def test_reproducible_and_split_keys_independent():
    draws = {
        "exponential": lambda k: R.exponential(k, (2000,)),
        "gumbel": lambda k: R.gumbel(k, (2000,)),
        "laplace": lambda k: R.laplace(k, (2000,)),
        "truncated_normal": lambda k: R.truncated_normal(k, -1.0, 1.0, (2000,)),
        "mvn": lambda k: R.multivariate_normal(k, MEAN, COV, (700,))[:, 0],
        "categorical": lambda k: R.categorical(k, np.zeros(50), shape=(2000,)),
        "permutation": lambda k: R.permutation(k, 2000),
        "choice": lambda k: R.choice(k, 2000, (2000,)),
    }

    @ad.jit
    def both(k):
        a, b = R.split(k)
        return ({n: f(k) for n, f in draws.items()}, ad.vmap(lambda kk: {n: f(kk) for n, f in
                                                                         draws.items()})(
            anp.stack([a, b, k])))

    k = R.PRNGKey(7)
    first, lanes = both(k)
    again, _ = both(k)
    other, _ = both(R.PRNGKey(8))
    for name in draws:
        x, y = np.asarray(lanes[name][0], np.float64), np.asarray(lanes[name][1], np.float64)
        np.testing.assert_array_equal(first[name], again[name])  # per key: bit for bit
        # a vmap lane equals the draw alone (floats: the batched code may round a
        # multiply-add differently, within an ulp)
        np.testing.assert_allclose(first[name], lanes[name][2], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
        assert not np.array_equal(first[name], other[name])
        # split children: uncorrelated (|r| < 5 / sqrt(n))
        assert abs(np.corrcoef(x, y)[0, 1]) < 5 / math.sqrt(x.size), name
        assert abs(np.corrcoef(x, first[name].astype(np.float64))[0, 1]) < 5 / math.sqrt(x.size)
    # eager equals jit
    np.testing.assert_array_equal(R.gumbel(k, (2000,)), first["gumbel"])
    np.testing.assert_array_equal(R.permutation(k, 2000), first["permutation"])
    assert sorted(first["permutation"]) == list(range(2000))


SHAPES = [(), (0,), (2, 0, 3), (1,), (3, 4, 2), (256, 130)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_draw_shape_compiles(shape):
    @ad.jit
    def draw(k):
        ks = R.split(k, 8)
        return (R.exponential(ks[0], shape), R.gumbel(ks[1], shape, np.float64),
                R.laplace(ks[2], shape), R.truncated_normal(ks[3], -1.0, 2.0, shape),
                R.multivariate_normal(ks[4], np.zeros(2), np.eye(2), shape),
                R.categorical(ks[5], np.zeros(3), shape=shape),
                R.choice(ks[6], 5, shape), R.permutation(ks[7], math.prod(shape)))

    out = draw(R.PRNGKey(1))
    want = [shape, shape, shape, shape, shape + (2,), shape, shape, (math.prod(shape),)]
    assert [np.shape(o) for o in out] == want
    assert [np.asarray(o).dtype for o in out] == [np.float32, np.float64, np.float32,
                                                   np.float32, np.float64, np.int64,
                                                   np.int64, np.int64]
    for o in out[:5]:
        assert np.all(np.isfinite(o))
    assert np.all((out[3] > -1.0) & (out[3] < 2.0))
    assert np.all((out[5] >= 0) & (out[5] < 3)) and np.all((out[6] >= 0) & (out[6] < 5))
    assert sorted(out[7]) == list(range(math.prod(shape)))


def test_permutation_of_arrays_and_shuffle():
    x = np.arange(24.0).reshape(4, 6)
    k = R.PRNGKey(5)
    rows = R.permutation(k, x)  # eager
    cols = ad.jit(lambda k: R.permutation(k, x, axis=1))(k)
    ind = R.permutation(k, x, axis=1, independent=True)
    np.testing.assert_array_equal(np.sort(rows, axis=0), x)
    assert sorted(map(tuple, rows)) == sorted(map(tuple, x))  # whole rows move
    assert np.all(np.diff(cols, axis=0) == 6)  # whole columns move
    assert not np.array_equal(cols, x)
    np.testing.assert_array_equal(np.sort(ind, axis=1), x)
    assert len({tuple(np.argsort(r)) for r in ind}) > 1  # rows shuffled independently
    with pytest.warns(FutureWarning, match="permutation"):
        sh = R.shuffle(k, x, axis=1)
    np.testing.assert_array_equal(sh, ind)


def test_choice_of_arrays_and_categorical_without_replacement():
    a = np.arange(12.0).reshape(3, 4)
    k = R.PRNGKey(2)
    out = R.choice(k, a, (2, 2), replace=False, axis=1)
    assert out.shape == (3, 2, 2)
    picked = out[0].ravel().astype(int)
    assert len(set(picked)) == 4 and np.array_equal(out, a[:, picked].reshape(3, 2, 2))
    nr = R.categorical(k, np.zeros((2, 5)), shape=(5, 2), replace=False)
    for col in nr.T:
        assert sorted(col) == list(range(5))


def test_erfinv_accuracy_and_derivative():
    y = np.concatenate([np.linspace(-0.999999, 0.999999, 401), [0.0, 1e-300, -1e-8, 1.0, -1.0,
                                                              1.5]])

    @ad.jit
    def f(y):
        g = ad.grad(lambda v: anp.sum(R._erfinv(v)))(y[:401])
        return R._erfinv(y), R._erfinv(y.astype(np.float32)), g

    x, x32, g = f(y)
    with np.errstate(invalid="ignore"):
        want = special.erfinv(y)
    # erf's last-bit error 2**-53, magnified by the conditioning d erfinv / dy
    bound = 2.0 ** -52 * np.sqrt(np.pi) / 2 * np.exp(want[:-3] ** 2) + 1e-14 * np.abs(want[:-3])
    assert np.all(np.abs(x[:-3] - want[:-3]) <= bound)
    y32 = y[:-3].astype(np.float32)
    np.testing.assert_allclose(x32[:-3], special.erfinv(y32.astype(np.float64)), rtol=2e-7)
    assert x[-3] == np.inf and x[-2] == -np.inf and np.isnan(x[-1])
    dg = np.sqrt(np.pi) / 2 * np.exp(want[:401] ** 2)  # the value's error moves exp(x**2)
    assert np.all(np.abs(g - dg) <= dg * (1e-12 + 2 * np.abs(want[:401]) * bound[:401]))


def test_truncated_normal_reparameterized_gradient():
    """d sample / d (lower, upper) with the key fixed, against the inverse-CDF formula
    x = Phi^-1(Phi(l) + U (Phi(u) - Phi(l))) with U recovered from the sample, and
    central differences of the sampler itself."""
    k = R.PRNGKey(11)
    lo, hi = np.float64(-0.7), np.float64(1.3)
    c = np.linspace(0.5, 1.5, 8)

    @ad.jit
    def f(lo, hi):
        def loss(lo, hi):
            return anp.sum(c * R.truncated_normal(k, lo, hi, (8,), np.float64))
        return R.truncated_normal(k, lo, hi, (8,), np.float64), ad.grad(loss, (0, 1))(lo, hi)

    x, (gl, gh) = f(lo, hi)
    n = stats.norm()
    u = (n.cdf(x) - n.cdf(lo)) / (n.cdf(hi) - n.cdf(lo))
    np.testing.assert_allclose(gl, np.sum(c * n.pdf(lo) * (1 - u) / n.pdf(x)), rtol=1e-9)
    np.testing.assert_allclose(gh, np.sum(c * n.pdf(hi) * u / n.pdf(x)), rtol=1e-9)
    eps = 1e-6
    fd_l = (np.sum(c * f(lo + eps, hi)[0]) - np.sum(c * f(lo - eps, hi)[0])) / (2 * eps)
    np.testing.assert_allclose(gl, fd_l, rtol=1e-6)


def test_multivariate_normal_reparameterized_gradient():
    """d sample / d (mean, cov) with the key fixed, against numpy: z recovered with
    numpy's Cholesky, the sample rebuilt as mean + chol(sym(cov)) z, central
    differences of that; jvp/vjp transpose identity; vmap over keys of the grad."""
    k = R.PRNGKey(4)
    c = np.array([[0.3, -1.2, 0.8], [1.1, 0.4, -0.5]])

    def loss(m, s):
        return anp.sum(c * R.multivariate_normal(k, m, s, (2,)))

    @ad.jit
    def f(m, s, ts):
        x = R.multivariate_normal(k, m, s, (2,))
        gm, gs = ad.grad(loss, (0, 1))(m, s)
        _, tan = ad.jvp(lambda s: loss(m, s), (s,), (ts,))
        per_key = ad.vmap(lambda kk: ad.grad(
            lambda s: anp.sum(R.multivariate_normal(kk, m, s)))(s))(R.split(k, 3))
        return x, gm, gs, tan, per_key

    ts = np.array([[0.1, 0.2, -0.1], [0.0, 0.3, 0.05], [0.2, -0.4, 0.1]])
    x, gm, gs, tan, per_key = f(MEAN, COV, ts)
    z = np.linalg.solve(np.linalg.cholesky(COV), (x - MEAN).T).T

    def ref(s):
        return np.sum(c * (MEAN + z @ np.linalg.cholesky((s + s.T) / 2).T))

    eps = 1e-6
    fd = np.zeros((3, 3))
    for i, j in np.ndindex(3, 3):
        e = np.zeros((3, 3))
        e[i, j] = eps
        fd[i, j] = (ref(COV + e) - ref(COV - e)) / (2 * eps)
    np.testing.assert_allclose(gm, c.sum(0), rtol=1e-12)
    np.testing.assert_allclose(gs, fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gs, gs.T, rtol=1e-12)  # symmetrized input, as jax
    np.testing.assert_allclose(tan, np.sum(gs * ts), rtol=1e-12)  # <ct, jvp> = <vjp, t>
    assert per_key.shape == (3, 3, 3) and not np.allclose(per_key[0], per_key[1])


def test_errors():
    k = R.PRNGKey(0)
    with pytest.raises(ValueError, match="larger sample"):
        R.choice(k, 3, (4,), replace=False)
    with pytest.raises(ValueError, match="p must have shape"):
        R.choice(k, 3, (2,), p=np.ones(4) / 4)
    with pytest.raises(ValueError, match="out of range"):
        R.categorical(k, np.zeros(3), axis=1)
    with pytest.raises(ValueError, match="broadcast-compatible"):
        R.categorical(k, np.zeros((2, 3)), shape=(3,))
    with pytest.raises(ValueError, match="lower < upper"):
        R.truncated_normal(k, 1.0, 1.0)
    with pytest.raises(UnsupportedError, match="eigh"):
        R.multivariate_normal(k, np.zeros(2), np.eye(2), method="eigh")
    with pytest.raises(ValueError, match=r"\(\.\.\., n, n\)"):
        R.multivariate_normal(k, np.zeros(2), np.eye(3))
    with pytest.raises(TypeError, match="key must be an int64 array"):
        R.exponential(np.zeros(2, np.float32), (2,))
    with pytest.raises(TypeError, match="at least one"):
        R.permutation(k, np.float64(2.0))
    assert np.array_equal(R.PRNGKey(3), R.key(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.permutation(k, 3)


def test_keys_captured_by_a_differentiated_closure():
    """A key that a grad'ed (or vmapped) closure captures from the enclosing trace: the
    draw's key becomes an argument of the inner function (this failed to compile with
    "use of undeclared SSA value name")."""
    s = np.linspace(1.0, 2.0, 3)

    @ad.jit
    def f(s, k):
        g = ad.grad(lambda s: anp.sum(s * R.uniform(k, (3,), np.float64)))(s)
        g2 = ad.grad(lambda s: anp.sum(s * R.normal(R.fold_in(R.split(k)[1], 3), (3,),
                                                       np.float64)))(s)
        per_key = ad.vmap(lambda q: ad.grad(lambda s: anp.sum(s * s * R.laplace(q, (3,),
                                                                                np.float64)))(s))(
            R.split(k, 2))
        tn = ad.grad(lambda lo: anp.sum(R.truncated_normal(k, lo, 2.0, (3,), np.float64)))(
            anp.asarray(-1.0))
        return g, g2, per_key, tn

    k = R.PRNGKey(9)
    g, g2, per_key, tn = f(s, k)
    np.testing.assert_array_equal(g, R.uniform(k, (3,), np.float64))
    np.testing.assert_array_equal(g2, R.normal(R.fold_in(R.split(k)[1], 3), (3,), np.float64))
    for i, q in enumerate(R.split(k, 2)):
        np.testing.assert_allclose(per_key[i], 2 * s * R.laplace(q, (3,), np.float64),
                                   rtol=1e-15)
    x = R.truncated_normal(k, -1.0, 2.0, (3,), np.float64)
    n = stats.norm()
    u = (n.cdf(x) - n.cdf(-1.0)) / (n.cdf(2.0) - n.cdf(-1.0))
    np.testing.assert_allclose(tn, np.sum(n.pdf(-1.0) * (1 - u) / n.pdf(x)), rtol=1e-9)
