"""Row groups: chains through row reductions (softmax, layer norm) as one loop over row tiles.

`FuseRowGroups` (flag `--autodiff-fuse-row-groups`) finds each group
(`row_groups`) and fuses it into a loop over tiles of rows before the
schedules run; after bufferization `PrefetchRowTiles` makes each iteration
of such a loop prefetch the tiles the next one reads.
"""

from __future__ import annotations

import dataclasses
import math as pymath

from mlir import ir

from ...dialects.vocabulary import CPU_ROW_GROUP as ROW_TAG
from ...dialects.vocabulary import ROW_TILES as ROW_LOOP_ATTR
from ..ad_support import defining_op, int_constant, is_inside, post_order_ops
from ..passes import Pass, register
from .classify import classify
from .parameters import (
    ELEMENTWISE_GROUP_MIN_OPS,
    PARALLEL_MIN_ELEMENTS,
    ROW_GROUP_MIN_ELEMENTS,
    ROW_MAX_BYTES,
    ROW_TILE_BYTES,
    ROW_TILE_ROWS,
)
from .script import Script, apply_quietly, named_sequence


def _dim_prefix(m: ir.AffineMap, k: int) -> bool:
    """The map's first k results are the loop dims d0 .. d(k-1), in order."""
    res = list(m.results)
    return len(res) >= k and all(
        isinstance(e, ir.AffineDimExpr) and e.position == i for i, e in enumerate(res[:k]))


def _uses_dims_below(m: ir.AffineMap, k: int) -> bool:
    return any(isinstance(e, ir.AffineDimExpr) and e.position < k for e in m.results)


def _row_operands(op: ir.Operation, k: int) -> list[ir.Value] | None:
    """The tensor operands of `op` that a tile of its first k (row) loops slices
    row for row; None if `op` cannot join a row group over k row dims.

    A member computes each row from the same rows of its operands: fills,
    elementwise ops and inner reductions (no reduced dim among the first k),
    whose row loops index every result by the same leading dims. Operands
    that do not depend on the rows (a broadcast bias) are read whole by
    every tile and are not followed.
    """
    if op.name == "linalg.fill":
        shape = op.results[0].type.shape if isinstance(op.results[0].type, ir.ShapedType) else []
        return [] if len(shape) >= k else None
    c = classify(op, sized=False)
    if c is None or c.kind not in ("elementwise", "reduction") or any(d < k for d in c.reduced):
        return None
    if op.name == "linalg.reduce":
        return list(op.operands) if len(c.ranges) > k else None
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    n_in = len(op.operands) - len(op.results)
    if len(maps) != len(op.operands) or not all(_dim_prefix(m, k) for m in maps[n_in:]):
        return None
    follow = []
    for v, m in zip(op.operands, maps):
        if _dim_prefix(m, k):
            follow.append(v)
        elif _uses_dims_below(m, k) and _row_local_producer(v, k):
            # A partial dependence on the rows (a causal mask [t, s] read by
            # scores [b, h, t, s]): a tile of rows reads a slice of it, which
            # tiling computes from the map, but a producer fused into the loop
            # would be tiled row for row. Not followed, and only allowed when
            # its producer could not be a member anyway.
            return None
    return follow


def _row_local_producer(v: ir.Value, k: int) -> bool:
    """`v` is the result of a linalg op that could itself join a row group over k dims."""
    p = defining_op(v)
    return (p is not None and p.name.startswith("linalg.")
            and (p.name == "linalg.fill" or classify(p, sized=False) is not None))


def _row_group(sink: ir.Operation, k: int, taken: set[ir.Operation]) -> list[ir.Operation]:
    """The ops fused into `sink`'s row loop: `sink`, then its producers in reverse order.

    A producer joins when it is a row-local op (`_row_operands`) in the
    sink's block whose every user is in the group: with a user outside, it
    would run twice (in the loop, and outside it for that user).
    """

    def producers(op: ir.Operation, within: set[ir.Operation] | None) -> list[ir.Operation]:
        found = []
        for v in _row_operands(op, k) or []:
            p = defining_op(v)
            if p is None or p in taken or p.block != sink.block:
                continue
            if within is None:
                if p.name.startswith("linalg.") and _row_operands(p, k) is not None:
                    found.append(p)
            elif p in within:
                found.append(p)
        return found

    def closure(within: set[ir.Operation] | None) -> set[ir.Operation]:
        seen, work = {sink}, [sink]
        while work:
            for p in producers(work.pop(), within):
                if p not in seen:
                    seen.add(p)
                    work.append(p)
        return seen

    group = closure(None)
    while True:
        inside = {op for op in group if op == sink or all(
            u.owner.operation in group for r in op.results for u in r.uses)}
        inside = closure(inside)
        if inside == group:
            break
        group = inside
    members = [o.operation for o in sink.block.operations if o.operation in group]
    members.reverse()
    return members


def _row_tile(rows: int, row_bytes: int) -> int:
    """Rows per tile: the largest power of two dividing `rows` within the row-tile limits."""
    tile = 1
    while (tile * 2 <= ROW_TILE_ROWS and rows % (tile * 2) == 0
           and tile * 2 * row_bytes <= ROW_TILE_BYTES):
        tile *= 2
    return tile


@dataclasses.dataclass
class RowGroup:
    """A sink and the producers fused into its loop over tiles of rows."""

    members: list[ir.Operation]  # sink first
    shape: list[int]  # the sink's result shape; its first len - 1 dims are rows
    width: int

    def script(self, first_tag: int, threads: int) -> str:
        """Tile the sink over rows (over threads first, when worth it) and fuse the rest."""
        s = Script()
        n = len(self.shape)
        handles = [s.match(first_tag + j, attr=ROW_TAG) for j in range(len(self.members))]
        rows = list(self.shape[:-1])
        ops = "(!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"

        def fuse_into(loop: str) -> str:
            for i in range(1, len(handles)):
                fused, new_loop = s.fresh("f"), s.fresh("in")
                s.lines.append(f"{fused}, {new_loop} = transform.structured.fuse_into_containing_op "
                               f"{handles[i]} into {loop} : {ops}")
                handles[i], loop = fused, new_loop
            return loop

        row_bytes = self.shape[-1] * self.width // 8
        if (threads > 1 and rows[0] % threads == 0
                and pymath.prod(self.shape) >= PARALLEL_MIN_ELEMENTS):
            sink, loop = s.fresh("p"), s.fresh("forall")
            s.lines.append(
                f"{sink}, {loop} = transform.structured.tile_using_forall {handles[0]} "
                f"tile_sizes {[rows[0] // threads] + [0] * (n - 1)} "
                ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
            handles[0] = sink
            fuse_into(loop)
            rows[0] //= threads
        sizes = [0 if r == 1 else 1 for r in rows[:-1]] + [_row_tile(rows[-1], row_bytes), 0]
        nloops = sum(1 for t in sizes if t)
        sink, loop = s.fresh("t"), s.fresh("rows")
        anys = ", ".join(["!transform.any_op"] * (nloops + 1))
        s.lines.append(f"{sink}, {loop}:{nloops} = transform.structured.tile_using_for "
                       f"{handles[0]} tile_sizes {sizes} : (!transform.any_op) -> ({anys})")
        # Into the innermost loop: the producers then run once per tile.
        tiles = fuse_into(f"{loop}#{nloops - 1}")
        s.lines.append(f'transform.annotate {tiles} "{ROW_LOOP_ATTR}" : !transform.any_op')
        return named_sequence(s.lines)


def row_groups(module: ir.Operation) -> list[RowGroup]:
    """The row groups worth fusing in `module` (see `FuseRowGroups`)."""
    sinks: list[tuple[ir.Operation, list[int], int]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg."):
            if op.name == "linalg.generic" and len(op.results) == 1:
                c = classify(op, sized=False)
                shape = list(op.results[0].type.shape) if c is not None else []
                if (c is not None and c.kind == "elementwise" and len(shape) >= 2
                        and pymath.prod(shape) >= ROW_GROUP_MIN_ELEMENTS
                        and pymath.prod(shape[:-1]) > 1
                        and shape[-1] * c.width // 8 <= ROW_MAX_BYTES):
                    sinks.append((op, shape, c.width))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    taken: set[ir.Operation] = set()
    groups = []
    for sink, shape, width in reversed(sinks):
        if sink in taken:
            continue
        members = _row_group(sink, len(shape) - 1, taken)
        kinds = [classify(op, sized=False) for op in members if op.name != "linalg.fill"]
        # Worth a loop when a reduction's rows feed another op of the group,
        # or when elementwise fusion left several ops (values with more than
        # one consumer: forward-over-reverse writes many).
        if len(kinds) < 2 or not (
                any(c is not None and c.kind == "reduction" for c in kinds)
                or len(kinds) >= ELEMENTWISE_GROUP_MIN_OPS):
            continue
        taken.update(members)
        groups.append(RowGroup(members, shape, width))
    return groups


@register
@dataclasses.dataclass(frozen=True)
class FuseRowGroups(Pass):
    """Fuse each row group into one loop over tiles of rows (before `ScheduleLinalgForCpu`).

    A row group is an elementwise op over rows (the sink) with the ops that
    compute its operands row by row: elementwise ops, fills and reductions
    over the inner dims (`_row_group`). Softmax is the example: max over a
    row, exp(x - max), the sum of that, the division. Elementwise fusion
    cannot merge them (the exp is read by two consumers, the reductions
    change the iteration space), so unfused every op is one pass over
    memory: for softmax over 4096 x 1024 f32, six passes of 16 MB. Groups
    of elementwise ops alone (at least `ELEMENTWISE_GROUP_MIN_OPS`: values
    with several consumers, which forward-over-reverse writes) are fused the
    same way.

    The sink is tiled over its row dims (`scf.forall` over the threads
    first, then `scf.for` over `_row_tile` rows) and the producers are fused
    into the loops with `transform.structured.fuse_into_containing_op`
    (consumers first); CSE then merges the duplicates that fusing a value
    with two consumers creates, and `fold_tensor_empty` shrinks the
    intermediates to tiles. The members keep the `ROW_TAG` attribute, so
    `ScheduleLinalgForCpu` vectorizes their tiles however small, on the
    loop's thread. (measurements: benchmarks/notes/cpu-schedules.md)
    """

    name = "autodiff-fuse-row-groups"
    summary = "Fuse reductions over rows with their producers and consumers (CPU)"

    threads: int = dataclasses.field(default=1, metadata={"help": "threads for large groups"})
    strict: bool = dataclasses.field(default=False, metadata={
        "help": "raise when the transform script fails (else keep the unscheduled ops)"})

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            groups = row_groups(module)
            if not groups:
                return
            i64 = ir.IntegerType.get_signless(64)
            tag = 0
            scripts = []
            for g in groups:
                for j, op in enumerate(g.members):
                    op.attributes[ROW_TAG] = ir.IntegerAttr.get(i64, tag + j)
                    if j:
                        _own_empty_inits(op)
                scripts.append(g.script(tag, self.threads))
                tag += len(g.members)
            scripts.append(named_sequence([
                ("%funcs = transform.structured.match ops{[\"func.func\"]} in %root "
                 ": (!transform.any_op) -> !transform.any_op"),
                "transform.apply_patterns to %funcs {",
                "  transform.apply_patterns.tensor.fold_tensor_empty",
                "  transform.apply_patterns.canonicalization",
                "} : !transform.any_op",
                "transform.apply_cse to %funcs : !transform.any_op",
            ]))
            for text in scripts:
                apply_quietly(module, text, self.strict)


def _own_empty_inits(op: ir.Operation) -> None:
    """Give `op` its own `tensor.empty` for each init it shares with other ops.

    CSE merged equal empties, so an intermediate (softmax's exp) often has
    the sink's init. Fused, it would then be computed into the sink's tile
    of the result, which bufferization resolves with a copy of that tile
    per iteration; with its own empty it gets a tile-sized buffer.
    """
    n_in = len(op.operands) - len(op.results)
    for k in range(n_in, len(op.operands)):
        v = op.operands[k]
        owner = defining_op(v)
        if owner is not None and owner.name == "tensor.empty" and len(list(v.uses)) > 1:
            op.operands[k] = owner.clone(ip=ir.InsertionPoint(op)).results[0]


# -- prefetching row tiles ------------------------------------------------------------------------
#
# A row group (softmax) reads each row tile from memory in its first pass
# (the max) and then works on it in L1 for three more passes; while those
# run, nothing asks memory for the next tile, and the next max pass stalls.
# Each iteration prefetches the tiles the next one reads.

_CACHE_LINE = 64


def _only_read(view: ir.Value) -> bool:
    """Every use of memref `view` (through subviews) reads it."""
    for use in view.uses:
        user = getattr(use.owner, "operation", use.owner)
        if user.name == "memref.subview":
            if not _only_read(user.results[0]):
                return False
        elif not (user.name in ("vector.transfer_read", "memref.load", "vector.load")
                  and use.operand_number == 0):
            return False
    return True


def _prefetch_tile(loop: ir.OpView, view: ir.OpView, tiles_ahead: int) -> None:
    """At the top of `loop`'s body, prefetch the tile that subview `view`
    reads `tiles_ahead` iterations later (the last tile, past the end):
    one prefetch per cache line of each of its rows."""
    from mlir.dialects import arith, memref, scf

    source = view.operands[0]
    iv = loop.induction_variable
    step, upper = int_constant(loop.step), int_constant(loop.upperBound)
    dynamic = iter(view.offsets)
    sizes = list(ir.DenseI64ArrayAttr(view.attributes["static_sizes"]))
    elem = ir.MemRefType(source.type).element_type
    bits = (ir.FloatType(elem).width if isinstance(elem, ir.FloatType)
            else ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType) else 64)
    width = max(1, bits // 8)
    index = ir.IndexType.get()
    with ir.InsertionPoint(loop.regions[0].blocks[0].operations[0]), view.location:
        ahead = arith.minsi(arith.addi(iv, arith.constant(index, step * tiles_ahead)),
                            arith.constant(index, upper - step))
        base: list[ir.Value] = []
        for o in ir.DenseI64ArrayAttr(view.attributes["static_offsets"]):
            if o == ir.ShapedType.get_dynamic_size():
                v = next(dynamic)
                base.append(ahead if v == iv else v)
            else:
                base.append(arith.constant(index, o))
        c0, c1 = arith.constant(index, 0), arith.constant(index, 1)
        line = arith.constant(index, max(1, _CACHE_LINE // width))

        def emit(rows: list[int], idx: list[ir.Value]) -> None:
            if rows:
                d = rows[0]
                loop_d = scf.ForOp(c0, arith.constant(index, sizes[d]), c1)
                with ir.InsertionPoint(loop_d.body):
                    emit(rows[1:], [*idx[:d], arith.addi(base[d], loop_d.induction_variable),
                                    *idx[d + 1:]])
                    scf.YieldOp([])
                return
            cols = scf.ForOp(c0, arith.constant(index, sizes[-1]), line)
            with ir.InsertionPoint(cols.body):
                memref.prefetch(source, [*idx[:-1], arith.addi(base[-1], cols.induction_variable)],
                                is_write=False, locality_hint=3, is_data_cache=True)
                scf.YieldOp([])

        emit([d for d, n in enumerate(sizes[:-1]) if n > 1], base)


def _prefetch_row_loop(loop: ir.OpView, tiles_ahead: int) -> None:
    """Prefetch, in row-tile loop `loop`, the tiles of buffers from outside it
    that it only reads, sliced by the loop's index."""
    if any(int_constant(v) is None for v in (loop.lowerBound, loop.upperBound, loop.step)):
        return
    iv = loop.induction_variable
    seen: set[ir.Value] = set()
    for op in list(loop.regions[0].blocks[0].operations):
        if op.operation.name != "memref.subview" or iv not in list(op.offsets):
            continue
        source = op.operands[0]
        if (source in seen or not isinstance(source.type, ir.MemRefType)
                or not source.type.has_static_shape or _inside(source, loop)
                or any(v != iv and _inside(v, loop) for v in op.offsets)
                or not _only_read(op.results[0])):
            continue  # (offsets computed in the body are not available at its top)
        seen.add(source)
        _prefetch_tile(loop, op, tiles_ahead)


def _inside(v: ir.Value, loop: ir.OpView) -> bool:
    """`v` is defined in `loop`'s body (an argument or an op's result)."""
    owner = v.owner.owner if isinstance(v.owner, ir.Block) else v.owner
    return is_inside(owner.operation, loop.operation)


@dataclasses.dataclass(frozen=True)
class PrefetchRowTiles(Pass):
    """After bufferization: the loops over a row group's row tiles (marked
    by `FuseRowGroups`) prefetch the tiles of the next iteration that they
    only read (see "prefetching row tiles" above)."""

    name = "autodiff-prefetch-row-tiles"
    summary = "Prefetch the next row tile of each row group's loop"

    tiles_ahead: int = dataclasses.field(default=1, metadata={
        "help": "row tiles ahead of the current one that each iteration prefetches (0: off)"})

    def run(self, module: ir.Operation) -> None:
        if not self.tiles_ahead:
            return
        with module.context:
            for op in post_order_ops(module):
                if op.name == "scf.for" and ROW_LOOP_ATTR in op.attributes:
                    _prefetch_row_loop(op.opview, self.tiles_ahead)
