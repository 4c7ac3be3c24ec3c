"""Every draw kind compiles and is right for every shape: a generated sweep.

Each case is one shape (rank 0 to 4, odd, unit and power-of-two dims, from
scalars to the 512 x 32 and 4 x 4 x 16 x 32 draws whose vectorized Philox
code did not compile) and one float type. One `jit` per case draws every
kind, key-based and stateful: uniform, normal, bernoulli, randint, dropout.

Oracles, independent of the code under test: the pure-numpy Philox
reference of test_rng.py on the documented stream layout (key-based draws
read the key's stream; stateful draws after `manual_seed(s)` read the
stream of `key(s)` at the generator's offset, advanced by each draw's
blocks in program order), ranges, and moments at 5 standard errors. The
API promises that a draw depends only on the seed, the offset and its
shape: the un-jitted (eager) draws give the same bits as the jitted ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_rng import ref_blocks, ref_draw

import mlir_autodiff as ad

SEED = 0x5EED
SHAPES = [
    (), (1,), (7,), (16,), (16384,),
    (1, 17), (3, 5), (32, 10), (512, 32),
    (3, 1, 7), (2, 8, 33),
    (1, 1, 1, 8), (2, 3, 5, 7), (4, 4, 16, 32),
]
DTYPES = [np.float32, np.float64]
P = 0.3  # bernoulli's p
DROP = 0.25  # dropout's p
LO, HI = -2.0, 3.0  # uniform's range
ILO, IHI = -3, 7  # randint's range

KINDS = ("uniform", "normal", "bernoulli", "randint")


@pytest.fixture(autouse=True)
def _restore_generator():
    state = ad.random.get_state()
    yield
    ad.random.set_state(state)


def _int_dtype(dt: type) -> type:
    return np.int32 if dt == np.float32 else np.int64


def draw_all(k, x, shape: tuple[int, ...], dt: type) -> dict[str, object]:
    """Every kind of draw, key-based then stateful (in this order: it sets the offsets)."""
    it = _int_dtype(dt)
    return {
        "key uniform": ad.random.uniform(k, shape, dt, minval=LO, maxval=HI),
        "key normal": ad.random.normal(k, shape, dt),
        "key bernoulli": ad.random.bernoulli(k, P, shape),
        "key randint": ad.random.randint(k, shape, ILO, IHI, dtype=it),
        "uniform": ad.random.uniform(shape, dt),
        "normal": ad.random.normal(shape, dt),
        "bernoulli": ad.random.bernoulli(P, shape),
        "randint": ad.random.randint(ILO, IHI, shape, dtype=it),
        "dropout": ad.random.dropout(x, DROP),
    }


def expected(shape: tuple[int, ...], dt: type) -> dict[str, np.ndarray]:
    """The reference values of `draw_all` with key(SEED) after manual_seed(SEED)."""
    t = np.dtype(dt).type
    out = {
        "key uniform": ref_draw(SEED, 0, shape, dt, "uniform", low=LO, high=HI),
        "key normal": ref_draw(SEED, 0, shape, dt, "normal"),
        "key bernoulli": ref_draw(SEED, 0, shape, np.float32, "uniform") < P,
        "key randint": ILO + np.mod(ref_draw(SEED, 0, shape, np.int64, "bits"), IHI - ILO),
    }
    offset = 0
    for name, dist, dtype in (("uniform", "uniform", dt), ("normal", "normal", dt),
                              ("bernoulli", "uniform", np.float32),
                              ("randint", "bits", np.int64), ("dropout", "uniform", dt)):
        v = ref_draw(SEED, offset, shape, dtype, dist)
        if name == "bernoulli":
            v = v < P
        elif name == "randint":
            v = ILO + np.mod(v, IHI - ILO)
        elif name == "dropout":
            v = np.where(v >= DROP, t(1.0) * t(1.0 / (1.0 - DROP)), t(0.0))
        out[name] = v
        offset += ref_blocks(shape, dtype, dist)
    return out


def _check_moments(name: str, v: np.ndarray) -> None:
    """Ranges always; means and variances at 5 standard errors once there are enough."""
    v = np.asarray(v, np.float64).ravel()
    n = v.size
    law = name.split()[-1]
    if law == "uniform":
        lo, hi = (LO, HI) if name.startswith("key") else (0.0, 1.0)
        assert np.all((v >= lo) & (v < hi)), name
        mean, var = (lo + hi) / 2, (hi - lo) ** 2 / 12
    elif law == "normal":
        assert np.all(np.isfinite(v)), name
        mean, var = 0.0, 1.0
    elif law == "bernoulli":
        assert set(np.unique(v)) <= {0.0, 1.0}, name
        mean, var = P, P * (1 - P)
    elif law == "randint":
        assert np.all((v >= ILO) & (v < IHI)) and np.all(v == np.round(v)), name
        m = IHI - ILO
        mean, var = (ILO + IHI - 1) / 2, (m * m - 1) / 12
    else:  # dropout of ones: 0 or 1 / (1 - p)
        scale = 1 / (1 - DROP)
        assert np.all(np.isclose(v, 0) | np.isclose(v, scale)), name
        mean, var = 1.0, scale * scale * (1 - DROP) - 1
    if n >= 1000:
        assert abs(v.mean() - mean) < 5 * math.sqrt(var / n), (name, v.mean(), mean)
        assert abs(v.var() - var) < 0.1 * var, (name, v.var(), var)


def _compare(name: str, got: object, want: np.ndarray, dt: type) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if "normal" in name:
        # Computed in `dt` from the same uniforms; the reference in float64.
        tol = 1e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=name)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_draw_kind_compiles_and_is_right(shape, dt):
    k = ad.random.key(SEED)
    x = np.ones(shape, dt)
    ad.random.manual_seed(SEED)
    got = ad.jit(lambda k, x: draw_all(k, x, shape, dt))(k, x)
    want = expected(shape, dt)
    assert set(got) == set(want)
    for name in got:
        value = np.asarray(got[name])
        if "randint" in name:
            assert value.dtype == _int_dtype(dt), name
        elif "bernoulli" in name:
            assert value.dtype == np.bool_, name
        else:
            assert value.dtype == dt, name
        _compare(name, value, want[name], dt)
        _check_moments(name, value)


#: The eager (un-jitted) draws compile one module per kind: a few shapes,
#: among them those whose vectorized code did not compile.
EAGER_SHAPES = [(), (7,), (3, 5), (512, 32), (4, 4, 16, 32)]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", EAGER_SHAPES, ids=str)
def test_eager_draws_equal_the_jitted_ones_bit_for_bit(shape, dt):
    k = ad.random.key(SEED)
    x = np.ones(shape, dt)
    ad.random.manual_seed(SEED)
    eager = draw_all(k, x, shape, dt)
    ad.random.manual_seed(SEED)
    jitted = ad.jit(lambda k, x: draw_all(k, x, shape, dt))(k, x)
    for name in eager:
        a, b = np.asarray(eager[name]), np.asarray(jitted[name])
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), name
