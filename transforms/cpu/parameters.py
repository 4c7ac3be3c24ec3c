"""The CPU schedules' parameters: register and cache tiles, vector lanes, size thresholds.

Data only (and the host's vector width they are chosen by). Why each value
is what it is, with the measurements behind it: benchmarks/notes/cpu-schedules.md.
"""

from __future__ import annotations

import dataclasses
import functools

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
    """Width of the host's widest float vector registers (the JIT targets the host CPU).

    The ExecutionEngine compiles for the host CPU and its features (it was
    checked to emit AVX-512 `vfmadd231ps zmm` here), so schedules follow it.
    """
    return _host_vector_bits()


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


#: Matmul register tiles by vector width. AVX-512 (32 zmm registers): 8 x 32
#: f32 = 16 accumulators, enough independent FMAs to cover their latency on
#: both FMA ports. Measured on this project's 2-vCPU Xeon (AVX-512), f32,
#: one thread, best of 7 calls, GFLOP/s for 512^3 / 128x784x512 / 1024^3:
#: 4x16 tile 66 / 92 / 55; 6x32 86 / 113 / 42; 8x32 with cache tiles
#: (64, 256, 128) 125 / 124 / 92, (128, 256, 128) 150 / 134 / 104,
#: (32, 512, 256) 150 / 116 / 85; 8x48 72 / 63 / 42. AVX2 (16 ymm): the
#: 4 x 16 tile = 8 accumulators of the notes' Zen 3 probe (not re-measured).
#: Small matmuls: the schedule costs ~10 ms of compile time. With the
#: runtime's call overhead at ~6 us (it was ~25 us when this threshold was
#: 64^3), measured per call, schedule / scalar loops (compile ms): 64 x 128
#: x 10 (the vmap'd MLP's output layer) 9.0 / 46.3 us (44 / 34), 128 x 512
#: x 10 23 / 419 us (47 / 33), 32^3 7.0 / 9.1 us (45 / 35), 16^3 6.3 /
#: 6.6 us. So the threshold sits above 32^3 and below 64 x 128 x 10.
#: f64 (and every contraction generic) uses the same table with `nr` counted
#: in f32 lanes, i.e. 8 x 16 f64 on AVX-512 (16 zmm accumulators again).
#: f64 512^3, one process per tile, same minutes, loaded machine: 8x16
#: 61 GFLOP/s (jax.jit 70 in the same process), 8x8 40, 4x32 36, 6x16 33.
#: Before f64 was scheduled it ran the scalar loops: 256^3 at 1.7 GFLOP/s.
#: Packed matmuls read B as contiguous [K, nr] panels, so K needs no cache
#: tile below 1024: a panel of 1024 x 32 f32 (128 KB) streams from L2 without
#: conflicts, C is written once instead of once per K block, and the
#: register tiles start from zero (`_start_tiles_at_zero`). Measured, f32,
#: variants in one process, interleaved, best of 9 (ms), packed K tile 128 /
#: 512 / 1024 / 2048: 512^3 1T 1.81 / 1.68 / 1.69 / 1.68 (jax.jit 1.73), 2T
#: 1.31 / 1.14 / 1.12 / 1.14; 1024^3 1T 14.7 / 14.4 / 14.1 / 14.2 (jax.jit
#: 14.6), 2T 7.91 / 7.73 / 7.64 / 7.62; 512 x 2048 x 512 1T 7.49 / 7.41 /
#: 7.44 / 8.79. The unpacked schedule keeps K blocks of 128: its B rows are
#: a row stride apart, and whole-K tiles ran 128 x 784 x 512 at 106 instead
#: of 131 GFLOP/s (256: the MLP step 1% slower, the HVP 2% faster).
#: Packed N tile (`packed_n`): 128 columns keep a K x N panel of B at 512 KB
#: f32, half of a Zen 5 core's 1 MB L2, with A's rows streaming past it.
#: Measured on a 2-vCPU Zen 5 (AVX-512, 269 GFLOP/s f32 peak per core), f32,
#: variants in one process, best of 9 (ms), N tile 256 / 128: 1024^3 1T
#: 8.80-8.91 / 8.50, 2T 4.65 / 4.52; 512^3 1.05 / 1.05. On unpacked
#: matmuls a 128 N tile was mixed (128 x 784 x 512 5% faster, the MLP step
#: 2% slower at 2T, the HVP 2% slower), so `cache` keeps 256 there.
#: `mr_max` = 10 on AVX-512 (20 zmm accumulators): an unpacked contraction
#: takes a divisor of M up to 10 rows, so M = 20 runs as 2 x 10 rows, not
#: 4 x 5, and each k step's row of B is read by half as many register tiles;
#: M divisible by 8 and not by 10 (512, 1024, 128, 784) keeps 8 rows, and
#: packed matmuls keep `mr`. Measured on GMM's gradient, whose
#: d(L)[k, i, j] = sum_n g[k, n, i] xc[k, n, j] has M = D (Zen 5, f64, 1T,
#: `benchmarks/run.py`'s interleaved timing, median of 9, ms), rows up to
#: 8 / 10: d10 0.491 / 0.470 and 0.487 / 0.467 (M = 10: one tile instead of
#: 2 x 5); d20 2.99 / 2.95 and 2.93 / 3.00 (no difference); objectives
#: unchanged.
_MATMUL_MIN_FLOPS = 2 * 40 ** 3

MATMUL_BY_VECTOR_BITS = {
    512: MatmulSchedule(mr=8, nr=32, cache=(128, 256, 128), min_flops=_MATMUL_MIN_FLOPS,
                        mr_max=10),
    256: MatmulSchedule(mr=4, nr=16, cache=(64, 256, 128), min_flops=_MATMUL_MIN_FLOPS),
    128: MatmulSchedule(mr=4, nr=8, cache=(64, 256, 128), min_flops=_MATMUL_MIN_FLOPS),
}


def matmul_schedule() -> MatmulSchedule:
    return MATMUL_BY_VECTOR_BITS[host_vector_bits()]


#: Elementwise: 16 f32 / 8 f64 = two AVX2 vectors (one AVX-512 vector) per
#: iteration. Above 4096 elements the schedule costs no measurable compile
#: time (exp on 4096 f32: 38 ms vs 42 ms naive; tanh 64 vs 53 ms) and pays
#: at once (tanh on 65536 f32: 79 us instead of 1360 us per call).
ELEMENTWISE = ElementwiseSchedule(lanes={32: 16, 64: 8}, min_elements=4096)
#: A short last dim that no whole vector divides (GMM's D = 20 or 10 in f64)
#: is one vector of its full length, up to this many registers (20 f64 =
#: zmm, zmm, ymm), instead of its largest dividing piece (4 or 2 lanes).
#: Measured, ADBench GMM (f64), one thread, variants in one process, best of
#: 15 (ms), pieces / whole rows: d20 gradient 3.62 / 3.53, objective 1.23 /
#: 1.21; d10 gradient 0.587 / 0.539, objective 0.294 / 0.290.
ELEMENTWISE_WHOLE_ROW_VECTORS = 4

#: Matmuls (after canonicalization: C[m, n] += A[m, k] or A[k, m] times
#: B[k, n]) with at least this many flops, and M and N multiples of the
#: register tile, read B from a packed copy [N / nr, K, nr] (`pack_rhs`):
#: each k step of a register tile then reads the next nr contiguous floats
#: instead of a row of B one row stride (4 KB at N = 1024) further, which
#: cache associativity punishes. Measured, f32, one thread, same process,
#: calls interleaved, best of 5 medians, GFLOP/s packed / unpacked (jax.jit
#: on two threads): 256^3 83 / 103 (94), 128x784x512 120 / 125 (122),
#: 512^3 142 / 73 (151), 1024^3 138 / 107 (137). A second run (prototype,
#: best of 7): 512^3 137 / 41, 1024^3 133 / 45. Packing pays from about
#: 512^3; below it the copy of B is not amortized. f64, same method:
#: 512^3 68 / 55 (68), 1024^3 64 / 51 (66).
PACK_MIN_FLOPS = 2 * 448 ** 3

#: The k loop of a register tile is unrolled this many times (after its
#: accumulators are hoisted), so the loop's own increment, compare and
#: branch are paid once per 4 rank-1 updates. Measured, f32, one thread,
#: variants compiled in one process and timed interleaved, best of 11: the
#: MLP training step (784-512-512-10, batch 128) 3.71 / 3.61 / 3.61 ms for
#: unroll 1 / 4 / 8 (second run 3.69 / 3.58); the HVP 0.389 / 0.385;
#: 512^3, softmax and both GMM gradients (f64) unchanged within 1%.
MATMUL_K_UNROLL = 4

#: A contraction whose vector operand has the lanes' dim strided gets that
#: operand transposed first when the schedule reads it at least this many
#: times (the transpose is one extra pass over it). Not tuned: it bounds the
#: transpose at 1/8 of the operand's reads. GMM's Q (reused 1000 times)
#: measured, f64, 25 x 1000 x 10 x 10: scalar loops 1.06 ms, transposed +
#: scheduled 0.29 ms; with f32, 1.28 ms -> 0.18 ms.
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
#: Rows per tile: the most (a power of two dividing the row count, at most
#: `ROW_TILE_ROWS`) whose tile stays within `ROW_TILE_BYTES` per intermediate.
#: 4 KB: a tile's input and its intermediates stay in L1 between the passes
#: over it. Measured, softmax over 4096 x 1024 f32 (tiles of 8 / 2 / 1 rows
#: for 32 / 8 / 4 KB), variants in one process, best of 11 (ms): 1T 2.38 /
#: 2.21 / 2.00, 2T 1.06 / 0.91 / 0.82 (jax.jit 2.02 and 1.01). Short rows
#: (the MLP's 10 logits) keep tiles of `ROW_TILE_ROWS`.
ROW_TILE_BYTES = 4 << 10
ROW_TILE_ROWS = 16

#: Transposes: square blocks of this many elements per side.
TRANSPOSE_BLOCK = {32: 8, 64: 4}

#: Reductions: 64 f32 / 32 f64 partial sums per row, i.e. four AVX-512
#: vectors: four independent add (or max) chains hide the instruction
#: latency that one vector of partial sums waits on. Measured, one thread,
#: softmax over 4096 x 1024 f32 (a row group: its max and sum run on rows
#: in cache), 16 lanes 4.0 ms, 64 lanes 3.2 ms; row sums of the same array
#: (memory-bound) 0.59 ms either way.
REDUCTION = ReductionSchedule(lanes={32: 64, 64: 32}, min_elements=4096)

#: Element types a schedule accepts (i1 memory is bytes in this project's
#: lowering, so vectors of i1 in memory would be wrong; index has no fixed width).
VECTOR_ELEMENT_TYPES = ("f32", "f64", "i32", "i64")

#: Ops allowed in the body of an op that gets vectorized: everything here
#: lowers to vector LLVM instructions or to per-lane libm calls.
VECTORIZABLE_BODY_OPS = {
    "linalg.yield", "linalg.index",
    "math.exp", "math.log", "math.tanh", "math.sqrt", "math.rsqrt", "math.absf",
    "math.floor", "math.ceil", "math.fma", "math.copysign",
}
