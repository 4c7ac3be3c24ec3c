"""First call of the MLP train step in a fresh process: cold vs warm compilation cache.

    python benchmarks/cache_first_call.py [--runs 3] [--threads 1]

The train step is the benchmark row "mlp train step (value_and_grad)", b128
784-512-512-10 (grad_cases.py). Each sample is a new Python process that
imports the package, builds the inputs and times the first call (trace,
compile or load from the cache, run). Cold: an empty cache directory per
process. Warm: a cache that one earlier process filled. Off: AUTODIFF_CACHE=0 (the
ExecutionEngine compiles in memory, as before the cache). Prints the medians
and, for the warm runs, where the time went (tracing, the cache key, loading
the entry, the call itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
t_start = time.perf_counter()
sys.path.insert(0, HERE)
import numpy as np
import mlir_autodiff as ad
from mlir_autodiff import api, compile_cache
import grad_cases
t_import = time.perf_counter() - t_start

phases = {"trace": 0.0, "key": 0.0, "load": 0.0}
def timed(name, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            phases[name] += time.perf_counter() - t
    return wrapper
api._trace_main = timed("trace", api._trace_main)
compile_cache.Cache.key = timed("key", compile_cache.Cache.key)
compile_cache.Cache.load = timed("load", compile_cache.Cache.load)

inputs = grad_cases._mlp_inputs(128, (784, 512, 512, 10))(np.random.default_rng(0))
step = grad_cases._ours_mlp(True)(inputs)
t = time.perf_counter()
out = step()
first = time.perf_counter() - t
t = time.perf_counter()
step()
steady = time.perf_counter() - t
print(json.dumps({"import": t_import, "first": first, "second": steady, **phases,
                  "stats": compile_cache.stats}))
"""


def _child(cache: str, threads: int, enabled: bool = True) -> dict:
    env = dict(os.environ, AUTODIFF_CACHE_DIR=cache, AUTODIFF_CPU_THREADS=str(threads),
               BENCH_THREADS=str(threads))
    env.pop("AUTODIFF_CACHE", None)
    if not enabled:
        env["AUTODIFF_CACHE"] = "0"
    code = CHILD.replace("HERE", repr(HERE))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cache-first-call-") as tmp:
        cold = []
        for i in range(opts.runs):
            report = _child(os.path.join(tmp, f"cold{i}"), opts.threads)
            assert report["stats"]["misses"] == 1, report
            cold.append(report)
        warm_dir = os.path.join(tmp, "warm")
        _child(warm_dir, opts.threads)  # fills the cache
        warm = []
        for _ in range(opts.runs):
            report = _child(warm_dir, opts.threads)
            assert report["stats"]["hits"] == 1 and report["stats"]["misses"] == 0, report
            warm.append(report)
        engine = [_child(os.path.join(tmp, "off"), opts.threads, enabled=False)
                  for _ in range(opts.runs)]
    med = {name: {k: statistics.median(r[k] for r in runs)
                  for k in ("import", "first", "second", "trace", "key", "load")}
           for name, runs in (("cold", cold), ("warm", warm), ("off", engine))}
    for name, runs in (("cold", cold), ("warm", warm), ("off", engine)):
        m = med[name]
        samples = ", ".join(f"{r['first'] * 1e3:.0f}" for r in runs)
        print(f"{name}: first call {m['first'] * 1e3:8.1f} ms (trace {m['trace'] * 1e3:.1f}, "
              f"key {m['key'] * 1e3:.1f}, load {m['load'] * 1e3:.1f}), import "
              f"{m['import'] * 1e3:.0f} ms, second call {m['second'] * 1e3:.2f} ms "
              f"[first calls, ms: {samples}]")
    print(f"warm / cold = {med['warm']['first'] / med['cold']['first']:.1%}")


if __name__ == "__main__":
    main()
