"""Structured control flow: `fori_loop`, `scan`, `while_loop`, `map`, `cond`,
`switch`, `select` (the contracts of `jax.lax`).

A Python loop over traced values unrolls: every iteration is traced again
and the program grows with the trip count. These functions trace their
body *once*, into the region of one upstream loop op:

- `fori_loop(lower, upper, body_fun, init_val)` -> `scf.for` over index
  bounds (static or traced), carrying the leaves of `init_val`;
- `scan(f, init, xs, length=None, reverse=False)` -> one `scf.for` whose
  body reads slice i of every `xs` leaf (a rank-reducing
  `tensor.extract_slice`) and writes each `y` leaf into a preallocated
  stacked output carried through the loop (`tensor.insert_slice`);
- `while_loop(cond_fun, body_fun, init_val)` -> `scf.while`;
- `map(f, xs)` -> a `scan` without carry;
- `cond(pred, true_fun, false_fun, *operands)` -> one `scf.if` whose
  branches are traced once each; `switch(index, branches, *operands)` -> a
  chain of `scf.if` on the clamped index (`scf.index_switch` has no rules in
  the passes); under `vmap` a batched predicate or index runs every branch
  and selects per lane (the batching rule of `scf.if`), as jax does;
- `select(pred, on_true, on_false)` -> an elementwise `arith.select`.

Convolution and pooling (`conv_general_dilated`, `conv`,
`conv_with_general_padding`, `reduce_window`) live in `convolution.py` and
are re-exported here.

jax.lax's everyday operations (`add`, `exp`, `reduce_sum`, `dot_general`, `pad`,
`convert_element_type`, ...) live in `lax_ops.py` and are names of this module too.

It also holds jax's windows at traced offsets, `dynamic_slice`,
`dynamic_update_slice` and their `_in_dim` / `index_in_dim` forms: gathers
and scatters (see `indexing.py`), the start clamped so the window fits.

The MLIR passes differentiate (forward mode, reverse mode with tapes, to any
order), batch and lower these ops, so `grad`, `jvp`, `vmap`, `hessian` and
`jit` compose with the loops. Loop bodies may close over values of the
enclosing trace (weights used in every step): a region sees them directly
(see `tracing.RegionTrace`).

Carried values keep one type: a body whose output leaf differs in shape or
dtype from the carry is a `TypeError` naming the leaf, as in JAX (a weakly
typed init, such as a Python `0.0`, adopts the dtype the body computes).
Outside a trace the loops run as Python loops on numpy values, as the
`mlir_autodiff.numpy` functions do; `cond`/`switch` type-check every branch
(tracing them into a scratch module) and run only the taken one.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf, tensor

from . import dialects, primitives, pytree
from . import indexing as _ix
from . import lax_ops as _lax_ops
from . import numpy as anp
from .batching import active_vmap_level, vmap
from .convolution import (
    conv,
    conv_general_dilated,
    conv_with_general_padding,
    reduce_window,
)
from .distributed import (  # noqa: F401  (jax.lax's collectives; see distributed.py)
    all_gather,
    axis_index,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)
from .errors import ShapeError
from .tracing import (
    FunctionTrace,
    RegionTrace,
    ShapedArray,
    Tracer,
    abstractify,
    as_tracer,
    current_trace,
    format_site,
    is_float_dtype,
    require_trace,
    user_location,
)

#: Placeholder abstract value of a non-tensor block argument (scf.for's index):
#: RegionTrace keeps one aval per block argument; user code never sees it.
_INDEX_AVAL = ShapedArray((), np.int64)
_DYN = ir.ShapedType.get_dynamic_size()


# --------------------------------------------------------------------------- pytrees

def _leaf_paths(tree: pytree.TreeDef, prefix: str) -> list[str]:
    """JAX-style key paths of the leaves of `tree` (`carry[1]['w']`), in flatten order."""
    if tree.is_leaf:
        return [prefix]
    if tree.kind == "dict":
        keys = [f"[{k!r}]" for k in tree.aux]
    elif tree.kind == "namedtuple":
        keys = [f".{f}" for f in tree.aux._fields]
    else:
        keys = [f"[{i}]" for i in range(len(tree.children))]
    out: list[str] = []
    for key, child in zip(keys, tree.children):
        out += _leaf_paths(child, prefix + key)
    return out


def _same_type(a: ShapedArray, b: ShapedArray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _mismatch(path: str, a: ShapedArray, b: ShapedArray) -> str:
    why = "the shapes do not match" if a.shape != b.shape else "the dtypes do not match"
    return (f"  * the input carry component {path} has type {a.str_short()} but the "
            f"corresponding output carry component has type {b.str_short()}, so {why}")


def _carry_error(who: str, what: str, lines: list[str]) -> TypeError:
    return TypeError(f"{who} {what} carry input and carry output must have equal types, but "
                     f"they differ (at {format_site()}):\n" + "\n".join(lines))


def _check_tree(who: str, what: str, in_tree: pytree.TreeDef,
                out_tree: pytree.TreeDef) -> None:
    if in_tree != out_tree:
        raise TypeError(f"{who} {what} output must have the same pytree structure as its "
                        f"carry input, got input {in_tree} and output {out_tree} (at "
                        f"{format_site()})")


def _check_eager_carry(who: str, what: str, tree: pytree.TreeDef, init: list[Any],
                       out: Any) -> list[Any]:
    """The flat leaves of `out`, a body's result outside a trace, checked against `init`."""
    leaves, out_tree = pytree.tree_flatten(out)
    _check_tree(who, what, tree, out_tree)
    lines = []
    for path, a, b in zip(_leaf_paths(tree, "carry"), init, leaves):
        ai, bi = abstractify(a), abstractify(b)
        if not _same_type(ai, bi) and not (ai.weak_type and ai.shape == bi.shape):
            lines.append(_mismatch(path, ai, bi))
    if lines:
        raise _carry_error(who, what, lines)
    return leaves


# --------------------------------------------------------------------------- tracing regions

class _Promote(Exception):
    """A weakly typed carry leaf must take the dtype the body gave it: trace again."""

    def __init__(self, dtypes: dict[int, np.dtype]) -> None:
        super().__init__()
        self.dtypes = dtypes


def _carry_outputs(who: str, what: str, region: RegionTrace, tree: pytree.TreeDef,
                   avals: Sequence[ShapedArray], out: Any) -> list[Tracer]:
    """The body's carry output as tracers of `region`, each of its carry leaf's type.

    Raises `_Promote` when only weakly typed init leaves differ in dtype (the
    caller traces again with those leaves converted), TypeError otherwise.
    """
    leaves, out_tree = pytree.tree_flatten(out)
    _check_tree(who, what, tree, out_tree)
    outs = [as_tracer(x) for x in leaves]
    lines, promote = [], {}
    for k, (path, a, o) in enumerate(zip(_leaf_paths(tree, "carry"), avals, outs)):
        if _same_type(a, o.aval):
            continue
        if a.shape == o.shape and o.weak_type:
            outs[k] = primitives.convert(o, a.dtype, weak_type=a.weak_type)
        elif a.shape == o.shape and a.weak_type:
            promote[k] = o.dtype
        else:
            lines.append(_mismatch(path, a, o.aval))
    if lines:
        raise _carry_error(who, what, lines)
    if promote:
        raise _Promote(promote)
    return outs


def _yield(region: RegionTrace, values: Sequence[ir.Value]) -> None:
    with region.emitting():
        scf.YieldOp(list(values))
    region.finish([])


def _as_index(t: Tracer) -> ir.Value:
    """A 0-d integer tensor as an `index` (emitted in the active trace)."""
    v = tensor.extract(t.value, [])
    return arith.index_cast(ir.IndexType.get(), v)


def _index_tensor(iv: ir.Value, dtype: np.dtype) -> ir.Value:
    """An `index` as a 0-d tensor of `dtype` (the loop counter the body sees)."""
    elt = ir.IntegerType.get_signless(np.dtype(dtype).itemsize * 8)
    v = arith.index_cast(elt, iv)
    return tensor.from_elements(ir.RankedTensorType.get([], elt), [v])


def _slice_attrs(rank: int, shape: Sequence[int], n_operands: list[int]) -> dict[str, Any]:
    """Attributes of a rank-reducing slice at a dynamic leading offset (scf.py's tapes)."""
    return {
        "static_offsets": ir.DenseI64ArrayAttr.get([_DYN] + [0] * rank),
        "static_sizes": ir.DenseI64ArrayAttr.get([1, *shape]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (rank + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get(n_operands),
    }


def _row(xs: Tracer, i: ir.Value, region: RegionTrace) -> Tracer:
    """xs[i] (i an index) in `region`: a rank-reducing tensor.extract_slice."""
    src = region.lift(xs)
    aval = ShapedArray(xs.shape[1:], xs.dtype)
    with region.emitting():
        op = ir.Operation.create(
            "tensor.extract_slice", results=[aval.mlir_type()], operands=[src.value, i],
            attributes=_slice_attrs(aval.ndim, aval.shape, [1, 1, 0, 0]))
    return region.wrap(op.result, aval)


def _write_row(stack: ir.Value, y: Tracer, value: ir.Value, i: ir.Value) -> ir.Value:
    """stack[i] = y (whose value is `value`): a rank-reducing tensor.insert_slice."""
    return ir.Operation.create(
        "tensor.insert_slice", results=[stack.type], operands=[value, stack, i],
        attributes=_slice_attrs(y.ndim, y.shape, [1, 1, 1, 0, 0])).result


def _move_body(old: ir.Block, new: ir.Block) -> None:
    """Move every op of `old` into `new`, remapping `old`'s arguments to `new`'s first ones."""
    for a, n in zip(old.arguments, new.arguments):
        a.replace_all_uses_with(n)
    ip = ir.InsertionPoint(new)
    for o in list(old.operations):
        ip.insert(o.operation.detach_from_parent())


def _carry_tracers(init: Any) -> tuple[list[Tracer], pytree.TreeDef]:
    leaves, tree = pytree.tree_flatten(init)
    return [as_tracer(x) for x in leaves], tree


def _promoted(carry: list[Tracer], dtypes: dict[int, np.dtype]) -> list[Tracer]:
    return [primitives.convert(t, dtypes[k], weak_type=False) if k in dtypes else t
            for k, t in enumerate(carry)]


def _results(parent: FunctionTrace, values: Sequence[ir.Value],
             avals: Sequence[ShapedArray]) -> list[Tracer]:
    return [parent.wrap(v, a) for v, a in zip(values, avals)]


# --------------------------------------------------------------------------- scf.for

#: One iteration: body(region, iv, carry tracers) -> (carry output pytree, y tracers,
#: the row the ys go to: an index value of the region, or None without ys).
ForBody = Callable[[RegionTrace, ir.Value, list[Tracer]],
                   tuple[Any, list[Tracer], ir.Value | None]]


def _emit_for(who: str, what: str, lb: ir.Value, ub: ir.Value, carry: list[Tracer],
              tree: pytree.TreeDef, body: ForBody,
              stacked: int | None) -> tuple[list[Tracer], list[Tracer]]:
    """Emit one `scf.for lb..ub` carrying `carry`; returns (carry results, stacked ys).

    `body` traces one iteration; its ys (when `stacked` is the trip count)
    are written to row i of outputs of shape [stacked, ...] carried by the
    loop. Their types are only known once the body is traced, so the body is
    traced into a loop without them, then moved into the final loop.
    """
    parent = require_trace(who)
    while True:
        avals = [t.aval for t in carry]
        with parent.emitting():
            one = arith.constant(ir.IndexType.get(), 1)
            staging = scf.ForOp(lb, ub, one, [t.value for t in carry])
        region = RegionTrace(parent, staging.body, [_INDEX_AVAL, *avals], who)
        try:
            with region.active():
                out, ys, row = body(region, staging.induction_variable, region.args[1:])
                outs = _carry_outputs(who, what, region, tree, avals, out)
                ys = [region.lift(y) for y in ys]
        except _Promote as p:
            region.finished = True
            staging.operation.erase()
            carry = _promoted(carry, p.dtypes)
            continue
        except BaseException:
            region.finished = True
            staging.operation.erase()
            raise
        break
    out_avals = [a if not a.weak_type or o.weak_type else a.strong()
                 for a, o in zip(avals, outs)]
    if not ys:
        _yield(region, [o.value for o in outs])
        return _results(parent, staging.results, out_avals), []
    y_avals = [ShapedArray((stacked, *y.shape), y.dtype) for y in ys]
    with parent.emitting():
        inits = [primitives._filled(a.shape, a.dtype, 0) for a in y_avals]
        loop = scf.ForOp(lb, ub, one, [t.value for t in carry] + inits)
    assert row is not None
    # The body may hand back its own block arguments (an unchanged carry, y = c):
    # point those at the final loop's arguments before the staging loop goes.
    new_args = dict(zip(staging.body.arguments, loop.body.arguments))
    row, *values = [new_args.get(v, v) for v in [row, *(t.value for t in outs + ys)]]
    _move_body(staging.body, loop.body)
    region.block = loop.body
    staging.operation.erase()
    n = len(carry)
    stacks = list(loop.body.arguments)[1 + n:]
    with region.emitting():
        written = [_write_row(s, y, v, row) for s, y, v in zip(stacks, ys, values[n:])]
        scf.YieldOp(values[:n] + written)
    region.finish([])
    res = list(loop.results)
    return _results(parent, res[:n], out_avals), _results(parent, res[n:], y_avals)


def _is_int_array(b: Any) -> bool:
    """A concrete 0-d integer array (a static bound, like a Python int)."""
    return isinstance(b, np.ndarray) and b.ndim == 0 and np.issubdtype(b.dtype, np.integer)


def _bounds(who: str, lower: Any, upper: Any) -> tuple[ir.Value, ir.Value, ShapedArray]:
    """fori_loop's bounds as `index` values, and the abstract value of the counter."""
    traced = []
    lower, upper = (int(b) if _is_int_array(b) else b for b in (lower, upper))
    for name, b in (("lower", lower), ("upper", upper)):
        if isinstance(b, Tracer):
            if b.ndim != 0 or not np.issubdtype(b.dtype, np.integer):
                raise TypeError(f"{who}: {name} must be an integer scalar, got {b.aval} (at "
                                f"{format_site()})")
            traced.append(b)
        elif not isinstance(b, (int, np.integer)) or isinstance(b, (bool, np.bool_)):
            raise TypeError(f"{who}: {name} must be an int or an integer scalar array, got "
                            f"{type(b).__name__} (at {format_site()})")
    _reject_batched_bounds(who, traced)
    dtype = (np.result_type(*[t.dtype for t in traced]) if traced else np.dtype(np.int64))
    trace = require_trace(who)
    bounds = [trace.lift(b) if isinstance(b, Tracer) else int(b) for b in (lower, upper)]
    with trace.emitting():
        idx = [_as_index(b) if isinstance(b, Tracer)
               else arith.constant(ir.IndexType.get(), b) for b in bounds]
    return idx[0], idx[1], ShapedArray((), dtype, weak_type=not traced)


def _reject_batched_bounds(who: str, bounds: list[Tracer]) -> None:
    """Bounds that vary across a vmap's lanes cannot drive one scf.for: say so here."""
    level = active_vmap_level()
    if level is None or not bounds:
        return
    if True in level.batched_leaves(bounds):
        raise ValueError(
            f"{who}: the loop bounds depend on a batched (vmapped) argument at "
            f"{format_site()}; one scf.for cannot run a different trip count per lane. Use "
            "while_loop with the bound in its carry (it batches), or pass the bound unbatched "
            "(in_axes=None)")


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any],
              init_val: Any) -> Any:
    """`body_fun(i, carry)` for i in [lower, upper), starting from `init_val` (jax.lax).

    `lower`/`upper` are Python ints or integer scalars (traced bounds give a
    loop whose trip count is only known at run time); `i` is a 0-d integer
    array (int64 for Python-int bounds, else the bounds' dtype). The carry is
    a pytree of arrays and scalars whose leaves keep their shapes and dtypes.
    Emits one `scf.for`; an empty range returns `init_val`.
    """
    who = "fori_loop"
    if current_trace() is None:
        return _eager_fori(who, lower, upper, body_fun, init_val)
    carry, tree = _carry_tracers(init_val)
    lb, ub, i_aval = _bounds(who, lower, upper)

    def body(region: RegionTrace, iv: ir.Value, args: list[Tracer]
             ) -> tuple[Any, list[Tracer], None]:
        with region.emitting():
            i = region.wrap(_index_tensor(iv, i_aval.dtype), i_aval)
        return body_fun(i, pytree.tree_unflatten(tree, args)), [], None

    outs, _ = _emit_for(who, "body_fun", lb, ub, carry, tree, body, None)
    return pytree.tree_unflatten(tree, outs)


def _eager_fori(who: str, lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any],
                init_val: Any) -> Any:
    init, tree = pytree.tree_flatten(init_val)
    val = init_val
    for i in range(int(lower), int(upper)):
        leaves = _check_eager_carry(who, "body_fun", tree, init, body_fun(np.int64(i), val))
        val = pytree.tree_unflatten(tree, leaves)
    return val


# --------------------------------------------------------------------------- scan

def _scan_length(who: str, xs: Sequence[Any], length: int | None) -> int:
    """The trip count: the common leading size of the xs leaves (and `length`)."""
    for x in xs:
        if x.ndim == 0:
            raise ValueError(f"{who}: xs leaves must have a leading axis to scan over, got "
                             f"a 0-d value (at {format_site()})")
    lengths = {x.shape[0] for x in xs}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) > 1:
        raise ValueError(f"{who} got values with different leading axis sizes: "
                         f"{sorted(lengths)} (at {format_site()})")
    if not lengths:
        raise ValueError(f"{who}: give xs or length (at {format_site()})")
    return lengths.pop()


def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None,
         length: int | None = None, reverse: bool = False) -> tuple[Any, Any]:
    """Loop `carry, y = f(carry, x)` over the leading axis of `xs` (jax.lax.scan).

    `xs` is a pytree of arrays scanned along axis 0 (or None, with
    `length`); returns `(carry, ys)`, ys being the `y` leaves stacked along a
    new leading axis (None when `f` returns None for y). `reverse=True`
    runs from the last slice to the first (ys stay in xs's order). One
    `scf.for` with the stacked outputs as carried tensors.
    """
    who = "scan"
    if current_trace() is None:
        return _eager_scan(who, f, init, xs, length, reverse)
    x_leaves, x_tree = pytree.tree_flatten(xs)
    x_tracers = [as_tracer(x) for x in x_leaves]
    n = _scan_length(who, x_tracers, length)
    carry, tree = _carry_tracers(init)
    trace = require_trace(who)
    with trace.emitting():
        lb = arith.constant(ir.IndexType.get(), 0)
        ub = arith.constant(ir.IndexType.get(), n)
    y_tree: list[pytree.TreeDef] = []

    def body(region: RegionTrace, iv: ir.Value, args: list[Tracer]
             ) -> tuple[Any, list[Tracer], ir.Value]:
        i = iv
        if reverse:
            with region.emitting():
                i = arith.subi(arith.constant(ir.IndexType.get(), n - 1), iv)
        x = pytree.tree_unflatten(x_tree, [_row(t, i, region) for t in x_tracers])
        out = f(pytree.tree_unflatten(tree, args), x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"{who}: f must return a pair (carry, y), got "
                            f"{type(out).__name__} (at {format_site()})")
        y_leaves, yt = pytree.tree_flatten(out[1])
        y_tree[:] = [yt]
        return out[0], [as_tracer(y) for y in y_leaves], i

    outs, ys = _emit_for(who, "f", lb, ub, carry, tree, body, n)
    return pytree.tree_unflatten(tree, outs), pytree.tree_unflatten(y_tree[0], ys)


def _eager_scan(who: str, f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any,
                length: int | None, reverse: bool) -> tuple[Any, Any]:
    x_leaves, x_tree = pytree.tree_flatten(xs)
    arrays = [np.asarray(x) for x in x_leaves]
    n = _scan_length(who, arrays, length)
    init_leaves, tree = pytree.tree_flatten(init)
    carry, rows = init, []
    order = range(n - 1, -1, -1) if reverse else range(n)
    for t in order:
        carry, y = f(carry, pytree.tree_unflatten(x_tree, [a[t] for a in arrays]))
        carry = pytree.tree_unflatten(tree, _check_eager_carry(who, "f", tree, init_leaves,
                                                               carry))
        rows.append(y)
    if reverse:
        rows.reverse()
    if not rows:
        return carry, None
    y_leaves = [pytree.tree_leaves(r) for r in rows]
    stacked = [np.stack([np.asarray(r[k]) for r in y_leaves]) for k in range(len(y_leaves[0]))]
    return carry, pytree.tree_unflatten(pytree.tree_structure(rows[0]), stacked)


# --------------------------------------------------------------------------- scf.while

def _condition(who: str, out: Any) -> ir.Value:
    """cond_fun's result as the i1 scf.condition takes (emitted in the active region)."""
    t = as_tracer(out)
    if t.shape != () or t.dtype != np.dtype(np.bool_):
        raise TypeError(f"{who}: cond_fun must return a boolean scalar, but got output type "
                        f"{t.aval.str_short()} (at {format_site()})")
    with t.trace.emitting():
        v = tensor.extract(t.value, [])
        if v.type == ir.IntegerType.get_signless(1):
            return v
        return arith.cmpi(arith.CmpIPredicate.ne, v, arith.constant(v.type, 0))


def _new_block(region: ir.Region, avals: Sequence[ShapedArray]) -> ir.Block:
    types = [a.mlir_type() for a in avals]
    return region.blocks.append(*types, arg_locs=[ir.Location.current] * len(types))


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any],
               init_val: Any) -> Any:
    """`while cond_fun(val): val = body_fun(val)`, from `init_val` (jax.lax.while_loop).

    `cond_fun` returns a boolean scalar; `body_fun` keeps the carry's types.
    Emits one `scf.while`. Unlike JAX, reverse mode works: the backward pass
    records a tape as long as the loop ran.
    """
    who = "while_loop"
    if current_trace() is None:
        init, tree = pytree.tree_flatten(init_val)
        val = init_val
        while bool(cond_fun(val)):
            val = pytree.tree_unflatten(
                tree, _check_eager_carry(who, "body_fun", tree, init, body_fun(val)))
        return val
    carry, tree = _carry_tracers(init_val)
    parent = require_trace(who)
    while True:
        avals = [t.aval for t in carry]
        with parent.emitting():
            op = scf.WhileOp([a.mlir_type() for a in avals], [t.value for t in carry])
            before = _new_block(op.before, avals)
            after = _new_block(op.after, avals)
        cond = RegionTrace(parent, before, avals, who)
        step = RegionTrace(parent, after, avals, who)
        try:
            with cond.active():
                go = _condition(who, cond_fun(pytree.tree_unflatten(tree, cond.args)))
                with cond.emitting():
                    scf.ConditionOp(go, [a.value for a in cond.args])
                cond.finish([])
            with step.active():
                out = body_fun(pytree.tree_unflatten(tree, step.args))
                outs = _carry_outputs(who, "body_fun", step, tree, avals, out)
                _yield(step, [o.value for o in outs])
        except _Promote as p:
            cond.finished = step.finished = True
            op.operation.erase()
            carry = _promoted(carry, p.dtypes)
            continue
        except BaseException:
            cond.finished = step.finished = True
            op.operation.erase()
            raise
        break
    out_avals = [a if not a.weak_type or o.weak_type else a.strong()
                 for a, o in zip(avals, outs)]
    return pytree.tree_unflatten(tree, _results(parent, op.results, out_avals))


# --------------------------------------------------------------------------- cond, switch

def _pred_value(who: str, pred: Any) -> Tracer:
    """`cond`'s predicate as a 0-d boolean tracer (a number is compared with 0, as jax)."""
    a = abstractify(pred)
    if isinstance(pred, (list, tuple)) or a.shape != ():
        raise TypeError(f"{who}: the predicate must be a scalar, got a value of shape "
                        f"{np.shape(pred) if not isinstance(pred, Tracer) else a.shape} "
                        f"(at {format_site()})")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{who}: the predicate must be a boolean or a number, got "
                        f"{a.str_short()} (at {format_site()})")
    t = as_tracer(pred)
    return t if a.dtype.kind == "b" else t != 0


def _index_value(who: str, index: Any) -> Any:
    """`switch`'s index, checked: an integer scalar (traced or concrete)."""
    a = abstractify(index)
    if isinstance(index, (list, tuple)) or a.shape != ():
        raise TypeError(f"{who}: the branch index must be a scalar, got a value of shape "
                        f"{a.shape if isinstance(index, Tracer) else np.shape(index)} "
                        f"(at {format_site()})")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{who}: the branch index must be an integer, got {a.str_short()} "
                        f"(at {format_site()})")
    return index


def _i1(t: Tracer) -> ir.Value:
    """A 0-d boolean tracer of the active trace as the i1 scf.if takes."""
    with t.trace.emitting():
        v = tensor.extract(t.value, [])
        if v.type == ir.IntegerType.get_signless(1):
            return v
        return arith.cmpi(arith.CmpIPredicate.ne, v, arith.constant(v.type, 0))


def _branch_mismatch(who: str, names: Sequence[str], trees: Sequence[pytree.TreeDef],
                     avals: Sequence[Sequence[ShapedArray]]) -> TypeError | None:
    """The error for branches whose outputs differ in structure, shape or dtype (else None)."""
    for k in range(1, len(trees)):
        if trees[k] != trees[0]:
            return TypeError(f"{who}: {names[0]} and {names[k]} must return the same pytree "
                             f"structure, got {trees[0]} and {trees[k]} (at {format_site()})")
    lines = []
    for k in range(1, len(trees)):
        for path, a, b in zip(_leaf_paths(trees[0], "output"), avals[0], avals[k]):
            if a.shape != b.shape or (a.dtype != b.dtype
                                      and not (a.weak_type or b.weak_type)):
                why = ("the shapes do not match" if a.shape != b.shape
                       else "the dtypes do not match")
                lines.append(f"  * {path} is {a.str_short()} in {names[0]} but "
                             f"{b.str_short()} in {names[k]}, so {why}")
    if not lines:
        return None
    return TypeError(f"{who}: the branches must return equal output types, but they differ "
                     f"(at {format_site()}):\n" + "\n".join(lines))


def _joint_avals(per_branch: Sequence[Sequence[ShapedArray]]) -> list[ShapedArray]:
    """Each output's type: a weakly typed output takes the dtype of a strong one."""
    out = []
    for avals in zip(*per_branch):
        strong = [a for a in avals if not a.weak_type]
        a = strong[0] if strong else avals[0]
        out.append(ShapedArray(a.shape, a.dtype, weak_type=not strong))
    return out


def _emit_branches(who: str, names: Sequence[str], branches: Sequence[Callable[..., Any]],
                   conds: Sequence[ir.Value], operands: tuple[Any, ...]) -> Any:
    """Trace every branch once and emit the chain of `scf.if` choosing one.

    `conds[k]` (an i1 of the active trace) selects branch k when the conditions
    before it are false; the last branch is the final else. Each branch is
    traced into the then-block of a staging `scf.if` (the result types are only
    known afterwards), checked against the others, then moved into the final op.
    """
    parent = require_trace(who)
    leaves, in_tree = pytree.tree_flatten(operands)
    args = [as_tracer(x) for x in leaves]
    staged, regions, outs, trees = [], [], [], []
    with parent.emitting():
        true = arith.constant(ir.IntegerType.get_signless(1), 1)
    try:
        for fn in branches:
            with parent.emitting():
                st = scf.IfOp(true, [], has_else=False)
            staged.append(st)
            region = RegionTrace(parent, st.then_block, [], who)
            regions.append(region)
            with region.active():
                out = fn(*pytree.tree_unflatten(in_tree, args))
                out_leaves, tree = pytree.tree_flatten(out)
                outs.append([region.lift(as_tracer(x)) for x in out_leaves])
            trees.append(tree)
        err = _branch_mismatch(who, names, trees, [[o.aval for o in r] for r in outs])
        if err is not None:
            raise err
        avals = _joint_avals([[o.aval for o in r] for r in outs])
        for region, r in zip(regions, outs):
            with region.active():
                r[:] = [o if o.dtype == a.dtype else
                        primitives.convert(o, a.dtype, weak_type=a.weak_type)
                        for o, a in zip(r, avals)]
            region.finish([])
    except BaseException:
        for region in regions:
            region.finished = True
        for st in staged:
            st.operation.erase()
        true.owner.erase()
        raise
    loc = user_location(parent.context)
    with parent.context, loc:
        types = [a.mlir_type() for a in avals]

    def fill(block: ir.Block, k: int) -> None:
        _move_body(staged[k].then_block, block)
        with parent.context, loc, ir.InsertionPoint(block):
            scf.YieldOp([o.value for o in outs[k]])

    def chain(k: int, ip: ir.InsertionPoint) -> Any:
        with parent.context, loc:
            op = scf.IfOp(conds[k], types, has_else=True, ip=ip)
        fill(op.then_block, k)
        if k + 2 == len(branches):
            fill(op.else_block, k + 1)
        else:
            inner = chain(k + 1, ir.InsertionPoint(op.else_block))
            with parent.context, loc, ir.InsertionPoint(op.else_block):
                scf.YieldOp(list(inner.results))
        return op

    with parent.emitting():
        op = chain(0, ir.InsertionPoint(parent.block))
    for st in staged:
        st.operation.erase()
    true.owner.erase()
    return pytree.tree_unflatten(trees[0], _results(parent, op.results, avals))


def _eager_checked(who: str, traced: Callable[..., Any], args: tuple[Any, ...],
                   taken: Callable[[], Any]) -> Any:
    """Outside a trace: type-check every branch as `jit` would (tracing `traced(*args)`
    into a scratch module), then run only the taken branch on numpy values."""
    leaves, tree = pytree.tree_flatten(args)
    avals = [abstractify(x) for x in leaves]
    ctx = _scratch_context()
    with ctx, ir.Location.unknown(ctx):
        module = ir.Module.create()
    trace = FunctionTrace(module, who, avals)
    with trace.active():
        out = traced(*pytree.tree_unflatten(tree, trace.args))
        out_avals = [abstractify(x) for x in pytree.tree_leaves(out)]
    leaves, out_tree = pytree.tree_flatten(taken())
    return pytree.tree_unflatten(out_tree, [np.asarray(x, dtype=a.dtype)
                                            for x, a in zip(leaves, out_avals)])


_SCRATCH = threading.local()


def _scratch_context() -> ir.Context:
    """This thread's context for the eager type checks (made once: loading the
    dialects costs more than the check)."""
    ctx = getattr(_SCRATCH, "ctx", None)
    if ctx is None:
        ctx = _SCRATCH.ctx = ir.Context()
        dialects.load(ctx)
    return ctx


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any],
         *operands: Any) -> Any:
    """`true_fun(*operands) if pred else false_fun(*operands)` (jax.lax.cond).

    `pred` is a boolean or numeric scalar (a number means `pred != 0`), traced
    or concrete. Both branches are traced once and must return the same
    pytree structure with leaves of equal shapes and dtypes (a Python scalar
    output adopts the other branch's dtype); a mismatch is a `TypeError`
    naming the leaf. Emits one `scf.if`; under `vmap` with a batched
    predicate both branches run and a select picks each lane's result, as in
    jax. Branches may use values of the enclosing function. Outside a trace
    both branches are type-checked and only the taken one runs.
    """
    who = "cond"
    if not callable(true_fun) or not callable(false_fun):
        raise TypeError(f"{who}: true_fun and false_fun must be callables (at "
                        f"{format_site()})")
    if current_trace() is None:
        return _eager_checked(who, lambda p, *ops: cond(p, true_fun, false_fun, *ops),
                              (pred, *operands),
                              lambda: (true_fun if pred else false_fun)(*operands))
    c = _i1(_pred_value(who, pred))
    return _emit_branches(who, ["true_fun", "false_fun"], [true_fun, false_fun], [c],
                          operands)


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """`branches[clip(index, 0, len(branches) - 1)](*operands)` (jax.lax.switch).

    `index` is an integer scalar, traced or concrete; out-of-range values are
    clamped, as in jax. Every branch is traced once and all must return the
    same output types (see `cond`). Emits a chain of `scf.if` (branch k when
    index == k, the last branch otherwise); under `vmap` with a batched index
    every branch runs and selects pick each lane's result.
    """
    who = "switch"
    try:
        branches = list(branches)
    except TypeError:
        raise TypeError(f"{who}: branches must be a sequence of callables, got "
                        f"{type(branches).__name__} (at {format_site()})") from None
    if not branches:
        raise ValueError(f"{who}: branches is empty; give at least one branch (at "
                         f"{format_site()})")
    if not all(callable(b) for b in branches):
        raise TypeError(f"{who}: branches must be a sequence of callables (at "
                        f"{format_site()})")
    _index_value(who, index)
    n = len(branches)
    if current_trace() is None:
        k = int(np.clip(int(index), 0, n - 1))
        if n == 1:
            return branches[0](*operands)
        return _eager_checked(who, lambda i, *ops: switch(i, branches, *ops),
                              (index, *operands), lambda: branches[k](*operands))
    if n == 1:
        return branches[0](*operands)
    i = anp.clip(as_tracer(index), 0, n - 1)
    conds = [_i1(i == k) for k in range(n - 1)]
    names = [f"branch {k}" for k in range(n)]
    return _emit_branches(who, names, branches, conds, operands)


# --------------------------------------------------------------------------- select, map

def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """Elementwise `on_true if pred else on_false` (jax.lax.select).

    `pred` is a boolean array of the cases' shape, or a boolean scalar;
    `on_true` and `on_false` have equal shapes and dtypes (a Python scalar
    takes the other's dtype). No broadcasting, as in jax: both sides are
    computed, only the derivative of the chosen side flows.
    """
    who = "select"
    p, a, b = abstractify(pred), abstractify(on_true), abstractify(on_false)
    if p.dtype != np.dtype(np.bool_):
        raise TypeError(f"{who}: pred must be a boolean array, got {p.str_short()} (at "
                        f"{format_site()})")
    if a.shape != b.shape:
        raise TypeError(f"{who}: on_true and on_false must have the same shape, got "
                        f"{a.str_short()} and {b.str_short()} (at {format_site()})")
    if a.dtype != b.dtype and not (a.weak_type or b.weak_type):
        raise TypeError(f"{who}: on_true and on_false must have the same dtype, got "
                        f"{a.str_short()} and {b.str_short()} (at {format_site()})")
    if p.shape not in ((), a.shape):
        raise TypeError(f"{who}: pred must be a scalar or have the cases' shape {a.shape}, "
                        f"got {p.str_short()} (at {format_site()})")
    dtype = a.dtype if not a.weak_type or b.weak_type else b.dtype
    if current_trace() is None:
        return np.where(np.asarray(pred), np.asarray(on_true, dtype),
                        np.asarray(on_false, dtype))
    return anp.where(pred, anp.asarray(on_true, dtype), anp.asarray(on_false, dtype))


def map(f: Callable[[Any], Any], xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """`f` over the leading axis of `xs`, results stacked (jax.lax.map).

    `xs` is a pytree of arrays with a common leading size; `f` takes one
    slice of each and returns a pytree. A `scan` without carry: one
    `scf.for`, traced once. With `batch_size`, `f` runs `vmap`ped on
    batches of that many slices (the remainder as one last batch), as jax.
    """
    who = "map"
    if batch_size is None:
        def step(carry: Any, x: Any) -> tuple[Any, Any]:
            return carry, f(x)

        return scan(step, None, xs)[1]
    if int(batch_size) < 1:
        raise ValueError(f"{who}: batch_size must be a positive integer, got {batch_size} "
                         f"(at {format_site()})")
    leaves, tree = pytree.tree_flatten(xs)
    n = _scan_length(who, [abstractify(x) for x in leaves], None)
    bs = int(batch_size)
    full, rest = n // bs * bs, n % bs
    out = None
    if full:
        blocks = [anp.reshape(x[:full], (n // bs, bs, *anp.shape(x)[1:])) for x in leaves]
        ys = map(vmap(f), pytree.tree_unflatten(tree, blocks))
        out = pytree.tree_map(lambda y: anp.reshape(y, (full, *anp.shape(y)[2:])), ys)
    if rest:
        tail = vmap(f)(pytree.tree_unflatten(tree, [x[full:] for x in leaves]))
        out = tail if out is None else pytree.tree_map(
            lambda a, b: anp.concatenate([a, b]), out, tail)
    return out


# --------------------------------------------------------------------------- sorting and scans
# jax.lax's sorting and cumulative reductions, on `mlir_autodiff.numpy`'s
# bitonic network and associative scan (see numpy.py): differentiable through
# the permutation / the scan's combination tree, exactly as jax's rules.

def _operand(who: str, x: Any) -> Any:
    t = as_tracer(x)
    if t.ndim == 0:
        raise ValueError(f"{who}: the operand must have at least one dimension, got a 0-d "
                         f"value (at {format_site()})")
    return t


def _dimension(who: str, dimension: int, ndim: int) -> int:
    if not -ndim <= dimension < ndim:
        raise ValueError(f"{who}: dimension {dimension} is out of bounds for an operand of "
                         f"rank {ndim} (at {format_site()})")
    return dimension % ndim


def _eager_sort_multi(ops: list[np.ndarray], dimension: int,
                      num_keys: int) -> list[np.ndarray]:
    perm = np.lexsort(ops[:num_keys][::-1], axis=dimension)
    return [np.take_along_axis(o, perm, axis=dimension) for o in ops]


def sort(operand: Any, dimension: int = -1, is_stable: bool = True, num_keys: int = 1) -> Any:
    """jax.lax.sort: `operand` (an array, or a sequence of same-shape arrays sorted by the
    first `num_keys`, lexicographically) in ascending order along `dimension`; stable,
    NaNs last. Derivatives move with the permutation."""
    who = "sort"
    multi = isinstance(operand, (tuple, list))
    ops = list(operand) if multi else [operand]
    if not ops:
        raise ValueError(f"{who}: at least one operand is needed (at {format_site()})")
    if not isinstance(num_keys, int) or not 1 <= num_keys <= len(ops):
        raise ValueError(f"{who}: num_keys={num_keys} must be in [1, {len(ops)}] (the number "
                         f"of operands) (at {format_site()})")
    if current_trace() is None:
        arrs = [np.asarray(o) for o in ops]
        if any(a.shape != arrs[0].shape for a in arrs) or arrs[0].ndim == 0:
            raise ValueError(f"{who}: operands must be arrays of one shape, got "
                             f"{[a.shape for a in arrs]}")
        out = _eager_sort_multi(arrs, _dimension(who, dimension, arrs[0].ndim), num_keys)
        return tuple(out) if multi else out[0]
    ts = [_operand(who, o) for o in ops]
    if any(t.shape != ts[0].shape for t in ts):
        raise ValueError(f"{who}: operands must have one shape, got "
                         f"{[t.shape for t in ts]} (at {format_site()})")
    ax = _dimension(who, dimension, ts[0].ndim)
    last = [anp._to_last(t, ax) for t in ts]
    v, _, rest = anp._sort_last(last[0], last[1:], num_keys)
    out = [anp._from_last(x, ax) for x in [v, *rest]]
    return tuple(out) if multi else out[0]


def sort_key_val(keys: Any, values: Any, dimension: int = -1,
                 is_stable: bool = True) -> tuple[Any, Any]:
    """jax.lax.sort_key_val: `keys` sorted along `dimension` and `values` moved alike."""
    return sort((keys, values), dimension=dimension, is_stable=is_stable)


def top_k(operand: Any, k: int) -> tuple[Any, Any]:
    """jax.lax.top_k: the `k` largest entries along the last axis and their int32 indices,
    largest first; equal values keep their order, NaNs count as largest."""
    who = "top_k"
    if isinstance(k, Tracer) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{who}: k must be a static int, got {type(k).__name__} (at "
                        f"{format_site()})")
    if current_trace() is None:
        arr = np.asarray(operand)
        if arr.ndim == 0 or not 0 <= k <= arr.shape[-1]:
            raise ValueError(f"{who}: k={k} must be within [0, {arr.shape[-1] if arr.ndim else 0}]"
                             f" for an operand of shape {arr.shape}")
        idx = anp._eager_argsort(arr, axis=-1, descending=True)[..., :k]
        return np.take_along_axis(arr, idx, axis=-1), idx.astype(np.int32)
    t = _operand(who, operand)
    n = t.shape[-1]
    if not 0 <= k <= n:
        raise ValueError(f"{who}: k={k} must be within [0, {n}] for an operand of shape "
                         f"{t.shape} (at {format_site()})")
    v, i = anp._argsort_last(t, descending=True)
    v, i = v[..., :k], i[..., :k]
    return v, anp.astype(i, np.int32)


_CUMULATIVE = {
    "cumsum": (lambda a, b: anp.add(a, b), lambda x: np.add.accumulate(x, axis=0, dtype=x.dtype)),
    "cumprod": (lambda a, b: anp.multiply(a, b),
                lambda x: np.multiply.accumulate(x, axis=0, dtype=x.dtype)),
    "cummax": (lambda a, b: anp.maximum(a, b), lambda x: np.maximum.accumulate(x, axis=0)),
    "cummin": (lambda a, b: anp.minimum(a, b), lambda x: np.minimum.accumulate(x, axis=0)),
    "cumlogsumexp": (lambda a, b: anp.logaddexp(a, b),
                     lambda x: np.logaddexp.accumulate(x, axis=0)),
}


def _cumulative(who: str, operand: Any, axis: int, reverse: bool) -> Any:
    fn, eager = _CUMULATIVE[who]
    if current_trace() is None:
        x = np.asarray(operand)
        ax = _dimension(who, axis, x.ndim) if x.ndim else 0
        if who == "cumlogsumexp" and not is_float_dtype(x.dtype):
            raise TypeError(f"{who}: the operand must be floating point, got {x.dtype}")
        x = np.moveaxis(x, ax, 0)
        if reverse:
            x = x[::-1]
        out = eager(x)
        if reverse:
            out = out[::-1]
        return np.moveaxis(out, 0, ax)
    t = as_tracer(operand)
    if t.ndim == 0:
        return t
    ax = _dimension(who, axis, t.ndim)
    if who == "cumlogsumexp" and not is_float_dtype(t.dtype):
        raise TypeError(f"{who}: the operand must be floating point, got {t.dtype} (at "
                        f"{format_site()})")
    if t.shape[ax] == 0:
        return t
    return anp._associative_scan(fn, t, ax, reverse=reverse)


def cumsum(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
    """jax.lax.cumsum: running sum along `axis` in the operand's dtype (`reverse`: from
    the end). Computed and differentiated as jax's associative scan."""
    return _cumulative("cumsum", operand, axis, reverse)


def cumprod(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
    """jax.lax.cumprod: running product along `axis` (exact derivatives through zeros)."""
    return _cumulative("cumprod", operand, axis, reverse)


def cummax(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
    """jax.lax.cummax: running maximum along `axis`; NaN propagates; at ties the
    cotangent splits as jax's (the scan's tree of `maximum`s, each splitting evenly)."""
    return _cumulative("cummax", operand, axis, reverse)


def cummin(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
    """jax.lax.cummin: running minimum along `axis` (see cummax)."""
    return _cumulative("cummin", operand, axis, reverse)


def cumlogsumexp(operand: Any, axis: int = 0, reverse: bool = False) -> Any:
    """jax.lax.cumlogsumexp: running log(sum(exp)) along `axis`, without overflow."""
    return _cumulative("cumlogsumexp", operand, axis, reverse)


# --------------------------------------------------------------------------- dynamic slices
# Windows at traced start indices: gathers and scatters (indexing.py), the
# starts wrapped when negative and clamped so the window fits, as jax's.

def _axis(axis: int, ndim: int, who: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{who}: axis {axis} is out of bounds for an array of dimension "
                         f"{ndim} (at {format_site()})")
    return axis % ndim


_I64 = np.dtype(np.int64)


def _starts(who: str, operand: Tracer, start_indices: Sequence[Any],
            sizes: Sequence[int]) -> list[Tracer]:
    """Per dim, the window's indices `start + arange(size)` with the start
    wrapped (negative) and clamped so the window fits, as jax does."""
    if len(start_indices) != operand.ndim or len(sizes) != operand.ndim:
        raise ShapeError(
            f"{who}: expected {operand.ndim} start indices and sizes (one per dim of an array "
            f"of shape {operand.shape}), got {len(start_indices)} and {len(sizes)} (at "
            f"{format_site()})")
    out = []
    for d, (s, size) in enumerate(zip(start_indices, sizes)):
        n = operand.shape[d]
        if not 0 <= size <= n:
            raise ShapeError(f"{who}: slice size {size} does not fit dim {d} of size {n} (at "
                             f"{format_site()})")
        st = _ix._int_tracer(s, f"{who}: start indices")
        if st.ndim != 0:
            raise ShapeError(f"{who}: each start index must be a scalar, got shape "
                             f"{st.shape} (at {format_site()})")
        st = st.astype(_I64)
        st = anp.where(anp.less(st, 0), st + n, st)
        st = anp.clip(st, 0, n - size)
        out.append(st + anp.arange(size, dtype=_I64))
    return out


def _window_spec(idx: list[Tracer]) -> list[Any]:
    return [(t, [d]) for d, t in enumerate(idx)]


def _start_list(start_indices: Any) -> list[Any]:
    if isinstance(start_indices, Tracer):
        if start_indices.ndim != 1:
            raise ShapeError(f"start indices must be a sequence or a 1-D array, got shape "
                             f"{start_indices.shape} (at {format_site()})")
        return [start_indices[k] for k in range(start_indices.shape[0])]
    if isinstance(start_indices, np.ndarray):
        return list(start_indices.reshape(-1))
    return list(start_indices)


def _eager_window(operand: Any, start_indices: Any, sizes: Sequence[int]) -> tuple:
    """Outside a trace: the window's slices, starts wrapped and clamped as jax's."""
    x = np.asarray(operand)
    starts = [int(s) for s in np.asarray(start_indices).reshape(-1)]
    if len(starts) != x.ndim or len(sizes) != x.ndim:
        raise ShapeError(f"expected {x.ndim} start indices and sizes, got {len(starts)} and "
                         f"{len(sizes)} (at {format_site()})")
    out = []
    for s, size, n in zip(starts, sizes, x.shape):
        s = builtins.min(builtins.max(s + n if s < 0 else s, 0), n - int(size))
        out.append(builtins.slice(s, s + int(size)))
    return x, tuple(out)


def dynamic_slice(operand: Any, start_indices: Any, slice_sizes: Sequence[int]) -> Any:
    """`operand[start:start+size]` per dim at traced starts (clamped to fit, as jax)."""
    if current_trace() is None:
        x, window = _eager_window(operand, start_indices, slice_sizes)
        return x[window].copy()
    x = anp.asarray(operand)
    sizes = [int(s) for s in slice_sizes]
    idx = _starts("dynamic_slice", x, _start_list(start_indices), sizes)
    return primitives.gather(x, _window_spec(idx), sizes)


def dynamic_update_slice(operand: Any, update: Any, start_indices: Any) -> Any:
    """`operand` with the window at traced starts replaced by `update` (starts
    clamped so the whole update fits, as jax)."""
    if current_trace() is None:
        u = np.asarray(update)
        x, window = _eager_window(operand, start_indices, u.shape)
        x = x.copy()
        x[window] = u
        return x
    x = anp.asarray(operand)
    u = primitives.convert(anp.asarray(update), x.dtype)
    if u.ndim != x.ndim:
        raise ShapeError(f"dynamic_update_slice: update of rank {u.ndim} for an operand of "
                         f"rank {x.ndim} (at {format_site()})")
    idx = _starts("dynamic_update_slice", x, _start_list(start_indices), list(u.shape))
    return primitives.scatter(x, _window_spec(idx), u, "set")


def dynamic_slice_in_dim(operand: Any, start_index: Any, slice_size: int,
                         axis: int = 0) -> Any:
    x = anp.asarray(operand)
    ax = _axis(axis, x.ndim, "dynamic_slice_in_dim")
    starts: list[Any] = [0] * x.ndim
    starts[ax] = start_index
    sizes = list(x.shape)
    sizes[ax] = int(slice_size)
    return dynamic_slice(x, starts, sizes)


def dynamic_index_in_dim(operand: Any, index: Any, axis: int = 0,
                         keepdims: bool = True) -> Any:
    """`operand`'s slice `index` (traced, clamped) along `axis`."""
    x = anp.asarray(operand)
    r = dynamic_slice_in_dim(x, index, 1, axis)
    if keepdims:
        return r
    return anp.squeeze(r, _axis(axis, x.ndim, "dynamic_index_in_dim"))


def dynamic_update_slice_in_dim(operand: Any, update: Any, start_index: Any,
                                axis: int) -> Any:
    x = anp.asarray(operand)
    ax = _axis(axis, x.ndim, "dynamic_update_slice_in_dim")
    starts: list[Any] = [0] * x.ndim
    starts[ax] = start_index
    return dynamic_update_slice(x, update, starts)


def dynamic_update_index_in_dim(operand: Any, update: Any, index: Any, axis: int) -> Any:
    x = anp.asarray(operand)
    ax = _axis(axis, x.ndim, "dynamic_update_index_in_dim")
    u = anp.asarray(update)
    if u.ndim == x.ndim - 1:
        u = anp.expand_dims(u, ax)
    return dynamic_update_slice_in_dim(x, u, index, ax)


# jax.lax's everyday operations (add, exp, dot_general, pad, reduce, ...; see lax_ops.py)
# are this module's names too. They are bound here, after this module's own functions,
# which call the builtins (min, max, slice, ...) through `builtins.` where they clash.
RoundingMethod = _lax_ops.RoundingMethod
globals().update({_n: getattr(_lax_ops, _n) for _n in _lax_ops.__all__})


# The collectives imported above are reachable as `lax.psum` & co. (jax's spelling)
# but listed in mlir_autodiff.distributed.__all__: they run only inside shard_map
# under mpiexec, so their rows are in test_distributed.py, not the differential table.
__all__ = ["cond", "conv", "conv_general_dilated", "conv_with_general_padding",
           "cumlogsumexp", "cummax", "cummin", "cumprod", "cumsum",
           "dynamic_index_in_dim", "dynamic_slice", "dynamic_slice_in_dim",
           "dynamic_update_index_in_dim", "dynamic_update_slice",
           "dynamic_update_slice_in_dim", "fori_loop", "map", "reduce_window", "scan",
           "select", "sort", "sort_key_val", "switch", "top_k", "while_loop",
           *_lax_ops.__all__]
