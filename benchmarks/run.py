"""Side-by-side timings: our compiled MLIR kernels against jax.jit, numpy and torch.

    python benchmarks/run.py              # every case (about a minute)
    python benchmarks/run.py --quick      # small sizes, few repeats (seconds)
    python benchmarks/run.py --filter matmul --json out.json

Each case is a `Case` in `CASES`: a name, an input generator and one builder
per framework. A builder takes the numpy inputs and returns a zero-argument
thunk that performs one call and returns its result (jax thunks block until
the result is ready; inputs are moved to the framework before timing, so no
thunk times a host-to-device copy). Frameworks that are not installed, or
builders left as None, show as "-". Gradient benchmarks plug in the same
way: a Case whose `ours` builder jits `mlir_autodiff.grad(f)` and whose
`jax` builder jits `jax.grad(f)`.

Method: results are first checked against numpy (a wrong result is reported,
never timed as if right); each thunk is warmed up, then timed in samples of
enough inner iterations to last at least `--min-time` seconds; the reported
time is the median over `--repeats` samples (time.perf_counter). Ratios are
ours / theirs: above 1 means ours is slower. Our kernels run single-threaded
through the straightforward CPU pipeline; numpy's matmul (BLAS), jax and
torch may use every core. The numbers are printed as measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Thunk = Callable[[], Any]
Builder = Callable[[Sequence[np.ndarray]], Thunk]

FRAMEWORKS = ("ours", "jax", "numpy", "torch", "torch_compile")


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
    flops: float | None = None  # per call: the table shows GF/s
    bytes: float | None = None  # per call, when flops is None: the table shows GB/s
    rtol: float = 1e-4  # against numpy
    atol: float = 1e-5
    quick: bool = True  # part of a --quick run
    full: bool = True  # part of a full run
    #: for a gradient row: the name of the primal row, for the grad/f time ratio
    primal: str | None = None

    def builder(self, framework: str) -> Builder | None:
        return getattr(self, framework)


CASES: list[Case] = []


def register(case: Case) -> Case:
    CASES.append(case)
    return case


# -- framework adapters --------------------------------------------------------------------------


def _optional(module: str) -> Any | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


_compiled: dict[str, Any] = {}


def mlir_kernel(text: str, name: str) -> Builder:
    """Our side: `@name` of MLIR `text`, compiled once with the CPU runtime."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        from mlir_autodiff.runtime import CompiledModule

        if text not in _compiled:
            _compiled[text] = CompiledModule(text)
        fn = _compiled[text][name]
        args = tuple(inputs)
        return lambda: fn(*args)

    return build


def jax_kernel(make: Callable[[Any], Callable[..., Any]]) -> Builder:
    """jax side: `make(jnp)` returns the function, which is jax.jit-compiled."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        jax = importlib.import_module("jax")
        fn = jax.jit(make(importlib.import_module("jax.numpy")))
        args = [jax.device_put(x) for x in inputs]
        return lambda: fn(*args).block_until_ready()

    return build


def numpy_kernel(fn: Callable[..., Any]) -> Builder:
    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        args = tuple(inputs)
        return lambda: fn(*args)

    return build


def torch_kernel(make: Callable[[Any], Callable[..., Any]]) -> Builder:
    """torch side: `make(torch)` returns the function (eager mode, no grad)."""

    def build(inputs: Sequence[np.ndarray]) -> Thunk:
        torch = importlib.import_module("torch")
        fn = make(torch)
        args = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]

        def call() -> Any:
            with torch.no_grad():
                return fn(*args)

        return call

    return build


# -- the kernels ---------------------------------------------------------------------------------


def _elementwise_mlir(n: int) -> str:
    t = f"tensor<{n}xf32>"
    return f"""
#id = affine_map<(i) -> (i)>
func.func @f(%x: {t}, %y: {t}, %z: {t}) -> {t} {{
  %e = tensor.empty() : {t}
  %r = linalg.generic {{indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}}
      ins(%x, %y, %z : {t}, {t}, {t}) outs(%e : {t}) {{
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %c : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  }} -> {t}
  return %r : {t}
}}
"""


def _row_sum_mlir(n: int) -> str:
    return f"""
func.func @f(%a: tensor<{n}x{n}xf32>) -> tensor<{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<{n}xf32>) -> tensor<{n}xf32>
  %r = linalg.reduce ins(%a : tensor<{n}x{n}xf32>) outs(%init : tensor<{n}xf32>) dimensions = [1]
    (%x: f32, %acc: f32) {{
      %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32
    }}
  return %r : tensor<{n}xf32>
}}
"""


def _matmul_mlir(n: int) -> str:
    t = f"tensor<{n}x{n}xf32>"
    return f"""
func.func @f(%a: {t}, %b: {t}) -> {t} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {t}
  %init = linalg.fill ins(%zero : f32) outs(%e : {t}) -> {t}
  %r = linalg.matmul ins(%a, %b : {t}, {t}) outs(%init : {t}) -> {t}
  return %r : {t}
}}
"""


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


for _n, _quick, _full in ((4096, True, False), (65536, True, True), (1 << 20, False, True)):
    register(Case(
        name="tanh(x*y+z)", size=f"{_n}",
        inputs=lambda rng, n=_n: (_f32(rng, n), _f32(rng, n), _f32(rng, n)),
        ours=mlir_kernel(_elementwise_mlir(_n), "f"),
        jax=jax_kernel(lambda jnp: lambda x, y, z: jnp.tanh(x * y + z)),
        numpy=numpy_kernel(lambda x, y, z: np.tanh(x * y + z)),
        torch=torch_kernel(lambda torch: lambda x, y, z: torch.tanh(x * y + z)),
        bytes=4.0 * 4 * _n, quick=_quick, full=_full,
    ))

for _n, _quick, _full in ((256, True, False), (1024, False, True)):
    register(Case(
        name="row sum", size=f"{_n}x{_n}",
        inputs=lambda rng, n=_n: (_f32(rng, n, n),),
        ours=mlir_kernel(_row_sum_mlir(_n), "f"),
        jax=jax_kernel(lambda jnp: lambda a: jnp.sum(a, axis=1)),
        numpy=numpy_kernel(lambda a: a.sum(axis=1)),
        torch=torch_kernel(lambda torch: lambda a: a.sum(dim=1)),
        bytes=4.0 * _n * _n, rtol=1e-4, atol=1e-3, quick=_quick, full=_full,
    ))

for _n, _quick, _full in ((64, True, False), (128, True, True), (256, False, True),
                         (512, False, True)):
    register(Case(
        name="matmul", size=f"{_n}^3",
        inputs=lambda rng, n=_n: (_f32(rng, n, n), _f32(rng, n, n)),
        ours=mlir_kernel(_matmul_mlir(_n), "f"),
        jax=jax_kernel(lambda jnp: lambda a, b: a @ b),
        numpy=numpy_kernel(lambda a, b: a @ b),
        torch=torch_kernel(lambda torch: lambda a, b: a @ b),
        flops=2.0 * _n**3, rtol=1e-3, atol=1e-3, quick=_quick, full=_full,
    ))


# Gradient rows (MLP step, HVP, ADBench GMM) live in their own module.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grad_cases  # noqa: E402

grad_cases.register_cases(Case, register)

# -- timing --------------------------------------------------------------------------------------


def time_thunk(thunk: Thunk, *, min_time: float, repeats: int) -> float:
    """Median seconds per call over `repeats` samples of >= `min_time` seconds each."""
    for _ in range(3):
        thunk()
    # Estimate the cost of one call, then size the samples from it.
    n, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(n):
            thunk()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / 4 or n >= 1 << 20:
            break
        n *= 4
    inner = max(1, int(n * min_time / max(elapsed, 1e-9)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            thunk()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch
        value = value.detach().numpy()
    return np.asarray(value)


@dataclasses.dataclass
class Row:
    case: Case
    seconds: dict[str, float | None]
    problems: dict[str, str]

    def rate(self) -> str:
        t = self.seconds.get("ours")
        if not t:
            return "-"
        if self.case.flops:
            return f"{self.case.flops / t / 1e9:.2f} GF/s"
        if self.case.bytes:
            return f"{self.case.bytes / t / 1e9:.2f} GB/s"
        return "-"


#: Timing order. Each framework is timed on every case before the next one
#: starts: jax's (and torch's) worker threads keep spinning after a call and
#: would otherwise slow a multithreaded BLAS timed right after them (seen on
#: 2 cores: numpy's 128^3 matmul took 30 ms instead of 0.2 ms after jax).
TIMING_ORDER = ("numpy", "ours", "torch", "torch_compile", "jax")


def run_cases(cases: Sequence[Case], frameworks: Sequence[str], *, min_time: float,
              repeats: int, seed: int = 0, log: Any = sys.stderr) -> list[Row]:
    """Check every (case, framework) against numpy, then time it."""
    inputs = [c.inputs(np.random.default_rng(seed)) for c in cases]
    references = [_to_numpy(c.numpy(x)()) if c.numpy is not None else None
                  for c, x in zip(cases, inputs)]
    rows = [Row(c, {}, {}) for c in cases]
    for fw in sorted(frameworks, key=TIMING_ORDER.index):
        for case, x, ref, row in zip(cases, inputs, references, rows):
            log.write(f"  {fw}: {case.name} {case.size}\n")
            row.seconds[fw] = None
            build = case.builder(fw)
            if build is None:
                continue
            try:
                thunk = build(x)
                result = _to_numpy(thunk())
            except Exception as err:  # a framework that cannot run this case: say so, go on
                first = str(err).splitlines()[0] if str(err) else ""
                row.problems[fw] = f"{type(err).__name__}: {first}"
                continue
            if ref is not None and not np.allclose(result, ref, rtol=case.rtol, atol=case.atol):
                err = float(np.max(np.abs(result.astype(np.float64) - ref)))
                row.problems[fw] = f"WRONG RESULT (max abs error {err:.3g} vs numpy)"
                continue
            row.seconds[fw] = time_thunk(thunk, min_time=min_time, repeats=repeats)
    return rows


# -- the table -----------------------------------------------------------------------------------


def _ms(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 1 else f"{t * 1e3:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def table(rows: Sequence[Row], frameworks: Sequence[str]) -> str:
    head = ["case", "size", *(f"{fw} ms" for fw in frameworks)]
    others = [fw for fw in frameworks if fw != "ours"]
    if "ours" in frameworks:
        head += [f"ours/{fw}" for fw in others] + ["ours rate"]
    body = []
    for r in rows:
        line = [r.case.name, r.case.size, *(_ms(r.seconds.get(fw)) for fw in frameworks)]
        if "ours" in frameworks:
            line += [_ratio(r.seconds.get("ours"), r.seconds.get(fw)) for fw in others]
            line.append(r.rate())
        body.append(line)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def fmt(cols: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cols, widths))).rstrip()

    lines = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
    by_key = {(r.case.name, r.case.size): r for r in rows}
    ratios = []
    for r in rows:
        p = by_key.get((r.case.primal, r.case.size)) if r.case.primal else None
        if p is not None:
            cells = [f"{fw} {_ratio(r.seconds.get(fw), p.seconds.get(fw))}"
                     for fw in frameworks if fw != "numpy"]
            ratios.append(f"time(grad)/time(f): {r.case.name} {r.case.size}: " + ", ".join(cells))
    if ratios:
        lines += [""] + ratios
    for r in rows:
        for fw, msg in r.problems.items():
            lines.append(f"note: {r.case.name} {r.case.size} [{fw}]: {msg}")
    return "\n".join(lines)


def _environment(frameworks: Sequence[str]) -> str:
    versions = [f"numpy {np.__version__}"]
    for fw in ("jax", "torch"):
        mod = _optional(fw) if fw in frameworks or f"{fw}_compile" in frameworks else None
        versions.append(f"{fw} {mod.__version__}" if mod else f"{fw} absent")
    load = ", load average %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    return (f"{platform.machine()}, {os.cpu_count()} cores{load}, Python "
            f"{platform.python_version()}; " + ", ".join(versions))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    p.add_argument("--filter", default="", help="regular expression on 'name size'")
    p.add_argument("--repeats", type=int, default=None, help="samples per timing (median)")
    p.add_argument("--min-time", type=float, default=None, help="seconds per sample")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                   help="comma-separated subset of " + ",".join(FRAMEWORKS))
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)

    repeats = args.repeats or (3 if args.quick else 5)
    min_time = args.min_time or (0.05 if args.quick else 0.2)
    frameworks = [fw for fw in args.frameworks.split(",") if fw]
    unknown = [fw for fw in frameworks if fw not in FRAMEWORKS]
    if unknown:
        p.error(f"unknown framework(s): {', '.join(unknown)}")
    # A framework that is not installed is left out of the table, not an error.
    frameworks = [fw for fw in frameworks
                  if fw in ("ours", "numpy") or _optional(fw.split("_")[0])]
    pattern = re.compile(args.filter)
    cases = [c for c in CASES if (c.quick if args.quick else c.full)
             and pattern.search(f"{c.name} {c.size}")]
    if not cases:
        p.error(f"no case matches --filter '{args.filter}'")

    print(_environment(frameworks), flush=True)
    print(f"median of {repeats} samples of >= {min_time} s; f32; ratio > 1: ours is slower\n")
    rows = run_cases(cases, frameworks, min_time=min_time, repeats=repeats)
    print(table(rows, frameworks), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"name": r.case.name, "size": r.case.size, "seconds": r.seconds,
                        "problems": r.problems, "flops": r.case.flops, "bytes": r.case.bytes}
                       for r in rows], f, indent=2)
    return 1 if any("WRONG" in m for r in rows for m in r.problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
