"""Which ops the CPU schedules take (transforms/cpu/classify.py): small contractions, integer
contractions, multi-input reductions that are not contractions, reversed reads and
unvectorizable reductions keep the scalar loops, and the rest keeps its schedule.
"""

from __future__ import annotations

import numpy as np
from cpu_cases import (
    contraction_text,
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

import mlir_autodiff as ad
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import classify

RNG = np.random.default_rng(11)

def test_small_contraction_keeps_scalar_loops() -> None:
    """Below the matmul threshold (compile time) the loops stay scalar."""
    text, _ = contraction_text([16, 1, 16, 16], ["d0,d1,d3", "d3,d2", "d0,d1,d2"], "f32")
    assert "vector<" not in CompiledModule(text).lowered_text


def test_integer_contractions_keep_integer_arithmetic() -> None:
    """i32 matmul and K = 1 batch_matmul (the schedules rebuild float bodies): exact."""
    cm = CompiledModule("""
func.func @f(%a: tensor<128x128xi32>, %b: tensor<128x128xi32>, %c: tensor<4x128x1xi32>,
             %d: tensor<4x1x64xi32>) -> (tensor<128x128xi32>, tensor<4x128x64xi32>) {
  %z = arith.constant 0 : i32
  %e = tensor.empty() : tensor<128x128xi32>
  %f = linalg.fill ins(%z : i32) outs(%e : tensor<128x128xi32>) -> tensor<128x128xi32>
  %r = linalg.matmul ins(%a, %b : tensor<128x128xi32>, tensor<128x128xi32>)
                     outs(%f : tensor<128x128xi32>) -> tensor<128x128xi32>
  %e2 = tensor.empty() : tensor<4x128x64xi32>
  %f2 = linalg.fill ins(%z : i32) outs(%e2 : tensor<4x128x64xi32>) -> tensor<4x128x64xi32>
  %r2 = linalg.batch_matmul ins(%c, %d : tensor<4x128x1xi32>, tensor<4x1x64xi32>)
                            outs(%f2 : tensor<4x128x64xi32>) -> tensor<4x128x64xi32>
  return %r, %r2 : tensor<128x128xi32>, tensor<4x128x64xi32>
}""")
    a, b = (RNG.integers(-99, 99, (128, 128)).astype(np.int32) for _ in range(2))
    c = RNG.integers(-99, 99, (4, 128, 1)).astype(np.int32)
    d = RNG.integers(-99, 99, (4, 1, 64)).astype(np.int32)
    r, r2 = cm["f"](a, b, c, d)
    np.testing.assert_array_equal(r, a.astype(np.int64) @ b)
    np.testing.assert_array_equal(r2, c.astype(np.int64) @ d)


def test_multi_input_reduction_that_is_not_a_contraction() -> None:
    """sum_k (a - b)^2 has two inputs and a reduction but no mul-add body: scalar, right."""
    m, k = 64, 512
    t2, t1 = f"tensor<{m}x{k}xf32>", f"tensor<{m}xf32>"
    cm = CompiledModule(f"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @f(%a: {t2}, %b: {t2}) -> {t1} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {t1}
  %f = linalg.fill ins(%z : f32) outs(%e : {t1}) -> {t1}
  %r = linalg.generic {{indexing_maps = [#id, #id, #row], iterator_types = ["parallel", "reduction"]}}
      ins(%a, %b : {t2}, {t2}) outs(%f : {t1}) {{
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %d = arith.subf %p, %q : f32
    %s = arith.mulf %d, %d : f32
    %t = arith.addf %acc, %s : f32
    linalg.yield %t : f32
  }} -> {t1}
  return %r : {t1}
}}""")
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((m, k)).astype(
        np.float32)
    want = ((a.astype(np.float64) - b) ** 2).sum(1)
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=1e-5)


def test_reversed_reads_stay_on_scalar_loops() -> None:
    """`x[::-1]` indexes with `d0 * -1 + (n-1)`; tiling such a map aborted the
    process inside linalg's tiling utilities. Large reversed reads compile and
    agree with numpy."""
    x = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 7.0
    got = ad.jit(lambda w: w[::-1] * 2.0 + w[:, ::-1])(x)
    np.testing.assert_array_equal(got, x[::-1] * 2.0 + x[:, ::-1])


#: Reductions linalg's vectorizer does not take: a combiner it does not know
#: (`init - x`), and a result stored transposed. Scheduled, the transform
#: script failed at them, and every other op of the module (the matmul here)
#: lost its schedule with it.
UNVECTORIZABLE_REDUCTIONS = """
#knj = affine_map<(k, n, j) -> (k, n, j)>
#kj = affine_map<(k, n, j) -> (k, j)>
#jk = affine_map<(k, n, j) -> (j, k)>
func.func @f(%g: tensor<50x1000x20xf64>, %i1: tensor<50x20xf64>, %i2: tensor<20x50xf64>,
             %a: tensor<256x256xf32>, %b: tensor<256x256xf32>)
    -> (tensor<50x20xf64>, tensor<20x50xf64>, tensor<256x256xf32>) {
  %d = linalg.generic {indexing_maps = [#knj, #kj], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%g : tensor<50x1000x20xf64>) outs(%i1 : tensor<50x20xf64>) {
  ^bb0(%x: f64, %o: f64):
    %r = arith.subf %o, %x : f64
    linalg.yield %r : f64
  } -> tensor<50x20xf64>
  %t = linalg.generic {indexing_maps = [#knj, #jk], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%g : tensor<50x1000x20xf64>) outs(%i2 : tensor<20x50xf64>) {
  ^bb0(%x: f64, %o: f64):
    %r = arith.addf %o, %x : f64
    linalg.yield %r : f64
  } -> tensor<20x50xf64>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %c0 = linalg.fill ins(%z : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %c = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>)
                     outs(%c0 : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %d, %t, %c : tensor<50x20xf64>, tensor<20x50xf64>, tensor<256x256xf32>
}
"""


def test_unvectorizable_reductions_keep_the_loops_and_the_rest_its_schedule() -> None:
    """The two reductions are not scheduled (classify), the module compiles
    (strict: no schedule failed), the matmul is vectorized, and all agree with numpy."""
    from mlir import ir

    ctx = ir.Context()
    with ctx:
        module = ir.Module.parse(UNVECTORIZABLE_REDUCTIONS)
        ops = [o.operation for o in module.body.operations[0].regions[0].blocks[0].operations]
        kinds = {o.name: classify.classify(o) for o in ops if o.name.startswith("linalg.")}
        reductions = [classify.classify(o) for o in ops if o.name == "linalg.generic"]
    assert reductions == [None, None] and kinds["linalg.matmul"].kind == "contraction"
    cm = CompiledModule(UNVECTORIZABLE_REDUCTIONS)
    assert "vector.contract" in scheduled_ir(UNVECTORIZABLE_REDUCTIONS)
    g = RNG.standard_normal((50, 1000, 20))
    i1, i2 = RNG.standard_normal((50, 20)), RNG.standard_normal((20, 50))
    a, b = (RNG.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    d, t, c = cm["f"](g, i1, i2, a, b)
    np.testing.assert_allclose(d, i1 - g.sum(axis=1), rtol=1e-12, atol=1e-12 * 32)
    np.testing.assert_allclose(t, i2 + g.sum(axis=1).T, rtol=1e-12, atol=1e-12 * 32)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * 16)
