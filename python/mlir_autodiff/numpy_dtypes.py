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
from typing import Any

import numpy as np

from .tracing import Tracer, canonical_dtype

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

issubdtype = np.issubdtype
finfo = np.finfo
iinfo = np.iinfo


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


def promote_types(a: Any, b: Any) -> np.dtype:
    """The dtype both `a` and `b` promote to (numpy's table, 64-bit kept as in
    the rest of the module: float16/complex are not supported)."""
    return canonical_dtype(np.promote_types(np.dtype(a), np.dtype(b)))


def iscomplexobj(x: Any) -> builtins.bool:
    """Whether `x` has a complex dtype (never, for our arrays)."""
    dt = x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype
    return dt.kind == "c"
