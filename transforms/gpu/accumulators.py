"""Accumulators in registers: a reduction loop's output element as a loop value.

A contraction or reduction that keeps the generic path (one thread per output,
`convert-linalg-to-parallel-loops`) reads and writes its output element at
every step of its reduction loop:

    scf.for %k = 0 to K {
      %acc = memref.load %C[%i, %j]
      ...
      memref.store %next, %C[%i, %j]
    }

On the GPU that is a global-memory round trip per step (the compiler cannot
keep `%C[%i, %j]` in a register: it cannot tell that no other buffer the loop
reads is the same memory). `ScalarAccumulators` carries the element through
the loop instead, read once before and written once after:

    %a0 = memref.load %C[%i, %j]
    %a = scf.for %k = 0 to K iter_args(%acc = %a0) { ...; scf.yield %next }
    memref.store %a, %C[%i, %j]

Which loops: an `scf.for` inside a parallel loop (device code), with constant
bounds and at least one iteration, without loop values, whose body loads one buffer
element at indices defined outside the loop and, later in the same block,
stores to that element, with no other access to that buffer in the loop; and
every buffer the loop touches is its own allocation or a function argument
(distinct values are distinct memory: the GPU calling convention gives each
argument a device buffer of its own). Loops are rewritten innermost first, so
a nest of reduction loops carries the element through each level. The result
is the same program with the same arithmetic in the same order.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import memref, scf

from ..ad_support import int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .support import on_host, ops_of


def _root(value: ir.Value) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        return parent is not None and parent.operation.name in ("func.func", "gpu.func")
    return owner.operation.name in ("memref.alloc", "gpu.alloc", "memref.alloca")


def _defined_outside(value: ir.Value, inside: set) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        return parent is None or parent.operation not in inside
    return owner.operation not in inside


def _in_thread_loop(op: ir.Operation) -> bool:
    """Whether the parallel loop around `op` is innermost (each of its iterations one
    thread's): the code of a row kernel's block between its thread phases runs on
    every thread of the block, its writes on one, which a carried value would split."""
    parent = op.parent
    while parent is not None and parent.name != "scf.parallel":
        parent = parent.parent
    if parent is None:
        return False
    return not any(o.name == "scf.parallel" for o in walk_ops(parent)[1:])


def _accumulator(loop: ir.Operation) -> tuple[ir.Operation, ir.Operation] | None:
    """(load, store) of the element `loop` accumulates into, or None."""
    if loop.name != "scf.for" or len(loop.results) or on_host(loop):
        return None  # host loops: their loads and stores must stay in kernels
    if not _in_thread_loop(loop):
        return None
    view = loop.opview
    lo, hi, st = (int_constant(v) for v in (view.lowerBound, view.upperBound, view.step))
    if None in (lo, hi, st) or hi <= lo or st <= 0:
        # At least one iteration, on every thread that reaches it: the element's one
        # store after the loop is then made by exactly the threads that stored in it.
        # A loop over a thread's share (from the thread index) may run no iteration
        # on some threads, which would write back a value another thread changed.
        return None
    nested = walk_ops(loop)[1:]
    inside = set(nested) | {loop}  # the loop's own induction variable is inside
    buffers = set()
    for op in nested:
        if op.name == "memref.load":
            buffers.add(op.operands[0])
        elif op.name == "memref.store":
            buffers.add(op.operands[1])
        elif op.name in ("func.call", "memref.copy", "memref.subview", "memref.cast",
                         "memref.reinterpret_cast", "memref.dealloc", "memref.alloc") or \
                op.name.startswith(("gpu.", "linalg.", "vector.")):
            return None
    if not all(_root(b) for b in buffers):
        return None
    body = ops_of(loop.regions[0].blocks[0])
    for k, load in enumerate(body):
        if load.name != "memref.load":
            continue
        ref, idx = load.operands[0], list(load.operands[1:])
        if not all(_defined_outside(v, inside) for v in idx):
            continue
        stores = [o for o in body[k + 1:] if o.name == "memref.store" and o.operands[1] == ref]
        if len(stores) != 1 or list(stores[0].operands[2:]) != idx:
            continue
        users = [o for o in nested if any(v == ref for v in o.operands)]
        if len(users) == 2:
            return load, stores[0]
    return None


def _carry(loop: ir.Operation, load: ir.Operation, store: ir.Operation) -> ir.Operation:
    view = loop.opview
    ref, idx = load.operands[0], list(load.operands[1:])
    with ir.InsertionPoint(loop), loop.location:
        init = memref.LoadOp(ref, idx).result
        new = scf.ForOp(view.lowerBound, view.upperBound, view.step, [init])
    old = loop.regions[0].blocks[0]
    old.arguments[0].replace_all_uses_with(new.induction_variable)
    load.results[0].replace_all_uses_with(new.inner_iter_args[0])
    value = store.operands[0]
    load.erase()
    store.erase()
    with ir.InsertionPoint(new.body):
        term = scf.YieldOp([value])
    for op in ops_of(old)[:-1]:
        op.move_before(term)
    with ir.InsertionPoint(loop), loop.location:  # after the new loop
        memref.StoreOp(new.results[0], ref, idx)
    loop.erase()
    return new.operation


@dataclasses.dataclass(frozen=True)
class ScalarAccumulators(_Step):
    """Reduction loops carry their output element as a loop value (see the module doc)."""

    name = "autodiff-gpu-scalar-accumulators"
    summary = "Carry a reduction loop's output element through the loop as a value"

    def apply(self, module: ir.Operation) -> None:
        # innermost first: post-order of the loops
        loops = [op for op in walk_ops(module) if op.name == "scf.for"]
        for loop in reversed(loops):
            found = _accumulator(loop)
            if found is not None:
                _carry(loop, *found)
