"""`mlir_autodiff.example_libraries.optimizers`: optimizers as
`(init_fun, update_fun, get_params)` triples, with jax.example_libraries.optimizers'
conventions.

    opt_init, opt_update, get_params = optimizers.momentum(step_size=0.1, mass=0.9)
    opt_state = opt_init(params)                 # params: any pytree of arrays
    opt_state = opt_update(i, grads, opt_state)  # i: the step number (may be traced)
    params = get_params(opt_state)

`step_size` is a number or a schedule, a function of the step number
(`constant`, `exponential_decay`, `inverse_time_decay`, `polynomial_decay`,
`piecewise_constant`). The state (`OptimizerState`) is a pytree: it passes
through `jit`, `grad` and `vmap` and comes back from a jitted update. An
optimizer is written for one array (`@optimizer` lifts it to pytrees): its
per-array state is an array or a tuple of arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .. import numpy as anp
from ..tree_util import register_pytree_node, tree_flatten, tree_leaves, tree_unflatten

__all__ = [
    "OptimizerState", "adagrad", "adam", "adamax", "clip_grads", "constant",
    "exponential_decay", "inverse_time_decay", "l2_norm", "make_schedule", "momentum",
    "nesterov", "optimizer", "piecewise_constant", "polynomial_decay", "rmsprop",
    "rmsprop_momentum", "sgd",
]

Schedule = Callable[[Any], Any]


class OptimizerState:
    """The per-array states of an optimizer (a tuple, one per parameter leaf) and the
    tree structure of the parameters; a pytree whose leaves are the state arrays."""

    __slots__ = ("states", "tree_def")

    def __init__(self, states: tuple[Any, ...], tree_def: Any) -> None:
        self.states = tuple(states)
        self.tree_def = tree_def

    def __repr__(self) -> str:
        return f"OptimizerState({len(self.states)} parameter arrays, {self.tree_def})"


register_pytree_node(OptimizerState, lambda s: ((s.states,), s.tree_def),
                     lambda tree_def, children: OptimizerState(children[0], tree_def))


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]) -> Callable:
    """Lift an optimizer written for one array, `opt_maker(*args) -> (init(x0) -> state,
    update(i, g, state) -> state, get_params(state) -> x)`, to pytrees of arrays."""
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args: Any, **kwargs: Any) -> tuple[Callable, Callable, Callable]:
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree: Any) -> OptimizerState:
            leaves, tree_def = tree_flatten(x0_tree)
            return OptimizerState(tuple(init(anp.asarray(x)) for x in leaves), tree_def)

        @functools.wraps(update)
        def tree_update(i: Any, grad_tree: Any, opt_state: OptimizerState) -> OptimizerState:
            grads, tree_def = tree_flatten(grad_tree)
            if tree_def != opt_state.tree_def:
                raise TypeError(f"optimizers: the gradient tree {tree_def} does not match "
                                f"the parameter tree {opt_state.tree_def}")
            return OptimizerState(tuple(update(i, g, s) for g, s in zip(grads, opt_state.states)),
                                  tree_def)

        @functools.wraps(get_params)
        def tree_get_params(opt_state: OptimizerState) -> Any:
            return tree_unflatten(opt_state.tree_def,
                                  [get_params(s) for s in opt_state.states])

        return tree_init, tree_update, tree_get_params
    return tree_opt_maker


# --------------------------------------------------------------------------- optimizers

@optimizer
def sgd(step_size: float | Schedule) -> tuple[Callable, Callable, Callable]:
    """Gradient descent: x <- x - step_size(i) * g."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x
    return init, update, get_params


@optimizer
def momentum(step_size: float | Schedule, mass: float) -> tuple[Callable, Callable, Callable]:
    """Heavy-ball momentum: v <- mass * v + g; x <- x - step_size(i) * v."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def nesterov(step_size: float | Schedule, mass: float) -> tuple[Callable, Callable, Callable]:
    """Nesterov momentum: v <- mass * v + g; x <- x - step_size(i) * (mass * v + g)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9
            ) -> tuple[Callable, Callable, Callable]:
    """Adagrad with momentum on the scaled gradient g / sqrt(sum of g^2)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0), anp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + anp.square(g)
        positive = g_sq > 0
        root = anp.where(positive, anp.sqrt(anp.where(positive, g_sq, 1.0)), 0.0)
        scaled = anp.where(positive, g / anp.where(positive, root, 1.0), 0.0)
        m = (1.0 - momentum) * scaled + momentum * m
        return x - step_size(i) * m, g_sq, m

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8
            ) -> tuple[Callable, Callable, Callable]:
    """RMSProp: a <- gamma * a + (1 - gamma) * g^2; x <- x - step_size(i) * g / sqrt(a + eps)."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq = state
        avg_sq = gamma * avg_sq + (1.0 - gamma) * anp.square(g)
        return x - step_size(i) * g / anp.sqrt(avg_sq + eps), avg_sq

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def rmsprop_momentum(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8,
                     momentum: float = 0.9) -> tuple[Callable, Callable, Callable]:
    """RMSProp whose scaled step accumulates in a momentum term."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0), anp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq, mom = state
        avg_sq = gamma * avg_sq + (1.0 - gamma) * anp.square(g)
        mom = momentum * mom + step_size(i) * g / anp.sqrt(avg_sq + eps)
        return x - mom, avg_sq, mom

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def adam(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
         ) -> tuple[Callable, Callable, Callable]:
    """Adam (Kingma and Ba, 2015), with bias-corrected moments at step i + 1."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0), anp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1.0 - b1) * g + b1 * m
        v = (1.0 - b2) * anp.square(g) + b2 * v
        t = anp.asarray(i + 1, m.dtype)
        m_hat = m / (1.0 - b1 ** t)
        v_hat = v / (1.0 - b2 ** t)
        return x - step_size(i) * m_hat / (anp.sqrt(v_hat) + eps), m, v

    def get_params(state):
        return state[0]
    return init, update, get_params


@optimizer
def adamax(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
           ) -> tuple[Callable, Callable, Callable]:
    """AdaMax, Adam's infinity-norm variant."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, anp.zeros_like(x0), anp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1.0 - b1) * g + b1 * m
        u = anp.maximum(b2 * u, anp.abs(g))
        t = anp.asarray(i + 1, m.dtype)
        return x - (step_size(i) / (1.0 - b1 ** t)) * m / (u + eps), m, u

    def get_params(state):
        return state[0]
    return init, update, get_params


# --------------------------------------------------------------------------- schedules

def constant(step_size: float) -> Schedule:
    def schedule(i):
        return step_size
    return schedule


def exponential_decay(step_size: float, decay_steps: float, decay_rate: float) -> Schedule:
    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)
    return schedule


def inverse_time_decay(step_size: float, decay_steps: float, decay_rate: float,
                       staircase: bool = False) -> Schedule:
    def schedule(i):
        t = anp.floor(i / decay_steps) if staircase else i / decay_steps
        return step_size / (1 + decay_rate * t)
    return schedule


def polynomial_decay(step_size: float, decay_steps: int, final_step_size: float,
                     power: float = 1.0) -> Schedule:
    def schedule(i):
        i = anp.minimum(i, decay_steps)
        return (step_size - final_step_size) * (1 - i / decay_steps) ** power + final_step_size
    return schedule


def piecewise_constant(boundaries: Sequence[float], values: Sequence[float]) -> Schedule:
    """values[k] for boundaries[k-1] <= i < boundaries[k] (values has one more entry)."""
    boundaries = anp.asarray(list(boundaries))
    values = anp.asarray(list(values))
    if values.shape[0] != boundaries.shape[0] + 1:
        raise ValueError("piecewise_constant: values must have one more entry than "
                         "boundaries")

    def schedule(i):
        return values[anp.sum(i > boundaries)]
    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule as it is, a number as a constant schedule."""
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if anp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(f"optimizers: step_size must be a number or a schedule, got "
                    f"{type(scalar_or_schedule).__name__}")


# --------------------------------------------------------------------------- utilities

def l2_norm(tree: Any) -> Any:
    """The L2 norm of all the leaves of a pytree together."""
    leaves = tree_leaves(tree)
    return anp.sqrt(sum(anp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """The gradient tree scaled down to L2 norm `max_norm` if it is longer."""
    norm = l2_norm(grad_tree)
    factor = anp.where(norm < max_norm, 1.0, max_norm / norm)
    return _scale_tree(grad_tree, factor)


def _scale_tree(tree: Any, factor: Any) -> Any:
    leaves, tree_def = tree_flatten(tree)
    return tree_unflatten(tree_def, [g * factor for g in leaves])
