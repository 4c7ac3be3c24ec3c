"""Model ensembling with vmap, after torch.func's ensembling tutorial (written
with jax's API, which torch.func follows).

Several independently initialized MLPs are stacked leaf by leaf into one
parameter pytree; `vmap` over the stacked parameters runs every model on
the same minibatch, or each model on its own minibatch, in one call; the
ensemble's gradients come from `vmap(grad(loss))`. Only the import block
differs from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit, vmap

# </imports>


def init_mlp(rng, sizes):
    return [(rng.randn(m, n) * onp.sqrt(2.0 / m), rng.randn(n) * 0.1)
            for m, n in zip(sizes[:-1], sizes[1:])]


def mlp(params, x):
    *hidden, (w, b) = params
    for wh, bh in hidden:
        x = jax.nn.relu(x @ wh + bh)
    return x @ w + b


def loss(params, x, labels):
    logits = mlp(params, x)
    logp = logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def stack(models):
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *models)


def inputs(small=True):
    """The models' parameters, a shared minibatch, one minibatch per model and their
    labels (numpy) that run() uses."""
    rng = onp.random.RandomState(0)
    num_models, batch, sizes = (3, 5, [6, 8, 4]) if small else (10, 64, [784, 128, 10])
    models = [init_mlp(rng, sizes) for _ in range(num_models)]
    x = rng.randn(batch, sizes[0])
    xs = rng.randn(num_models, batch, sizes[0])
    labels = rng.randint(0, sizes[-1], size=(num_models, batch))
    return models, x, xs, labels


def run(small=True):
    models, x, xs, labels = inputs(small)
    params = stack(models)
    same = vmap(mlp, in_axes=(0, None))(params, x)
    different = vmap(mlp)(params, xs)
    loop = jnp.stack([mlp(m, x) for m in models])
    grads = jit(vmap(grad(loss)))(params, xs, labels)
    return {"same_minibatch": same, "different_minibatches": different,
            "python_loop": loop, "grad_w0": grads[0][0], "grad_b_last": grads[-1][1],
            "losses": vmap(loss)(params, xs, labels)}


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v.shape)
