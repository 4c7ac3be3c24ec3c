"""Parallel loops shaped for the GPU: copies as loops, blocks x threads, serial kernels.

After bufferization every linalg op is an `scf.parallel`; these passes make
the rest of the host code that touches memory into parallel loops too
(`CopiesToLinalg`, `SerialKernels`) and tile each outermost loop into a grid
of blocks of threads (`TileParallelLoops`), ready for
`gpu-map-parallel-loops`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, linalg, scf

from ..ad_support import int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .reductions import contains_block_reduction
from .support import functions, index_const, new_parallel, on_host, ops_of

# -- step 1: copies become parallel loops --------------------------------------


@dataclasses.dataclass(frozen=True)
class CopiesToLinalg(_Step):
    """`memref.copy` on the host becomes `linalg.copy`, hence a parallel loop (a kernel)."""

    name = "autodiff-gpu-copies-to-linalg"
    summary = "Rewrite host-level memref.copy into linalg.copy"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name != "memref.copy" or not on_host(op):
                continue
            src, dst = op.operands[0], op.operands[1]
            with ir.InsertionPoint(op), op.location:
                linalg.copy(src, outs=[dst])
            op.erase()


def _parallel_bounds(loop: ir.Operation) -> tuple[list, list, list]:
    view = loop.opview
    return list(view.lowerBound), list(view.upperBound), list(view.step)



# -- step 2: tiling parallel loops into blocks x threads -----------------------


def _tile_sizes(extents: Sequence[int | None], block_size: int) -> list[int]:
    """Threads per dimension: the innermost (contiguous) dimension first, at most
    3 dimensions (the GPU's x, y, z), `block_size` threads in all."""
    tiles = [1] * len(extents)
    budget = block_size
    for k in reversed(range(len(extents))):
        if len(extents) - k > 3 or budget <= 1:
            break
        ext = extents[k]
        want = budget if ext is None else 1 << max(0, (ext - 1).bit_length())
        tiles[k] = min(want, budget)
        budget //= tiles[k]
    return tiles


def _tile_parallel_loop(loop: ir.Operation, block_size: int) -> None:
    lbs, ubs, steps = _parallel_bounds(loop)
    extents: list[int | None] = []
    for lb, ub, st in zip(lbs, ubs, steps):
        lo, hi, s = int_constant(lb), int_constant(ub), int_constant(st)
        extents.append(None if None in (lo, hi, s) else max(0, -(-(hi - lo) // s)))
    tiles = _tile_sizes(extents, block_size)
    if all(t == 1 for t in tiles):
        return
    old_body = loop.regions[0].blocks[0]
    with ir.InsertionPoint(loop), loop.location:
        new_steps = []
        for st, t in zip(steps, tiles):
            s = int_constant(st)
            if t == 1:
                new_steps.append(st)
            elif s is not None:
                new_steps.append(index_const(s * t))
            else:
                new_steps.append(arith.muli(st, index_const(t)))
        tiled = [k for k, t in enumerate(tiles) if t > 1]
        zero, one = index_const(0), index_const(1)
        sizes = [index_const(tiles[k]) for k in tiled]
        _, outer_body, outer_term = new_parallel(lbs, ubs, new_steps)
        with ir.InsertionPoint(outer_term):
            _, inner_body, inner_term = new_parallel(
                [zero] * len(tiled), sizes, [one] * len(tiled)
            )
        with ir.InsertionPoint(inner_term):
            ivs: list[ir.Value] = list(outer_body.arguments)
            guards: list[ir.Value] = []
            for j, k in enumerate(tiled):
                s = int_constant(steps[k])
                offset = inner_body.arguments[j]
                if s != 1:
                    offset = arith.muli(offset, steps[k])
                ivs[k] = arith.addi(outer_body.arguments[k], offset)
                if extents[k] is None or extents[k] % tiles[k] != 0:
                    guards.append(arith.cmpi(arith.CmpIPredicate.slt, ivs[k], ubs[k]))
            dest_term = inner_term
            if guards:
                cond = guards[0]
                for g in guards[1:]:
                    cond = arith.andi(cond, g)
                guard = scf.IfOp(cond)
                with ir.InsertionPoint(guard.then_block):
                    dest_term = scf.YieldOp([]).operation
    for old, new in zip(old_body.arguments, ivs):
        old.replace_all_uses_with(new)
    for op in ops_of(old_body)[:-1]:
        op.move_before(dest_term)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class TileParallelLoops(_Step):
    """Split each outermost `scf.parallel` into a grid loop over a block loop."""

    name = "autodiff-gpu-tile-parallel-loops"
    summary = "Tile outermost scf.parallel loops into blocks x threads"

    block_size: int = 256

    def apply(self, module: ir.Operation) -> None:
        # Block loops of block-parallel reductions (reductions.py) have their threads.
        loops = [
            op for op in walk_ops(module)
            if op.name == "scf.parallel" and on_host(op) and len(op.results) == 0
            and not contains_block_reduction(op)
            # Block loops with their thread loops (warp tiles, contractions.py).
            and not any(o.name == "scf.parallel" for o in ops_of(op.regions[0].blocks[0]))
        ]
        for loop in loops:
            _tile_parallel_loop(loop, self.block_size)


# -- step 3: host code that touches memory becomes single-thread kernels -------

_PURE_PREFIXES = ("arith.", "math.", "index.", "ub.")
_PURE_OPS = {
    "affine.apply", "affine.min", "affine.max", "memref.dim", "memref.rank", "memref.subview",
    "memref.cast", "memref.expand_shape", "memref.collapse_shape", "memref.reinterpret_cast",
    "memref.extract_strided_metadata", "memref.view",
}
_MEMORY_OPS = {"memref.load", "memref.store"}
_REGION_OPS = {"scf.for", "scf.if", "scf.while", "scf.execute_region", "scf.index_switch"}
_TERMINATORS = {"scf.yield", "scf.condition", "scf.reduce", "func.return"}


def _pure(op: ir.Operation) -> bool:
    return op.name in _PURE_OPS or (op.name.startswith(_PURE_PREFIXES) and not op.regions)


def _classify(op: ir.Operation) -> str:
    """'memory' (can run in a kernel, touches memory), 'pure' or 'barrier'."""
    if op.name in _MEMORY_OPS:
        return "memory"
    if _pure(op):
        return "pure"
    if op.name in _REGION_OPS:
        touches = False
        for inner in list(walk_ops(op))[1:]:
            if inner.name in _MEMORY_OPS:
                touches = True
            elif not (_pure(inner) or inner.name in _REGION_OPS or inner.name in _TERMINATORS):
                return "barrier"
        return "memory" if touches else "pure"
    return "barrier"


def _ancestor_in(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """The ancestor of `op` (or `op`) that sits directly in `block`, if any."""
    while op is not None and op.name != "func.func":
        if op.block == block:
            return op
        op = op.parent
    return None


def wrap_serial(run: list[ir.Operation]) -> None:
    """Move `run` (ops of one block, in order) into a one-iteration scf.parallel."""
    last = run[-1]
    with ir.InsertionPoint(last), last.location:
        zero, one = index_const(0), index_const(1)
        _, _, term = new_parallel([zero], [one], [one])
    for op in run:
        op.move_before(term)


def _serialize_block(block: ir.Block) -> None:
    run: list[ir.Operation] = []  # in reverse block order

    def flush() -> None:
        if any(_classify(o) == "memory" for o in run):
            wrap_serial(list(reversed(run)))
        run.clear()

    for op in reversed(ops_of(block)):
        kind = _classify(op)
        if kind == "barrier":
            flush()
            if op.name in _REGION_OPS or op.name == "func.func":
                for region in op.regions:
                    for inner in region.blocks:
                        _serialize_block(inner)
            continue
        used_only_in_run = all(
            _ancestor_in(use.owner.operation if isinstance(use.owner, ir.OpView)
                         else use.owner, block) in run
            for res in op.results for use in res.uses
        )
        if kind == "memory" and not op.results:
            run.append(op)
        elif op.results and run and used_only_in_run:
            run.append(op)
        elif kind == "memory":
            flush()  # e.g. a load whose value the host needs: keep memory order
    flush()


@dataclasses.dataclass(frozen=True)
class SerialKernels(_Step):
    """Host code that reads and writes buffers (outside any parallel loop) runs as a
    single-thread kernel, so that every buffer access happens on the device."""

    name = "autodiff-gpu-serial-kernels"
    summary = "Wrap host-level memory code into one-iteration scf.parallel loops"

    def apply(self, module: ir.Operation) -> None:
        for fn in functions(module):
            _serialize_block(fn.regions[0].blocks[0])

