"""`--autodiff-lower-to-cpu`: bufferize and lower to the LLVM dialect.

Calling convention (destination passing): every tensor result of a public
function becomes a trailing out-parameter memref that the caller allocates
(numpy owns it), via upstream `buffer-results-to-out-params` with static
allocations hoisted into the caller; scalar results stay results. Every
public function gets a C interface wrapper for the ExecutionEngine. Internal
temporaries are freed by `buffer-deallocation-pipeline`.

Donation: a tensor argument marked `bufferization.writable = true` may be
overwritten; a result that bufferization places in that argument's buffer
is dropped from the signature (upstream `drop-equivalent-buffer-results`)
and listed in the function's `autodiff.result_args`, so the caller gets its
own array back (see "donated arguments" below and runtime.py).

Performance (transforms/cpu_schedules.py): before bufferization, large
static linalg ops (matmul, batch_matmul, elementwise, reductions,
transposes) are tiled and vectorized by a transform-dialect schedule chosen
by shape and host vector width, with f32 exp/log/tanh replaced by polynomial
code of documented accuracy; small ops keep the plain loops (compile time).
Before that, elementwise fusion is kept from recomputing a producer inside a
consumer that does not index all of it (`PinRecomputedProducers`).
Results are computed directly in the caller's buffers where possible.
`threads=N` (off by default) distributes large kernels over N OpenMP
threads; the JIT must then load LLVM's OpenMP runtime.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from mlir import ir

from .ad_support import captured_values, defining_op, int_constant, is_inside
from .cpu_schedules import (
    LOWER_VECTORS,
    FuseRowGroups,
    GeneralizeReductions,
    OuterProductsToElementwise,
    ReciprocalOfBroadcastDivisors,
    ScheduleLinalgForCpu,
    WriteResultsInPlace,
    _contraction_maps,
    _map_dims,
    classify,
    openmp_lowering,
    rows_stay_in_registers,
)
from .diagnostics import fail
from .passes import Pass, PipelineElement, register
from .reserved_symbols import RenameReservedSymbols


@dataclasses.dataclass(frozen=True)
class CheckCpuLowerable(Pass):
    """Reject what the CPU calling convention cannot express, with a diagnostic."""

    name = "autodiff-check-cpu-lowerable"
    summary = "Check that public functions have a CPU-callable signature"

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name.startswith("autodiff.") or op.operation.name == "builtin.module":
                continue
            if op.operation.name != "func.func":
                continue
            # Private functions are inlined into their callers (the pipeline's
            # first step), so only the public ones meet the calling convention.
            vis = op.attributes.get("sym_visibility")
            if vis is not None and ir.StringAttr(vis).value == "private":
                continue
            ftype = op.attributes["function_type"].value
            for t in ftype.results:
                if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                    raise fail(
                        op,
                        f"autodiff-lower-to-cpu: result type {t} has a dynamic shape; "
                        "results must have static shapes (the caller allocates them)",
                    )
                if isinstance(t, ir.UnrankedTensorType):
                    raise fail(op, f"autodiff-lower-to-cpu: unranked result type {t}")
        for op in _walk(module):
            if op.name.startswith("autodiff."):
                raise fail(
                    op,
                    f"autodiff-lower-to-cpu: '{op.name}' must be removed by its transform pass "
                    "before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)",
                )


def _walk(module: ir.Operation) -> list[ir.Operation]:
    ops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        ops.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return ops


@dataclasses.dataclass(frozen=True)
class ExpandExpm1(Pass):
    """Rewrite scalar `math.expm1` with Kahan's accurate formula.

    Why: convert-math-to-llvm expands expm1 to exp(x) - 1, which loses every
    digit for |x| < 1e-8, and convert-math-to-libm cannot run first in this
    build (it rejects math.copysign and math.absi). With u = exp(x):
    expm1(x) = x if u == 1, -1 if u - 1 == -1, else (u - 1) * x / log(u),
    accurate to a few ulps (Kahan, "Mathematics written in sand").
    """

    name = "autodiff-expand-expm1"
    summary = "Expand math.expm1 accurately (before LLVM lowering)"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, math

        for op in _walk(module):
            if op.name != "math.expm1" or isinstance(op.results[0].type, ir.ShapedType):
                continue
            x = op.operands[0]
            t = x.type
            with ir.InsertionPoint(op), op.location:
                one = arith.constant(t, 1.0)
                u = math.exp(x)
                um1 = arith.subf(u, one)
                general = arith.divf(arith.mulf(um1, x), math.log(u))
                is_one = arith.cmpf(arith.CmpFPredicate.OEQ, u, one)
                minus_one = arith.constant(t, -1.0)
                is_m1 = arith.cmpf(arith.CmpFPredicate.OEQ, um1, minus_one)
                # exp(x) = inf: the general formula gives inf * x / inf = nan.
                is_inf = arith.cmpf(arith.CmpFPredicate.OEQ, u,
                                    arith.constant(t, float("inf")))
                out = arith.select(is_inf, u, general)
                out = arith.select(is_m1, minus_one, out)
                out = arith.select(is_one, x, out)
            op.results[0].replace_all_uses_with(out)
            op.erase()


@dataclasses.dataclass(frozen=True)
class ExpandFloatClassTests(Pass):
    """Rewrite `math.isinf` and `math.isnormal` as comparisons of |x|.

    Why: convert-math-to-llvm lowers isnan and isfinite only; the other two
    would stop the lowering. isinf(x) = |x| == inf; isnormal(x) =
    smallest normal <= |x| < inf (ordered compares: false for NaN).
    """

    name = "autodiff-expand-float-class-tests"
    summary = "Expand math.isinf and math.isnormal into arith comparisons"

    _SMALLEST_NORMAL = {"f16": 2.0 ** -14, "bf16": 2.0 ** -126, "f32": 2.0 ** -126,
                        "f64": 2.0 ** -1022}

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, math

        for op in _walk(module):
            if op.name not in ("math.isinf", "math.isnormal"):
                continue
            x = op.operands[0]
            t = x.type
            et = t.element_type if isinstance(t, ir.ShapedType) else t
            tiny = self._SMALLEST_NORMAL.get(str(et))
            if tiny is None:
                continue

            def const(v: float, t=t, et=et) -> ir.Value:
                attr = ir.FloatAttr.get(et, v)
                if isinstance(t, ir.ShapedType):
                    attr = ir.DenseElementsAttr.get_splat(t, attr)
                return arith.ConstantOp(t, attr).result

            with ir.InsertionPoint(op), op.location:
                a = math.absf(x)
                inf = const(float("inf"))
                if op.name == "math.isinf":
                    out = arith.cmpf(arith.CmpFPredicate.OEQ, a, inf)
                else:
                    out = arith.andi(arith.cmpf(arith.CmpFPredicate.OGE, a, const(tiny)),
                                     arith.cmpf(arith.CmpFPredicate.OLT, a, inf))
            op.results[0].replace_all_uses_with(out)
            op.erase()


# -- shared empty tensors ---------------------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class UnshareEmptyTensors(Pass):
    """Give a loop's init that is a shared `tensor.empty` its own op (before
    eliminate-empty-tensors).

    CSE merges equal `tensor.empty` ops, so the tapes reverse mode records in
    one loop (one `iter_args` init each) start as one value. Once
    `eliminate-empty-tensors` has made the loop body compute each saved value
    straight into its tape's row, nothing reads a tape's old contents (an
    empty tensor's are undefined), and One-Shot Bufferize places all the
    tapes in one buffer: each iteration's rows overwrite each other (measured:
    a second-order loop gradient off by 4e3). One op per loop init gives each
    tape its own buffer. Other shared empties stay shared: there elimination
    lets a chain of ops compute in one buffer.
    """

    name = "autodiff-unshare-empty-tensors"
    summary = "Clone tensor.empty ops used as loop inits, so no two loop values share a buffer"

    def run(self, module: ir.Operation) -> None:
        for op in _walk(module):
            if op.name != "tensor.empty":
                continue
            uses = [(u.owner, u.operand_number) for u in op.results[0].uses]
            if len(uses) < 2:
                continue
            for owner, n in uses:
                if owner.name in ("scf.for", "scf.while"):
                    clone = op.clone(ip=ir.InsertionPoint(op))
                    owner.operands[n] = clone.results[0]


# -- fusion control -------------------------------------------------------------------------
#
# Upstream `linalg-fuse-elementwise-ops` fuses every single-use all-parallel
# generic into its consumer, also where the consumer's loops do not all index
# the fused operand: the producer's body is then recomputed once per extra
# iteration. `tanh(x @ W1 + b1) @ W2` under vmap became one contraction
# generic computing tanh 10 times per element of the hidden layer (N = 10),
# and the contraction, no longer `acc + a * b`, lost its matmul schedule:
# 1.97 ms instead of 0.14 ms for the 64 x 256 x 128 x 10 per-sample loss.
# The pass's control function (fuse single-use producers) cannot be replaced
# from Python, so such producers get a second use for the duration of the
# pass: an extra result of their function, dropped again right after.

#: Function attribute (i64): how many trailing results `PinRecomputedProducers` added.
PINNED_RESULTS = "autodiff.pinned_results"

_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")
#: Body ops too costly to recompute per broadcast element of a parallel consumer.
_COSTLY_BODY_OPS = ("arith.divf", "arith.remf")


def _costly_body(op: ir.Operation) -> bool:
    """`op`'s body computes a transcendental or a division (costly to recompute)."""
    return any(o.operation.name.startswith("math.") or o.operation.name in _COSTLY_BODY_OPS
               for o in op.regions[0].blocks[0].operations)


def _all_parallel(op: ir.Operation) -> bool:
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
    from .cpu_schedules import _named_maps, _ranges_from_maps

    if consumer.name in ("linalg.matmul", "linalg.batch_matmul"):
        maps, reduces = _named_maps(consumer), True
    elif consumer.name == "linalg.generic":
        maps = [ir.AffineMapAttr(m).value for m in consumer.attributes["indexing_maps"]]
        reduces = not _all_parallel(consumer)
    else:
        return False
    if operand >= len(maps):
        return False
    used = {e.position for e in maps[operand].results if isinstance(e, ir.AffineDimExpr)}
    ranges = _ranges_from_maps(maps, consumer)
    missing = [d for d in range(maps[operand].n_dims) if d not in used]
    if not missing or ranges is not None and all(ranges[d] == 1 for d in missing):
        return False
    return reduces or _costly_body(producer)


#: `UnshareBroadcastProducers` clones a producer whose inputs each have at
#: most this fraction of its output's elements (a broadcast by 8 or more).
BROADCAST_MAX_INPUT_FRACTION = 1 / 8
#: Off: a broadcast producer with several consumers is written once (measurements).
UNSHARE_BROADCASTS = True


def _cheap_elementwise(op: ir.Operation, max_ops: int) -> ir.RankedTensorType | None:
    """The result type of `op` if it is an all-parallel generic with one static
    result, at most `max_ops` ops besides the yield, none costly, and a body
    that does not read its init."""
    if not _all_parallel(op) or len(op.results) != 1:
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
    not take are merged again by CSE. Measured, ADBench GMM, f64, one
    thread, variants in one process, best of 9 (ms), shared / unshared: d20
    objective 2.40 / 2.17, gradient 9.22 / 8.91; d10 gradient 1.80 / 1.70;
    MLP step and per-sample gradients unchanged, HVP 0.392 / 0.378.
    """

    name = "autodiff-unshare-broadcast-producers"
    summary = "Clone cheap broadcast producers per consumer so that each can fuse them"

    def run(self, module: ir.Operation) -> None:
        if not UNSHARE_BROADCASTS:
            return
        for op in [o for o in _walk(module) if _is_broadcast_producer(o)]:
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
#: Off: fused producers with several consumers are written once (measurements).
UNSHARE_RECOMPUTED = True


def _reads_whole(user: ir.Operation, index: int) -> bool:
    """Generic `user` reads operand `index` through a permutation of all its loops
    (each element once: fused, the producer's body runs once per element)."""
    m = ir.AffineMapAttr(user.attributes["indexing_maps"][index]).value
    dims = _map_dims([m])
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
    written. Measured, ADBench GMM gradient (f64), variants in one process,
    best of 15 (ms), shared / recomputed: d20 1T 3.77 / 3.13 (objective
    1.20), 2T 2.09 / 2.05; d10 1T 0.529 / 0.531. MLP step, HVP, LSTM
    gradient unchanged within 1%.
    """

    name = "autodiff-unshare-recomputed-producers"
    summary = "Clone cheap fused producers per consumer so that each can fuse them again"

    def run(self, module: ir.Operation) -> None:
        if not UNSHARE_RECOMPUTED:
            return
        for op in [o for o in _walk(module) if _is_recomputed_producer(o)]:
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
        for func in _public_definitions(module):
            if len(func.regions[0].blocks) != 1:
                continue
            block = func.regions[0].blocks[0]
            ret = block.operations[len(block.operations) - 1].operation
            if ret.name != "func.return":
                continue
            pinned = []
            for op in block.operations:
                op = op.operation
                if not _all_parallel(op) or len(op.results) != 1:
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

        for func in _public_definitions(module):
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


# -- donated arguments ----------------------------------------------------------------------
#
# A caller donates a tensor argument of a public function by marking it
# `bufferization.writable = true` (the runtime marks every other one false).
# One-shot bufferization may then write into that argument's buffer, and a
# result it proves *equivalent* to the argument (e.g. the result of
# `bufferization.materialize_in_destination %r in %arg`) is dropped from the
# signature by upstream `drop-equivalent-buffer-results`, so the caller gets
# its own buffer back instead of a copy in a fresh out-param. That upstream
# pass skips public functions (their callers are unknown); here the runtime
# is the caller and learns the new signature from `RESULT_ARGS`.

#: Function attribute (array<i64>): the arguments marked writable (donated).
DONATED_ARGS = "autodiff.donated_args"
#: Function attribute (array<i64>): per original result, the argument whose
#: buffer it is (dropped from the signature), or -1 (an out-parameter).
RESULT_ARGS = "autodiff.result_args"


def _public_definitions(module: ir.Operation) -> list[ir.OpView]:
    funcs = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name != "func.func" or not op.regions[0].blocks:
            continue
        vis = op.attributes.get("sym_visibility")
        if vis is None or ir.StringAttr(vis).value == "public":
            funcs.append(op)
    return funcs


def _arg_is_writable(func: ir.OpView, i: int) -> bool:
    if "arg_attrs" not in func.attributes:
        return False
    attrs = ir.DictAttr(func.attributes["arg_attrs"][i])
    return ("bufferization.writable" in attrs
            and ir.BoolAttr(attrs["bufferization.writable"]).value)


@dataclasses.dataclass(frozen=True)
class NoteDonatedArguments(Pass):
    """Record (before bufferization removes the marks) which arguments are donated."""

    name = "autodiff-note-donated-arguments"
    summary = "Tag public functions with their bufferization.writable = true arguments"

    def run(self, module: ir.Operation) -> None:
        for func in _public_definitions(module):
            n = len(func.attributes["function_type"].value.inputs)
            donated = [i for i in range(n) if _arg_is_writable(func, i)]
            if donated:
                func.attributes[DONATED_ARGS] = ir.DenseI64ArrayAttr.get(donated, module.context)


@dataclasses.dataclass(frozen=True)
class UpdateDonatedInPlace(Pass):
    """Compute a donated elementwise update in the argument: `outs(%w)`, no materialize.

    `w - lr * g` materialized into a donated `%w` is a linalg.generic
    `ins(%w, %g) outs(tensor.empty)` and `materialize_in_destination`. Once
    the generic is tiled into scf.for loops (cpu_schedules), one-shot
    analysis rejects the pair as a read-after-write conflict it cannot
    avoid (eliminate-empty-tensors makes `%w` the loops' init while the
    materialize still uses `%w` afterwards, and each tile reads `%w` from
    outside the loops). Destination passing avoids both: the generic gets
    `%w` as its init, reads `%w` through the init's block argument (each
    tile then reads and writes the same slice) and its result is returned
    directly. Bufferization still decides: in place when nothing else reads
    `%w` later, else into a copy, when the result simply is not equivalent
    to `%w` and stays an out-param. Only inputs indexed exactly like the
    output are rewritten; a generic reading `%w` any other way keeps its
    materialize. Runs after elementwise fusion, which wants the opposite
    form (ElementwiseInitsToInputs).
    """

    name = "autodiff-update-donated-in-place"
    summary = "Donated elementwise updates: the argument as init, read through it"

    def run(self, module: ir.Operation) -> None:
        for op in _walk(module):
            if op.name != "bufferization.materialize_in_destination":
                continue
            source, dest = op.operands[0], op.operands[1]
            if not isinstance(dest, ir.BlockArgument) or not isinstance(source, ir.OpResult):
                continue
            func = dest.owner.owner.operation
            if func.name != "func.func" or not _arg_is_writable(func.opview, dest.arg_number):
                continue
            result = _read_through_init(source.owner.operation, source.result_number, dest)
            if result is not None:
                op.results[0].replace_all_uses_with(result)
                op.erase()


def _read_through_init(op: ir.Operation, k: int, dest: ir.Value) -> ir.Value | None:
    """Rebuild generic `op` with `dest` as init `k`, read through it; its result `k`.

    None (nothing changed) unless `op` is all-parallel, init `k` is a
    tensor.empty and every input that is `dest` is indexed like output `k`.
    """
    if op.name != "linalg.generic" or not all(
            "parallel" in str(a) for a in op.attributes["iterator_types"]):
        return None
    ins, outs = list(op.opview.inputs), list(op.opview.outputs)
    init = outs[k]
    if not (isinstance(init, ir.OpResult) and init.owner.name == "tensor.empty"):
        return None
    maps = list(op.attributes["indexing_maps"])
    reads = [i for i, v in enumerate(ins) if v == dest]
    if any(maps[i] != maps[len(ins) + k] for i in reads):
        return None
    keep = [i for i in range(len(ins)) if i not in reads]
    body = op.regions[0].blocks[0]
    for i in reads:
        body.arguments[i].replace_all_uses_with(body.arguments[len(ins) + k])
    names = [a if isinstance(a, str) else a.name for a in op.attributes]
    attrs = {name: op.attributes[name] for name in names}
    with op.location, ir.InsertionPoint(op):
        attrs["indexing_maps"] = ir.ArrayAttr.get([maps[i] for i in keep] + maps[len(ins):])
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([len(keep), len(outs)])
        new = ir.Operation.create(
            "linalg.generic", results=[r.type for r in op.results],
            operands=[ins[i] for i in keep] + [dest if j == k else v for j, v in enumerate(outs)],
            attributes=attrs, regions=1)
    body.append_to(new.regions[0])
    for i in sorted(reads, reverse=True):
        new.regions[0].blocks[0].erase_argument(i)
    for old, res in zip(op.results, new.results):
        old.replace_all_uses_with(res)
    op.erase()
    return new.results[k]


def _result_args(func: ir.OpView) -> list[int] | None:
    """Per result: the argument it is (through memref.cast), or -1; None without one return.

    The criterion of upstream `drop-equivalent-buffer-results`, which drops
    exactly these results.
    """
    returns = [b.operations[len(b.operations) - 1] for b in func.regions[0].blocks]
    returns = [r for r in returns if r.operation.name == "func.return"]
    if len(returns) != 1:
        return None
    out = []
    for value in returns[0].operands:
        while isinstance(value, ir.OpResult) and value.owner.name == "memref.cast":
            value = value.owner.operands[0]
        is_arg = isinstance(value, ir.BlockArgument) and value.owner == func.regions[0].blocks[0]
        out.append(value.arg_number if is_arg else -1)
    return out


@dataclasses.dataclass(frozen=True)
class HideDonatingFunctions(Pass):
    """Before `drop-equivalent-buffer-results`: record what it will drop, make it eligible.

    Public functions with donated arguments become private for that one
    pass (it leaves public signatures alone) and get `RESULT_ARGS`.
    """

    name = "autodiff-hide-donating-functions"
    summary = "Record results equivalent to arguments; make donating functions private"

    def run(self, module: ir.Operation) -> None:
        for func in _public_definitions(module):
            if DONATED_ARGS not in func.attributes:
                continue
            result_args = _result_args(func)
            if result_args is None or all(a < 0 for a in result_args):
                continue
            func.attributes[RESULT_ARGS] = ir.DenseI64ArrayAttr.get(result_args, module.context)
            func.attributes["sym_visibility"] = ir.StringAttr.get("private", module.context)


@dataclasses.dataclass(frozen=True)
class RestoreDonatingFunctions(Pass):
    """After `drop-equivalent-buffer-results`: make the hidden functions public again."""

    name = "autodiff-restore-donating-functions"
    summary = "Make the functions HideDonatingFunctions hid public again"

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name != "func.func" or RESULT_ARGS not in op.attributes:
                continue
            del op.attributes["sym_visibility"]
            kept = sum(1 for a in ir.DenseI64ArrayAttr(op.attributes[RESULT_ARGS]) if a < 0)
            if len(op.attributes["function_type"].value.results) != kept:
                raise fail(op, "autodiff-lower-to-cpu: drop-equivalent-buffer-results did not "
                               "drop the results recorded in " + RESULT_ARGS)


#: Off: buffers allocated in a loop body (a row group's per-tile intermediates,
#: a scan's per-step temporaries) are allocated and freed at every
#: iteration: softmax over 4096 x 1024 f32 called malloc and free 4096 times
#: per call. Measured (Zen 5, one thread, `benchmarks/run.py`'s interleaved
#: timing, median of 9, ms), in the loop / hoisted: softmax 1.89 / 1.74;
#: ADBench LSTM l2 c1024 gradient 1.69 / 1.30, objective 0.85 / 0.81.
#: (Buffers a loop carries to its next iteration stay per-iteration.)
HOIST_LOOP_BUFFERS = True


BUFFERIZE = (
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}"
)

TO_LLVM: tuple[str, ...] = (
    # Before math-to-libm declares libm functions, which must not get wrappers.
    "func.func(llvm-request-c-wrappers)",
    "convert-linalg-to-loops",
    "lower-affine",
    "convert-scf-to-cf",
    "canonicalize",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",
    # math.ipowi/fpowi have no LLVM lowering: outline them as small functions.
    "convert-math-to-funcs",
    # Accuracy: convert-math-to-llvm would turn log1p/expm1 into
    # log(1+x)/exp(x)-1 (losing |x| < 1e-8); log1p is left to libm and expm1
    # is expanded accurately. (math-expand-ops is not used: its tanh
    # underflows to 0 for tiny x.)
    ExpandExpm1(),
    # math.clampf (upstream's expansion) and isinf/isnormal have no LLVM lowering.
    "func.func(math-expand-ops{ops=clampf})",
    ExpandFloatClassTests(),
    "convert-math-to-llvm{approximate-log1p=false}",
    "convert-math-to-libm",
    "arith-expand",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "reconcile-unrealized-casts",
)


@register
@dataclasses.dataclass(frozen=True)
class LowerToCpu(Pass):
    name = "autodiff-lower-to-cpu"
    summary = "Bufferize (results into caller-owned buffers) and lower to the LLVM dialect"

    threads: int = dataclasses.field(default=1, metadata={
        "help": "threads for large kernels (OpenMP; the JIT must load "
                "cpu_schedules.openmp_runtime_library())"})

    def expand(self) -> Sequence[PipelineElement]:
        # Shared with the GPU pipeline (imported here: lower_to_gpu imports this module).
        from .lower_to_gpu import BoolBuffersToBytes, ElementwiseInitsToInputs

        return [
            CheckCpuLowerable(),
            # A user function named like a routine the lowered code calls
            # (`@sinh`, `@malloc`) would capture those calls.
            RenameReservedSymbols(),
            # One body per entry point: fusion and scheduling see across the
            # forward/backward functions the autodiff passes generate, and
            # residuals (dynamically shaped tapes too) never cross a call.
            "inline",
            "symbol-dce",
            "canonicalize",
            "cse",
            # arith/math on whole tensors (legal MLIR, not bufferizable as is).
            "func.func(convert-elementwise-to-linalg)",
            # Unit dims (keepdims reductions: [512, 1] rows read as [512, 1, 256])
            # out of the loops: the shapes then line up for elementwise fusion
            # and row groups, without expand/collapse_shape between the ops.
            "func.func(linalg-fold-unit-extent-dims)",
            "canonicalize",
            # K = 1 contractions (per-sample weight gradients) fuse as elementwise ops.
            OuterProductsToElementwise(),
            # Reductions as generics: their elementwise producers fuse into them.
            GeneralizeReductions(),
            # Before fusion: upstream fusion miscompiles producers that read their init.
            ElementwiseInitsToInputs(),
            UnshareBroadcastProducers(),
            PinRecomputedProducers(),
            "func.func(linalg-fuse-elementwise-ops)",
            UnpinProducers(),
            "cse",  # copies of a broadcast producer that did not fuse
            UnshareRecomputedProducers(),
            PinRecomputedProducers(),
            "func.func(linalg-fuse-elementwise-ops)",
            UnpinProducers(),
            "cse",
            SumBeforeContracting(),
            MergeSiblingReductions(),
            UpdateDonatedInPlace(),
            ReciprocalOfBroadcastDivisors(),
            # Softmax-like chains through row reductions: one loop over row tiles.
            FuseRowGroups(threads=self.threads),
            # Tile + vectorize large ops (transforms/cpu_schedules.py).
            ScheduleLinalgForCpu(threads=self.threads),
            NoteDonatedArguments(),
            UnshareEmptyTensors(),
            "eliminate-empty-tensors",
            BUFFERIZE,
            # Each tile's in-place tensor.insert_slice bufferizes to a memref.copy
            # between two equal subviews: CSE makes them one value and
            # canonicalization drops the self-copy (a 64-byte memcpy per vector
            # tile of tanh(x*y+z) otherwise).
            "cse",
            # Donated arguments: results that are their buffers leave the signature
            # (canonicalize first: a loop updating a buffer in place returns its init).
            "canonicalize",
            HideDonatingFunctions(),
            "drop-equivalent-buffer-results",
            RestoreDonatingFunctions(),
            # Without hoist-static-allocs: hoisting crashes (updateReturnOps) on
            # some generated modules in MLIR 22 (the ADBench GMM gradient); the
            # cost is one copy per result at function boundaries.
            "buffer-results-to-out-params{modify-public-functions}",
            "canonicalize",
            WriteResultsInPlace(),
            *(("func.func(buffer-loop-hoisting)",) if HOIST_LOOP_BUFFERS else ()),
            "buffer-deallocation-pipeline",
            PrefetchRowTiles(),
            *openmp_lowering(self.threads)[0],
            *LOWER_VECTORS,
            *TO_LLVM[:2],  # c wrappers, linalg to loops
            BoolBuffersToBytes(),  # i1 loads/stores abort the LLVM lowering in this build
            *TO_LLVM[2:],
            *openmp_lowering(self.threads)[1],
        ]


# -- sums of contractions ---------------------------------------------------------------------
#
# Reverse mode writes a contraction's input cotangent in full and leaves it
# to the consumer to reduce it: GMM's d(means) is sum_n L_k^T dqx[k, n],
# computed as a [50, 1000, 20] batched matvec (40 MFLOP, 8 MB written and
# read back) and then summed over n. Summing is linear, so the sum can move
# to the operand that has the summed dim: L_k^T (sum_n dqx[k, n]) costs one
# pass over dqx and a [50, 20, 20] contraction.

#: Off: contractions that are summed over one of their output dims stay whole.
SUM_BEFORE_CONTRACTING = True


def _generic_maps(op: ir.Operation) -> list[list[int]] | None:
    """The loop dims each operand of generic `op` reads, or None unless every
    map is a projected permutation."""
    return _map_dims(_contraction_maps(op))


def _linear_sign(op: ir.Operation, arg: ir.Value) -> int | None:
    """If generic `op`'s body yields `out + s * arg + h` through addf/subf/negf
    only (h not reading `arg` or the init `out`), the sign s (+1 or -1)."""
    block = op.regions[0].blocks[0]
    out = block.arguments[len(block.arguments) - 1]
    coeff: dict[ir.Value, tuple[int, int]] = {arg: (1, 0), out: (0, 1)}
    for body_op in block.operations:
        body_op = body_op.operation
        terms = [coeff.get(v) for v in body_op.operands]
        if all(t is None for t in terms):
            continue
        if body_op.name == "linalg.yield":
            if len(terms) != 1 or terms[0] is None or terms[0][1] != 1 or abs(terms[0][0]) != 1:
                return None
            return terms[0][0]
        zero = (0, 0)
        if body_op.name == "arith.addf":
            a, b = (t or zero for t in terms)
            coeff[body_op.results[0]] = (a[0] + b[0], a[1] + b[1])
        elif body_op.name == "arith.subf":
            a, b = (t or zero for t in terms)
            coeff[body_op.results[0]] = (a[0] - b[0], a[1] - b[1])
        elif body_op.name == "arith.negf":
            coeff[body_op.results[0]] = (-terms[0][0], -terms[0][1])
        else:
            return None
    return None


def _is_zero_tensor(v: ir.Value) -> bool:
    """`v` is a splat +0.0 constant or a `linalg.fill` of +0.0."""
    op = defining_op(v)
    if op is None:
        return False
    if op.name == "linalg.fill":
        op = defining_op(op.operands[0])
        attr = op.attributes["value"] if op is not None and op.name == "arith.constant" else None
    elif op.name == "arith.constant":
        attr = op.attributes["value"]
        attr = attr.get_splat_value() if isinstance(attr, ir.DenseElementsAttr) \
            and attr.is_splat else None
    else:
        return False
    return (isinstance(attr, ir.FloatAttr) and attr.value == 0.0
            and not str(attr).startswith("-"))


def _only_sums(op: ir.Operation, arg: ir.Value) -> bool:
    """Generic `op`'s body reads nothing but `arg` and its init (with `_linear_sign`:
    it yields `out + s * arg`)."""
    block = op.regions[0].blocks[0]
    known = {arg, block.arguments[len(block.arguments) - 1]}
    for body_op in block.operations:
        if any(v not in known for v in body_op.operands):
            return False
        known.update(body_op.results)
    return True


@dataclasses.dataclass(frozen=True)
class _SummedContraction:
    """Reduction `red` sums contraction `con`'s result (input `index` of `red`)
    over dims `summed` of `con`, which only `con`'s input `keep` (0 or 1) lacks."""

    red: ir.Operation
    index: int
    sign: int
    con: ir.Operation
    summed: frozenset[int]
    keep: int


def _summed_contraction(red: ir.Operation) -> _SummedContraction | None:
    from .cpu_schedules import _is_mul_add

    if red.name != "linalg.generic" or len(red.results) != 1 or _all_parallel(red):
        return None
    red_maps = _generic_maps(red)
    if red_maps is None:
        return None
    iters = _iterators(red)
    n_red = len(iters)
    if sorted(red_maps[-1]) != [d for d in range(n_red) if iters[d]]:
        return None
    n_in = len(red.opview.inputs)
    block = red.regions[0].blocks[0]
    for index in range(n_in):
        con = defining_op(red.operands[index])
        if (con is None or con.name != "linalg.generic" or len(con.results) != 1
                or len(list(con.results[0].uses)) != 1 or len(con.opview.inputs) != 2
                or not _is_mul_add(con) or not _is_zero_tensor(con.operands[2])
                or not all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape
                           for v in con.operands)):
            continue
        if sorted(red_maps[index]) != list(range(n_red)):
            continue  # each element of the contraction read once
        con_maps = _generic_maps(con)
        if con_maps is None:
            continue
        # Loop d of `red` reads the contraction's result axis t, con's loop con_maps[2][t].
        to_con = {d: con_maps[2][t] for t, d in enumerate(red_maps[index])}
        summed = frozenset(to_con[d] for d in range(n_red) if not iters[d])
        users = [k for k in (0, 1) if summed & set(con_maps[k])]
        if len(users) != 1:
            continue
        sign = _linear_sign(red, block.arguments[index])
        if sign is None:
            continue
        indexed = {d for i, ds in enumerate(red_maps) if i != index for d in ds}
        if len(indexed) < n_red and not _only_sums(red, block.arguments[index]):
            continue  # the reduction without the contraction would lose a loop
        return _SummedContraction(red, index, sign, con, summed, 1 - users[0])
    return None


def _dim_map(n: int, dims: Sequence[int]) -> ir.AffineMap:
    return ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in dims])


def _iterators(op: ir.Operation) -> list[bool]:
    """Per loop of generic `op`: parallel (True) or reduction."""
    return ["parallel" in str(a) for a in op.attributes["iterator_types"]]


def _sum_before_contracting(m: _SummedContraction) -> None:
    """Rewrite `m.red` = `init + sum(s * contraction + h)`: first `init +
    contraction(kept input, s * the other input summed over m.summed)`, then
    `sum(h)` accumulated onto that. Call in the module's context."""
    from mlir.dialects import arith, linalg, tensor

    red, con = m.red, m.con
    red_maps, con_maps = _generic_maps(red), _generic_maps(con)
    par, rdc = linalg.IteratorType.parallel, linalg.IteratorType.reduction
    other = 1 - m.keep
    c_arg = red.regions[0].blocks[0].arguments[m.index]
    with ir.InsertionPoint(red), red.location:
        # 1. The other input summed over m.summed (with the sign: the
        # contraction stays `acc + a * b` for its schedule, and `acc - x` is
        # no reduction linalg's vectorizer knows).
        b = con.operands[other]
        b_dims = con_maps[other]
        kept_axes = [t for t, d in enumerate(b_dims) if d not in m.summed]
        elt = b.type.element_type
        s_init = linalg.fill(arith.constant(elt, 0.0), outs=[
            tensor.empty([b.type.shape[t] for t in kept_axes], elt)])
        s_gen = linalg.GenericOp_(
            [b], [s_init], [_dim_map(len(b_dims), range(len(b_dims))),
                            _dim_map(len(b_dims), kept_axes)],
            [rdc if d in m.summed else par for d in b_dims])
        block = s_gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            x = block.arguments[0] if m.sign > 0 else arith.negf(block.arguments[0])
            linalg.YieldOp([arith.addf(block.arguments[1], x)])
        # 2. The contraction without the summed loops, accumulated into the
        # reduction's init, in the reduction's output layout.
        loops = [d for d in range(len(_iterators(con))) if d not in m.summed]
        new = {d: i for i, d in enumerate(loops)}
        to_con = {d: con_maps[2][t] for t, d in enumerate(red_maps[m.index])}
        ins, maps = [None, None], [None, None]
        ins[m.keep], maps[m.keep] = con.operands[m.keep], [new[d] for d in con_maps[m.keep]]
        ins[other], maps[other] = s_gen.results[0], [new[b_dims[t]] for t in kept_axes]
        maps.append([new[to_con[d]] for d in red_maps[-1]])
        con_iters = _iterators(con)
        c_gen = linalg.GenericOp_(
            ins, [red.operands[len(red.operands) - 1]],
            [_dim_map(len(loops), ds) for ds in maps],
            [par if con_iters[d] else rdc for d in loops])
        block = c_gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            p, q, acc = block.arguments
            linalg.YieldOp([arith.addf(acc, arith.mulf(p, q))])
        result = c_gen.results[0]
        if not _only_sums(red, c_arg):  # else the reduction was `out + s * contraction`
            # 3. The reduction without the contraction's input; -0.0 in its
            # place (x + -0.0 folds to x; x + 0.0 does not: -0.0 + 0.0 is +0.0).
            c_arg.replace_all_uses_with(arith.constant(elt, -0.0))
            keep_in = [i for i in range(len(red.opview.inputs)) if i != m.index]
            new_red = linalg.GenericOp_(
                [red.operands[i] for i in keep_in], [result],
                [_dim_map(len(_iterators(red)), red_maps[i])
                 for i in (*keep_in, len(red_maps) - 1)],
                [par if it else rdc for it in _iterators(red)])
            old_block = red.regions[0].blocks[0]
            new_block = new_red.regions[0].blocks[0]  # arguments: kept inputs, init
            kept_args = [a for i, a in enumerate(old_block.arguments) if i != m.index]
            for a, na in zip(kept_args, new_block.arguments):
                a.replace_all_uses_with(na)
            for body_op in list(old_block.operations):
                new_block.append(body_op.operation)
            result = new_red.results[0]
    red.results[0].replace_all_uses_with(result)
    red.erase()
    init = con.operands[2]
    con.erase()
    _erase_if_unused(init)


def _erase_if_unused(v: ir.Value) -> None:
    """Erase the op defining `v` (a fill, an empty tensor, a constant) and, in
    turn, its operands' producers, while they have no other use."""
    op = defining_op(v)
    if (op is None or op.name not in ("linalg.fill", "tensor.empty", "arith.constant")
            or list(op.results[0].uses)):
        return
    operands = list(op.operands)
    op.erase()
    for w in operands:
        _erase_if_unused(w)


@dataclasses.dataclass(frozen=True)
class SumBeforeContracting(Pass):
    """After elementwise fusion: `sum_n (out + s * (A . B)[..n..] + h)`, with n
    a dim of B but not of A, becomes `sum_n (out + h) + A . (sum_n s * B)`:
    the reduction moves in front of the contraction (see "sums of
    contractions" above). Measured, ADBench GMM gradient (f64), variants in
    one process, interleaved, best of 9 (ms), on / off: d20 1T 3.34 / 4.11
    (objective 1.14), 2T 2.09 / 2.70; d10 1T 0.563 / 0.634. Results agree
    to 1.5e-15 (relative)."""

    name = "autodiff-sum-before-contracting"
    summary = "Sum a contraction's operand instead of its result where a reduction sums it"

    def run(self, module: ir.Operation) -> None:
        if not SUM_BEFORE_CONTRACTING:
            return
        with module.context:
            for op in _walk(module):
                m = _summed_contraction(op)
                if m is not None:
                    _sum_before_contracting(m)


# -- sibling reductions ------------------------------------------------------------------------
#
# Reverse mode sums one cotangent over the same dim for every input it flows
# to: GMM's gradient sums dqx[k, n, d] over the points three times, times
# different factors (for the means, twice, and for the diagonal), three
# passes over the same 8 MB. Merged into one generic with three results,
# one pass reads it (see `_schedule_outer_reduction` for its schedule).

#: Off: sibling outer reductions stay separate ops.
MERGE_SIBLING_REDUCTIONS = True


def _sibling_key(op: ir.Operation) -> tuple[str, str, str, int] | None:
    """What two mergeable outer reductions share: loop ranges, iterators, the
    result map and the element width; None unless `op` is an outer reduction
    `classify` takes (with every result in that one map)."""
    if op.name != "linalg.generic":
        return None
    c = classify(op)
    if c is None or c.kind != "outer_reduction" or not rows_stay_in_registers(c):
        return None  # merged, it would not be scheduled any better
    n_out = len(op.results)
    out_maps = {str(m) for m in list(op.attributes["indexing_maps"])[len(op.operands) - n_out:]}
    if len(out_maps) != 1:
        return None
    return str(c.ranges), str(op.attributes["iterator_types"]), out_maps.pop(), c.width


def _whole_inputs(op: ir.Operation) -> set[tuple[ir.Value, str]]:
    """Inputs of generic `op` read in full at every step (their map names every loop)."""
    n_in = len(op.operands) - len(op.results)
    maps = list(op.attributes["indexing_maps"])
    n_loops = len(op.attributes["iterator_types"])
    out = set()
    for v, m in zip(list(op.operands)[:n_in], maps):
        dims = _map_dims([ir.AffineMapAttr(m).value])
        if dims is not None and len(set(dims[0])) == n_loops:
            out.add((v, str(m)))
    return out


def _in_block(op: ir.Operation, block_ops: dict[ir.Operation, int]) -> int | None:
    """Position of `op`'s ancestor among `block_ops`, or None."""
    while op is not None and op not in block_ops:
        parent = op.parent
        op = parent if parent is not None and parent.name != "builtin.module" else None
    return None if op is None else block_ops[op]


def _reads_result_of(op: ir.Operation, earlier: ir.Operation,
                     block_ops: dict[ir.Operation, int], skip_init: bool) -> bool:
    """`op` (its operands, and values its body captures) depends on `earlier`'s
    results, through ops of the block after `earlier`. With `skip_init`, `op`'s
    own inits are not followed."""
    start = block_ops[earlier]
    seen: set[ir.Operation] = set()
    n_in = len(op.operands) - len(op.results)
    stack = [v for i, v in enumerate(op.operands) if not (skip_init and i >= n_in)]
    stack += captured_values(op)
    while stack:
        owner = defining_op(stack.pop())
        pos = None if owner is None else _in_block(owner, block_ops)
        if pos is None or pos < start or owner in seen:
            continue
        if pos == start:
            return True
        seen.add(owner)
        stack += [*owner.operands, *captured_values(owner)]
    return False


def _zero_init_sum(op: ir.Operation, at: ir.Operation) -> ir.Value | None:
    """If `op` sums (combiner addf) onto one init, give it a +0 init (made
    before `at`) instead and return the old one, to be added to the sum
    afterwards; else None."""
    from mlir.dialects import arith, linalg, tensor

    block = op.regions[0].blocks[0]
    yielded = block.operations[len(block.operations) - 1].operands[0]
    if len(op.results) != 1 or isinstance(yielded.owner, ir.Block) \
            or yielded.owner.name != "arith.addf":
        return None
    init = op.operands[len(op.operands) - 1]
    t = init.type
    with ir.InsertionPoint(at), op.location:
        zero = linalg.fill(arith.constant(t.element_type, 0.0),
                           outs=[tensor.empty(t.shape, t.element_type)])
    op.operands[len(op.operands) - 1] = zero
    return init


def _add_init_after(op: ir.Operation, init: ir.Value) -> None:
    """Readers of `op`'s result read `init + result` instead (computed right after `op`)."""
    from mlir.dialects import arith, linalg, tensor

    result = op.results[0]
    t = result.type
    n = t.rank
    par = linalg.IteratorType.parallel
    with ir.InsertionPoint.after(op), op.location:
        gen = linalg.GenericOp_([init, result], [tensor.empty(t.shape, t.element_type)],
                                [_dim_map(n, range(n))] * 3, [par] * n)
        block = gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.addf(block.arguments[0], block.arguments[1])])
    total = gen.results[0]
    for use in list(result.uses):
        if use.owner != gen.operation:
            use.owner.operands[use.operand_number] = total


def _merge_reductions(a: ir.Operation, b: ir.Operation, at: ir.Operation) -> None:
    """One generic computing `a`'s results then `b`'s, placed before `at`."""
    from mlir.dialects import linalg

    maps = list(a.attributes["indexing_maps"]), list(b.attributes["indexing_maps"])
    n_in = [len(op.operands) - len(op.results) for op in (a, b)]
    ins: list[tuple[ir.Value, str]] = []
    in_maps: list[ir.AffineMap] = []
    arg_of: list[list[int]] = [[], []]
    for k, op in enumerate((a, b)):
        for v, m in zip(list(op.operands)[:n_in[k]], maps[k]):
            key = (v, str(m))
            if key not in ins:
                ins.append(key)
                in_maps.append(ir.AffineMapAttr(m).value)
            arg_of[k].append(ins.index(key))
    outs = list(a.operands)[n_in[0]:] + list(b.operands)[n_in[1]:]
    out_maps = [ir.AffineMapAttr(m).value for k in (0, 1) for m in maps[k][n_in[k]:]]
    par, rdc = linalg.IteratorType.parallel, linalg.IteratorType.reduction
    with ir.InsertionPoint(at), b.location:
        merged = linalg.GenericOp_([v for v, _ in ins], outs, in_maps + out_maps,
                                   [par if p else rdc for p in _iterators(b)])
    block = merged.regions[0].blocks[0]
    out_arg = len(ins)
    yields: list[ir.Value] = []
    for k, op in enumerate((a, b)):
        old = op.regions[0].blocks[0]
        args = list(old.arguments)
        for i, arg in enumerate(args[:n_in[k]]):
            arg.replace_all_uses_with(block.arguments[arg_of[k][i]])
        for arg in args[n_in[k]:]:
            arg.replace_all_uses_with(block.arguments[out_arg])
            out_arg += 1
        body = list(old.operations)
        yields += list(body[-1].operands)
        for body_op in body[:-1]:
            block.append(body_op.operation)
    with ir.InsertionPoint(block), b.location:
        linalg.YieldOp(yields)
    for old_result, new in zip([*a.results, *b.results], merged.results):
        old_result.replace_all_uses_with(new)
    a.erase()
    b.erase()


def _try_merge(a: ir.Operation, b: ir.Operation, block_ops: dict[ir.Operation, int]) -> bool:
    """Merge sibling reduction `b` into the earlier `a` if their results and
    inputs allow one place for both: `b`'s place when nothing between them
    reads `a`, else `a`'s place when `b` reads nothing made after `a` (an
    init made after `a`, e.g. a sum `a` flows into, is then added after)."""
    if _reads_result_of(b, a, block_ops, skip_init=True):
        return False
    pos_a, pos_b = block_ops[a], block_ops[b]
    uses = [_in_block(getattr(u.owner, "operation", u.owner), block_ops)
            for r in a.results for u in r.uses]
    if not any(p is not None and p < pos_b for p in uses) \
            and not _reads_result_of(b, a, block_ops, skip_init=False):
        _merge_reductions(a, b, b)
        return True
    n_in = len(b.operands) - len(b.results)
    values = list(b.operands)[:n_in] + captured_values(b)
    constants = []
    for v in values:
        owner = defining_op(v)
        pos = None if owner is None else _in_block(owner, block_ops)
        if pos is None or pos == pos_b or pos < pos_a:
            continue  # a block argument, made in `b`'s own body, or before `a`
        if owner.name != "arith.constant":
            return False
        constants.append(owner)  # moved in front of `a`
    init = b.operands[len(b.operands) - 1]
    owner = defining_op(init)
    pos = None if owner is None else _in_block(owner, block_ops)
    if pos is not None and pos >= pos_a:
        old_init = _zero_init_sum(b, a)
        if old_init is None:
            return False
        _add_init_after(b, old_init)
    for c in constants:
        c.move_before(a)
    _merge_reductions(a, b, a)
    return True


def _merge_siblings_in(block: ir.Block) -> None:
    changed = True
    while changed:
        changed = False
        ops = [op.operation for op in block.operations]
        block_ops = {op: i for i, op in enumerate(ops)}
        keys = {op: _sibling_key(op) for op in ops}
        for i, a in enumerate(ops):
            if keys[a] is None:
                continue
            shared = _whole_inputs(a)
            for b in ops[i + 1:]:
                if keys[b] == keys[a] and shared & _whole_inputs(b) \
                        and _try_merge(a, b, block_ops):
                    changed = True
                    break
            if changed:
                break


@dataclasses.dataclass(frozen=True)
class MergeSiblingReductions(Pass):
    """Outer reductions over the same loops that read one whole operand
    become one generic with several results: one pass over that operand.
    A sum whose init another of them flows into starts from +0 and has its
    init added after. Measured, ADBench GMM gradient (f64; its three sums
    over points of dqx become one), `benchmarks/run.py`'s interleaved
    timing, median of 9 (ms), off / on: d20 1T 3.05 / 2.93, d10 1T 0.503 /
    0.465 (objectives unchanged); best of 15, d20 2T 2.57 / 2.32. Results
    agree to 1.5e-15 (relative)."""

    name = "autodiff-merge-sibling-reductions"
    summary = "Merge outer reductions that read the same operand into one multi-result generic"

    def run(self, module: ir.Operation) -> None:
        if not MERGE_SIBLING_REDUCTIONS:
            return
        with module.context:
            for op in _walk(module):
                if op.name == "func.func" and len(op.regions[0].blocks) == 1:
                    _merge_siblings_in(op.regions[0].blocks[0])


# -- prefetching row tiles ------------------------------------------------------------------------
#
# A row group (softmax) reads each row tile from memory in its first pass
# (the max) and then works on it in L1 for three more passes; while those
# run, nothing asks memory for the next tile, and the next max pass stalls.
# Each iteration prefetches the tiles the next one reads.

#: Row tiles ahead of the current one that each iteration prefetches (0:
#: off). Measured (Zen 5, one thread, `benchmarks/run.py`'s interleaved
#: timing, median of 9, ms), softmax over 4096 x 1024 f32 (4 KB tiles),
#: 0 / 1 / 2 tiles ahead: 1.88 / 1.65 / 1.81; the MLP loss and step, the
#: HVP and the LSTM gradient unchanged (within 0.5%). Prefetching the
#: written tiles too (for writing) made no difference.
PREFETCH_TILES_AHEAD = 1

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


def _prefetch_tile(loop: ir.OpView, view: ir.OpView) -> None:
    """At the top of `loop`'s body, prefetch the tile that subview `view`
    reads PREFETCH_TILES_AHEAD iterations later (the last tile, past the end):
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
        ahead = arith.minsi(arith.addi(iv, arith.constant(index, step * PREFETCH_TILES_AHEAD)),
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


def _prefetch_row_loop(loop: ir.OpView) -> None:
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
        _prefetch_tile(loop, op)


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

    def run(self, module: ir.Operation) -> None:
        if not PREFETCH_TILES_AHEAD:
            return
        from .cpu_schedules import ROW_LOOP_ATTR

        with module.context:
            for op in _walk(module):
                if op.name == "scf.for" and ROW_LOOP_ATTR in op.attributes:
                    _prefetch_row_loop(op.opview)
