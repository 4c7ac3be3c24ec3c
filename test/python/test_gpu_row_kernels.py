"""Row kernels: dependent loops over the same rows as phases of one kernel
(transforms/gpu/row_kernels.py).

No GPU needed: launch counts at `stage=kernels`, the `parallel` stage run on the
CPU against numpy and the CPU pipeline, and the kernels through ptxas.
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

# A row softmax over 1000-long rows and the cross-entropy gradient rows beside it
# (dz = p * sum(ct) - ct, log-softmax's backward): the row maximum, the sum of the
# shifted exponentials, the normalisation, the sum of ct and dz. Before RowKernels:
# a kernel each for the max, the exp, the sum (with ct's sum beside it), p and dz.
# After: one, a block per row: reductions and elementwise passes as phases.
ROWS = """
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func @rows(%x: tensor<48x1000xf32>, %ct: tensor<48x1000xf32>)
    -> (tensor<48x1000xf32>, tensor<48x1000xf32>) {
  %z = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %er = tensor.empty() : tensor<48xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<48xf32>) -> tensor<48xf32>
  %m = linalg.reduce ins(%x : tensor<48x1000xf32>) outs(%fm : tensor<48xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %r = arith.maximumf %v, %acc : f32
      linalg.yield %r : f32
    }
  %e = tensor.empty() : tensor<48x1000xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : tensor<48x1000xf32>, tensor<48xf32>) outs(%e : tensor<48x1000xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %q = math.exp %d : f32
    linalg.yield %q : f32
  } -> tensor<48x1000xf32>
  %fs = linalg.fill ins(%z : f32) outs(%er : tensor<48xf32>) -> tensor<48xf32>
  %s = linalg.reduce ins(%ex : tensor<48x1000xf32>) outs(%fs : tensor<48xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %p = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %s : tensor<48x1000xf32>, tensor<48xf32>) outs(%e : tensor<48x1000xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %q = arith.divf %a, %b : f32
    linalg.yield %q : f32
  } -> tensor<48x1000xf32>
  %fc = linalg.fill ins(%z : f32) outs(%er : tensor<48xf32>) -> tensor<48xf32>
  %c = linalg.reduce ins(%ct : tensor<48x1000xf32>) outs(%fc : tensor<48xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %e2 = tensor.empty() : tensor<48x1000xf32>
  %dz = linalg.generic {indexing_maps = [#id, #id, #row, #id],
                        iterator_types = ["parallel", "parallel"]}
      ins(%p, %ct, %c : tensor<48x1000xf32>, tensor<48x1000xf32>, tensor<48xf32>)
      outs(%e2 : tensor<48x1000xf32>) {
  ^bb0(%a: f32, %g: f32, %t: f32, %o: f32):
    %q = arith.mulf %a, %t : f32
    %w = arith.subf %q, %g : f32
    linalg.yield %w : f32
  } -> tensor<48x1000xf32>
  return %p, %dz : tensor<48x1000xf32>, tensor<48x1000xf32>
}

// Columns as rows, short ones (the GMM's 25 components per sample): exp, the sums
// over the 25-long columns (one thread each) and the division share the column
// index j; groups of 8 columns per block, 37 not a multiple of 8 (masked).
#t = affine_map<(i, j) -> (i, j)>
#col = affine_map<(i, j) -> (j)>
func.func @cols(%x: tensor<25x37xf32>) -> tensor<25x37xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<25x37xf32>
  %ex = linalg.generic {indexing_maps = [#t, #t], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<25x37xf32>) outs(%e : tensor<25x37xf32>) {
  ^bb0(%a: f32, %o: f32):
    %q = math.exp %a : f32
    linalg.yield %q : f32
  } -> tensor<25x37xf32>
  %ec = tensor.empty() : tensor<37xf32>
  %fc = linalg.fill ins(%z : f32) outs(%ec : tensor<37xf32>) -> tensor<37xf32>
  %s = linalg.reduce ins(%ex : tensor<25x37xf32>) outs(%fc : tensor<37xf32>) dimensions = [0]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %y = linalg.generic {indexing_maps = [#t, #col, #t], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %s : tensor<25x37xf32>, tensor<37xf32>) outs(%e : tensor<25x37xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %q = arith.divf %a, %b : f32
    linalg.yield %q : f32
  } -> tensor<25x37xf32>
  return %y : tensor<25x37xf32>
}
"""


def test_softmax_and_its_gradient_rows_are_one_kernel() -> None:
    module = _lowered(ROWS, stage="kernels")
    text = str(module)
    # 4 before RowKernels for @rows, 3 for @cols.
    assert text.count("gpu.launch_func") == 2, text
    # A block per row; the row's two sums and its maximum are block all-reduces,
    # the phases separated by barriers. The columns: 5 blocks of 8.
    assert "known_grid_size = array<i32: 48, 1, 1>" in text
    assert "known_grid_size = array<i32: 5, 1, 1>" in text
    assert text.count("gpu.all_reduce") == 3 and "gpu.barrier" in text
    # The row statistics thread 0 stores between phases (max, sums: 48-element
    # buffers) reach the later phases as the all-reduced values every thread holds,
    # not as a load per element.
    assert not [line for line in text.splitlines()
                if "memref.load" in line and "memref<48xf32>" in line], text


def test_row_kernel_matches_numpy_on_the_cpu() -> None:
    rng = np.random.default_rng(5)
    x = (4 * rng.standard_normal((48, 1000))).astype(np.float32)
    ct = rng.standard_normal((48, 1000)).astype(np.float32)
    p, dz = CompiledModule(ROWS, pipeline=parallel_stage_on_cpu_pipeline())["rows"](x, ct)
    x64, ct64 = x.astype(np.float64), ct.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want_p = e / e.sum(axis=1, keepdims=True)
    want_dz = want_p * ct64.sum(axis=1, keepdims=True) - ct64
    np.testing.assert_allclose(p, want_p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dz, want_dz, rtol=1e-4, atol=1e-4)
    cpu_p, cpu_dz = CompiledModule(ROWS)["rows"](x, ct)
    np.testing.assert_allclose(p, cpu_p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dz, cpu_dz, rtol=1e-4, atol=1e-4)
    xs = rng.standard_normal((25, 37)).astype(np.float32)
    got = CompiledModule(ROWS, pipeline=parallel_stage_on_cpu_pipeline())["cols"](xs)
    es = np.exp(xs.astype(np.float64))
    np.testing.assert_allclose(got, es / es.sum(axis=0), rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_row_kernel_assembles_with_ptxas(chip: str) -> None:
    module = _lowered(ROWS, chip=chip, format="isa")
    ptx = "\n".join(obj.data.decode() for obj in adgpu.gpu_objects(module))
    assert ptx.count(".entry") == 2
    assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx
    module = _lowered(ROWS, chip=chip, format="bin")
    for obj in adgpu.gpu_objects(module):
        assert obj.data[:4] == b"\x7fELF" and adgpu.cubin_arch(obj.data) == int(chip[3:])


# A projection whose output rows are short (48 columns) but whose reduction is long
# (96), then a bias and the rows' sums: row fusion once merged all three into one
# loop over the 500 rows, each thread running 48 x 96 steps of the contraction
# alone (a transformer's attention projections ran 15x slower on an H200 so). The
# contraction keeps its thread per output; the bias and the sums may still fuse.
PROJECTION = """
#x = affine_map<(i, j, k) -> (i, k)>
#w = affine_map<(i, j, k) -> (k, j)>
#y = affine_map<(i, j, k) -> (i, j)>
#id = affine_map<(i, j) -> (i, j)>
#c = affine_map<(i, j) -> (j)>
func.func @proj(%x: tensor<500x96xf32>, %w: tensor<96x48xf32>, %b: tensor<48xf32>)
    -> (tensor<500x48xf32>, tensor<500xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<500x48xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<500x48xf32>) -> tensor<500x48xf32>
  %p = linalg.generic {indexing_maps = [#x, #w, #y],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<500x96xf32>, tensor<96x48xf32>) outs(%f : tensor<500x48xf32>) {
  ^bb0(%a: f32, %v: f32, %o: f32):
    %m = arith.mulf %a, %v : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<500x48xf32>
  %y = linalg.generic {indexing_maps = [#id, #c, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p, %b : tensor<500x48xf32>, tensor<48xf32>) outs(%e : tensor<500x48xf32>) {
  ^bb0(%a: f32, %v: f32, %o: f32):
    %s = arith.addf %a, %v : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<500x48xf32>
  %er = tensor.empty() : tensor<500xf32>
  %fr = linalg.fill ins(%z : f32) outs(%er : tensor<500xf32>) -> tensor<500xf32>
  %r = linalg.reduce ins(%y : tensor<500x48xf32>) outs(%fr : tensor<500xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %s = arith.addf %v, %acc : f32
      linalg.yield %s : f32
    }
  return %y, %r : tensor<500x48xf32>, tensor<500xf32>
}
"""


def _thread_steps(module: ir.Module) -> dict[str, int]:
    """Per kernel: the most loop iterations one thread runs for any op of its body
    (the product of the trip counts of the scf.for loops around it; a loop starting
    at the thread index counts hi / step)."""
    def const(v: ir.Value) -> int | None:
        op = v.owner
        if isinstance(op, ir.Block):
            return None
        op = op.operation
        if op.name == "arith.constant":
            return ir.IntegerAttr(op.attributes["value"]).value
        return None

    def walk(block: ir.Block, depth: int) -> int:
        worst = depth
        for op in block.operations:
            op = op.operation
            inner = depth
            if op.name == "scf.for":
                lo, hi, st = (const(v) for v in op.operands[:3])
                assert hi is not None and st, str(op)
                inner = depth * -(-(hi - (lo or 0)) // st)
            for region in op.regions:
                for b in region.blocks:
                    worst = max(worst, walk(b, inner))
        return worst

    out = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.module":
            fn = op.regions[0].blocks[0].operations[0]
            out[op.operation.attributes["sym_name"].value] = walk(fn.regions[0].blocks[0], 1)
    return out


def test_contraction_rows_keep_their_threads() -> None:
    steps = _thread_steps(_lowered(PROJECTION, stage="kernels"))
    # the projection's 96-step reduction per output, not 48 x 96 per row
    assert max(steps.values()) <= 2 * 96, steps


def test_projection_rows_match_numpy_on_the_cpu() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((500, 96)).astype(np.float32)
    w = (rng.standard_normal((96, 48)) / 10).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    y, r = CompiledModule(PROJECTION, pipeline=parallel_stage_on_cpu_pipeline())["proj"](x, w, b)
    want = np.tanh(x.astype(np.float64) @ w.astype(np.float64) + b)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, want.sum(axis=1), rtol=1e-4, atol=1e-4)
