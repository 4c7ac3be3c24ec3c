"""Checkpointing (`ad.checkpoint`, policies, `checkpoint_name`) and `print_saved_residuals`.

Gradients of a checkpointed function must equal the unchecked ones bitwise
in float64 (the backward pass recomputes the same ops in the same order);
the saved residuals must shrink as the policy says. Expected byte counts are
derived by hand from the shapes of the block's intermediate values.
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

RNG = np.random.default_rng(11)
B, D, H = 8, 16, 32
X = RNG.normal(size=(B, D))
W1 = RNG.normal(size=(D, H)) / 4
W2 = RNG.normal(size=(H, D)) / 4

#: The block's internal activations that reverse mode saves (not its output):
#: h = tanh(x@w1), B x H (f64 = 8 bytes). The pre-activations x@w1 and h@w2
#: are not residuals: tanh's derivative is read off its result, as in JAX.
BLOCK_ACTIVATIONS = B * H * 8


def block(x, w1, w2):
    h = anp.tanh(x @ w1)
    return anp.tanh(h @ w2)


def named_block(x, w1, w2):
    h = ad.checkpoint_name(anp.tanh(x @ w1), "hidden")
    return anp.tanh(h @ w2)


def loss_with(f):
    def loss(x, w1, w2):
        return (f(x, w1, w2) ** 2).sum()

    return loss


POLICIES = {
    "none": None,
    "nothing": ad.checkpoint_policies.nothing_saveable,
    "everything": ad.checkpoint_policies.everything_saveable,
    "dots": ad.checkpoint_policies.dots_saveable,
}


def total(res):
    return sum(r.nbytes for r in res)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_gradients_bitwise_equal_to_unchecked(policy):
    plain = ad.grad(loss_with(block), argnums=(0, 1, 2))(X, W1, W2)
    f = ad.checkpoint(block, policy=POLICIES[policy])
    ckpt = ad.grad(loss_with(f), argnums=(0, 1, 2))(X, W1, W2)
    for a, b in zip(plain, ckpt):
        assert a.dtype == np.float64
        assert np.array_equal(a, b)


def test_gradients_match_jax_checkpoint():
    if jax is None:
        pytest.skip("jax is the oracle")

    def jblock(x, w1, w2):
        return jnp.tanh(jnp.tanh(x @ w1) @ w2)

    jf = jax.checkpoint(jblock)
    want = jax.grad(lambda *a: (jf(*a) ** 2).sum(), argnums=(0, 1, 2))(X, W1, W2)
    got = ad.grad(loss_with(ad.checkpoint(block)), argnums=(0, 1, 2))(X, W1, W2)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12, atol=1e-12)


def test_nothing_saveable_cuts_the_block_activations():
    plain = ad.saved_residuals(loss_with(block), X, W1, W2)
    ckpt = ad.saved_residuals(loss_with(ad.checkpoint(block)), X, W1, W2)
    assert total(plain) - total(ckpt) == BLOCK_ACTIVATIONS
    # what is left: the three arguments and values of the code outside the block
    args = [r for r in ckpt if r.source.startswith("from the argument")]
    assert sorted(r.source for r in args) == ["from the argument w1", "from the argument w2",
                                              "from the argument x"]
    assert not any("matmul" in r.source for r in ckpt)


def test_everything_saveable_saves_what_a_call_saves():
    plain = ad.saved_residuals(loss_with(block), X, W1, W2)
    ckpt = ad.saved_residuals(
        loss_with(ad.checkpoint(block, policy=ad.checkpoint_policies.everything_saveable)),
        X, W1, W2)
    assert total(ckpt) == total(plain)


def test_dots_saveable_saves_exactly_the_contractions():
    nothing = ad.saved_residuals(loss_with(ad.checkpoint(block)), X, W1, W2)
    dots = ad.saved_residuals(
        loss_with(ad.checkpoint(block, policy=ad.checkpoint_policies.dots_saveable)),
        X, W1, W2)
    extra = total(dots) - total(nothing)
    assert extra == (B * H + B * D) * 8  # the outputs of x@w1 and h@w2
    mm = [r for r in dots if r.source == "output of linalg.matmul"]
    assert sorted(r.shape for r in mm) == [(B, D), (B, H)]


def test_save_only_these_names():
    pol = ad.checkpoint_policies.save_only_these_names("hidden")
    res = ad.saved_residuals(loss_with(ad.checkpoint(named_block, policy=pol)), X, W1, W2)
    named = [r for r in res if "checkpoint_name 'hidden'" in r.source]
    assert [r.shape for r in named] == [(B, H)]
    assert "test_checkpoint.py" in named[0].location
    nothing = ad.saved_residuals(loss_with(ad.checkpoint(named_block)), X, W1, W2)
    assert total(res) - total(nothing) == B * H * 8
    other = ad.checkpoint_policies.save_only_these_names("other")
    res = ad.saved_residuals(loss_with(ad.checkpoint(named_block, policy=other)), X, W1, W2)
    assert total(res) == total(nothing)
    g = ad.grad(loss_with(ad.checkpoint(named_block, policy=pol)), argnums=(0, 1, 2))(X, W1, W2)
    want = ad.grad(loss_with(block), argnums=(0, 1, 2))(X, W1, W2)
    for a, b in zip(g, want):
        assert np.array_equal(a, b)


def test_checkpoint_name_outside_checkpoint_is_the_identity():
    f = loss_with(named_block)
    np.testing.assert_array_equal(ad.jit(f)(X, W1, W2), ad.jit(loss_with(block))(X, W1, W2))
    assert ad.checkpoint_name(X, "x") is X


def test_checkpoint_under_forward_mode_and_hessian():
    x = RNG.normal(size=3)

    def g(x):
        return anp.sin(anp.exp(x) * x)

    f = ad.checkpoint(g)
    t = RNG.normal(size=3)
    np.testing.assert_array_equal(ad.jvp(f, (x,), (t,))[1], ad.jvp(g, (x,), (t,))[1])
    np.testing.assert_allclose(ad.hessian(lambda x: f(x).sum())(x),
                               ad.hessian(lambda x: g(x).sum())(x), rtol=1e-12)
    g2 = ad.grad(lambda x: ad.grad(lambda z: f(z).sum())(x).sum())(x)
    w2 = ad.grad(lambda x: ad.grad(lambda z: g(z).sum())(x).sum())(x)
    np.testing.assert_allclose(g2, w2, rtol=1e-12)


def test_checkpoint_of_custom_vjp_and_closure():
    @ad.custom_vjp
    def twice_grad(x):
        return x

    twice_grad.defvjp(lambda x: (x, None), lambda r, g: (2.0 * g,))
    w = RNG.normal(size=3)

    def loss(x, w):
        inner = ad.checkpoint(lambda x: anp.sin(twice_grad(x) * w))  # closes over w
        return inner(x).sum()

    x = RNG.normal(size=3)
    gx, gw = ad.grad(loss, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, 2.0 * np.cos(x * w) * w, rtol=1e-12)
    np.testing.assert_allclose(gw, np.cos(x * w) * x, rtol=1e-12)


def test_checkpoint_static_argnums_and_eager():
    def pw(x, n):
        return x ** n

    f = ad.checkpoint(pw, static_argnums=(1,))
    x = np.array([1.5, 2.0])
    np.testing.assert_allclose(f(x, 3), x ** 3)
    np.testing.assert_allclose(ad.grad(lambda x: f(x, 3).sum())(x), 3 * x ** 2, rtol=1e-12)


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown policy"):
        ad.checkpoint(block, policy="save_some")


def test_print_saved_residuals(capsys):
    ad.print_saved_residuals(loss_with(ad.checkpoint(block)), X, W1, W2)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "f64[8,16] (1024 bytes) from the argument x"
    assert any("output of linalg.generic{math.tanh} at " in line and
               "test_checkpoint.py" in line for line in out)
    res = ad.saved_residuals(loss_with(ad.checkpoint(block)), X, W1, W2)
    assert out[-1] == f"total: {total(res)} bytes in {len(res)} residual(s)"
