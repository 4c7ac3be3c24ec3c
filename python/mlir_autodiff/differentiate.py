"""The grad family: `grad`, `value_and_grad`, `vjp`, `jvp`, `jacfwd`, `jacrev`, `hessian`.

These follow JAX's semantics and pytree conventions, but the Python side
never differentiates: each transform traces the function into its own
`func.func`, emits an `autodiff.vjp` / `autodiff.jvp` op naming it, and the
`--autodiff-vjp` / `--autodiff-jvp` passes generate the derivative code when
the enclosing `jit` compiles. Called outside a trace, a transform compiles
itself with `jit` (cached per signature), so `ad.grad(f)(x)` works eagerly.

Nesting works because a traced sub-function may itself contain autodiff
ops (the passes lower inner ops first): `grad(grad(f))`, `jvp(grad(f))`
(Hessian-vector products), `hessian = jacfwd(jacrev(f))`.

`jacfwd`/`jacrev` are one `vmap` of a jvp / of a pullback over the standard
basis of all input / output leaves together: one batched call, not a loop of
calls, whatever the pytrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import dialects, pytree, random
from . import numpy as anp
from .api import JitFunction, bind_static, function_name, static_positions, traced_or_jitted
from .batching import vmap
from .dialects.vocabulary import PREFIX
from .tracing import (
    ShapedArray,
    TracedFunction,
    Tracer,
    as_tracer,
    current_trace,
    emit_call,
    is_float_dtype,
    require_trace,
    trace_function,
)


def _is_float(dtype: np.dtype) -> bool:
    return is_float_dtype(dtype)


_name = function_name
_eager = traced_or_jitted


def _flat_tracers(tree: Any) -> tuple[list[Tracer], pytree.TreeDef]:
    leaves, treedef = pytree.tree_flatten(tree)
    return [as_tracer(x) for x in leaves], treedef


def _trace(fun: Callable[..., Any], args: tuple[Any, ...]) -> tuple[TracedFunction, list[Tracer]]:
    """Trace `fun(*args)` into a private function; returns it and the flat arg tracers."""
    tracers, in_tree = _flat_tracers(args)
    avals = [t.aval for t in tracers]
    return trace_function(fun, avals, in_tree, name=_name(fun)), tracers


def _ones(aval: ShapedArray) -> Tracer:
    return as_tracer(np.ones(aval.shape, aval.dtype))


def _zeros(aval: ShapedArray) -> Tracer:
    return as_tracer(np.zeros(aval.shape, aval.dtype))


def _emit(kind: str, fn: TracedFunction, primals: Sequence[Tracer], extra: Sequence[Tracer],
          result_avals: Sequence[ShapedArray], wrt: Sequence[int] | None = None) -> list[Tracer]:
    """Emit `autodiff.<kind> {fn}` on (primals + captures, extra) in the active trace."""
    trace = require_trace(PREFIX + kind)
    ops = [trace.lift(t) for t in list(primals) + list(fn.captures)]
    rest = [trace.lift(t) for t in extra]
    if kind == "jvp":  # captured values are constants of the transform: zero tangents
        rest += [trace.lift(_zeros(c.aval.strong())) for c in fn.captures]
    with trace.emitting():
        types = [a.mlir_type() for a in result_avals]
        if kind == "vjp":
            op = dialects.VjpOp(types, [o.value for o in ops], [r.value for r in rest],
                                fn.symbol, wrt)
        else:
            op = dialects.JvpOp(types, [o.value for o in ops], [r.value for r in rest],
                                fn.symbol)
    return [trace.wrap(v, a.strong()) for v, a in zip(op.results, result_avals)]


# --------------------------------------------------------------------------- reverse mode

def _argnums_tuple(argnums: int | Sequence[int], nargs: int, who: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError(f"{who}: argnums must not be empty")
    out = []
    for i in nums:
        j = i + nargs if i < 0 else i
        if not 0 <= j < nargs:
            raise ValueError(
                f"{who}: argnums {i} is out of range for a call with {nargs} positional "
                "argument(s)"
            )
        out.append(j)
    return tuple(out)


def _leaf_ranges(args: tuple[Any, ...]) -> list[range]:
    """For each positional argument, the range of its leaves in the flat argument list."""
    ranges, start = [], 0
    for a in args:
        n = len(pytree.tree_leaves(a))
        ranges.append(range(start, start + n))
        start += n
    return ranges


def _static_outside(argnums: int | Sequence[int], who: str
                    ) -> Callable[[tuple[Any, ...]], tuple[int, ...]]:
    """The arguments an argnums transform passes through unchanged: plain Python
    values outside `argnums` (jax's behaviour: `grad(f)(x, 4)` calls `f` with the
    int 4, not a traced scalar)."""
    def static(args: tuple[Any, ...]) -> tuple[int, ...]:
        return static_positions(args, _argnums_tuple(argnums, len(args), who))
    return static


def value_and_grad(fun: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable[..., Any]:
    """`fun`'s value and its gradient w.r.t. the `argnums` positional arguments.

    `fun` must return a float scalar (or `(scalar, aux)` with `has_aux=True`).
    Returns `(value, grads)` or `((value, aux), grads)`; `grads` has the
    structure of `args[argnums]` (a tuple of them when argnums is a tuple).
    """
    who = f"value_and_grad({_name(fun)})"

    static = _static_outside(argnums, who)

    def transform(*args: Any) -> Any:
        nums = _argnums_tuple(argnums, len(args), who)
        fixed = static(args)
        f = fun
        if fixed:  # plain Python values reach `fun` as they are, never traced
            f, args = bind_static(fun, args, fixed)
            nums = tuple(n - sum(i < n for i in fixed) for n in nums)
        fn, tracers = _trace(f, args)
        out_leaves = fn.out_avals
        if has_aux:
            if fn.out_tree.kind not in ("tuple", "list") or len(fn.out_tree.children) != 2:
                raise TypeError(f"{who}: with has_aux=True the function must return a pair "
                                "(output, aux)")
            main_tree = fn.out_tree.children[0]
        else:
            main_tree = fn.out_tree
        ranges = _leaf_ranges(args)
        wrt = [i for n in nums for i in ranges[n]]
        for i in wrt:
            if not _is_float(tracers[i].dtype):
                raise TypeError(
                    f"{who}: grad requires real-valued inputs (float dtypes), but argument "
                    f"leaf {i} has dtype {tracers[i].dtype}; exclude it with argnums"
                )
        if not main_tree.is_leaf or out_leaves[0].shape != ():
            shape = out_leaves[0].shape if main_tree.is_leaf else "a pytree"
            raise TypeError(f"{who}: gradient only defined for scalar-output functions; "
                            f"the output had shape {shape}")
        if not _is_float(out_leaves[0].dtype):
            raise TypeError(f"{who}: gradient requires a real-valued (float) output, "
                            f"got {out_leaves[0].dtype}")
        cts = [_ones(out_leaves[0])] + [_zeros(a) for a in out_leaves[1:]]
        results = _emit("vjp", fn, tracers, cts,
                        list(out_leaves) + [tracers[i].aval for i in wrt], wrt)
        outs, grads = results[:len(out_leaves)], results[len(out_leaves):]
        value = pytree.tree_unflatten(fn.out_tree, outs)
        it = iter(grads)
        grad_trees = tuple(
            pytree.tree_unflatten(pytree.tree_structure(args[n]),
                                  [next(it) for _ in ranges[n]])
            for n in nums
        )
        return value, (grad_trees[0] if isinstance(argnums, int) else grad_trees)

    transform.__name__ = f"value_and_grad_{_name(fun)}"
    return _eager(transform, static)


def grad(fun: Callable[..., Any], argnums: int | Sequence[int] = 0,
         has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of a scalar function (JAX's `grad`): `grad(f)(x)` has `x`'s structure."""
    vg = value_and_grad(fun, argnums, has_aux)

    def g(*args: Any) -> Any:
        (value, grads) = vg(*args)
        if has_aux:
            return grads, value[1]
        return grads

    g.__name__ = f"grad_{_name(fun)}"
    return _eager(g, _static_outside(argnums, f"grad({_name(fun)})"))


def vjp(fun: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """`(out, vjp_fn)` (or `(out, vjp_fn, aux)`) with `vjp_fn(ct)` -> cotangents of `primals`.

    `vjp_fn` takes a cotangent with the structure of `out` and returns a tuple
    with one entry per primal. Non-float primal leaves get zero cotangents.
    """
    who = f"vjp({_name(fun)})"

    def split_aux(out: Any) -> tuple[Any, Any]:
        if not has_aux:
            return out, None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"{who}: with has_aux=True the function must return (output, aux)")
        return out[0], out[1]

    def primal_only(*args: Any) -> Any:
        return split_aux(fun(*args))[0]

    primal_only.__name__ = _name(fun)

    def pull(fn: TracedFunction, tracers: list[Tracer], args: tuple[Any, ...], ct: Any,
             out_tree: pytree.TreeDef) -> Any:
        """Emit `autodiff.vjp` of `fn` for cotangent `ct` of its first outputs (`out_tree`;
        any further outputs, the aux, get zero cotangents)."""
        ct_tracers, ct_tree = _flat_tracers(ct)
        if ct_tree != out_tree:
            raise TypeError(f"{who}: the cotangent's structure {ct_tree} does not match the "
                            f"output's {out_tree}")
        for c, a in zip(ct_tracers, fn.out_avals):
            if c.shape != a.shape or c.dtype != a.dtype:
                raise TypeError(f"{who}: cotangent {c.aval.str_short()} does not match the "
                                f"output {a.str_short()}")
        ct_tracers += [_zeros(a) for a in fn.out_avals[len(ct_tracers):]]
        wrt = [i for i, t in enumerate(tracers) if _is_float(t.dtype)]
        results = _emit("vjp", fn, tracers, ct_tracers,
                        list(fn.out_avals) + [tracers[i].aval for i in wrt], wrt)
        grads = dict(zip(wrt, results[len(fn.out_avals):]))
        leaves = [grads[i] if i in grads else _zeros(t.aval) for i, t in enumerate(tracers)]
        return tuple(pytree.tree_unflatten(pytree.tree_structure(args), leaves))

    def apply(args: tuple[Any, ...], ct: Any) -> Any:
        fn, tracers = _trace(primal_only, args)
        return pull(fn, tracers, args, ct, fn.out_tree)

    apply.__name__ = f"vjp_{_name(fun)}"
    apply_eager = _eager(apply)

    if current_trace() is not None:
        # One traced function serves the primal call and every pullback. Two uses of a
        # function that draws would draw different numbers; pin_draws ties its draws
        # to one key drawn here, so each pullback replays the primal's numbers.
        fn, tracers = _trace(fun, primals)
        random.pin_draws(fn)
        out, aux = split_aux(pytree.tree_unflatten(fn.out_tree, emit_call(fn, tracers)))
        out_tree = fn.out_tree.children[0] if has_aux else fn.out_tree

        def traced_vjp_fn(ct: Any) -> Any:
            return pull(fn, tracers, primals, ct, out_tree)

        return (out, traced_vjp_fn, aux) if has_aux else (out, traced_vjp_fn)

    before = random.get_state()  # the pullback's recomputed forward replays these draws
    out, aux = split_aux(JitFunction(fun)(*primals))

    def vjp_fn(ct: Any) -> Any:
        now = random.get_state()
        random.set_state(before)
        try:
            return apply_eager(primals, ct)
        finally:
            random.set_state(now)

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


# --------------------------------------------------------------------------- forward mode

def jvp(fun: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any],
        has_aux: bool = False) -> Any:
    """`(out, tangent_out)`: `fun(*primals)` and its directional derivative along `tangents`."""
    who = f"jvp({_name(fun)})"
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(f"{who}: primals and tangents must be tuples or lists")
    if len(primals) != len(tangents):
        raise TypeError(f"{who}: {len(primals)} primal(s) but {len(tangents)} tangent(s)")

    def transform(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
        fn, tracers = _trace(fun, tuple(primals))
        t_tracers, t_tree = _flat_tracers(tuple(tangents))
        if t_tree != pytree.tree_structure(tuple(primals)):
            raise TypeError(f"{who}: tangents' structure does not match the primals'")
        for i, (p, t) in enumerate(zip(tracers, t_tracers)):
            if p.shape != t.shape or (p.dtype != t.dtype and not t.weak_type):
                raise TypeError(f"{who}: tangent leaf {i} is {t.aval.str_short()} but its "
                                f"primal is {p.aval.str_short()}")
        t_tracers = [as_tracer(t, p.dtype) if t.dtype != p.dtype else t
                     for p, t in zip(tracers, t_tracers)]
        outs = _emit("jvp", fn, tracers, t_tracers, list(fn.out_avals) * 2)
        n = len(fn.out_avals)
        out = pytree.tree_unflatten(fn.out_tree, outs[:n])
        tan = pytree.tree_unflatten(fn.out_tree, outs[n:])
        if has_aux:
            return out[0], tan[0], out[1]
        return out, tan

    transform.__name__ = f"jvp_{_name(fun)}"
    return _eager(transform)(tuple(primals), tuple(tangents))


def stop_gradient(x: Any) -> Any:
    """`x` with a zero derivative (`autodiff.stop_gradient` on every leaf)."""
    if current_trace() is None:
        return pytree.tree_map(np.asarray, x)

    def one(leaf: Any) -> Tracer:
        t = as_tracer(leaf)
        if not _is_float(t.dtype):
            return t
        trace = require_trace("stop_gradient")
        with trace.emitting():
            v = dialects.stop_gradient(t.value)
        return trace.wrap(v, t.aval)

    return pytree.tree_map(one, x)


# --------------------------------------------------------------------------- Jacobians

def _jac_setup(fun: Callable[..., Any], args: tuple[Any, ...], argnums: int | Sequence[int],
               has_aux: bool, who: str, kind: str
               ) -> tuple[tuple[Any, ...], Callable[..., Any], list[Tracer], pytree.TreeDef]:
    """What a Jacobian differentiates: `(dyn, f_part, leaves, dyn_tree)`.

    `dyn` are the `argnums` arguments, `f_part(*dyn)` is `fun` with the other
    arguments fixed (checking the `(output, aux)` pair when `has_aux`), `leaves`
    the flat tracers of `dyn` (float, else a TypeError as in jax) and `dyn_tree`
    the structure each output leaf's Jacobian has: the argument's, or a tuple of
    them when `argnums` is a tuple.
    """
    nums = _argnums_tuple(argnums, len(args), who)
    if len(set(nums)) != len(nums):
        raise ValueError(f"{who}: argnums {argnums} names an argument more than once")
    dyn = tuple(args[n] for n in nums)
    leaves, _ = _flat_tracers(dyn)
    for i, t in enumerate(leaves):
        if not _is_float(t.dtype):
            raise TypeError(
                f"{who}: {kind} requires real-valued inputs (float dtypes), but leaf {i} of "
                f"the differentiated arguments (argnums={argnums}) has dtype {t.dtype}; "
                f"exclude it with argnums, or use {'vjp' if kind == 'jacrev' else 'jvp'} "
                "directly"
            )
    dyn_tree = pytree.tree_structure(dyn if not isinstance(argnums, int) else dyn[0])

    def f_part(*dyn_args: Any) -> Any:
        full = list(args)
        for n, d in zip(nums, dyn_args):
            full[n] = d
        out = fun(*full)
        if has_aux and (not isinstance(out, (tuple, list)) or len(out) != 2):
            got = "an array" if isinstance(out, Tracer) else type(out).__name__
            raise TypeError(f"{who}: with has_aux=True the function must return a pair "
                            f"(output, aux), got {got}")
        return out

    f_part.__name__ = _name(fun)
    return dyn, f_part, leaves, dyn_tree


def _stacked_basis(avals: Sequence[ShapedArray]) -> tuple[list[np.ndarray], list[int]]:
    """The standard basis of the space of all `avals` together, one stacked array per
    leaf: leaf i gets shape `(n,) + avals[i].shape` (n the total size) and is 1 where
    the basis vector is one of its entries. Also each leaf's offset in the flat space."""
    sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in avals]
    offsets = list(np.cumsum([0] + sizes[:-1]))
    n = sum(sizes)
    basis = []
    for a, o, s in zip(avals, offsets, sizes):
        b = np.zeros((n, s), a.dtype)
        b[np.arange(o, o + s), np.arange(s)] = 1
        basis.append(b.reshape((n,) + a.shape))
    return basis, [int(o) for o in offsets]


def _check_out_float(who: str, avals: Sequence[ShapedArray]) -> None:
    for a in avals:
        if not _is_float(a.dtype):
            raise TypeError(
                f"{who}: reverse mode requires real-valued outputs (float dtypes), but an "
                f"output leaf has dtype {a.dtype}; use vjp directly"
            )


def _assemble(out_tree: pytree.TreeDef, dyn_tree: pytree.TreeDef,
              blocks: list[list[Any]]) -> Any:
    """jax's Jacobian structure: the output's tree, each leaf the differentiated
    arguments' tree of blocks (`blocks[out_leaf][in_leaf]`)."""
    return pytree.tree_unflatten(out_tree, [pytree.tree_unflatten(dyn_tree, row)
                                            for row in blocks])


def _finish(out_tree: pytree.TreeDef, dyn_tree: pytree.TreeDef, blocks: list[list[Any]],
            res: tuple[Any, ...], has_aux: bool) -> Any:
    """The Jacobian, and the aux (`res[2]`, from the vjp / jvp) with `has_aux`."""
    jac = _assemble(out_tree, dyn_tree, blocks)
    return (jac, res[2]) if has_aux else jac


def jacrev(fun: Callable[..., Any], argnums: int | Sequence[int] = 0,
           has_aux: bool = False, *, _caller: str = "jacrev") -> Callable[..., Any]:
    """The Jacobian by reverse mode, with jax's structure: for each output leaf, the
    differentiated arguments' tree (a tuple of them for a tuple `argnums`), each leaf
    of shape `out_leaf.shape + in_leaf.shape`. With `has_aux`, returns `(jac, aux)`.

    One batched backward call: `vmap` of the pullback over the standard basis of all
    output leaves together.
    """
    who = f"{_caller}({_name(fun)})"

    def transform(*args: Any) -> Any:
        dyn, f_part, in_leaves, dyn_tree = _jac_setup(fun, args, argnums, has_aux, who,
                                                      _caller)
        res = vjp(f_part, *dyn, has_aux=has_aux)
        out, pullback = res[0], res[1]
        out_leaves, out_tree = _flat_tracers(out)
        out_avals = [t.aval.strong() for t in out_leaves]
        _check_out_float(who, out_avals)
        basis, offsets = _stacked_basis(out_avals)
        n = basis[0].shape[0] if basis else 0
        if n == 0 or not in_leaves:  # nothing to differentiate: every block is empty
            rows = [[anp.zeros(o.shape + i.shape, i.dtype) for i in in_leaves]
                    for o in out_avals]
            return _finish(out_tree, dyn_tree, rows, res, has_aux)

        def pull(*cts: Any) -> Any:
            return pytree.tree_leaves(pullback(pytree.tree_unflatten(out_tree, list(cts))))

        stacked = vmap(pull)(*[as_tracer(b) for b in basis])  # leaf i: (n,) + in_i.shape
        blocks = []
        for o, a in zip(offsets, out_avals):
            row = []
            for g, t in zip(stacked, in_leaves):
                g = as_tracer(g)
                if a.size * t.aval.size == 0:  # an empty block
                    row.append(anp.zeros(a.shape + t.shape, g.dtype))
                    continue
                if len(out_avals) > 1:
                    g = g[o:o + a.size]
                row.append(anp.reshape(g, a.shape + t.shape))
            blocks.append(row)
        return _finish(out_tree, dyn_tree, blocks, res, has_aux)

    transform.__name__ = f"jacrev_{_name(fun)}"
    return _eager(transform, _static_outside(argnums, who))


def jacfwd(fun: Callable[..., Any], argnums: int | Sequence[int] = 0,
           has_aux: bool = False, *, _randomness: str = "same",
           _caller: str = "jacfwd") -> Callable[..., Any]:
    """The Jacobian by forward mode, with jax's structure (as `jacrev`): for each
    output leaf, the differentiated arguments' tree, each leaf of shape
    `out_leaf.shape + in_leaf.shape`. With `has_aux`, returns `(jac, aux)`.

    One batched forward call: `vmap` of the jvp over the standard basis of all
    differentiated input leaves together. Every column sees the same random numbers
    (the ones `fun` draws), so a function that draws has the Jacobian of the
    function its draws define.
    """
    who = f"{_caller}({_name(fun)})"

    def transform(*args: Any) -> Any:
        dyn, f_part, in_leaves, dyn_tree = _jac_setup(fun, args, argnums, has_aux, who,
                                                      _caller)
        dyn_struct = pytree.tree_structure(dyn)
        in_avals = [t.aval.strong() for t in in_leaves]
        basis, offsets = _stacked_basis(in_avals)
        n = basis[0].shape[0] if basis else 0

        def column(*tangent_leaves: Any) -> Any:
            tangents = pytree.tree_unflatten(dyn_struct, list(tangent_leaves))
            res = jvp(f_part, dyn, tangents, has_aux=has_aux)
            return (res[1], res[2]) if has_aux else (res[1], None)

        if n == 0:  # no input entries: every block is empty (one call for the output)
            res = jvp(f_part, dyn, pytree.tree_map(anp.zeros_like, dyn), has_aux=has_aux)
            out_leaves, out_tree = _flat_tracers(res[1])
            blocks = [[anp.zeros(o.shape + i.shape, o.dtype) for i in in_avals]
                      for o in out_leaves]
            return _finish(out_tree, dyn_tree, blocks, res, has_aux)

        tan, aux = vmap(column, out_axes=(-1, 0), randomness=_randomness)(
            *[as_tracer(b) for b in basis])
        if has_aux:  # aux does not depend on the tangents: every lane holds it (the
            # vmap's dependence analysis is conservative, so out_axes None is refused)
            aux = pytree.tree_map(lambda a: as_tracer(a)[0], aux)
        out_leaves, out_tree = _flat_tracers(tan)  # leaf j: out_j.shape + (n,)
        blocks = []
        for c in out_leaves:
            row = []
            for o, a in zip(offsets, in_avals):
                if c.size * a.size == 0:  # an empty block
                    row.append(anp.zeros(c.shape[:-1] + a.shape, c.dtype))
                    continue
                if len(in_avals) > 1:
                    c_i = c[..., o:o + a.size]
                else:
                    c_i = c
                row.append(anp.reshape(c_i, c.shape[:-1] + a.shape))
            blocks.append(row)
        return _finish(out_tree, dyn_tree, blocks, (None, None, aux), has_aux)

    transform.__name__ = f"jacfwd_{_name(fun)}"
    return _eager(transform, _static_outside(argnums, who))


def hessian(fun: Callable[..., Any], argnums: int | Sequence[int] = 0,
            has_aux: bool = False) -> Callable[..., Any]:
    """`jacfwd(jacrev(fun, argnums), argnums)`: forward-over-reverse, as JAX does, with
    its nested structure (the Jacobian's structure, each leaf again the differentiated
    arguments' tree). With `has_aux`, returns `(hessian, aux)`.

    A function that draws has the Hessian of the function its draws define:
    every row and column replays the numbers one call of `fun` draws.
    """
    inner = jacrev(fun, argnums, has_aux, _caller="hessian")
    inner.__name__ = _name(fun)  # the outer transform's messages name the user's function
    return jacfwd(inner, argnums, has_aux, _caller="hessian")


__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "hessian",
           "stop_gradient"]
