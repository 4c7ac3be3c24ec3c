"""The performance side of `--autodiff-lower-to-cpu` (transforms/cpu/).

Every scheduled kernel kind (matmul, batch_matmul, elementwise with
broadcasts, inner and outer reductions, linalg.reduce) is checked against
numpy on shapes that divide the register tiles and shapes that do not; the
lowered LLVM IR is checked for the vector code that makes it fast (so a
schedule that silently stops applying fails a test); and each f32
polynomial approximation is measured in ulp against numpy's float64
functions over the whole f32 range, against the bound documented in
`APPROX_MAX_ULP`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.approximations import APPROX_MAX_ULP
from mlir_autodiff.transforms.cpu.parameters import ELEMENTWISE

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def strict_schedules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule that fails to apply raises here (users get the unscheduled code)."""
    monkeypatch.setenv("AUTODIFF_STRICT_SCHEDULES", "1")
N_APPROX = 1 << 20  # well above the elementwise threshold: the vector path


def _t(shape: tuple[int, ...], dt: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dt + ">"


def _unary(op: str, n: int, dt: str = "f32") -> str:
    t = _t((n,), dt)
    return f"func.func @f(%x: {t}) -> {t} {{\n  %r = {op} %x : {t}\n  return %r : {t}\n}}"


def _matmul(m: int, n: int, k: int, dt: str = "f32") -> str:
    a, b, c = _t((m, k), dt), _t((k, n), dt), _t((m, n), dt)
    return f"""
func.func @f(%a: {a}, %b: {b}) -> {c} {{
  %z = arith.constant 0.0 : {dt}
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {c}) -> {c}
  %r = linalg.matmul ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}"""


def _randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- transcendental approximations ------------------------------------------------------------


def _ulp_error(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (0 where both are the same inf/nan)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref64.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref64) / spacing
    same_inf = np.isinf(got) & np.isinf(ref32) & (np.sign(got) == np.sign(ref32))
    both_nan = np.isnan(got) & np.isnan(ref64)
    return np.where(same_inf | both_nan, 0.0, err)


def _f32_sample() -> np.ndarray:
    """Every 4099th f32 bit pattern: both signs, every exponent, subnormals (no inf/nan)."""
    bits = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    return x[np.isfinite(x)]


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-39, -1e-39,
                     1.17549435e-38, 88.72, 88.73, 89.0, 100.0, -87.3, -103.0, -103.9, -104.0,
                     -200.0, 1.0, 0.5, 0.625, -0.625, 0.6249999, 9.0, 9.1, -9.1, 1e-30,
                     3.4028235e38], np.float32)


@pytest.mark.parametrize("op,ref", [("math.exp", np.exp), ("math.log", np.log),
                                    ("math.tanh", np.tanh)])
def test_f32_approximation_max_ulp(op: str, ref) -> None:
    cm = CompiledModule(_unary(op, N_APPROX))
    # The approximation replaced the libm call / LLVM intrinsic.
    name = op.split(".")[1]
    assert f"llvm.intr.{name}" not in cm.lowered_text
    assert f"@{name}f" not in cm.lowered_text
    f = cm["f"]
    x = _f32_sample()
    worst = 0.0
    for i in range(0, len(x), N_APPROX):
        chunk = x[i:i + N_APPROX]
        chunk = np.concatenate([chunk, np.ones(N_APPROX - len(chunk), np.float32)])
        with np.errstate(all="ignore"):
            err = _ulp_error(f(chunk), ref(chunk.astype(np.float64)))
        worst = max(worst, float(err.max()))
    assert worst <= APPROX_MAX_ULP[op], f"{op}: {worst} ulp"
    # Special values: inf, nan, signed zeros, subnormal inputs and results, overflow.
    sp = np.concatenate([SPECIALS, np.ones(N_APPROX - len(SPECIALS), np.float32)])
    with np.errstate(all="ignore"):
        got, want = f(sp)[:len(SPECIALS)], ref(SPECIALS.astype(np.float64))
    err = _ulp_error(got, want)
    assert err.max() <= APPROX_MAX_ULP[op], (SPECIALS[err.argmax()], got[err.argmax()])
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def test_f64_transcendentals_stay_exact() -> None:
    """f64 keeps libm: the vectorized loop calls exp per element, as accurate as numpy."""
    n = 8192
    f = CompiledModule(_unary("math.exp", n, "f64"))["f"]
    x = RNG.uniform(-700, 700, n)
    np.testing.assert_allclose(f(x), np.exp(x), rtol=1e-15)


def test_small_ops_keep_libm() -> None:
    """Below the size threshold nothing is vectorized or approximated."""
    n = ELEMENTWISE.min_elements // 2
    cm = CompiledModule(_unary("math.exp", n))
    assert "vector<" not in cm.lowered_text
    assert "llvm.intr.exp" in cm.lowered_text
    x = RNG.uniform(-80, 80, n).astype(np.float32)
    # libm's expf is correctly rounded in practice (numpy's own f32 exp is not).
    assert _ulp_error(cm["f"](x), np.exp(x.astype(np.float64))).max() <= 0.51


# -- matmul -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (128, 512, 96), (131, 90, 67), (150, 10, 200)])
def test_matmul(m: int, n: int, k: int) -> None:
    cm = CompiledModule(_matmul(m, n, k))
    a, b = _randn(m, k), _randn(k, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(cm["f"](a, b), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    if n % 16 == 0:
        # The register tile: fused multiply-adds on rows of 16 f32 (AVX2) or 32 (AVX-512).
        assert re.search(r"llvm.intr.fmuladd\(.*\) : \(vector<(16|32)xf32>", cm.lowered_text)


def test_batch_matmul() -> None:
    bt, m, n, k = 4, 40, 48, 40
    a, b, c = _t((bt, m, k), "f32"), _t((bt, k, n), "f32"), _t((bt, m, n), "f32")
    cm = CompiledModule(f"""
func.func @f(%a: {a}, %b: {b}) -> {c} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : f32) outs(%e : {c}) -> {c}
  %r = linalg.batch_matmul ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}""")
    x, y = _randn(bt, m, k), _randn(bt, k, n)
    np.testing.assert_allclose(cm["f"](x, y), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)
    assert "llvm.intr.fmuladd" in cm.lowered_text


def test_matmul_accumulates_into_init() -> None:
    """C += A B with a non-zero init (the accumulator tile is loaded, not assumed zero)."""
    m, n, k = 64, 64, 64
    a, b, c = _t((m, k), "f32"), _t((k, n), "f32"), _t((m, n), "f32")
    cm = CompiledModule(f"""
func.func @f(%a: {a}, %b: {b}, %c: {c}) -> {c} {{
  %r = linalg.matmul ins(%a, %b : {a}, {b}) outs(%c : {c}) -> {c}
  return %r : {c}
}}""")
    x, y, z = _randn(m, k), _randn(k, n), _randn(m, n)
    z0 = z.copy()
    np.testing.assert_allclose(cm["f"](x, y, z), z0 + x.astype(np.float64) @ y,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(z, z0)  # arguments are read-only


# -- elementwise and reductions ---------------------------------------------------------------


def test_elementwise_broadcast_chain_f32_and_f64() -> None:
    """tanh(x * w + b) with a row-broadcast bias, in f32 and f64."""
    for dt, np_dt, rtol in [("f32", np.float32, 3e-7), ("f64", np.float64, 1e-15)]:
        x2, r1 = _t((96, 130), dt), _t((130,), dt)
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
        x, w, b = _randn(96, 130, dtype=np_dt), _randn(96, 130, dtype=np_dt), _randn(130,
                                                                                 dtype=np_dt)
        s = x * w + b  # rounded in the working precision, as the kernel does
        np.testing.assert_allclose(cm["f"](x, w, b), np.tanh(s.astype(np.float64)),
                                   rtol=rtol, atol=0)
        # 130 columns: the widest vector tile dividing them is 2 elements.
        assert f"vector<2x{dt}>" in cm.lowered_text


def _reduce(shape: tuple[int, ...], dims: list[int], dt: str, combiner: str, init: str) -> str:
    out = tuple(d for i, d in enumerate(shape) if i not in dims)
    ti, to = _t(shape, dt), _t(out, dt)
    return f"""
func.func @f(%x: {ti}) -> {to} {{
  %init = arith.constant {init} : {dt}
  %e = tensor.empty() : {to}
  %f = linalg.fill ins(%init : {dt}) outs(%e : {to}) -> {to}
  %r = linalg.reduce ins(%x : {ti}) outs(%f : {to}) dimensions = {dims}
    (%a: {dt}, %acc: {dt}) {{
      %s = {combiner} %a, %acc : {dt}
      linalg.yield %s : {dt}
    }}
  return %r : {to}
}}"""


@pytest.mark.parametrize("shape,dims", [((256, 128), [1]), ((256, 130), [1]),
                                        ((300, 48), [0]), ((12, 40, 24), [1]),
                                        ((256, 130), [0, 1]), ((12, 40, 24), [1, 2]),
                                        ((12, 40, 24), [0, 1, 2])])
@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_sum_and_max_reductions(shape, dims, dt, np_dt) -> None:
    x = _randn(*shape, dtype=np_dt)
    fs = CompiledModule(_reduce(shape, dims, dt, "arith.addf", "0.0"))["f"]
    rtol = 1e-5 if dt == "f32" else 1e-13
    np.testing.assert_allclose(fs(x), x.astype(np.float64).sum(tuple(dims)), rtol=rtol,
                               atol=rtol * np.sqrt(shape[dims[0]]))
    fm = CompiledModule(_reduce(shape, dims, dt, "arith.maximumf", "0xFFF0000000000000"
                                if dt == "f64" else "0xFF800000"))["f"]
    np.testing.assert_array_equal(fm(x), x.max(tuple(dims)))


@pytest.mark.parametrize("shape", [(128, 96), (200, 130), (8, 1024)])
@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_transpose(shape: tuple[int, int], dt: str, np_dt: type) -> None:
    m, n = shape
    ti, to = _t((m, n), dt), _t((n, m), dt)
    cm = CompiledModule(f"""
func.func @f(%x: {ti}) -> {to} {{
  %e = tensor.empty() : {to}
  %t = linalg.transpose ins(%x : {ti}) outs(%e : {to}) permutation = [1, 0]
  return %t : {to}
}}""")
    x = _randn(m, n, dtype=np_dt)
    np.testing.assert_array_equal(cm["f"](x), x.T)
    assert "vector<" in cm.lowered_text


def test_reduction_is_vectorized() -> None:
    cm = CompiledModule(_reduce((256, 128), [1], "f32", "arith.addf", "0.0"))
    assert "vector<64xf32>" in cm.lowered_text  # REDUCTION.lanes: four 16-lane chains


def test_whole_array_reduction_is_vectorized() -> None:
    """sum(w * w) over a matrix (weight decay): scalar loops over rows around
    64-lane partial sums, not one dependent scalar add per element."""
    cm = CompiledModule(_reduce((256, 128), [0, 1], "f32", "arith.addf", "0.0"))
    assert "vector<64xf32>" in cm.lowered_text


def test_softmax_rows_with_exp_approximation() -> None:
    """A row softmax (max, exp, sum, divide) through the scheduled ops, vs float64 numpy."""
    m, n = 64, 256
    t2, t1 = _t((m, n), "f32"), _t((m,), "f32")
    cm = CompiledModule(f"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @f(%x: {t2}) -> {t2} {{
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : {t1}
  %mi = linalg.fill ins(%ninf : f32) outs(%e1 : {t1}) -> {t1}
  %mx = linalg.reduce ins(%x : {t2}) outs(%mi : {t1}) dimensions = [1]
    (%a: f32, %acc: f32) {{
      %r = arith.maximumf %a, %acc : f32
      linalg.yield %r : f32
    }}
  %e2 = tensor.empty() : {t2}
  %ex = linalg.generic {{indexing_maps = [#id, #row, #id],
                        iterator_types = ["parallel", "parallel"]}}
      ins(%x, %mx : {t2}, {t1}) outs(%e2 : {t2}) {{
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      %v = math.exp %d : f32
      linalg.yield %v : f32
  }} -> {t2}
  %si = linalg.fill ins(%zero : f32) outs(%e1 : {t1}) -> {t1}
  %sm = linalg.reduce ins(%ex : {t2}) outs(%si : {t1}) dimensions = [1]
    (%a: f32, %acc: f32) {{
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }}
  %res = linalg.generic {{indexing_maps = [#id, #row, #id],
                         iterator_types = ["parallel", "parallel"]}}
      ins(%ex, %sm : {t2}, {t1}) outs(%e2 : {t2}) {{
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
  }} -> {t2}
  return %res : {t2}
}}""")
    x = 5 * _randn(m, n)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(cm["f"](x), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)
    assert "llvm.intr.exp" not in cm.lowered_text


def test_large_result_written_in_place() -> None:
    """The result is computed in the caller's buffer: no temporary + copy per call."""
    cm = CompiledModule(_unary("math.exp", ELEMENTWISE.min_elements * 4))
    assert "@malloc" not in cm.lowered_text
    assert "memcpy" not in cm.lowered_text


# -- threads ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openmp() -> None:
    """The OpenMP runtime, loaded into the process so the JIT resolves `__kmpc_*`."""
    import ctypes
    import os

    from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

    path = openmp_runtime_library()
    if path is None:
        pytest.skip("no OpenMP runtime is installed (intel-openmp or libomp)")
    # Idle workers must not spin and steal the (two) cores from the rest of the suite.
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


THREADED = "autodiff-lower-to-cpu{threads=2}"


def test_threaded_matmul(openmp) -> None:
    cm = CompiledModule(_matmul(256, 96, 160), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    a, b = _randn(256, 160), _randn(160, 96)
    np.testing.assert_allclose(cm["f"](a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_threaded_elementwise_and_reduction(openmp) -> None:
    cm = CompiledModule(_unary("math.tanh", 1 << 17), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    x = 4 * _randn(1 << 17)
    assert _ulp_error(cm["f"](x), np.tanh(x.astype(np.float64))).max() <= APPROX_MAX_ULP[
        "math.tanh"]
    cm = CompiledModule(_reduce((1024, 96), [1], "f32", "arith.addf", "0.0"), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    x = _randn(1024, 96)
    np.testing.assert_allclose(cm["f"](x), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


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
    x, w = _randn(16, 1, 16), _randn(16, 16)
    np.testing.assert_allclose(cm["f"](x, w), np.einsum("bik,kj->bij", x, w), rtol=1e-5,
                               atol=1e-5)


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
    x, b, w = _randn(64, 128), _randn(128), _randn(128, 10)
    h = np.tanh(x.astype(np.float64) + b)
    y, r = cm["f"](x, b, w)
    np.testing.assert_allclose(y, h @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, h.sum(1), rtol=1e-5, atol=1e-5)


def test_user_products_with_zeros_keep_ieee_semantics() -> None:
    """`x @ zeros` with an inf in x is nan, as in numpy: only forward mode's
    symbolic zero tangents skip work (test_grad_api), never the user's products."""
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    x = _randn(64, 64)
    x[3, 5] = np.inf
    got = ad.jit(lambda a: a @ anp.zeros((64, 64), dtype=np.float32))(x)
    with np.errstate(invalid="ignore"):
        want = x @ np.zeros((64, 64), dtype=np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[3]).all() and not np.isnan(np.delete(got, 3, axis=0)).any()


def test_fused_elementwise_chain_copies_nothing() -> None:
    """tanh(x*y+z) writes each vector tile once: no self-copy of the tile (a memcpy each)."""
    n = ELEMENTWISE.min_elements * 4
    t = _t((n,), "f32")
    cm = CompiledModule(f"""
func.func @f(%x: {t}, %y: {t}, %z: {t}) -> {t} {{
  %m = arith.mulf %x, %y : {t}
  %s = arith.addf %m, %z : {t}
  %r = math.tanh %s : {t}
  return %r : {t}
}}""")
    assert "memcpy" not in cm.lowered_text and "memrefCopy" not in cm.lowered_text
    x, y, z = _randn(n), _randn(n), _randn(n)
    np.testing.assert_allclose(cm["f"](x, y, z), np.tanh(x.astype(np.float64) * y + z),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [2, 3, -1, 0.5])
def test_float_powers_become_multiplies(n: float) -> None:
    """x ** n for n in (2, 3, -1, 0.5) traces to mulf/divf/sqrt, not math.powf (a scalar
    libm call that kept the whole fused op off the vector path); values and gradients
    against jax."""
    import jax
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    # tanh'(x) = 1 - tanh(x)^2 cancels in f32 for large x: keep x where it is well conditioned.
    x = RNG.uniform(0.2, 1.5, (128, 256)).astype(np.float32)
    assert "powf" not in ad.lower(lambda x: x ** n, x).as_text("capture")
    np.testing.assert_allclose(ad.jit(lambda x: x ** n)(x), x.astype(np.float64) ** n,
                               rtol=1e-6)
    g = ad.jit(ad.grad(lambda x: anp.sum(anp.tanh(x) ** n)))(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: (jax.numpy.tanh(x) ** n).sum())(x),
                               rtol=1e-5, atol=1e-6)


# -- n-d vectors --------------------------------------------------------------------------------

_I, _F, _B = "vector<2x1x8xi32>", "vector<2x1x8xf32>", "vector<2x1x8xi1>"
#: Every op a CPU schedule may vectorize (every arith op, the math ops of
#: `VECTORIZABLE_BODY_OPS`) on an n-d vector (what vectorizing a rank >= 2
#: tile gives), written with %i, %j (ints), %x, %y (floats), %c (bools).
ND_VECTOR_OPS = {
    **{f"arith.{o}": f"arith.{o} %i, %j : {_I}" for o in (
        "addi subi muli divsi divui ceildivsi ceildivui floordivsi remsi remui andi ori xori "
        "shli shrsi shrui maxsi maxui minsi minui").split()},
    **{f"arith.{o}": f"arith.{o} %x, %y : {_F}" for o in (
        "addf subf mulf divf remf maximumf minimumf maxnumf minnumf").split()},
    "arith.negf": f"arith.negf %x : {_F}",
    "arith.mului_extended": f"arith.mului_extended %i, %j : {_I}",
    "arith.mulsi_extended": f"arith.mulsi_extended %i, %j : {_I}",
    "arith.addui_extended": f"arith.addui_extended %i, %j : {_I}, {_B}",
    "arith.extui": f"arith.extui %i : {_I} to vector<2x1x8xi64>",
    "arith.extsi": f"arith.extsi %i : {_I} to vector<2x1x8xi64>",
    "arith.trunci": f"arith.trunci %i : {_I} to vector<2x1x8xi8>",
    "arith.extf": f"arith.extf %x : {_F} to vector<2x1x8xf64>",
    "arith.truncf": f"arith.truncf %x : {_F} to vector<2x1x8xf16>",
    "arith.uitofp": f"arith.uitofp %i : {_I} to {_F}",
    "arith.sitofp": f"arith.sitofp %i : {_I} to {_F}",
    "arith.fptoui": f"arith.fptoui %x : {_F} to {_I}",
    "arith.fptosi": f"arith.fptosi %x : {_F} to {_I}",
    "arith.bitcast": f"arith.bitcast %x : {_F} to {_I}",
    "arith.index_cast": f"arith.index_cast %i : {_I} to vector<2x1x8xindex>",
    "arith.index_castui": f"arith.index_castui %i : {_I} to vector<2x1x8xindex>",
    "arith.cmpi": f"arith.cmpi slt, %i, %j : {_I}",
    "arith.cmpf": f"arith.cmpf olt, %x, %y : {_F}",
    "arith.select": f"arith.select %c, %i, %j : {_B}, {_I}",
    **{f"math.{o}": f"math.{o} %x : {_F}" for o in (
        "exp log tanh sqrt rsqrt absf floor ceil").split()},
    "math.fma": f"math.fma %x, %y, %x : {_F}",
    "math.copysign": f"math.copysign %x, %y : {_F}",
}
#: Arith ops that compute nothing elementwise (constants) or need types (f8
#: scales) the CPU lowering does not take.
ND_VECTOR_EXEMPT = {"arith.constant", "arith.scaling_extf", "arith.scaling_truncf"}


def test_nd_vector_op_table_covers_the_vectorizable_ops() -> None:
    """A new arith op, or a math op made vectorizable, gets a row (or an exemption)."""
    from mlir.dialects import arith
    from mlir_autodiff.transforms.cpu.parameters import VECTORIZABLE_BODY_OPS

    ops = {getattr(arith, n).OPERATION_NAME for n in dir(arith)
           if hasattr(getattr(arith, n), "OPERATION_NAME")}
    ops |= {o for o in VECTORIZABLE_BODY_OPS if o.startswith("math.")}
    assert ops - ND_VECTOR_EXEMPT == set(ND_VECTOR_OPS), ops ^ set(ND_VECTOR_OPS)


def test_every_elementwise_op_lowers_on_nd_vectors() -> None:
    """convert-*-to-llvm lower some ops only on scalars and 1-d vectors (a
    vectorized Philox on a 512 x 32 tile: vector<1x16xi32> `mului_extended`);
    the CPU lowering computes those on 1-d vectors (FlattenNdVectorOps)."""
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine
    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.to_llvm import LOWER_VECTORS, TO_LLVM
    from mlir_autodiff.transforms.pipeline import run_pipeline

    failed = {}
    args = f"%i: {_I}, %j: {_I}, %x: {_F}, %y: {_F}, %c: {_B}"
    for name, op in ND_VECTOR_OPS.items():
        n = 2 if "extended" in name else 1
        with ir.Context() as ctx, ir.Location.unknown():
            dialects.load(ctx)
            # The op's result types, then a function returning its results.
            probe = ir.Module.parse(f"func.func @f({args}) {{\n  %r:{n} = {op}\n  return\n}}")
            found = probe.body.operations[0].regions[0].blocks[0].operations[0]
            types = ", ".join(str(r.type) for r in found.results)
            rets = ", ".join(f"%r#{k}" for k in range(n))
            module = ir.Module.parse(f"func.func @f({args}) -> ({types}) {{\n  %r:{n} = {op}\n"
                                     f"  return {rets} : {types}\n}}")
            try:
                run_pipeline(module, [*LOWER_VECTORS, *TO_LLVM])
                ExecutionEngine(module, opt_level=0)
            except (ir.MLIRError, RuntimeError) as err:
                failed[name] = str(err).splitlines()[-1][:200]
    assert not failed, " ".join(sorted(failed))


# -- options of --autodiff-lower-to-cpu -----------------------------------------------------------


def test_tuning_switches_are_options_of_the_pipeline_and_its_passes() -> None:
    """Each switch parses from the pipeline text and reaches the pass it controls."""
    from mlir_autodiff.transforms.cpu.fusion import (
        UnshareBroadcastProducers,
        UnshareRecomputedProducers,
    )
    from mlir_autodiff.transforms.cpu.reductions import (
        MergeSiblingReductions,
        SumBeforeContracting,
    )
    from mlir_autodiff.transforms.cpu.row_groups import PrefetchRowTiles
    from mlir_autodiff.transforms.cpu.schedule_linalg import ScheduleLinalgForCpu
    from mlir_autodiff.transforms.pipeline import parse_pipeline

    def steps(text: str) -> dict[type, object]:
        (lower,) = parse_pipeline(text)
        return {type(e): e for e in lower.expand() if not isinstance(e, str)}

    default = steps("autodiff-lower-to-cpu")
    assert "func.func(buffer-loop-hoisting)" in parse_pipeline(
        "autodiff-lower-to-cpu")[0].expand()
    for cls in (UnshareBroadcastProducers, UnshareRecomputedProducers, SumBeforeContracting,
                MergeSiblingReductions):
        assert default[cls].enabled
    assert default[PrefetchRowTiles].tiles_ahead == 1
    assert default[ScheduleLinalgForCpu].outer_reduction_threads
    off = steps("autodiff-lower-to-cpu{unshare-broadcasts=false unshare-recomputed=false "
                "sum-before-contracting=false merge-sibling-reductions=false "
                "outer-reduction-threads=false prefetch-tiles-ahead=0}")
    for cls in (UnshareBroadcastProducers, UnshareRecomputedProducers, SumBeforeContracting,
                MergeSiblingReductions):
        assert not off[cls].enabled
    assert off[PrefetchRowTiles].tiles_ahead == 0
    assert not off[ScheduleLinalgForCpu].outer_reduction_threads
    (lower,) = parse_pipeline("autodiff-lower-to-cpu{hoist-loop-buffers=false}")
    assert "func.func(buffer-loop-hoisting)" not in lower.expand()


@pytest.mark.parametrize("env", [None, "1"])
def test_strict_schedules_come_from_the_option_or_the_environment(
        env: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """AUTODIFF_STRICT_SCHEDULES=1 (read by the pipeline) or `strict=true`
    makes the passes that apply transform scripts strict."""
    from mlir_autodiff.transforms.cpu.pipeline import STRICT_ENV, LowerToCpu
    from mlir_autodiff.transforms.cpu.reductions import GeneralizeReductions
    from mlir_autodiff.transforms.cpu.row_groups import FuseRowGroups
    from mlir_autodiff.transforms.cpu.schedule_linalg import ScheduleLinalgForCpu

    if env is None:
        monkeypatch.delenv(STRICT_ENV, raising=False)
    else:
        monkeypatch.setenv(STRICT_ENV, env)
    for lower, strict in ((LowerToCpu(), env == "1"), (LowerToCpu(strict=True), True)):
        flags = {type(e): e.strict for e in lower.expand()
                 if isinstance(e, (GeneralizeReductions, FuseRowGroups, ScheduleLinalgForCpu))}
        assert flags == {GeneralizeReductions: strict, FuseRowGroups: strict,
                         ScheduleLinalgForCpu: strict}
