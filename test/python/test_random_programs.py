"""A seeded smoke run of the random program generator (random_programs.py).

Each seed is a small program over mlir_autodiff.numpy / lax / nn /
scipy.special under a transform stack (grad of vmap, vmap of grad, jacfwd of
jacrev, jvp of grad, grad through scan / fori_loop / cond / checkpoint /
custom rules, x.at[...] with duplicate indices, float32 and float64, weak
Python scalars); the same source runs with jax (x64) and every result must
agree in shape, dtype and value (float64: 1e-9 relative; float32: 2e-4).

All cases compile into ONE `ad.jit` (and one `jax.jit`) returning every
program's results, so the run costs one compilation. Reproduce or widen a
seed from the command line:

    python test/python/random_programs.py FIRST COUNT [STACK]
"""

from __future__ import annotations

import numpy as np
import pytest
import random_programs as rp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

#: (seed, stack): the nested stacks (the plain ones are covered by the differential
#: and composition tables), short programs chosen from runs of the generator so
#: that together they use scan, cond, fori_loop, while_loop, x.at[...],
#: checkpoint and both custom-rule helpers, in float32 and float64
CASES = ((3, "vjp"), (13, "vmap_of_grad"), (17, "static"), (34, "jvp_of_grad"),
         (42, "grad_of_vmap"), (38, "vmap_none"), (92, "grad_pytree"),
         (190, "grad_of_grad_sum"), (202, "hessian"), (203, "vmap_of_jvp"),
         (204, "jacfwd_of_jacrev"), (205, "grad_of_checkpoint"),
         (206, "grad_of_vmap_last_axis"))


def _bundle(progs, mods):
    fns = [rp.build(p, mods) for p in progs]
    counts = [len(p.shapes) for p in progs]

    def everything(*flat):
        out, i = [], 0
        for fn, n in zip(fns, counts):
            out.append(fn(*flat[i:i + n]))
            i += n
        return tuple(out)

    return everything


def test_random_programs_match_jax():
    progs = [rp.generate(seed, stack=stack) for seed, stack in CASES]
    flat = [x for p in progs for x in p.inputs()]
    got = rp.ours().jit(_bundle(progs, rp.ours()))(*flat)
    want = jax.jit(_bundle(progs, rp.theirs()))(*flat)
    bad = [f"{p.describe()}{why}" for p, g, w in zip(progs, got, want)
           if (why := rp.compare(p, g, w))]
    assert not bad, "\n\n".join(bad)


def test_generator_is_deterministic_and_varied():
    a, b = rp.generate(7), rp.generate(7)
    assert a.source == b.source and a.stack == b.stack
    assert all(np.array_equal(x, y) for x, y in zip(a.inputs(), b.inputs()))
    assert len({rp.generate(s).source for s in range(20)}) == 20


# --------------------------------------------------------------------------- regressions
# Mismatches the generator found, minimised; each compiles once.


def test_nan_max_min_reductions_have_nan_derivatives():
    """max / min over values with a NaN: the result is NaN and so is every
    derivative (the difference quotient's, and jax's eagerly: under jax.jit XLA
    folds jax's 0/0 to 0). They were 0: the tie count of a NaN result is 0, so
    no point carried a weight."""
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    jnp = jax.numpy
    x = np.array([[np.nan, 2.0, 1.0], [0.5, 3.0, 3.0]])
    t = np.array([[1.0, 10.0, 100.0], [1.0, 2.0, 4.0]])

    def f(xp):
        return lambda x: (xp.max(x, axis=1), xp.min(x, axis=1), xp.max(x))

    w = (np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array(1.0))

    def all_derivs(ad_like, xp):
        def g(x, t):
            fx = f(xp)
            lin = ad_like.jvp(fx, (x,), (t,))[1]
            grads = tuple(ad_like.grad(lambda z, i=i: xp.sum(fx(z)[i] * w[i]))(x)
                          for i in range(3))
            return lin, grads
        return g

    got = ad.jit(all_derivs(ad, anp))(x, t)
    want = all_derivs(jax, jnp)(x, t)      # eagerly: see the docstring
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the second row has no NaN: ties split evenly, as jax does
    np.testing.assert_array_equal(got[1][0][1], [0.0, 1.0, 1.0])
    assert np.isnan(got[1][0][0]).all() and np.isnan(got[1][2]).all()
    h = 1e-6   # the difference quotient of the NaN row is NaN too
    assert np.isnan((np.max(x[0] + h * t[0]) - np.max(x[0] - h * t[0])) / (2 * h))


def test_reductions_and_array_of_python_scalars_are_strongly_typed():
    """A reduction (sum, prod, max, min, mean, var) and `array` of a list of
    weakly typed values (a Python float argument) are new arrays: float64, not weak, as
    numpy's and jax's are. They stayed weak, so `x_f32 - sum(s)` was float32."""
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    jnp = jax.numpy
    a = np.ones((2,), np.float32)

    def f(xp):
        return lambda a, s: (a - xp.sum(s), a - xp.prod(s), a - xp.max(s), a - xp.min(s),
                             a - xp.mean(s), a - xp.var(s), a - xp.array([s, s]),
                             a - xp.array((s, 1.0)), a - xp.asarray(2.0), a - s)

    got = ad.jit(f(anp))(a, 0.5)
    want = jax.jit(f(jnp))(a, 0.5)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert [g.dtype for g in got] == [np.float64] * 8 + [np.float32] * 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
