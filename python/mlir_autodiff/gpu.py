"""GPU runtime: compile a tensor module for an NVIDIA GPU and call it with numpy arrays.

    from mlir_autodiff.gpu import CompiledGpuModule, NoCudaDevice

    try:
        cm = CompiledGpuModule(text)            # chip: the device's own, e.g. sm_86
    except NoCudaDevice as err:                 # "no CUDA device: <reason>"
        ...
    y = cm["f"](x)                               # numpy in, numpy out

`CompiledGpuModule` first asks the CUDA driver (`libcuda.so.1`: `cuInit`,
`cuDeviceGetCount`) for a device and raises `NoCudaDevice` (a RuntimeError)
when there is none, before compiling anything; it never lets a missing driver
crash the process. It then lowers a copy of the module with
`--autodiff-lower-to-gpu` (kernels become cubins inside a fat binary, for the
device's architecture unless `chip=` says otherwise) and loads the host code
with the ExecutionEngine plus `libmlir_cuda_runtime.so`. Functions are called
exactly like `runtime.CompiledModule`'s: the host wrappers take host memory,
copy arguments to the device, launch the kernels and copy the results back
into numpy arrays the runtime allocates.

Compilation alone needs no device: run the pipeline (`autodiff-opt
--autodiff-lower-to-gpu`, or `lower_to_gpu(...)` here) and inspect the
binaries with `gpu_objects(module)` / `cubin_arch(...)`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct

from mlir import ir
from mlir.dialects import gpu as gpu_d
from mlir.execution_engine import ExecutionEngine

from mlir_autodiff import dialects
from mlir_autodiff.cuda_driver import (  # noqa: F401  (re-exported: gpu's public names)
    DRIVER_LIBRARY,
    CudaDevice,
    NoCudaDevice,
    _chip_runs_on,
    cuda_device,
)
from mlir_autodiff.runtime import (
    COMPILE_LOCK,
    CompiledFunction,
    CompiledModule,
    CompileError,
    parsed_module,
    shared_libs,
)
from mlir_autodiff.signatures import (
    function_signatures,
    mark_args_read_only,
    uncallable_functions,
)
from mlir_autodiff.transforms.diagnostics import collect_diagnostics
from mlir_autodiff.transforms.gpu import warpgroup_tiles
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu
from mlir_autodiff.transforms.pipeline import run_pipeline

__all__ = [
    "NoCudaDevice", "CudaDevice", "cuda_device", "CompiledGpuModule", "lower_to_gpu",
    "GpuObject", "gpu_objects", "cubin_arch", "fatbin_cubins", "binary_archs", "FATBIN_MAGIC",
]

def cuda_runtime_library() -> str:
    """Path of the MLIR CUDA runtime wrappers (mgpu* functions) next to the bindings."""
    return os.path.join(os.path.dirname(ir.__file__), "lib", "libmlir_cuda_runtime.so")


def lower_to_gpu(module: ir.Module, **options: object) -> None:
    """Run `--autodiff-lower-to-gpu` with keyword options (chip="sm_90", format="isa",
    stage="kernels", ...) on `module` in place; errors as `run_pipeline`."""
    run_pipeline(module, [LowerToGpu(**options)])  # type: ignore[arg-type]


class CompiledGpuModule(CompiledModule):
    """A module lowered with --autodiff-lower-to-gpu and JIT-loaded with the CUDA runtime.

    `chip` defaults to the device's architecture; `features`, `opt_level`
    (also the host JIT's level) and `block_size` are the pass options.
    Raises `NoCudaDevice` when no driver or device is present (before any
    compilation), `ValueError` when `chip` cannot run on the device, and the
    errors of `CompiledModule` (ir.MLIRError, PipelineError, CompileError).
    `cm["name"]` returns a `CompiledFunction`, called with numpy arrays.
    """

    def __init__(self, module: ir.Module | str, *, chip: str | None = None,
                 features: str = "", opt_level: int = 3, block_size: int = 256,
                 context: ir.Context | None = None, source_name: str | None = None,
                 driver: str = DRIVER_LIBRARY):
        self.device = cuda_device(driver)
        chip = chip or self.device.chip
        if not _chip_runs_on(chip, self.device):
            raise ValueError(
                f"code for {chip} cannot run on device 0 ({self.device.name}, "
                f"{self.device.chip}); compile with chip={self.device.chip}"
            )
        self.pass_ = LowerToGpu(chip=chip, features=features, format="fatbin",
                                opt_level=opt_level, block_size=block_size,
                                wgmma=warpgroup_tiles.ENABLED
                                and warpgroup_tiles.supported_chip(chip))
        with COMPILE_LOCK:
            self._compile_gpu(module, opt_level, context, source_name)
        self._functions: dict[str, CompiledFunction] = {}

    def _compile_gpu(self, module: ir.Module | str, opt_level: int,
                     context: ir.Context | None, source_name: str | None) -> None:
        self.context = context or ir.Context()
        dialects.load(self.context)
        with self.context, ir.Location.unknown():
            self.module = parsed_module(module, source_name)
            self.signatures = function_signatures(self.module)
            self._uncallable = uncallable_functions(self.module)
            mark_args_read_only(self.module)
            run_pipeline(self.module, [self.pass_])
            with collect_diagnostics(self.context) as diags:
                try:
                    self.engine = ExecutionEngine(
                        self.module, opt_level=opt_level,
                        shared_libs=[*shared_libs(), cuda_runtime_library()],
                    )
                except RuntimeError as err:
                    detail = diags.render() or str(err)
                    raise CompileError(f"JIT compilation failed: {detail}") from None
            # Runs the global constructors that load each kernel binary (mgpuModuleLoad).
            self.engine.initialize()


# -- looking into gpu.binary ops -------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
_ELF_MAGIC = b"\x7fELF"
_EM_CUDA = 190
_FATBIN_KIND_PTX, _FATBIN_KIND_ELF = 1, 2


@dataclasses.dataclass(frozen=True)
class GpuObject:
    """One `#gpu.object` of a `gpu.binary`: its binary name, target chip and bytes."""

    binary: str
    chip: str
    format: str  # as the object prints it: "isa" (assembly), "bin", "fatbin", "offload"
    data: bytes


_FORMAT_NAMES = {
    int(gpu_d.CompilationTarget.Offload): "offload",
    int(gpu_d.CompilationTarget.Assembly): "isa",
    int(gpu_d.CompilationTarget.Binary): "bin",
    int(gpu_d.CompilationTarget.Fatbin): "fatbin",
}


def gpu_objects(module: ir.Module | ir.Operation) -> list[GpuObject]:
    """Every object of every `gpu.binary` in `module`, in order."""
    op = module.operation if isinstance(module, ir.Module) else module
    out: list[GpuObject] = []
    for child in op.regions[0].blocks[0].operations:
        if child.operation.name != "gpu.binary":
            continue
        name = ir.StringAttr(child.attributes["sym_name"]).value
        for attr in child.attributes["objects"]:
            obj = gpu_d.ObjectAttr(attr)
            m = re.search(r'chip = "([^"]+)"', str(obj.target))
            out.append(GpuObject(name, m.group(1) if m else "",
                                 _FORMAT_NAMES.get(obj.format, str(obj.format)), obj.object))
    return out


def cubin_arch(elf: bytes) -> int:
    """The SM version (80, 90, ...) an NVIDIA cubin ELF was compiled for.

    Checks the ELF magic and e_machine == EM_CUDA (190); the SM is in e_flags:
    bits 8-15 for the ABI version 8 that CUDA 12.8+ ptxas writes, bits 0-7 before.
    Raises ValueError if `elf` is not a cubin.
    """
    if elf[:4] != _ELF_MAGIC or len(elf) < 0x40:
        raise ValueError("not an ELF file")
    if elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (machine,) = struct.unpack_from("<H", elf, 0x12)
    if machine != _EM_CUDA:
        raise ValueError(f"ELF machine {machine} is not EM_CUDA ({_EM_CUDA})")
    (flags,) = struct.unpack_from("<I", elf, 0x30)
    abi_version = elf[8]
    return (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF


def fatbin_cubins(data: bytes) -> list[tuple[int, bytes]]:
    """The (SM version, cubin bytes) entries of a CUDA fat binary.

    Layout: a 16-byte header (magic 0xBA55ED50, version, header size, payload
    size), then entries, each a header (kind: 1 PTX / 2 ELF, header size,
    payload size, SM version at offset 28) followed by its payload.
    Raises ValueError if `data` is not a fat binary.
    """
    if len(data) < 16:
        raise ValueError("too short for a fat binary")
    magic, _version, header_size, total = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise ValueError(f"bad fat binary magic {magic:#x}")
    out: list[tuple[int, bytes]] = []
    pos, end = header_size, min(len(data), header_size + total)
    while pos + 32 <= end:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, pos)
        (sm,) = struct.unpack_from("<I", data, pos + 28)
        if entry_header == 0:
            break
        body = data[pos + entry_header : pos + entry_header + payload]
        if kind == _FATBIN_KIND_ELF:
            out.append((sm, body))
        pos += entry_header + payload
    return out


def binary_archs(obj: GpuObject) -> list[int]:
    """SM versions of the cubins inside a `bin` or `fatbin` object (cubin_arch of each)."""
    if obj.format == "bin":
        return [cubin_arch(obj.data)]
    if obj.format == "fatbin":
        return [cubin_arch(elf) for _, elf in fatbin_cubins(obj.data)]
    raise ValueError(f"object of {obj.binary} is {obj.format}, not a cubin or fat binary")
