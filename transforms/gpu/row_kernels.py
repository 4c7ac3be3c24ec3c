"""Row kernels: dependent loops over the same rows run as phases of one kernel.

`convert-parallel-loops-to-gpu` maps one thread loop per block loop, with at most
one reduced value: a row's maximum, then the sum of its shifted exponentials,
then its normalisation (softmax), or an activation gradient and then its column
sums, need a kernel each, although every block only reads what the same block
wrote before. `RowKernels` merges such a run of loops into one block loop whose
body runs them one after another, each as a thread loop (a phase):

    scf.parallel (%g) = (0) to (groups) {autodiff.gpu.phases = T} {
      scf.parallel (%t) = (0) to (T) {                  // an elementwise loop:
        scf.for %k = %t to (rows per group * row extent) step T { body at (row, k) }
      }
      %r = scf.parallel (%t) = (0) to (T) init (%neutral) {   // a block reduction
        ...; scf.reduce(%part) { combiner }
      }
      code of the reduction after it (the row's store), phases using %r ...
    }

Which loops: a run of host loops (block reductions as `BlockReductions` makes them,
with one row per block, and parallel loops without nested parallel loops)
separated only by memory-effect-free ops, allocations and deallocations, such that
either
- (row groups) they share a row extent R: a dimension of each parallel loop (0 to
  R, step 1) and the block loop of each reduction (R blocks), and every buffer one
  of them writes and another touches is accessed, by all of them, only with the
  loop's row index at one fixed position of the buffer (row `r` of a softmax, column
  `j` of an activation gradient and its column sums): block `g` then runs the rows
  of its group in every phase, and touches no other block's rows; or
- (one block) each is small (at most `ONE_BLOCK` iterations, or a one-block
  reduction): one block of threads runs them all (a scalar loss's tail, the
  cross-entropy's mean beside its gradient rows).
Merging is not always a gain: a loop merged into a row kernel no longer shares a
grid with its independent neighbours (`FuseBlockReductions`, which runs next and
orders its levels around row kernels). So each run of loops takes the merges
that give the fewest kernels by an estimate of both passes' result (`_launches`),
searched one loop's choice at a time (`_window_plans`). A merge is not a choice
when its threads would run more than `PHASE_WORK` iterations each, nor when it
starves the chip (fusion.py's `starves`: fewer than `MIN_BLOCKS` blocks of threads
running more than `LONG_WORK` iterations, where its loops apart had more blocks;
the GMM's Cholesky factors were 20 blocks of ~790 steps per thread, now a kernel
of 79-150 blocks of ~190 steps and one of 4 blocks of ~120).
The rows of a group (one with a block reduction, else as many as fill `T` threads)
run in order within each phase, so on the CPU (where the `parallel` stage runs,
every loop sequential) the program computes what it did before.

`PhasedKernels` (kernel stage, before the upstream mapping) turns each such block
loop into a `gpu.launch` of T threads per block: a thread phase runs its body
with `threadIdx.x` as the thread index (masked above its thread count), a
reducing phase yields its partial to a `gpu.all_reduce` (warp shuffles, shared
memory), whose result every thread holds; the code between phases runs on every
thread, except its writes, which thread 0 makes; barriers separate the phases and
those writes, so that each phase sees what the block wrote before it (global
memory, ordered by `bar.sync` within a block).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from mlir import ir
from mlir.dialects import arith, gpu, scf

from ...dialects.vocabulary import GPU_PHASES
from ..ad_support import walk_ops
from ..bufferize import ContextPass as _Step
from .fusion import (
    ASSUMED_BLOCK,
    _accesses,
    _candidate,
    _root,
    _sequential_work,
    _static_space,
    _trip_count,
    apart_blocks,
    loop_work,
    starves,
)
from .parallel_loops import _pure
from .reduction_fusion import (
    _map_member,
    _Member,
    _reduction_member,
    _schedule,
    _thread_count,
)
from .support import host_blocks, index_const, new_parallel, on_host, ops_of

#: Most iterations of a loop (elementwise, or per-thread sequential, nested loops
#: counted) that a single block runs in a one-block row kernel.
ONE_BLOCK = 4096
#: Fewest threads of a row kernel (one warp).
MIN_THREADS = 32
#: Most sequential iterations (nested loops counted) each thread of a row kernel runs
#: over all its phases: a merge beyond it gives each of few threads a contraction's
#: whole rows (a transformer block's projections in 16 blocks ran 10x slower on an
#: H200 than as kernels of their own).
PHASE_WORK = 1024
#: Block size the merge search assumes for `PHASE_WORK` (the pass's default).
_ASSUMED_BLOCK = ASSUMED_BLOCK
#: The search for a run's merges starts from this many of the uniform choices with
#: the fewest kernels, and as many with the most merges.
STARTS = 2


@dataclasses.dataclass
class _Unit:
    loop: ir.Operation
    reads: set
    writes: set
    space: list  # parallel loop: [(lo, hi, step)]; reduction: [(0, blocks, 1)]
    member: object = None  # as FuseBlockReductions sees it
    threads: ir.Operation | None = None  # a block reduction's reducing thread loop

    @property
    def reduces(self) -> bool:
        return self.threads is not None

    def row_dims(self, rows: int) -> list[int]:
        if self.reduces:
            return [0] if self.space[0][1] == rows else []
        return [d for d, s in enumerate(self.space) if s == (0, rows, 1)]

    def row_iv(self, dim: int) -> ir.Value:
        return self.loop.regions[0].blocks[0].arguments[dim]


def _block_level_ok(ops: list[ir.Operation]) -> bool:
    """Whether ops at a reduction's block level can run on every thread (pure ops,
    loads) or on thread 0 (result-less writes without nested loops of threads)."""
    for o in ops:
        if o.name == "scf.parallel" or _pure(o) or o.name == "memref.load":
            continue
        if o.results or any(i.name == "scf.parallel" for i in walk_ops(o)):
            return False
    return True


def _unit(op: ir.Operation) -> _Unit | None:
    member = _reduction_member(op)
    if member is not None:
        ops = ops_of(op.regions[0].blocks[0])
        if not _block_level_ok(ops[:-1]):
            return None
        return _Unit(op, member.reads, member.writes, _static_space(op), member,
                     member.threads)
    if not _candidate(op):
        return None
    acc = _accesses(op)
    if acc is None:
        return None
    space = _static_space(op)
    if any(st != 1 or lo != 0 for lo, _, st in space):
        return None
    return _Unit(op, acc[0], acc[1], space, _map_member(op))


def _shared(chain: list[_Unit]) -> set:
    out: set = set()
    for a, b in itertools.combinations(chain, 2):
        out |= (a.writes & (b.reads | b.writes)) | (b.writes & a.reads)
    return out


def _row_positions(unit: _Unit, dim: int, buf: ir.Value) -> set | None:
    """Positions of `buf` that every access of `unit` indexes with the row index (all
    positions if `unit` does not touch it); None if some access is not a plain load
    or store of `buf` itself."""
    iv = unit.row_iv(dim)
    found: set | None = None
    for o in walk_ops(unit.loop)[1:]:
        if not any(isinstance(v.type, ir.MemRefType) and _root(v) == buf for v in o.operands):
            continue
        if o.name not in ("memref.load", "memref.store"):
            return None
        view = o.opview
        if view.memref != buf:
            return None
        here = {p for p, v in enumerate(view.indices) if v == iv}
        found = here if found is None else found & here
    return set(range(ir.MemRefType(buf.type).rank)) if found is None else found


def _rows_legal(chain: list[_Unit], dims: list[int]) -> bool:
    for buf in _shared(chain):
        if not isinstance(buf.type, ir.MemRefType):
            return False
        common = set(range(ir.MemRefType(buf.type).rank))
        for unit, dim in zip(chain, dims):
            pos = _row_positions(unit, dim, buf)
            if pos is None:
                return False
            common &= pos
        if not common:
            return False
    return True


def _row_dims(chain: list[_Unit], rows: int) -> list[int] | None:
    """A row dimension of each unit under which `chain` is legal as a row kernel."""
    options = [u.row_dims(rows) for u in chain]
    if any(not o for o in options):
        return None
    for dims in itertools.islice(itertools.product(*options), 64):
        if _rows_legal(chain, list(dims)):
            return list(dims)
    return None


def _small(unit: _Unit) -> bool:
    if unit.reduces:
        return unit.space[0][1] == 1
    return loop_work(unit.loop) <= ONE_BLOCK  # nested loops (a reduction) counted


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclasses.dataclass
class _Plan:
    chain: list[_Unit]
    rows: int | None  # None: one block runs everything
    dims: list[int]
    anchor: _Unit | None = None  # the member whose place the row kernel takes


def _thread_work(plan: _Plan) -> int:
    """Sequential iterations one thread of `plan`'s kernel runs, over all phases."""
    threads, per_block = _threads(plan, _ASSUMED_BLOCK)
    total = 0
    for u in plan.chain:
        if u.reduces:
            total += _sequential_work(u.threads.regions[0].blocks[0])
            continue
        iters = _trip_count(u.space)
        if plan.rows is not None:
            iters = iters // plan.rows * per_block
        total += -(-iters // threads) * _sequential_work(u.loop.regions[0].blocks[0])
    return total


def _blocks(plan: _Plan) -> int:
    """Blocks of `plan`'s kernel."""
    if plan.rows is None:
        return 1
    _, per_block = _threads(plan, _ASSUMED_BLOCK)
    return -(-plan.rows // per_block)


def _unit_blocks(unit: _Unit) -> int:
    """Blocks of `unit`'s own kernel (a block reduction's blocks, or a thread per
    iteration of a parallel loop; for a row fusion, of the loops it was made of)."""
    return unit.space[0][1] if unit.reduces else apart_blocks(unit.loop)


def _try(chain: list[_Unit], mode: _Plan | None) -> _Plan | None:
    """`chain` as a row kernel of `mode`'s kind (or any kind, if None), unless its
    threads would each run more than `PHASE_WORK` iterations, or the kernel would
    starve the chip (fusion.py's `starves`: few blocks of long threads, where the
    loops apart had more blocks)."""
    plan = _try_kind(chain, mode)
    if plan is None or len(chain) == 1:
        return plan
    work = _thread_work(plan)
    if work > PHASE_WORK or starves(_blocks(plan), work,
                                    max(_unit_blocks(u) for u in chain)):
        return None
    return plan


def _try_kind(chain: list[_Unit], mode: _Plan | None) -> _Plan | None:
    if mode is None or mode.rows is not None:
        candidates = [mode.rows] if mode is not None else sorted(
            {s[1] for s in chain[0].space if s[0] == 0 and s[2] == 1 and s[1] > 1})
        for rows in candidates:
            dims = _row_dims(chain, rows)
            if dims is not None:
                return _Plan(chain, rows, dims)
        if mode is not None:
            return None
    if all(_small(u) for u in chain):
        return _Plan(chain, None, [])
    return None


def _separator(op: ir.Operation) -> bool:
    return op.name == "memref.dealloc" or (
        not op.regions and (op.name.startswith(("arith.", "index.", "ub."))
                            or op.name in ("memref.alloc", "affine.apply")))


def _conflict(a: tuple[set, set], b: tuple[set, set]) -> bool:
    return bool(a[1] & (b[0] | b[1]) or b[1] & a[0])


@dataclasses.dataclass
class _Item:
    units: list[_Unit]
    plan: _Plan | None
    reads: set
    writes: set

    @property
    def anchor(self) -> _Unit:
        return self.units[0] if self.plan is None else self.plan.anchor


#: How a unit joins the row kernels before it: (joins, one_block, up). `joins`: 2,
#: it merges all the kernels it depends on; 1, the latest; 0, only its single one
#: (a unit that depends on several starts its own); 3, it joins the latest
#: one-block row kernel it does not depend on (a small independent loop: one more
#: phase of a kernel that runs anyway). `one_block`: one-block row
#: kernels allowed. `up`: the unit moves up to the kernel (else the kernel moves
#: down to the unit), past loops independent of what moves. None: it starts its own.
_Choice = tuple[int, bool, bool] | None
_CHOICES: list[_Choice] = [None] + [(j, ob, up) for ob in (False, True) for j in (2, 1, 0)
                                    for up in (False, True)] + [(3, True, False), (3, True, True)]


def _window_items(units: list[_Unit], choices: list[_Choice], memo: dict) -> list[_Item]:
    """Row kernels of a run of units, in their final order, each unit joining the
    row kernels before it as `choices` says (when legal)."""
    items: list[_Item] = []
    for u, choice in zip(units, choices):
        acc = (u.reads, u.writes)
        deps = [k for k, item in enumerate(items)
                if _conflict((item.reads, item.writes), acc)]
        plan = None
        chosen = []
        if choice is not None and choice[0] == 3:
            # An independent small loop joins the latest one-block row kernel.
            small = [k for k, item in enumerate(items)
                     if item.plan is not None and item.plan.rows is None and k not in deps]
            if small and (not choice[2] or all(k < small[-1] for k in deps)):
                chosen = small[-1:]
        elif choice is not None and deps and (choice[0] or len(deps) == 1):
            chosen = deps if choice[0] == 2 else deps[-1:]
        if chosen:
            joins, one_block, up = choice
            if up:  # everything chosen after the first, and u, moves up to it
                movers = [(items[k].reads, items[k].writes) for k in chosen[1:]] + [acc]
            else:  # everything chosen moves down to u
                movers = [(items[k].reads, items[k].writes) for k in chosen]
            passed = [(x.reads, x.writes) for k, x in enumerate(items)
                      if k > chosen[0] and k not in chosen]
            if not any(_conflict(m, x) for m in movers for x in passed):
                merged = [v for k in chosen for v in items[k].units] + [u]
                mode = items[chosen[0]].plan if len(chosen) == 1 else None
                key = (tuple(id(v) for v in merged),
                       None if mode is None else (mode.rows,))
                if key not in memo:
                    memo[key] = _try(merged, mode)
                plan = memo[key]
                if plan is not None and plan.rows is None and not one_block:
                    plan = None
        if plan is not None:
            plan = dataclasses.replace(plan, anchor=items[chosen[0]].anchor if up else u)
            reads, writes = set(u.reads), set(u.writes)
            for k in chosen:
                reads |= items[k].reads
                writes |= items[k].writes
            item = _Item(plan.chain, plan, reads, writes)
            rest = [x for k, x in enumerate(items) if k not in chosen]
            if up:
                items = rest[:chosen[0]] + [item] + rest[chosen[0]:]
            else:
                items = rest + [item]
        else:
            items.append(_Item([u], None, set(u.reads), set(u.writes)))
    return items


def _launches(items: list[_Item]) -> int:
    """Kernels `items` become: each row kernel one, the other loops the grids
    `FuseBlockReductions` makes of them (its dependency levels)."""
    members = []
    for item in items:
        if item.plan is None:
            members.append(item.units[0].member)
        else:
            members.append(_Member(None, item.reads, item.writes, 0, solo=True))
    if any(m.reduces for m in members) and len(members) > 1:
        return len(_schedule(members))
    return len(members)


def _window_plans(units: list[_Unit]) -> list[_Plan]:
    """The row kernels of a run of units that give the fewest kernels, as `_launches`
    estimates them (then the most loops merged): starting from a few choices that
    every unit makes alike, improved one unit's choice at a time."""
    memo: dict = {}

    def cost(choices: list[_Choice]) -> tuple[int, int]:
        items = _window_items(units, choices, memo)
        merged = sum(len(i.units) - 1 for i in items if i.plan is not None)
        return _launches(items), -merged

    def descend(choices: list[_Choice]) -> tuple[tuple[int, int], list[_Choice]]:
        best, best_cost = choices, cost(choices)
        improved = True
        while improved:
            improved = False
            for k in range(len(units)):
                for c in _CHOICES:
                    if c == best[k]:
                        continue
                    trial = best[:k] + [c] + best[k + 1:]
                    trial_cost = cost(trial)
                    if trial_cost < best_cost:
                        best, best_cost, improved = trial, trial_cost, True
        return best_cost, best

    # From the best uniform choices, and those that merge most: a merge that pays
    # only with another (the softmax rows taking the mean's sum, then the gradient
    # rows) is found from a start that makes both.
    uniform = [[c] * len(units) for c in _CHOICES]
    by_cost = sorted(uniform, key=cost)
    by_merges = sorted(uniform, key=lambda ch: (cost(ch)[1], cost(ch)[0]))
    starts = by_cost[:STARTS] + [ch for ch in by_merges[:STARTS] if ch not in by_cost[:STARTS]]
    best = min((descend(c) for c in starts), key=lambda r: r[0])[1]
    return [i.plan for i in _window_items(units, best, memo) if i.plan is not None]


def _plans(block: ir.Block) -> list[_Plan]:
    out: list[_Plan] = []
    units: list[_Unit] = []
    for op in ops_of(block):
        unit = _unit(op)
        if unit is not None:
            units.append(unit)
        elif not _separator(op):
            out += _window_plans(units)
            units = []
    out += _window_plans(units)
    return out


def _threads(plan: _Plan, block_size: int) -> tuple[int, int]:
    """(threads per block, rows per block) of `plan`."""
    counts = [_thread_count(u.threads) for u in plan.chain if u.reduces]
    if plan.rows is None:
        work = max((_trip_count(u.space) for u in plan.chain if not u.reduces), default=1)
        return max([MIN_THREADS, min(block_size, _pow2(work))] + counts), 1
    if counts:
        return max(counts), 1
    inner = _pow2(max(_trip_count(u.space) // plan.rows for u in plan.chain))
    threads = max(MIN_THREADS, min(block_size, inner * plan.rows))
    return threads, max(1, threads // inner)


def _delinearize(linear: ir.Value, extents: list[int]) -> list[ir.Value]:
    out: list[ir.Value] = []
    for k in reversed(range(len(extents))):
        if k == 0:
            out.append(linear)
            break
        out.append(arith.remui(linear, index_const(extents[k])))
        linear = arith.divui(linear, index_const(extents[k]))
    return list(reversed(out))


def _elementwise_phase(unit: _Unit, dim: int | None, group: ir.Value, threads: int,
                       per_block: int, rows: int | None, term: ir.Operation) -> None:
    """`unit` (a parallel loop) as a thread loop before `term`: block `group` runs
    its `per_block` rows (all of it without a row dimension `dim`)."""
    space = unit.space
    others = [d for d in range(len(space)) if d != dim]
    inner = math.prod(space[d][1] for d in others)
    total = inner * (per_block if dim is not None else 1)
    with ir.InsertionPoint(term), unit.loop.location:
        _, tbody, tterm = new_parallel([index_const(0)], [index_const(threads)],
                                       [index_const(1)])
        with ir.InsertionPoint(tterm):
            loop = scf.ForOp(tbody.arguments[0], index_const(total), index_const(threads))
            with ir.InsertionPoint(loop.body):
                target = scf.YieldOp([]).operation
            with ir.InsertionPoint(target):
                k = loop.induction_variable
                ivs: list = [None] * len(space)
                if dim is not None:
                    if per_block == 1:
                        row, rest = group, k
                    else:
                        c_inner = index_const(inner)
                        row = arith.addi(arith.muli(group, index_const(per_block)),
                                         arith.divui(k, c_inner))
                        rest = arith.remui(k, c_inner)
                        if rows % per_block:
                            guard = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, row,
                                                        index_const(rows)))
                            with ir.InsertionPoint(guard.then_block):
                                target = scf.YieldOp([]).operation
                    ivs[dim] = row
                else:
                    rest = k
                if others:
                    with ir.InsertionPoint(target):
                        for d, v in zip(others, _delinearize(rest, [space[d][1]
                                                                    for d in others])):
                            ivs[d] = v
    old = unit.loop.regions[0].blocks[0]
    for a, v in zip(old.arguments, ivs):
        a.replace_all_uses_with(v)
    for o in ops_of(old)[:-1]:
        o.move_before(target)


def _build(plan: _Plan, block_size: int) -> None:
    threads, per_block = _threads(plan, block_size)
    chain = plan.chain
    block = chain[0].loop.block
    ops = ops_of(block)
    loops = [u.loop for u in chain]
    first = min(ops.index(o) for o in loops)
    last = max(ops.index(o) for o in loops)
    anchor = plan.anchor.loop
    at = ops.index(anchor)
    # Members before the anchor move down to it, past deallocations (which move
    # after the row kernel); members after it move up, and so do the allocations,
    # constants and index math they may use (no memory effects).
    deallocs = [o for o in ops[first:at] if o.name == "memref.dealloc"]
    for o in ops[at + 1:last]:
        if o not in loops and o.name not in ("memref.dealloc", "scf.parallel"):
            o.move_before(anchor)
    groups = 1 if plan.rows is None else -(-plan.rows // per_block)
    with ir.InsertionPoint(anchor), anchor.location:
        loop, body, term = new_parallel([index_const(0)], [index_const(groups)],
                                        [index_const(1)])
        loop.attributes[GPU_PHASES] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                         threads)
        zero = index_const(0)
    group = body.arguments[0]
    for k, unit in enumerate(chain):
        dim = plan.dims[k] if plan.rows is not None else None
        if unit.reduces:
            old = unit.loop.regions[0].blocks[0]
            old.arguments[0].replace_all_uses_with(group if dim is not None else zero)
            for o in ops_of(old)[:-1]:
                o.move_before(term)
        else:
            _elementwise_phase(unit, dim, group, threads, per_block, plan.rows, term)
        unit.loop.erase()
    for d in reversed(deallocs):
        d.move_after(loop)


@dataclasses.dataclass(frozen=True)
class RowKernels(_Step):
    """Runs of dependent loops over the same rows (or small enough for one block)
    become one block loop of thread phases (see the module doc)."""

    name = "autodiff-gpu-row-kernels"
    summary = "Merge dependent loops over the same rows into one block loop of phases"

    block_size: int = 256

    def apply(self, module: ir.Operation) -> None:
        if self.block_size < MIN_THREADS:
            return
        for block in host_blocks(module):
            for plan in _plans(block):
                _build(plan, self.block_size)


# -- kernel stage: the block loop becomes a gpu.launch ---------------------------


def _launch(loop: ir.Operation) -> None:
    threads = ir.IntegerAttr(loop.attributes[GPU_PHASES]).value
    groups = _static_space(loop)[0][1]
    with ir.InsertionPoint(loop), loop.location:
        one = index_const(1)
        launch = gpu.LaunchOp((index_const(groups), one, one),
                              (index_const(threads), one, one))
        launch.operation.attributes[GPU_PHASES] = loop.attributes[GPU_PHASES]
        if len(launch.regions[0].blocks) == 0:
            ir.Block.create_at_start(launch.regions[0], [ir.IndexType.get()] * 12)
        body = launch.regions[0].blocks[0]
        with ir.InsertionPoint(body):
            term = gpu.TerminatorOp().operation
    old = loop.regions[0].blocks[0]
    old.arguments[0].replace_all_uses_with(body.arguments[0])
    for o in ops_of(old)[:-1]:
        o.move_before(term)
    loop.erase()
    tid = body.arguments[3]
    with ir.InsertionPoint.at_block_begin(body), launch.location:
        zero = index_const(0)
        first_thread = arith.cmpi(arith.CmpIPredicate.eq, tid, zero)

    def barrier(before: ir.Operation) -> None:
        ops = ops_of(before.block)
        k = ops.index(before)
        if k > 0 and ops[k - 1].name == "gpu.barrier":
            return
        with ir.InsertionPoint(before), launch.location:
            gpu.BarrierOp()

    touched = False  # whether memory was accessed since the kernel began
    ops = ops_of(body)
    for k, o in enumerate(ops[:-1]):
        if o.name == "scf.parallel":
            if touched:
                barrier(o)
            if not o.results and ops[k + 1] != ops[-1]:
                # What the phase wrote is read after a barrier.
                with ir.InsertionPoint.after(o), launch.location:
                    gpu.BarrierOp()
            _thread_phase(o, tid)
            touched = True
        elif _pure(o):
            continue
        elif o.name == "memref.load":
            touched = True
        else:  # a write: thread 0 makes it, between barriers
            barrier(o)
            with ir.InsertionPoint(o), launch.location:
                guard = scf.IfOp(first_thread)
                with ir.InsertionPoint(guard.then_block):
                    y = scf.YieldOp([])
            o.move_before(y)
            with ir.InsertionPoint.after(guard), launch.location:
                gpu.BarrierOp()
            touched = True
    _forward_block_writes(body, first_thread)


def _forward_block_writes(body: ir.Block, first_thread: ir.Value) -> None:
    """Loads, later in the kernel, of an element thread 0 wrote between phases take the
    written value instead: every thread holds it (the code between phases runs on all
    threads; what it computes is the same on each), so a phase over a row no longer
    reads the row's maximum or sum from memory at every element. Up to the next other
    access to that buffer that is not such a load."""
    ops = ops_of(body)
    for k, guard in enumerate(ops):
        if guard.name != "scf.if" or guard.operands[0] != first_thread:
            continue  # only the writes made for the block, by thread 0
        inner = ops_of(guard.regions[0].blocks[0])
        if len(inner) != 2 or inner[0].name != "memref.store":
            continue
        store = inner[0]
        value, ref, idx = store.operands[0], store.operands[1], list(store.operands[2:])
        if not _defined_in(value, body):
            continue
        for later in ops[k + 1:]:
            stop = False
            for o in walk_ops(later):
                if not any(v == ref for v in o.operands):
                    continue
                if o.name == "memref.load" and list(o.operands[1:]) == idx:
                    o.results[0].replace_all_uses_with(value)
                    o.erase()
                else:
                    stop = True
                    break
            if stop:
                break


def _defined_in(value: ir.Value, block: ir.Block) -> bool:
    """Whether `value` is an op result directly in `block` (so it dominates what follows)."""
    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.operation.block == block


def _thread_phase(loop: ir.Operation, tid: ir.Value) -> None:
    """Thread loop `loop` (directly in a launch body) run by thread `tid`: inlined,
    masked above its count; a reduction's partial goes to a gpu.all_reduce."""
    count = _static_space(loop)[0][1]
    body = loop.regions[0].blocks[0]
    body.arguments[0].replace_all_uses_with(tid)
    reduce_op = ops_of(body)[-1]
    loc = loop.location
    reduces = len(loop.results) == 1
    elt = loop.results[0].type if reduces else None
    with ir.InsertionPoint(loop), loc:
        below = arith.cmpi(arith.CmpIPredicate.ult, tid, index_const(count))
        if reduces:
            init = loop.operands[len(loop.operands) - 1]
            branch = scf.IfOp(below, [elt], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                y = scf.YieldOp([reduce_op.operands[0]])
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp([init])
        else:
            branch = scf.IfOp(below)
            with ir.InsertionPoint(branch.then_block):
                y = scf.YieldOp([])
    for o in ops_of(body)[:-1]:
        o.move_before(y)
    if reduces:
        comb_name = ops_of(reduce_op.regions[0].blocks[0])[0].name
        with ir.InsertionPoint(loop), loc:
            red = gpu.AllReduceOp(branch.results[0], uniform=True)
            rb = ir.Block.create_at_start(red.regions[0], [elt, elt])
            with ir.InsertionPoint(rb):
                comb = ir.Operation.create(comb_name, results=[elt], operands=list(rb.arguments))
                gpu.YieldOp([comb.result])
            total = ir.Operation.create(comb_name, results=[elt],
                                        operands=[init, red.result]).result
        loop.results[0].replace_all_uses_with(total)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class PhasedKernels(_Step):
    """The block loops `RowKernels` made become `gpu.launch`es (see the module doc)."""

    name = "autodiff-gpu-phased-kernels"
    summary = "Lower row kernels' block loops of thread phases to gpu.launch"

    def apply(self, module: ir.Operation) -> None:
        for op in [o for o in walk_ops(module)
                   if o.name == "scf.parallel" and GPU_PHASES in o.attributes and on_host(o)]:
            _launch(op)
