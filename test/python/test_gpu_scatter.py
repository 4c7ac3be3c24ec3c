"""Scatter loops on the GPU (transforms/gpu/scatter_loops.py): a scatter-add runs
in parallel over the digits of its loop that keep its writes apart, with each
element's additions in their original order.

No GPU needed: kernel shapes at `stage=kernels`, the `parallel` stage run on the
CPU against numpy's `np.add.at`.
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
from mlir_autodiff.transforms.pipeline import run_pipeline

# An embedding table's gradient, as the front end writes it: every (token, feature)
# update, linearised, added at the token's row (ids clamped into the table).
# And the same scatter into a vector (ids only): nothing keeps its writes apart.
SCATTER = """
func.func @table(%ids: tensor<6x5xi32>, %upd: tensor<6x5x8xf32>) -> tensor<7x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c8 = arith.constant 8 : index
  %n = arith.constant 240 : index
  %lo = arith.constant 0 : i64
  %hi = arith.constant 6 : i64
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<7x8xf32>
  %t0 = linalg.fill ins(%z : f32) outs(%e : tensor<7x8xf32>) -> tensor<7x8xf32>
  %t = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t0) -> (tensor<7x8xf32>) {
    %f = arith.remui %i, %c8 : index
    %q = arith.divui %i, %c8 : index
    %s = arith.remui %q, %c5 : index
    %b = arith.divui %q, %c5 : index
    %id = tensor.extract %ids[%b, %s] : tensor<6x5xi32>
    %u = tensor.extract %upd[%b, %s, %f] : tensor<6x5x8xf32>
    %w = arith.extsi %id : i32 to i64
    %c = arith.minsi %w, %hi : i64
    %d = arith.maxsi %c, %lo : i64
    %r = arith.index_cast %d : i64 to index
    %old = tensor.extract %acc[%r, %f] : tensor<7x8xf32>
    %new = arith.addf %old, %u : f32
    %ins = tensor.insert %new into %acc[%r, %f] : tensor<7x8xf32>
    scf.yield %ins : tensor<7x8xf32>
  }
  return %t : tensor<7x8xf32>
}

func.func @vector(%ids: tensor<30xi32>, %upd: tensor<30xf32>) -> tensor<7xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 30 : index
  %lo = arith.constant 0 : i64
  %hi = arith.constant 6 : i64
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<7xf32>
  %t0 = linalg.fill ins(%z : f32) outs(%e : tensor<7xf32>) -> tensor<7xf32>
  %t = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t0) -> (tensor<7xf32>) {
    %id = tensor.extract %ids[%i] : tensor<30xi32>
    %u = tensor.extract %upd[%i] : tensor<30xf32>
    %w = arith.extsi %id : i32 to i64
    %c = arith.minsi %w, %hi : i64
    %d = arith.maxsi %c, %lo : i64
    %r = arith.index_cast %d : i64 to index
    %old = tensor.extract %acc[%r] : tensor<7xf32>
    %new = arith.addf %old, %u : f32
    %ins = tensor.insert %new into %acc[%r] : tensor<7xf32>
    scf.yield %ins : tensor<7xf32>
  }
  return %t : tensor<7xf32>
}

func.func @swap(%ids: tensor<40xi32>, %upd: tensor<40x8xf32>) -> tensor<8x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %n = arith.constant 320 : index
  %lo = arith.constant 0 : i64
  %hi = arith.constant 7 : i64
  %z = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %t0 = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %t = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t0) -> (tensor<8x8xf32>) {
    %f = arith.remui %i, %c8 : index
    %s = arith.divui %i, %c8 : index
    %id = tensor.extract %ids[%s] : tensor<40xi32>
    %u = tensor.extract %upd[%s, %f] : tensor<40x8xf32>
    %w = arith.extsi %id : i32 to i64
    %c = arith.minsi %w, %hi : i64
    %d = arith.maxsi %c, %lo : i64
    %r = arith.index_cast %d : i64 to index
    %old = tensor.extract %acc[%r, %f] : tensor<8x8xf32>
    %new = arith.addf %old, %u : f32
    %ins = tensor.insert %new into %acc[%f, %r] : tensor<8x8xf32>
    scf.yield %ins : tensor<8x8xf32>
  }
  return %t : tensor<8x8xf32>
}
"""


def _kernel_modules(text: str) -> dict[str, str]:
    """gpu.module name -> its text, at `stage=kernels`."""
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(stage="kernels")])
        return {op.operation.attributes["sym_name"].value: str(op)
                for op in module.body.operations if op.operation.name == "gpu.module"}


def test_table_scatter_runs_a_thread_per_feature() -> None:
    kernels = _kernel_modules(SCATTER)
    (table,) = [k for name, k in kernels.items() if name.startswith("table")]
    # one thread per feature column (8), each over the 30 (token) updates in order;
    # before: one thread over all 240
    assert "scf.for %arg3 = %thread_id_x to %c8 step" in table, table
    assert "to %c30 step %c1" in table and "%c240" not in table, table
    # the vector: every update may land on any element: one thread over all 30
    (vector,) = [k for name, k in kernels.items() if name.startswith("vector")]
    assert "to %c30 step %c1" in vector and "%thread_id_x to %c30" not in vector, vector
    # reading [r, f] and writing [f, r]: feature f's iterations meet feature r's
    (swap,) = [k for name, k in kernels.items() if name.startswith("swap")]
    assert "to %c320 step %c1" in swap, swap


def test_scatter_matches_numpy_on_the_cpu() -> None:
    rng = np.random.default_rng(3)
    ids = rng.integers(-2, 9, (6, 5)).astype(np.int32)  # some out of range: clamped
    upd = rng.standard_normal((6, 5, 8)).astype(np.float32)
    got = CompiledModule(SCATTER, pipeline=parallel_stage_on_cpu_pipeline())["table"](ids, upd)
    want = np.zeros((7, 8), np.float32)
    for b in range(6):
        for s in range(5):  # the serial loop's order, so the f32 sums are bit-identical
            want[np.clip(ids[b, s], 0, 6)] += upd[b, s]
    np.testing.assert_array_equal(got, want)
    vids = rng.integers(0, 7, 30).astype(np.int32)
    vupd = rng.standard_normal(30).astype(np.float32)
    got = CompiledModule(SCATTER, pipeline=parallel_stage_on_cpu_pipeline())["vector"](vids, vupd)
    want = np.zeros(7, np.float32)
    for i in range(30):
        want[vids[i]] += vupd[i]
    np.testing.assert_array_equal(got, want)
    sids = rng.integers(0, 8, 40).astype(np.int32)
    supd = rng.standard_normal((40, 8)).astype(np.float32)
    got = CompiledModule(SCATTER, pipeline=parallel_stage_on_cpu_pipeline())["swap"](sids, supd)
    want = np.ones((8, 8), np.float32)
    for i in range(320):
        f, s_ = i % 8, i // 8
        r = sids[s_]
        want[f, r] = want[r, f] + supd[s_, f]
    np.testing.assert_array_equal(got, want)
