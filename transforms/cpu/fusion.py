"""Control of upstream elementwise fusion: what it may recompute, and what gets a copy per consumer.

`PinRecomputedProducers` / `UnpinProducers` keep producers out of consumers
that would recompute them; `UnshareBroadcastProducers` and
`UnshareRecomputedProducers` clone cheap producers per consumer so that each
consumer can fuse its own copy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from mlir import ir

from ...dialects.vocabulary import PINNED_RESULTS
from ..ad_support import post_order_ops
from ..passes import Pass
from .classify import classify, map_dims, named_maps, ranges_from_maps
from .donation import public_definitions

# -- fusion control -------------------------------------------------------------------------
#
# Upstream `linalg-fuse-elementwise-ops` fuses every single-use all-parallel
# generic into its consumer, also where the consumer's loops do not all index
# the fused operand: the producer's body is then recomputed once per extra
# iteration. `tanh(x @ W1 + b1) @ W2` under vmap became one contraction
# generic computing tanh 10 times per element of the hidden layer (N = 10),
# and the contraction, no longer `acc + a * b`, lost its matmul schedule
# (measurements: benchmarks/notes/cpu-schedules.md).
# The pass's control function (fuse single-use producers) cannot be replaced
# from Python, so such producers get a second use for the duration of the
# pass: an extra result of their function, dropped again right after.


_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")
#: Body ops too costly to recompute per broadcast element of a parallel consumer.
_COSTLY_BODY_OPS = ("arith.divf", "arith.remf")


def _costly_body(op: ir.Operation) -> bool:
    """`op`'s body computes a transcendental or a division (costly to recompute)."""
    return any(o.operation.name.startswith("math.") or o.operation.name in _COSTLY_BODY_OPS
               for o in op.regions[0].blocks[0].operations)


def all_parallel(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and all(
        "parallel" in str(a) for a in op.attributes["iterator_types"])


def _single_consumer(value: ir.Value) -> tuple[ir.Operation, int] | None:
    """The one (op, operand index) using `value`, looking through single-use reshapes."""
    while True:
        uses = list(value.uses)
        if len(uses) != 1:
            return None
        user = uses[0].owner
        if user.name not in _RESHAPES:
            return user, uses[0].operand_number
        value = user.results[0]


def _recomputes(consumer: ir.Operation, operand: int, producer: ir.Operation) -> bool:
    """Whether fusing `producer` into `consumer`'s `operand` would repeat its body.

    Yes when some loop of extent > 1 (or unknown) does not index the operand,
    and either the consumer reduces (a contraction: the fused body would
    also no longer be `acc + a * b`) or the producer's body is costly
    (transcendentals, divisions).
    """
    if consumer.name in ("linalg.matmul", "linalg.batch_matmul"):
        maps, reduces = named_maps(consumer), True
    elif consumer.name == "linalg.generic":
        maps = [ir.AffineMapAttr(m).value for m in consumer.attributes["indexing_maps"]]
        reduces = not all_parallel(consumer)
    else:
        return False
    if operand >= len(maps):
        return False
    used = {e.position for e in maps[operand].results if isinstance(e, ir.AffineDimExpr)}
    ranges = ranges_from_maps(maps, consumer)
    missing = [d for d in range(maps[operand].n_dims) if d not in used]
    if not missing or ranges is not None and all(ranges[d] == 1 for d in missing):
        return False
    return reduces or _costly_body(producer)


#: `UnshareBroadcastProducers` clones a producer whose inputs each have at
#: most this fraction of its output's elements (a broadcast by 8 or more).
BROADCAST_MAX_INPUT_FRACTION = 1 / 8


def _cheap_elementwise(op: ir.Operation, max_ops: int) -> ir.RankedTensorType | None:
    """The result type of `op` if it is an all-parallel generic with one static
    result, at most `max_ops` ops besides the yield, none costly, and a body
    that does not read its init."""
    if not all_parallel(op) or len(op.results) != 1:
        return None
    out = op.results[0].type
    if not isinstance(out, ir.RankedTensorType) or not out.has_static_shape:
        return None
    block = op.regions[0].blocks[0]
    n_in = len(op.opview.inputs)
    if (len(block.operations) > max_ops + 1 or _costly_body(op)
            or any(len(list(a.uses)) for a in list(block.arguments)[n_in:])):
        return None
    return out


def _is_broadcast_producer(op: ir.Operation) -> bool:
    """An all-parallel generic computing one cheap op per element of a result
    much larger than its inputs (GMM's x[n, d] - mu[k, d] into [K, N, D])."""
    out = _cheap_elementwise(op, 1)
    if out is None:
        return False
    for v in op.opview.inputs:
        t = v.type
        if isinstance(t, ir.RankedTensorType) and (
                not t.has_static_shape
                or math.prod(t.shape) > BROADCAST_MAX_INPUT_FRACTION * math.prod(out.shape)):
            return False
    return True


def _fusable_use(use: ir.OpOperand) -> bool:
    """An input of a generic that elementwise fusion may fuse into: not a
    contraction (the schedule's register tiles need its `acc + a * b` body)."""
    user = use.owner
    if user.name != "linalg.generic" or use.operand_number >= len(user.opview.inputs):
        return False
    c = classify(user, sized=False)
    return c is None or c.kind != "contraction"


@dataclasses.dataclass(frozen=True)
class UnshareBroadcastProducers(Pass):
    """Before elementwise fusion: one copy of a broadcast producer per consumer.

    Upstream fusion only fuses a producer with a single use. A broadcast
    (GMM's centred points x[n, d] - mu[k, d], [50, 1000, 20] f64 = 8 MB from
    160 KB of inputs) read by several elementwise ops and reductions is then
    written once and read once per consumer. Given a copy each, every
    consumer recomputes it from its cache-resident inputs: one subtraction
    per element instead of 8 MB of memory traffic. Contractions keep the
    original (their register tiles need `acc + a * b`); copies fusion did
    not take are merged again by CSE. (measurements: benchmarks/notes/cpu-schedules.md)
    """

    name = "autodiff-unshare-broadcast-producers"
    summary = "Clone cheap broadcast producers per consumer so that each can fuse them"

    enabled: bool = dataclasses.field(default=True, metadata={
        "help": "off: a broadcast producer with several consumers is written once"})

    def run(self, module: ir.Operation) -> None:
        if not self.enabled:
            return
        for op in [o for o in post_order_ops(module) if _is_broadcast_producer(o)]:
            uses = [u for u in op.results[0].uses if _fusable_use(u)]
            if len(uses) < 2 and len(uses) == len(list(op.results[0].uses)):
                continue  # a single use fuses as it is
            _clone_per_use(op, uses)


def _clone_per_use(op: ir.Operation, uses: Sequence[ir.OpOperand]) -> None:
    """Give each of `uses` its own copy of `op` (erased if no use is left)."""
    for user, index in [(u.owner, u.operand_number) for u in uses]:
        user.operands[index] = op.clone(ip=ir.InsertionPoint(op)).results[0]
    if not list(op.results[0].uses):
        op.erase()


#: `UnshareRecomputedProducers`: at most this many ops (besides the yield) in
#: a producer that each consumer recomputes.
RECOMPUTE_MAX_BODY_OPS = 4


def _reads_whole(user: ir.Operation, index: int) -> bool:
    """Generic `user` reads operand `index` through a permutation of all its loops
    (each element once: fused, the producer's body runs once per element)."""
    m = ir.AffineMapAttr(user.attributes["indexing_maps"][index]).value
    dims = map_dims([m])
    return dims is not None and sorted(dims[0]) == list(range(m.n_dims))


def _is_recomputed_producer(op: ir.Operation) -> bool:
    """An all-parallel generic of a few cheap ops that reads one operand of its
    own size elementwise, the others much smaller: recomputed in a consumer,
    it costs that consumer the read of its one large operand instead of the
    read of its result, and saves writing the result."""
    out = _cheap_elementwise(op, RECOMPUTE_MAX_BODY_OPS)
    if out is None:
        return False
    large = 0
    for i, v in enumerate(op.opview.inputs):
        t = v.type
        if not isinstance(t, ir.RankedTensorType):
            continue
        if not t.has_static_shape:
            return False
        if math.prod(t.shape) > BROADCAST_MAX_INPUT_FRACTION * math.prod(out.shape):
            if math.prod(t.shape) != math.prod(out.shape) or not _reads_whole(op, i):
                return False
            large += 1
    return large <= 1


@dataclasses.dataclass(frozen=True)
class UnshareRecomputedProducers(Pass):
    """After elementwise fusion: a fused producer that every consumer could
    recompute (`_is_recomputed_producer`), read whole by each, gets a copy
    per consumer, and fusion runs again.

    GMM's gradient writes qx = diag (x - mu) + L (x - mu) ([50, 1000, 20] f64,
    8 MB) for its two readers, the squared norms and the scaled cotangent.
    Recomputed in both, they read L (x - mu) instead, and qx is never
    written. (measurements: benchmarks/notes/cpu-schedules.md)
    """

    name = "autodiff-unshare-recomputed-producers"
    summary = "Clone cheap fused producers per consumer so that each can fuse them again"

    enabled: bool = dataclasses.field(default=True, metadata={
        "help": "off: fused producers with several consumers are written once"})

    def run(self, module: ir.Operation) -> None:
        if not self.enabled:
            return
        for op in [o for o in post_order_ops(module) if _is_recomputed_producer(o)]:
            uses = list(op.results[0].uses)
            if len(uses) < 2 or not all(_fusable_use(u) and _reads_whole(u.owner, u.operand_number)
                                        for u in uses):
                continue
            _clone_per_use(op, uses)


@dataclasses.dataclass(frozen=True)
class PinRecomputedProducers(Pass):
    """Before elementwise fusion: give producers it would recompute a second use.

    Only producers in the entry block of a single-block public function are
    pinned (the return must see them); see "fusion control" above.
    """

    name = "autodiff-pin-recomputed-producers"
    summary = "Keep elementwise producers out of consumers that would recompute them"

    def run(self, module: ir.Operation) -> None:
        for func in public_definitions(module):
            if len(func.regions[0].blocks) != 1:
                continue
            block = func.regions[0].blocks[0]
            ret = block.operations[len(block.operations) - 1].operation
            if ret.name != "func.return":
                continue
            pinned = []
            for op in block.operations:
                op = op.operation
                if not all_parallel(op) or len(op.results) != 1:
                    continue
                use = _single_consumer(op.results[0])
                if use is not None and _recomputes(*use, op):
                    pinned.append(op.results[0])
            if pinned:
                _add_results(func, ret, pinned)


def _add_results(func: ir.OpView, ret: ir.Operation, values: Sequence[ir.Value]) -> None:
    from mlir.dialects import func as func_d

    ftype = func.attributes["function_type"].value
    with func.context, ret.location, ir.InsertionPoint(ret):
        func_d.ReturnOp([*ret.operands, *values])
    ret.erase()
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ftype.inputs), [*ftype.results, *(v.type for v in values)], func.context))
    if "res_attrs" in func.attributes:
        empty = ir.DictAttr.get({}, func.context)
        old = list(func.attributes["res_attrs"])
        func.attributes["res_attrs"] = ir.ArrayAttr.get(old + [empty] * len(values),
                                                         func.context)
    func.attributes[PINNED_RESULTS] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64, func.context), len(values))


@dataclasses.dataclass(frozen=True)
class UnpinProducers(Pass):
    """After elementwise fusion: drop the results `PinRecomputedProducers` added."""

    name = "autodiff-unpin-producers"
    summary = "Remove the extra results that kept producers from being fused"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import func as func_d

        for func in public_definitions(module):
            if PINNED_RESULTS not in func.attributes:
                continue
            n = ir.IntegerAttr(func.attributes[PINNED_RESULTS]).value
            del func.attributes[PINNED_RESULTS]
            block = func.regions[0].blocks[0]
            ret = block.operations[len(block.operations) - 1].operation
            keep = list(ret.operands)[:-n]
            with func.context, ret.location, ir.InsertionPoint(ret):
                func_d.ReturnOp(keep)
            ret.erase()
            ftype = func.attributes["function_type"].value
            func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                list(ftype.inputs), list(ftype.results)[:-n], func.context))
            if "res_attrs" in func.attributes:
                old = list(func.attributes["res_attrs"])
                func.attributes["res_attrs"] = ir.ArrayAttr.get(old[:-n], func.context)
