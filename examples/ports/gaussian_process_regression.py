"""Gaussian-process regression with learned kernel hyperparameters, after jax's
`examples/gaussian_process_regression.py`.

An RBF kernel with amplitude, length scale and noise (kept positive through
softplus); the negative log marginal likelihood through a Cholesky factor
(`cho_solve`, the log-determinant from its diagonal); its gradient with
respect to the hyperparameters drives a momentum descent; the posterior mean
and variance at test points use `solve_triangular`. Only the import block
differs from the program run under jax.
"""

# <imports>
import numpy as onp

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit
from mlir_autodiff.scipy import linalg

# </imports>


def softplus(x):
    return jnp.logaddexp(x, 0.0)


def cov_map(cov_func, xs, xs2=None):
    if xs2 is None:
        return jax.vmap(lambda x: jax.vmap(lambda y: cov_func(x, y))(xs))(xs)
    return jax.vmap(lambda x: jax.vmap(lambda y: cov_func(x, y))(xs))(xs2).T


def exp_quadratic(x1, x2):
    return jnp.exp(-jnp.sum((x1 - x2) ** 2))


def gp(params, x, y, xtest=None, compute_marginal_likelihood=False):
    noise = softplus(params["noise"])
    amp = softplus(params["amplitude"])
    ls = softplus(params["lengthscale"])
    ymean = jnp.mean(y)
    y = y - ymean
    x = x / ls
    train_cov = amp * cov_map(exp_quadratic, x) + jnp.eye(x.shape[0]) * (noise + 1e-6)
    chol = linalg.cholesky(train_cov, lower=True)
    kinvy = linalg.cho_solve((chol, True), y)
    if compute_marginal_likelihood:
        log2pi = jnp.log(2.0 * jnp.pi)
        ml = jnp.sum(-0.5 * jnp.dot(y.T, kinvy) - jnp.sum(jnp.log(jnp.diag(chol)))
                     - (x.shape[0] / 2.0) * log2pi)
        ml -= jnp.sum(-0.5 * jnp.log(2 * jnp.pi) - jnp.log(amp) - 0.5 * jnp.log(amp) ** 2)
        return -ml
    xtest = xtest / ls
    cross_cov = amp * cov_map(exp_quadratic, x, xtest)
    mu = jnp.dot(cross_cov.T, kinvy) + ymean
    v = linalg.solve_triangular(chol, cross_cov, lower=True)
    var = amp * cov_map(exp_quadratic, xtest) - jnp.dot(v.T, v)
    return mu, var


def run(small=True):
    rng = onp.random.RandomState(0)
    n, steps = (12, 10) if small else (60, 300)
    xs = onp.linspace(-3.0, 3.0, n)[:, None]
    ys = onp.sin(2.0 * xs[:, 0]) + 0.1 * rng.randn(n)
    xtest = onp.linspace(-4.0, 4.0, 7)[:, None]
    params = {"amplitude": jnp.zeros((1, 1)), "noise": jnp.zeros((1, 1)) - 5.0,
              "lengthscale": jnp.zeros((1, 1))}
    marginal = jit(lambda p: gp(p, xs, ys, compute_marginal_likelihood=True))
    grad_fun = jit(grad(lambda p: gp(p, xs, ys, compute_marginal_likelihood=True)))
    momentum = {k: jnp.zeros_like(v) for k, v in params.items()}
    losses = []
    for _ in range(steps):
        g = grad_fun(params)
        momentum = {k: 0.9 * momentum[k] + g[k] for k in params}
        params = {k: params[k] - 0.01 * momentum[k] for k in params}
        losses.append(marginal(params))
    mu, var = gp(params, xs, ys, xtest=xtest)
    return {"losses": jnp.stack(losses), "mean": mu, "variance": jnp.diag(var),
            **{k: v for k, v in params.items()}}


if __name__ == "__main__":
    out = run(small=False)
    print("final negative log marginal likelihood", float(out["losses"][-1]))
    print("posterior mean", out["mean"])
