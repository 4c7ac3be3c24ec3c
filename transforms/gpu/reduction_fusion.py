"""Block reductions share kernels with their independent neighbours.

After `InlineBlockReductions` each block-parallel reduction (reductions.py) is a
block loop around one reducing thread loop:

    scf.parallel (%b) = (0) to (B) {                    // blocks
      index math of %b
      %r = scf.parallel (%t) = (0) to (T) init (%neutral) { ...; scf.reduce(%part) }
      code after the reduction (the row's store, a scalar tail)
    }

`convert-parallel-loops-to-gpu` maps exactly one thread loop per block loop
(a second one would redefine the block size), and turns the thread loop's
`scf.reduce` into `gpu.all_reduce`. So two reductions, or a reduction and an
elementwise loop, cannot simply sit one after the other in a block. They can
share one grid when they are independent (neither writes what the other
touches): `FuseBlockReductions` gives each of them its own range of blocks in
one block loop, and one thread loop whose body runs, by block range, the
reduction's per-thread partial or the elementwise loop's iteration
(`block * T + thread`, masked), yielding the neutral element where it has
nothing to reduce:

    scf.parallel (%b) = (0) to (B1 + B2 + ...) {
      %r = scf.parallel (%t) = (0) to (T) init (%neutral) {
        %part = scf.if %b < B1 { partial of reduction 1 } else { ... }
        scf.reduce(%part) { combiner }
      }
      scf.if %b < B1 { reduction 1's store and tail } else { ... }
    }

Reductions in one grid share their combiner and element type (one
`gpu.all_reduce`); `T` is the largest of their thread counts, the others
masked. The code after the all-reduce runs on thread 0 (`SingleThreadTails`).

Which loops: a run of host loops (block reductions, and parallel loops without
nested parallel loops) separated only by memory-effect-free ops, allocations
and deallocations. Within the run, a loop depends on an earlier one when one
writes a buffer the other touches; the run is rescheduled in levels (every
loop whose dependencies have run), each level one grid: the partial passes of
several whole-array sums share a kernel, then their combining passes; a bias
gradient's column sums share the kernel of the weight gradient or the
elementwise loop beside them. Deallocations in the run move after it.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, scf

from ...dialects.vocabulary import GPU_PHASES
from ..ad_support import walk_ops
from ..bufferize import ContextPass as _Step
from .fusion import _accesses, _candidate, _fuse_chain, _static_space, _trip_count
from .fusion import _root as _fusion_root
from .parallel_loops import _pure
from .support import host_blocks, index_const, new_parallel, on_host, ops_of


@dataclasses.dataclass
class _Member:
    loop: ir.Operation
    reads: set
    writes: set
    blocks: int  # blocks this member takes in a fused grid (for a loop: at the fused T)
    threads: ir.Operation | None = None  # the reducing thread loop (reductions)
    key: tuple | None = None  # (combiner, element type, neutral) of a reduction
    solo: bool = False  # a row kernel (row_kernels.py): a kernel of its own, fused with none

    @property
    def reduces(self) -> bool:
        return self.threads is not None


def _const_int(v: ir.Value) -> int | None:
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return None
    attr = owner.operation.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def _thread_count(threads: ir.Operation) -> int | None:
    view = threads.opview
    if len(view.lowerBound) != 1:
        return None
    lo, hi, st = (_const_int(view.lowerBound[0]), _const_int(view.upperBound[0]),
                  _const_int(view.step[0]))
    return hi if (lo, st) == (0, 1) and hi else None


def _reduction_member(op: ir.Operation) -> _Member | None:
    """`op` as a block reduction: a static 1-D host block loop whose body holds one
    thread loop with one reduced result and no stores, and before it only pure
    ops or loads the thread loop does not use."""
    if op.name != "scf.parallel" or len(op.results) or not on_host(op):
        return None
    space = _static_space(op)
    if space is None or len(space) != 1 or space[0][0] != 0 or space[0][2] != 1:
        return None
    body = op.regions[0].blocks[0]
    ops = ops_of(body)
    loops = [o for o in ops if o.name == "scf.parallel"]
    if len(loops) != 1 or len(loops[0].results) != 1:
        return None
    threads = loops[0]
    after = ops[ops.index(threads) + 1:]
    if any(o.name == "scf.parallel" for o in walk_ops(threads)[1:]) or any(
            inner.name == "scf.parallel" for o in after for inner in walk_ops(o)):
        return None
    if _thread_count(threads) is None:
        return None
    if any(o.name not in ("memref.load",) and not _pure(o) and o.name not in
           ("scf.for", "scf.if", "scf.yield", "scf.reduce", "scf.reduce.return")
           for o in walk_ops(threads)[1:]):
        return None  # the thread loop only reads (and computes)
    late = _late_pre_ops(ops[:ops.index(threads)])
    if late is None or any(_used_in(o, threads) for o in late):
        return None
    reduce_op = ops_of(threads.regions[0].blocks[0])[-1]
    red_ops = ops_of(reduce_op.regions[0].blocks[0])
    if len(red_ops) != 2:
        return None
    init = threads.operands[len(threads.operands) - 1]
    if isinstance(init.owner, ir.Block) or init.owner.operation.name != "arith.constant":
        return None
    acc = _accesses(op)
    if acc is None:
        return None
    key = (red_ops[0].name, str(threads.results[0].type),
           str(init.owner.operation.attributes["value"]))
    return _Member(op, acc[0], acc[1], space[0][1], threads, key)


def _late_pre_ops(pre: list[ir.Operation]) -> list[ir.Operation] | None:
    """The ops before the thread loop that must run after it in a fused grid (loads,
    and what is computed from them); None if one of them is neither pure nor a load."""
    late: list[ir.Operation] = []
    produced: set = set()
    for o in pre:
        if o.name == "memref.load" or any(v in produced for v in o.operands):
            late.append(o)
            produced.update(o.results)
        elif not _pure(o):
            return None
    return late


def _used_in(op: ir.Operation, region_op: ir.Operation) -> bool:
    inner = set(walk_ops(region_op))
    for r in op.results:
        for use in r.uses:
            owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
            if owner in inner:
                return True
    return False


def _map_member(op: ir.Operation) -> _Member | None:
    if not _candidate(op):
        return None
    acc = _accesses(op)
    if acc is None:
        return None
    return _Member(op, acc[0], acc[1], 0)


def _row_kernel_member(op: ir.Operation) -> _Member | None:
    """A row kernel's block loop (row_kernels.py), which the levels order around."""
    if op.name != "scf.parallel" or GPU_PHASES not in op.attributes or not on_host(op):
        return None
    acc = _accesses(op)
    return None if acc is None else _Member(op, acc[0], acc[1], 0, solo=True)


def _conflict(a: _Member, b: _Member) -> bool:
    return bool(a.writes & (b.reads | b.writes) or b.writes & a.reads)


def _windows(block: ir.Block) -> list[list[_Member]]:
    """Runs of fusable loops in `block` separated only by memory-effect-free ops,
    static allocations and deallocations."""
    out: list[list[_Member]] = []
    current: list[_Member] = []

    def close() -> None:
        if any(m.reduces for m in current) and len(current) > 1:
            out.append(list(current))
        current.clear()

    for op in ops_of(block):
        member = _reduction_member(op) or _map_member(op) or _row_kernel_member(op)
        if member is not None:
            current.append(member)
        elif op.name == "memref.dealloc" or (
                not op.regions and (op.name.startswith(("arith.", "index.", "ub."))
                                    or op.name in ("memref.alloc", "affine.apply"))):
            continue
        else:
            close()
    close()
    return out


def _schedule(window: list[_Member]) -> list[list[_Member]]:
    """Levels of `window`: each level the loops whose predecessors (earlier loops they
    conflict with) are in earlier levels; a level's reductions of the most common
    kind form one group with the level's elementwise loops, the other reductions
    wait for a later level."""
    deps = {id(m): {id(p) for p in window[:k] if _conflict(p, m)}
            for k, m in enumerate(window)}
    done: set = set()
    groups: list[list[_Member]] = []
    pending = list(window)
    while pending:
        ready = [m for m in pending if deps[id(m)] <= done]
        # Ready loops are independent of each other: each row kernel its own group.
        groups.extend([m] for m in ready if m.solo)
        done |= {id(m) for m in ready if m.solo}
        ready = [m for m in ready if not m.solo]
        if not ready:
            pending = [m for m in pending if id(m) not in done]
            continue
        keys: dict = {}
        for m in ready:
            if m.reduces:
                keys.setdefault(m.key, []).append(m)
        if keys:
            best = max(keys.values(), key=len)
            group = [m for m in ready if not m.reduces or m in best]
        else:
            group = ready
        groups.append(group)
        done |= {id(m) for m in group}
        pending = [m for m in pending if id(m) not in done]
    return groups


def _if_chain(conds: list[ir.Value], types: list[ir.Type], fill) -> list[ir.Value]:
    """`if conds[0] {fill(0)} else if conds[1] {fill(1)} ... else {fill(n-1)}` at the
    insertion point; `fill(k)` emits branch k's ops and returns its yielded values."""
    if len(conds) == 0:
        return fill(0)
    branch = scf.IfOp(conds[0], types, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp(fill(0))
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(_if_chain(conds[1:], types, lambda k: fill(k + 1)))
    return list(branch.results)


def _move_body(ops: list[ir.Operation], dest: ir.Operation) -> None:
    for o in ops:
        o.move_before(dest)


def _fuse_group(group: list[_Member], anchor: ir.Operation) -> None:
    """Replace `group` (independent loops, at least one block reduction) by one block
    loop before `anchor`."""
    reducers = [m for m in group if m.reduces]
    threads = max(_thread_count(m.threads) for m in reducers)
    for m in group:
        if not m.reduces:
            m.blocks = -(-_trip_count(_static_space(m.loop)) // threads)
    first = reducers[0].threads
    elt = first.results[0].type
    loc = group[0].loop.location
    with ir.InsertionPoint(anchor), loc:
        zero, one = index_const(0), index_const(1)
        _, body, term = new_parallel([zero], [index_const(sum(m.blocks for m in group))], [one])
    b = body.arguments[0]
    offsets, ends, acc = [], [], 0
    with ir.InsertionPoint(term), loc:
        init = first.operands[len(first.operands) - 1].owner.operation
        neutral = arith.ConstantOp(elt, init.attributes["value"])
        for m in group:
            offsets.append(acc)
            acc += m.blocks
            ends.append(arith.cmpi(arith.CmpIPredicate.ult, b, index_const(acc)))
        ends = ends[:-1]
        locals_ = [arith.subi(b, index_const(o)) if o else b for o in offsets]
        c_threads = index_const(threads)
    # Each reduction's index math (pure) runs in every block, before the threads;
    # what reads memory runs after them, in the reduction's own branch.
    lates = []
    for m, local in zip(group, locals_):
        if not m.reduces:
            lates.append([])
            continue
        old = m.loop.regions[0].blocks[0]
        old.arguments[0].replace_all_uses_with(local)
        pre = ops_of(old)[:ops_of(old).index(m.threads)]
        late = _late_pre_ops(pre)
        _move_body([o for o in pre if o not in late], term)
        lates.append(late)
    with ir.InsertionPoint(term), loc:
        fused_threads = scf.ParallelOp([elt], [index_const(0)], [c_threads],
                                       [index_const(1)], [neutral.result])
        tbody = ir.Block.create_at_start(fused_threads.regions[0], [ir.IndexType.get()])
    t = tbody.arguments[0]

    def thread_branch(k: int) -> list[ir.Value]:
        m = group[k]
        if m.reduces:
            old_t = m.threads.regions[0].blocks[0]
            old_t.arguments[0].replace_all_uses_with(t)
            t_ops = ops_of(old_t)
            part = t_ops[-1].operands[0]
            count = _thread_count(m.threads)
            if count == threads:
                with ir.InsertionPoint.current:
                    y = scf.YieldOp([part])
                _move_body(t_ops[:-1], y)
                y.operation.erase()
                return [part]
            below = arith.cmpi(arith.CmpIPredicate.ult, t, index_const(count))
            branch = scf.IfOp(below, [elt], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                y = scf.YieldOp([part])
            _move_body(t_ops[:-1], y)
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp([neutral.result])
            return [branch.results[0]]
        # An elementwise loop: iteration `local * T + t` of its space, if in range.
        space = _static_space(m.loop)
        count = _trip_count(space)
        linear = arith.addi(arith.muli(locals_[k], c_threads), t)
        inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, linear, index_const(count)))
        with ir.InsertionPoint(inside.then_block):
            ivs: list[ir.Value] = [None] * len(space)  # type: ignore[list-item]
            rest = linear
            for d in reversed(range(len(space))):
                lo, hi, s = space[d]
                extent = max(0, -(-(hi - lo) // s))
                digit = rest if d == 0 else arith.remui(rest, index_const(extent))
                if d:
                    rest = arith.divui(rest, index_const(extent))
                iv = arith.muli(digit, index_const(s)) if s != 1 else digit
                ivs[d] = arith.addi(iv, index_const(lo)) if lo else iv
            y = scf.YieldOp([])
        old = m.loop.regions[0].blocks[0]
        for a, v in zip(old.arguments, ivs):
            a.replace_all_uses_with(v)
        _move_body(ops_of(old)[:-1], y.operation)
        return [neutral.result]

    with ir.InsertionPoint(tbody), loc:
        parts = _if_chain(ends, [elt], thread_branch)
        red = scf.ReduceOp(parts, 1)
        rb = ir.Block.create_at_start(red.regions[0], [elt, elt])
        with ir.InsertionPoint(rb):
            comb = ir.Operation.create(reducers[0].key[0], results=[elt],
                                       operands=list(rb.arguments))
            scf.ReduceReturnOp(comb.result)
    reduced = fused_threads.results[0]

    # After the all-reduce: each reduction's own code, in its block range.
    for k, m in enumerate(group):
        if not m.reduces:
            continue
        m.threads.results[0].replace_all_uses_with(reduced)
        old = m.loop.regions[0].blocks[0]
        ops = ops_of(old)
        after = ops[ops.index(m.threads) + 1:-1]
        with ir.InsertionPoint(term), loc:
            lo, hi = offsets[k], offsets[k] + m.blocks
            inside = arith.cmpi(arith.CmpIPredicate.ult, b, index_const(hi))
            if lo:
                inside = arith.andi(
                    arith.cmpi(arith.CmpIPredicate.uge, b, index_const(lo)), inside)
            branch = scf.IfOp(inside)
            with ir.InsertionPoint(branch.then_block):
                y = scf.YieldOp([])
        _move_body(lates[k] + after, y.operation)
    for m in group:
        m.loop.erase()


# -- a reduction recomputes its elementwise producer ------------------------------


def _root(v: ir.Value) -> ir.Value:
    return _fusion_root(v)


def _slices(p: ir.Operation) -> dict:
    """Buffer -> (store, ops) for each buffer loop `p` writes whole, element by
    element at its own indices, with a value computed in straight-line code from
    loads of buffers `p` does not write: `ops` that code, in order."""
    space = _static_space(p)
    if space is None or any(lo != 0 or st != 1 for lo, _, st in space):
        return {}
    body = p.regions[0].blocks[0]
    ivs = list(body.arguments)
    ops = ops_of(body)[:-1]
    writes = {_root(o.operands[1]) for o in walk_ops(p) if o.name == "memref.store"}
    out = {}
    for store in ops:
        if store.name != "memref.store":
            continue
        buf = store.operands[1]
        t = buf.type
        if _root(buf) != buf or list(store.operands[2:]) != ivs or \
                list(ir.MemRefType(t).shape) != [hi for _, hi, _ in space]:
            continue
        if sum(1 for o in walk_ops(p) if o.name == "memref.store"
               and _root(o.operands[1]) == buf) != 1:
            continue
        needed: list[ir.Operation] = []
        stack = [store.operands[0]]
        ok = True
        while stack and ok:
            v = stack.pop()
            owner = v.owner
            if isinstance(owner, ir.Block):
                ok = owner != body or v in ivs
                continue
            o = owner.operation
            if o.block != body or o in needed:
                continue
            if o.regions or not (_pure(o) or (o.name == "memref.load"
                                             and _root(o.operands[0]) not in writes)):
                ok = False
                break
            needed.append(o)
            stack.extend(o.operands)
        if ok:
            out[buf] = (store, sorted(needed, key=ops.index))
    return out


def _recompute(r: _Member, p: _Member, between: list[_Member]) -> bool:
    """Replace `r`'s reads of what `p` writes by `p`'s computation at the read's
    indices, where legal; whether any read was replaced."""
    changed = False
    for buf, (store, needed) in _slices(p.loop).items():
        inputs = {_root(o.operands[0]) for o in needed if o.name == "memref.load"}
        if any(m.writes & (inputs | {buf}) for m in between) or buf in r.writes:
            continue
        loads = [o for o in walk_ops(r.threads)[1:]
                 if o.name == "memref.load" and o.operands[0] == buf]
        if not loads or inputs & r.writes:
            continue
        ivs = list(p.loop.regions[0].blocks[0].arguments)
        for load in loads:
            vmap = dict(zip(ivs, load.operands[1:]))
            with ir.InsertionPoint(load), load.location:
                for o in needed:
                    clone = o.clone(ip=ir.InsertionPoint(load))
                    for i, v in enumerate(list(clone.operands)):
                        if v in vmap:
                            clone.operands[i] = vmap[v]
                    for a, b in zip(o.results, clone.results):
                        vmap[a] = b
            value = store.operands[0]
            load.results[0].replace_all_uses_with(vmap.get(value, value))
            load.erase()
            changed = True
    return changed


def _recompute_producers(window: list[_Member]) -> None:
    """Each block reduction of `window` that reads what an earlier elementwise loop
    of the window wrote (a bias gradient's column sums of the activation
    gradient) recomputes it instead, so that the two no longer depend on each
    other and share a grid."""
    for k, r in enumerate(window):
        if not r.reduces:
            continue
        for j in range(k - 1, -1, -1):
            p = window[j]
            if p.reduces or p.solo or not _conflict(p, r):
                continue
            if _recompute(r, p, window[j + 1:k]):
                acc = _accesses(r.loop)
                if acc is not None:
                    r.reads, r.writes = acc


def _fuse_window(window: list[_Member]) -> bool:
    _recompute_producers(window)
    groups = _schedule(window)
    if all(len(g) < 2 for g in groups):
        return False
    block = window[0].loop.block
    ops = ops_of(block)
    last = max(ops.index(m.loop) for m in window)
    first = min(ops.index(m.loop) for m in window)
    anchor = ops[last + 1]
    deallocs = [o for o in ops[first:last] if o.name == "memref.dealloc"]
    for group in groups:
        for m in group:
            m.loop.move_before(anchor)
        if len(group) < 2:
            continue
        if any(m.reduces for m in group):
            _fuse_group(group, anchor)
        else:
            _fuse_chain([m.loop for m in group])
    for d in deallocs:
        d.move_before(anchor)
    return True


@dataclasses.dataclass(frozen=True)
class FuseBlockReductions(_Step):
    """Independent block reductions and parallel loops next to each other share one
    grid of blocks (see the module doc)."""

    name = "autodiff-gpu-fuse-block-reductions"
    summary = "Fuse independent block reductions and parallel loops into one block grid"

    def apply(self, module: ir.Operation) -> None:
        for block in host_blocks(module):
            for window in _windows(block):
                _fuse_window(window)
