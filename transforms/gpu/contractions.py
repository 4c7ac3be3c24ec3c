"""Contractions on tensor cores: warp-level `mma.sync` tiles, staged through shared memory.

`WarpTileContractions` (parallel stage) rewrites an f16 contraction
`linalg.generic` (a matmul, a batch matmul, or what AD produces: either
operand transposed) into a grid of 64 x 64 output tiles, each computed by a
block of 4 warps (128 threads). Every warp owns a 32 x 32 sub-tile: 2 x 4
fragments of 16 x 8 accumulators, kept in registers across the loop over
the reduced dimension, which advances 16 at a time:

    scf.parallel (%b..., %i, %j) step (1..., 64, 64) {              // blocks
      scf.parallel (%t) = (0) to (128) {                            // threads
        acc[f] = vector.transfer_read C[...]     (16x8, per fragment f)
        scf.for %k = 0 to K step 16 iter_args(acc) {
          a = vector.transfer_read A[...]        (16x16, transposed map if A is k x m)
          b = vector.transfer_read B[...]        (16x8,  transposed map if B is n x k)
          acc[f] = vector.contract(a, b, acc[f])
        }
        vector.transfer_write acc[f], C[...]
      }
    }

These are warp-level vector ops: every lane of a warp executes the same ops
on the same tile. On the CPU (the `parallel` stage the tests run) each
"thread" computes its warp's whole tile and the 32 lanes store identical
values, so the program there is the contraction itself, with the tiling,
the transposes and the batch indexing exercised.

In the kernel stage (after the loops became `gpu.launch` bodies) upstream's
`convert-vector-to-gpu{use-nvgpu}` turns the fragment reads, the
contractions and the writes into per-lane loads, `nvgpu.mma.sync` (m16n8k16,
f32 or f16 accumulators) and per-lane stores, and `convert-nvgpu-to-nvvm`
into `mma.sync.aligned`. The fragments are read from global memory: staging
the block's tiles through shared memory (`cp.async` into a workgroup
`memref.global`, `ldmatrix` from it, barriers) is not done yet.

Which contractions: one output, two f16 inputs, an f32 or f16 output,
`acc + ext(a) * ext(b)` in the body, static shapes, the reduction dimension
innermost (tensors.py puts it there) and the output indexed by the parallel
dimensions in order; the last two parallel dimensions are the output's rows
and columns, any before them batch dimensions both inputs share. Only
multiples of the tile (64 rows, 64 columns, 32 reduced) are rewritten; other
shapes keep the generic path (one thread per output). Only when the chip is
sm_80 or newer. bf16 stays on the generic path: MLIR 22's nvgpu has no bf16
fragments.
"""

from __future__ import annotations

import dataclasses
import re

from mlir import ir
from mlir.dialects import affine as affine_d
from mlir.dialects import arith, scf, vector

from ..ad_support import walk_ops
from ..bufferize import ContextPass as _Step
from .reductions import _GRID, _ROW, _region
from .support import index_const, new_parallel, on_host, ops_of

#: Output tile per block (rows, columns), warps per block (rows x columns),
#: mma fragment shape (m, n, k) and the reduced elements staged per step.
BLOCK_M, BLOCK_N = 64, 64
WARPS_M, WARPS_N = 2, 2
FRAG_M, FRAG_N, FRAG_K = 16, 8, 16
STAGE_K = 32
WARPS = WARPS_M * WARPS_N
#: Marks the warp loop (one iteration per warp until WarpsToLanes).
WARP_ATTR = "autodiff.gpu.warp_loop"
#: Marks the reduction loop of a warp-tiled contraction (for the staging pass).
TILE_ATTR = "autodiff.gpu.mma_tile"

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


def _plan(generic: ir.Operation) -> _Plan | None:
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
    if any(t is None or not t.has_static_shape for t in types):
        return None
    f16 = ir.F16Type.get()
    if types[0].element_type != f16 or types[1].element_type != f16 or \
            types[2].element_type not in (f16, ir.F32Type.get()):
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
    if any(x is None for x in d) or d[2] != list(range(rank)):
        return None
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
    return _Plan(ops[ia], ops[ib], ops[2], rank - 2, m, n, k, a_trans, b_trans)


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


def _rewrite(generic: ir.Operation, plan: _Plan) -> None:
    ctype = ir.MemRefType(plan.c.type)
    cshape = ctype.shape
    acc_t = ir.VectorType.get([FRAG_M, FRAG_N], ctype.element_type)
    f16 = ir.F16Type.get()
    contract_maps = ir.ArrayAttr.get([
        ir.Attribute.parse(f"affine_map<{t}>")
        for t in ("(m, n, k) -> (m, k)", "(m, n, k) -> (k, n)", "(m, n, k) -> (m, n)")
    ])
    iters = ir.ArrayAttr.get([ir.Attribute.parse(f"#vector.iterator_type<{t}>")
                              for t in ("parallel", "parallel", "reduction")])
    # In "grid"/"row" regions as block reductions are (reductions.py): no loop fuses
    # into the block loop and canonicalization does not merge it with the thread loop;
    # InlineBlockReductions puts them back.
    with ir.InsertionPoint(generic), generic.location:
        grid = _region(_GRID)
    with ir.InsertionPoint(ops_of(grid.regions[0].blocks[0])[-1]), generic.location:
        zero, one = index_const(0), index_const(1)
        lbs = [zero] * (plan.batch + 2)
        ubs = [index_const(s) for s in cshape]
        steps = [one] * plan.batch + [index_const(BLOCK_M), index_const(BLOCK_N)]
        _, blocks, bterm = new_parallel(lbs, ubs, steps)
        with ir.InsertionPoint(bterm):
            row = _region(_ROW)
        with ir.InsertionPoint(ops_of(row.regions[0].blocks[0])[-1]):
            tloop, threads, tterm = new_parallel([index_const(0)], [index_const(WARPS)],
                                                 [index_const(1)])
            tloop.attributes[WARP_ATTR] = ir.UnitAttr.get()
        with ir.InsertionPoint(tterm):
            bidx = list(blocks.arguments)
            bat, bm, bn = bidx[:plan.batch], bidx[plan.batch], bidx[plan.batch + 1]
            t = threads.arguments[0]
            wm = _apply(f"s1 + (s0 floordiv {WARPS_N}) * {BLOCK_M // WARPS_M}", t, bm)
            wn = _apply(f"s1 + (s0 mod {WARPS_N}) * {BLOCK_N // WARPS_N}", t, bn)
            fm, fn = BLOCK_M // WARPS_M // FRAG_M, BLOCK_N // WARPS_N // FRAG_N
            rows = [_apply(f"s0 + {FRAG_M * i}", wm) for i in range(fm)]
            cols = [_apply(f"s0 + {FRAG_N * j}", wn) for j in range(fn)]
            cpad = arith.constant(ctype.element_type, 0.0)
            apad = arith.constant(f16, 0.0)
            accs = [_read(plan.c, bat + [rows[i], cols[j]], (FRAG_M, FRAG_N), False, cpad)
                    for i in range(fm) for j in range(fn)]
            loop = scf.ForOp(index_const(0), index_const(plan.k), index_const(FRAG_K), accs)
            loop.operation.attributes[TILE_ATTR] = ir.UnitAttr.get()
            with ir.InsertionPoint(loop.body):
                kk = loop.induction_variable
                a_frags = []
                for i in range(fm):
                    idx = bat + ([kk, rows[i]] if plan.a_trans else [rows[i], kk])
                    a_frags.append(_read(plan.a, idx, (FRAG_M, FRAG_K), plan.a_trans, apad))
                b_frags = []
                for j in range(fn):
                    idx = bat + ([cols[j], kk] if plan.b_trans else [kk, cols[j]])
                    b_frags.append(_read(plan.b, idx, (FRAG_K, FRAG_N), plan.b_trans, apad))
                outs = []
                for i in range(fm):
                    for j in range(fn):
                        acc = loop.inner_iter_args[i * fn + j]
                        outs.append(vector.ContractionOp(acc_t, a_frags[i], b_frags[j], acc,
                                                         contract_maps, iters).result)
                scf.YieldOp(outs)
            in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)] * 2)
            rank = len(cshape)
            names = ", ".join(f"d{i}" for i in range(rank))
            pmap = ir.AffineMapAttr(ir.Attribute.parse(
                f"affine_map<({names}) -> (d{rank - 2}, d{rank - 1})>"))
            for i in range(fm):
                for j in range(fn):
                    vector.TransferWriteOp(None, loop.results[i * fn + j], plan.c,
                                           bat + [rows[i], cols[j]], pmap, in_bounds)
    generic.erase()


@dataclasses.dataclass(frozen=True)
class WarpTileContractions(_Step):
    """f16 contractions become blocks of warps computing mma-shaped tiles (vector ops)."""

    name = "autodiff-gpu-warp-tile-contractions"
    summary = "Rewrite f16 contraction generics into warp-level vector tiles for mma.sync"

    chip: str = "sm_80"

    def apply(self, module: ir.Operation) -> None:
        if _sm(self.chip) < _MIN_SM:
            return
        for op in list(walk_ops(module)):
            if op.name == "linalg.generic" and on_host(op):
                plan = _plan(op)
                if plan is not None:
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
            if op.name != "scf.parallel" or WARP_ATTR not in op.attributes:
                continue
            view = op.opview
            with ir.InsertionPoint(op), op.location:
                ub = index_const(32 * WARPS)
            view.operation.operands[1] = ub
            body = op.regions[0].blocks[0]
            lane = body.arguments[0]
            first = ops_of(body)[0]
            with ir.InsertionPoint(first), op.location:
                warp = _apply("s0 floordiv 32", lane)
            for use in list(lane.uses):
                owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
                if owner != warp.owner.operation if isinstance(warp.owner, ir.OpView) \
                        else warp.owner:
                    owner.operands[use.operand_number] = warp
            del op.attributes[WARP_ATTR]
