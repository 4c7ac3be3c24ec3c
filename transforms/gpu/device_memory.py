"""Device memory: every buffer the kernels touch lives on the GPU (`DeviceMemory`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir
from mlir.dialects import gpu
from mlir.dialects import memref as memref_d

from ..ad_support import walk_ops
from ..bufferize import ContextPass as _Step
from ..diagnostics import fail
from .parallel_loops import wrap_serial
from .support import functions, identity_layout, index_const, new_parallel, on_host, ops_of


def dynamic_sizes(memref: ir.Value) -> list[ir.Value]:
    t = memref.type
    return [memref_d.dim(memref, index_const(i)) for i in range(t.rank) if t.is_dynamic_dim(i)]


def device_alloc(t: ir.MemRefType, sizes: Sequence[ir.Value]) -> ir.Value:
    return gpu.AllocOp(t, None, [], list(sizes), []).memref


def _entry_alloca(fn: ir.Operation, t: ir.MemRefType, loc: ir.Location) -> ir.Value:
    """A host stack slot at the function's entry (not in a loop: the stack would grow)."""
    with ir.InsertionPoint.at_block_begin(fn.regions[0].blocks[0]), loc:
        return memref_d.alloca(t, [], [])


def _block_terminator(block: ir.Block) -> ir.Operation:
    return ops_of(block)[-1]


@dataclasses.dataclass(frozen=True)
class DeviceMemory(_Step):
    """Put every buffer the kernels touch in device memory (see the module docstring)."""

    name = "autodiff-gpu-device-memory"
    summary = "Use gpu.alloc for buffers, copy globals to the device, stage host scalars"

    def apply(self, module: ir.Operation) -> None:
        for fn in functions(module):
            for op in list(walk_ops(fn)):
                if not on_host(op):
                    continue
                if op.name in ("memref.alloc", "memref.alloca"):
                    t = op.results[0].type
                    if not identity_layout(t):
                        raise fail(op, f"autodiff-lower-to-gpu: cannot allocate {t} on the device")
                    with ir.InsertionPoint(op), op.location:
                        dev = device_alloc(t, list(op.operands))
                    op.results[0].replace_all_uses_with(dev)
                    if op.name == "memref.alloca":
                        with ir.InsertionPoint(_block_terminator(op.block)), op.location:
                            gpu.DeallocOp(None, [], dev)
                    op.erase()
                elif op.name == "memref.dealloc":
                    with ir.InsertionPoint(op), op.location:
                        gpu.DeallocOp(None, [], op.operands[0])
                    op.erase()
                elif op.name == "memref.get_global":
                    host = op.results[0]
                    with ir.InsertionPoint.after(op), op.location:
                        dev = device_alloc(host.type, [])
                        copy = gpu.MemcpyOp(None, [], dev, host)
                    host.replace_all_uses_except(dev, copy.operation)
                    with ir.InsertionPoint(_block_terminator(op.block)), op.location:
                        gpu.DeallocOp(None, [], dev)
                elif op.name == "memref.store":
                    # Left on the host by the serial-kernel step (e.g. inside a loop
                    # with results): a one-thread kernel receives the value.
                    wrap_serial([op])
                elif op.name == "memref.load":
                    buf = op.operands[0]
                    t = op.results[0].type
                    scalar = ir.MemRefType.get([], t)
                    if buf.type == scalar:
                        # A rank-0 buffer (a reduction's result): copy it straight back.
                        host = _entry_alloca(fn, scalar, op.location)
                        with ir.InsertionPoint(op), op.location:
                            gpu.MemcpyOp(None, [], host, buf)
                            new = memref_d.load(host, [])
                        op.results[0].replace_all_uses_with(new)
                        op.erase()
                        continue
                    with ir.InsertionPoint(op), op.location:
                        dev = device_alloc(scalar, [])
                        zero, one = index_const(0), index_const(1)
                        _, _, term = new_parallel([zero], [one], [one])
                        with ir.InsertionPoint(term):
                            val = memref_d.load(buf, list(op.operands[1:]))
                            memref_d.store(val, dev, [])
                        host = _entry_alloca(fn, scalar, op.location)
                        gpu.MemcpyOp(None, [], host, dev)
                        gpu.DeallocOp(None, [], dev)
                        new = memref_d.load(host, [])
                    op.results[0].replace_all_uses_with(new)
                    op.erase()

