"""`mlir_autodiff.optim`: gradient transformations and optimizers (optax's shape).

An optimizer is a `GradientTransformation`, a pair of pure functions:

    opt = optim.adam(1e-3)
    state = opt.init(params)                          # a pytree of arrays
    updates, state = opt.update(grads, state, params)
    params = optim.apply_updates(params, updates)

`params`, `grads` and `updates` are pytrees of the same structure (tuples,
lists, dicts, namedtuples; see `mlir_autodiff.pytree`); the state is a pytree
of arrays (namedtuples of per-parameter trees and an int32 step count), so
a whole training step is one jitted function that takes and returns it:

    @partial(ad.jit, donate_argnums=(0, 1))
    def step(params, state, x, y):
        loss, grads = ad.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state, loss

With `donate_argnums` the new parameters and moments are computed in the
buffers of the old ones. Every function here is written with
`mlir_autodiff.numpy`, so it runs the same traced (under `jit`, `grad`,
`vmap`) and eagerly on numpy arrays. Updates keep each parameter's dtype
(float32 parameters get float32 moments and updates).

`chain` composes transformations (their states form a tuple). A learning
rate may be a number or a *schedule*: a function of the step count (an int32
scalar held in the optimizer's state, 0 at the first update) returning the
rate; `constant_schedule`, `exponential_decay`, `cosine_decay_schedule`,
`linear_schedule`, `piecewise_constant_schedule`,
`warmup_cosine_decay_schedule` and `join_schedules` build them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import numpy as anp
from . import pytree

Schedule = Callable[[Any], Any]
ScalarOrSchedule = float | Schedule


class GradientTransformation(NamedTuple):
    """`init(params) -> state`; `update(updates, state, params=None) -> (updates, state)`."""

    init: Callable[[Any], Any]
    update: Callable[..., tuple[Any, Any]]


class EmptyState(NamedTuple):
    """The state of a transformation that keeps none."""


class ScaleByScheduleState(NamedTuple):
    count: Any


class TraceState(NamedTuple):
    trace: Any


class ScaleByAdamState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


class ScaleByRmsState(NamedTuple):
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


# --------------------------------------------------------------------------- helpers

def _dtype(x: Any) -> np.dtype:
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


def _like(s: Any, x: Any) -> Any:
    """The scalar `s` (Python number or 0-d array) in `x`'s dtype, so that
    `x * s` keeps `x`'s dtype."""
    return anp.asarray(s, dtype=_dtype(x))


def _zero_count() -> Any:
    return anp.zeros((), dtype=anp.int32)


def _next_count(count: Any) -> Any:
    return anp.asarray(count + 1, dtype=anp.int32)


def _zeros_tree(params: Any) -> Any:
    return pytree.tree_map(anp.zeros_like, params)


def _no_state(params: Any) -> EmptyState:
    return EmptyState()


def _check_schedule_value(value: Any, name: str) -> None:
    if value is None:
        raise ValueError(f"optim.{name}: a learning rate (a number or a schedule) is required")


# --------------------------------------------------------------------------- combinators

def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply `transforms` in order; the state is the tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"optim.chain: argument {i} is a {type(t).__name__}, not a "
                            "GradientTransformation")

    def init(params: Any) -> tuple[Any, ...]:
        return tuple(t.init(params) for t in transforms)

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if len(state) != len(transforms):
            raise ValueError(f"optim.chain: the state has {len(state)} parts for "
                             f"{len(transforms)} transformations")
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def apply_updates(params: Any, updates: Any) -> Any:
    """`params + updates`, leaf by leaf, each result in its parameter's dtype."""
    return pytree.tree_map(lambda p, u: anp.asarray(p + u, dtype=_dtype(p)), params, updates)


# --------------------------------------------------------------------------- transformations

def identity() -> GradientTransformation:
    """Leaves the updates unchanged."""
    return GradientTransformation(_no_state, lambda u, s, p=None: (u, s))


def scale(step_size: float) -> GradientTransformation:
    """Multiply the updates by the constant `step_size`."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        return pytree.tree_map(lambda g: g * _like(step_size, g), updates), state

    return GradientTransformation(_no_state, update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    """Multiply the updates by `step_size_fn(count)`; `count` starts at 0 and
    grows by one per update."""

    def init(params: Any) -> ScaleByScheduleState:
        return ScaleByScheduleState(_zero_count())

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        step_size = step_size_fn(state.count)
        updates = pytree.tree_map(lambda g: g * _like(step_size, g), updates)
        return updates, ScaleByScheduleState(_next_count(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule, *,
                           flip_sign: bool = True) -> GradientTransformation:
    """Scale by `-learning_rate` (a number or a schedule of the step count)."""
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def clip(max_delta: float) -> GradientTransformation:
    """Clip every update element to [-max_delta, max_delta]."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        return pytree.tree_map(
            lambda g: anp.clip(g, _like(-max_delta, g), _like(max_delta, g)), updates), state

    return GradientTransformation(_no_state, update)


def global_norm(tree: Any) -> Any:
    """The L2 norm of all leaves of `tree` together."""
    return anp.sqrt(sum(anp.sum(anp.square(x)) for x in pytree.tree_leaves(tree)))


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Rescale the updates to global norm `max_norm` when their norm exceeds it."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        norm = global_norm(updates)
        keep = norm < max_norm

        def one(g: Any) -> Any:
            n = _like(norm, g)
            return anp.where(keep, g, g / n * _like(max_norm, g))

        return pytree.tree_map(one, updates), state

    return GradientTransformation(_no_state, update)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: `t = g + decay * t`; the update is `t` (or `g + decay * t`, Nesterov)."""

    def init(params: Any) -> TraceState:
        return TraceState(_zeros_tree(params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        new = pytree.tree_map(lambda g, t: g + _like(decay, g) * t, updates, state.trace)
        if nesterov:
            out = pytree.tree_map(lambda g, t: g + _like(decay, g) * t, updates, new)
        else:
            out = new
        return out, TraceState(new)

    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                  eps_root: float = 0.0) -> GradientTransformation:
    """Adam's direction (Kingma & Ba, Algorithm 1): bias-corrected first and second
    moments, `m_hat / (sqrt(v_hat + eps_root) + eps)`."""

    def init(params: Any) -> ScaleByAdamState:
        return ScaleByAdamState(_zero_count(), _zeros_tree(params), _zeros_tree(params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        mu = pytree.tree_map(lambda g, m: _like(b1, g) * m + _like(1 - b1, g) * g,
                             updates, state.mu)
        nu = pytree.tree_map(lambda g, v: _like(b2, g) * v + _like(1 - b2, g) * (g * g),
                             updates, state.nu)
        count = _next_count(state.count)
        c1 = 1.0 - anp.power(b1, count)
        c2 = 1.0 - anp.power(b2, count)

        def direction(m: Any, v: Any) -> Any:
            m_hat = m / _like(c1, m)
            v_hat = v / _like(c2, v)
            return m_hat / (anp.sqrt(v_hat + _like(eps_root, v)) + _like(eps, v))

        return pytree.tree_map(direction, mu, nu), ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8,
                 initial_scale: float = 0.0) -> GradientTransformation:
    """RMSProp's direction: `g / sqrt(nu + eps)`, `nu` the decaying mean of `g**2`."""

    def init(params: Any) -> ScaleByRmsState:
        return ScaleByRmsState(pytree.tree_map(
            lambda p: anp.full_like(p, initial_scale), params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        nu = pytree.tree_map(lambda g, v: _like(decay, g) * v + _like(1 - decay, g) * (g * g),
                             updates, state.nu)
        out = pytree.tree_map(lambda g, v: g / anp.sqrt(v + _like(eps, v)), updates, nu)
        return out, ScaleByRmsState(nu)

    return GradientTransformation(init, update)


def scale_by_stddev(decay: float = 0.9, eps: float = 1e-8,
                    initial_scale: float = 0.0) -> GradientTransformation:
    """Centered RMSProp's direction: `g / sqrt(nu - mu**2 + eps)`."""

    def init(params: Any) -> ScaleByRStdDevState:
        return ScaleByRStdDevState(_zeros_tree(params), pytree.tree_map(
            lambda p: anp.full_like(p, initial_scale), params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        mu = pytree.tree_map(lambda g, m: _like(decay, g) * m + _like(1 - decay, g) * g,
                             updates, state.mu)
        nu = pytree.tree_map(lambda g, v: _like(decay, g) * v + _like(1 - decay, g) * (g * g),
                             updates, state.nu)
        out = pytree.tree_map(lambda g, m, v: g / anp.sqrt(v - m * m + _like(eps, v)),
                              updates, mu, nu)
        return out, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value: float = 0.1,
                 eps: float = 1e-7) -> GradientTransformation:
    """Adagrad's direction: `g / sqrt(sum of g**2 + eps)` (0 where the sum is 0)."""

    def init(params: Any) -> ScaleByRssState:
        return ScaleByRssState(pytree.tree_map(
            lambda p: anp.full_like(p, initial_accumulator_value), params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        acc = pytree.tree_map(lambda g, s: s + g * g, updates, state.sum_of_squares)

        def one(g: Any, s: Any) -> Any:
            return anp.where(s > 0, g / anp.sqrt(s + _like(eps, s)), anp.zeros_like(g))

        return pytree.tree_map(one, updates, acc), ScaleByRssState(acc)

    return GradientTransformation(init, update)


def add_decayed_weights(weight_decay: float = 0.0,
                        mask: Any = None) -> GradientTransformation:
    """`updates + weight_decay * params` (decoupled weight decay, AdamW).

    `mask`, optional, is a pytree of Python bools shaped like the parameters
    (or a function of the parameters returning one): only leaves marked True
    decay.
    """

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise ValueError("optim.add_decayed_weights: update() needs the parameters "
                             "(call update(grads, state, params))")
        m = mask(params) if callable(mask) else mask
        if m is None:
            out = pytree.tree_map(lambda g, p: g + _like(weight_decay, g) * p, updates, params)
        else:
            out = pytree.tree_map(
                lambda g, p, on: g + _like(weight_decay, g) * p if on else g,
                updates, params, m)
        return out, state

    return GradientTransformation(_no_state, update)


# --------------------------------------------------------------------------- optimizers

def sgd(learning_rate: ScalarOrSchedule, momentum: float | None = None,
        nesterov: bool = False) -> GradientTransformation:
    """Stochastic gradient descent, with (Nesterov) momentum when `momentum` is given."""
    _check_schedule_value(learning_rate, "sgd")
    parts = [] if momentum is None else [trace(momentum, nesterov)]
    return chain(*parts, scale_by_learning_rate(learning_rate))


def adam(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8, eps_root: float = 0.0) -> GradientTransformation:
    """Adam (Kingma & Ba 2015)."""
    _check_schedule_value(learning_rate, "adam")
    return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, eps_root: float = 0.0, weight_decay: float = 1e-4,
          mask: Any = None) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019):
    `p -= lr * (adam_direction + weight_decay * p)`."""
    _check_schedule_value(learning_rate, "adamw")
    return chain(scale_by_adam(b1, b2, eps, eps_root),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: ScalarOrSchedule, decay: float = 0.9, eps: float = 1e-8,
            initial_scale: float = 0.0, centered: bool = False,
            momentum: float | None = None, nesterov: bool = False) -> GradientTransformation:
    """RMSProp (Tieleman & Hinton), centered (Graves 2013) when `centered`."""
    _check_schedule_value(learning_rate, "rmsprop")
    direction = (scale_by_stddev if centered else scale_by_rms)(decay, eps, initial_scale)
    parts = [direction, scale_by_learning_rate(learning_rate)]
    if momentum is not None:
        parts.append(trace(momentum, nesterov))
    return chain(*parts)


def adagrad(learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1,
            eps: float = 1e-7) -> GradientTransformation:
    """Adagrad (Duchi, Hazan & Singer 2011)."""
    _check_schedule_value(learning_rate, "adagrad")
    return chain(scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate))


# --------------------------------------------------------------------------- schedules
# A schedule maps the step count (a Python int, or an int scalar array, traced
# or not) to a float value; all are written with anp, so they trace.

def constant_schedule(value: float) -> Schedule:
    return lambda count: anp.full_like(anp.asarray(count, dtype=anp.float64), value)


def exponential_decay(init_value: float, transition_steps: int, decay_rate: float,
                      transition_begin: int = 0, staircase: bool = False,
                      end_value: float | None = None) -> Schedule:
    """`init_value * decay_rate ** ((count - transition_begin) / transition_steps)`
    (the exponent floored when `staircase`), `init_value` before `transition_begin`,
    bounded by `end_value` when given."""
    if transition_steps <= 0:
        raise ValueError("optim.exponential_decay: transition_steps must be positive")

    def schedule(count: Any) -> Any:
        t = anp.maximum(anp.asarray(count, dtype=anp.float64) - transition_begin, 0.0)
        p = t / transition_steps
        if staircase:
            p = anp.floor(p)
        v = init_value * anp.power(decay_rate, p)
        if end_value is not None:
            v = (anp.maximum(v, end_value) if decay_rate < 1 else anp.minimum(v, end_value))
        return v

    return schedule


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0,
                          exponent: float = 1.0) -> Schedule:
    """Cosine decay (Loshchilov & Hutter, SGDR) from `init_value` to
    `alpha * init_value` over `decay_steps`, constant after."""
    if decay_steps <= 0:
        raise ValueError("optim.cosine_decay_schedule: decay_steps must be positive")

    def schedule(count: Any) -> Any:
        t = anp.minimum(anp.asarray(count, dtype=anp.float64), float(decay_steps))
        cosine = 0.5 * (1.0 + anp.cos(np.pi * t / decay_steps))
        return init_value * ((1.0 - alpha) * anp.power(cosine, exponent) + alpha)

    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
    """From `init_value` to `end_value` linearly over `transition_steps` steps,
    starting at `transition_begin`; constant outside."""
    if transition_steps <= 0:
        raise ValueError("optim.linear_schedule: transition_steps must be positive")

    def schedule(count: Any) -> Any:
        t = anp.clip(anp.asarray(count, dtype=anp.float64) - transition_begin,
                     0.0, float(transition_steps))
        return init_value + (end_value - init_value) * (t / transition_steps)

    return schedule


def piecewise_constant_schedule(init_value: float,
                                boundaries_and_scales: dict[int, float] | None = None
                                ) -> Schedule:
    """`init_value` times the product of the scales of all boundaries <= count."""
    items = sorted((boundaries_and_scales or {}).items())

    def schedule(count: Any) -> Any:
        c = anp.asarray(count, dtype=anp.float64)
        v = anp.full_like(c, init_value)
        for boundary, s in items:
            v = anp.where(c >= boundary, v * s, v)
        return v

    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """`schedules[i]` from `boundaries[i - 1]` on, counting from 0 again there."""
    if len(boundaries) != len(schedules) - 1:
        raise ValueError(f"optim.join_schedules: {len(schedules)} schedules need "
                         f"{len(schedules) - 1} boundaries, got {len(boundaries)}")

    def schedule(count: Any) -> Any:
        c = anp.asarray(count, dtype=anp.float64)
        v = anp.asarray(schedules[0](count), dtype=anp.float64)
        for s, b in zip(schedules[1:], boundaries):
            v = anp.where(c >= b, anp.asarray(s(c - b), dtype=anp.float64), v)
        return v

    return schedule


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int,
                                 decay_steps: int, end_value: float = 0.0,
                                 exponent: float = 1.0) -> Schedule:
    """Linear warm-up from `init_value` to `peak_value` over `warmup_steps`, then
    cosine decay to `end_value` at step `decay_steps` (counted from 0, warm-up
    included)."""
    if decay_steps <= warmup_steps:
        raise ValueError("optim.warmup_cosine_decay_schedule: decay_steps must exceed "
                         "warmup_steps")
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    warm = (linear_schedule(init_value, peak_value, warmup_steps) if warmup_steps > 0
            else constant_schedule(peak_value))
    return join_schedules(
        [warm, cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
        [warmup_steps])


__all__ = [
    "EmptyState",
    "GradientTransformation",
    "ScaleByAdamState",
    "ScaleByRStdDevState",
    "ScaleByRmsState",
    "ScaleByRssState",
    "ScaleByScheduleState",
    "TraceState",
    "adagrad",
    "adam",
    "adamw",
    "add_decayed_weights",
    "apply_updates",
    "chain",
    "clip",
    "clip_by_global_norm",
    "constant_schedule",
    "cosine_decay_schedule",
    "exponential_decay",
    "global_norm",
    "identity",
    "join_schedules",
    "linear_schedule",
    "piecewise_constant_schedule",
    "rmsprop",
    "scale",
    "scale_by_adam",
    "scale_by_learning_rate",
    "scale_by_rms",
    "scale_by_rss",
    "scale_by_schedule",
    "scale_by_stddev",
    "sgd",
    "trace",
    "warmup_cosine_decay_schedule",
]
