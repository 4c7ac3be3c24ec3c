"""Custom derivative rules: `custom_vjp` and `custom_jvp` (JAX semantics).

`Function` (custom_function.py) builds on `custom_vjp_call`; the machinery all
custom functions share is in custom_core.py, batching rules in custom_vmap.py,
`checkpoint`, `checkpoint_name` and `print_saved_residuals` in checkpointing.py.

Like every transform here, these only *emit* IR; the passes differentiate.

- `custom_vjp` / `custom_jvp` (JAX semantics) and `Function` (torch.autograd.Function
  semantics) trace the primal function and the rule functions into their own
  `func.func`s and mark the primal with the function attributes listed in the README,
  `autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}` and
  `autodiff.custom_jvp = @f_jvp`; the call site is a plain `func.call @f`. So the
  rules apply wherever `@f` is differentiated, under `jit`, `grad`, `jvp`, `vmap`,
  `hessian` in any nesting. Composition beyond JAX: forward mode of a function with
  only a custom VJP differentiates the primal body; reverse mode of one with only a
  custom JVP transposes the JVP rule (as JAX does); higher orders differentiate the
  rule functions themselves.
- Under vmap the passes batch the rules with the function: the batched function
  carries batched custom_vjp/custom_jvp rules, so grad of vmap uses them.
  `Function.vmap` (torch.func's batching rule) becomes `autodiff.custom_vmap`,
  traced for the innermost enclosing vmap level (`batching.VmapLevel`).
- Values a rule closes over (traced values of an enclosing function) become extra
  arguments of the generated functions; they are treated as constants of the rule:
  no derivative flows to them (as in JAX, where closing over a differentiated value
  inside custom_vjp is an error; use an explicit argument instead).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import pytree
from .custom_core import (
    EagerCache,
    Primal,
    RngPin,
    argnums,
    caps_with,
    emit_custom,
    fun_name,
    is_float,
    jvp_rule_function,
    leaf_like,
    reentrant_call,
    split_args,
    trace_primal,
    tracing_rules,
    unique_captures,
    vjp_rule_functions,
)
from .custom_vmap import VmapSpec, trace_vmap_rule, vmap_rule_function
from .dialects.vocabulary import CUSTOM_JVP, CUSTOM_VJP, CUSTOM_VMAP
from .tracing import ShapedArray, TracedFunction, Tracer, as_tracer, current_trace, trace_function


def _zeros(aval: ShapedArray) -> Tracer:
    return as_tracer(np.zeros(aval.shape, aval.dtype))


def _grads_tree(g: Any, diff: tuple[Any, ...], avals: list[ShapedArray], who: str
                ) -> list[Tracer]:
    """bwd's output (one entry per differentiable argument, None = zero) as flat leaves."""
    if not isinstance(g, (tuple, list)):
        raise TypeError(f"{who}: the bwd rule must return a tuple with one cotangent per "
                        f"differentiable argument ({len(diff)}), got {type(g).__name__}")
    if len(g) != len(diff):
        raise TypeError(f"{who}: the bwd rule returned {len(g)} cotangent(s) for "
                        f"{len(diff)} differentiable argument(s)")
    leaves: list[Tracer] = []
    it = iter(avals)
    for k, (gk, arg) in enumerate(zip(g, diff)):
        tree = pytree.tree_structure(arg)
        arg_avals = [next(it) for _ in range(tree.num_leaves)]
        if gk is None:
            leaves += [_zeros(a) for a in arg_avals]
            continue
        gl, gt = pytree.tree_flatten(gk)
        if gt != tree:
            raise TypeError(f"{who}: the cotangent of argument {k} has structure {gt}, "
                            f"expected {tree}")
        for j, (x, a) in enumerate(zip(gl, arg_avals)):
            leaves.append(_zeros(a) if not is_float(a.dtype) else
                          leaf_like(x, a, who, f"the cotangent of argument {k} (leaf {j})"))
    return leaves


# --------------------------------------------------------------------------- custom_vjp


class custom_vjp:
    """A function with a user-defined reverse-mode rule (JAX's `jax.custom_vjp`).

        @ad.custom_vjp
        def clip_gradient(x):
            return x
        def fwd(x):
            return x, None                  # (output, residuals)
        def bwd(res, g):
            return (anp.clip(g, -1, 1),)    # one entry per input; None = zero
        clip_gradient.defvjp(fwd, bwd)

    `nondiff_argnums` arguments are passed to `fwd` in place and to `bwd` first
    (`bwd(*nondiff, residuals, cts)`); they get no cotangent.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._eager = EagerCache(self)

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the rule: `fwd(*args) -> (out, residuals)`, `bwd(residuals, ct) -> tuple`."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        name = fun_name(self.fun)
        if self.fwd is None or self.bwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        nondiff = argnums(self.nondiff_argnums, len(args), f"custom_vjp({name})")
        if current_trace() is None:
            return self._eager(args, nondiff)
        return custom_vjp_call(self.fun, self.fwd, self.bwd, args, nondiff, name,
                               key=self)


def custom_vjp_call(fun: Callable[..., Any], fwd: Callable[..., Any],
                    bwd: Callable[..., Any], args: tuple[Any, ...], nondiff: tuple[int, ...],
                    name: str, jvp: Callable[..., Any] | None = None,
                    key: Any = None, vmap: VmapSpec | None = None) -> Any:
    who = f"custom_vjp({name})"
    again = reentrant_call(key, fun, args, nondiff, name)
    if again is not None:
        return again
    diff, static, merge = split_args(args, nondiff)
    p = trace_primal(lambda *d: fun(*merge(d)), diff, name, key, static)
    with tracing_rules(key, p, static):
        return _custom_vjp_rules(p, fwd, bwd, static, merge, diff, name, who, jvp, vmap)


def _custom_vjp_rules(p: Primal, fwd: Callable[..., Any], bwd: Callable[..., Any],
                      static: list[Any], merge: Callable[[Sequence[Any]], list[Any]],
                      diff: tuple[Any, ...], name: str, who: str,
                      jvp: Callable[..., Any] | None, vmap: VmapSpec | None = None) -> Any:
    trees: dict[str, pytree.TreeDef] = {}

    def fwd_flat(*d: Any) -> Any:
        r = fwd(*merge(d))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the fwd rule must return a pair (output, residuals)")
        out, res = r
        out_leaves, trees["out"] = pytree.tree_flatten(out)
        res_leaves, trees["res"] = pytree.tree_flatten(res)
        if trees["out"] != p.fn.out_tree:
            raise TypeError(f"{who}: the fwd rule's output has structure {trees['out']}, but "
                            f"the function's has {p.fn.out_tree}")
        outs = [leaf_like(x, a, who, f"output leaf {i} of the fwd rule")
                for i, (x, a) in enumerate(zip(out_leaves, p.fn.out_avals))]
        return outs, [as_tracer(x) for x in res_leaves]

    fwd_fn = trace_function(fwd_flat, p.avals, p.in_tree, name=f"{name}_fwd_rule")
    n_out = len(p.fn.out_avals)
    res_avals = fwd_fn.out_avals[n_out:]
    ct_avals = [a.strong() for a in p.fn.out_avals]

    def bwd_flat(*flat: Any) -> Any:
        res = pytree.tree_unflatten(trees["res"], flat[: len(res_avals)])
        cts = pytree.tree_unflatten(p.fn.out_tree, flat[len(res_avals):])
        return _grads_tree(bwd(*static, res, cts), diff, p.avals, who)

    bwd_fn = trace_function(bwd_flat, [a.strong() for a in res_avals] + ct_avals,
                            name=f"{name}_bwd_rule")
    jvp_fn = _trace_jvp_rule(p, jvp, static, name) if jvp is not None else None
    vmap_fn, out_axes = trace_vmap_rule(p, vmap, name) if vmap is not None else (None, [])
    caps = unique_captures(p.fn, fwd_fn, bwd_fn, *([jvp_fn] if jvp_fn else []),
                           *([vmap_fn] if vmap_fn else []))
    rng = RngPin.of([p.fn, fwd_fn, bwd_fn, jvp_fn, vmap_fn])
    caps = caps_with(caps, rng)
    with p.trace.context, p.loc:
        vjp_attr, caps = vjp_rule_functions(p, name, fwd_fn, bwd_fn, caps, rng)
        attrs = {CUSTOM_VJP: vjp_attr}
        if jvp_fn is not None:
            attrs[CUSTOM_JVP] = jvp_rule_function(p, name, jvp_fn, caps, rng)
        if vmap_fn is not None:
            attrs[CUSTOM_VMAP] = vmap_rule_function(p, name, vmap, vmap_fn,
                                                               out_axes, caps, rng)
        return emit_custom(p, name, caps, attrs, rng)


# --------------------------------------------------------------------------- custom_jvp


def _trace_jvp_rule(p: Primal, rule: Callable[..., Any], static: list[Any], name: str
                    ) -> TracedFunction:
    """Trace `rule(*static, primals, tangents) -> (out, tangent_out)` into a function
    (primal leaves..., tangent leaves...) -> (out leaves..., tangent leaves...)."""
    who = f"custom_jvp({name})"
    n = len(p.avals)

    def jvp_flat(*flat: Any) -> Any:
        primals = pytree.tree_unflatten(p.in_tree, flat[:n])
        tangents = pytree.tree_unflatten(p.in_tree, flat[n:])
        r = rule(*static, tuple(primals), tuple(tangents))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the jvp rule must return a pair (primal_out, tangent_out)")
        out, tan = r
        ol, ot = pytree.tree_flatten(out)
        tl, tt = pytree.tree_flatten(tan)
        if ot != p.fn.out_tree or tt != p.fn.out_tree:
            raise TypeError(f"{who}: the jvp rule's primal and tangent outputs must have the "
                            f"function's output structure {p.fn.out_tree}, got {ot} and {tt}")
        outs = [leaf_like(x, a, who, f"primal output leaf {i}")
                for i, (x, a) in enumerate(zip(ol, p.fn.out_avals))]
        tans = [leaf_like(x, a, who, f"tangent output leaf {i}")
                for i, (x, a) in enumerate(zip(tl, p.fn.out_avals))]
        return outs, tans

    return trace_function(jvp_flat, [a.strong() for a in p.avals] * 2,
                          name=f"{name}_jvp_rule")


class custom_jvp:
    """A function with a user-defined forward-mode rule (JAX's `jax.custom_jvp`).

        @ad.custom_jvp
        def log1pexp(x):
            return anp.log1p(anp.exp(x))

        @log1pexp.defjvp
        def log1pexp_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return log1pexp(x), t * (1 - 1 / (1 + anp.exp(x)))

    Reverse mode transposes the rule (it must be linear in the tangents).
    `nondiff_argnums` arguments are passed to the rule first: `rule(*nondiff,
    primals, tangents)` with the other arguments in `primals`.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable[..., Any] | None = None
        self._eager = EagerCache(self)

    def defjvp(self, jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Set the rule `jvp(primals, tangents) -> (primal_out, tangent_out)`; returns it."""
        self.jvp = jvp
        return jvp

    def __call__(self, *args: Any) -> Any:
        name = fun_name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        nondiff = argnums(self.nondiff_argnums, len(args), f"custom_jvp({name})")
        if current_trace() is None:
            return self._eager(args, nondiff)
        again = reentrant_call(self, self.fun, args, nondiff, name)
        if again is not None:
            return again
        diff, static, merge = split_args(args, nondiff)
        p = trace_primal(lambda *d: self.fun(*merge(d)), diff, name, self, static)
        with tracing_rules(self, p, static):
            jvp_fn = _trace_jvp_rule(p, self.jvp, static, name)
        caps = unique_captures(p.fn, jvp_fn)
        rng = RngPin.of([p.fn, jvp_fn])
        caps = caps_with(caps, rng)
        with p.trace.context, p.loc:
            attr = jvp_rule_function(p, name, jvp_fn, caps, rng)
            return emit_custom(p, name, caps, {CUSTOM_JVP: attr}, rng)


__all__ = ["custom_jvp", "custom_vjp"]
