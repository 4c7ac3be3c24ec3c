"""Per benchmark row of gpu_check.py: each launch's grid and each thread's sequential work.

No GPU needed: the row's program is lowered to `stage=kernels` on the CPU and, for every
`gpu.launch_func` in host order, this prints the grid (blocks), the block size and the
most loop iterations any thread of the kernel runs (the product of the trip counts of
the `scf.for` loops around an op; a loop from the thread index counts hi / step).

    python benchmarks/gpu_grids.py [--only SUBSTRING ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

#: rows left out by default: too large to lower quickly, or loops of many launches
SKIP = ("LSTM objective (f64) l2 c1024", "LSTM gradient (f64) l2 c1024")


class _Recorded(Exception):
    pass


class _Recorder:
    def __init__(self) -> None:
        self.call: tuple[Any, tuple[Any, ...]] | None = None

    def __call__(self, fn: Any, **_: Any) -> Any:
        def call(*args: Any) -> Any:
            self.call = (fn, args)
            raise _Recorded

        return call


def _const(v: Any) -> int | None:
    from mlir_autodiff.transforms.ad_support import int_constant

    return int_constant(v)


def thread_steps(fn: Any) -> int:
    """Loop iterations one thread of kernel `fn` runs (as fusion.py's `_sequential_work`
    counts them: 1 per body plus each `scf.for`'s trip count times its body's; a loop
    from the thread index or the block index counts hi / step, a dynamic one 64)."""

    def work(block: Any) -> int:
        total = 1
        for op in block.operations:
            op = op.operation
            if op.name == "scf.for":
                lo, hi, st = (_const(v) for v in op.operands[:3])
                trips = 64 if hi is None or not st else max(0, -(-(hi - (lo or 0)) // st))
                total += trips * work(op.regions[0].blocks[0])
                continue
            for region in op.regions:
                for b in region.blocks:
                    total += work(b) - 1
        return total

    return work(fn.regions[0].blocks[0])


def launches(module: Any) -> list[dict[str, Any]]:
    """Per `gpu.launch_func`, in host order: kernel, grid, block, thread steps."""
    from mlir import ir

    from mlir_autodiff.transforms.ad_support import walk_ops

    funcs = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.module":
            mod = ir.StringAttr(op.operation.attributes["sym_name"]).value
            for fn in op.regions[0].blocks[0].operations:
                if fn.operation.name == "gpu.func":
                    name = ir.StringAttr(fn.operation.attributes["sym_name"]).value
                    funcs[(mod, name)] = fn.operation
    out = []
    for op in walk_ops(module.operation):
        if op.name != "gpu.launch_func":
            continue
        ref = str(op.attributes["kernel"])  # @mod::@fn
        mod, name = (s.strip("@") for s in ref.split("::"))
        fn = funcs[(mod, name)]
        # operands: [async deps], grid x y z, block x y z, ...
        n_dep = len([v for v in op.operands if str(v.type) == "!gpu.async.token"])
        sizes = [_const(v) for v in list(op.operands)[n_dep:n_dep + 6]]
        grid = 1
        for s in sizes[:3]:
            grid *= s if s is not None else 0
        block = 1
        for s in sizes[3:]:
            block *= s if s is not None else 0
        out.append({"kernel": f"{mod}", "grid": grid, "block": block,
                    "steps": thread_steps(fn)})
    return out


def row_programs(only: list[str]) -> list[tuple[str, str]]:
    """(row key, the row's program as `autodiff` text) for gpu_check.py's rows."""
    import gpu_check
    import numpy as np
    import run  # noqa: F401  (registers the rows)

    import mlir_autodiff as ad

    recorder = _Recorder()
    for mod in ("run", "grad_cases", "adbench_cases", "cnn_cases", "transformer_cases"):
        sys.modules[mod].ours_jit = recorder  # type: ignore[attr-defined]
    out = []
    for case in gpu_check._rows():
        if only and not any(o in case.key for o in only):
            continue
        if not only and any(s in case.key for s in SKIP):
            continue
        if case.ours is None:
            continue
        inputs = case.inputs(np.random.default_rng(gpu_check.SEED))
        recorder.call = None
        try:
            case.ours(inputs)()
        except _Recorded:
            pass
        assert recorder.call is not None, case.key
        fn, args = recorder.call
        out.append((case.key, ad.lower(fn, *args).as_text("autodiff")))
    return out


def grids(text: str, chip: str = "sm_90") -> list[dict[str, Any]]:
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu
    from mlir_autodiff.transforms.pipeline import run_pipeline

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip=chip, stage="kernels")])
        return launches(module)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = {}
    for key, text in row_programs(args.only):
        ls = grids(text)
        result[key] = ls
        cells = ", ".join(f"#{i} {d['grid']}x{d['block']} w{d['steps']}" for i, d in enumerate(ls))
        print(f"{key}: {len(ls)} launches: {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
