"""Fewer kernels: loops brought together so that more of them fuse.

`scf-parallel-loop-fusion` (upstream) fuses two adjacent `scf.parallel`
loops over the same iteration space when the second reads what the first
wrote only at the same index; it considers only loops with nothing that
has a memory effect between them. The passes here prepare for it and add
the fusion it does not do:

- `HoistAllocations`: static `memref.alloc`s move to the start of their
  block, so that an allocation no longer separates the loop that fills a
  buffer from the loop that reads it (a fill and its matmul, a matmul and
  its bias and activation).
- `RowFusion`: loops whose iteration spaces share their leading (row)
  dimensions fuse into one loop over the rows; the rest of each loop runs
  sequentially inside it (a softmax: bias add, row max, shifted exp, log-sum).
- `HorizontalFusion`: adjacent loops that touch disjoint buffers become one
  1-D loop over all their iterations (every parameter's SGD update).

Row fusion (and the row kernels of row_kernels.py) trade threads for sequential
work per thread, so each merge is bounded twice: by the work per thread
(`ROW_WORK`) and by minimum parallelism (`starves`): a merge that would leave a
kernel of fewer than `MIN_BLOCKS` blocks (one per SM of an H100/H200), whose
threads each run more than `LONG_WORK` iterations, is refused when the loops it
merges had more blocks apart. Refusing keeps the loops as they were (each value
computed by the same ops in the same order). `benchmarks/gpu_grids.py` prints
each benchmark row's grids and per-thread work.

Each keeps the program's meaning on any machine: the `parallel` stage runs on
the CPU in the tests and matches the CPU pipeline.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, scf

from ...dialects.vocabulary import GPU_ROW_FUSED
from ..ad_support import int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .support import host_blocks, index_const, new_parallel, on_host, ops_of


@dataclasses.dataclass(frozen=True)
class HoistAllocations(_Step):
    """Move operand-less `memref.alloc`s (static shapes, no dynamic sizes) on the host
    to the start of their block: what it allocates is unchanged, only earlier."""

    name = "autodiff-gpu-hoist-allocations"
    summary = "Move static host allocations to the start of their block"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name != "memref.alloc" or len(op.operands) or not on_host(op):
                continue
            first = ops_of(op.block)[0]
            if first != op:
                op.move_before(first)


# -- horizontal fusion: independent loops of any shapes share one kernel ---------

#: Ops that only look at a memref (a view of the same buffer, its shape).
_VIEWS = {
    "memref.subview", "memref.cast", "memref.expand_shape", "memref.collapse_shape",
    "memref.reinterpret_cast", "memref.view", "memref.transpose",
}


def _root(value: ir.Value) -> ir.Value:
    """The buffer `value` is a view of (through subviews, casts, reshapes)."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.operation.name not in _VIEWS:
            return value
        value = owner.operation.operands[0]


def _is_memref(value: ir.Value) -> bool:
    return isinstance(value.type, ir.MemRefType)


def _accesses(loop: ir.Operation) -> tuple[set, set] | None:
    """(buffers read, buffers written) by `loop`'s body, as root values; None if
    the body allocates (a buffer of its own would need alias analysis)."""
    reads: set = set()
    writes: set = set()
    for op in walk_ops(loop)[1:]:
        if op.name in ("memref.alloc", "memref.alloca"):
            return None
        for v in op.operands:
            if not _is_memref(v):
                continue
            if op.name == "memref.load" or op.name in _VIEWS or op.name == "memref.dim":
                reads.add(_root(v))
            else:  # stores, copies, calls: conservatively both
                reads.add(_root(v))
                writes.add(_root(v))
    return reads, writes


def _static_space(loop: ir.Operation) -> list[tuple[int, int, int]] | None:
    view = loop.opview
    out = []
    for lb, ub, st in zip(view.lowerBound, view.upperBound, view.step):
        lo, hi, s = int_constant(lb), int_constant(ub), int_constant(st)
        if None in (lo, hi, s) or s <= 0:
            return None
        out.append((lo, hi, s))
    return out


def _trip_count(space: list[tuple[int, int, int]]) -> int:
    n = 1
    for lo, hi, s in space:
        n *= max(0, -(-(hi - lo) // s))
    return n


def _sequential_work(block: ir.Block) -> int:
    """Iterations one thread runs for one iteration of the loop whose body is `block`:
    1 plus, for each `scf.for` nested in it, its trip count times its body's work (a
    contraction's reduction, the sequential loops of rows fused before). A loop
    without static bounds counts `UNKNOWN_TRIPS`."""
    total = 1
    for o in ops_of(block):
        if o.name == "scf.for":
            view = o.opview
            lo, hi, st = (int_constant(v) for v in (view.lowerBound, view.upperBound,
                                                    view.step))
            trips = UNKNOWN_TRIPS if None in (lo, hi, st) or st <= 0 else \
                max(0, -(-(hi - lo) // st))
            total += trips * _sequential_work(o.regions[0].blocks[0])
            continue
        for region in o.regions:
            for inner in region.blocks:
                total += _sequential_work(inner) - 1
    return total


def loop_work(loop: ir.Operation, skip: int = 0) -> int:
    """Sequential iterations of `loop`'s dimensions after the first `skip` times the
    work of its body (`_sequential_work`): what one thread runs for one of its rows
    when the first `skip` dimensions are the rows."""
    space = _static_space(loop)
    return _trip_count((space or [])[skip:]) * _sequential_work(loop.regions[0].blocks[0])


def _candidate(op: ir.Operation) -> bool:
    """A host `scf.parallel` without results, nested parallel loops or a dynamic
    iteration space: one kernel of one thread per iteration."""
    if op.name != "scf.parallel" or len(op.results) or not on_host(op):
        return False
    if any(o.name == "scf.parallel" for o in walk_ops(op)[1:]):
        return False
    space = _static_space(op)
    return space is not None and _trip_count(space) > 0


def _independent(group: list[tuple[ir.Operation, set, set]], reads: set, writes: set) -> bool:
    for _, r, w in group:
        if writes & (r | w) or reads & w:
            return False
    return True


def _chains(block: ir.Block) -> list[list[tuple[ir.Operation, set, set]]]:
    """Runs of candidate loops in `block` that touch disjoint buffers (reads shared),
    separated only by memory-effect-free ops and deallocations."""
    chains: list[list[tuple[ir.Operation, set, set]]] = []
    current: list[tuple[ir.Operation, set, set]] = []

    def close() -> None:
        if len(current) > 1:
            chains.append(list(current))
        current.clear()

    for op in ops_of(block):
        if _candidate(op):
            acc = _accesses(op)
            if acc is None:
                close()
                continue
            if not _independent(current, *acc):
                close()
            current.append((op, *acc))
        elif op.name == "memref.dealloc" or (
                not op.regions and (op.name.startswith(("arith.", "index.", "ub."))
                                    or op.name in ("memref.alloc", "affine.apply"))):
            continue  # constants, index math; deallocs move after the fused loop
        else:
            close()
    close()
    return chains


def _fuse_chain(chain: list[ir.Operation]) -> None:
    """Replace `chain` by one 1-D loop over all their iterations, each iteration
    dispatching (by range) to the loop it belongs to, with that loop's indices."""
    last = chain[-1]
    block = last.block
    # Deallocations between the loops move after the fused loop (a later free).
    first_index = ops_of(block).index(chain[0])
    last_index = ops_of(block).index(last)
    between = ops_of(block)[first_index:last_index]
    deallocs = [o for o in between if o.name == "memref.dealloc"]
    spaces = [_static_space(loop) for loop in chain]
    counts = [_trip_count(s) for s in spaces]
    with ir.InsertionPoint(last), last.location:
        zero, one = index_const(0), index_const(1)
        _, body, term = new_parallel([zero], [index_const(sum(counts))], [one])
    idx = body.arguments[0]
    insert_at = term
    offset = 0
    for k, (loop, space, count) in enumerate(zip(chain, spaces, counts)):
        old_body = loop.regions[0].blocks[0]
        with ir.InsertionPoint(insert_at), loop.location:
            target = insert_at
            if k + 1 < len(chain):
                below = arith.cmpi(arith.CmpIPredicate.ult, idx, index_const(offset + count))
                branch = scf.IfOp(below, has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    target = scf.YieldOp([]).operation
                with ir.InsertionPoint(branch.else_block):
                    insert_at = scf.YieldOp([]).operation
            with ir.InsertionPoint(target):
                local = arith.subi(idx, index_const(offset)) if offset else idx
                ivs: list[ir.Value] = [None] * len(space)  # type: ignore[list-item]
                for d in reversed(range(len(space))):
                    lo, hi, s = space[d]
                    extent = max(0, -(-(hi - lo) // s))
                    digit = local if d == 0 else arith.remui(local, index_const(extent))
                    if d:
                        local = arith.divui(local, index_const(extent))
                    iv = digit
                    if s != 1:
                        iv = arith.muli(iv, index_const(s))
                    if lo:
                        iv = arith.addi(iv, index_const(lo))
                    ivs[d] = iv
        for old, new in zip(old_body.arguments, ivs):
            old.replace_all_uses_with(new)
        for op in ops_of(old_body)[:-1]:
            op.move_before(target)
        offset += count
        loop.erase()
    after = term.parent  # the fused loop
    for d in reversed(deallocs):
        d.move_after(after)


@dataclasses.dataclass(frozen=True)
class HorizontalFusion(_Step):
    """Adjacent parallel loops over different iteration spaces that touch disjoint
    buffers (an SGD update of each parameter, the initialisation of several
    accumulators) become one kernel: a 1-D loop over the sum of their iterations
    whose body runs the iteration's own loop body at its own indices. Loops
    that read what another writes stay apart (a kernel boundary orders them)."""

    name = "autodiff-gpu-horizontal-fusion"
    summary = "Fuse adjacent independent parallel loops of any shapes into one"

    def apply(self, module: ir.Operation) -> None:
        for block in host_blocks(module):
            for chain in _chains(block):
                _fuse_chain([loop for loop, _, _ in chain])


# -- row fusion: a loop over rows with its neighbours over the rows' elements ----

#: Most iterations per row that row fusion makes sequential in one thread (a
#: softmax over 10 classes, a 25-component mixture), so that the broadcast and
#: reduction chain around a row stays one kernel without serialising real work.
ROW_ELEMENTS = 64
#: Most sequential iterations (nested loops counted) a thread runs for one row of a
#: row-fused loop: beyond it, the rows' few threads cost more than a launch saves (a
#: contraction's reduction inside each row ran one thread per row for 4,096 steps).
ROW_WORK = 1024
#: Trip count assumed for an `scf.for` with dynamic bounds.
UNKNOWN_TRIPS = 64

# -- minimum parallelism: a merge must not leave the chip idle ---------------------
#
# A merge (row fusion here, a row kernel in row_kernels.py) trades a kernel's threads
# for sequential work in each: rows of a fused loop run their elements one after
# another. With many rows that is free; with few, the merged kernel is a handful of
# blocks on a chip of a hundred SMs, each thread running a long loop, slower than the
# separate kernels it replaced (the GMM's Cholesky factors, 10 or 20 blocks of 256
# threads each running ~760 steps; a transformer's attention scores, max, exp and sum
# in 8 blocks). So a merge is refused when its kernel would have fewer than
# `MIN_BLOCKS` blocks, its threads more than `LONG_WORK` sequential iterations each,
# and one of the loops it merges had more blocks on its own. Refusing a merge keeps
# the loops as they were: each value is computed by the same ops in the same order
# (bit for bit what the merged kernel computes).

#: Fewest blocks a merged kernel must keep (unless its loops had no more): one per
#: streaming multiprocessor of an H100/H200 (132).
MIN_BLOCKS = 132
#: Sequential iterations per thread from which a kernel of fewer than `MIN_BLOCKS`
#: blocks is long-running (a row softmax over 32 elements, a few phases, stays under).
LONG_WORK = 256
#: Threads per block assumed for the block counts (the pipeline's default).
ASSUMED_BLOCK = 256


def blocks_of(threads: int, block_size: int = ASSUMED_BLOCK) -> int:
    """Blocks a loop of `threads` iterations (one thread each) is mapped to."""
    return max(1, -(-threads // block_size))


def starves(blocks: int, work: int, apart: int) -> bool:
    """Whether a merged kernel of `blocks` blocks whose threads each run `work`
    sequential iterations leaves too much of the chip idle, when the loops it merges
    had up to `apart` blocks on their own (see `MIN_BLOCKS`)."""
    return blocks < MIN_BLOCKS and work > LONG_WORK and apart > blocks


def _prefix_len(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def _indexed_by_rows(loop: ir.Operation, buffers: set, names: tuple[str, ...], k: int) -> bool:
    """Whether every `names` access of `loop` to one of `buffers` has the loop's own
    first `k` induction variables as its first `k` indices."""
    ivs = list(loop.regions[0].blocks[0].arguments)[:k]
    for op in walk_ops(loop)[1:]:
        if not any(_is_memref(v) and _root(v) in buffers for v in op.operands):
            continue
        if op.name not in names:
            return False
        view = op.opview
        if view.memref != _root(view.memref):  # a view: its indices are not the buffer's
            return False
        idx = list(view.indices)
        if len(idx) < k or any(idx[d] != ivs[d] for d in range(k)):
            return False
    return True


def _row_fusable(a: ir.Operation, b: ir.Operation) -> int:
    """The number of leading (row) dimensions over which `a` then `b` fuse, 0 if not."""
    sa, sb = _static_space(a), _static_space(b)
    k = _prefix_len(sa, sb)
    if k == 0:
        return 0
    if max(_trip_count(sa[k:]), _trip_count(sb[k:])) > ROW_ELEMENTS:
        return 0
    work = loop_work(a, k) + loop_work(b, k)
    if work > ROW_WORK:
        return 0
    if starves(blocks_of(_trip_count(sa[:k])), work, max(apart_blocks(a), apart_blocks(b))):
        return 0
    acc_a, acc_b = _accesses(a), _accesses(b)
    if acc_a is None or acc_b is None:
        return 0
    (ra, wa), (rb, wb) = acc_a, acc_b
    # Buffers one loop writes and the other touches: every access of both loops
    # to them stays in its own row, so row by row the order is the original one.
    shared = (wa & (rb | wb)) | (wb & ra)
    rows_only = ("memref.store", "memref.load")
    if shared and not (_indexed_by_rows(a, shared, rows_only, k)
                       and _indexed_by_rows(b, shared, rows_only, k)):
        return 0
    return k


def apart_blocks(loop: ir.Operation) -> int:
    """Blocks of `loop` (a thread per iteration), or, if row fusion made it, the most
    blocks of the loops it was made of (`GPU_ROW_FUSED`): what a further merge of
    it is measured against."""
    own = blocks_of(_trip_count(_static_space(loop) or []))
    if GPU_ROW_FUSED in loop.attributes:
        return max(own, ir.IntegerAttr(loop.attributes[GPU_ROW_FUSED]).value)
    return own


def _nest_body(loop: ir.Operation, k: int, dest: ir.Operation) -> None:
    """Move `loop`'s body before `dest`, its dimensions after the first `k` as
    sequential scf.for loops; its first `k` indices become `rows`."""
    space = _static_space(loop)
    body = loop.regions[0].blocks[0]
    target = dest
    ivs: list[ir.Value] = []
    for lo, hi, s in space[k:]:
        with ir.InsertionPoint(target), loop.location:
            inner = scf.ForOp(index_const(lo), index_const(hi), index_const(s))
            with ir.InsertionPoint(inner.body):
                target = scf.YieldOp([]).operation
            ivs.append(inner.induction_variable)
    return ivs, target, body


def _fuse_rows(a: ir.Operation, b: ir.Operation, k: int) -> ir.Operation:
    block = b.block
    ops = ops_of(block)
    deallocs = [o for o in ops[ops.index(a) + 1:ops.index(b)] if o.name == "memref.dealloc"]
    space = _static_space(a)[:k]
    with ir.InsertionPoint(b), b.location:
        _, body, term = new_parallel([index_const(lo) for lo, _, _ in space],
                                     [index_const(hi) for _, hi, _ in space],
                                     [index_const(s) for _, _, s in space])
    rows = list(body.arguments)
    for loop in (a, b):
        ivs, target, old = _nest_body(loop, k, term)
        for old_iv, new in zip(old.arguments, rows + ivs):
            old_iv.replace_all_uses_with(new)
        for op in ops_of(old)[:-1]:
            op.move_before(target)
        loop.erase()
    fused = term.parent
    for d in reversed(deallocs):
        d.move_after(fused)
    return fused


@dataclasses.dataclass(frozen=True)
class RowFusion(_Step):
    """Adjacent parallel loops whose iteration spaces share their leading (row)
    dimensions fuse into one loop over the rows, the rest of each loop's
    dimensions running sequentially inside it (at most `ROW_ELEMENTS`
    iterations per row and loop, `ROW_WORK` with nested loops): a bias add over
    (batch, classes), the row maximum over (batch), the shifted exponentials over
    (batch, classes)... Legal when the buffers one of them writes and the other
    touches are accessed by both only in
    the iteration's own row (indexed by the row's induction variables): row by
    row, every such access keeps its original order."""

    name = "autodiff-gpu-row-fusion"
    summary = "Fuse adjacent parallel loops over the same rows into one loop over rows"

    def apply(self, module: ir.Operation) -> None:
        changed = True
        while changed:
            changed = False
            for op in walk_ops(module):
                if op.name not in ("func.func", "scf.for", "scf.if", "scf.while",
                                   "scf.execute_region") or not on_host(op):
                    continue
                for region in op.regions:
                    for block in region.blocks:
                        changed |= self._fuse_block(block)
                if changed:
                    break

    def _fuse_block(self, block: ir.Block) -> bool:
        prev = None
        for op in ops_of(block):
            if _candidate(op):
                if prev is not None:
                    k = _row_fusable(prev, op)
                    if k:
                        # A merge of row fusions is measured against the loops
                        # before either (minimum parallelism).
                        blocks = max(apart_blocks(prev), apart_blocks(op))
                        fused = _fuse_rows(prev, op, k)
                        fused.attributes[GPU_ROW_FUSED] = ir.IntegerAttr.get(
                            ir.IntegerType.get_signless(64), blocks)
                        return True
                prev = op
            elif op.name == "memref.dealloc" or (
                    not op.regions and (op.name.startswith(("arith.", "index.", "ub."))
                                        or op.name in ("memref.alloc", "affine.apply"))):
                continue
            else:
                prev = None
        return False
