"""Automatic differentiation variational inference, after jax's `examples/advi.py`.

A diagonal Gaussian approximation to an intractable, unnormalized density (Neal's
funnel) is fitted by differentiating through a Monte Carlo estimate of the
evidence lower bound: reparameterized samples `mean + exp(log_std) * eps`, a
`vmap` of the single-sample ELBO over the samples, `vmap(norm.logpdf)` for the
variational density, `grad` of the objective inside a jitted
`optimizers.momentum` step, and the densities evaluated on a grid by a jitted
`vmap` (`linspace`, `meshgrid`) with static function arguments.

Differences from the original (the lines marked `# port:`): the standard normal
draws `eps` are numpy's (our keyed random streams differ from jax's), one
array `noise[t]` per step indexed by the traced step number in place of
`random.split(random.key(t), num_samples)` and `random.normal(rng, shape)`;
`__main__`'s loop is `run`, which returns the lower bounds, the fitted
parameters, the samples and the grids instead of plotting them with
matplotlib; sizes are small.
"""

# <imports>
from functools import partial

import numpy.random as npr

import mlir_autodiff.numpy as jnp
import mlir_autodiff.scipy.stats.norm as norm
from mlir_autodiff import grad, jit, vmap
from mlir_autodiff.example_libraries import optimizers

# </imports>


# ========= Functions to define the evidence lower bound. =========

def diag_gaussian_sample(rng, mean, log_std):
    # Take a single sample from a diagonal multivariate Gaussian.
    return mean + jnp.exp(log_std) * rng  # port: rng is a standard normal draw

def diag_gaussian_logpdf(x, mean, log_std):
    # Evaluate a single point on a diagonal multivariate Gaussian.
    return jnp.sum(vmap(norm.logpdf)(x, mean, jnp.exp(log_std)))

def elbo(logprob, rng, mean, log_std):
    # Single-sample Monte Carlo estimate of the variational lower bound.
    sample = diag_gaussian_sample(rng, mean, log_std)
    return logprob(sample) - diag_gaussian_logpdf(sample, mean, log_std)

def batch_elbo(logprob, rng, params, num_samples):
    # Average over a batch of random samples.
    rngs = rng  # port: num_samples numpy draws, in place of random.split(rng, num_samples)
    vectorized_elbo = vmap(partial(elbo, logprob), in_axes=(0, None, None))
    return jnp.mean(vectorized_elbo(rngs, *params))


# ========= Helper function for plotting. =========

@jit(static_argnums=(0, 1, 2, 4))
def _mesh_eval(func, x_limits, y_limits, params, num_ticks):
    # Evaluate func on a 2D grid defined by x_limits and y_limits.
    x = jnp.linspace(*x_limits, num=num_ticks)
    y = jnp.linspace(*y_limits, num=num_ticks)
    X, Y = jnp.meshgrid(x, y)
    xy_vec = jnp.stack([X.ravel(), Y.ravel()]).T
    zs = vmap(func, in_axes=(0, None))(xy_vec, params)
    return X, Y, zs.reshape(X.shape)

def mesh_eval(func, x_limits, y_limits, params, num_ticks=101):
    return _mesh_eval(func, x_limits, y_limits, params, num_ticks)

# ========= Define an intractable unnormalized density =========

def funnel_log_density(params):
    return norm.logpdf(params[0], 0, jnp.exp(params[1])) + \
           norm.logpdf(params[1], 0, 1.35)


def run(small=True):
    num_samples = 8 if small else 40
    num_iters = 4 if small else 100
    num_ticks = 9 if small else 101
    D = 2
    noise = jnp.asarray(npr.RandomState(0).randn(num_iters, num_samples, D))  # port: numpy

    @jit
    def objective(params, t):
        rng = noise[t]  # port: the step's numpy draws, in place of random.key(t)
        return -batch_elbo(funnel_log_density, rng, params, num_samples)

    x_limits = (-2, 2)
    y_limits = (-4, 2)
    target_dist = lambda x, _: jnp.exp(funnel_log_density(x))
    approx_dist = lambda x, params: jnp.exp(diag_gaussian_logpdf(x, *params))
    out = {"bounds": [], "samples": []}

    def callback(params, t):
        out["bounds"].append(objective(params, t))  # port: kept instead of printed
        if t == num_iters - 1:  # port: the last grid, instead of one plot per step
            out["target_grid"] = mesh_eval(target_dist, x_limits, y_limits, 1, num_ticks)
            out["approx_grid"] = mesh_eval(approx_dist, x_limits, y_limits, params, num_ticks)
        rngs = noise[t]  # port: numpy draws, in place of random.split(random.key(t), ...)
        samples = vmap(diag_gaussian_sample, in_axes=(0, None, None))(rngs, *params)
        out["samples"].append(samples)

    # Set up optimizer.
    init_mean = jnp.zeros(D)
    init_std  = jnp.zeros(D)
    init_params = (init_mean, init_std)
    opt_init, opt_update, get_params = optimizers.momentum(step_size=0.1, mass=0.9)
    opt_state = opt_init(init_params)

    @jit
    def update(i, opt_state):
        params = get_params(opt_state)
        gradient = grad(objective)(params, i)
        return opt_update(i, gradient, opt_state)

    for t in range(num_iters):
        opt_state = update(t, opt_state)
        params = get_params(opt_state)
        callback(params, t)
    return {"bounds": jnp.stack(out["bounds"]), "samples": jnp.stack(out["samples"]),
            "mean": params[0], "log_std": params[1],
            "target_grid": jnp.stack(out["target_grid"]),
            "approx_grid": jnp.stack(out["approx_grid"])}


if __name__ == "__main__":
    result = run(small=False)
    for t, bound in enumerate(result["bounds"]):
        print(f"Iteration {t} lower bound {bound}")
