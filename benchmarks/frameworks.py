"""Per-process set-up shared by the benchmark rows: thread counts, our jit, the FMA peak.

A thread count is a property of the process: XLA reads its flags when jax
is imported, BLAS libraries read theirs when loaded. So run.py times each
thread count in a fresh worker process that calls `configure_process`
before importing any framework: it pins the process to that many cores
(sched_setaffinity, which every framework's thread pool then respects) and
sets each framework's own knob as well.

Our side's knob: `jit(..., threads=N)` when the library's jit has that
parameter, and the environment variable AUTODIFF_CPU_THREADS in any case
(read by the library where it supports it). `ours_threads_support()` says
which of the two the installed library honours, so the table can say when
"ours, 2 threads" actually ran on one.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: Environment variable the worker sets for our library's thread count.
THREADS_ENV = "AUTODIFF_CPU_THREADS"


class Skipped(Exception):
    """A framework that is deliberately not run on a row (the message says why)."""


def thread_env(threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker process that times with `threads` threads."""
    env = dict(os.environ if base is None else base)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", THREADS_ENV):
        env[var] = str(threads)
    flags = env.get("XLA_FLAGS", "")
    if threads == 1:
        # XLA's CPU client: no Eigen thread pool, one intra-op thread.
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    env["XLA_FLAGS"] = flags.strip()
    # numpy's OpenBLAS threads spin 2^28 cycles (~0.1 s) after each call and
    # take a core from whichever framework is timed next; 2^4: they park at once.
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    return env


def configure_process(threads: int) -> list[int]:
    """Pin this process to `threads` cores; call before importing jax or torch.

    Returns the cores used. Exported to the environment too, so libraries
    loaded later (BLAS, OpenMP) size their pools to match.
    """
    os.environ.update(thread_env(threads, dict(os.environ)))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) > threads:
        cores = cores[:threads]
        os.sched_setaffinity(0, cores)
    return cores


def configured_threads() -> int:
    return int(os.environ.get(THREADS_ENV, "1"))


def configure_torch(torch: Any) -> None:
    """torch's intra-op pool (the environment alone is not always read)."""
    torch.set_num_threads(configured_threads())


@functools.cache
def ours_threads_support() -> str:
    """How our library takes a thread count: "jit(threads=)", "env" or "" (not at all)."""
    import mlir_autodiff as ad

    if "threads" in inspect.signature(ad.jit).parameters:
        return "jit(threads=)"
    from mlir_autodiff import transforms

    folders = [Path(inspect.getfile(ad)).parent, *map(Path, transforms.__path__)]
    for source in (f for folder in folders for f in folder.glob("*.py")):
        if THREADS_ENV in source.read_text():
            return "env"
    return ""


def ours_jit(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """`mlir_autodiff.jit(fn)` with this process's thread count, where supported."""
    import mlir_autodiff as ad

    if ours_threads_support() == "jit(threads=)":
        kwargs.setdefault("threads", configured_threads())
    return ad.jit(fn, **kwargs)


# ----------------------------------------------------------------------------- FMA peak

#: Iterations of the peak kernel's loop; each does `accumulators` vector FMAs.
PEAK_ITERATIONS = 1 << 18


def _peak_mlir(lanes: int, accumulators: int, iterations: int) -> str:
    """`@peak`: `accumulators` independent chains of `x = fma(x, a, b)` on vector<lanes>.

    Independent chains hide the FMA latency on every FMA port; nothing else
    is in the loop, so its rate is the core's FMA throughput.
    """
    v = f"vector<{lanes}xf32>"
    t = f"tensor<{lanes}xf32>"
    names = [f"%x{i}" for i in range(accumulators)]
    init = ", ".join(f"{n} = %va" for n in names)
    body = "\n".join(f"    %y{i} = vector.fma {n}, %va, %vb : {v}" for i, n in enumerate(names))
    yields = ", ".join(f"%y{i}" for i in range(accumulators))
    sums = [f"%r#{i}" for i in range(accumulators)]
    adds = []
    while len(sums) > 1:
        nxt = []
        for j in range(0, len(sums) - 1, 2):
            name = f"%s{len(adds)}"
            adds.append(f"  {name} = arith.addf {sums[j]}, {sums[j + 1]} : {v}")
            nxt.append(name)
        if len(sums) % 2:
            nxt.append(sums[-1])
        sums = nxt
    add_text = "\n".join(adds)
    types = ", ".join([v] * accumulators)
    return f"""
func.func @peak(%a: {t}, %b: {t}) -> {t} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant {iterations} : index
  %pad = arith.constant 0.0 : f32
  %va = vector.transfer_read %a[%c0], %pad : {t}, {v}
  %vb = vector.transfer_read %b[%c0], %pad : {t}, {v}
  %r:{accumulators} = scf.for %i = %c0 to %n step %c1 iter_args({init}) -> ({types}) {{
{body}
    scf.yield {yields} : {types}
  }}
{add_text}
  %e = tensor.empty() : {t}
  %w = vector.transfer_write {sums[0]}, %e[%c0] : {v}, {t}
  return %w : {t}
}}
"""


def measure_fma_peak(repeats: int = 15) -> tuple[float, int]:
    """(GFLOP/s, vector bits): one core's f32 FMA throughput, best of `repeats` calls.

    Compiled by our own CPU pipeline at the host's widest vector width, so
    "% of peak" compares our kernels with what the same JIT can reach.
    """
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.cpu.parameters import host_vector_bits

    bits = host_vector_bits()
    lanes = bits // 32
    accumulators = 16 if bits >= 512 else 12
    fn = CompiledModule(_peak_mlir(lanes, accumulators, PEAK_ITERATIONS))["peak"]
    a = np.full(lanes, 0.999, np.float32)
    b = np.full(lanes, 0.001, np.float32)
    out = fn(a, b)
    if not np.allclose(out, accumulators * 1.0, rtol=1e-2):  # x -> 1, the fixed point
        raise RuntimeError(f"FMA peak kernel computed {out[0]}, expected {accumulators}")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(a, b)
        best = min(best, time.perf_counter() - start)
    flops = 2.0 * lanes * accumulators * PEAK_ITERATIONS
    return flops / best / 1e9, bits
