"""A custom_vjp whose bwd rule calls the same custom function (implicit differentiation
of a fixed-point solver): traced to a bounded depth, differentiated once and twice."""
import numpy as np, mlir_autodiff as ad, functools
from mlir_autodiff import numpy as anp, lax
from functools import partial

@partial(ad.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
    def cond_fun(carry):
        x_prev, x = carry
        return anp.abs(x_prev - x) > 1e-12
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
    _, vjp_x = ad.vjp(lambda x: f(a, x), x_star)
    return x_star_bar + vjp_x(u)[0]

def fixed_point_rev(f, res, x_star_bar):
    a, x_star = res
    _, vjp_a = ad.vjp(lambda a: f(a, x_star), a)
    a_bar, = vjp_a(fixed_point(partial(rev_iter, f), (a, x_star, x_star_bar), x_star_bar))
    return a_bar, anp.zeros_like(x_star)

fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)

def newton_sqrt(a):
    update = lambda a, x: 0.5 * (x + a / x)
    return fixed_point(update, a, a)




def test_fixed_point_sqrt_value_grad_and_second_derivative():
    for a in (2.0, 0.7):
        np.testing.assert_allclose(ad.jit(newton_sqrt)(a), np.sqrt(a), rtol=1e-12)
        np.testing.assert_allclose(ad.grad(newton_sqrt)(a), 0.5 / np.sqrt(a), rtol=1e-10)
        np.testing.assert_allclose(ad.grad(ad.grad(newton_sqrt))(a), -0.25 * a ** -1.5,
                                   rtol=1e-8)
