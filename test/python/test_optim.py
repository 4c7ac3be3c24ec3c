"""`mlir_autodiff.optim` against numpy references written from the published
update rules (Adam: Kingma & Ba, Algorithm 1; AdamW: Loshchilov & Hutter's
decoupled decay; RMSProp, centered RMSProp, Adagrad, (Nesterov) momentum),
eagerly and under one shared `jit`, in float64; schedules against closed
forms; a few Adam steps of the digits MLP against a numpy backprop reference.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import warnings

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import optim, pytree

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 4


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}


def _grads() -> list[dict[str, np.ndarray]]:
    """Gradients per step; steps 0 and 2 are large (global norm > 1: clipping acts)."""
    rng = np.random.default_rng(1)
    out = []
    for k in range(STEPS):
        s = 3.0 if k % 2 == 0 else 0.1
        out.append({"w": s * rng.normal(size=(3, 2)), "b": s * rng.normal(size=2)})
    return out


# --------------------------------------------------------------------------- numpy references
# Each takes (params, list of grads) and returns the parameters after every step.

def ref_sgd(lr, momentum=None, nesterov=False):
    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        buf = {k: np.zeros_like(v) for k, v in p.items()}
        out = []
        for g in grads:
            for k in p:
                if momentum is None:
                    d = g[k]
                else:
                    buf[k] = g[k] + momentum * buf[k]
                    d = g[k] + momentum * buf[k] if nesterov else buf[k]
                p[k] = p[k] - lr * d
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def ref_adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, decay_mask=None):
    """Algorithm 1 of Adam; `weight_decay` adds AdamW's decoupled term lr * wd * p."""
    lr_fn = lr if callable(lr) else (lambda t: lr)

    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        m = {k: np.zeros_like(v) for k, v in p.items()}
        v2 = {k: np.zeros_like(v) for k, v in p.items()}
        out = []
        for t, g in enumerate(grads, start=1):
            for k in p:
                m[k] = b1 * m[k] + (1 - b1) * g[k]
                v2[k] = b2 * v2[k] + (1 - b2) * g[k] ** 2
                m_hat = m[k] / (1 - b1 ** t)
                v_hat = v2[k] / (1 - b2 ** t)
                d = m_hat / (np.sqrt(v_hat) + eps)
                if weight_decay and (decay_mask is None or decay_mask[k]):
                    d = d + weight_decay * p[k]
                p[k] = p[k] - lr_fn(t - 1) * d
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def ref_rmsprop(lr, decay=0.9, eps=1e-8, centered=False, momentum=None):
    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        ms = {k: np.zeros_like(v) for k, v in p.items()}
        mg = {k: np.zeros_like(v) for k, v in p.items()}
        buf = {k: np.zeros_like(v) for k, v in p.items()}
        out = []
        for g in grads:
            for k in p:
                ms[k] = decay * ms[k] + (1 - decay) * g[k] ** 2
                mg[k] = decay * mg[k] + (1 - decay) * g[k]
                denom = ms[k] - mg[k] ** 2 if centered else ms[k]
                step = lr * g[k] / np.sqrt(denom + eps)
                if momentum is not None:
                    buf[k] = momentum * buf[k] + step
                    step = buf[k]
                p[k] = p[k] - step
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def ref_adagrad(lr, init=0.1, eps=1e-7):
    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        acc = {k: np.full_like(v, init) for k, v in p.items()}
        out = []
        for g in grads:
            for k in p:
                acc[k] = acc[k] + g[k] ** 2
                p[k] = p[k] - lr * g[k] / np.sqrt(acc[k] + eps)
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def ref_clipped_sgd(lr, max_norm):
    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        out = []
        for g in grads:
            norm = math.sqrt(sum(float(np.sum(x ** 2)) for x in g.values()))
            f = 1.0 if norm < max_norm else max_norm / norm
            for k in p:
                p[k] = p[k] - lr * f * g[k]
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def ref_clip_scale(delta, s):
    def run(params, grads):
        p = {k: v.copy() for k, v in params.items()}
        out = []
        for g in grads:
            for k in p:
                p[k] = p[k] + s * np.clip(g[k], -delta, delta)
            out.append({k: v.copy() for k, v in p.items()})
        return out
    return run


def _warmup_cosine(t):
    """init 0 -> peak 0.05 linearly over 2 steps, cosine to 0.001 at step 6."""
    if t < 2:
        return 0.05 * t / 2
    u = min(t - 2, 4) / 4
    return 0.001 + (0.05 - 0.001) * 0.5 * (1 + math.cos(math.pi * u))


#: name -> (optimizer, numpy reference)
CASES = {
    "sgd": (lambda: optim.sgd(0.1), ref_sgd(0.1)),
    "momentum": (lambda: optim.sgd(0.1, momentum=0.9), ref_sgd(0.1, 0.9)),
    "nesterov": (lambda: optim.sgd(0.1, momentum=0.9, nesterov=True),
                 ref_sgd(0.1, 0.9, True)),
    "adam": (lambda: optim.adam(0.05), ref_adam(0.05)),
    "adam_schedule": (lambda: optim.adam(optim.warmup_cosine_decay_schedule(
        0.0, 0.05, 2, 6, end_value=0.001)), ref_adam(_warmup_cosine)),
    "adamw": (lambda: optim.adamw(0.05, weight_decay=0.3), ref_adam(0.05, weight_decay=0.3)),
    "adamw_mask": (lambda: optim.adamw(0.05, weight_decay=0.3, mask={"w": True, "b": False}),
                   ref_adam(0.05, weight_decay=0.3, decay_mask={"w": True, "b": False})),
    "adamw_mask_fn": (lambda: optim.adamw(0.05, weight_decay=0.3, mask=lambda p: pytree.tree_map(
        lambda x: x.ndim > 1, p)), ref_adam(0.05, weight_decay=0.3,
                                            decay_mask={"w": True, "b": False})),
    "rmsprop": (lambda: optim.rmsprop(0.01), ref_rmsprop(0.01)),
    "rmsprop_centered_momentum": (lambda: optim.rmsprop(0.01, centered=True, momentum=0.5),
                                  ref_rmsprop(0.01, centered=True, momentum=0.5)),
    "adagrad": (lambda: optim.adagrad(0.1), ref_adagrad(0.1)),
    "clip_by_global_norm": (lambda: optim.chain(optim.clip_by_global_norm(1.0),
                                                optim.sgd(0.1)), ref_clipped_sgd(0.1, 1.0)),
    "clip_scale": (lambda: optim.chain(optim.clip(0.3), optim.scale(-0.5)),
                   ref_clip_scale(0.3, -0.5)),
}


def _run_eager(opt, params, grads):
    state = opt.init(params)
    out = []
    for g in grads:
        updates, state = opt.update(g, state, params)
        params = optim.apply_updates(params, updates)
        out.append(params)
    return out


@pytest.fixture(scope="module")
def jitted_runs():
    """All optimizers' steps in ONE jitted function (one compile), called STEPS times."""
    opts = {name: make() for name, (make, _) in CASES.items()}
    params0 = _params()

    @ad.jit
    def step(params, states, g):
        new_p, new_s = {}, {}
        for name, opt in opts.items():
            updates, new_s[name] = opt.update(g, states[name], params[name])
            new_p[name] = optim.apply_updates(params[name], updates)
        return new_p, new_s

    params = {name: params0 for name in opts}
    states = {name: opt.init(params0) for name, opt in opts.items()}
    out = {name: [] for name in opts}
    for g in _grads():
        params, states = step(params, states, g)
        for name in opts:
            out[name].append(params[name])
    return out


def _close(got, want, what):
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        for name in b:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-12, atol=1e-14,
                                       err_msg=f"{what}, step {k + 1}, leaf {name}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_matches_numpy_reference(name):
    make, ref = CASES[name]
    _close(_run_eager(make(), _params(), _grads()), ref(_params(), _grads()), f"{name} eager")


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_matches_numpy_reference(name, jitted_runs):
    _, ref = CASES[name]
    _close(jitted_runs[name], ref(_params(), _grads()), f"{name} under jit")


def test_references_differ_from_each_other():
    """The cases are not vacuous: every optimizer moves the parameters its own way."""
    finals = {name: ref(_params(), _grads())[-1] for name, (_, ref) in CASES.items()}
    names = [n for n in finals if n not in ("adamw_mask_fn",)]
    for i, a in enumerate(names):
        assert not np.allclose(finals[a]["w"], _params()["w"]), a
        for b in names[i + 1:]:
            assert not all(np.allclose(finals[a][k], finals[b][k]) for k in ("w", "b")), (a, b)


@pytest.mark.parametrize("name", ["adam", "rmsprop", "sgd"])
def test_matches_optax_when_installed(name):
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    ours = {"adam": optim.adam(0.05), "rmsprop": optim.rmsprop(0.01), "sgd": optim.sgd(0.1)}
    theirs = {"adam": optax.adam(0.05), "rmsprop": optax.rmsprop(0.01), "sgd": optax.sgd(0.1)}
    p, s = _params(), theirs[name].init(_params())
    want = []
    for g in _grads():
        u, s = theirs[name].update(g, s, p)
        p = optax.apply_updates(p, u)
        want.append({k: np.asarray(v) for k, v in p.items()})
    _close(_run_eager(ours[name], _params(), _grads()), want, f"{name} vs optax")


# --------------------------------------------------------------------------- schedules

SCHEDULES = {
    "constant": (optim.constant_schedule(0.3), lambda t: 0.3),
    "exponential": (optim.exponential_decay(1.0, 2, 0.5, transition_begin=1),
                    lambda t: 0.5 ** (max(t - 1, 0) / 2)),
    "exponential_staircase_end": (
        optim.exponential_decay(1.0, 2, 0.5, staircase=True, end_value=0.3),
        lambda t: max(0.5 ** (t // 2), 0.3)),
    "cosine": (optim.cosine_decay_schedule(2.0, 4, alpha=0.1),
               lambda t: 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 4) / 4)) + 0.1)),
    "linear": (optim.linear_schedule(1.0, 0.2, 4, transition_begin=1),
               lambda t: 1.0 + (0.2 - 1.0) * min(max(t - 1, 0), 4) / 4),
    "piecewise": (optim.piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.1}),
                  lambda t: 1.0 * (0.5 if t >= 2 else 1) * (0.1 if t >= 4 else 1)),
    "warmup_cosine": (optim.warmup_cosine_decay_schedule(0.0, 0.05, 2, 6, end_value=0.001),
                      _warmup_cosine),
    "join": (optim.join_schedules([optim.constant_schedule(1.0),
                                   optim.linear_schedule(0.5, 0.0, 2)], [3]),
             lambda t: 1.0 if t < 3 else 0.5 * (1 - min(t - 3, 2) / 2)),
}
COUNTS = list(range(8))


def test_schedules_match_closed_forms_eagerly_and_under_jit():
    names = sorted(SCHEDULES)
    fn = ad.jit(lambda c: [SCHEDULES[n][0](c) for n in names])
    for t in COUNTS:
        traced = fn(np.asarray(t, np.int32))
        for n, got in zip(names, traced):
            want = SCHEDULES[n][1](t)
            for value, how in ((got, "jit"), (SCHEDULES[n][0](t), "eager int"),
                               (SCHEDULES[n][0](np.int32(t)), "eager int32")):
                np.testing.assert_allclose(value, want, rtol=1e-14, atol=1e-15,
                                           err_msg=f"{n}({t}) {how}")


def test_join_schedules_checks_boundaries():
    with pytest.raises(ValueError, match="2 schedules need 1 boundaries, got 0"):
        optim.join_schedules([optim.constant_schedule(1.0)] * 2, [])


# --------------------------------------------------------------------------- dtypes, donation

def test_float32_parameters_keep_float32_everywhere():
    opt = optim.adamw(optim.exponential_decay(1e-2, 2, 0.5), weight_decay=0.1)
    params = {"w": np.ones((2, 2), np.float32)}
    grads = {"w": np.full((2, 2), 0.5, np.float32)}
    state = opt.init(params)
    for how, (u, s) in (("eager", opt.update(grads, state, params)),
                        ("jit", ad.jit(opt.update)(grads, state, params))):
        new = optim.apply_updates(params, u)
        for leaf in pytree.tree_leaves((u, s, new)):
            if np.asarray(leaf).dtype.kind == "f":
                assert np.asarray(leaf).dtype == np.float32, how


def test_update_without_params_for_weight_decay_is_a_clear_error():
    opt = optim.adamw(1e-3)
    p = {"w": np.ones(2)}
    with pytest.raises(ValueError, match="add_decayed_weights: update\\(\\) needs the parameters"):
        opt.update(p, opt.init(p))


def test_chain_rejects_non_transformations():
    with pytest.raises(TypeError, match="argument 1 is a function"):
        optim.chain(optim.sgd(0.1), lambda g: g)


def test_donated_step_reuses_the_buffers():
    """`jit(step, donate_argnums=(0, 1))`: every new parameter and state array is
    computed in a donated buffer (no 'not usable' warning), values as undonated."""
    opt = optim.adam(0.05)

    def step(params, state, g):
        updates, state = opt.update(g, state, params)
        return optim.apply_updates(params, updates), state

    g = _grads()[0]
    plain = ad.jit(step)(_params(), opt.init(_params()), g)
    params, state = _params(), opt.init(_params())
    inputs = pytree.tree_leaves((params, state))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ad.jit(step, donate_argnums=(0, 1))(params, state, g)
    for o in pytree.tree_leaves(out):
        assert any(np.shares_memory(o, i) for i in inputs)
    for a, b in zip(pytree.tree_leaves(out), pytree.tree_leaves(plain)):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- the digits MLP

def _demo():
    spec = importlib.util.spec_from_file_location("optim_demo", ROOT / "examples" / "demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _numpy_loss_and_grads(params, x, onehot):
    """The demo's loss without dropout (tanh MLP, softmax cross-entropy, 1e-4 L2) and
    its gradient by hand-written backpropagation."""
    (w1, b1), (w2, b2) = params
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    zmax = z.max(axis=-1, keepdims=True)
    logp = z - zmax - np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))
    n = x.shape[0]
    loss = -np.mean(np.sum(onehot * logp, axis=-1)) + 1e-4 * (np.sum(w1 * w1) + np.sum(w2 * w2))
    dz = (np.exp(logp) - onehot) / n
    dh = dz @ w2.T * (1 - h * h)
    grads = [(x.T @ dh + 2e-4 * w1, dh.sum(0)), (h.T @ dz + 2e-4 * w2, dz.sum(0))]
    return loss, grads


def test_digits_mlp_trains_with_adam_like_the_numpy_reference():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits

    demo = _demo()
    digits = load_digits()
    x = digits.data[:96] / 16.0
    onehot = np.eye(10)[digits.target[:96]]
    params = [(w.astype(np.float64), b.astype(np.float64))
              for w, b in demo.init_params(np.random.default_rng(0), [64, 32, 10])]
    opt = optim.adam(0.01)

    @ad.jit
    def step(params, state, x, t):
        value, grads = ad.value_and_grad(lambda p: demo.loss(p, x, t, dropout=0.0))(params)
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state, value

    state = opt.init(params)
    ref_p = [tuple(a.copy() for a in layer) for layer in params]
    ref_m = [[np.zeros_like(a) for a in layer] for layer in params]
    ref_v = [[np.zeros_like(a) for a in layer] for layer in params]
    losses, ref_losses = [], []
    for t in range(1, 7):
        params, state, value = step(params, state, x, onehot)
        losses.append(float(value))
        loss, g = _numpy_loss_and_grads(ref_p, x, onehot)
        ref_losses.append(loss)
        new = []
        for i, layer in enumerate(ref_p):
            out = []
            for j, a in enumerate(layer):
                ref_m[i][j] = 0.9 * ref_m[i][j] + 0.1 * g[i][j]
                ref_v[i][j] = 0.999 * ref_v[i][j] + 0.001 * g[i][j] ** 2
                m_hat = ref_m[i][j] / (1 - 0.9 ** t)
                v_hat = ref_v[i][j] / (1 - 0.999 ** t)
                out.append(a - 0.01 * m_hat / (np.sqrt(v_hat) + 1e-8))
            new.append(tuple(out))
        ref_p = new
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    assert losses[-1] < losses[0] - 0.1, losses
    for (w, b), (rw, rb) in zip(params, ref_p):
        np.testing.assert_allclose(w, rw, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(b, rb, rtol=1e-9, atol=1e-12)
