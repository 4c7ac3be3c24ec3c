"""The CPU schedules' parameters: register and cache tiles, vector lanes, size thresholds.

The cache tiles and the thresholds that follow the cache sizes are derived
from the machine (`machine.py`: the host, or what AUTODIFF_CPU_* emulates) by
`derive`, whose docstring gives each rule; on the machine they were measured
on (`REFERENCE`) the rules give the measured values. The register tiles and
the thresholds that do not depend on the caches are data. Why each value is
what it is, with the measurements behind it: benchmarks/notes/cpu-schedules.md.
`autodiff-opt --print-machine` shows the machine and what it derives.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Iterator

from .machine import DEFAULT_CACHES, Machine, host_machine

# -- schedule parameters (data) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatmulSchedule:
    """Tile C in (mr x nr) register blocks, K innermost with step 1.

    Each k step is a rank-1 update of an mr x nr accumulator: after
    vectorization, `vector.contract` lowers to outer products, i.e. mr
    broadcasts of A times one nr-wide row of B, fused multiply-adds into
    mr * nr / lanes vector registers that stay in registers across k
    (hoisted out of the k loop). `cache` tiles (M, N, K) first so the B panel
    stays in L1/L2. Packed matmuls (`pack_rhs`) tile K by `packed_k` instead.
    """

    mr: int
    nr: int
    cache: tuple[int, int, int]
    min_flops: int
    packed_k: int = 1024
    packed_n: int = 128
    #: Unpacked contractions: register rows up to `mr_max` when they divide M.
    mr_max: int = 0


@dataclasses.dataclass(frozen=True)
class ElementwiseSchedule:
    """Tile the innermost loop by `lanes` elements (the rest by 1) and vectorize."""

    lanes: dict[int, int]  # element bit width -> elements per vector tile
    min_elements: int


@dataclasses.dataclass(frozen=True)
class ReductionSchedule:
    """Inner reductions: split the reduced dim by `lanes` into vector partial sums."""

    lanes: dict[int, int]
    min_elements: int


def host_vector_bits() -> int:
    """Width of the target's widest float vector registers: the host's (the JIT targets
    the host CPU) unless `target_vector_bits` says otherwise.

    The ExecutionEngine compiles for the host CPU and its features (it was
    checked to emit AVX-512 `vfmadd231ps zmm` here), so schedules follow it.
    """
    return _TARGET_BITS.get() or host_machine().vector_bits


_TARGET_BITS: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "autodiff_target_vector_bits", default=None)


@contextlib.contextmanager
def target_vector_bits(bits: int | None) -> Iterator[None]:
    """Schedule for `bits`-wide vectors (128, 256, 512) inside the block: code compiled
    for another CPU than the host's (`ad.export`'s portable targets). None: the host's."""
    if bits not in (None, 128, 256, 512):
        raise ValueError(f"vector width must be 128, 256 or 512 bits, got {bits}")
    token = _TARGET_BITS.set(bits)
    try:
        yield
    finally:
        _TARGET_BITS.reset(token)


#: Matmul register tiles by vector width (not derived: measured): on AVX-512 (32 zmm) 8 x 32 f32 =
#: 16 accumulators, enough independent FMAs to cover their latency (4 cycles x 2 FMAs per cycle,
#: or x 1 where 512-bit vectors are double-pumped); AVX2 4 x 16 = 8 ymm accumulators. f64 and
#: contraction generics use the same table with `nr` counted in f32 lanes. Unpacked ones take up
#: to `mr_max` register rows when they divide M. Below `_MATMUL_MIN_FLOPS` the schedule's compile
#: time does not pay. (measurements: benchmarks/notes/cpu-schedules.md)
_MATMUL_MIN_FLOPS = 2 * 40 ** 3
REGISTER_TILES = {512: (8, 32, 10), 256: (4, 16, 0), 128: (4, 8, 0)}  # bits -> mr, nr, mr_max

#: The reference machine of the measurements (this project's 2-vCPU Xeon: 48 KB L1d, 2 MB L2):
#: on it the derivation gives the values measured best there (a test checks it).
REFERENCE = {"l1d": 48 << 10, "l2": 2 << 20}


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(x).bit_length() - 1) if x >= 1 else 1


@dataclasses.dataclass(frozen=True)
class Parameters:
    """The machine-dependent parameters of the CPU schedules (see `derive`)."""

    matmul: MatmulSchedule
    pack_min_flops: int
    row_tile_bytes: int
    row_max_bytes: int
    reduction: ReductionSchedule
    threads: int


@functools.cache
def derive(machine: Machine, vector_bits: int | None = None) -> Parameters:
    """The schedules' parameters for `machine` (its vector width unless `vector_bits`).

    Sizes are counted in f32 (4 bytes): f64 schedules use the same tiles with
    `nr` in f32 lanes, i.e. the same number of registers and twice the bytes.
    The register tile is the measured table `REGISTER_TILES`; the rest follows
    the cache hierarchy:

    Unpacked matmul (loops: M, N, K cache tiles, then mr x nr register tiles
    with i outer, j inner, k innermost). Each register tile reads an mr x Kc
    micro-panel of A, reused by the Nc / nr tiles of its row (so it must stay
    in L1), and a Kc x nr micro-panel of B whose rows are a row stride apart
    (so they sit in few cache sets and must not evict A's panel):
    Kc = the largest power of two with (mr + nr) x Kc x 4 B <= L1d / 2.
    The Kc x Nc block of B is reused by the Mc / mr row tiles of the M tile,
    from L2; read with a stride, it gets a quarter of L2, and at most 256
    columns (a 512-wide tile was measured slower, and 128 mixed):
    Nc = min(256, pow2(L2 / 4 / (4 Kc))).
    Mc = 16 mr (the B block read once per 16 row tiles), halved while the A
    and B blocks together exceed half of L2.

    Packed matmul (B copied to contiguous [N / nr, K, nr] panels; the same
    loop order). The mr x Kp micro-panel of A is reused by the Np / nr panels
    of the N tile from L1, while the panels stream through the rest of it from
    L2: Kp = the largest power of two with mr x Kp x 4 B <= 3/4 L1d, at most
    1024 (C is then written once per 1024 k steps; 2048 was measured slower).
    The Kp x Np block of B is reused by every row tile of the M tile, from
    L2, alongside A's Mc x Kp block: Np = pow2(L2 / 2 / (4 Kp)), at least nr
    and at most 128 (wider was measured slower with both 1 MB and 2 MB of L2:
    the L2 does not bound it there, so it is capped, not scaled).
    Packing pays once B is too big for the unpacked schedule's strided reads
    to hit in L2: for a cube of side s, from the side whose B fills 3/8 of L2
    (448 on the reference machine: 784 KB of 2 MB, between the 256^3 measured
    slower packed and the 512^3 measured faster), rounded to a multiple of 64.

    Row groups: a tile's input, its intermediates and its output (up to 8
    tiles of a softmax or layer norm) stay in L1 between the passes over
    them: tile bytes = pow2(L1d / 8); rows longer than L2 / 8 are not fused
    (a single-row tile's 8 buffers would not stay in L2).

    Reductions: four vectors of partial sums per row (four independent add
    chains hide the add latency): 4 x lanes.

    Threads: the physical cores (what `benchmarks/run.py` and users may pass
    as `threads`; jit's default stays AUTODIFF_CPU_THREADS, else 1).
    """
    bits = vector_bits or machine.vector_bits
    mr, nr, mr_max = REGISTER_TILES[bits]
    f32 = 4
    l1, l2 = machine.l1d, machine.l2
    kc = max(16, min(512, _pow2_floor(l1 / 2 / (f32 * (mr + nr)))))
    nc = max(nr, min(256, _pow2_floor(l2 / 4 / (f32 * kc))))
    mc = 16 * mr
    while mc > mr and (mc + nc) * kc * f32 > l2 / 2:
        mc //= 2
    kp = max(128, min(1024, _pow2_floor(l1 * 3 / 4 / (f32 * mr))))
    np_ = max(nr, min(128, _pow2_floor(l2 / 2 / (f32 * kp))))
    side = max(128, 64 * round((3 / 8 * l2 / f32) ** 0.5 / 64))
    matmul = MatmulSchedule(mr=mr, nr=nr, cache=(mc, nc, kc), min_flops=_MATMUL_MIN_FLOPS,
                            packed_k=kp, packed_n=np_, mr_max=mr_max)
    lanes32 = bits // 32
    return Parameters(
        matmul=matmul, pack_min_flops=2 * side ** 3,
        row_tile_bytes=_pow2_floor(l1 / 8), row_max_bytes=l2 // 8,
        reduction=ReductionSchedule(lanes={32: 4 * lanes32, 64: 2 * lanes32},
                                    min_elements=4096),
        threads=machine.cores)


def host_parameters() -> Parameters:
    """The parameters of the target: the host's, or inside `target_vector_bits` (code for
    any CPU of a portable target) those of `portable_machine` of that width."""
    bits = _TARGET_BITS.get()
    return derive(host_machine() if bits is None else portable_machine(bits))


@functools.cache
def portable_machine(bits: int) -> Machine:
    """Any CPU with `bits`-wide vectors: its caches are not known, so a common core's of
    that width: 32 KB L1d and 1 MB L2 (`machine.DEFAULT_CACHES`), 48 KB L1d for AVX-512
    (Ice Lake and later Xeons, Zen 5)."""
    caches = dict(DEFAULT_CACHES, **({"l1d": 48 << 10} if bits == 512 else {}))
    return Machine(vendor="other", family=0, model=0, features=(), vector_bits=bits,
                   double_pumped=False, fma_units=2, cores=1, logical=1, **caches)


def matmul_schedule() -> MatmulSchedule:
    return host_parameters().matmul


def reduction_schedule() -> ReductionSchedule:
    """The target's reduction chains (`REDUCTION` is the host's): inside
    `target_vector_bits`, those of that width."""
    return host_parameters().reduction


#: Elementwise: 16 f32 / 8 f64 elements per iteration; from 4096 elements the schedule's compile
#: time pays. (measurements: benchmarks/notes/cpu-schedules.md)
ELEMENTWISE = ElementwiseSchedule(lanes={32: 16, 64: 8}, min_elements=4096)
#: A short last dim that no whole vector divides (GMM's D = 20 or 10 in f64) is one vector of its
#: full length, up to this many registers, instead of its largest dividing piece. (measurements:
#: benchmarks/notes/cpu-schedules.md)
ELEMENTWISE_WHOLE_ROW_VECTORS = 4

#: Matmuls (canonical: C[m, n] += A[m, k] or A[k, m] times B[k, n]) with at least this many flops,
#: M and N multiples of the register tile, read B from a packed copy [N / nr, K, nr] (`pack_rhs`):
#: contiguous panels instead of rows a stride apart; below it the copy is not amortized. Derived
#: from L2 (`derive`: 2 * 448^3 with 2 MB). (measurements: benchmarks/notes/cpu-schedules.md)
PACK_MIN_FLOPS = derive(host_machine()).pack_min_flops

#: The k loop of a register tile is unrolled this many times (after its accumulators are hoisted):
#: the loop's own increment, compare and branch are paid once per 4 rank-1 updates. (measurements:
#: benchmarks/notes/cpu-schedules.md)
MATMUL_K_UNROLL = 4

#: A contraction whose vector operand has the lanes' dim strided gets that operand transposed first
#: when the schedule reads it at least this many times (the transpose is one extra pass; not tuned:
#: it bounds the transpose at 1/8 of the operand's reads). (measurements:
#: benchmarks/notes/cpu-schedules.md)
RELAYOUT_MIN_REUSE = 8

#: Multithreading thresholds: below these an op stays on the calling thread
#: (an OpenMP fork/join costs a few microseconds).
PARALLEL_MIN_FLOPS = 2 * 128 ** 3
PARALLEL_MIN_ELEMENTS = 1 << 16

#: Row groups (`FuseRowGroups`): an elementwise op over rows whose operands
#: are computed row by row through inner reductions (softmax, layer norm,
#: logsumexp) runs as one loop over tiles of rows instead of one pass over
#: memory per op. Groups whose result has fewer elements than this stay
#: unfused (their intermediates fit in cache anyway).
ROW_GROUP_MIN_ELEMENTS = 1 << 14
#: Groups without a reduction: only with at least this many ops (fills not counted).
ELEMENTWISE_GROUP_MIN_OPS = 3
#: Rows longer than this (bytes) are not fused: a tile would not stay in L2 (`derive`: L2 / 8).
ROW_MAX_BYTES = derive(host_machine()).row_max_bytes
#: Rows per tile: the most (a power of two dividing the row count, at most `ROW_TILE_ROWS`) whose
#: tile stays within `ROW_TILE_BYTES` per intermediate. 4 KB (`derive`: L1d / 8 as a power of two):
#: a tile's input and its intermediates stay in L1 between the passes over it. Short rows (the MLP's 10 logits) keep tiles of
#: `ROW_TILE_ROWS`. (measurements: benchmarks/notes/cpu-schedules.md)
ROW_TILE_BYTES = derive(host_machine()).row_tile_bytes
ROW_TILE_ROWS = 16

#: Transposes: square blocks of this many elements per side.
TRANSPOSE_BLOCK = {32: 8, 64: 4}

#: Reductions: four vectors of partial sums per row (64 f32 / 32 f64 with AVX-512): four independent
#: add (or max) chains hide the latency one vector of partial sums waits on. (measurements:
#: benchmarks/notes/cpu-schedules.md)
REDUCTION = derive(host_machine()).reduction

#: Element types a schedule accepts (i1 memory is bytes in this project's
#: lowering, so vectors of i1 in memory would be wrong; index has no fixed width).
VECTOR_ELEMENT_TYPES = ("f32", "f64", "i32", "i64")
#: Element types an elementwise op or reduction may also read (not write): boolean masks, stored
#: as bytes, read as vectors with as many lanes as the op's other vectors.
MASK_ELEMENT_TYPES = ("i8",)

#: Ops allowed in the body of an op that gets vectorized: everything here
#: lowers to vector LLVM instructions or to per-lane libm calls.
VECTORIZABLE_BODY_OPS = {
    "linalg.yield", "linalg.index",
    "math.exp", "math.log", "math.tanh", "math.sqrt", "math.rsqrt", "math.absf",
    "math.floor", "math.ceil", "math.fma", "math.copysign",
}


def machine_report(machine: Machine | None = None) -> str:
    """`autodiff-opt --print-machine`: the machine and the parameters derived from it."""
    m = machine or host_machine()
    d = m.describe()
    p = derive(m)
    mm = p.matmul

    def size(b: int) -> str:
        return f"{b >> 20} MB" if b >= 1 << 20 and not b % (1 << 20) else f"{b >> 10} KB"

    lines = [
        f"cpu: {d['name']} ({m.vendor}, family {m.family:#x}, model {m.model:#x})",
        f"vectors: {m.vector_bits} bits{', double-pumped' if m.double_pumped else ''}, "
        f"{m.fma_units} FMA/cycle, {m.peak_flops_per_cycle} f32 flops/cycle/core",
        f"features: {' '.join(m.features) or '-'}",
        f"caches: L1d {size(m.l1d)}, L2 {size(m.l2)}, L3 {size(m.l3)}",
        f"cores: {m.cores} physical, {m.logical} logical",
        "derived:",
        f"  matmul register tile: {mm.mr} x {mm.nr} (rows up to {mm.mr_max or mm.mr})",
        f"  matmul cache tile (M, N, K): {mm.cache}",
        f"  packed matmul: K tile {mm.packed_k}, N tile {mm.packed_n}, "
        f"from {round((p.pack_min_flops / 2) ** (1 / 3))}^3",
        f"  row tiles: {size(p.row_tile_bytes)} per intermediate, rows up to "
        f"{size(p.row_max_bytes)}",
        f"  reduction partial sums: {p.reduction.lanes[32]} f32 / {p.reduction.lanes[64]} f64",
        f"  threads: {p.threads}",
    ]
    return "\n".join(lines) + "\n"
