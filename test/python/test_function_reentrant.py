"""`ad.Function` rules that call `apply` again, and non-array arguments of `apply`.

- A `vmap` staticmethod that moves the batch dimension to a fixed axis and
  calls `apply` of the same Function on the batched value (torch.func's
  NumpySort pattern: the op is batch-polymorphic along its other axes), under
  vmap (any in_axes), vmap of vmap, grad of vmap, vmap of grad, jacrev,
  jacfwd, hessian and jit; a rule calling another Function.
- forward / backward / jvp rules calling `apply` of their own Function (with
  the same or other arguments) or of another Function.
- Rules returning the wrong out_dims, shapes or structure: an error naming
  the Function, its rule and the rule's source line.
- Non-array arguments (Python ints, floats, bools, strings, None, ...) reach
  forward, setup_context, jvp and vmap as the Python objects (torch passes
  non-tensor arguments through), and their gradient is None.

Expected values come from a Python loop over the batch, central finite
differences in f64, closed forms and jax (jax.custom_vjp / jax.custom_jvp with
jax.vmap). Backward rules that deliberately differ from the true derivative
prove that the rule (not the body) is what runs.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
except ImportError:  # pragma: no cover - jax is an optional oracle
    jax = None

needs_jax = pytest.mark.skipif(jax is None, reason="jax is the oracle")
RNG = np.random.default_rng(2024)
X = RNG.normal(size=(4, 3)) + 0.5          # a batch of 4 rows of length 3
W = RNG.normal(size=(4, 3))                # weights of a scalar loss
X3 = RNG.normal(size=(3, 2, 5)) + 0.5      # rows of length 3 batched at axes 1 and 2
CT = RNG.normal(size=(3, 3))               # cotangent / tangent directions


def loop(f, *args, in_axes):
    """Apply `f` lane by lane (the reference semantics of vmap), stacking at axis 0."""
    size = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
            for i in range(size)]
    if isinstance(outs[0], tuple):
        return tuple(np.stack([np.asarray(o) for o in os]) for os in zip(*outs))
    return np.stack([np.asarray(o) for o in outs])


def fd_grad(f, x, eps=1e-6):
    """Central finite differences of a scalar function of one array (f64)."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# --------------------------------------------------------------------------- reference math

def np_rownorm(x):
    """(x / |x|, |x|) along the last axis (keepdims)."""
    n = np.sqrt((x * x).sum(-1, keepdims=True))
    return x / n, n


def np_cumsum(x):
    return np.cumsum(x, axis=-1)


# --------------------------------------------------------------------------- Functions

CALLS: list[tuple[str, int, tuple]] = []


class RowNorm(ad.Function):
    """(x / |x|, |x|) along the last axis, two outputs. Its backward scales the
    cotangent of the norm by 3 (deliberately): what grad returns shows that the
    rule ran. The vmap rule moves the batch dim to 0 and calls `apply` again."""

    @staticmethod
    def forward(x):
        n = anp.sqrt(anp.sum(x * x, axis=-1, keepdims=True))
        return x / n, n

    @staticmethod
    def setup_context(ctx, inputs, output):
        y, n = output
        ctx.save_for_backward(y, n)

    @staticmethod
    def backward(ctx, gy, gn):
        y, n = ctx.saved_tensors
        return (gy - y * anp.sum(gy * y, axis=-1, keepdims=True)) / n + 3.0 * gn * y

    @staticmethod
    def vmap(info, in_dims, x):
        CALLS.append(("RowNorm", info.batch_size, in_dims))
        x = anp.moveaxis(x, in_dims[0], 0)
        return RowNorm.apply(x), (0, 0)


def rownorm_vjp_np(x, gy, gn):
    """RowNorm.backward in numpy (the deliberate factor 3 included)."""
    y, n = np_rownorm(x)
    return (gy - y * (gy * y).sum(-1, keepdims=True)) / n + 3.0 * gn * y


class CumSum(ad.Function):
    """Cumulative sum along the last axis (x @ U, U upper triangular ones), with
    backward and jvp rules; the vmap rule moves the batch dim to axis 0, calls
    `apply` and gives the batch dim as a negative out_dims (-ndim)."""

    @staticmethod
    def forward(x):
        n = x.shape[-1]
        return anp.matmul(x, anp.triu(anp.ones((n, n))))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.n = inputs[0].shape[-1]  # a Python int kept on ctx

    @staticmethod
    def backward(ctx, g):
        return anp.matmul(g, anp.tril(anp.ones((ctx.n, ctx.n))))

    @staticmethod
    def jvp(ctx, t):
        return anp.matmul(t, anp.triu(anp.ones((ctx.n, ctx.n))))

    @staticmethod
    def vmap(info, in_dims, x):
        CALLS.append(("CumSum", info.batch_size, in_dims))
        return CumSum.apply(anp.moveaxis(x, in_dims[0], 0)), -x.ndim


class Centered(ad.Function):
    """x - mean(x) along the last axis; its vmap rule calls *another* Function
    (CumSum) as well as itself: centered(x) = x - cumsum(x)[-1] / n."""

    @staticmethod
    def forward(x):
        return x - anp.mean(x, axis=-1, keepdims=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g - anp.mean(g, axis=-1, keepdims=True)

    @staticmethod
    def vmap(info, in_dims, x):
        CALLS.append(("Centered", info.batch_size, in_dims))
        x = anp.moveaxis(x, in_dims[0], 0)
        total = CumSum.apply(x)[:, -1:]
        return Centered.apply(x) * 0.0 + x - total / x.shape[-1], 0


# --------------------------------------------------------------------------- vmap rules: apply


@pytest.mark.parametrize("in_axes", [0, 1, -1])
def test_reentrant_vmap_rule_values(in_axes):
    xs = X if in_axes == 0 else X.T
    CALLS.clear()
    y, n = ad.vmap(RowNorm.apply, in_axes=in_axes)(xs)
    wy, wn = np_rownorm(X)
    np.testing.assert_allclose(y, wy, rtol=1e-12)
    np.testing.assert_allclose(n, wn, rtol=1e-12)
    assert CALLS == [("RowNorm", 4, (0,))]  # the batch reaches the rule at dim 0
    CALLS.clear()
    np.testing.assert_allclose(ad.vmap(CumSum.apply, in_axes=in_axes)(xs), np_cumsum(X),
                               rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(Centered.apply, in_axes=in_axes)(xs),
                               X - X.mean(-1, keepdims=True), rtol=1e-12, atol=1e-14)
    assert [c[0] for c in CALLS] == ["CumSum", "Centered"]


def test_reentrant_vmap_rule_under_jit_and_with_out_axes():
    f = ad.jit(lambda x: ad.vmap(CumSum.apply, in_axes=1, out_axes=1)(2.0 * x))
    np.testing.assert_allclose(f(X.T), 2.0 * np_cumsum(X).T, rtol=1e-12)
    want = loop(lambda x: np_cumsum(2.0 * x), X.T, in_axes=(1,)).T
    np.testing.assert_allclose(f(X.T), want, rtol=1e-12)


def test_reentrant_vmap_rule_nested_vmaps_with_different_in_axes():
    # X3 is (3, 2, 5): rows of length 3 at axis 0, batches at axes 1 and 2
    CALLS.clear()
    inner = ad.vmap(RowNorm.apply, in_axes=1)        # maps axis 1 of a (3, 5) slice
    y, n = ad.vmap(inner, in_axes=1)(X3)             # outer maps axis 1 (size 2)
    want = loop(lambda s: loop(lambda r: np_rownorm(r), s, in_axes=(1,)), X3, in_axes=(1,))
    np.testing.assert_allclose(y, want[0], rtol=1e-12)
    np.testing.assert_allclose(n, want[1], rtol=1e-12)
    # the rule batches the inner level (size 5); the outer level batches its code
    assert ("RowNorm", 5, (0,)) in CALLS
    c = ad.vmap(ad.vmap(CumSum.apply, in_axes=0), in_axes=2)(X3.transpose(1, 0, 2))
    want = np.stack([np_cumsum(X3.transpose(1, 0, 2)[:, :, k]) for k in range(5)])
    np.testing.assert_allclose(c, want, rtol=1e-12)


def loss_rownorm(x, w):
    y, n = RowNorm.apply(x)
    return anp.sum(w * y) + anp.sum(n * n)


def np_loss_rownorm_grad(x, w):
    """grad of loss_rownorm with RowNorm's (deliberately scaled) backward."""
    _, n = np_rownorm(x)
    return rownorm_vjp_np(x, w, 2.0 * n)


def test_reentrant_vmap_rule_grad_of_vmap_uses_backward():
    f = lambda x: anp.sum(W * ad.vmap(RowNorm.apply)(x)[0]) + anp.sum(ad.vmap(RowNorm.apply)(x)[1])
    g = ad.grad(f)(X)
    np.testing.assert_allclose(g, rownorm_vjp_np(X, W, np.ones((4, 1))), rtol=1e-10)
    # CumSum's backward is its true derivative: finite differences agree
    h = lambda x: anp.sum(W * ad.vmap(CumSum.apply, in_axes=1)(x) ** 2)
    g = ad.grad(h)(X.T)
    np.testing.assert_allclose(g, fd_grad(lambda x: (W * np_cumsum(x.T) ** 2).sum(), X.T),
                               rtol=1e-7, atol=1e-8)


def test_reentrant_vmap_rule_vmap_of_grad():
    lane = ad.grad(loss_rownorm)
    g = ad.vmap(lane)(X, W)
    np.testing.assert_allclose(g, loop(lane, X, W, in_axes=(0, 0)), rtol=1e-12)
    np.testing.assert_allclose(g, np_loss_rownorm_grad(X, W), rtol=1e-10)
    lane = ad.grad(lambda x, w: anp.sum(w * CumSum.apply(x) ** 2))
    g = ad.vmap(lane, in_axes=(1, 0))(X.T, W)
    want = np.stack([fd_grad(lambda x: (w * np_cumsum(x) ** 2).sum(), x)
                     for x, w in zip(X, W)])
    np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-8)


def test_reentrant_vmap_rule_jacobians_and_hessian():
    jr = ad.jacrev(ad.vmap(CumSum.apply))(X)
    jf = ad.jacfwd(ad.vmap(CumSum.apply))(X)
    U = np.triu(np.ones((3, 3)))
    want = np.einsum("ab,jk->akbj", np.eye(4), U)  # d out[a, k] / d x[b, j] = [a=b] U[j, k]
    np.testing.assert_allclose(jr, want, rtol=1e-12)
    np.testing.assert_allclose(jf, want, rtol=1e-12)
    f = lambda x: anp.sum(ad.vmap(CumSum.apply)(x) ** 3)
    h = ad.hessian(f)(X[:2])
    grad_f = ad.jit(ad.grad(f))
    fd = np.stack([fd_grad(lambda x: grad_f(x)[idx], X[:2]) for idx in np.ndindex(2, 3)])
    np.testing.assert_allclose(h.reshape(6, 6), fd.reshape(6, 6), rtol=1e-6, atol=1e-7)
    c = np_cumsum(X[:2])  # closed form: H[a j, b i] = [a=b] sum_k U[j,k] 6 c[a,k] U[i,k]
    closed = np.einsum("ab,jk,ak,ik->ajbi", np.eye(2), U, 6.0 * c, U)
    np.testing.assert_allclose(h, closed, rtol=1e-10)
    # jacrev of the two-output RowNorm under vmap: the backward rule (factor 3 on |x|)
    jy = ad.jacrev(lambda x: ad.vmap(RowNorm.apply)(x)[0])(X[:2])
    jn = ad.jacrev(lambda x: ad.vmap(RowNorm.apply)(x)[1])(X[:2])
    for a in range(2):
        for k in range(3):
            gy = np.zeros((2, 3))
            gy[a, k] = 1.0
            np.testing.assert_allclose(jy[a, k], rownorm_vjp_np(X[:2], gy, np.zeros((2, 1))),
                                       rtol=1e-10, atol=1e-14)
        gn = np.zeros((2, 1))
        gn[a] = 1.0
        np.testing.assert_allclose(jn[a, 0], rownorm_vjp_np(X[:2], np.zeros((2, 3)), gn),
                                   rtol=1e-10, atol=1e-14)


@needs_jax
def test_reentrant_vmap_rule_matches_jax():
    @jax.custom_vjp
    def jrownorm(x):
        n = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
        return x / n, n

    def fwd(x):
        y, n = jrownorm(x)
        return (y, n), (y, n)

    def bwd(res, g):
        y, n = res
        gy, gn = g
        return ((gy - y * jnp.sum(gy * y, axis=-1, keepdims=True)) / n + 3.0 * gn * y,)

    jrownorm.defvjp(fwd, bwd)

    def jloss(x, w):
        y, n = jrownorm(x)
        return jnp.sum(w * y) + jnp.sum(n * n)

    np.testing.assert_allclose(ad.vmap(ad.grad(loss_rownorm))(X, W),
                               jax.vmap(jax.grad(jloss))(X, W), rtol=1e-10)
    ours = ad.grad(lambda x: anp.sum(W * ad.vmap(RowNorm.apply, in_axes=1)(x)[0]))(X.T)
    theirs = jax.grad(lambda x: jnp.sum(W * jax.vmap(jrownorm, in_axes=1)(x)[0]))(X.T)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    jr = ad.jacrev(lambda x: ad.vmap(RowNorm.apply)(x)[0])(X[:2])
    jj = jax.jacrev(lambda x: jax.vmap(jrownorm)(x)[0])(X[:2])
    np.testing.assert_allclose(jr, jj, rtol=1e-10, atol=1e-14)
    # RowNorm has no jvp rule: forward mode differentiates forward's body (jax cannot
    # jvp a custom_vjp function, so the oracle is jax's jvp of the plain function)
    plain = lambda x: (x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True)))
    t = RNG.normal(size=X.shape)
    _, tan = ad.jvp(lambda x: ad.vmap(RowNorm.apply)(x)[0], (X,), (t,))
    np.testing.assert_allclose(tan, jax.jvp(jax.vmap(plain), (X,), (t,))[1], rtol=1e-10)


# --------------------------------------------------------------------------- rules calling apply


class Power(ad.Function):
    """x ** n for a static Python int n, by recursion through `apply`: forward,
    backward and jvp each call `Power.apply(x, n - 1)`; the backward scales by 2
    (deliberately), the jvp does not."""

    @staticmethod
    def forward(x, n):
        CALLS.append(("Power.forward", type(n).__name__, n))
        if n == 0:
            return anp.ones_like(x)
        return x * Power.apply(x, n - 1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.n = inputs[1]

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if ctx.n == 0:
            return anp.zeros_like(g), None
        return 2.0 * g * ctx.n * Power.apply(x, ctx.n - 1), None

    @staticmethod
    def jvp(ctx, t, t_n):
        assert t_n is None  # torch passes None for a non-tensor input
        (x,) = ctx.saved_tensors
        if ctx.n == 0:
            return anp.zeros_like(t)
        return t * ctx.n * Power.apply(x, ctx.n - 1)

    @staticmethod
    def vmap(info, in_dims, x, n):
        assert in_dims[1] is None and isinstance(n, int)
        return Power.apply(x, n), in_dims[0]


def test_rules_calling_apply_of_themselves_with_other_arguments():
    x = np.array([0.7, -1.3, 2.0])
    CALLS.clear()
    np.testing.assert_allclose(ad.jit(lambda x: Power.apply(x, 3))(x), x ** 3, rtol=1e-12)
    assert ("Power.forward", "int", 3) in CALLS and ("Power.forward", "int", 0) in CALLS
    # backward: 2 * 3 x^2 at the outer level
    g = ad.grad(lambda x: anp.sum(Power.apply(x, 3)))(x)
    np.testing.assert_allclose(g, 6.0 * x ** 2, rtol=1e-12)
    # jvp rule (no factor 2): the true derivative; finite differences agree
    _, tan = ad.jvp(lambda x: Power.apply(x, 3), (x,), (np.ones(3),))
    np.testing.assert_allclose(tan, 3.0 * x ** 2, rtol=1e-12)
    np.testing.assert_allclose(tan, fd_grad(lambda x: (x ** 3).sum(), x), rtol=1e-8)
    # second order: the backward's own Power.apply(x, 2) has its own backward (2 * 2 x)
    h = ad.grad(lambda x: anp.sum(ad.grad(lambda x: anp.sum(Power.apply(x, 3)))(x)))(x)
    np.testing.assert_allclose(h, 2.0 * 3 * 2.0 * 2 * x, rtol=1e-12)
    # under vmap and vmap of grad, the rule calls apply with the same Python int
    np.testing.assert_allclose(ad.vmap(lambda x: Power.apply(x, 3))(X), X ** 3, rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(ad.grad(lambda x: anp.sum(Power.apply(x, 2))))(X),
                               4.0 * X, rtol=1e-12)


@needs_jax
def test_power_matches_jax():
    jpow = jax.custom_vjp(lambda x, n: x ** n, nondiff_argnums=(1,))
    jpow.defvjp(lambda x, n: (x ** n, x), lambda n, x, g: (2.0 * g * n * x ** (n - 1),))
    f = lambda x: anp.sum(anp.sin(Power.apply(x, 2)))
    jf = lambda x: jnp.sum(jnp.sin(jpow(x, 2)))
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(X), jax.vmap(jax.grad(jf))(X), rtol=1e-10)
    np.testing.assert_allclose(ad.grad(lambda x: ad.vmap(f)(x).sum())(X),
                               jax.grad(lambda x: jax.vmap(jf)(x).sum())(X), rtol=1e-10)


class Exp(ad.Function):
    """exp, with backward and jvp calling `Exp.apply` on the same argument."""

    @staticmethod
    def forward(x):
        return anp.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * Exp.apply(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * Exp.apply(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return Exp.apply(x), in_dims[0]


class SoftPlus(ad.Function):
    """log(1 + exp(x)) through *another* Function (Exp) in forward and backward."""

    @staticmethod
    def forward(x):
        return anp.log(1.0 + Exp.apply(x))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        e = Exp.apply(x)
        return g * e / (1.0 + e)

    @staticmethod
    def vmap(info, in_dims, x):
        return SoftPlus.apply(anp.moveaxis(x, in_dims[0], 0)), 0


def test_rules_calling_apply_of_themselves_and_of_another_function():
    x = np.array([0.3, -1.1, 1.7])
    f = lambda x: anp.sum(anp.sin(Exp.apply(x)))
    want = np.cos(np.exp(x)) * np.exp(x)
    np.testing.assert_allclose(ad.grad(f)(x), want, rtol=1e-12)
    np.testing.assert_allclose(ad.grad(f)(x), fd_grad(lambda x: np.sin(np.exp(x)).sum(), x),
                               rtol=1e-8)
    _, tan = ad.jvp(lambda x: Exp.apply(x), (x,), (CT[0],))
    np.testing.assert_allclose(tan, CT[0] * np.exp(x), rtol=1e-12)
    h = ad.hessian(f)(x)
    fd = np.stack([fd_grad(lambda x: np.cos(np.exp(x[i])) * np.exp(x[i]), x) for i in range(3)])
    np.testing.assert_allclose(np.diag(h), np.cos(np.exp(x)) * np.exp(x)
                               - np.sin(np.exp(x)) * np.exp(2 * x), rtol=1e-10)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(X), np.cos(np.exp(X)) * np.exp(X),
                               rtol=1e-12)
    sp = lambda x: anp.sum(SoftPlus.apply(x) ** 2)
    np_sp = lambda x: (np.log1p(np.exp(x)) ** 2).sum()
    np.testing.assert_allclose(ad.grad(sp)(x), fd_grad(np_sp, x), rtol=1e-8)
    np.testing.assert_allclose(ad.grad(lambda x: ad.vmap(sp)(x).sum())(X), fd_grad(np_sp, X),
                               rtol=1e-7)
    grad_sp = ad.jit(ad.grad(sp))
    np.testing.assert_allclose(ad.hessian(sp)(x),
                               np.stack([fd_grad(lambda x: grad_sp(x)[i], x)
                                         for i in range(3)]), rtol=1e-6, atol=1e-8)


@needs_jax
def test_softplus_matches_jax():
    @jax.custom_vjp
    def jexp(x):
        return jnp.exp(x)

    jexp.defvjp(lambda x: (jnp.exp(x), x), lambda x, g: (g * jexp(x),))
    jsp = lambda x: jnp.sum(jnp.log(1.0 + jexp(x)) ** 2)
    sp = lambda x: anp.sum(SoftPlus.apply(x) ** 2)
    np.testing.assert_allclose(ad.vmap(ad.grad(sp))(X), jax.vmap(jax.grad(jsp))(X), rtol=1e-12)
    np.testing.assert_allclose(ad.jacrev(ad.grad(sp))(X[0]), jax.jacrev(jax.grad(jsp))(X[0]),
                               rtol=1e-10)


# --------------------------------------------------------------------------- errors


def _rule_line(cls):
    return f"{inspect.getsourcefile(cls.vmap)}:{inspect.getsourcelines(cls.vmap)[1]}"


def _reentrant(dims, shape_fn=lambda y: y):
    class Reentrant(ad.Function):
        @staticmethod
        def forward(x):
            return anp.sum(x, axis=-1, keepdims=True) * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g

        @staticmethod
        def vmap(info, in_dims, x):
            return shape_fn(Reentrant.apply(anp.moveaxis(x, in_dims[0], 0))), dims

    return Reentrant


@pytest.mark.parametrize("dims, shape_fn, message", [
    (1, lambda y: y, r"output 0 has shape \(4, 3\) with out_dims 1, expected \(3, 4\)"),
    (5, lambda y: y, r"out_dims 5 is out of range for output 0 \(forward's output has rank 1"),
    (None, lambda y: y, r"output 0 has shape \(4, 3\) with out_dims None, expected \(3,\)"),
    (0, lambda y: y[:, :2], r"output 0 has shape \(4, 2\) with out_dims 0, expected \(4, 3\)"),
    ((0, 0), lambda y: y, r"out_dims \(0, 0\) is not a tree prefix of the outputs"),
    ("a", lambda y: y, r"out_dims 'a' is not a tree prefix of the outputs"),
    (None, lambda y: y[0], r"output 0 depends on the batched arguments but its out_dims is "
                           r"None"),
    (0, lambda y: anp.astype(y, np.int32), r"output 0 has dtype int32, expected float64"),
    (0, lambda y: (y, y), r"returned outputs of structure \(\*, \*\), but forward returns \*"),
])
def test_wrong_vmap_rule_is_a_clear_error(dims, shape_fn, message):
    F = _reentrant(dims, shape_fn)
    with pytest.raises((ValueError, TypeError), match=message) as info:
        ad.vmap(F.apply)(X)
    msg = str(info.value)
    assert msg.startswith("Reentrant.vmap: "), msg
    assert f"(defined at {_rule_line(F)})" in msg, msg
    # the failure leaves nothing behind: no rule bookkeeping, vmap level or trace
    # stays active, and a Function with a good rule works
    from mlir_autodiff import batching, custom_core, tracing

    assert not custom_core._IN_RULES and not custom_core._IN_PRIMAL
    assert not batching._LEVELS.stack and not batching._LEVELS.peeled
    assert not tracing._STATE.stack
    good = _reentrant(0)
    np.testing.assert_allclose(ad.vmap(good.apply)(X), X.sum(-1, keepdims=True) * X,
                               rtol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda x: anp.sum(good.apply(x)))(X[0]), np.ones(3))


def test_error_inside_a_reentrant_rule_names_the_users_line():
    class Broken(ad.Function):
        @staticmethod
        def forward(x):
            return x * 2.0

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

        @staticmethod
        def vmap(info, in_dims, x):
            return Broken.apply(x) + anp.ones(7), 0  # a shape error in the user's rule

    with pytest.raises(Exception) as info:
        ad.vmap(Broken.apply)(X)
    assert not isinstance(info.value, (KeyError, RecursionError))
    line = inspect.getsourcelines(Broken.vmap)[1] + 2
    assert f"{__file__}:{line}" in str(info.value), str(info.value)
    np.testing.assert_allclose(ad.vmap(lambda x: Exp.apply(x))(X), np.exp(X), rtol=1e-12)


# --------------------------------------------------------------------------- non-array arguments

SEEN: list[tuple[str, tuple]] = []


class Reduce(ad.Function):
    """sum(x ** p, axis) * scale, with the axis (int), power (int), scale (float),
    flag (bool), name (str) and extra (None) passed as Python objects."""

    @staticmethod
    def forward(x, axis, p, scale, flag, name, extra):
        SEEN.append(("forward", (axis, p, scale, flag, name, extra)))
        assert isinstance(axis, int) and isinstance(p, int) and isinstance(scale, float)
        return anp.sum(x ** p, axis=axis) * scale if flag else x

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, axis, p, scale, flag, name, extra = inputs
        SEEN.append(("setup_context", inputs[1:]))
        ctx.save_for_backward(x)
        ctx.axis, ctx.p, ctx.scale, ctx.flag = axis, p, scale, flag

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        SEEN.append(("backward", tuple(ctx.needs_input_grad)))
        if not ctx.flag:
            return g, None, None, None, None, None, None
        g = anp.expand_dims(g, ctx.axis)
        return g * ctx.scale * ctx.p * x ** (ctx.p - 1), None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, t, *rest):
        SEEN.append(("jvp", rest))
        (x,) = ctx.saved_tensors
        if not ctx.flag:
            return t
        return anp.sum(t * ctx.scale * ctx.p * x ** (ctx.p - 1), axis=ctx.axis)

    @staticmethod
    def vmap(info, in_dims, x, axis, p, scale, flag, name, extra):
        SEEN.append(("vmap", (in_dims, axis, p, scale, flag, name, extra)))
        x = anp.moveaxis(x, in_dims[0], 0)
        return Reduce.apply(x, axis + 1, p, scale, flag, name, extra), 0


ARGS = (1, 3, 0.5, True, "cubes", None)


def test_non_array_arguments_reach_the_rules_as_python_objects():
    x = RNG.normal(size=(2, 3))
    want = 0.5 * (x ** 3).sum(1)
    for run in (lambda x: Reduce.apply(x, *ARGS), ad.jit(lambda x: Reduce.apply(x, *ARGS))):
        SEEN.clear()
        np.testing.assert_allclose(run(x), want, rtol=1e-12)
        assert ("forward", ARGS) in SEEN and ("setup_context", ARGS) in SEEN, SEEN
    SEEN.clear()
    g = ad.grad(lambda x: anp.sum(Reduce.apply(x, *ARGS) * np.array([1.0, -2.0])))(x)
    np.testing.assert_allclose(g, 1.5 * x ** 2 * np.array([[1.0], [-2.0]]), rtol=1e-12)
    np.testing.assert_allclose(g, fd_grad(lambda x: (0.5 * (x ** 3).sum(1)
                                                     * np.array([1.0, -2.0])).sum(), x),
                               rtol=1e-8)
    assert ("backward", (True, False, False, False, False, False, False)) in SEEN
    SEEN.clear()
    _, tan = ad.jvp(lambda x: Reduce.apply(x, *ARGS), (x,), (np.ones_like(x),))
    np.testing.assert_allclose(tan, 1.5 * (x ** 2).sum(1), rtol=1e-12)
    assert ("jvp", (None,) * 6) in SEEN, SEEN
    SEEN.clear()
    xs = RNG.normal(size=(2, 4, 3))
    np.testing.assert_allclose(ad.vmap(lambda x: Reduce.apply(x, *ARGS), in_axes=1)(xs),
                               0.5 * (xs ** 3).sum(2).T, rtol=1e-12)
    assert ("vmap", ((0, None, None, None, None, None, None), *ARGS)) in SEEN, SEEN


def test_non_array_arguments_select_the_code_like_torch():
    x = RNG.normal(size=(2, 3))
    # the int picks the reduced axis, the bool the branch: each value traces its own code
    np.testing.assert_allclose(ad.jit(lambda x: Reduce.apply(x, 0, 2, 1.0, True, "", None))(x),
                               (x ** 2).sum(0), rtol=1e-12)
    f = ad.jit(lambda x: Reduce.apply(x, 0, 2, 1.0, False, "", None))
    np.testing.assert_allclose(f(x), x)
    for p, scale in ((1, 2.0), (2, -1.5)):  # eager: a new Python value is new code
        np.testing.assert_allclose(Reduce.apply(x, 1, p, scale, True, "", None),
                                   scale * (x ** p).sum(1), rtol=1e-12)


def test_non_none_gradient_for_a_non_array_argument_is_an_error():
    class Scale(ad.Function):
        @staticmethod
        def forward(x, k):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, anp.sum(g)  # a gradient for the Python number k

    with pytest.raises(TypeError, match=r"Scale.backward returned a gradient different than "
                                        r"None at position 1, but the corresponding forward "
                                        r"input was not an array \(int\)"):
        ad.grad(lambda x: anp.sum(Scale.apply(x, 3)))(X[0])


def test_arrays_stay_differentiable():
    """numpy arrays and numpy scalars are arrays (traced, with gradients) as before."""

    class Mul(ad.Function):
        @staticmethod
        def forward(x, y):
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, anp.sum(g * x)

    x = X[0]
    gx, gy = ad.grad(lambda x, y: anp.sum(Mul.apply(x, y)), argnums=(0, 1))(x, np.float64(2.0))
    np.testing.assert_allclose(gx, np.full(3, 2.0))
    np.testing.assert_allclose(gy, x.sum(), rtol=1e-12)
    np.testing.assert_allclose(Mul.apply(x, np.float32(2.0)), 2.0 * x, rtol=1e-6)


# --------------------------------------------------------------------------- recursion


class ExpPlusX(ad.Function):
    """exp(x) + x through ExpB, whose backward calls ExpPlusX.apply with the very
    arguments ExpPlusX is being traced with (mutual re-entry that ends)."""

    @staticmethod
    def forward(x):
        return ExpB.apply(x) + x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1.0 + ExpB.apply(x))


class ExpB(ad.Function):
    @staticmethod
    def forward(x):
        return anp.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (ExpPlusX.apply(x) - x)


def test_mutual_reentry_through_rules_ends():
    x = np.array([0.2, -0.7, 1.1])
    f = lambda x: anp.sum(anp.sin(ExpPlusX.apply(x)))
    np.testing.assert_allclose(ad.jit(ExpPlusX.apply)(x), np.exp(x) + x, rtol=1e-12)
    want = np.cos(np.exp(x) + x) * (np.exp(x) + 1.0)
    np.testing.assert_allclose(ad.grad(f)(x), want, rtol=1e-12)
    np.testing.assert_allclose(ad.grad(f)(x), fd_grad(lambda x: np.sin(np.exp(x) + x).sum(), x),
                               rtol=1e-8)
    h = ad.hessian(f)(x)
    u = np.exp(x) + x
    np.testing.assert_allclose(h, np.diag(-np.sin(u) * (np.exp(x) + 1.0) ** 2
                                          + np.cos(u) * np.exp(x)), rtol=1e-10, atol=1e-14)


def test_endless_recursion_through_apply_is_a_clear_error():
    class Loop(ad.Function):
        @staticmethod
        def forward(x, depth):
            return 2.0 * Loop.apply(x, depth)  # the same arguments: never ends

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g, None

    class Ping(ad.Function):
        @staticmethod
        def forward(x):
            return Pong.apply(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g

    class Pong(Ping):
        @staticmethod
        def forward(x):
            return Ping.apply(x) + 1.0

    @ad.custom_vjp
    def selfish(x):
        return selfish(x) * 2.0

    selfish.defvjp(lambda x: (x, None), lambda r, g: (g,))
    for f, what in ((lambda x: Loop.apply(x, 3), r"Loop.forward calls Loop.apply again"),
                    (Ping.apply, r"Ping.forward calls Ping.apply again"),
                    (selfish, r"selfish calls selfish again")):
        with pytest.raises(RecursionError, match=what + r" with arguments of the same types "
                                                        r"\(f64\[3\]\)") as info:
            ad.jit(f)(X[0])
        assert "maximum recursion depth" not in str(info.value)
        assert f"(defined at {__file__}:" in str(info.value), str(info.value)
    np.testing.assert_allclose(ad.jit(lambda x: Power.apply(x, 2))(X[0]), X[0] ** 2, rtol=1e-12)


class PairDot(ad.Function):
    """k * <x, y> along the last axis for a pair (x, y) (a container of arrays: both
    differentiable) and a Python number k."""

    @staticmethod
    def forward(pair, k):
        x, y = pair
        return anp.sum(x * y, axis=-1) * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[0])
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        g = anp.expand_dims(g, -1) * ctx.k
        return (g * y, g * x), None

    @staticmethod
    def vmap(info, in_dims, pair, k):
        SEEN.append(("PairDot.vmap", in_dims))
        x, y = (v if d is not None else anp.broadcast_to(v, (info.batch_size, *v.shape))
                for v, d in zip(pair, in_dims[0]))
        return PairDot.apply((x, y), k), 0


def test_container_of_arrays_is_differentiable_and_mixed_container_is_an_error():
    x, y = X[0], W[0]
    np.testing.assert_allclose(PairDot.apply((x, y), 2), 2.0 * x @ y, rtol=1e-12)
    gx, gy = ad.grad(lambda x, y: PairDot.apply((x, y), 2), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2.0 * y, rtol=1e-12)
    np.testing.assert_allclose(gy, 2.0 * x, rtol=1e-12)
    SEEN.clear()
    out = ad.vmap(lambda x, y: PairDot.apply((x, y), 2), in_axes=(None, 0))(x, W)
    np.testing.assert_allclose(out, 2.0 * W @ x, rtol=1e-12)
    assert SEEN == [("PairDot.vmap", ((None, 0), None))]
    for bad in ((x, 3), [x, "y"]):
        with pytest.raises(TypeError, match=r"PairDot.apply: argument 0 \((tuple|list)\) mixes "
                                            "arrays with other values"):
            ad.jit(lambda x: PairDot.apply(bad, 2))(x)


def test_python_values_of_custom_vjp_jvp_and_checkpoint_stay_python_values_eagerly():
    """nondiff / static arguments reach the function as Python values whether it is
    called eagerly or inside a trace (eagerly they used to be traced into arrays)."""
    from functools import partial

    kinds: list[str] = []

    @partial(ad.custom_vjp, nondiff_argnums=(1,))
    def pw(x, n):
        kinds.append(type(n).__name__)
        return x ** n if n else anp.ones_like(x)

    pw.defvjp(lambda x, n: (pw(x, n), x), lambda n, x, g: (g * n * x ** (n - 1),))

    @partial(ad.custom_jvp, nondiff_argnums=(1,))
    def sc(x, k):
        kinds.append(type(k).__name__)
        return x * k if k > 0 else -x

    sc.defjvp(lambda k, p, t: (sc(p[0], k), t[0] * k))

    def body(x, k):
        kinds.append(type(k).__name__)
        return anp.sin(x) * k if k > 0 else x

    ck = ad.checkpoint(body, static_argnums=(1,))
    x = X[0]
    np.testing.assert_allclose(pw(x, 3), x ** 3, rtol=1e-12)
    np.testing.assert_allclose(sc(x, 2.5), 2.5 * x, rtol=1e-12)
    np.testing.assert_allclose(ck(x, 2), 2.0 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda x: anp.sum(pw(x, 3)))(x), 3.0 * x ** 2,
                               rtol=1e-12)
    assert set(kinds) <= {"int", "float"}, kinds


def test_function_without_array_arguments():
    class Const(ad.Function):
        @staticmethod
        def forward(n, v):
            return anp.ones((n,)) * v

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return None, None

        @staticmethod
        def jvp(ctx, tn, tv):
            raise AssertionError("nothing to differentiate")

    x = X[0]
    np.testing.assert_allclose(Const.apply(3, 2.0), np.full(3, 2.0))
    np.testing.assert_allclose(ad.grad(lambda x: anp.sum(x * Const.apply(3, 2.0)))(x),
                               np.full(3, 2.0))
    _, tan = ad.jvp(lambda x: x * Const.apply(3, 2.0), (x,), (np.ones(3),))
    np.testing.assert_allclose(tan, np.full(3, 2.0))
    np.testing.assert_allclose(ad.vmap(lambda x: x * Const.apply(3, -1.0))(X), -X)


class MarkedSin(ad.Function):
    """sin whose jvp is 2 cos and backward 3 cos (deliberately): every transform of
    the reentrant vmap rule shows which rule it used."""

    @staticmethod
    def forward(x):
        return anp.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3.0 * g * anp.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 2.0 * t * anp.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return MarkedSin.apply(anp.moveaxis(x, in_dims[0], 0)), 0


ONES = np.ones_like(X)
MARKED = {
    "jvp(vmap)": (lambda x: ad.jvp(ad.vmap(MarkedSin.apply), (x,), (ONES,))[1], 2.0),
    "vmap(jvp)": (lambda x: ad.vmap(lambda x, t: ad.jvp(MarkedSin.apply, (x,), (t,))[1])(
        x, ONES), 2.0),
    "grad(vmap)": (ad.grad(lambda x: ad.vmap(MarkedSin.apply)(x).sum()), 3.0),
    "vmap(grad)": (ad.vmap(ad.grad(lambda x: MarkedSin.apply(x).sum())), 3.0),
    "vmap(vmap(grad))": (ad.vmap(ad.vmap(ad.grad(MarkedSin.apply))), 3.0),
    "grad(vmap(vmap))": (ad.grad(lambda x: ad.vmap(ad.vmap(MarkedSin.apply))(x).sum()), 3.0),
    "jacfwd(vmap)": (lambda x: np.einsum("abab->ab", ad.jacfwd(ad.vmap(MarkedSin.apply))(x)),
                     2.0),
    "jacrev(vmap)": (lambda x: np.einsum("abab->ab", ad.jacrev(ad.vmap(MarkedSin.apply))(x)),
                     3.0),
    "vmap(jacrev)": (lambda x: np.einsum("abb->ab", ad.vmap(ad.jacrev(MarkedSin.apply))(x)),
                     3.0),
    "vmap(jacfwd)": (lambda x: np.einsum("abb->ab", ad.vmap(ad.jacfwd(MarkedSin.apply))(x)),
                     2.0),
}


@pytest.mark.parametrize("name", list(MARKED))
def test_reentrant_vmap_rule_keeps_the_derivative_rules(name):
    f, scale = MARKED[name]
    np.testing.assert_allclose(f(X), scale * np.cos(X), rtol=1e-12)
