"""`ScheduleLinalgForCpu`: tile and vectorize the large static linalg ops of a module.

It classifies every linalg op (`classify.py`), rewrites contractions into
canonical form (`contraction.py`), replaces f32 transcendentals in the
vectorized bodies (`approximations.py`) and applies one transform script for
all chosen ops (`schedules.py`). Contractions whose C starts as a zero fill
start their register tiles from zero vectors instead (`mark_zero_inits`,
`start_tiles_at_zero`).
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from ...dialects.vocabulary import CPU_ROW_GROUP as ROW_TAG
from ...dialects.vocabulary import CPU_SCHEDULE as SCHEDULE_TAG
from ...dialects.vocabulary import CPU_ZERO_INIT as ZERO_INIT_TAG
from ..ad_support import defining_op
from ..passes import Pass
from .approximations import approximate_f32_math
from .classify import Candidate, classify
from .contraction import (
    collapse_contraction_dims,
    drop_unit_dims,
    leading_batch_dims,
    pack_rhs,
)
from .parameters import matmul_schedule
from .schedules import build_script, cache_tile, packed_k_tile
from .script import apply_quietly

# -- the pass ---------------------------------------------------------------------------------


def _candidates(module: ir.Operation) -> list[Candidate]:
    found: list[Candidate] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg."):
            c = classify(op)
            if c is not None:
                found.append(c)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


@dataclasses.dataclass(frozen=True)
class ScheduleLinalgForCpu(Pass):
    """Tile and vectorize large static linalg ops (see the module docstring)."""

    name = "autodiff-schedule-linalg-for-cpu"
    summary = "Tile, vectorize and approximate transcendentals in large linalg ops"

    threads: int = dataclasses.field(
        default=1, metadata={"help": "threads for large ops (> 1 needs the OpenMP lowering)"})
    outer_reduction_threads: bool = dataclasses.field(default=True, metadata={
        "help": "outer reductions whose first loop is parallel split it over the threads"})
    strict: bool = dataclasses.field(default=False, metadata={
        "help": "raise when the transform script fails (else keep the unscheduled ops)"})

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            leading_batch_dims(module)
            collapse_contraction_dims(module)
        candidates = _candidates(module)
        if not candidates:
            _drop_tags(module)
            return
        with module.context, module.location:
            self._schedule(module, candidates)

    def _schedule(self, module: ir.Operation, candidates: list[Candidate]) -> None:
        i64 = ir.IntegerType.get_signless(64)
        candidates = [drop_unit_dims(c) if c.kind == "contraction" else c
                      for c in candidates]
        candidates = [p for c in candidates for p in pack_rhs(c)]
        candidates = _mark_zero_inits(candidates)
        for i, c in enumerate(candidates):
            c.op.attributes[SCHEDULE_TAG] = ir.IntegerAttr.get(i64, i)
            if c.kind in ("elementwise", "reduction", "outer_reduction"):
                approximate_f32_math(c.op)
        try:
            apply_quietly(module, build_script(candidates, self.threads,
                                               self.outer_reduction_threads), self.strict)
            _start_tiles_at_zero(module)
        finally:
            _drop_tags(module)


def _zero_fill(v: ir.Value) -> ir.Operation | None:
    """The `linalg.fill` of +0.0 that `v` is (through one `tensor.expand_shape`), if its
    result has no other use."""
    op = defining_op(v)
    if op is not None and op.name == "tensor.expand_shape" and _one_use(op.results[0]):
        op = defining_op(op.operands[0])
    if op is None or op.name != "linalg.fill" or not _one_use(op.results[0]):
        return None
    value = defining_op(op.operands[0])
    if value is None or value.name != "arith.constant":
        return None
    attr = value.attributes["value"]
    if not isinstance(attr, ir.FloatAttr) or attr.value != 0.0 or str(attr).startswith("-"):
        return None
    return op


def _one_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _k_loop_innermost_only(c: Candidate) -> bool:
    """The schedule reduces over one k loop, inside the register tile, and
    tiles no reduction dim at the cache level: each C tile is read once, before
    any k step has written it."""
    sched = matmul_schedule()
    if c.kind == "packed_matmul":
        return packed_k_tile(c.ranges[3]) == 0
    d = c.contraction
    if c.kind != "contraction" or d is None or len(d.k) != 1:
        return False
    return cache_tile(c.ranges[d.k[0]], sched.cache[2], 1) == 0


def _zero_constant_as_fill(v: ir.Value) -> ir.Operation | None:
    """A splat +0.0 tensor constant used once (reverse mode's zero cotangent
    accumulators) -> the `linalg.fill` of an empty tensor it equals, built in its
    place; None if `v` is not one. Bufferized, the constant would be copied
    from a global into every call's C."""
    from mlir.dialects import arith, linalg, tensor

    op = defining_op(v)
    if op is None or op.name != "arith.constant" or not _one_use(v):
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return None
    zero = attr.get_splat_value()
    if not isinstance(zero, ir.FloatAttr) or zero.value != 0.0 or str(zero).startswith("-"):
        return None
    t = v.type
    with ir.InsertionPoint(op), op.location:
        scalar = arith.constant(t.element_type, 0.0)
        fill = linalg.fill(scalar, outs=[tensor.empty(t.shape, t.element_type)]).owner
    v.replace_all_uses_with(fill.results[0])
    op.erase()
    return fill


def _fill_after_reshape(fill: ir.Operation, reshape: ir.Operation) -> ir.Operation:
    """`reshape(fill(x))` -> `fill(reshape(x))` (canonicalization would do the
    same later, losing the fill's attributes); returns the new fill."""
    from mlir.dialects import linalg, tensor

    with ir.InsertionPoint(reshape), reshape.location:
        shape = reshape.results[0].type
        dest = tensor.expand_shape(shape, fill.operands[1], reshape.attributes["reassociation"],
                                   [], list(shape.shape))
        new = linalg.fill(fill.operands[0], outs=[dest]).owner
    reshape.results[0].replace_all_uses_with(new.results[0])
    reshape.erase()
    fill.erase()
    return new


def _mark_zero_inits(candidates: list[Candidate]) -> list[Candidate]:
    """Tag the zero fills that contractions' register tiles can start from
    instead of reading (`_start_tiles_at_zero`), and drop them from the
    candidates: they stay one `linalg.fill` until then.

    Without this, C is first written with zeros in a pass of its own (a
    `memset` of 8 MB per contraction in the GMM gradient, 9% of its time),
    then each register tile reads those zeros back.
    """
    found = []  # (fill, the contraction's init)
    for c in candidates:
        if c.kind not in ("contraction", "packed_matmul") or not _k_loop_innermost_only(c):
            continue
        init = c.op.operands[len(c.op.operands) - len(c.op.results)]
        fill = _zero_fill(init)
        if fill is None:
            fill = _zero_constant_as_fill(init)
            init = fill.results[0] if fill is not None else init
        if fill is not None:
            found.append((fill, init))
    fills = {fill for fill, _ in found}
    kept = [c for c in candidates if c.op not in fills]
    for fill, init in found:
        if fill.results[0] != init:  # a packed matmul's C view
            fill = _fill_after_reshape(fill, defining_op(init))
        fill.attributes[ZERO_INIT_TAG] = ir.UnitAttr.get()
    return kept


def _loop_carried(v: ir.Value) -> bool:
    """`v` is a block argument of an `scf.for` or `scf.forall` body (a loop's
    iteration argument or shared output)."""
    if not isinstance(v, ir.BlockArgument):
        return False
    return v.owner.owner.name in ("scf.for", "scf.forall")


def _c_tile_reads(loop: ir.Operation) -> list[ir.Operation]:
    """The reads of loop-carried C inside `loop`, if each starts a hoisted k loop
    (its only use is an `scf.for` init); else [] (some read accumulates)."""
    reads: list[ir.Operation] = []
    ok = True

    def find(op: ir.Operation) -> ir.WalkResult:
        nonlocal ok
        if op.name != "vector.transfer_read":
            return ir.WalkResult.ADVANCE
        src = defining_op(op.operands[0])
        if src is None or src.name != "tensor.extract_slice" or not _loop_carried(
                src.operands[0]):
            return ir.WalkResult.ADVANCE  # a read of A or B
        uses = [u.owner for u in op.results[0].uses]
        if len(uses) != 1 or uses[0].name != "scf.for":
            ok = False  # a read inside the k loop: accumulating, not starting
        reads.append(op)
        return ir.WalkResult.ADVANCE

    loop.walk(find)
    return reads if ok else []


def _start_tiles_at_zero(module: ir.Operation) -> None:
    """Register tiles of C start from zero vectors instead of reading a zero-filled C.

    The tiled loops around a contraction marked by `_mark_zero_inits` carry C
    (iteration arguments, shared outputs of the thread loop); each register
    tile reads its slice of C once, before its k loop, and writes it once
    after. Those reads become zero constants and the loops start from the
    fill's uninitialized destination, so the fill disappears. All or nothing:
    if any read of C is not such a hoisted tile read (a schedule that did not
    apply), the fill stays.
    """
    from mlir.dialects import arith

    fills: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.fill" and ZERO_INIT_TAG in op.attributes:
            fills.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for fill in fills:
        del fill.attributes[ZERO_INIT_TAG]
        user = next(iter(fill.results[0].uses)).owner
        loop = user
        if user.name == "tensor.expand_shape":
            loop = next(iter(user.results[0].uses)).owner
        if loop.name not in ("scf.for", "scf.forall"):
            continue  # the contraction was not tiled
        reads = _c_tile_reads(loop)
        if not reads:
            continue
        for read in reads:
            with ir.InsertionPoint(read), read.location:
                zero = arith.constant(read.results[0].type, ir.DenseElementsAttr.get_splat(
                    read.results[0].type, ir.FloatAttr.get(read.results[0].type.element_type, 0.0)))
            read.results[0].replace_all_uses_with(zero)
            read.erase()
        fill.results[0].replace_all_uses_with(fill.operands[1])
        fill.erase()


def _drop_tags(module: ir.Operation) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        for tag in (SCHEDULE_TAG, ROW_TAG, ZERO_INIT_TAG):
            if tag in op.attributes:
                del op.attributes[tag]
        return ir.WalkResult.ADVANCE

    module.walk(visit)
