"""Calling compiled code from numpy: memref descriptors and the packed call frame.

A compiled public function `@f` has a packed entry point
`_mlir__mlir_ciface_f(void **args)` (the ExecutionEngine generates it when it
JIT-compiles; an exported artifact carries its own, see export.py): one
pointer per argument of the C wrapper `_mlir_ciface_f`, then one for its
result. `NativeFunction` checks numpy arguments against the function's
`ArgSpec`s, points a reusable call frame at them and calls that entry point.
The rules are runtime.py's. Nothing here imports MLIR, so `mlir_autodiff.aot`
runs exported code with numpy and the standard library only.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mlir_autodiff.argspec import ArgSpec, check_args

# How a scalar of each dtype crosses the C boundary. f16 and bf16 have no ctypes
# type: they travel as their 16 raw bits.
_CTYPE_OF_NP = {
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.float64): ctypes.c_double,
    np.dtype(np.bool_): ctypes.c_bool,
    np.dtype(np.int8): ctypes.c_int8,
    np.dtype(np.int16): ctypes.c_int16,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.float16): ctypes.c_uint16,
}

_F16 = np.dtype(np.float16)


def _half(dtype: np.dtype) -> bool:
    """float16 or bfloat16 (ml_dtypes' numpy type, looked up by name: no import)."""
    return dtype == _F16 or dtype.name == "bfloat16"


# -- memref descriptors -------------------------------------------------------------------


def _memref_descriptor_type(rank: int) -> type[ctypes.Structure]:
    # The layout of upstream's `StridedMemRefType<T, rank>`: the element type
    # only matters to the compiled code, so the data pointers are void*.
    fields = [
        ("allocated", ctypes.c_void_p),
        ("aligned", ctypes.c_void_p),
        ("offset", ctypes.c_int64),
    ]
    if rank > 0:
        fields += [("shape", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


_DESCRIPTOR_TYPES: dict[int, type[ctypes.Structure]] = {}


def _descriptor_type(rank: int) -> type[ctypes.Structure]:
    cls = _DESCRIPTOR_TYPES.get(rank)
    if cls is None:
        cls = _DESCRIPTOR_TYPES[rank] = _memref_descriptor_type(rank)
    return cls


def memref_descriptor(a: np.ndarray) -> ctypes.Structure:
    """A ranked memref descriptor viewing numpy array `a` (no copy).

    The caller keeps `a` alive while the descriptor is in use.
    """
    if a.dtype not in _CTYPE_OF_NP:
        raise TypeError(f"dtype {a.dtype} cannot be passed as a memref")
    d = _descriptor_type(a.ndim)()
    ptr = a.ctypes.data
    d.allocated = ptr
    d.aligned = ptr
    d.offset = 0
    if a.ndim > 0:
        d.shape[:] = a.shape
        d.strides[:] = [s // a.itemsize for s in a.strides]
    return d



def _keep_freed_memory() -> None:
    """Stop glibc from unmapping large freed blocks on every call.

    Why: temporaries over glibc's default 128 KiB mmap threshold are mapped
    and unmapped per call, so each call page-faults them in again (softmax
    4096x1024: 17.1 ms -> 5.4 ms with this). 32 MiB is glibc's documented cap.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD


_keep_freed_memory()


def _scalar_value(spec: ArgSpec, raw: Any) -> Any:
    if _half(spec.dtype):
        return np.uint16(raw).view(spec.dtype)
    return spec.dtype.type(raw)


# -- functions -------------------------------------------------------------------------------


class NativeFunction:
    """A callable view of one compiled public function, given its packed entry point.

    The ABI it drives is the packed interface of `_mlir_ciface_<name>`:
    one pointer per C-wrapper argument, in order. Tensor parameters and the
    tensor out-params are pointers to memref descriptors; scalar parameters
    are passed by value. One scalar result is returned by value (stored
    through a trailing pointer); several scalar results come back as a
    struct written through a leading pointer.
    """

    def __init__(self, name: str, params: list[ArgSpec], results: list[ArgSpec],
                 address: int, donated: Sequence[int] = (),
                 result_args: Sequence[int] | None = None, symbol: str | None = None):
        """`address`: the packed entry point `_mlir__mlir_ciface_<symbol>` (one
        `void **` argument: a pointer per C-wrapper argument and result)."""
        self.name = name
        #: The function's name in the lowered module (the lowering renames a
        #: function named like a library routine, e.g. `@sinh`).
        self.symbol = symbol or name
        self.params = params
        self.results = results
        #: Parameters marked `bufferization.writable = true`: the compiled code may
        #: overwrite them (see `call`).
        self.donated = frozenset(donated)
        #: Per result: the parameter whose buffer it is (dropped from the native
        #: signature by the lowering), or -1 for a caller-allocated out-param.
        self.result_args = list(result_args) if result_args is not None else [-1] * len(results)
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        native = [r for r, a in zip(results, self.result_args) if a < 0]
        self._out_tensors = [r for r in native if not r.is_scalar]
        self._out_scalars = [r for r in native if r.is_scalar]
        self._result_struct: type[ctypes.Structure] | None = None
        if len(self._out_scalars) > 1:
            fields = [(f"r{i}", type(_scalar_slot(s))) for i, s in enumerate(self._out_scalars)]
            self._result_struct = type(f"{name}_results", (ctypes.Structure,),
                                       {"_fields_": fields})
        self._out_shapes = [tuple(s.shape) for s in self._out_tensors]
        self._frame = _CallFrame(params, self._out_tensors, self._out_scalars,
                                 self._result_struct)
        self._frame_lock = threading.Lock()

    def signature(self) -> str:
        """`(tensor<2xf32>, f32) -> tensor<2xf32>`: the MLIR signature."""
        ins = ", ".join(p.mlir_type for p in self.params)
        outs = ", ".join(r.mlir_type for r in self.results)
        return f"({ins}) -> ({outs})"

    def __call__(self, *args: Any) -> Any:
        """Call with numpy arrays or Python values.

        Returns the result for one result, a tuple for several, None for none.
        """
        outs = self.call(args)
        if len(outs) == 1:
            return outs[0]
        if not outs:
            return None
        return tuple(outs)

    def check_args(self, args: Sequence[Any],
                   arg_names: Sequence[str] | None = None) -> list[np.ndarray]:
        """Validate and convert `args` without running anything (see `check_args`)."""
        return check_args(self.name, self.params, args, arg_names)

    def call(self, args: Sequence[Any], arg_names: Sequence[str] | None = None) -> list[Any]:
        """Call with a sequence of arguments; returns the list of results.

        A donated argument's array is written in place and returned as the
        result that lives in it; it is copied first when it is read-only or
        overlaps another argument (the compiled code assumes arguments do
        not alias a buffer it writes).
        """
        arrays = self.check_args(args, arg_names)
        for j in self.donated:
            arrays[j] = _writable_buffer(arrays, j)
        out_arrays = [np.empty(shape, spec.dtype)
                      for spec, shape in zip(self._out_tensors, self._out_shapes)]
        # The native call releases the GIL: a thread that finds the frame in
        # use by another call builds its own.
        if self._frame_lock.acquire(blocking=False):
            try:
                scalars = self._frame.run(self._fn, arrays, out_arrays)
            finally:
                self._frame_lock.release()
        else:
            frame = _CallFrame(self.params, self._out_tensors, self._out_scalars,
                               self._result_struct)
            scalars = frame.run(self._fn, arrays, out_arrays)
        it_t, it_s = iter(out_arrays), iter(scalars)
        outs = []
        for spec, j in zip(self.results, self.result_args):
            if j >= 0:
                outs.append(_argument_result(spec, arrays[j], j in self.donated))
            else:
                outs.append(next(it_s) if spec.is_scalar else next(it_t))
        return outs


class _CallFrame:
    """The packed argument array of one native call, built once and reused.

    `_mlir_ciface_<name>` takes one pointer per C-wrapper argument: memref
    descriptors (through a pointer cell), scalar cells and result cells. All
    of them live here, so a call only stores the arrays' data pointers (and
    the shapes of dynamic dims) and the scalar values: building them anew
    per call was most of the runtime's ~15 us per call (ctypes objects).
    """

    def __init__(self, params: Sequence[ArgSpec], out_tensors: Sequence[ArgSpec],
                 out_scalars: Sequence[ArgSpec],
                 result_struct: type[ctypes.Structure] | None) -> None:
        cells: list[Any] = []  # what each packed pointer points to, in ABI order
        self.struct = result_struct() if result_struct is not None else None
        if self.struct is not None:
            cells.append(ctypes.c_void_p(ctypes.addressof(self.struct)))
        #: (parameter index, descriptor, static shape) per tensor parameter
        self.tensors: list[tuple[int, ctypes.Structure, bool]] = []
        #: (parameter index, spec, value cell) per scalar parameter
        self.scalars: list[tuple[int, ArgSpec, Any]] = []
        for i, spec in enumerate(params):
            if spec.is_scalar:
                slot = _scalar_slot(spec)
                self.scalars.append((i, spec, slot))
                cells.append(slot)
            else:
                slot = _static_descriptor(spec)
                self.tensors.append((i, slot, spec.is_static))
                cells.append(ctypes.c_void_p(ctypes.addressof(slot)))
        self.outs = [_static_descriptor(spec) for spec in out_tensors]
        cells += [ctypes.c_void_p(ctypes.addressof(d)) for d in self.outs]
        self.out_scalars = list(out_scalars)
        self.single = None
        if len(out_scalars) == 1:
            self.single = _scalar_slot(out_scalars[0])
            cells.append(self.single)
        self.cells = cells  # kept alive: `packed` points into them
        self.packed = (ctypes.c_void_p * max(len(cells), 1))(
            *[ctypes.addressof(c) for c in cells])

    def run(self, fn: Any, arrays: Sequence[np.ndarray], out_arrays: Sequence[np.ndarray]
            ) -> list[Any]:
        """Point the frame at `arrays` and `out_arrays`, call `fn`; the scalar results."""
        for i, desc, static in self.tensors:
            _point(desc, arrays[i], static)
        for i, spec, slot in self.scalars:
            slot.value = _scalar_raw(spec, arrays[i])
        for desc, arr in zip(self.outs, out_arrays):
            _point(desc, arr, True)
        fn(self.packed)
        if self.struct is not None:
            return [_scalar_value(s, getattr(self.struct, f"r{i}"))
                    for i, s in enumerate(self.out_scalars)]
        if self.single is not None:
            return [_scalar_value(self.out_scalars[0], self.single.value)]
        return []


def _static_descriptor(spec: ArgSpec) -> ctypes.Structure:
    """A memref descriptor of `spec`'s rank with its static sizes and dense strides
    filled in (dynamic dims: set per call by `_point`)."""
    assert spec.shape is not None
    desc = _descriptor_type(len(spec.shape))()
    if spec.is_static and spec.shape:
        desc.shape[:] = spec.shape
        strides, step = [], 1
        for d in reversed(spec.shape):
            strides.append(step)
            step *= d
        desc.strides[:] = strides[::-1]
    return desc


def _scalar_slot(spec: ArgSpec) -> ctypes._SimpleCData:
    return ctypes.c_uint16() if _half(spec.dtype) else _CTYPE_OF_NP[spec.dtype]()


def _scalar_raw(spec: ArgSpec, arr: np.ndarray) -> Any:
    """A scalar argument's value as its ctypes cell stores it (f16: the raw bits)."""
    if _half(spec.dtype):
        return int(arr.view(np.uint16))
    return arr.item()


def _point(desc: ctypes.Structure, arr: np.ndarray, static: bool) -> None:
    """Make memref descriptor `desc` view `arr` (a dense array of its rank)."""
    ptr = _data_pointer(arr)
    desc.allocated = ptr
    desc.aligned = ptr
    if not static and arr.ndim > 0:
        desc.shape[:] = arr.shape
        desc.strides[:] = [st // arr.itemsize for st in arr.strides]


def _data_pointer(arr: np.ndarray) -> int:
    """The address of dense array `arr`'s first element.

    Through the buffer protocol where it can be (writable, non-empty):
    `arr.ctypes.data` builds a Python helper object per call, ~1 us here,
    four times what `c_char.from_buffer` takes.
    """
    if arr.flags.writeable and arr.nbytes and arr.dtype.kind != "V":
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    return arr.ctypes.data  # also bfloat16, which the buffer protocol cannot export


def _writable_buffer(arrays: list[np.ndarray], j: int) -> np.ndarray:
    """`arrays[j]`, or a copy when the compiled code must not write into it."""
    arr = arrays[j]
    if not arr.flags.writeable or any(
        k != j and np.may_share_memory(arr, other) for k, other in enumerate(arrays)
    ):
        return np.array(arr)
    return arr


def _argument_result(spec: ArgSpec, arr: np.ndarray, donated: bool) -> Any:
    """A result the lowering proved to be argument `arr` (its buffer, unchanged if not donated).

    A donated buffer is handed back as it is; any other argument is copied,
    so results never alias the caller's arrays.
    """
    if spec.is_scalar:
        return spec.dtype.type(arr)
    return arr if donated else np.array(arr)
