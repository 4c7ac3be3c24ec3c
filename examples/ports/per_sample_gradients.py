"""Per-sample gradients, after torch.func's per-sample-gradients tutorial
(written with jax's API, which torch.func follows).

A small classifier's loss on one example is differentiated with `grad` and
mapped over the batch with `vmap` (in one compiled call), checked against a
Python loop of single-example gradients; the clipped and noised mean of the
per-sample gradients is the DP-SGD update. Only the import block differs
from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit, vmap

# </imports>


def init(rng, sizes):
    return [(rng.randn(m, n) * onp.sqrt(1.0 / m), onp.zeros(n))
            for m, n in zip(sizes[:-1], sizes[1:])]


def predict(params, x):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    logits = predict(params, x)
    return -jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]))


def sample_loss(params, x, y):
    return loss(params, x[None], y[None])


def clipped_noisy_mean(per_sample, clip, noise):
    leaves = jax.tree_util.tree_leaves(per_sample)
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
    scale = jnp.minimum(1.0, clip / (norms + 1e-12))
    return jax.tree_util.tree_map(
        lambda g, n: jnp.mean(g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), axis=0) + n,
        per_sample, noise)


def inputs(small=True):
    """The parameters, batch and DP noise (numpy) that run() uses."""
    rng = onp.random.RandomState(0)
    sizes, batch = ([5, 7, 3], 6) if small else ([784, 128, 10], 64)
    params = init(rng, sizes)
    x, y = rng.randn(batch, sizes[0]), rng.randint(0, sizes[-1], batch)
    noise = jax.tree_util.tree_map(lambda p: 0.01 * rng.randn(*p.shape), params)
    return params, x, y, noise


def run(small=True):
    params, x, y, noise = inputs(small)
    batch = x.shape[0]
    per_sample = jit(vmap(grad(sample_loss), in_axes=(None, 0, 0)))(params, x, y)
    loop = [grad(sample_loss)(params, x[i], y[i]) for i in range(batch)]
    update = clipped_noisy_mean(per_sample, 1.0, noise)
    return {"w0": per_sample[0][0], "b1": per_sample[1][1],
            "loop_w0": jnp.stack([g[0][0] for g in loop]),
            "batch_grad_w0": grad(loss)(params, x, y)[0][0],
            "dp_update_w0": update[0][0], "dp_update_b1": update[1][1]}


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v.shape)
