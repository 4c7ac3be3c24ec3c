"""Contraction schedules and CPU threads of `--autodiff-lower-to-cpu` (transforms/cpu/).

Contractions written as `linalg.generic` (vmap and reverse mode emit them:
unit dims, batch dims, transposed or swapped operands, f32 and f64) are
checked against numpy's float64 einsum, with `AUTODIFF_STRICT_SCHEDULES=1`
so a schedule that fails to apply fails the test, and the lowered code is
checked for the vector FMAs that make them fast. K = 1 contractions (outer
products) must fuse with their consumer. `jit(threads=2)` must give the
results of `threads=1`.
"""

from __future__ import annotations

import os
import platform
import re
import sys

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
import numpy as np
import pytest
from mlir_autodiff.errors import CompilationError
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import classify, contraction, openmp, parameters, row_groups
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library
from mlir_autodiff.transforms.cpu.pipeline import THREADS_ENV, cpu_threads

RNG = np.random.default_rng(11)
LETTERS = "abcdefgh"


@pytest.fixture(autouse=True)
def strict_schedules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule that fails to apply raises here (users get the unscheduled code)."""
    monkeypatch.setenv("AUTODIFF_STRICT_SCHEDULES", "1")


def _contraction(ranges: list[int], maps: list[str], dt: str) -> tuple[str, list[list[int]]]:
    """MLIR for C = A * B summed over the loop dims C lacks; maps as "d0,d2,d3"."""
    n = len(ranges)
    dims = [[int(d.strip()[1:]) for d in m.split(",")] for m in maps]
    shapes = [[ranges[d] for d in ds] for ds in dims]
    ts = ["tensor<" + "".join(f"{s}x" for s in sh) + dt + ">" for sh in shapes]
    args = ", ".join(f"d{i}" for i in range(n))
    amaps = ", ".join(f"affine_map<({args}) -> ({m})>" for m in maps)
    iters = ", ".join('"parallel"' if i in dims[2] else '"reduction"' for i in range(n))
    text = f"""
func.func @f(%a: {ts[0]}, %b: {ts[1]}) -> {ts[2]} {{
  %z = arith.constant 0.0 : {dt}
  %e = tensor.empty() : {ts[2]}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {ts[2]}) -> {ts[2]}
  %r = linalg.generic {{indexing_maps = [{amaps}], iterator_types = [{iters}]}}
      ins(%a, %b : {ts[0]}, {ts[1]}) outs(%f : {ts[2]}) {{
  ^bb0(%p: {dt}, %q: {dt}, %acc: {dt}):
    %m = arith.mulf %p, %q : {dt}
    %s = arith.addf %acc, %m : {dt}
    linalg.yield %s : {dt}
  }} -> {ts[2]}
  return %r : {ts[2]}
}}"""
    return text, dims


CONTRACTIONS = {
    # vmap of `x @ w` over the rows of x: a unit dim between batch and columns.
    "vmap_matvec": ([64, 1, 128, 256], ["d0,d1,d3", "d3,d2", "d0,d1,d2"]),
    # reverse mode's weight gradient x^T @ g: lhs read transposed.
    "xt_g": ([256, 64, 128], ["d2,d0", "d2,d1", "d0,d1"]),
    # GMM objective: Q[k] @ xc[k, n]^T, C's innermost dim strided in Q (relayout).
    "gmm_q_xc": ([25, 200, 10, 10], ["d0,d2,d3", "d0,d1,d3", "d0,d1,d2"]),
    # GMM gradient: batched, operands swapped, reduced over the long dim.
    "gmm_grad_n": ([25, 200, 10, 10], ["d0,d1,d3", "d0,d1,d2", "d0,d2,d3"]),
    "gmm_grad_i": ([25, 200, 10, 10], ["d0,d2,d3", "d0,d1,d2", "d0,d1,d3"]),
    # GMM objective: einsum("ijp,kp->kij", selector, l); i and j always appear
    # together, so they collapse into one loop and this is a 25 x 190 x 400 matmul.
    "gmm_selector": ([25, 20, 20, 190], ["d1,d2,d3", "d0,d3", "d0,d1,d2"]),
    # its reverse w.r.t. l: two reduced dims (i, j), collapsed into one.
    "gmm_selector_grad": ([25, 190, 20, 20], ["d2,d3,d1", "d0,d2,d3", "d0,d1"]),
    # GMM d20: D = 20 is no multiple of the lanes; split into whole registers + 4.
    "gmm20_q_xc": ([6, 120, 20, 20], ["d0,d2,d3", "d0,d1,d3", "d0,d1,d2"]),
    "gmm20_grad_n": ([6, 120, 20, 20], ["d0,d1,d3", "d0,d1,d2", "d0,d2,d3"]),
    # vector-matrix product (no register rows), N not a multiple of the lanes.
    "vecmat": ([48, 8192], ["d1", "d1,d0", "d0"]),
    # batch matmul whose sizes divide no register tile.
    "odd_batch": ([4, 37, 41, 53], ["d0,d1,d3", "d0,d3,d2", "d0,d1,d2"]),
}


@pytest.mark.parametrize("dt,np_dt,rtol", [("f32", np.float32, 2e-5),
                                           ("f64", np.float64, 1e-13)])
@pytest.mark.parametrize("name", list(CONTRACTIONS))
def test_contraction_generic(name: str, dt: str, np_dt: type, rtol: float) -> None:
    ranges, maps = CONTRACTIONS[name]
    text, dims = _contraction(ranges, maps, dt)
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


def test_small_contraction_keeps_scalar_loops() -> None:
    """Below the matmul threshold (compile time) the loops stay scalar."""
    text, _ = _contraction([16, 1, 16, 16], ["d0,d1,d3", "d3,d2", "d0,d1,d2"], "f32")
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


# -- threads ----------------------------------------------------------------------------------


def test_cpu_threads_default_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert cpu_threads(None) == 1
    assert cpu_threads(3) == 3
    monkeypatch.setenv(THREADS_ENV, "2")
    assert cpu_threads(None) == 2
    assert ad.jit(lambda x: x).threads == 2
    assert ad.jit(lambda x: x, threads=1).threads == 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            ad.jit(lambda x: x, threads=bad)
    monkeypatch.setenv(THREADS_ENV, "two")
    with pytest.raises(ValueError, match=f"{THREADS_ENV} must be a positive integer"):
        ad.jit(lambda x: x)


def _mlp(params, x):
    w1, w2 = params
    h = anp.tanh(x @ w1)
    return anp.sum(anp.exp(h @ w2 * 0.1)) + anp.sum(h * h)


@pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                    reason="the intel-openmp dependency is declared for Linux x86-64 only")
def test_the_openmp_dependency_is_found() -> None:
    """On Linux x86-64 the package depends on intel-openmp, so threads > 1 always
    works there (and the threaded tests below run instead of skipping)."""
    path = openmp_runtime_library()
    assert path is not None and os.path.exists(path)


def test_threads_need_the_openmp_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an OpenMP runtime, threads=2 is a compile error that says what is missing."""
    monkeypatch.setattr(openmp, "openmp_runtime_library", lambda: None)
    params = (RNG.standard_normal((256, 256)).astype(np.float32),
              RNG.standard_normal((256, 64)).astype(np.float32))
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    with pytest.raises(CompilationError, match="OpenMP runtime"):
        ad.jit(_mlp, threads=2)(params, x)


@pytest.mark.skipif(openmp_runtime_library() is None,
                    reason="no OpenMP runtime (intel-openmp or libomp) is installed: "
                           "threads > 1 cannot run here")
def test_two_threads_give_the_results_of_one() -> None:
    """value_and_grad of an MLP large enough to be split over threads (matmuls,
    elementwise and reductions), threads=2 against threads=1 and float64 numpy."""
    os.environ.setdefault("KMP_BLOCKTIME", "0")  # idle workers must not spin in the suite
    w1 = (RNG.standard_normal((256, 256)) / 16).astype(np.float32)
    w2 = (RNG.standard_normal((256, 64)) / 16).astype(np.float32)
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    f1 = ad.jit(ad.value_and_grad(_mlp), threads=1)
    f2 = ad.jit(ad.value_and_grad(_mlp), threads=2)
    (v1, (g11, g12)), (v2, (g21, g22)) = f1((w1, w2), x), f2((w1, w2), x)
    exe = next(iter(f2._cache.values()))
    assert "omp.parallel" in exe.compiled.lowered_text
    np.testing.assert_allclose(v2, v1, rtol=1e-5)
    np.testing.assert_allclose(g21, g11, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g22, g12, rtol=1e-4, atol=1e-5)
    # Independent check of the gradient of w2 (float64 numpy).
    x64, w164, w264 = x.astype(np.float64), w1.astype(np.float64), w2.astype(np.float64)
    h = np.tanh(x64 @ w164)
    e = np.exp(h @ w264 * 0.1)
    np.testing.assert_allclose(v2, e.sum() + (h * h).sum(), rtol=1e-4)
    np.testing.assert_allclose(g22, h.T @ (0.1 * e), rtol=1e-3, atol=1e-3)


# -- packed matmuls ---------------------------------------------------------------------------


def _scheduled_ir(text: str, threads: int = 1) -> str:
    """The module after the schedule pass alone (tiled and vectorized, on tensors)."""
    from mlir import ir
    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.schedule_linalg import ScheduleLinalgForCpu
    from mlir_autodiff.transforms.pipeline import run_pipeline

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx:
        module = ir.Module.parse(text)
        run_pipeline(module, [ScheduleLinalgForCpu(threads=threads, strict=True)])
        return str(module)


@pytest.mark.parametrize("maps", [["d0,d2", "d2,d1", "d0,d1"], ["d2,d0", "d2,d1", "d0,d1"]],
                         ids=["a_b", "at_b"])
@pytest.mark.parametrize("dt,np_dt,rtol", [("f32", np.float32, 2e-5),
                                           ("f64", np.float64, 1e-13)])
def test_large_matmul_reads_b_packed(maps: list[str], dt: str, np_dt: type,
                                     rtol: float) -> None:
    """512 x 384 x 512: above PACK_MIN_FLOPS, B is copied to [N / nr, K, nr] first."""
    ranges = [512, 512, 384]  # (m, n, k)
    text, dims = _contraction(ranges, maps, dt)
    nr = parameters.matmul_schedule().nr // (int(dt[1:]) // 32)
    assert f"tensor<{512 // nr}x384x{nr}x{dt}>" in _scheduled_ir(text)
    cm = CompiledModule(text)
    a, b = (RNG.standard_normal([ranges[d] for d in ds]).astype(np_dt) for ds in dims[:2])
    a64 = a.astype(np.float64)
    want = (a64 if maps[0] == "d0,d2" else a64.T) @ b.astype(np.float64)
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=rtol, atol=rtol * np.sqrt(384))


@pytest.mark.skipif(parameters.host_vector_bits() != 512,
                    reason="the split is chosen for 512-bit vectors (8 f64 lanes)")
@pytest.mark.parametrize("threads", [1, 2])
def test_vector_dim_splits_into_whole_registers_and_a_power_of_two_rest(threads: int) -> None:
    """C[k, n, i] = sum_j L[k, i, j] x[k, n, j] with D = 20 in f64: register
    tiles 16 and 4 wide (two zmm, one ymm), not 5 wide (a partial zmm each)."""
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    ranges, maps = CONTRACTIONS["gmm20_q_xc"]
    text, dims = _contraction(ranges, maps, "f64")
    ir_text = _scheduled_ir(text)
    assert re.search(r"into vector<\d+x16xf64>", ir_text)
    assert re.search(r"into vector<\d+x4xf64>", ir_text)
    assert "x5xf64>" not in ir_text
    cm = CompiledModule(text, pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    a, b = (RNG.standard_normal([ranges[d] for d in ds]) for ds in dims[:2])
    np.testing.assert_allclose(cm["f"](a, b), np.einsum("kij,knj->kni", a, b), rtol=1e-13,
                               atol=1e-13 * np.sqrt(20))


@pytest.mark.skipif(parameters.host_vector_bits() != 512,
                    reason="the row count is chosen for 512-bit vectors (32 zmm registers)")
@pytest.mark.parametrize("name,rows", [("gmm20_grad_n", 10), ("gmm_grad_n", 10),
                                       ("xt_g", 8)])
def test_register_rows_divide_m_up_to_ten(name: str, rows: int) -> None:
    """GMM's d(L)[k, i, j] = sum_n g[k, n, i] xc[k, n, j] (f64) has M = D:
    D = 20 runs as two tiles of 10 rows (not four of 5), D = 10 as one; an M
    that 8 divides and 10 does not keeps 8 rows."""
    ranges, maps = CONTRACTIONS[name]
    text, dims = _contraction(ranges, maps, "f64")
    tiles = set(re.findall(r"into vector<(\d+)x\d+xf64>", _scheduled_ir(text)))
    assert tiles == {str(rows)}, tiles
    a, b = (RNG.standard_normal([ranges[d] for d in ds]) for ds in dims[:2])
    want = np.einsum(a, dims[0], b, dims[1], dims[2])
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b), want, rtol=1e-12,
                               atol=1e-12 * np.sqrt(ranges[1]))


@pytest.mark.parametrize("k", [100, 102], ids=["k_multiple_of_4", "k_with_remainder"])
def test_matmul_k_loop_is_unrolled(k: int) -> None:
    """The register tile's k loop does MATMUL_K_UNROLL rank-1 updates per
    iteration; the k % MATMUL_K_UNROLL last steps run in a remainder loop."""
    unroll = parameters.MATMUL_K_UNROLL
    assert unroll > 1
    text, _ = _contraction([64, 64, k], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    ir_text = _scheduled_ir(text)
    main = k - k % unroll
    body = ir_text.split(f"to %c{main} step %c{unroll} iter_args")[1].split("scf.yield")[0]
    assert body.count("vector.contract") == unroll
    remainder = re.search(rf"scf.for %\w+ = %c{main} to %c{k} step %c1 ", ir_text)
    assert (remainder is not None) == bool(k % unroll)
    a = RNG.standard_normal((64, k)).astype(np.float32)
    b = RNG.standard_normal((k, 64)).astype(np.float32)
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b),
                               a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5 * np.sqrt(k))


@pytest.mark.parametrize("k,zero_start", [(100, True), (512, False)],
                         ids=["k_in_the_register_tile", "k_cache_tiled"])
def test_register_tiles_start_at_zero_instead_of_reading_a_zero_fill(
        k: int, zero_start: bool) -> None:
    """With the whole k loop inside the register tile, C's zero fill is not
    written: each tile's accumulators start from a zero vector. With k tiled
    for the cache, tiles accumulate over several k blocks, so C is filled
    and read back."""
    text, _ = _contraction([64, 64, k], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    ir_text = _scheduled_ir(text)
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
    ir_text = _scheduled_ir(text)
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
    text, _ = _contraction([1024, 1024, k], ["d2,d0", "d2,d1", "d0,d1"], "f32")
    ir_text = _scheduled_ir(text)
    # No fill; the k loops start from a zero constant, not from a read of C.
    assert "linalg.fill" not in ir_text
    assert re.search(r"iter_args\(%\w+ = %cst\w*\) -> \(vector<", ir_text)
    cm = CompiledModule(text, pipeline=f"autodiff-lower-to-cpu{{threads={threads}}}")
    a = RNG.standard_normal((k, 1024)).astype(np.float32)
    b = RNG.standard_normal((k, 1024)).astype(np.float32)
    np.testing.assert_allclose(cm["f"](a, b), a.T.astype(np.float64) @ b, rtol=2e-5,
                               atol=2e-5 * np.sqrt(k))


@pytest.mark.skipif(openmp_runtime_library() is None,
                    reason="no OpenMP runtime (intel-openmp or libomp) is installed: "
                           "threads > 1 cannot run here")
def test_packed_matmul_on_two_threads() -> None:
    """Both the packing copy of B and the matmul are split over the threads."""
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    text, _ = _contraction([512, 512, 512], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    cm = CompiledModule(text, pipeline="autodiff-lower-to-cpu{threads=2}")
    assert cm.lowered_text.count("omp.parallel") == 2
    a, b = (RNG.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(cm["f"](a, b), a.astype(np.float64) @ b, rtol=2e-5,
                               atol=2e-5 * np.sqrt(512))


def test_threads_do_not_split_a_vector_into_pieces() -> None:
    """GMM d10's Q (x - mu) with 1002 points: [25, 1002, 10] f64. K = 25 and
    M = 1002 / 2 (no whole register tiles of rows) do not split evenly, and
    halves of N = 10 would be 5 lanes per thread, sharing cache lines: the op
    stays on one thread. With N = 32 (whole vectors per half) it is split;
    with 1000 points, M splits into 500 rows per thread."""
    maps = ["d0,d1,d3", "d0,d3,d2", "d0,d1,d2"]
    ranges = [25, 1002, 10, 10]
    text, dims = _contraction(ranges, maps, "f64")
    assert "scf.forall" not in _scheduled_ir(text, threads=2)
    wide, _ = _contraction([25, 1002, 32, 10], maps, "f64")
    assert "scf.forall" in _scheduled_ir(wide, threads=2)
    if parameters.host_vector_bits() == 512:  # 10-row tiles
        rows, _ = _contraction([25, 1000, 10, 10], maps, "f64")
        assert "[25, 500, 10] [1, 1, 1]" in _scheduled_ir(rows, threads=2)
    if openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cm = CompiledModule(text, pipeline="autodiff-lower-to-cpu{threads=2}")
    a, b = (RNG.standard_normal([ranges[d] for d in ds]) for ds in dims[:2])
    np.testing.assert_allclose(cm["f"](a, b), np.einsum("knj,kji->kni", a, b), rtol=1e-13,
                               atol=1e-13 * np.sqrt(10))


def test_reversed_reads_stay_on_scalar_loops() -> None:
    """`x[::-1]` indexes with `d0 * -1 + (n-1)`; tiling such a map aborted the
    process inside linalg's tiling utilities. Large reversed reads compile and
    agree with numpy."""
    x = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 7.0
    got = ad.jit(lambda w: w[::-1] * 2.0 + w[:, ::-1])(x)
    np.testing.assert_array_equal(got, x[::-1] * 2.0 + x[:, ::-1])


# -- row groups -------------------------------------------------------------------------------


def _layer_norm(x):
    mu = anp.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = anp.mean(xc * xc, axis=-1, keepdims=True)
    return xc / anp.sqrt(var + 1e-5)


def _np_layer_norm(x):
    xc = x - x.mean(axis=-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + 1e-5)


def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


ROW_CASES = {
    "softmax": (lambda x: ad.nn.softmax(x, axis=-1), _np_softmax),
    "log_softmax": (lambda x: ad.nn.log_softmax(x, axis=-1),
                    lambda x: np.log(_np_softmax(x))),
    "layer_norm": (_layer_norm, _np_layer_norm),
}


def _recording_row_groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the member count of every row group the pipeline fuses."""
    found: list[int] = []
    real = row_groups.row_groups

    def record(module):
        groups = real(module)
        found.extend(len(g.members) for g in groups)
        return groups

    monkeypatch.setattr(row_groups, "row_groups", record)
    return found


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(512, 256), (4, 64, 384)])
@pytest.mark.parametrize("name", list(ROW_CASES))
def test_row_groups_match_numpy(name: str, shape: tuple[int, ...], threads: int,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Softmax, log-softmax and layer norm over the last dim run as one fused
    row loop (rows of a rank-2 or rank-3 array, one or two threads) and
    match float64 numpy."""
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run here")
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    fused = _recording_row_groups(monkeypatch)
    ours, ref = ROW_CASES[name]
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    got = ad.jit(ours, threads=threads)(x)
    assert fused and min(fused) >= 4, fused  # the reductions and their consumers, one loop
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-5, atol=2e-6)


def test_row_group_gradient_matches_the_analytic_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradient of sum(softmax(x) * w), s * (w - sum(s * w)), against that
    formula in float64 numpy: forward and backward (multi-input reductions
    included) are one row group."""
    fused = _recording_row_groups(monkeypatch)
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    w = RNG.standard_normal((256, 512)).astype(np.float32)
    g = ad.jit(ad.grad(lambda x, w: anp.sum(ad.nn.softmax(x, axis=-1) * w)))(x, w)
    assert fused and max(fused) >= 8, fused  # two reductions forward, two backward, ...
    s = _np_softmax(x.astype(np.float64))
    want = s * (w - (s * w).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)


def _facts(text: str, fact) -> list:
    """`fact(op)` for every op of module `text` where it is not None."""
    from mlir import ir
    from mlir_autodiff import dialects

    ctx = ir.Context()
    dialects.load(ctx)
    found = []
    with ctx:
        def visit(op: ir.Operation) -> ir.WalkResult:
            value = fact(op)
            if value is not None:
                found.append(value)
            return ir.WalkResult.ADVANCE

        ir.Module.parse(text).operation.walk(visit)
    return found


def _allocs_in_loops(text: str) -> int:
    """The number of memref.alloc ops inside an scf.for in module `text`."""
    def in_loop(op):
        parent = op.parent
        while op.name == "memref.alloc" and parent is not None and parent.name != "func.func":
            if parent.name == "scf.for":
                return True
            parent = parent.parent
        return None

    return len(_facts(text, in_loop))


@pytest.mark.parametrize("ahead", [0, 1])
@pytest.mark.parametrize("shape", [(512, 1024), (4, 64, 384)])
def test_row_loops_prefetch_the_next_tile_and_allocate_once(
        shape: tuple[int, ...], ahead: int) -> None:
    """Softmax's row loop prefetches the input rows of the next tile (one
    prefetch per cache line, read-only: the output it writes is not
    prefetched) and its per-tile intermediate is allocated once, outside the
    loop, not once per tile; the result still matches numpy."""
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    softmax = ROW_CASES["softmax"][0]
    text = ad.lower(softmax, x).as_text("autodiff")
    lowered = _fused_ir(text, through="PrefetchRowTiles", prefetch_tiles_ahead=ahead)
    prefetches = re.findall(r"memref\.prefetch (%\w+)\[[^\]]*\], (\w+)", lowered)
    assert prefetches == ([("%arg0", "read")] if ahead else []), prefetches
    if ahead:
        step = re.search(r"memref\.prefetch[^\n]*\n", lowered)
        assert step and "scf.for" in lowered[:step.start()]
    assert _allocs_in_loops(lowered) == 0, lowered
    np.testing.assert_allclose(ad.jit(softmax)(x), _np_softmax(x.astype(np.float64)),
                               rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("cols", [16, 32, 64, 128])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_row_reductions_whose_row_is_one_vector_step(op: str, cols: int) -> None:
    """Rows exactly as long as the partial-sum vector (or a multiple) compile
    and match numpy: a row of 16 f32 once left unlowered vector ops behind."""
    x = RNG.standard_normal((4096, cols)).astype(np.float32)
    got = ad.jit(lambda a: getattr(anp, op)(a, axis=-1))(x)
    want = getattr(np, op)(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


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


def _fused_ir(text: str, through: str = "SumBeforeContracting", **options: object) -> str:
    """The module after the CPU pipeline's elementwise fusion (both rounds) and
    the rewrite of summed contractions after it (or up to pass `through`),
    with `options` of `--autodiff-lower-to-cpu`."""
    from mlir import ir
    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.pipeline import LowerToCpu
    from mlir_autodiff.transforms.pipeline import run_pipeline

    elements = list(LowerToCpu(**options).expand())  # type: ignore[arg-type]
    end = next(i for i, e in enumerate(elements) if type(e).__name__ == through) + 1
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx:
        module = ir.Module.parse(text)
        run_pipeline(module, elements[:end])
        return str(module)


@pytest.mark.parametrize("unshare", [True, False])
def test_broadcast_producer_fuses_into_each_non_contraction_consumer(
        unshare: bool) -> None:
    """x - mu is recomputed inside the elementwise op and the sum over points
    (they read x and mu, not an 8 MB xc); the contraction reads it materialized."""
    ir_text = _fused_ir(BROADCAST_CONSUMERS, unshare_broadcasts=unshare)
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


def _sum_over_points(k: int, n: int, d: int) -> str:
    """@f(x, mu, g) = sum over points of g * (x - mu): [k, n, d] -> [k, d] f64
    (three inputs, the broadcast fused in)."""
    return f"""
#xd = affine_map<(k, n, d) -> (n, d)>
#kd = affine_map<(k, n, d) -> (k, d)>
#knd = affine_map<(k, n, d) -> (k, n, d)>
func.func @f(%x: tensor<{n}x{d}xf64>, %mu: tensor<{k}x{d}xf64>, %g: tensor<{k}x{n}x{d}xf64>)
    -> tensor<{k}x{d}xf64> {{
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<{k}x{d}xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<{k}x{d}xf64>) -> tensor<{k}x{d}xf64>
  %s = linalg.generic {{indexing_maps = [#xd, #kd, #knd, #kd],
                       iterator_types = ["parallel", "reduction", "parallel"]}}
      ins(%x, %mu, %g : tensor<{n}x{d}xf64>, tensor<{k}x{d}xf64>, tensor<{k}x{n}x{d}xf64>)
      outs(%f : tensor<{k}x{d}xf64>) {{
  ^bb0(%a: f64, %b: f64, %c: f64, %o: f64):
    %dd = arith.subf %a, %b : f64
    %m = arith.mulf %c, %dd : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  }} -> tensor<{k}x{d}xf64>
  return %s : tensor<{k}x{d}xf64>
}}"""


def test_multi_input_outer_reduction_is_vectorized() -> None:
    """sum over points of g * (x - mu): whole rows of D = 20 lanes, not scalar loops."""
    text = _sum_over_points(8, 256, 20)
    assert re.search(r"vector\.transfer_read [^\n]*vector<20xf64>", _scheduled_ir(text))
    x, mu, g = (RNG.standard_normal(s) for s in ((256, 20), (8, 20), (8, 256, 20)))
    np.testing.assert_allclose(CompiledModule(text)["f"](x, mu, g),
                               np.einsum("knd,knd->kd", g, x[None] - mu[:, None]),
                               rtol=1e-13, atol=1e-13 * 16)


def test_batched_dot_product_is_a_vectorized_reduction() -> None:
    """sum over points of a * b with a and b indexed alike: `acc + a * b`, but
    no contraction (no free dim on either side); a vectorized outer reduction,
    whose product stays elementwise (a vector.contract over the unit reduced
    dim lowered to one scalar add per lane)."""
    text = """
#knd = affine_map<(k, n, d) -> (k, n, d)>
#kd = affine_map<(k, n, d) -> (k, d)>
func.func @f(%a: tensor<8x256x20xf64>, %b: tensor<8x256x20xf64>) -> tensor<8x20xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<8x20xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<8x20xf64>) -> tensor<8x20xf64>
  %s = linalg.generic {indexing_maps = [#knd, #knd, #kd],
                       iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : tensor<8x256x20xf64>, tensor<8x256x20xf64>) outs(%f : tensor<8x20xf64>) {
  ^bb0(%p: f64, %q: f64, %o: f64):
    %m = arith.mulf %p, %q : f64
    %r = arith.addf %o, %m : f64
    linalg.yield %r : f64
  } -> tensor<8x20xf64>
  return %s : tensor<8x20xf64>
}"""
    scheduled = _scheduled_ir(text)
    assert re.search(r"vector\.transfer_read [^\n]*vector<20xf64>", scheduled)
    assert "vector.contract" not in scheduled
    a, b = RNG.standard_normal((8, 256, 20)), RNG.standard_normal((8, 256, 20))
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b), np.einsum("knd,knd->kd", a, b),
                               rtol=1e-13, atol=1e-13 * 16)


@pytest.mark.skipif(parameters.host_vector_bits() != 512,
                    reason="the row length is chosen for 512-bit vectors (8 f64 lanes)")
def test_short_elementwise_rows_are_one_vector() -> None:
    """[50, 1000, 20] f64 (GMM's scaled cotangent): one 20-lane vector per row,
    not five 4-lane pieces."""
    text = """
#knd = affine_map<(k, n, d) -> (k, n, d)>
#kn = affine_map<(k, n, d) -> (k, n)>
func.func @f(%a: tensor<50x1000x20xf64>, %c: tensor<50x1000xf64>) -> tensor<50x1000x20xf64> {
  %e = tensor.empty() : tensor<50x1000x20xf64>
  %s = linalg.generic {indexing_maps = [#knd, #kn, #knd],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a, %c : tensor<50x1000x20xf64>, tensor<50x1000xf64>)
      outs(%e : tensor<50x1000x20xf64>) {
  ^bb0(%p: f64, %q: f64, %o: f64):
    %m = arith.mulf %p, %q : f64
    linalg.yield %m : f64
  } -> tensor<50x1000x20xf64>
  return %s : tensor<50x1000x20xf64>
}"""
    widths = set(re.findall(r"vector\.transfer_write [^\n]*: vector<(\d+)xf64>",
                            _scheduled_ir(text)))
    assert widths == {"20"}, widths
    a, c = RNG.standard_normal((50, 1000, 20)), RNG.standard_normal((50, 1000))
    np.testing.assert_array_equal(CompiledModule(text)["f"](a, c), a * c[..., None])


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
    return sorted(_facts(text, lambda op: len(op.results) if op.name == "linalg.generic"
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
    fused = _fused_ir(SIBLING_SUMS, through="MergeSiblingReductions", merge_sibling_reductions=merge)
    assert _sum_result_counts(fused) == ([1, 3] if merge else [1, 1, 1, 1])
    scheduled = _scheduled_ir(fused)
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


def test_outer_reduction_splits_its_parallel_first_loop_over_threads() -> None:
    """sum over points of g * (x - mu), [50, 1000, 20] -> [50, 20] f64: at 2
    threads the 50 rows of the result are split; column sums, whose first
    loop reduces, are not (the threads would race on every element)."""
    text = _sum_over_points(50, 1000, 20)
    columns = """
func.func @f(%g: tensor<50x1000x20xf64>, %i: tensor<1000x20xf64>) -> tensor<1000x20xf64> {
  %t = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>,
                                        affine_map<(a, b, c) -> (b, c)>],
                       iterator_types = ["reduction", "parallel", "parallel"]}
      ins(%g : tensor<50x1000x20xf64>) outs(%i : tensor<1000x20xf64>) {
  ^bb0(%gv: f64, %o: f64):
    %r = arith.addf %o, %gv : f64
    linalg.yield %r : f64
  } -> tensor<1000x20xf64>
  return %t : tensor<1000x20xf64>
}"""
    assert "scf.forall" not in _scheduled_ir(text, threads=1)
    assert _scheduled_ir(text, threads=2).count("scf.forall (") == 1
    assert "scf.forall" not in _scheduled_ir(columns, threads=2)
    if openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    pipeline = "autodiff-lower-to-cpu{threads=2}"
    x, mu, g = (RNG.standard_normal(sh) for sh in ((1000, 20), (50, 20), (50, 1000, 20)))
    np.testing.assert_allclose(CompiledModule(text, pipeline=pipeline)["f"](x, mu, g),
                               np.einsum("knd,knd->kd", g, x[None] - mu[:, None]),
                               rtol=1e-12, atol=1e-12 * 32)
    i = RNG.standard_normal((1000, 20))
    np.testing.assert_allclose(CompiledModule(columns, pipeline=pipeline)["f"](g, i),
                               i + g.sum(axis=0), rtol=1e-12, atol=1e-12 * 8)


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
    assert "vector.contract" in _scheduled_ir(UNVECTORIZABLE_REDUCTIONS)
    g = RNG.standard_normal((50, 1000, 20))
    i1, i2 = RNG.standard_normal((50, 20)), RNG.standard_normal((20, 50))
    a, b = (RNG.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    d, t, c = cm["f"](g, i1, i2, a, b)
    np.testing.assert_allclose(d, i1 - g.sum(axis=1), rtol=1e-12, atol=1e-12 * 32)
    np.testing.assert_allclose(t, i2 + g.sum(axis=1).T, rtol=1e-12, atol=1e-12 * 32)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * 16)


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
    ir_text = _fused_ir(RECOMPUTED_PRODUCER, unshare_recomputed=unshare)
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
    funcs = _functions(_fused_ir(SUMMED_CONTRACTIONS, sum_before_contracting=enabled))
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
