"""The GPU pipeline's `parallel` stage, run on the CPU, against the CPU pipeline on
random programs (test/python/random_programs.py: every transform stack).

The stage holds every GPU rewrite that changes what runs where (fusion, row
kernels, block reductions, scatter loops, carried accumulators, tiling), so a
rewrite that computes something else shows here without a device. A fixed set
of seeds runs in the suite; `python test_gpu_random_programs.py FIRST COUNT`
runs a longer sweep (1,500 seeds agreed when this was written).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import random_programs as rp

SEEDS = range(0, 24)


def check(seed: int) -> None:
    import mlir_autodiff as ad
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.gpu.pipeline import parallel_stage_on_cpu_pipeline

    p = rp.generate(seed)
    xs = [np.asarray(x) for x in p.inputs()]
    text = ad.lower(rp.build(p, rp.ours()), *xs).as_text("autodiff")
    want = CompiledModule(text)["main"](*xs)
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["main"](*xs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got), p.describe()
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-6, atol=1e-9, err_msg=p.describe())


@pytest.mark.parametrize("seed", SEEDS)
def test_parallel_stage_matches_cpu(seed: int) -> None:
    check(seed)


if __name__ == "__main__":
    first, count = int(sys.argv[1]), int(sys.argv[2])
    bad = 0
    for s in range(first, first + count):
        try:
            check(s)
        except AssertionError as err:
            bad += 1
            print(f"=== seed {s}\n{err}", flush=True)
    print(f"{count} seeds, {bad} mismatches")
