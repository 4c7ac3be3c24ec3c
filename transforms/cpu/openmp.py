"""OpenMP for `threads` > 1: the pipeline pieces, and the runtime library the JIT must load."""

from __future__ import annotations

import os
import sys

from mlir import ir


def openmp_lowering(threads: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(after bufferization, after LLVM lowering) pipeline pieces for `threads` > 1.

    `scf.forall` -> `scf.parallel` -> `omp.parallel` + `omp.wsloop`; the code
    then calls LLVM's OpenMP runtime (`__kmpc_*`), which the ExecutionEngine
    must load: `openmp_runtime_library()`.
    """
    if threads <= 1:
        return (), ()
    return (("scf-forall-to-parallel", f"convert-scf-to-openmp{{num-threads={threads}}}"),
            ("convert-openmp-to-llvm", "reconcile-unrealized-casts"))


def _openmp_candidates() -> list[str]:
    """The OpenMP runtimes looked for, in order: the one the package depends on
    (PyPI's `intel-openmp`, installed into the environment's lib/), then LLVM's
    libomp where a system package put it (Debian: `apt-get install libomp-dev`).
    Both implement the `__kmpc_*` entry points that MLIR's OpenMP lowering
    calls (LLVM's libomp is the open-sourced Intel runtime)."""
    return [os.path.join(sys.prefix, "lib", "libiomp5.so"),
            "/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/llvm-14/lib/libomp.so",
            "/usr/lib/libomp.so", "/usr/local/lib/libomp.so"]


def openmp_runtime_library() -> str | None:
    """Path of an OpenMP runtime with LLVM's `__kmpc_*` interface, if installed.

    Looked up at fixed paths (`_openmp_candidates`), not on the dynamic
    loader's search path: a machine without one runs single-threaded code
    only (threads > 1 is then a compile error, see `openmp_shared_libs`).
    """
    for path in _openmp_candidates():
        if os.path.exists(path):
            return path
    return None


class OpenMPRuntimeMissing(RuntimeError):
    """Lowered code calls the OpenMP runtime, which is not installed."""


def openmp_shared_libs(module: ir.Module | ir.Operation) -> list[str]:
    """The OpenMP runtime as an ExecutionEngine shared library if lowered `module` uses it.

    Code lowered with threads > 1 contains `omp.*` ops whose LLVM
    translation calls `__kmpc_*` functions of the OpenMP runtime. Idle OpenMP
    workers spin for KMP_BLOCKTIME (default 200 ms) after each parallel
    region and take the cores from the rest of the process (numpy, the
    Python caller), so it defaults to 1 ms here: the regions of one call
    still find their workers awake.
    """
    op = module.operation if isinstance(module, ir.Module) else module
    uses_omp = False

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal uses_omp
        if o.name.startswith("omp."):
            uses_omp = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    if not uses_omp:
        return []
    path = openmp_runtime_library()
    if path is None:
        raise OpenMPRuntimeMissing(
            "code compiled with threads > 1 needs an OpenMP runtime, which is not installed "
            "(pip install intel-openmp, or Debian/Ubuntu: apt-get install libomp-dev); "
            "use threads=1")
    os.environ.setdefault("KMP_BLOCKTIME", "1")
    return [path]
