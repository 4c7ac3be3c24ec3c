"""Jacobians, Hessians and batched versions, after torch.func's
"Jacobians, Hessians, hvp, vhp, and more" tutorial (written with jax's API,
which torch.func follows).

The Jacobian of a layer by `jacrev` and `jacfwd` (they agree), with respect
to inputs and to weights; batch Jacobians by `vmap(jacrev)` and by summing
over the batch; the Hessian as `hessian`, `jacfwd(jacrev)`, `jacrev(jacrev)`;
batch Hessians; and Hessian-vector products. Only the import block differs
from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, hessian, jacfwd, jacrev, jit, jvp, vmap

# </imports>


def predict(weight, bias, x):
    return jnp.tanh(x @ weight.T + bias)


def inputs(small=True):
    """The layer's weight and bias, an input, a batch and a tangent (numpy) that run() uses."""
    rng = onp.random.RandomState(0)
    d, batch = (4, 3) if small else (16, 64)
    weight, bias, x = rng.randn(d, d), rng.randn(d), rng.randn(d)
    xs = rng.randn(batch, d)
    v = rng.randn(d)
    return weight, bias, x, xs, v


def run(small=True):
    weight, bias, x, xs, v = inputs(small)
    d = x.shape[0]
    out = {
        "jacrev_x": jacrev(predict, argnums=2)(weight, bias, x),
        "jacfwd_x": jacfwd(predict, argnums=2)(weight, bias, x),
        "jacrev_wb": jnp.concatenate(
            [j.reshape(d, -1) for j in jacrev(predict, argnums=(0, 1))(weight, bias, x)],
            axis=1),
        "batch_jacobian": vmap(jacrev(predict, argnums=2), in_axes=(None, None, 0))(
            weight, bias, xs),
        "batch_jacobian_sum": jnp.moveaxis(jacrev(
            lambda xs: predict(weight, bias, xs).sum(0))(xs), 1, 0),
        "hessian": hessian(predict, argnums=2)(weight, bias, x),
        "hessian_fwdrev": jacfwd(jacrev(predict, argnums=2), argnums=2)(weight, bias, x),
        "hessian_revrev": jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x),
        "batch_hessian": vmap(hessian(predict, argnums=2), in_axes=(None, None, 0))(
            weight, bias, xs),
    }
    f = lambda x: jnp.sum(predict(weight, bias, x) ** 2)
    out["hvp"] = jit(lambda x, v: jvp(grad(f), (x,), (v,))[1])(x, v)
    out["hvp_dense"] = hessian(f)(x) @ v
    return out


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v.shape)
