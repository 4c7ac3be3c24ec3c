"""What numpy may pass to a compiled function: one parameter or result's spec.

`ArgSpec` is one parameter or result (dtype, shape with dynamic dims, the MLIR
type); `check_args` checks and converts arguments against the specs before
any native code runs (see runtime.py for the rules); `from_python` converts
Python scalars and nested lists when that loses nothing. Nothing here needs
MLIR (`ArgSpec.of` imports it when called): exported artifacts
(`mlir_autodiff.aot`) check their arguments with the same code as `jit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mlir import ir

_NP_OF_MLIR = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "index": np.int64,
}


def np_dtype(t: ir.Type) -> np.dtype:
    """The numpy dtype of an MLIR element type; TypeError if the runtime cannot pass it."""
    key = str(t)
    if key == "bf16":
        return bfloat16()
    if key not in _NP_OF_MLIR:
        raise TypeError(f"element type {t} is not supported by the CPU runtime")
    return np.dtype(_NP_OF_MLIR[key])


def dtype_json(dtype: np.dtype) -> str:
    """`dtype` as manifests and cache entries store it (`dtype_from_json` reads it back):
    numpy's `.str` (with the byte order), or the name of an extension type like
    bfloat16, whose `.str` ('|V2') would not find it again."""
    return dtype.name if dtype.kind == "V" else dtype.str


def dtype_from_json(text: str) -> np.dtype:
    return bfloat16() if text == "bfloat16" else np.dtype(text)


def bfloat16() -> np.dtype:
    """numpy's bfloat16 (the ml_dtypes extension jax uses too), imported when first
    needed: an exported artifact without bf16 arguments runs without it."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bf16 arrays need the ml_dtypes package (pip install ml_dtypes)") \
            from None
    return np.dtype(ml_dtypes.bfloat16)


def _is_python_value(value: Any) -> bool:
    """Python scalars and (nested) lists/tuples: values without a dtype of their own."""
    # np.float64 subclasses float, but it has a dtype: it is checked strictly.
    return isinstance(value, (bool, int, float, list, tuple)) and not isinstance(value, np.generic)


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One parameter or result of a compiled function, from its MLIR type."""

    dtype: np.dtype
    shape: tuple[int | None, ...] | None  # None: a scalar; None dims: dynamic
    mlir_type: str

    @property
    def is_scalar(self) -> bool:
        return self.shape is None

    @property
    def is_static(self) -> bool:
        return self.shape is None or all(d is not None for d in self.shape)

    @staticmethod
    def of(t: ir.Type) -> ArgSpec:
        """The spec of an MLIR type; TypeError if numpy cannot pass it."""
        from mlir import ir  # the only use of MLIR here: aot loads specs without it

        if isinstance(t, ir.MemRefType) and not (
            isinstance(t.layout, ir.AffineMapAttr)
            and t.layout.value == ir.AffineMap.get_identity(t.rank)
            and t.memory_space is None
        ):
            # numpy arrays are passed as dense row-major buffers in host memory.
            raise TypeError(f"type {t} is not supported by the CPU runtime (only dense "
                            "row-major host memrefs are)")
        if isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
            shape = tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i)
                          for i in range(t.rank))
            return ArgSpec(np_dtype(t.element_type), shape, str(t))
        if isinstance(t, (ir.ShapedType, ir.UnrankedTensorType, ir.UnrankedMemRefType)):
            raise TypeError(f"type {t} is not supported by the CPU runtime")
        return ArgSpec(np_dtype(t), None, str(t))

    def describe(self) -> str:
        return self.mlir_type

    def shape_text(self) -> str:
        """The expected shape as numpy prints it, '?' for dynamic dimensions."""
        dims = ["?" if d is None else str(d) for d in self.shape or ()]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def accepts(self, value: Any) -> bool:
        """`value` is already what `convert` returns: a dense array of this exact
        dtype and static shape (the common case, checked in well under a microsecond)."""
        return (type(value) is np.ndarray and value.shape == self.shape
                and value.dtype == self.dtype and value.flags.c_contiguous
                and value.flags.aligned)

    def convert(self, value: Any, where: str) -> np.ndarray:
        """Check `value` against this spec and return it as a C-contiguous array.

        `where` names the argument in messages (e.g. "@f: argument 0").
        Raises TypeError (dtype) or ValueError (shape, rank, unconvertible value).
        """
        label = f"{where} ({self.mlir_type})"
        if _is_python_value(value):
            arr = from_python(value, self.dtype, label)
        else:
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError) as err:
                raise TypeError(
                    f"{label}: cannot convert {type(value).__name__} to an array: {err}"
                ) from None
            if arr.dtype != self.dtype:
                # Same type in the other byte order is the same value: convert it.
                if arr.dtype.kind in "biuf" and arr.dtype.newbyteorder("=") == self.dtype:
                    arr = arr.astype(self.dtype)
                else:
                    raise TypeError(
                        f"{label}: expected dtype {self.dtype}, got {_dtype_name(arr)}"
                    )
        if self.is_scalar:
            if arr.ndim != 0:
                raise ValueError(f"{label}: expected a scalar, got an array of shape {arr.shape}")
            return arr
        if arr.ndim != len(self.shape):
            raise ValueError(
                f"{label}: expected rank {len(self.shape)} with shape {self.shape_text()}, "
                f"got rank {arr.ndim} with shape {arr.shape}"
            )
        for want, got in zip(self.shape, arr.shape):
            if want is not None and want != got:
                raise ValueError(
                    f"{label}: expected shape {self.shape_text()}, got {arr.shape}"
                )
        # The compiled code assumes the identity layout (dense, row-major):
        # strided views, broadcasts and unaligned buffers are copied.
        if not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.ascontiguousarray(arr)
        return arr


def from_python(value: Any, dtype: np.dtype, label: str) -> np.ndarray:
    """A Python scalar or nested list as an array of `dtype`, when that loses nothing.

    Python values have no dtype of their own, so bool -> int -> float is
    accepted; float -> int, int -> bool and out-of-range integers are not.
    `label` starts the messages of the TypeError/ValueError raised otherwise.
    """
    try:
        probe = np.asarray(value)
    except OverflowError as err:
        raise ValueError(f"{label}: value out of range: {err}") from None
    except ValueError:
        raise ValueError(
            f"{label}: nested lists of different lengths do not form an array"
        ) from None
    if probe.size == 0 and probe.dtype.kind in "biufO":
        return np.zeros(probe.shape, dtype)
    allowed = {"b": "b", "i": "biu", "u": "biu"}.get(dtype.kind, "biuf")  # floats, bfloat16
    if probe.dtype.kind not in allowed:
        raise TypeError(f"{label}: expected {dtype} values, got {_dtype_name(probe)}")
    try:
        arr = np.array(value, dtype=dtype)
    except OverflowError:
        raise ValueError(f"{label}: value out of range for {dtype}") from None
    if dtype.kind in "iu" and not np.array_equal(arr, probe):
        raise ValueError(f"{label}: value out of range for {dtype}")
    return arr


def _dtype_name(arr: np.ndarray) -> str:
    if arr.dtype.kind == "U":
        return "strings"
    if arr.dtype.kind == "O":
        return "Python objects"
    return str(arr.dtype)


def check_args(name: str, params: Sequence[ArgSpec], args: Sequence[Any],
               arg_names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Check `args` against the parameters of `@name`; the converted arrays.

    TypeError for a wrong count or dtype, ValueError for a wrong shape or value.
    """
    if len(args) != len(params):
        types = ", ".join(p.mlir_type for p in params)
        raise TypeError(
            f"@{name} takes {len(params)} argument"
            f"{'' if len(params) == 1 else 's'} ({types}), got {len(args)}"
        )
    converted = []
    for i, (spec, value) in enumerate(zip(params, args)):
        if spec.accepts(value):
            converted.append(value)
            continue
        where = f"@{name}: argument {i}"
        if arg_names and i < len(arg_names) and arg_names[i]:
            where += f" '{arg_names[i]}'"
        converted.append(spec.convert(value, where))
    return converted
