"""The schedule pass (transforms/cpu/schedule_linalg.py): contractions whose C starts as a
zero fill or a zero constant start their register tiles from zero vectors.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from cpu_cases import (
    contraction_text,
    reference_schedules,  # noqa: F401  (used below)
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import parameters
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

# which contraction keeps its k loop in the register tile depends on the caches
pytestmark = pytest.mark.usefixtures("reference_schedules")

@pytest.mark.parametrize("k,zero_start", [(100, True), (512, False)],
                         ids=["k_in_the_register_tile", "k_cache_tiled"])
def test_register_tiles_start_at_zero_instead_of_reading_a_zero_fill(
        k: int, zero_start: bool) -> None:
    """With the whole k loop inside the register tile, C's zero fill is not
    written: each tile's accumulators start from a zero vector. With k tiled
    for the cache, tiles accumulate over several k blocks, so C is filled
    and read back."""
    text, _ = contraction_text([64, 64, k], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    ir_text = scheduled_ir(text)
    if zero_start:
        assert "linalg.fill" not in ir_text and "arith.constant dense<0.0" in ir_text
    reads_of_c = re.findall(r"vector.transfer_read %extracted_slice\w*\[[^]]*\], %\w+ "
                            r"\{in_bounds = \[true, true\]\} : tensor<8x32xf32>", ir_text)
    assert bool(reads_of_c) != zero_start
    a = RNG.standard_normal((64, k)).astype(np.float32)
    b = RNG.standard_normal((k, 64)).astype(np.float32)
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b),
                               a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_zero_constant_accumulator_becomes_a_zero_start() -> None:
    """Reverse mode accumulates into splat zero constants; one used by a single
    contraction is neither copied from a global nor read: its tiles start at zero.
    A constant shared by two contractions stays."""
    text = """
func.func @f(%a: tensor<64x96xf32>, %b: tensor<96x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %z = arith.constant dense<0.0> : tensor<64x64xf32>
  %shared = arith.constant dense<0.0> : tensor<64x32xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x64xf32>)
                     outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32>
  %b0 = tensor.extract_slice %b[0, 0] [96, 32] [1, 1] : tensor<96x64xf32> to tensor<96x32xf32>
  %b1 = tensor.extract_slice %b[0, 32] [96, 32] [1, 1] : tensor<96x64xf32> to tensor<96x32xf32>
  %s0 = linalg.matmul ins(%a, %b0 : tensor<64x96xf32>, tensor<96x32xf32>)
                      outs(%shared : tensor<64x32xf32>) -> tensor<64x32xf32>
  %s1 = linalg.matmul ins(%a, %b1 : tensor<64x96xf32>, tensor<96x32xf32>)
                      outs(%shared : tensor<64x32xf32>) -> tensor<64x32xf32>
  %e = tensor.empty() : tensor<64x64xf32>
  %c0 = tensor.insert_slice %s0 into %e[0, 0] [64, 32] [1, 1] : tensor<64x32xf32> into tensor<64x64xf32>
  %c1 = tensor.insert_slice %s1 into %c0[0, 32] [64, 32] [1, 1] : tensor<64x32xf32> into tensor<64x64xf32>
  return %r, %c1 : tensor<64x64xf32>, tensor<64x64xf32>
}"""
    ir_text = scheduled_ir(text)
    assert "dense<0.000000e+00> : tensor<64x64xf32>" not in ir_text
    assert "dense<0.000000e+00> : tensor<64x32xf32>" in ir_text
    a = RNG.standard_normal((64, 96)).astype(np.float32)
    b = RNG.standard_normal((96, 64)).astype(np.float32)
    want = a.astype(np.float64) @ b
    for got in CompiledModule(text)["f"](a, b):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.sqrt(96))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k", [128, 640])
def test_packed_matmul_starting_at_zero(k: int, threads: int) -> None:
    """1024 x 1024 x k (packed B; K below `packed_k`, so the whole k loop is
    inside the register tile): no zero fill, same product on one and two threads."""
    assert k <= parameters.matmul_schedule().packed_k
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    text, _ = contraction_text([1024, 1024, k], ["d2,d0", "d2,d1", "d0,d1"], "f32")
    ir_text = scheduled_ir(text)
    # No fill; the k loops start from a zero constant, not from a read of C.
    assert "linalg.fill" not in ir_text
    assert re.search(r"iter_args\(%\w+ = %cst\w*\) -> \(vector<", ir_text)
    cm = CompiledModule(text, pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    a = RNG.standard_normal((k, 1024)).astype(np.float32)
    b = RNG.standard_normal((k, 1024)).astype(np.float32)
    np.testing.assert_allclose(cm["f"](a, b), a.T.astype(np.float64) @ b, rtol=2e-5,
                               atol=2e-5 * np.sqrt(k))
