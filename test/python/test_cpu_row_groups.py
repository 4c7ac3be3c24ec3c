"""Row groups (transforms/cpu/row_groups.py): softmax-like chains through row reductions
fused into one loop over row tiles, against numpy and the analytic gradient, and the
prefetch of the next tile.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from cpu_cases import (
    facts,
    fused_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.transforms.cpu import row_groups
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

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


def _masked_softmax(x):
    """Causal attention's softmax: scores [..., t, s] with s > t masked out."""
    t = x.shape[-1]
    return ad.nn.softmax(anp.where(anp.tril(anp.ones((t, t), dtype=bool)), x, -1e9), axis=-1)


@pytest.mark.parametrize("shape", [(16, 32, 32), (4, 4, 32, 32)])
def test_masked_softmax_is_one_row_group(shape: tuple[int, ...],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A softmax over rows of any rank whose scores go through a boolean mask read
    by the row dims (a causal mask [t, s] of scores [b, h, t, s], bytes beside
    f32) is one row group: the mask's select joins the max, the exp, the sum and
    the division (it was left to scalar loops, with the exp unvectorized). The
    value and the gradient of sum(softmax * w) against float64 numpy."""
    from mlir_autodiff.transforms.cpu.classify import classify

    masked: list[int] = []  # per row group: its members that read the mask
    real = row_groups.row_groups

    def record(module):
        groups = real(module)
        masked.extend(sum(any("xi8>" in str(v.type) for v in op.operands) for op in g.members)
                      for g in groups)
        return groups

    monkeypatch.setattr(row_groups, "row_groups", record)
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(shape).astype(np.float32)
    f = ad.jit(ad.value_and_grad(lambda x, w: anp.sum(_masked_softmax(x) * w)))
    value, g = f(x, w)
    assert masked and max(masked) >= 2, masked  # the max's and the exp's selects
    mask = np.tril(np.ones(shape[-2:], bool))
    x64 = np.where(mask, x.astype(np.float64), -1e9)
    s = _np_softmax(x64)
    np.testing.assert_allclose(value, (s * w).sum(), rtol=1e-5, atol=1e-5)
    want = s * (w - (s * w).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(g, np.where(mask, want, 0.0), rtol=1e-4, atol=1e-6)
    # An elementwise op reading a byte mask beside f32 is classified (vectorized)
    # without the row group too.
    text = fused_ir(ad.lower(_masked_softmax, x).as_text("autodiff"),
                    through="ReciprocalOfBroadcastDivisors")

    def masked_kind(op):
        if op.name != "linalg.generic" or not any("xi8>" in str(v.type) for v in op.operands):
            return None
        c = classify(op)
        return c.kind if c is not None else "unscheduled"

    assert sorted(facts(text, masked_kind)) == ["elementwise", "reduction"]


def _allocs_in_loops(text: str) -> int:
    """The number of memref.alloc ops inside an scf.for in module `text`."""
    def in_loop(op):
        parent = op.parent
        while op.name == "memref.alloc" and parent is not None and parent.name != "func.func":
            if parent.name == "scf.for":
                return True
            parent = parent.parent
        return None

    return len(facts(text, in_loop))


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
    lowered = fused_ir(text, through="PrefetchRowTiles", prefetch_tiles_ahead=ahead)
    prefetches = re.findall(r"memref\.prefetch (%\w+)\[[^\]]*\], (\w+)", lowered)
    assert prefetches == ([("%arg0", "read")] if ahead else []), prefetches
    if ahead:
        step = re.search(r"memref\.prefetch[^\n]*\n", lowered)
        assert step and "scf.for" in lowered[:step.start()]
    assert _allocs_in_loops(lowered) == 0, lowered
    np.testing.assert_allclose(ad.jit(softmax)(x), _np_softmax(x.astype(np.float64)),
                               rtol=2e-5, atol=2e-6)
