"""Minimum parallelism of merged GPU kernels (transforms/gpu/fusion.py's `starves`,
used by `RowFusion` and `RowKernels`).

A merge that would leave fewer than `MIN_BLOCKS` blocks, each thread running more
than `LONG_WORK` sequential iterations, where the merged loops had more blocks on
their own, is refused. The programs: the ADBench GMM objective's Cholesky factors
(d10 K25: before, one block of 256 threads, ~520 steps each) and a transformer's
causal attention at the benchmark's size (b16 t32 d64 h4: the scores, mask, max,
exp and sum in 8 blocks of ~640 steps each), and its gradient. No GPU needed: grids at
`stage=kernels`, and the `parallel` stage run on the CPU against the CPU pipeline.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
from mlir_autodiff.transforms.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

#: fusion.py's MIN_BLOCKS and LONG_WORK (an H100/H200 has 132 SMs)
MIN_BLOCKS = 132
LONG_WORK = 256


def _gmm() -> tuple[str, tuple]:
    """The ADBench GMM objective row of the benchmarks (d10 K25 n1000, f64)."""
    import adbench_cases

    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    problem = adbench_cases._Gmm("gmm/1k/gmm_d10_K25.txt")
    inputs = problem.inputs(np.random.default_rng(0))
    return ad.lower(problem.objective(anp), *inputs).as_text("autodiff"), inputs


B, T, D, H = 16, 32, 64, 4


def _attention_fn():
    """Causal multi-head attention as examples/char_transformer.py computes it, at the
    transformer rows' size: batch 16, context 32, width 64, 4 heads."""
    import mlir_autodiff.numpy as anp
    from mlir_autodiff import nn

    def attention(x, qkv, out):
        q, k, v = anp.split(x @ qkv, 3, axis=-1)
        q, k, v = (a.reshape(B, T, H, D // H) for a in (q, k, v))
        logits = anp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D // H)
        causal = anp.tril(anp.ones((T, T), dtype=bool))
        weights = nn.softmax(anp.where(causal, logits, -1e9), axis=-1)
        return anp.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D) @ out

    return attention


def _attention_inputs() -> tuple:
    rng = np.random.default_rng(3)
    return (rng.standard_normal((B, T, D)).astype(np.float32),
            (rng.standard_normal((D, 3 * D)) / 8).astype(np.float32),
            (rng.standard_normal((D, D)) / 8).astype(np.float32))


def _attention() -> tuple[str, tuple]:
    import mlir_autodiff as ad

    inputs = _attention_inputs()
    return ad.lower(_attention_fn(), *inputs).as_text("autodiff"), inputs


def _attention_gradient() -> tuple[str, tuple]:
    """The gradient of sum(attention ** 2): its q/k/v split's backward writes the three
    slices of one (16, 32, 192) gradient in five 64-element loops over the (batch,
    position) rows, which row fusion merged pairwise into 2 blocks of ~330 steps per
    thread (each merge of two row fusions measured against their own 2 blocks)."""
    import mlir_autodiff as ad

    f = _attention_fn()
    inputs = _attention_inputs()
    grad = ad.grad(lambda x, w, o: (f(x, w, o) ** 2).sum(), argnums=(0, 1, 2))
    return ad.lower(grad, *inputs).as_text("autodiff"), inputs


PROGRAMS = {"gmm_objective_d10_K25": _gmm, "attention_b16_t32_d64_h4": _attention,
            "attention_gradient": _attention_gradient}


def _launches(text: str) -> list[dict]:
    import gpu_grids

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_90", stage="kernels")])
        return gpu_grids.launches(module)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_few_block_kernel_runs_long_threads(name: str, monkeypatch) -> None:
    """No kernel of fewer than MIN_BLOCKS blocks whose threads run long loops; the
    parallel stage still computes what the CPU pipeline does, and bit for bit what
    it computed with the merges the criterion refuses (each value by the same ops in
    the same order)."""
    from mlir_autodiff.transforms.gpu import fusion, row_kernels

    text, inputs = PROGRAMS[name]()
    launches = _launches(text)
    starved = [d for d in launches if d["grid"] < MIN_BLOCKS and d["steps"] > LONG_WORK]
    assert not starved, launches

    def results(pipeline=None) -> list[np.ndarray]:
        options = {} if pipeline is None else {"pipeline": pipeline}
        out = CompiledModule(text, opt_level=0, **options)["main"](*inputs)
        return [np.asarray(r) for r in (out if isinstance(out, tuple) else (out,))]

    def parallel_stage() -> list[np.ndarray]:
        return results(parallel_stage_on_cpu_pipeline())

    got = parallel_stage()
    want = results()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        tol = 1e-12 if w.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    # The merges as they were before the criterion:
    monkeypatch.setattr(fusion, "starves", lambda *_: False)
    monkeypatch.setattr(row_kernels, "starves", lambda *_: False)
    assert [d["grid"] for d in _launches(text)] != [d["grid"] for d in launches]
    for g, before in zip(got, parallel_stage()):
        np.testing.assert_array_equal(g, before)
