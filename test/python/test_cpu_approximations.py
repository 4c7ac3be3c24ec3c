"""The f32 polynomial exp/log/tanh (transforms/cpu/approximations.py), measured in ulp
against numpy's float64 functions over the whole f32 range, against the bounds in
`APPROX_MAX_ULP`; f64 and small ops keep libm.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_cases import (
    N_APPROX,
    randn,
    strict_schedules,  # noqa: F401  (autouse)
    tensor_type,
    ulp_error,
    unary_text,
)

from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.approximations import APPROX_MAX_ULP
from mlir_autodiff.transforms.cpu.parameters import ELEMENTWISE

RNG = np.random.default_rng(7)

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
    cm = CompiledModule(unary_text(op, N_APPROX))
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
            err = ulp_error(f(chunk), ref(chunk.astype(np.float64)))
        worst = max(worst, float(err.max()))
    assert worst <= APPROX_MAX_ULP[op], f"{op}: {worst} ulp"
    # Special values: inf, nan, signed zeros, subnormal inputs and results, overflow.
    sp = np.concatenate([SPECIALS, np.ones(N_APPROX - len(SPECIALS), np.float32)])
    with np.errstate(all="ignore"):
        got, want = f(sp)[:len(SPECIALS)], ref(SPECIALS.astype(np.float64))
    err = ulp_error(got, want)
    assert err.max() <= APPROX_MAX_ULP[op], (SPECIALS[err.argmax()], got[err.argmax()])
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def test_f64_transcendentals_stay_exact() -> None:
    """f64 keeps libm: the vectorized loop calls exp per element, as accurate as numpy."""
    n = 8192
    f = CompiledModule(unary_text("math.exp", n, "f64"))["f"]
    x = RNG.uniform(-700, 700, n)
    np.testing.assert_allclose(f(x), np.exp(x), rtol=1e-15)


def test_small_ops_keep_libm() -> None:
    """Below the size threshold nothing is vectorized or approximated."""
    n = ELEMENTWISE.min_elements // 2
    cm = CompiledModule(unary_text("math.exp", n))
    assert "vector<" not in cm.lowered_text
    assert "llvm.intr.exp" in cm.lowered_text
    x = RNG.uniform(-80, 80, n).astype(np.float32)
    # libm's expf is correctly rounded in practice (numpy's own f32 exp is not).
    assert ulp_error(cm["f"](x), np.exp(x.astype(np.float64))).max() <= 0.51


def test_softmax_rows_with_exp_approximation() -> None:
    """A row softmax (max, exp, sum, divide) through the scheduled ops, vs float64 numpy."""
    m, n = 64, 256
    t2, t1 = tensor_type((m, n), "f32"), tensor_type((m,), "f32")
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
    x = 5 * randn(m, n)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(cm["f"](x), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)
    assert "llvm.intr.exp" not in cm.lowered_text


def test_exp_below_the_range_selects_zero_without_underflow() -> None:
    """exp(x) for x < -104 (masked attention scores: -1e9) is +0 selected from a
    lane that computed exp(0), not the product y * 2^-75 * 2^-75 underflowing
    (a microcode assist per vector on Intel cores: a causal softmax ran 3-4x
    slower than an unmasked one). Values at and around the bound as libm's."""
    cm = CompiledModule(unary_text("math.exp", N_APPROX))
    text = cm.lowered_text
    assert "vector<" in text
    bounds = re.findall(r"(%\w+) = llvm.mlir.constant\(dense<-1.040000e\+02> : vector", text)
    assert bounds, "no -104 bound"
    assert any(re.search(rf'llvm.fcmp "olt" %\w+, {b} ', text) for b in bounds), \
        "no x < -104 test: the scaling underflows"
    x = np.zeros(N_APPROX, np.float32)
    edge = np.array([-1e9, -1e30, -np.inf, -104.5, -104.0, -103.97, -103.9, -100.0, -87.5,
                     np.nan, 0.0], np.float32)
    x[:len(edge)] = edge
    got = cm["f"](x)[:len(edge)]
    ref = np.exp(edge.astype(np.float64))
    np.testing.assert_array_equal(got[:3], 0.0)
    assert not np.signbit(got[:3]).any()
    assert np.isnan(got[9]) and got[10] == 1.0
    assert ulp_error(got[3:9], ref[3:9]).max() <= APPROX_MAX_ULP["math.exp"]
