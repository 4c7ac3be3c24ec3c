"""Kernel least squares by gradient descent, after jax's `examples/kernel_lsq.py`.

The Gram matrix is built with nested `vmap`s of a kernel, the regularized
squared loss is minimized with a jitted gradient, and the fitted predictor
is a jitted `vmap`. Linear and RBF kernels. Only the import block differs
from the program run under jax.
"""

# <imports>
from functools import partial

import numpy.random as npr

import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit, vmap

# </imports>


def gram(kernel, xs):
    return vmap(lambda x: vmap(lambda y: kernel(x, y))(xs))(xs)


def minimize(f, x, num_steps=10000, step_size=0.000001, mass=0.9):
    opt_update = jit(grad(f))
    velocity = jnp.zeros_like(x)
    for _ in range(num_steps):
        g = opt_update(x)
        velocity = mass * velocity - step_size * g
        x = x + velocity
    return x


def train(kernel, xs, ys, regularization=0.01, num_steps=10000, step_size=0.000001):
    gram_ = jit(partial(gram, kernel))
    gram_mat = gram_(xs)
    n = xs.shape[0]

    def objective(v):
        risk = 0.5 * jnp.sum((jnp.dot(gram_mat, v) - ys) ** 2.0)
        reg = regularization * jnp.sum(v ** 2.0)
        return risk + reg

    v = minimize(objective, jnp.zeros(n), num_steps=num_steps, step_size=step_size)

    def predict(x):
        prods = vmap(lambda x_: kernel(x, x_))(xs)
        return jnp.dot(prods, v)

    return jit(vmap(predict))


def linear_kernel(x, y):
    return jnp.dot(x, y)


def rbf_kernel(x, y, gamma=0.5):
    return jnp.exp(-gamma * jnp.sum((x - y) ** 2))


def run(small=True):
    n, d, steps = (12, 3, 40) if small else (100, 20, 10000)
    rng = npr.RandomState(0)
    truth = rng.randn(d)
    xs = rng.randn(n, d)
    ys = jnp.dot(xs, truth)
    out = {}
    for name, kernel, step in (("linear", linear_kernel, 1e-3), ("rbf", rbf_kernel, 1e-2)):
        predict = train(kernel, xs, ys, num_steps=steps, step_size=step)
        out[f"{name}_fit"] = predict(xs)
        out[f"{name}_gram"] = gram(kernel, xs[:4])
    out["error"] = jnp.mean((out["linear_fit"] - ys) ** 2)
    return out


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v)
