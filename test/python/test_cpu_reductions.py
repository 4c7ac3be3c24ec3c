"""Reduction rewrites (transforms/cpu/reductions.py): reductions generalized so their
producers fuse, sibling sums merged into one pass, sums moved in front of contractions.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_cases import (
    facts,
    fused_ir,
    reference_schedules,  # noqa: F401  (used below)
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import parameters
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

# the structure checked here (vector widths, tiles) is derived for 512-bit vectors
# and 48 KB of L1d; the numbers are checked on the host whatever it is
pytestmark = pytest.mark.usefixtures("reference_schedules")

def test_sum_of_squares_is_one_pass() -> None:
    """sum(w * w) (weight decay): the product fuses into the generalized
    reduction, so no temporary array is allocated; the fused body stays a
    vector reduction (one horizontal sum per row, not a unit-dim
    vector.contract lowered lane by lane: 65 of them); it matches numpy."""
    w = RNG.standard_normal((784, 512)).astype(np.float32)
    fn = lambda w: anp.sum(w * w)
    main = ad.lower(fn, w).as_text("llvm").split("llvm.func @_mlir_ciface")[0]
    assert "@malloc" not in main
    assert main.count("vector.reduce.fadd") == 1
    np.testing.assert_allclose(ad.jit(fn)(w), (w.astype(np.float64) ** 2).sum(), rtol=1e-5)


#: GMM's gradient's three sums over points of the same cotangent g: for the
#: means (g * (x - mu), and -g) and for the diagonal (-w * g), the last
#: accumulated onto a sum that the second flows into (here 2 * (-sum g)).
SIBLING_SUMS = """
#xd = affine_map<(k, n, d) -> (n, d)>
#kd = affine_map<(k, n, d) -> (k, d)>
#knd = affine_map<(k, n, d) -> (k, n, d)>
#id = affine_map<(k, d) -> (k, d)>
func.func @f(%x: tensor<50x1000x20xf64>, %mu: tensor<50x20xf64>, %g: tensor<50x1000x20xf64>,
             %w: tensor<50x20xf64>, %xs: tensor<1000x20xf64>)
    -> (tensor<50x20xf64>, tensor<50x20xf64>, tensor<50x20xf64>) {
  %z = arith.constant 0.0 : f64
  %two = arith.constant 2.0 : f64
  %e = tensor.empty() : tensor<50x20xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<50x20xf64>) -> tensor<50x20xf64>
  %s1 = linalg.generic {indexing_maps = [#xd, #kd, #knd, #kd],
                        iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%xs, %mu, %g : tensor<1000x20xf64>, tensor<50x20xf64>, tensor<50x1000x20xf64>)
      outs(%f : tensor<50x20xf64>) {
  ^bb0(%a: f64, %b: f64, %c: f64, %o: f64):
    %dd = arith.subf %a, %b : f64
    %m = arith.mulf %c, %dd : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<50x20xf64>
  %s2 = linalg.generic {indexing_maps = [#knd, #kd],
                        iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%g : tensor<50x1000x20xf64>) outs(%f : tensor<50x20xf64>) {
  ^bb0(%c: f64, %o: f64):
    %m = arith.negf %c : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<50x20xf64>
  %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s2 : tensor<50x20xf64>) outs(%e : tensor<50x20xf64>) {
  ^bb0(%c: f64, %o: f64):
    %m = arith.mulf %c, %two : f64
    linalg.yield %m : f64
  } -> tensor<50x20xf64>
  %s3 = linalg.generic {indexing_maps = [#kd, #knd, #kd],
                        iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%w, %g : tensor<50x20xf64>, tensor<50x1000x20xf64>) outs(%h : tensor<50x20xf64>) {
  ^bb0(%a: f64, %c: f64, %o: f64):
    %m = arith.mulf %c, %a : f64
    %n = arith.negf %m : f64
    %r = arith.addf %o, %n : f64
    linalg.yield %r : f64
  } -> tensor<50x20xf64>
  // Reads %s1's result: not a sibling to merge with it.
  %s4 = linalg.generic {indexing_maps = [#kd, #knd, #kd],
                        iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%s1, %g : tensor<50x20xf64>, tensor<50x1000x20xf64>) outs(%f : tensor<50x20xf64>) {
  ^bb0(%a: f64, %c: f64, %o: f64):
    %m = arith.mulf %c, %a : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<50x20xf64>
  return %s1, %s3, %s4 : tensor<50x20xf64>, tensor<50x20xf64>, tensor<50x20xf64>
}"""


def _sum_result_counts(text: str) -> list[int]:
    """The number of results of each reducing linalg.generic in `text`, sorted."""
    return sorted(facts(text, lambda op: len(op.results) if op.name == "linalg.generic"
                         and "reduction" in str(op.attributes["iterator_types"]) else None))


def _sibling_sums_reference(x, mu, g, w, xs):
    s1 = np.einsum("knd,knd->kd", g, xs[None] - mu[:, None])
    return s1, -2 * g.sum(1) - w * g.sum(1), np.einsum("knd,kd->kd", g, s1)


@pytest.mark.parametrize("merge", [True, False])
def test_sibling_sums_over_points_merge_into_one_pass(
        merge: bool) -> None:
    """Three sums over points of g become one generic with three results (one
    pass over g), the third starting from +0 with its init (a sum the second
    flows into) added after; the sum that reads the first's result stays
    apart. Scheduled, the merged sums keep their rows in registers across the
    points, in power-of-two pieces (16 + 4 f64 lanes)."""
    fused = fused_ir(SIBLING_SUMS, through="MergeSiblingReductions", merge_sibling_reductions=merge)
    assert _sum_result_counts(fused) == ([1, 3] if merge else [1, 1, 1, 1])
    scheduled = scheduled_ir(fused)
    carried = set(re.findall(r"iter_args\([^)]*\) -> \((vector<\d+xf64>)", scheduled))
    if merge and parameters.host_vector_bits() == 512:
        assert {"vector<16xf64>", "vector<4xf64>"} <= carried, carried
    assert "vector<20xf64>" not in carried
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s) for s in ((50, 1000, 20), (50, 20), (50, 1000, 20),
                                             (50, 20), (1000, 20))]
    for threads in (1, 2):
        if threads > 1 and openmp_runtime_library() is None:
            continue
        cm = CompiledModule(SIBLING_SUMS, pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
        for got, want in zip(cm["f"](*args), _sibling_sums_reference(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-12,
                                       atol=1e-12 * np.abs(want).max())


#: %c[k, n, j] = sum_i L[k, i, j] g[k, n, i] from zero: each function of
#: `SUMMED_CONTRACTIONS` starts with it.
_LT_G = """  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<8x256x20xf64>
  %f0 = linalg.fill ins(%z : f64) outs(%e : tensor<8x256x20xf64>) -> tensor<8x256x20xf64>
  %c = linalg.generic {indexing_maps = [#l, #gi, #cj],
                       iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%l, %g : tensor<8x20x20xf64>, tensor<8x256x20xf64>) outs(%f0 : tensor<8x256x20xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %m = arith.mulf %a, %b : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<8x256x20xf64>"""

#: Reverse mode's d(means) in GMM: the cotangent g[k, n, i] of L_k (x_n - mu_k)
#: through L, -sum_n (diag[k, j] g[k, n, j] + sum_i L[k, i, j] g[k, n, i]) (@f);
#: the same sum with the opposite sign, stored transposed (@t); a sum of
#: squares of a contraction, which is not linear in it (@sq).
SUMMED_CONTRACTIONS = f"""
#l = affine_map<(k, n, i, j) -> (k, i, j)>
#gi = affine_map<(k, n, i, j) -> (k, n, i)>
#cj = affine_map<(k, n, i, j) -> (k, n, j)>
#knj = affine_map<(k, n, j) -> (k, n, j)>
#kj = affine_map<(k, n, j) -> (k, j)>
#jk = affine_map<(k, n, j) -> (j, k)>
func.func @f(%l: tensor<8x20x20xf64>, %g: tensor<8x256x20xf64>, %diag: tensor<8x20xf64>)
    -> tensor<8x20xf64> {{
{_LT_G}
  %zs = arith.constant dense<0.0> : tensor<8x20xf64>
  %s = linalg.generic {{indexing_maps = [#kj, #knj, #knj, #kj],
                       iterator_types = ["parallel", "reduction", "parallel"]}}
      ins(%diag, %g, %c : tensor<8x20xf64>, tensor<8x256x20xf64>, tensor<8x256x20xf64>)
      outs(%zs : tensor<8x20xf64>) {{
  ^bb0(%d: f64, %b: f64, %cv: f64, %o: f64):
    %m = arith.mulf %b, %d : f64
    %a = arith.addf %cv, %m : f64
    %n = arith.negf %a : f64
    %r = arith.addf %o, %n : f64
    linalg.yield %r : f64
  }} -> tensor<8x20xf64>
  return %s : tensor<8x20xf64>
}}
func.func @t(%l: tensor<8x20x20xf64>, %g: tensor<8x256x20xf64>, %diag: tensor<8x20xf64>,
             %init: tensor<20x8xf64>) -> tensor<20x8xf64> {{
{_LT_G}
  %s = linalg.generic {{indexing_maps = [#knj, #kj, #knj, #jk],
                       iterator_types = ["parallel", "reduction", "parallel"]}}
      ins(%g, %diag, %c : tensor<8x256x20xf64>, tensor<8x20xf64>, tensor<8x256x20xf64>)
      outs(%init : tensor<20x8xf64>) {{
  ^bb0(%b: f64, %d: f64, %cv: f64, %o: f64):
    %m = arith.mulf %b, %d : f64
    %a = arith.subf %o, %m : f64
    %r = arith.addf %a, %cv : f64
    linalg.yield %r : f64
  }} -> tensor<20x8xf64>
  return %s : tensor<20x8xf64>
}}
func.func @sq(%l: tensor<8x20x20xf64>, %g: tensor<8x256x20xf64>) -> tensor<8x20xf64> {{
{_LT_G}
  %e2 = tensor.empty() : tensor<8x20xf64>
  %f2 = linalg.fill ins(%z : f64) outs(%e2 : tensor<8x20xf64>) -> tensor<8x20xf64>
  %s = linalg.generic {{indexing_maps = [#knj, #kj],
                       iterator_types = ["parallel", "reduction", "parallel"]}}
      ins(%c : tensor<8x256x20xf64>) outs(%f2 : tensor<8x20xf64>) {{
  ^bb0(%cv: f64, %o: f64):
    %m = arith.mulf %cv, %cv : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  }} -> tensor<8x20xf64>
  return %s : tensor<8x20xf64>
}}
"""


def _functions(ir_text: str) -> dict[str, str]:
    parts = re.split(r"(?=func\.func @)", ir_text)
    return {re.match(r"func\.func @(\w+)", p).group(1): p for p in parts[1:]}


@pytest.mark.parametrize("enabled", [True, False])
def test_sum_moves_in_front_of_the_contraction(enabled: bool) -> None:
    """The [8, 256, 20] contraction disappears from @f and @t (its operand g is
    summed over n instead, and a [8, 20, 20] one is added); @sq keeps it."""
    funcs = _functions(fused_ir(SUMMED_CONTRACTIONS, sum_before_contracting=enabled))
    for name in ("f", "t"):
        big = funcs[name].count("} -> tensor<8x256x20xf64>")  # generics' results
        assert big == (0 if enabled else 1), funcs[name]
        assert ("tensor<8x20x20xf64>, tensor<8x20xf64>) outs" in funcs[name]) == enabled
    assert funcs["sq"].count("} -> tensor<8x256x20xf64>") == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_summed_contractions_match_numpy(threads: int) -> None:
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cm = CompiledModule(SUMMED_CONTRACTIONS,
                        pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    lm, g = RNG.standard_normal((8, 20, 20)), RNG.standard_normal((8, 256, 20))
    diag, init = RNG.standard_normal((8, 20)), RNG.standard_normal((20, 8))
    c = np.einsum("kij,kni->knj", lm, g)
    tol = {"rtol": 1e-12, "atol": 1e-12 * np.sqrt(256 * 20)}
    np.testing.assert_allclose(cm["f"](lm, g, diag), -np.sum(g * diag[:, None] + c, axis=1),
                               **tol)
    np.testing.assert_allclose(cm["t"](lm, g, diag, init),
                               init + np.sum(c - g * diag[:, None], axis=1).T, **tol)
    np.testing.assert_allclose(cm["sq"](lm, g), np.sum(c * c, axis=1), **tol)
