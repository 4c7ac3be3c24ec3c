"""`mlir_autodiff.example_libraries` (jax.example_libraries' stax and optimizers)
against jax's own, and the eager-array indexing by a traced index that jax
programs use (`jnp.asarray(table)[t]` inside `jit`).

Initial parameters come from each library's own keyed stream, so stax is
compared on the shapes that `init_fun` reports and, on the same numpy
parameters, the networks' value and gradient (one `jit` each side). The
optimizers run three steps of every optimizer and schedule on a pytree in one
`jit` on each side and agree to 1e-12 relative.
"""

from __future__ import annotations

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import random
from mlir_autodiff.example_libraries import optimizers, stax

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
from jax.example_libraries import optimizers as joptimizers  # noqa: E402
from jax.example_libraries import stax as jstax  # noqa: E402

RTOL = 1e-12


def _close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * max(1.0, np.abs(b).max(initial=0)),
                               err_msg=what)


# --------------------------------------------------------------------------- traced index

def test_eager_array_indexed_by_a_traced_index_gathers() -> None:
    """`anp.asarray(table)[t]` with a traced `t` (jit, grad, vmap), as jax arrays allow;
    it raised TracerArrayConversionError (numpy's indexing saw the tracer)."""
    import jax.numpy as jnp
    rng = np.random.RandomState(0)
    table_np = rng.randn(5, 3)
    table, jtable = anp.asarray(table_np), jnp.asarray(table_np)
    w = rng.randn(3)

    def f(tbl):
        return lambda w, t: anp_or_jnp(tbl).sum(tbl[t] * w * tbl[t, 1:2])

    def anp_or_jnp(tbl):
        return anp if tbl is table else jnp

    ours = ad.jit(lambda w, t: (f(table)(w, t), ad.grad(f(table))(w, t),
                                ad.vmap(lambda s: table[s])(anp.asarray([4, 0, 2]))))(w, 3)
    theirs = jax.jit(lambda w, t: (f(jtable)(w, t), jax.grad(f(jtable))(w, t),
                                   jax.vmap(lambda s: jtable[s])(jnp.asarray([4, 0, 2]))))(w, 3)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        _close(a, b, f"result {k}")
    # a traced index among basic ones, and the operators with a traced operand
    got = ad.jit(lambda t: (table[1:, t], table * t, t * table[0]))(2)
    _close(got[0], table_np[1:, 2], "table[1:, t]")
    _close(got[1], table_np * 2, "table * t")
    _close(got[2], 2 * table_np[0], "t * table[0]")
    # a static index keeps numpy's indexing (a constant, not a gather)
    assert ad.jit(lambda x: x + table[1])(w).shape == (3,)


# --------------------------------------------------------------------------- optimizers

def _optimizer_makers(lib):
    s = lib
    return {
        "sgd": s.sgd(0.1),
        "sgd_exponential_decay": s.sgd(s.exponential_decay(0.1, 2, 0.5)),
        "momentum_inverse_time": s.momentum(s.inverse_time_decay(0.1, 1, 0.5, staircase=True),
                                            0.9),
        "nesterov_polynomial": s.nesterov(s.polynomial_decay(0.1, 2, 0.01, 2.0), 0.8),
        "adagrad_piecewise": s.adagrad(s.piecewise_constant([1, 2], [0.1, 0.05, 0.01])),
        "rmsprop": s.rmsprop(0.05, gamma=0.8),
        "rmsprop_momentum": s.rmsprop_momentum(0.05, momentum=0.7),
        "adam": s.adam(0.1),
        "adamax": s.adamax(0.1, b1=0.8),
    }


def _three_steps(lib, tree_map, params, grads):
    out = {}
    for name, (init, update, get_params) in _optimizer_makers(lib).items():
        state = init(params)
        for i in range(3):
            g = tree_map(lambda x, i=i: x * (1.0 + i) - 0.3 * i, grads)
            state = update(i, g, state)
        out[name] = get_params(state)
    out["clip_grads"] = lib.clip_grads(grads, 0.5)
    out["l2_norm"] = lib.l2_norm(grads)
    return out


def test_optimizers_match_jax() -> None:
    rng = np.random.RandomState(1)
    params = {"w": rng.randn(3, 2), "b": [rng.randn(2), rng.randn()]}
    grads = {"w": rng.randn(3, 2), "b": [rng.randn(2), rng.randn()]}
    ours = ad.jit(lambda p, g: _three_steps(optimizers, ad.tree_map, p, g))(params, grads)
    theirs = jax.jit(lambda p, g: _three_steps(joptimizers, jax.tree_util.tree_map, p, g))(
        params, grads)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        for a, b in zip(ad.tree_leaves(ours[name]), jax.tree_util.tree_leaves(theirs[name])):
            _close(a, b, name)
    # the state is a pytree: it goes through jit and comes back
    init, update, get_params = optimizers.momentum(0.1, 0.9)
    state = ad.jit(update)(0, grads, init(params))
    assert isinstance(state, optimizers.OptimizerState)
    with pytest.raises(TypeError, match="does not match the parameter tree"):
        update(0, [grads["w"]], state)
    assert set(optimizers.__all__) == OPTIMIZERS_USED
    assert not set(optimizers.__all__) - set(joptimizers.__dict__)


#: every public name of `optimizers`, each exercised above (`constant` and
#: `make_schedule` by the numeric step sizes, `optimizer` by every optimizer)
OPTIMIZERS_USED = {
    "OptimizerState", "adagrad", "adam", "adamax", "clip_grads", "constant",
    "exponential_decay", "inverse_time_decay", "l2_norm", "make_schedule", "momentum",
    "nesterov", "optimizer", "piecewise_constant", "polynomial_decay", "rmsprop",
    "rmsprop_momentum", "sgd"}


# --------------------------------------------------------------------------- stax

def _networks(s):
    """Two networks that use every stax layer and combinator between them."""
    net1 = s.serial(
        s.Conv(3, (2, 2), padding="SAME"), s.BatchNorm(), s.Relu,
        s.MaxPool((2, 2), (1, 1)), s.AvgPool((2, 2), padding="SAME"), s.SumPool((2, 2)),
        s.Flatten, s.FanOut(2), s.parallel(s.Dense(4), s.serial(s.Dense(4), s.Tanh)),
        s.FanInSum, s.Dense(3), s.LogSoftmax)
    net2 = s.serial(
        s.GeneralConv(("NCHW", "OIHW", "NCHW"), 2, (3, 2), strides=(2, 1), padding="VALID"),
        s.Elu, s.BatchNorm(axis=(0, 2, 3)), s.Flatten, s.FanOut(2),
        s.parallel(s.Identity, s.Dense(2)), s.FanInConcat(), s.Selu, s.Gelu, s.Softplus,
        s.Sigmoid, s.Exp, s.LeakyRelu, s.Dropout(0.5, mode="test"),
        s.shape_dependent(lambda shape: s.Dense(shape[-1])), s.Softmax)
    return net1, net2


STAX_USED = {
    "Conv", "BatchNorm", "Relu", "MaxPool", "AvgPool", "SumPool", "Flatten", "FanOut",
    "parallel", "Dense", "serial", "Tanh", "FanInSum", "LogSoftmax", "GeneralConv", "Elu",
    "Identity", "FanInConcat", "Selu", "Gelu", "Softplus", "Sigmoid", "Exp", "LeakyRelu",
    "Dropout", "shape_dependent", "Softmax", "elementwise",
    # the activation functions stax re-exports (each is the nn function, compared there)
    "relu", "selu", "elu", "gelu", "sigmoid", "softplus", "leaky_relu", "logsoftmax",
    "softmax",
    # not provided: raise NotImplementedError (checked below)
    "ConvTranspose", "Conv1DTranspose", "GeneralConvTranspose",
}


def test_stax_networks_match_jax() -> None:
    assert set(stax.__all__) == STAX_USED
    rng = np.random.RandomState(2)
    inputs = (rng.randn(2, 4, 4, 1), rng.randn(2, 1, 5, 4))
    shapes = ((-1, 4, 4, 1), (-1, 1, 5, 4))
    ours_nets, jax_nets = _networks(stax), _networks(jstax)
    # each side's initializers are traced (not run) for the shapes they give, and
    # both sides then use the same numpy parameters
    traced: dict[str, list] = {}

    def init_all(nets, side, key):
        inits = [net[0](key, shape) for net, shape in zip(nets, shapes)]
        traced[side] = [(tuple(int(d) for d in o), [tuple(x.shape) for x in ad.tree_leaves(p)],
                         p) for o, p in inits]
        return [p for _, p in inits]

    ad.lower(lambda k: init_all(ours_nets, "ours", k), random.key(0))
    jax.eval_shape(lambda k: init_all(jax_nets, "jax", k), jax.random.key(0))
    params = []
    for (out_shape, leaf_shapes, p), (jout_shape, jleaf_shapes, jp) in zip(traced["ours"],
                                                                          traced["jax"]):
        # the batch dimension (-1) aside: jax's pooling shape arithmetic turns it into 0
        assert out_shape[0] == -1 and out_shape[1:] == jout_shape[1:]
        assert leaf_shapes == jleaf_shapes
        leaves, tree = jax.tree_util.tree_flatten(jp)
        assert ad.tree_structure(p) == ad.tree_structure(jax.tree_util.tree_unflatten(
            tree, [0] * len(leaves)))
        params.append(jax.tree_util.tree_unflatten(tree, [rng.randn(*x.shape) * 0.5
                                                          for x in leaves]))

    def loss(apply_a, apply_b, key, params, x, y):   # the key: Dropout (in test mode)
        return ((apply_a(params[0], x) ** 2).sum()
                + (apply_b(params[1], y, rng=key) * 1.5).sum())

    ours = ad.jit(ad.value_and_grad(lambda p, x, y: loss(
        ours_nets[0][1], ours_nets[1][1], random.key(1), p, x, y)))(params, *inputs)
    theirs = jax.jit(jax.value_and_grad(lambda p, x, y: loss(
        jax_nets[0][1], jax_nets[1][1], jax.random.key(1), p, x, y)))(params, *inputs)
    _close(ours[0], theirs[0], "value")
    for k, (a, b) in enumerate(zip(ad.tree_leaves(ours[1]), jax.tree_util.tree_leaves(theirs[1]))):
        _close(a, b, f"gradient leaf {k}")
    with pytest.raises(NotImplementedError, match="ConvTranspose"):
        stax.ConvTranspose(2, (2, 2))
    with pytest.raises(ValueError, match="needs a key"):
        stax.Dropout(0.5, mode="test")[1]((), anp.ones(3))
