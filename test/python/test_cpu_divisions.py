"""Divisions by a broadcast value (transforms/cpu/divisions.py): one reciprocal per row.
"""

from __future__ import annotations

import numpy as np
from cpu_cases import strict_schedules  # noqa: F401  (autouse)

from mlir_autodiff.runtime import CompiledModule

RNG = np.random.default_rng(11)

def test_division_by_a_row_value_is_one_reciprocal_per_row() -> None:
    """x / s[row] becomes x * r[row] with r = 1 / s computed over the rows
    only (no division per element), and the result matches numpy's division
    to within the one extra rounding."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.divisions import ReciprocalOfBroadcastDivisors
    from mlir_autodiff.transforms.pipeline import run_pipeline

    text = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @f(%x: tensor<64x256xf32>, %s: tensor<64xf32>) -> tensor<64x256xf32> {
  %e = tensor.empty() : tensor<64x256xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%e : tensor<64x256xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %q = arith.divf %a, %b : f32
    linalg.yield %q : f32
  } -> tensor<64x256xf32>
  return %r : tensor<64x256xf32>
}"""
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx:
        module = ir.Module.parse(text)
        run_pipeline(module, [ReciprocalOfBroadcastDivisors()])
        generics = [op for op in module.body.operations[0].regions[0].blocks[0].operations
                    if op.operation.name == "linalg.generic"]
        bodies = [[o.operation.name for o in g.regions[0].blocks[0].operations]
                  for g in generics]
        shapes = [str(g.results[0].type) for g in generics]
    assert shapes == ["tensor<64xf32>", "tensor<64x256xf32>"]
    assert bodies == [["arith.constant", "arith.divf", "linalg.yield"],
                      ["arith.mulf", "linalg.yield"]]
    x = RNG.standard_normal((64, 256)).astype(np.float32)
    s = RNG.uniform(0.5, 2.0, 64).astype(np.float32)
    got = CompiledModule(text)["f"](x, s)
    np.testing.assert_allclose(got, x.astype(np.float64) / s[:, None], rtol=2.5e-7)
