"""Rules of the `scf` dialect (jvp, vjp and batching side by side): for, if,
execute_region. `scf.while` has its own module (`scf_while.py`).

Forward mode rebuilds the op with tangents appended to its results (and to
the loop-carried values), moving the original body in and differentiating
it in place.

Reverse mode of `scf.for`: before the backward sweep the loop is rewritten
to record every carried value at the start of each iteration into a tape
(a tensor of shape [trip count, ...], written with tensor.insert /
insert_slice), except values the derivative never reads and that a tape
cannot hold: write-only ones (a tape being recorded) and dynamically shaped
ones (the cotangent accumulators reverse over reverse carries), which get a
stand-in of their shape, checked unread after the sweep. The backward loop
walks the iterations in reverse: it reads
iteration i's carried values back from the tape, clones the body after them
and runs the reverse rules over the clone, carrying the cotangents of the
carried values and accumulating those of values captured from above. With
a static trip count, the body values the reverse rules read are then taped
in the forward loop too and the clones that computed them die
(`_save_residuals`, what JAX's scan saves), so the body is not run twice;
elements read from a carried tensor are among them, and a carried value
whose tape the backward loop then never reads loses its tape
(`_drop_unread_tapes`: an array updated element by element, a scatter,
costs its elements, not trip x size).
`scf.if` recomputes the taken branch under the saved predicate.

Batching: `scf.for` stays one loop whose carried values that depend on
batched ones get the batch dimension; an `scf.if` with a batched predicate
runs both branches and selects per lane. A single-block `scf.execute_region`
is inlined, in every mode (`--autodiff-vmap` lifts several blocks first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import scf

from ...dialects.vocabulary import RECOMPUTED, STOP_GRADIENT, TAPE, TAPED
from ..ad_support import (
    Builder,
    append_tangents,
    captured_values,
    int_constant,
    is_float,
    op_name,
    tangent_results,
)
from .batching import BatchBuilder, Batched, defbatch, elementwise
from .regions import (
    clone_ops,
    fixpoint,
    holder_op,
    index_op,
    marker_op,
    move_ops,
    scf_yield,
    sweep_recomputed,
    tape_read,
    tape_type,
    tape_write,
    terminator,
)
from .registry import FORWARD_AUGMENT, defjvp_rule, defvjp

# ----------------------------------------------------------------------------
# Forward mode
# ----------------------------------------------------------------------------


def _for_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    ad = b.ad
    fop = op.opview
    lb, ub, step, *inits = list(op.operands)
    fl = [k for k, v in enumerate(inits) if is_float(v.type)]
    t_inits = [b.materialize(ts[3 + k], inits[k]) for k in fl]
    new = scf.ForOp(lb, ub, step, inits + t_inits, loc=op.location, ip=b.ip)
    old_block = fop.body
    nb = new.body
    nargs = list(nb.arguments)
    n = len(inits)
    move_ops(old_block, nb, nargs[: 1 + n])
    for pos, k in enumerate(fl):
        ad.t[nargs[1 + k]] = nargs[1 + n + pos]
    ad.run_block(nb)
    append_tangents(ad, list(nb.operations)[-1], fl, scf_yield)
    return tangent_results(ad, op, new.results, n, fl)


def _if_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    ad = b.ad
    cond = op.operands[0]
    types = [r.type for r in op.results]
    fl = [k for k, t in enumerate(types) if is_float(t)]
    if not op.regions[1].blocks:
        return [None] * len(types)
    new = scf.IfOp(cond, types + [types[k] for k in fl], has_else=True, loc=op.location,
                   ip=b.ip)
    for r in range(2):
        old_block = op.regions[r].blocks[0]
        nb = new.regions[r].blocks[0]
        move_ops(old_block, nb, [])
        ad.run_block(nb)
        append_tangents(ad, list(nb.operations)[-1], fl, scf_yield)
    return tangent_results(ad, op, new.results, len(types), fl)


defjvp_rule("scf.for", _for_jvp)
defjvp_rule("scf.if", _if_jvp)


# ----------------------------------------------------------------------------
# Reverse mode: scf.if
# ----------------------------------------------------------------------------


def _if_vjp(b: Builder, op: ir.Operation, cts: list) -> list:
    ad = b.ad
    if not op.regions[1].blocks:
        return [None]
    cond = op.operands[0]
    caps = [v for v in captured_values(op) if ad.is_active(v)]
    new = scf.IfOp(cond, [v.type for v in caps], has_else=True, loc=op.location, ip=b.ip)
    for r in range(2):
        old_block = op.regions[r].blocks[0]
        nb = new.regions[r].blocks[0]
        ip = ir.InsertionPoint(nb)
        body = list(old_block.operations)
        vmap: dict = {}
        marker = marker_op(Builder(ip, op.location, ad))
        clone_ops(body[:-1], ip, vmap)
        yielded = [vmap.get(v, v) for v in body[-1].operands]
        # (the forward augmentation may replace a yielded value's op: a linalg.reduce
        # becomes a linalg.generic; sweep_recomputed follows the replacement)
        sub = sweep_recomputed(ad, Builder(ip, op.location, ad), marker, yielded, cts,
                               set(caps))
        bb = Builder(ip, op.location, sub)
        scf.YieldOp([bb.materialize(sub.ct.get(v), v) for v in caps], loc=op.location, ip=ip)
    for v, g in zip(caps, new.results):
        ad.add_ct(b, v, g)
    return [None]


defvjp("scf.if", _if_vjp)


# ----------------------------------------------------------------------------
# Reverse mode: scf.for with a tape
# ----------------------------------------------------------------------------


def _write_only(body: ir.Block, j: int) -> bool:
    """Is carried value j only ever written into, never read?

    True when its block argument's one use is as the destination of a
    tensor.insert/insert_slice whose result only goes back to yield slot j:
    the shape of a tape being recorded (what reverse mode of a reverse-mode
    loop meets). The reverse rule of an insert never reads its destination, so
    such a value needs no tape of its own (which would cost trip² memory and
    need a static shape): the backward loop can stand any tensor of its type in
    for it.
    """
    arg = body.arguments[1 + j]
    uses = list(arg.uses)
    if len(uses) != 1 or uses[0].operand_number != 1:
        return False
    writer = uses[0].owner
    if op_name(writer) not in ("tensor.insert", "tensor.insert_slice"):
        return False
    out = list(writer.results[0].uses)
    yield_op = list(body.operations)[-1]
    return (len(out) == 1 and out[0].owner == yield_op.operation
            and out[0].operand_number == j)


def _static(t: ir.Type) -> bool:
    return not isinstance(t, ir.ShapedType) or t.has_static_shape


def _keeps_shape(body: ir.Block, j: int) -> bool:
    """Does carried value j provably keep its (dynamic) shape from one iteration
    to the next? True when the value yielded in slot j is built from its block
    argument by ops whose result has the shape of that operand: an insert into
    it, a destination-passing linalg op writing into it, elementwise arith.
    That is the shape of an accumulator (the cotangent of a tape that a
    reverse-mode loop reads, what reverse over reverse meets)."""
    arg = body.arguments[1 + j]

    def reaches(v: ir.Value, depth: int) -> bool:
        if v == arg:
            return True
        if depth > 64 or isinstance(v.owner, ir.Block):
            return False
        o = v.owner.operation
        if o.block != body or v.type != arg.type:
            return False
        name = op_name(o)
        if name in ("tensor.insert", "tensor.insert_slice"):
            return reaches(o.operands[1], depth + 1)
        if name.startswith("linalg.") and o.results:
            n_in = len(o.operands) - len(o.results)
            return reaches(o.operands[n_in + v.result_number], depth + 1)
        if name.startswith("arith.") and all(x.type == v.type for x in o.operands):
            return any(reaches(x, depth + 1) for x in o.operands)
        return False

    return reaches(list(body.operations)[-1].operands[j], 0)


def _for_augment(ad: Any, op: ir.Operation) -> None:
    """Rewrite an active scf.for to record its carried values per iteration.

    Not recorded: write-only values (`_write_only`) and dynamically shaped
    ones, which a tape of static row type cannot hold. The backward loop
    stands a `tensor.empty` of the right shape in for them (the shape is
    taken before the loop: `_keeps_shape` must show it does not change), and
    `_check_unrecorded` makes sure after the sweep that no derivative reads
    their values (the cotangent accumulators that reverse over reverse
    carries are read by linear ops only, whose rules need no primal value).
    """
    fop = op.opview
    lb, ub, step, *inits = list(op.operands)
    untaped = [j for j in range(len(inits))
               if _write_only(fop.body, j) or not _static(inits[j].type)]
    taped = [j for j in range(len(inits)) if j not in untaped]
    for j in untaped:
        if not _static(inits[j].type) and not _keeps_shape(fop.body, j):
            raise ad.fail(op, f"reverse mode of 'scf.for' needs statically shaped carried "
                              f"tensors: carried value #{j} has type {inits[j].type} and "
                              "may change its shape from one iteration to the next")
    b = Builder(ir.InsertionPoint(op), op.location, ad, op)
    # The dynamic sizes of the unrecorded values, for their stand-ins.
    dims: list[list[ir.Value]] = [
        b.dims(inits[j]) if j in untaped and isinstance(inits[j].type, ir.ShapedType) else []
        for j in range(len(inits))]
    bounds = [int_constant(v) for v in (lb, ub, step)]
    if None not in bounds:
        # Static trip count: a statically shaped tape.
        lo, hi, st = bounds
        trip = max(0, -(-(hi - lo) // st))
        n = b.index(trip)
        tapes0 = [b.create("tensor.empty", [], [tape_type(inits[j].type, trip)]).result
                  for j in taped]
    else:
        one = b.index(1)
        span = index_op(b, "arith.subi", ub, lb)
        n = index_op(b, "arith.divui",
                 index_op(b, "arith.subi", index_op(b, "arith.addi", span, step), one), step)
        # An empty range (ub <= lb) has no iteration: clamp the trip count at 0.
        zero = b.index(0)
        i1, i64 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
        neg = b.create("arith.cmpi", [ub, lb], [i1],
                       {"predicate": ir.IntegerAttr.get(i64, 3)}).result  # sle
        n = b.create("arith.select", [neg, zero, n], [ir.IndexType.get()]).result
        tapes0 = [b.create("tensor.empty", [n], [tape_type(inits[j].type)]).result
                  for j in taped]
    new = scf.ForOp(lb, ub, step, inits + tapes0, loc=op.location, ip=ir.InsertionPoint(op))
    nb = new.body
    nargs = list(nb.arguments)
    k = len(inits)
    move_ops(fop.body, nb, nargs[: 1 + k])
    first = list(nb.operations)[0]
    bb = Builder(ir.InsertionPoint(first), op.location, ad)
    i = index_op(bb, "arith.divui", index_op(bb, "arith.subi", nargs[0], lb), step)
    tapes = [tape_write(bb, tp, nargs[1 + j], i) for tp, j in zip(nargs[1 + k:], taped)]
    for o in list(nb.operations):
        if o.operation == first.operation:
            break
        o.operation.attributes[TAPE] = ir.UnitAttr.get()  # not part of the primal
    y = list(nb.operations)[-1]
    scf.YieldOp(list(y.operands) + tapes, loc=y.location, ip=ir.InsertionPoint(y))
    y.erase()
    res = list(new.results)
    for old, nv in zip(op.results, res[:k]):
        old.replace_all_uses_with(nv)
        if old in ad.active:
            ad.active.add(nv)
    by_slot: list[ir.Value | None] = [None] * k
    for j, tp in zip(taped, res[k:]):
        by_slot[j] = tp
    ad.tapes[res[0]] = (by_slot, n, dims)
    new.operation.attributes[TAPED] = ir.UnitAttr.get()
    op.erase()




def _check_unrecorded(ad: Any, op: ir.Operation, block: ir.Block,
                      standins: dict[int, ir.Value]) -> None:
    """After the backward loop of `op` is complete: erase the recomputed ops
    (marked RECOMPUTED) that nothing reads any more, then make sure the
    stand-ins of unrecorded carried values are only asked for their shape
    (`tensor.dim`). A derivative that needs such a value is a diagnostic,
    never a read of the uninitialized stand-in."""
    for o in reversed(list(block.operations)):
        o = o.operation
        if RECOMPUTED not in o.attributes:
            continue
        if o.results and not any(True for r in o.results for _ in r.uses):
            o.erase()
        else:
            del o.attributes[RECOMPUTED]
    for j, v in standins.items():
        for u in v.uses:
            if op_name(u.owner) == "tensor.dim":
                continue
            if _static(v.type):  # a write-only value (`_write_only`) is never read
                raise ad.fail(op, f"internal: the derivative of 'scf.for' reads its "
                                  f"write-only carried value #{j}")
            raise ad.fail(op, f"reverse mode of 'scf.for' cannot differentiate through "
                                  f"carried value #{j} of type {v.type}: the derivative "
                                  "needs its value in every iteration, and a value of "
                                  "dynamic shape cannot be recorded (give it a static shape)")


#: Ops cheaper to recompute in the backward loop than to save per iteration
#: (constants, views, fills): their results are never taped.
_RECOMPUTE_CHEAP = frozenset((
    "arith.constant", "tensor.empty", "tensor.extract", "tensor.extract_slice",
    "tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape", "tensor.splat",
    "tensor.cast", "linalg.fill", STOP_GRADIENT,
))

#: Bound on the memory of the residuals one loop saves (trip count x bytes per
#: iteration). Beyond it the backward loop recomputes the body from the carried
#: values alone, as `checkpoint` around the body would.
MAX_SAVED_RESIDUAL_BYTES = 1 << 30


def _saveable(op: ir.Operation, v: ir.Value) -> bool:
    """Can `v`, a result of the loop body's `op`, be saved in a tape?

    An element read from a carried tensor is saved (not recomputed): its
    recomputation would need the whole carried tensor taped per iteration
    (an array updated element by element, as a scatter's)."""
    if op_name(op) == "tensor.extract":
        src = op.operands[0]
        return (isinstance(src, ir.BlockArgument) and src.owner == op.block
                and src.arg_number > 0 and isinstance(v.type, ir.FloatType))
    if op_name(op) in _RECOMPUTE_CHEAP or op_name(op).startswith("scf."):
        return False
    t = v.type
    if isinstance(t, ir.RankedTensorType):
        return t.has_static_shape and isinstance(t.element_type, ir.FloatType)
    return isinstance(t, ir.FloatType)


def _nbytes(t: ir.Type) -> int:
    if isinstance(t, ir.RankedTensorType):
        return math.prod(t.shape) * max(1, t.element_type.width // 8)
    return max(1, t.width // 8)


def _save_residuals(ad: Any, op: ir.Operation, primal_ops: Sequence[Any],
                    recomputed: Sequence[ir.Value], trip: int, anchor: ir.Operation,
                    i: ir.Value) -> None:
    """Save the body values the backward loop needs instead of recomputing them.

    The backward loop of `op` starts as a recomputation of the body (clones of
    `primal_ops`, whose results are `recomputed`, in order) followed by the
    reverse rules. Walking the clones backwards, a clone nothing reads any more
    is erased; a saveable result (`_saveable`) that the reverse code still
    reads is recorded into a tape of `op` (one row per iteration, as the
    carried values are) and read back at `anchor`, so its clone dies too. What
    is left recomputed is cheap (views, constants) or not saveable (nested
    loops). This is what scan's reverse mode saves in JAX; the price is memory
    (bounded by `MAX_SAVED_RESIDUAL_BYTES`, beyond which nothing is saved).
    """
    # (an upper bound: the saveable results whose recomputed clone the reverse
    # code reads now; walking backwards only removes readers)
    results = [(o.operation, r) for o in primal_ops for r in o.results]
    per_iter = sum(_nbytes(r.type) for (o, r), c in zip(results, recomputed)
                   if _saveable(o, r) and any(True for _ in c.uses))
    if not per_iter or per_iter * trip > MAX_SAVED_RESIDUAL_BYTES:
        return
    pos = len(recomputed)
    saved: list[tuple[ir.Value, ir.Operation]] = []  # (forward value, placeholder)
    ab = Builder(ir.InsertionPoint(anchor), anchor.location, ad)
    for o in reversed(list(primal_ops)):
        o = o.operation
        pos -= len(o.results)
        clones = recomputed[pos: pos + len(o.results)]
        if not clones:
            continue
        for r, c in zip(o.results, clones):
            if _saveable(o, r) and any(True for _ in c.uses):
                ph = ab.create("builtin.unrealized_conversion_cast", [], [c.type])
                c.replace_all_uses_with(ph.result)
                saved.append((r, ph))
        owner = clones[0].owner
        if not any(True for c in owner.results for _ in c.uses):
            owner.erase()
    if not saved:
        return
    tapes = _add_tapes(ad, op, [r for r, _ in saved], trip)
    for (r, ph), tape in zip(saved, tapes):
        ph.result.replace_all_uses_with(tape_read(ab, tape, r.type, i))
        ph.erase()


def _add_tapes(ad: Any, op: ir.Operation, vals: Sequence[ir.Value], trip: int) -> list:
    """Rebuild the taped loop `op` to also record `vals` (values of its body)
    per iteration; the new tapes. `op` is left for the sweep to erase."""
    lb, ub, step, *inits = list(op.operands)
    b = Builder(ir.InsertionPoint(op), op.location, ad, op)
    tapes0 = [b.create("tensor.empty", [], [tape_type(v.type, trip)]).result for v in vals]
    new = scf.ForOp(lb, ub, step, inits + tapes0, loc=op.location, ip=ir.InsertionPoint(op))
    nb = new.body
    nargs = list(nb.arguments)
    k = len(inits)
    move_ops(op.opview.body, nb, nargs[: 1 + k])
    y = list(nb.operations)[-1]
    yb = Builder(ir.InsertionPoint(y), op.location, ad)
    first = index_op(yb, "arith.subi", nargs[0], lb).owner
    i = index_op(yb, "arith.divui", first.results[0], step)
    writes = [tape_write(yb, tp, v, i) for tp, v in zip(nargs[1 + k:], vals)]
    ops = [o.operation for o in nb.operations]
    for o in ops[ops.index(first.operation): ops.index(y.operation)]:
        o.attributes[TAPE] = ir.UnitAttr.get()  # not part of the primal
    scf.YieldOp(list(y.operands) + writes, loc=y.location, ip=ir.InsertionPoint(y))
    y.erase()
    for a in range(len(op.attributes)):
        na = op.attributes[a]
        new.operation.attributes[na.name] = na.attr
    res = list(new.results)
    for old, nv in zip(op.results, res[:k]):
        old.replace_all_uses_with(nv)
        if old in ad.active:
            ad.active.add(nv)
    ad.dead.append(op.operation)
    return res[k:]


def _for_vjp(b: Builder, op: ir.Operation, cts: list) -> list:
    ad = b.ad
    fop = op.opview
    lb, ub, step, *inits = list(op.operands)
    if TAPED not in op.attributes or op.results[0] not in ad.tapes:
        raise ad.fail(op, "internal: scf.for reached the backward sweep without a tape")
    tapes, n, dims = ad.tapes[op.results[0]]
    k = len(tapes)
    inits = inits[:k]
    carried_t = [v.type for v in inits]
    fl = [j for j in range(k) if is_float(carried_t[j])]
    body = list(fop.body.operations)
    # Skip the tape writes at the top of the body: they are not part of the primal.
    primal_ops = [o for o in body[:-1] if TAPE not in o.operation.attributes]
    taped = [tp for tp in tapes if tp is not None]
    caps = [v for v in captured_values(op) if ad.is_active(v) and v not in taped]
    ct0 = [b.materialize(cts[j], op.results[j]) for j in fl]
    acc0 = [b.zeros_like(v) for v in caps]
    zero, one = b.index(0), b.index(1)
    loop = scf.ForOp(zero, n, one, ct0 + acc0, loc=op.location, ip=b.ip)
    lbody = loop.body
    largs = list(lbody.arguments)
    ip = ir.InsertionPoint(lbody)
    bb = Builder(ip, op.location, ad)
    i = index_op(bb, "arith.subi", index_op(bb, "arith.subi", n, one), largs[0])
    iv = index_op(bb, "arith.addi", lb, index_op(bb, "arith.muli", i, step))
    # An unrecorded carried value (see `_for_augment`) gets an uninitialized
    # stand-in of its shape; `_check_unrecorded` proves nothing reads it.
    carried = [tape_read(bb, tp, t, i) if tp is not None else
               (bb.empty(t, dims[j]) if isinstance(t, ir.ShapedType) else op.results[j])
               for j, (tp, t) in enumerate(zip(tapes, carried_t))]
    standins = {j: carried[j] for j in range(k)
                if tapes[j] is None and isinstance(carried_t[j], ir.ShapedType)}
    old_args = list(fop.body.arguments)
    vmap = {old_args[0]: iv}
    for a, c in zip(old_args[1: 1 + k], carried):
        vmap[a] = c
    anchor = marker_op(bb)  # where reads of saved residuals go
    marker = marker_op(bb)
    clone_ops(primal_ops, ip, vmap)
    # Tracks the recomputed results through the nested pass's rewrites.
    tracker = holder_op(bb, [vmap[r] for o in primal_ops for r in o.results])
    yielded = [vmap.get(v, v) for v in list(body[-1].operands)[:k]]
    ct_y: list[ir.Value | None] = [None] * k
    for pos, j in enumerate(fl):
        ct_y[j] = largs[1 + pos]
    accs = largs[1 + len(fl):]
    sub = sweep_recomputed(ad, bb, marker, yielded, ct_y, set(caps) | {carried[j] for j in fl},
                           dict(zip(caps, accs)))
    recomputed = list(tracker.operands)
    tracker.erase()
    for v in recomputed:  # (a rewrite may have replaced one by a value from outside)
        if not isinstance(v.owner, ir.Block) and v.owner.operation.block == lbody:
            v.owner.attributes[RECOMPUTED] = ir.UnitAttr.get()
    trip = int_constant(n)
    if trip is not None:
        _save_residuals(bb.ad, op, primal_ops, recomputed, trip, anchor, i)
    anchor.erase()
    sb = Builder(ip, op.location, sub)
    new_ct = [sb.materialize(sub.ct.get(carried[j]), carried[j]) for j in fl]
    new_acc = [sub.ct[v] for v in caps]
    scf.YieldOp(new_ct + new_acc, loc=op.location, ip=ip)
    _check_unrecorded(ad, op, lbody, standins)
    _drop_unread_tapes(op, tapes, carried)
    res = list(loop.results)
    for v, g in zip(caps, res[len(fl):]):
        ad.add_ct(b, v, g)
    out: list = [None, None, None] + [None] * (2 * k)
    for pos, j in enumerate(fl):
        out[3 + j] = res[pos]
    return out


def _drop_unread_tapes(op: ir.Operation, tapes: list, carried: list) -> None:
    """After the backward loop of `op` is complete: a carried value whose tape
    it never reads needs no tape (an array updated element by element, such as
    a scatter's, whose derivative reads only the elements, which are taped as
    residuals). Its tape write in the forward loop goes and the tape is carried
    unchanged, which canonicalization folds away: no trip x size copy."""
    for j, tp in enumerate(tapes):
        if tp is None or any(True for _ in carried[j].uses):
            continue
        reader = carried[j].owner
        # (saving residuals may have rebuilt the forward loop: the tape the
        # reader reads is the current one)
        tp = reader.operands[0]
        if not isinstance(tp, ir.OpResult) or op_name(tp.owner) != "scf.for" \
                or any(u.owner != reader for u in tp.uses):
            continue
        fwd = tp.owner
        body = fwd.opview.body
        y = list(body.operations)[-1]
        pos = tp.result_number
        written = y.operands[pos]
        if isinstance(written.owner, ir.Block) or TAPE not in written.owner.attributes:
            continue
        reader.erase()
        y.operands[pos] = body.arguments[1 + pos]
        if not any(True for _ in written.uses):
            written.owner.erase()


FORWARD_AUGMENT["scf.for"] = _for_augment
defvjp("scf.for", _for_vjp)


# ----------------------------------------------------------------------------
# Batching: scf.for and scf.if
# ----------------------------------------------------------------------------


def _for_batch(b, op, vals, batched):
    """scf.for stays one loop; carried values that depend on batched ones get the batch dim."""
    if any(batched[:3]):
        raise b.fail(op, "cannot batch 'scf.for' with batched bounds or step (use scf.while)")
    inits = vals[3:]
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    yields = list(terminator(body).operands)

    def step(flags: list[bool]) -> list[bool]:
        tainted = b.bt.taint(body, {a for a, f in zip(args[1:], flags) if f})
        return [b.bt.is_tainted(y, tainted) for y in yields]

    carry = fixpoint(list(batched[3:]), step)
    new_inits = [b.ensure_batched(v, bb) if c else v for v, bb, c in zip(inits, batched[3:], carry)]
    loop = scf.ForOp(vals[0], vals[1], vals[2], new_inits, loc=b.loc, ip=b.ip)
    nb = loop.body
    env = [(nb.arguments[0], False)] + list(zip(list(nb.arguments)[1:], carry))
    outs = b.bt.batch_block(body, ir.InsertionPoint(nb), env)
    yb = BatchBuilder(ir.InsertionPoint(nb), b.loc, b.bt, op)
    scf.YieldOp([yb.ensure_batched(v, f) if c else v for (v, f), c in zip(outs, carry)],
                loc=b.loc, ip=ir.InsertionPoint(nb))
    return list(zip(loop.results, carry))


def _if_batch(b, op, vals, batched):
    """scf.if: an unbatched predicate keeps the if; a batched one runs both branches and selects.

    The select is JAX's rule for `cond` under vmap: both branches are pure
    tensor code, so evaluating both is correct (the unused branch is wasted work).
    """
    then_b = op.regions[0].blocks[0]
    else_b = op.regions[1].blocks[0] if len(op.regions[1].blocks) else None
    if batched[0]:
        t_outs = b.bt.batch_block(then_b, b.ip, [])
        e_outs = b.bt.batch_block(else_b, b.ip, []) if else_b is not None else []
        out: list[Batched] = []
        for r, (tv, tb), (ev, eb) in zip(op.results, t_outs, e_outs):
            out += elementwise(b, "arith.select", [vals[0], tv, ev], [True, tb, eb], [r.type],
                               {})
        return out
    flags = []
    for k in range(len(op.results)):
        f = False
        for blk in [then_b] + ([else_b] if else_b is not None else []):
            f = f or b.bt.is_tainted(list(terminator(blk).operands)[k], b.bt.taint(blk, set()))
        flags.append(f)
    types = [b.btype(r.type) if f else r.type for r, f in zip(op.results, flags)]
    new = scf.IfOp(vals[0], types, has_else=else_b is not None, loc=b.loc, ip=b.ip)
    for src, dst in [(then_b, new.then_block)] + (
            [(else_b, new.else_block)] if else_b is not None else []):
        outs = b.bt.batch_block(src, ir.InsertionPoint(dst), [])
        yb = BatchBuilder(ir.InsertionPoint(dst), b.loc, b.bt, op)
        scf.YieldOp([yb.ensure_batched(v, vb) if f else v for (v, vb), f in zip(outs, flags)],
                    loc=b.loc, ip=ir.InsertionPoint(dst))
    return list(zip(new.results, flags))


defbatch("scf.for", _for_batch)
defbatch("scf.if", _if_batch)


# ----------------------------------------------------------------------------
# scf.execute_region (inlined)
# ----------------------------------------------------------------------------


def _inline_region(op: ir.Operation, ip: ir.InsertionPoint) -> tuple[list, list]:
    """Move the single block of an scf.execute_region to `ip`; (moved ops, yielded)."""
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    moved = []
    for o in ops[:-1]:
        ip.insert(o.operation.detach_from_parent())
        moved.append(o.operation)
    return moved, list(ops[-1].operands)


def _execute_region_jvp2(b: Builder, op: ir.Operation, ts: list) -> list:
    ad = b.ad
    if len(op.regions[0].blocks) != 1:
        raise ad.fail(op, "'scf.execute_region' with several blocks is not supported")
    moved, vals = _inline_region(op, b.ip)
    nxt = b.ip.ref_operation
    for i, o in enumerate(moved):
        ad.visit(o, moved[i + 1] if i + 1 < len(moved) else nxt)
    ad.replace_op(op, vals)
    return [ad.tangent(v) for v in vals]


def _execute_region_augment(ad: Any, op: ir.Operation) -> None:
    if len(op.regions[0].blocks) != 1:
        raise ad.fail(op, "'scf.execute_region' with several blocks is not supported")
    _, vals = _inline_region(op, ir.InsertionPoint(op))
    for old, new in zip(op.results, vals):
        old.replace_all_uses_with(new)
    op.erase()

def _execute_region_batch(b, op, vals, batched):
    """The region's ops batched in place of the op; its results are what it yields."""
    if len(op.regions[0].blocks) != 1:
        raise b.fail(op, "cannot batch 'scf.execute_region' with several blocks")
    return b.bt.batch_block(op.regions[0].blocks[0], b.ip, [])


defjvp_rule("scf.execute_region", _execute_region_jvp2)
FORWARD_AUGMENT["scf.execute_region"] = _execute_region_augment
defbatch("scf.execute_region", _execute_region_batch)
