"""Checkpointing and what reverse mode saves: `checkpoint` (`remat`), `checkpoint_policies`,
`checkpoint_name`, `saved_residuals`, `print_saved_residuals`.

- `checkpoint(f, policy=...)` emits `autodiff.checkpoint {fn = @f, policy = "..."}`:
  the reverse pass recomputes @f's internals in the backward pass, saving only
  what the policy allows. `checkpoint_name(x, "h")` is a `func.call` to a private
  identity function carrying `autodiff.checkpoint_name = "h"` (a marker the pass
  recognizes through any differentiation; it disappears once nothing is left to
  differentiate).
- `saved_residuals(f, *args)` lists the values reverse mode of `f` keeps for the
  backward pass (the report of the vjp pass's residual analysis).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import func

from . import dialects, pytree
from .api import _leaf_aval
from .custom_core import EagerCache, argnums, fun_name, is_float, split_args, trace_primal
from .dialects.vocabulary import CHECKPOINT, CHECKPOINT_NAME
from .tracing import (
    FunctionTrace,
    ShapedArray,
    as_tracer,
    current_trace,
    require_trace,
    trace_function,
)
from .transforms.ad_residuals import residual_report
from .transforms.ad_support import unique_symbol as _unique_symbol

# --------------------------------------------------------------------------- checkpoint

POLICIES = ("nothing_saveable", "everything_saveable", "dots_saveable")


@dataclasses.dataclass(frozen=True)
class Policy:
    """A checkpoint policy: which values of the checkpointed function the forward
    pass saves (the rest is recomputed in the backward pass)."""

    name: str
    names: tuple[str, ...] = ()


class checkpoint_policies:
    """JAX's policy names: `nothing_saveable` (the default), `everything_saveable`,
    `dots_saveable` (contraction outputs), `save_only_these_names(*names)`."""

    nothing_saveable = Policy("nothing_saveable")
    everything_saveable = Policy("everything_saveable")
    dots_saveable = Policy("dots_saveable")
    checkpoint_dots = dots_saveable

    @staticmethod
    def save_only_these_names(*names: str) -> Policy:
        return Policy("save_only_these_names", tuple(names))


def _policy(policy: Any) -> Policy:
    if policy is None:
        return checkpoint_policies.nothing_saveable
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in POLICIES:
        return Policy(policy)
    raise ValueError(f"checkpoint: unknown policy {policy!r}; use one of "
                     "ad.checkpoint_policies.{nothing_saveable, everything_saveable, "
                     "dots_saveable, save_only_these_names(...)}")


def checkpoint(fun: Callable[..., Any], policy: Any = None, *, prevent_cse: bool = True,
               static_argnums: int | Sequence[int] = ()) -> Callable[..., Any]:
    """`fun` with its internals recomputed in the backward pass instead of saved
    (JAX's `jax.checkpoint` / `remat`). `policy` picks values that are saved
    anyway (see `checkpoint_policies`); the default saves nothing but the inputs.
    Emits `autodiff.checkpoint {fn = @fun, policy = "..."}`."""
    pol = _policy(policy)
    name = fun_name(fun)

    @functools.wraps(fun)
    def wrapped(*args: Any) -> Any:
        nums = argnums(static_argnums, len(args), f"checkpoint({name})")
        if current_trace() is None:
            return eager(args, nums)
        diff, _, merge = split_args(args, nums)
        p = trace_primal(lambda *d: fun(*merge(d)), diff, name)
        trace = p.trace
        operands = [trace.lift(t) for t in p.tracers] + [trace.lift(c) for c in p.fn.captures]
        with trace.emitting():
            attrs: dict[str, ir.Attribute] = {"fn": p.fn.symbol,
                                              "policy": ir.StringAttr.get(pol.name)}
            if pol.name == "save_only_these_names":
                attrs["names"] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in pol.names])
            op = ir.Operation.create(
                CHECKPOINT, results=[a.mlir_type() for a in p.fn.out_avals],
                operands=[o.value for o in operands], attributes=attrs)
        outs = [trace.wrap(v, a) for v, a in zip(op.results, p.fn.out_avals)]
        return pytree.tree_unflatten(p.fn.out_tree, outs)

    eager = EagerCache(wrapped)
    return wrapped


remat = checkpoint


def checkpoint_name(x: Any, name: str) -> Any:
    """`x`, named for `checkpoint_policies.save_only_these_names(name)`.

    Each leaf goes through `func.call` of a private identity function marked
    `autodiff.checkpoint_name = "<name>"` (one per name and type)."""
    if current_trace() is None:
        return x
    trace = require_trace("checkpoint_name")

    def one(leaf: Any) -> Any:
        t = trace.lift(as_tracer(leaf))
        fname = _name_function(trace, name, t.value.type)
        with trace.emitting():
            call = func.CallOp([t.value.type], ir.FlatSymbolRefAttr.get(fname), [t.value])
        return trace.wrap(call.results[0], t.aval)

    return pytree.tree_map(one, x)


def _name_function(trace: FunctionTrace, name: str, t: ir.Type) -> str:
    for op in trace.module.body.operations:
        if op.operation.name == "func.func" and CHECKPOINT_NAME in op.attributes \
                and ir.StringAttr(op.attributes[CHECKPOINT_NAME]).value == name \
                and op.attributes["function_type"].value.inputs[0] == t:
            return ir.StringAttr(op.attributes["sym_name"]).value
    base = "checkpoint_name_" + "".join(c if c.isalnum() else "_" for c in name)
    with trace.context, ir.Location.unknown(), ir.InsertionPoint.at_block_begin(
            trace.module.body):
        fn = func.FuncOp(_unique_symbol(trace.module, base), ir.FunctionType.get([t], [t]),
                         visibility="private")
        fn.attributes[CHECKPOINT_NAME] = ir.StringAttr.get(name)
        blk = fn.add_entry_block()
        with ir.InsertionPoint(blk):
            func.ReturnOp([blk.arguments[0]])
        return ir.StringAttr(fn.attributes["sym_name"]).value


# --------------------------------------------------------------------------- residuals


@dataclasses.dataclass(frozen=True)
class SavedResidual:
    """One value reverse mode keeps from the forward to the backward pass."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    #: "argument <name>" or "output of <op>"
    source: str
    #: `file:line:col` of the op that produced it ("" for arguments)
    location: str

    def __str__(self) -> str:
        aval = ShapedArray(self.shape, self.dtype).str_short()
        where = f" at {self.location}" if self.location else ""
        return f"{aval} ({self.nbytes} bytes) {self.source}{where}"


def _arg_names(fun: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"#{i}"
        n = len(pytree.tree_leaves(a))
        names += [base] if n == 1 and pytree.tree_structure(a).is_leaf else \
            [f"{base}[leaf {k}]" for k in range(n)]
    return names


def saved_residuals(fun: Callable[..., Any], *args: Any) -> list[SavedResidual]:
    """What reverse mode of `fun` (w.r.t. every float argument) saves for the
    backward pass: arguments it reads there and values of the forward code."""
    leaves, in_tree = pytree.tree_flatten(args)
    avals = [_leaf_aval(x, f"saved_residuals({fun_name(fun)})")[0] for x in leaves]
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
    main = FunctionTrace(module, "main", avals, fun=fun)
    with main.active():
        fn = trace_function(fun, avals, in_tree, name=fun_name(fun))
        main.finish([])
    wrt = [i for i, a in enumerate(avals) if is_float(a.dtype)]
    names = _arg_names(fun, args)
    out = []
    with ctx:
        for r in residual_report(module.operation, fn.sym_name, wrt):
            aval = ShapedArray.from_type(r.type)
            nbytes = aval.size * aval.dtype.itemsize
            if r.arg is not None:
                out.append(SavedResidual(aval.shape, aval.dtype, nbytes,
                                         f"from the argument {names[r.arg]}", ""))
            else:
                out.append(SavedResidual(aval.shape, aval.dtype, nbytes,
                                         f"output of {r.op}", r.location))
    return out


def print_saved_residuals(fun: Callable[..., Any], *args: Any) -> None:
    """Print what reverse mode of `fun` saves (JAX's `print_saved_residuals`):
    one line per value (shape, dtype, bytes, the op and source line), then the total."""
    res = saved_residuals(fun, *args)
    for r in res:
        print(r)
    print(f"total: {sum(r.nbytes for r in res)} bytes in {len(res)} residual(s)")


__all__ = ["Policy", "SavedResidual", "checkpoint", "checkpoint_name", "checkpoint_policies",
           "print_saved_residuals", "remat", "saved_residuals"]
