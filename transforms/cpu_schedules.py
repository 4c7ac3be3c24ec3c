"""CPU schedules for `--autodiff-lower-to-cpu`: which linalg ops get tiled and vectorized, how.

The performance part of the CPU pipeline. Before bufferization,
`ScheduleLinalgForCpu` looks at every linalg op with static shapes, sorts it
into a kind (contraction, elementwise, inner reduction, outer reduction, 2-D
transpose; `classify`), picks the kind's parameters from the tables below by
shape, element type and host vector width, and applies one
transform-dialect script (tiling, optional `scf.forall` over threads,
vectorization, accumulator hoisting) to all chosen ops at once
(`SCHEDULE_BUILDERS`, `build_script`). Before it, `FuseRowGroups` turns
chains through row reductions (softmax, layer norm) into one loop over
tiles of rows, and `ReciprocalOfBroadcastDivisors` divides by a row's
value through one reciprocal per row. Ops below a size threshold keep the
plain `linalg -> loops` lowering: the test suite compiles hundreds of tiny
modules, and a schedule costs compile time that only pays off on large
kernels. Tiles always divide the shape (register tiles are chosen among
divisors), so every tile is static and vectorizes without masks or peeling.

Contractions: named matmuls and batch matmuls, and the `acc + a * b`
generics that vmap and reverse mode write (unit dims, batch dims,
transposed or swapped operands) share one schedule (`ContractionDims`,
`_schedule_contraction`). Each is first rewritten into a canonical form
(`_drop_unit_dims`: unit dims dropped, the operand carrying the vector
lanes transposed if they are strided in it, inputs ordered lhs/rhs), then
its loops are interchanged to (batch, M, N, K) and tiled for cache and
registers. Contractions over unit reduction dims (outer products, e.g.
per-sample weight gradients) are elementwise: `OuterProductsToElementwise`
rewrites them before elementwise fusion.

Transcendentals: this MLIR build registers no polynomial-approximation pass
or transform op, and a vectorized `math.exp` becomes one libm call per
element. `approximate_f32_math` replaces f32 `math.exp`, `math.log` and
`math.tanh` in the bodies of ops that get vectorized by arith/`math.fma`
code (Cephes expf, logf, tanhf); `APPROX_MAX_ULP` holds their measured
error bounds. f64 keeps libm (scalar calls inside the vector loop): the
f64 tests compare at 1e-12 and no approximation here is that accurate.

After bufferization `WriteResultsInPlace` lets results be computed in the
caller's buffers, and `LOWER_VECTORS` lowers the vector code (contractions
to FMAs, reassociated reductions). `openmp_lowering` adds the OpenMP
lowering when `threads` > 1; `cpu_threads` / `cpu_pipeline` give jit's
`threads` (default: environment `AUTODIFF_CPU_THREADS`) and
`openmp_shared_libs` the runtime library the JIT must then load.

Numbers quoted below were measured on this project's 2-vCPU Intel Xeon
(AVX-512 + FMA; the probe in notes/cpu-codegen was a Zen 3 with AVX2),
single thread, with /tmp scripts timing `CompiledModule` calls. The machine
is shared and noisy: compare numbers within one line, not across lines.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math as pymath
import os
import sys
from collections.abc import Callable, Sequence

from mlir import ir

from .ad_support import defining_op
from .passes import Pass, register

# -- schedule parameters (data) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatmulSchedule:
    """Tile C in (mr x nr) register blocks, K innermost with step 1.

    Each k step is a rank-1 update of an mr x nr accumulator: after
    vectorization, `vector.contract` lowers to outer products, i.e. mr
    broadcasts of A times one nr-wide row of B, fused multiply-adds into
    mr * nr / lanes vector registers that stay in registers across k
    (hoisted out of the k loop). `cache` tiles (M, N, K) first so the B panel
    stays in L1/L2. Packed matmuls (`_pack_rhs`) tile K by `packed_k` instead.
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
#: register tile, read B from a packed copy [N / nr, K, nr] (`_pack_rhs`):
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

#: Bound on the error, in ulp of the float32 result, of each f32 approximation,
#: asserted by test/python/test_cpu_pipeline.py against numpy's float64
#: functions on every 4099th f32 bit pattern (all signs and exponents,
#: subnormals included) plus special values. Measured maxima: exp 0.95,
#: log 0.75, tanh 1.20 ulp (1.36 over every 7th f32 in [0.5, 10]);
#: inf/nan/+-0/subnormal results as libm.
APPROX_MAX_ULP = {"math.exp": 1.5, "math.log": 1.5, "math.tanh": 2.0}

#: Element types a schedule accepts (i1 memory is bytes in this project's
#: lowering, so vectors of i1 in memory would be wrong; index has no fixed width).
_VECTOR_ELEMENT_TYPES = ("f32", "f64", "i32", "i64")

#: Ops allowed in the body of an op that gets vectorized: everything here
#: lowers to vector LLVM instructions or to per-lane libm calls.
_VECTORIZABLE_BODY_OPS = {
    "linalg.yield", "linalg.index",
    "math.exp", "math.log", "math.tanh", "math.sqrt", "math.rsqrt", "math.absf",
    "math.floor", "math.ceil", "math.fma", "math.copysign",
}


# -- classification ---------------------------------------------------------------------------


@dataclasses.dataclass
class Candidate:
    """One linalg op the schedule will transform."""

    op: ir.Operation
    kind: str  # "contraction", "elementwise", "reduction", "outer_reduction", "transpose"
    ranges: list[int]  # static loop ranges
    width: int  # element bit width
    reduced: list[int] = dataclasses.field(default_factory=list)  # reduction loops
    contraction: ContractionDims | None = None  # loop roles, for kind "contraction"
    tiles: tuple[int, int] = (0, 0)  # (mr, nr) of a "packed_matmul"
    in_rows: bool = False  # a tile of a fused row group: runs on one thread


def _element_type(t: ir.Type) -> ir.Type | None:
    if isinstance(t, ir.RankedTensorType):
        return t.element_type if t.has_static_shape else None
    return t


def _static_operand_types(op: ir.Operation) -> list[ir.Type] | None:
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    out = []
    for t in types:
        if isinstance(t, ir.ShapedType) and not (
            isinstance(t, ir.RankedTensorType) and t.has_static_shape
        ):
            return None
        out.append(t)
    return out


def _element_width(op: ir.Operation) -> int | None:
    """The common bit width of the op's element types, if all are vectorizable."""
    types = _static_operand_types(op)
    if types is None:
        return None
    widths = set()
    for t in types:
        et = _element_type(t)
        if et is None or str(et) not in _VECTOR_ELEMENT_TYPES:
            return None
        widths.add(int(str(et)[1:]))
    return widths.pop() if len(widths) == 1 else None


def _loop_ranges(op: ir.Operation) -> list[int] | None:
    """Static loop ranges of a linalg.generic from its indexing maps and operand shapes."""
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    return _ranges_from_maps(maps, op)


def _ranges_from_maps(maps: Sequence[ir.AffineMap], op: ir.Operation) -> list[int] | None:
    n = maps[0].n_dims
    ranges: list[int | None] = [None] * n
    for m, v in zip(maps, op.operands):
        t = v.type
        if not isinstance(t, ir.RankedTensorType):
            continue
        for j, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr):
                ranges[e.position] = t.get_dim_size(j)
    if any(r is None for r in ranges):
        return None
    return ranges  # type: ignore[return-value]


def _body_ok(op: ir.Operation) -> bool:
    for body_op in op.regions[0].blocks[0].operations:
        name = body_op.operation.name
        if not (name.startswith("arith.") or name in _VECTORIZABLE_BODY_OPS):
            return False
    return True


def classify(op: ir.Operation, sized: bool = True) -> Candidate | None:
    """The schedule kind of `op`, or None to leave it to the naive lowering.

    Ops below the size thresholds are left alone, unless `sized` is False or
    the op is part of a fused row group (`FuseRowGroups`): those are small
    tiles of a large computation, and each runs once per tile.
    """
    name = op.name
    in_rows = _ROW_TAG in op.attributes
    sized = sized and not in_rows
    if name in ("linalg.matmul", "linalg.batch_matmul"):
        return _contraction_candidate(op, _named_maps(op))
    if name == "linalg.fill":
        width = _element_width(op)
        shape = op.results[0].type.shape if width else None
        if not shape or (sized and pymath.prod(shape) < ELEMENTWISE.min_elements):
            return None
        return Candidate(op, "elementwise", list(shape), width, in_rows=in_rows)
    if name == "linalg.transpose":
        width = _element_width(op)
        shape = list(op.results[0].type.shape) if width else []
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"])) if width else []
        # 2-D block transposes only (other permutations keep the scalar loops).
        if len(shape) != 2 or pymath.prod(shape) < ELEMENTWISE.min_elements or perm != [1, 0]:
            return None
        return Candidate(op, "transpose", shape, width)
    if name not in ("linalg.generic", "linalg.reduce"):
        return None
    width = _element_width(op)
    if width is None or not _body_ok(op) or not _plain_maps(op):
        return None
    if name == "linalg.reduce":
        # Scheduled as the linalg.generic it generalizes to (same loop order).
        ranges = list(op.operands[0].type.shape)
        reduced_dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        iters = ["<reduction>" if i in reduced_dims else "<parallel>"
                 for i in range(len(ranges))]
    else:
        ranges = _loop_ranges(op)
        iters = [str(a) for a in op.attributes["iterator_types"]]
    if ranges is None or not ranges:
        return None
    parallel = [i.endswith("<parallel>") for i in iters]
    minimum = ELEMENTWISE.min_elements if all(parallel) else REDUCTION.min_elements
    if sized and pymath.prod(ranges) < minimum:
        return None
    if all(i.endswith("<parallel>") for i in iters):
        return Candidate(op, "elementwise", ranges, width, in_rows=in_rows)
    if len(op.results) != 1:
        # Sibling sums merged into one pass (`MergeSiblingReductions`): outer
        # reductions whose results share one map.
        out_maps = {str(m) for m in list(op.attributes["indexing_maps"])[
            len(op.operands) - len(op.results):]}
        if (name == "linalg.generic" and iters[-1].endswith("<parallel>")
                and len(out_maps) == 1 and _vectorizable_reduction(op)):
            reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
            return Candidate(op, "outer_reduction", ranges, width, reduced)
        return None
    if name == "linalg.generic" and len(op.operands) - len(op.results) != 1:
        # Two inputs multiplied and summed (vmap and reverse mode write
        # matmuls with batch or transposed maps this way): the matmul
        # schedule, or the scalar loops if it does not fit it. Other
        # multi-input reductions (reverse mode's sum(ct * y / s) of softmax
        # over the last loop; GMM's sums over points of ct * (x - mu), with
        # the broadcast fused in, over outer loops), and products of two
        # equally indexed inputs summed (a batched dot product, no
        # contraction) are reductions. Vectorized, GMM d10's gradient went
        # from 2.30 to 1.80 ms (1T, with `UnshareBroadcastProducers`).
        maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
        if _is_mul_add(op):
            contraction = _contraction_candidate(op, maps)
            if contraction is not None or maps[0] != maps[1]:
                return contraction
    if not _vectorizable_reduction(op):
        return None
    # Inner reductions: the reduced dim is the last loop. Outer loops may reduce
    # too (a sum over a whole matrix, e.g. the weight decay sum(w * w)): they
    # become scalar loops around the vectorized last one. Left to the scalar
    # loops, such a sum ran one dependent add per element: with sum(w * w)
    # vectorized, the MLP loss (784-512-512-10, batch 128, f32, one thread)
    # went from 2.33 to 1.78 ms (jax.jit 1.43 in the same process).
    if iters[-1].endswith("<reduction>"):
        reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
        return Candidate(op, "reduction", ranges, width, reduced, in_rows=in_rows)
    # Outer reductions (e.g. column sums): the last loop is parallel.
    if iters[-1].endswith("<parallel>"):
        reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
        return Candidate(op, "outer_reduction", ranges, width, reduced)
    return None


#: Combiners linalg's vectorizer recognizes in a reduction's body.
_COMBINERS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf",
              "arith.maxnumf", "arith.minnumf", "arith.addi", "arith.muli", "arith.andi",
              "arith.ori", "arith.xori", "arith.maxsi", "arith.minsi", "arith.maxui",
              "arith.minui")


def _vectorizable_reduction(op: ir.Operation) -> bool:
    """Reduction `op` yields `combiner(init, x)` (the init read there only) into a
    result indexed in loop order: what linalg's vectorizer handles. Others
    (`init - x`, a transposed result) fail in the transform script, and one
    failure there leaves every op of the module unscheduled."""
    if op.name == "linalg.reduce":
        return True
    block = op.regions[0].blocks[0]
    n_out = len(op.results)
    inits = list(block.arguments)[len(block.arguments) - n_out:]
    yielded = list(block.operations[len(block.operations) - 1].operands)
    out_maps = list(op.attributes["indexing_maps"])[len(op.operands) - n_out:]
    if len(yielded) != n_out:
        return False
    for init, value, m in zip(inits, yielded, out_maps):
        if isinstance(value.owner, ir.Block):
            return False
        combiner = value.owner
        if (combiner.name not in _COMBINERS or init not in list(combiner.operands)
                or len(list(init.uses)) != 1):
            return False
        out_map = ir.AffineMapAttr(m).value
        dims = [e.position for e in out_map.results if isinstance(e, ir.AffineDimExpr)]
        if dims != sorted(dims):
            return False
    return True


def _plain_maps(op: ir.Operation) -> bool:
    """Every indexing-map result is a loop dim or a constant.

    Maps with arithmetic (the reversal `d0 * -1 + 127` of `x[::-1]`) stay on
    the scalar loops: tiling them hits an assertion in linalg's tiling
    utilities in this build ("nonpositive multiplying coefficient"), which
    aborts the process.
    """
    if "indexing_maps" not in op.attributes:
        return True
    for m in op.attributes["indexing_maps"]:
        for e in ir.AffineMapAttr(m).value.results:
            if not isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)):
                return False
    return True


_DEFAULT_MAPS = {
    "linalg.matmul": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)",
                      "(d0, d1, d2) -> (d0, d1)"],
    "linalg.batch_matmul": ["(d0, d1, d2, d3) -> (d0, d1, d3)",
                            "(d0, d1, d2, d3) -> (d0, d3, d2)",
                            "(d0, d1, d2, d3) -> (d0, d1, d2)"],
}


def _named_maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The indexing maps of a named matmul/batch_matmul (user maps, e.g. transposed, or default)."""
    if "indexing_maps" in op.attributes:
        return [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    return [ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{m}>")).value
            for m in _DEFAULT_MAPS[op.name]]


def _is_mul_add(op: ir.Operation) -> bool:
    """The body is `acc + a * b` of the two inputs (either operand order), floats."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 3 or [o.name for o in ops] != ["arith.mulf", "arith.addf", "linalg.yield"]:
        return False
    mul, add, yld = ops
    a, b, acc = block.arguments
    return ({*mul.operands} == {a, b} and a != b
            and {*add.operands} == {mul.results[0], acc}
            and yld.operands[0] == add.results[0])


@dataclasses.dataclass(frozen=True)
class ContractionDims:
    """Loop dims of C += A * B by role, for the register-tiled outer-product schedule.

    `nr_dim` is C's innermost (contiguous) dim: the register tile's vector
    lanes. The input that has it must have it innermost too; if it does
    not, `relayout` = (input index, permutation) says how to transpose that
    input first. `mr_dim` (None for a vector-matrix product) is the largest
    dim of the other input and C: one broadcast scalar per register-tile
    row. `outer` are the other parallel dims (a batch dim), `k` the reduced
    dims.
    """

    outer: tuple[int, ...]
    mr_dim: int | None
    nr_dim: int
    k: tuple[int, ...]
    relayout: tuple[int, tuple[int, ...]] | None = None
    #: the vector operand is the first input: the rewrite swaps the inputs so
    #: that the generic specializes to a (batch_)matmul (lhs rows, rhs lanes)
    swap: bool = False

    @property
    def order(self) -> list[int]:
        """Loop order of the schedule: outer dims, M, N, then the reductions innermost."""
        mid = [self.mr_dim] if self.mr_dim is not None else []
        return [*self.outer, *mid, self.nr_dim, *self.k]


def _map_dims(maps: Sequence[ir.AffineMap]) -> list[list[int]] | None:
    """The loop dim of each result of each map, or None unless all are projected permutations."""
    out = []
    for m in maps:
        ds = [e.position for e in m.results if isinstance(e, ir.AffineDimExpr)]
        if len(ds) != len(m.results) or len(set(ds)) != len(ds):
            return None  # constants or sums of dims
        out.append(ds)
    return out


def _contraction_dims(dims: Sequence[Sequence[int]], ranges: Sequence[int]
                      ) -> ContractionDims | None:
    """Roles of the loop dims of C[dims[2]] += A[dims[0]] * B[dims[1]], or None.

    Unit parallel dims must be gone (`_drop_unit_dims`): they would sit
    between the vector dims of the register tile.
    """
    a, b, c = dims
    if not c:
        return None
    in_a, in_b, in_c = set(a), set(b), set(c)
    n_loops = len(ranges)
    k = tuple(d for d in range(n_loops) if d not in in_c)
    if not k or any(d not in in_a or d not in in_b for d in k):
        return None  # no reduction, or a dim summed over one input only
    nr_dim = c[-1]
    if nr_dim in in_a and nr_dim in in_b:
        return None  # C's contiguous dim is a batch dim: no outer-product structure
    vec_index = 1 if nr_dim in in_b else 0
    vec = (a, b)[vec_index]
    relayout = None
    if vec[-1] != nr_dim:
        # The vector lanes would be strided loads: transpose that input
        # (GMM's Q[k, i, j] applied to x[k, n, j]), worth it when the
        # schedule reads it many times (`RELAYOUT_MIN_REUSE`).
        reuse = pymath.prod(ranges[d] for d in range(len(ranges)) if d not in vec)
        if reuse < RELAYOUT_MIN_REUSE:
            return None
        perm = tuple([p for p, d in enumerate(vec) if d != nr_dim] + [vec.index(nr_dim)])
        relayout = (vec_index, perm)
        vec = [vec[p] for p in perm]
    other = (a, b)[1 - vec_index]
    # Register rows: the largest dim of the other input that C also has.
    rows = [d for d in other if d in in_c and not (d in in_a and d in in_b)]
    mr_dim = max(rows, key=lambda d: (ranges[d], d)) if rows else None
    outer = tuple(d for d in range(n_loops) if d not in (mr_dim, nr_dim) and d not in k)
    # Vectorizing a generic with a leading (batch) dim tiled to 1 yields
    # transposed broadcasts that never fold into vector.contract; one batch
    # dim is a batch_matmul (`transform.structured.specialize`), which
    # vectorizes straight to the contraction. Other forms keep the loops.
    if len(k) != 1 or outer and (len(outer) > 1 or mr_dim is None
                                 or not (outer[0] in in_a and outer[0] in in_b)):
        return None
    return ContractionDims(outer, mr_dim, nr_dim, k, relayout, swap=vec_index == 0)


def _float_width(op: ir.Operation) -> int | None:
    """32 or 64 if every operand is an f32 (f64) tensor: the contraction schedules
    rebuild bodies with arith.mulf/addf (an i32 matmul keeps its loops)."""
    width = _element_width(op)
    types = [_element_type(v.type) for v in op.operands]
    if width is None or any(str(t) not in ("f32", "f64") for t in types):
        return None
    return width


def _unit_parallel_dims(dims: Sequence[Sequence[int]], ranges: Sequence[int]) -> list[int]:
    return [d for d in dims[2] if ranges[d] == 1]


def _without(dims: Sequence[Sequence[int]], ranges: Sequence[int], drop: Sequence[int]
             ) -> tuple[list[list[int]], list[int]]:
    """`dims` and `ranges` with the loop dims `drop` removed and the rest renumbered."""
    keep = [d for d in range(len(ranges)) if d not in drop]
    new = {d: i for i, d in enumerate(keep)}
    return [[new[d] for d in ds if d in new] for ds in dims], [ranges[d] for d in keep]


def _contraction_candidate(op: ir.Operation, maps: Sequence[ir.AffineMap]) -> Candidate | None:
    """A matmul-schedule candidate for a contraction of f32/f64 tensors large enough to pay.

    Its roles are those of the op without unit parallel dims, which the
    schedule drops first (`_drop_unit_dims`).
    """
    width = _float_width(op)
    dims = _map_dims(maps) if len(maps) == 3 else None
    if width is None or dims is None:
        return None
    ranges = _ranges_from_maps(maps, op)
    if ranges is None or 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
        return None
    unit = _unit_parallel_dims(dims, ranges)
    if any(not [d for d in ds if d not in unit] for ds in dims):
        return None  # an operand would become a scalar
    roles = _contraction_dims(*_without(dims, ranges, unit))
    if roles is None:
        return None
    return Candidate(op, "contraction", ranges, width, contraction=roles)


def _collapse(v: ir.Value, dims: Sequence[int], drop: Sequence[int]
              ) -> tuple[ir.Value, list[list[int]]]:
    """`v` without its unit dims that index loops in `drop` (tensor.collapse_shape)."""
    from mlir.dialects import tensor

    kept = [p for p, d in enumerate(dims) if d not in drop]
    groups: list[list[int]] = []
    start = 0
    for n, p in enumerate(kept):
        end = len(dims) if n == len(kept) - 1 else p + 1
        groups.append(list(range(start, end)))
        start = end
    if len(kept) == len(dims):
        return v, groups
    t = v.type
    new_t = ir.RankedTensorType.get([t.shape[p] for p in kept], t.element_type)
    return tensor.collapse_shape(new_t, v, groups), groups


def _contraction_maps(op: ir.Operation) -> list[ir.AffineMap]:
    if op.name != "linalg.generic":
        return _named_maps(op)
    return [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]


def _rewrite_without(op: ir.Operation, dims: Sequence[Sequence[int]], ranges: Sequence[int],
                     drop: Sequence[int],
                     relayout: tuple[int, tuple[int, ...]] | None = None,
                     swap: bool = False) -> ir.Operation:
    """Replace contraction `op` by a generic `acc + a * b` without the unit loop dims `drop`.

    Operands lose the corresponding unit dims (tensor.collapse_shape) and the
    result gets them back (tensor.expand_shape). `relayout` (input index,
    permutation, in the dims without `drop`) transposes that input first;
    `swap` exchanges the two inputs.
    """
    from mlir.dialects import linalg, tensor

    new_dims, new_ranges = _without(dims, ranges, drop)
    n = len(new_ranges)
    with ir.InsertionPoint(op), op.location:
        (a, _), (b, _), (init, groups) = (
            _collapse(v, ds, drop) for v, ds in zip(op.operands, dims))
        if relayout is not None:
            i, perm = relayout
            ins = [a, b]
            t = ins[i].type
            empty = tensor.empty([t.shape[p] for p in perm], t.element_type)
            ins[i] = linalg.transpose(ins[i], outs=[empty], permutation=list(perm)).results[0]
            new_dims[i] = [new_dims[i][p] for p in perm]
            a, b = ins
        if swap:
            a, b = b, a
            new_dims[0], new_dims[1] = new_dims[1], new_dims[0]
        return _replace_by_mul_add(op, a, b, init, new_dims, n, groups)


def _replace_by_mul_add(op: ir.Operation, a: ir.Value, b: ir.Value, init: ir.Value,
                        dims: Sequence[Sequence[int]], n: int,
                        groups: Sequence[Sequence[int]]) -> ir.Operation:
    """Replace `op` by the generic `init + a * b` over `n` loops with operand
    dims `dims` (C's dims parallel, the others reduced); its result reshaped
    to `op`'s by `groups` (tensor.expand_shape) if it differs. Call at an
    insertion point before `op`."""
    from mlir.dialects import arith, linalg, tensor

    new_maps = [ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in ds]) for ds in dims]
    iters = [linalg.IteratorType.parallel if d in dims[2] else linalg.IteratorType.reduction
             for d in range(n)]
    gen = linalg.GenericOp_([a, b], [init], new_maps, iters)
    with ir.InsertionPoint(gen.regions[0].blocks[0]):
        p, q, acc = gen.regions[0].blocks[0].arguments
        linalg.YieldOp([arith.addf(acc, arith.mulf(p, q))])
    out_t = op.results[0].type
    res = gen.results[0]
    if res.type != out_t:
        res = tensor.expand_shape(out_t, res, groups, [], list(out_t.shape))
    op.results[0].replace_all_uses_with(res)
    op.erase()
    return gen.operation


def _dim_groups(dims: Sequence[Sequence[int]], iters: Sequence[str]) -> list[list[int]]:
    """Runs of loop dims that every operand indexes together, adjacent and in
    the same order (or not at all), with one iterator type: each run can be
    one loop. Every dim is in exactly one run; runs are ordered by first dim."""
    def together(x: int, y: int) -> bool:
        return iters[x] == iters[y] and all(
            (x in ds) == (y in ds) and (x not in ds or ds.index(y) == ds.index(x) + 1)
            for ds in dims)

    nxt = {x: y for ds in dims for x, y in itertools.pairwise(ds) if together(x, y)}
    followers = set(nxt.values())
    runs = []
    for d in range(len(iters)):
        if d in followers:
            continue
        run = [d]
        while run[-1] in nxt:
            run.append(nxt[run[-1]])
        runs.append(run)
    return runs


def collapse_contraction_dims(module: ir.Operation) -> None:
    """Contractions `acc + a * b` whose loop dims come in runs (`_dim_groups`)
    become contractions over one loop per run, on reshaped (collapse_shape)
    operands: ADBench GMM's `einsum("ijp,kp->kij")` is a plain matmul
    (50 x 190 x 400) once i and j are one dim, which the matmul schedule
    handles: 2.24 ms on scalar loops -> 0.16 ms (jax.jit: 0.17 ms), f64, one
    core, d20 K50; its reverse (i, j both reduced) likewise."""
    from mlir.dialects import tensor

    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.generic" and len(op.operands) == 3 and _is_mul_add(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in found:
        maps = _contraction_maps(op)
        dims = _map_dims(maps)
        if dims is None or _float_width(op) is None or _ranges_from_maps(maps, op) is None:
            continue
        iters = ["reduction" if "reduction" in str(a) else "parallel"
                 for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        runs = _dim_groups(dims, iters)
        if len(runs) == len(iters):
            continue
        run_of = {d: r for r, run in enumerate(runs) for d in run}
        new_dims, reassoc = [], []
        for ds in dims:
            nd: list[int] = []
            re: list[list[int]] = []
            for pos, d in enumerate(ds):
                if nd and nd[-1] == run_of[d]:
                    re[-1].append(pos)
                else:
                    nd.append(run_of[d])
                    re.append([pos])
            new_dims.append(nd)
            reassoc.append(re)
        with ir.InsertionPoint(op), op.location:
            vals = []
            for v, re in zip(op.operands, reassoc):
                t = v.type
                if len(re) != t.rank:
                    shape = [pymath.prod(t.shape[p] for p in grp) for grp in re]
                    v = tensor.collapse_shape(ir.RankedTensorType.get(shape, t.element_type),
                                              v, re)
                vals.append(v)
            _replace_by_mul_add(op, *vals, new_dims, len(runs), reassoc[2])


def _drop_unit_dims(c: Candidate) -> Candidate:
    """Rewrite a contraction with unit parallel dims (vmap of a matvec gives
    [B, 1, N] x [K, N]) or a strided vector operand as a generic without them.

    Vectorized with the unit dims, the register tile's vector.contract
    carried them between its vector dims; the vector patterns then turned
    it into transposes and dot products (or, before this schedule existed,
    vectors LLVM translation rejected). The new op is a plain generic
    (`acc + a * b`) between reshapes, with the vector operand transposed
    when `ContractionDims.relayout` says so.
    """
    dims = _map_dims(_contraction_maps(c.op))
    assert dims is not None and c.contraction is not None
    unit = _unit_parallel_dims(dims, c.ranges)
    relayout, swap = c.contraction.relayout, c.contraction.swap
    if not unit and relayout is None and not swap:
        return c
    gen = _rewrite_without(c.op, dims, c.ranges, unit, relayout, swap)
    new_dims, new_ranges = _without(dims, c.ranges, unit)
    if relayout is not None:
        i, perm = relayout
        new_dims[i] = [new_dims[i][p] for p in perm]
    if swap:
        new_dims[0], new_dims[1] = new_dims[1], new_dims[0]
    roles = _contraction_dims(new_dims, new_ranges)
    assert roles is not None and roles.relayout is None and not roles.swap
    return Candidate(gen, c.kind, new_ranges, c.width, contraction=roles)


@dataclasses.dataclass(frozen=True)
class OuterProductsToElementwise(Pass):
    """Rewrite contractions whose every reduced dim has extent 1 as elementwise generics.

    Per-sample weight gradients (vmap of `x.T @ dy`) are batch_matmuls with
    K = 1: outer products, memory-bound. As contractions they are not fused
    with the elementwise op that consumes them (the weight-decay term),
    and each pass over the result (64 x 256 x 128 f32 = 8 MB in the MLP
    per-sample gradients) costs its write and read again. Run before
    `linalg-fuse-elementwise-ops`, which then fuses the product into its
    consumer and folds a zero init away.
    """

    name = "autodiff-outer-products-to-elementwise"
    summary = "Rewrite contractions over unit reduction dims as elementwise linalg.generic ops"

    def run(self, module: ir.Operation) -> None:
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in ("linalg.matmul", "linalg.batch_matmul", "linalg.generic"):
                found.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for op in found:
            _outer_product_to_elementwise(op)


def _outer_product_to_elementwise(op: ir.Operation) -> None:
    if _float_width(op) is None or len(op.results) != 1:
        return
    if op.name == "linalg.generic" and (len(op.operands) != 3 or not _is_mul_add(op)):
        return
    maps = _contraction_maps(op)
    dims = _map_dims(maps) if len(maps) == 3 else None
    ranges = _ranges_from_maps(maps, op) if dims else None
    if not dims or not ranges:
        return
    k = [d for d in range(len(ranges)) if d not in dims[2]]
    if not k or any(ranges[d] != 1 for d in k):
        return
    with op.context, op.location:
        _rewrite_without(op, dims, ranges, k)


def _pack_rhs(c: Candidate) -> list[Candidate]:
    """Rewrite a large canonical matmul to read B packed as [N / nr, K, nr] (see
    `PACK_MIN_FLOPS`); returns the candidates replacing `c` (the packing
    transpose and a "packed_matmul"), or [c] unchanged.

    C is computed through its free [M, N / nr, nr] view, by a generic with
    loops (i, j1, j0, k): no unit dim sits in front of the register tile's
    vector dims, so it vectorizes to one clean vector.contract.
    """
    from mlir.dialects import arith, linalg, tensor

    d = c.contraction
    if (d is None or c.kind != "contraction" or d.outer or d.mr_dim is None
            or 2 * pymath.prod(c.ranges) < PACK_MIN_FLOPS):
        return [c]
    dims = _map_dims(_contraction_maps(c.op))
    m_dim, n_dim, (k_dim,) = d.mr_dim, d.nr_dim, d.k
    if dims is None or dims[1] != [k_dim, n_dim] or dims[2] != [m_dim, n_dim]:
        return [c]
    m, n, k = c.ranges[m_dim], c.ranges[n_dim], c.ranges[k_dim]
    sched = matmul_schedule()
    nr, mr = sched.nr // (c.width // 32), sched.mr
    if n % nr or m % mr or n == nr:
        return [c]
    op = c.op
    a_val, b_val, init = op.operands[:3]
    et = b_val.type.element_type
    with ir.InsertionPoint(op), op.location:
        be = tensor.expand_shape(ir.RankedTensorType.get([k, n // nr, nr], et), b_val,
                                 [[0], [1, 2]], [], [k, n // nr, nr])
        empty = tensor.empty([n // nr, k, nr], et)
        packed = linalg.transpose(be, outs=[empty], permutation=[1, 0, 2]).results[0]
        cv = tensor.expand_shape(ir.RankedTensorType.get([m, n // nr, nr], et), init,
                                 [[0], [1, 2]], [], [m, n // nr, nr])
        loops = [ir.AffineDimExpr.get(i) for i in range(4)]  # (i, j1, j0, k)
        i, j1, j0, kk = loops
        a_map = [i, kk] if dims[0] == [m_dim, k_dim] else [kk, i]
        maps = [ir.AffineMap.get(4, 0, a_map), ir.AffineMap.get(4, 0, [j1, kk, j0]),
                ir.AffineMap.get(4, 0, [i, j1, j0])]
        par, red = linalg.IteratorType.parallel, linalg.IteratorType.reduction
        gen = linalg.GenericOp_([a_val, packed], [cv], maps, [par, par, par, red])
        block = gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            p, q, acc = block.arguments
            linalg.YieldOp([arith.addf(acc, arith.mulf(p, q))])
        res = tensor.collapse_shape(op.results[0].type, gen.results[0], [[0], [1, 2]])
    op.results[0].replace_all_uses_with(res)
    op.erase()
    pack = Candidate(packed.owner, "pack", [n // nr, k, nr], c.width)
    return [pack, Candidate(gen.operation, "packed_matmul", [m, n // nr, nr, k], c.width,
                            tiles=(mr, nr))]


# -- transform script builders ----------------------------------------------------------------


def _largest_divisor(n: int, choices: Sequence[int]) -> int:
    for c in choices:
        if n % c == 0:
            return c
    return 1


#: Discardable attribute naming each scheduled op in the transform script.
_TAG = "autodiff.cpu_schedule"


class _Script:
    """Accumulates transform-dialect text for one module."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.vectorize: list[str] = []
        self.vectorize_contract: list[str] = []
        self.vectorize_late: list[str] = []  # vectorized after the contraction patterns
        self.hoist: list[str] = []  # loop handles whose accumulators go to registers
        self.unroll: list[str] = []  # hoisted matmul k loops, unrolled by MATMUL_K_UNROLL
        self.n = 0
        self.threads = 1

    def forall(self, h: str, sizes: Sequence[int]) -> str:
        """Distribute `h` over threads: one `scf.forall` iteration per chunk of `sizes`."""
        t, loop = self.fresh("p"), self.fresh("forall")
        self.lines.append(
            f"{t}, {loop} = transform.structured.tile_using_forall {h} tile_sizes {list(sizes)} "
            ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)"
        )
        return t

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def match(self, tag: int, generalize: bool = False, attr: str = _TAG) -> str:
        """The op whose attribute `attr` is `tag` (optionally generalized)."""
        h = self.fresh("op")
        self.lines.append(
            f"{h} = transform.structured.match attributes {{{attr} = {tag} : i64}} in %root "
            ": (!transform.any_op) -> !transform.any_op"
        )
        if generalize:
            g = self.fresh("gen")
            self.lines.append(
                f"{g} = transform.structured.generalize {h} "
                ": (!transform.any_op) -> !transform.any_op"
            )
            h = g
        return h

    def specialize(self, h: str) -> str:
        """Turn generic `h` back into the named op it matches (e.g. linalg.batch_matmul)."""
        g = self.fresh("sp")
        self.lines.append(
            f"{g} = transform.structured.specialize {h} "
            ": (!transform.any_op) -> !transform.any_op"
        )
        return g

    def interchange(self, h: str, order: Sequence[int]) -> str:
        """Permute the loops of generic `h`: new loop i is old loop order[i]."""
        g = self.fresh("ic")
        self.lines.append(
            f"{g} = transform.structured.interchange {h} iterator_interchange = {list(order)} "
            ": (!transform.any_op) -> !transform.any_op"
        )
        return g

    def split(self, h: str, dim: int, chunk: int) -> tuple[str, str]:
        """Split `h` along loop `dim` into iterations [0, chunk) and [chunk, end)."""
        parts, lo, hi = self.fresh("split"), self.fresh("lo"), self.fresh("hi")
        self.lines.append(f"{parts} = transform.structured.split {h} after {chunk} "
                          f"{{dimension = {dim}}} : !transform.any_op")
        self.lines.append(f"{lo}, {hi} = transform.split_handle {parts} "
                          ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
        return lo, hi

    def tile(self, h: str, sizes: Sequence[int], hoist_innermost: bool = False,
             unroll_innermost: bool = False) -> str:
        """Tile `h`; with `hoist_innermost`, hoist the accumulator out of the innermost loop
        (and with `unroll_innermost`, unroll that loop by `MATMUL_K_UNROLL` afterwards)."""
        nloops = sum(1 for s in sizes if s)
        if nloops == 0:
            return h
        t = self.fresh("t")
        loops = self.fresh("l")
        innermost = f"{loops}#{nloops - 1}" if nloops > 1 else loops
        if hoist_innermost:
            self.hoist.append(innermost)
        if unroll_innermost:
            self.unroll.append(innermost)
        anys = ", ".join(["!transform.any_op"] * (nloops + 1))
        self.lines.append(
            f"{t}, {loops}:{nloops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
            if nloops > 1 else
            f"{t}, {loops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
        )
        return t


def _register_tile(extent: int, preferred: int, multiple: int) -> int:
    """The register tile along one dim: the whole dim if it fits, else a divisor.

    Among divisors <= `preferred`, one that is a multiple of `multiple` (whole
    vector registers) and at least half of `preferred` wins; else the largest.
    Measured: N = 10 (an MLP's output layer) ran at 17 GFLOP/s with 2-wide
    tiles and the whole 10 columns make one (widened) vector.
    """
    if extent <= preferred:
        return extent
    divisors = [d for d in range(preferred, 0, -1) if extent % d == 0]
    good = [d for d in divisors if d % multiple == 0 and 2 * d >= preferred]
    return (good or divisors)[0]


def _lane_tile(extent: int, preferred: int, lanes: int) -> int:
    """The register tile along the vector dim: `_register_tile`, except that a
    tile wider than one register must fill whole registers.

    Measured (f64, AVX-512, C[k, n, j] += A[k, i, j] B[k, n, i] with
    25 x 1000 x 10 x 10, GMM's shape): 10-wide tiles (vector<10xf64>, one
    and a quarter registers) ran at 1.4-1.6 GFLOP/s, no faster than scalar
    loops, while the same kernel in f32 (vector<10xf32>, one widened
    register) ran at 20 GFLOP/s.
    """
    tile = _register_tile(extent, preferred, lanes // 2)
    if tile <= lanes or tile % lanes == 0:
        return tile
    return next(d for d in range(lanes, 0, -1) if extent % d == 0)


def _cache_tile(extent: int, preferred: int, reg: int) -> int:
    """The largest multiple of `reg` <= `preferred` dividing `extent`; 0 (no loop) if none
    is smaller than `extent` and larger than `reg` (tiles must stay static)."""
    for t in range(preferred - preferred % reg, reg, -reg):
        if extent % t == 0:
            return 0 if t == extent else t
    return 0


def _thread_split(threads: int, c: Candidate, extents: Sequence[int], regs: Sequence[int],
                  min_work: int) -> int | None:
    """Which of `extents` (index) to split over `threads` so chunks stay whole register
    tiles, or None (too little work, or no dim splits evenly)."""
    if threads <= 1 or 2 * pymath.prod(c.ranges) < min_work:
        return None
    for i, (e, r) in enumerate(zip(extents, regs)):
        if e % threads == 0 and (e // threads) % r == 0:
            return i
    return None


def _schedule_contraction(s: _Script, c: Candidate, tag: int) -> None:
    """Cache tiles, then (mr x nr) register tiles of C with the reductions innermost.

    The op is generalized and its loops interchanged to (outer..., M, N, K...)
    (`ContractionDims.order`), so named matmuls, batch matmuls and the
    contraction generics of vmap/reverse mode (batch dims, unit dims,
    transposed operands) get one schedule. Each k step of the register tile
    is a rank-1 update: mr broadcast scalars times one nr-wide vector, FMAs
    into accumulators hoisted out of the k loop.
    """
    d = c.contraction
    assert d is not None
    order = d.order
    named = c.op.name != "linalg.generic"
    h = s.match(tag, generalize=named and order != sorted(order))
    if order != sorted(order):
        h = s.interchange(h, order)
    if d.outer and (not named or order != sorted(order)):
        h = s.specialize(h)  # the batch_matmul this is, see `_contraction_dims`
    ranges = [c.ranges[i] for i in order]
    n_outer, has_m, n_k = len(d.outer), d.mr_dim is not None, len(d.k)
    m = ranges[n_outer] if has_m else 1
    n = ranges[n_outer + has_m]
    k = ranges[-1]
    # Register tile: divisors of the shape, so every tile is static and
    # vectorizes without masks or peeling.
    sched = matmul_schedule()
    scale = c.width // 32  # f64: half as many lanes per register
    nr = _lane_tile(n, sched.nr // scale, host_vector_bits() // c.width)
    mr = _register_tile(m, sched.mr_max or sched.mr, 1)
    outer = [1 if r > 1 else 0 for r in ranges[:n_outer]]
    # Threads split the vector dim only into whole vectors: GMM d10's
    # [25, 1000, 10] f64 contraction split N = 10 into two 5-wide halves, and
    # the threads wrote alternate 40-byte pieces of the same cache lines; at
    # 2T the objective took 0.54 ms against 0.28 ms on one thread.
    lanes = host_vector_bits() // c.width
    par = _thread_split(s.threads, c, ranges[:n_outer] + ([m] if has_m else []) + [n],
                        [1] * n_outer + ([mr] if has_m else []) + [pymath.lcm(nr, lanes)],
                        PARALLEL_MIN_FLOPS)
    if par is not None:
        # One chunk of the first evenly splitting dim per thread; cache tiles
        # then divide the chunk.
        sizes = [0] * len(ranges)
        chunk = ranges[par] // s.threads
        sizes[par] = chunk
        h = s.forall(h, sizes)
        if par == n_outer and has_m:
            m = chunk
        elif par >= n_outer:
            n = chunk
    cache = [_cache_tile(m, sched.cache[0], mr)] if has_m else []
    cache += [_cache_tile(n, sched.cache[1], nr)]
    cache += [0] * (n_k - 1) + [_cache_tile(k, sched.cache[2], 1)]
    if any(cache) or any(outer):
        h = s.tile(h, outer + cache)
    parts = [(h, nr)]
    split = _lane_split(n, nr, lanes) if not cache[has_m] else None
    if split is not None:
        lo, hi = s.split(h, n_outer + has_m, split)
        parts = [(lo, _lane_tile(split, sched.nr // scale, lanes)), (hi, n - split)]
    for part, part_nr in parts:
        tile = [0] * n_outer + ([mr] if has_m else []) + [part_nr] + [1] * n_k
        # Vectorize straight to vector.contract (not broadcast + multi_reduction, which
        # for batch_matmul folds into a contract that lowers to dot products).
        s.vectorize_contract.append(s.tile(part, tile, hoist_innermost=True,
                                           unroll_innermost=True))


def _lane_split(n: int, nr: int, lanes: int) -> int | None:
    """Where to split a vector dim of `n` whose register tile `nr` is a narrow,
    partial register (n = 20 f64 on AVX-512: nr = 5): after the whole registers
    (16 + 4; 190 = 184 + 6), else None (keep `nr`).

    The two parts share the cache tiles and get their own register tiles
    (mr x 16 in two zmm per row, mr x 4 in one ymm). Measured, ADBench GMM
    (f64, AVX-512), variants in one process, interleaved, best of 9 (ms), 5
    wide / split: d20 K50 objective 2.66 / 2.38, gradient 9.65 / 8.35 (2T:
    7.61 / 6.35); d10 K25 (8 + 2) objective 0.611 / 0.597, gradient 1.78 /
    1.76. Whole 20-wide tiles (vector<20xf64>) ran the d20 gradient at 19 ms.
    A rest that is not a power of two is split off too: GMM's gradient of the
    packed lower triangle, [50, 400] x [400, 190] f64, ran 5 x 5 tiles; as
    5 x 8 and 5 x 6 the gradient went (Zen 5, 1T, best of 15, ms) d20 3.56 ->
    3.41, d10 0.603 -> 0.562.
    """
    rest = n % lanes
    if nr >= lanes or not nr & (nr - 1) or not rest or n < lanes:
        return None
    return n - rest


def _packed_k_tile(k: int) -> int:
    """The cache tile of a packed matmul's K (0: the whole K in each register tile)."""
    return _cache_tile(k, matmul_schedule().packed_k, 1)


def _schedule_packed_matmul(s: _Script, c: Candidate, tag: int) -> None:
    """Loops (i, j1, j0, k) of `_pack_rhs`: cache tiles, then mr rows x one packed
    panel of nr columns per register tile, k innermost (accumulators hoisted)."""
    h = s.match(tag)
    m, n1, nr, k = c.ranges
    mr = c.tiles[0]
    sched = matmul_schedule()
    par = _thread_split(s.threads, c, [m, n1], [mr, 1], PARALLEL_MIN_FLOPS)
    if par is not None:
        sizes = [0, 0, 0, 0]
        sizes[par] = (m, n1)[par] // s.threads
        h = s.forall(h, sizes)
        m, n1 = (sizes[0], n1) if par == 0 else (m, sizes[1])
    cache = [_cache_tile(m, sched.cache[0], mr), _cache_tile(n1, sched.packed_n // nr, 1), 0,
             _packed_k_tile(k)]
    if any(cache):
        h = s.tile(h, cache)
    s.vectorize.append(s.tile(h, [mr, 1, 0, 1], hoist_innermost=True, unroll_innermost=True))


def _schedule_pack(s: _Script, c: Candidate, tag: int) -> None:
    """The packing copy B[k, j1, j0] -> Bp[j1, k, j0]: one contiguous nr-vector per
    (j1, k), the panels j1 split over the threads. On one thread the copy cost
    2T matmuls about 8%: f32, best of 9 (ms), serial / split copy: 512^3 0.68 /
    0.55-0.60, 1024^3 4.95-5.01 / 4.55-4.61 (jax.jit 4.58)."""
    h = s.match(tag)
    h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    s.vectorize.append(s.tile(h, [1, 1, 0]))


def _split_outer(s: _Script, h: str, c: Candidate, inner: int, min_elements: int) -> str:
    """Distribute the outermost (parallel) loop over the threads if it splits evenly.

    A 1-D op splits into chunks that stay multiples of its vector tile `inner`.
    """
    t = s.threads
    if t <= 1 or c.in_rows or pymath.prod(c.ranges) < min_elements:
        return h
    e = c.ranges[0]
    step = inner if len(c.ranges) == 1 else 1
    if e % t or (e // t) % step:
        return h
    return s.forall(h, [e // t] + [0] * (len(c.ranges) - 1))


def _schedule_elementwise(s: _Script, c: Candidate, tag: int) -> None:
    h = s.match(tag)
    lanes = ELEMENTWISE.lanes[c.width]
    n = c.ranges[-1]
    v = _largest_divisor(n, (lanes, lanes // 2, lanes // 4, 2))
    if v < lanes < n <= ELEMENTWISE_WHOLE_ROW_VECTORS * lanes:
        v = n  # see ELEMENTWISE_WHOLE_ROW_VECTORS
    h = _split_outer(s, h, c, v, PARALLEL_MIN_ELEMENTS)
    sizes = [1] * (len(c.ranges) - 1) + [v]
    # A dim of extent 1 needs no loop.
    sizes = [0 if r == 1 else t for t, r in zip(sizes, c.ranges)]
    s.vectorize.append(s.tile(h, sizes))


def _schedule_reduction(s: _Script, c: Candidate, tag: int) -> None:
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = REDUCTION.lanes[c.width]
    v = _largest_divisor(c.ranges[-1], (lanes, lanes // 2, lanes // 4, lanes // 8, 4, 2))
    if len(c.ranges) > 1 and 0 not in c.reduced:
        h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    outer = [0 if r == 1 else 1 for r in c.ranges[:-1]] + [0]
    h = s.tile(h, outer)
    if v == 1:
        return
    if v == c.ranges[-1]:
        # The whole row is one vector step: vectorized as it is (a partial
        # reduction over one step left unlowered vector ops behind).
        s.vectorize_late.append(h)
        return
    fill, split, comb, loop = (s.fresh(x) for x in ("fill", "split", "comb", "rl"))
    sizes = [0] * (len(c.ranges) - 1) + [v]
    s.lines.append(
        f"{fill}, {split}, {comb}, {loop} = transform.structured.tile_reduction_using_for {h} "
        f"by tile_sizes = {sizes} : (!transform.any_op) -> (!transform.any_op, "
        "!transform.any_op, !transform.any_op, !transform.any_op)"
    )
    s.vectorize_late += [fill, split, comb]
    s.hoist.append(loop)


def _schedule_outer_reduction(s: _Script, c: Candidate, tag: int) -> None:
    """Loops in their natural order, the contiguous last dim by `lanes`.

    The accumulator row is re-read from L1 at each step. Putting the
    reduction loops innermost (accumulators in registers) was measured
    slower: column sums of 4096x1024 f32 ran at 10 GB/s that way (a new page
    per step) against 27 GB/s in the natural order.

    Vectorized after `reduction_to_contract`, as inner reductions are: a sum
    of products (GMM's sum_n g[k, n, d] (x[n, d] - mu[k, d])) became a
    vector.contract over the unit reduced dim, which lowered to one scalar
    add per lane. Measured, ADBench GMM gradient (f64), one thread, variants
    in one process, best of 15 (ms), before / after: d20 3.75 / 3.51, d10
    0.637 / 0.583 (objectives unchanged).

    Single sums keep that order. Hoisting a single sum's row (GMM's sum over
    points, [50, 1000, 20] -> [50, 20]) out of its reduced innermost loop
    was measured slower (Zen 5, f64, 1T, best of 30): as 16 + 4 pieces each
    piece is one chain of dependent adds, 0.180 ms against 0.147 in this
    order (a pure 8 MB read is about 0.13). Several sums merged into one op
    (`MergeSiblingReductions`) carry one chain per result and are hoisted:
    three sums over the same 8 MB operand took 0.19 ms so, against 0.33 as
    three ops (`benchmarks/run.py`'s interleaved timing, median of 9).
    """
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = REDUCTION.lanes[c.width]
    v = _outer_reduction_step(c.ranges[-1], lanes)
    if OUTER_REDUCTION_THREADS and len(c.ranges) > 2 and 0 not in c.reduced:
        h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    sizes = [0 if r == 1 else 1 for r in c.ranges[:-1]] + [v]
    if len(c.op.results) == 1 or not rows_stay_in_registers(c):
        s.vectorize_late.append(s.tile(h, sizes))
        return
    # Several sums (merged siblings) whose innermost loop reduces: their
    # accumulator rows stay in registers across it, one chain of adds per
    # result. A row carried by a loop must be a power of two wide (LLVM
    # scalarized a carried vector<20xf64>), so the row is split into such
    # pieces (20 = 16 + 4), each its own loop inside the outer ones, where
    # the rows it reads are still in cache from the piece before.
    r = max(d for d, t in enumerate(sizes[:-1]) if t)
    h = s.tile(h, [t if d < r else 0 for d, t in enumerate(sizes[:-1])] + [0])
    inner = [1 if d == r else 0 for d in range(len(sizes))]
    pieces = _binary_pieces(c.ranges[-1])
    start = 0
    for width in pieces[:-1]:
        start += width
        lo, h = s.split(h, len(sizes) - 1, start)
        s.vectorize_late.append(s.tile(lo, inner, hoist_innermost=True))
    s.vectorize_late.append(s.tile(h, inner, hoist_innermost=True))


def rows_stay_in_registers(c: Candidate) -> bool:
    """Outer reduction `c` gets the hoisted schedule when it has several
    results: its innermost loop (past unit dims) reduces and its result row is
    one vector step of at most three power-of-two pieces."""
    n = c.ranges[-1]
    loops = [d for d, r in enumerate(c.ranges[:-1]) if r != 1]
    return (_outer_reduction_step(n, REDUCTION.lanes[c.width]) == n and bool(loops)
            and loops[-1] in c.reduced and len(_binary_pieces(n)) <= 3)


def _binary_pieces(n: int) -> list[int]:
    """`n` as a sum of decreasing powers of two (20 -> [16, 4])."""
    return [1 << b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]


#: Outer reductions whose first loop is parallel (GMM's sums over points,
#: [K, N, D] -> [K, D]) split it over the threads. Measured, GMM d20
#: gradient (f64), 2T, variants in one process, best of 15 (ms): serial
#: 2.06, split 1.87 (objective 0.79); MLP step, HVP, LSTM within noise.
OUTER_REDUCTION_THREADS = True


def _outer_reduction_step(n: int, lanes: int) -> int:
    """The vector step along an outer reduction's contiguous last dim: the
    whole dim up to `lanes`, else the largest of a few divisors. Measured,
    ADBench GMM d20 gradient (sums over points of [50, 1000, 20] f64), best
    of 9, 1T: steps of 2 / 4 / 20 ran 10.80 / 10.54 / 10.50 ms."""
    if n <= lanes:
        return n
    return _largest_divisor(n, (lanes, lanes // 2, lanes // 4, 4, 2))


def _schedule_transpose(s: _Script, c: Candidate, tag: int) -> None:
    """Square blocks, transposed in registers (vector.transpose -> shuffles).

    Naive loops read one operand with a stride of a whole row: a 512x512 f32
    transpose took 330 us (6 GB/s).
    """
    h = s.match(tag)
    b = TRANSPOSE_BLOCK[c.width]
    sizes = [_largest_divisor(r, (b, b // 2, b // 4, 2)) for r in c.ranges]
    s.vectorize.append(s.tile(h, sizes))


SCHEDULE_BUILDERS: dict[str, Callable[[_Script, Candidate, int], None]] = {
    "contraction": _schedule_contraction,
    "packed_matmul": _schedule_packed_matmul,
    "pack": _schedule_pack,
    "elementwise": _schedule_elementwise,
    "reduction": _schedule_reduction,
    "outer_reduction": _schedule_outer_reduction,
    "transpose": _schedule_transpose,
}


def build_script(candidates: Sequence[Candidate], threads: int = 1) -> str:
    """The transform module scheduling `candidates` (tagged with their index).

    With `threads` > 1, large ops are distributed over that many threads
    (`scf.forall`, later OpenMP; see `OPENMP_LOWERING`).
    """
    s = _Script()
    s.threads = threads
    for i, c in enumerate(candidates):
        SCHEDULE_BUILDERS[c.kind](s, c, i)
    body = list(s.lines)
    for h in s.vectorize:
        body.append(f"transform.structured.vectorize {h} : !transform.any_op")
    for h in s.vectorize_contract:
        body.append(f"transform.structured.vectorize {h} {{create_named_contraction}} "
                    ": !transform.any_op")
    body += [
        ("%funcs = transform.structured.match ops{[\"func.func\"]} in %root "
         ": (!transform.any_op) -> !transform.any_op"),
        "transform.apply_patterns to %funcs {",
        "  transform.apply_patterns.vector.reduction_to_contract",
        "  transform.apply_patterns.vector.transfer_permutation_patterns",
        "  transform.apply_patterns.vector.cast_away_vector_leading_one_dim",
        "  transform.apply_patterns.canonicalization",
        "} : !transform.any_op",
    ]
    if s.vectorize_late:
        # Reductions after `reduction_to_contract`: a sum of products
        # (sum(w * w)) would become a vector.contract over a unit dim, which
        # lowers to per-lane code (0.42 ms instead of 0.16 for 784 x 512).
        body += [f"transform.structured.vectorize {h} : !transform.any_op"
                 for h in s.vectorize_late]
        body += [
            "transform.apply_patterns to %funcs {",
            "  transform.apply_patterns.vector.transfer_permutation_patterns",
            "  transform.apply_patterns.vector.cast_away_vector_leading_one_dim",
            "  transform.apply_patterns.canonicalization",
            "} : !transform.any_op",
        ]
    # Keep accumulators (matmul C tiles, reduction partial sums) in registers
    # across the innermost loop instead of memory round trips. Only the
    # loops the schedules created: user loops are left as written.
    for h in s.hoist:
        body.append(f"transform.loop.hoist_loop_invariant_subsets {h} : !transform.any_op")
    if MATMUL_K_UNROLL > 1:
        body += [f"transform.loop.unroll {h} {{factor = {MATMUL_K_UNROLL} : i64}} "
                 ": !transform.any_op" for h in s.unroll]
    body += [
        # convert-vector-to-llvm does not lower vector.multi_reduction.
        "transform.apply_patterns to %funcs {",
        ("  transform.apply_patterns.vector.lower_multi_reduction "
         "lowering_strategy = \"innerreduction\""),
        "  transform.apply_patterns.vector.cast_away_vector_leading_one_dim",
        "  transform.apply_patterns.canonicalization",
        "} : !transform.any_op",
    ]
    return _named_sequence(body)


# -- f32 transcendental approximations ----------------------------------------------------------


def _f32(x: float) -> ir.Value:
    from mlir.dialects import arith

    return arith.constant(ir.F32Type.get(), x)


def _i32(x: int) -> ir.Value:
    from mlir.dialects import arith

    return arith.constant(ir.IntegerType.get_signless(32), x)


def _horner(x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    from mlir.dialects import math

    acc = _f32(coeffs[0])
    for c in coeffs[1:]:
        acc = math.fma(acc, x, _f32(c))
    return acc


def _exp_f32(x: ir.Value) -> ir.Value:
    """Cephes expf: 2^n * p(r), r = x - n ln2 (Cody-Waite, FMA), p degree 7.

    2^n is applied as two factors 2^(n>>1) * 2^(n - n>>1) so the result is
    right in the subnormal range and overflows to inf past ln(FLT_MAX).
    """
    from mlir.dialects import arith, math

    i32 = ir.IntegerType.get_signless(32)
    xc = arith.minimumf(arith.maximumf(x, _f32(-104.0)), _f32(89.0))
    n = math.floor(math.fma(xc, _f32(1.44269504088896341), _f32(0.5)))
    r = math.fma(n, _f32(-0.693359375), xc)
    r = math.fma(n, _f32(2.12194440e-4), r)
    p = _horner(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                    4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1])
    y = arith.addf(math.fma(p, arith.mulf(r, r), r), _f32(1.0))
    ni = arith.fptosi(i32, n)
    n1 = arith.shrsi(ni, _i32(1))
    n2 = arith.subi(ni, n1)
    f32 = ir.F32Type.get()

    def pow2(k: ir.Value) -> ir.Value:
        return arith.bitcast(f32, arith.shli(arith.addi(k, _i32(127)), _i32(23)))

    # NaN needs no select: the clamps (maximumf/minimumf) propagate it into
    # r, so y is NaN and so is y times any scale the garbage n gives.
    return arith.mulf(arith.mulf(y, pow2(n1)), pow2(n2))


def _log_f32(x: ir.Value) -> ir.Value:
    """Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9 polynomial."""
    from mlir.dialects import arith, math

    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    # Subnormals: scale into the normal range first.
    is_sub = arith.cmpf(arith.CmpFPredicate.OLT, x, _f32(1.17549435e-38))
    xs = arith.select(is_sub, arith.mulf(x, _f32(8388608.0)), x)
    e_adj = arith.select(is_sub, _f32(-23.0), _f32(0.0))
    bits = arith.bitcast(i32, xs)
    e = arith.subi(arith.andi(arith.shrui(bits, _i32(23)), _i32(0xFF)), _i32(126))
    m = arith.bitcast(f32, arith.ori(arith.andi(bits, _i32(0x007FFFFF)), _i32(0x3F000000)))
    ef = arith.addf(arith.sitofp(f32, e), e_adj)
    # m in [0.5, 1): below sqrt(1/2) use 2m - 1 and e - 1, else m - 1.
    small = arith.cmpf(arith.CmpFPredicate.OLT, m, _f32(0.707106781186547524))
    t = arith.select(small, arith.addf(m, m), m)
    t = arith.subf(t, _f32(1.0))
    ef = arith.subf(ef, arith.select(small, _f32(1.0), _f32(0.0)))
    z = arith.mulf(t, t)
    p = _horner(t, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                    1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                    3.3333331174e-1])
    y = arith.mulf(arith.mulf(p, t), z)
    y = math.fma(ef, _f32(-2.12194440e-4), y)
    y = math.fma(z, _f32(-0.5), y)
    r = arith.addf(t, y)
    r = math.fma(ef, _f32(0.693359375), r)
    # Special values: log(0) = -inf, log(x < 0) = nan, log(inf) = inf, log(nan) = nan.
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, x, _f32(float("inf"))), x, r)
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, x, _f32(0.0)),
                     _f32(float("-inf")), r)
    neg_or_nan = arith.cmpf(arith.CmpFPredicate.ULT, x, _f32(0.0))
    return arith.select(neg_or_nan, _f32(float("nan")), r)


def _exp_f32_small(u: ir.Value) -> ir.Value:
    """exp(u) for u in [0, 18] (tanh's large-argument branch): no scaling tricks.

    n = round(u log2 e) is read off the bits of `u log2 e + MAGIC`
    (1.5 * 2^23 + 127: the low bits then hold n + 127, 2^n's biased
    exponent), r = u - n ln2 in two FMA steps, and e^r is Cephes' degree-7
    polynomial in Horner form. With n <= 26 the result is a normal float:
    no overflow or subnormal handling is needed, which `_exp_f32` pays for.
    """
    from mlir.dialects import arith, math

    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    magic = 12582912.0 + 127.0
    t = math.fma(u, _f32(1.44269504088896341), _f32(magic))
    n = arith.subf(t, _f32(magic))
    r = math.fma(n, _f32(-0.693359375), u)
    r = math.fma(n, _f32(2.12194440e-4), r)
    p = _horner(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                    1.6666665459e-1, 5.0000001201e-1, 1.0, 1.0])
    scale = arith.bitcast(f32, arith.shli(arith.bitcast(i32, t), _i32(23)))
    return arith.mulf(p, scale)


def _tanh_f32(x: ir.Value) -> ir.Value:
    """Cephes tanhf: x + x^3 P(x^2) for |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)).

    Chosen over the Eigen/XLA rational approximation, which measured 4.2 ulp
    (relative error, near |x| = 0.03 and 3.8) and saturates at 1 - 2^-22.
    Both branches run on every lane, so the large one is kept cheap: 2|x|
    is clamped to 18 (tanh(9) rounds to 1 in f32) and its exp needs no
    range handling (`_exp_f32_small`): 33 instead of 45 vector
    instructions per 16 lanes. tanh(x*y+z) on 4M f32, one thread, went from
    0.74 to 0.62 ns per element (jax.jit 0.57 in the same process), where
    the loop was bound by the two AVX-512 ALU ports, not by memory.
    """
    from mlir.dialects import arith, math

    ax = math.absf(x)
    z = arith.mulf(x, x)
    p = _horner(z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                    1.33314422036e-1, -3.33332819422e-1])
    small = math.fma(arith.mulf(p, z), x, x)
    e = _exp_f32_small(arith.minimumf(arith.addf(ax, ax), _f32(18.0)))
    big = arith.subf(_f32(1.0), arith.divf(_f32(2.0), arith.addf(e, _f32(1.0))))
    # NaN compares false and takes the polynomial path, which keeps it NaN
    # (the large branch's value for NaN, whatever it is, is not selected).
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OGE, ax, _f32(0.625)), big, small)
    return math.copysign(r, x)  # odd; also keeps tanh(-0) = -0


_APPROXIMATIONS: dict[str, Callable[[ir.Value], ir.Value]] = {
    "math.exp": _exp_f32,
    "math.log": _log_f32,
    "math.tanh": _tanh_f32,
}


def approximate_f32_math(op: ir.Operation) -> None:
    """Replace f32 exp/log/tanh in the body of linalg op `op` by polynomial code."""
    f32 = ir.F32Type.get()
    for body_op in list(op.regions[0].blocks[0].operations):
        body_op = body_op.operation
        fn = _APPROXIMATIONS.get(body_op.name)
        if fn is None or body_op.results[0].type != f32:
            continue
        with ir.InsertionPoint(body_op), body_op.location:
            new = fn(body_op.operands[0])
        body_op.results[0].replace_all_uses_with(new)
        body_op.erase()


# -- the pass ---------------------------------------------------------------------------------


def _candidates(module: ir.Operation) -> list[Candidate]:
    found: list[Candidate] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg."):
            c = classify(op)
            if c is not None:
                found.append(c)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


@dataclasses.dataclass(frozen=True)
class ScheduleLinalgForCpu(Pass):
    """Tile and vectorize large static linalg ops (see the module docstring)."""

    name = "autodiff-schedule-linalg-for-cpu"
    summary = "Tile, vectorize and approximate transcendentals in large linalg ops"

    threads: int = dataclasses.field(
        default=1, metadata={"help": "threads for large ops (> 1 needs OPENMP_LOWERING)"})

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            collapse_contraction_dims(module)
        candidates = _candidates(module)
        if not candidates:
            _drop_tags(module)
            return
        with module.context, module.location:
            self._schedule(module, candidates)

    def _schedule(self, module: ir.Operation, candidates: list[Candidate]) -> None:
        i64 = ir.IntegerType.get_signless(64)
        candidates = [_drop_unit_dims(c) if c.kind == "contraction" else c
                      for c in candidates]
        candidates = [p for c in candidates for p in _pack_rhs(c)]
        candidates = _mark_zero_inits(candidates)
        for i, c in enumerate(candidates):
            c.op.attributes[_TAG] = ir.IntegerAttr.get(i64, i)
            if c.kind in ("elementwise", "reduction", "outer_reduction"):
                approximate_f32_math(c.op)
        try:
            _apply_quietly(module, build_script(candidates, self.threads))
            _start_tiles_at_zero(module)
        finally:
            _drop_tags(module)


#: A zero `linalg.fill` whose only reader is a contraction scheduled without a
#: k loop outside its register tiles (see `_mark_zero_inits`).
_ZERO_INIT_TAG = "autodiff.cpu_zero_init"


def _zero_fill(v: ir.Value) -> ir.Operation | None:
    """The `linalg.fill` of +0.0 that `v` is (through one `tensor.expand_shape`), if its
    result has no other use."""
    op = defining_op(v)
    if op is not None and op.name == "tensor.expand_shape" and _one_use(op.results[0]):
        op = defining_op(op.operands[0])
    if op is None or op.name != "linalg.fill" or not _one_use(op.results[0]):
        return None
    value = defining_op(op.operands[0])
    if value is None or value.name != "arith.constant":
        return None
    attr = value.attributes["value"]
    if not isinstance(attr, ir.FloatAttr) or attr.value != 0.0 or str(attr).startswith("-"):
        return None
    return op


def _one_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _k_loop_innermost_only(c: Candidate) -> bool:
    """The schedule reduces over one k loop, inside the register tile, and
    tiles no reduction dim at the cache level: each C tile is read once, before
    any k step has written it."""
    sched = matmul_schedule()
    if c.kind == "packed_matmul":
        return _packed_k_tile(c.ranges[3]) == 0
    d = c.contraction
    if c.kind != "contraction" or d is None or len(d.k) != 1:
        return False
    return _cache_tile(c.ranges[d.k[0]], sched.cache[2], 1) == 0


def _zero_constant_as_fill(v: ir.Value) -> ir.Operation | None:
    """A splat +0.0 tensor constant used once (reverse mode's zero cotangent
    accumulators) -> the `linalg.fill` of an empty tensor it equals, built in its
    place; None if `v` is not one. Bufferized, the constant would be copied
    from a global into every call's C."""
    from mlir.dialects import arith, linalg, tensor

    op = defining_op(v)
    if op is None or op.name != "arith.constant" or not _one_use(v):
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return None
    zero = attr.get_splat_value()
    if not isinstance(zero, ir.FloatAttr) or zero.value != 0.0 or str(zero).startswith("-"):
        return None
    t = v.type
    with ir.InsertionPoint(op), op.location:
        scalar = arith.constant(t.element_type, 0.0)
        fill = linalg.fill(scalar, outs=[tensor.empty(t.shape, t.element_type)]).owner
    v.replace_all_uses_with(fill.results[0])
    op.erase()
    return fill


def _fill_after_reshape(fill: ir.Operation, reshape: ir.Operation) -> ir.Operation:
    """`reshape(fill(x))` -> `fill(reshape(x))` (canonicalization would do the
    same later, losing the fill's attributes); returns the new fill."""
    from mlir.dialects import linalg, tensor

    with ir.InsertionPoint(reshape), reshape.location:
        shape = reshape.results[0].type
        dest = tensor.expand_shape(shape, fill.operands[1], reshape.attributes["reassociation"],
                                   [], list(shape.shape))
        new = linalg.fill(fill.operands[0], outs=[dest]).owner
    reshape.results[0].replace_all_uses_with(new.results[0])
    reshape.erase()
    fill.erase()
    return new


def _mark_zero_inits(candidates: list[Candidate]) -> list[Candidate]:
    """Tag the zero fills that contractions' register tiles can start from
    instead of reading (`_start_tiles_at_zero`), and drop them from the
    candidates: they stay one `linalg.fill` until then.

    Without this, C is first written with zeros in a pass of its own (a
    `memset` of 8 MB per contraction in the GMM gradient, 9% of its time),
    then each register tile reads those zeros back.
    """
    found = []  # (fill, the contraction's init)
    for c in candidates:
        if c.kind not in ("contraction", "packed_matmul") or not _k_loop_innermost_only(c):
            continue
        init = c.op.operands[len(c.op.operands) - len(c.op.results)]
        fill = _zero_fill(init)
        if fill is None:
            fill = _zero_constant_as_fill(init)
            init = fill.results[0] if fill is not None else init
        if fill is not None:
            found.append((fill, init))
    fills = {fill for fill, _ in found}
    kept = [c for c in candidates if c.op not in fills]
    for fill, init in found:
        if fill.results[0] != init:  # a packed matmul's C view
            fill = _fill_after_reshape(fill, defining_op(init))
        fill.attributes[_ZERO_INIT_TAG] = ir.UnitAttr.get()
    return kept


def _loop_carried(v: ir.Value) -> bool:
    """`v` is a block argument of an `scf.for` or `scf.forall` body (a loop's
    iteration argument or shared output)."""
    if not isinstance(v, ir.BlockArgument):
        return False
    return v.owner.owner.name in ("scf.for", "scf.forall")


def _c_tile_reads(loop: ir.Operation) -> list[ir.Operation]:
    """The reads of loop-carried C inside `loop`, if each starts a hoisted k loop
    (its only use is an `scf.for` init); else [] (some read accumulates)."""
    reads: list[ir.Operation] = []
    ok = True

    def find(op: ir.Operation) -> ir.WalkResult:
        nonlocal ok
        if op.name != "vector.transfer_read":
            return ir.WalkResult.ADVANCE
        src = defining_op(op.operands[0])
        if src is None or src.name != "tensor.extract_slice" or not _loop_carried(
                src.operands[0]):
            return ir.WalkResult.ADVANCE  # a read of A or B
        uses = [u.owner for u in op.results[0].uses]
        if len(uses) != 1 or uses[0].name != "scf.for":
            ok = False  # a read inside the k loop: accumulating, not starting
        reads.append(op)
        return ir.WalkResult.ADVANCE

    loop.walk(find)
    return reads if ok else []


def _start_tiles_at_zero(module: ir.Operation) -> None:
    """Register tiles of C start from zero vectors instead of reading a zero-filled C.

    The tiled loops around a contraction marked by `_mark_zero_inits` carry C
    (iteration arguments, shared outputs of the thread loop); each register
    tile reads its slice of C once, before its k loop, and writes it once
    after. Those reads become zero constants and the loops start from the
    fill's uninitialized destination, so the fill disappears. All or nothing:
    if any read of C is not such a hoisted tile read (a schedule that did not
    apply), the fill stays.
    """
    from mlir.dialects import arith

    fills: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.fill" and _ZERO_INIT_TAG in op.attributes:
            fills.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for fill in fills:
        del fill.attributes[_ZERO_INIT_TAG]
        user = next(iter(fill.results[0].uses)).owner
        loop = user
        if user.name == "tensor.expand_shape":
            loop = next(iter(user.results[0].uses)).owner
        if loop.name not in ("scf.for", "scf.forall"):
            continue  # the contraction was not tiled
        reads = _c_tile_reads(loop)
        if not reads:
            continue
        for read in reads:
            with ir.InsertionPoint(read), read.location:
                zero = arith.constant(read.results[0].type, ir.DenseElementsAttr.get_splat(
                    read.results[0].type, ir.FloatAttr.get(read.results[0].type.element_type, 0.0)))
            read.results[0].replace_all_uses_with(zero)
            read.erase()
        fill.results[0].replace_all_uses_with(fill.operands[1])
        fill.erase()


def _drop_tags(module: ir.Operation) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        for tag in (_TAG, _ROW_TAG, _ZERO_INIT_TAG):
            if tag in op.attributes:
                del op.attributes[tag]
        return ir.WalkResult.ADVANCE

    module.walk(visit)


@dataclasses.dataclass(frozen=True)
class GeneralizeReductions(Pass):
    """`linalg.reduce` -> `linalg.generic` (before elementwise fusion), so the
    elementwise ops that produce a reduction's input fuse into it.

    Upstream elementwise fusion only fuses into generics: the weight decay
    sum(w * w) computed w * w into a temporary and summed it in a second
    pass. Fused, it is one pass of FMAs: 784 x 512 f32, one thread, 155 us
    -> 33 us (jax.jit 43 us).
    """

    name = "autodiff-generalize-reductions"
    summary = "Rewrite linalg.reduce as linalg.generic"

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            _apply_quietly(module, _named_sequence([
                ("%r = transform.structured.match ops{[\"linalg.reduce\"]} in %root "
                 ": (!transform.any_op) -> !transform.any_op"),
                ("%g = transform.structured.generalize %r "
                 ": (!transform.any_op) -> !transform.any_op"),
            ]))


# -- divisions by broadcast values ----------------------------------------------------------------

#: A divisor broadcast along the innermost loop is inverted once and the
#: division becomes a multiplication when that loop has at least this many
#: iterations (one vector of f32 lanes on AVX-512).
RECIPROCAL_MIN_REUSE = 16


def _broadcast_divisor_inputs(op: ir.Operation) -> list[int]:
    """Inputs of generic `op` used in its body only as divisors, broadcast along its last loop."""
    if op.name != "linalg.generic" or not _plain_maps(op):
        return []
    ranges = _loop_ranges(op)
    if not ranges or ranges[-1] < RECIPROCAL_MIN_REUSE:
        return []
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    last = len(ranges) - 1
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - len(op.results)
    found = []
    for i in range(n_in):
        t = op.operands[i].type
        if not (isinstance(t, ir.RankedTensorType) and t.has_static_shape
                and str(t.element_type) in ("f32", "f64")):
            continue
        if any(isinstance(e, ir.AffineDimExpr) and e.position == last for e in maps[i].results):
            continue
        uses = [(u.owner.operation, u.operand_number) for u in block.arguments[i].uses]
        if uses and all(o.name == "arith.divf" and n == 1 for o, n in uses):
            found.append(i)
    return found


@dataclasses.dataclass(frozen=True)
class ReciprocalOfBroadcastDivisors(Pass):
    """x / s[row] -> x * (1 / s[row]): one division per row, not per element.

    A vector division costs a full pass of the divider (AVX-512 vdivps: one
    per ~10 cycles for 16 lanes), so dividing every element of a row by its
    sum (softmax) or norm (layer norm) is bound by it: softmax's last op ran
    at 10 cycles per 16 floats while the multiply runs at memory speed. The
    reciprocal is a generic over the divisor's shape before the op (which
    joins a row group with it). The result can differ from the division by
    one rounding: at most 1 ulp more error, as numpy's and XLA's softmax
    kernels, which multiply by the reciprocal too, allow themselves.
    """

    name = "autodiff-reciprocal-of-broadcast-divisors"
    summary = "Divide by a broadcast value as a multiplication by its reciprocal"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith, linalg, tensor

        found: list[tuple[ir.Operation, list[int]]] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name.startswith("linalg."):
                inputs = _broadcast_divisor_inputs(op)
                if inputs:
                    found.append((op, inputs))
                return ir.WalkResult.SKIP
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        with module.context:
            for op, inputs in found:
                block = op.regions[0].blocks[0]
                for i in inputs:
                    v = op.operands[i]
                    t = v.type
                    with ir.InsertionPoint(op), op.location:
                        rank = t.rank
                        ident = ir.AffineMap.get_identity(rank)
                        gen = linalg.GenericOp_(
                            [v], [tensor.empty(list(t.shape), t.element_type)], [ident, ident],
                            [linalg.IteratorType.parallel] * rank)
                        with ir.InsertionPoint(gen.regions[0].blocks[0]):
                            x, _ = gen.regions[0].blocks[0].arguments
                            one = arith.constant(t.element_type, 1.0)
                            linalg.YieldOp([arith.divf(one, x)])
                    op.operands[i] = gen.results[0]
                    arg = block.arguments[i]
                    for use in list(arg.uses):
                        div = use.owner.operation
                        with ir.InsertionPoint(div), div.location:
                            mul = arith.mulf(div.operands[0], arg)
                        div.results[0].replace_all_uses_with(mul)
                        div.erase()


# -- row fusion -------------------------------------------------------------------------------

_ROW_TAG = "autodiff.cpu_row_group"


def _dim_prefix(m: ir.AffineMap, k: int) -> bool:
    """The map's first k results are the loop dims d0 .. d(k-1), in order."""
    res = list(m.results)
    return len(res) >= k and all(
        isinstance(e, ir.AffineDimExpr) and e.position == i for i, e in enumerate(res[:k]))


def _uses_dims_below(m: ir.AffineMap, k: int) -> bool:
    return any(isinstance(e, ir.AffineDimExpr) and e.position < k for e in m.results)


def _row_operands(op: ir.Operation, k: int) -> list[ir.Value] | None:
    """The tensor operands of `op` that a tile of its first k (row) loops slices
    row for row; None if `op` cannot join a row group over k row dims.

    A member computes each row from the same rows of its operands: fills,
    elementwise ops and inner reductions (no reduced dim among the first k),
    whose row loops index every result by the same leading dims. Operands
    that do not depend on the rows (a broadcast bias) are read whole by
    every tile and are not followed.
    """
    if op.name == "linalg.fill":
        shape = op.results[0].type.shape if isinstance(op.results[0].type, ir.ShapedType) else []
        return [] if len(shape) >= k else None
    c = classify(op, sized=False)
    if c is None or c.kind not in ("elementwise", "reduction") or any(d < k for d in c.reduced):
        return None
    if op.name == "linalg.reduce":
        return list(op.operands) if len(c.ranges) > k else None
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    n_in = len(op.operands) - len(op.results)
    if len(maps) != len(op.operands) or not all(_dim_prefix(m, k) for m in maps[n_in:]):
        return None
    follow = []
    for v, m in zip(op.operands, maps):
        if _dim_prefix(m, k):
            follow.append(v)
        elif _uses_dims_below(m, k):
            return None  # a partial dependence on the rows: not sliced row for row
    return follow


def _row_group(sink: ir.Operation, k: int, taken: set[ir.Operation]) -> list[ir.Operation]:
    """The ops fused into `sink`'s row loop: `sink`, then its producers in reverse order.

    A producer joins when it is a row-local op (`_row_operands`) in the
    sink's block whose every user is in the group: with a user outside, it
    would run twice (in the loop, and outside it for that user).
    """

    def producers(op: ir.Operation, within: set[ir.Operation] | None) -> list[ir.Operation]:
        found = []
        for v in _row_operands(op, k) or []:
            p = defining_op(v)
            if p is None or p in taken or p.block != sink.block:
                continue
            if within is None:
                if p.name.startswith("linalg.") and _row_operands(p, k) is not None:
                    found.append(p)
            elif p in within:
                found.append(p)
        return found

    def closure(within: set[ir.Operation] | None) -> set[ir.Operation]:
        seen, work = {sink}, [sink]
        while work:
            for p in producers(work.pop(), within):
                if p not in seen:
                    seen.add(p)
                    work.append(p)
        return seen

    group = closure(None)
    while True:
        inside = {op for op in group if op == sink or all(
            u.owner.operation in group for r in op.results for u in r.uses)}
        inside = closure(inside)
        if inside == group:
            break
        group = inside
    members = [o.operation for o in sink.block.operations if o.operation in group]
    members.reverse()
    return members


def _row_tile(rows: int, row_bytes: int) -> int:
    """Rows per tile: the largest power of two dividing `rows` within the row-tile limits."""
    tile = 1
    while (tile * 2 <= ROW_TILE_ROWS and rows % (tile * 2) == 0
           and tile * 2 * row_bytes <= ROW_TILE_BYTES):
        tile *= 2
    return tile


@dataclasses.dataclass
class RowGroup:
    """A sink and the producers fused into its loop over tiles of rows."""

    members: list[ir.Operation]  # sink first
    shape: list[int]  # the sink's result shape; its first len - 1 dims are rows
    width: int

    def script(self, first_tag: int, threads: int) -> str:
        """Tile the sink over rows (over threads first, when worth it) and fuse the rest."""
        s = _Script()
        n = len(self.shape)
        handles = [s.match(first_tag + j, attr=_ROW_TAG) for j in range(len(self.members))]
        rows = list(self.shape[:-1])
        ops = "(!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"

        def fuse_into(loop: str) -> str:
            for i in range(1, len(handles)):
                fused, new_loop = s.fresh("f"), s.fresh("in")
                s.lines.append(f"{fused}, {new_loop} = transform.structured.fuse_into_containing_op "
                               f"{handles[i]} into {loop} : {ops}")
                handles[i], loop = fused, new_loop
            return loop

        row_bytes = self.shape[-1] * self.width // 8
        if (threads > 1 and rows[0] % threads == 0
                and pymath.prod(self.shape) >= PARALLEL_MIN_ELEMENTS):
            sink, loop = s.fresh("p"), s.fresh("forall")
            s.lines.append(
                f"{sink}, {loop} = transform.structured.tile_using_forall {handles[0]} "
                f"tile_sizes {[rows[0] // threads] + [0] * (n - 1)} "
                ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
            handles[0] = sink
            fuse_into(loop)
            rows[0] //= threads
        sizes = [0 if r == 1 else 1 for r in rows[:-1]] + [_row_tile(rows[-1], row_bytes), 0]
        nloops = sum(1 for t in sizes if t)
        sink, loop = s.fresh("t"), s.fresh("rows")
        anys = ", ".join(["!transform.any_op"] * (nloops + 1))
        s.lines.append(f"{sink}, {loop}:{nloops} = transform.structured.tile_using_for "
                       f"{handles[0]} tile_sizes {sizes} : (!transform.any_op) -> ({anys})")
        # Into the innermost loop: the producers then run once per tile.
        tiles = fuse_into(f"{loop}#{nloops - 1}")
        s.lines.append(f'transform.annotate {tiles} "{ROW_LOOP_ATTR}" : !transform.any_op')
        return _named_sequence(s.lines)


#: Marks the loop over a row group's row tiles (for `PrefetchRowTiles`).
ROW_LOOP_ATTR = "autodiff.row_tiles"


def _named_sequence(lines: Sequence[str]) -> str:
    text = "\n    ".join(lines)
    return (
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main("
        "%root: !transform.any_op {transform.readonly}) {\n"
        f"    {text}\n"
        "    transform.yield\n"
        "  }\n"
        "}\n"
    )


def row_groups(module: ir.Operation) -> list[RowGroup]:
    """The row groups worth fusing in `module` (see `FuseRowGroups`)."""
    sinks: list[tuple[ir.Operation, list[int], int]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg."):
            if op.name == "linalg.generic" and len(op.results) == 1:
                c = classify(op, sized=False)
                shape = list(op.results[0].type.shape) if c is not None else []
                if (c is not None and c.kind == "elementwise" and len(shape) >= 2
                        and pymath.prod(shape) >= ROW_GROUP_MIN_ELEMENTS
                        and pymath.prod(shape[:-1]) > 1
                        and shape[-1] * c.width // 8 <= ROW_MAX_BYTES):
                    sinks.append((op, shape, c.width))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    taken: set[ir.Operation] = set()
    groups = []
    for sink, shape, width in reversed(sinks):
        if sink in taken:
            continue
        members = _row_group(sink, len(shape) - 1, taken)
        kinds = [classify(op, sized=False) for op in members if op.name != "linalg.fill"]
        # Worth a loop when a reduction's rows feed another op of the group,
        # or when elementwise fusion left several ops (values with more than
        # one consumer: forward-over-reverse writes many).
        if len(kinds) < 2 or not (
                any(c is not None and c.kind == "reduction" for c in kinds)
                or len(kinds) >= ELEMENTWISE_GROUP_MIN_OPS):
            continue
        taken.update(members)
        groups.append(RowGroup(members, shape, width))
    return groups


@register
@dataclasses.dataclass(frozen=True)
class FuseRowGroups(Pass):
    """Fuse each row group into one loop over tiles of rows (before `ScheduleLinalgForCpu`).

    A row group is an elementwise op over rows (the sink) with the ops that
    compute its operands row by row: elementwise ops, fills and reductions
    over the inner dims (`_row_group`). Softmax is the example: max over a
    row, exp(x - max), the sum of that, the division. Elementwise fusion
    cannot merge them (the exp is read by two consumers, the reductions
    change the iteration space), so unfused every op is one pass over
    memory: for softmax over 4096 x 1024 f32, six passes of 16 MB. Groups
    of elementwise ops alone (at least `ELEMENTWISE_GROUP_MIN_OPS`: values
    with several consumers, which forward-over-reverse writes) are fused the
    same way: the Hessian-vector product row (128 x 256) went from 0.45 to
    0.42 ms, one thread.

    The sink is tiled over its row dims (`scf.forall` over the threads
    first, then `scf.for` over `_row_tile` rows) and the producers are fused
    into the loops with `transform.structured.fuse_into_containing_op`
    (consumers first); CSE then merges the duplicates that fusing a value
    with two consumers creates, and `fold_tensor_empty` shrinks the
    intermediates to tiles. The members keep the `_ROW_TAG` attribute, so
    `ScheduleLinalgForCpu` vectorizes their tiles however small, on the
    loop's thread. Measured, softmax over 4096 x 1024 f32, best of 3
    processes (with `ReciprocalOfBroadcastDivisors` and 64-lane reductions):
    one thread 5.4 ms -> 3.3 ms, two threads 2.8 ms -> 2.1 ms.
    """

    name = "autodiff-fuse-row-groups"
    summary = "Fuse reductions over rows with their producers and consumers (CPU)"

    threads: int = dataclasses.field(default=1, metadata={"help": "threads for large groups"})

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            groups = row_groups(module)
            if not groups:
                return
            i64 = ir.IntegerType.get_signless(64)
            tag = 0
            scripts = []
            for g in groups:
                for j, op in enumerate(g.members):
                    op.attributes[_ROW_TAG] = ir.IntegerAttr.get(i64, tag + j)
                    if j:
                        _own_empty_inits(op)
                scripts.append(g.script(tag, self.threads))
                tag += len(g.members)
            scripts.append(_named_sequence([
                ("%funcs = transform.structured.match ops{[\"func.func\"]} in %root "
                 ": (!transform.any_op) -> !transform.any_op"),
                "transform.apply_patterns to %funcs {",
                "  transform.apply_patterns.tensor.fold_tensor_empty",
                "  transform.apply_patterns.canonicalization",
                "} : !transform.any_op",
                "transform.apply_cse to %funcs : !transform.any_op",
            ]))
            for text in scripts:
                _apply_quietly(module, text)


def _own_empty_inits(op: ir.Operation) -> None:
    """Give `op` its own `tensor.empty` for each init it shares with other ops.

    CSE merged equal empties, so an intermediate (softmax's exp) often has
    the sink's init. Fused, it would then be computed into the sink's tile
    of the result, which bufferization resolves with a copy of that tile
    per iteration; with its own empty it gets a tile-sized buffer.
    """
    n_in = len(op.operands) - len(op.results)
    for k in range(n_in, len(op.operands)):
        v = op.operands[k]
        owner = defining_op(v)
        if owner is not None and owner.name == "tensor.empty" and len(list(v.uses)) > 1:
            op.operands[k] = owner.clone(ip=ir.InsertionPoint(op)).results[0]


def _apply_quietly(module: ir.Operation, text: str) -> None:
    """Apply a transform script; a failure leaves valid (less optimized) IR.

    Every transform step leaves valid IR, so a partly applied script still
    lowers correctly. Diagnostics are kept from the pass manager;
    AUTODIFF_STRICT_SCHEDULES=1 raises them.
    """
    from mlir.dialects.transform import interpreter

    script = ir.Module.parse(text)
    messages: list[str] = []

    def swallow(diag: ir.Diagnostic) -> bool:
        messages.append(f"{diag.location}: {diag.message}")
        return True

    handler = module.context.attach_diagnostic_handler(swallow)
    try:
        interpreter.apply_named_sequence(module, script.body.operations[0], script)
    except (ValueError, RuntimeError, ir.MLIRError) as err:
        if os.environ.get("AUTODIFF_STRICT_SCHEDULES") == "1":
            raise RuntimeError(f"CPU schedule failed: {err}: {messages}") from None
    finally:
        handler.detach()

#: After bufferization: lower the vector ops the schedules produced. n-D
#: transfers are unrolled to 1-D ones; contractions become outer products
#: (FMAs); reductions reassociate (a vector of partial sums, as numpy's
#: pairwise summation also reorders).
#: Ops a schedule may vectorize (every arith op, `_VECTORIZABLE_BODY_OPS`)
#: whose LLVM lowering (convert-arith-to-llvm in MLIR 22) takes scalars and
#: 1-d vectors only: on an n-d vector they were left behind as
#: `builtin.unrealized_conversion_cast`s that LLVM translation rejects.
#: Vectorized Philox code (lower_rng.py) multiplies with `mului_extended`
#: on a 512 x 32 draw's vector<1x16xi32> tiles. test_cpu_pipeline.py lowers
#: every vectorizable op on n-d vectors.
ONE_D_VECTOR_OPS = frozenset({
    "arith.mului_extended", "arith.mulsi_extended", "arith.addui_extended",
})


def _vector_rank(t: ir.Type) -> int:
    return ir.VectorType(t).rank if isinstance(t, ir.VectorType) else 0


@dataclasses.dataclass(frozen=True)
class FlattenNdVectorOps(Pass):
    """Compute `ONE_D_VECTOR_OPS` on n-d vectors as one 1-d vector op.

    Each n-d vector operand is `vector.shape_cast` to 1-d (the same elements
    in row-major order), the op is rebuilt on the 1-d types and each n-d
    result is cast back; the op is elementwise, so this computes the same.
    Runs before convert-vector-to-llvm, which lowers the casts.
    """

    name = "autodiff-flatten-nd-vector-ops"
    summary = "Rewrite elementwise ops without an n-d vector LLVM lowering onto 1-d vectors"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import vector

        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name in ONE_D_VECTOR_OPS and any(
                    _vector_rank(v.type) > 1 for v in [*op.operands, *op.results]):
                found.append(op)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for op in found:
            def flat(t: ir.Type) -> ir.Type:
                if _vector_rank(t) < 2:
                    return t
                vt = ir.VectorType(t)
                return ir.VectorType.get([pymath.prod(vt.shape)], vt.element_type)

            with ir.InsertionPoint(op), op.location:
                operands = [vector.shape_cast(flat(v.type), v) if _vector_rank(v.type) > 1
                            else v for v in op.operands]
                attrs = {a.name: a.attr for a in op.attributes}
                new = ir.Operation.create(op.name, results=[flat(r.type) for r in op.results],
                                          operands=operands, attributes=attrs)
                for old, res in zip(op.results, new.results):
                    if _vector_rank(old.type) > 1:
                        res = vector.shape_cast(old.type, res)
                    old.replace_all_uses_with(res)
            op.erase()


LOWER_VECTORS: tuple[str | Pass, ...] = (
    "canonicalize",
    "convert-vector-to-scf{full-unroll=true}",
    FlattenNdVectorOps(),
    ("convert-vector-to-llvm{reassociate-fp-reductions vector-contract-lowering=outerproduct "
     "vector-transpose-lowering=shuffle1d}"),
)


@dataclasses.dataclass(frozen=True)
class WriteResultsInPlace(Pass):
    """Compute results directly in the caller's out-param buffers.

    After `buffer-results-to-out-params` (run without `hoist-static-allocs`,
    which crashes on some modules in MLIR 22), each result is computed into
    a fresh `memref.alloc` and copied into its out-param at the end. For a
    16 MB result that malloc + page faults + copy cost more than a vectorized
    kernel itself (tanh(x*y+z) on 4M f32: 20 ms instead of 5). When the alloc
    sits in the function's entry block, has the out-param's type, and the
    out-param is used only by that copy, the alloc is replaced by the
    out-param and the copy dropped. The out-param is caller-allocated and
    never aliases an argument, so writing it early is safe. An alloc copied
    through a `memref.collapse_shape` (a fused elementwise op that kept unit
    dims, e.g. [64, 256, 1, 1, 128] for per-sample weight gradients) is
    replaced by the out-param expanded to its shape: that 8 MB copy was
    0.3-0.5 ms of the 2.8 ms MLP per-sample-gradient call. Likewise through
    a `memref.expand_shape` (a result with unit dims computed without them,
    after `linalg-fold-unit-extent-dims`), by the out-param collapsed.
    """

    name = "autodiff-write-results-in-place"
    summary = "Replace result allocs copied into out-params by the out-params"

    def run(self, module: ir.Operation) -> None:
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name != "func.func" or not func.regions[0].blocks:
                continue
            entry = func.regions[0].blocks[0]
            ops = [o.operation for o in entry.operations]
            allocs = [o for o in ops if o.name == "memref.alloc"]
            # Only the copies buffer-results-to-out-params put before the return.
            tail = []
            for o in reversed(ops[:-1]):
                if o.name != "memref.copy":
                    break
                tail.append(o)
            for copy in tail:
                src, dst = copy.operands
                if not isinstance(dst, ir.BlockArgument) or dst.owner != entry:
                    continue
                if dst.type != src.type or len(list(dst.uses)) != 1:
                    continue
                if not isinstance(src, ir.OpResult):
                    continue
                owner = src.owner
                reshape = None
                if (owner.name in ("memref.collapse_shape", "memref.expand_shape")
                        and len(list(src.uses)) == 1
                        and isinstance(owner.operands[0], ir.OpResult)):
                    # The result was computed with other unit dims (fused
                    # elementwise ops keep theirs; folded unit dims drop the
                    # result's): view the out-param with those dims instead.
                    reshape, owner = owner, owner.operands[0].owner
                alloc = next((a for a in allocs if a == owner), None)
                if alloc is None:
                    continue
                copy.erase()
                if reshape is None:
                    src.replace_all_uses_with(dst)
                else:
                    _replace_by_reshaped(alloc, reshape, dst)
                allocs = [a for a in allocs if a is not alloc]
                alloc.erase()


def _replace_by_reshaped(alloc: ir.Operation, reshape: ir.Operation, dst: ir.Value) -> None:
    """Replace `alloc` (reshaped by `reshape` into `dst`'s shape) by `dst` reshaped back."""
    from mlir.dialects import memref

    t = alloc.results[0].type
    with ir.InsertionPoint(alloc), alloc.location:
        if reshape.name == "memref.collapse_shape":
            view = memref.expand_shape(t, dst, reshape.attributes["reassociation"], [],
                                       list(t.shape))
        else:
            view = memref.collapse_shape(t, dst, reshape.attributes["reassociation"])
    reshape.erase()
    alloc.results[0].replace_all_uses_with(view)


def openmp_lowering(threads: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(after bufferization, after LLVM lowering) pipeline pieces for `threads` > 1.

    `scf.forall` -> `scf.parallel` -> `omp.parallel` + `omp.wsloop`; the code
    then calls LLVM's OpenMP runtime (`__kmpc_*`), which the ExecutionEngine
    must load: `openmp_runtime_library()`.
    """
    if threads <= 1:
        return (), ()
    return (("scf-forall-to-parallel", f"convert-scf-to-openmp{{num-threads={threads}}}"),
            ("convert-openmp-to-llvm", "reconcile-unrealized-casts"))


def _openmp_candidates() -> list[str]:
    """The OpenMP runtimes looked for, in order: the one the package depends on
    (PyPI's `intel-openmp`, installed into the environment's lib/), then LLVM's
    libomp where a system package put it (Debian: `apt-get install libomp-dev`).
    Both implement the `__kmpc_*` entry points that MLIR's OpenMP lowering
    calls (LLVM's libomp is the open-sourced Intel runtime)."""
    return [os.path.join(sys.prefix, "lib", "libiomp5.so"),
            "/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/llvm-14/lib/libomp.so",
            "/usr/lib/libomp.so", "/usr/local/lib/libomp.so"]


def openmp_runtime_library() -> str | None:
    """Path of an OpenMP runtime with LLVM's `__kmpc_*` interface, if installed.

    Looked up at fixed paths (`_openmp_candidates`), not on the dynamic
    loader's search path: a machine without one runs single-threaded code
    only (threads > 1 is then a compile error, see `openmp_shared_libs`).
    """
    for path in _openmp_candidates():
        if os.path.exists(path):
            return path
    return None


#: Environment variable giving `jit`'s default number of CPU threads.
THREADS_ENV = "AUTODIFF_CPU_THREADS"


def cpu_threads(threads: int | None) -> int:
    """The number of threads for `--autodiff-lower-to-cpu`: `threads`, else the
    environment's `AUTODIFF_CPU_THREADS`, else 1. Raises ValueError unless >= 1."""
    source = "threads"
    if threads is None:
        raw = os.environ.get(THREADS_ENV, "1").strip() or "1"
        source = THREADS_ENV
        try:
            threads = int(raw)
        except ValueError:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}") from None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{source} must be a positive integer, got {threads!r}")
    return threads


def cpu_pipeline(threads: int = 1) -> str:
    """The `--autodiff-lower-to-cpu` pipeline text for `threads` threads."""
    return "autodiff-lower-to-cpu" if threads == 1 else f"autodiff-lower-to-cpu{{threads={threads}}}"


class OpenMPRuntimeMissing(RuntimeError):
    """Lowered code calls the OpenMP runtime, which is not installed."""


def openmp_shared_libs(module: ir.Module | ir.Operation) -> list[str]:
    """The OpenMP runtime as an ExecutionEngine shared library if lowered `module` uses it.

    Code lowered with threads > 1 contains `omp.*` ops whose LLVM
    translation calls `__kmpc_*` functions of the OpenMP runtime. Idle OpenMP
    workers spin for KMP_BLOCKTIME (default 200 ms) after each parallel
    region and take the cores from the rest of the process (numpy, the
    Python caller), so it defaults to 1 ms here: the regions of one call
    still find their workers awake.
    """
    op = module.operation if isinstance(module, ir.Module) else module
    uses_omp = False

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal uses_omp
        if o.name.startswith("omp."):
            uses_omp = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    if not uses_omp:
        return []
    path = openmp_runtime_library()
    if path is None:
        raise OpenMPRuntimeMissing(
            "code compiled with threads > 1 needs an OpenMP runtime, which is not installed "
            "(pip install intel-openmp, or Debian/Ubuntu: apt-get install libomp-dev); "
            "use threads=1")
    os.environ.setdefault("KMP_BLOCKTIME", "1")
    return [path]
