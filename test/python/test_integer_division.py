"""Integer division never traps: jax's defined results at zero divisors and INT_MIN / -1.

x86's `idiv` raises SIGFPE for a zero divisor and for INT_MIN / -1, which
killed the process (exit -8, nothing printed). The expected values come from
the rules written out here in Python integers (and from jax where installed):
truncating quotient by zero -1, INT_MIN / -1 = INT_MIN, truncating remainder
by zero = the dividend; floor_divide corrects the truncated quotient when the
signs differ and that remainder is not 0; remainder and fmod by zero are 0.
"""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

INT_DTYPES = (np.int8, np.int16, np.int32, np.int64)


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def _wrap(v: int, dt) -> int:
    bits = np.iinfo(dt).bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _trunc_div(a: int, b: int, dt) -> int:
    if b == 0:
        return -1
    q = abs(a) // abs(b) * _sign(a) * _sign(b)
    return _wrap(q, dt)  # INT_MIN / -1 wraps to INT_MIN


def _trunc_rem(a: int, b: int) -> int:
    if b == 0:
        return a
    return a - b * int(abs(a) // abs(b) * _sign(a) * _sign(b))


def floor_divide_ref(a: int, b: int, dt) -> int:
    q = _trunc_div(a, b, dt)
    if _sign(a) != _sign(b) and _trunc_rem(a, b) != 0:
        q -= 1
    return _wrap(q, dt)


def remainder_ref(a: int, b: int, dt) -> int:
    return 0 if b == 0 else _wrap(a - b * (a // b), dt)  # Python's floor modulo


def fmod_ref(a: int, b: int, dt) -> int:
    return 0 if b == 0 else _wrap(_trunc_rem(a, b), dt)


REFS = {"floor_divide": floor_divide_ref, "remainder": remainder_ref, "fmod": fmod_ref}


def _grid(dt):
    info = np.iinfo(dt)
    vals = [0, 1, -1, 2, -2, 3, 7, -7, info.min, info.max, info.min + 1, info.max - 1]
    pairs = list(itertools.product(vals, vals))
    return (np.array([a for a, _ in pairs], dt), np.array([b for _, b in pairs], dt))


@pytest.mark.parametrize("dt", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(REFS))
def test_edges_under_jit(name, dt):
    x, y = _grid(dt)
    got = ad.jit(getattr(anp, name))(x, y)
    want = np.array([REFS[name](int(a), int(b), dt) for a, b in zip(x, y)], dt)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_operators_eager_and_in_loops(dt):
    x, y = _grid(dt)

    def f(a, b):
        return a // b, a % b

    q, r = ad.jit(f)(x, y)
    np.testing.assert_array_equal(q, [floor_divide_ref(int(a), int(b), dt) for a, b in zip(x, y)])
    np.testing.assert_array_equal(r, [remainder_ref(int(a), int(b), dt) for a, b in zip(x, y)])
    # outside any trace the functions are numpy's (0 and a warning at a zero divisor):
    # no trap there either
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(anp.floor_divide(x, y), np.floor_divide(x, y))
        np.testing.assert_array_equal(anp.remainder(x, y), np.remainder(x, y))
    # batched: vmap over rows of divisors, zero among them
    vq = ad.vmap(lambda b: x // b)(np.stack([y, np.zeros_like(y)]))
    np.testing.assert_array_equal(vq[0], q)


def test_agrees_with_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    for dt in INT_DTYPES:
        x, y = _grid(dt)
        for name in REFS:
            np.testing.assert_array_equal(ad.jit(getattr(anp, name))(x, y),
                                          np.asarray(getattr(jnp, name)(x, y)), err_msg=name)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_compiles_for_the_gpu(tmp_path):
    x, y = _grid(np.int32)

    def f(a, b):
        return anp.floor_divide(a, b), anp.remainder(a, b), anp.fmod(a, b)

    ad.export(f, x, y, path=tmp_path / "div", device="gpu")
    assert (tmp_path / "div" / "artifact.so").exists()
