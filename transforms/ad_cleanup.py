"""The clean-up that ends `--autodiff-jvp` / `--autodiff-vjp`: results nobody reads
leave private functions, stop_gradient folds away once nothing is differentiated,
and the bookkeeping attributes of the tape rewrite go."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import AD_OPS, BOOKKEEPING, STOP_GRADIENT, symbol_of
from .ad_support import function_type, op_name, sym_name, symbol_refs, walk_ops


def _symbol_uses_besides_calls(module: ir.Operation) -> set[str]:
    """Functions referred to by an attribute other than a func.call's callee."""
    out: set[str] = set()
    for o in walk_ops(module):
        for i in range(len(o.attributes)):
            na = o.attributes[i]
            if na.name in ("callee", "sym_name", "function_type"):
                continue
            out.update(symbol_refs(na.attr))
    return out


def dedupe_private_results(module: ir.Operation) -> None:
    """Make private functions return each value once; calls reuse the duplicates.

    Generated functions often return one value twice (e.g. both cotangents of
    `x + y` are the output cotangent), which upstream
    buffer-results-to-out-params{hoist-static-allocs} crashes on (MLIR 22).
    """
    body = module.regions[0].blocks[0]
    funcs = [op.operation for op in body.operations if op_name(op) == "func.func"]
    calls: dict[str, list[ir.Operation]] = {}
    for fn in funcs:
        for o in walk_ops(fn):
            if op_name(o) == "func.call":
                calls.setdefault(symbol_of(o, "callee"),
                                 []).append(o)
    # Functions named other than by calls (custom rules, autodiff ops' `fn`) keep
    # their signature: their users check it.
    pinned = _symbol_uses_besides_calls(module)
    for fn in funcs:
        vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
        if vis is None or ir.StringAttr(vis).value != "private" or not fn.regions[0].blocks:
            continue
        if sym_name(fn) in pinned:
            continue
        blocks = list(fn.regions[0].blocks)
        if len(blocks) != 1:
            continue
        ret = list(blocks[0].operations)[-1]
        vals = list(ret.operands)
        first: dict[ir.Value, int] = {}
        keep, where = [], []
        for v in vals:
            if v not in first:
                first[v] = len(keep)
                keep.append(v)
            where.append(first[v])
        if len(keep) == len(vals):
            continue
        name = sym_name(fn)
        ft = function_type(fn)
        func.ReturnOp(keep, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ft.inputs), [v.type for v in keep]))
        for c in calls.get(name, []):
            new = func.CallOp([v.type for v in keep], ir.FlatSymbolRefAttr.get(name),
                              list(c.operands), loc=c.location, ip=ir.InsertionPoint(c))
            for old, k in zip(list(c.results), where):
                old.replace_all_uses_with(new.results[k])
            c.erase()


def fold_stop_gradients(module: ir.Operation) -> None:
    """Once no autodiff.jvp/vjp is left, stop_gradient is the identity: drop it."""
    ops = walk_ops(module)
    if any(op_name(o) in AD_OPS for o in ops):
        return  # a later differentiation pass still needs them
    for o in ops:
        if op_name(o) == STOP_GRADIENT:
            o.results[0].replace_all_uses_with(o.operands[0])
            o.erase()


def strip_bookkeeping(root: ir.Operation) -> None:
    """Drop the tape rewrite's bookkeeping attributes under `root`."""
    for o in walk_ops(root):
        for attr in BOOKKEEPING:
            if attr in o.attributes:
                del o.attributes[attr]
