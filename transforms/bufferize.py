"""Bufferization steps shared by the CPU and GPU pipelines.

`BUFFERIZE` is the one-shot bufferization both pipelines run (the GPU one
adds `allow-return-allocs-from-loops` if missing). Before it:
`ElementwiseInitsToInputs` (before elementwise fusion, which miscompiles
producers that read their init) and `UnshareEmptyTensors` (before
`eliminate-empty-tensors`). After it, `BoolBuffersToBytes` stores i1 buffers
as bytes.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import tensor as tensor_d

from .ad_support import post_order_ops, walk_ops
from .diagnostics import fail
from .passes import Pass, PipelineElement, register
from .reserved_symbols import RenameReservedSymbols

BUFFERIZE = (
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}"
)


# -- the entry of both lowerings ------------------------------------------------------------


def public_functions(module: ir.Operation) -> list[ir.Operation]:
    """The module's public functions: those that meet a back end's calling convention
    (private ones are inlined into their callers by `entry_prologue`)."""
    out = []
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "func.func":
            continue
        vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
        if vis is None or ir.StringAttr(vis).value != "private":
            out.append(op)
    return out


def check_result_types(fn: ir.Operation, pass_name: str) -> list[ir.Type]:
    """A public function's result types, after a diagnostic for any the caller cannot
    allocate (a dynamic shape, an unranked type)."""
    results = list(fn.attributes["function_type"].value.results)
    for t in results:
        if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
            raise fail(fn, f"{pass_name}: result type {t} has a dynamic shape; "
                           "results must have static shapes (the caller allocates them)")
        if isinstance(t, (ir.UnrankedTensorType, ir.UnrankedMemRefType)):
            raise fail(fn, f"{pass_name}: unranked result type {t}")
    return results


def entry_prologue(check: Pass) -> list[PipelineElement]:
    """The first steps of both lowerings: `check` the input, rename user functions
    named like a routine the lowered code calls (`@sinh`, `@malloc` would capture
    those calls), inline into one body per entry point (fusion sees across the
    forward/backward functions the autodiff passes generate, and residuals never
    cross a call), clean up, and make arith/math on whole tensors linalg."""
    return [check, RenameReservedSymbols(), "inline", "symbol-dce", "canonicalize", "cse",
            "func.func(convert-elementwise-to-linalg)"]


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
        for op in post_order_ops(module):
            if op.name != "tensor.empty":
                continue
            uses = [(u.owner, u.operand_number) for u in op.results[0].uses]
            if len(uses) < 2:
                continue
            for owner, n in uses:
                if owner.name in ("scf.for", "scf.while"):
                    clone = op.clone(ip=ir.InsertionPoint(op))
                    owner.operands[n] = clone.results[0]


@dataclasses.dataclass(frozen=True)
class ContextPass(Pass):
    """A Python step of the pipeline; `apply` runs with the module's context active
    (drivers run passes without a default context)."""

    def run(self, module: ir.Operation) -> None:
        with module.context, ir.Location.unknown(module.context):
            self.apply(module)

    def apply(self, module: ir.Operation) -> None:
        raise NotImplementedError


# -- before fusion: elementwise ops read inputs, not their inits ------------------


@dataclasses.dataclass(frozen=True)
class ElementwiseInitsToInputs(ContextPass):
    """An all-parallel linalg.generic that reads its `outs` value gets it as an input.

    `dx = acc + contribution` (how derivative code accumulates into a zero
    fill) reads its init. When `linalg-fuse-elementwise-ops` fuses such a
    producer into a consumer with extra loops (a contraction), the fused op
    keeps the producer's init as one of its outputs, indexed without those
    loops, and the producer's read of it sees the value the previous
    iteration wrote: `contribution` is added once per extra iteration (a
    wrong GMM gradient, found by the CPU run of the parallel stage). Passed as
    an input, the init is a plain value: recomputing the producer per
    iteration is idempotent, the fusion is correct, and the fill fuses away.
    """

    name = "autodiff-gpu-elementwise-inits-to-inputs"
    summary = "Turn out-operand reads of elementwise linalg.generic ops into inputs"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name == "linalg.generic":
                _inits_to_inputs(op)


def _inits_to_inputs(op: ir.Operation) -> None:
    view = op.opview
    if not all("parallel" in str(a) for a in op.attributes["iterator_types"]):
        return
    ins, outs = list(view.inputs), list(view.outputs)
    if not outs or not all(isinstance(o.type, ir.RankedTensorType) for o in outs):
        return
    body = op.regions[0].blocks[0]
    out_args = list(body.arguments)[len(ins):]
    read = [k for k, arg in enumerate(out_args) if len(list(arg.uses)) > 0]
    if not read:
        return
    maps = list(op.attributes["indexing_maps"])
    in_maps, out_maps = maps[: len(ins)], maps[len(ins):]
    new_ins = ins + [outs[k] for k in read]
    with ir.InsertionPoint(op), op.location:
        new_outs = []
        for k, o in enumerate(outs):
            if k not in read:
                new_outs.append(o)
                continue
            t = o.type
            dyn = [tensor_d.dim(o, arith.constant(ir.IndexType.get(), i)) for i in range(t.rank) if t.is_dynamic_dim(i)]
            new_outs.append(tensor_d.EmptyOp(t.shape, t.element_type, dynamic_sizes=dyn).result
                            if dyn else tensor_d.EmptyOp(t.shape, t.element_type).result)
        attrs = {name: op.attributes[name] for name in _attribute_names(op)}
        attrs["indexing_maps"] = ir.ArrayAttr.get(in_maps + [out_maps[k] for k in read] + out_maps)
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([len(new_ins), len(new_outs)])
        new = ir.Operation.create(
            "linalg.generic", results=[r.type for r in op.results],
            operands=new_ins + new_outs, attributes=attrs, regions=1, loc=op.location,
        )
    arg_types = [a.type for a in body.arguments]
    new_types = (arg_types[: len(ins)] + [arg_types[len(ins) + k] for k in read]
                 + arg_types[len(ins):])
    new_body = ir.Block.create_at_start(new.regions[0], new_types,
                                        [op.location] * len(new_types))
    new_args = list(new_body.arguments)
    for i in range(len(ins)):
        body.arguments[i].replace_all_uses_with(new_args[i])
    for j, k in enumerate(read):
        out_args[k].replace_all_uses_with(new_args[len(ins) + j])
    for o in [o.operation for o in body.operations]:
        _append(new_body, o)
    for old, res in zip(op.results, new.results):
        old.replace_all_uses_with(res)
    op.erase()


def _attribute_names(op: ir.Operation) -> list[str]:
    return [a if isinstance(a, str) else a.name for a in op.attributes]


def _append(block: ir.Block, op: ir.Operation) -> None:
    op.detach_from_parent()
    block.append(op)


# -- after bufferization: i1 buffers hold one byte per element ------------------


def _byte_memref(t: ir.Type) -> ir.Type | None:
    """memref<...xi1> -> memref<...xi8> (same shape, layout, memory space), else None."""
    if not isinstance(t, ir.MemRefType):
        return None
    elem = t.element_type
    if not (isinstance(elem, ir.IntegerType) and elem.width == 1):
        return None
    return ir.MemRefType.get(t.shape, ir.IntegerType.get_signless(8), t.layout, t.memory_space)


def _int_value(x: object) -> int:
    """An element of a dense integer attribute: an IntegerAttr or already an int/bool."""
    if isinstance(x, ir.Attribute):
        return ir.IntegerAttr(x).value
    return int(x)  # type: ignore[call-overload]


def _bytes_attr(attr: ir.Attribute) -> ir.Attribute:
    """A dense i1 initializer as the equivalent dense i8 one."""
    if not isinstance(attr, ir.DenseElementsAttr):
        return attr  # uninitialized globals
    t = attr.type
    i8 = ir.IntegerType.get_signless(8)
    new_t = ir.RankedTensorType.get(t.shape, i8)
    if attr.is_splat:
        return ir.DenseElementsAttr.get_splat(
            new_t, ir.IntegerAttr.get(i8, int(bool(_int_value(attr.get_splat_value()))))
        )
    count = 1
    for d in t.shape:
        count *= d
    values = [ir.IntegerAttr.get(i8, int(bool(_int_value(attr[i])))) for i in range(count)]
    return ir.DenseElementsAttr.get(values, type=new_t)


#: Ops that neither yield a buffer nor hold a region whose block arguments could be
#: one (BoolBuffersToBytes skips their types): scalar, vector and LLVM arithmetic,
#: terminators, and the memref ops that only read or release a buffer.
_NO_BUFFER_PREFIXES = ("math.", "vector.", "llvm.", "index.", "cf.")
_NO_BUFFER_OPS = frozenset({
    "memref.dealloc", "memref.copy", "memref.dim", "memref.prefetch", "affine.apply",
    "affine.min", "affine.max", "scf.yield", "func.return", "linalg.yield", "linalg.index",
})


def _never_buffers(name: str) -> bool:
    if name.startswith("arith."):
        return name != "arith.select"  # (a select may choose between two buffers)
    return name in _NO_BUFFER_OPS or name.startswith(_NO_BUFFER_PREFIXES)


@dataclasses.dataclass(frozen=True)
class BoolBuffersToBytes(ContextPass):
    """Store i1 buffers as bytes (numpy's bool layout): `memref<Nxi1>` -> `memref<Nxi8>`.

    The LLVM lowering of memref.load/store rejects sub-byte element types
    (it asserts in this MLIR build), and they appear as soon as a program keeps
    a boolean tensor (a relu mask) or deallocation needs ownership flags.
    Loads truncate to i1, stores zero-extend.
    """

    name = "autodiff-bool-buffers-to-bytes"
    summary = "Rewrite memref<...xi1> into memref<...xi8> with trunci/extui at loads/stores"

    def apply(self, module: ir.Operation) -> None:
        i1 = ir.IntegerType.get_signless(1)
        typed: list[ir.Operation] = []  # ops whose results or block arguments may be buffers
        loads: list[ir.Operation] = []
        stores: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            name = op.name
            if name == "memref.load":
                loads.append(op)
            elif name == "memref.store":
                stores.append(op)
            elif not _never_buffers(name):
                typed.append(op)
            return ir.WalkResult.ADVANCE

        # One walk, looking only at the ops that can hold buffers: in a large
        # function most ops are arithmetic, vector or LLVM ops, whose types
        # cost a Python object each to inspect.
        module.walk(visit, ir.WalkOrder.PRE_ORDER)
        for op in typed[1:]:  # (pre-order: the first is `module` itself)
            if op.name == "memref.global":
                t = op.attributes["type"].value
                new = _byte_memref(t)
                if new is not None:
                    op.attributes["type"] = ir.TypeAttr.get(new)
                    if "initial_value" in op.attributes:
                        op.attributes["initial_value"] = _bytes_attr(
                            op.attributes["initial_value"])
                continue
            if op.name in ("func.func", "gpu.func"):
                ftype = op.attributes["function_type"].value
                ins = [_byte_memref(t) or t for t in ftype.inputs]
                outs = [_byte_memref(t) or t for t in ftype.results]
                op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ins, outs))
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.arguments:
                        new = _byte_memref(arg.type)
                        if new is not None:
                            arg.set_type(new)
            for res in op.results:
                new = _byte_memref(res.type)
                if new is not None:
                    res.set_type(new)
        for op in loads:
            if op.results[0].type == i1:
                res = op.results[0]
                res.set_type(ir.IntegerType.get_signless(8))
                with ir.InsertionPoint.after(op), op.location:
                    bit = arith.trunci(i1, res)
                res.replace_all_uses_except(bit, bit.owner.operation)
        for op in stores:
            if op.operands[0].type == i1:
                with ir.InsertionPoint(op), op.location:
                    byte = arith.extui(ir.IntegerType.get_signless(8), op.operands[0])
                op.operands[0] = byte
