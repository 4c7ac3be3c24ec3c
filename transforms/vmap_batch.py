"""Batching one function's body for `--autodiff-vmap`: `BatchTrace` walks a block
and emits, per op, the batching rule of `rules/` (every batched value carries the
batch dimension at axis 0), clones unbatched ops as they are, and runs ops that
capture batched values lane by lane; plus the small transposes and broadcasts
the pass and the custom rules share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlir import ir
from mlir.dialects import linalg

from .ad_support import (
    Builder,
    captured_values,
    is_tensor,
    op_name,
    walk_ops,
)
from .diagnostics import PassFailure
from .rules.batching import ALWAYS_RULE, BatchBuilder, rule_for

if TYPE_CHECKING:
    from .vmap import VmapDriver


def as_value(x: Any) -> ir.Value:
    return x if isinstance(x, ir.Value) else x.results[0]


def moveaxis_perm(rank: int, src: int, dst: int) -> list[int]:
    """The linalg.transpose permutation moving dimension `src` to position `dst`."""
    order = [d for d in range(rank) if d != src]
    order.insert(dst, src)
    return order


def transpose(b: Builder, x: ir.Value, perm: list[int]) -> ir.Value:
    t = x.type
    init = b.empty(ir.RankedTensorType.get([t.shape[p] for p in perm], t.element_type))
    with b.loc, b.ip:
        return as_value(linalg.transpose(x, outs=[init], permutation=perm))


def broadcast_at(b: Builder, v: ir.Value, t: ir.RankedTensorType, axis: int) -> ir.Value:
    """An unbatched result repeated along a new dimension `axis` (its out_axes entry)."""
    if not is_tensor(v.type):
        return b.fill(b.empty(t), v)
    with b.loc, b.ip:
        return as_value(linalg.broadcast(v, outs=[b.empty(t)], dimensions=[axis]))


#: The batching driver of each differentiation driver (one cache per pass run).


class BatchTrace:
    """Batching of one function body for one batch size: old values -> (new value, batched)."""

    def __init__(self, driver: VmapDriver, size: int, randomness: str):
        self.driver = driver
        self.size = size
        self.randomness = randomness
        self.env: dict[ir.Value, tuple[ir.Value, bool]] = {}

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def lookup(self, v: ir.Value) -> tuple[ir.Value, bool]:
        return self.env[v]

    def batched_callee(self, name: str, flags: list[bool], at: Any
                       ) -> tuple[str, list[ir.Type], list[bool]]:
        return self.driver.batched_function(name, flags, self.size, self.randomness, at)

    # -- analysis ------------------------------------------------------------------

    def is_tainted(self, v: ir.Value, tainted: set[ir.Value]) -> bool:
        return v in tainted or (v in self.env and self.env[v][1])

    def taint(self, block: ir.Block, seeds: set[ir.Value]) -> set[ir.Value]:
        """Values of `block` that depend on `seeds` or on batched outer values."""
        tainted = set(seeds)
        for op in list(block.operations):
            op = op.operation
            reads = list(op.operands) + (captured_values(op) if op.regions else [])
            if op_name(op) in ALWAYS_RULE or any(self.is_tainted(v, tainted) for v in reads):
                tainted.update(op.results)
        return tainted

    def captures_batched(self, op: ir.Operation) -> bool:
        return any(v in self.env and self.env[v][1] for v in captured_values(op))

    # -- cloning -------------------------------------------------------------------

    def clone_unbatched(self, op: ir.Operation, ip: ir.InsertionPoint,
                        operands: Sequence[ir.Value] | None = None,
                        result_types: Sequence[ir.Type] | None = None,
                        attrs: dict[str, ir.Attribute] | None = None) -> ir.Operation:
        """Clone `op` at `ip` with outer values remapped (they must be unbatched).

        `operands`/`result_types`/`attrs` replace the clone's own (regions are kept).
        """
        c = op.operation.clone(ip=ip)
        if operands is not None:
            for k, v in enumerate(operands):
                c.operands[k] = v
        for inner in walk_ops(c)[(1 if operands is not None else 0):]:
            for k, v in enumerate(list(inner.operands)):
                if v in self.env:
                    nv, batched = self.env[v]
                    if batched:
                        raise self.fail(op, f"cannot batch '{op_name(op)}': its region uses "
                                            "a batched value")
                    inner.operands[k] = nv
        for r, t in zip(c.results, result_types or []):
            r.set_type(t)
        for k, a in (attrs or {}).items():
            c.attributes[k] = a
        return c

    def lane_body(self, src: ir.Block, dst: ir.Block, args: Sequence[ir.Value], *,
                  shift_index: bool, terminator: str | None = None,
                  lane_arg: ir.Value | None = None) -> None:
        """Clone a linalg-style body into `dst`, where it runs once per (lane, element).

        Block arguments map to `args`; `linalg.index d` becomes `d + 1` when the
        batch loop was prepended; outer batched scalars become `tensor.extract`
        at the lane (`linalg.index 0`, or `lane_arg` in a region that gets its
        indices as arguments, as tensor.pad's), outer batched tensors may only
        be read by `tensor.extract`, which gains the lane index.
        """
        local: dict[ir.Value, ir.Value] = dict(zip(src.arguments, args))
        loc = dst.owner.location if dst.owner is not None else ir.Location.unknown()
        lane: list[ir.Value] = [] if lane_arg is None else [lane_arg]

        def lane_index() -> ir.Value:
            if not lane:
                lane.append(ir.Operation.create(
                    "linalg.index", results=[ir.IndexType.get()],
                    attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
                    loc=loc, ip=ir.InsertionPoint.at_block_begin(dst)).result)
            return lane[0]

        # Per-lane copies of batched outer scalars first, so they dominate the body.
        tensors: dict[ir.Value, ir.Value] = {}
        for o in block_ops(src):
            for v in o.operands:
                if v in self.env and v not in local and v not in tensors:
                    nv, batched = self.env[v]
                    if not batched:
                        local[v] = nv
                    elif is_tensor(v.type):
                        tensors[v] = nv
                    else:
                        local[v] = ir.Operation.create(
                            "tensor.extract", results=[v.type], operands=[nv, lane_index()],
                            loc=loc, ip=ir.InsertionPoint(dst)).result
        ip = ir.InsertionPoint(dst)
        ops = list(src.operations)
        for o in ops:
            o = o.operation
            if o == ops[-1].operation and terminator is not None:
                ir.Operation.create(terminator, results=[],
                                    operands=[local.get(v, v) for v in o.operands],
                                    loc=o.location, ip=ip)
                continue
            c = o.clone(ip=ip)
            results = list(c.results)
            dead = []
            for inner in walk_ops(c):
                for k, v in enumerate(list(inner.operands)):
                    if v in local:
                        inner.operands[k] = local[v]
                    elif v in tensors:
                        if op_name(inner) != "tensor.extract" or k != 0:
                            raise self.fail(o, f"cannot batch '{op_name(inner)}' reading a "
                                               "batched tensor inside a linalg body")
                        rest = [local.get(x, x) for x in list(inner.operands)[1:]]
                        new = ir.Operation.create(
                            "tensor.extract", results=[inner.results[0].type],
                            operands=[tensors[v], lane_index(), *rest], loc=inner.location,
                            ip=ir.InsertionPoint(inner))
                        inner.results[0].replace_all_uses_with(new.results[0])
                        if inner == c:
                            results = list(new.results)
                        dead.append(inner)
                        break
                if shift_index and op_name(inner) == "linalg.index":
                    d = ir.IntegerAttr(inner.attributes["dim"]).value
                    inner.attributes["dim"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), d + 1)
            for old, new in zip(o.results, results):
                local[old] = new
            for d in dead:
                d.erase()

    # -- batching --------------------------------------------------------------------

    def batch_block(self, src: ir.Block, ip: ir.InsertionPoint,
                    args: Sequence[tuple[ir.Value, bool]]) -> list[tuple[ir.Value, bool]]:
        """Batch every op of `src` but its terminator at `ip`; return the terminator's operands."""
        for a, nv in zip(src.arguments, args):
            self.env[a] = nv
        ops = list(src.operations)
        for op in ops[:-1]:
            self.batch_op(op.operation, ip)
        return [self.env[v] for v in ops[-1].operands]

    def batch_op(self, op: ir.Operation, ip: ir.InsertionPoint) -> None:
        name = op_name(op)
        pairs = [self.env[v] for v in op.operands]
        vals = [v for v, _ in pairs]
        flags = [f for _, f in pairs]
        if name in ALWAYS_RULE or any(flags) or (op.regions and self.captures_batched(op)):
            rule = rule_for(name)
            if rule is None:
                raise self.fail(op, f"no batching rule for '{name}'")
            b = BatchBuilder(ip, op.location, self, op)
            outs = rule(b, op, vals, flags)
            for r, out in zip(op.results, outs):
                self.env[r] = out
        else:
            c = self.clone_unbatched(op, ip)
            for r, nr in zip(op.results, c.results):
                self.env[r] = (nr, False)


def block_ops(block: ir.Block) -> list[ir.Operation]:
    out = []
    for o in block.operations:
        out.extend(walk_ops(o))
    return out
