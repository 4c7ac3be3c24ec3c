"""vmap: the `--autodiff-vmap` pass and the Python `vmap`, checked against loops over the batch.

Every batching rule is exercised by an MLIR case (`vmap_cases.py`): the
batched function must equal `np.stack` of the unbatched function run on each
slice. The Python API is checked against numpy loops and, where jax is
installed, against `jax.vmap` (float64, 1e-10), including compositions with
grad/jvp.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from vmap_cases import CASES, T3, T34, T43, Case

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp
from mlir_autodiff.batching import vmap
from mlir_autodiff.runtime import CompiledModule

B = 5
PIPELINE = "autodiff-vmap,autodiff-lower-to-cpu"


def _parse(t: str) -> tuple[str, str]:
    """(sampler, type) from a case's argument spec like 'i:3 index' or 'p f64'."""
    if " " in t:
        kind, ty = t.split(" ", 1)
        return kind, ty
    return "f", t


def _shape(ty: str) -> tuple[list[int], str]:
    m = re.fullmatch(r"tensor<(.*)>", ty)
    if not m:
        return [], ty
    *dims, et = m.group(1).split("x")
    return [int(d) for d in dims], et


def _batched_type(ty: str, axis: int) -> str:
    dims, et = _shape(ty)
    if axis < 0:
        return ty
    dims.insert(axis, B)
    return f"tensor<{'x'.join(map(str, dims))}x{et}>"


def _sample(rng: np.random.Generator, kind: str, ty: str, batch_axis: int) -> np.ndarray:
    dims, et = _shape(ty)
    if batch_axis >= 0:
        dims.insert(batch_axis, B)
    if kind.startswith("i:"):
        return rng.integers(0, int(kind[2:]), size=dims).astype(np.int64)
    x = rng.standard_normal(dims)
    return np.abs(x) + 0.1 if kind == "p" else x


def _fill(text: str, case_id: str) -> str:
    return (text.replace("{T34}", T34).replace("{T43}", T43).replace("{T3}", T3)
            .replace("{ID}", case_id))


def case_module(c: Case) -> str:
    types = [_parse(a)[1] for a in c.args]
    out_axes = c.out_axes or [0] * len(c.results)
    params = ", ".join(f"%{chr(97 + i)}: {t}" for i, t in enumerate(types))
    body = _fill(c.body, c.id)
    f = (f"func.func @f({params}) -> ({', '.join(c.results)}) {{\n{body}\n}}\n")
    btypes = [_batched_type(t, a) for t, a in zip(types, c.in_axes)]
    rtypes = [_batched_type(t, a) for t, a in zip(c.results, out_axes)]
    bparams = ", ".join(f"%{chr(97 + i)}: {t}" for i, t in enumerate(btypes))
    names = ", ".join(f"%{chr(97 + i)}" for i in range(len(types)))
    rs = ", ".join(f"%r#{j}" for j in range(len(rtypes)))
    main = (f"func.func @main({bparams}) -> ({', '.join(rtypes)}) {{\n"
            f"  %r:{len(rtypes)} = \"autodiff.vmap\"({names}) {{fn = @f, "
            f"in_axes = array<i64: {', '.join(map(str, c.in_axes))}>, "
            f"out_axes = array<i64: {', '.join(map(str, out_axes))}>, randomness = \"error\"}}"
            f" : ({', '.join(btypes)}) -> ({', '.join(rtypes)})\n"
            f"  return {rs} : {', '.join(rtypes)}\n}}\n")
    return f + main


def _loop(fn, args: list[np.ndarray], in_axes: list[int], out_axes: list[int]) -> list:
    per = []
    for k in range(B):
        sl = [np.take(a, k, axis=ax) if ax >= 0 else a for a, ax in zip(args, in_axes)]
        outs = fn(*sl)
        per.append(outs if isinstance(outs, tuple) else (outs,))
    return [np.stack([np.asarray(p[j]) for p in per], axis=ax) if ax >= 0 else per[0][j]
            for j, ax in enumerate(out_axes)]


def _rank(spec: str) -> int:
    return len(_shape(_parse(spec)[1])[0])


def _variants(c: Case) -> list[tuple[str, Case]]:
    """The case as written, every argument batched at 0, and every argument at its last axis."""
    out = [("", c)]
    zeros = [0] * len(c.args)
    if zeros != c.in_axes:
        out.append(("-all0", dataclasses.replace(c, in_axes=zeros)))
    last = [_rank(a) for a in c.args]
    if last not in (c.in_axes, zeros):
        out.append(("-last", dataclasses.replace(c, in_axes=last)))
    return out


VARIANTS = [(c.id + suffix, v) for c in CASES for suffix, v in _variants(c)]


@pytest.mark.parametrize("case", [v for _, v in VARIANTS], ids=[i for i, _ in VARIANTS])
def test_rule_matches_loop(case: Case) -> None:
    """The batched function equals the unbatched one run on each slice, stacked."""
    rng = np.random.default_rng(0)
    cm = CompiledModule(case_module(case), pipeline=PIPELINE, opt_level=0)
    args = [_sample(rng, *_parse(a), ax) for a, ax in zip(case.args, case.in_axes)]
    out_axes = case.out_axes or [0] * len(case.results)
    got = cm["main"](*args)
    got = got if isinstance(got, tuple) else (got,)
    want = _loop(cm["f"], args, case.in_axes, out_axes)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- Python API


def _np_loop(fn, args, in_axes, out_axis=0):
    """np.stack over the batch of `fn` on each slice (the independent reference)."""
    size = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = []
    for k in range(size):
        sl = [a if ax is None else np.take(a, k, axis=ax) for a, ax in zip(args, in_axes)]
        outs.append(fn(*sl))
    if isinstance(outs[0], tuple):
        return tuple(np.stack([o[j] for o in outs], axis=out_axis) for j in range(len(outs[0])))
    return np.stack(outs, axis=out_axis)


def _elementwise(xp, x, y):
    return xp.sin(x) * y + xp.exp(-x * x) / (1.0 + y * y) - xp.maximum(x, y)


def _where_clip(xp, x, y):
    return xp.where(x > y, xp.tanh(x), xp.clip(y, -0.5, 0.5)) + xp.abs(x) ** 1.5


def _matmuls(xp, x, y):
    # x: (3, 4), y: (4,) -> matvec, vecmat, dot, matmul with the transposed self
    return xp.tanh(x @ y) + (y @ x.T).sum() + y @ y + (x @ x.T).sum(axis=1)


def _reductions(xp, x, y):
    return (x.sum(axis=0) * y.max() + x.mean(axis=0) - x.max(axis=0)
            + xp.log(xp.exp(x).sum(axis=0)))


def _shapes(xp, x, y):
    z = xp.concatenate([x, x[::-1] * 2.0], axis=0)          # (6, 4)
    t = xp.transpose(z.reshape(3, 2, 4), (2, 0, 1))          # (4, 3, 2)
    s = xp.stack([y, y * y], axis=1)                         # (4, 2)
    return (t.sum(axis=1) + s + xp.expand_dims(x[1, :], 1)
            + xp.broadcast_to(y[:1], (4, 2)))


def _slices(xp, x, y):
    return x[1:3, ::2] * y[1:3].reshape(2, 1) + x[0, 1] + x[-1, 2:]


OPS = [_elementwise, _where_clip, _matmuls, _reductions, _shapes, _slices]
SHAPES = {_elementwise: ((3, 4), (3, 4)), _where_clip: ((3, 4), (3, 4)),
          _matmuls: ((3, 4), (4,)), _reductions: ((3, 4), (4,)), _shapes: ((3, 4), (4,)),
          _slices: ((3, 4), (4,))}
AXES = [(0, 0), (1, None), (None, 0), (1, -1)]


@pytest.mark.parametrize("axes", AXES, ids=[str(a) for a in AXES])
@pytest.mark.parametrize("fn", OPS, ids=[f.__name__[1:] for f in OPS])
def test_vmap_matches_numpy_loop(fn, axes) -> None:
    """vmap of traced numpy code equals numpy on each slice, stacked."""
    rng = np.random.default_rng(1)
    args = []
    for shape, ax in zip(SHAPES[fn], axes):
        if ax is not None:
            a = ax + len(shape) + 1 if ax < 0 else ax
            shape = shape[:a] + (B,) + shape[a:]
        args.append(rng.uniform(0.2, 1.5, shape))
    norm = [None if a is None else (a + args[i].ndim if a < 0 else a)
            for i, a in enumerate(axes)]
    got = vmap(lambda x, y: fn(anp, x, y), in_axes=axes)(*args)
    want = _np_loop(lambda x, y: fn(np, x, y), args, norm)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vmap_matches_jit_loop_with_out_axes() -> None:
    """out_axes places the batch dimension; the reference is our own jit on each slice."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, B, 4))

    def f(v):
        return anp.tanh(v) @ anp.ones((4, 2)), v.sum()

    got = vmap(f, in_axes=1, out_axes=(2, 0))(x)
    jf = ad.jit(f)
    per = [jf(x[:, k, :]) for k in range(B)]
    np.testing.assert_allclose(got[0], np.stack([p[0] for p in per], axis=2), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.stack([p[1] for p in per]), rtol=1e-12)


def test_pytree_in_axes_and_out_axes() -> None:
    """in_axes/out_axes are pytree prefixes: a dict of axes, None for an unbatched leaf."""
    rng = np.random.default_rng(3)
    params = {"w": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    xs = rng.standard_normal((B, 4))

    def f(p, x):
        h = x @ p["w"] + p["b"]
        return {"h": h, "n": (h * h).sum()}, p["b"] * 2.0

    got, bias = vmap(f, in_axes=({"w": None, "b": None}, 0),
                     out_axes=({"h": 1, "n": 0}, None))(params, xs)
    h = xs @ params["w"] + params["b"]
    np.testing.assert_allclose(got["h"], h.T, rtol=1e-12)
    np.testing.assert_allclose(got["n"], (h * h).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(bias, params["b"] * 2.0, rtol=1e-12)


def test_unbatched_output_is_broadcast_and_axis_size() -> None:
    """An output independent of the batch is broadcast (JAX); axis_size covers no batched input."""
    x = np.arange(4.0)
    got = vmap(lambda a, c: (a * 2.0, c + 1.0), in_axes=(0, None))(x, np.ones(3))
    np.testing.assert_allclose(got[1], np.full((4, 3), 2.0))
    got = vmap(lambda c: c * 3.0, in_axes=None, axis_size=2)(np.ones(3))
    np.testing.assert_allclose(got, np.full((2, 3), 3.0))


def test_errors_are_jax_like() -> None:
    x, y = np.ones((3, 2)), np.ones((4, 2))
    with pytest.raises(ValueError, match="vmap got inconsistent sizes for array axes to be mapped"):
        vmap(lambda a, b: a + b[:3])(x, y)
    with pytest.raises(ValueError, match="vmap has mapped output .* but out_axes is None"):
        vmap(lambda a: a * 2.0, out_axes=None)(x)
    with pytest.raises(ValueError, match="map its argument along axis 2"):
        vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match="len\\(in_axes\\)=2, len\\(args\\)=1"):
        vmap(lambda a: a, in_axes=(0, 0))(x)
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(ValueError, match="tree prefix"):
        vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": x})
    with pytest.raises(ValueError, match="randomness"):
        vmap(lambda a: a, randomness="sometimes")


# --------------------------------------------------------------------------- composition (jax)

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def _mlp(xp):
    def loss(p, x, y):
        w1, b1, w2 = p
        h = xp.tanh(x @ w1 + b1)
        return ((h @ w2 - y) ** 2).sum()
    return loss


def _close(a, b) -> None:
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-10, atol=1e-10)


def test_per_sample_gradients_one_compiled_call() -> None:
    """vmap(grad) of an MLP over a batch of 64: one autodiff.vmap, one compiled call, = jax."""
    rng = np.random.default_rng(4)
    p = (rng.standard_normal((3, 8)), rng.standard_normal(8), rng.standard_normal((8, 2)))
    xs, ys = rng.standard_normal((64, 3)), rng.standard_normal((64, 2))
    per_sample = ad.jit(vmap(ad.grad(_mlp(anp)), in_axes=(None, 0, 0)))
    got = per_sample(p, xs, ys)
    assert per_sample._cache_size() == 1
    text = ad.lower(per_sample, p, xs, ys).as_text("capture")
    assert text.count('"autodiff.vmap"') == 1 and text.count('"autodiff.vjp"') == 1
    want = jax.vmap(jax.grad(_mlp(jnp)), in_axes=(None, 0, 0))(p, xs, ys)
    _close(got, want)


def test_vmap_of_vmap_and_vmap_of_jvp() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 3, 2))
    f, fj = (lambda x: anp.sin(x) * x.sum()), (lambda x: jnp.sin(x) * x.sum())
    _close(vmap(vmap(f, in_axes=1), in_axes=2)(a), jax.vmap(jax.vmap(fj, in_axes=1), in_axes=2)(a))
    got = vmap(lambda x, t: ad.jvp(f, (x,), (t,)))(a, a * 0.5)
    _close(got, jax.vmap(lambda x, t: jax.jvp(fj, (x,), (t,)))(a, a * 0.5))


def test_grad_of_vmap() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 3))

    def h(xp, vm):
        return lambda x: vm(lambda r: (xp.sin(r) * r).sum())(x).sum()

    _close(ad.grad(h(anp, vmap))(a), jax.grad(h(jnp, jax.vmap))(a))


def test_jvp_of_vmap() -> None:
    rng = np.random.default_rng(7)
    a, t = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    got = ad.jvp(vmap(lambda x: anp.exp(x) * x[0]), (a,), (t,))
    _close(got, jax.jvp(jax.vmap(lambda x: jnp.exp(x) * x[0]), (a,), (t,)))


# --------------------------------------------------------------------------- randomness

RNG_MODULE = """
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %q = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  %1 = arith.mulf %0, %q : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @ref(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "RANDOMNESS"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
"""
RNG_PIPELINE = "autodiff-vmap,autodiff-lower-rng,autodiff-lower-to-cpu"


def _functionalized(text: str) -> str:
    """The module after --autodiff-functionalize-rng (entry points then take seed, offset)."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.pipeline import run_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, "autodiff-functionalize-rng")
        return str(module)


@pytest.mark.parametrize("mode", ["different", "same"])
def test_randomness_modes_match_sequential_calls(mode: str) -> None:
    """"different": lane l draws what the l-th of B calls in a row draws; "same": one draw."""
    cm = CompiledModule(_functionalized(RNG_MODULE.replace("RANDOMNESS", mode)),
                        pipeline=RNG_PIPELINE, opt_level=0)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    seed, offset = np.int64(7), np.int64(100)
    got, end = cm["main"](x, seed, offset)
    off = offset
    rows = []
    for lane in range(3):
        row, nxt = cm["ref"](x[lane], seed, off if mode == "different" else offset)
        rows.append(row)
        off = nxt
    np.testing.assert_array_equal(got, np.stack(rows))
    assert end == off  # "different": B calls' worth of blocks; "same": one call's
    if mode == "different":
        assert not np.allclose(got[0] - x[0], got[1] - x[1])


def test_vmap_of_pullback_is_the_jacobian() -> None:
    """jacrev on vmap: the pullback vmapped over basis cotangents, one batched call (= jax)."""
    from mlir_autodiff.tracing import as_tracer

    def jac(x):
        out, pullback = ad.vjp(lambda v: anp.tanh(v[:3] * v[1:]), as_tracer(x))
        (rows,) = vmap(pullback)(np.eye(3))
        return rows

    x = np.random.default_rng(8).standard_normal(4)
    jitted = ad.jit(jac)
    text = ad.lower(jitted, x).as_text("capture")
    assert text.count('"autodiff.vmap"') == 1
    _close(jitted(x), jax.jacrev(lambda v: jnp.tanh(v[:3] * v[1:]))(x))


# --------------------------------------------------------------------------- loops and slices

def _vmap_regressions(xp, lax, vm):
    """Programs whose batching once failed, for our API and jax's (one compilation):
    a fori_loop whose carry starts from a constant nested in a while_loop (the while
    forwards fewer values than it carries); a gather and a scatter at traced indices
    batched by an outer vmap over an inner one of size 1 (rank-reducing slices that keep
    a unit dimension, at per-lane offsets)."""
    def jacobi_like(a):
        def body(s):
            g, off = lax.fori_loop(0, 2, lambda i, c: (c[0] * 0.5, xp.maximum(c[1], xp.sum(c[0]))),
                                   (s[0], xp.zeros((), a.dtype)))
            return g, off, s[2] + 1
        return lax.while_loop(lambda s: (s[1] > 1) & (s[2] < 5), body,
                              (a, xp.ones((), a.dtype) * 2, xp.asarray(0)))[0]

    def allf(a, idx, xs, u):
        gather = vm(lambda i: vm(lambda x: x[i] * x[0])(xs))(idx)
        scatter = vm(lambda i, v: vm(lambda x: x.at[i].set(v * x[1]))(xs))(idx, u)
        return vm(jacobi_like)(a), gather, scatter
    return allf


def _vmap_regression_args():
    rng = np.random.default_rng(8)
    return (rng.uniform(0.5, 2.0, (3, 4)), np.array([2, 0, 3]), rng.standard_normal((1, 4)),
            rng.standard_normal(3))


def _numpy_regressions(a, idx, xs, u):
    def jacobi_like(r):
        g, off, k = r, 2.0, 0
        while off > 1 and k < 5:
            c0, c1 = g, 0.0
            for _ in range(2):
                c0, c1 = c0 * 0.5, max(c1, c0.sum())
            g, off, k = c0, c1, k + 1
        return g

    def set_at(x, i, v):
        y = x.copy()
        y[i] = v * x[1]
        return y

    gather = np.array([[x[i] * x[0] for x in xs] for i in idx])
    scatter = np.array([[set_at(x, i, v) for x in xs] for i, v in zip(idx, u)])
    return np.stack([jacobi_like(r) for r in a]), gather, scatter


def test_loops_and_traced_slices_match_loops_and_jax() -> None:
    args = _vmap_regression_args()
    got = ad.jit(_vmap_regressions(anp, ad.lax, vmap))(*args)
    for g, w in zip(got, _numpy_regressions(*args)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    _close(got, _vmap_regressions(jnp, jax.lax, jax.vmap)(*args))
