"""The Autodiff Cookbook (jax's tutorial), its real-valued sections.

Logistic regression: `grad` by argument, `value_and_grad`, a finite-difference
check; `jvp` and `vjp` by hand; Jacobians (`jacfwd`, `jacrev`) and the Hessian;
Hessian-vector products three ways (reverse-over-reverse, forward-over-reverse,
reverse-over-forward); Jacobian-matrix and matrix-Jacobian products with
`vmap`. Only the import block differs from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jacfwd, jacrev, jit, jvp, vjp, vmap

# </imports>


def sigmoid(x):
    return 0.5 * (jnp.tanh(x / 2) + 1)


def predict(W, b, inputs):
    return sigmoid(jnp.dot(inputs, W) + b)


def make_data(small):
    rng = onp.random.RandomState(0)
    n, d = (4, 3) if small else (64, 8)
    inputs = rng.randn(n, d)
    targets = rng.rand(n) > 0.5
    return inputs, targets, rng.randn(d), rng.randn()


def loss(W, b, inputs, targets):
    preds = predict(W, b, inputs)
    label_probs = preds * targets + (1 - preds) * (1 - targets)
    return -jnp.sum(jnp.log(label_probs))


def hvp_rev_rev(f, x, v):
    return grad(lambda x: jnp.vdot(grad(f)(x), v))(x)


def hvp_fwd_rev(f, x, v):
    return jvp(grad(f), (x,), (v,))[1]


def hvp_rev_fwd(f, x, v):
    g = lambda x: jvp(f, (x,), (v,))[1]
    return grad(g)(x)


def run(small=True):
    inputs, targets, W, b = make_data(small)
    f = lambda W: loss(W, b, inputs, targets)
    out = {}
    out["W_grad"] = grad(loss)(W, b, inputs, targets)
    out["W_grad_0"] = grad(loss, argnums=0)(W, b, inputs, targets)
    out["b_grad"] = grad(loss, 1)(W, b, inputs, targets)
    W_grad, b_grad = grad(loss, (0, 1))(W, b, inputs, targets)
    out["W_grad_pair"], out["b_grad_pair"] = W_grad, b_grad
    value, g = jax.value_and_grad(loss)(W, b, inputs, targets)
    out["value"], out["value_grad"] = value, g
    # a finite-difference check of one directional derivative, as in the cookbook
    eps = 1e-4
    u = onp.ones_like(W) / onp.sqrt(W.size)
    out["fd"] = (f(W + eps / 2 * u) - f(W - eps / 2 * u)) / eps
    out["jvp"] = jvp(f, (W,), (u,))[1]
    y, vjp_fun = vjp(f, W)
    out["vjp"] = vjp_fun(1.0)[0]
    # Jacobians of the predictions and the Hessian of the loss
    J_fwd = jacfwd(predict, argnums=0)(W, b, inputs)
    out["jacfwd"], out["jacrev"] = J_fwd, jacrev(predict)(W, b, inputs)
    out["hessian"] = jax.hessian(f)(W)
    out["hvp_rr"] = hvp_rev_rev(f, W, u)
    out["hvp_fr"] = jit(lambda W, u: hvp_fwd_rev(f, W, u))(W, u)
    out["hvp_rf"] = hvp_rev_fwd(f, W, u)
    # Jacobian-matrix and matrix-Jacobian products with vmap
    pred = lambda W: predict(W, b, inputs)
    M = onp.random.RandomState(1).randn(W.shape[0], 2)
    out["jmp"] = vmap(lambda v: jvp(pred, (W,), (v,))[1], in_axes=1, out_axes=1)(M)
    _, pred_vjp = vjp(pred, W)
    N = onp.random.RandomState(2).randn(2, inputs.shape[0])
    out["mjp"] = vmap(lambda c: pred_vjp(c)[0])(N)
    # per-example gradients
    per_example = vmap(grad(loss), in_axes=(None, None, 0, 0))
    out["per_example"] = per_example(W, b, inputs, targets)
    return out


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v)
