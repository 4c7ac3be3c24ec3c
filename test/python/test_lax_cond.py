"""`mlir_autodiff.lax`: cond, switch, select and map, alone and under every transform.

`cond`/`switch` trace every branch once into a chain of `scf.if`; `map` is a
`scan` without carry; `select` is an elementwise choice. Each program is
written twice, against (anp, our lax) and (jnp, jax.lax); values and
derivatives are checked in float64 against jax (x64) and central finite
differences, the transpose identity <ct, jvp(t)> = <vjp(ct), t> holds, vmap
(batched and unbatched predicates) matches a Python loop, and misuse is an
error naming the user's line.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import lax

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jlax = jax.lax

FILE = os.path.basename(__file__)
TOL = {"rtol": 1e-10, "atol": 1e-12}
RNG = np.random.default_rng(11)
X = RNG.standard_normal(4)
W = RNG.standard_normal(4)


def _close(ours: Any, theirs: Any, **tol: Any) -> None:
    o, t = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
    assert len(o) == len(t) and o
    for a, b in zip(o, t):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **(tol or TOL))


def _fd_grad(f: Any, args: list[np.ndarray], argnum: int, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f w.r.t. args[argnum] (float64)."""
    x = np.asarray(args[argnum], np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        for sign in (1, -1):
            xs = list(args)
            xp = x.copy()
            xp[idx] += sign * eps
            xs[argnum] = xp
            g[idx] += sign * float(f(*xs)) / (2 * eps)
    return g


# ----------------------------------------------------------------------------- programs
# f(x, w, p): x, w float vectors (differentiated), p a predicate/index (held fixed).

def cond_prog(np_, lax_):
    def f(x, w, p):
        def yes(ops):
            a, b = ops
            return {"u": np_.sin(a) * b, "v": np_.sum(a * a)}

        def no(ops):
            a, b = ops
            return {"u": a * b * b, "v": np_.sum(np_.exp(a * w))}  # closes over w

        out = lax_.cond(p, yes, no, (x, w))
        return np_.sum(out["u"] * w) + out["v"]
    return f


def cond_int_pred_prog(np_, lax_):
    def f(x, w, p):  # p an integer: a number means p != 0
        y = lax_.cond(p, lambda a: a ** 3, lambda a: np_.tanh(a) * w, x)
        return np_.sum(y * y)
    return f


def switch_prog(np_, lax_):
    def f(x, w, p):
        branches = [lambda a, b: np_.sum(a * b),
                    lambda a, b: np_.sum(np_.sin(a) * b * b),
                    lambda a, b: np_.sum(a ** 2) * np_.sum(b)]
        return lax_.switch(p, branches, x, w)
    return f


def traced_pred_prog(np_, lax_):
    def f(x, w, p):  # the predicate depends on the differentiated input
        return np_.sum(lax_.cond(np_.sum(x) > p, lambda a: a * w * a, lambda a: np_.cos(a), x))
    return f


def select_prog(np_, lax_):
    def f(x, w, p):
        return np_.sum(lax_.select(x * p > w, x * w, np_.sin(w)))
    return f


def map_prog(np_, lax_):
    def f(x, w, p):
        rows = np_.reshape(x * w, (2, 2))
        ys = lax_.map(lambda r: {"s": np_.sum(np_.sin(r) * p), "t": r * r}, rows)
        return np_.sum(ys["s"]) + np_.sum(ys["t"] * np_.reshape(w, (2, 2)))
    return f


PROGRAMS = {
    "cond_true": (cond_prog, True),
    "cond_false": (cond_prog, False),
    "cond_int_pred_1": (cond_int_pred_prog, np.int32(3)),
    "cond_int_pred_0": (cond_int_pred_prog, np.int32(0)),
    "switch_0": (switch_prog, np.int32(0)),
    "switch_1": (switch_prog, np.int32(1)),
    "switch_2": (switch_prog, np.int32(2)),
    "switch_clamped_low": (switch_prog, np.int32(-4)),
    "switch_clamped_high": (switch_prog, np.int32(9)),
    "traced_pred_true": (traced_pred_prog, -5.0),
    "traced_pred_false": (traced_pred_prog, 5.0),
    "select": (select_prog, 0.7),
    "map": (map_prog, 1.5),
}


def _progs(name: str) -> tuple[Any, Any, Any]:
    prog, p = PROGRAMS[name]
    return prog(anp, lax), prog(jnp, jlax), p


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_value_grad_jvp_vjp_match_jax_and_fd(name: str) -> None:
    ours, theirs, p = _progs(name)

    def all_of(f, grad, jvp, vjp):
        def run(x, w, p, tx, tw, ct):
            y, ty = jvp(lambda a, b: f(a, b, p), (x, w), (tx, tw))
            _, back = vjp(lambda a, b: f(a, b, p), x, w)
            return f(x, w, p), grad(f, argnums=(0, 1))(x, w, p), ty, back(ct)
        return run

    tx, tw, ct = RNG.standard_normal(4), RNG.standard_normal(4), np.float64(1.7)
    args = (X, W, p, tx, tw, ct)
    got = ad.jit(all_of(ours, ad.grad, ad.jvp, ad.vjp))(*args)
    want = jax.jit(all_of(theirs, jax.grad, jax.jvp, jax.vjp))(*args)
    _close(got, want)
    value, grads, ty, cts = got
    f_np = ad.jit(ours)
    for k in range(2):
        np.testing.assert_allclose(grads[k], _fd_grad(f_np, [X, W, p], k), rtol=1e-6, atol=1e-7)
    # transpose identity: <ct, jvp(t)> == <vjp(ct), t>
    lhs = float(ct * ty)
    rhs = float(np.dot(cts[0], tx) + np.dot(cts[1], tw))
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs))


@pytest.mark.parametrize("name", ["cond_true", "cond_false", "switch_1", "traced_pred_true",
                                  "select", "map"])
def test_second_order_matches_jax(name: str) -> None:
    ours, theirs, p = _progs(name)

    def second(f, hessian, jacfwd, jacrev, grad):
        def run(x, w, p):
            return (hessian(f, argnums=(0, 1))(x, w, p),
                    jacfwd(jacrev(f))(x, w, p),
                    grad(lambda a: grad(f)(a, w, p)[0])(x))
        return run

    got = ad.jit(second(ours, ad.hessian, ad.jacfwd, ad.jacrev, ad.grad))(X, W, p)
    want = jax.jit(second(theirs, jax.hessian, jax.jacfwd, jax.jacrev, jax.grad))(X, W, p)
    _close(got, want)
    # the Hessian of x also against central differences of our own gradient
    g = ad.jit(ad.grad(ours))
    fd = np.stack([_fd_grad(lambda a, i=i: g(a, W, p)[i], [X], 0) for i in range(4)])
    np.testing.assert_allclose(got[0][0][0], fd, rtol=1e-6, atol=1e-7)


def _branchy(np_, lax_):
    """A per-example function whose predicate depends on x (batched under vmap(x))."""
    def f(x, w, k):
        y = lax_.cond(x[0] > 0, lambda a: a * w, lambda a: np_.ones(4) * np_.sum(a), x)
        z = lax_.switch(k, [lambda a: a, lambda a: np_.sin(a), lambda a: a * a], y)
        return np_.sum(z * w)
    return f


BX = np.stack([X, -X, np.abs(X), -np.abs(X)])  # lanes take both branches
BK = np.array([0, 1, 2, 7], np.int32)


@pytest.mark.parametrize("axes", [(0, None, 0), (0, None, None), (None, 0, 0), (None, None, 0)],
                         ids=["pred_and_index_batched", "pred_batched", "w_and_index_batched",
                              "index_batched"])
def test_vmap_matches_a_python_loop_and_jax(axes: tuple[Any, ...]) -> None:
    ours, theirs = _branchy(anp, lax), _branchy(jnp, jlax)
    args = [BX if axes[0] == 0 else X, np.stack([W, 2 * W, -W, W]) if axes[1] == 0 else W,
            BK if axes[2] == 0 else np.int32(1)]

    def lanes(f, vmap, grad):
        def run(*a):
            loop = [f(*[v[i] if ax == 0 else v for v, ax in zip(a, axes)]) for i in range(4)]
            return (vmap(f, in_axes=axes)(*a), loop,
                    vmap(grad(f, argnums=(0, 1)), in_axes=axes)(*a))
        return run

    got = ad.jit(lanes(ours, ad.vmap, ad.grad))(*args)
    want = jax.jit(lanes(theirs, jax.vmap, jax.grad))(*args)
    np.testing.assert_allclose(got[0], np.stack(got[1]), **TOL)
    _close(got, want)


def test_unbatched_predicate_stays_a_conditional_and_batched_becomes_a_select() -> None:
    def f(x, p):
        return lax.cond(p, lambda a: a * 2.0, lambda a: -a, x)

    def batched_fn(text: str) -> str:  # the function --autodiff-vmap generated
        return text.split("func.func private @f_batched")[1].split("func.func")[0]

    unbatched = batched_fn(ad.lower(ad.vmap(f, in_axes=(0, None)), BX, True).as_text("autodiff"))
    batched = batched_fn(ad.lower(ad.vmap(f), BX, np.array([True, False, True, False]))
                         .as_text("autodiff"))
    assert "scf.if" in unbatched and "arith.select" not in unbatched
    assert "scf.if" not in batched and "arith.select" in batched
    np.testing.assert_allclose(ad.vmap(f)(BX, np.array([True, False, True, False])),
                               np.stack([2 * BX[0], -BX[1], 2 * BX[2], -BX[3]]), **TOL)


def test_one_scf_if_per_cond_and_a_chain_for_switch() -> None:
    def f(x, p, k):
        y = lax.cond(p, lambda a: a + 1.0, lambda a: a - 1.0, x)
        return lax.switch(k, [lambda a: a, lambda a: a * 2.0, lambda a: a * 3.0], y)

    text = str(ad.lower(f, X, True, np.int32(1)))
    assert text.count("scf.if") == 3  # one for cond, a chain of two for three branches
    assert "scf.for" in str(ad.lower(lambda x: lax.map(lambda r: r * 2.0, x), BX))


def test_cond_inside_scan_and_nested_cond_under_grad() -> None:
    def prog(np_, lax_):
        def f(x, w):
            def step(c, xt):
                c = lax_.cond(xt > 0, lambda a: np_.sin(a * w),
                              lambda a: lax_.cond(xt < -0.5, lambda b: b * b, lambda b: b * w, a),
                              c)
                return c, np_.sum(c)
            c, ys = lax_.scan(step, x, np.array([0.3, -0.2, -0.9, 1.1, -0.6]))
            return np_.sum(c * c) + np_.sum(ys)
        return f

    ours, theirs = prog(anp, lax), prog(jnp, jlax)
    _close(ad.jit(ad.value_and_grad(ours, argnums=(0, 1)))(X, W),
           jax.jit(jax.value_and_grad(theirs, argnums=(0, 1)))(X, W))
    _close(ad.jit(ad.hessian(ours))(X, W), jax.hessian(theirs)(X, W))
    f = ad.jit(ours)
    np.testing.assert_allclose(ad.jit(ad.grad(ours))(X, W), _fd_grad(f, [X, W], 0),
                               rtol=1e-6, atol=1e-7)


def test_map_of_pytrees_none_and_batch_size() -> None:
    xs = {"a": BX, "b": np.arange(4.0)}

    def fn(np_):
        return lambda t: (np_.sum(t["a"]) * t["b"], {"sq": t["a"] * t["a"]})

    want = jlax.map(fn(jnp), xs)
    _close(ad.jit(lambda xs: lax.map(fn(anp), xs))(xs), want)
    _close(lax.map(fn(anp), xs), want)  # eager
    for bs in (1, 3, 4, 8):
        _close(ad.jit(lambda xs, bs=bs: lax.map(fn(anp), xs, batch_size=bs))(xs), want)
    assert lax.map(lambda r: None, BX) is None


def test_select_matches_jax_with_scalar_and_array_pred() -> None:
    pred = np.array([True, False, False, True])
    _close(ad.jit(lambda p, a, b: lax.select(p, a, b))(pred, X, W), jlax.select(pred, X, W))
    _close(ad.jit(lambda a, b: lax.select(np.True_, a, b))(X, W), X)
    _close(lax.select(pred, X, W), jlax.select(pred, X, W))  # eager


# ----------------------------------------------------------------------------- eager mode

def test_eager_runs_only_the_taken_branch_and_matches_jit() -> None:
    seen: list[str] = []

    def yes(a):
        seen.append("yes-" + type(a).__name__)
        return a * 2.0

    def no(a):
        seen.append("no-" + type(a).__name__)
        return a - 1.0

    out = lax.cond(True, yes, no, X)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, X * 2.0)
    # both branches are traced (type-checked) once; only the taken one runs on numpy values
    assert sorted(seen) == ["no-Tracer", "yes-Tracer", "yes-ndarray"]
    for k in (-1, 0, 1, 2, 5):
        branches = [lambda a: a, lambda a: a * 2.0, lambda a: a * 3.0]
        np.testing.assert_allclose(lax.switch(k, branches, X),
                                   ad.jit(lambda x, i: lax.switch(i, branches, x))(X, np.int32(k)))
    assert lax.cond(0.0, lambda: 1.0, lambda: 2.0) == 2.0  # a number means != 0
    out = lax.cond(False, lambda: np.float32(1.0), lambda: 2.0)  # Python 2.0 takes f32
    assert out.dtype == np.float32 and out == 2.0


# ----------------------------------------------------------------------------- errors

def line_of(fn: Any, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def raises_at(exc: type[BaseException], fn: Any, marker: str, *args: Any,
              eager: bool = False) -> str:
    with pytest.raises(exc) as info:
        (fn if eager else ad.jit(fn))(*args)
    msg = str(info.value)
    assert f"{FILE}:{line_of(fn, marker)}" in msg, msg
    return msg


@pytest.mark.parametrize("eager", [False, True], ids=["jit", "eager"])
def test_mismatched_branch_outputs_name_the_leaf_and_line(eager: bool) -> None:
    def shapes(x):
        return lax.cond(True, lambda a: {"y": a}, lambda a: {"y": a[:2]}, x)  # SHAPES

    msg = raises_at(TypeError, shapes, "# SHAPES", X, eager=eager)
    assert "output['y'] is f64[4] in true_fun but f64[2] in false_fun" in msg
    assert "shapes do not match" in msg

    def dtypes(x):
        return lax.cond(True, lambda a: a, lambda a: a.astype(np.float32), x)  # DTYPES

    msg = raises_at(TypeError, dtypes, "# DTYPES", X, eager=eager)
    assert "f64[4] in true_fun but f32[4] in false_fun" in msg and "dtypes" in msg

    def structure(x):
        return lax.switch(1, [lambda a: a, lambda a: a, lambda a: (a, a)], x)  # TREE

    msg = raises_at(TypeError, structure, "# TREE", X, eager=eager)
    assert "branch 0 and branch 2 must return the same pytree structure" in msg


@pytest.mark.parametrize("eager", [False, True], ids=["jit", "eager"])
def test_bad_predicates_and_indices_name_the_line(eager: bool) -> None:
    def vector_pred(x):
        return lax.cond(x > 0, lambda a: a, lambda a: -a, x)  # VEC

    assert "predicate must be a scalar" in raises_at(TypeError, vector_pred, "# VEC", X,
                                                     eager=eager)

    def float_index(x):
        return lax.switch(x[0], [lambda a: a, lambda a: -a], x)  # FIDX

    assert "branch index must be an integer" in raises_at(TypeError, float_index, "# FIDX", X,
                                                          eager=eager)

    def vector_index(x):
        return lax.switch(np.array([0, 1]), [lambda a: a, lambda a: -a], x)  # VIDX

    assert "branch index must be a scalar" in raises_at(TypeError, vector_index, "# VIDX", X,
                                                        eager=eager)

    def no_branches(x):
        return lax.switch(0, [], x)  # EMPTY

    assert "branches is empty" in raises_at(ValueError, no_branches, "# EMPTY", X, eager=eager)

    def not_callable(x):
        return lax.switch(0, [lambda a: a, 3], x)  # NOTFN

    assert "sequence of callables" in raises_at(TypeError, not_callable, "# NOTFN", X,
                                                eager=eager)


def test_select_errors_name_the_line() -> None:
    def shape(x):
        return lax.select(x > 0, x, x[:2])  # SEL_SHAPE

    assert "same shape" in raises_at(TypeError, shape, "# SEL_SHAPE", X)

    def pred_dtype(x):
        return lax.select(x, x, x)  # SEL_PRED

    assert "pred must be a boolean array" in raises_at(TypeError, pred_dtype, "# SEL_PRED", X)

    def pred_shape(x):
        return lax.select(np.array([True, False]), x, x)  # SEL_PSHAPE

    assert "pred must be a scalar or have the cases' shape" in raises_at(
        TypeError, pred_shape, "# SEL_PSHAPE", X)


def test_a_failed_branch_leaves_no_ops_behind() -> None:
    """An error in the second branch erases the staged first branch: the trace stays valid."""
    def f(x):
        try:
            lax.cond(True, lambda a: a, lambda a: a[:2], x)
        except TypeError:
            pass
        return x * 2.0

    assert "scf.if" not in str(ad.lower(f, X))
    np.testing.assert_allclose(ad.jit(f)(X), X * 2.0)


def test_gradient_of_conditionals_on_the_gpu_path() -> None:
    """Differentiated and batched cond/switch/map through --autodiff-lower-to-gpu: its
    parallel stage run on the CPU equals the CPU build, and with ptxas it reaches PTX."""
    import shutil

    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
    from mlir_autodiff.transforms.pipeline import run_pipeline

    def f(x, w):
        y = lax.cond(anp.sum(x) > 0, lambda a: anp.sin(a) * w, lambda a: a * a, x)
        z = lax.switch(np.int32(1), [lambda a: a, lambda a: anp.exp(a * 0.1), lambda a: -a], y)
        m = lax.map(lambda r: anp.sum(r * r), anp.reshape(z * w, (2, 2)))
        return anp.sum(lax.select(z > 0, z, w)) + anp.sum(m)

    g = ad.vmap(ad.grad(f, argnums=(0, 1)), in_axes=(0, None))
    args = (BX, W)
    text = ad.lower(g, *args).as_text("autodiff")
    par = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["main"](*args)
    _close(par, ad.jit(g)(*args))
    _close(par, jax.vmap(jax.grad(lambda x, w: (
        lambda y: (lambda z: jnp.sum(jlax.select(z > 0, z, w)) + jnp.sum(
            jnp.sum(jnp.reshape(z * w, (2, 2)) ** 2, axis=1)))(jnp.exp(y * 0.1)))(
        jnp.where(jnp.sum(x) > 0, jnp.sin(x) * w, x * x)), argnums=(0, 1)),
        in_axes=(0, None))(*args))
    if shutil.which("ptxas") is None:
        return
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_80", format="isa")])
    assert "gpu.binary" in str(module)


def test_transforms_of_vmap_with_a_batched_predicate_match_jax() -> None:
    """grad, jvp and hessian *of* vmap (the select is differentiated), a branch that
    returns its operand unchanged, and branches with no operands."""
    def prog(np_, lax_):
        def f(x):
            y = lax_.cond(x[0] > 0, lambda a: a, lambda a: a * np_.sin(a), x)
            z = lax_.cond(x[1] > 0, lambda: 1.0, lambda: 2.0)
            return np_.sum(y * y) * z
        return f

    ours, theirs = prog(anp, lax), prog(jnp, jlax)
    t = BX * 0.5
    got = ad.jit(lambda b: (ad.grad(lambda c: anp.sum(ad.vmap(ours)(c)))(b),
                            ad.jvp(ad.vmap(ours), (b,), (t,))[1],
                            ad.hessian(lambda c: anp.sum(ad.vmap(ours)(c)))(b)))(BX)
    want = (jax.grad(lambda c: jnp.sum(jax.vmap(theirs)(c)))(BX),
            jax.jvp(jax.vmap(theirs), (BX,), (t,))[1],
            jax.hessian(lambda c: jnp.sum(jax.vmap(theirs)(c)))(BX))
    _close(got, want)
