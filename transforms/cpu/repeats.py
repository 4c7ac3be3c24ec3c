"""`OutlineRepeatedLoops`: one function for the loop nests a large function repeats.

A model's layers repeat: the transformer train step's two blocks lower to the
same loop nests on buffers of the same types (forward and backward, per
layer), and about half of its loop code is such a repeat. LLVM optimizes and
generates code for each copy. This pass, on the same bufferized form as
`SplitLargeFunctions` (just before it, on functions of at least
`REPEAT_MIN_FUNCTION_OPS` operations), finds the top-level loop nests of a
function that are identical up to the names of the values they use from
outside (same operations, attributes, types, constants and the same pattern
of repeated uses), moves the first into a private function (internal linkage,
LLVM's `noinline`, as the split's parts) whose arguments are those outside
values, and replaces every copy with a call of it on its own values.
Constants (and casts of constants) the nests use are cloned into the
function, so its loop bounds and offsets stay constants.

A nest's text, printed under one `AsmState` of the function, names the
values it uses from outside as the function does: MLIR numbers a block's
values before those of the regions nested in it, so a nested name never
equals a top-level one.

Only nests without results, of at least `REPEAT_MIN_OPS` operations, are
outlined; a call happens exactly where its nest was, so the order of
everything with side effects is unchanged and nothing computed changes.
"""

from __future__ import annotations

import dataclasses
import io
import re

from mlir import ir

from ..passes import Pass, register
from .split import (
    _CLONED,
    SplitLargeFunctions,
    _has_ops,
    _scan,
    outlined_function,
    single_block_functions,
    symbol_names,
    unique_name,
)

#: A loop nest of at least this many operations is worth a function of its own.
REPEAT_MIN_OPS = 24

#: Only functions of at least this many operations are searched. On a 2-vCPU AMD
#: EPYC (Zen 4), fresh processes alternating without and with the pass: the
#: transformer train step (34k ops) first call 7.22, 7.28 -> 5.66, 5.97 s; the
#: transformer loss (11k) 2.18, 2.38 -> 2.53, 2.09 s and the CNN train step (10k)
#: 1.85, 1.74 -> 2.11, 1.79 s (searching costs about what the few repeats there
#: save); steady state alike, results bit-identical.
REPEAT_MIN_FUNCTION_OPS = 16_000

_SSA_NAME = re.compile(r"%[A-Za-z0-9_$.-]+(?:#\d+)?")


def _canonical(text: str) -> str:
    """`text` with its SSA names numbered by first appearance (%0, %1, ...)."""
    names: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        return names.setdefault(m.group(0), f"%{len(names)}")

    return _SSA_NAME.sub(rename, text)


def _constant_key(v: ir.Value, cloned: dict[ir.Value, int]) -> str:
    """A cloned constant's value (and the constants it is computed from) as text."""
    op = v.owner.operation
    names = [a if isinstance(a, str) else a.name for a in op.attributes]
    attributes = ",".join(f"{n}={op.attributes[n]}" for n in names)
    types = ",".join(str(r.type) for r in op.results)
    inner = ",".join(_constant_key(o, cloned) for o in op.operands)
    return f"{op.name}{{{attributes}}}:{types}[{inner}]#{v.result_number}"


@register
@dataclasses.dataclass(frozen=True)
class OutlineRepeatedLoops(Pass):
    name = "autodiff-outline-repeated-loops"
    summary = "Outline loop nests that a large function repeats into one function each"

    min_ops: int = dataclasses.field(default=REPEAT_MIN_FUNCTION_OPS, metadata={
        "help": "only in functions of at least this many operations"})
    min_nest_ops: int = dataclasses.field(default=REPEAT_MIN_OPS, metadata={
        "help": "only loop nests of at least this many operations"})

    def run(self, module: ir.Operation) -> None:
        names = symbol_names(module)
        for fn in single_block_functions(module):
            self._outline(fn, names)

    def _outline(self, fn: ir.Operation, names: set[str]) -> None:
        if not _has_ops(fn, self.min_ops):
            return
        block = fn.regions[0].blocks[0]
        ops = [op.operation for op in block.operations][:-1]
        cloned: dict[ir.Value, int] = {}  # top-level constant's result -> its position
        for i, op in enumerate(ops):
            if op.name in _CLONED and not op.regions and all(v in cloned for v in op.operands):
                for r in op.results:
                    cloned[r] = i
        # One numbering of the function's values: a nest's text names the values it
        # uses from outside as the function does (names are unique in a function).
        state = ir.AsmState(fn)
        top: dict[str, ir.Value] = {a.get_name(state): a for a in block.arguments}
        for op in ops:
            for r in op.results:
                top[r.get_name(state)] = r
        groups: dict[str, list[tuple[ir.Operation, list[ir.Value]]]] = {}
        for op in ops:
            if not op.regions or op.results:
                continue
            buffer = io.StringIO()
            op.print(state, file=buffer)
            text = buffer.getvalue()
            if text.count("\n") + 1 < self.min_nest_ops:  # one operation per line
                continue
            used = list(dict.fromkeys(top[n] for n in _SSA_NAME.findall(text) if n in top))
            key = "\n".join([
                _canonical(text),
                # which outside value is which constant, and the types of the others
                *(_constant_key(v, cloned) if v in cloned else str(v.type) for v in used)])
            groups.setdefault(key, []).append((op, used))
        base = ir.StringAttr(fn.attributes["sym_name"]).value
        for members in groups.values():
            if len(members) > 1:
                self._outline_group(fn, members, cloned, base, names)

    @staticmethod
    def _outline_group(fn: ir.Operation, members: list[tuple[ir.Operation, list[ir.Value]]],
                       cloned: dict[ir.Value, int],
                       base: str, names: set[str]) -> None:
        from mlir.dialects import func

        first, used = members[0]
        args = [v for v in used if v not in cloned]
        name = unique_name(f"{base}_repeat{len(names)}", names)
        loc = first.location
        _, entry = outlined_function(name, args, [], fn, loc)
        mapping: dict[ir.Value, ir.Value] = dict(zip(args, entry.arguments))
        SplitLargeFunctions._clone_constants([v for v in used if v in cloned], cloned,
                                             mapping, entry)
        with ir.InsertionPoint(entry), loc:
            ret = func.ReturnOp([])
        for op, values in members:
            with ir.InsertionPoint(op), op.location:
                func.CallOp([], ir.FlatSymbolRefAttr.get(name),
                            [v for v in values if v not in cloned])
        first.move_before(ret)
        for user, i, v in _scan(first, 0).outside:  # its uses of the caller's values
            user.operands[i] = mapping[v]
        for op, _ in members[1:]:
            op.erase()
