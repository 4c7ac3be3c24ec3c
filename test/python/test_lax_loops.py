"""`mlir_autodiff.lax`: fori_loop, scan and while_loop, alone and under every transform.

Each loop traces its body once into an scf.for / scf.while; the passes
differentiate, batch and lower it. Every value and derivative is checked in
float64 against jax.lax (the same program, to 1e-10) and derivatives also
against central finite differences of our own compiled primal. jax cannot
reverse-differentiate `lax.while_loop`, so its reverse-mode reference is the
same recurrence as a `lax.fori_loop` with the trip count the loop takes
(asserted by a plain numpy run).
"""

from __future__ import annotations

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import lax
from mlir_autodiff.errors import CompilationError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jlax = jax.lax

RNG = np.random.default_rng(7)
TOL = {"rtol": 1e-10, "atol": 1e-12}


def _close(ours, theirs, **tol) -> None:
    o, t = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
    assert len(o) == len(t) and o
    for a, b in zip(o, t):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **(tol or TOL))


def _fd_grad(f, args, argnum, eps=1e-6):
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
# Each program is written twice, against (anp, our lax) and (jnp, jax.lax).

def fori_prog(np_, lax_):
    def f(x, w):
        def body(i, c):
            h, acc = c
            h = np_.sin(h * w) + 0.1 * i
            return h, acc + np_.sum(h * h)
        h, acc = lax_.fori_loop(0, 6, body, (x, np_.sum(x * 0.0)))
        return acc + np_.sum(h * w)
    return f


def scan_prog(np_, lax_, reverse=False):
    def f(x, w, xs):
        def step(c, xt):
            c = np_.tanh(c * w + xt["a"]) * xt["b"]
            return c, {"y": np_.sum(c * c), "z": c * 2.0}
        c, ys = lax_.scan(step, x, {"a": xs, "b": np_.cos(xs)}, reverse=reverse)
        return np_.sum(c) + np_.sum(ys["y"] * np_.arange(xs.shape[0])) + np_.sum(ys["z"] ** 2)
    return f


def while_prog(np_, lax_):
    def f(x, w):
        def cond(c):
            return c[1] < 7

        def body(c):
            h, k = c
            return np_.sin(h * w + 0.3), k + 1
        h, _ = lax_.while_loop(cond, body, (x, 0))
        return np_.sum(h * h * w)
    return f


def while_as_fori_jax(x, w):
    """jax's reverse-mode reference for while_prog: the same 7 steps as a fori_loop."""
    h = jlax.fori_loop(0, 7, lambda i, h: jnp.sin(h * w + 0.3), x)
    return jnp.sum(h * h * w)


X, W = RNG.normal(size=3), RNG.normal(size=3)
XS = RNG.normal(size=(5, 3))
CASES = {
    "fori": (fori_prog, (X, W), 2),
    "scan": (scan_prog, (X, W, XS), 3),
    "scan_reverse": (lambda n, l: scan_prog(n, l, reverse=True), (X, W, XS), 3),
    "while": (while_prog, (X, W), 2),
}


def _ours(name):
    return CASES[name][0](anp, lax)


def _theirs(name):
    return CASES[name][0](jnp, jlax)


@pytest.mark.parametrize("name", CASES)
def test_value_matches_jax_and_eager(name):
    _, args, _ = CASES[name]
    expected = _theirs(name)(*args)
    _close(ad.jit(_ours(name))(*args), expected)
    _close(_ours(name)(*args), expected)  # eager: Python loop on numpy values


@pytest.mark.parametrize("name", CASES)
def test_grad_matches_jax_and_fd(name):
    _, args, n = CASES[name]
    argnums = tuple(range(n))
    ours = ad.jit(ad.grad(_ours(name), argnums=argnums))(*args)
    ref = while_as_fori_jax if name == "while" else _theirs(name)
    _close(ours, jax.grad(ref, argnums=argnums)(*args))
    primal = ad.jit(_ours(name))
    for k in argnums:
        np.testing.assert_allclose(ours[k], _fd_grad(primal, args, k), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", CASES)
def test_jvp_matches_jax(name):
    _, args, n = CASES[name]
    tangents = tuple(RNG.normal(size=np.shape(a)) for a in args)
    ours = ad.jit(lambda *a: ad.jvp(_ours(name), a, tangents))(*args)
    _close(ours, jax.jvp(_theirs(name), args, tangents))
    fd = sum(float(np.vdot(g, t)) for g, t in
             zip([_fd_grad(ad.jit(_ours(name)), args, k) for k in range(n)], tangents))
    np.testing.assert_allclose(ours[1], fd, rtol=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_vmap_matches_jax(name):
    _, args, _ = CASES[name]
    batch = tuple(np.stack([a, a * 0.9 + 0.1, -a]) for a in args)
    _close(ad.jit(ad.vmap(_ours(name)))(*batch), jax.vmap(_theirs(name))(*batch))


#: vmap of a while loop's reverse mode batches the backward's dynamic-length tape.
@pytest.mark.parametrize("name", list(CASES))
def test_vmap_of_grad_matches_jax(name):
    _, args, _ = CASES[name]
    batch = tuple(np.stack([a, a * 0.9 + 0.1]) for a in args)
    ref = while_as_fori_jax if name == "while" else _theirs(name)
    _close(ad.jit(ad.vmap(ad.grad(_ours(name))))(*batch), jax.vmap(jax.grad(ref))(*batch))


@pytest.mark.parametrize("name", CASES)
def test_hvp_forward_over_reverse_matches_jax(name):
    _, args, _ = CASES[name]
    v = RNG.normal(size=np.shape(args[0]))
    ref = while_as_fori_jax if name == "while" else _theirs(name)

    def hvp(x, *rest):
        return ad.jvp(lambda x: ad.grad(_ours(name))(x, *rest), (x,), (v,))[1]

    def hvp_jax(x, *rest):
        return jax.jvp(lambda x: jax.grad(ref)(x, *rest), (x,), (v,))[1]

    ours = ad.jit(hvp)(*args)
    _close(ours, hvp_jax(*args), rtol=1e-9, atol=1e-11)
    grad0 = ad.jit(ad.grad(_ours(name)))
    eps = 1e-6
    fd = (grad0(args[0] + eps * v, *args[1:]) - grad0(args[0] - eps * v, *args[1:])) / (2 * eps)
    np.testing.assert_allclose(ours, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", list(CASES))
def test_hessian_matches_jax_and_fd_of_grad(name):
    _, args, _ = CASES[name]
    ours = ad.jit(ad.hessian(_ours(name)))(*args)
    ref = while_as_fori_jax if name == "while" else _theirs(name)
    _close(ours, jax.hessian(ref)(*args), rtol=1e-9, atol=1e-11)
    grad0 = ad.jit(ad.grad(_ours(name)))
    for j in range(np.size(args[0])):
        col = _fd_grad(lambda *a, j=j: grad0(*a)[j], args, 0)
        np.testing.assert_allclose(ours[j], col, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- features

def test_closure_over_outer_tracers_and_nested_loops():
    """The body reads the enclosing function's weights; a scan nests in a fori_loop."""
    def ours(w, x, xs):
        def outer(i, h):
            c, _ = lax.scan(lambda c, xt: (anp.tanh(c * w + xt), None), h, xs)
            return c * anp.exp(-0.1 * i)
        return anp.sum(lax.fori_loop(0, 3, outer, x) ** 2)

    def theirs(w, x, xs):
        def outer(i, h):
            c, _ = jlax.scan(lambda c, xt: (jnp.tanh(c * w + xt), None), h, xs)
            return c * jnp.exp(-0.1 * i)
        return jnp.sum(jlax.fori_loop(0, 3, outer, x) ** 2)

    args = (W, X, XS)
    _close(ad.jit(ours)(*args), theirs(*args))
    g = ad.jit(ad.grad(ours, argnums=(0, 1, 2)))(*args)
    _close(g, jax.grad(theirs, argnums=(0, 1, 2))(*args))
    np.testing.assert_allclose(g[0], _fd_grad(ad.jit(ours), args, 0), rtol=1e-6, atol=1e-8)


def test_grad_inside_a_loop_body():
    """A transform traced inside the body (gradient descent steps in a fori_loop)."""
    def loss(p, w):
        return anp.sum(anp.sin(p * w) ** 2)

    def ours(p, w):
        return lax.fori_loop(0, 4, lambda i, p: p - 0.3 * ad.grad(loss)(p, w), p)

    def theirs(p, w):
        jl = lambda p, w: jnp.sum(jnp.sin(p * w) ** 2)
        return jlax.fori_loop(0, 4, lambda i, p: p - 0.3 * jax.grad(jl)(p, w), p)

    _close(ad.jit(ours)(X, W), theirs(X, W))
    total = lambda f: lambda p, w: f(p, w).sum()
    _close(ad.jit(ad.grad(total(ours), argnums=1))(X, W),
           jax.grad(total(theirs), argnums=1)(X, W))


def test_traced_bounds_and_zero_trip():
    def ours(x, lo, hi):
        return anp.sum(lax.fori_loop(lo, hi, lambda i, h: anp.sin(h) * i, x))

    def theirs(x, lo, hi):
        return jnp.sum(jlax.fori_loop(lo, hi, lambda i, h: jnp.sin(h) * i, x))

    f = ad.jit(ours)
    g = ad.jit(ad.grad(ours))
    for lo, hi in ((1, 5), (2, 2), (4, 1)):  # (2, 2) and (4, 1) run no iteration
        lo_, hi_ = np.int64(lo), np.int64(hi)
        _close(f(X, lo_, hi_), theirs(X, lo_, hi_))
        expected = jax.grad(theirs)(X, lo_, hi_) if lo < hi else np.ones(3)
        _close(g(X, lo_, hi_), expected)
    x, xs = X, np.zeros((0, 3))
    carry, ys = ad.jit(lambda x, xs: lax.scan(lambda c, r: (c + r, c), x, xs))(x, xs)
    _close(carry, x)
    assert ys.shape == (0, 3)
    grad_while = ad.jit(ad.grad(lambda x: anp.sum(
        lax.while_loop(lambda h: anp.sum(h) > 1e9, lambda h: h * 2.0, x)) * 3.0))
    _close(grad_while(X), np.full(3, 3.0))


def test_scan_without_xs_and_carry_tuple_result():
    def ours(x):
        return lax.scan(lambda c, _: ((c[0] * 0.5, c[1] + c[0]), c[1]), (x, x * 0.0), None,
                        length=4)

    def theirs(x):
        return jlax.scan(lambda c, _: ((c[0] * 0.5, c[1] + c[0]), c[1]), (x, x * 0.0), None,
                         length=4)

    _close(ad.jit(ours)(X), theirs(X))
    _close(ours(X), theirs(X))


def test_weak_init_adopts_the_body_dtype():
    x32 = np.ones((), np.float32)
    out = ad.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c + x, 0.0))(x32)
    ref = jlax.fori_loop(0, 3, lambda i, c: c + x32, 0.0)
    assert out.dtype == np.float32
    _close(out, ref)


def test_carry_shape_mismatch_names_the_leaf():
    def bad(x):
        return lax.fori_loop(0, 3, lambda i, c: {"a": c["a"], "b": anp.stack([c["b"]] * 2)},
                             {"a": x, "b": x})

    for run in (ad.jit(bad), bad):  # traced and eager
        with pytest.raises(TypeError, match=r"carry\['b'\] has type f64\[3\] but the "
                                            r"corresponding output carry component has type "
                                            r"f64\[2,3\], so the shapes do not match"):
            run(X)
    with pytest.raises(TypeError, match=r"carry\[1\] .* dtypes do not match"):
        ad.jit(lambda x: lax.while_loop(lambda c: c[1] < 2,
                                        lambda c: (c[0], c[1] * 1.5), (x, np.int64(0))))(X)
    with pytest.raises(TypeError, match="pytree structure"):
        ad.jit(lambda x: lax.scan(lambda c, r: ((c,), r), x, XS))(X)
    with pytest.raises(TypeError, match="boolean scalar"):
        ad.jit(lambda x: lax.while_loop(lambda c: c, lambda c: c, x))(X)


def test_vmap_over_bounds_is_a_clear_error():
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, h: h * 2.0, x)

    with pytest.raises(ValueError, match="bounds depend on a batched"):
        ad.jit(ad.vmap(f))(np.ones((2, 3)), np.array([1, 2]))
    # Unbatched bounds are fine.
    out = ad.jit(ad.vmap(f, in_axes=(0, None)))(np.ones((2, 3)), np.int64(3))
    _close(out, np.full((2, 3), 8.0))


def test_vmap_over_bounds_unknown_at_trace_time_is_a_diagnostic():
    """Under grad the batching is only known to the pass: a located diagnostic, not a
    traceback."""
    def f(x, n):
        return anp.sum(lax.fori_loop(0, n, lambda i, h: anp.sin(h), x))

    with pytest.raises(CompilationError, match=r"test_lax_loops.py:\d+:\d+: error: "
                                               r"autodiff-vmap: cannot batch 'tensor.empty' "
                                               r"whose dynamic size differs per lane"):
        ad.jit(ad.vmap(ad.grad(f)))(np.ones((2, 3)), np.array([1, 2]))


def test_vmap_of_while_with_a_batched_condition_matches_jax():
    """Lanes stop at different trip counts: the batched loop runs until all are done."""
    def prog(np_, lax_):
        def f(x):
            return lax_.while_loop(lambda h: np_.sum(h) < 10.0, lambda h: h * 1.5 + 0.1, x)
        return f

    xs = np.abs(RNG.normal(size=(4, 3))) + np.array([[0.1], [1.0], [2.0], [4.0]])
    _close(ad.jit(ad.vmap(prog(anp, lax)))(xs), jax.vmap(prog(jnp, jlax))(xs))


def test_a_value_leaked_from_a_loop_body_is_rejected():
    leaked = []

    def f(x):
        def body(i, c):
            leaked.append(c)
            return c + 1.0
        return lax.fori_loop(0, 2, body, x) + leaked[0]

    with pytest.raises(ad.UnexpectedTracerError, match="another function trace"):
        ad.jit(f)(X)


def test_the_loop_is_one_op_in_the_captured_module():
    """The body is traced once: one scf.for / scf.while, not an unrolled sequence."""
    def f(x, xs):
        c, ys = lax.scan(lambda c, r: (anp.sin(c) + r, c), x, xs)
        return lax.while_loop(lambda h: anp.sum(h) < 5.0, lambda h: h + 1.0, c), ys

    text = str(ad.lower(f, X, np.zeros((100, 3))))
    assert text.count("scf.for") == 1 and text.count("math.sin") == 1
    assert text.count("scf.while") == 1
    assert "tensor.extract_slice" in text and "tensor.insert_slice" in text


def test_gradient_of_loops_on_the_gpu_path():
    """The differentiated loops through --autodiff-lower-to-gpu: its parallel stage run on
    the CPU equals the CPU build, and the whole pipeline reaches PTX."""
    import shutil

    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
    from mlir_autodiff.transforms.pipeline import run_pipeline

    def f(x, w, xs):
        c, ys = lax.scan(lambda c, r: (anp.tanh(c * w + r), anp.sum(c)), x, xs)
        h = lax.while_loop(lambda h: anp.sum(h * h) < 50.0, lambda h: h * 1.3 + 0.2, c)
        return anp.sum(h) + anp.sum(ys)

    g = ad.grad(f, argnums=(0, 1))
    args = (np.abs(X), np.abs(W), XS)
    text = ad.lower(g, *args).as_text("autodiff")
    par = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["main"](*args)
    _close(par, ad.jit(g)(*args))
    if shutil.which("ptxas") is None:
        return
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_80", format="isa")])
    assert "gpu.binary" in str(module)


def test_vjp_and_value_and_grad_of_a_vector_scan_match_jax():
    def prog(np_, lax_):
        def f(x, xs):
            return lax_.scan(lambda c, r: (np_.sin(c * r), c * r), x, xs)
        return f

    ct = (RNG.normal(size=3), RNG.normal(size=(5, 3)))

    def ours(x, xs):
        out, pullback = ad.vjp(prog(anp, lax), x, xs)
        return out, pullback(ct)

    out, pulled = ad.jit(ours)(X, XS)
    jout, jpull = jax.vjp(prog(jnp, jlax), X, XS)
    _close(out, jout)
    _close(pulled, jpull(ct))
    scalar = lambda np_, lax_: lambda x, xs: np_.sum(prog(np_, lax_)(x, xs)[1])
    _close(ad.jit(ad.value_and_grad(scalar(anp, lax)))(X, XS),
           jax.value_and_grad(scalar(jnp, jlax))(X, XS))
