"""float16 and bfloat16: promotion as jax's, values and derivatives within the type's
rounding, float32 accumulation in sums and contractions, the runtime boundary (jit,
export + aot) and the GPU lowering (conversions in the PTX).

The references are the same computation in float32 on the same (half-precision)
inputs, rounded once to the half type; jax (x64) decides the promotion table.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from mlir import ir

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import dialects, nn
from mlir_autodiff.gpu import lower_to_gpu

HALF = [pytest.param(np.dtype(np.float16), id="f16"), pytest.param(anp.dtype(anp.bfloat16),
                                                                     id="bf16")]
#: a few units in the last place of each half type, relative to the largest |value|
ULPS = 4


def _eps(dt: np.dtype) -> float:
    return float(anp.finfo(dt).eps)


def _close(got: np.ndarray, want: np.ndarray, dt: np.dtype, ulps: float = ULPS) -> None:
    assert got.dtype == dt, (got.dtype, dt)
    g, w = got.astype(np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
    err = float(np.max(np.abs(g - w))) if w.size else 0.0
    assert err <= ulps * _eps(dt) * scale, (err, ulps * _eps(dt) * scale)


def _draw(dt: np.dtype, *shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


# ------------------------------------------------------------------------------ promotion

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool"]


def _dtype(name: str) -> np.dtype:
    return anp.dtype(anp.bfloat16) if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("a", DTYPES[:2])
@pytest.mark.parametrize("b", DTYPES)
def test_promotion_of_half_types_is_jax_s(a: str, b: str) -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    x, y = np.ones(2, _dtype(a)), np.ones(2, _dtype(b))
    ours = ad.jit(lambda u, v: u + v)(x, y).dtype
    theirs = (jnp.asarray(x) + jnp.asarray(y)).dtype
    assert ours == theirs, (a, b, ours, theirs)
    assert anp.promote_types(_dtype(a), _dtype(b)) == theirs
    # a Python scalar adopts the array's half type
    assert ad.jit(lambda u: u * 2.5 + 1)(x).dtype == _dtype(a)


def test_dtype_queries_know_bfloat16() -> None:
    bf = anp.dtype(anp.bfloat16)
    assert anp.issubdtype(bf, anp.floating) and anp.issubdtype(bf, anp.inexact)
    assert not anp.issubdtype(bf, anp.integer)
    assert anp.finfo(bf).eps == 2.0 ** -7 and anp.finfo(np.float16).eps == 2.0 ** -10
    assert anp.promote_types(bf, np.float16) == np.float32


# ------------------------------------------------------------------------------ values

UNARY = {
    "tanh": (anp.tanh, np.tanh),
    "exp": (anp.exp, np.exp),
    "sin": (anp.sin, np.sin),
    "log1p_abs": (lambda v: anp.log1p(anp.abs(v)), lambda v: np.log1p(np.abs(v))),
    "sqrt_abs": (lambda v: anp.sqrt(anp.abs(v)), lambda v: np.sqrt(np.abs(v))),
    "sigmoid": (nn.sigmoid, lambda v: 1.0 / (1.0 + np.exp(-v))),
}


@pytest.mark.parametrize("dt", HALF)
def test_elementwise_values_are_rounded_float32_results(dt: np.dtype) -> None:
    x = _draw(dt, 4, 8)
    got = ad.jit(lambda v: tuple(f(v) for f, _ in UNARY.values()))(x)
    for (name, (_, ref)), g in zip(UNARY.items(), got):
        want = ref(x.astype(np.float32)).astype(dt)
        _close(g, want, dt, ulps=1)  # one rounding of the float32 result


@pytest.mark.parametrize("dt", HALF)
def test_sums_and_contractions_accumulate_in_float32(dt: np.dtype) -> None:
    # 4096 terms: accumulating in the half type would be off by far more than an ulp
    a, b = _draw(dt, 32, 4096, seed=1), _draw(dt, 4096, 16, seed=2)
    mm, s, m, es, var = ad.jit(lambda u, v: (u @ v, anp.sum(u, axis=1), anp.mean(u),
                                             anp.einsum("ik,kj->ij", u, v),
                                             anp.var(u, axis=0)))(a, b)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    _close(mm, (a32 @ b32).astype(dt), dt, ulps=1)
    _close(es, (a32 @ b32).astype(dt), dt, ulps=1)
    _close(s, a32.sum(axis=1).astype(dt), dt, ulps=1)
    _close(m, np.asarray(a32.mean()).astype(dt), dt, ulps=1)
    _close(var, a32.var(axis=0).astype(dt), dt, ulps=1)


def test_conversions_between_half_types() -> None:
    x = _draw(np.float16, 16)
    bf = ad.jit(lambda v: v.astype(anp.bfloat16))(x)
    assert bf.dtype == anp.dtype(anp.bfloat16)
    np.testing.assert_array_equal(bf, x.astype(np.float32).astype(anp.bfloat16))
    back = ad.jit(lambda v: v.astype(np.float16))(bf)
    np.testing.assert_array_equal(back, bf.astype(np.float32).astype(np.float16))


# ------------------------------------------------------------------------------ transforms

def _loss(w: object, x: object) -> object:
    return anp.sum(anp.tanh(x @ w) * 0.5)


def _loss_grad_f32(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    t = np.tanh(x @ w)
    return x.T @ ((1 - t * t) * 0.5)


@pytest.mark.parametrize("dt", HALF)
def test_grad_jvp_vjp_vmap_in_half_precision(dt: np.dtype) -> None:
    w, x, t = _draw(dt, 8, 4, seed=3), _draw(dt, 16, 8, seed=4), _draw(dt, 8, 4, seed=5)
    def all_modes(w, x, t):
        _, pull = ad.vjp(lambda v: _loss(v, x), w)
        return (ad.grad(_loss)(w, x), ad.jvp(lambda v: _loss(v, x), (w,), (t,)),
                pull(anp.ones((), w.dtype)))

    g, (_, tan), (pulled,) = ad.jit(all_modes)(w, x, t)
    w32, x32, t32 = (v.astype(np.float32) for v in (w, x, t))
    want = _loss_grad_f32(w32, x32)
    # rounding of every intermediate (tanh, the product, the contraction)
    _close(g, want, dt, ulps=16)
    np.testing.assert_array_equal(pulled, g)
    assert tan.dtype == dt
    np.testing.assert_allclose(float(tan), float(np.sum(want * t32)),
                               atol=16 * _eps(dt) * max(1.0, np.abs(want * t32).sum()))
    rows = ad.jit(ad.vmap(lambda r: anp.dot(r, r)))(x)
    _close(rows, np.einsum("ij,ij->i", x.astype(np.float32), x.astype(np.float32)).astype(dt),
           dt, ulps=1)


# ------------------------------------------------------------------------------ boundaries

@pytest.mark.parametrize("dt", HALF)
def test_half_scalars_cross_the_boundary(dt: np.dtype) -> None:
    s = ad.jit(lambda a, b: a * b)(dt.type(1.5), np.asarray(2.0, dt))
    assert s.dtype == dt and float(s) == 3.0


@pytest.mark.parametrize("dt", HALF)
def test_export_and_aot_round_trip(dt: np.dtype, tmp_path) -> None:
    # the exported library links with -z defs: no __truncsfbf2 / __extendhfsf2 left
    # unresolved, and the manifest names the dtype so aot finds it again
    from mlir_autodiff import aot
    from mlir_autodiff.native_build import missing_tool

    if missing_tool():
        pytest.skip(missing_tool())
    w, x = _draw(dt, 8, 4, seed=6), _draw(dt, 16, 8, seed=7)

    def f(w, x):
        return ad.grad(_loss)(w, x) + anp.exp(w) * anp.sin(w)

    path = tmp_path / "half"
    ad.export(f, w, x, path=str(path))
    got = aot.load(str(path))(w, x)
    assert got.dtype == dt
    np.testing.assert_array_equal(got, ad.jit(f)(w, x))


@pytest.mark.parametrize("dt,ptx", [(np.dtype(np.float16), "f16"),
                                    (anp.dtype(anp.bfloat16), "bf16")])
def test_gpu_lowering_converts_half_types_in_the_kernels(dt: np.dtype, ptx: str) -> None:
    w, x = np.ones((8, 4), dt), np.ones((16, 8), dt)
    text = ad.lower(ad.grad(_loss), w, x).as_text("autodiff")
    assert f"xf{ptx[-2:]}" in text or ptx in text
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        lower_to_gpu(module, chip="sm_90", format="isa")
        asm = str(module)
    kernels = asm[asm.index("gpu.binary"):]
    conversions = set(re.findall(r"cvt(?:\.rn)?\.(?:f32\.%s|%s\.f32)" % (ptx, ptx), kernels))
    # loads widen to f32 and results round back: both directions appear
    assert any(c.startswith(f"cvt.f32.{ptx}") for c in conversions), conversions
    assert any(c.endswith(f"{ptx}.f32") for c in conversions), conversions
    if shutil.which("ptxas"):
        assert "gpu.binary" in asm
