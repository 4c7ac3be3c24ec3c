"""Numerical checking of the differentiation passes (JAX's check_grads idea).

`build_module(fns)` wraps every primal function `@name` with
`@jvp_name` (autodiff.jvp), `@vjp_name` (autodiff.vjp), `@hvp_name` (jvp of
vjp_name: second order), `@vjpjvp_name` (vjp of jvp_name) and `@vjpvjp_name`
(vjp of vjp_name: reverse over reverse), runs
`--autodiff-jvp,--autodiff-vjp` and compiles the result for the CPU. The
checkers compare against central finite differences in one random direction,
the dot-product identity <vjp(ct), t> == <ct, jvp(t)>, and (where given) jax.

Expected values never come from our own output: FD, the dot-product
identity and jax are independent of the passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.pipeline import InternalError, run_pipeline


@dataclasses.dataclass
class Fn:
    """A primal MLIR function `@name(params) -> results` (text of the func.func)."""

    name: str
    text: str
    params: list[str]
    results: list[str]
    domain: tuple[float, float] = (-1.5, 1.5)
    jax_fn: Callable | None = None
    order2: bool = True
    reverse: bool = True  # False: forward mode only (no vjp wrappers or checks)


def _sig(types: Sequence[str]) -> str:
    return ", ".join(types)


def _ret(vals: Sequence[str], types: Sequence[str]) -> str:
    return f"return {', '.join(vals)} : {_sig(types)}"


def _call(op: str, fn: str, args: Sequence[str], ins: Sequence[str], outs: Sequence[str],
          extra: str = "") -> str:
    n = len(outs)
    res = "%r" if n == 1 else f"%r:{n}"
    return (f'{res} = "{op}"({", ".join(args)}) {{fn = @{fn}{extra}}} : '
            f"({_sig(ins)}) -> ({_sig(outs)})")


def _results(n: int) -> list[str]:
    return ["%r"] if n == 1 else [f"%r#{i}" for i in range(n)]


def wrappers(f: Fn) -> str:
    P, R = f.params, f.results
    n, m = len(P), len(R)
    x = [f"%x{i}" for i in range(n)]
    t = [f"%t{i}" for i in range(n)]
    c = [f"%c{i}" for i in range(m)]
    tc = [f"%tc{i}" for i in range(m)]
    ct2 = [f"%d{i}" for i in range(m)]
    out = []

    def func(name, args, types, body, res_types):
        params = ", ".join(f"{a}: {ty}" for a, ty in zip(args, types))
        out.append(f"func.func @{name}({params}) -> ({_sig(res_types)}) {{\n  {body}\n"
                   f"  {_ret(_results(len(res_types)), res_types)}\n}}")

    func(f"jvp_{f.name}", x + t, P + P, _call("autodiff.jvp", f.name, x + t, P + P, R + R),
         R + R)
    if not f.reverse:
        return "\n".join(out)
    func(f"vjp_{f.name}", x + c, P + R, _call("autodiff.vjp", f.name, x + c, P + R, R + P),
         R + P)
    if f.order2:
        # jvp of vjp: (x, c, tx, tc) -> (y, g, ty, tg)
        func(f"hvp_{f.name}", x + c + t + tc, P + R + P + R,
             _call("autodiff.jvp", f"vjp_{f.name}", x + c + t + tc, P + R + P + R,
                   R + P + R + P), R + P + R + P)
        # vjp of jvp: (x, t, cy, cty) -> (y, ty, gx, gt)
        func(f"vjpjvp_{f.name}", x + t + c + ct2, P + P + R + R,
             _call("autodiff.vjp", f"jvp_{f.name}", x + t + c + ct2, P + P + R + R,
                   R + R + P + P), R + R + P + P)
        # vjp of vjp: (x, c, cy, cg) -> (y, g, gx, gc)
        func(f"vjpvjp_{f.name}", x + c + ct2 + t, P + R + R + P,
             _call("autodiff.vjp", f"vjp_{f.name}", x + c + ct2 + t, P + R + R + P,
                   R + P + P + R), R + P + P + R)
    return "\n".join(out)


def build_module(fns: Sequence[Fn], pipeline: str = "autodiff-jvp,autodiff-vjp") -> str:
    """The module text after differentiation (no autodiff op left)."""
    text = "\n".join(f.text + "\n" + wrappers(f) for f in fns)
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        try:
            run_pipeline(module, pipeline)
        except InternalError as err:  # show the pass's own traceback
            raise err.error from err
        out = str(module)
    assert "autodiff." not in out.replace("autodiff.boundary", "")
    return out


def compile_fns(fns: Sequence[Fn]) -> CompiledModule:
    return CompiledModule(build_module(fns))


# ----------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------


def _shape(t: str) -> tuple[int, ...]:
    if not t.startswith("tensor<"):
        return ()
    dims = t[len("tensor<"):-1].split("x")[:-1]
    return tuple(int(d) for d in dims)


def _dtype(t: str) -> np.dtype:
    return np.dtype(np.float32) if t.endswith("f32>") or t == "f32" else np.dtype(np.float64)


def _as_list(v) -> list:
    return list(v) if isinstance(v, tuple) else [v]


def random_args(f: Fn, rng: np.random.Generator) -> list[np.ndarray]:
    lo, hi = f.domain
    return [np.asarray(rng.uniform(lo, hi, _shape(t)), dtype=_dtype(t)) for t in f.params]


def random_like(types: Sequence[str], rng: np.random.Generator) -> list[np.ndarray]:
    return [np.asarray(rng.standard_normal(_shape(t)), dtype=_dtype(t)) for t in types]


def vdot(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> float:
    return float(sum(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64))
                     for a, b in zip(xs, ys)))


def axpy(xs, a, ts):
    return [np.asarray(x + a * t, dtype=x.dtype) for x, t in zip(xs, ts)]


def central_diff(fn: Callable, xs, ts, eps: float) -> list[np.ndarray]:
    plus = _as_list(fn(*axpy(xs, eps, ts)))
    minus = _as_list(fn(*axpy(xs, -eps, ts)))
    return [(np.asarray(p, np.float64) - np.asarray(q, np.float64)) / (2 * eps)
            for p, q in zip(plus, minus)]


def assert_close(got, want, rtol: float, atol: float, what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"{what} #{i}")


def check_first_order(cm: CompiledModule, f: Fn, rng, *, eps=1e-6, rtol=1e-6, atol=1e-8):
    """JVP vs central FD; VJP by the dot-product test; primal outputs agree."""
    xs = random_args(f, rng)
    ts = random_like(f.params, rng)
    cs = random_like(f.results, rng)
    prim = cm[f.name]
    ys = _as_list(prim(*xs))
    jv = _as_list(cm[f"jvp_{f.name}"](*xs, *ts))
    m = len(f.results)
    assert_close(jv[:m], ys, 1e-12, 1e-12, "jvp primal outputs")
    fd = central_diff(prim, xs, ts, eps)
    assert_close(jv[m:], fd, rtol, atol, "jvp vs central differences")
    if not f.reverse:
        return xs, ts, cs, jv, None
    vj = _as_list(cm[f"vjp_{f.name}"](*xs, *cs))
    assert_close(vj[:m], ys, 1e-12, 1e-12, "vjp primal outputs")
    lhs = vdot(vj[m:], ts)
    rhs = vdot(cs, jv[m:])
    np.testing.assert_allclose(lhs, rhs, rtol=max(rtol, 1e-9), atol=atol,
                               err_msg="dot-product test <vjp(c), t> == <c, jvp(t)>")
    # Reverse mode against FD too: <vjp(c), t> vs <c, FD(t)>.
    np.testing.assert_allclose(lhs, vdot(cs, fd), rtol=rtol * 10, atol=atol * 10,
                               err_msg="vjp vs central differences")
    return xs, ts, cs, jv, vj


def check_second_order(cm: CompiledModule, f: Fn, rng, *, eps=1e-5, rtol=1e-5, atol=1e-7):
    """jvp-of-vjp and vjp-of-jvp against central differences of first-order functions."""
    n, m = len(f.params), len(f.results)
    xs = random_args(f, rng)
    ts = random_like(f.params, rng)
    cs = random_like(f.results, rng)
    zc = [np.zeros_like(c) for c in cs]
    # Hessian-vector product: d/de vjp(x + e t, c)
    h = _as_list(cm[f"hvp_{f.name}"](*xs, *cs, *ts, *zc))
    vjp_x = lambda *a: tuple(_as_list(cm[f"vjp_{f.name}"](*a, *cs))[m:])  # noqa: E731
    fd = central_diff(vjp_x, xs, ts, eps)
    assert_close(h[m + n + m:], fd, rtol, atol, "jvp of vjp vs FD of vjp")
    # vjp of jvp: gx = d/dx <d, jvp(x, t)> (cy = 0), checked along a direction u.
    us = random_like(f.params, rng)
    dd = random_like(f.results, rng)
    zy = [np.zeros_like(c) for c in cs]
    r = _as_list(cm[f"vjpjvp_{f.name}"](*xs, *ts, *zy, *dd))
    gx = r[2 * m: 2 * m + n]

    def g(*a):
        return vdot(dd, _as_list(cm[f"jvp_{f.name}"](*a, *ts))[m:])

    fd2 = (g(*axpy(xs, eps, us)) - g(*axpy(xs, -eps, us))) / (2 * eps)
    np.testing.assert_allclose(vdot(gx, us), fd2, rtol=rtol * 10, atol=atol * 10,
                               err_msg="vjp of jvp vs FD")
    # vjp of vjp: with cy = 0 and cg = dg, gx = d/dx <dg, vjp_x(x, c)> and
    # gc = d/dc <dg, vjp_x(x, c)>, each checked along a random direction.
    dg = random_like(f.params, rng)
    r = _as_list(cm[f"vjpvjp_{f.name}"](*xs, *cs, *zy, *dg))
    gx, gc = r[m + n: m + 2 * n], r[m + 2 * n:]

    def h2(x_args, c_args):
        return vdot(dg, _as_list(cm[f"vjp_{f.name}"](*x_args, *c_args))[m:])

    fd3 = (h2(axpy(xs, eps, us), cs) - h2(axpy(xs, -eps, us), cs)) / (2 * eps)
    np.testing.assert_allclose(vdot(gx, us), fd3, rtol=rtol * 10, atol=atol * 10,
                               err_msg="vjp of vjp (d/dx) vs FD")
    ws = random_like(f.results, rng)
    fd4 = (h2(xs, axpy(cs, eps, ws)) - h2(xs, axpy(cs, -eps, ws))) / (2 * eps)
    np.testing.assert_allclose(vdot(gc, ws), fd4, rtol=rtol * 10, atol=atol * 10,
                               err_msg="vjp of vjp (d/dc) vs FD")


def check_against_jax(cm: CompiledModule, f: Fn, rng, *, rtol=1e-10, atol=1e-12):
    """Our jvp and vjp agree with jax's on the same function (float64)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    m = len(f.results)
    xs = random_args(f, rng)
    ts = random_like(f.params, rng)
    cs = random_like(f.results, rng)
    jx = [jax.numpy.asarray(x) for x in xs]
    y, jt = jax.jvp(f.jax_fn, tuple(jx), tuple(jax.numpy.asarray(t) for t in ts))
    jv = _as_list(cm[f"jvp_{f.name}"](*xs, *ts))
    assert_close(jv[m:], [jt] if m == 1 else list(jt), rtol, atol, "jvp vs jax")
    if not f.reverse:
        return
    _, pullback = jax.vjp(f.jax_fn, *jx)
    want = pullback(cs[0] if m == 1 else tuple(cs))
    vj = _as_list(cm[f"vjp_{f.name}"](*xs, *cs))
    assert_close(vj[m:], list(want), rtol, atol, "vjp vs jax")
