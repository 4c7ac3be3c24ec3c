"""The transform-script builders (transforms/cpu/schedules.py): every scheduled kernel kind
(matmul, batch_matmul, elementwise, inner and outer reductions, transposes) against numpy
on shapes that divide the register tiles and shapes that do not, and the lowered code
checked for the vector code that makes it fast (register tiles, unrolled k loops, whole
vector rows, threads that split whole vectors).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_cases import (
    CONTRACTIONS,
    contraction_text,
    matmul_text,
    randn,
    reduce_text,
    reference_schedules,  # noqa: F401  (used below)
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
    tensor_type,
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

# -- matmul -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (128, 512, 96), (131, 90, 67), (150, 10, 200)])
def test_matmul(m: int, n: int, k: int) -> None:
    cm = CompiledModule(matmul_text(m, n, k))
    a, b = randn(m, k), randn(k, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    if n % 16 == 0:
        # The register tile: fused multiply-adds on rows of 16 f32 (AVX2) or 32 (AVX-512).
        assert re.search(r"llvm.intr.fmuladd\(.*\) : \(vector<(16|32)xf32>", cm.lowered_text)


def test_batch_matmul() -> None:
    bt, m, n, k = 4, 40, 48, 40
    a, b, c = tensor_type((bt, m, k), "f32"), tensor_type((bt, k, n), "f32"), tensor_type((bt, m, n), "f32")
    cm = CompiledModule(f"""
func.func @f(%a: {a}, %b: {b}) -> {c} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : f32) outs(%e : {c}) -> {c}
  %r = linalg.batch_matmul ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}""")
    x, y = randn(bt, m, k), randn(bt, k, n)
    np.testing.assert_allclose(cm["f"](x, y), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)
    assert "llvm.intr.fmuladd" in cm.lowered_text


def test_matmul_accumulates_into_init() -> None:
    """C += A B with a non-zero init (the accumulator tile is loaded, not assumed zero)."""
    m, n, k = 64, 64, 64
    a, b, c = tensor_type((m, k), "f32"), tensor_type((k, n), "f32"), tensor_type((m, n), "f32")
    cm = CompiledModule(f"""
func.func @f(%a: {a}, %b: {b}, %c: {c}) -> {c} {{
  %r = linalg.matmul ins(%a, %b : {a}, {b}) outs(%c : {c}) -> {c}
  return %r : {c}
}}""")
    x, y, z = randn(m, k), randn(k, n), randn(m, n)
    z0 = z.copy()
    np.testing.assert_allclose(cm["f"](x, y, z), z0 + x.astype(np.float64) @ y,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(z, z0)  # arguments are read-only


# -- elementwise and reductions ---------------------------------------------------------------


def test_elementwise_broadcast_chain_f32_and_f64() -> None:
    """tanh(x * w + b) with a row-broadcast bias, in f32 and f64."""
    for dt, np_dt, rtol in [("f32", np.float32, 3e-7), ("f64", np.float64, 1e-15)]:
        x2, r1 = tensor_type((96, 130), dt), tensor_type((130,), dt)
        cm = CompiledModule(f"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @f(%x: {x2}, %w: {x2}, %b: {r1}) -> {x2} {{
  %e = tensor.empty() : {x2}
  %r = linalg.generic {{indexing_maps = [#id, #id, #row, #id],
                        iterator_types = ["parallel", "parallel"]}}
      ins(%x, %w, %b : {x2}, {x2}, {r1}) outs(%e : {x2}) {{
    ^bb0(%a: {dt}, %c: {dt}, %d: {dt}, %o: {dt}):
      %m = arith.mulf %a, %c : {dt}
      %s = arith.addf %m, %d : {dt}
      %t = math.tanh %s : {dt}
      linalg.yield %t : {dt}
  }} -> {x2}
  return %r : {x2}
}}""")
        x, w, b = randn(96, 130, dtype=np_dt), randn(96, 130, dtype=np_dt), randn(130,
                                                                                 dtype=np_dt)
        s = x * w + b  # rounded in the working precision, as the kernel does
        np.testing.assert_allclose(cm["f"](x, w, b), np.tanh(s.astype(np.float64)),
                                   rtol=rtol, atol=0)
        # 130 columns: the widest vector tile dividing them is 2 elements.
        assert f"vector<2x{dt}>" in cm.lowered_text


@pytest.mark.parametrize("shape,dims", [((256, 128), [1]), ((256, 130), [1]),
                                        ((300, 48), [0]), ((12, 40, 24), [1]),
                                        ((256, 130), [0, 1]), ((12, 40, 24), [1, 2]),
                                        ((12, 40, 24), [0, 1, 2])])
@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_sum_and_max_reductions(shape, dims, dt, np_dt) -> None:
    x = randn(*shape, dtype=np_dt)
    fs = CompiledModule(reduce_text(shape, dims, dt, "arith.addf", "0.0"))["f"]
    rtol = 1e-5 if dt == "f32" else 1e-13
    np.testing.assert_allclose(fs(x), x.astype(np.float64).sum(tuple(dims)), rtol=rtol,
                               atol=rtol * np.sqrt(shape[dims[0]]))
    fm = CompiledModule(reduce_text(shape, dims, dt, "arith.maximumf", "0xFFF0000000000000"
                                if dt == "f64" else "0xFF800000"))["f"]
    np.testing.assert_array_equal(fm(x), x.max(tuple(dims)))


@pytest.mark.parametrize("shape", [(128, 96), (200, 130), (8, 1024)])
@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_transpose(shape: tuple[int, int], dt: str, np_dt: type) -> None:
    m, n = shape
    ti, to = tensor_type((m, n), dt), tensor_type((n, m), dt)
    cm = CompiledModule(f"""
func.func @f(%x: {ti}) -> {to} {{
  %e = tensor.empty() : {to}
  %t = linalg.transpose ins(%x : {ti}) outs(%e : {to}) permutation = [1, 0]
  return %t : {to}
}}""")
    x = randn(m, n, dtype=np_dt)
    np.testing.assert_array_equal(cm["f"](x), x.T)
    assert "vector<" in cm.lowered_text


def test_reduction_is_vectorized() -> None:
    cm = CompiledModule(reduce_text((256, 128), [1], "f32", "arith.addf", "0.0"))
    assert "vector<64xf32>" in cm.lowered_text  # REDUCTION.lanes: four 16-lane chains


def test_whole_array_reduction_is_vectorized() -> None:
    """sum(w * w) over a matrix (weight decay): scalar loops over rows around
    64-lane partial sums, not one dependent scalar add per element."""
    cm = CompiledModule(reduce_text((256, 128), [0, 1], "f32", "arith.addf", "0.0"))
    assert "vector<64xf32>" in cm.lowered_text


@pytest.mark.skipif(parameters.host_vector_bits() != 512,
                    reason="the split is chosen for 512-bit vectors (8 f64 lanes)")
@pytest.mark.parametrize("threads", [1, 2])
def test_vector_dim_splits_into_whole_registers_and_a_power_of_two_rest(threads: int) -> None:
    """C[k, n, i] = sum_j L[k, i, j] x[k, n, j] with D = 20 in f64: register
    tiles 16 and 4 wide (two zmm, one ymm), not 5 wide (a partial zmm each)."""
    if threads > 1 and openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    ranges, maps = CONTRACTIONS["gmm20_q_xc"]
    text, dims = contraction_text(ranges, maps, "f64")
    ir_text = scheduled_ir(text)
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
    text, dims = contraction_text(ranges, maps, "f64")
    tiles = set(re.findall(r"into vector<(\d+)x\d+xf64>", scheduled_ir(text)))
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
    text, _ = contraction_text([64, 64, k], ["d0,d2", "d2,d1", "d0,d1"], "f32")
    ir_text = scheduled_ir(text)
    main = k - k % unroll
    body = ir_text.split(f"to %c{main} step %c{unroll} iter_args")[1].split("scf.yield")[0]
    assert body.count("vector.contract") == unroll
    remainder = re.search(rf"scf.for %\w+ = %c{main} to %c{k} step %c1 ", ir_text)
    assert (remainder is not None) == bool(k % unroll)
    a = RNG.standard_normal((64, k)).astype(np.float32)
    b = RNG.standard_normal((k, 64)).astype(np.float32)
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b),
                               a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_threads_do_not_split_a_vector_into_pieces() -> None:
    """GMM d10's Q (x - mu) with 1002 points: [25, 1002, 10] f64. K = 25 and
    M = 1002 / 2 (no whole register tiles of rows) do not split evenly, and
    halves of N = 10 would be 5 lanes per thread, sharing cache lines: the op
    stays on one thread. With N = 32 (whole vectors per half) it is split;
    with 1000 points, M splits into 500 rows per thread."""
    maps = ["d0,d1,d3", "d0,d3,d2", "d0,d1,d2"]
    ranges = [25, 1002, 10, 10]
    text, dims = contraction_text(ranges, maps, "f64")
    assert "scf.forall" not in scheduled_ir(text, threads=2)
    wide, _ = contraction_text([25, 1002, 32, 10], maps, "f64")
    assert "scf.forall" in scheduled_ir(wide, threads=2)
    if parameters.host_vector_bits() == 512:  # 10-row tiles
        rows, _ = contraction_text([25, 1000, 10, 10], maps, "f64")
        assert "[25, 500, 10] [1, 1, 1]" in scheduled_ir(rows, threads=2)
    if openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cm = CompiledModule(text, pipeline="autodiff-lower-to-cpu{threads=2}")
    a, b = (RNG.standard_normal([ranges[d] for d in ds]) for ds in dims[:2])
    np.testing.assert_allclose(cm["f"](a, b), np.einsum("knj,kji->kni", a, b), rtol=1e-13,
                               atol=1e-13 * np.sqrt(10))


@pytest.mark.parametrize("cols", [16, 32, 64, 128])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_row_reductions_whose_row_is_one_vector_step(op: str, cols: int) -> None:
    """Rows exactly as long as the partial-sum vector (or a multiple) compile
    and match numpy: a row of 16 f32 once left unlowered vector ops behind."""
    x = RNG.standard_normal((4096, cols)).astype(np.float32)
    got = ad.jit(lambda a: getattr(anp, op)(a, axis=-1))(x)
    want = getattr(np, op)(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


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
    assert re.search(r"vector\.transfer_read [^\n]*vector<20xf64>", scheduled_ir(text))
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
    scheduled = scheduled_ir(text)
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
                            scheduled_ir(text)))
    assert widths == {"20"}, widths
    a, c = RNG.standard_normal((50, 1000, 20)), RNG.standard_normal((50, 1000))
    np.testing.assert_array_equal(CompiledModule(text)["f"](a, c), a * c[..., None])


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
    assert "scf.forall" not in scheduled_ir(text, threads=1)
    assert scheduled_ir(text, threads=2).count("scf.forall (") == 1
    assert "scf.forall" not in scheduled_ir(columns, threads=2)
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
