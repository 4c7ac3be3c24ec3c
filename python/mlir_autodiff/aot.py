"""Run exported artifacts (`ad.export`) with numpy and the standard library only.

    from mlir_autodiff import aot
    f = aot.load("f.adx")        # a directory written by ad.export
    y = f(x, w)                  # numpy in, numpy out: what jit(f)(x, w) returned

Nothing here imports MLIR, so an artifact runs on any Python >= 3.10 with
numpy, e.g. on a GPU machine without the compiler. The loaded function has
`jit`'s calling convention: the same pytree structure of arguments (static
arguments were fixed at export and are not passed), the same argument
checks (a wrong shape or dtype is the `ValueError` / `TypeError` that names
the argument), donation, results that never alias the arguments, and the
process-wide random generator (`mlir_autodiff.random.manual_seed` seeds
exported code too).

A GPU artifact first asks the CUDA driver for a device and raises
`NoCudaDevice` ("no CUDA device: ...") when there is none, before loading
anything; a CUDA error during a call is raised as `CudaError`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

import numpy as np

from mlir_autodiff import pytree
from mlir_autodiff.argspec import ArgSpec, check_args, dtype_from_json
from mlir_autodiff.call_plan import CallPlan
from mlir_autodiff.cuda_driver import DRIVER_LIBRARY, NoCudaDevice, _chip_runs_on, cuda_device
from mlir_autodiff.native_call import NativeFunction

__all__ = ["load", "load_main", "Artifact", "ArtifactError", "CudaError", "NoCudaDevice",
           "cpu_flags"]

FORMAT = "mlir-autodiff-artifact"
FORMAT_VERSION = 1
#: environment variable naming the CUDA driver library (default libcuda.so.1); our
#: CUDA runtime inside GPU artifacts reads the same variable.
DRIVER_ENV = "AUTODIFF_CUDA_DRIVER"

#: /proc/cpuinfo flags each CPU target needs (x86-64 psABI levels).
CPU_FLAGS: dict[str, tuple[str, ...]] = {
    "x86-64": (),
    "x86-64-v2": ("sse4_2", "ssse3", "popcnt"),
    "x86-64-v3": ("sse4_2", "ssse3", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c",
                  "movbe"),
    "x86-64-v4": ("sse4_2", "ssse3", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "f16c",
                  "movbe", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}


class ArtifactError(RuntimeError):
    """The directory is not a loadable artifact, or this machine cannot run it."""


class CudaError(RuntimeError):
    """The CUDA driver reported an error while a GPU artifact ran."""


def cpu_flags() -> set[str] | None:
    """This CPU's feature flags from /proc/cpuinfo (None where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _openmp_runtime() -> str | None:
    """An OpenMP runtime with LLVM's `__kmpc_*` interface (the candidates of the CPU JIT)."""
    for path in (os.path.join(sys.prefix, "lib", "libiomp5.so"),
                 "/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/llvm-14/lib/libomp.so",
                 "/usr/lib/libomp.so", "/usr/local/lib/libomp.so"):
        if os.path.exists(path):
            return path
    return None


def _spec(d: dict[str, Any]) -> ArgSpec:
    shape = None if d["shape"] is None else tuple(d["shape"])
    return ArgSpec(dtype_from_json(d["dtype"]), shape, d["mlir_type"])


def _aval_spec(d: dict[str, Any]) -> ArgSpec:
    dims = "x".join(str(n) for n in d["shape"])
    dt = dtype_from_json(d["dtype"])
    return ArgSpec(dt, tuple(d["shape"]), f"{dt.name}[{dims}]" if dims else f"{dt.name}[]")


def _read_manifest(path: str) -> dict[str, Any]:
    manifest_path = os.path.join(path, "manifest.json")
    if not os.path.isdir(path):
        raise ArtifactError(f"{path}: no such artifact directory")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: not an artifact (no manifest.json)") from None
    except (OSError, ValueError) as err:
        raise ArtifactError(f"{manifest_path}: unreadable manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{manifest_path}: not an mlir-autodiff artifact manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise ArtifactError(f"{manifest_path}: format version {manifest.get('version')} "
                            f"(this loader reads version {FORMAT_VERSION})")
    return manifest


def load_main(lib_path: str, main: dict[str, Any], name: str, device: str = "cpu",
              where: str | None = None) -> tuple[ctypes.CDLL, NativeFunction]:
    """Load the shared library `lib_path` and return it with its `@main` as a
    `NativeFunction`; `main` is the manifest's "main" part (symbol, parameter and
    result specs, donation, whether it needs OpenMP). Errors are `ArtifactError`s
    naming `where` (default: the library's folder), or `CudaError`."""
    where = where or os.path.dirname(lib_path)
    base = os.path.basename(lib_path)
    if not os.path.exists(lib_path):
        raise ArtifactError(f"{where}: the library {base} is missing")
    try:
        params = [_spec(p) for p in main["params"]]
        results = [_spec(r) for r in main["results"]]
        symbol = main["symbol"]
        donated, result_args = main["donated_params"], main["result_args"]
    except (KeyError, TypeError, ValueError) as err:
        raise ArtifactError(f"{where}: malformed description of @main ({err!r})") from None
    if main.get("openmp"):
        omp = _openmp_runtime()
        if omp is None:
            raise ArtifactError(
                f"{where}: compiled with threads > 1, which needs an OpenMP runtime "
                "(pip install intel-openmp, or apt-get install libomp-dev)")
        # Idle workers spin for KMP_BLOCKTIME after each parallel region (200 ms by
        # default), taking the cores from the caller: 1 ms, as jit sets it.
        os.environ.setdefault("KMP_BLOCKTIME", "1")
        ctypes.CDLL(omp, mode=ctypes.RTLD_GLOBAL)
    try:
        # Loading runs the constructors that load the GPU kernels.
        lib = ctypes.CDLL(os.path.abspath(lib_path))
    except OSError as err:
        raise ArtifactError(f"{where}: cannot load {base}: {err}") from None
    if device == "gpu":
        lib.autodiff_cuda_error.restype = ctypes.c_char_p
        lib.autodiff_cuda_launch_count.restype = ctypes.c_longlong
        _cuda_check(lib, "loading the kernels")
    try:
        fn = getattr(lib, f"_mlir__mlir_ciface_{symbol}")
    except AttributeError:
        raise ArtifactError(f"{where}: the library has no entry point for @{symbol}") from None
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    return lib, NativeFunction(name, params, results, address, donated, result_args, symbol)


def _cuda_check(lib: ctypes.CDLL, what: str) -> None:
    msg = lib.autodiff_cuda_error()
    if msg:
        lib.autodiff_cuda_clear_error()
        raise CudaError(f"CUDA error while {what}: {msg.decode(errors='replace')}")


class Artifact:
    """An exported function, loaded; call it like the jitted function (see the module doc)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        m = self.manifest = _read_manifest(self.path)
        try:
            self.name: str = m["name"]
            target = m["target"]
            self.device: str = target["device"]
            self.in_tree = m["in_tree"]
            self._out_tree = pytree.treedef_from_json(m["out_tree"])
            self._leaf_specs = [_aval_spec(a) for a in m["in_avals"]]
            main = m["main"]
        except (KeyError, TypeError) as err:
            raise ArtifactError(f"{self.path}: malformed manifest ({err!r})") from None
        self._lib: ctypes.CDLL | None = None
        self._main: NativeFunction | None = None
        if main is not None:
            self._check_machine(target)
            self._lib, self._main = load_main(os.path.join(self.path, m["library"]), main,
                                              self.name, self.device, self.path)
        constants: dict[str, np.ndarray] = {}
        if any(kind == "const" for kind, _ in m["plan"]):
            with np.load(os.path.join(self.path, "constants.npz"), allow_pickle=False) as z:
                constants = {k: z[k] for k in z.files}
        plan = [(kind, constants[w] if kind == "const" else w) for kind, w in m["plan"]]
        self._plan = CallPlan(self._out_tree, plan, [s.dtype for s in self._leaf_specs],
                              [dtype_from_json(a["dtype"]) for a in m["out_avals"]], m["remap"],
                              m["returned_donated"], m["uses_rng"])

    # -- loading -------------------------------------------------------------------------

    def _check_machine(self, target: dict[str, Any]) -> None:
        if self.device == "gpu":
            driver = os.environ.get(DRIVER_ENV, DRIVER_LIBRARY)
            device = cuda_device(driver)  # NoCudaDevice when there is none
            chip = target["chip"]
            if not _chip_runs_on(chip, device):
                raise ArtifactError(f"{self.path}: kernels for {chip} cannot run on device 0 "
                                    f"({device.name}, {device.chip}); export with "
                                    f"chip=\"{device.chip}\"")
            return
        need = set(CPU_FLAGS.get(target["cpu"], ())) | set(target.get("cpu_flags", ()))
        have = cpu_flags()
        if have is not None and not need <= have:
            raise ArtifactError(
                f"{self.path}: compiled for {target['cpu']}; this CPU lacks "
                f"{', '.join(sorted(need - have))} (export with a lower cpu= level)")

    # -- calling -------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = pytree.tree_flatten((args, kwargs))
        got = pytree.treedef_to_json(tree)
        if got != self.in_tree:
            want = pytree.treedef_from_json(self.in_tree)
            raise TypeError(f"{self.name}: the exported function takes arguments of structure "
                            f"{want} (positional, keywords), got {tree}")
        values = check_args(self.name, self._leaf_specs, leaves)
        out = self._plan(self._main, values)
        if self.device == "gpu" and self._lib is not None:
            _cuda_check(self._lib, f"running {self.name}")
        return out

    def kernel_launches(self) -> int:
        """GPU kernel launches since the artifact was loaded (0 for CPU artifacts)."""
        if self.device != "gpu" or self._lib is None:
            return 0
        return int(self._lib.autodiff_cuda_launch_count())

    def kernel_ms(self) -> float:
        """Summed kernel time (ms) since load or `reset_counters`, when the process runs
        with AUTODIFF_CUDA_PROFILE=1 (events around each launch); else 0."""
        if self.device != "gpu" or self._lib is None:
            return 0.0
        self._lib.autodiff_cuda_kernel_ms.restype = ctypes.c_double
        return float(self._lib.autodiff_cuda_kernel_ms())

    def launch_ms(self) -> list[float]:
        """Each kernel's time (ms) since load or `reset_counters`, in launch order, when
        the process runs with AUTODIFF_CUDA_PROFILE=1; else []."""
        if self.device != "gpu" or self._lib is None:
            return []
        fn = self._lib.autodiff_cuda_launch_ms
        fn.restype = ctypes.c_longlong
        fn.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_longlong]
        n = int(fn(None, 0))
        out = (ctypes.c_double * max(n, 1))()
        n = int(fn(out, n))
        return list(out[:n])

    def reset_counters(self) -> None:
        """Zero the launch count and the kernel time."""
        if self.device == "gpu" and self._lib is not None:
            self._lib.autodiff_cuda_reset_counters()

    def __repr__(self) -> str:
        return f"<aot {self.name} ({self.device}) from {self.path}>"


def load(path: str | os.PathLike[str]) -> Artifact:
    """Load the artifact directory `path` written by `ad.export`."""
    return Artifact(path)
