"""LLVM's own command-line options for the CPU code a process compiles.

The ExecutionEngine runs LLVM in this process, so the options `llc` would take on
its command line are set once, through LLVM's C API (`LLVMParseCommandLineOptions`),
before the first CPU compile (`configure_for_cpu`); the native builds (the
persistent cache's entries, `export`) pass the same options to `opt` and `llc`, and
the cache's key names them.

    AUTODIFF_LLVM_OPTIONS="..."   replaces DEFAULT_OPTIONS (space-separated, as on
                                  llc's command line; "" for none). Read once per
                                  process; LLVM ignores an option it does not know.

The default is `-disable-lsr`. Loop strength reduction was 20-65% of LLVM's code
generation time on the benchmark rows (a 1024^3 matmul: 27 of 43 ms; the MLP
train step 22%, the transformer train step 22%), and the code it improves is
written by hand here already: the CPU schedules tile, unroll and vectorize the
loops in MLIR, and the steady state did not move without it (matmul, MLP train
step, softmax; benchmarks/notes/compile-profile.md).

LLVM's options are global to the process, and its NVPTX back end runs loop
strength reduction too, on GPU kernels whose benefit from it is unmeasured: a
process whose first compile lowers to the GPU (`note_gpu_codegen`, called by
`--autodiff-lower-to-gpu`) keeps LLVM's defaults for everything it compiles; one
that compiled CPU code first builds its later GPU kernels with these options.
"""

from __future__ import annotations

import ctypes
import os
import threading

ENV = "AUTODIFF_LLVM_OPTIONS"
DEFAULT_OPTIONS: tuple[str, ...] = ("-disable-lsr",)

_LOCK = threading.Lock()
#: the options set in this process's LLVM (None: not yet decided)
_set: tuple[str, ...] | None = None


def cpu_options() -> tuple[str, ...]:
    """The options CPU code is compiled with: the environment's, else DEFAULT_OPTIONS;
    once set in this process (or left unset after a GPU compile), those."""
    if _set is not None:
        return _set
    raw = os.environ.get(ENV)
    return DEFAULT_OPTIONS if raw is None else tuple(raw.split())


def note_gpu_codegen() -> None:
    """A GPU lowering is about to compile kernels: if no CPU compile has set options
    yet, this process keeps LLVM's defaults (see the module doc)."""
    global _set
    with _LOCK:
        if _set is None:
            _set = ()


def configure_for_cpu() -> tuple[str, ...]:
    """Set `cpu_options()` in this process's LLVM, once (before the first
    ExecutionEngine); returns the options in effect."""
    global _set
    with _LOCK:
        if _set is not None:
            return _set
        options = cpu_options()
        if options and _parse(options):
            _set = options
        else:
            _set = ()
        return _set


def _parse(options: tuple[str, ...]) -> bool:
    """LLVMParseCommandLineOptions in the libLLVM the MLIR bindings use; False where
    that library cannot be found."""
    from mlir import ir

    path = os.path.join(os.path.dirname(os.path.abspath(ir.__file__)), "..", "llvm", "lib",
                        "libLLVM.so")
    try:
        llvm = ctypes.CDLL(os.path.normpath(path))
        parse = llvm.LLVMParseCommandLineOptions
    except (OSError, AttributeError):
        return False
    argv = [b"mlir-autodiff", *(o.encode() for o in options)]
    parse.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p]
    parse.restype = None
    parse(len(argv), (ctypes.c_char_p * len(argv))(*argv), None)
    return True
