"""Derivative rules of the `autodiff` dialect's own ops."""

from __future__ import annotations

from mlir import ir

from ..ad_support import is_float, residual_operands
from .registry import defjvp_rule, defvjp, defzero

# Identity with a zero derivative.
defzero("autodiff.stop_gradient")


def _fn(op: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["fn"]).value


def _checkpoint_jvp(b, op, tangents):
    """checkpoint @g(xs) -> checkpoint @g_jvp(xs, txs): forward mode keeps nothing, but
    the jvp stays a checkpoint (same policy), so a later reverse pass recomputes it."""
    if all(t is None for t in tangents):
        return [None] * len(op.results)
    name = b.ad.jvp_function(_fn(op), op, frozenset(
        i for i, (t, x) in enumerate(zip(tangents, op.operands))
        if t is None and is_float(x.type)))
    xs = list(op.operands)
    ts = [b.materialize(t, x) for t, x in zip(tangents, xs)]
    n = len(op.results)
    attrs = {k: op.attributes[k] for k in op.attributes}
    attrs["fn"] = ir.FlatSymbolRefAttr.get(name)
    new = b.create("autodiff.checkpoint", [*xs, *ts], [r.type for r in op.results] * 2, attrs)
    outs = list(new.results)
    b.ad.replace_op(op, outs[:n])
    return [t if is_float(t.type) else None for t in outs[n:]]


def _checkpoint_vjp(b, op, cts):
    """The forward code saves only what the policy allows (plain call of @g when
    nothing); the backward code recomputes the rest of @g's residuals, then runs
    @g's backward function. See `Driver.checkpoint_plan`."""
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
    ct_vals = [b.materialize(c, r) for c, r in zip(cts, outs[:n])]
    bcall = b.create("func.call", [*residuals, *ct_vals], [xs[i].type for i in wrt],
                     {"callee": ir.FlatSymbolRefAttr.get(plan.bwd)})
    grads: list = [None] * len(xs)
    for i, g in zip(wrt, bcall.results):
        grads[i] = g
    return grads


defjvp_rule("autodiff.checkpoint", _checkpoint_jvp)
defvjp("autodiff.checkpoint", _checkpoint_vjp)
