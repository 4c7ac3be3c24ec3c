"""Where compile time goes: a per-stage profile of the first call of each benchmark row.

    python benchmarks/compile_profile.py [--quick] [--filter REGEX] [--json FILE] [--clock cpu|wall]

Each row's first call runs in a fresh process (as a user's first call does),
with the stages timed by wrapping the functions that do them:

- trace:       tracing the Python function into a module (`api._trace_main`)
- transforms:  the autodiff passes and their clean-up (`api._run_pipeline`)
- lowering:    the CPU pipeline to the LLVM dialect (`run_pipeline` inside
               `runtime.CompiledModule`), with every pass timed by MLIR's
               own timing manager (`--mlir-timing`); the slowest passes are listed
- codegen:     LLVM: optimisation and machine code (`ExecutionEngine(...)` and the
               first lookup of `@main`, where the ORC JIT materializes it)
- call:        the rest of the first call (argument checks, the native call)

Stage times are CPU seconds of the process (`time.process_time`, the
default: on a shared, loaded machine wall time mostly measures the other
jobs) or wall seconds (`--clock wall`, to compare with `benchmarks/run.py`);
the per-pass times are MLIR's wall times either way.

Read the table against the steady-state time of the row (`benchmarks/run.py`)
and against jax's compile time there. With the persistent compilation cache
on, a warm cache skips transforms, lowering and codegen; run with
AUTODIFF_CACHE=0 (the default here) to profile the compiler itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

STAGES = ("trace", "transforms", "lowering", "codegen", "call")
#: "   0.0128 ( 39.3%)    0.0130 ( 39.5%)  VjpCore": user and wall columns, then the name
_TIMING_LINE = re.compile(r"^\s*((?:[0-9.]+\s+\(\s*[0-9.]+%\)\s+)+)(\S.*?)\s*$")


@contextlib.contextmanager
def _stderr_to(path: str):
    """Redirect file descriptor 2 (where MLIR prints its timing report) into `path`."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)


def _passes_from_report(text: str) -> dict[str, float]:
    """Pass name -> wall seconds from MLIR's execution time reports (summed over reports)."""
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _TIMING_LINE.match(line)
        if m and not m.group(2).startswith(("Total", "Rest", "Parser", "Output", "'")):
            wall = re.findall(r"([0-9.]+)\s+\(", m.group(1))[-1]
            out[m.group(2)] += float(wall)
    return dict(out)


def profile_row(key: str, clock_name: str = "cpu") -> dict[str, Any]:
    """Profile the first call of benchmark row `key` in this (fresh) process."""
    import numpy as np
    import run

    import mlir_autodiff.batching  # noqa: F401 - imports are not compile time
    import mlir_autodiff.differentiate  # noqa: F401
    import mlir_autodiff.nn  # noqa: F401
    import mlir_autodiff.random  # noqa: F401
    from mlir_autodiff import api, runtime
    from mlir_autodiff.transforms import pipeline

    case = next(c for c in run.CASES if c.key == key)
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    times: dict[str, float] = defaultdict(float)

    def timed(stage: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                times[stage] += clock() - t0
        return wrapper

    api._trace_main = timed("trace", api._trace_main)
    api._run_pipeline = timed("transforms", api._run_pipeline)
    runtime.run_pipeline = timed("lowering", runtime.run_pipeline)
    runtime.ExecutionEngine = timed("codegen", runtime.ExecutionEngine)
    # the ORC JIT materializes (optimizes and emits) a function at its first lookup
    runtime.CompiledModule.__getitem__ = timed("codegen", runtime.CompiledModule.__getitem__)
    original_init = pipeline.PassManagerRunner.__init__

    def with_timing(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["timing"] = True
        original_init(self, *args, **kwargs)

    pipeline.PassManagerRunner.__init__ = with_timing
    inputs = case.inputs(np.random.default_rng(0))
    with tempfile.NamedTemporaryFile(suffix=".txt") as report:
        with _stderr_to(report.name):
            t0 = clock()
            thunk = case.ours(inputs)
            thunk()
            total = clock() - t0
            import gc

            gc.collect()  # destroyed pass managers print their reports
        text = open(report.name).read()
    t0 = clock()
    thunk()
    steady = clock() - t0
    times["call"] = max(0.0, total - sum(times[s] for s in STAGES if s != "call") - steady)
    passes = _passes_from_report(text)
    top = sorted(passes.items(), key=lambda kv: -kv[1])[:8]
    return {"key": key, "total_s": total, "steady_s": steady,
            **{f"{s}_s": times[s] for s in STAGES}, "top_passes": top, "passes": passes,
            "clock": clock_name}


def _row_in_child(key: str, clock_name: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("AUTODIFF_CACHE", "0")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--row", key, "--clock", clock_name],
                          capture_output=True, text=True, env=env, timeout=900)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        return json.loads(last)
    except ValueError:
        return {"key": key, "error": (proc.stderr or proc.stdout)[-500:]}


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:.0f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    head = ["row", "first call ms", *[f"{s} ms" for s in STAGES], "slowest passes (ms)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['key']} | error: {r['error'][:120]!r} |" + " |" * (len(head) - 2))
            continue
        passes = ", ".join(f"{name} {t * 1e3:.0f}" for name, t in r["top_passes"][:4])
        lines.append("| " + " | ".join([r["key"], _ms(r["total_s"]),
                                        *[_ms(r[f"{s}_s"]) for s in STAGES], passes]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="the --quick rows of run.py")
    p.add_argument("--filter", default="", help="rows whose key matches this regex")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="stage times in CPU seconds of the process (default) or wall seconds")
    p.add_argument("--row", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.row:
        print(json.dumps(profile_row(a.row, a.clock)))
        return 0
    import run

    keys = [c.key for c in run.CASES if (c.quick if a.quick else c.full) and c.ours is not None
            and re.search(a.filter, c.key)]
    rows = []
    for key in keys:
        rows.append(_row_in_child(key, a.clock))
        print(table(rows[-1:])[-1], flush=True)
    print()
    print("\n".join(table(rows)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
