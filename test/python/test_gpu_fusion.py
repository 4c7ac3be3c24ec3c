"""Block reductions sharing kernels with their neighbours (transforms/gpu/reduction_fusion.py).

No GPU needed: launch counts at `stage=kernels`, the `parallel` stage run on the
CPU against numpy (and the CPU pipeline), and the fused kernels through ptxas.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gpu_lowering import lowered as _lowered
from mlir import ir

from mlir_autodiff import gpu as adgpu
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import parallel_stage_on_cpu_pipeline

# Two whole-array sums (each a partial pass and a combining pass), an elementwise
# result `y` and its column sums (a bias gradient's shape), and a row maximum
# (another combiner). Before FuseBlockReductions: 7 launches (each pass and `y`
# its own kernel). After: the partial passes, `y` and the column sums (which
# recompute `y` instead of reading it) share one grid; the two combining passes
# a second; the maxima (their own combiner) a third.
GRADS = """
#id2 = affine_map<(i, j) -> (i, j)>
func.func @grads(%a: tensor<300x200xf32>, %b: tensor<100x700xf32>, %x: tensor<256x96xf32>)
    -> (tensor<f32>, tensor<f32>, tensor<256x96xf32>, tensor<96xf32>, tensor<300xf32>) {
  %z = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e0 = tensor.empty() : tensor<f32>
  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s1 = linalg.reduce ins(%a : tensor<300x200xf32>) outs(%f0 : tensor<f32>) dimensions = [0, 1]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %eb = tensor.empty() : tensor<100x700xf32>
  %sq = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%b : tensor<100x700xf32>) outs(%eb : tensor<100x700xf32>) {
  ^bb0(%v: f32, %o: f32):
    %q = arith.mulf %v, %v : f32
    linalg.yield %q : f32
  } -> tensor<100x700xf32>
  %s2 = linalg.reduce ins(%sq : tensor<100x700xf32>) outs(%f0 : tensor<f32>) dimensions = [0, 1]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %ex = tensor.empty() : tensor<256x96xf32>
  %y = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x96xf32>) outs(%ex : tensor<256x96xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    %q = arith.mulf %t, %t : f32
    %w = arith.subf %v, %q : f32
    linalg.yield %w : f32
  } -> tensor<256x96xf32>
  %e1 = tensor.empty() : tensor<96xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<96xf32>) -> tensor<96xf32>
  %c = linalg.reduce ins(%y : tensor<256x96xf32>) outs(%f1 : tensor<96xf32>) dimensions = [0]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %e2 = tensor.empty() : tensor<300xf32>
  %f2 = linalg.fill ins(%ninf : f32) outs(%e2 : tensor<300xf32>) -> tensor<300xf32>
  %m = linalg.reduce ins(%a : tensor<300x200xf32>) outs(%f2 : tensor<300xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %r = arith.maximumf %v, %acc : f32
      linalg.yield %r : f32
    }
  return %s1, %s2, %y, %c, %m
      : tensor<f32>, tensor<f32>, tensor<256x96xf32>, tensor<96xf32>, tensor<300xf32>
}
"""


def _kernels(module: ir.Module) -> dict[str, str]:
    out = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.module":
            for fn in op.regions[0].blocks[0].operations:
                if fn.operation.name == "gpu.func":
                    out[ir.StringAttr(op.operation.attributes["sym_name"]).value] = str(fn)
    return out


def test_independent_reductions_and_their_producers_share_kernels() -> None:
    module = _lowered(GRADS, stage="kernels")
    text = str(module)
    assert text.count("gpu.launch_func") == 3, text  # 7 before FuseBlockReductions
    kernels = _kernels(module)
    # Every kernel is a block reduction: one all-reduce (shuffles, shared memory).
    assert all(k.count("gpu.all_reduce") == 1 for k in kernels.values()), kernels
    # The first holds both partial passes, y and its column sums: 14 + 17 + 96 + 96 blocks.
    assert "known_grid_size = array<i32: 223, 1, 1>" in text


def test_fused_reductions_match_numpy_on_the_cpu() -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((100, 700)).astype(np.float32)
    x = rng.standard_normal((256, 96)).astype(np.float32)
    got = CompiledModule(GRADS, pipeline=parallel_stage_on_cpu_pipeline())["grads"](a, b, x)
    y = x.astype(np.float64) - np.tanh(x.astype(np.float64)) ** 2
    want = (a.astype(np.float64).sum(), (b.astype(np.float64) ** 2).sum(), y, y.sum(axis=0),
            a.max(axis=1))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-4)
    cpu = CompiledModule(GRADS)["grads"](a, b, x)
    for g, c in zip(got, cpu, strict=True):
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=2e-4)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_fused_reductions_assemble_with_ptxas(chip: str) -> None:
    module = _lowered(GRADS, chip=chip, format="isa")
    ptx = "\n".join(obj.data.decode() for obj in adgpu.gpu_objects(module))
    assert ptx.count(".entry") == 3
    assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx
    module = _lowered(GRADS, chip=chip, format="bin")  # ptxas accepts every kernel
    for obj in adgpu.gpu_objects(module):
        assert obj.data[:4] == b"\x7fELF" and adgpu.cubin_arch(obj.data) == int(chip[3:])


def test_in_place_producer_is_not_recomputed() -> None:
    """`h = g * (1 - h^2)` updates `h` in place (tanh's derivative on a reused buffer):
    its column sums cannot recompute it (other blocks of a shared grid would read
    `h` already overwritten), so they stay a kernel after it, and the values agree."""
    text = """
#id2 = affine_map<(i, j) -> (i, j)>
func.func @f(%g: tensor<128x96xf32>, %h: tensor<128x96xf32>) -> (tensor<128x96xf32>, tensor<96xf32>) {
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %d = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%g : tensor<128x96xf32>) outs(%h : tensor<128x96xf32>) {
  ^bb0(%v: f32, %o: f32):
    %q = arith.mulf %o, %o : f32
    %w = arith.subf %one, %q : f32
    %r = arith.mulf %v, %w : f32
    linalg.yield %r : f32
  } -> tensor<128x96xf32>
  %e1 = tensor.empty() : tensor<96xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<96xf32>) -> tensor<96xf32>
  %c = linalg.reduce ins(%d : tensor<128x96xf32>) outs(%f1 : tensor<96xf32>) dimensions = [0]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  return %d, %c : tensor<128x96xf32>, tensor<96xf32>
}"""
    rng = np.random.default_rng(3)
    g, h = (rng.standard_normal((128, 96)).astype(np.float32) for _ in range(2))
    d, c = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["f"](g, h.copy())
    want = g.astype(np.float64) * (1 - h.astype(np.float64) ** 2)
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, want.sum(axis=0), rtol=1e-5, atol=1e-4)
