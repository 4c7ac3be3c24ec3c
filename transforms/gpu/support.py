"""IR helpers the GPU lowering passes share: functions, host code, parallel loops."""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, scf

from ..ad_support import walk_ops


def functions(module: ir.Operation) -> list[ir.Operation]:
    """The `func.func` definitions (with a body) at the top level of `module`."""
    return [
        op.operation
        for op in module.regions[0].blocks[0].operations
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) > 0
    ]


def _inside(op: ir.Operation, names: tuple[str, ...]) -> bool:
    """Whether an ancestor of `op` (below its function) is one of `names`."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name in names:
            return True
        parent = parent.parent
    return False


def on_host(op: ir.Operation) -> bool:
    """Whether `op` runs on the host: not inside a parallel loop, launch or kernel."""
    return not _inside(op, ("scf.parallel", "gpu.launch", "gpu.func", "gpu.module"))


def host_blocks(module: ir.Operation) -> list[ir.Block]:
    """The blocks of host code: those of functions and of host-side scf regions (the
    places where a sequence of parallel loops may become fewer kernels)."""
    blocks = []
    for op in walk_ops(module):
        if op.name in ("func.func", "scf.for", "scf.if", "scf.while",
                       "scf.execute_region") and on_host(op):
            for region in op.regions:
                blocks.extend(region.blocks)
    return blocks


def ops_of(block: ir.Block) -> list[ir.Operation]:
    """The ops of `block`, in order, as `ir.Operation`s."""
    return [o.operation for o in block.operations]


def identity_layout(t: ir.MemRefType) -> bool:
    """Whether memref type `t` is dense and row-major (the identity layout)."""
    layout = t.layout
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    return layout.value == ir.AffineMap.get_identity(t.rank)


def index_const(value: int) -> ir.Value:
    """An `arith.constant` of index type at the current insertion point."""
    return arith.constant(ir.IndexType.get(), value)


def new_parallel(lbs: Sequence[ir.Value], ubs: Sequence[ir.Value],
                 steps: Sequence[ir.Value]) -> tuple[ir.Operation, ir.Block, ir.Operation]:
    """Create `scf.parallel` at the current insertion point: (op, body, terminator)."""
    loop = scf.ParallelOp([], list(lbs), list(ubs), list(steps), [])
    body = ir.Block.create_at_start(loop.regions[0], [ir.IndexType.get()] * len(lbs))
    with ir.InsertionPoint(body):
        term = scf.ReduceOp([], 0)
    return loop.operation, body, term.operation

