"""Results in the caller's buffers: donated arguments and out-parameters.

Donation: a tensor argument marked `bufferization.writable = true` may be
overwritten; a result that bufferization places in that argument's buffer is
dropped from the signature (upstream `drop-equivalent-buffer-results`) and
listed in the function's `autodiff.result_args` (`RESULT_ARGS`), so the
caller gets its own array back (see runtime.py). `WriteResultsInPlace` lets
the other results be computed straight into the caller's out-parameters.
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from ...dialects.vocabulary import DONATED_ARGS, RESULT_ARGS
from ..ad_support import post_order_ops
from ..diagnostics import fail
from ..passes import Pass

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


def public_definitions(module: ir.Operation) -> list[ir.OpView]:
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
        for func in public_definitions(module):
            n = len(func.attributes["function_type"].value.inputs)
            donated = [i for i in range(n) if _arg_is_writable(func, i)]
            if donated:
                func.attributes[DONATED_ARGS] = ir.DenseI64ArrayAttr.get(donated, module.context)


@dataclasses.dataclass(frozen=True)
class UpdateDonatedInPlace(Pass):
    """Compute a donated elementwise update in the argument: `outs(%w)`, no materialize.

    `w - lr * g` materialized into a donated `%w` is a linalg.generic
    `ins(%w, %g) outs(tensor.empty)` and `materialize_in_destination`. Once
    the generic is tiled into scf.for loops (schedule_linalg.py), one-shot
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
        for op in post_order_ops(module):
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
        for func in public_definitions(module):
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


@dataclasses.dataclass(frozen=True)
class WriteResultsInPlace(Pass):
    """Compute results directly in the caller's out-param buffers.

    After `buffer-results-to-out-params` (run without `hoist-static-allocs`,
    which crashes on some modules in MLIR 22), each result is computed into
    a fresh `memref.alloc` and copied into its out-param at the end. For a
    large result that malloc + page faults + copy cost more than a vectorized
    kernel itself (measurements: benchmarks/notes/cpu-schedules.md). When the alloc
    sits in the function's entry block, has the out-param's type, and the
    out-param is used only by that copy, the alloc is replaced by the
    out-param and the copy dropped. The out-param is caller-allocated and
    never aliases an argument, so writing it early is safe. An alloc copied
    through a `memref.collapse_shape` (a fused elementwise op that kept unit
    dims, e.g. [64, 256, 1, 1, 128] for per-sample weight gradients) is
    replaced by the out-param expanded to its shape. Likewise through
    a `memref.expand_shape` (a result with unit dims computed without them,
    after `linalg-fold-unit-extent-dims`), by the out-param collapsed.
    """

    name = "autodiff-write-results-in-place"
    summary = "Replace result allocs copied into out-params by the out-params"

    def run(self, module: ir.Operation) -> None:
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name != "func.func" or not func.regions[0].blocks:
                continue
            entry = func.regions[0].blocks[0]
            ops = [o.operation for o in entry.operations]
            allocs = [o for o in ops if o.name == "memref.alloc"]
            # Only the copies buffer-results-to-out-params put before the return.
            tail = []
            for o in reversed(ops[:-1]):
                if o.name != "memref.copy":
                    break
                tail.append(o)
            for copy in tail:
                src, dst = copy.operands
                if not isinstance(dst, ir.BlockArgument) or dst.owner != entry:
                    continue
                if dst.type != src.type or len(list(dst.uses)) != 1:
                    continue
                if not isinstance(src, ir.OpResult):
                    continue
                owner = src.owner
                reshape = None
                if (owner.name in ("memref.collapse_shape", "memref.expand_shape")
                        and len(list(src.uses)) == 1
                        and isinstance(owner.operands[0], ir.OpResult)):
                    # The result was computed with other unit dims (fused
                    # elementwise ops keep theirs; folded unit dims drop the
                    # result's): view the out-param with those dims instead.
                    reshape, owner = owner, owner.operands[0].owner
                alloc = next((a for a in allocs if a == owner), None)
                if alloc is None:
                    continue
                copy.erase()
                if reshape is None:
                    src.replace_all_uses_with(dst)
                else:
                    _replace_by_reshaped(alloc, reshape, dst)
                allocs = [a for a in allocs if a is not alloc]
                alloc.erase()


def _replace_by_reshaped(alloc: ir.Operation, reshape: ir.Operation, dst: ir.Value) -> None:
    """Replace `alloc` (reshaped by `reshape` into `dst`'s shape) by `dst` reshaped back."""
    from mlir.dialects import memref

    t = alloc.results[0].type
    with ir.InsertionPoint(alloc), alloc.location:
        if reshape.name == "memref.collapse_shape":
            view = memref.expand_shape(t, dst, reshape.attributes["reassociation"], [],
                                       list(t.shape))
        else:
            view = memref.collapse_shape(t, dst, reshape.attributes["reassociation"])
    reshape.erase()
    alloc.results[0].replace_all_uses_with(view)
