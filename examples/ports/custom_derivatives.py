"""Custom derivative rules, after jax's "Custom derivative rules" tutorial.

The program is written against jax's API; only the import block differs from
running it under jax (test_ports.py runs both and compares). It covers:
a numerically stable `log1pexp` with a custom JVP, `clip_gradient` with a
custom VJP, and implicit differentiation of a fixed point (`fixed_point`, a
custom VJP whose backward pass solves its own fixed-point problem with a
while loop), used for Newton's square root and differentiated twice.
"""

# <imports>
from functools import partial

import mlir_autodiff as jax
import mlir_autodiff.numpy as jnp
from mlir_autodiff import lax

# </imports>


@jax.custom_jvp
def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    ans = log1pexp(x)
    return ans, x_dot * (1.0 - 1.0 / (1.0 + jnp.exp(x)))


@jax.custom_vjp
def clip_gradient(lo, hi, x):
    return x


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi)


def clip_gradient_bwd(res, g):
    lo, hi = res
    return (None, None, jnp.clip(g, lo, hi))


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
    def cond_fun(carry):
        x_prev, x = carry
        return jnp.abs(x_prev - x) > 1e-12

    def body_fun(carry):
        _, x = carry
        return x, f(a, x)

    _, x_star = lax.while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
    return x_star


def fixed_point_fwd(f, a, x_init):
    x_star = fixed_point(f, a, x_init)
    return x_star, (a, x_star)


def rev_iter(f, packed, u):
    a, x_star, x_star_bar = packed
    _, vjp_x = jax.vjp(lambda x: f(a, x), x_star)
    return x_star_bar + vjp_x(u)[0]


def fixed_point_rev(f, res, x_star_bar):
    a, x_star = res
    _, vjp_a = jax.vjp(lambda a: f(a, x_star), a)
    (a_bar,) = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar),
                                 x_star_bar))
    return a_bar, jnp.zeros_like(x_star)


fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)


def newton_sqrt(a):
    update = lambda a, x: 0.5 * (x + a / x)
    return fixed_point(update, a, a)


def run(small=True):
    xs = jnp.linspace(-3.0, 30.0, 7 if small else 100)
    out = {
        "log1pexp": jax.vmap(log1pexp)(xs),
        "log1pexp_grad": jax.vmap(jax.grad(log1pexp))(xs),
        "log1pexp_grad_100": jax.grad(log1pexp)(100.0),
        "log1pexp_jvp": jax.jvp(log1pexp, (3.0,), (1.0,))[1],
        "clipped_grad": jax.vmap(jax.grad(
            lambda x: clip_gradient(-0.75, 0.75, jnp.sin(x) * 3.0)))(xs),
        "sqrt": jax.vmap(newton_sqrt)(jnp.array([2.0, 9.0, 0.25])),
        "sqrt_grad": jax.vmap(jax.grad(newton_sqrt))(jnp.array([2.0, 9.0, 0.25])),
        "sqrt_grad_grad": jax.grad(jax.grad(newton_sqrt))(2.0),
        "jit_sqrt_grad": jax.jit(jax.grad(newton_sqrt))(4.0),
    }
    return out


if __name__ == "__main__":
    for k, v in run(small=False).items():
        print(k, v)
