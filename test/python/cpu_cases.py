"""Shared helpers of the CPU back end tests (test_cpu_*.py): MLIR text builders, the
module after a prefix of the CPU pipeline, and the strict-schedules fixture."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import mlir_autodiff.numpy as anp

_RNG = np.random.default_rng(7)
LETTERS = "abcdefgh"


@pytest.fixture(autouse=True)
def strict_schedules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule that fails to apply raises here (users get the unscheduled code)."""
    monkeypatch.setenv("AUTODIFF_STRICT_SCHEDULES", "1")


@pytest.fixture
def reference_schedules() -> Iterator[None]:
    """Schedules derived for the machine the tests' structure was measured on (512-bit
    vectors, 48 KB L1d: `parameters.portable_machine(512)`), whatever the host: which
    contraction keeps its whole k loop in the register tile, or packs B, depends on
    the caches (on a Zen 4's 32 KB L1d the k cache tile is 64, not 128). The code
    runs on any x86-64 host (LLVM splits 512-bit vectors where the CPU lacks them)."""
    from mlir_autodiff.transforms.cpu import parameters

    with parameters.target_vector_bits(512):
        yield


def contraction_text(ranges: list[int], maps: list[str], dt: str) -> tuple[str, list[list[int]]]:
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
    # attention (two batch dims, b and h, not leading every operand: made leading
    # by permuted copies, `leading_batch_dims`): einsum("bthd,bshd->bhts", q, k),
    "attention_qk": ([4, 4, 32, 32, 16], ["d0,d2,d1,d4", "d0,d3,d1,d4", "d0,d1,d2,d3"]),
    # einsum("bhts,bshd->bthd", w, v) (the result permuted back),
    "attention_wv": ([4, 32, 4, 16, 32], ["d0,d2,d1,d4", "d0,d4,d2,d3", "d0,d1,d2,d3"]),
    # and k's cotangent einsum("bhts,bthd->bshd", dlogits, q).
    "attention_dk": ([4, 32, 4, 16, 32], ["d0,d2,d4,d1", "d0,d4,d2,d3", "d0,d1,d2,d3"]),
}


def mlp(params, x):
    w1, w2 = params
    h = anp.tanh(x @ w1)
    return anp.sum(anp.exp(h @ w2 * 0.1)) + anp.sum(h * h)


# -- packed matmuls ---------------------------------------------------------------------------


def scheduled_ir(text: str, threads: int = 1) -> str:
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


def fused_ir(text: str, through: str = "SumBeforeContracting", **options: object) -> str:
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


def facts(text: str, fact) -> list:
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
N_APPROX = 1 << 20  # well above the elementwise threshold: the vector path


def tensor_type(shape: tuple[int, ...], dt: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dt + ">"


def unary_text(op: str, n: int, dt: str = "f32") -> str:
    t = tensor_type((n,), dt)
    return f"func.func @f(%x: {t}) -> {t} {{\n  %r = {op} %x : {t}\n  return %r : {t}\n}}"


def matmul_text(m: int, n: int, k: int, dt: str = "f32") -> str:
    a, b, c = tensor_type((m, k), dt), tensor_type((k, n), dt), tensor_type((m, n), dt)
    return f"""
func.func @f(%a: {a}, %b: {b}) -> {c} {{
  %z = arith.constant 0.0 : {dt}
  %e = tensor.empty() : {c}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {c}) -> {c}
  %r = linalg.matmul ins(%a, %b : {a}, {b}) outs(%f : {c}) -> {c}
  return %r : {c}
}}"""


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(dtype)


# -- transcendental approximations ------------------------------------------------------------


def ulp_error(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (0 where both are the same inf/nan)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref64.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref64) / spacing
    same_inf = np.isinf(got) & np.isinf(ref32) & (np.sign(got) == np.sign(ref32))
    both_nan = np.isnan(got) & np.isnan(ref64)
    return np.where(same_inf | both_nan, 0.0, err)


def reduce_text(shape: tuple[int, ...], dims: list[int], dt: str, combiner: str, init: str) -> str:
    out = tuple(d for i, d in enumerate(shape) if i not in dims)
    ti, to = tensor_type(shape, dt), tensor_type(out, dt)
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
