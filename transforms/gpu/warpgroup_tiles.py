"""Warpgroup tiles: f16/bf16 contractions on sm_90a through TMA and `wgmma`.

`WarpgroupTiles` (kernel stage, after `DeviceMemory`) takes the large tensor-core
tiles `WarpTileContractions` made (contractions.py: 128 x 128 output tiles of
four warps, mma.sync) in any operand layout (A m x k or k x m, B k x n or
n x k: a matmul and the transposed contractions reverse mode makes of it),
batched or not (a batch's operands are 2-D views of their stacked matrices,
one layer of the grid per matrix), whose extents are multiples of
128 x 128 x 64 and whose
accumulators start at zero, and, when the target is `sm_90a` (the only chip
with warpgroup MMA), replaces the tile's block loop with a `gpu.launch` of
Hopper's data path, built from upstream's `nvgpu` ops:

    host:   a tensor map per operand (`nvgpu.tma.create.descriptor`; the runtime's
            mgpuTensorMapEncodeTiledMemref), 128-byte swizzle: A m x k in 128 x 64
            boxes (K-major for the MMA), k x m in 64 x 64 (MN-major); B k x n in
            64 x 64 boxes (MN-major), n x k in boxes of the tile's rows x 64
    kernel: one warpgroup (128 threads) per 128 x 128 output tile (`TILE_N`)
            `STAGES` buffers of A (128 x 64) and B (64 x 128), each with an
            mbarrier; thread 0 keeps `STAGES - 1` steps of the bulk tensor
            copies in flight (`nvgpu.tma.async.load`, completing on the step's
            mbarrier with its byte count)
            each 64-deep step: wait on the step's barrier, eight m64n128k16
            `wgmma.mma_async` (A m x k, B k x n: upstream's
            `nvgpu.warpgroup.mma`; other layouts: the same ops written here
            with their descriptors, `_mma`), this step's group left in flight
            and the previous one waited for, a block barrier (every warp is
            done with the previous step's buffers), then thread 0 refills the
            buffers the previous step read
            epilogue: accumulators to shared memory (rows padded to 136
            floats), then each thread stores 4 consecutive outputs at a time
            through the tile's elementwise epilogue (a bf16 conversion, an
            activation) with coalesced rows

Shared memory is realigned to 1024 bytes at run time (the 128-byte swizzle
repeats every 1024 bytes and the wgmma descriptors assume a tile starts on
one); `STAGES` x 32 KB + 1 KB per block, so three stages leave room for two
blocks per multiprocessor. `TILE_N = 256` (a variant, not the default) makes
the tile 128 x 256 for two warpgroups (256 threads), each the MMA of 64 rows
by all 256 columns (m64n256k16): more arithmetic per byte copied (85 flops
per byte against 64), at 48 KB per stage and one block per multiprocessor.

Other contractions (ragged extents, fewer steps than stages, other chips) keep
the mma.sync tiles. On the CPU (`stage=parallel`) nothing changes:
this runs at the kernel stage only.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import vector

from ...dialects.vocabulary import GPU_TILE_READ, GPU_WGMMA_FLAT, GPU_WGMMA_OUT
from ..ad_support import defining_op, int_constant, walk_ops
from ..bufferize import ContextPass as _Step
from .contractions import EPILOGUE_ATTR, TILE_ATTR, _lifted, _splat
from .support import identity_layout, ops_of

#: Buffers (64-deep steps of A and B) in flight per block.
STAGES = 3
#: Row-major A and B through the wgmma ops and descriptors written here (`_mma`, what
#: the other layouts take) rather than upstream's `nvgpu.warpgroup.mma`: a variant for
#: the device run to compare the two.
OWN_DESCRIPTORS = False
#: What exported and jit-compiled GPU code takes (`LowerToGpu(wgmma=...)` decides
#: for the pass): off until a device run has checked the kernels.
ENABLED = False
#: Output tile per block and reduced elements per step (one swizzle row of 16-bit
#: elements: 64 x 2 bytes). TILE_N 256: two warpgroups, each 64 rows of the tile.
TILE_M, TILE_N, TILE_K = 128, 128, 64
#: The mma.sync tile whose block loop is replaced (contractions.LARGE).
_MMA_TILE = 128
#: Marks the host's 2-D view of a batched operand (stacked matrices).
_FLAT_ATTR = GPU_WGMMA_FLAT
#: Marks the vector.load that reads 4 accumulators back in the epilogue loop.
_OUT_ATTR = GPU_WGMMA_OUT


def supported_chip(chip: str) -> bool:
    """Whether `chip` has warpgroup MMA: sm_90a (arch-specific; plain sm_90 does not)."""
    return chip == "sm_90a"


def _zero_constant(v: ir.Value) -> bool:
    op = defining_op(v)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return False
    value = attr.get_splat_value()
    return isinstance(value, ir.FloatAttr) and value.value == 0.0


@dataclasses.dataclass
class _Match:
    block_loop: ir.Operation
    a: ir.Value
    b: ir.Value
    c: ir.Value
    acc: ir.Value  # one accumulator (the tile loop's first result)
    epilogue: list[ir.Operation]  # elementwise ops from `acc` to its write
    m: int
    n: int
    k: int
    batch: int = 0  # a leading batch dimension of A, B and C (0: none)
    ta: bool = False  # A stored k x m: MN-major for the MMA
    tb: bool = False  # B stored n x k: K-major for the MMA


def _reads(tile_for: ir.Operation) -> dict[int, list[ir.Operation]]:
    out: dict[int, list[ir.Operation]] = {}
    for op in ops_of(tile_for.regions[0].blocks[0]):
        if op.name == "vector.transfer_read" and GPU_TILE_READ in op.attributes:
            tag = list(ir.DenseI32ArrayAttr(op.attributes[GPU_TILE_READ]))
            out.setdefault(tag[0], []).append((op, tag))
    return out


def _epilogue_chain(acc: ir.Value, tile_for: ir.Operation) -> tuple[list[ir.Operation],
                                                                   ir.Operation] | None:
    """The elementwise ops from accumulator `acc` to the tile's write of it, and the
    write: each op has one result, used once, and its other operands are splat
    constants. (A plain write of `acc` beside an epilogue, at the same place of the
    same buffer, is overwritten by the epilogue's: the tile's output buffer reused
    for the epilogue's output.)"""
    chain: list[ir.Operation] = []
    v = acc
    users = [u.owner.operation if isinstance(u.owner, ir.OpView) else u.owner
             for u in acc.uses]
    dead = [u for u in users if u.name == "vector.transfer_write" and
            EPILOGUE_ATTR not in u.attributes]
    if len(users) == 2 and len(dead) == 1:
        (plain,) = dead
        (other,) = [u for u in users if u != plain]
        found = _epilogue_chain_from(other, acc, tile_for)
        if found is None or list(found[1].operands)[1:] != list(plain.operands)[1:]:
            return None
        order = ops_of(plain.block)
        if plain.block != found[1].block or order.index(plain) > order.index(found[1]):
            return None  # the plain write would be the one that stays
        return found
    while True:
        users = [u.owner.operation if isinstance(u.owner, ir.OpView) else u.owner
                 for u in v.uses]
        if len(users) != 1:
            return None
        (user,) = users
        if user.name == "vector.transfer_write":
            if user.operands[0] != v:
                return None
            return chain, user
        if not _elementwise_step(user, v, tile_for):
            return None
        chain.append(user)
        v = user.results[0]


def _epilogue_chain_from(first: ir.Operation, acc: ir.Value, tile_for: ir.Operation) -> \
        tuple[list[ir.Operation], ir.Operation] | None:
    """`_epilogue_chain` from the epilogue's first op `first` (a user of `acc`)."""
    if first.name == "vector.transfer_write" or len(first.results) != 1:
        return None
    rest = _epilogue_chain(first.results[0], tile_for)
    if rest is None or not _elementwise_step(first, acc, tile_for):
        return None
    return [first, *rest[0]], rest[1]


def _elementwise_step(user: ir.Operation, v: ir.Value, tile_for: ir.Operation) -> bool:
    """`user` is an arith/math op of one result beside the tile, on `v` and splats."""
    if len(user.results) != 1 or user.parent != tile_for.parent or \
            not (user.name.startswith("arith.") or user.name.startswith("math.")):
        return False
    for x in user.operands:
        if x == v:
            continue
        o = defining_op(x)
        if o is None or o.name != "arith.constant" or \
                not isinstance(o.attributes["value"], ir.DenseElementsAttr) or \
                not o.attributes["value"].is_splat:
            return False
    return True


def _match(tile_for: ir.Operation) -> _Match | None:
    lanes = tile_for.parent
    if lanes is None or lanes.name != "scf.parallel":
        return None
    block_loop = lanes.parent
    if block_loop is None or block_loop.name != "scf.parallel":
        return None
    if any(o.name not in ("arith.constant", "scf.reduce") and o != lanes
           for o in ops_of(block_loop.regions[0].blocks[0])):
        return None
    tile = list(ir.DenseI32ArrayAttr(tile_for.attributes[TILE_ATTR]))
    if tile[:2] != [_MMA_TILE, _MMA_TILE]:
        return None  # only where the large tile was chosen (enough tiles for the chip)
    if not all(_zero_constant(v) for v in tile_for.opview.initArgs):
        return None
    reads = _reads(tile_for)
    if set(reads) != {0, 1}:
        return None
    # how each operand is stored: A k x m (MN-major for the MMA), B n x k (K-major)
    trans = [{tag[2] for _, tag in reads[o]} for o in (0, 1)]
    if any(len(t) != 1 for t in trans):
        return None
    ta, tb = (bool(t.pop()) for t in trans)
    a, b = reads[0][0][0].operands[0], reads[1][0][0].operands[0]
    if any(r.operands[0] != a for r, _ in reads[0]) or \
            any(r.operands[0] != b for r, _ in reads[1]):
        return None
    at, bt = a.type, b.type
    if not (isinstance(at, ir.MemRefType) and isinstance(bt, ir.MemRefType)):
        return None
    rank = at.rank
    if rank not in (2, 3) or bt.rank != rank or not identity_layout(at) or \
            not identity_layout(bt) or not at.has_static_shape or not bt.has_static_shape:
        return None
    batch = at.shape[0] if rank == 3 else 0
    if rank == 3 and bt.shape[0] != batch:
        return None
    elt = at.element_type
    if elt not in (ir.BF16Type.get(), ir.F16Type.get()) or bt.element_type != elt:
        return None
    a2, b2 = list(at.shape)[rank - 2:], list(bt.shape)[rank - 2:]
    (m, k), (k2, n) = a2[::-1] if ta else a2, b2[::-1] if tb else b2
    if k != k2 or m % TILE_M or n % TILE_N or k % TILE_K or k // TILE_K < STAGES:
        return None
    chains = [_epilogue_chain(r, tile_for) for r in tile_for.results]
    if any(ch is None for ch in chains):
        return None
    writes = [w for _, w in chains]
    c = writes[0].operands[1]
    ct = c.type
    if any(w.operands[1] != c for w in writes) or not isinstance(ct, ir.MemRefType) or \
            ct.rank != rank or list(ct.shape) != ([batch] if batch else []) + [m, n] or \
            not identity_layout(ct):
        return None
    acc_t = ir.VectorType(tile_for.results[0].type)
    if acc_t.element_type != ir.F32Type.get():
        return None
    # the block loop WarpTileContractions made for this contraction: one iteration per
    # output tile (canonicalization drops dimensions of one iteration)
    view = block_loop.opview
    bounds = [[int_constant(v) for v in vs]
              for vs in (view.lowerBound, view.upperBound, view.step)]
    if any(x is None for b in bounds for x in b):
        return None
    trips = 1
    for lo, hi, st in zip(*bounds):
        trips *= -(-(hi - lo) // st) if st > 0 else 0
    if trips != max(batch, 1) * (m // _MMA_TILE) * (n // _MMA_TILE):
        return None
    return _Match(block_loop, a, b, c, tile_for.results[0], chains[0][0], m, n, k, batch,
                  ta, tb)


def _loads(mt: _Match, tn: int) -> tuple[list, list]:
    """The bulk copies of one step: (map, box rows, box columns, coordinates, byte offset
    in the operand's buffer) for A, then for B. A m x k: one 128 x 64 box of rows;
    k x m: two 64 x 64 boxes (the MMA reads it MN-major). B k x n: 64 x 64 boxes side by
    side (MN-major); n x k: one box of `tn` rows (K-major)."""
    half = TILE_K * 64 * 2
    # (a batch's matrices are stacked rows: %m0b, %n0b and %kcb are the row coordinates
    # of this block's batch)
    a = [("%ma", 64, 64, f"[%m{j}, %kcb]", j * half) for j in range(2)] if mt.ta else \
        [("%ma", TILE_M, TILE_K, "[%kc, %m0b]", 0)]
    b = [("%mb", tn, TILE_K, "[%kc, %n0b]", 0)] if mt.tb else \
        [("%mb", TILE_K, 64, f"[%n{j}, %kcb]", j * half) for j in range(tn // 64)]
    return a, b


def _descriptor_bits(mn_major: bool) -> int:
    """A wgmma shared-memory descriptor without its start address: the 128-byte swizzle
    (bits 62-63), 1 KiB between groups of 8 rows (stride, bits 32-45) and, MN-major,
    8 KiB between the 64-wide blocks of the MN dimension (leading offset, bits 16-29;
    unused K-major: the 64 reduced elements of a row are one swizzled 128-byte row)."""
    lead = 8192 if mn_major else 16
    return (1 << 62) | ((1024 >> 4) << 32) | ((lead >> 4) << 16)


def _mma(mt: _Match, elt: str, acc: str, rows: int, tn: int, a_bytes: int, b_bytes: int,
         s: int) -> str:
    """One step's MMA of a warpgroup's rows, when an operand is stored transposed:
    upstream's `nvgpu.warpgroup.mma` knows row-major A and MN-major B only, so the
    wgmma ops are written here, with their descriptors: per 16 reduced elements, a
    K-major operand's start moves 32 bytes along its swizzled rows, an MN-major one's
    2 KiB (16 rows of 128 bytes); A's second 64 rows are 8 KiB on."""
    halves = rows // 64
    inner = "!llvm.struct<(" + ", ".join(["f32"] * (tn // 2)) + ")>"
    outer = "!llvm.struct<(" + ", ".join([inner] * halves) + ")>"
    la, lb = ("col" if mt.ta else "row"), ("col" if mt.tb else "row")
    a_step, b_step = (2048 if mt.ta else 32), (32 if mt.tb else 2048)
    text = f"""
        %sacc = builtin.unrealized_conversion_cast %acc : {acc} to {outer}
        %ab0 = arith.muli %stage, %c{a_bytes} : index
        %ab1 = arith.addi %ab0, %pad : index
        %ab2 = arith.addi %ab1, %wga : index
        %abase = arith.addi %ab2, %addr : index
        %bb0 = arith.muli %stage, %c{b_bytes} : index
        %bb1 = arith.addi %bb0, %c{s * a_bytes} : index
        %bb2 = arith.addi %bb1, %pad : index
        %bbase = arith.addi %bb2, %addr : index
        %dbits_a = arith.constant {_descriptor_bits(mt.ta)} : i64
        %dbits_b = arith.constant {_descriptor_bits(not mt.tb)} : i64
        %d4 = arith.constant 4 : i64
        %d14 = arith.constant 16383 : i64"""

    def desc(name: str, base: str, offset: int, bits: str) -> str:
        return f"""
        %{name}o = arith.constant {offset} : index
        %{name}a = arith.addi {base}, %{name}o : index
        %{name}i = arith.index_cast %{name}a : index to i64
        %{name}s = arith.shrui %{name}i, %d4 : i64
        %{name}m = arith.andi %{name}s, %d14 : i64
        %{name} = arith.ori %{name}m, {bits} : i64"""

    for q in range(4):
        text += desc(f"db{q}", "%bbase", q * b_step, "%dbits_b")
    text += "\n        nvvm.wgmma.fence.aligned"
    value = "%sacc"
    for h in range(halves):
        cur = f"%h{h}"
        text += f"\n        {cur} = llvm.extractvalue %sacc[{h}] : {outer}"
        for q in range(4):
            text += desc(f"da{h}{q}", "%abase", h * 8192 + q * a_step, "%dbits_a")
            nxt = f"%h{h}k{q}"
            text += (f"\n        {nxt} = nvvm.wgmma.mma_async %da{h}{q}, %db{q}, {cur}, "
                     f"<m = 64, n = {tn}, k = 16>, D[<f32>, <one>, <wrapped>], "
                     f"A[<{elt}>, <one>, <{la}>], B[<{elt}>, <one>, <{lb}>] "
                     f": {inner} -> {inner}")
            cur = nxt
        text += f"\n        %accv{h} = llvm.insertvalue {cur}, {value}[{h}] : {outer}"
        value = f"%accv{h}"
    text += f"""
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 1
        %acc2 = builtin.unrealized_conversion_cast {value} : {outer} to {acc}"""
    return text


def _template(mt: _Match) -> str:
    elt = str(ir.MemRefType(mt.a.type).element_type)
    out = str(ir.MemRefType(mt.c.type).element_type)
    s, tn = STAGES, TILE_N
    groups = tn // 128  # warpgroups: each takes rows / groups of the tile, all its columns
    rows = TILE_M // groups
    threads = 128 * groups
    acc_row = tn + 8  # floats per row of the accumulators' copy (8 banks apart)
    a_bytes = TILE_M * TILE_K * 2
    b_bytes = tn * TILE_K * 2
    # the stages, or the accumulators' copy after them, and the realignment
    smem = max(s * (a_bytes + b_bytes), TILE_M * acc_row * 4) + 1024
    per_thread = TILE_M * tn // (threads * 4)  # epilogue iterations (4 outputs each)
    sm = "#gpu.address_space<workgroup>"
    a_loads, b_loads = _loads(mt, tn)

    def tmap(box_rows: int, box_cols: int) -> str:
        return (f"!nvgpu.tensormap.descriptor<tensor = memref<{box_rows}x{box_cols}x{elt}, "
                f"{sm}>, swizzle = swizzle_128b, l2promo = none, oob = zero, "
                "interleave = none>")

    map_a, map_b = tmap(*a_loads[0][1:3]), tmap(*b_loads[0][1:3])
    bar = f"!nvgpu.mbarrier.group<memorySpace = {sm}, num_barriers = {s}>"
    acc = f"!nvgpu.warpgroup.accumulator<fragmented = vector<{rows}x{tn}xf32>>"
    da = f"!nvgpu.warpgroup.descriptor<tensor = memref<{rows}x{TILE_K}x{elt}, {sm}>>"
    db = f"!nvgpu.warpgroup.descriptor<tensor = memref<{TILE_K}x{tn}x{elt}, {sm}>>"
    vaw = f"memref<{rows}x{TILE_K}x{elt}, {sm}>"
    vb = f"memref<{TILE_K}x{tn}x{elt}, {sm}>"
    dyn = f"memref<?xi8, {sm}>"
    vc = f"memref<{TILE_M}x{acc_row}xf32, {sm}>"
    vcs = f"memref<{rows}x{tn}xf32, strided<[{acc_row}, 1]>, {sm}>"
    m, n, k = mt.m, mt.n, mt.k
    a_shape = f"{k}x{m}" if mt.ta else f"{m}x{k}"
    b_shape = f"{n}x{k}" if mt.tb else f"{k}x{n}"
    # a batch: the operands as 2-D memrefs of stacked matrices
    bt = max(mt.batch, 1)
    bp = f"{mt.batch}x" if mt.batch else ""

    def stacked(shape: str) -> str:
        rows, cols = map(int, shape.split("x"))
        return f"{bt * rows}x{cols}"

    a2, b2, c2 = stacked(a_shape), stacked(b_shape), stacked(f"{m}x{n}")
    collapse, flat_a, flat_b = "", "%A", "%B"
    if mt.batch:
        for name, shape, flat, t in (("A", a_shape, a2, elt), ("B", b_shape, b2, elt),
                                     ("C", f"{m}x{n}", c2, out)):
            collapse += (f"\n  %{name}2 = memref.collapse_shape %{name} [[0, 1], [2]] "
                         f"{{{_FLAT_ATTR}}} : memref<{bp}{shape}x{t}> into memref<{flat}x{t}>")
        flat_a, flat_b = "%A2", "%B2"

    def issue(step: str, slot: str, pred: str, tag: str) -> str:
        text = f"""
      %kc{tag} = arith.muli {step}, %c{TILE_K} : index
      %kcb{tag} = arith.addi %kc{tag}, %zk : index
      %oa{tag}0 = arith.muli {slot}, %c{a_bytes} : index
      %oa{tag} = arith.addi %oa{tag}0, %pad : index
      %ob{tag}0 = arith.muli {slot}, %c{b_bytes} : index
      %ob{tag}1 = arith.addi %ob{tag}0, %c{s * a_bytes} : index
      %ob{tag} = arith.addi %ob{tag}1, %pad : index
      nvgpu.mbarrier.arrive.expect_tx %bar[{slot}], %c{a_bytes + b_bytes}, predicate = {pred} : {bar}"""
        for operand, loads in (("a", a_loads), ("b", b_loads)):
            for j, (mp, br, bc, coords, offset) in enumerate(loads):
                view = f"memref<{br}x{bc}x{elt}, {sm}>"
                at = f"%o{tag}{operand}{j}"
                text += f"""
      {at} = arith.addi %o{operand}{tag}, %c{offset} : index
      %t{tag}{operand}{j} = memref.view %dyn[{at}][] : {dyn} to {view}
      nvgpu.tma.async.load {mp}{coords.replace("%kcb", f"%kcb{tag}").replace("%kc,", f"%kc{tag},")}, %bar[{slot}] to %t{tag}{operand}{j}, predicate = {pred} : {tmap(br, bc)}, {bar} -> {view}"""
        return text

    offsets = {o for *_, o in a_loads + b_loads}
    consts = sorted({0, 1, 4, 64, 128, 1024, TILE_K, a_bytes, b_bytes, s, s - 1,
                     s * a_bytes, a_bytes + b_bytes, k // TILE_K, threads, tn // 4,
                     per_thread, rows * 128, *offsets, *(64 * j for j in range(tn // 64))})
    kconsts = "\n".join(f"      %c{v} = arith.constant {v} : index" for v in consts)
    columns = "\n".join(f"      %n{j} = arith.addi %n0, %c{64 * j} : index"
                        for j in range(1, tn // 64))
    if mt.ta or mt.tb or OWN_DESCRIPTORS:
        mma = _mma(mt, elt, acc, rows, tn, a_bytes, b_bytes, s)
    else:  # upstream's warpgroup MMA: row-major A, MN-major B
        mma = f"""
        %xa0 = arith.muli %stage, %c{a_bytes} : index
        %xa1 = arith.addi %xa0, %pad : index
        %xa = arith.addi %xa1, %wga : index
        %xb0 = arith.muli %stage, %c{b_bytes} : index
        %xb1 = arith.addi %xb0, %c{s * a_bytes} : index
        %xb = arith.addi %xb1, %pad : index
        %sa = memref.view %dyn[%xa][] : {dyn} to {vaw}
        %sb = memref.view %dyn[%xb][] : {dyn} to {vb}
        %da = nvgpu.warpgroup.generate.descriptor %sa, %ma : {vaw}, {map_a} -> {da}
        %db = nvgpu.warpgroup.generate.descriptor %sb, %mb : {vb}, {map_b} -> {db}
        %acc2 = nvgpu.warpgroup.mma %da, %db, %acc {{transposeB}} : {da}, {db}, {acc} -> {acc}"""
    return f"""
func.func @wgmma_tile(%A: memref<{bp}{a_shape}x{elt}>, %B: memref<{bp}{b_shape}x{elt}>, %C: memref<{bp}{m}x{n}x{out}>) {{{collapse}
  %ua = memref.cast {flat_a} : memref<{a2}x{elt}> to memref<*x{elt}>
  %ub = memref.cast {flat_b} : memref<{b2}x{elt}> to memref<*x{elt}>
  %hra = arith.constant {a_loads[0][1]} : index
  %hca = arith.constant {a_loads[0][2]} : index
  %hrb = arith.constant {b_loads[0][1]} : index
  %hcb = arith.constant {b_loads[0][2]} : index
  %ma = nvgpu.tma.create.descriptor %ua box[%hra, %hca] : memref<*x{elt}> -> {map_a}
  %mb = nvgpu.tma.create.descriptor %ub box[%hrb, %hcb] : memref<*x{elt}> -> {map_b}
  %gx = arith.constant {n // tn} : index
  %gy = arith.constant {m // TILE_M} : index
  %gz = arith.constant {bt} : index
  %g1 = arith.constant 1 : index
  %gt = arith.constant {threads} : index
  %size = arith.constant {smem} : i32
  gpu.launch blocks(%bx, %by, %bz) in (%sx = %gx, %sy = %gy, %sz = %gz)
      threads(%tx, %ty, %tz) in (%ux = %gt, %uy = %g1, %uz = %g1)
      dynamic_shared_memory_size %size {{
{kconsts}
      %false = arith.constant false
      %true = arith.constant true
      %ticks = arith.constant 10000000 : index
      %tid = gpu.thread_id x
      %bidx = gpu.block_id x
      %bidy = gpu.block_id y
      %ntile = arith.constant {tn} : index
      %n0 = arith.muli %bidx, %ntile : index
      %m0 = arith.muli %bidy, %c128 : index
      %m1 = arith.addi %m0, %c64 : index
      // this block's batch: its matrices' first rows in the stacked operands
      %bidz = gpu.block_id z
      %rows_c = arith.constant {m} : index
      %rows_k = arith.constant {k} : index
      %rows_n = arith.constant {n} : index
      %zm = arith.muli %bidz, %rows_c : index
      %zk = arith.muli %bidz, %rows_k : index
      %zn = arith.muli %bidz, %rows_n : index
      %m0b = arith.addi %m0, %zm : index
      %n0b = arith.addi %n0, %zn : index
{columns}
      %leader = arith.cmpi eq, %tid, %c0 : index
      // this thread's warpgroup: its rows of the tile
      %wg = arith.divui %tid, %c128 : index
      %wga = arith.muli %wg, %c{rows * 128} : index
      %dyn = gpu.dynamic_shared_memory : {dyn}
      %addr = memref.extract_aligned_pointer_as_index %dyn : {dyn} -> index
      %mis = arith.remui %addr, %c1024 : index
      %pad0 = arith.subi %c1024, %mis : index
      %pad = arith.remui %pad0, %c1024 : index
      %bar = nvgpu.mbarrier.create -> {bar}
      scf.for %i = %c0 to %c{s} step %c1 {{
        nvgpu.mbarrier.init %bar[%i], %c1, predicate = %leader : {bar}
      }}
      gpu.barrier
      nvgpu.tma.prefetch.descriptor %ma, predicate = %leader : {map_a}
      nvgpu.tma.prefetch.descriptor %mb, predicate = %leader : {map_b}
      scf.for %p = %c0 to %c{s - 1} step %c1 {{{issue("%p", "%p", "%leader", "p")}
      }}
      %acc0 = nvgpu.warpgroup.mma.init.accumulator -> {acc}
      %res:2 = scf.for %kk = %c0 to %c{k // TILE_K} step %c1
          iter_args(%acc = %acc0, %par = %false) -> ({acc}, i1) {{
        %stage = arith.remui %kk, %c{s} : index
        nvgpu.mbarrier.try_wait.parity %bar[%stage], %par, %ticks : {bar}{mma}
        // every warp's part of the previous step's wgmma is done (its wait_group 1)
        // before thread 0 refills the buffers that step read
        gpu.barrier
        %next = arith.addi %kk, %c{s - 1} : index
        %inr = arith.cmpi ult, %next, %c{k // TILE_K} : index
        %more = arith.andi %leader, %inr : i1
        %slot = arith.remui %next, %c{s} : index{issue("%next", "%slot", "%more", "l")}
        %last = arith.cmpi eq, %stage, %c{s - 1} : index
        %flip = arith.xori %par, %true : i1
        %par2 = arith.select %last, %flip, %par : i1
        scf.yield %acc2, %par2 : {acc}, i1
      }}
      nvvm.wgmma.wait.group.sync.aligned 0
      gpu.barrier
      %vc = memref.view %dyn[%pad][] : {dyn} to {vc}
      // (upstream's store places each warp's rows by its index in the block: the
      // second warpgroup's land 64 rows down, past this view's rows, in the copy)
      %vcs = memref.reinterpret_cast %vc to offset: [0], sizes: [{rows}, {tn}], strides: [{acc_row}, 1] : {vc} to {vcs}
      nvgpu.warpgroup.mma.store %res#0, %vcs : {acc} to {vcs}
      gpu.barrier
      // (an integer address space: the vector lowering before the GPU one knows it)
      %vc3 = memref.memory_space_cast %vc : {vc} to memref<{TILE_M}x{acc_row}xf32, 3>
      scf.for %it = %c0 to %c{per_thread} step %c1 {{
        %i0 = arith.muli %it, %c{threads} : index
        %idx = arith.addi %i0, %tid : index
        %row = arith.divui %idx, %c{tn // 4} : index
        %q = arith.remui %idx, %c{tn // 4} : index
        %col = arith.muli %q, %c4 : index
        %v = vector.load %vc3[%row, %col] {{{_OUT_ATTR}}} : memref<{TILE_M}x{acc_row}xf32, 3>, vector<4xf32>
        %gr = arith.addi %m0b, %row : index
        %gc = arith.addi %n0, %col : index
      }}
      gpu.terminator
  }}
  return
}}
"""


def _rewrite(mt: _Match) -> None:
    loop = mt.block_loop
    ctx = loop.context
    with ctx, loop.location:
        template = ir.Module.parse(_template(mt))
    fn = template.body.operations[0].operation
    body = fn.regions[0].blocks[0]
    for arg, value in zip(body.arguments, (mt.a, mt.b, mt.c)):
        arg.replace_all_uses_with(value)
    moved = ops_of(body)[:-1]  # not the return
    for op in moved:
        op.move_before(loop)
    (launch,) = [op for op in moved if op.name == "gpu.launch"]
    c2 = mt.c  # where the epilogue stores: C, or its 2-D view of stacked matrices
    for op in moved:
        if _FLAT_ATTR in op.attributes:
            del op.attributes[_FLAT_ATTR]
            if op.operands[0] == mt.c:
                c2 = op.results[0]
    out_load = next(o for o in walk_ops(launch) if _OUT_ATTR in o.attributes)
    del out_load.attributes[_OUT_ATTR]
    out_load.attributes["alignment"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 16)
    body_ops = ops_of(out_load.block)
    gr, gc = body_ops[-3].results[0], body_ops[-2].results[0]
    with ir.InsertionPoint(body_ops[-1]), loop.location:  # before the scf.yield
        v = out_load.results[0]
        src = mt.acc  # the chain's value before each op
        for op in mt.epilogue:
            operands = [v if x == src else _splat(defining_op(x), [4]) for x in op.operands]
            v = _lifted(op, operands, [4])
            src = op.results[0]
        store = vector.store(v, c2, [gr, gc])
        elt_bytes = (ir.VectorType(v.type).element_type.width + 7) // 8
        store.attributes["alignment"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                           4 * elt_bytes)
    # the tile's ops go with its loop (the epilogue ops live inside the lane loop)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class WarpgroupTiles(_Step):
    """Large f16/bf16 tiles of row-major operands become TMA + wgmma kernels (sm_90a)."""

    name = "autodiff-gpu-warpgroup-tiles"
    summary = "Rewrite tensor-core tiles into TMA and warpgroup-MMA kernels on sm_90a"

    chip: str = "sm_80"
    enabled: bool = False

    def apply(self, module: ir.Operation) -> None:
        if not (self.enabled and supported_chip(self.chip)):
            return
        matches = []
        for op in walk_ops(module):
            if op.name == "scf.for" and TILE_ATTR in op.attributes:
                mt = _match(op)
                if mt is not None:
                    matches.append(mt)
        for mt in matches:
            _rewrite(mt)


__all__ = ["WarpgroupTiles", "TensorMapArguments", "STAGES", "supported_chip"]


def _is_tensor_map(t: ir.Type) -> bool:
    return str(t).startswith("!nvgpu.tensormap.descriptor")


@dataclasses.dataclass(frozen=True)
class TensorMapArguments(_Step):
    """Kernels take their tensor maps as `!llvm.ptr` (after kernel outlining).

    A tensor map lives in device memory (the runtime copies the one the driver
    encodes there); NVVM's kernel lowering does not convert `nvgpu` types in
    signatures, so each outlined kernel's tensor-map parameter becomes a pointer,
    cast back to the map's type at the kernel's entry, and each launch passes
    the pointer the host-side map lowers to."""

    name = "autodiff-gpu-tensor-map-arguments"
    summary = "Pass TMA descriptors to kernels as pointers"

    def apply(self, module: ir.Operation) -> None:
        ptr = ir.Type.parse("!llvm.ptr")
        for op in list(walk_ops(module)):
            if op.name == "gpu.func":
                body = op.regions[0].blocks[0]
                ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                inputs = list(ftype.inputs)
                changed = False
                for i, arg in enumerate(body.arguments):
                    if not _is_tensor_map(arg.type):
                        continue
                    t = arg.type
                    arg.set_type(ptr)
                    with ir.InsertionPoint.at_block_begin(body), op.location:
                        cast = ir.Operation.create("builtin.unrealized_conversion_cast",
                                                   results=[t], operands=[arg])
                    for use in list(arg.uses):
                        user = use.owner.operation if isinstance(use.owner, ir.OpView) \
                            else use.owner
                        if user != cast:
                            user.operands[use.operand_number] = cast.results[0]
                    inputs[i] = ptr
                    changed = True
                if changed:
                    op.attributes["function_type"] = ir.TypeAttr.get(
                        ir.FunctionType.get(inputs, list(ftype.results)))
            elif op.name == "gpu.launch_func":
                for i, v in enumerate(list(op.operands)):
                    if _is_tensor_map(v.type):
                        with ir.InsertionPoint(op), op.location:
                            cast = ir.Operation.create("builtin.unrealized_conversion_cast",
                                                       results=[ptr], operands=[v])
                        op.operands[i] = cast.results[0]
