"""`--autodiff-lower-to-cpu` as a whole (transforms/cpu/pipeline.py): `jit`'s threads and
their environment variable, threaded kernels equal to one thread, IEEE semantics kept,
no self-copies, and the tuning switches and `strict` as options.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from cpu_cases import (
    matmul_text,
    mlp,
    randn,
    reduce_text,
    strict_schedules,  # noqa: F401  (autouse)
    tensor_type,
    ulp_error,
    unary_text,
)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.approximations import APPROX_MAX_ULP
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library
from mlir_autodiff.transforms.cpu.parameters import ELEMENTWISE
from mlir_autodiff.transforms.cpu.pipeline import THREADS_ENV, cpu_threads

RNG = np.random.default_rng(11)

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
    f1 = ad.jit(ad.value_and_grad(mlp), threads=1)
    f2 = ad.jit(ad.value_and_grad(mlp), threads=2)
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
    cm = CompiledModule(matmul_text(256, 96, 160), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    a, b = randn(256, 160), randn(160, 96)
    np.testing.assert_allclose(cm["f"](a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_threaded_elementwise_and_reduction(openmp) -> None:
    cm = CompiledModule(unary_text("math.tanh", 1 << 17), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    x = 4 * randn(1 << 17)
    assert ulp_error(cm["f"](x), np.tanh(x.astype(np.float64))).max() <= APPROX_MAX_ULP[
        "math.tanh"]
    cm = CompiledModule(reduce_text((1024, 96), [1], "f32", "arith.addf", "0.0"), pipeline=THREADED)
    assert "omp.parallel" in cm.lowered_text
    x = randn(1024, 96)
    np.testing.assert_allclose(cm["f"](x), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_user_products_with_zeros_keep_ieee_semantics() -> None:
    """`x @ zeros` with an inf in x is nan, as in numpy: only forward mode's
    symbolic zero tangents skip work (test_grad_api), never the user's products."""
    import mlir_autodiff as ad

    x = randn(64, 64)
    x[3, 5] = np.inf
    got = ad.jit(lambda a: a @ anp.zeros((64, 64), dtype=np.float32))(x)
    with np.errstate(invalid="ignore"):
        want = x @ np.zeros((64, 64), dtype=np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[3]).all() and not np.isnan(np.delete(got, 3, axis=0)).any()


def test_fused_elementwise_chain_copies_nothing() -> None:
    """tanh(x*y+z) writes each vector tile once: no self-copy of the tile (a memcpy each)."""
    n = ELEMENTWISE.min_elements * 4
    t = tensor_type((n,), "f32")
    cm = CompiledModule(f"""
func.func @f(%x: {t}, %y: {t}, %z: {t}) -> {t} {{
  %m = arith.mulf %x, %y : {t}
  %s = arith.addf %m, %z : {t}
  %r = math.tanh %s : {t}
  return %r : {t}
}}""")
    assert "memcpy" not in cm.lowered_text and "memrefCopy" not in cm.lowered_text
    x, y, z = randn(n), randn(n), randn(n)
    np.testing.assert_allclose(cm["f"](x, y, z), np.tanh(x.astype(np.float64) * y + z),
                               rtol=1e-6, atol=1e-6)


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
