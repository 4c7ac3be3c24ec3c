"""`vmap`: batching, as JAX's `jax.vmap` and torch.func's `vmap`.

The Python side never batches: `vmap(f)(*args)` traces `f` on one example
(each batched argument with its batch axis removed) into its own
`func.func`, and emits `autodiff.vmap {fn, in_axes, out_axes, randomness}`;
the `--autodiff-vmap` pass generates the batched function when the
enclosing `jit` compiles. Called outside a trace, `vmap(f)` compiles itself
with `jit` (cached per signature), so `ad.vmap(f)(xs)` works eagerly.

Composition works because transforms nest as functions containing autodiff
ops, which the passes lower inside out: `vmap(grad(f))` gives per-example
gradients in one compiled call, `vmap(vmap(f))`, `jvp(vmap(f))`, ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from mlir import ir

from . import dialects, pytree
from . import numpy as anp
from .api import bind_static, function_name, static_positions, traced_or_jitted
from .tracing import (
    FunctionTrace,
    ShapedArray,
    Tracer,
    as_tracer,
    current_trace,
    require_trace,
    trace_function,
)
from .transforms.ad_support import captured_values
from .transforms.rules.batching import ALWAYS_RULE
from .transforms.vmap import batched_outputs

Axis = int | None
RANDOMNESS = ("error", "different", "same")


_name = function_name
_eager = traced_or_jitted


# --------------------------------------------------------------------------- vmap levels


@dataclasses.dataclass(frozen=True)
class VmapLevel:
    """A `vmap` whose per-example function is being traced.

    `trace` is that function's trace and `batched` the indices of its
    arguments that carry the batch. Custom functions traced meanwhile
    (`Function` with a `vmap` rule) ask the innermost level for the batch
    size and for which of their arguments depend on a batched argument, to
    emit a batching rule for exactly this level (see `custom_vmap.py`).
    """

    trace: FunctionTrace
    size: int
    randomness: str
    batched: frozenset[int]

    def batched_leaves(self, leaves: list[Any]) -> list[bool | None]:
        """Per leaf: does it depend on a batched argument of this level (True/False),
        or None where that is only known once the passes run (a value of a
        function nested in this level's, such as an argument of a `grad`-traced
        function: its call is not emitted yet). Conservative like the pass: an
        op's results depend on everything it reads; random draws are per lane
        with randomness="different"."""
        memo: dict[ir.Value, bool | None] = {}
        # values of functions enclosing this level's (or constants) are unbatched
        return [self._depends(x.trace, x.value, memo)
                if isinstance(x, Tracer) and x.trace.is_self_or_ancestor(self.trace) else False
                for x in leaves]

    def _depends(self, trace: FunctionTrace, v: ir.Value,
                 memo: dict[ir.Value, bool | None]) -> bool | None:
        """`v`'s dependence, with an explicit stack (traces can be long chains)."""
        stack = [(trace, v)]
        while stack:
            tr, val = stack[-1]
            if val in memo:
                stack.pop()
                continue
            ins = self._inputs(tr, val)
            if not isinstance(ins, list):
                memo[val] = ins
                stack.pop()
                continue
            todo = [(t, x) for t, x in ins if x not in memo]
            if todo:
                stack.extend(todo)
                continue
            found = [memo[x] for _, x in ins]
            memo[val] = True if True in found else None if None in found else False
            stack.pop()
        return memo[v]

    def _inputs(self, trace: FunctionTrace, v: ir.Value
                ) -> bool | None | list[tuple[FunctionTrace, ir.Value]]:
        """What `v` depends on: a final answer, or the values (with their traces)
        whose dependence decides it (SSA: no cycles; captures lead outwards)."""
        owner = v.owner
        if not isinstance(owner, ir.Block):
            op = owner.operation
            if op.name in ALWAYS_RULE and self.randomness == "different":
                return True
            reads = list(op.operands) + (captured_values(op) if op.regions else [])
            return [(trace, r) for r in reads]
        arg = ir.BlockArgument(v)
        if arg.owner != trace.block:
            return None  # a region argument reached some other way: unknown
        i = arg.arg_number
        if trace is self.trace:
            return i in self.batched
        n = len(trace.in_avals)
        if i < n or trace.parent is None:
            return None  # an argument of a nested function: known at its call only
        outer = trace.captures[i - n]
        return [(outer.trace, outer.value)]


class _Levels(threading.local):
    def __init__(self) -> None:
        self.stack: list[VmapLevel] = []
        #: levels whose batching rule is being traced (ids): invisible to the rule's code
        self.peeled: set[int] = set()


_LEVELS = _Levels()


def active_vmap_level(trace: FunctionTrace | None = None) -> VmapLevel | None:
    """The innermost vmap level enclosing `trace` (default: the current trace)."""
    trace = trace or current_trace()
    for level in reversed(_LEVELS.stack):
        if id(level) in _LEVELS.peeled:
            continue
        if trace is not None and trace.is_self_or_ancestor(level.trace):
            return level
    return None


@contextlib.contextmanager
def _level(level: VmapLevel) -> Iterator[None]:
    _LEVELS.stack.append(level)
    try:
        yield
    finally:
        _LEVELS.stack.pop()


@contextlib.contextmanager
def peeled(level: VmapLevel) -> Iterator[None]:
    """While a batching rule for `level` is traced (torch.func's `vmap` staticmethod),
    its code sees the next enclosing level (or none): the rule works on batched
    values itself, so a custom function it calls (`apply` again, on the batched
    arguments) is an ordinary call at this level, not one more batching."""
    _LEVELS.peeled.add(id(level))
    try:
        yield
    finally:
        _LEVELS.peeled.discard(id(level))


def _per_example(fun: Callable[..., Any], size: int, randomness: str,
                 batched: frozenset[int]) -> Callable[..., Any]:
    """`fun`, run as the per-example function of a vmap level."""

    @functools.wraps(fun)
    def lane(*args: Any) -> Any:
        with _level(VmapLevel(require_trace("vmap"), size, randomness, batched)):
            return fun(*args)

    return lane


def _check_spec(spec: Any, what: str) -> None:
    """Reject anything that is not an int/None or a container of them (JAX's message)."""
    for leaf in pytree.tree_leaves(spec):
        if not isinstance(leaf, (int, np.integer)) or isinstance(leaf, bool):
            raise TypeError(f"vmap {what} must be an int, None, or (nested) container with "
                            f"those types as leaves, but got {spec!r}")


def _prefix_leaves(spec: Any, tree: pytree.TreeDef, what: str, whole: Any = None) -> list[Axis]:
    """Broadcast the axis specification `spec` (a tree prefix of `tree`) to its leaves."""
    if spec is None or isinstance(spec, (int, np.integer)):
        return [None if spec is None else int(spec)] * tree.num_leaves
    kind = tree.kind
    node = pytree._node(spec)
    ok = node is not None and len(node[2]) == len(tree.children)
    if ok and kind in ("tuple", "list", "namedtuple"):
        ok = isinstance(spec, (tuple, list))  # a list spec for a tuple value is accepted
    elif ok and kind == "dict":
        ok = node[0] == "dict" and tuple(sorted(spec)) == tuple(tree.aux)
        spec = [spec[k] for k in tree.aux] if ok else spec
    elif ok:  # a registered node: the same type and static data
        ok = node[0] == kind and node[1] == tree.aux
        spec = node[2] if ok else spec
    else:
        ok = False
    if not ok:
        raise ValueError(f"vmap {what} specification must be a tree prefix of the "
                         f"corresponding value, got specification {whole!r} for value tree "
                         f"{tree}")
    out: list[Axis] = []
    for s, child in zip(spec, tree.children):
        out += _prefix_leaves(s, child, what, whole)
    return out


def _arg_desc(i: int, t: Tracer) -> str:
    return f"argument leaf {i} of type {t.aval.str_short()}"


def _inconsistent(sizes: list[tuple[int, int, Tracer, int]]) -> ValueError:
    lines = [f"  * axis {a} of {_arg_desc(i, t)} has size {n}" for i, a, t, n in sizes]
    return ValueError("vmap got inconsistent sizes for array axes to be mapped:\n"
                      + "\n".join(lines))


def _insert(shape: tuple[int, ...], axis: int, n: int) -> tuple[int, ...]:
    return shape[:axis] + (n,) + shape[axis:]


def _broadcast_out(x: Tracer, axis: Axis, size: int) -> Tracer:
    if axis is None:
        return x
    return anp.broadcast_to(anp.expand_dims(x, axis), _insert(x.shape, axis, size))


def vmap(fun: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0,
         randomness: str = "error", axis_size: int | None = None) -> Callable[..., Any]:
    """Vectorize `fun` over a batch axis of its arguments (JAX's `vmap`).

    `in_axes`: an int, None, or a tuple with one entry per positional
    argument, each a pytree prefix of that argument (ints or None: the axis
    the leaf is batched along, None for unbatched; negative ints count from
    the end). `out_axes`: the same for the outputs; None is only allowed for
    an output that does not depend on a batched input, and unbatched outputs
    with an int axis are broadcast. `axis_size` gives the batch size when no
    argument is batched. `randomness` ("error", "different", "same") says how
    random draws under vmap behave; "error" rejects them.

    Errors are JAX's: inconsistent batch sizes, an axis out of range, a
    mapped output with out_axes None are `ValueError`s.
    """
    if randomness not in RANDOMNESS:
        raise ValueError(f"vmap: randomness must be one of {RANDOMNESS}, got {randomness!r}")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)  # JAX treats a top-level list as a tuple
    _check_spec(in_axes, "in_axes")
    _check_spec(out_axes, "out_axes")
    who = f"vmap({_name(fun)})"

    def static(args: tuple[Any, ...]) -> tuple[int, ...]:
        """Unmapped (in_axes None) arguments that are plain Python values: passed to
        `fun` as they are, as jax does (`vmap(f, (0, None))(x, 4)` gives `f` the int 4)."""
        if in_axes is None:
            return static_positions(args, ())
        if isinstance(in_axes, tuple) and len(in_axes) == len(args):
            return static_positions(args, [i for i, a in enumerate(in_axes) if a is not None])
        return ()

    def transform(*args: Any) -> Any:
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(
                "vmap in_axes must be an int, None, or a tuple of entries corresponding to "
                "the positional arguments passed to the function, but got "
                f"len(in_axes)={len(in_axes)}, len(args)={len(args)}")
        fixed = static(args)
        if fixed:
            bound, rest = bind_static(fun, args, fixed)
            rest_axes = None if in_axes is None else tuple(
                a for i, a in enumerate(in_axes) if i not in fixed)
            return vmap(bound, rest_axes, out_axes, randomness, axis_size)(*rest)
        leaves, in_tree = pytree.tree_flatten(args)
        axes = _prefix_leaves(in_axes, in_tree, "in_axes", in_axes)
        tracers = [as_tracer(x) for x in leaves]
        sizes = []
        norm: list[Axis] = []
        for i, (t, a) in enumerate(zip(tracers, axes)):
            if a is None:
                norm.append(None)
                continue
            ax = a + t.ndim if a < 0 else a
            if not 0 <= ax < t.ndim:
                raise ValueError(
                    f"vmap was requested to map its argument along axis {a}, which implies "
                    f"that its rank should be at least {(a if a >= 0 else -a - 1) + 1}, but "
                    f"is only {t.ndim} (its shape is {t.shape})")
            norm.append(ax)
            sizes.append((i, ax, t, t.shape[ax]))
        distinct = {n for *_, n in sizes}
        if len(distinct) > 1:
            raise _inconsistent(sizes)
        if axis_size is not None and distinct and distinct != {axis_size}:
            raise ValueError(f"vmap got axis_size={axis_size} but the mapped axes have size "
                             f"{distinct.pop()}")
        if not sizes:
            if axis_size is None:
                raise ValueError("vmap must have at least one non-None value in in_axes "
                                 "(or pass axis_size)")
            return _unbatched_call(fun, args, out_axes, axis_size)
        size = distinct.pop()
        avals = [t.aval if a is None else
                 ShapedArray(t.shape[:a] + t.shape[a + 1:], t.dtype, t.weak_type)
                 for t, a in zip(tracers, norm)]
        batched = frozenset(i for i, a in enumerate(norm) if a is not None)
        fn = trace_function(_per_example(fun, size, randomness, batched), avals, in_tree,
                            name=_name(fun))
        oaxes = _prefix_leaves(out_axes, fn.out_tree, "out_axes", out_axes)
        out_norm: list[Axis] = []
        for j, (a, aval) in enumerate(zip(oaxes, fn.out_avals)):
            if a is None:
                out_norm.append(None)
                continue
            ax = a + aval.ndim + 1 if a < 0 else a
            if not 0 <= ax <= aval.ndim:
                raise ValueError(f"{who}: out_axes {a} is out of range for output leaf {j} "
                                 f"of rank {aval.ndim}")
            out_norm.append(ax)
        flags = [a is not None for a in norm] + [False] * len(fn.captures)
        depends = batched_outputs(fn.func_op.operation, flags)
        for j, (a, dep) in enumerate(zip(out_norm, depends)):
            if a is None and dep:
                raise ValueError(f"vmap has mapped output (leaf {j} of the output of "
                                 f"{_name(fun)}) but out_axes is None")
        res_avals = [aval if a is None else
                     ShapedArray(_insert(aval.shape, a, size), aval.dtype)
                     for aval, a in zip(fn.out_avals, out_norm)]
        trace = require_trace("vmap")
        operands = [trace.lift(t) for t in tracers + list(fn.captures)]
        ins = [-1 if a is None else a for a in norm] + [-1] * len(fn.captures)
        outs_ax = [-1 if a is None else a for a in out_norm]
        with trace.emitting():
            op = dialects.VmapOp([a.mlir_type() for a in res_avals], [o.value for o in operands],
                                 fn.symbol, ins, outs_ax, randomness)
        outs = [trace.wrap(v, a.strong()) for v, a in zip(op.results, res_avals)]
        return pytree.tree_unflatten(fn.out_tree, outs)

    transform.__name__ = f"vmap_{_name(fun)}"
    return _eager(transform, static)


def _unbatched_call(fun: Callable[..., Any], args: tuple[Any, ...], out_axes: Any,
                    size: int) -> Any:
    """vmap with no batched argument: one call, every output broadcast at its out axis."""
    out = fun(*args)
    leaves, tree = pytree.tree_flatten(out)
    axes = _prefix_leaves(out_axes, tree, "out_axes", out_axes)
    outs = []
    for x, a in zip(leaves, axes):
        t = as_tracer(x)
        ax = None if a is None else (a + t.ndim + 1 if a < 0 else a)
        outs.append(_broadcast_out(t, ax, size))
    return pytree.tree_unflatten(tree, outs)


__all__ = ["VmapLevel", "active_vmap_level", "vmap"]
