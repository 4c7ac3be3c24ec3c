"""Reductions with ties and zeros, and indexing maps that are not projected
permutations, in every mode (issue 18, items 2, 6 and 7).

* max / min / amax / amin follow JAX's convention at ties: the cotangent is
  split evenly among the tied elements and the tangent is the mean of the
  tied tangents (so <grad, t> == jvp . t holds at ties too).
* prod differentiates exactly with any number of zeros in a reduced slice
  (no division by the input).
* flip, negative-step slices, diagonal / trace, einsum with a repeated index
  and `.at[::-2]` updates have reverse modes.

The Python cases form a generated grid (ops x axes x keepdims x tie or zero
patterns, indexing variants); each case compiles ONE module computing grad,
jvp, vjp, jacfwd, jacrev, hessian, vmap and vmap-of-grad, checked against
jax (float64, at the exact ties), against central finite differences of our
own primal where the function is smooth there, and against the transpose
identity <ct, jvp(t)> == <vjp(ct), t>. The MLIR-level cases run a
linalg.generic with a maximumf and a mulf combiner and non-permutation maps
through ad_check's helpers (first and second order, FD, jax), and at exact
ties through the jvp/vjp wrappers against jax. No expected value comes from
our own derivatives.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ad_check import (
    Fn,
    check_against_jax,
    check_first_order,
    check_second_order,
    compile_fns,
    vdot,
)

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


# ----------------------------------------------------------------------------
# Inputs with tie and zero patterns
# ----------------------------------------------------------------------------


def _slice_values(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """One reduced slice of `n` values with a pattern."""
    v = rng.permutation(np.arange(n, dtype=np.float64)) * 0.5 - 1.0  # distinct
    if kind == "all_tied":
        return np.full(n, 0.75)
    if kind == "max_tied":  # the two largest are equal (and a third when n > 3)
        top = np.argsort(v)[-min(n, 3):]
        v[top] = v.max() + 0.25
        return v
    if kind == "min_tied":
        low = np.argsort(v)[:min(n, 2)]
        v[low] = v.min() - 0.25
        return v
    if kind == "one_zero":
        v = v + 0.1
        v[rng.integers(n)] = 0.0
        return v
    if kind == "two_zeros":
        idx = rng.permutation(n)[:2]
        v = v + 0.1
        v[idx] = 0.0
        return v
    if kind == "all_zero":
        return np.zeros(n)
    if kind == "distinct":
        return v + 0.1
    raise ValueError(kind)


def patterned(shape: tuple[int, ...], axes: tuple[int, ...] | None, kinds: list[str],
              seed: int) -> np.ndarray:
    """An array whose reduced slices (over `axes`; None: all) cycle through
    the patterns `kinds`, one per output element."""
    rng = np.random.default_rng(seed)
    nd = len(shape)
    axes = tuple(range(nd)) if axes is None else tuple(a % nd for a in axes)
    keep = [d for d in range(nd) if d not in axes]
    perm = keep + list(axes)
    moved_shape = [shape[d] for d in perm]
    n_out = int(np.prod([shape[d] for d in keep])) if keep else 1
    n_red = int(np.prod([shape[d] for d in axes]))
    rows = [_slice_values(kinds[k % len(kinds)], n_red, rng) for k in range(n_out)]
    moved = np.stack(rows).reshape(moved_shape)
    return np.ascontiguousarray(np.transpose(moved, np.argsort(perm)))


# ----------------------------------------------------------------------------
# The checker: one compiled module per case
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    id: str
    ours: Callable[[Any], Any]
    theirs: Callable[[Any], Any]
    x: np.ndarray
    smooth: bool  # central differences are valid at x (no tie of a max/min)


def _derivs(f: Callable, F: Callable) -> Callable:
    def run(x, t, ct):
        y, jt = ad.jvp(f, (x,), (t,))
        _, pull = ad.vjp(f, x)
        (v,) = pull(ct)
        return (y, jt, v, ad.grad(F)(x), ad.jacfwd(f)(x), ad.jacrev(f)(x),
                ad.hessian(F)(x))
    return run


def _close(got, want, what: str, rtol=1e-9, atol=1e-11) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=rtol, atol=atol, err_msg=what)


def check_case(case: Case) -> None:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    x = case.x
    y_want = np.asarray(case.theirs(jnp.asarray(x)))
    t = rng.standard_normal(x.shape)
    ct = rng.standard_normal(y_want.shape)
    w = rng.standard_normal(y_want.shape)

    def F(z):
        return anp.sum(w * anp.sin(case.ours(z)) * case.ours(z))

    def F_jax(z):
        return jnp.sum(w * jnp.sin(case.theirs(z)) * case.theirs(z))

    run = ad.jit(_derivs(case.ours, F))
    y, jt, v, g, jf, jr, h = run(x, t, ct)
    # jax at the same (tied) point
    _close(y, y_want, "primal vs jax")
    _, jt_want = jax.jvp(case.theirs, (jnp.asarray(x),), (jnp.asarray(t),))
    _close(jt, jt_want, "jvp vs jax")
    _, pull = jax.vjp(case.theirs, jnp.asarray(x))
    _close(v, pull(jnp.asarray(ct))[0], "vjp vs jax")
    _close(g, jax.grad(F_jax)(jnp.asarray(x)), "grad vs jax")
    _close(jf, jax.jacfwd(case.theirs)(jnp.asarray(x)), "jacfwd vs jax")
    _close(jr, jax.jacrev(case.theirs)(jnp.asarray(x)), "jacrev vs jax")
    _close(h, jax.hessian(F_jax)(jnp.asarray(x)), "hessian vs jax")
    # transpose identity, also at ties
    _close(vdot([ct], [jt]), vdot([v], [t]), "<ct, jvp(t)> == <vjp(ct), t>")
    _close(vdot([g], [t]), vdot([w * (np.sin(y) + y * np.cos(y))], [jt]),
           "<grad F, t> == dF(jvp t)")
    # vmap and vmap of grad over a batch of two points (ties kept)
    xs = np.stack([x, 2.0 * x])
    ys, gs = ad.jit(lambda b: (ad.vmap(case.ours)(b), ad.vmap(ad.grad(F))(b)))(xs)
    _close(ys, jax.vmap(case.theirs)(jnp.asarray(xs)), "vmap vs jax")
    _close(gs, jax.vmap(jax.grad(F_jax))(jnp.asarray(xs)), "vmap(grad) vs jax")
    if not case.smooth:
        return
    # central differences of our own primal (and of our grad, for the Hessian)
    eps = 1e-6
    yp = run(x + eps * t, t, ct)
    ym = run(x - eps * t, t, ct)
    _close(jt, (yp[0] - ym[0]) / (2 * eps), "jvp vs central differences", 1e-6, 1e-8)
    _close(vdot([v], [t]), vdot([ct], [(yp[0] - ym[0]) / (2 * eps)]),
           "vjp vs central differences", 1e-6, 1e-8)
    hv = np.tensordot(h, t, axes=t.ndim)
    _close(hv, (yp[3] - ym[3]) / (2 * eps), "hessian vs central differences of grad",
           1e-5, 1e-7)


# ----------------------------------------------------------------------------
# The grid
# ----------------------------------------------------------------------------

RED_OPS = {
    "max": (anp.max, jnp.max, ["all_tied", "max_tied", "distinct"]),
    "min": (anp.min, jnp.min, ["min_tied", "all_tied", "distinct"]),
    "amax": (anp.amax, jnp.amax, ["max_tied", "all_tied"]),
    "amin": (anp.amin, jnp.amin, ["min_tied", "all_tied"]),
    "prod": (anp.prod, jnp.prod, ["two_zeros", "one_zero", "distinct", "all_zero"]),
}
AXES: list[tuple[tuple[int, ...], Any]] = [
    ((3, 4), None), ((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((3, 4), (0, 1)),
    ((2, 3, 4), (0, 2)), ((2, 3, 4), 1), ((5,), 0),
]


def _reduction_cases() -> list[Case]:
    cases = []
    for name, (ours, theirs, kinds) in RED_OPS.items():
        for k, (shape, axis) in enumerate(AXES):
            if name in ("amax", "amin") and k not in (1, 5):
                continue
            axes = None if axis is None else (axis if isinstance(axis, tuple) else (axis,))
            n_slices = 1 if axes is None or len(axes) == len(shape) else None
            # A single reduced slice: one case per pattern; else all patterns in one array.
            groups = [[kd] for kd in kinds] if n_slices == 1 else [kinds]
            for keepdims in (False, True):
                for grp in groups:
                    x = patterned(shape, axes, grp, zlib.crc32(f"{name}{k}{grp}".encode()))
                    smooth = name == "prod" or grp == ["distinct"]
                    cid = f"{name}-{'x'.join(map(str, shape))}-axis{axis}-keep{keepdims}-" \
                          f"{'+'.join(grp)}"
                    cases.append(Case(
                        cid,
                        lambda z, o=ours, a=axis, kd=keepdims: o(z, axis=a, keepdims=kd),
                        lambda z, o=theirs, a=axis, kd=keepdims: o(z, axis=a, keepdims=kd),
                        x, smooth))
    return cases


def _index_case_list() -> list[Case]:
    """The indexing cases, written as functions of (module, array)."""
    rng = np.random.default_rng(7)
    m34 = rng.standard_normal((3, 4))
    m44 = rng.standard_normal((4, 4))
    t234 = rng.standard_normal((2, 3, 4))
    v8 = rng.standard_normal(8)
    c44 = rng.standard_normal((4, 4))
    spec: list[tuple[str, Callable, np.ndarray]] = [
        ("flip-all", lambda M, z: M.flip(z), m34),
        ("flip-0", lambda M, z: M.flip(z, 0), m34),
        ("flip-1", lambda M, z: M.flip(z, 1), t234),
        ("flip-02", lambda M, z: M.flip(z, (0, 2)), t234),
        ("rev-slice", lambda M, z: z[::-1], v8),
        ("rev-step2", lambda M, z: z[:, ::-2], m34),
        ("rev-mixed", lambda M, z: z[1::2, ::-1], m34),
        ("rev-int", lambda M, z: z[-1::-2, 2], m34),
        ("rev-3d", lambda M, z: z[::-1, 1:, -2::-1], t234),
        ("diagonal", lambda M, z: M.diagonal(z), m44),
        ("diagonal+1", lambda M, z: M.diagonal(z, 1), m34),
        ("diagonal-1", lambda M, z: M.diagonal(z, -1), m34),
        ("diagonal-3d", lambda M, z: M.diagonal(z, 0, 2, 0), t234),
        ("trace", lambda M, z: M.trace(z), m44),
        ("trace+1", lambda M, z: M.trace(z, 1), m34),
        ("trace-2", lambda M, z: M.trace(z, -2), m34),
        ("einsum-ii-i", lambda M, z: M.einsum("ii->i", z), m44),
        ("einsum-ii", lambda M, z: M.einsum("ii->", z), m44),
        ("einsum-ij-jj", lambda M, z: M.einsum("ij,jj->i", z, z), m44),
        ("einsum-ii-ij", lambda M, z: M.einsum("ii,ij->j", z, c44), m44),
        ("at-set-rev2", lambda M, z: z[:5].at[::-2].set(z[5:] * z[5:]), v8),
        ("at-add-rev2", lambda M, z: z[:5].at[::-2].add(z[5:] * z[:3]), v8),
        ("at-set-2d", lambda M, z: z.at[::-1, ::-2].set(z[:, 1::2] * 2.0), m34),
        ("sum-flip-diag", lambda M, z: M.sum(M.diagonal(M.flip(z, 1)) ** 3), m44),
        ("prod-of-rev", lambda M, z: M.prod(z[::-1, ::2], axis=0), m34),
    ]
    return [Case(cid, (lambda z, f=f: f(anp, z)), (lambda z, f=f: f(jnp, z)), x, True)
            for cid, f, x in spec]


CASES = {c.id: c for c in _reduction_cases() + _index_case_list()}


@pytest.mark.parametrize("case_id", list(CASES))
def test_api_against_jax_and_fd(case_id: str) -> None:
    check_case(CASES[case_id])


def test_grid_covers_the_items() -> None:
    """The grid is generated: every reduction op x axis x keepdims, ties and zeros."""
    ids = list(CASES)
    assert sum(i.startswith("prod-") for i in ids) >= 20
    assert sum(i.startswith(("max-", "min-")) and "tied" in i for i in ids) >= 20
    assert any("two_zeros" in i for i in ids) and any("all_zero" in i for i in ids)


def test_issue_examples() -> None:
    """The numbers the issue quotes (jax's values)."""
    x = np.array([1.0, 2.0, 2.0])
    np.testing.assert_array_equal(ad.grad(lambda z: anp.max(z))(x), [0.0, 0.5, 0.5])
    _, t = ad.jvp(lambda z: anp.max(z), (x,), (np.array([0.0, 1.0, 3.0]),))
    assert float(t) == 2.0
    g = ad.grad(lambda z: anp.prod(z))(np.array([2.0, 0.0, 3.0, 0.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 0.0])
    g = ad.grad(lambda z: anp.prod(z))(np.array([2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g, [0.0, 6.0, 0.0])


# ----------------------------------------------------------------------------
# MLIR level: a generic with a maximumf and a mulf combiner and
# non-permutation maps (a flipped and a diagonal read), active inits
# ----------------------------------------------------------------------------

_T34, _T44, _T3, _T9 = "tensor<3x4xf64>", "tensor<4x4xf64>", "tensor<3xf64>", "tensor<9xf64>"

_MAXPROD = f"""
func.func @maxprod(%x: {_T34}, %d: {_T44}, %m0: {_T3}, %p0: {_T3}) -> ({_T3}, {_T3}) {{
  %r:2 = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, 3 - j)>,
                                           affine_map<(i, j) -> (j, j)>,
                                           affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i)>],
                          iterator_types = ["parallel", "reduction"]}}
      ins(%x, %d : {_T34}, {_T44}) outs(%m0, %p0 : {_T3}, {_T3}) {{
  ^bb0(%a: f64, %b: f64, %am: f64, %ap: f64):
    %g1 = arith.mulf %a, %b : f64
    %s = math.sin %a : f64
    %g2 = arith.addf %s, %b : f64
    %m = arith.maximumf %am, %g1 : f64
    %p = arith.mulf %g2, %ap : f64
    linalg.yield %m, %p : f64, f64
  }} -> ({_T3}, {_T3})
  return %r#0, %r#1 : {_T3}, {_T3}
}}"""


def _maxprod_jax(x, d, m0, p0):
    g1 = x[:, ::-1] * jnp.diagonal(d)[None, :]
    g2 = jnp.sin(x[:, ::-1]) + jnp.diagonal(d)[None, :]
    m = jnp.max(jnp.concatenate([m0[:, None], g1], axis=1), axis=1)
    p = p0 * jnp.prod(g2, axis=1)
    return m, p


# Strided, offset and constant indices, a repeated dim and a reversal in one
# parallel generic: out[i] = x9[2i + 1] * d[i, i] + sin(x34[2, 2 - i]).
_STRIDED = f"""
func.func @strided(%x9: {_T9}, %d: tensor<3x3xf64>, %x: {_T34}) -> {_T3} {{
  %e = tensor.empty() : {_T3}
  %r = linalg.generic {{indexing_maps = [affine_map<(i) -> (i * 2 + 1)>,
                                         affine_map<(i) -> (i, i)>,
                                         affine_map<(i) -> (2, 2 - i)>, affine_map<(i) -> (i)>],
                        iterator_types = ["parallel"]}}
      ins(%x9, %d, %x : {_T9}, tensor<3x3xf64>, {_T34}) outs(%e : {_T3}) {{
  ^bb0(%a: f64, %b: f64, %c: f64, %o: f64):
    %m = arith.mulf %a, %b : f64
    %s = math.sin %c : f64
    %r = arith.addf %m, %s : f64
    linalg.yield %r : f64
  }} -> {_T3}
  return %r : {_T3}
}}"""


def _strided_jax(x9, d, x):
    return x9[1:7:2] * jnp.diagonal(d) + jnp.sin(x[2, 2::-1])


# The front end's max reduction form (init -inf, inactive): for exact ties.
_MAXRED = f"""
func.func @maxred(%x: {_T34}) -> {_T3} {{
  %lo = arith.constant 0xFFF0000000000000 : f64
  %e = tensor.empty() : {_T3}
  %f = linalg.fill ins(%lo : f64) outs(%e : {_T3}) -> {_T3}
  %r = linalg.reduce ins(%x : {_T34}) outs(%f : {_T3}) dimensions = [1]
    (%a: f64, %acc: f64) {{
      %s = arith.maximumf %a, %acc : f64
      linalg.yield %s : f64
    }}
  return %r : {_T3}
}}"""

MLIR_FNS = [
    Fn("maxprod", _MAXPROD, [_T34, _T44, _T3, _T3], [_T3, _T3], (-1.5, 1.5), _maxprod_jax),
    Fn("strided", _STRIDED, [_T9, "tensor<3x3xf64>", _T34], [_T3], (-1.5, 1.5),
       _strided_jax),
    Fn("maxred", _MAXRED, [_T34], [_T3], (-1.5, 1.5), lambda x: jnp.max(x, axis=1)),
]
_CM: dict[str, Any] = {}


def _cm():
    if "cm" not in _CM:
        _CM["cm"] = compile_fns(MLIR_FNS)
    return _CM["cm"]


@pytest.mark.parametrize("fn", [f.name for f in MLIR_FNS])
def test_mlir_first_order(fn: str) -> None:
    f = next(g for g in MLIR_FNS if g.name == fn)
    check_first_order(_cm(), f, np.random.default_rng(zlib.crc32(fn.encode())))


@pytest.mark.parametrize("fn", [f.name for f in MLIR_FNS])
def test_mlir_second_order(fn: str) -> None:
    f = next(g for g in MLIR_FNS if g.name == fn)
    check_second_order(_cm(), f, np.random.default_rng(zlib.crc32(fn.encode()) + 1))


@pytest.mark.parametrize("fn", [f.name for f in MLIR_FNS])
def test_mlir_against_jax(fn: str) -> None:
    f = next(g for g in MLIR_FNS if g.name == fn)
    check_against_jax(_cm(), f, np.random.default_rng(zlib.crc32(fn.encode()) + 2))


@pytest.mark.parametrize("pattern", [["all_tied"], ["max_tied"], ["all_tied", "max_tied",
                                                                    "distinct"]])
def test_mlir_ties_against_jax(pattern: list[str]) -> None:
    """jvp / vjp of the reduce form and of the two-combiner generic at exact
    ties (of the max, and of the init with the max) agree with jax."""
    cm = _cm()
    rng = np.random.default_rng(zlib.crc32("".join(pattern).encode()))
    x = patterned((3, 4), (1,), pattern, 11)
    t, ct = rng.standard_normal((3, 4)), rng.standard_normal(3)
    y, jt = cm["jvp_maxred"](x, t)
    _, jt_want = jax.jvp(lambda z: jnp.max(z, axis=1), (x,), (t,))
    _close(jt, jt_want, "jvp at ties vs jax")
    y, g = cm["vjp_maxred"](x, ct)
    _close(g, jax.vjp(lambda z: jnp.max(z, axis=1), x)[1](ct)[0], "vjp at ties vs jax")
    # The generic: with d = ones its g1 is the flipped x; the init m0 ties
    # with the max in row 0; zeros in the product's factors.
    d = np.eye(4) + 0.0
    d[np.arange(4), np.arange(4)] = 1.0
    m0 = np.array([x[0].max(), -5.0, x[2].max() + 1.0])
    p0 = np.array([2.0, 0.0, -1.0])
    xs = (x, d, m0, p0)
    ts = tuple(rng.standard_normal(a.shape) for a in xs)
    cs = (rng.standard_normal(3), rng.standard_normal(3))
    got = cm["jvp_maxprod"](*xs, *ts)
    _, want = jax.jvp(_maxprod_jax, xs, ts)
    _close(got[2], want[0], "generic max jvp at ties vs jax")
    _close(got[3], want[1], "generic prod jvp vs jax")
    got = cm["vjp_maxprod"](*xs, *cs)
    want = jax.vjp(_maxprod_jax, *xs)[1](cs)
    for k in range(4):
        _close(got[2 + k], want[k], f"generic vjp #{k} at ties vs jax")
