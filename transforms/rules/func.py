"""Rules of the `func` dialect: calls differentiate (and batch) their callee once per signature."""

from __future__ import annotations

from mlir import ir

from ...dialects.vocabulary import symbol_of
from ..ad_support import is_float, op_name, residual_operands
from .batching import defbatch
from .registry import defjvp_rule, defvjp


def jvp_of_call(b, op, tangents, attr: str, keep_attrs: bool) -> list:
    """Forward mode of a call-like op (`func.call`, `autodiff.checkpoint`) of the
    function its `attr` names: the same op of @g_jvp(xs, txs), zero tangents
    materialized (`keep_attrs`: with the op's other attributes)."""
    if all(t is None for t in tangents):
        return [None] * len(op.results)
    # Operands without a tangent are symbolic zeros for the callee too.
    name = b.ad.jvp_function(symbol_of(op, attr), op, frozenset(
        i for i, (t, x) in enumerate(zip(tangents, op.operands))
        if t is None and is_float(x.type)))
    xs = list(op.operands)
    ts = [b.materialize(t, x) for t, x in zip(tangents, xs)]
    n = len(op.results)
    attrs = {k: op.attributes[k] for k in op.attributes} if keep_attrs else {}
    attrs[attr] = ir.FlatSymbolRefAttr.get(name)
    new = b.create(op_name(op), [*xs, *ts], [r.type for r in op.results] * 2, attrs)
    # The jvp call recomputes the primal results: route their uses to it and
    # drop the original op (calls are not dead-code eliminated).
    outs = list(new.results)
    b.ad.replace_op(op, outs[:n])
    return [t if is_float(t.type) else None for t in outs[n:]]


def call_backward(b, bwd: str, residuals: list, cts: list, outs: list, xs: list,
                  wrt: list[int]) -> list:
    """The backward half of a call's reverse mode: @bwd(residuals, output cotangents)
    (zeros materialized), its results the cotangents of the `wrt` operands."""
    ct_vals = [b.materialize(c, r) for c, r in zip(cts, outs)]
    bcall = b.create("func.call", [*residuals, *ct_vals], [xs[i].type for i in wrt],
                     {"callee": ir.FlatSymbolRefAttr.get(bwd)})
    grads: list = [None] * len(xs)
    for i, g in zip(wrt, bcall.results):
        grads[i] = g
    return grads


def _call_jvp(b, op, tangents):
    """call @g(xs) -> call @g_jvp(xs, txs) (zero tangents materialized)."""
    return jvp_of_call(b, op, tangents, "callee", keep_attrs=False)


def _call_vjp(b, op, cts):
    """Replace the primal call by @g_fwd (outputs + residuals); emit @g_bwd."""
    xs = list(op.operands)
    wrt = [i for i, x in enumerate(xs) if b.ad.is_active(x)]
    if not wrt or all(c is None for c in cts):
        return [None] * len(xs)
    fwd, bwd, nres, spec = b.ad.vjp_functions(symbol_of(op, "callee"), wrt, op)
    n = len(op.results)
    fb = b.ad.forward_builder(op)
    fcall = fb.create("func.call", xs, [r.type for r in op.results] + nres,
                      {"callee": ir.FlatSymbolRefAttr.get(fwd)})
    outs = list(fcall.results)
    b.ad.replace_op(op, outs[:n])
    residuals = residual_operands(spec, xs, outs[n:])
    return call_backward(b, bwd, residuals, cts, outs[:n], xs, wrt)


defjvp_rule("func.call", _call_jvp)
defvjp("func.call", _call_vjp)


def _call_batch(b, op, vals, batched):
    """func.call batches its callee once per signature (which arguments are batched)."""
    callee = symbol_of(op, "callee")
    name, types, flags = b.bt.batched_callee(callee, list(batched), op)
    call = b.create("func.call", vals, types, {"callee": ir.FlatSymbolRefAttr.get(name)})
    return list(zip(call.results, flags))

defbatch("func.call", _call_batch)
