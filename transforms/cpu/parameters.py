"""The CPU schedules' parameters: register and cache tiles, vector lanes, size thresholds.

Data only (and the host's vector width they are chosen by). Why each value
is what it is, with the measurements behind it: benchmarks/notes/cpu-schedules.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Iterator

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
    return _TARGET_BITS.get() or _host_vector_bits()


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


@functools.cache
def _host_vector_bits() -> int:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return 256
    if "avx512f" in flags:
        return 512
    return 256 if "avx2" in flags else 128


#: Matmul register tiles by vector width: on AVX-512 (32 zmm) 8 x 32 f32 = 16 accumulators, enough
#: independent FMAs to cover their latency; AVX2 4 x 16. f64 and contraction generics use the same
#: table with `nr` counted in f32 lanes. Packed matmuls tile K by `packed_k` and N by `packed_n`;
#: unpacked ones take up to `mr_max` register rows when they divide M. Below `_MATMUL_MIN_FLOPS`
#: the schedule's compile time does not pay. (measurements: benchmarks/notes/cpu-schedules.md)
_MATMUL_MIN_FLOPS = 2 * 40 ** 3

MATMUL_BY_VECTOR_BITS = {
    512: MatmulSchedule(mr=8, nr=32, cache=(128, 256, 128), min_flops=_MATMUL_MIN_FLOPS,
                        mr_max=10),
    256: MatmulSchedule(mr=4, nr=16, cache=(64, 256, 128), min_flops=_MATMUL_MIN_FLOPS),
    128: MatmulSchedule(mr=4, nr=8, cache=(64, 256, 128), min_flops=_MATMUL_MIN_FLOPS),
}


def matmul_schedule() -> MatmulSchedule:
    return MATMUL_BY_VECTOR_BITS[host_vector_bits()]


#: Elementwise: 16 f32 / 8 f64 elements per iteration; from 4096 elements the schedule's compile
#: time pays. (measurements: benchmarks/notes/cpu-schedules.md)
ELEMENTWISE = ElementwiseSchedule(lanes={32: 16, 64: 8}, min_elements=4096)
#: A short last dim that no whole vector divides (GMM's D = 20 or 10 in f64) is one vector of its
#: full length, up to this many registers, instead of its largest dividing piece. (measurements:
#: benchmarks/notes/cpu-schedules.md)
ELEMENTWISE_WHOLE_ROW_VECTORS = 4

#: Matmuls (canonical: C[m, n] += A[m, k] or A[k, m] times B[k, n]) with at least this many flops,
#: M and N multiples of the register tile, read B from a packed copy [N / nr, K, nr] (`pack_rhs`):
#: contiguous panels instead of rows a stride apart; below it the copy is not amortized.
#: (measurements: benchmarks/notes/cpu-schedules.md)
PACK_MIN_FLOPS = 2 * 448 ** 3

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
#: Rows longer than this (bytes) are not fused: a tile would not stay in L2.
ROW_MAX_BYTES = 256 << 10
#: Rows per tile: the most (a power of two dividing the row count, at most `ROW_TILE_ROWS`) whose
#: tile stays within `ROW_TILE_BYTES` per intermediate. 4 KB: a tile's input and its intermediates
#: stay in L1 between the passes over it. Short rows (the MLP's 10 logits) keep tiles of
#: `ROW_TILE_ROWS`. (measurements: benchmarks/notes/cpu-schedules.md)
ROW_TILE_BYTES = 4 << 10
ROW_TILE_ROWS = 16

#: Transposes: square blocks of this many elements per side.
TRANSPOSE_BLOCK = {32: 8, 64: 4}

#: Reductions: 64 f32 / 32 f64 partial sums per row, i.e. four AVX-512 vectors: four independent
#: add (or max) chains hide the latency one vector of partial sums waits on. (measurements:
#: benchmarks/notes/cpu-schedules.md)
REDUCTION = ReductionSchedule(lanes={32: 64, 64: 32}, min_elements=4096)

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
