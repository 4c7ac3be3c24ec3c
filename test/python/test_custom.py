"""Custom derivative rules from Python: `custom_vjp`, `custom_jvp`, `Function`.

The rules lower to the `autodiff.custom_vjp` / `autodiff.custom_jvp` function
attributes and the passes use them. Rules that deliberately differ from the
true derivative (a clipped gradient, a straight-through estimator, a scaled
rule) prove the rule is what the passes call; a stable rule for log1p(exp(x))
proves the custom gradient is finite where the automatic one is not.
Expected values come from hand-derived formulas, finite differences or jax
(jax.custom_vjp / jax.custom_jvp on the same definitions).
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
RNG = np.random.default_rng(7)
X = RNG.normal(size=(5,)) * 2.0


# --------------------------------------------------------------------------- custom_vjp

@ad.custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(res, g):
    return (anp.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def _loss_clip(x):
    return (clip_gradient(x) * 5.0).sum() + (x * 0.25).sum()


def test_clip_gradient_rule_is_used():
    # d/dx = clip(5, -1, 1) + 0.25 = 1.25 everywhere (the true derivative is 5.25)
    np.testing.assert_allclose(ad.grad(_loss_clip)(X), np.full(5, 1.25), rtol=1e-12)


def test_clip_gradient_under_jit_and_value():
    v, g = ad.jit(ad.value_and_grad(_loss_clip))(X)
    np.testing.assert_allclose(v, 5.25 * X.sum(), rtol=1e-12)
    np.testing.assert_allclose(g, np.full(5, 1.25), rtol=1e-12)


def test_clip_gradient_eager_call_is_the_primal():
    np.testing.assert_allclose(clip_gradient(X), X)


@needs_jax
def test_clip_gradient_matches_jax():
    @jax.custom_vjp
    def jclip(x):
        return x

    jclip.defvjp(lambda x: (x, None), lambda r, g: (jnp.clip(g, -1.0, 1.0),))
    want = jax.grad(lambda x: (jclip(x) * 5.0).sum() + (x * 0.25).sum())(X)
    np.testing.assert_allclose(ad.grad(_loss_clip)(X), np.asarray(want), rtol=1e-12)


@ad.custom_vjp
def ste_round(x):
    """Straight-through estimator: round in the forward pass, identity gradient."""
    return anp.round(x)


ste_round.defvjp(lambda x: (anp.round(x), None), lambda res, g: (g,))


def test_straight_through_estimator():
    x = np.array([0.2, 1.7, -2.4, 3.5001])
    # d/dx sum(round(x)^2) with the STE = 2 round(x) (the true derivative is 0)
    g = ad.grad(lambda x: (ste_round(x) ** 2).sum())(x)
    np.testing.assert_allclose(g, 2 * np.round(x), rtol=1e-12)


@needs_jax
def test_straight_through_estimator_matches_jax():
    @jax.custom_vjp
    def jste(x):
        return jnp.round(x)

    jste.defvjp(lambda x: (jnp.round(x), None), lambda r, g: (g,))
    x = np.array([0.2, 1.7, -2.4, 3.5001])
    want = jax.grad(lambda x: (jste(x) ** 2).sum())(x)
    np.testing.assert_allclose(ad.grad(lambda x: (ste_round(x) ** 2).sum())(x),
                               np.asarray(want), rtol=1e-12)


@ad.custom_vjp
def scaled_mul(x, y):
    return x * y


def _sm_fwd(x, y):
    return x * y, (x, y)


def _sm_bwd(res, g):
    x, y = res
    return (2.0 * g * y, None)  # deliberately 2x for x; no gradient for y


scaled_mul.defvjp(_sm_fwd, _sm_bwd)


def test_residuals_and_none_cotangent():
    x, y = RNG.normal(size=3), RNG.normal(size=3)
    gx, gy = ad.grad(lambda x, y: scaled_mul(x, y).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2.0 * y, rtol=1e-12)
    np.testing.assert_allclose(gy, np.zeros(3))


def test_custom_vjp_reached_through_vjp_with_cotangent():
    x, y = RNG.normal(size=3), RNG.normal(size=3)
    ct = RNG.normal(size=3)
    out, pull = ad.vjp(scaled_mul, x, y)
    gx, gy = pull(ct)
    np.testing.assert_allclose(out, x * y, rtol=1e-12)
    np.testing.assert_allclose(gx, 2.0 * ct * y, rtol=1e-12)
    np.testing.assert_allclose(gy, np.zeros(3))


def test_forward_mode_of_custom_vjp_differentiates_the_primal():
    x, y = RNG.normal(size=3), RNG.normal(size=3)
    tx, ty = RNG.normal(size=3), RNG.normal(size=3)
    out, tan = ad.jvp(scaled_mul, (x, y), (tx, ty))
    np.testing.assert_allclose(out, x * y, rtol=1e-12)
    np.testing.assert_allclose(tan, tx * y + x * ty, rtol=1e-12)  # the body's, not the rule's


@ad.custom_vjp
def cube(x):
    return x ** 3


cube.defvjp(lambda x: (x ** 3, x), lambda x, g: (3.0 * g * x * x,))


def test_second_order_differentiates_the_rule():
    x = np.array([0.5, -1.5, 2.0])
    # grad(grad(sum cube)) through the rule: d/dx 3 x^2 = 6 x
    g2 = ad.grad(lambda x: ad.grad(lambda z: cube(z).sum())(x).sum())(x)
    np.testing.assert_allclose(g2, 6 * x, rtol=1e-12)
    h = ad.hessian(lambda x: cube(x).sum())(x)
    np.testing.assert_allclose(h, np.diag(6 * x), rtol=1e-12)


@needs_jax
def test_hessian_of_custom_vjp_matches_jax_reverse_over_reverse():
    @jax.custom_vjp
    def jcube(x):
        return x ** 3

    jcube.defvjp(lambda x: (x ** 3, x), lambda x, g: (3.0 * g * x * x,))
    x = np.array([0.5, -1.5, 2.0])
    want = jax.jacrev(jax.jacrev(lambda x: jcube(x).sum()))(x)
    got = ad.jacrev(ad.jacrev(lambda x: cube(x).sum()))(x)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)


def _clip_by(thr, res, g):
    return (anp.clip(g, -thr, thr),)


def test_nondiff_argnums():
    clip_by = ad.custom_vjp(lambda x, thr: x, nondiff_argnums=(1,))
    clip_by.defvjp(lambda x, thr: (x, None), _clip_by)
    g = ad.grad(lambda x: (clip_by(x, 0.5) * 3.0).sum())(X)
    np.testing.assert_allclose(g, np.full(5, 0.5))
    g = ad.grad(lambda x: (clip_by(x, 10.0) * 3.0).sum())(X)
    np.testing.assert_allclose(g, np.full(5, 3.0))


def test_pytree_arguments_and_outputs():
    @ad.custom_vjp
    def f(p):
        return {"s": p["a"] * p["b"], "t": p["a"] + 1.0}

    def fwd(p):
        return f(p), (p["a"], p["b"])

    def bwd(res, ct):
        a, b = res
        return ({"a": ct["s"] * b + ct["t"], "b": ct["s"] * a * 10.0},)  # 10x for b

    f.defvjp(fwd, bwd)
    a, b = RNG.normal(size=2), RNG.normal(size=2)
    g = ad.grad(lambda p: (f(p)["s"] + f(p)["t"]).sum())({"a": a, "b": b})
    np.testing.assert_allclose(g["a"], b + 1.0, rtol=1e-12)
    np.testing.assert_allclose(g["b"], 10.0 * a, rtol=1e-12)


def test_closure_over_traced_value_is_a_constant_of_the_rule():
    w = RNG.normal(size=5)

    def loss(x, w):
        @ad.custom_vjp
        def scale(x):
            return x * w

        scale.defvjp(lambda x: (x * w, None), lambda r, g: (g * w * 3.0,))
        return scale(x).sum()

    gx, gw = ad.grad(loss, argnums=(0, 1))(X, w)
    np.testing.assert_allclose(gx, 3.0 * w, rtol=1e-12)
    np.testing.assert_allclose(gw, np.zeros(5))  # closed-over values get no gradient


def test_same_custom_function_twice_and_same_array_twice():
    x = RNG.normal(size=3)
    # d/dx sum(scaled_mul(x, x)) with the rule: 2 x (for argument 0) + 0 (argument 1)
    np.testing.assert_allclose(ad.grad(lambda x: scaled_mul(x, x).sum())(x), 2.0 * x,
                               rtol=1e-12)
    g = ad.grad(lambda x: (clip_gradient(x) * 5.0).sum() + (clip_gradient(x) * -3.0).sum())(x)
    np.testing.assert_allclose(g, np.zeros(3))  # 1 + (-1)


def test_bad_rules_raise_clear_errors():
    f = ad.custom_vjp(lambda x: x)
    with pytest.raises(AttributeError, match="No VJP defined"):
        ad.grad(lambda x: f(x).sum())(X)
    f.defvjp(lambda x: x, lambda r, g: (g,))
    with pytest.raises(TypeError, match="must return a pair"):
        ad.grad(lambda x: f(x).sum())(X)
    f.defvjp(lambda x: (x, None), lambda r, g: (g, g))
    with pytest.raises(TypeError, match="returned 2 cotangent"):
        ad.grad(lambda x: f(x).sum())(X)
    f.defvjp(lambda x: (x, None), lambda r, g: (g[:2],))
    with pytest.raises(TypeError, match="shape"):
        ad.grad(lambda x: f(x).sum())(X)


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


XS = np.array([100.0, 3.0, 0.0, -2.5], dtype=np.float32)


def test_stable_custom_jvp_gradient_at_100():
    g = ad.grad(lambda x: log1pexp(x).sum())(XS)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _sigmoid(XS.astype(np.float64)), rtol=1e-6)
    # the automatic derivative overflows in float32: exp(100) = inf, inf / inf = nan
    naive = ad.grad(lambda x: anp.log1p(anp.exp(x)).sum())(XS)
    assert not np.isfinite(naive[0])


def test_custom_jvp_forward_mode():
    t = np.array([1.0, 2.0, -1.0, 0.5], dtype=np.float32)
    out, tan = ad.jvp(log1pexp, (XS,), (t,))
    np.testing.assert_allclose(tan, t * _sigmoid(XS.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(out[1:], np.log1p(np.exp(XS[1:].astype(np.float64))), rtol=1e-6)


def test_custom_jvp_hessian_and_grad_of_grad():
    x = np.array([0.5, -1.0, 2.0])
    s = _sigmoid(x)
    h = ad.hessian(lambda x: log1pexp(x).sum())(x)
    np.testing.assert_allclose(h, np.diag(s * (1 - s)), rtol=1e-10)
    g2 = ad.grad(lambda x: ad.grad(lambda z: log1pexp(z).sum())(x).sum())(x)
    np.testing.assert_allclose(g2, s * (1 - s), rtol=1e-10)


def test_custom_jvp_rule_is_used_in_both_modes():
    f = ad.custom_jvp(lambda x: anp.sin(x))
    f.defjvp(lambda p, t: (anp.sin(p[0]), 7.0 * t[0]))  # deliberately not cos
    x = RNG.normal(size=4)
    np.testing.assert_allclose(ad.grad(lambda x: f(x).sum())(x), np.full(4, 7.0))
    _, tan = ad.jvp(f, (x,), (np.ones(4),))
    np.testing.assert_allclose(tan, np.full(4, 7.0))


def test_custom_jvp_nondiff_argnums():
    f = ad.custom_jvp(lambda n, x: x ** n, nondiff_argnums=(0,))
    f.defjvp(lambda n, p, t: (p[0] ** n, n * p[0] ** (n - 1) * t[0]))
    x = np.array([1.5, 2.0])
    np.testing.assert_allclose(ad.grad(lambda x: f(3, x).sum())(x), 3 * x ** 2, rtol=1e-12)


@needs_jax
def test_custom_jvp_matches_jax():
    @jax.custom_jvp
    def jl(x):
        return jnp.log1p(jnp.exp(x))

    @jl.defjvp
    def _(p, t):
        return jl(p[0]), t[0] * (1.0 - 1.0 / (1.0 + jnp.exp(p[0])))

    x = np.array([0.5, -1.0, 2.0, 30.0])
    np.testing.assert_allclose(ad.grad(lambda x: log1pexp(x).sum())(x),
                               np.asarray(jax.grad(lambda x: jl(x).sum())(x)), rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(lambda x: log1pexp(x).sum())(x),
                               np.asarray(jax.hessian(lambda x: jl(x).sum())(x)), rtol=1e-10)


# --------------------------------------------------------------------------- Function

class Exp(ad.Function):
    @staticmethod
    def forward(x):
        return anp.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.scale = 1.0  # a non-tensor attribute

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * ctx.scale

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return t * y


class WrongScale(ad.Function):
    """Old-style forward(ctx, ...): the rule scales the gradient by ctx.k (deliberately)."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        ctx.x = x  # a traced value stored as an attribute
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g * 2.0 * ctx.x * ctx.k, None


def test_function_setup_context_grad_and_jvp():
    x = RNG.normal(size=4)
    np.testing.assert_allclose(Exp.apply(x), np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda x: Exp.apply(x).sum())(x), np.exp(x), rtol=1e-12)
    _, tan = ad.jvp(Exp.apply, (x,), (np.full(4, 2.0),))
    np.testing.assert_allclose(tan, 2.0 * np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(lambda x: Exp.apply(x).sum())(x), np.diag(np.exp(x)),
                               rtol=1e-12)


def test_function_old_style_ctx_and_static_argument():
    x = RNG.normal(size=3)
    g = ad.grad(lambda x: WrongScale.apply(x, 5).sum())(x)
    np.testing.assert_allclose(g, 10.0 * x, rtol=1e-12)
    _, tan = ad.jvp(lambda x: WrongScale.apply(x, 5), (x,), (np.ones(3),))
    np.testing.assert_allclose(tan, 2.0 * x, rtol=1e-12)  # no jvp rule: the body's


def test_function_backward_arity_error():
    class Bad(ad.Function):
        @staticmethod
        def forward(x, y):
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return (g,)

    with pytest.raises(TypeError, match="returned 1 gradient"):
        ad.grad(lambda x: Bad.apply(x, x).sum())(X)


def test_function_matches_torch_where_available():
    torch = pytest.importorskip("torch")

    class TExp(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * 3.0

    class MExp(Exp):
        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * 3.0

    x = RNG.normal(size=4)
    tx = torch.tensor(x, requires_grad=True)
    TExp.apply(tx).sum().backward()
    np.testing.assert_allclose(ad.grad(lambda x: MExp.apply(x).sum())(x), tx.grad.numpy(),
                               rtol=1e-12)


# --------------------------------------------------------------------------- runtime

def test_same_array_as_two_arguments_accumulates():
    x = RNG.normal(size=4)
    gx, gy = ad.grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(x, x)
    np.testing.assert_allclose(gx, x)
    np.testing.assert_allclose(gy, x)
    # the same array used for both arguments of one function: gradients add up
    g = ad.grad(lambda a: ad.jit(lambda u, v: (u * v * u).sum())(a, a))(x)
    np.testing.assert_allclose(g, 3 * x * x, rtol=1e-12)


def test_output_aliasing_an_input_is_a_copy():
    x = RNG.normal(size=3)
    out, g = ad.jit(lambda x: (x, ad.grad(lambda z: (z * z).sum())(x)))(x)
    assert out is not x and not np.shares_memory(out, x)
    out[0] = 123.0
    assert x[0] != 123.0
    np.testing.assert_allclose(g, 2 * x)


def test_static_argnums_with_custom_rule_under_jit():
    f = ad.jit(lambda x, n: ad.grad(lambda z: (clip_gradient(z) * n).sum())(x),
               static_argnums=1)
    np.testing.assert_allclose(f(X, 0.5), np.full(5, 0.5))
    np.testing.assert_allclose(f(X, 4.0), np.full(5, 1.0))
    assert f._cache_size() == 2  # one compiled version per static value


def test_integer_argument_gets_no_cotangent():
    @ad.custom_vjp
    def f(x, k):
        return x * k

    f.defvjp(lambda x, k: (x * k, k), lambda k, g: (g * k * 2.0, None))
    x, k = np.array([1.0, 2.0]), np.array([3, 4])
    np.testing.assert_allclose(ad.grad(lambda x, k: f(x, k).sum())(x, k), 2.0 * k)
    _, tan = ad.jvp(lambda x: f(x, k), (x,), (np.ones(2),))
    np.testing.assert_allclose(tan, k)  # forward mode: the body's derivative


def test_inner_lowerer_extension_point():
    """Another pass's op inside a differentiated function is lowered first by the
    lowerer it registered (how `autodiff.vmap` composes under grad)."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms import ad_driver
    from mlir_autodiff.transforms.pipeline import run_pipeline

    def lower_double(driver, op):  # "test.double"(x) -> x + x
        with op.location, ir.InsertionPoint(op):
            x = op.operands[0]
            new = ir.Operation.create("arith.addf", results=[x.type], operands=[x, x])
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()

    text = """
    func.func private @f(%x: f64) -> f64 {
      %0 = "test.double"(%x) : (f64) -> f64
      %1 = arith.mulf %0, %x : f64
      return %1 : f64
    }
    func.func @main(%x: f64, %c: f64) -> (f64, f64) {
      %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
      return %0#0, %0#1 : f64, f64
    }"""
    ad_driver.register_inner_lowerer("test.double", lower_double)
    try:
        ctx = ir.Context()
        dialects.load(ctx)
        with ctx:
            module = ir.Module.parse(text)
            run_pipeline(module, "autodiff-vjp")
            assert "test.double" not in str(module)
            out = CompiledModule(module)["main"](np.float64(1.5), np.float64(1.0))
    finally:
        del ad_driver.INNER_LOWERERS["test.double"]
    np.testing.assert_allclose(out, [2 * 1.5 ** 2, 4 * 1.5])  # f = 2x^2, f' = 4x
