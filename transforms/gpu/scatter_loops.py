"""Scatter loops in parallel over the dimensions their writes keep apart.

A scatter-add (the derivative of a gather: an embedding table's gradient, the
vjp of `take`) is a host `scf.for` over every update, linearised, whose body
reads the update, computes the row it lands in from data, and adds it there:

    scf.for %i = 0 to 32768 {                     // 512 tokens x 64 features
      %f = remui %i, 64;  %t = divui %i, 64 ...
      %r = <row from the token's id>
      store (load T[%r, %f] + U[%t, %f]), T[%r, %f]
    }

`SerialKernels` would run it on one thread. But the updates of feature `%f`
only ever touch column `%f` of the table: iterations with different `%f`
never touch the same element, so they can run on different threads, each
keeping the original order of its own iterations (the sums are bit for bit
those of the serial loop; no atomics, deterministic):

    scf.parallel (%f) = (0) to (64) {
      scf.for %m = 0 to 512 { %i = %m * 64 + %f; <body> }
    }

`ParallelScatterLoops` finds such a digit of the induction variable -- a
value `(%i / inner) mod K` built from `remui`/`divui` by constants -- that
indexes every access to every buffer the loop writes at one fixed position,
and splits the loop over it (the largest such digit). It only takes loops
whose buffers are distinct allocations or function arguments (so that no two
accessed values alias) and whose bodies have no effects besides loads and
stores of them.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, scf

from ..ad_support import int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .parallel_loops import _pure
from .support import host_blocks, index_const, new_parallel, on_host, ops_of

#: Fewest parallel iterations worth a split (below it the loop stays serial).
MIN_SPLIT = 2


def _digits(loop: ir.Operation, trips: int) -> dict[ir.Value, tuple[int, int]]:
    """Values of `loop`'s body that are digits of its induction variable:
    value -> (inner, K) with value == (iv / inner) mod K."""
    iv = loop.regions[0].blocks[0].arguments[0]
    known: dict[ir.Value, tuple[int, int]] = {iv: (1, trips)}
    for op in walk_ops(loop)[1:]:
        if op.name not in ("arith.remui", "arith.divui") or op.operands[0] not in known:
            continue
        k = int_constant(op.operands[1])
        inner, extent = known[op.operands[0]]
        if not k or k <= 0 or extent % k:
            continue
        known[op.results[0]] = (inner, k) if op.name == "arith.remui" else \
            (inner * k, extent // k)
    return known


def _root_buffer(value: ir.Value) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        return parent is not None and parent.operation.name == "func.func"
    return owner.operation.name in ("memref.alloc", "gpu.alloc")


def _split(loop: ir.Operation) -> tuple[int, int] | None:
    """The digit (inner, K) to run `loop` in parallel over, or None."""
    view = loop.opview
    if len(loop.results) or len(view.initArgs):
        return None
    lo, hi, st = (int_constant(v) for v in (view.lowerBound, view.upperBound, view.step))
    if lo != 0 or st != 1 or not hi or hi < MIN_SPLIT:
        return None
    digits = _digits(loop, hi)
    accesses: dict[ir.Value, list[ir.Operation]] = {}
    written: set = set()
    for op in walk_ops(loop)[1:]:
        if op.name in ("memref.load", "memref.store"):
            ref = op.operands[1] if op.name == "memref.store" else op.operands[0]
            accesses.setdefault(ref, []).append(op)
            if op.name == "memref.store":
                written.add(ref)
        elif op.regions and op.name not in ("scf.for", "scf.if", "scf.yield"):
            return None
        elif not op.regions and not _pure(op) and op.name not in ("scf.yield",):
            return None
    if not written or not all(_root_buffer(r) for r in accesses):
        return None
    # Candidate digits: for each written buffer, those every access to it has at one
    # same index position (two positions would let iterations of different digit
    # values meet at one element, e.g. M[d, r] and M[r, d]); then those all share.
    choice: set | None = None
    for ref in written:
        placed: set | None = None
        for op in accesses[ref]:
            idx = list(op.operands[2:] if op.name == "memref.store" else op.operands[1:])
            here = {(p, digits[v]) for p, v in enumerate(idx) if v in digits}
            placed = here if placed is None else placed & here
        found = {d for _, d in placed or ()}
        choice = found if choice is None else choice & found
    if not choice:
        return None
    inner, k = max(choice, key=lambda d: d[1])
    return (inner, k) if k >= MIN_SPLIT else None


def _rewrite(loop: ir.Operation, inner: int, k: int) -> None:
    view = loop.opview
    trips = int_constant(view.upperBound)
    with ir.InsertionPoint(loop), loop.location:
        _, body, term = new_parallel([index_const(0)], [index_const(k)], [index_const(1)])
        with ir.InsertionPoint(term):
            seq = scf.ForOp(index_const(0), index_const(trips // k), index_const(1))
            with ir.InsertionPoint(seq.body):
                m, d = seq.induction_variable, body.arguments[0]
                hi = arith.divui(m, index_const(inner))
                iv = arith.addi(arith.muli(hi, index_const(k * inner)),
                                arith.muli(d, index_const(inner)))
                if inner > 1:
                    iv = arith.addi(iv, arith.remui(m, index_const(inner)))
                yield_ = scf.YieldOp([])
    old = loop.regions[0].blocks[0]
    old.arguments[0].replace_all_uses_with(iv)
    for op in ops_of(old)[:-1]:
        op.move_before(yield_)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class ParallelScatterLoops(_Step):
    """Host scf.for loops (scatters) run in parallel over an induction digit that keeps
    their writes apart (see the module doc)."""

    name = "autodiff-gpu-parallel-scatter-loops"
    summary = "Run scatter loops in parallel over the dimensions their writes keep apart"

    def apply(self, module: ir.Operation) -> None:
        loops = [op for block in host_blocks(module) for op in ops_of(block)
                 if op.name == "scf.for"]
        for op in loops:
            if on_host(op):  # not moved into a loop split before it
                split = _split(op)
                if split is not None:
                    _rewrite(op, *split)
