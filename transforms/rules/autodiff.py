"""Rules of the `autodiff` dialect's own ops (jvp, vjp and batching)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from ...dialects.vocabulary import CHECKPOINT, PHILOX, RANDOM, STOP_GRADIENT, symbol_of
from ..ad_support import op_name, residual_operands
from .batching import BatchBuilder, defbatch, defvectorized
from .func import call_backward, jvp_of_call
from .registry import defjvp_rule, defvjp, defzero
from .structured import attrs_of

# Identity with a zero derivative.
defzero(STOP_GRADIENT)
defvectorized(STOP_GRADIENT)


def _checkpoint_jvp(b, op, tangents):
    """checkpoint @g(xs) -> checkpoint @g_jvp(xs, txs): forward mode keeps nothing, but
    the jvp stays a checkpoint (same policy), so a later reverse pass recomputes it."""
    return jvp_of_call(b, op, tangents, "fn", keep_attrs=True)


def _checkpoint_vjp(b, op, cts):
    """The forward code saves only what the policy allows (plain call of @g when
    nothing); the backward code recomputes the rest of @g's residuals, then runs
    @g's backward function. See `ad_checkpoint.checkpoint_plan`."""
    xs = list(op.operands)
    wrt = [i for i, x in enumerate(xs) if b.ad.is_active(x)]
    if not wrt or all(c is None for c in cts):
        return [None] * len(xs)
    plan = b.ad.checkpoint_plan(op, wrt)
    n = len(op.results)
    fb = b.ad.forward_builder(op)
    fcall = fb.create("func.call", xs, [r.type for r in op.results] + plan.saved_types,
                      {"callee": ir.FlatSymbolRefAttr.get(plan.fwd)})
    outs = list(fcall.results)
    b.ad.replace_op(op, outs[:n])
    returned = outs[n:]
    if plan.remat is not None:
        rcall = b.create("func.call", [*xs, *returned], plan.res_types,
                         {"callee": ir.FlatSymbolRefAttr.get(plan.remat)})
        returned = list(rcall.results)
    residuals = residual_operands(plan.spec, xs, returned)
    return call_backward(b, plan.bwd, residuals, cts, outs[:n], xs, wrt)


defjvp_rule(CHECKPOINT, _checkpoint_jvp)
defvjp(CHECKPOINT, _checkpoint_vjp)


# -- batching --------------------------------------------------------------------


def _checkpoint_batch(b, op, vals, batched):
    """A checkpointed call stays a checkpoint, of the batched callee."""
    callee = symbol_of(op, "fn")
    name, types, flags = b.bt.batched_callee(callee, list(batched), op)
    attrs = attrs_of(op)
    attrs["fn"] = ir.FlatSymbolRefAttr.get(name)
    new = b.create(CHECKPOINT, vals, types, attrs)
    return list(zip(new.results, flags))


def _random_batch(b, op, vals, batched):
    """A stateful draw under vmap: "same" draws once for every lane; the others are errors.

    randomness = "different" works on functionalized code (--autodiff-functionalize-rng
    first): then every lane gets its own Philox offset, see `_philox_batch`.
    """
    mode = b.bt.randomness
    if mode == "same" and not any(batched):
        new = b.bt.clone_unbatched(op, b.ip)
        return [(r, False) for r in new.results]
    hint = ""
    if mode == "different":
        hint = " yet (run --autodiff-functionalize-rng before --autodiff-vmap)"
    elif mode != "error":
        hint = " yet"
    what = f"random op '{op_name(op)}'"
    if op_name(op) == PHILOX and mode == "error":
        # jit turns autodiff.random draws into philox before vmap runs
        what += " (a random draw, e.g. ad.random.uniform)"
        hint = "; pass randomness=\"same\" or \"different\" to vmap"
    raise b.fail(op, f"{what} under vmap with randomness = \"{mode}\" is not supported{hint}")


def _philox_batch(b, op, vals, batched):
    """A functional draw: per-lane (seed, offset) draw per lane; unbatched ones as `_random_batch`.

    Lanes are drawn one by one into their row of the batched tensor: each
    lane's counter range is its own (the vmap op gives lane l the offset
    `offset + l * C`, C the blocks one call consumes), so the draws are
    exactly those of B unbatched calls made one after the other. An unbatched
    draw marked `keyed` (from an explicit key, see `lower_rng`) is a pure function
    of its operands, so every randomness mode shares it among the lanes.
    """
    if not any(batched):
        if b.bt.randomness == "error" and "keyed" not in op.attributes:
            return _random_batch(b, op, vals, batched)
        new = b.bt.clone_unbatched(op, b.ip)
        return [(r, False) for r in new.results]
    t = op.results[0].type
    bt = b.btype(t)
    b.static(bt, f"'{PHILOX}'")
    loop = scf.ForOp(b.index(0), b.index(b.size), b.index(1), [b.empty(bt)], loc=b.loc, ip=b.ip)
    lb = BatchBuilder(ir.InsertionPoint(loop.body), b.loc, b.bt, op)
    lane = loop.induction_variable
    args = [lb.create("tensor.extract", [v, lane], [v.type.element_type]).result if f else v
            for v, f in zip(vals, batched)]
    draw = lb.create(op_name(op), args, [t], attrs_of(op)).result
    r = t.rank
    dyn = ir.ShapedType.get_dynamic_size()
    row = lb.create("tensor.insert_slice", [draw, loop.inner_iter_args[0], lane], [bt], {
        "static_offsets": ir.DenseI64ArrayAttr.get([dyn] + [0] * r),
        "static_sizes": ir.DenseI64ArrayAttr.get([1] + list(t.shape)),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0, 0]),
    }).result
    scf.YieldOp([row], loc=b.loc, ip=ir.InsertionPoint(loop.body))
    return [(loop.results[0], True)]

defbatch(CHECKPOINT, _checkpoint_batch)
defbatch(RANDOM, _random_batch)
defbatch(PHILOX, _philox_batch)
