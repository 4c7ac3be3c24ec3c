"""Misusing traced values gives an error naming the operation and the user's source line."""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

FILE = os.path.basename(__file__)
X = np.ones((2, 3), np.float32)


def line_of(fn: Any, marker: str) -> int:
    """The line number of the source line of `fn` that contains `marker`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def raises_at(exc: type[BaseException], fn: Any, marker: str, *args: Any) -> str:
    with pytest.raises(exc) as info:
        ad.jit(fn)(*args)
    msg = str(info.value)
    assert f"{FILE}:{line_of(fn, marker)}" in msg, msg
    return msg


def test_if_on_traced_value() -> None:
    def f(x: Any) -> Any:
        if x.sum() > 0:  # BOOL
            return x
        return -x

    msg = raises_at(ad.TracerBoolConversionError, f, "# BOOL", X)
    assert "`if`" in msg and "anp.where" in msg and "Python bool" in msg


def test_while_on_traced_value() -> None:
    def f(x: Any) -> Any:
        while x.max() < 10:  # WHILE
            x = x * 2
        return x

    msg = raises_at(ad.TracerBoolConversionError, f, "# WHILE", X)
    assert "`while`" in msg


def test_and_on_traced_value() -> None:
    def f(x: Any) -> Any:
        return (x > 0) and (x < 1)  # AND

    msg = raises_at(ad.TracerBoolConversionError, f, "# AND", X)
    assert "`and`" in msg


def test_float_and_int_of_traced_value() -> None:
    def f(x: Any) -> Any:
        return float(x.sum())  # FLOAT

    msg = raises_at(ad.ConcretizationTypeError, f, "# FLOAT", X)
    assert "float()" in msg and "static_argnums" in msg

    def g(x: Any) -> Any:
        return x * int(x[0, 0])  # INT

    assert "int()" in raises_at(ad.ConcretizationTypeError, g, "# INT", X)


def test_traced_value_as_index_or_range_bound() -> None:
    def f(x: Any) -> Any:
        return [x for _ in range(x[0, 0])]  # RANGE

    assert "__index__" in raises_at(ad.ConcretizationTypeError, f, "# RANGE", X)


def test_np_asarray_of_traced_value() -> None:
    def f(x: Any) -> Any:
        return np.asarray(x) + 1  # ASARRAY

    msg = raises_at(ad.TracerArrayConversionError, f, "# ASARRAY", X)
    assert "numpy array" in msg


def test_numpy_function_on_traced_value() -> None:
    def f(x: Any) -> Any:
        return np.sum(x)  # NPSUM

    msg = raises_at(ad.UnsupportedNumpyFunctionError, f, "# NPSUM", X)
    assert "numpy.sum is not supported on traced values" in msg
    assert "use mlir_autodiff.numpy.sum" in msg


def test_numpy_ufunc_on_traced_value() -> None:
    def f(x: Any) -> Any:
        return np.exp(x)  # NPEXP

    msg = raises_at(ad.UnsupportedNumpyFunctionError, f, "# NPEXP", X)
    assert "numpy.exp is not supported" in msg and "mlir_autodiff.numpy.exp" in msg

    def g(x: Any) -> Any:
        return np.add.reduce(x)  # REDUCE

    assert "numpy.add.reduce" in raises_at(ad.UnsupportedNumpyFunctionError, g, "# REDUCE", X)


def test_numpy_function_without_traced_equivalent() -> None:
    def f(x: Any) -> Any:
        return np.fft.fft(x)  # FFT

    msg = raises_at(ad.TracerError, f, "# FFT", X)
    assert "fft" in msg


def test_ndarray_operators_with_traced_values_work() -> None:
    c = np.arange(3.0, dtype=np.float32)
    got = ad.jit(lambda x: (c + x, c * x, np.add(c, x), c > x, c @ x[0]))(X)
    np.testing.assert_allclose(got[0], c + X)
    np.testing.assert_allclose(got[1], c * X)
    np.testing.assert_allclose(got[2], c + X)
    np.testing.assert_array_equal(got[3], c > X)
    np.testing.assert_allclose(got[4], c @ X[0])


def test_broadcast_mismatch_names_shapes_and_line() -> None:
    def f(x: Any, y: Any) -> Any:
        return x + y  # BCAST

    msg = raises_at(ad.ShapeError, f, "# BCAST", X, np.ones(4, np.float32))
    assert "operands could not be broadcast together with shapes (2,3) (4,)" in msg
    assert msg.startswith("add:")
    assert isinstance(ad.ShapeError("x"), ValueError)


def test_matmul_reshape_concatenate_shape_errors() -> None:
    def f(x: Any) -> Any:
        return x @ x  # MATMUL

    assert "matmul" in raises_at(ad.ShapeError, f, "# MATMUL", X)

    def g(x: Any) -> Any:
        return x.reshape(4, 2)  # RESHAPE

    assert "cannot reshape array of size 6 into shape (4, 2)" in \
        raises_at(ad.ShapeError, g, "# RESHAPE", X)

    def h(x: Any) -> Any:
        return anp.concatenate([x, x.T])  # CONCAT

    assert "concatenate" in raises_at(ad.ShapeError, h, "# CONCAT", X)


def test_index_errors() -> None:
    def f(x: Any) -> Any:
        return x[2]  # OOB

    assert "index 2 is out of bounds for axis 0 with size 2" in raises_at(IndexError, f, "# OOB", X)

    def g(x: Any) -> Any:
        return x[0, 0, 0]  # TOOMANY

    assert "too many indices" in raises_at(IndexError, g, "# TOOMANY", X)

    # integer arrays and traced indices gather (test_gather_scatter.py); what
    # stays an error: float indices, boolean masks, traced slice bounds
    def h(x: Any) -> Any:
        return x[np.array([0.0, 1.0])]  # ADV

    assert "must be integers" in raises_at(TypeError, h, "# ADV", X)

    def k(x: Any) -> Any:
        return x[x > 0]  # MASK

    assert "boolean array indices" in raises_at(ad.UnsupportedError, k, "# MASK", X)

    def m(x: Any) -> Any:
        return x[: x[0, 0].astype(anp.int32)]  # DYN

    assert "traced value" in raises_at(ad.UnsupportedError, m, "# DYN", X)


def test_item_assignment_suggests_at() -> None:
    def f(x: Any) -> Any:
        x[0] = 1.0  # SETITEM
        return x

    assert ".at[idx].set" in raises_at(TypeError, f, "# SETITEM", X)


def test_leaked_tracer_is_rejected() -> None:
    leaked = []

    @ad.jit
    def stash(x: Any) -> Any:
        leaked.append(x * 2)
        return x

    stash(X)

    def use(y: Any) -> Any:
        return y + leaked[0]  # LEAK

    msg = raises_at(ad.UnexpectedTracerError, use, "# LEAK", X)
    assert "escape" in msg
    with pytest.raises(ad.UnexpectedTracerError):
        anp.exp(leaked[0])  # outside any trace


def test_tracers_are_unhashable_and_len_of_0d() -> None:
    def f(x: Any) -> Any:
        return {x: 1}

    with pytest.raises(TypeError, match="unhashable"):
        ad.jit(f)(X)

    def g(x: Any) -> Any:
        return len(x.sum())  # LEN

    assert "len() of unsized object" in raises_at(TypeError, g, "# LEN", X)


def test_error_hierarchy() -> None:
    for cls in (ad.TracerBoolConversionError, ad.ConcretizationTypeError,
                ad.TracerArrayConversionError, ad.UnsupportedNumpyFunctionError,
                ad.UnexpectedTracerError, ad.ShapeError, ad.UnsupportedError):
        assert issubclass(cls, ad.TracerError)
        assert issubclass(cls, ad.AutodiffError)
    assert issubclass(ad.TracerBoolConversionError, TypeError)
    assert issubclass(ad.CompilationError, ad.AutodiffError)
    assert issubclass(ad.InvalidArgumentError, ad.AutodiffError)
    assert issubclass(ad.InvalidArgumentError, TypeError)


def test_where_is_the_fix_for_data_dependent_choice() -> None:
    got = ad.jit(lambda x: anp.where(x.sum() > 0, x, -x))(X)
    np.testing.assert_allclose(got, X)
