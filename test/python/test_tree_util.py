"""`mlir_autodiff.tree_util`: jax.tree_util's API, registered nodes and dataclasses in
every transform.

Oracles: jax.tree_util on twin registrations (leaf order, structure, key
strings), central finite differences in f64, jax's grad of the same function.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax
from mlir_autodiff import numpy as anp
from mlir_autodiff import tree_util as tu

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

Pair = collections.namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass(frozen=True)
class Params:
    w: Any
    b: Any
    act: str = dataclasses.field(default="tanh", metadata={"static": True})


tu.register_dataclass(Params)


@dataclasses.dataclass(frozen=True)
class JParams:  # the jax twin of Params
    w: Any
    b: Any
    act: str = dataclasses.field(default="tanh", metadata={"static": True})


jax.tree_util.register_dataclass(JParams, data_fields=["w", "b"], meta_fields=["act"])


@dataclasses.dataclass(frozen=True)
class Explicit:  # fields listed by hand, not a frozen-static inference
    scale: Any
    name: str


tu.register_dataclass(Explicit, data_fields=["scale"], meta_fields=["name"])


@tu.register_pytree_node_class
class Affine:
    def __init__(self, a: Any, c: Any, tag: str = "x") -> None:
        self.a, self.c, self.tag = a, c, tag

    def tree_flatten(self) -> tuple[tuple[Any, Any], str]:
        return (self.a, self.c), self.tag

    @classmethod
    def tree_unflatten(cls, tag: str, children: Any) -> Affine:
        return cls(*children, tag=tag)


class Box:
    def __init__(self, items: list[Any]) -> None:
        self.items = items


tu.register_pytree_node(Box, lambda b: (b.items, None), lambda _, ch: Box(list(ch)))
jax.tree_util.register_pytree_node(Box, lambda b: (b.items, None), lambda _, ch: Box(list(ch)))


@tu.register_static
@dataclasses.dataclass(frozen=True)
class Config:
    depth: int


def _sample_trees() -> tuple[Any, Any]:
    ours = {"p": Params(w=[1.0, (2.0, None)], b=3.0), "box": Box([4.0, Pair(5.0, 6.0)]),
            "z": [7.0]}
    theirs = {"p": JParams(w=[1.0, (2.0, None)], b=3.0), "box": Box([4.0, Pair(5.0, 6.0)]),
              "z": [7.0]}
    return ours, theirs


# --------------------------------------------------------------------------- API

def test_flatten_paths_and_keystr_match_jax() -> None:
    ours, theirs = _sample_trees()
    pairs, treedef = tu.tree_flatten_with_path(ours)
    jpairs, _ = jax.tree_util.tree_flatten_with_path(theirs)
    assert [x for _, x in pairs] == [x for _, x in jpairs] == [4.0, 5.0, 6.0, 1.0, 2.0, 3.0, 7.0]
    assert [tu.keystr(p) for p, _ in pairs] == [jax.tree_util.keystr(p) for p, _ in jpairs]
    assert tu.keystr(pairs[3][0]) == "['p'].w[0]"
    assert tu.keystr(pairs[3][0], simple=True, separator="/") == "p/w/0"
    rebuilt = tu.tree_unflatten(treedef, [x * 10 for _, x in pairs])
    assert rebuilt["p"] == Params(w=[10.0, (20.0, None)], b=30.0)
    assert isinstance(rebuilt["box"], Box) and rebuilt["box"].items[1] == Pair(50.0, 60.0)
    assert treedef.num_leaves == 7
    # the static field is structure: a different value is a different treedef
    assert tu.tree_structure(Params(1.0, 2.0, "relu")) != tu.tree_structure(Params(1.0, 2.0))
    assert tu.tree_structure(Params(1.0, 2.0)) == tu.tree_structure(Params(5.0, 6.0))
    assert hash(tu.tree_structure(Params(1.0, 2.0))) == hash(tu.tree_structure(Params(5., 6.)))
    # registered without keys: children are flat indices
    (path, _), = tu.tree_leaves_with_path(Box([1.0]))
    assert tu.keystr(path) == "[<flat index 0>]"
    assert tu.tree_leaves(Explicit(2.0, "s")) == [2.0]
    assert tu.tree_structure(Explicit(2.0, "s")) != tu.tree_structure(Explicit(2.0, "t"))


def test_tree_map_utilities() -> None:
    a = Affine(1.0, [2.0, 3.0], tag="t")
    out = tu.tree_map(lambda x, y: x + y, a, Affine(10.0, [20.0, 30.0], tag="t"))
    assert (out.a, out.c, out.tag) == (11.0, [22.0, 33.0], "t")
    with pytest.raises(ValueError, match="structures differ"):
        tu.tree_map(lambda x, y: x, a, Affine(1.0, [2.0, 3.0], tag="u"))
    # a second tree may have the first as a prefix: f gets its subtrees
    assert tu.tree_map(lambda x, y: (x, y), [1, 2], [(3, 4), {"k": 5}]) == [(1, (3, 4)),
                                                                           (2, {"k": 5})]
    # is_leaf stops at a registered node
    sizes = tu.tree_map(lambda x: len(tu.tree_leaves(x)), {"a": a, "b": [a]},
                        is_leaf=lambda x: isinstance(x, Affine))
    assert sizes == {"a": 3, "b": [3]}
    paths = tu.tree_map_with_path(lambda p, x: tu.keystr(p), {"w": [1, 2], "p": Pair(3, 4)})
    assert paths == {"w": ["['w'][0]", "['w'][1]"], "p": Pair("['p'].a", "['p'].b")}
    assert tu.tree_reduce(lambda x, y: x + y, {"a": a, "z": 4.0}) == 10.0
    assert tu.tree_reduce(max, [3, (9, 2)], 100) == 100
    assert tu.tree_all({"a": [True, 1], "b": Affine(2.0, 3.0)})
    assert not tu.tree_all({"a": [True, 0]}) and tu.tree_all([None, ()])
    assert tu.all_leaves([1.0, np.zeros(2)]) and not tu.all_leaves([1.0, None])
    assert not tu.all_leaves([1.0, (2.0,)])
    assert tu.all_leaves([(1.0,)], is_leaf=lambda x: isinstance(x, tuple))
    # tree_transpose against jax
    tree = [{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"x": 5, "y": 6}]
    outer, inner = tu.tree_structure([0, 0, 0]), tu.tree_structure({"x": 0, "y": 0})
    want = jax.tree_util.tree_transpose(jax.tree_util.tree_structure([0, 0, 0]),
                                        jax.tree_util.tree_structure({"x": 0, "y": 0}), tree)
    assert tu.tree_transpose(outer, inner, tree) == want == {"x": [1, 3, 5], "y": [2, 4, 6]}
    assert tu.tree_transpose(outer, None, tree) == want
    # register_static: no leaves, the value is the structure
    assert tu.tree_leaves([Config(3), 1.0]) == [1.0]
    assert tu.tree_unflatten(tu.tree_structure([Config(3), 0]), [7]) == [Config(3), 7]


def test_registration_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="already registered"):
        tu.register_pytree_node(tuple, lambda x: (x, None), lambda _, c: tuple(c))
    with pytest.raises(ValueError, match="already registered"):
        tu.register_dataclass(Params)
    with pytest.raises(TypeError, match="not a dataclass"):
        tu.register_dataclass(Box)

    @dataclasses.dataclass
    class Bad:
        x: Any
        y: Any

    with pytest.raises(ValueError, match="missing \\['y'\\]"):
        tu.register_dataclass(Bad, data_fields=["x"], meta_fields=[])
    # an exported artifact stores only built-in containers: a clear error, not a pickle
    with pytest.raises(TypeError, match="registered pytree node \\(Params\\) cannot be stored"):
        ad.export(lambda p: p.w * 2, Params(np.ones(2), np.ones(2)),
                  path=str(tmp_path / "params"))


# --------------------------------------------------------------------------- transforms

def _loss(p: Any, x: Any) -> Any:
    h = anp.tanh(x @ p.w + p.b) if p.act == "tanh" else x @ p.w + p.b
    return anp.sum(h ** 2)


def _jloss(p: Any, x: Any) -> Any:
    return jnp.sum(jnp.tanh(x @ p.w + p.b) ** 2)


def _fd_grad(f: Any, p: Params, eps: float = 1e-6) -> Params:
    out = {}
    for name in ("w", "b"):
        base = np.asarray(getattr(p, name), np.float64)
        g = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            e = np.zeros_like(base)
            e[i] = eps
            g[i] = (f(dataclasses.replace(p, **{name: base + e}))
                    - f(dataclasses.replace(p, **{name: base - e}))) / (2 * eps)
        out[name] = g
    return Params(**out)


def test_transforms_accept_registered_dataclasses() -> None:
    rng = np.random.default_rng(0)
    p = Params(w=rng.normal(size=(3, 2)), b=rng.normal(size=(2,)))
    x = rng.normal(size=(4, 3))
    t = Params(w=rng.normal(size=(3, 2)), b=rng.normal(size=(2,)))
    ct = 0.7

    @ad.jit
    def everything(p: Params, x: Any, t: Params) -> Any:
        g = ad.grad(_loss)(p, x)
        val, tan = ad.jvp(lambda q: _loss(q, x), (p,), (t,))
        _, pull = ad.vjp(lambda q: _loss(q, x), p)
        (vj,) = pull(anp.asarray(ct))
        # per-example gradients: vmap over x only, the Params prefix None
        per_ex = ad.vmap(ad.grad(lambda q, xi: _loss(q, xi[None])), in_axes=(None, 0))(p, x)
        # a batch of parameters: in_axes is a Params prefix (w batched, b shared)
        ws = anp.stack([p.w, 2 * p.w])
        batched = ad.vmap(_loss, in_axes=(Params(w=0, b=None), None))(Params(ws, p.b), x)
        jf = ad.jacfwd(lambda q: anp.tanh(x @ q.w + q.b))(p)
        jr = ad.jacrev(lambda q: anp.tanh(x @ q.w + q.b))(p)
        return g, val, tan, vj, per_ex, batched, jf, jr

    g, val, tan, vj, per_ex, batched, jf, jr = everything(p, x, t)
    for tree in (g, vj, per_ex, jf, jr):
        assert isinstance(tree, Params) and tree.act == "tanh"

    jp = JParams(w=p.w, b=p.b)
    want = jax.grad(_jloss)(jp, x)
    fd = _fd_grad(lambda q: float(_jloss(JParams(q.w, q.b), x)), p)
    for name in ("w", "b"):
        np.testing.assert_allclose(getattr(g, name), getattr(want, name), rtol=1e-12)
        np.testing.assert_allclose(getattr(g, name), getattr(fd, name), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(getattr(vj, name), ct * getattr(want, name), rtol=1e-12)
    np.testing.assert_allclose(val, _jloss(jp, x), rtol=1e-12)
    # transpose identity <ct, jvp(t)> = <vjp(ct), t>
    np.testing.assert_allclose(ct * tan, np.sum(vj.w * t.w) + np.sum(vj.b * t.b), rtol=1e-12)
    pe = jax.vmap(jax.grad(lambda q, xi: _jloss(q, xi[None])), in_axes=(None, 0))(jp, x)
    np.testing.assert_allclose(per_ex.w, pe.w, rtol=1e-12)
    np.testing.assert_allclose(per_ex.b, pe.b, rtol=1e-12)
    np.testing.assert_allclose(batched, [_jloss(jp, x), _jloss(JParams(2 * p.w, p.b), x)],
                               rtol=1e-12)
    jj = jax.jacfwd(lambda q: jnp.tanh(x @ q.w + q.b))(jp)
    for name in ("w", "b"):
        np.testing.assert_allclose(getattr(jf, name), getattr(jj, name), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(getattr(jr, name), getattr(jj, name), rtol=1e-12, atol=1e-15)


def test_scan_carry_and_static_fields_under_jit() -> None:
    """A registered class and a dataclass as scan carry; grad through the loop; the
    static field selects the code path (a retrace, not a traced value)."""
    xs = np.linspace(-1.0, 1.0, 5)

    def run(a0: Any, p: Params) -> Any:
        def step(carry: Affine, x: Any) -> tuple[Affine, Any]:
            nxt = Affine(carry.a * anp.sin(x * p.w) + p.b, carry.c + carry.a * x, tag=carry.tag)
            return nxt, carry.a
        out, ys = lax.scan(step, Affine(a0, anp.zeros(()), tag="c"), xs)
        assert isinstance(out, Affine) and out.tag == "c"
        return out.a + out.c + anp.sum(ys)

    def jrun(a0: Any, w: Any, b: Any) -> Any:
        def step(carry: Any, x: Any) -> Any:
            a, c = carry
            return (a * jnp.sin(x * w) + b, c + a * x), a
        (a, c), ys = jax.lax.scan(step, (a0, 0.0), xs)
        return a + c + jnp.sum(ys)

    p = Params(w=np.float64(0.8), b=np.float64(0.3))
    f = ad.jit(ad.value_and_grad(run, argnums=(0, 1)))
    val, (ga, gp) = f(np.float64(0.5), p)
    want_v, want_g = jax.value_and_grad(jrun, argnums=(0, 1, 2))(0.5, 0.8, 0.3)
    np.testing.assert_allclose(val, want_v, rtol=1e-12)
    np.testing.assert_allclose([ga, gp.w, gp.b], want_g, rtol=1e-12)
    eps = 1e-6
    fd = (float(jrun(0.5, 0.8 + eps, 0.3)) - float(jrun(0.5, 0.8 - eps, 0.3))) / (2 * eps)
    np.testing.assert_allclose(gp.w, fd, rtol=1e-6)

    @functools.partial(ad.jit)
    def loss(p: Params, x: Any) -> Any:
        return _loss(p, x)

    x = np.ones((1, 1))
    lin = loss(Params(np.full((1, 1), 2.0), np.zeros(1), act="linear"), x)
    th = loss(Params(np.full((1, 1), 2.0), np.zeros(1)), x)
    np.testing.assert_allclose([lin, th], [4.0, np.tanh(2.0) ** 2], rtol=1e-12)


def test_vmap_prefix_mismatch_is_a_clear_error() -> None:
    p = Params(w=np.ones((2, 3)), b=np.ones(2))
    with pytest.raises(ValueError, match="tree prefix"):
        ad.vmap(lambda q: q.w.sum() + q.b.sum(),
                in_axes=(Params(w=0, b=0, act="relu"),))(p)
    with pytest.raises(ValueError, match="tree prefix"):
        ad.vmap(lambda q: q.w.sum(), in_axes=((0, 0),))(p)


def test_custom_vjp_checkpoint_loops_and_hessian_take_dataclasses():
    @ad.custom_vjp
    def dot(p):
        return anp.sum(p.w * p.b)

    def fwd(p):
        return dot(p), p

    def bwd(p, g):  # a deliberately scaled rule: the custom rule, not the derivative, is used
        return (Params(2 * g * p.b, 2 * g * p.w),)

    dot.defvjp(fwd, bwd)

    @ad.jit
    def f(p):
        g_custom = ad.grad(dot)(p)
        g_ckpt = ad.grad(ad.checkpoint(lambda q: anp.sum(anp.sin(q.w) * q.b)))(p)
        looped = lax.while_loop(lambda q: anp.sum(q.b) < 20.0, lambda q: Params(q.w * 2, q.b + 1),
                                p)
        hess = ad.hessian(lambda q: anp.sum(q.w ** 3 * q.b))(p)
        return g_custom, g_ckpt, looped, hess

    w, b = np.array([0.5, 1.0, -2.0]), np.array([2.0, 3.0, 1.0])
    g_custom, g_ckpt, looped, hess = f(Params(w, b))
    np.testing.assert_allclose(g_custom.w, 2 * b, rtol=1e-15)
    jg = jax.grad(lambda q: jnp.sum(jnp.sin(q.w) * q.b))(JParams(w, b))
    np.testing.assert_allclose(g_ckpt.w, jg.w, rtol=1e-14)
    np.testing.assert_allclose(g_ckpt.b, jg.b, rtol=1e-14)
    assert isinstance(looped, Params)
    np.testing.assert_allclose(looped.w, w * 2 ** 5, rtol=1e-15)  # sum(b) 6 -> 21: 5 steps
    jh = jax.hessian(lambda q: jnp.sum(q.w ** 3 * q.b))(JParams(w, b))
    for outer in ("w", "b"):
        for inner in ("w", "b"):
            np.testing.assert_allclose(getattr(getattr(hess, outer), inner),
                                       getattr(getattr(jh, outer), inner), rtol=1e-14)
