"""Custom rules under vmap: batched custom_vjp / custom_jvp rules (generate_vmap_rule)
and `Function` batching rules (`vmap` staticmethod, `generate_vmap_rule = True`).

Rules that deliberately differ from the true derivative (a straight-through
estimator, a clipped gradient) or from the forward function (a marked vmap
rule) prove that the rule is what runs under vmap. Expected values come from
hand-derived formulas, finite differences, a Python loop over the lanes, jax
(jax.custom_vjp / jax.custom_jvp with jax.vmap) and torch.func (an
autograd.Function with a vmap staticmethod) where those are installed.
"""

from __future__ import annotations

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
RNG = np.random.default_rng(11)
X = RNG.normal(size=(4, 3)) * 2.0
W = RNG.normal(size=(3,))
S = np.array([3.0, -0.5, 2.0])  # per-element scales: the cotangents a clip sees


def loop(f, *args, in_axes):
    """Apply `f` lane by lane (the reference semantics of vmap)."""
    size = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
            for i in range(size)]
    if isinstance(outs[0], tuple):
        return tuple(np.stack(o) for o in zip(*outs))
    return np.stack(outs)


# --------------------------------------------------------------------------- custom_vjp

@ad.custom_vjp
def ste(x):
    """Straight-through estimator: round forward, identity gradient."""
    return anp.round(x)


ste.defvjp(lambda x: (anp.round(x), None), lambda res, g: (g,))


def test_ste_grad_of_vmap_uses_the_rule():
    # the body's derivative is 0 everywhere; the rule's is 1
    g = ad.grad(lambda x: ad.vmap(ste)(x).sum())(X)
    np.testing.assert_array_equal(g, np.ones_like(X))
    g = ad.vmap(ad.grad(lambda x: ste(x).sum()))(X)
    np.testing.assert_array_equal(g, np.ones_like(X))
    np.testing.assert_array_equal(ad.vmap(ste)(X), np.round(X))


@needs_jax
def test_ste_grad_of_vmap_matches_jax():
    @jax.custom_vjp
    def jste(x):
        return jnp.round(x)

    jste.defvjp(lambda x: (jnp.round(x), None), lambda r, g: (g,))
    want = jax.grad(lambda x: (jax.vmap(jste)(x) ** 2).sum())(X)
    got = ad.grad(lambda x: (ad.vmap(ste)(x) ** 2).sum())(X)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)


@ad.custom_vjp
def clip_mul(x, w):
    return x * w


def _clip_mul_fwd(x, w):
    return x * w, (x, w)


def _clip_mul_bwd(res, g):
    x, w = res
    g = anp.clip(g, -1.0, 1.0)
    return g * w, g * x


clip_mul.defvjp(_clip_mul_fwd, _clip_mul_bwd)


def _clip_lane_loss(x, w):
    return (clip_mul(x, w) * S).sum()


def test_gradient_clipping_vmap_of_grad_and_grad_of_vmap_agree_with_a_loop():
    clipped = np.clip(S, -1.0, 1.0)  # (1, -0.5, 1): the true cotangents S are clipped
    want_gx = np.broadcast_to(clipped * W, X.shape)
    want_gw = (clipped * X).sum(axis=0)
    lane_grad = ad.grad(_clip_lane_loss, argnums=(0, 1))
    lx, lw = loop(lane_grad, X, W, in_axes=(0, None))
    np.testing.assert_allclose(lx, want_gx, rtol=1e-12)
    np.testing.assert_allclose(lw.sum(axis=0), want_gw, rtol=1e-12)
    vx, vw = ad.vmap(lane_grad, in_axes=(0, None))(X, W)
    np.testing.assert_allclose(vx, want_gx, rtol=1e-12)
    np.testing.assert_allclose(vw.sum(axis=0), want_gw, rtol=1e-12)
    batched = ad.vmap(_clip_lane_loss, in_axes=(0, None))
    gx, gw = ad.grad(lambda x, w: batched(x, w).sum(), argnums=(0, 1))(X, W)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-12)
    np.testing.assert_allclose(gw, want_gw, rtol=1e-12)


@needs_jax
def test_gradient_clipping_under_vmap_matches_jax():
    @jax.custom_vjp
    def jclip_mul(x, w):
        return x * w

    def jbwd(res, g):
        x, w = res
        g = jnp.clip(g, -1.0, 1.0)
        return g * w, g * x

    jclip_mul.defvjp(lambda x, w: (x * w, (x, w)), jbwd)

    def jloss(x, w):
        return (jclip_mul(x, w) * S).sum()

    jx, jw = jax.grad(lambda x, w: jax.vmap(jloss, (0, None))(x, w).sum(),
                      argnums=(0, 1))(X, W)
    batched = ad.vmap(_clip_lane_loss, in_axes=(0, None))
    gx, gw = ad.grad(lambda x, w: batched(x, w).sum(), argnums=(0, 1))(X, W)
    np.testing.assert_allclose(gx, np.asarray(jx), rtol=1e-12)
    np.testing.assert_allclose(gw, np.asarray(jw), rtol=1e-12)
    vx, vw = ad.vmap(ad.grad(_clip_lane_loss, argnums=(0, 1)), in_axes=(0, None))(X, W)
    jvx, jvw = jax.vmap(jax.grad(jloss, argnums=(0, 1)), (0, None))(X, W)
    np.testing.assert_allclose(vx, np.asarray(jvx), rtol=1e-12)
    np.testing.assert_allclose(vw, np.asarray(jvw), rtol=1e-12)


@ad.custom_vjp
def mul_and_square(x, w):
    return x * w, w * w


def _mas_bwd(res, g):
    x, w = res
    gy, gz = g
    return gy * w, (gy * x).sum() + 2.0 * w * gz


mul_and_square.defvjp(lambda x, w: (mul_and_square(x, w), (x, w)), _mas_bwd)


def test_cotangent_of_an_unbatched_result_is_shared_by_the_lanes():
    """`w * w` does not depend on the batched x: the batched function returns it
    once and vmap broadcasts it, so its cotangent is the total over the lanes.
    Each lane's bwd gets an equal share; the exact derivative follows (jax 0.4
    hands every lane the whole total and overcounts this case B-fold)."""
    w = 1.5

    def total(x, w):
        y, z = ad.vmap(mul_and_square, in_axes=(0, None))(x, w)
        return y.sum() + z.sum()

    want = X.sum() + 2 * X.shape[0] * w  # d/dw [w sum(x) + B w^2]
    np.testing.assert_allclose(ad.grad(total, argnums=1)(X, w), want, rtol=1e-12)
    eps = 1e-6
    f = lambda w: w * X.sum() + X.shape[0] * w * w
    np.testing.assert_allclose(want, (f(w + eps) - f(w - eps)) / (2 * eps), rtol=1e-8)


@ad.custom_vjp
def cube(x):
    return x * x * x


cube.defvjp(lambda x: (x * x * x, x), lambda x, g: (3.0 * x * x * g,))


def test_hessian_of_vmapped_custom_vjp_differentiates_the_batched_rule():
    x = X[0]
    h = ad.hessian(lambda x: ad.vmap(cube)(x).sum())(x)
    np.testing.assert_allclose(h, np.diag(6.0 * x), rtol=1e-12)


def test_vmap_of_jvp_of_custom_vjp_differentiates_the_body_per_lane():
    t = RNG.normal(size=X.shape)
    lane = lambda x, t: ad.jvp(cube, (x,), (t,))
    out, tan = ad.vmap(lane)(X, t)
    lout, ltan = loop(lane, X, t, in_axes=(0, 0))
    np.testing.assert_allclose(out, X ** 3, rtol=1e-12)
    np.testing.assert_allclose(tan, 3.0 * X * X * t, rtol=1e-12)
    np.testing.assert_allclose(tan, ltan, rtol=1e-12)
    np.testing.assert_allclose(out, lout, rtol=1e-12)


@needs_jax
def test_hessian_of_vmapped_custom_vjp_matches_jax():
    @jax.custom_vjp
    def jcube(x):
        return x * x * x

    jcube.defvjp(lambda x: (x * x * x, x), lambda x, g: (3.0 * x * x * g,))
    x = X[1]
    want = jax.jacrev(jax.jacrev(lambda x: jax.vmap(jcube)(x).sum()))(x)
    got = ad.hessian(lambda x: ad.vmap(cube)(x).sum())(x)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)


# --------------------------------------------------------------------------- custom_jvp

@ad.custom_jvp
def log1pexp(x):
    return anp.log1p(anp.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + anp.exp(x)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_custom_jvp_rule_is_used_under_vmap():
    x = np.array([[100.0, 3.0], [0.0, -2.5]], dtype=np.float32)
    # the automatic derivative is nan at 100 in float32 (inf / inf); the rule's is 1
    g = ad.grad(lambda x: ad.vmap(log1pexp)(x).sum())(x)
    np.testing.assert_allclose(g, _sigmoid(x.astype(np.float64)), rtol=1e-6)
    g = ad.vmap(ad.grad(lambda x: log1pexp(x).sum()))(x)
    np.testing.assert_allclose(g, _sigmoid(x.astype(np.float64)), rtol=1e-6)


def test_log1pexp_under_vmap_of_grad_grad_of_vmap_vmap_of_jvp_and_hessian():
    s = _sigmoid(X)
    lane = ad.grad(lambda x: log1pexp(x).sum())
    np.testing.assert_allclose(ad.vmap(lane)(X), loop(lane, X, in_axes=(0,)), rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(lane)(X), s, rtol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda x: ad.vmap(log1pexp)(x).sum())(X), s,
                               rtol=1e-12)
    t = RNG.normal(size=X.shape)
    out, tan = ad.vmap(lambda x, t: ad.jvp(log1pexp, (x,), (t,)))(X, t)
    np.testing.assert_allclose(out, np.log1p(np.exp(X)), rtol=1e-12)
    np.testing.assert_allclose(tan, t * s, rtol=1e-12)
    h = ad.hessian(lambda x: ad.vmap(log1pexp)(x).sum())(X[0])
    np.testing.assert_allclose(h, np.diag(s[0] * (1 - s[0])), rtol=1e-10)


@needs_jax
def test_log1pexp_under_vmap_matches_jax():
    @jax.custom_jvp
    def jl(x):
        return jnp.log1p(jnp.exp(x))

    @jl.defjvp
    def _(p, t):
        return jl(p[0]), t[0] * (1.0 - 1.0 / (1.0 + jnp.exp(p[0])))

    lane, jlane = ad.grad(lambda x: log1pexp(x).sum()), jax.grad(lambda x: jl(x).sum())
    np.testing.assert_allclose(ad.vmap(lane)(X), np.asarray(jax.vmap(jlane)(X)), rtol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda x: ad.vmap(log1pexp)(x).sum())(X),
                               np.asarray(jax.grad(lambda x: jax.vmap(jl)(x).sum())(X)),
                               rtol=1e-12)
    t = RNG.normal(size=X.shape)
    _, tan = ad.vmap(lambda x, t: ad.jvp(log1pexp, (x,), (t,)))(X, t)
    _, jtan = jax.vmap(lambda x, t: jax.jvp(jl, (x,), (t,)))(X, t)
    np.testing.assert_allclose(tan, np.asarray(jtan), rtol=1e-12)
    h = ad.hessian(lambda x: ad.vmap(log1pexp)(x).sum())(X[2])
    jh = jax.hessian(lambda x: jax.vmap(jl)(x).sum())(X[2])
    np.testing.assert_allclose(h, np.asarray(jh), rtol=1e-10)


# --------------------------------------------------------------------------- Function

CALLS: list[tuple[int, tuple]] = []


class ScaleRows(ad.Function):
    """x * w with a batching rule (recording how it is called) and a backward."""

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x

    @staticmethod
    def vmap(info, in_dims, x, w):
        CALLS.append((info.batch_size, in_dims))
        if in_dims[1] is None:  # one w for every lane: result batched along dim 1
            return anp.swapaxes(x, 0, 1) * w[:, None], 1
        return x * w, -2  # batch dim first, given as a negative dim


def test_function_vmap_rule_gets_info_and_in_dims():
    CALLS.clear()
    np.testing.assert_allclose(ad.vmap(ScaleRows.apply, in_axes=(0, None))(X, W), X * W,
                               rtol=1e-12)
    ws = RNG.normal(size=X.shape)
    np.testing.assert_allclose(ad.vmap(ScaleRows.apply)(X, ws), X * ws, rtol=1e-12)
    assert CALLS == [(4, (0, None)), (4, (0, 0))]
    # a value from outside the vmap (here closed over) is unbatched at its level
    CALLS.clear()
    outer = ad.jit(lambda x, w: ad.vmap(lambda x: ScaleRows.apply(x, 2.0 * w))(x))
    np.testing.assert_allclose(outer(X, W), 2.0 * X * W, rtol=1e-12)
    assert CALLS == [(4, (0, None))]


def test_function_vmap_rule_under_grad_uses_backward():
    lane = ad.grad(lambda x, w: (ScaleRows.apply(x, w) ** 2).sum(), argnums=(0, 1))
    want = loop(lane, X, W, in_axes=(0, None))
    got = ad.vmap(lane, in_axes=(0, None))(X, W)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    batched = ad.vmap(ScaleRows.apply, in_axes=(0, None))
    gx, gw = ad.grad(lambda x, w: (batched(x, w) ** 2).sum(), argnums=(0, 1))(X, W)
    np.testing.assert_allclose(gx, 2 * X * W * W, rtol=1e-12)
    np.testing.assert_allclose(gw, (2 * X * X * W).sum(axis=0), rtol=1e-12)


def test_function_vmap_rule_under_jvp():
    """Forward mode (no `jvp` staticmethod) differentiates forward's body; the
    derived function is not the primal, so it does not inherit the batching rule."""
    t = RNG.normal(size=X.shape)
    lane = lambda x, t: ad.jvp(lambda x: ScaleRows.apply(x, W), (x,), (t,))
    out, tan = ad.vmap(lane)(X, t)
    np.testing.assert_allclose(out, X * W, rtol=1e-12)
    np.testing.assert_allclose(tan, t * W, rtol=1e-12)
    lout, ltan = loop(lane, X, t, in_axes=(0, 0))
    np.testing.assert_allclose(out, lout, rtol=1e-12)
    np.testing.assert_allclose(tan, ltan, rtol=1e-12)


class Marked(ad.Function):
    """A batching rule that deliberately differs from forward (2x instead of x):
    what vmap returns shows which one ran."""

    @staticmethod
    def forward(x):
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def vmap(info, in_dims, x):
        return 2.0 * x, in_dims[0]


def test_function_vmap_rule_is_what_vmap_runs():
    np.testing.assert_allclose(ad.jit(Marked.apply)(X), X)
    np.testing.assert_allclose(ad.vmap(Marked.apply)(X), 2.0 * X)
    # only the level the rule was traced for uses it: an unbatched call is the forward
    np.testing.assert_allclose(ad.vmap(lambda x, w: Marked.apply(w) + x,
                                       in_axes=(0, None))(X, W), X + W)


def test_function_vmap_rule_with_nested_vmaps():
    """The rule batches the innermost vmap (size 3); the outer one (size 4)
    batches the rule's code generically."""
    CALLS.clear()
    xs = RNG.normal(size=(4, 3, 2))
    ws = RNG.normal(size=(4, 2))
    inner = ad.vmap(ScaleRows.apply, in_axes=(0, None))
    got = ad.vmap(inner)(xs, ws)
    np.testing.assert_allclose(got, xs * ws[:, None, :], rtol=1e-12)
    assert CALLS == [(3, (0, None))]
    got = ad.vmap(ad.vmap(Marked.apply))(xs)
    np.testing.assert_allclose(got, 2.0 * xs)


class ClippedSquare(ad.Function):
    """x^2 with a clipped backward, batched automatically."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return anp.clip(2.0 * x * g, -1.0, 1.0)


def test_function_generate_vmap_rule():
    want = np.clip(2.0 * X, -1.0, 1.0)  # the true derivative 2x is clipped
    np.testing.assert_allclose(ad.vmap(ClippedSquare.apply)(X), X * X, rtol=1e-12)
    lane = ad.grad(lambda x: ClippedSquare.apply(x).sum())
    np.testing.assert_allclose(loop(lane, X, in_axes=(0,)), want, rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(lane)(X), want, rtol=1e-12)
    g = ad.grad(lambda x: ad.vmap(ClippedSquare.apply)(x).sum())(X)
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_function_without_vmap_support_raises_torch_error():
    class Plain(ad.Function):
        @staticmethod
        def forward(x):
            return x * 3.0

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 3.0

    with pytest.raises(RuntimeError, match="You tried to vmap over Plain, but it does not "
                                           "have vmap support"):
        ad.vmap(Plain.apply)(X)
    # fine outside vmap, and under vmap when no argument is batched
    np.testing.assert_allclose(ad.grad(lambda x: Plain.apply(x).sum())(W), np.full(3, 3.0))
    out = ad.vmap(lambda x, w: x + Plain.apply(w), in_axes=(0, None))(X, W)
    np.testing.assert_allclose(out, X + 3.0 * W, rtol=1e-12)

    class Both(Plain):
        generate_vmap_rule = True

        @staticmethod
        def vmap(info, in_dims, x):
            return x * 3.0, 0

    with pytest.raises(RuntimeError, match="both generate_vmap_rule=True and an overridden "
                                           "vmap staticmethod"):
        ad.vmap(Both.apply)(X)


def test_function_vmap_rule_with_wrong_out_dims_raises():
    class Bad(Marked):
        @staticmethod
        def vmap(info, in_dims, x):
            return x[0], 0  # drops the batch dimension

    with pytest.raises(ValueError, match=r"Bad.vmap: output 0 has shape \(3,\) with out_dims "
                                         r"0, expected \(4, 3\)"):
        ad.vmap(Bad.apply)(X)

    class NotAPair(Marked):
        @staticmethod
        def vmap(info, in_dims, x):
            return x

    with pytest.raises(TypeError, match="must return a pair"):
        ad.vmap(NotAPair.apply)(X)


def test_function_vmap_rule_matches_torch_func():
    torch = pytest.importorskip("torch")
    from torch.func import grad as tgrad
    from torch.func import vmap as tvmap

    class TScaleRows(torch.autograd.Function):
        @staticmethod
        def forward(x, w):
            return x * w

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * w, g * x

        @staticmethod
        def vmap(info, in_dims, x, w):
            if in_dims[1] is None:
                return x.movedim(in_dims[0], 0).T * w[:, None], 1
            return x.movedim(in_dims[0], 0) * w.movedim(in_dims[1], 0), 0

    tx, tw = torch.from_numpy(X), torch.from_numpy(W)
    want = tvmap(TScaleRows.apply, in_dims=(0, None))(tx, tw).numpy()
    np.testing.assert_allclose(ad.vmap(ScaleRows.apply, in_axes=(0, None))(X, W), want,
                               rtol=1e-12)
    tlane = tgrad(lambda x, w: (TScaleRows.apply(x, w) ** 2).sum(), argnums=(0, 1))
    twant = tvmap(tlane, in_dims=(0, None))(tx, tw)
    lane = ad.grad(lambda x, w: (ScaleRows.apply(x, w) ** 2).sum(), argnums=(0, 1))
    got = ad.vmap(lane, in_axes=(0, None))(X, W)
    for g, w in zip(got, twant):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-12)
