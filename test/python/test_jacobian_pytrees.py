"""`jacfwd`, `jacrev` and `hessian` on pytrees, like jax (issue 18 item 16).

A generated grid: input structures {array, scalar, tuple of arrays, dict, nested
list/tuple with a Python-scalar leaf} (picked by `argnums`: an int, a 1-tuple, a
tuple, negative entries) x output structures {array, scalar, tuple, dict, nested}
x has_aux x {jacfwd, jacrev, hessian}. Each cell's tree structure, dtypes and
shapes must be jax's exactly and its values jax's (x64) to tight tolerances; every
cell is also checked against central finite differences of the same function in
numpy, so the check does not rest on jax alone.

To keep compile time down, all cells of one (transform, output structure) pair are
one `jit`: a function of five arguments (one per input structure) returning every
cell's Jacobian.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import pytree

jax = pytest.importorskip("jax", reason="jax is the oracle for these tests")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(18016)

# One argument per input structure: array, scalar, tuple of arrays, dict, nested
# list/tuple whose first leaf is a Python float.
ARGS = (
    RNG.normal(size=3),
    np.float64(0.7),
    (RNG.normal(size=2), RNG.normal(size=(2, 2))),
    {"w": RNG.normal(size=3), "b": np.float64(-0.4)},
    [0.3, (RNG.normal(size=2),)],
)
OUT_KINDS = ("array", "scalar", "tuple", "dict", "nested")


def family(xp, kind: str, has_aux: bool):
    """f(a, s, t, d, n) with output structure `kind`; every output leaf depends
    nonlinearly on every input leaf (so every Jacobian and Hessian block is nonzero)."""

    def f(a, s, t, d, n):
        u = xp.sin(a) * s + d["w"] * d["b"] * n[0]
        v = xp.tanh(t[1] @ t[0]) * n[0] + n[1][0] ** 2 * xp.sum(a)
        c = xp.sum(u * u) + xp.sum(v) * s + xp.exp(n[0]) * d["b"] * xp.sum(t[1])
        out = {
            "array": u * xp.sum(v),
            "scalar": c,
            "tuple": (u * c, c * s, t[1] * c),
            "dict": {"m": v[:, None] * u[None, :], "c": c},
            "nested": [(u * c, {"q": c * xp.sum(v)}), v * c],
        }[kind]
        if has_aux:
            return out, {"u": u, "pair": (c * 2.0, v)}
        return out

    f.__name__ = f"f_{kind}"
    return f


# argnums per transform: every input structure alone (0..3, -1 the nested one), a
# 1-tuple, a pair, a negative entry in a tuple, and all five at once.
JAC_ARGNUMS = (0, 1, 2, 3, -1, (0,), (0, 1), (1, 3, -1), (0, 1, 2, 3, 4))
HESS_ARGNUMS = (1, 2, -1, (0,), (2, -2))
TRANSFORMS = {"jacrev": (ad.jacrev, JAC_ARGNUMS), "jacfwd": (ad.jacfwd, JAC_ARGNUMS),
              "hessian": (ad.hessian, HESS_ARGNUMS)}


def cells(tname: str, kind: str) -> list[tuple[object, bool]]:
    """(argnums, has_aux) per cell: has_aux alternates so that, across the output
    structures, every argnums is tried with and without it."""
    shift = OUT_KINDS.index(kind) + list(TRANSFORMS).index(tname)
    return [(k, (i + shift) % 2 == 1) for i, k in enumerate(TRANSFORMS[tname][1])]


@functools.lru_cache(maxsize=None)
def jax_reference(kind: str) -> dict:
    """jax's results for every argnums of one output structure (one XLA compile):
    {("jac" | "hessian", argnums): (jacobian, aux)}. jax's jacfwd and jacrev agree
    in structure and (to rounding) in value, so jacrev is the reference for both."""
    f = family(jnp, kind, has_aux=True)

    keys = [("jac", k) for k in JAC_ARGNUMS] + [("hessian", k) for k in HESS_ARGNUMS]

    def all_cells(*args):
        return [(jax.jacrev if which == "jac" else jax.hessian)(f, argnums=k, has_aux=True)(*args)
                for which, k in keys]

    return dict(zip(keys, jax.jit(all_cells)(*ARGS)))


def _dyn(args: tuple, argnums) -> tuple[list[np.ndarray], pytree.TreeDef]:
    nums = (argnums,) if isinstance(argnums, int) else argnums
    leaves, tree = pytree.tree_flatten(tuple(args[n] for n in nums))
    return [np.asarray(x, np.float64) for x in leaves], tree


def _with_dyn(args: tuple, argnums, tree: pytree.TreeDef, flat: np.ndarray,
              shapes: list[tuple[int, ...]]) -> tuple:
    nums = (argnums,) if isinstance(argnums, int) else argnums
    parts, o = [], 0
    for s in shapes:
        size = int(np.prod(s, dtype=np.int64))
        parts.append(flat[o:o + size].reshape(s))
        o += size
    full = list(args)
    for n, d in zip(nums, pytree.tree_unflatten(tree, parts)):
        full[n % len(args)] = d
    return tuple(full)


def numpy_flat(kind: str, argnums):
    """(x0, g): the differentiated leaves of ARGS flattened to one vector, and the
    numpy function g(x) -> all output leaves flattened to one vector."""
    f = family(np, kind, has_aux=False)
    leaves, tree = _dyn(ARGS, argnums)
    shapes = [x.shape for x in leaves]
    x0 = np.concatenate([x.ravel() for x in leaves])

    def g(x):
        out = f(*_with_dyn(ARGS, argnums, tree, x, shapes))
        return np.concatenate([np.ravel(y) for y in pytree.tree_leaves(out)])

    return x0, g


def fd_jacobian(g, x0: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    cols = []
    for i in range(x0.size):
        e = np.zeros_like(x0)
        e[i] = eps
        cols.append((g(x0 + e) - g(x0 - e)) / (2 * eps))
    return np.stack(cols, axis=-1)


def fd_hessian(g, x0: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    n = x0.size
    m = g(x0).size
    h = np.empty((m, n, n))
    for i in range(n):
        for j in range(i, n):
            ei, ej = np.zeros(n), np.zeros(n)
            ei[i], ej[j] = eps, eps
            d = (g(x0 + ei + ej) - g(x0 + ei - ej) - g(x0 - ei + ej) + g(x0 - ei - ej))
            h[:, i, j] = h[:, j, i] = d / (4 * eps * eps)
    return h


def as_matrix(jac, kind: str, argnums, order: int) -> np.ndarray:
    """Our structured Jacobian (order 1) or Hessian (order 2) as one dense array
    (outputs flattened) x (inputs flattened) [x (inputs flattened)]."""
    out_leaves = pytree.tree_leaves(family(np, kind, False)(*ARGS))
    in_leaves, _ = _dyn(ARGS, argnums)
    blocks = iter(pytree.tree_leaves(jac))
    rows = []
    for y in out_leaves:
        m = np.size(y)
        if order == 1:
            rows.append(np.concatenate([np.reshape(next(blocks), (m, x.size))
                                        for x in in_leaves], axis=1))
        else:
            rows.append(np.concatenate([
                np.concatenate([np.reshape(next(blocks), (m, x.size, z.size))
                                for z in in_leaves], axis=2)
                for x in in_leaves], axis=1))
    return np.concatenate(rows, axis=0)


def assert_same_tree(got, want, what: str, rtol: float = 1e-11, atol: float = 1e-12) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want), (
        f"{what}: structure {jax.tree.structure(got)} != jax's {jax.tree.structure(want)}")
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want))):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what}: leaf {i} is {g.dtype}{g.shape}, jax's {w.dtype}{w.shape}")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: leaf {i}")


@pytest.mark.parametrize("kind", OUT_KINDS)
@pytest.mark.parametrize("tname", list(TRANSFORMS))
def test_grid_against_jax_and_finite_differences(tname, kind):
    transform = TRANSFORMS[tname][0]
    todo = cells(tname, kind)

    def all_cells(*args):
        return [transform(family(anp, kind, aux), argnums=k, has_aux=aux)(*args)
                for k, aux in todo]

    got = ad.jit(all_cells)(*ARGS)
    ref = jax_reference(kind)
    for (k, aux), res in zip(todo, got):
        what = f"{tname}(f_{kind}, argnums={k}, has_aux={aux})"
        jref, aux_ref = ref[("hessian" if tname == "hessian" else "jac", k)]
        if aux:
            assert isinstance(res, tuple) and len(res) == 2, f"{what}: not a (jac, aux) pair"
            jac = res[0]
            assert_same_tree(res, (jref, aux_ref), what)
        else:
            jac = res
            assert_same_tree(res, jref, what)
        x0, g = numpy_flat(kind, k)
        if tname == "hessian":
            np.testing.assert_allclose(as_matrix(jac, kind, k, 2), fd_hessian(g, x0),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{what} vs FD")
        else:
            np.testing.assert_allclose(as_matrix(jac, kind, k, 1), fd_jacobian(g, x0),
                                       rtol=1e-7, atol=1e-8, err_msg=f"{what} vs FD")


def test_jax_has_aux_structure_is_a_pair():
    """The grid takes its no-aux references from jax's has_aux results; this pins that
    jax's has_aux result is (the Jacobian it gives without aux, aux)."""

    def f(p, y):
        return {"a": jnp.sin(p[0]) * y, "b": (p[1] * y,)}

    def fa(p, y):
        return f(p, y), [y * 2.0]

    p, y = (np.array([0.3, -0.2]), np.float64(0.5)), np.float64(1.5)

    def both(p, y):
        return [(tr(f, argnums=(0, 1))(p, y), tr(fa, argnums=(0, 1), has_aux=True)(p, y))
                for tr in (jax.jacrev, jax.jacfwd, jax.hessian)]

    for plain, (jac, aux) in jax.jit(both)(p, y):
        assert jax.tree.structure(plain) == jax.tree.structure(jac)
        jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-12), plain, jac)
        np.testing.assert_allclose(aux[0], 3.0)


# --------------------------------------------------------------------------- compositions

def _pf(xp):
    def f(p, scale):
        return {"y": xp.sin(p["a"]) * p["b"][0] * scale,
                "z": (xp.sum(p["a"] ** 2) * p["b"][1], p["b"] * xp.cos(p["a"][0]))}
    return f


def test_jit_of_jacrev_on_a_pytree():
    p = {"a": RNG.normal(size=3), "b": RNG.normal(size=2)}
    got = ad.jit(ad.jacrev(_pf(anp), argnums=(0, 1)))(p, 1.5)
    want = jax.jacrev(_pf(jnp), argnums=(0, 1))(p, 1.5)
    assert_same_tree(got, want, "jit(jacrev)")


def test_vmap_of_jacfwd_and_hessian_on_a_pytree():
    pb = {"a": RNG.normal(size=(4, 3)), "b": RNG.normal(size=(4, 2))}
    got = ad.vmap(ad.jacfwd(_pf(anp)), in_axes=(0, None))(pb, 1.5)
    want = jax.vmap(jax.jacfwd(_pf(jnp)), in_axes=(0, None))(pb, 1.5)
    assert_same_tree(got, want, "vmap(jacfwd)")

    def scalar(xp):
        return lambda p: xp.sum(p["a"] ** 3) * p["b"][0] + p["b"][1] ** 2 * p["a"][2]

    got = ad.vmap(ad.hessian(scalar(anp)))(pb)
    want = jax.vmap(jax.hessian(scalar(jnp)))(pb)
    assert_same_tree(got, want, "vmap(hessian)")


def test_pytree_jacobians_are_one_batched_call():
    """Several input and output leaves still give one vmap of one vjp / jvp."""
    p = {"a": RNG.normal(size=3), "b": RNG.normal(size=2)}
    f = _pf(anp)
    rev = ad.lower(ad.jacrev(f, argnums=(0, 1)), p, 1.5).as_text("capture")
    fwd = ad.lower(ad.jacfwd(f, argnums=(0, 1)), p, 1.5).as_text("capture")
    assert rev.count('"autodiff.vmap"') == 1 and rev.count('"autodiff.vjp"') == 1
    assert fwd.count('"autodiff.vmap"') == 1 and fwd.count('"autodiff.jvp"') == 1


# --------------------------------------------------------------------------- edge cases

@pytest.mark.parametrize("tname", ["jacrev", "jacfwd"])
def test_empty_and_none_leaves_match_jax(tname):
    x, z = RNG.normal(size=3), np.zeros((0, 2))
    tr, jtr = getattr(ad, tname), getattr(jax, tname)

    def f(xp):
        return lambda x, z, n: ({"a": x * 2.0, "n": None}, z * xp.sum(x), n[0] * x)

    args = (x, z, (0.5, None))
    got = ad.jit(lambda *a: [tr(f(anp), argnums=k)(*a) for k in (0, 1, (0, 1, 2))])(*args)
    want = [jtr(f(jnp), argnums=k)(*args) for k in (0, 1, (0, 1, 2))]
    assert_same_tree(got, want, f"{tname} with empty and None leaves")


def test_dtypes_follow_jax():
    """jacrev's blocks have the input's dtype, jacfwd's the output's (as jax's); an
    integer output of jacfwd has a zero Jacobian of its dtype."""
    x32, x64 = np.ones(2, np.float32) * 0.5, np.ones(3) * 0.25

    def f(xp):
        return lambda a, b: (xp.sum(a) * b, (a * 3.0).astype(np.float32),
                             xp.arange(2) * 3)

    def g(xp):
        return lambda a, b: (xp.sum(a) * b, (a * 3.0).astype(np.float32))

    got = ad.jit(lambda a, b: (ad.jacrev(g(anp), argnums=(0, 1))(a, b),
                               ad.jacfwd(f(anp), argnums=(0, 1))(a, b)))(x32, x64)
    want = (jax.jacrev(g(jnp), argnums=(0, 1))(x32, x64),
            jax.jacfwd(f(jnp), argnums=(0, 1))(x32, x64))
    assert_same_tree(got, want, "mixed dtypes", rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- errors

def _h(x, y):
    return x * anp.sum(y["k"])


ERRORS = [
    ("jacfwd", lambda: ad.jacfwd(_h)(np.arange(3), {"k": np.ones(2)}), TypeError,
     r"jacfwd\(_h\): jacfwd requires real-valued inputs .* int64"),
    ("jacrev", lambda: ad.jacrev(_h)(np.arange(3), {"k": np.ones(2)}), TypeError,
     r"jacrev\(_h\): jacrev requires real-valued inputs .* int64"),
    ("hessian", lambda: ad.hessian(_h)(np.arange(3), {"k": np.ones(2)}), TypeError,
     r"hessian\(_h\): hessian requires real-valued inputs .* int64"),
    ("int leaf in a dict", lambda: ad.jacrev(_h, argnums=1)(np.ones(3), {"k": np.arange(2)}),
     TypeError, r"jacrev\(_h\): .*leaf 0 of the differentiated arguments \(argnums=1\)"),
    ("empty argnums", lambda: ad.jacrev(_h, argnums=())(np.ones(3), {"k": np.ones(2)}),
     ValueError, r"jacrev\(_h\): argnums must not be empty"),
    ("empty argnums fwd", lambda: ad.hessian(_h, argnums=())(np.ones(3), {"k": np.ones(2)}),
     ValueError, r"hessian\(_h\): argnums must not be empty"),
    ("argnums too large", lambda: ad.jacfwd(_h, argnums=2)(np.ones(3), {"k": np.ones(2)}),
     ValueError, r"jacfwd\(_h\): argnums 2 is out of range .* 2 positional"),
    ("argnums too negative",
     lambda: ad.jacrev(_h, argnums=(0, -3))(np.ones(3), {"k": np.ones(2)}),
     ValueError, r"jacrev\(_h\): argnums -3 is out of range"),
    ("repeated argnums", lambda: ad.jacfwd(_h, argnums=(0, -2))(np.ones(3), {"k": np.ones(2)}),
     ValueError, r"jacfwd\(_h\): argnums \(0, -2\) names an argument more than once"),
    ("aux not a pair", lambda: ad.jacfwd(_h, has_aux=True)(np.ones(3), {"k": np.ones(2)}),
     TypeError, r"jacfwd\(_h\): with has_aux=True the function must return a pair"),
    ("aux not a pair rev", lambda: ad.jacrev(_h, has_aux=True)(np.ones(3), {"k": np.ones(2)}),
     TypeError, r"jacrev\(_h\): with has_aux=True the function must return a pair"),
    ("integer output rev", lambda: ad.jacrev(lambda x: (x, anp.arange(2)))(np.ones(2)),
     TypeError, r"jacrev\(<lambda>\): reverse mode requires real-valued outputs .* int64"),
    ("integer output hessian", lambda: ad.hessian(lambda x: anp.arange(2) * 2)(np.ones(2)),
     TypeError, r"hessian\(<lambda>\): reverse mode requires real-valued outputs"),
]


@pytest.mark.parametrize("name,call,exc,match", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_clear(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()
