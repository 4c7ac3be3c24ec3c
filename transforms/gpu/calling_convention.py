"""The GPU calling convention: what public functions may be, out-parameters, host wrappers.

`CheckGpuLowerable` rejects what the convention cannot express and records
each function's out-parameters (its former tensor results);
`DistinctReturnBuffers` prepares `buffer-results-to-out-params`;
`HostWrappers` gives each public `@f` a wrapper over host memrefs that copies
the arguments to the device and the out-parameters back around `@f_on_device`.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import func as func_d
from mlir.dialects import gpu

from ...dialects.vocabulary import GPU_NUM_OUTPUTS as NUM_OUTPUTS_ATTR
from ...dialects.vocabulary import PREFIX
from ..ad_support import unique_symbol, walk_ops
from ..bufferize import ContextPass as _Step
from ..bufferize import check_result_types, public_functions
from ..diagnostics import fail
from .device_memory import device_alloc, dynamic_sizes
from .support import functions, identity_layout

#: The public wrapper `@f` calls the original body renamed `@f` + this suffix.
DEVICE_SUFFIX = "_on_device"


@dataclasses.dataclass(frozen=True)
class DistinctReturnBuffers(_Step):
    """Give every returned buffer of a function its own allocation.

    Why: upstream buffer-results-to-out-params{hoist-static-allocs} segfaults
    (updateReturnOps) when a function returns one buffer twice, which the
    derivative code does (both cotangents of `x + y` are the output's). A
    later duplicate becomes a fresh allocation holding a copy.
    """

    name = "autodiff-distinct-return-buffers"
    summary = "Copy buffers a function returns more than once into fresh allocations"

    def apply(self, module: ir.Operation) -> None:
        from mlir.dialects import func as func_d
        from mlir.dialects import memref

        for fn in module.regions[0].blocks[0].operations:
            if fn.operation.name != "func.func" or not fn.regions[0].blocks:
                continue
            for block in fn.regions[0].blocks:
                ret = list(block.operations)[-1]
                if ret.operation.name != "func.return":
                    continue
                values = list(ret.operands)
                seen: set = set()
                changed = False
                for i, v in enumerate(values):
                    if not isinstance(v.type, ir.MemRefType):
                        continue
                    if v in seen and v.type.has_static_shape:
                        with ir.InsertionPoint(ret), ret.location:
                            fresh = memref.alloc(v.type, [], [])
                            memref.copy(v, fresh)
                        values[i] = fresh
                        changed = True
                    seen.add(v)
                if changed:
                    with ir.InsertionPoint(ret), ret.location:
                        func_d.ReturnOp(values)
                    ret.operation.erase()


# -- step 0: what the GPU calling convention cannot express --------------------


@dataclasses.dataclass(frozen=True)
class CheckGpuLowerable(_Step):
    """Reject what the pipeline cannot lower; record each function's out-parameters."""

    name = "autodiff-check-gpu-lowerable"
    summary = "Check public function signatures and record how many results become out-params"

    def apply(self, module: ir.Operation) -> None:
        for op in walk_ops(module):
            if op.name.startswith(PREFIX):
                raise fail(
                    op,
                    f"autodiff-lower-to-gpu: '{op.name}' must be removed by its transform pass "
                    "before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)",
                )
            if op.name.startswith("gpu."):
                raise fail(op, f"autodiff-lower-to-gpu: input already contains '{op.name}'; "
                               "the pipeline expects tensor programs")
        for fn in public_functions(module):  # private ones are inlined into their callers
            outputs = 0
            for t in check_result_types(fn, "autodiff-lower-to-gpu"):
                if isinstance(t, ir.MemRefType):
                    raise fail(fn, f"autodiff-lower-to-gpu: memref result type {t}; "
                                   "functions take and return tensors")
                if isinstance(t, ir.RankedTensorType):
                    outputs += 1
            fn.attributes[NUM_OUTPUTS_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), outputs
            )


# -- step 5: public functions take host memory ---------------------------------


@dataclasses.dataclass(frozen=True)
class HostWrappers(_Step):
    """Each public `@f` becomes a wrapper over host memrefs around `@f_on_device`."""

    name = "autodiff-gpu-host-wrappers"
    summary = "Copy arguments to the device and out-parameters back around each public function"

    def apply(self, module: ir.Operation) -> None:
        for fn in functions(module):
            vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
            if vis is not None and ir.StringAttr(vis).value != "public":
                continue
            name = ir.StringAttr(fn.attributes["sym_name"]).value
            ftype = fn.attributes["function_type"].value
            n_out = 0
            if NUM_OUTPUTS_ATTR in fn.attributes:
                n_out = ir.IntegerAttr(fn.attributes[NUM_OUTPUTS_ATTR]).value
            inputs = list(ftype.inputs)
            for t in inputs:
                if isinstance(t, ir.MemRefType) and not identity_layout(t):
                    raise fail(fn, f"autodiff-lower-to-gpu: argument type {t} of @{name} "
                                   "has a non-identity layout")
            device_name = unique_symbol(module, name + DEVICE_SUFFIX)
            ir.SymbolTable.replace_all_symbol_uses(name, device_name, module)
            fn.attributes["sym_name"] = ir.StringAttr.get(device_name)
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            out_start = len(inputs) - n_out
            with ir.InsertionPoint(fn), fn.location:
                wrapper = func_d.FuncOp(name, ftype)
                wrapper.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
                body = wrapper.add_entry_block()
                with ir.InsertionPoint(body):
                    args, devs = [], []
                    for i, (arg, t) in enumerate(zip(body.arguments, inputs)):
                        if not isinstance(t, ir.MemRefType):
                            args.append(arg)
                            continue
                        dev = device_alloc(t, dynamic_sizes(arg))
                        if i < out_start:
                            gpu.MemcpyOp(None, [], dev, arg)
                        args.append(dev)
                        devs.append((i, arg, dev))
                    call = func_d.CallOp(list(ftype.results), device_name, args)
                    for i, arg, dev in devs:
                        if i >= out_start:
                            gpu.MemcpyOp(None, [], arg, dev)
                    for _, _, dev in devs:
                        gpu.DeallocOp(None, [], dev)
                    func_d.ReturnOp(list(call.results))
            # Keep the module order readable: wrapper after the device function.
            wrapper.operation.move_after(fn)



@dataclasses.dataclass(frozen=True)
class HostLoopAllocaScopes(_Step):
    """Every host loop iteration frees the stack it allocated.

    Why: each `gpu.launch_func` becomes stack allocations of its argument
    array at the launch (gpu-to-llvm), and a stack allocation in a loop body
    is freed only when the function returns. A host loop that launches
    kernels on every iteration (an LSTM's 1024 time steps, ~56000 launches
    for its gradient) grew the stack by their sum and overflowed the
    caller's 8 MiB stack (a segmentation fault). Each iteration now saves
    the stack pointer first and restores it last (llvm.intr.stacksave /
    stackrestore: `memref.alloca_scope` cannot hold the blocks that
    convert-scf-to-cf makes of an `scf.if` in the body).
    A body that allocates on the stack itself (`memref.alloca`) is left
    alone: such memory may be yielded to the next iteration.
    """

    name = "autodiff-gpu-host-loop-alloca-scopes"
    summary = "Free each host loop iteration's stack allocations (kernel launch arguments)"

    def apply(self, module: ir.Operation) -> None:
        loops: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in ("gpu.module", "gpu.launch", "scf.parallel"):
                return ir.WalkResult.SKIP
            if op.name in ("scf.for", "scf.while"):
                loops.append(op)
            return ir.WalkResult.ADVANCE

        for fn in functions(module):
            fn.walk(visit, ir.WalkOrder.PRE_ORDER)
        for loop in loops:
            for region in loop.regions:
                _scope_block(region.blocks[0])


def _contains(block: ir.Block, names: tuple[str, ...]) -> bool:
    """Whether an op of `block`, or nested in one, is named one of `names`."""
    found = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if op.name in names:
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    for op in block.operations:
        op.operation.walk(visit)
        if found:
            return True
    return False


def _scope_block(block: ir.Block) -> None:
    """Save the stack pointer at the start of `block` and restore it before its
    terminator, so the stack allocations one execution of the block makes are freed."""
    ops = [o.operation for o in block.operations]
    if len(ops) < 2 or not _contains(block, ("gpu.launch_func", "func.call")) \
            or _contains(block, ("memref.alloca",)):
        return
    ptr = ir.Type.parse("!llvm.ptr")
    with ops[0].location, ir.InsertionPoint(ops[0]):
        saved = ir.Operation.create("llvm.intr.stacksave", results=[ptr]).result
    with ops[-1].location, ir.InsertionPoint(ops[-1]):
        ir.Operation.create("llvm.intr.stackrestore", operands=[saved])
