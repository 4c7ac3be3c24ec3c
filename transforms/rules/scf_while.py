"""Rules of `scf.while` (jvp, vjp and batching side by side).

Forward mode rebuilds the loop with tangents appended to its carried values
and results, differentiating both regions in place.

Reverse mode: a while loop's trip count is only known once it has run, so
its tape cannot be allocated up front. The design (simplest correct one, and
the one whose residuals all have static types):

* forward (augment): the loop also counts the iterations of its `do`
  region, an extra `index` result n. The forward function keeps its primal
  cost and saves only n, the loop's inputs and its captured values;
* backward (rule): a recording sweep, an `scf.for` of n iterations that
  re-runs before+after from the inputs and writes each iteration's carried
  values s_k into a `tensor<?x...>` tape allocated once with n rows; the
  final `before` (which forwards the results) is differentiated at s_n;
  then a backward `scf.for` reads s_{n-1} ... s_0 back in reverse, recomputes
  that iteration (before then after) and sweeps it, carrying the cotangents
  of the carried values and accumulating those of values captured from above.

So the dynamically shaped tape lives inside the backward function and never
crosses a function boundary (a dynamic result of @f_fwd would need the
caller to know its size); the price is one extra primal run of the loop,
the same price as counting first and then recording in the forward function.

Batching: with a batched condition the loop runs until every lane is done,
finished lanes keeping their values (`_while_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import scf

from ...dialects.vocabulary import TAPE, TAPED
from ..ad_support import (
    Builder,
    append_tangents,
    captured_values,
    is_float,
    is_tensor,
    tangent_results,
)
from .batching import BatchBuilder, defbatch, elementwise, unbatch_type
from .regions import (
    clone_ops,
    fixpoint,
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
from .structured import RED, identity_map, make_generic, projection


def _while_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    ad = b.ad
    inits = list(op.operands)
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    res_types = [r.type for r in op.results]
    fl_in = [k for k, v in enumerate(inits) if is_float(v.type)]
    fl_out = [k for k, t in enumerate(res_types) if is_float(t)]
    t_inits = [b.materialize(ts[k], inits[k]) for k in fl_in]
    new = scf.WhileOp(res_types + [res_types[k] for k in fl_out], inits + t_inits,
                      loc=op.location, ip=b.ip)
    in_types = [v.type for v in inits]
    nb = new.regions[0].blocks.append(*(in_types + [in_types[k] for k in fl_in]))
    na = new.regions[1].blocks.append(*(res_types + [res_types[k] for k in fl_out]))
    n_in, n_out = len(inits), len(res_types)
    move_ops(before, nb, list(nb.arguments)[:n_in])
    for pos, k in enumerate(fl_in):
        ad.t[nb.arguments[k]] = nb.arguments[n_in + pos]
    ad.run_block(nb)
    c = list(nb.operations)[-1]
    cond = c.operands[0]
    append_tangents(ad, c, fl_out, lambda vals, loc, ip: scf.ConditionOp(cond, vals, loc=loc,
                                                                           ip=ip), skip=1)
    move_ops(after, na, list(na.arguments)[:n_out])
    for pos, k in enumerate(fl_out):
        ad.t[na.arguments[k]] = na.arguments[n_out + pos]
    ad.run_block(na)
    append_tangents(ad, list(na.operations)[-1], fl_in, scf_yield)
    return tangent_results(ad, op, new.results, n_out, fl_out)

def _while_augment(ad: Any, op: ir.Operation) -> None:
    """Rewrite an active scf.while to also count its iterations (an extra result)."""
    inits = list(op.operands)
    res_types = [r.type for r in op.results]
    in_types = [v.type for v in inits]
    for t in in_types + res_types:
        if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
            raise ad.fail(op, "reverse mode of 'scf.while' needs statically shaped carried "
                              "tensors")
    idx = ir.IndexType.get()
    b = Builder(ir.InsertionPoint(op), op.location, ad, op)
    new = scf.WhileOp(res_types + [idx], inits + [b.index(0)], loc=op.location,
                      ip=ir.InsertionPoint(op))
    n_in, n_out = len(in_types), len(res_types)
    nb = new.regions[0].blocks.append(*(in_types + [idx]))
    na = new.regions[1].blocks.append(*(res_types + [idx]))
    move_ops(op.regions[0].blocks[0], nb, list(nb.arguments)[:n_in])
    c = list(nb.operations)[-1]
    scf.ConditionOp(c.operands[0], list(c.operands)[1:] + [nb.arguments[n_in]],
                    loc=c.location, ip=ir.InsertionPoint(c))
    c.erase()
    move_ops(op.regions[1].blocks[0], na, list(na.arguments)[:n_out])
    y = list(na.operations)[-1]
    yb = Builder(ir.InsertionPoint(y), y.location, ad)
    one = yb.index(1)
    inc = index_op(yb, "arith.addi", na.arguments[n_out], one)
    for o in (one.owner, inc.owner):
        o.attributes[TAPE] = ir.UnitAttr.get()  # not part of the primal
    scf.YieldOp(list(y.operands) + [inc], loc=y.location, ip=ir.InsertionPoint(y))
    y.erase()
    res = list(new.results)
    for old, nv in zip(op.results, res[:n_out]):
        old.replace_all_uses_with(nv)
        if old in ad.active:
            ad.active.add(nv)
    ad.tapes[res[0]] = ([], res[n_out])
    new.operation.attributes[TAPED] = ir.UnitAttr.get()
    op.erase()


def _primal_ops(block: ir.Block) -> list:
    return [o for o in list(block.operations)[:-1] if TAPE not in o.attributes]


def _clone_iteration(ip: ir.InsertionPoint, op: ir.Operation, s: Sequence[ir.Value],
                     k: ir.Value, with_after: bool) -> list[ir.Value]:
    """Clone one iteration of the (augmented) while `op` from carried values `s`
    (`k` stands for its counter): the values `before` forwards, or, `with_after`,
    the values `after` yields (the next carried values)."""
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    vmap = dict(zip(list(before.arguments), [*s, k]))
    clone_ops(_primal_ops(before), ip, vmap)
    fwd = [vmap.get(v, v) for v in list(list(before.operations)[-1].operands)[1:-1]]
    if not with_after:
        return fwd
    vmap.update(zip(list(after.arguments), [*fwd, k]))
    clone_ops(_primal_ops(after), ip, vmap)
    return [vmap.get(v, v) for v in list(list(after.operations)[-1].operands)[:-1]]


def _while_vjp(b: Builder, op: ir.Operation, cts: list) -> list:
    ad = b.ad
    if TAPED not in op.attributes or op.results[0] not in ad.tapes:
        raise ad.fail(op, "internal: scf.while reached the backward sweep without a counter")
    _, n = ad.tapes[op.results[0]]
    inits = list(op.operands)[:-1]
    in_types = [v.type for v in inits]
    n_in = len(inits)
    fin = [j for j in range(n_in) if is_float(in_types[j])]
    caps = [v for v in captured_values(op) if ad.is_active(v)]
    loc = op.location
    zero, one = b.index(0), b.index(1)
    # 1. Recording sweep: s_k at the top of iteration k, for k < n, into the tape.
    tapes0 = [b.empty(tape_type(t), [n]) for t in in_types]
    rec = scf.ForOp(zero, n, one, inits + tapes0, loc=loc, ip=b.ip)
    rargs = list(rec.body.arguments)
    rip = ir.InsertionPoint(rec.body)
    rb = Builder(rip, loc, ad)
    s = rargs[1: 1 + n_in]
    written = [tape_write(rb, tp, v, rargs[0]) for tp, v in zip(rargs[1 + n_in:], s)]
    nxt = _clone_iteration(rip, op, s, rargs[0], with_after=True)
    scf.YieldOp(nxt + written, loc=loc, ip=rip)
    s_n, tapes = list(rec.results)[:n_in], list(rec.results)[n_in:]
    # 2. The last `before` (it forwards the results) at s_n.
    marker = marker_op(b)
    outs = _clone_iteration(b.ip, op, s_n, n, with_after=False)
    sub = sweep_recomputed(ad, b, marker, outs, cts[:-1], set(caps) | {s_n[j] for j in fin})
    sb = Builder(b.ip, loc, sub)
    ct_s = [sb.materialize(sub.ct.get(s_n[j]), s_n[j]) for j in fin]
    for v in caps:
        ad.add_ct(b, v, sub.ct.get(v))
    # 3. Backward loop over k = n-1 ... 0: read s_k, recompute, sweep.
    acc0 = [b.zeros_like(v) for v in caps]
    loop = scf.ForOp(zero, n, one, ct_s + acc0, loc=loc, ip=b.ip)
    largs = list(loop.body.arguments)
    ip = ir.InsertionPoint(loop.body)
    bb = Builder(ip, loc, ad)
    k = index_op(bb, "arith.subi", index_op(bb, "arith.subi", n, one), largs[0])
    s_k = [tape_read(bb, tp, t, k) for tp, t in zip(tapes, in_types)]
    marker = marker_op(bb)
    y = _clone_iteration(ip, op, s_k, k, with_after=True)
    ct_y = [None] * n_in
    for pos, j in enumerate(fin):
        ct_y[j] = largs[1 + pos]
    sub = sweep_recomputed(ad, bb, marker, y, ct_y, set(caps) | {s_k[j] for j in fin})
    sb = Builder(ip, loc, sub)
    new_ct = [sb.materialize(sub.ct.get(s_k[j]), s_k[j]) for j in fin]
    new_acc = [sb.add_any(a, sub.ct.get(v)) for a, v in zip(largs[1 + len(fin):], caps)]
    scf.YieldOp(new_ct + new_acc, loc=loc, ip=ip)
    res = list(loop.results)
    for v, g in zip(caps, res[len(fin):]):
        ad.add_ct(b, v, g)
    out: list = [None] * len(op.operands)
    for pos, j in enumerate(fin):
        out[j] = res[pos]
    return out


def _any_lane(b: BatchBuilder, mask: ir.Value) -> ir.Value:
    """OR of a tensor<Bxi1>: whether any lane is still running."""
    i1 = ir.IntegerType.get_signless(1)
    t0 = ir.RankedTensorType.get([], i1)
    false = b.create("arith.constant", [], [i1], {"value": ir.IntegerAttr.get(i1, 0)}).result
    init = b.fill(b.empty(t0), false)
    gen = make_generic(b, [mask], [init], [identity_map(1), projection(1, [])], [RED],
                       lambda bb, a: [bb.create("arith.ori", [a[0], a[1]], [i1]).result])
    return b.create("tensor.extract", [gen.result], [i1]).result


def _while_batch(b, op, vals, batched):
    """scf.while with a batched condition runs until every lane is done.

    Lanes whose condition is false keep their arguments (the after region's
    results are selected per lane by the condition), so the before region,
    recomputed from them, forwards again the values the lane had when its
    own condition first failed: the loop's results are right for every lane.
    """
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    cond_op = terminator(before)
    bargs = list(before.arguments)
    fwd = list(cond_op.operands)[1:]
    aargs = list(after.arguments)
    ayields = list(terminator(after).operands)

    def cond_batched(flags: list[bool]) -> bool:
        tainted = b.bt.taint(before, {a for a, f in zip(bargs, flags) if f})
        return b.bt.is_tainted(cond_op.operands[0], tainted)

    def step(flags: list[bool]) -> list[bool]:
        # `flags` are the carried values' (the before region's arguments and the
        # after region's yields); the before region may forward other values, in
        # another number and order (canonicalization drops unused results), which
        # are the after region's arguments.
        if cond_batched(flags):
            return [True] * len(flags)
        tb = b.bt.taint(before, {a for a, f in zip(bargs, flags) if f})
        fwd_flags = [b.bt.is_tainted(v, tb) for v in fwd]
        ta = b.bt.taint(after, {a for a, f in zip(aargs, fwd_flags) if f})
        return [b.bt.is_tainted(y, ta) for y in ayields]

    carry = fixpoint(list(batched), step)
    masked = cond_batched(carry)
    tainted = b.bt.taint(before, {a for a, f in zip(bargs, carry) if f})
    fwd_flags = [masked or b.bt.is_tainted(v, tainted) for v in fwd]
    # With a mask, finished lanes keep their arguments; when the before region does
    # not just forward them, they travel beside the forwarded values to the after region.
    forwards = len(fwd) == len(bargs) and all(f == a for f, a in zip(fwd, bargs))
    extra = masked and not forwards
    inits = [b.ensure_batched(v, bb) if c else v for v, bb, c in zip(vals, batched, carry)]
    types = [v.type for v in inits]
    fwd_types = [b.btype(r.type) if f else r.type for r, f in zip(op.results, fwd_flags)]
    mask_t = b.btype(ir.IntegerType.get_signless(1))
    res_types = fwd_types + (types if extra else []) + ([mask_t] if masked else [])
    new = scf.WhileOp(res_types, inits, loc=b.loc, ip=b.ip)
    nbefore = new.before.blocks.append(*types)
    nafter = new.after.blocks.append(*res_types)
    outs = b.bt.batch_block(before, ir.InsertionPoint(nbefore),
                            list(zip(nbefore.arguments, carry)))
    cb = BatchBuilder(ir.InsertionPoint(nbefore), b.loc, b.bt, op)
    (c, _), fwd_outs = outs[0], outs[1:]
    fvals = [cb.ensure_batched(v, vb) if f else v for (v, vb), f in zip(fwd_outs, fwd_flags)]
    if masked:
        kept = list(nbefore.arguments) if extra else []
        scf.ConditionOp(_any_lane(cb, c), fvals + kept + [c], loc=b.loc,
                        ip=ir.InsertionPoint(nbefore))
    else:
        scf.ConditionOp(c, fvals, loc=b.loc, ip=ir.InsertionPoint(nbefore))
    aargs_new = list(nafter.arguments)
    outs = b.bt.batch_block(after, ir.InsertionPoint(nafter),
                            list(zip(aargs_new[: len(fwd)], fwd_flags)))
    ab = BatchBuilder(ir.InsertionPoint(nafter), b.loc, b.bt, op)
    yvals = [ab.ensure_batched(v, vb) if f else v for (v, vb), f in zip(outs, carry)]
    if masked:
        prev = aargs_new[len(fwd): len(fwd) + len(types)] if extra else aargs_new[: len(fwd)]
        mask = aargs_new[-1]
        yvals = [elementwise(ab, "arith.select", [mask, y, p], [True, True, True],
                             [unbatch_type(p.type, is_tensor(a.type))], {})[0][0]
                 for y, p, a in zip(yvals, prev, bargs)]
    scf.YieldOp(yvals, loc=b.loc, ip=ir.InsertionPoint(nafter))
    return list(zip(list(new.results)[: len(fwd)], fwd_flags))


defjvp_rule("scf.while", _while_jvp)
FORWARD_AUGMENT["scf.while"] = _while_augment
defvjp("scf.while", _while_vjp)
defbatch("scf.while", _while_batch)
