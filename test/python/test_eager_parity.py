"""Eager parity: what a traced value offers (`tracing.Tracer`'s methods and
properties, as numpy.py installs them) works on the arrays that
`mlir_autodiff.numpy` returns outside a trace and that `jit` returns, with the
same result as under `jit`; and those arrays still behave as numpy arrays.

The table of attributes is generated from the Tracer class: every public
method/property and dunder it defines must have a row in `ROWS` or a reason in
`NOT_UNDER_JIT` (the ones that are errors on traced values).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import tracing
from mlir_autodiff.eager import Array

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))                    # float operand
Y = RNG.uniform(0.5, 2.0, size=(3, 4))         # positive float operand
XI = RNG.integers(-5, 6, size=(3, 4))          # int operands
YI = RNG.integers(1, 6, size=(3, 4))
ARGS = (X, Y, XI, YI)

#: Tracer attributes that are errors on traced values (ConcretizationTypeError,
#: immutability, ...): no jit result to compare with.
NOT_UNDER_JIT = {
    "__bool__": "needs a concrete value", "__float__": "needs a concrete value",
    "__int__": "needs a concrete value", "__complex__": "needs a concrete value",
    "__index__": "needs a concrete value", "tolist": "needs a concrete value",
    "item": "needs a concrete value", "__array__": "needs a concrete value",
    "__setitem__": "traced arrays are immutable (eager ones are numpy's, mutable)",
    "__hash__": "unhashable in both (checked in test_numpy_behaviour_is_kept)",
    "__repr__": "a tracer prints its abstract value; eager arrays print as numpy",
    "__array_ufunc__": "numpy's protocol (numpy functions of eager arrays are numpy's)",
    "__array_function__": "numpy's protocol (numpy functions of eager arrays are numpy's)",
    "__init__": "constructor",
}

_BIT = {"and", "or", "xor", "rand", "ror", "rxor"}


def _binary_row(name: str):
    op = name.strip("_")
    if op in _BIT:
        return lambda x, y, xi, yi: getattr(xi, name)(yi)
    if op in ("matmul", "rmatmul"):
        return lambda x, y, xi, yi: getattr(x, name)(y.T)
    if op == "pow":  # positive bases
        return lambda x, y, xi, yi: y.__pow__(x)
    if op == "rpow":
        return lambda x, y, xi, yi: x.__rpow__(y)
    return lambda x, y, xi, yi: getattr(x, name)(y)


#: attribute -> f(x, y, xi, yi) using it (hand-written where arguments matter).
ROWS = {
    "shape": lambda x, y, xi, yi: x.shape,
    "ndim": lambda x, y, xi, yi: x.ndim,
    "dtype": lambda x, y, xi, yi: str(x.dtype),
    "size": lambda x, y, xi, yi: x.size,
    "weak_type": lambda x, y, xi, yi: x.weak_type,
    "__len__": lambda x, y, xi, yi: len(x),
    "__iter__": lambda x, y, xi, yi: list(iter(x)),
    "__neg__": lambda x, y, xi, yi: -x,
    "__pos__": lambda x, y, xi, yi: +x,
    "__abs__": lambda x, y, xi, yi: abs(x),
    "__invert__": lambda x, y, xi, yi: ~xi,
    "__getitem__": lambda x, y, xi, yi: (x[1], x[:, ::-2], x[None, ..., 1], x[[2, 0, 2]],
                                         x[1, [3, -1]]),
    "astype": lambda x, y, xi, yi: (x.astype(np.int32), xi.astype(np.float32)),
    "reshape": lambda x, y, xi, yi: (x.reshape(4, 3), x.reshape((2, -1))),
    "transpose": lambda x, y, xi, yi: (x.transpose(), x.transpose(1, 0),
                                       x.reshape(1, 3, 4).transpose((2, 0, 1))),
    "swapaxes": lambda x, y, xi, yi: x.swapaxes(0, 1),
    "squeeze": lambda x, y, xi, yi: (x.reshape(3, 1, 4).squeeze(), x[:1].squeeze(0)),
    "ravel": lambda x, y, xi, yi: x.ravel(),
    "flatten": lambda x, y, xi, yi: x.flatten(),
    "sum": lambda x, y, xi, yi: (x.sum(), x.sum(axis=0), x.sum(1, keepdims=True),
                                 xi.sum(dtype=np.float64)),
    "mean": lambda x, y, xi, yi: (x.mean(), x.mean(axis=1), x.mean(0, keepdims=True)),
    "prod": lambda x, y, xi, yi: (y.prod(), y.prod(axis=1)),
    "var": lambda x, y, xi, yi: (x.var(), x.var(axis=0, ddof=1), x.var(1, keepdims=True)),
    "std": lambda x, y, xi, yi: (x.std(), x.std(axis=1, ddof=1)),
    "max": lambda x, y, xi, yi: (x.max(), x.max(axis=0), x.max(1, keepdims=True)),
    "min": lambda x, y, xi, yi: (x.min(), x.min(axis=1)),
    "all": lambda x, y, xi, yi: (xi.all(), xi.all(axis=0)),
    "any": lambda x, y, xi, yi: ((x > 1).any(), (x > 1).any(axis=1)),
    "argmax": lambda x, y, xi, yi: (x.argmax(), x.argmax(axis=1), x.argmax(0, keepdims=True)),
    "argmin": lambda x, y, xi, yi: (x.argmin(), x.argmin(axis=0)),
    "clip": lambda x, y, xi, yi: (x.clip(-0.5, 0.5), x.clip(min=0.0), x.clip(max=0.1)),
    "dot": lambda x, y, xi, yi: (x.dot(y.T), x[0].dot(y[1])),
    # ties among the ints: argsort is stable in both
    "sort": lambda x, y, xi, yi: (x.sort(), x.sort(axis=0), xi.sort(), x.sort(axis=None),
                                  xi.sort(descending=True)),
    "argsort": lambda x, y, xi, yi: (x.argsort(), xi.argsort(axis=0), xi.argsort(),
                                     xi.argsort(axis=None), xi.argsort(descending=True)),
    "cumsum": lambda x, y, xi, yi: (x.cumsum(), x.cumsum(axis=1), xi.cumsum(0)),
    "cumprod": lambda x, y, xi, yi: (y.cumprod(), y.cumprod(axis=0)),
    "repeat": lambda x, y, xi, yi: (x.repeat(2), x.repeat(2, axis=1), xi.repeat(3, 0)),
    "diagonal": lambda x, y, xi, yi: (x.diagonal(), x.diagonal(1), x.diagonal(-1, 1, 0)),
    "T": lambda x, y, xi, yi: x.T,
    "mT": lambda x, y, xi, yi: x.reshape(1, 3, 4).mT,
    "at": lambda x, y, xi, yi: (
        x.at[1, 2].set(5.0), x.at[:, 1].add(y[:, 0]), x.at[0].multiply(2.0),
        x.at[[0, 2, 0]].add(1.0), x.at[[0, 0], [1, 1]].set(7.0), x.at[[-1, 5]].get(),
        x.at[1, [0, 9, -1]].set(3.0), xi.at[[1, 1], 0].max(4), x.at[[2, 2]].min(-3.0),
        x.at[[0, 1]].divide(y[0]), x.at[2].subtract(1.5), x.at[[1, 0, 1]].subtract(y[0]),
        x.at[1:, ::2].power(2.0), xi.at[0].divide(2), x.at[[0, 1]].mul(y[:2])),
}


def tracer_attributes() -> list[str]:
    """Every attribute a Tracer defines beyond `object`: its own class body and what
    numpy.py installs on it, public names and dunders."""
    names = set()
    for name, value in vars(tracing.Tracer).items():
        if name in ("__slots__", "__module__", "__doc__", "__dict__", "__weakref__",
                    "__annotations__", "__qualname__", "__firstlineno__",
                    "__static_attributes__", "__array_priority__", "aval", "trace", "value"):
            continue
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        names.add(name)
    return sorted(names)


def _row(name: str):
    if name in ROWS:
        return ROWS[name]
    if name.startswith("__") and name.strip("_") in (
            set(("add sub mul truediv floordiv mod pow matmul and or xor lt le gt ge eq ne")
                .split()) | {"r" + o for o in "add sub mul truediv floordiv mod pow matmul and "
                             "or xor".split()}):
        return _binary_row(name)
    return None


def test_every_tracer_attribute_has_a_row():
    names = tracer_attributes()
    assert len(names) > 60, names
    missing = [n for n in names if _row(n) is None and n not in NOT_UNDER_JIT]
    assert not missing, f"Tracer attributes without an eager-parity row: {missing}"
    stale = [n for n in list(ROWS) + list(NOT_UNDER_JIT) if n not in names]
    assert not stale, f"rows for names a Tracer does not have: {stale}"


def _leaves(v):
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in _leaves(item)]
    return [v]


@pytest.fixture(scope="module")
def both():
    """(eager results, jit results): every row in ONE jitted function."""
    names = [n for n in tracer_attributes() if n not in NOT_UNDER_JIT]
    rows = {n: _row(n) for n in names}
    eager_args = [anp.asarray(a) for a in ARGS]
    assert all(type(a) is Array for a in eager_args)
    eager = {n: f(*eager_args) for n, f in rows.items()}
    static = {"shape", "ndim", "dtype", "size", "weak_type", "__len__"}  # Python values
    traced_static = {}

    def all_rows(*args):
        out = {}
        for n, f in rows.items():
            r = f(*args)
            if n in static:
                traced_static[n] = r
            else:
                out[n] = r
        return out

    jitted = ad.jit(all_rows)(*ARGS)
    jitted.update(traced_static)
    return eager, jitted


@pytest.mark.parametrize("name", [n for n in tracer_attributes() if n not in NOT_UNDER_JIT])
def test_eager_result_equals_jit_result(name, both):
    eager, jitted = both
    e, j = _leaves(eager[name]), _leaves(jitted[name])
    assert len(e) == len(j), name
    for k, (a, b) in enumerate(zip(e, j)):
        if isinstance(b, (bool, int, str, tuple)):
            assert a == b, (name, k)
            continue
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (name, k, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14, err_msg=f"{name} #{k}")


def test_results_of_eager_ops_and_of_jit_are_arrays_with_at():
    x = anp.arange(6.0)
    outs = [x, anp.zeros((2, 2)), anp.sin(x), anp.asarray([1.0, 2.0]), x + 1, np.exp(x),
            anp.sort(x), ad.jit(lambda v: v * 2)(np.arange(3.0)),
            ad.grad(lambda v: (v * v).sum())(np.arange(3.0)), *anp.broadcast_arrays(x, x[:1]),
            anp.pad(x, 1), anp.tile(x, 2), *anp.split(x, 2)]
    for o in outs:
        assert type(o) is Array and isinstance(o, np.ndarray)
        np.testing.assert_array_equal(o.at[0].set(-1.0)[0], -1.0)


def test_at_on_eager_arrays_does_not_modify_the_operand():
    x = anp.arange(4.0)
    x.at[[0, 0]].add(2.0)
    x.at[1].set(9.0)
    np.testing.assert_array_equal(x, np.arange(4.0))


def test_at_options_like_the_traced_ones():
    x = anp.arange(4.0)
    np.testing.assert_array_equal(x.at[[9]].get(mode="clip"), [3.0])
    np.testing.assert_array_equal(x.at[[9]].set(1.0, mode="drop"), x)
    with pytest.raises(ad.UnsupportedError, match="option mode='fill' is not supported"):
        x.at[[1]].set(1.0, mode="fill")
    with pytest.raises(TypeError, match="indices must be integers"):
        x.at[np.array([0.5])].set(1.0)


def test_numpy_behaviour_is_kept():
    x = anp.arange(6.0).reshape(2, 3)
    plain = np.arange(6.0).reshape(2, 3)
    assert isinstance(x, np.ndarray)
    assert repr(x) == repr(plain) and str(x) == str(plain)
    assert repr(anp.asarray(2.0)) == repr(np.asarray(2.0))
    # reductions to a scalar give numpy scalars (hashable), as for ndarrays
    assert type(x.sum()) is np.float64 and type(np.max(x)) is np.float64
    assert hash(x.sum()) == hash(15.0)
    with pytest.raises(TypeError, match="unhashable"):
        hash(x)
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is Array
    np.testing.assert_array_equal(y, plain)
    x2 = np.array(x)  # still mutable in place, as numpy
    x2[0, 0] = 5.0
    assert x2[0, 0] == 5.0 and x[0, 0] == 0.0
    np.testing.assert_array_equal(np.concatenate([x, plain]), np.concatenate([plain, plain]))
    assert np.asarray(x).__class__ is np.ndarray
    assert x.tolist() == plain.tolist() and float(x[1, 2]) == 5.0


def test_eager_arrays_as_jit_arguments_and_donated():
    f = ad.jit(lambda a, b: a * b + 1.0)
    x = anp.arange(4.0)
    for _ in range(2):  # the second call takes the fast path
        out = f(x, x)
        np.testing.assert_array_equal(out, np.arange(4.0) ** 2 + 1.0)
    w = anp.arange(4.0)
    g = ad.jit(lambda a: a * 2.0, donate_argnums=0)
    out = g(w)
    np.testing.assert_array_equal(out, np.arange(4.0) * 2.0)
    assert np.shares_memory(out, w)


def test_at_of_an_eager_array_with_traced_operands():
    """A closed-over eager array updated with traced values or indices inside a trace
    (jax's `buf.at[i].set(x)` on a constant) is traced, not a concretization error."""
    c = anp.zeros(3)
    f = ad.jit(lambda v, i: (c.at[i].set(v), c.at[[0, 0]].add(v), c.at[i].get()))
    s, a, g = f(2.0, 1)
    np.testing.assert_array_equal(s, [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(a, [4.0, 0.0, 0.0])
    assert g == 0.0
    assert ad.grad(lambda v: (c.at[[0, 0, 2]].add(v) ** 2).sum())(3.0) == 2 * (6.0 * 2 + 3.0)
    np.testing.assert_array_equal(c, np.zeros(3))


def test_numpy_functions_keep_numpy_semantics_on_eager_arrays() -> None:
    # np.sort / np.unique / np.median sort a copy in place with `.sort()`; Array.sort
    # returns a copy (jax's meaning) and used to leave theirs unsorted
    x = anp.asarray(np.array([[3.0, 1.0, 2.0], [0.5, 9.0, -1.0]]))
    assert isinstance(x, Array)
    plain = np.asarray(x).view(np.ndarray)
    np.testing.assert_array_equal(np.sort(x, axis=0), np.sort(plain, axis=0))
    np.testing.assert_array_equal(np.sort(x), np.sort(plain))
    np.testing.assert_array_equal(np.unique(x), np.unique(plain))
    assert np.median(x) == np.median(plain)
    np.testing.assert_array_equal(np.percentile(x, 30, axis=1), np.percentile(plain, 30, axis=1))
    np.testing.assert_array_equal(np.partition(x, 1, axis=1), np.partition(plain, 1, axis=1))
    assert isinstance(np.sort(x), Array)   # array results stay eager Arrays
    np.testing.assert_array_equal(x.sort(axis=1), np.sort(plain, axis=1))  # jax's meaning
    np.testing.assert_array_equal(x, plain)   # and the method sorted nothing in place
