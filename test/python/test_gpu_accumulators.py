"""Accumulators carried in registers on the GPU (transforms/gpu/accumulators.py).

No GPU needed: the kernels at `stage=kernels` (no load or store of the output
inside the reduction loops), the `parallel` stage run on the CPU against numpy.
"""

from __future__ import annotations

import re

import numpy as np
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
from mlir_autodiff.transforms.pipeline import run_pipeline

# A contraction off the tiled path (30 x 20 outputs) and a sum over two reduced
# dimensions (a nest of two reduction loops per output).
MODULE = """
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
#x = affine_map<(i, j, k) -> (i, j, k)>
#o = affine_map<(i, j, k) -> (i)>
func.func @mm(%a: tensor<30x70xf32>, %b: tensor<70x20xf32>) -> tensor<30x20xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<30x20xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<30x20xf32>) -> tensor<30x20xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<30x70xf32>, tensor<70x20xf32>) outs(%f : tensor<30x20xf32>) {
  ^bb0(%u: f32, %v: f32, %w: f32):
    %m = arith.mulf %u, %v : f32
    %s = arith.addf %w, %m : f32
    linalg.yield %s : f32
  } -> tensor<30x20xf32>
  return %r : tensor<30x20xf32>
}

func.func @sum2(%x: tensor<30x7x9xf64>) -> tensor<30xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<30xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<30xf64>) -> tensor<30xf64>
  %r = linalg.generic {indexing_maps = [#x, #o],
                       iterator_types = ["parallel", "reduction", "reduction"]}
      ins(%x : tensor<30x7x9xf64>) outs(%f : tensor<30xf64>) {
  ^bb0(%u: f64, %w: f64):
    %q = arith.mulf %u, %u : f64
    %s = arith.addf %w, %q : f64
    linalg.yield %s : f64
  } -> tensor<30xf64>
  return %r : tensor<30xf64>
}
"""


def _kernels() -> str:
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(MODULE)
        run_pipeline(module, [LowerToGpu(stage="kernels")])
        return "\n".join(str(op) for op in module.body.operations
                         if op.operation.name == "gpu.module")


def _loop_bodies(text: str) -> list[str]:
    """The text of every innermost scf.for body (lines between its header and `}`)."""
    out, lines = [], text.splitlines()
    for k, line in enumerate(lines):
        if "scf.for" in line:
            indent = len(line) - len(line.lstrip())
            body = []
            for inner in lines[k + 1:]:
                if len(inner) - len(inner.lstrip()) <= indent:
                    break
                body.append(inner)
            if not any("scf.for" in b for b in body):
                out.append("\n".join(body))
    return out


def test_reduction_loops_keep_their_output_in_registers() -> None:
    text = _kernels()
    bodies = _loop_bodies(text)
    assert bodies, text
    # the output elements (30x20 and 30) are read once before and written once
    # after their reduction loops, never inside them
    for body in bodies:
        assert not re.search(r"memref\.(load|store) [^\n]*memref<30x20xf32>", body), body
        assert not re.search(r"memref\.(load|store) [^\n]*memref<30xf64>", body), body
    assert text.count("iter_args") >= 3, text  # mm's loop, sum2's two


def test_carried_accumulators_match_numpy_on_the_cpu() -> None:
    rng = np.random.default_rng(8)
    a = rng.standard_normal((30, 70)).astype(np.float32)
    b = rng.standard_normal((70, 20)).astype(np.float32)
    x = rng.standard_normal((30, 7, 9))
    compiled = CompiledModule(MODULE, pipeline=parallel_stage_on_cpu_pipeline())
    np.testing.assert_allclose(compiled["mm"](a, b), a.astype(np.float64) @ b, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(compiled["sum2"](x), (x * x).sum(axis=(1, 2)), rtol=1e-13)


# A thread's share of a one-element loop (`for %i = %t to 1 step 32`: only thread 0
# runs an iteration) accumulating into a shared element, as tiling makes it. Carrying
# the element through the share loop would make every thread store it after its
# (empty) share: 31 threads writing back the value thread 0 changes (a race that
# gave the GMM gradient a relative error of 6 on an H200). Only the inner loop,
# with constant bounds, carries it.
SHARE = """
func.func @share(%m: memref<1xf64>, %x: memref<25xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c25 = arith.constant 25 : index
  %c32 = arith.constant 32 : index
  scf.parallel (%b) = (%c0) to (%c1) step (%c1) {
    scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
      scf.for %i = %t to %c1 step %c32 {
        scf.for %k = %c0 to %c25 step %c1 {
          %v = memref.load %x[%k] : memref<25xf64>
          %a = memref.load %m[%c0] : memref<1xf64>
          %s = arith.addf %a, %v : f64
          memref.store %s, %m[%c0] : memref<1xf64>
        }
      }
      scf.reduce
    }
    scf.reduce
  }
  return
}
"""


def test_thread_shares_keep_their_stores_inside() -> None:
    from mlir_autodiff.transforms.gpu.accumulators import ScalarAccumulators

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(SHARE)
        run_pipeline(module, [ScalarAccumulators()])
        text = str(module)
    lines = text.splitlines()
    share = next(k for k, line in enumerate(lines) if "scf.for %arg4 = %arg3 to" in line)
    depth = len(lines[share]) - len(lines[share].lstrip())
    for k, line in enumerate(lines):
        if "memref.load %arg0" in line or "memref.store" in line:
            assert k > share and len(line) - len(line.lstrip()) > depth, text
    assert text.count("iter_args") == 1, text
