"""Fusion control (transforms/cpu/fusion.py): broadcast and recomputable producers cloned per
consumer, producers kept out of contractions that would recompute them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_cases import (
    fused_ir,
    randn,
    strict_schedules,  # noqa: F401  (autouse)
)

from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

#: GMM's centred points xc[k, n, d] = x[n, d] - mu[k, d], read by an
#: elementwise op, a sum over the points and a contraction.
BROADCAST_CONSUMERS = """
#xd = affine_map<(k, n, d) -> (n, d)>
#kd = affine_map<(k, n, d) -> (k, d)>
#knd = affine_map<(k, n, d) -> (k, n, d)>
#q = affine_map<(k, n, i, j) -> (k, i, j)>
#xj = affine_map<(k, n, i, j) -> (k, n, j)>
#ci = affine_map<(k, n, i, j) -> (k, n, i)>
func.func @f(%x: tensor<256x20xf64>, %mu: tensor<8x20xf64>, %g: tensor<8x256x20xf64>,
             %qm: tensor<8x20x20xf64>)
    -> (tensor<8x256x20xf64>, tensor<8x20xf64>, tensor<8x256x20xf64>) {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<8x256x20xf64>
  %xc = linalg.generic {indexing_maps = [#xd, #kd, #knd],
                        iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mu : tensor<256x20xf64>, tensor<8x20xf64>) outs(%e : tensor<8x256x20xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %r = arith.subf %a, %b : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>
  %p = linalg.generic {indexing_maps = [#knd, #knd, #knd],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%xc, %g : tensor<8x256x20xf64>, tensor<8x256x20xf64>) outs(%e : tensor<8x256x20xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %r = arith.mulf %a, %b : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>
  %e2 = tensor.empty() : tensor<8x20xf64>
  %f2 = linalg.fill ins(%z : f64) outs(%e2 : tensor<8x20xf64>) -> tensor<8x20xf64>
  %s = linalg.generic {indexing_maps = [#knd, #knd, #kd],
                       iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%xc, %g : tensor<8x256x20xf64>, tensor<8x256x20xf64>) outs(%f2 : tensor<8x20xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %m = arith.mulf %a, %b : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<8x20xf64>
  %f3 = linalg.fill ins(%z : f64) outs(%e : tensor<8x256x20xf64>) -> tensor<8x256x20xf64>
  %c = linalg.generic {indexing_maps = [#q, #xj, #ci],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%qm, %xc : tensor<8x20x20xf64>, tensor<8x256x20xf64>) outs(%f3 : tensor<8x256x20xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %m = arith.mulf %a, %b : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>
  return %p, %s, %c : tensor<8x256x20xf64>, tensor<8x20xf64>, tensor<8x256x20xf64>
}
"""


@pytest.mark.parametrize("unshare", [True, False])
def test_broadcast_producer_fuses_into_each_non_contraction_consumer(
        unshare: bool) -> None:
    """x - mu is recomputed inside the elementwise op and the sum over points
    (they read x and mu, not an 8 MB xc); the contraction reads it materialized."""
    ir_text = fused_ir(BROADCAST_CONSUMERS, unshare_broadcasts=unshare)
    assert ir_text.count("arith.subf") == (3 if unshare else 1)
    lines = ir_text.splitlines()
    contraction = next(line for line in lines
                       if "tensor<8x20x20xf64>, tensor<8x256x20xf64>) outs" in line)
    xc = re.search(r"ins\(%arg3, (%\w+) :", contraction).group(1)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{xc} = "))
    assert "arith.subf" in "\n".join(lines[start:start + 4])  # the materialized broadcast


@pytest.mark.parametrize("threads", [1, 2])
def test_broadcast_consumers_match_numpy(threads: int) -> None:
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cm = CompiledModule(BROADCAST_CONSUMERS,
                        pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    x, mu = RNG.standard_normal((256, 20)), RNG.standard_normal((8, 20))
    g, q = RNG.standard_normal((8, 256, 20)), RNG.standard_normal((8, 20, 20))
    p, s, c = cm["f"](x, mu, g, q)
    xc = x[None] - mu[:, None]
    np.testing.assert_allclose(p, xc * g, rtol=1e-15)
    np.testing.assert_allclose(s, np.sum(xc * g, axis=1), rtol=1e-13, atol=1e-13 * 16)
    np.testing.assert_allclose(c, np.einsum("kij,knj->kni", q, xc), rtol=1e-13,
                               atol=1e-13 * np.sqrt(20))


#: GMM's qx = diag * (x - mu) + L (x - mu), fused from its pieces, read by
#: the squared norms and by the cotangent scaled per point.
RECOMPUTED_PRODUCER = """
#kd = affine_map<(k, n, d) -> (k, d)>
#nd = affine_map<(k, n, d) -> (n, d)>
#knd = affine_map<(k, n, d) -> (k, n, d)>
#kn = affine_map<(k, n, d) -> (k, n)>
func.func @f(%diag: tensor<8x20xf64>, %x: tensor<256x20xf64>, %mu: tensor<8x20xf64>,
             %lx: tensor<8x256x20xf64>, %c: tensor<8x256xf64>)
    -> (tensor<8x256xf64>, tensor<8x256x20xf64>) {
  %e = tensor.empty() : tensor<8x256x20xf64>
  %qx = linalg.generic {indexing_maps = [#kd, #nd, #kd, #knd, #knd],
                        iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%diag, %x, %mu, %lx : tensor<8x20xf64>, tensor<256x20xf64>, tensor<8x20xf64>,
          tensor<8x256x20xf64>) outs(%e : tensor<8x256x20xf64>) {
  ^bb0(%d: f64, %xv: f64, %m: f64, %l: f64, %o: f64):
    %s = arith.subf %xv, %m : f64
    %p = arith.mulf %d, %s : f64
    %r = arith.addf %p, %l : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>
  %z = arith.constant 0.0 : f64
  %e2 = tensor.empty() : tensor<8x256xf64>
  %f2 = linalg.fill ins(%z : f64) outs(%e2 : tensor<8x256xf64>) -> tensor<8x256xf64>
  %sq = linalg.generic {indexing_maps = [#knd, #kn],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%qx : tensor<8x256x20xf64>) outs(%f2 : tensor<8x256xf64>) {
  ^bb0(%q: f64, %o: f64):
    %m = arith.mulf %q, %q : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<8x256xf64>
  %g = linalg.generic {indexing_maps = [#knd, #kn, #knd],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%qx, %c : tensor<8x256x20xf64>, tensor<8x256xf64>) outs(%e : tensor<8x256x20xf64>) {
  ^bb0(%q: f64, %cv: f64, %o: f64):
    %r = arith.mulf %q, %cv : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>
  return %sq, %g : tensor<8x256xf64>, tensor<8x256x20xf64>
}
"""


@pytest.mark.parametrize("unshare", [True, False])
def test_recomputed_producer_is_not_written(unshare: bool) -> None:
    """qx is recomputed inside both of its readers (each reads L (x - mu)), so
    no op writes it: one [8, 256, 20] result (the scaled cotangent), not two."""
    ir_text = fused_ir(RECOMPUTED_PRODUCER, unshare_recomputed=unshare)
    assert ir_text.count("} -> tensor<8x256x20xf64>") == (1 if unshare else 2)
    assert ir_text.count("arith.subf") == (2 if unshare else 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_recomputed_producer_matches_numpy(threads: int) -> None:
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cm = CompiledModule(RECOMPUTED_PRODUCER,
                        pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    diag, x, mu = (RNG.standard_normal(s) for s in ((8, 20), (256, 20), (8, 20)))
    lx, c = RNG.standard_normal((8, 256, 20)), RNG.standard_normal((8, 256))
    sq, g = cm["f"](diag, x, mu, lx, c)
    qx = diag[:, None] * (x[None] - mu[:, None]) + lx
    np.testing.assert_allclose(sq, np.sum(qx * qx, axis=2), rtol=1e-13)
    np.testing.assert_allclose(g, qx * c[..., None], rtol=1e-15)


# -- fusion control, zero products, self-copies -----------------------------------------------

#: tanh(x + b) feeding a contraction generic (what reshape propagation makes of
#: the vmap'd MLP layer `tanh(x @ W1 + b1) @ W2`), and a row sum of tanh(x + b).
TANH_INTO_CONTRACTION = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @f(%x: tensor<64x128xf32>, %bias: tensor<128xf32>, %w: tensor<128x10xf32>)
    -> (tensor<64x10xf32>, tensor<64xf32>) {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %h = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %bias : tensor<64x128xf32>, tensor<128xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<64x128xf32>
  %e2 = tensor.empty() : tensor<64x10xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e2 : tensor<64x10xf32>) -> tensor<64x10xf32>
  %y = linalg.generic {indexing_maps = [#a, #b, #c],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %w : tensor<64x128xf32>, tensor<128x10xf32>) outs(%z : tensor<64x10xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x10xf32>
  %h2 = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %bias : tensor<64x128xf32>, tensor<128xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<64x128xf32>
  %e3 = tensor.empty() : tensor<64xf32>
  %z3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%h2 : tensor<64x128xf32>) outs(%z3 : tensor<64xf32>) {
  ^bb0(%p: f32, %acc: f32):
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %y, %r : tensor<64x10xf32>, tensor<64xf32>
}
"""


def _fused(text: str) -> str:
    """`text` after the CPU pipeline's elementwise fusion step (with its fusion control)."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.fusion import PinRecomputedProducers, UnpinProducers
    from mlir_autodiff.transforms.pipeline import run_pipeline

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx:
        module = ir.Module.parse(text)
        run_pipeline(module, [PinRecomputedProducers(), "func.func(linalg-fuse-elementwise-ops)",
                              UnpinProducers()])
        return str(module)


def _generic_bodies(text: str) -> list[str]:
    """The text of each linalg.generic (header to its closing `} -> `)."""
    return ["linalg.generic" + part.split("} -> ")[0]
            for part in text.split("linalg.generic")[1:]]


def test_producer_not_recomputed_inside_a_contraction() -> None:
    """tanh(x + b) stays its own op instead of being fused into the contraction (which
    would compute tanh once per output column, 10x, and lose the matmul schedule), while
    the same producer still fuses into a row sum that reads each element once."""
    text = _fused(TANH_INTO_CONTRACTION)
    bodies = _generic_bodies(text)
    contraction = [b for b in bodies if "arith.mulf" in b]
    assert len(contraction) == 1 and "math.tanh" not in contraction[0]
    row_sum = [b for b in bodies if '"reduction"' in b and "arith.mulf" not in b]
    assert len(row_sum) == 1 and "math.tanh" in row_sum[0]
    assert "autodiff.pinned_results" not in text
    assert "-> (tensor<64x10xf32>, tensor<64xf32>)" in text  # signature restored
    cm = CompiledModule(TANH_INTO_CONTRACTION)
    x, b, w = randn(64, 128), randn(128), randn(128, 10)
    h = np.tanh(x.astype(np.float64) + b)
    y, r = cm["f"](x, b, w)
    np.testing.assert_allclose(y, h @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, h.sum(1), rtol=1e-5, atol=1e-5)
