"""Empirical neural tangent kernels, after torch.func's NTK tutorial (written
with jax's API, which torch.func follows).

The NTK of a small network between two batches, computed two ways: by
contracting the Jacobians with respect to every parameter (`jacrev` +
`vmap`), and by NTK-vector products (`vjp` then `jvp`, vmapped over the
basis of outputs). Full kernel and its trace. Only the import block differs
from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import jacrev, jit, jvp, vjp, vmap

# </imports>


def init(rng, sizes):
    return [(rng.randn(m, n) / onp.sqrt(m), rng.randn(n) * 0.1)
            for m, n in zip(sizes[:-1], sizes[1:])]


def net(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def fnet_single(params, x):
    return net(params, x[None])[0]


def ntk_jacobian_contraction(params, x1, x2):
    jac1 = vmap(jacrev(fnet_single), (None, 0))(params, x1)
    jac2 = vmap(jacrev(fnet_single), (None, 0))(params, x2)
    leaves1 = jax.tree_util.tree_leaves(jac1)
    leaves2 = jax.tree_util.tree_leaves(jac2)
    blocks = [jnp.einsum("Naf,Mbf->NMab", j1.reshape(j1.shape[0], j1.shape[1], -1),
                         j2.reshape(j2.shape[0], j2.shape[1], -1))
              for j1, j2 in zip(leaves1, leaves2)]
    return sum(blocks)


def ntk_vector_products(params, x1, x2):
    def one(a, b):
        def f(p):
            return fnet_single(p, a)

        def g(p):
            return fnet_single(p, b)

        _, vjp_fn = vjp(f, params)

        def row(v):  # v = e_i: row i of the block, J(a)_i . J(b)^T
            (cotangent,) = vjp_fn(v)
            return jvp(g, (params,), (cotangent,))[1]

        basis = jnp.eye(f(params).shape[0])
        return vmap(row)(basis)

    return vmap(lambda a: vmap(lambda b: one(a, b))(x2))(x1)


def inputs(small=True):
    """The network's parameters and the two batches (numpy) that run() uses."""
    rng = onp.random.RandomState(0)
    # two hidden layers: a kernel block (a, b) is not symmetric, so a transposed one shows
    sizes = [3, 5, 4, 2] if small else [32, 64, 64, 10]
    params = init(rng, sizes)
    x1, x2 = rng.randn(4, sizes[0]), rng.randn(3, sizes[0])
    return params, x1, x2


def run(small=True):
    params, x1, x2 = inputs(small)
    full = jit(ntk_jacobian_contraction)(params, x1, x2)
    products = ntk_vector_products(params, x1, x2)
    return {"ntk": full, "ntk_products": products,
            "trace": jnp.einsum("NMaa->NM", full)}


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v.shape)
