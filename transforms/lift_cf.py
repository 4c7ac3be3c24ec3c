"""Structured control flow for the transform passes: lift `cf` branches to `scf`.

The jvp, vjp and vmap rules work on structured control flow (`scf.if`,
`scf.for`, `scf.while`, single-block regions). A function written with
unstructured branches (`cf.br`, `cf.cond_br`, `cf.switch`, several blocks)
or holding an `scf.execute_region` with several blocks is first rewritten
by upstream `lift-cf-to-scf` (branches become `scf.if` / `scf.index_switch`,
back edges `scf.while`), then canonicalized (single-block execute_regions
are inlined, the dispatch values lifting introduces fold away); the
`scf.index_switch`es left (from `cf.switch`, or a branch to one of
several blocks) become chains of `scf.if`, which the rules know. Only such
functions are touched: a function whose regions all have one block is
left exactly as it is.

Where lifting leaves control flow the rules cannot differentiate (a region
that still has several blocks, a `cf` op, the `ub.poison` placeholders of
values undefined on some path), the error is a diagnostic at that op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlir import ir, passmanager

from .ad_support import post_order_ops
from .diagnostics import PassFailure

_PIPELINE = "func.func(lift-cf-to-scf,canonicalize,cse)"


def _multi_block_regions(fn: ir.Operation) -> list[ir.Operation]:
    """Ops under (and including) `fn` that own a region with several blocks."""
    return [op for op in post_order_ops(fn) if any(len(r.blocks) > 1 for r in op.regions)]


def _unstructured_op(fn: ir.Operation) -> ir.Operation | None:
    """The first op lifting left behind that the rules cannot take."""
    return next((op for op in post_order_ops(fn)
                 if op.name.startswith("cf.") and op.name != "cf.assert"
                 or op.name == "ub.poison"), None)


def _switches(fn: ir.Operation) -> list[ir.Operation]:
    return [op for op in post_order_ops(fn) if op.name == "scf.index_switch"]


def _switch_to_ifs(op: ir.Operation) -> None:
    """`scf.index_switch %k case c0 {A} case c1 {B} default {D}` ->
    `scf.if %k == c0 {A} else {scf.if %k == c1 {B} else {D}}`."""
    from mlir.dialects import arith

    cases = list(ir.DenseI64ArrayAttr(op.attributes["cases"]))
    types = [r.type for r in op.results]
    index = op.operands[0]

    def build(k: int) -> ir.Operation:
        c = arith.constant(ir.IndexType.get(), cases[k])
        cond = arith.cmpi(arith.CmpIPredicate.eq, index, c)
        new = ir.Operation.create("scf.if", results=types, operands=[cond], regions=2)
        op.regions[1 + k].blocks[0].append_to(new.regions[0])
        if k + 1 == len(cases):
            op.regions[0].blocks[0].append_to(new.regions[1])
        else:
            block = new.regions[1].blocks.append()
            with ir.InsertionPoint(block):
                inner = build(k + 1)
                ir.Operation.create("scf.yield", operands=list(inner.results))
        return new

    with ir.InsertionPoint(op), op.location:
        if cases:
            new = build(0)
            results = list(new.results)
        else:  # only a default: its body, inlined by canonicalize
            new = ir.Operation.create("scf.execute_region", results=types, regions=1)
            op.regions[0].blocks[0].append_to(new.regions[0])
            results = list(new.results)
    for old, res in zip(op.results, results):
        old.replace_all_uses_with(res)
    op.erase()


def _poison_to_zero(fn: ir.Operation) -> None:
    """Replace lifting's `ub.poison` placeholders by zeros of their type.

    Lifting a loop with several exits (a `break`) passes, on each exit
    path, placeholders for the values only other paths define; a poison
    value may be refined to any value, and a constant has no derivative.
    """
    from mlir.dialects import arith

    for op in [o for o in post_order_ops(fn) if o.name == "ub.poison"]:
        t = op.results[0].type
        elt = t.element_type if isinstance(t, ir.RankedTensorType) else t
        if isinstance(elt, ir.FloatType):
            zero = ir.FloatAttr.get(elt, 0.0)
        elif isinstance(elt, (ir.IntegerType, ir.IndexType)):
            zero = ir.IntegerAttr.get(elt, 0)
        else:
            continue
        if isinstance(t, ir.RankedTensorType):
            if not t.has_static_shape:
                continue
            zero = ir.DenseElementsAttr.get_splat(t, zero)
        with ir.InsertionPoint(op), op.location:
            c = arith.ConstantOp(t, zero)
        op.results[0].replace_all_uses_with(c.result)
        op.erase()


def _never_exits(region: ir.Region) -> ir.Operation | None:
    """The terminator of a block of `region` from which no path leaves the region
    (an endless loop), if there is one."""
    blocks = list(region.blocks)
    terminators = [b.operations[len(b.operations) - 1] for b in blocks]
    succ = [[blocks.index(s) for s in t.successors] for t in terminators]
    exits = {i for i, t in enumerate(terminators) if not succ[i]}
    changed = True
    while changed:
        changed = False
        for i in range(len(blocks)):
            if i not in exits and any(j in exits for j in succ[i]):
                exits.add(i)
                changed = True
    # Blocks unreachable from the entry do not run.
    reached, stack = {0}, [0]
    while stack:
        for j in succ[stack.pop()]:
            if j not in reached:
                reached.add(j)
                stack.append(j)
    stuck = [i for i in sorted(reached) if i not in exits]
    if not stuck:
        return None

    def on_cycle(i: int) -> bool:
        seen, todo = set(), list(succ[i])
        while todo:
            j = todo.pop()
            if j == i:
                return True
            if j not in seen:
                seen.add(j)
                todo.extend(succ[j])
        return False

    # Report the loop's own branch (a block that reaches itself), not the way in.
    at = next((i for i in stuck if on_cycle(i)), stuck[0])
    return terminators[at].operation


def lift_control_flow(fn: ir.Operation, fail: Callable[[Any, str], PassFailure],
                      what: str) -> None:
    """Make `fn`'s control flow structured in place, or raise `fail(op, message)`.

    `what` names the transform in messages ("differentiate @f", "batch @f").
    """
    if not _multi_block_regions(fn):
        return
    if fn.name != "func.func" or not fn.regions[0].blocks:
        return
    for owner in _multi_block_regions(fn):
        for region in owner.regions:
            at = _never_exits(region) if len(region.blocks) > 1 else None
            if at is not None:
                # Lifting would assume the loop ends (and drop it).
                end = "a return" if owner.name == "func.func" else f"the end of '{owner.name}'"
                raise fail(at, f"cannot {what}: this branch loops forever (no path from it "
                               f"reaches {end})")
    try:
        passmanager.PassManager.parse(_PIPELINE, fn.context).run(fn)
    except ir.MLIRError as err:
        raise fail(fn, f"cannot {what}: lifting its branches to structured control flow "
                       f"(lift-cf-to-scf) failed: {err}") from None
    _poison_to_zero(fn)
    switches = _switches(fn)
    for op in switches:
        _switch_to_ifs(op)
    if switches:
        passmanager.PassManager.parse("func.func(canonicalize)", fn.context).run(fn)
    left = _multi_block_regions(fn)
    if left:
        owner = left[0]
        block = next(r for r in owner.regions if len(r.blocks) > 1).blocks[1]
        at = block.operations[0] if len(block.operations) else owner
        raise fail(at, f"cannot {what}: the region of '{owner.name}' still has several "
                       "blocks after lift-cf-to-scf (its branches could not be structured)")
    op = _unstructured_op(fn)
    if op is not None:
        raise fail(op, f"cannot {what}: '{op.name}' is left after lifting its branches "
                       "to structured control flow (a value undefined on some path?)")
