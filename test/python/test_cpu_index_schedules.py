"""Generated checks of the CPU schedules on generics that read `linalg.index`.

A schedule tiles, splits, interchanges and vectorizes a generic's loops; a body
that reads `linalg.index d` must still see the global position of loop d (a tile
offsets it, a partial reduction too, an interchange permutes it). These tests
enumerate every parallel/reduction pattern over 1 to 4 loops, shapes small
enough to stay on the plain loops and large enough to get each schedule
(inner and outer reductions, elementwise, whole-row and split vector steps),
bodies reading no index, one index, or every index, in f32 and f64, read in
loop order or transposed, and compare the CPU pipeline with numpy.

Many functions share one module (compiling is the cost; one module per rank
and element type).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from cpu_cases import (
    fused_ir,
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

from mlir_autodiff.dialects.vocabulary import ROW_TILES
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(2024)

#: Loop ranges per rank: plain-loop sizes (below the schedules' 4096
#: elements), and scheduled sizes whose innermost extent is one whole vector
#: step (64), split into steps of 8, 4 or 2 (200, 40, 300, 50), smaller than
#: a step (8) or no multiple of 2 (7).
SHAPES: dict[int, list[tuple[int, ...]]] = {
    1: [(5,), (1000,), (4099,)],
    2: [(4, 5), (64, 64), (40, 200), (20, 300), (100, 50), (1000, 8)],
    3: [(4, 3, 5), (40, 6, 50), (3, 200, 7), (7, 3, 200), (16, 32, 64)],
    4: [(2, 3, 4, 5), (4, 6, 5, 40), (8, 3, 4, 64), (20, 2, 30, 6)],
}

DTYPES = {"f32": np.float32, "f64": np.float64}


def _index_variants(rank: int, large: bool) -> list[tuple[int, ...]]:
    """Which loop indices the body reads: none, all, and (large shapes) the
    outermost and the innermost alone."""
    out: list[tuple[int, ...]] = [(), tuple(range(rank))]
    if large:
        out += [(0,), (rank - 1,)]
    return list(dict.fromkeys(out))


def _coeff(d: int) -> int:
    return 2 * d + 1


def _weight(indices: tuple[int, ...], dt: str) -> tuple[list[str], str]:
    """Body lines computing 1 + sum_d c_d * (linalg.index d), and its value
    (`%one`, defined outside the body, when no index is read)."""
    if not indices:
        return [], "%one"
    body = ["%acc_i0 = arith.constant 1 : index"]
    prev = "%acc_i0"
    for k, d in enumerate(indices):
        body += [f"%i{d} = linalg.index {d} : index",
                 f"%c{d} = arith.constant {_coeff(d)} : index",
                 f"%m{d} = arith.muli %i{d}, %c{d} : index",
                 f"%acc_i{k + 1} = arith.addi {prev}, %m{d} : index"]
        prev = f"%acc_i{k + 1}"
    body += [f"%wi = arith.index_cast {prev} : index to i64",
             f"%w = arith.sitofp %wi : i64 to {dt}"]
    return body, "%w"


def _weights(shape: tuple[int, ...], indices: tuple[int, ...]) -> np.ndarray:
    w = np.ones(shape)
    grid = np.indices(shape)
    for d in indices:
        w = w + _coeff(d) * grid[d]
    return w


def _case(name: str, shape: tuple[int, ...], iters: tuple[bool, ...],
          indices: tuple[int, ...], transposed: bool, dt: str) -> str:
    """MLIR for out[parallel dims] += x[...] * (1 + sum_d c_d * index d)."""
    n = len(shape)
    dims = [f"d{d}" for d in range(n)]
    par = [d for d in range(n) if iters[d]]
    in_dims = dims[::-1] if transposed else dims
    in_shape = shape[::-1] if transposed else shape
    in_t = f"tensor<{'x'.join(map(str, in_shape))}x{dt}>"
    out_shape = [shape[d] for d in par]
    out_t = f"tensor<{''.join(f'{s}x' for s in out_shape)}{dt}>"
    in_map = f"affine_map<({', '.join(dims)}) -> ({', '.join(in_dims)})>"
    out_map = f"affine_map<({', '.join(dims)}) -> ({', '.join(dims[d] for d in par)})>"
    it = ", ".join('"parallel"' if p else '"reduction"' for p in iters)
    body, w = _weight(indices, dt)
    body += [f"%p = arith.mulf %a, {w} : {dt}",
             f"%s = arith.addf %acc, %p : {dt}",
             f"linalg.yield %s : {dt}"]
    body_text = "\n    ".join(body)
    return f"""
func.func @{name}(%x: {in_t}) -> {out_t} {{
  %z = arith.constant 0.0 : {dt}
  %one = arith.constant 1.0 : {dt}
  %e = tensor.empty() : {out_t}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {out_t}) -> {out_t}
  %r = linalg.generic {{indexing_maps = [{in_map}, {out_map}], iterator_types = [{it}]}}
      ins(%x : {in_t}) outs(%f : {out_t}) {{
  ^bb0(%a: {dt}, %acc: {dt}):
    {body_text}
  }} -> {out_t}
  return %r : {out_t}
}}"""


def _reference(x: np.ndarray, shape: tuple[int, ...], iters: tuple[bool, ...],
               indices: tuple[int, ...], transposed: bool) -> np.ndarray:
    """numpy in f64: x (in loop order) times the index weights, summed over the reduced loops."""
    xl = np.transpose(x) if transposed else x
    xl = xl.astype(np.float64)
    w = _weights(shape, indices)
    reduced = tuple(d for d in range(len(shape)) if not iters[d])
    return (xl * w).sum(axis=reduced)


def _cases(rank: int, dt: str) -> list[tuple[str, tuple[int, ...], tuple[bool, ...],
                                              tuple[int, ...], bool]]:
    out = []
    for shape in SHAPES[rank]:
        large = int(np.prod(shape)) >= 4096
        for iters in itertools.product((True, False), repeat=rank):
            for indices in _index_variants(rank, large):
                for transposed in ((False, True) if large and rank <= 3 else (False,)):
                    name = (f"g_{'x'.join(map(str, shape))}_"
                            f"{''.join('p' if p else 'r' for p in iters)}_"
                            f"i{''.join(map(str, indices)) or 'none'}_{'t' if transposed else 'n'}")
                    out.append((name, shape, iters, indices, transposed))
    return out


def _check_generics(cases, dt: str, pipeline: str = "autodiff-lower-to-cpu") -> None:  # noqa: ANN001
    text = "\n".join(_case(name, shape, iters, indices, transposed, dt)
                     for name, shape, iters, indices, transposed in cases)
    module = CompiledModule(text, pipeline=pipeline)
    tol = 1e-5 if dt == "f32" else 1e-12
    wrong = []
    for name, shape, iters, indices, transposed in cases:
        in_shape = shape[::-1] if transposed else shape
        x = RNG.uniform(0.5, 1.5, in_shape).astype(DTYPES[dt])
        got = np.asarray(module[name](x), dtype=np.float64)
        want = _reference(x, shape, iters, indices, transposed)
        if not np.allclose(got, want, rtol=tol, atol=tol):
            wrong.append(f"{name}: max error {np.max(np.abs(got - want)):.3g}")
    assert not wrong, f"{len(wrong)} of {len(cases)} generics differ from numpy:\n" + \
        "\n".join(wrong)


@pytest.mark.parametrize("dt", sorted(DTYPES))
@pytest.mark.parametrize("rank", sorted(SHAPES))
def test_index_reading_generics_match_numpy(rank: int, dt: str) -> None:
    _check_generics(_cases(rank, dt), dt)


#: Shapes past `PARALLEL_MIN_ELEMENTS`, whose outer loops split over threads.
THREADED_SHAPES = [(256, 512), (16, 64, 128), (128, 4, 256)]


def test_index_reading_generics_on_two_threads_match_numpy() -> None:
    """Loops split over threads (`scf.forall`) offset the index of their chunk."""
    if openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime is installed: threads > 1 cannot run")
    cases = []
    for shape in THREADED_SHAPES:
        rank = len(shape)
        for iters in itertools.product((True, False), repeat=rank):
            for indices in [(), tuple(range(rank))]:
                name = (f"g_{'x'.join(map(str, shape))}_"
                        f"{''.join('p' if p else 'r' for p in iters)}_"
                        f"i{''.join(map(str, indices)) or 'none'}_n")
                cases.append((name, shape, iters, indices, False))
    _check_generics(cases, "f32", pipeline="autodiff-lower-to-cpu{threads=2}")


def _row_group_case(name: str, shape: tuple[int, ...], red_idx: tuple[int, ...],
                    sink_idx: tuple[int, ...], dt: str) -> str:
    """s[rows] = sum_c x * w_red; y = x * w_sink + s (broadcast over c): a
    reduction over the last dim feeding an elementwise op, a row group."""
    n = len(shape)
    dims = ", ".join(f"d{d}" for d in range(n))
    rows = ", ".join(f"d{d}" for d in range(n - 1))
    x_t = f"tensor<{'x'.join(map(str, shape))}x{dt}>"
    s_t = f"tensor<{'x'.join(map(str, shape[:-1]))}x{dt}>"
    ident = f"affine_map<({dims}) -> ({dims})>"
    row = f"affine_map<({dims}) -> ({rows})>"
    red_body, w_red = _weight(red_idx, dt)
    sink_body, w_sink = _weight(sink_idx, dt)
    par = ", ".join(['"parallel"'] * n)
    red_it = ", ".join(['"parallel"'] * (n - 1) + ['"reduction"'])
    red_text = "\n    ".join(red_body + [f"%p = arith.mulf %a, {w_red} : {dt}",
                                         f"%s = arith.addf %acc, %p : {dt}",
                                         f"linalg.yield %s : {dt}"])
    sink_text = "\n    ".join(sink_body + [f"%p = arith.mulf %a, {w_sink} : {dt}",
                                           f"%s = arith.addf %p, %b : {dt}",
                                           f"linalg.yield %s : {dt}"])
    return f"""
func.func @{name}(%x: {x_t}) -> {x_t} {{
  %z = arith.constant 0.0 : {dt}
  %one = arith.constant 1.0 : {dt}
  %e = tensor.empty() : {s_t}
  %f = linalg.fill ins(%z : {dt}) outs(%e : {s_t}) -> {s_t}
  %r = linalg.generic {{indexing_maps = [{ident}, {row}], iterator_types = [{red_it}]}}
      ins(%x : {x_t}) outs(%f : {s_t}) {{
  ^bb0(%a: {dt}, %acc: {dt}):
    {red_text}
  }} -> {s_t}
  %ey = tensor.empty() : {x_t}
  %y = linalg.generic {{indexing_maps = [{ident}, {row}, {ident}], iterator_types = [{par}]}}
      ins(%x, %r : {x_t}, {s_t}) outs(%ey : {x_t}) {{
  ^bb0(%a: {dt}, %b: {dt}, %o: {dt}):
    {sink_text}
  }} -> {x_t}
  return %y : {x_t}
}}"""


#: Row-group shapes (past `ROW_GROUP_MIN_ELEMENTS`): one and two row dims.
ROW_GROUP_SHAPES = [(128, 128), (64, 300), (4, 64, 80)]


@pytest.mark.parametrize("dt", sorted(DTYPES))
def test_index_reading_row_groups_match_numpy(dt: str) -> None:
    """A reduction and its elementwise consumer fused over row tiles
    (`FuseRowGroups`) still read the global row and column indices."""
    cases = []
    for shape in ROW_GROUP_SHAPES:
        n = len(shape)
        variants = [(), (n - 1,), tuple(range(n - 1)), tuple(range(n))]
        for red_idx in variants:
            for sink_idx in variants:
                name = (f"rg_{'x'.join(map(str, shape))}_"
                        f"r{''.join(map(str, red_idx)) or 'none'}_"
                        f"s{''.join(map(str, sink_idx)) or 'none'}")
                cases.append((name, shape, red_idx, sink_idx))
    text = "\n".join(_row_group_case(*c, dt) for c in cases)
    # Each function is one row group (one loop over row tiles).
    assert fused_ir(text, through="FuseRowGroups").count(ROW_TILES) == len(cases)
    module = CompiledModule(text)
    tol = 1e-5 if dt == "f32" else 1e-12
    wrong = []
    for name, shape, red_idx, sink_idx in cases:
        x = RNG.uniform(0.5, 1.5, shape).astype(DTYPES[dt])
        xd = x.astype(np.float64)
        s = (xd * _weights(shape, red_idx)).sum(axis=-1)
        want = xd * _weights(shape, sink_idx) + s[..., None]
        got = np.asarray(module[name](x), dtype=np.float64)
        if not np.allclose(got, want, rtol=tol, atol=tol):
            wrong.append(f"{name}: max error {np.max(np.abs(got - want)):.3g}")
    assert not wrong, f"{len(wrong)} of {len(cases)} row groups differ from numpy:\n" + \
        "\n".join(wrong)


def test_inner_reduction_reading_its_index_stays_vectorized() -> None:
    """The reduction that reads the index of its tiled innermost loop keeps a
    vector loop (a plain tile instead of the partial reduction), with the
    loop's position added to the vector of indices, and the accumulator
    carried in a register."""
    text = _case("f", (40, 6, 50), (False, True, False), (0, 2), False, "f32")
    ir_text = scheduled_ir(text)
    assert "vector.reduction <add>" in ir_text
    assert "vector.step" in ir_text
    assert re.search(r"arith\.addi %\w+, %\w+ : vector<\d+xindex>", ir_text)
    assert "-> (vector<1xf32>)" in ir_text
