"""Side-by-side timings: our jit against jax.jit, PyTorch (eager, torch.compile) and numpy.

    python benchmarks/run.py              # issue 7's rows, 1 and 2 threads (~10 minutes)
    python benchmarks/run.py --quick      # small sizes, 1 thread, no torch.compile (< 1 minute)
    python benchmarks/run.py --filter matmul --threads 1 --json out.json

Each row is a `Case` in `CASES`: a name, an input generator and one builder
per framework. A builder takes the numpy inputs and returns a zero-argument
thunk that performs one call and returns its result in the framework's own
form (jax thunks block until the result is ready; inputs are moved to the
framework before timing, so no thunk times a host-to-device copy; results
are flattened into one numpy array for checking only, outside the timed
calls). Frameworks that are not installed, or
builders left as None, show as "-"; a builder may raise `Skipped` with the
reason, which the notes print. Kernel rows are defined here; gradient rows
in grad_cases.py (MLP, per-sample gradients, HVP) and adbench_cases.py
(ADBench GMM and LSTM).

Threads: every thread count (`--threads 1,2`) is timed in its own worker
process (`--worker`), pinned to that many cores before any framework is
imported (frameworks.configure_process: XLA flags, BLAS/OpenMP variables,
torch.set_num_threads, our AUTODIFF_CPU_THREADS / jit(threads=)). The parent
merges the workers' results into one report.

Method: every result is checked — before it is timed against numpy where the
row has a numpy builder, otherwise (gradients) after timing against jax's
result, or torch's without jax; a wrong result is reported and never timed
or shown as if right. Each thunk is warmed up, then timed in samples of
enough inner iterations to last at least `--min-time` seconds; the reported
time is the median over `--repeats` samples (time.perf_counter). The samples
of one row's frameworks are interleaved (one sample of each per round, in a
shuffled order, each after a short busy gap and a warm-up), so that a slow
phase of the shared machine is met by all of them rather than decides a
ratio (`time_thunks`); a gradient row shares its rounds with its primal row,
for time(grad f) / time(f). The first call's time minus the
steady-state time is reported as compile time (tracing, lowering and JIT for
ours; tracing and XLA for jax; dynamo and inductor for torch.compile); each
worker starts with an empty persistent compilation cache of ours (a temporary
AUTODIFF_CACHE_DIR), as jax's is (none configured), so a first call measures
the compiler and never an entry of an earlier run.
Ratios are ours / theirs: above 1 means ours is slower. Matmul rows show
GFLOP/s and the percentage of one core's f32 FMA peak, measured at the start
of each worker with a register-resident FMA loop compiled by our own
pipeline (frameworks.measure_fma_peak). The report ends with the geometric
mean of ours/jax per thread count and one PASS/FAIL line per acceptance
criterion of issue 7 (over the rows marked `acceptance`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frameworks import (
    Skipped,
    configure_process,
    configure_torch,
    measure_fma_peak,
    ours_jit,
    ours_threads_support,
    thread_env,
)

Thunk = Callable[[], Any]
Builder = Callable[[Sequence[np.ndarray]], Thunk]

FRAMEWORKS = ("ours", "jax", "numpy", "torch", "torch_compile")

#: Issue 7's acceptance thresholds.
MAX_RATIO_TO_JAX = 1.0
MAX_GEOMEAN_TO_JAX = 0.8
MIN_MATMUL_PEAK_FRACTION = 0.65


@dataclasses.dataclass
class Case:
    """One benchmark row."""

    name: str
    size: str  # shown in the table, e.g. "1024x1024"
    inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    ours: Builder | None = None
    jax: Builder | None = None
    numpy: Builder | None = None
    torch: Builder | None = None
    torch_compile: Builder | None = None
    flops: float | None = None  # per call: the table shows GF/s and % of peak
    bytes: float | None = None  # per call, when flops is None: the table shows GB/s
    rtol: float = 1e-4  # against the reference (numpy, else jax)
    atol: float = 1e-5
    quick: bool = True  # part of a --quick run
    full: bool = True  # part of a full run
    #: for a gradient row: the name of the primal row (same size), for time(grad)/time(f)
    primal: str | None = None
    #: a row of issue 7's acceptance table (ours <= 1.0x jax, in the geometric mean)
    acceptance: bool = False
    #: issue 7's bound on ours' time(grad f) / time(f) for this row
    grad_ratio_limit: float | None = None
    #: turns a thunk's raw result into the array that is checked (outside the
    #: timed calls); default `to_numpy`
    output: Callable[[Any], np.ndarray] | None = None

    def builder(self, framework: str) -> Builder | None:
        return getattr(self, framework)

    @property
    def key(self) -> str:
        return f"{self.name} {self.size}"


CASES: list[Case] = []


def register(case: Case) -> Case:
    CASES.append(case)
    return case


def _optional(module: str) -> Any | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


# -- framework adapters for the kernel rows -----------------------------------------------------


def ours_kernel(make: Callable[[Any], Callable[..., Any]]) -> Builder:
    """Our side: `make(mlir_autodiff.numpy, mlir_autodiff.nn)` returns the function to jit."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        import mlir_autodiff.numpy as anp
        from mlir_autodiff import nn

        fn = ours_jit(make(anp, nn))
        args = tuple(inputs)
        return lambda: fn(*args)

    return build


def jax_kernel(make: Callable[[Any, Any], Callable[..., Any]]) -> Builder:
    """jax side: `make(jax.numpy, jax.nn)` returns the function, which is jax.jit-compiled."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        jax = importlib.import_module("jax")
        fn = jax.jit(make(jax.numpy, jax.nn))
        args = [jax.device_put(x) for x in inputs]
        return lambda: fn(*args).block_until_ready()

    return build


def numpy_kernel(fn: Callable[..., Any]) -> Builder:
    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        args = tuple(inputs)
        return lambda: fn(*args)

    return build


def torch_kernel(make: Callable[[Any], Callable[..., Any]], compiled: bool = False) -> Builder:
    """torch side: `make(torch)` returns the function (no grad; eager or torch.compile)."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        torch = importlib.import_module("torch")
        configure_torch(torch)
        fn = make(torch)
        if compiled:
            fn = torch.compile(fn)
        args = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]

        def call() -> Any:
            with torch.no_grad():
                return fn(*args)

        return call

    return build


def _kernel_case(name: str, size: str, inputs: Callable[..., tuple[np.ndarray, ...]],
                 ours: Callable[[Any, Any], Callable[..., Any]],
                 jax: Callable[[Any, Any], Callable[..., Any]],
                 numpy: Callable[..., Any], torch: Callable[[Any], Callable[..., Any]],
                 **kwargs: Any) -> Case:
    return register(Case(name=name, size=size, inputs=inputs, ours=ours_kernel(ours),
                         jax=jax_kernel(jax), numpy=numpy_kernel(numpy),
                         torch=torch_kernel(torch), torch_compile=torch_kernel(torch, True),
                         **kwargs))


# -- the kernel rows -----------------------------------------------------------------------------


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _np_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# (m, k, n, in --quick, in the full run)
for _m, _k, _n, _quick, _full in ((64, 64, 64, True, False), (512, 512, 512, False, True),
                                  (1024, 1024, 1024, False, True),
                                  (128, 784, 512, False, True)):
    _kernel_case(
        "matmul", f"{_m}^3" if _m == _k == _n else f"{_m}x{_k}x{_n}",
        inputs=lambda rng, m=_m, k=_k, n=_n: (_f32(rng, m, k), _f32(rng, k, n)),
        ours=lambda anp, nn: lambda a, b: a @ b, jax=lambda jnp, jnn: lambda a, b: a @ b,
        numpy=lambda a, b: a @ b, torch=lambda torch: lambda a, b: a @ b,
        flops=2.0 * _m * _k * _n, rtol=1e-3, atol=1e-3, quick=_quick, full=_full,
        acceptance=_full,
    )

for _n, _quick, _full in ((4096, True, False), (1 << 22, False, True)):
    _kernel_case(
        "tanh(x*y+z)", f"{_n}",
        inputs=lambda rng, n=_n: (_f32(rng, n), _f32(rng, n), _f32(rng, n)),
        ours=lambda anp, nn: lambda x, y, z: anp.tanh(x * y + z),
        jax=lambda jnp, jnn: lambda x, y, z: jnp.tanh(x * y + z),
        numpy=lambda x, y, z: np.tanh(x * y + z),
        torch=lambda torch: lambda x, y, z: torch.tanh(x * y + z),
        bytes=4.0 * 4 * _n, quick=_quick, full=_full, acceptance=_full,
    )

for _rows, _cols, _quick, _full in ((64, 128, True, False), (4096, 1024, False, True)):
    _kernel_case(
        "softmax (rows)", f"{_rows}x{_cols}",
        inputs=lambda rng, r=_rows, c=_cols: (_f32(rng, r, c),),
        ours=lambda anp, nn: lambda a: nn.softmax(a, axis=-1),
        jax=lambda jnp, jnn: lambda a: jnn.softmax(a, axis=-1),
        numpy=_np_softmax, torch=lambda torch: lambda a: torch.softmax(a, dim=-1),
        bytes=2.0 * 4 * _rows * _cols, rtol=1e-4, atol=1e-6, quick=_quick, full=_full,
        acceptance=_full,
    )

import adbench_cases
import cnn_cases
import grad_cases
import transformer_cases

grad_cases.register_cases(Case, register)
adbench_cases.register_cases(Case, register)
cnn_cases.register_cases(Case, register)
transformer_cases.register_cases(Case, register)


# -- timing --------------------------------------------------------------------------------------


#: Seconds between two samples of different frameworks in `time_thunks`: the
#: thread pools of the framework timed before (Eigen's, torch's OpenMP, our
#: libomp with KMP_BLOCKTIME=1 ms) stop spinning and park well within it.
#: OpenBLAS's threads spin far longer (2^28 cycles); thread_env shortens it.
#: The gap is a busy wait: after a 50 ms sleep the first calls of a 4M-element
#: kernel here ran 1.7x slower (the idle vCPU is descheduled and comes back
#: with cold caches), enough to move a median.
SWITCH_GAP = 0.05


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _calls_per_sample(thunk: Thunk, min_time: float) -> int:
    """Warm `thunk` up; the number of calls that lasts about `min_time` seconds."""
    start = time.perf_counter()
    thunk()  # warm-up (the first call, which compiled, has already run)
    if time.perf_counter() - start < min_time:
        thunk()
    n, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(n):
            thunk()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / 4 or n >= 1 << 20:
            break
        n *= 4
    return max(1, int(n * min_time / max(elapsed, 1e-9)))


def time_thunks(thunks: dict[Any, Thunk], *, min_time: float, repeats: int,
                gap: float = SWITCH_GAP) -> dict[Any, float]:
    """Median seconds per call of each thunk over `repeats` samples of >= `min_time` s.

    The samples are interleaved, one of each thunk per round, so every
    framework meets the same phases of a shared machine (on these 2-vCPU
    hosts one kernel's time moves by 1.5x over minutes; timed one framework
    after another, those phases became the ratios). Before each sample the
    previous thunk's thread pool gets `gap` seconds to park, and this thunk
    runs untimed for a quarter of a sample, so it starts with its own
    caches and thread pool warm. The order within a round is shuffled (with
    a fixed seed): a framework can still slow the one after it (numpy's
    tanh before ours' made ours' next 30 calls of tanh(x*y+z) 1.2-1.5x
    slower, with no page faults), and in a fixed order that would always
    fall on the same one.
    """
    inner = {fw: _calls_per_sample(t, min_time) for fw, t in thunks.items()}
    samples: dict[Any, list[float]] = {fw: [] for fw in thunks}
    order, shuffle = list(thunks), random.Random(0).shuffle
    for _ in range(repeats):
        shuffle(order)
        for fw in order:
            thunk = thunks[fw]
            if len(thunks) > 1:
                _busy_wait(gap)
                for _ in range(max(1, inner[fw] // 4)):
                    thunk()
            start = time.perf_counter()
            for _ in range(inner[fw]):
                thunk()
            samples[fw].append((time.perf_counter() - start) / inner[fw])
    return {fw: statistics.median(v) for fw, v in samples.items()}


def to_numpy(value: Any) -> np.ndarray:
    """A result as one numpy array: a tuple or list (e.g. a loss and the
    updated parameters) becomes the float64 concatenation of its leaves."""
    if isinstance(value, (tuple, list)):
        return np.concatenate([to_numpy(v).astype(np.float64).ravel() for v in value])
    if hasattr(value, "detach"):  # torch
        value = value.detach().numpy()
    return np.asarray(value)


@dataclasses.dataclass
class Row:
    """One case's results in one worker (one thread count)."""

    case: Case
    seconds: dict[str, float | None] = dataclasses.field(default_factory=dict)
    first_call: dict[str, float] = dataclasses.field(default_factory=dict)
    problems: dict[str, str] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.case.name, "size": self.case.size, "seconds": self.seconds,
                "first_call": self.first_call, "problems": self.problems,
                "skipped": self.skipped}


#: Build order within a row (the timed samples are interleaved: time_thunks).
TIMING_ORDER = ("numpy", "ours", "torch", "torch_compile", "jax")

#: Reference for rows without a numpy builder, in order of preference.
CROSS_CHECK_ORDER = ("jax", "torch", "torch_compile")


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"


def _build_one(case: Case, fw: str, x: Sequence[np.ndarray], row: Row,
               reference: np.ndarray | None) -> tuple[Thunk, np.ndarray] | None:
    """Build, call once (the first call's time is kept) and check: the thunk and its result.

    A result that disagrees with `reference` (numpy's) is reported, and not timed.
    """
    build = case.builder(fw)
    if build is None:
        return None
    try:
        start = time.perf_counter()
        thunk = build(x)
        result = (case.output or to_numpy)(thunk())
        row.first_call[fw] = time.perf_counter() - start
    except Skipped as err:
        row.skipped[fw] = str(err)
        return None
    except Exception as err:  # noqa: BLE001 - a framework that cannot run a row: say so, go on
        row.problems[fw] = _first_line(err)
        return None
    wrong = _agrees(result, reference, case) if reference is not None else None
    if wrong:
        row.problems[fw] = f"WRONG RESULT ({wrong} vs numpy)"
        return None
    return thunk, result


def _agrees(result: np.ndarray, ref: np.ndarray, case: Case) -> str | None:
    """None if `result` matches `ref` within the case's tolerance, else the reason."""
    if result.shape != ref.shape and result.size != ref.size:
        return f"shape {result.shape} vs {ref.shape}"
    result = result.reshape(ref.shape)
    if np.allclose(result, ref, rtol=case.rtol, atol=case.atol):
        return None
    err = float(np.max(np.abs(result.astype(np.float64) - ref)))
    return f"max abs error {err:.3g}"


def run_cases(cases: Sequence[Case], frameworks: Sequence[str], *, min_time: float,
              repeats: int, seed: int = 0, log: Any = sys.stderr) -> list[Row]:
    """Row by row: build and check every framework's result, then time them together.

    A gradient row is timed together with its primal row (`Case.primal`), so
    that time(grad f) / time(f) divides two times taken in the same minutes.
    """
    rows = [Row(c) for c in cases]
    for group in _timing_groups(cases):
        thunks: dict[tuple[int, str], Thunk] = {}
        for i in group:
            for fw, thunk in _build_row(cases[i], rows[i], frameworks, seed, log).items():
                thunks[i, fw] = thunk
        times = time_thunks(thunks, min_time=min_time, repeats=repeats)
        for (i, fw), t in times.items():
            rows[i].seconds[fw] = t
    return rows


def _timing_groups(cases: Sequence[Case]) -> list[list[int]]:
    """Indices of `cases` to time together: each primal row with its gradient rows."""
    by_key = {c.key: i for i, c in enumerate(cases)}
    owner = [by_key.get(f"{c.primal} {c.size}", i) if c.primal else i
             for i, c in enumerate(cases)]
    groups: dict[int, list[int]] = {}
    for i in range(len(cases)):
        groups.setdefault(owner[i], []).append(i)
    return sorted(groups.values())


def _build_row(case: Case, row: Row, frameworks: Sequence[str], seed: int,
               log: Any) -> dict[str, Thunk]:
    """Every framework's thunk for `case` whose result checked out."""
    try:
        x = case.inputs(np.random.default_rng(seed))
    except Skipped as err:
        row.skipped.update({fw: str(err) for fw in frameworks})
        return {}
    reference = to_numpy(case.numpy(x)()) if case.numpy else None
    thunks: dict[str, Thunk] = {}
    results: dict[str, np.ndarray] = {}
    for fw in sorted(frameworks, key=TIMING_ORDER.index):
        log.write(f"  {fw}: {case.key}\n")
        log.flush()
        row.seconds[fw] = None
        built = _build_one(case, fw, x, row, reference)
        if built is not None:
            thunks[fw], results[fw] = built
    if reference is None and results:
        for fw in _cross_check(case, row, results):
            del thunks[fw]
    return thunks


def _cross_check(case: Case, row: Row, results: dict[str, np.ndarray]) -> list[str]:
    """Rows without numpy: every framework against the first of CROSS_CHECK_ORDER that ran.

    Returns the frameworks whose results disagree (reported; they are not timed).
    """
    ref_fw = next((fw for fw in CROSS_CHECK_ORDER if fw in results), None)
    if ref_fw is None:
        if "ours" in results:
            row.problems.setdefault("ours", "not cross-checked (no reference framework ran)")
        return []
    ref = results[ref_fw].astype(np.float64)
    wrong_fws = []
    for fw, result in results.items():
        wrong = _agrees(result, ref, case) if fw != ref_fw else None
        if wrong:
            row.problems[fw] = f"WRONG RESULT ({wrong} vs {ref_fw})"
            wrong_fws.append(fw)
    return wrong_fws


# -- one worker (one thread count) ---------------------------------------------------------------


def _versions(frameworks: Sequence[str]) -> str:
    versions = [f"numpy {np.__version__}"]
    for fw in ("jax", "torch"):
        mod = _optional(fw) if fw in frameworks or f"{fw}_compile" in frameworks else None
        versions.append(f"{fw} {mod.__version__}" if mod else f"{fw} absent")
    return ", ".join(versions)


def worker(cases: Sequence[Case], frameworks: Sequence[str], threads: int, *,
           min_time: float, repeats: int) -> dict[str, Any]:
    """Time `cases` in this process, which configure_process pinned to `threads` cores."""
    peak, bits = (measure_fma_peak() if "ours" in frameworks else (None, None))
    rows = run_cases(cases, frameworks, min_time=min_time, repeats=repeats)
    return {"threads": threads, "peak_gflops": peak, "vector_bits": bits,
            "ours_threads": ours_threads_support() if "ours" in frameworks else "",
            "versions": _versions(frameworks), "rows": [r.to_json() for r in rows],
            "recreated": recreated_grad_loop(frameworks)}


#: ours: enough iterations to see a periodic cost (a context replaced every
#: SHARED_CONTEXT_USES new traces was one); jax recompiles each iteration (~0.1-0.2 s),
#: so it gets fewer
RECREATED_ITERATIONS = 100
RECREATED_ITERATIONS_JAX = 10
MAX_RECREATED_MS = 5.0


def recreated_grad_loop(frameworks: Sequence[str]) -> dict[str, list[float]]:
    """Milliseconds of each iteration of `jit(grad(h))(x)` built anew in a loop.

    A user who writes `jax.jit(jax.grad(loss))(params)` inside a training loop
    gets a new function object each time; the first iteration compiles, the
    later ones must find the compiled code by what was traced (issue 21).
    """
    x = np.linspace(-1.0, 1.0, 256)
    out: dict[str, list[float]] = {}
    if "ours" in frameworks:
        import mlir_autodiff as ad
        import mlir_autodiff.numpy as anp

        def h_ours(v: Any) -> Any:
            return anp.sum(anp.tanh(v) ** 2 + 0.5 * v)

        cpu: list[float] = []
        out["ours"] = _loop_ms(lambda: ad.jit(ad.grad(h_ours))(x), cpu=cpu)
        # the same iterations' CPU time (this thread): on a loaded machine the wall
        # time above mostly measures the other jobs; this tells the code's own share
        out["ours cpu"] = cpu
    if "jax" in frameworks:
        jax = _optional("jax")
        jnp = _optional("jax.numpy")
        if jax is not None and jnp is not None:
            def h_jax(v: Any) -> Any:
                return jnp.sum(jnp.tanh(v) ** 2 + 0.5 * v)

            out["jax"] = _loop_ms(lambda: np.asarray(jax.jit(jax.grad(h_jax))(x)),
                                  RECREATED_ITERATIONS_JAX)
    return out


def _loop_ms(step: Callable[[], Any], iterations: int = 0,
             cpu: list[float] | None = None) -> list[float]:
    """Wall milliseconds of each call of `step` (and its thread's CPU ms into `cpu`)."""
    times = []
    for _ in range(iterations or RECREATED_ITERATIONS):
        c0, t0 = time.thread_time(), time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
        if cpu is not None:
            cpu.append((time.thread_time() - c0) * 1e3)
    return times


def recreated_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """The re-created-gradient table and its PASS/FAIL line (issue 21)."""
    lines, verdicts = [], []
    for r in results:
        loops = r.get("recreated") or {}
        if "ours" not in loops:
            continue
        lines.append(f"re-created jit(grad(h)) in a loop, {r['threads']}T, ms per iteration "
                     f"(first | median of the rest | max of the rest):")
        for fw, ms in loops.items():
            rest = sorted(ms[1:])
            lines.append(f"  {fw:<8} {ms[0]:9.1f} | {rest[len(rest) // 2]:7.2f} | {rest[-1]:7.2f}")
        slow = [f"{v:.2f} ms" for v in loops["ours"][1:] if v >= MAX_RECREATED_MS]
        verdicts.append(_verdict(f"re-created grad(h): iterations 2+ < {MAX_RECREATED_MS:.0f} ms "
                                 f"each, {r['threads']}T", slow))
    return lines + ([""] + verdicts if verdicts else [])


def _spawn_worker(threads: int, argv: Sequence[str]) -> dict[str, Any]:
    """Run this script as a worker for `threads` in a fresh process; its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker",
               "--threads", str(threads), "--json", out]
        # Our persistent compilation cache starts empty in each worker, as jax's (none
        # configured) does: the first calls measure the compiler, not entries of an
        # earlier run (its entries are still built, in the background, and then used).
        env = {**thread_env(threads), "AUTODIFF_CACHE_DIR": os.path.join(tmp, "cache")}
        proc = subprocess.run(cmd, check=False, env=env)
        if proc.returncode not in (0, 1) or not os.path.exists(out):
            raise RuntimeError(f"benchmark worker for {threads} thread(s) failed "
                               f"(exit {proc.returncode})")
        with open(out) as f:
            return json.load(f)


# -- the report ----------------------------------------------------------------------------------


def _ms(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 1 else f"{t * 1e3:.0f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _s(t: float | None) -> str:
    return "-" if t is None else f"{t:.2f}"


def _grid(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    """Rows as aligned text: the first two columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def fmt(cols: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cols, widths))).rstrip()

    return [fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]


@dataclasses.dataclass
class Column:
    """One worker's results, indexed by case key."""

    threads: int
    peak: float | None
    rows: dict[str, dict[str, Any]]

    def seconds(self, key: str, fw: str) -> float | None:
        return self.rows.get(key, {}).get("seconds", {}).get(fw)

    def compile_seconds(self, key: str, fw: str) -> float | None:
        first = self.rows.get(key, {}).get("first_call", {}).get(fw)
        t = self.seconds(key, fw)
        return None if first is None or t is None else max(first - t, 0.0)

    def grad_ratio(self, case: Case, fw: str) -> float | None:
        if not case.primal:
            return None
        return _ratio(self.seconds(case.key, fw), self.seconds(f"{case.primal} {case.size}", fw))


def _rate(case: Case, t: float | None, peak: float | None) -> tuple[str, str]:
    """(GF/s or GB/s, % of the FMA peak) of ours."""
    if not t:
        return "-", "-"
    if case.flops:
        gf = case.flops / t / 1e9
        return f"{gf:.1f} GF/s", "-" if not peak else f"{100 * gf / peak:.0f}%"
    if case.bytes:
        return f"{case.bytes / t / 1e9:.2f} GB/s", "-"
    return "-", "-"


def column_table(cases: Sequence[Case], col: Column, frameworks: Sequence[str]) -> list[str]:
    """Times, ratios, rates and compile times of one thread count."""
    others = [fw for fw in frameworks if fw != "ours"]
    head = ["case", "size", *(f"{fw} ms" for fw in frameworks)]
    if "ours" in frameworks:
        head += [f"ours/{fw}" for fw in others if fw != "numpy"]
        head += ["ours rate", "% peak"]
    body = []
    for c in cases:
        line = [c.name, c.size, *(_ms(col.seconds(c.key, fw)) for fw in frameworks)]
        if "ours" in frameworks:
            ours = col.seconds(c.key, "ours")
            line += [_x(_ratio(ours, col.seconds(c.key, fw))) for fw in others if fw != "numpy"]
            peak = col.peak * col.threads if col.peak else None
            line += list(_rate(c, ours, peak))
        body.append(line)
    return _grid(head, body)


def compile_table(cases: Sequence[Case], col: Column, frameworks: Sequence[str]) -> list[str]:
    """First call minus steady state, per framework that compiles."""
    fws = [fw for fw in ("ours", "jax", "torch_compile") if fw in frameworks]
    body = [[c.name, c.size, *(_s(col.compile_seconds(c.key, fw)) for fw in fws)]
            for c in cases]
    return _grid(["compile seconds (first call - steady)", "size", *fws], body) if fws else []


def grad_table(cases: Sequence[Case], col: Column, frameworks: Sequence[str]) -> list[str]:
    fws = [fw for fw in frameworks if fw != "numpy"]
    body = [[c.name, c.size, *(_x(col.grad_ratio(c, fw)) for fw in fws)]
            for c in cases if c.primal]
    return _grid(["time(grad f) / time(f)", "size", *fws], body) if body else []


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def acceptance(cases: Sequence[Case], cols: Sequence[Column],
               frameworks: Sequence[str] = FRAMEWORKS) -> list[str]:
    """Summary ratios per thread count and one PASS/FAIL line per criterion of issue 7."""
    rows = [c for c in cases if c.acceptance]
    if not rows or "ours" not in frameworks:
        return []
    if "jax" not in frameworks:
        return ["acceptance: not evaluated (jax was not part of this run)"]
    head = ["acceptance row", "size"]
    for col in cols:
        head += [f"ours/jax {col.threads}T", f"ours/torch {col.threads}T"]
    body = []
    for c in rows:
        line = [c.name, c.size]
        for col in cols:
            ours = col.seconds(c.key, "ours")
            torch_best = min((t for t in (col.seconds(c.key, "torch"),
                                          col.seconds(c.key, "torch_compile")) if t),
                             default=None)
            line += [_x(_ratio(ours, col.seconds(c.key, "jax"))), _x(_ratio(ours, torch_best))]
        body.append(line)
    lines = _grid(head, body)
    lines.append("(ours/torch: against the faster of torch eager and torch.compile)")
    lines.append("")
    verdicts = []
    for col in cols:
        ratios = {c.key: _ratio(col.seconds(c.key, "ours"), col.seconds(c.key, "jax"))
                  for c in rows}
        measured = [r for r in ratios.values() if r is not None]
        gm = _geomean(measured)
        lines.append(f"geometric mean ours/jax, {col.threads} thread(s): "
                     f"{_x(gm)} over {len(measured)} of {len(rows)} rows")
        slow = [f"{k} ({_x(r)})" for k, r in ratios.items() if r is None or r > MAX_RATIO_TO_JAX]
        verdicts.append(_verdict(f"every row <= {MAX_RATIO_TO_JAX:.1f}x jax, {col.threads}T",
                                 slow))
        verdicts.append(_verdict(
            f"geometric mean <= {MAX_GEOMEAN_TO_JAX}x jax, {col.threads}T",
            [] if gm is not None and gm <= MAX_GEOMEAN_TO_JAX and len(measured) == len(rows)
            else [f"{_x(gm)} over {len(measured)} of {len(rows)} rows"]))
    one = next((col for col in cols if col.threads == 1), None)
    if one is not None:
        low = []
        for c in rows:
            if c.flops:
                t = one.seconds(c.key, "ours")
                frac = c.flops / t / 1e9 / one.peak if t and one.peak else None
                if frac is None or frac < MIN_MATMUL_PEAK_FRACTION:
                    low.append(f"{c.key} ({'-' if frac is None else f'{100 * frac:.0f}%'})")
        peak = f"{one.peak:.1f} GF/s" if one.peak else "not measured"
        verdicts.append(_verdict(f"matmul >= {100 * MIN_MATMUL_PEAK_FRACTION:.0f}% of the "
                                 f"measured 1-core peak ({peak})", low))
    for col in cols:
        high = []
        for c in rows:
            if c.grad_ratio_limit is not None:
                r = col.grad_ratio(c, "ours")
                if r is None or r > c.grad_ratio_limit:
                    high.append(f"{c.key} ({_x(r)})")
        verdicts.append(_verdict(f"ours time(grad f)/time(f) <= 3 on MLP, GMM, LSTM, "
                                 f"{col.threads}T", high))
    return lines + [""] + verdicts


def _verdict(criterion: str, failures: Sequence[str]) -> str:
    if not failures:
        return f"PASS  {criterion}"
    return f"FAIL  {criterion}: " + "; ".join(failures)


def report(cases: Sequence[Case], results: Sequence[dict[str, Any]],
           frameworks: Sequence[str]) -> str:
    cols = [Column(r["threads"], r["peak_gflops"],
                   {f"{row['name']} {row['size']}": row for row in r["rows"]}) for r in results]
    first = results[0]
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    lines = [(f"{platform.machine()}, {os.cpu_count()} cores{load}, Python "
              f"{platform.python_version()}; {first['versions']}")]
    if first["peak_gflops"]:
        lines.append(f"measured f32 FMA peak, one core ({first['vector_bits']}-bit vectors): "
                     + ", ".join(f"{r['peak_gflops']:.1f} GF/s in the {r['threads']}T worker"
                                 for r in results))
    if "ours" in frameworks:
        support = first["ours_threads"]
        lines.append("ours' thread count: " + (
            f"taken through {support}" if support else
            "NOT taken by the library yet (no jit(threads=) and no AUTODIFF_CPU_THREADS): "
            "the 2-thread column runs ours on one thread"))
    lines.append("median of repeats; ratio > 1: ours is slower; % peak: of the measured "
                 "peak times the thread count")
    for col in cols:
        lines += ["", f"== {col.threads} thread(s) =="]
        lines += column_table(cases, col, frameworks)
        for extra in (grad_table(cases, col, frameworks),
                      compile_table(cases, col, frameworks)):
            if extra:
                lines += [""] + extra
    lines += [""] + acceptance(cases, cols, frameworks)
    recreated = recreated_lines(results)
    if recreated:
        lines += [""] + recreated
    notes = []
    for col in cols:
        for c in cases:
            row = col.rows.get(c.key, {})
            for fw, msg in row.get("problems", {}).items():
                notes.append(f"note {col.threads}T: {c.key} [{fw}]: {msg}")
            for fw, msg in row.get("skipped", {}).items():
                notes.append(f"skipped {col.threads}T: {c.key} [{fw}]: {msg}")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    p.add_argument("--filter", default="", help="regular expression on 'name size'")
    p.add_argument("--repeats", type=int, default=None, help="samples per timing (median)")
    p.add_argument("--min-time", type=float, default=None, help="seconds per sample")
    p.add_argument("--frameworks", default=None,
                   help="comma-separated subset of " + ",".join(FRAMEWORKS)
                        + " (default: all; --quick: all but torch_compile, for time)")
    p.add_argument("--threads", default=None,
                   help="comma-separated thread counts, one worker process each "
                        "(default 1,2; --quick: 1)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--worker", action="store_true",
                   help="internal: time in this process with one --threads value")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = _parser()
    args = p.parse_args(argv)
    threads = [int(t) for t in (args.threads or ("1" if args.quick else "1,2")).split(",")]
    if args.worker:
        if len(threads) != 1:
            p.error("--worker takes exactly one --threads value")
        configure_process(threads[0])  # before any framework is imported
    repeats = args.repeats or (3 if args.quick else 5)
    min_time = args.min_time or (0.02 if args.quick else 0.1)
    default = [fw for fw in FRAMEWORKS if fw != "torch_compile"] if args.quick else FRAMEWORKS
    frameworks = [fw for fw in (args.frameworks or ",".join(default)).split(",") if fw]
    unknown = [fw for fw in frameworks if fw not in FRAMEWORKS]
    if unknown:
        p.error(f"unknown framework(s): {', '.join(unknown)}")
    # A framework that is not installed is left out of the table, not an error.
    frameworks = [fw for fw in FRAMEWORKS if fw in frameworks
                  and (fw in ("ours", "numpy") or importlib.util.find_spec(fw.split("_")[0]))]
    pattern = re.compile(args.filter)
    cases = [c for c in CASES if (c.quick if args.quick else c.full) and pattern.search(c.key)]
    if not cases:
        p.error(f"no case matches --filter '{args.filter}'")

    if args.worker:
        result = worker(cases, frameworks, threads[0], min_time=min_time, repeats=repeats)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        wrong = any("WRONG" in m for r in result["rows"] for m in r["problems"].values())
        return 1 if wrong else 0

    passthrough = _without_option(_without_option(argv, "--json"), "--threads")
    print(f"timing {len(cases)} rows x {len(frameworks)} frameworks at "
          f"{', '.join(map(str, threads))} thread(s); progress on stderr", flush=True)
    try:
        results = [_spawn_worker(t, passthrough) for t in threads]
    except RuntimeError as err:  # the worker printed its own error on stderr
        print(f"run.py: {err}", file=sys.stderr)
        return 2
    print(report(cases, results, frameworks), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    wrong = any("WRONG" in m for r in results for row in r["rows"]
                for m in row["problems"].values())
    return 1 if wrong else 0


def _without_option(argv: Sequence[str], name: str) -> list[str]:
    """`argv` less `name VALUE` / `name=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
