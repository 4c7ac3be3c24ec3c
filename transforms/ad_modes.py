"""The two sweeps of the differentiation driver over a block: `ForwardAD` inserts
tangent code after each active op (forward mode), `ReverseAD` runs the backward
sweep in reverse op order, accumulating cotangents (reverse mode). Both call the
per-op rules of `rules/` and ask their `ADDriver` for generated functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlir import ir

from ..dialects.vocabulary import STOP_GRADIENT
from .ad_checkpoint import CheckpointPlan
from .ad_support import Builder, captured_values, is_float, op_name
from .diagnostics import PassFailure
from .rules.registry import JVP_RULES, VJP_RULES

if TYPE_CHECKING:
    from .ad_driver import ADDriver

class ForwardAD:
    """Tangent propagation through the ops of a block (in place, after each op)."""

    def __init__(self, driver: ADDriver, tmap: dict[ir.Value, ir.Value]):
        self.driver = driver
        self.t = tmap
        self.replaced: dict[ir.Value, ir.Value] = {}
        self.dead: list[ir.Operation] = []
        self.depth = 0

    def tangent(self, v: ir.Value) -> ir.Value | None:
        return self.t.get(v)

    def is_active(self, v: ir.Value) -> bool:
        return v in self.t

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def jvp_function(self, name: str, at: Any, zeros: frozenset[int] = frozenset()) -> str:
        return self.driver.jvp_function(name, at, zeros)

    def replace_op(self, op: ir.Operation, new: Sequence[ir.Value]) -> None:
        """Route the uses of `op`'s results to `new` and erase `op` after its rule."""
        for old, nv in zip(op.results, new):
            old.replace_all_uses_with(nv)
            self.replaced[old] = nv
        self.dead.append(op.operation)

    def run_block(self, block: ir.Block) -> None:
        """Differentiate every op of `block` but its terminator."""
        ops = list(block.operations)
        for i, op in enumerate(ops[:-1]):
            self.visit(op.operation, ops[i + 1])

    def visit(self, op: ir.Operation, next_op: Any) -> None:
        name = op_name(op)
        if not any(is_float(r.type) for r in op.results):
            return  # integer, index and i1 results are never active
        ts = [self.t.get(v) for v in op.operands]
        if all(t is None for t in ts):
            if not op.regions or not any(v in self.t for v in captured_values(op)):
                return
        rule = JVP_RULES.get(name)
        if rule is None:
            raise self.fail(op, f"no forward rule for '{name}'")
        b = Builder(ir.InsertionPoint(next_op), op.location, self, op)
        results = list(op.results)
        self.depth += 1
        try:
            touts = rule(b, op, ts)
        finally:
            self.depth -= 1
        for r, t in zip(results, touts):
            if t is not None and is_float(r.type):
                while r in self.replaced:
                    r = self.replaced[r]
                self.t[r] = t
        if self.depth == 0:
            # Replaced ops die only once no enclosing rule can still refer to them.
            for d in self.dead:
                d.erase()
            self.dead.clear()
            self.replaced.clear()


class ReverseAD:
    """Activity, forward augmentation and the backward sweep over a block's ops."""

    def __init__(self, driver: ADDriver, seeds: set[ir.Value]):
        self.driver = driver
        self.active: set[ir.Value] = set(seeds)
        self.ct: dict[ir.Value, ir.Value] = {}
        self.dead: list[ir.Operation] = []
        self.tapes: dict[Any, Any] = {}

    def is_active(self, v: ir.Value) -> bool:
        return v in self.active

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def vjp_functions(self, name: str, wrt: Sequence[int], at: Any):
        return self.driver.vjp_functions(name, wrt, at)

    def checkpoint_plan(self, op: ir.Operation, wrt: Sequence[int]) -> CheckpointPlan:
        return self.driver.checkpoint_plan(op, wrt)

    def forward_builder(self, op: ir.Operation) -> Builder:
        """A builder emitting forward (primal-side) code just before `op`."""
        return Builder(ir.InsertionPoint(op), op.location, self, op)

    def replace_op(self, op: ir.Operation, new: Sequence[ir.Value]) -> None:
        for old, nv in zip(op.results, new):
            old.replace_all_uses_with(nv)
            if old in self.active:
                self.active.add(nv)
        self.dead.append(op.operation)

    def sub(self, seeds: set[ir.Value]) -> ReverseAD:
        """A nested reverse pass (e.g. over a linalg.generic body)."""
        return ReverseAD(self.driver, seeds)

    def propagate(self, ops: Sequence[Any]) -> None:
        """Forward activity: float results of ops that read an active value."""
        for op in ops:
            op = op.operation
            if op_name(op) == STOP_GRADIENT:
                continue
            reads = list(op.operands)
            if op.regions:
                reads += captured_values(op)
            if any(v in self.active for v in reads):
                for r in op.results:
                    if is_float(r.type):
                        self.active.add(r)

    def prepare_forward(self, ops: Sequence[Any]) -> None:
        """Let region rules augment the forward code (tapes) before the sweep."""
        from .rules.registry import FORWARD_AUGMENT

        for op in ops:
            op = op.operation
            aug = FORWARD_AUGMENT.get(op_name(op))
            if aug is not None and any(r in self.active for r in op.results):
                aug(self, op)

    def add_ct(self, b: Builder, v: ir.Value, c: ir.Value | None) -> None:
        if c is None or v not in self.active:
            return
        old = self.ct.get(v)
        self.ct[v] = c if old is None else b.accumulate(old, c)

    def sweep(self, ops: Sequence[Any], ip: ir.InsertionPoint) -> None:
        """Emit the backward code of `ops` (walked in reverse) at `ip`."""
        for op in reversed(list(ops)):
            op = op.operation
            cts = [self.ct.get(r) for r in op.results]
            if all(c is None for c in cts):
                continue
            reads = list(op.operands)
            if op.regions:
                reads += captured_values(op)
            if not any(v in self.active for v in reads):
                continue
            name = op_name(op)
            rule = VJP_RULES.get(name)
            if rule is None:
                raise self.fail(op, f"no reverse rule for '{name}'")
            b = Builder(ip, op.location, self, op)
            ins = rule(b, op, cts)
            if len(ins) != len(op.operands):
                ins = list(ins) + [None] * (len(op.operands) - len(ins))
            for v, c in zip(list(op.operands), ins):
                self.add_ct(b, v, c)
            for d in self.dead:
                d.erase()
            self.dead.clear()
