"""The clean-up that ends `--autodiff-jvp` / `--autodiff-vjp`: results nobody reads
leave private functions, stop_gradient folds away once nothing is differentiated,
and the bookkeeping attributes of the tape rewrite go."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import AD_OPS, BOOKKEEPING, STOP_GRADIENT, symbol_of
from .ad_checkpoint import lower_checkpoints
from .ad_support import function_type, sym_name, symbol_refs, walk_ops


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


def _private(fn: ir.Operation) -> bool:
    return ("sym_visibility" in fn.attributes
            and ir.StringAttr(fn.attributes["sym_visibility"]).value == "private")


def _returns_a_value_twice(fn: ir.Operation) -> bool:
    """A private single-block func.func whose return names one value twice."""
    if fn.name != "func.func" or not _private(fn) or len(fn.regions[0].blocks) != 1:
        return False
    block = fn.regions[0].blocks[0]
    vals = list(block.operations[len(block.operations) - 1].operands)
    return len(set(vals)) < len(vals)


def dedupe_private_results(module: ir.Operation) -> None:
    """Make private functions return each value once; calls reuse the duplicates.

    Generated functions often return one value twice (e.g. both cotangents of
    `x + y` are the output cotangent), which upstream
    buffer-results-to-out-params{hoist-static-allocs} crashes on (MLIR 22).
    """
    body = module.regions[0].blocks[0]
    # The module-wide walks below (calls, other symbol uses) only when some
    # function has something to dedupe (rewriting one may give another duplicates:
    # then all are looked at, in order, as before).
    if not any(_returns_a_value_twice(op.operation) for op in body.operations):
        return
    funcs = [op.operation for op in body.operations if op.operation.name == "func.func"]
    calls: dict[str, list[ir.Operation]] = {}
    for fn in funcs:
        for o in walk_ops(fn):
            if o.name == "func.call":
                calls.setdefault(symbol_of(o, "callee"), []).append(o)
    # Functions named other than by calls (custom rules, autodiff ops' `fn`) keep
    # their signature: their users check it.
    pinned = _symbol_uses_besides_calls(module)
    for fn in funcs:
        if not _private(fn) or len(fn.regions[0].blocks) != 1:
            continue
        if sym_name(fn) in pinned:
            continue
        block = fn.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
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


def _fold_stop_gradients(ops: list[ir.Operation], names: list[str | None]) -> bool:
    """Once no autodiff.jvp/vjp is left, stop_gradient is the identity: drop it.
    `ops`, `names`: a walk of the module; the folded ops' names become None (they
    are erased). False when a jvp/vjp is left (nothing folded)."""
    if any(n in AD_OPS for n in names):
        return False  # a later differentiation pass still needs them
    for i, (o, n) in enumerate(zip(ops, names)):
        if n == STOP_GRADIENT:
            o.results[0].replace_all_uses_with(o.operands[0])
            o.erase()
            names[i] = None
    return True


def strip_bookkeeping(root: ir.Operation, attrs: tuple[str, ...] = BOOKKEEPING) -> None:
    """Drop the tape rewrite's bookkeeping attributes (`attrs`) under `root`."""
    _strip(walk_ops(root), attrs)


def _strip(ops: list[ir.Operation], attrs: tuple[str, ...]) -> None:
    for o in ops:
        if len(o.attributes):
            for attr in attrs:
                if attr in o.attributes:
                    del o.attributes[attr]


def finish_pass(module: ir.Operation, bookkeeping: tuple[str, ...] = BOOKKEEPING) -> None:
    """The end of a differentiation or batching pass, on one walk of the module:
    drop the `bookkeeping` attributes, then, once no autodiff.jvp/vjp is left,
    fold stop_gradient and lower checkpoints to calls
    (`ad_checkpoint.lower_checkpoints`)."""
    ops = walk_ops(module)
    names: list[str | None] = [o.name for o in ops]
    _strip(ops, bookkeeping)  # erases nothing: the walk stays valid
    if _fold_stop_gradients(ops, names):
        lower_checkpoints(module, (ops, names))
