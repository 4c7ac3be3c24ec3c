"""Contractions as tiles of blocks: tensor cores for f16/bf16, register tiles for f32.

`WarpTileContractions` (parallel stage, on buffers, before the generic
conversion to parallel loops) rewrites a contraction `linalg.generic` (a
matmul, a batch matmul, or what AD produces: either operand transposed,
the inputs in either order) whose output is a multiple of 64 x 64 and whose
reduced extent is a multiple of 16 into a grid of output tiles, one per
block. The fill that initialises the output (zero, for a matmul) folds
into the accumulators: no fill kernel, no read of the output.

f16 and bf16 operands (f32 accumulators; f16 also f16), sm_80 and newer: a
`Tile` is a block of warps, each warp owning a sub-tile of 16 x 8
accumulator fragments kept in registers across the reduction: `LARGE`
(128 x 128 of four 64 x 64 warps, 32 reduced elements per staged step,
three steps in flight) where the output has at least `LARGE_MIN_TILES` of
them, else `SMALL` (64 x 64 of four 32 x 32 warps, 16 per step, two):

    scf.parallel (%b..., %i, %j) step (1..., BM, BN) {              // blocks
      scf.parallel (%w) = (0) to (warps) {                          // warps
        scf.for %k = 0 to K step stage_k iter_args(acc[f] = fill) {
          (for each 16-element mma step of the staged step)
          a = vector.transfer_read A[...]        (16x16, transposed map if A is k x m)
          b = vector.transfer_read B[...]        (16x8,  transposed map if B is n x k)
          acc[f] = vector.contract(a, b, acc[f])
        }
        vector.transfer_write epilogue?(acc[f]), C[...]
      }
    }

On the CPU (the `parallel` stage the tests run) the warp loop runs once per
warp: the program there is the contraction itself, with the tiling, the
transposes and the batch indexing exercised. The kernel stage then gives
each warp 32 lanes (`WarpsToLanes`: thread and block ids read directly, so
that the tile's index math stays `affine.apply`, which the vector-to-nvgpu
conversion takes in its slices where it rejects arith ops) and, after
kernel outlining, `WarpTilesToMmaSync` stages the block's A and B tiles
through shared memory, `stages` steps in flight (`nvgpu.device_async_copy`,
cp.async 16-byte chunks, one commit group per step, rows padded against
bank conflicts, dynamic shared memory past 48 KB; see
`_stage_through_shared_memory`), and runs upstream's
`convert-vector-to-gpu{use-nvgpu}` on those kernels: `nvgpu.ldmatrix`
(`.trans` for transposed reads; a k-major A fragment's matrices reordered
after it, `_order_transposed_a_fragments`) and `nvgpu.mma.sync` m16n8k16.
MLIR 22's mma.sync lowering knows f16 fragments only, so bf16 tiles are read
as f16 (the same bits, from an f16 view of the tile) and `Bf16MmaOperands`
retypes the `nvvm.mma.sync` ops to bf16 after the NVVM lowering (the
fragment layouts of the two types are the same). An f32 contraction of
f16/bf16 values the front end widened (`extf` kernels) reads the 16-bit
buffers instead: the products are exact in f32. An elementwise op right
after the contraction whose only input is its output (the bf16 conversion
of a bf16 matmul, an activation) runs on the accumulators: at the parallel
stage on the vector fragments, in the kernel on each lane's values after the
mma lowering (`_EpilogueChain`), the output temporary gone when nothing else
reads it.

f32 operands: 16 x 16 threads per block, each accumulating a 4 x 4 register
tile in f32 (no tf32), the reduction in steps of 16 whose A and B tiles the
threads copy into shared memory (k-major, 4 elements each) between barriers
(`_stage_simt`, kernel stage).

Which contractions: one output, two inputs, `acc + ext?(a) * ext?(b)` in
the body, static shapes, dense row-major buffers (aligned 16-byte copies),
an output no input aliases, the reduction dimension innermost (tensors.py
puts it there), the output indexed by the parallel dimensions in order; the
last two parallel dimensions are the output's rows and columns, at most one
before them a batch dimension both inputs share. Other contractions keep
the generic path (one thread per output).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence

from mlir import ir
from mlir.dialects import affine as affine_d
from mlir.dialects import arith, memref, nvgpu, scf, vector
from mlir.dialects import gpu as gpu_d

from ...dialects.vocabulary import (
    GPU_BF16_MMA,
    GPU_DYNAMIC_SHARED,
    GPU_MMA_TILE,
    GPU_SIMT_TILE,
    GPU_TILE_EPILOGUE,
    GPU_TILE_READ,
    GPU_WARP_LOOP,
)
from ..ad_support import int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .reductions import _GRID, _ROW, _base, _has_views, _region
from .support import identity_layout, index_const, new_parallel, on_host, ops_of

#: Output tile per block (rows, columns), warps per block (rows x columns),
#: mma fragment shape (m, n, k) and the reduced elements staged per step: the
#: f32 register tiles' and the small tensor-core tiles' (`SMALL`).
BLOCK_M, BLOCK_N = 64, 64
WARPS_M, WARPS_N = 2, 2
FRAG_M, FRAG_N, FRAG_K = 16, 8, 16
STAGE_K = 16
WARPS = WARPS_M * WARPS_N
#: Marks the warp loop (one iteration per warp until WarpsToLanes; array<i32>: the tile).
WARP_ATTR = GPU_WARP_LOOP
#: Marks a gpu.module whose f16-typed mma.sync ops compute on bf16 values.
BF16_ATTR = GPU_BF16_MMA
#: Marks the reduction loop of a warp-tiled contraction (for the staging pass;
#: array<i32>: the tile).
TILE_ATTR = GPU_MMA_TILE

_MIN_SM = 80


#: Halves of padding after each row of a staged tile: rows 16 bytes apart in the
#: banks, so the 8 rows an ldmatrix reads (16 bytes each) hit 8 different banks.
PAD = 8
#: Static shared memory a kernel may use without opting in to more: tiles that need
#: more take it as dynamic shared memory (the launch names the size; the runtime
#: opts the kernel in, up to the chip's limit).
STATIC_SHARED_LIMIT = 48 * 1024
#: Dynamic shared memory a tile may use (sm_80: 163 KB per block, sm_90: 227 KB).
SHARED_LIMIT = 160 * 1024
#: On a gpu.func whose tiles take dynamic shared memory (i32: bytes), until its
#: launches name the size.
DYNAMIC_SHARED_ATTR = GPU_DYNAMIC_SHARED


@dataclasses.dataclass(frozen=True)
class Tile:
    """A tensor-core tile: the block's output tile, its warps (rows x columns), the
    reduced elements each shared-memory stage holds and how many stages are in
    flight (the copy of step k + stages - 1 overlaps the mma of step k)."""

    block_m: int
    block_n: int
    warps_m: int
    warps_n: int
    stage_k: int
    stages: int

    def __post_init__(self) -> None:
        threads = 32 * self.warps
        if self.shared_bytes > SHARED_LIMIT or self.stages < 2 or \
                self.stage_k % FRAG_K or self.warp_m % FRAG_M or self.warp_n % FRAG_N or \
                (self.block_m * self.stage_k // 8) % threads or \
                (self.block_n * self.stage_k // 8) % threads:
            raise ValueError(f"tensor-core tile {self} does not fit: {self.shared_bytes} "
                             f"bytes of shared memory (at most {SHARED_LIMIT}), 16-byte "
                             f"copies shared evenly by {threads} threads, mma-shaped warps")

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the staged A and B tiles (padded rows, either layout)."""
        sk = self.stage_k
        per_stage = sum(max(b * (sk + PAD), sk * (b + PAD))
                        for b in (self.block_m, self.block_n))
        return 2 * per_stage * self.stages

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.block_n // self.warps_n

    @property
    def frags(self) -> tuple[int, int]:
        """Accumulator fragments of a warp (rows, columns)."""
        return self.warp_m // FRAG_M, self.warp_n // FRAG_N

    @property
    def ksteps(self) -> int:
        return self.stage_k // FRAG_K

    def attr(self) -> ir.Attribute:
        return ir.DenseI32ArrayAttr.get(list(dataclasses.astuple(self)))

    @classmethod
    def of(cls, op: ir.Operation, name: str) -> Tile:
        return cls(*ir.DenseI32ArrayAttr(op.attributes[name]))

    def warp_row(self, tid: str) -> str:
        """The row offset in the block tile of the warp of thread `tid` (affine)."""
        return f"(({tid} floordiv 32) floordiv {self.warps_n}) * {self.warp_m}"

    def warp_col(self, tid: str) -> str:
        return f"(({tid} floordiv 32) mod {self.warps_n}) * {self.warp_n}"


#: 64 x 64 tiles of 4 warps (32 x 32 each), 16 reduced elements per stage.
SMALL = Tile(64, 64, 2, 2, 16, 2)
#: 128 x 128 tiles of 4 warps (64 x 64 each: 32 fragments, 12 ldmatrix for 32 mma per
#: 16 reduced elements), 32 reduced elements per stage, three stages (56 KB of
#: dynamic shared memory with the padding). On an H200 (bf16 4096^3, kernel time):
#: two stages 0.534 ms, three 0.459, four 0.456; 8 warps of 64 x 32 0.534, 128 x 256
#: and 256 x 128 tiles of 8 warps 0.49-0.50 (benchmarks/notes/gpu-runs.md).
LARGE = Tile(128, 128, 2, 2, 32, 3)
#: LARGE when the output has at least this many of its tiles (about one per SM of
#: an sm_90 chip); fewer, larger tiles would leave SMs idle.
LARGE_MIN_TILES = 128

def _tile_for(plan: _Plan) -> Tile:
    big = LARGE
    tiles = (plan.m // big.block_m) * (plan.n // big.block_n) * max(plan.batch_size, 1)
    if plan.m % big.block_m == 0 and plan.n % big.block_n == 0 and \
            plan.k % big.stage_k == 0 and plan.k > big.stage_k and tiles >= LARGE_MIN_TILES:
        return big
    return SMALL


_MIN_SM = 80


def _sm(chip: str) -> int:
    m = re.match(r"sm_(\d+)", chip)
    return int(m.group(1)) if m else 0


def _apply(expr: str, *operands: ir.Value) -> ir.Value:
    """`affine.apply` of `()[s0, ...] -> (expr)`: index math the vector-to-nvgpu
    conversion passes through (its slices take arith ops for matrix code)."""
    syms = ", ".join(f"s{i}" for i in range(len(operands)))
    m = ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<()[{syms}] -> ({expr})>"))
    return affine_d.AffineApplyOp(m, list(operands)).result


def _body_is_mul_add(generic: ir.Operation) -> bool:
    block = generic.regions[0].blocks[0]
    names = [op.operation.name for op in block.operations]
    if names[-1] != "linalg.yield" or names.count("arith.mulf") != 1 or \
            names.count("arith.addf") != 1:
        return False
    if any(n not in ("arith.extf", "arith.mulf", "arith.addf", "linalg.yield") for n in names):
        return False
    ops = [op.operation for op in block.operations]
    add = next(o for o in ops if o.name == "arith.addf")
    mul = next(o for o in ops if o.name == "arith.mulf")
    acc = block.arguments[len(block.arguments) - 1]
    if list(ops[-1].operands) != [add.results[0]]:
        return False
    adds = list(add.operands)
    if not ((adds[0] == acc and adds[1] == mul.results[0])
            or (adds[1] == acc and adds[0] == mul.results[0])):
        return False

    def root(v: ir.Value) -> ir.Value:
        owner = v.owner
        if isinstance(owner, ir.OpView) or isinstance(owner, ir.Operation):
            o = owner.operation if isinstance(owner, ir.OpView) else owner
            if o.name == "arith.extf":
                return o.operands[0]
        return v

    ins = {root(v) for v in mul.operands}
    return ins == {block.arguments[0], block.arguments[1]} and acc not in ins


@dataclasses.dataclass
class _Plan:
    a: ir.Value
    b: ir.Value
    c: ir.Value
    batch: int
    m: int
    n: int
    k: int
    a_trans: bool  # A indexed (k, m)
    b_trans: bool  # B indexed (n, k)
    simt: bool  # f32: register tiles of threads, not warp tiles of tensor cores
    batch_size: int = 1  # the batch dimension's extent (1 without one)


def _widened_from_half(generic: ir.Operation, buf: ir.Value) -> ir.Value | None:
    """The f16 or bf16 buffer `buf` holds the f32 widening of, when an earlier op of
    `generic`'s block wrote all of `buf` as `extf` of it and nothing since wrote either."""
    if _has_views(buf):
        return None
    ops = ops_of(generic.block)
    pos = next(i for i, o in enumerate(ops) if o == generic)
    for k in range(pos - 1, -1, -1):
        prev = ops[k]
        if buf not in list(prev.operands):
            if prev.regions and prev.name != "linalg.generic":
                return None  # a loop or region might write buf through a view
            continue
        if prev.name != "linalg.generic" or len(prev.operands) != 2 or \
                prev.operands[1] != buf:
            if prev.name == "linalg.generic" and buf in list(prev.opview.inputs) and \
                    buf not in list(prev.opview.outputs):
                continue  # a read
            return None
        src = prev.operands[0]
        if not isinstance(src.type, ir.MemRefType) or not identity_layout(src.type) or \
                ir.MemRefType(src.type).element_type not in (ir.F16Type.get(),
                                                             ir.BF16Type.get()) or \
                ir.MemRefType(src.type).shape != ir.MemRefType(buf.type).shape:
            return None
        maps = [ir.AffineMapAttr(m).value
                for m in ir.ArrayAttr(prev.attributes["indexing_maps"])]
        rank = ir.MemRefType(buf.type).rank
        if any(m != ir.AffineMap.get_identity(rank) for m in maps):
            return None
        body = ops_of(prev.regions[0].blocks[0])
        block = prev.regions[0].blocks[0]
        if [o.name for o in body] != ["arith.extf", "linalg.yield"] or \
                body[0].operands[0] != block.arguments[0] or \
                body[1].operands[0] != body[0].results[0]:
            return None
        # Nothing between the widening and the contraction writes the f16 source.
        for mid in ops[k + 1:pos]:
            if src in list(mid.operands) and not (
                    mid.name == "linalg.generic" and src in list(mid.opview.inputs)
                    and src not in list(mid.opview.outputs)):
                return None
            if _base(src) != src or any(
                    _base(v) == src and v != src for v in mid.operands):
                return None
        return src
    return None


def _plan(generic: ir.Operation, tensor_cores: bool = True) -> _Plan | None:
    if generic.name != "linalg.generic" or len(generic.operands) != 3 or \
            len(generic.results) != 0:
        return None
    iters = [str(a) for a in ir.ArrayAttr(generic.attributes["iterator_types"])]
    if not iters or any("parallel" not in t for t in iters[:-1]) or "reduction" not in iters[-1]:
        return None
    rank = len(iters) - 1  # parallel dims
    if rank < 2:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    ops = list(generic.operands)
    types = [ir.MemRefType(v.type) if isinstance(v.type, ir.MemRefType) else None for v in ops]
    if any(t is None or not t.has_static_shape or not identity_layout(t) for t in types):
        return None  # dense row-major buffers: aligned 16-byte copies, static strides
    if _base(ops[2]) in (_base(ops[0]), _base(ops[1])):
        return None  # other blocks would read what a block writes
    f16, bf16, f32 = ir.F16Type.get(), ir.BF16Type.get(), ir.F32Type.get()
    elts = [t.element_type for t in types]
    if elts[0] == elts[1] == f16 and elts[2] in (f16, f32):
        simt = False
    elif elts[0] == elts[1] == bf16 and elts[2] == f32:
        simt = False
    elif elts[0] == elts[1] == elts[2] == f32:
        simt = True
        # f16/bf16 values the front end widened to f32 for the product: the 16-bit
        # buffers feed tensor cores (their products are exact in f32).
        sources = [_widened_from_half(generic, ops[i]) for i in (0, 1)]
        if sources[0] is not None and sources[1] is not None and tensor_cores and \
                sources[0].type.element_type == sources[1].type.element_type:
            ops = [sources[0], sources[1], ops[2]]
            simt = False
    else:
        return None
    if not _body_is_mul_add(generic):
        return None

    def dims(m: ir.AffineMap) -> list[int] | None:
        out = []
        for e in m.results:
            if not isinstance(e, ir.AffineDimExpr):
                return None
            out.append(e.position)
        return out

    d = [dims(m) for m in maps]
    if any(x is None for x in d) or d[2] != list(range(rank)) or rank > 3:
        return None  # one batch dimension at most: blocks are z (batch), y, x
    batch = list(range(rank - 2))
    mdim, ndim, kdim = rank - 2, rank - 1, rank
    ia, ib = (0, 1) if mdim in d[0] else (1, 0)
    da, db = d[ia], d[ib]
    if da[:-2] != batch or db[:-2] != batch:
        return None
    if da[-2:] == [mdim, kdim]:
        a_trans = False
    elif da[-2:] == [kdim, mdim]:
        a_trans = True
    else:
        return None
    if db[-2:] == [kdim, ndim]:
        b_trans = False
    elif db[-2:] == [ndim, kdim]:
        b_trans = True
    else:
        return None
    cshape = types[2].shape
    ashape = types[ia].shape
    m, n = cshape[-2], cshape[-1]
    k = ashape[-2] if a_trans else ashape[-1]
    if m % BLOCK_M or n % BLOCK_N or k % STAGE_K:
        return None
    if not simt and k == STAGE_K and \
            ir.MemRefType(ops[0].type).element_type == ir.BF16Type.get():
        # One step: canonicalization folds the loop away, nothing is staged, and the
        # vector-to-nvgpu conversion cannot read bf16 fragments from global memory.
        return None
    return _Plan(ops[ia], ops[ib], ops[2], rank - 2, m, n, k, a_trans, b_trans, simt,
                 cshape[0] if rank == 3 else 1)


def _read(src: ir.Value, idx: list[ir.Value], shape: tuple[int, int], trans: bool,
          pad: ir.Value) -> ir.Value:
    rank = ir.MemRefType(src.type).rank
    names = ", ".join(f"d{i}" for i in range(rank))
    lo, hi = f"d{rank - 2}", f"d{rank - 1}"
    res = f"{hi}, {lo}" if trans else f"{lo}, {hi}"
    pmap = ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<({names}) -> ({res})>"))
    elt = ir.MemRefType(src.type).element_type
    in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)] * 2)
    return vector.TransferReadOp(ir.VectorType.get(list(shape), elt), src, idx, pmap, pad,
                                 in_bounds).result


#: On each fragment read of a warp tile: [operand (0: A, 1: B), fragment, transposed].
READ_ATTR = GPU_TILE_READ


def _tag(read: ir.Value, operand: int, frag: int, trans: bool, ksub: int = 0) -> None:
    read.owner.attributes[READ_ATTR] = ir.DenseI32ArrayAttr.get(
        [operand, frag, int(trans), ksub])


def _fill_before(generic: ir.Operation, out: ir.Value) -> \
        tuple[ir.Operation, ir.Operation] | None:
    """(the op that last wrote `out` before `generic`, the fill whose value that is) when
    no op in between uses `out` and the writer is a fill of `out` or a copy into `out`
    of a buffer a fill wrote: the value is the contraction's initial accumulator."""
    if _has_views(out):
        return None  # an op between might read the fill through a view
    ops = ops_of(generic.block)
    pos = next(i for i, o in enumerate(ops) if o == generic)
    for prev in reversed(ops[:pos]):
        if any(v == out for v in prev.operands):
            if prev.name == "linalg.fill" and prev.operands[1] == out:
                return prev, prev
            if _fill_value(prev) is not None and list(prev.operands) == [out]:
                return prev, prev
            if prev.name == "memref.copy" and prev.operands[1] == out and \
                    prev.operands[0] != out:
                source = _fill_before(prev, prev.operands[0])
                return None if source is None else (prev, source[1])
            return None
        if prev.regions and any(out in list(o.operands) for o in walk_ops(prev)):
            return None  # a loop or region that touches out (no views of it exist)
    return None


def _fill_value(op: ir.Operation) -> ir.Value | None:
    """The value a fill writes: `linalg.fill`'s, or a generalized fill's (a generic with
    no inputs and an identity map whose body yields a value defined outside it)."""
    if op.name == "linalg.fill":
        return op.operands[0]
    if op.name != "linalg.generic" or len(op.operands) != 1:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    rank = ir.MemRefType(op.operands[0].type).rank if isinstance(op.operands[0].type,
                                                                  ir.MemRefType) else -1
    if rank < 0 or maps[0] != ir.AffineMap.get_identity(rank):
        return None
    body = ops_of(op.regions[0].blocks[0])
    if len(body) != 1:
        return None
    value = body[0].operands[0] if len(body[0].operands) == 1 else None
    if value is None or isinstance(value.owner, ir.Block):
        return None
    owner = value.owner.operation if isinstance(value.owner, ir.OpView) else value.owner
    parent = owner.parent
    while parent is not None and parent != op:
        parent = parent.parent
    return None if parent is not None else value


def _fold_fill(generic: ir.Operation, out: ir.Value, constant_only: bool) -> ir.Attribute | \
        ir.Value | None:
    """Erase the fill of `out` before `generic` (the tiles write all of `out`) and return
    its value: an attribute when `constant_only` (splat vector accumulators)."""
    found = _fill_before(generic, out)
    if found is None:
        return None
    writer, fill = found
    value = _fill_value(fill)
    owner = value.owner
    if constant_only:
        const = owner.operation if isinstance(owner, ir.OpView) else owner
        if not isinstance(const, ir.Operation) or const.name != "arith.constant":
            return None
        writer.erase()
        return const.attributes["value"]
    writer.erase()
    return value


@contextlib.contextmanager
def _block_tiles(generic: ir.Operation, plan: _Plan, cshape: Sequence[int],
                 threads_per_block: int, block: tuple[int, int] = (BLOCK_M, BLOCK_N)) -> \
        Iterator[tuple[ir.Operation, ir.Block, ir.Block]]:
    """Before `generic`: a parallel loop over the `block` (rows x columns) tiles of the output
    (and its batch), with a loop of `threads_per_block` threads inside. They sit in
    "grid"/"row" regions as block reductions do (reductions.py): no loop fuses into
    the block loop and canonicalization does not merge it with the thread loop;
    InlineBlockReductions puts them back. Yields (thread loop, block loop's body,
    thread loop's body), inserting into the thread loop at `generic`'s location."""
    with ir.InsertionPoint(generic), generic.location:
        grid = _region(_GRID)
    with ir.InsertionPoint(ops_of(grid.regions[0].blocks[0])[-1]), generic.location:
        zero, one = index_const(0), index_const(1)
        lbs = [zero] * (plan.batch + 2)
        ubs = [index_const(s) for s in cshape]
        steps = [one] * plan.batch + [index_const(block[0]), index_const(block[1])]
        _, blocks, bterm = new_parallel(lbs, ubs, steps)
        with ir.InsertionPoint(bterm):
            row = _region(_ROW)
        with ir.InsertionPoint(ops_of(row.regions[0].blocks[0])[-1]):
            tloop, threads, tterm = new_parallel([index_const(0)],
                                                 [index_const(threads_per_block)],
                                                 [index_const(1)])
        with ir.InsertionPoint(tterm):
            yield tloop, blocks, threads


def _rewrite(generic: ir.Operation, plan: _Plan) -> None:
    tile = _tile_for(plan)
    ctype = ir.MemRefType(plan.c.type)
    cshape = ctype.shape
    acc_t = ir.VectorType.get([FRAG_M, FRAG_N], ctype.element_type)
    contract_maps = ir.ArrayAttr.get([
        ir.Attribute.parse(f"affine_map<{t}>")
        for t in ("(m, n, k) -> (m, k)", "(m, n, k) -> (k, n)", "(m, n, k) -> (m, n)")
    ])
    iters = ir.ArrayAttr.get([ir.Attribute.parse(f"#vector.iterator_type<{t}>")
                              for t in ("parallel", "parallel", "reduction")])
    init = _fold_fill(generic, plan.c, constant_only=True)
    epilogue = _unary_epilogue(generic, plan.c)
    # The output is a temporary only the epilogue reads: its fragments are not stored.
    dead = epilogue is not None and _only_read_by(plan.c, generic, epilogue)
    with _block_tiles(generic, plan, cshape, tile.warps, (tile.block_m, tile.block_n)) as \
            (tloop, blocks, threads):
        tloop.attributes[WARP_ATTR] = tile.attr()
        bidx = list(blocks.arguments)
        bat, bm, bn = bidx[:plan.batch], bidx[plan.batch], bidx[plan.batch + 1]
        t = threads.arguments[0]
        wm = _apply(f"s1 + (s0 floordiv {tile.warps_n}) * {tile.warp_m}", t, bm)
        wn = _apply(f"s1 + (s0 mod {tile.warps_n}) * {tile.warp_n}", t, bn)
        fm, fn = tile.frags
        rows = [_apply(f"s0 + {FRAG_M * i}", wm) for i in range(fm)]
        cols = [_apply(f"s0 + {FRAG_N * j}", wn) for j in range(fn)]
        cpad = arith.constant(ctype.element_type, 0.0)
        apad = arith.constant(ir.MemRefType(plan.a.type).element_type, 0.0)
        if init is not None:  # the fill folded in: accumulators start from its value
            splat = ir.DenseElementsAttr.get_splat(acc_t, init)
            accs = [arith.constant(acc_t, splat) for _ in range(fm * fn)]
        else:
            accs = [_read(plan.c, bat + [rows[i], cols[j]], (FRAG_M, FRAG_N), False, cpad)
                    for i in range(fm) for j in range(fn)]
        loop = scf.ForOp(index_const(0), index_const(plan.k), index_const(tile.stage_k), accs)
        loop.operation.attributes[TILE_ATTR] = tile.attr()
        with ir.InsertionPoint(loop.body):
            outs = list(loop.inner_iter_args)
            for ks in range(tile.ksteps):  # the mma steps of one staged step
                kk = _apply(f"s0 + {FRAG_K * ks}", loop.induction_variable)
                a_frags = []
                for i in range(fm):
                    idx = bat + ([kk, rows[i]] if plan.a_trans else [rows[i], kk])
                    a_frags.append(_read(plan.a, idx, (FRAG_M, FRAG_K), plan.a_trans, apad))
                    _tag(a_frags[-1], 0, i, plan.a_trans, ks)
                b_frags = []
                for j in range(fn):
                    idx = bat + ([cols[j], kk] if plan.b_trans else [kk, cols[j]])
                    b_frags.append(_read(plan.b, idx, (FRAG_K, FRAG_N), plan.b_trans, apad))
                    _tag(b_frags[-1], 1, j, plan.b_trans, ks)
                for i in range(fm):
                    for j in range(fn):
                        outs[i * fn + j] = vector.ContractionOp(
                            acc_t, a_frags[i], b_frags[j], outs[i * fn + j], contract_maps,
                            iters).result
            scf.YieldOp(outs)
        in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)] * 2)
        rank = len(cshape)
        names = ", ".join(f"d{i}" for i in range(rank))
        pmap = ir.AffineMapAttr(ir.Attribute.parse(
            f"affine_map<({names}) -> (d{rank - 2}, d{rank - 1})>"))
        for i in range(fm):
            for j in range(fn):
                acc, idx = loop.results[i * fn + j], bat + [rows[i], cols[j]]
                if not dead:
                    vector.TransferWriteOp(None, acc, plan.c, idx, pmap, in_bounds)
                if epilogue is not None:
                    out = epilogue.opview.outputs[0]
                    w = vector.TransferWriteOp(None, _vector_epilogue(epilogue, acc), out, idx,
                                               pmap, in_bounds)
                    w.operation.attributes[EPILOGUE_ATTR] = ir.UnitAttr.get()
    generic.erase()
    if epilogue is not None:
        epilogue.erase()
        if dead:  # the output buffer is no longer used: no allocation either
            _erase_unused_buffer(plan.c)


#: On a fragment's write through an elementwise epilogue (see `_unary_epilogue`).
EPILOGUE_ATTR = GPU_TILE_EPILOGUE


def _unary_epilogue(generic: ir.Operation, out: ir.Value) -> ir.Operation | None:
    """The elementwise op right after `generic` whose only input is its output `out` (at
    its own indices) and whose body is arith/math ops on it and constants (a
    conversion to bf16, an activation): the tile applies it to its accumulators
    (`_vector_epilogue` here; each lane's, after the mma lowering,
    `_EpilogueChain`) and writes its output instead."""
    epilogue = _epilogue_of(generic, out)
    if epilogue is None or list(epilogue.opview.inputs) != [out]:
        return None
    block = epilogue.regions[0].blocks[0]
    if list(block.arguments[1].uses):
        return None  # reads its output
    derived = {block.arguments[0]}  # values computed from the contraction's output
    for op in ops_of(block):
        if op.name == "linalg.yield":
            if op.operands[0] not in derived:
                return None  # yields a constant: nothing of the tile in it
            continue
        if len(op.results) != 1:
            return None
        if any(v in derived for v in op.operands):
            derived.add(op.results[0])
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, ir.Block):
                if v != block.arguments[0]:
                    return None
                continue
            o = owner.operation if isinstance(owner, ir.OpView) else owner
            if o.parent != epilogue and o.name != "arith.constant":
                return None  # a value from outside other than a constant
    return epilogue


def _only_read_by(buf: ir.Value, *readers: ir.Operation) -> bool:
    """`buf` is an allocation that nothing but `readers` (and its deallocation) uses."""
    owner = buf.owner
    alloc = owner.operation if isinstance(owner, ir.OpView) else owner
    if isinstance(owner, ir.Block) or alloc.name != "memref.alloc" or _has_views(buf):
        return False
    for use in buf.uses:
        o = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if o not in readers and o.name != "memref.dealloc":
            return False
    return True


def _erase_unused_buffer(buf: ir.Value) -> None:
    users = [u.owner.operation if isinstance(u.owner, ir.OpView) else u.owner for u in buf.uses]
    if all(o.name == "memref.dealloc" for o in users):
        for o in users:
            o.erase()
        owner = buf.owner
        (owner.operation if isinstance(owner, ir.OpView) else owner).erase()


def _element_type(t: ir.Type) -> ir.Type:
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _lifted(op: ir.Operation, operands: list[ir.Value], shape: Sequence[int]) -> ir.Value:
    """`op` (an elementwise arith/math op, on scalars or vectors) again on vectors of
    `shape`."""
    result = ir.VectorType.get(list(shape), _element_type(op.results[0].type))
    attrs = {name: op.attributes[name] for name in op.attributes}
    return ir.Operation.create(op.name, results=[result], operands=operands,
                               attributes=attrs).results[0]


def _splat(const: ir.Operation, shape: Sequence[int]) -> ir.Value:
    """The constant `const` (a scalar, or a splat of vectors) as a splat of `shape`."""
    t = ir.VectorType.get(list(shape), _element_type(const.results[0].type))
    value = const.attributes["value"]
    if isinstance(value, ir.DenseElementsAttr):
        value = value.get_splat_value()
    return arith.constant(t, ir.DenseElementsAttr.get_splat(t, value))


def _vector_epilogue(epilogue: ir.Operation, acc: ir.Value) -> ir.Value:
    """The epilogue's body on the accumulator fragment `acc` (elementwise)."""
    block = epilogue.regions[0].blocks[0]
    shape = ir.VectorType(acc.type).shape
    mapping = {block.arguments[0]: acc}
    for op in ops_of(block):
        if op.name == "linalg.yield":
            return mapping[op.operands[0]] if op.operands[0] in mapping else \
                _splat(op.operands[0].owner, shape)
        if op.name == "arith.constant":
            continue
        operands = []
        for v in op.operands:
            if v not in mapping:  # a constant
                mapping[v] = _splat(v.owner.operation if isinstance(v.owner, ir.OpView)
                                    else v.owner, shape)
            operands.append(mapping[v])
        mapping[op.results[0]] = _lifted(op, operands, shape)
    raise AssertionError("linalg.generic without a yield")


class _EpilogueChain:
    """A kernel's fragment writes through an epilogue, before the mma lowering: each
    becomes a write of the accumulator to a placeholder (the lowering takes it);
    after, each lane's store to the placeholder becomes the epilogue's ops on its
    values and a store to the epilogue's output."""

    def __init__(self, func: ir.Operation) -> None:
        self.writes = [o for o in walk_ops(func) if o.name == "vector.transfer_write"
                       and EPILOGUE_ATTR in o.attributes]
        self.template: list[tuple[str, list, dict, ir.Type]] | None = None  # (op, operands, attrs, type)
        self.placeholder: ir.Value | None = None
        self.out: ir.Value | None = None  # the epilogue's output buffer
        if self.writes:
            self._detach(func)

    def _detach(self, func: ir.Operation) -> None:
        entry = func.regions[0].blocks[0]
        for w in self.writes:
            # The epilogue's ops from the accumulator to the written value (a DAG of
            # elementwise ops on the accumulator and constants), in block order.
            chain: dict = {}
            acc = None
            pending = [w.operands[0]]
            while pending:
                v = pending.pop()
                o = v.owner.operation if isinstance(v.owner, ir.OpView) else v.owner
                if o.name == "scf.for":
                    acc = v
                    continue
                if o.name == "arith.constant" or o in chain.values():
                    continue
                chain[len(chain)] = o
                pending.extend(o.operands)
            assert acc is not None, w
            block_ops = ops_of(w.block)
            ordered = sorted(chain.values(), key=block_ops.index)
            if self.template is None:
                self.template = []
                for o in ordered:
                    refs: list = []
                    for x in o.operands:
                        xo = x.owner.operation if isinstance(x.owner, ir.OpView) else x.owner
                        if x == acc:
                            refs.append("acc")
                        elif xo.name == "arith.constant":
                            refs.append(xo.attributes["value"])
                        else:
                            refs.append(ordered.index(xo))
                    attrs = {name: o.attributes[name] for name in o.attributes}
                    elt = ir.VectorType(o.results[0].type).element_type
                    self.template.append((o.name, refs, attrs, elt))
                out_t = ir.MemRefType(w.operands[1].type)
                acc_elt = ir.VectorType(acc.type).element_type
                with ir.InsertionPoint.at_block_begin(entry), func.location:
                    self.placeholder = memref.AllocaOp(
                        ir.MemRefType.get(out_t.shape, acc_elt), [], []).result
            self.out = w.operands[1]
            idx = list(w.operands[2:])
            with ir.InsertionPoint(w), w.location:
                vector.TransferWriteOp(None, acc, self.placeholder, idx,
                                       w.attributes["permutation_map"],
                                       w.attributes["in_bounds"])
            w.erase()
            for o in reversed(ordered):
                if not list(o.results[0].uses):
                    o.erase()

    def attach(self) -> None:
        if self.placeholder is None:
            return
        out = self.out
        for use in list(self.placeholder.uses):
            st = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
            if st.name not in ("vector.store", "memref.store"):
                raise NotImplementedError(f"tile epilogue: {st.name} of the accumulators")
            acc, idx = st.operands[0], list(st.operands[2:])
            vt = acc.type
            shape = ir.VectorType(vt).shape if isinstance(vt, ir.VectorType) else None
            values: list[ir.Value] = []
            with ir.InsertionPoint(st), st.location:
                for name, refs, attrs, elt in self.template:
                    operands = []
                    for r in refs:
                        if isinstance(r, str):
                            operands.append(acc)
                        elif isinstance(r, int):
                            operands.append(values[r])
                        else:
                            value = _scalar(r)
                            if shape is None:
                                operands.append(arith.ConstantOp(value.type, value).result)
                            else:
                                t = ir.VectorType.get(shape, value.type)
                                operands.append(arith.constant(
                                    t, ir.DenseElementsAttr.get_splat(t, value)))
                    rt = ir.VectorType.get(shape, elt) if shape is not None else elt
                    values.append(ir.Operation.create(name, results=[rt], operands=operands,
                                                      attributes=attrs).results[0])
                result = values[-1] if values else acc  # no ops: a copy
                if shape is None:
                    memref.StoreOp(result, out, idx)
                else:
                    vector.StoreOp(result, out, idx)
            st.erase()
        self.placeholder.owner.operation.erase()


def _scalar(attr: ir.Attribute) -> ir.Attribute:
    """The value of a splat constant."""
    return ir.DenseElementsAttr(attr).get_splat_value() if isinstance(
        attr, ir.DenseElementsAttr) else attr


@dataclasses.dataclass(frozen=True)
class WarpTileContractions(_Step):
    """f16 contractions become blocks of warps computing mma-shaped tiles (vector ops)."""

    name = "autodiff-gpu-warp-tile-contractions"
    summary = "Rewrite f16 contraction generics into warp-level vector tiles for mma.sync"

    chip: str = "sm_80"

    def apply(self, module: ir.Operation) -> None:
        cores = _sm(self.chip) >= _MIN_SM
        # The contractions first: a rewrite erases other ops (the fill it folds, the
        # epilogue it takes), never another contraction, so no op visited is erased.
        targets = [op for op in walk_ops(module) if op.name == "linalg.generic"
                   and on_host(op) and _plan(op, tensor_cores=cores) is not None]
        for op in targets:
            plan = _plan(op, tensor_cores=cores)
            if plan is None:
                continue
            if plan.simt:
                _rewrite_simt(op, plan)
            elif cores:
                _rewrite(op, plan)


@dataclasses.dataclass(frozen=True)
class WarpsToLanes(_Step):
    """Each warp loop's iteration becomes 32 threads (lanes) running the same warp code.

    The `parallel` stage runs one iteration per warp (exact on the CPU: a tile is
    read, accumulated and written once); on the GPU all 32 lanes of a warp take
    part in the warp-level ops, which `convert-vector-to-gpu{use-nvgpu}` splits
    into each lane's fragment.
    """

    name = "autodiff-gpu-warps-to-lanes"
    summary = "Expand warp loops of mma tiles to 32 threads per warp"

    def apply(self, module: ir.Operation) -> None:
        for op in list(walk_ops(module)):
            if op.name == "scf.parallel" and WARP_ATTR in op.attributes:
                _warps_to_lanes(op)


def _replace_uses(old: ir.Value, new: ir.Value) -> None:
    new_owner = new.owner.operation if isinstance(new.owner, ir.OpView) else new.owner
    for use in list(old.uses):
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if owner != new_owner:
            owner.operands[use.operand_number] = new


def _warps_to_lanes(loop: ir.Operation) -> None:
    """32 lanes per warp; the tile's indices from `gpu.block_id`/`gpu.thread_id`.

    The block loop's dimensions map innermost-first to x, y, z
    (`gpu-map-parallel-loops{mapping-policy=innermost-first}`), the lane loop to
    threads x. Reading the ids directly keeps the tile's index math free of
    arith ops, which `convert-vector-to-gpu{use-nvgpu}` cannot take in the
    slices of the ops it converts (affine.apply of ids and constants it can).
    """
    blocks = loop.parent
    while blocks is not None and blocks.name != "scf.parallel":
        blocks = blocks.parent
    if blocks is None:
        return
    lbs, steps = list(blocks.opview.lowerBound), list(blocks.opview.step)
    consts = [(int_constant(lb), int_constant(st)) for lb, st in zip(lbs, steps)]
    if len(lbs) > 3 or any(c is None for pair in consts for c in pair):
        return  # the tile stays correct vector code, without mma
    body = loop.regions[0].blocks[0]
    first = ops_of(body)[0]
    dims = ("x", "y", "z")
    with ir.InsertionPoint(first), loop.location:
        bbody = blocks.regions[0].blocks[0]
        n = len(lbs)
        for k, (lb, st) in enumerate(consts):
            bid = gpu_d.block_id(getattr(gpu_d.Dimension, dims[n - 1 - k]))
            _replace_uses_inside(bbody.arguments[k], _apply(f"s0 * {st} + {lb}", bid), loop)
        tid = gpu_d.thread_id(gpu_d.Dimension.x)
        warp = _apply("s0 floordiv 32", tid)
    _replace_uses(body.arguments[0], warp)
    tile = Tile.of(loop, WARP_ATTR)
    with ir.InsertionPoint(loop), loop.location:
        loop.operands[1] = index_const(32 * tile.warps)
    del loop.attributes[WARP_ATTR]


def _replace_uses_inside(old: ir.Value, new: ir.Value, region_op: ir.Operation) -> None:
    """Replace the uses of `old` nested in `region_op` by `new`."""
    for use in list(old.uses):
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        parent = owner
        while parent is not None and parent != region_op:
            parent = parent.parent
        if parent is not None and owner != (new.owner.operation
                                            if isinstance(new.owner, ir.OpView) else new.owner):
            owner.operands[use.operand_number] = new


@dataclasses.dataclass(frozen=True)
class WarpTilesToMmaSync(_Step):
    """`convert-vector-to-gpu{use-nvgpu}` on the kernels with warp tiles (their
    `vector.contract`s become `nvgpu.mma.sync`); only those: the conversion
    rejects the index arithmetic of kernels that have no contraction."""

    name = "autodiff-gpu-warp-tiles-to-mma-sync"
    summary = "Convert the warp tiles of outlined kernels to nvgpu.mma.sync"

    #: Stage the A and B tiles through shared memory with cp.async (sm_80+).
    shared_memory: bool = True

    def apply(self, module: ir.Operation) -> None:
        from mlir.passmanager import PassManager

        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "gpu.module":
                continue
            if self.shared_memory:
                for loop in [o for o in walk_ops(op) if o.name == "scf.for"
                             and SIMT_ATTR in o.attributes]:
                    _stage_simt(op, loop)
            if not any(o.name == "vector.contract" for o in walk_ops(op)):
                continue
            if self.shared_memory:
                for loop in [o for o in walk_ops(op) if o.name == "scf.for"
                             and TILE_ATTR in o.attributes]:
                    _stage_through_shared_memory(op, loop)
            chains = [_EpilogueChain(fn.operation) for fn in op.regions[0].blocks[0].operations
                      if fn.operation.name == "gpu.func"]
            pm = PassManager.parse("gpu.module(gpu.func(convert-vector-to-gpu{use-nvgpu=true}))")
            pm.run(op)
            for chain in chains:
                chain.attach()
            _order_transposed_a_fragments(op)
            _align_fragment_stores(op)
        _launch_dynamic_shared_memory(module)


def _launch_dynamic_shared_memory(module: ir.Operation) -> None:
    """Launches of kernels whose tiles take dynamic shared memory name its size."""
    sizes = {}
    for gm in module.regions[0].blocks[0].operations:
        gm = gm.operation
        if gm.name != "gpu.module":
            continue
        mod_name = ir.StringAttr(gm.attributes["sym_name"]).value
        for fn in gm.regions[0].blocks[0].operations:
            fn = fn.operation
            if fn.name == "gpu.func" and DYNAMIC_SHARED_ATTR in fn.attributes:
                fn_name = ir.StringAttr(fn.attributes["sym_name"]).value
                sizes[f"@{mod_name}::@{fn_name}"] = \
                    ir.IntegerAttr(fn.attributes[DYNAMIC_SHARED_ATTR]).value
                del fn.attributes[DYNAMIC_SHARED_ATTR]
    if not sizes:
        return
    for op in list(walk_ops(module)):
        if op.name != "gpu.launch_func" or str(op.attributes["kernel"]) not in sizes:
            continue
        view = op.opview
        if len(op.results) or list(view.asyncDependencies) or \
                view.dynamicSharedMemorySize is not None:
            raise NotImplementedError(f"dynamic shared memory for {op}")
        kernel = str(op.attributes["kernel"])
        with ir.InsertionPoint(op), op.location:
            size = arith.constant(ir.IntegerType.get_signless(32), sizes[kernel])
            new = gpu_d.LaunchFuncOp(
                [kernel.split("::")[0][1:], kernel.split("::")[1][1:]],
                (view.gridSizeX, view.gridSizeY, view.gridSizeZ),
                (view.blockSizeX, view.blockSizeY, view.blockSizeZ),
                list(view.kernelOperands), dynamic_shared_memory_size=size)
        for name in ("kernel",):
            new.operation.attributes[name] = op.attributes[name]
        op.erase()


def _align_fragment_stores(gpu_module: ir.Operation) -> None:
    """Each lane stores its accumulators in pairs of adjacent columns at an even column
    (the m16n8 fragment layout) of a row-major buffer with an even row length: the
    pair is aligned to its size (one 8-byte store of two f32, not two 4-byte ones)."""
    for fn in gpu_module.regions[0].blocks[0].operations:
        fn = fn.operation
        if fn.name != "gpu.func" or not any(o.name == "nvgpu.mma.sync" for o in walk_ops(fn)):
            continue
        for op in walk_ops(fn):
            if op.name != "vector.store" or "alignment" in op.attributes:
                continue
            vt, mt = op.operands[0].type, op.operands[1].type
            if not isinstance(vt, ir.VectorType) or ir.VectorType(vt).shape != [2] or \
                    not isinstance(mt, ir.MemRefType) or not identity_layout(mt) or \
                    not ir.MemRefType(mt).has_static_shape or ir.MemRefType(mt).shape[-1] % 2:
                continue
            bits = ir.VectorType(vt).element_type.width
            op.attributes["alignment"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 2 * bits // 8)


def _order_transposed_a_fragments(gpu_module: ir.Operation) -> None:
    """The A fragment of m16n8k16 holds four 8 x 8 matrices in the order (rows 0-7,
    k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15). For an A
    stored k-major (`ldmatrix.trans`, 4 matrices) MLIR 22's vector-to-nvgpu
    conversion has lanes 8-15 address k 8-15 and lanes 16-23 rows 8-15: the second
    and third matrices arrive swapped. Put them in the order the mma reads (a
    register renaming, no instruction)."""
    for op in list(walk_ops(gpu_module)):
        if op.name != "nvgpu.ldmatrix" or not ir.BoolAttr(op.attributes["transpose"]).value \
                or ir.IntegerAttr(op.attributes["numTiles"]).value != 4:
            continue
        result = op.results[0]
        uses = [(u.owner.operation if isinstance(u.owner, ir.OpView) else u.owner,
                 u.operand_number) for u in result.uses]
        if not uses or any(o.name != "nvgpu.mma.sync" or n != 0 for o, n in uses):
            continue  # only the A operand's fragments
        with ir.InsertionPoint.after(op), op.location:
            fixed = vector.ShuffleOp(result, result, [0, 2, 1, 3]).result
        for owner, n in uses:
            owner.operands[n] = fixed


# -- the A and B tiles through shared memory -------------------------------------------------


def _shared_tile(gpu_module: ir.Operation, shape: tuple[int, int], elt: ir.Type,
                 taken: set[str], loc: ir.Location) -> tuple[str, ir.MemRefType]:
    """A new `memref.global` of `shape` in the workgroup address space of `gpu_module`."""
    space = ir.Attribute.parse("#gpu.address_space<workgroup>")
    n = 0
    while f"__autodiff_tile_{n}" in taken:
        n += 1
    name = f"__autodiff_tile_{n}"
    taken.add(name)
    t = ir.MemRefType.get(list(shape), elt, memory_space=space)
    with ir.InsertionPoint.at_block_begin(gpu_module.regions[0].blocks[0]), loc:
        memref.GlobalOp(name, ir.TypeAttr.get(t), sym_visibility="private",
                        alignment=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 128))
    return name, t

def _read_tag(op: ir.Operation) -> tuple[int, int, bool, int] | None:
    """(operand, fragment or element, transposed, mma step in the staged step)."""
    if op.name not in ("vector.transfer_read", "memref.load") or READ_ATTR not in op.attributes:
        return None
    vals = list(ir.DenseI32ArrayAttr(op.attributes[READ_ATTR]))
    return vals[0], vals[1], bool(vals[2]), vals[3] if len(vals) > 3 else 0


def _stage_through_shared_memory(gpu_module: ir.Operation, loop: ir.Operation) -> None:
    """The block's A and B tiles of each staged step (`Tile.stage_k` reduced elements)
    go through shared memory, `Tile.stages` of them in flight.

    Before the loop the block's threads start the copies of the first stages - 1
    steps (`nvgpu.device_async_copy`, cp.async: 16-byte chunks, each thread a share
    of them; one commit group per step). Step k waits until its group is complete
    (`cp.async.wait_group stages - 2`) and synchronises the block (every thread's
    copies visible; every warp done with step k - 1), starts the copies of step
    k + stages - 1 into the stage step k - 1 used, and its fragment reads
    (ldmatrix) read step k's stage: one barrier per step. The last steps copy the
    last step again (in bounds, into stages no later step reads).
    Each tile row is padded by `PAD` halves (ldmatrix without bank conflicts)."""
    tile = Tile.of(loop, TILE_ATTR)
    body = loop.regions[0].blocks[0]
    reads = [(o, _read_tag(o)) for o in ops_of(body)]
    reads = [(o, t) for o, t in reads if t is not None]
    if not reads:
        return
    k_total = int_constant(loop.operands[1])
    if k_total is None:
        return
    kk = body.arguments[0]
    f16 = ir.F16Type.get()
    sk, stages, threads = tile.stage_k, tile.stages, 32 * tile.warps
    # Tile shapes in the operands' own orientation, and the first fragment reads.
    shapes: dict[int, tuple[int, int]] = {}
    first: dict[int, ir.Operation] = {}
    trans: dict[int, bool] = {}
    for o, (operand, frag, tr, ks) in reads:
        trans[operand] = tr
        if frag == 0 and ks == 0:
            first[operand] = o
        if operand == 0:
            shapes[0] = (sk, tile.block_m) if tr else (tile.block_m, sk)
        else:
            shapes[1] = (tile.block_n, sk) if tr else (sk, tile.block_n)
    if set(first) != {0, 1}:
        return
    mod_body = gpu_module.regions[0].blocks[0]
    taken = {ir.StringAttr(o.operation.attributes["sym_name"]).value
             for o in mod_body.operations if "sym_name" in o.operation.attributes}
    elt = ir.MemRefType(first[0].operands[0].type).element_type
    bf16 = elt == ir.BF16Type.get()
    # One raw byte buffer per operand holding its stages; each stage is viewed as the
    # operand's type (the copies) and as f16 (the fragment reads). bf16: the fragments
    # are read as f16 (raw 16-bit values: upstream's mma.sync lowering knows f16
    # fragments only), and the nvvm.mma.sync ops are retyped to bf16 after the NVVM
    # lowering (Bf16MmaOperands).
    raw = ir.IntegerType.get_signless(8)
    padded = {op: (r, c + PAD) for op, (r, c) in shapes.items()}
    stage_bytes = {op: r * c * 2 for op, (r, c) in padded.items()}
    sizes = {op: stages * stage_bytes[op] for op in (0, 1)}
    dynamic = sum(sizes.values()) > STATIC_SHARED_LIMIT
    if not dynamic:
        names = {op: _shared_tile(gpu_module, (sizes[op],), raw, taken, loop.location)
                 for op in (0, 1)}
    if bf16:
        gpu_module.attributes[BF16_ATTR] = ir.UnitAttr.get()
    with ir.InsertionPoint(loop), loop.location:
        tid = gpu_d.thread_id(gpu_d.Dimension.x)
        if dynamic:  # one dynamic block of both operands' stages
            space = ir.Attribute.parse("#gpu.address_space<workgroup>")
            whole = gpu_d.DynamicSharedMemoryOp(
                ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], raw,
                                  memory_space=space)).result
            raws = {op: memref.ViewOp(ir.MemRefType.get([sizes[op]], raw, memory_space=space),
                                      whole, index_const(sizes[0] if op else 0), []).result
                    for op in (0, 1)}
            func = loop.parent
            while func.name != "gpu.func":
                func = func.parent
            before = ir.IntegerAttr(func.attributes[DYNAMIC_SHARED_ATTR]).value \
                if DYNAMIC_SHARED_ATTR in func.attributes else 0
            if before:
                raise NotImplementedError("two dynamic-shared-memory tiles in one kernel")
            func.attributes[DYNAMIC_SHARED_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(32), sum(sizes.values()))
        else:
            raws = {op: memref.GetGlobalOp(t, name).result for op, (name, t) in names.items()}

    def view(operand: int, shift: ir.Value, view_elt: ir.Type) -> ir.Value:
        space = ir.MemRefType(raws[operand].type).memory_space
        vt = ir.MemRefType.get(list(padded[operand]), view_elt, memory_space=space)
        return memref.ViewOp(vt, raws[operand], shift, []).result

    # Where each operand's block tile starts in global memory: the first fragment read's
    # index along the block's rows (A) or columns (B) less the warp's offset.
    origins: dict[int, tuple[list[ir.Value], ir.Value]] = {}
    for operand in (0, 1):
        src_read = first[operand]
        src = src_read.operands[0]
        idx = list(src_read.operands[1:1 + ir.MemRefType(src.type).rank])
        origins[operand] = (idx[:-2], idx[(-1 if trans[0] else -2) if operand == 0 else
                                          (-2 if trans[1] else -1)])

    def copies(k0: ir.Value, shift: dict[int, ir.Value]) -> ir.Value:
        """Start the copies of the step at reduced index `k0` into the stages at byte
        offsets `shift`; its commit group."""
        tokens = []
        for operand in (0, 1):
            src = first[operand].operands[0]
            batch, at = origins[operand]
            warp_off = tile.warp_row("s1") if operand == 0 else tile.warp_col("s1")
            origin = _apply(f"s0 - {warp_off}", at, tid)
            dst = view(operand, shift[operand], elt)
            rows, cols = shapes[operand]
            per_row = cols // 8
            chunks = rows * per_row
            assert chunks % threads == 0, (tile, shapes)
            k_first = (operand == 0 and trans[0]) or (operand == 1 and not trans[1])
            for e in range(chunks // threads):
                r = _apply(f"(s0 + {e * threads}) floordiv {per_row}", tid)
                c = _apply(f"((s0 + {e * threads}) mod {per_row}) * 8", tid)
                if k_first:  # rows are k
                    g = [_apply("s0 + s1", k0, r), _apply("s0 + s1", origin, c)]
                else:
                    g = [_apply("s0 + s1", origin, r), _apply("s0 + s1", k0, c)]
                tokens.append(nvgpu.DeviceAsyncCopyOp(
                    dst, [r, c], src, batch + g,
                    ir.IntegerAttr.get(ir.IndexType.get(), 8), bypassL1=True).result)
        return nvgpu.DeviceAsyncCreateGroupOp(tokens).result

    with ir.InsertionPoint(loop), loop.location:
        groups = [copies(index_const(min(st * sk, k_total - sk)),  # the prologue
                         {op: index_const(st * stage_bytes[op]) for op in (0, 1)})
                  for st in range(stages - 1)]
    with ir.InsertionPoint.at_block_begin(body), loop.location:
        # Step k's copies are complete (the newer stages - 2 groups may be pending);
        # the barrier makes every thread's copies visible and ends step k - 1's reads
        # of the stage the copies of step k + stages - 1 then overwrite.
        nvgpu.DeviceAsyncWaitOp(groups[-1], numGroups=stages - 2)
        gpu_d.barrier()
        ahead = (stages - 1) * sk
        nxt = affine_d.AffineMinOp(
            ir.AffineMapAttr(ir.Attribute.parse(
                f"affine_map<()[s0] -> (s0 + {ahead}, {k_total - sk})>")), [kk]).result
        copies(nxt, {op: _apply(
            f"(((s0 floordiv {sk}) + {stages - 1}) mod {stages}) * {stage_bytes[op]}", kk)
            for op in (0, 1)})
        fragment_buffers = {}
        for op in (0, 1):
            shift = _apply(f"((s0 floordiv {sk}) mod {stages}) * {stage_bytes[op]}", kk)
            fragment_buffers[op] = view(op, shift, f16)
    with ir.InsertionPoint.after(loop), loop.location:
        # No copy outlives the tile (the last steps' repeated copies).
        nvgpu.DeviceAsyncWaitOp(groups[-1], numGroups=0)
    for o, (operand, frag, tr, ks) in reads:
        with ir.InsertionPoint(o), o.location:
            kl = index_const(FRAG_K * ks)
            if operand == 0:
                off = _apply(f"{tile.warp_row('s0')} + {FRAG_M * frag}", tid)
                local = [kl, off] if tr else [off, kl]
            else:
                off = _apply(f"{tile.warp_col('s0')} + {FRAG_N * frag}", tid)
                local = [off, kl] if tr else [kl, off]
            pmap = ir.AffineMapAttr(ir.Attribute.parse(
                "affine_map<(d0, d1) -> (d1, d0)>" if tr else "affine_map<(d0, d1) -> (d0, d1)>"))
            vt = ir.VectorType(o.results[0].type)
            pad = o.operands[len(o.operands) - 1]
            if bf16:  # same bits, read as f16 (the contraction's operands change type)
                vt = ir.VectorType.get(vt.shape, f16)
                pad = arith.constant(f16, 0.0)
            new = vector.TransferReadOp(vt, fragment_buffers[operand], local, pmap, pad,
                                        ir.ArrayAttr.get([ir.BoolAttr.get(True)] * 2)).result
        o.results[0].replace_all_uses_with(new)
        o.erase()


# -- f32: register tiles of threads, tiles of A and B in shared memory ------------------------

#: Threads per block (16 x 16), each computing a 4 x 4 register tile of the 64 x 64 block tile.
SIMT_THREADS_N = 16
SIMT_THREADS = SIMT_THREADS_N * SIMT_THREADS_N
SIMT_TILE = 4
assert SIMT_THREADS_N * SIMT_TILE == BLOCK_M == BLOCK_N
assert BLOCK_M * STAGE_K == SIMT_THREADS * 4  # 4 elements of each tile copied per thread
#: Marks the outer reduction loop (steps of STAGE_K) of an f32 register tile.
SIMT_ATTR = GPU_SIMT_TILE


def _load(src: ir.Value, idx: list[ir.Value]) -> ir.Value:
    return memref.LoadOp(src, idx).result


def _rewrite_simt(generic: ir.Operation, plan: _Plan) -> None:
    """An f32 contraction as 64 x 64 block tiles of 16 x 16 threads, 4 x 4 outputs each,
    the reduction in steps of STAGE_K (the steps the GPU stages through shared memory)."""
    cshape = ir.MemRefType(plan.c.type).shape
    init = _fold_fill(generic, plan.c, constant_only=False)
    epilogue = _epilogue_of(generic, plan.c)
    with _block_tiles(generic, plan, cshape, SIMT_THREADS) as (tloop, blocks, threads):
        bidx = list(blocks.arguments)
        bat, bm, bn = bidx[:plan.batch], bidx[plan.batch], bidx[plan.batch + 1]
        t = threads.arguments[0]
        r0 = _apply(f"s1 + (s0 floordiv {SIMT_THREADS_N}) * {SIMT_TILE}", t, bm)
        c0 = _apply(f"s1 + (s0 mod {SIMT_THREADS_N}) * {SIMT_TILE}", t, bn)
        rows = [_apply(f"s0 + {i}", r0) for i in range(SIMT_TILE)]
        cols = [_apply(f"s0 + {j}", c0) for j in range(SIMT_TILE)]
        if init is not None:  # the fill folded in: accumulators start from its value
            accs = [init] * (SIMT_TILE * SIMT_TILE)
        else:
            accs = [_load(plan.c, bat + [r, c]) for r in rows for c in cols]
        outer = scf.ForOp(index_const(0), index_const(plan.k), index_const(STAGE_K), accs)
        outer.operation.attributes[SIMT_ATTR] = ir.UnitAttr.get()
        with ir.InsertionPoint(outer.body):
            inner = scf.ForOp(index_const(0), index_const(STAGE_K), index_const(1),
                              list(outer.inner_iter_args))
            with ir.InsertionPoint(inner.body):
                k = _apply("s0 + s1", outer.induction_variable, inner.induction_variable)
                a_vals, b_vals = [], []
                for i, r in enumerate(rows):
                    a_vals.append(_load(plan.a, bat + ([k, r] if plan.a_trans else [r, k])))
                    _tag(a_vals[-1], 0, i, plan.a_trans)
                for j, c in enumerate(cols):
                    b_vals.append(_load(plan.b, bat + ([c, k] if plan.b_trans else [k, c])))
                    _tag(b_vals[-1], 1, j, plan.b_trans)
                outs = []
                for i in range(SIMT_TILE):
                    for j in range(SIMT_TILE):
                        acc = inner.inner_iter_args[i * SIMT_TILE + j]
                        outs.append(arith.addf(acc, arith.mulf(a_vals[i], b_vals[j])))
                scf.YieldOp(outs)
            scf.YieldOp(list(inner.results))
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                memref.StoreOp(outer.results[i * SIMT_TILE + j], plan.c, bat + [r, c])
        if epilogue is not None:
            for i, r in enumerate(rows):
                for j, c in enumerate(cols):
                    _apply_epilogue(epilogue, plan.c, outer.results[i * SIMT_TILE + j],
                                    bat + [r, c])
    generic.erase()
    if epilogue is not None:
        epilogue.erase()


_PURE_BODY_PREFIXES = ("arith.", "math.")
_MOVABLE = ("memref.alloc", "memref.alloca", "arith.constant")


def _epilogue_of(generic: ir.Operation, out: ir.Value) -> ir.Operation | None:
    """The elementwise op right after `generic` that reads its output `out` at the same
    indices (a bias add, an activation, an SGD update): it runs in the tile's kernel,
    on the accumulators, before their stores (no kernel of its own)."""
    ops = ops_of(generic.block)
    pos = next(i for i, o in enumerate(ops) if o == generic)
    between = []  # allocations and constants (no operands): moved before the tile
    for nxt in ops[pos + 1:]:
        if nxt.name in _MOVABLE and len(nxt.operands) == 0:
            between.append(nxt)
            continue
        break
    else:
        return None
    if nxt.name != "linalg.generic" or len(nxt.results) != 0:
        return None
    view = nxt.opview
    ins, outs = list(view.inputs), list(view.outputs)
    rank = ir.MemRefType(out.type).rank
    iters = [str(a) for a in ir.ArrayAttr(nxt.attributes["iterator_types"])]
    if len(outs) != 1 or len(iters) != rank or any("parallel" not in t for t in iters):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(nxt.attributes["indexing_maps"])]
    identity = ir.AffineMap.get_identity(rank)
    o_t = outs[0].type
    if not isinstance(o_t, ir.MemRefType) or ir.MemRefType(o_t).shape != \
            ir.MemRefType(out.type).shape or maps[-1] != identity:
        return None
    if out not in ins or any(v == out and m != identity for v, m in zip(ins, maps)):
        return None  # reads the contraction's output at its own indices only
    # Other blocks still read the contraction's operands: the epilogue must not write them.
    contraction_ins = list(generic.opview.inputs)
    if _base(outs[0]) in [_base(v) for v in contraction_ins]:
        return None
    for v, m in zip(ins, maps):
        if not isinstance(v.type, ir.MemRefType) or \
                any(not isinstance(e, ir.AffineDimExpr) for e in m.results):
            return None
        for written in (outs[0], out):  # read elsewhere than where this thread writes
            if _base(v) == _base(written) and (v != written or m != identity):
                return None
    body = ops_of(nxt.regions[0].blocks[0])
    if any(o.regions or not (o.name.startswith(_PURE_BODY_PREFIXES)
                             or o.name == "linalg.yield") for o in body):
        return None
    for o in between:
        o.move_before(generic)
    return nxt


def _apply_epilogue(epilogue: ir.Operation, out: ir.Value, acc: ir.Value,
                    idx: list[ir.Value]) -> None:
    """The epilogue's body at one output element `idx`: `out` read as `acc`, its other
    inputs loaded, its result stored (at the insertion point)."""
    view = epilogue.opview
    ins, outs = list(view.inputs), list(view.outputs)
    maps = [ir.AffineMapAttr(m).value
            for m in ir.ArrayAttr(epilogue.attributes["indexing_maps"])]
    block = epilogue.regions[0].blocks[0]
    mapping: dict = {}
    for arg, v, m in zip(block.arguments, ins + outs, maps):
        if v == out and v in ins and arg.arg_number < len(ins):
            mapping[arg] = acc
        elif list(arg.uses):
            mapping[arg] = _load(v, [idx[e.position] for e in m.results])
    result = None
    for op in ops_of(block):
        if op.name == "linalg.yield":
            result = op.operands[0]
            result = mapping.get(result, result)
            break
        clone = op.clone(ip=ir.InsertionPoint.current)
        for k, operand in enumerate(list(clone.operands)):
            if operand in mapping:
                clone.operands[k] = mapping[operand]
        for old, new in zip(op.results, clone.results):
            mapping[old] = new
    memref.StoreOp(result, outs[0], idx)


def _stage_simt(gpu_module: ir.Operation, outer: ir.Operation) -> None:
    """At each STAGE_K step the block's threads copy the A tile (64 x 16) and the B tile
    (16 x 64) into shared memory, 4 elements each (contiguous in global memory), both
    stored k-major; a barrier; the register tile's loads then read shared memory; a
    barrier before the next step's copies."""
    obody = outer.regions[0].blocks[0]
    inner = next((o for o in ops_of(obody) if o.name == "scf.for"), None)
    if inner is None:
        return
    ibody = inner.regions[0].blocks[0]
    loads = [(o, _read_tag(o)) for o in ops_of(ibody)]
    loads = [(o, t) for o, t in loads if t is not None]
    first = {t[0]: o for o, t in loads if t[1] == 0}
    trans = {t[0]: t[2] for o, t in loads}
    if set(first) != {0, 1}:
        return
    f32 = ir.F32Type.get()
    taken = {ir.StringAttr(o.operation.attributes["sym_name"]).value
             for o in gpu_module.regions[0].blocks[0].operations
             if "sym_name" in o.operation.attributes}
    tiles = {op: _shared_tile(gpu_module, (STAGE_K, BLOCK_M), f32, taken, outer.location)
             for op in (0, 1)}
    nt = SIMT_THREADS_N
    with ir.InsertionPoint(outer), outer.location:
        tid = gpu_d.thread_id(gpu_d.Dimension.x)
        smem = {op: memref.GetGlobalOp(t, name).result for op, (name, t) in tiles.items()}
        origin = {}
        for op in (0, 1):
            ld = first[op]
            src = ld.operands[0]
            idx = list(ld.operands[1:])
            # The first element of the thread's register tile: block origin + thread offset.
            if op == 0:
                pos = -1 if trans[0] else -2
                origin[0] = _apply(f"s0 - (s1 floordiv {nt}) * {SIMT_TILE}", idx[pos], tid)
            else:
                pos = -2 if trans[1] else -1
                origin[1] = _apply(f"s0 - (s1 mod {nt}) * {SIMT_TILE}", idx[pos], tid)
        batch = list(first[0].operands[1:])[:-2]
    k0 = obody.arguments[0]
    with ir.InsertionPoint.at_block_begin(obody), outer.location:
        for op in (0, 1):
            src = first[op].operands[0]
            # k-contiguous operand (A as m x k, B as n x k): rows of 16 = 4 chunks of 4.
            k_contiguous = (op == 0 and not trans[0]) or (op == 1 and trans[1])
            for e in range(4):
                if k_contiguous:
                    mn = _apply("s1 + s0 floordiv 4", tid, origin[op])
                    kk = _apply(f"(s0 mod 4) * 4 + {e}", tid)
                    g = [mn, _apply("s0 + s1", k0, kk)]
                    local = [kk, _apply("s0 floordiv 4", tid)]
                else:  # m- or n-contiguous: rows of 64 = 16 chunks of 4
                    kk = _apply("s0 floordiv 16", tid)
                    off = _apply(f"(s0 mod 16) * 4 + {e}", tid)
                    g = [_apply("s0 + s1", k0, kk), _apply("s0 + s1", origin[op], off)]
                    local = [kk, off]
                memref.StoreOp(_load(src, batch + g), smem[op], local)
        gpu_d.barrier()
    with ir.InsertionPoint(ops_of(obody)[-1]), outer.location:
        gpu_d.barrier()
    kk = ibody.arguments[0]
    for o, (op, i, _, _) in loads:
        with ir.InsertionPoint(o), o.location:
            if op == 0:
                off = _apply(f"(s0 floordiv {nt}) * {SIMT_TILE} + {i}", tid)
            else:
                off = _apply(f"(s0 mod {nt}) * {SIMT_TILE} + {i}", tid)
            new = _load(smem[op], [kk, off])
        o.results[0].replace_all_uses_with(new)
        o.erase()



@dataclasses.dataclass(frozen=True)
class Bf16MmaOperands(_Step):
    """After the NVVM lowering: the mma.sync ops of bf16 tiles (read as f16 fragments,
    see `_stage_through_shared_memory`) take their A and B registers as bf16 pairs
    (`i32`, `multiplicandAPtxType = bf16`), as PTX's `mma.sync...bf16.bf16` does."""

    name = "autodiff-gpu-bf16-mma-operands"
    summary = "Retype the nvvm.mma.sync ops of bf16 warp tiles"

    def apply(self, module: ir.Operation) -> None:
        from mlir.dialects import llvm

        i32 = ir.IntegerType.get_signless(32)
        bf16 = ir.Attribute.parse("#nvvm.mma_type<bf16>")
        for gm in module.regions[0].blocks[0].operations:
            gm = gm.operation
            if gm.name != "gpu.module" or BF16_ATTR not in gm.attributes:
                continue
            for op in walk_ops(gm):
                if op.name != "nvvm.mma.sync":
                    continue
                segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
                n_ab = segments[0] + segments[1]
                with ir.InsertionPoint(op), op.location:
                    for i in range(n_ab):
                        op.operands[i] = llvm.BitcastOp(i32, op.operands[i]).result
                op.attributes["multiplicandAPtxType"] = bf16
                op.attributes["multiplicandBPtxType"] = bf16
            del gm.attributes[BF16_ATTR]
