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

