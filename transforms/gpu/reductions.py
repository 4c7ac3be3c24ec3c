"""Long reductions as block-parallel loops: every thread of a block takes part.

`convert-linalg-to-parallel-loops` gives each output element of a reduction
to one thread, which loops over the whole reduced extent on its own: fine
for a matmul's many outputs, slow for a row softmax's 1024-long rows and
serial for a sum to a scalar (one thread of one block walks the array).

`BlockReductions` rewrites such a `linalg.generic` (on buffers, before the
conversion to loops) into a grid of blocks, each reducing one output
element (one row) with `T` threads:

    scf.parallel (%b) = (0) to (rows * splits) {          // blocks
      scf.execute_region no_inline {
        %init = memref.load %out[row(%b)]
        %r = scf.parallel (%t) = (0) to (T) init (%neutral) {   // threads
          %part = scf.for %k = first(%b, %t) to last(%b) step T
              iter_args(%acc = %neutral) { the generic's body }
          scf.reduce(%part) { combiner }
        }
        memref.store combiner(%init, %r), %out[row(%b)]
      }
    }

`convert-parallel-loops-to-gpu` maps the thread loop's `scf.reduce` to
`gpu.all_reduce`, which `convert-gpu-to-nvvm` lowers to warp shuffles
(`shfl.sync`) and a shared-memory exchange across warps with barriers.
`SingleThreadTails` then puts the code after the all-reduce (the store, a
scalar tail) under `thread 0 only`; the barriers order every thread's read
of `%out` before that write. A long reduction with few outputs (a sum over
a whole array) is split: `splits` blocks per output each reduce a
contiguous chunk into a partial, and a second loop of the same form
combines the partials in a fixed order: deterministic, no atomics. The fill
or copy that initialises the output folds into `%init` (no read of `%out`,
no kernel of its own), and for a scalar result the one-element elementwise
ops and fills that follow (a loss's `nll + wd * decay`) join the kernel's
tail instead of running as one-thread kernels.

The whole rewrite sits in an `scf.execute_region no_inline` ("grid"), so
`scf-parallel-loop-fusion` fuses no other loop into its block loops (whose
body every thread of a block runs). Each row's work sits in another ("row"):
it stays together when canonicalization removes a one-iteration block loop
(a scalar result). `InlineBlockReductions` inlines both, just before the
loops are tiled, giving the row back its one-iteration block loop (a
one-block kernel, all its threads reducing). The program still runs on the
CPU (`convert-scf-to-cf` lowers parallel loops with reductions
sequentially).

Which reductions: a `linalg.generic` with one output whose body yields
`acc <op> f(inputs)` for an associative and commutative `<op>` (add, mul,
min, max, and, or, xor), the accumulator used once, static loop bounds, an
f32/f64/i32/i64 element type, at least `MIN_EXTENT` reduced elements and at
most `MAX_ROWS` outputs (many short reductions, matmuls, stay one thread per
output). The result is reassociated (as numpy's pairwise summation and any
GPU library's reductions are).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from mlir import ir
from mlir.dialects import affine as affine_d
from mlir.dialects import arith, memref, scf

from ...dialects.vocabulary import GPU_BLOCK_REDUCTION, GPU_PHASES
from ..ad_support import is_inside, walk_ops
from ..bufferize import ContextPass as _Step
from .support import index_const, new_parallel, on_host, ops_of

#: Fewest reduced elements per output worth a block of threads.
MIN_EXTENT = 64
#: Most outputs reduced a block each; above, one thread per output fills the GPU.
MAX_ROWS = 16384
#: Fewest threads per block (two warps: `gpu.all_reduce` then synchronises with
#: a barrier, which orders the reads of the output before its writes).
MIN_THREADS = 64
#: Outputs below which a long reduction is split across several blocks...
SPLIT_BELOW_ROWS = 256
#: ... each reducing a chunk of about this many elements per thread ...
ELEMENTS_PER_THREAD = 16
#: ... into at most this many partials per output.
MAX_SPLITS = 1024

_FLOAT_COMBINERS = {
    "arith.addf": -0.0, "arith.mulf": 1.0,
    "arith.maxnumf": -math.inf, "arith.maximumf": -math.inf,
    "arith.minnumf": math.inf, "arith.minimumf": math.inf,
}
_INT_COMBINERS = {
    "arith.addi", "arith.muli", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
    "arith.andi", "arith.ori", "arith.xori",
}


def _int_neutral(name: str, width: int) -> int:
    return {
        "arith.addi": 0, "arith.muli": 1, "arith.ori": 0, "arith.xori": 0, "arith.maxui": 0,
        "arith.andi": -1, "arith.minui": -1,  # all ones
        "arith.maxsi": -(1 << (width - 1)), "arith.minsi": (1 << (width - 1)) - 1,
    }[name]


def _neutral(name: str, t: ir.Type) -> ir.Value:
    if isinstance(t, ir.FloatType):
        return arith.constant(t, _FLOAT_COMBINERS[name])
    return arith.constant(t, _int_neutral(name, ir.IntegerType(t).width))


def _supported_type(t: ir.Type) -> bool:
    if isinstance(t, (ir.F32Type, ir.F64Type)):
        return True
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width in (32, 64)


def _depends_on(value: ir.Value, arg: ir.Value, body: ir.Block) -> bool:
    """Whether `value` (computed in `body`) is computed from block argument `arg`."""
    seen: set = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v == arg:
            return True
        owner = v.owner
        if isinstance(owner, ir.Block):
            continue
        op = owner.operation
        if op.block != body or op in seen:
            continue
        seen.add(op)
        stack.extend(op.operands)
    return False


@dataclasses.dataclass
class _Plan:
    generic: ir.Operation
    combiner: str
    parallel: list[int]
    reduction: list[int]
    extents: list[int]
    rows: int
    extent: int


def _loop_extents(op: ir.Operation, n: int) -> list[int] | None:
    extents: list[int | None] = [None] * n
    for operand, attr in zip(op.operands, op.attributes["indexing_maps"]):
        t = operand.type
        if not isinstance(t, ir.MemRefType):
            continue
        m = ir.AffineMapAttr(attr).value
        for pos, expr in enumerate(m.results):
            if isinstance(expr, ir.AffineDimExpr):
                d = ir.AffineDimExpr(expr).position
                size = t.shape[pos]
                if extents[d] is None and not ir.ShapedType.is_dynamic_size(size):
                    extents[d] = size
    return None if None in extents else extents  # type: ignore[return-value]


def _plan(op: ir.Operation) -> _Plan | None:
    if op.name != "linalg.generic" or not on_host(op):
        return None
    view = op.opview
    outs, ins = list(view.outputs), list(view.inputs)
    if len(outs) != 1 or len(op.results) != 0 or _base(outs[0]) in [_base(x) for x in ins]:
        return None  # other blocks would read what a block writes
    out_t = outs[0].type
    if not isinstance(out_t, ir.MemRefType) or not _supported_type(out_t.element_type):
        return None
    iters = ["reduction" in str(a) for a in op.attributes["iterator_types"]]
    reduction = [k for k, r in enumerate(iters) if r]
    parallel = [k for k, r in enumerate(iters) if not r]
    if not reduction:
        return None
    body = op.regions[0].blocks[0]
    acc = body.arguments[len(ins)]
    term = ops_of(body)[-1]
    if len(term.operands) != 1:
        return None
    comb = term.operands[0].owner
    if isinstance(comb, ir.Block):
        return None
    comb = comb.operation
    if comb.name not in _FLOAT_COMBINERS and comb.name not in _INT_COMBINERS:
        return None
    if comb.block != body or len(comb.operands) != 2 or len(list(acc.uses)) != 1:
        return None
    a, b = comb.operands
    other = b if a == acc else a if b == acc else None
    if other is None or _depends_on(other, acc, body):
        return None
    for inner in walk_ops(op)[1:]:
        if inner.regions:  # nested regions: keep it simple, leave them per thread
            return None
    n = len(iters)
    extents = _loop_extents(op, n)
    if extents is None:
        return None
    out_map = ir.AffineMapAttr(list(op.attributes["indexing_maps"])[-1]).value
    if any(not isinstance(e, ir.AffineDimExpr) or ir.AffineDimExpr(e).position in reduction
           for e in out_map.results):
        return None
    rows = math.prod(extents[k] for k in parallel)
    extent = math.prod(extents[k] for k in reduction)
    if extent < MIN_EXTENT or rows > MAX_ROWS or rows == 0:
        return None
    return _Plan(op, comb.name, parallel, reduction, extents, rows, extent)


def _threads(extent: int, block_size: int) -> int:
    want = 1 << max(0, (extent - 1).bit_length())
    return max(MIN_THREADS, min(block_size, want))


def _delinearize(linear: ir.Value, extents: Sequence[int]) -> list[ir.Value]:
    """Row-major multi-index of `linear` over `extents`."""
    out: list[ir.Value] = []
    for k in reversed(range(len(extents))):
        if k == 0:
            out.append(linear)
            break
        size = index_const(extents[k])
        out.append(arith.remui(linear, size))
        linear = arith.divui(linear, size)
    return list(reversed(out))


def _apply(m: ir.AffineMap, ivs: Sequence[ir.Value]) -> list[ir.Value]:
    out = []
    for expr in m.results:
        if isinstance(expr, ir.AffineDimExpr):
            out.append(ivs[ir.AffineDimExpr(expr).position])
        else:
            single = ir.AffineMap.get(m.n_dims, m.n_symbols, [expr])
            out.append(affine_d.apply(single, list(ivs)))
    return out


def _combine(name: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return ir.Operation.create(name, results=[a.type], operands=[a, b]).result


def _reducing_threads(threads: int, elt: ir.Type, combiner: str,
                      partial_of_thread) -> ir.Value:
    """`scf.parallel` over `threads` threads, each computing `partial_of_thread(t)`,
    reduced with `combiner`; returns the reduced value."""
    zero, one = index_const(0), index_const(1)
    neutral = _neutral(combiner, elt)
    loop = scf.ParallelOp([elt], [zero], [index_const(threads)], [one], [neutral])
    body = ir.Block.create_at_start(loop.regions[0], [ir.IndexType.get()])
    with ir.InsertionPoint(body):
        part = partial_of_thread(body.arguments[0], neutral)
        red = scf.ReduceOp([part], 1)
        region = red.regions[0]
        rb = ir.Block.create_at_start(region, [elt, elt])
        with ir.InsertionPoint(rb):
            scf.ReduceReturnOp(_combine(combiner, rb.arguments[0], rb.arguments[1]))
    return loop.results[0]


def _strided_for(start: ir.Value, stop: ir.Value, step: ir.Value, init: ir.Value,
                 body_fn) -> ir.Value:
    """`scf.for` from `start` to `stop` by `step` carrying one value."""
    loop = scf.ForOp(start, stop, step, [init])
    with ir.InsertionPoint(loop.body):
        scf.YieldOp([body_fn(loop.induction_variable, loop.inner_iter_args[0])])
    return loop.results[0]


#: The attribute marking the regions `BlockReductions` makes: "grid" (a whole
#: reduction) or "row" (one block's work).
_ATTR = GPU_BLOCK_REDUCTION
_GRID, _ROW = "grid", "row"


def _region(kind: str) -> ir.Operation:
    """An empty `scf.execute_region no_inline` marked `kind`, at the insertion point."""
    region_op = scf.ExecuteRegionOp([], no_inline=True)
    region_op.operation.attributes[_ATTR] = ir.StringAttr.get(kind)
    block = ir.Block.create_at_start(region_op.regions[0], [])
    with ir.InsertionPoint(block):
        scf.YieldOp([])
    return region_op.operation


def _row_block(outer_ip_term: ir.Operation, emit) -> None:
    """A "row" region before `outer_ip_term` holding `emit()`'s ops."""
    with ir.InsertionPoint(outer_ip_term):
        region_op = _region(_ROW)
    with ir.InsertionPoint(ops_of(region_op.regions[0].blocks[0])[-1]):
        emit()


def _rewrite(plan: _Plan, block_size: int) -> None:
    op = plan.generic
    view = op.opview
    ins, out = list(view.inputs), list(view.outputs)[0]
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    elt = ir.MemRefType(out.type).element_type
    body = op.regions[0].blocks[0]
    n = len(plan.extents)
    p_ext = [plan.extents[k] for k in plan.parallel]
    r_ext = [plan.extents[k] for k in plan.reduction]
    threads = _threads(plan.extent, block_size)
    splits = 1
    if plan.rows < SPLIT_BELOW_ROWS:
        splits = max(1, min(MAX_SPLITS, plan.extent // (threads * ELEMENTS_PER_THREAD)))
    chunk = -(-plan.extent // splits)

    def element(p_ivs: list[ir.Value], k: ir.Value, acc: ir.Value) -> ir.Value:
        """The generic's body at parallel indices `p_ivs`, linear reduction index `k`."""
        ivs: list[ir.Value] = [None] * n  # type: ignore[list-item]
        for d, v in zip(plan.parallel, p_ivs):
            ivs[d] = v
        for d, v in zip(plan.reduction, _delinearize(k, r_ext)):
            ivs[d] = v
        vmap: dict = {body.arguments[len(ins)]: acc}
        for j, x in enumerate(ins):
            if isinstance(x.type, ir.MemRefType):
                vmap[body.arguments[j]] = memref.load(x, _apply(maps[j], ivs))
            else:
                vmap[body.arguments[j]] = x
        for inner in ops_of(body)[:-1]:
            if inner.name == "linalg.index":
                vmap[inner.results[0]] = ivs[ir.IntegerAttr(inner.attributes["dim"]).value]
                continue
            clone = inner.clone(ip=ir.InsertionPoint.current)
            for i, v in enumerate(list(clone.operands)):
                if v in vmap:
                    clone.operands[i] = vmap[v]
            for r_old, r_new in zip(inner.results, clone.results):
                vmap[r_old] = r_new
        return vmap[ops_of(body)[-1].operands[0]]

    covers = math.prod(ir.MemRefType(out.type).shape) == plan.rows
    kind, source, dead = _initial_value(op, out) if covers else ("load", out, [])
    tail = _scalar_tail(op) if plan.rows == 1 else []

    def finish(p_ivs: list[ir.Value], reduced_fn) -> None:
        """Read the output's current value, reduce, store the combination."""
        idx = _apply(maps[-1], [*_scatter(plan, p_ivs, n)])
        init = source if kind == "value" else memref.load(source, idx)
        r = reduced_fn()
        memref.store(_combine(plan.combiner, init, r), out, idx)
        for g in tail:
            _scalar_generic(g)

    with ir.InsertionPoint(op), op.location:
        partials = None
        if splits > 1:
            partials = memref.alloc(ir.MemRefType.get([plan.rows * splits], elt), [], [])
        # The whole reduction in a region of its own, so that
        # scf-parallel-loop-fusion merges no other loop into its block loops
        # (all threads of a block run the block loop's body: another loop's
        # read-modify-write there would race).
        wrapper = _region(_GRID)
        with ir.InsertionPoint(ops_of(wrapper.regions[0].blocks[0])[-1]):
            zero, one = index_const(0), index_const(1)
            step = index_const(threads)
            stop_k = index_const(plan.extent)
            _, outer, term = new_parallel([zero], [index_const(plan.rows * splits)], [one])
            with ir.InsertionPoint(term):
                b = outer.arguments[0]
                if splits == 1:
                    def emit() -> None:
                        p_ivs = _delinearize(b, p_ext) if p_ext else []
                        finish(p_ivs, lambda: _reducing_threads(
                            threads, elt, plan.combiner,
                            lambda t, neutral: _strided_for(
                                t, stop_k, step, neutral,
                                lambda k, acc: element(p_ivs, k, acc))))
                else:
                    def emit() -> None:
                        c_chunk = index_const(chunk)
                        row = arith.divui(b, index_const(splits))
                        s = arith.remui(b, index_const(splits))
                        p_ivs = _delinearize(row, p_ext) if p_ext else []
                        first = arith.muli(s, c_chunk)
                        last = arith.minui(arith.addi(first, c_chunk), stop_k)
                        reduced = _reducing_threads(
                            threads, elt, plan.combiner,
                            lambda t, neutral: _strided_for(
                                arith.addi(first, t), last, step, neutral,
                                lambda k, acc: element(p_ivs, k, acc)))
                        memref.store(reduced, partials, [b])
                _row_block(term, emit)
            if splits > 1:
                threads2 = _threads(splits, block_size)
                step2 = index_const(threads2)
                _, outer2, term2 = new_parallel([zero], [index_const(plan.rows)], [one])
                with ir.InsertionPoint(term2):
                    row = outer2.arguments[0]

                    def emit2() -> None:
                        p_ivs = _delinearize(row, p_ext) if p_ext else []
                        base = arith.muli(row, index_const(splits))
                        finish(p_ivs, lambda: _reducing_threads(
                            threads2, elt, plan.combiner,
                            lambda t, neutral: _strided_for(
                                t, index_const(splits), step2, neutral,
                                lambda k, acc: _combine(
                                    plan.combiner, acc,
                                    memref.load(partials, [arith.addi(base, k)])))))
                    _row_block(term2, emit2)
    op.erase()
    for d in dead:
        d.erase()
    for g in tail:
        g.erase()


_VIEW_OPS = {
    "memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
    "memref.reinterpret_cast", "memref.view", "memref.transpose",
}


def _base(buf: ir.Value) -> ir.Value:
    """The memref `buf` is a view of (through view-like ops), or `buf`."""
    while not isinstance(buf.owner, ir.Block) and buf.owner.operation.name in _VIEW_OPS:
        buf = buf.owner.operation.operands[0]
    return buf


def _has_views(buf: ir.Value) -> bool:
    """Whether some op makes another memref (a view, an alias) of `buf`."""
    for use in buf.uses:
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if owner.name in _VIEW_OPS:
            return True
    return False


def _view_used_between(first: ir.Operation, last: ir.Operation, buf: ir.Value) -> bool:
    """Whether an op between `first` and `last` (ops of one block) touches a view of
    `buf` (which `_access` does not see)."""
    ops = ops_of(last.block)
    for o in ops[ops.index(first) + 1:ops.index(last)]:
        for inner in walk_ops(o):
            if any(isinstance(v.type, ir.MemRefType) and v != buf and _base(v) == buf
                   for v in inner.operands):
                return True
    return False


def _access(op: ir.Operation, buf: ir.Value) -> str:
    """How `op` touches `buf`: 'none', 'read', 'write' (all of it or as a linalg
    output) or 'unknown'."""
    if not any(buf in list(o.operands) for o in walk_ops(op)):
        return "none"
    if op.name.startswith("linalg."):
        outs = list(op.opview.outputs)
        return "write" if buf in outs else "read"
    if op.name == "memref.copy":
        return "write" if op.operands[1] == buf else "read"
    if op.name == "memref.load":
        return "read"
    return "unknown"


def _last_writer(op: ir.Operation, buf: ir.Value) -> tuple[ir.Operation, bool] | None:
    """The op of `op`'s block that last wrote `buf` before `op`, and whether `buf`
    was read in between; None if unknown (an op we cannot see into, no writer)."""
    ops = ops_of(op.block)
    read = False
    for k in range(ops.index(op) - 1, -1, -1):
        kind = _access(ops[k], buf)
        if kind == "write":
            return ops[k], read
        if kind == "unknown":
            return None
        read = read or kind == "read"
    return None


def _written_between(first: ir.Operation, last: ir.Operation, buf: ir.Value) -> bool:
    ops = ops_of(last.block)
    return any(_access(o, buf) not in ("none", "read")
               for o in ops[ops.index(first) + 1:ops.index(last)])


def _fill_value(op: ir.Operation, buf: ir.Value) -> ir.Value | None:
    """The value `op` sets every element of `buf` to, if it is a fill."""
    if op.name == "linalg.fill":
        return op.operands[0] if list(op.operands)[1:] == [buf] else None
    if op.name != "linalg.generic" or list(op.operands) != [buf] or any(
            "parallel" not in str(a) for a in op.attributes["iterator_types"]):
        return None
    if not ir.AffineMapAttr(list(op.attributes["indexing_maps"])[0]).value.is_permutation:
        return None
    body_ops = ops_of(op.regions[0].blocks[0])
    if len(body_ops) != 1 or len(body_ops[0].operands) != 1:
        return None
    value = body_ops[0].operands[0]
    owner = value.owner
    if isinstance(owner, ir.Block) or is_inside(owner.operation, op):
        return None
    return value


def _initial_value(op: ir.Operation, out: ir.Value):
    """Where the reduction's initial output values come from, without a read of
    `out` in the kernel when possible: ('value', v, dead) for a fill of `out`
    (or a copy of a filled buffer into it), ('load', src, dead) for a copy of
    `src` into `out`, ('load', out, []) otherwise. `dead`: the ops (the fill,
    the copy) the reduction makes useless, since it writes every element of
    `out` and nothing read them in between (through a view of `out` either: a
    buffer with views keeps the load if any op in between uses one)."""
    found = _last_writer(op, out)
    if found is None or found[1]:
        return "load", out, []
    writer = found[0]
    if _has_views(out) and _view_used_between(writer, op, out):
        return "load", out, []
    value = _fill_value(writer, out)
    if value is not None:
        return "value", value, [writer]
    if _has_views(out):
        return "load", out, []
    if writer.name != "memref.copy":
        return "load", out, []
    src = writer.operands[0]
    if src.type != out.type or _has_views(src):
        return "load", out, []
    before = _last_writer(writer, src)
    if before is not None:
        value = _fill_value(before[0], src)
        if value is not None:
            return "value", value, [writer]
    if _written_between(writer, op, src):
        return "load", out, []
    return "load", src, [writer]


def _rank(buf: ir.Value) -> int:
    return ir.MemRefType(buf.type).rank


def _one_element(x: ir.Value) -> bool:
    return isinstance(x.type, ir.MemRefType) and math.prod(ir.MemRefType(x.type).shape) == 1


def _scalar_tail(op: ir.Operation) -> list[ir.Operation]:
    """The one-element elementwise ops and fills right after reduction `op` (the
    scalar tail of a loss: `nll + wd * decay`, a seed of 1.0): they run at the
    end of the reduction's kernel instead of one-thread kernels of their own.
    Static allocations and constants between them move before `op`. On the GPU
    the kernel's code after its `gpu.all_reduce` runs on thread 0 only
    (`SingleThreadTails`), so the tail runs once, in program order."""
    tail: list[ir.Operation] = []
    ops = ops_of(op.block)
    k = ops.index(op) + 1
    while k < len(ops):
        g = ops[k]
        k += 1
        if (g.name == "memref.alloc" and not list(g.operands)) or (
                g.name == "arith.constant"):
            g.move_before(op)
            continue
        if not _scalar_generic_ok(g):
            break
        tail.append(g)
    return tail


def _scalar_generic_ok(g: ir.Operation) -> bool:
    if g.name != "linalg.generic" or any(
            "parallel" not in str(a) for a in g.attributes["iterator_types"]):
        return False
    view = g.opview
    ins, outs = list(view.inputs), list(view.outputs)
    if len(outs) != 1 or len(g.results) != 0 or not _one_element(outs[0]):
        return False
    if any(isinstance(x.type, ir.ShapedType) and not _one_element(x) for x in ins):
        return False
    body = g.regions[0].blocks[0]
    if list(body.arguments[len(ins)].uses):
        return False
    return not any(inner.regions or inner.name == "linalg.index" for inner in ops_of(body))


def _scalar_generic(g: ir.Operation) -> None:
    """`g` (a one-element generic) on scalars, at the insertion point."""
    view = g.opview
    ins, target = list(view.inputs), list(view.outputs)[0]
    body = g.regions[0].blocks[0]
    vmap: dict = {}
    for j, x in enumerate(ins):
        if isinstance(x.type, ir.MemRefType):
            vmap[body.arguments[j]] = memref.load(x, [index_const(0)] * _rank(x))
        else:
            vmap[body.arguments[j]] = x
    for inner in ops_of(body)[:-1]:
        clone = inner.clone(ip=ir.InsertionPoint.current)
        for i, v in enumerate(list(clone.operands)):
            if v in vmap:
                clone.operands[i] = vmap[v]
        for r_old, r_new in zip(inner.results, clone.results):
            vmap[r_old] = r_new
    y = ops_of(body)[-1].operands[0]
    memref.store(vmap.get(y, y), target, [index_const(0)] * _rank(target))


def _scatter(plan: _Plan, p_ivs: list[ir.Value], n: int) -> list[ir.Value]:
    """Loop indices with the parallel ones set (the output map reads only those)."""
    ivs: list = [None] * n
    for d, v in zip(plan.parallel, p_ivs):
        ivs[d] = v
    return ivs


@dataclasses.dataclass(frozen=True)
class BlockReductions(_Step):
    """Long reductions (see the module doc) become grids of blocks reducing with
    all their threads; whole-array reductions split in two deterministic passes."""

    name = "autodiff-gpu-block-reductions"
    summary = "Rewrite long linalg reductions into block-parallel scf.parallel reductions"

    block_size: int = 256

    def apply(self, module: ir.Operation) -> None:
        if self.block_size < MIN_THREADS:  # too few threads to be worth it (and safe)
            return
        plans = [p for p in (_plan(o) for o in walk_ops(module)) if p is not None]
        for plan in plans:
            _rewrite(plan, self.block_size)


def _marked(op: ir.Operation, kind: str) -> bool:
    return (op.name == "scf.execute_region" and _ATTR in op.attributes
            and ir.StringAttr(op.attributes[_ATTR]).value == kind)


def _inline(region_op: ir.Operation) -> None:
    """Move the ops of `region_op`'s single block before it (no results), erase it."""
    for o in ops_of(region_op.regions[0].blocks[0])[:-1]:
        o.move_before(region_op)
    region_op.erase()


@dataclasses.dataclass(frozen=True)
class InlineBlockReductions(_Step):
    """Put each `BlockReductions` row block back directly in a block loop.

    The "grid" regions are inlined first. A row block then left on the host
    (its one-iteration block loop was folded away) gets a one-iteration
    `scf.parallel` again: one block of threads. Then the row region is
    inlined, so the thread loop sits directly in the block loop, as
    `gpu-map-parallel-loops` and `convert-parallel-loops-to-gpu` expect.
    """

    name = "autodiff-gpu-inline-block-reductions"
    summary = "Inline the row blocks of block-parallel reductions into their block loops"

    def apply(self, module: ir.Operation) -> None:
        for op in [o for o in walk_ops(module) if _marked(o, _GRID)]:
            _inline(op)
        for op in [o for o in walk_ops(module) if _marked(o, _ROW)]:
            if on_host(op):
                with ir.InsertionPoint(op), op.location:
                    zero, one = index_const(0), index_const(1)
                    _, _, term = new_parallel([zero], [one], [one])
                op.move_before(term)
            _inline(op)


def contains_block_reduction(loop: ir.Operation) -> bool:
    """Whether parallel loop `loop` is a block loop around a reducing thread loop."""
    return any(o.name == "scf.parallel" and len(o.results) > 0
               for o in ops_of(loop.regions[0].blocks[0]))


@dataclasses.dataclass(frozen=True)
class SingleThreadTails(_Step):
    """In a `gpu.launch` with a `gpu.all_reduce` (a block-parallel reduction:
    nothing else makes one), the code after the last all-reduce runs on thread 0
    only: the row's store (the same value in every thread) and the scalar tail.

    One thread writes, in program order: no write races with another thread's
    write, and every thread's reads before the all-reduce (of the output's
    initial value, of the inputs) come before the barrier inside it, hence
    before these writes.
    """

    name = "autodiff-gpu-single-thread-tails"
    summary = "Run the code after a block reduction's gpu.all_reduce on thread 0"

    def apply(self, module: ir.Operation) -> None:
        for launch in [o for o in walk_ops(module) if o.name == "gpu.launch"
                       and GPU_PHASES not in o.attributes]:  # row kernels: their own
            body = launch.regions[0].blocks[0]
            ops = ops_of(body)
            reduces = [k for k, o in enumerate(ops) if o.name == "gpu.all_reduce"]
            if not reduces:
                continue
            after = ops[reduces[-1] + 1:-1]
            if not any(o.name == "memref.store" or o.regions for o in after):
                continue
            # Block arguments: block ids (x, y, z), thread ids (x, y, z), sizes.
            tid = body.arguments[3:6]
            with ir.InsertionPoint(after[0]), launch.location:
                zero = index_const(0)
                first = [arith.cmpi(arith.CmpIPredicate.eq, t, zero) for t in tid]
                cond = arith.andi(arith.andi(first[0], first[1]), first[2])
                guard = scf.IfOp(cond)
                with ir.InsertionPoint(guard.then_block):
                    term = scf.YieldOp([])
            for o in after:
                o.move_before(term)
