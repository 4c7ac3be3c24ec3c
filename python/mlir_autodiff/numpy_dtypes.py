"""Dtype queries and type names of `mlir_autodiff.numpy`.

Programs written for `jax.numpy` use these names constantly — in asserts
(`isinstance(x, jnp.ndarray)`, `jnp.issubdtype(x.dtype, jnp.floating)`), in
numerics (`jnp.finfo(x.dtype).eps`) and in generic code that calls
`jnp.real` / `jnp.conj` on values that happen to be real (those live in
numpy.py). They are re-exported by `mlir_autodiff.numpy`. Complex dtypes are
not supported by the compiler, so `iscomplexobj` is False for our arrays.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from .tracing import BFLOAT16, FLOAT16, Tracer, canonical_dtype

# Scalar-type hierarchy, numpy's own classes, so `issubdtype(x.dtype, floating)`
# and `np.issubdtype(x.dtype, anp.floating)` agree.
generic = np.generic
number = np.number
integer = np.integer
signedinteger = np.signedinteger
unsignedinteger = np.unsignedinteger
inexact = np.inexact
floating = np.floating
complexfloating = np.complexfloating
bool = np.bool_  # noqa: A001 - jax.numpy's name for the boolean dtype

iinfo = np.iinfo


def issubdtype(arg1: Any, arg2: Any) -> builtins.bool:
    """numpy's `issubdtype`, with bfloat16 a `floating` type as in jax (its numpy
    kind is 'V', so numpy's own answer is False)."""
    try:
        if np.dtype(arg1) == BFLOAT16:
            return arg2 in (np.floating, np.inexact, np.number, np.generic) or (
                not isinstance(arg2, type) and np.dtype(arg2) == BFLOAT16) or \
                arg2 is BFLOAT16.type
    except TypeError:
        pass
    return np.issubdtype(arg1, arg2)


def finfo(dtype: Any) -> Any:
    """Machine limits of a float type (bfloat16's from ml_dtypes, numpy's otherwise)."""
    if np.dtype(dtype) == BFLOAT16:
        return ml_dtypes.finfo(BFLOAT16)
    return np.finfo(dtype)


class _ArrayMeta(type):
    def __instancecheck__(cls, obj: Any) -> builtins.bool:
        return isinstance(obj, (np.ndarray, Tracer))

    def __subclasscheck__(cls, sub: type) -> builtins.bool:
        return builtins.issubclass(sub, (np.ndarray, Tracer))


class ndarray(metaclass=_ArrayMeta):  # noqa: N801 - numpy's name
    """The array type for `isinstance` checks and annotations.

    `isinstance(x, anp.ndarray)` holds for numpy arrays (what eager calls
    return) and for traced values inside a transform, as `jnp.ndarray` holds
    for jax arrays and tracers. It cannot be instantiated: use `anp.array`.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("anp.ndarray cannot be instantiated; use anp.array or anp.zeros")


def promote_strong(dts: Sequence[np.dtype]) -> np.dtype:
    """numpy's promotion, except for float16 and bfloat16, which follow jax's lattice:
    integers and bools do not widen them (int32 + float16 is float16), float16 with
    bfloat16 is float32, and with float32/float64 they give that type."""
    small = [d for d in dts if d in (FLOAT16, BFLOAT16)]
    if not small:
        return np.result_type(*dts)
    wide = [d for d in dts if d not in small and d.kind == "f"]
    if wide:
        return np.result_type(*[np.dtype(np.float32) if d in small else d for d in dts])
    return small[0] if len(set(small)) == 1 else np.dtype(np.float32)


def promote_types(a: Any, b: Any) -> np.dtype:
    """The dtype both `a` and `b` promote to (see `promote_strong`)."""
    return canonical_dtype(promote_strong([np.dtype(a), np.dtype(b)]))


def iscomplexobj(x: Any) -> builtins.bool:
    """Whether `x` has a complex dtype (never, for our arrays)."""
    dt = x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype
    return dt.kind == "c"
