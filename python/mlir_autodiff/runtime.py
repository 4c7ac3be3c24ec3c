"""CPU runtime: compile an upstream-MLIR module on tensors and call it with numpy arrays.

`CompiledModule(module)` runs `--autodiff-lower-to-cpu` on a copy of the
module and JIT-compiles it with the upstream ExecutionEngine. Its functions
are called with numpy arrays (or Python scalars) and return numpy arrays.

Calling convention (see transforms/lower_to_cpu.py): tensor results are
written into numpy arrays the runtime allocates before the call, so nothing
the compiled code returns needs freeing and repeated calls do not leak.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_autodiff import dialects
from mlir_autodiff.transforms.pipeline import run_pipeline

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


def np_dtype(t: ir.Type) -> np.dtype:
    key = str(t)
    if key not in _NP_OF_MLIR:
        raise TypeError(f"element type {t} is not supported by the CPU runtime")
    return np.dtype(_NP_OF_MLIR[key])


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One parameter or result of a compiled function, from its MLIR type."""

    dtype: np.dtype
    shape: tuple[int | None, ...] | None  # None: a scalar; None dims: dynamic
    mlir_type: str

    @property
    def is_scalar(self) -> bool:
        return self.shape is None

    @staticmethod
    def of(t: ir.Type) -> ArgSpec:
        if isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
            st = t
            shape = tuple(None if st.is_dynamic_dim(i) else st.get_dim_size(i)
                          for i in range(st.rank))
            return ArgSpec(np_dtype(st.element_type), shape, str(t))
        return ArgSpec(np_dtype(t), None, str(t))

    def describe(self) -> str:
        return self.mlir_type


def _memref_descriptor_type(rank: int, ctype: Any) -> type[ctypes.Structure]:
    fields = [
        ("allocated", ctypes.POINTER(ctype)),
        ("aligned", ctypes.POINTER(ctype)),
        ("offset", ctypes.c_longlong),
    ]
    if rank > 0:
        fields += [("shape", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type(f"MemRef{rank}D_{ctype.__name__}", (ctypes.Structure,), {"_fields_": fields})


_DESCRIPTOR_TYPES: dict[tuple[int, Any], type[ctypes.Structure]] = {}


def memref_descriptor(a: np.ndarray) -> ctypes.Structure:
    """A ranked memref descriptor viewing numpy array `a` (no copy)."""
    ctype = _CTYPE_OF_NP[a.dtype]
    key = (a.ndim, ctype)
    cls = _DESCRIPTOR_TYPES.get(key)
    if cls is None:
        cls = _DESCRIPTOR_TYPES[key] = _memref_descriptor_type(a.ndim, ctype)
    d = cls()
    ptr = ctypes.cast(a.ctypes.data, ctypes.POINTER(ctype))
    d.allocated = ptr
    d.aligned = ptr
    d.offset = 0
    if a.ndim > 0:
        d.shape = (ctypes.c_longlong * a.ndim)(*a.shape)
        d.strides = (ctypes.c_longlong * a.ndim)(*(s // a.itemsize for s in a.strides))
    return d


def shared_libs() -> list[str]:
    libdir = os.path.join(os.path.dirname(ir.__file__), "lib")
    return [os.path.join(libdir, "libmlir_c_runner_utils.so")]


class CompiledFunction:
    """A callable view of one public function of a CompiledModule."""

    def __init__(self, module: CompiledModule, name: str, params: list[ArgSpec],
                 results: list[ArgSpec]):
        self.module = module
        self.name = name
        self.params = params
        self.results = results
        addr = module.engine.raw_lookup("_mlir_ciface_" + name)
        if not addr:
            raise RuntimeError(f"compiled module has no C interface for '@{name}'")
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)
        self._out_tensors = [r for r in results if not r.is_scalar]
        self._out_scalars = [r for r in results if r.is_scalar]

    def _check_arg(self, i: int, spec: ArgSpec, value: Any, argname: str | None) -> np.ndarray:
        label = argname or f"argument {i}"
        if spec.is_scalar:
            arr = np.asarray(value)
            if arr.ndim != 0:
                raise ValueError(
                    f"@{self.name}: {label} expects a scalar {spec.mlir_type}, "
                    f"got an array of shape {arr.shape}"
                )
        else:
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            if arr.ndim != len(spec.shape):
                raise ValueError(
                    f"@{self.name}: {label} expects {spec.mlir_type} (rank {len(spec.shape)}), "
                    f"got shape {arr.shape}"
                )
            for want, got in zip(spec.shape, arr.shape):
                if want is not None and want != got:
                    raise ValueError(
                        f"@{self.name}: {label} expects {spec.mlir_type}, got shape {arr.shape}"
                    )
        if arr.dtype != spec.dtype:
            if isinstance(value, np.ndarray) or not np.can_cast(
                arr.dtype, spec.dtype, casting="same_kind"
            ):
                raise TypeError(
                    f"@{self.name}: {label} expects dtype {spec.dtype} ({spec.mlir_type}), "
                    f"got {arr.dtype}"
                )
            arr = arr.astype(spec.dtype)
        if not spec.is_scalar:
            arr = np.ascontiguousarray(arr)
        return arr

    def __call__(self, *args: Any) -> Any:
        """Call with numpy arrays; returns one array, or a tuple for several results."""
        outs = self.call(args)
        if len(outs) == 1:
            return outs[0]
        return tuple(outs)

    def call(self, args: Sequence[Any], arg_names: Sequence[str] | None = None) -> list[Any]:
        if len(args) != len(self.params):
            raise TypeError(
                f"@{self.name} takes {len(self.params)} argument(s), got {len(args)}"
            )
        keep: list[Any] = []
        ptrs: list[int] = []
        for i, (spec, value) in enumerate(zip(self.params, args)):
            arr = self._check_arg(i, spec, value, arg_names[i] if arg_names else None)
            keep.append(arr)
            if spec.is_scalar:
                cell = _CTYPE_OF_NP[spec.dtype](arr.item())
                keep.append(cell)
                ptrs.append(ctypes.addressof(cell))
            else:
                desc = memref_descriptor(arr)
                holder = ctypes.pointer(desc)
                keep += [desc, holder]
                ptrs.append(ctypes.addressof(holder))
        out_arrays = []
        for spec in self._out_tensors:
            shape = tuple(s if s is not None else 0 for s in spec.shape)
            out = np.empty(shape, spec.dtype)
            out_arrays.append(out)
            desc = memref_descriptor(out)
            holder = ctypes.pointer(desc)
            keep += [desc, holder]
            ptrs.append(ctypes.addressof(holder))
        scalar_cells = []
        for spec in self._out_scalars:
            cell = _CTYPE_OF_NP[spec.dtype]()
            scalar_cells.append(cell)
            ptrs.append(ctypes.addressof(cell))
        packed = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self._fn(packed)
        del keep
        it_t, it_s = iter(out_arrays), iter(scalar_cells)
        results: list[Any] = []
        for spec in self.results:
            if spec.is_scalar:
                results.append(spec.dtype.type(next(it_s).value))
            else:
                results.append(next(it_t))
        return results


def function_signatures(module: ir.Module) -> dict[str, tuple[list[ArgSpec], list[ArgSpec]]]:
    sigs = {}
    for op in module.body.operations:
        if op.operation.name != "func.func" or len(op.regions[0].blocks) == 0:
            continue
        if "sym_visibility" in op.attributes and \
                ir.StringAttr(op.attributes["sym_visibility"]).value != "public":
            continue
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        try:
            params = [ArgSpec.of(t) for t in ftype.inputs]
            results = [ArgSpec.of(t) for t in ftype.results]
        except TypeError:
            continue  # not callable from numpy; still compiled
        sigs[ir.StringAttr(op.attributes["sym_name"]).value] = (params, results)
    return sigs


class CompiledModule:
    """A module lowered with --autodiff-lower-to-cpu and JIT-compiled.

    The module is cloned (by re-parsing its text) so the caller's IR is untouched.
    `pipeline` overrides the lowering pipeline (textual, as autodiff-opt accepts).
    """

    def __init__(self, module: ir.Module | str, *, pipeline: str = "autodiff-lower-to-cpu",
                 opt_level: int = 3, context: ir.Context | None = None):
        text = module if isinstance(module, str) else str(module.operation)
        self.context = context or ir.Context()
        dialects.load(self.context)
        with self.context, ir.Location.unknown():
            self.module = ir.Module.parse(text)
            self.signatures = function_signatures(self.module)
            run_pipeline(self.module, pipeline)
            self.lowered_text = None
            self.engine = ExecutionEngine(self.module, opt_level=opt_level,
                                          shared_libs=shared_libs())
        self._functions: dict[str, CompiledFunction] = {}

    def __getitem__(self, name: str) -> CompiledFunction:
        fn = self._functions.get(name)
        if fn is None:
            if name not in self.signatures:
                raise KeyError(f"no public function '@{name}' callable from numpy")
            params, results = self.signatures[name]
            fn = self._functions[name] = CompiledFunction(self, name, params, results)
        return fn
