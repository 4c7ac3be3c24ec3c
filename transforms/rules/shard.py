"""Rules of the `shard` dialect's collectives (jvp, vjp and batching side by side).

The program a process runs is differentiated as it stands, with the other
processes' copies of it: the collectives couple them, and their rules are the
derivatives and transposes of the joint linear maps (jax's rules for psum &
co. outside its replication checks, and pmap's). So:

- `shard.all_reduce` with `sum` is linear: its tangent is the all_reduce of
  the tangents, and its transpose the all_reduce (sum) of the cotangents;
- `shard.all_reduce` with `max`/`min`: the derivative is the winning
  process's tangent, elementwise (the lowest process index among ties, found
  with one more all_reduce `min` of the candidates' indices): tangent
  `all_reduce_sum(mine ? t : 0)`, cotangent `mine ? all_reduce_sum(ct) : 0`;
- `shard.all_gather` and `shard.reduce_scatter` (sum) are each other's
  transposes along the same tensor axis;
- `shard.shift` (rotating) transposes to the shift by the opposite offset
  (the inverse permutation; `ppermute` is written with such shifts);
- `shard.process_linear_index` has no float result: the passes skip it.

Batching: a batched operand gains a leading dimension, which every
collective carries through unchanged (the gather/scatter axis moves by one).

What the shard_map boundary adds to these (each process holds its own copy of
the replicated global arguments, so their cotangents are averaged over the
processes) is emitted by the front end (`mlir_autodiff.distributed`).
"""

from __future__ import annotations

from mlir import ir

from ..ad_support import element_type
from ..diagnostics import fail
from .batching import defbatch
from .registry import defjvp_rule, defvjp
from .structured import attrs_of

_SUM = "#shard<partial sum>"


def _kind(op: ir.Operation) -> str:
    """The reduction of an all_reduce / reduce_scatter: sum, max, min, ..."""
    if "reduction" not in op.attributes:
        return "sum"
    return str(op.attributes["reduction"]).rstrip(">").split()[-1]


def _attrs(op: ir.Operation, **changes: ir.Attribute) -> dict[str, ir.Attribute]:
    attrs = attrs_of(op)
    attrs.update(changes)
    return attrs


def _index_attr(n: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IndexType.get(), n)


def _all_reduce(b, op: ir.Operation, x: ir.Value, kind: str) -> ir.Value:
    red = ir.Attribute.parse(f"#shard<partial {kind}>")
    return b.create("shard.all_reduce", [x], [x.type], _attrs(op, reduction=red)).result


def _winner(b, op: ir.Operation) -> ir.Value:
    """i1 tensor: where this process holds the all_reduce max/min result `op` (the
    lowest process index among equal values)."""
    x, m = op.operands[0], op.results[0]
    et = element_type(x.type)
    grid = op.attributes["grid"]
    idx = b.create("shard.process_linear_index", [], [ir.IndexType.get()],
                   {"grid": grid}).result
    i64 = b.create("arith.index_cast", [idx], [ir.IntegerType.get_signless(64)]).result
    me = b.create("arith.sitofp", [i64], [et]).result
    mine = b.fill(b.empty(x.type), me)
    big = b.constant(x.type, float(2 ** 31))
    is_best = b.cmpf("oeq", x, m)
    cand = b.select(is_best, mine, big)
    win = _all_reduce(b, op, cand, "min")
    # (where no process holds the result, a NaN, no process wins)
    won = b.cmpf("oeq", cand, win)
    return b.create("arith.andi", [won, is_best], [won.type]).result


def _check_differentiable(op: ir.Operation) -> str:
    kind = _kind(op)
    if kind not in ("sum", "max", "min"):
        raise fail(op, f"'{op.name}' with reduction {kind} has no derivative rule "
                       "(sum, max and min have)")
    return kind


def _all_reduce_jvp(b, op, tangents):
    (t,) = tangents
    if t is None:
        return [None]
    kind = _check_differentiable(op)
    if kind == "sum":
        return [_all_reduce(b, op, t, "sum")]
    picked = b.select(_winner(b, op), t, b.zeros_like(t))
    return [_all_reduce(b, op, picked, "sum")]


def _all_reduce_vjp(b, op, cts):
    (ct,) = cts
    if ct is None:
        return [None]
    kind = _check_differentiable(op)
    total = _all_reduce(b, op, ct, "sum")
    if kind == "sum":
        return [total]
    return [b.select(_winner(b, op), total, b.zeros_like(total))]


def _linear_jvp(b, op, tangents):
    (t,) = tangents
    if t is None:
        return [None]
    return [b.create(op.name, [t], [op.results[0].type], attrs_of(op)).result]


def _all_gather_vjp(b, op, cts):
    (ct,) = cts
    if ct is None:
        return [None]
    x = op.operands[0]
    axis = ir.IntegerAttr(op.attributes["gather_axis"]).value
    attrs = {k: v for k, v in attrs_of(op).items() if k != "gather_axis"}
    attrs.update(reduction=ir.Attribute.parse(_SUM), scatter_axis=_index_attr(axis))
    return [b.create("shard.reduce_scatter", [ct], [x.type], attrs).result]


def _reduce_scatter_jvp(b, op, tangents):
    if _kind(op) != "sum":
        raise fail(op, f"'{op.name}' with reduction {_kind(op)} has no derivative rule "
                       "(sum has)")
    return _linear_jvp(b, op, tangents)


def _reduce_scatter_vjp(b, op, cts):
    (ct,) = cts
    if ct is None:
        return [None]
    if _kind(op) != "sum":
        raise fail(op, f"'{op.name}' with reduction {_kind(op)} has no derivative rule "
                       "(sum has)")
    x = op.operands[0]
    axis = ir.IntegerAttr(op.attributes["scatter_axis"]).value
    attrs = {k: v for k, v in attrs_of(op).items()
             if k not in ("scatter_axis", "reduction")}
    attrs["gather_axis"] = _index_attr(axis)
    return [b.create("shard.all_gather", [ct], [x.type], attrs).result]


def _shift_vjp(b, op, cts):
    (ct,) = cts
    if ct is None:
        return [None]
    if "rotate" not in op.attributes:
        raise fail(op, f"'{op.name}' without rotate has no derivative rule (the rotating "
                       "shift has)")
    offset = ir.IntegerAttr(op.attributes["offset"])
    back = ir.IntegerAttr.get(offset.type, -offset.value)
    return [b.create(op.name, [ct], [op.operands[0].type], _attrs(op, offset=back)).result]


def _shift_jvp(b, op, tangents):
    if "rotate" not in op.attributes:
        raise fail(op, f"'{op.name}' without rotate has no derivative rule (the rotating "
                       "shift has)")
    return _linear_jvp(b, op, tangents)


defjvp_rule("shard.all_reduce", _all_reduce_jvp)
defvjp("shard.all_reduce", _all_reduce_vjp)
defjvp_rule("shard.all_gather", _linear_jvp)
defvjp("shard.all_gather", _all_gather_vjp)
defjvp_rule("shard.reduce_scatter", _reduce_scatter_jvp)
defvjp("shard.reduce_scatter", _reduce_scatter_vjp)
defjvp_rule("shard.shift", _shift_jvp)
defvjp("shard.shift", _shift_vjp)


# -- batching ------------------------------------------------------------------


def _batched_same(*axis_attrs: str):
    """Batching rule of a collective: the same op on the batched operand, its tensor
    axis attributes `axis_attrs` moved past the new leading dimension."""

    def rule(b, op, vals, batched):
        (x,) = vals
        x = b.ensure_batched(x, batched[0])
        attrs = attrs_of(op)
        for name in axis_attrs:
            attrs[name] = _index_attr(ir.IntegerAttr(op.attributes[name]).value + 1)
        t = b.btype(op.results[0].type)
        return [(b.create(op.name, [x], [t], attrs).result, True)]

    return rule


defbatch("shard.all_reduce", _batched_same())
defbatch("shard.all_gather", _batched_same("gather_axis"))
defbatch("shard.reduce_scatter", _batched_same("scatter_axis"))
defbatch("shard.shift", _batched_same())
