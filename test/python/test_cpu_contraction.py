"""Contractions in canonical form (transforms/cpu/contraction.py): contractions written as
`linalg.generic` (vmap and reverse mode emit them: unit dims, batch dims, transposed or
swapped operands, f32 and f64) against numpy's float64 einsum, collapsed dim runs, outer
products fused with their consumer, packed matmuls.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from cpu_cases import (
    CONTRACTIONS,
    LETTERS,
    contraction_text,
    randn,
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import contraction, parameters
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

@pytest.mark.parametrize("dt,np_dt,rtol", [("f32", np.float32, 2e-5),
                                           ("f64", np.float64, 1e-13)])
@pytest.mark.parametrize("name", list(CONTRACTIONS))
def test_contraction_generic(name: str, dt: str, np_dt: type, rtol: float) -> None:
    ranges, maps = CONTRACTIONS[name]
    text, dims = contraction_text(ranges, maps, dt)
    cm = CompiledModule(text)
    a, b = (RNG.standard_normal([ranges[d] for d in ds]).astype(np_dt) for ds in dims[:2])
    spec = ",".join("".join(LETTERS[d] for d in ds) for ds in dims[:2])
    spec += "->" + "".join(LETTERS[d] for d in dims[2])
    want = np.einsum(spec, a.astype(np.float64), b.astype(np.float64))
    k = int(np.prod([r for i, r in enumerate(ranges) if i not in dims[2]]))
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=rtol, atol=rtol * np.sqrt(k))
    # The register tile: vector FMAs (the scalar loops have only scalar ones).
    assert f"xf{dt[1:]}>, vector<" in cm.lowered_text.split("llvm.intr.fmuladd")[1][:300]


def test_dim_groups() -> None:
    """Runs of loop dims indexed together everywhere collapse; others stay apart."""
    par, red = "parallel", "reduction"
    assert contraction._dim_groups([[1, 2, 3], [0, 3], [0, 1, 2]],
                                     [par, par, par, red]) == [[0], [1, 2], [3]]
    # j, i in the other order in one operand: no run.
    assert contraction._dim_groups([[2, 1, 3], [0, 3], [0, 1, 2]],
                                     [par, par, par, red]) == [[0], [1], [2], [3]]
    # a parallel and a reduced dim never merge.
    assert contraction._dim_groups([[0, 1], [1], [0]], [par, red]) == [[0], [1]]


def test_outer_product_fuses_with_its_consumer() -> None:
    """K = 1 batch_matmul (per-sample weight gradients) + weight decay: one fused loop
    nest writing the caller's buffer (no temporary, no copy), results as numpy."""
    bt, m, n = 16, 96, 64
    ta, tb, tw, tc = (f"tensor<{bt}x{m}x1xf32>", f"tensor<{bt}x1x{n}xf32>",
                      f"tensor<{m}x{n}xf32>", f"tensor<{bt}x{m}x{n}xf32>")
    cm = CompiledModule(f"""
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#w = affine_map<(d0, d1, d2) -> (d1, d2)>
func.func @f(%a: {ta}, %b: {tb}, %w: {tw}) -> {tc} {{
  %z = arith.constant dense<0.0> : {tc}
  %p = linalg.batch_matmul ins(%a, %b : {ta}, {tb}) outs(%z : {tc}) -> {tc}
  %e = tensor.empty() : {tc}
  %c = arith.constant 2.0e-4 : f32
  %r = linalg.generic {{indexing_maps = [#id, #w, #id], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%p, %w : {tc}, {tw}) outs(%e : {tc}) {{
  ^bb0(%u: f32, %v: f32, %o: f32):
    %d = arith.mulf %v, %c : f32
    %s = arith.addf %u, %d : f32
    linalg.yield %s : f32
  }} -> {tc}
  return %r : {tc}
}}""")
    a, b = RNG.standard_normal((bt, m, 1)).astype(np.float32), RNG.standard_normal(
        (bt, 1, n)).astype(np.float32)
    w = RNG.standard_normal((m, n)).astype(np.float32)
    want = a.astype(np.float64) * b + 2e-4 * w.astype(np.float64)
    np.testing.assert_allclose(cm["f"](a, b, w), want, rtol=1e-6, atol=1e-7)
    assert "@malloc" not in cm.lowered_text
    assert "memcpy" not in cm.lowered_text


def test_per_sample_gradients_match_jax() -> None:
    """vmap(grad) of a tanh MLP (the contraction generics this schedule exists for), vs jax."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(3)
    # 64 x 1 x 128 x 96: above the matmul threshold (the vmapped `x @ w1` is scheduled).
    w1 = (rng.standard_normal((96, 128)) / 10).astype(np.float32)
    w2 = (rng.standard_normal((128, 10)) / 11).astype(np.float32)
    x = rng.standard_normal((64, 96)).astype(np.float32)

    def loss(xp, w1, w2, x):
        h = xp.tanh(xp.expand_dims(x, 0) @ w1)
        return xp.sum((h @ w2) ** 2) + 1e-3 * xp.sum(w1 * w1)

    ours = ad.jit(ad.vmap(ad.grad(lambda w1, w2, x: loss(anp, w1, w2, x), argnums=(0, 1)),
                          in_axes=(None, None, 0)))(w1, w2, x)
    theirs = jax.vmap(jax.grad(lambda w1, w2, x: loss(jnp, w1, w2, x), argnums=(0, 1)),
                      in_axes=(None, None, 0))(w1, w2, x)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, np.asarray(t), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("maps", [["d0,d2", "d2,d1", "d0,d1"], ["d2,d0", "d2,d1", "d0,d1"]],
                         ids=["a_b", "at_b"])
@pytest.mark.parametrize("dt,np_dt,rtol", [("f32", np.float32, 2e-5),
                                           ("f64", np.float64, 1e-13)])
def test_large_matmul_reads_b_packed(maps: list[str], dt: str, np_dt: type,
                                     rtol: float) -> None:
    """512 x 384 x 512: above PACK_MIN_FLOPS, B is copied to [N / nr, K, nr] first."""
    ranges = [512, 512, 384]  # (m, n, k)
    text, dims = contraction_text(ranges, maps, dt)
    nr = parameters.matmul_schedule().nr // (int(dt[1:]) // 32)
    assert f"tensor<{512 // nr}x384x{nr}x{dt}>" in scheduled_ir(text)
    cm = CompiledModule(text)
    a, b = (RNG.standard_normal([ranges[d] for d in ds]).astype(np_dt) for ds in dims[:2])
    a64 = a.astype(np.float64)
    want = (a64 if maps[0] == "d0,d2" else a64.T) @ b.astype(np.float64)
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=rtol, atol=rtol * np.sqrt(384))


@pytest.mark.skipif(openmp_runtime_library() is None,
                    reason="no OpenMP runtime (intel-openmp or libomp) is installed: "
                           "threads > 1 cannot run here")
def test_packed_matmul_on_two_threads() -> None:
    """Both the packing copy of B and the matmul are split over the threads."""
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    text, _ = contraction_text([512, 512, 512], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    cm = CompiledModule(text, pipeline="autodiff-lower-to-cpu{threads=2}")
    assert cm.lowered_text.count("omp.parallel") == 2
    a, b = (RNG.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(cm["f"](a, b), a.astype(np.float64) @ b, rtol=2e-5,
                               atol=2e-5 * np.sqrt(512))


CONTRACTION_GENERIC = """
#a = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @f(%x: tensor<16x1x16xf32>, %w: tensor<16x16xf32>) -> tensor<16x1x16xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x1x16xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<16x1x16xf32>) -> tensor<16x1x16xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x1x16xf32>, tensor<16x16xf32>) outs(%z : tensor<16x1x16xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x1x16xf32>
  return %r : tensor<16x1x16xf32>
}
"""


def test_contraction_written_as_a_generic_compiles_and_is_right():
    """A batched matvec from vmap (a reduction generic with two inputs and a unit dim)
    once vectorized into vector<1x1x1x16xf32>, which LLVM translation rejected."""
    cm = CompiledModule(CONTRACTION_GENERIC)
    x, w = randn(16, 1, 16), randn(16, 16)
    np.testing.assert_allclose(cm["f"](x, w), np.einsum("bik,kj->bij", x, w), rtol=1e-5,
                               atol=1e-5)


def test_batched_rows_times_one_matrix_split_into_heads() -> None:
    """`x[b, t, d] @ w[d, 3d]` split into q, k, v, each reshaped into heads (a
    transformer's fused qkv projection). The batch_matmul numpy's broadcasting
    writes reads w in place, not copied b times, and is one [b * t, d] x
    [d, 3d] matmul (ReadBroadcastsInContractions, collapse_contraction_dims);
    the strided slices are copied into the results by loops, not the runtime's
    memrefCopy (StridedCopiesToLoops). Values, and the gradient of
    sum(q * k * v), against float64 numpy."""
    from cpu_cases import facts, fused_ir

    b, t, d, h = 4, 32, 64, 4

    def qkv(x, w):
        return tuple(a.reshape(b, t, h, d // h) for a in anp.split(x @ w, 3, axis=-1))

    x, w = randn(b, t, d), randn(d, 3 * d) / 8
    text = ad.lower(qkv, x, w).as_text("autodiff")
    fused = fused_ir(text, through="ReadBroadcastsInContractions")
    assert "linalg.broadcast" not in fused and "linalg.batch_matmul" not in fused
    contractions = facts(fused, lambda op: op.name == "linalg.generic" and len(
        op.attributes["iterator_types"]) or None)
    assert contractions == [4]  # b, t, n parallel; k reduced (collapsed when scheduled)
    copied = fused_ir(text, through="StridedCopiesToLoops")
    assert "memref.copy" not in copied and copied.count("linalg.copy") == 3

    def loss(x, w):
        q, k, v = qkv(x, w)
        return anp.sum(q * k * v)

    (value, (gx, gw)), outs = ad.jit(lambda x, w: (ad.value_and_grad(loss, (0, 1))(x, w),
                                                  qkv(x, w)))(x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = x64 @ w64
    q, k, v = np.split(y, 3, axis=-1)
    for got, want in zip(outs, (q, k, v)):
        np.testing.assert_allclose(got, want.reshape(b, t, h, d // h), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, np.sum(q * k * v), rtol=1e-4)
    gy = np.concatenate([k * v, q * v, q * k], axis=-1)
    np.testing.assert_allclose(gx, gy @ w64.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, np.einsum("btd,btn->dn", x64, gy), rtol=1e-4, atol=1e-4)
