"""CPU schedules for `--autodiff-lower-to-cpu`: which linalg ops get tiled and vectorized, how.

The performance part of the CPU pipeline. Before bufferization,
`ScheduleLinalgForCpu` looks at every linalg op with static shapes, sorts it
into a kind (matmul / batch_matmul, elementwise, inner reduction, outer
reduction, 2-D transpose; `classify`), picks the kind's parameters from the
tables below by shape and host vector width, and applies one
transform-dialect script (tiling, optional `scf.forall` over threads,
vectorization, accumulator hoisting) to all chosen ops at once
(`SCHEDULE_BUILDERS`, `build_script`). Ops below a size threshold keep the
plain `linalg -> loops` lowering: the test suite compiles hundreds of tiny
modules, and a schedule costs compile time that only pays off on large
kernels. Tiles always divide the shape (register tiles are chosen among
divisors), so every tile is static and vectorizes without masks or peeling.

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
lowering when `threads` > 1.

Numbers quoted below were measured on this project's 2-vCPU Intel Xeon
(AVX-512 + FMA; the probe in notes/cpu-codegen was a Zen 3 with AVX2),
single thread, with /tmp scripts timing `CompiledModule` calls. The machine
is shared and noisy: compare numbers within one line, not across lines.
"""

from __future__ import annotations

import dataclasses
import functools
import math as pymath
import os
from collections.abc import Callable, Sequence

from mlir import ir

from .passes import Pass

# -- schedule parameters (data) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatmulSchedule:
    """Tile C in (mr x nr) register blocks, K innermost with step 1.

    Each k step is a rank-1 update of an mr x nr accumulator: after
    vectorization, `vector.contract` lowers to outer products, i.e. mr
    broadcasts of A times one nr-wide row of B, fused multiply-adds into
    mr * nr / lanes vector registers that stay in registers across k
    (hoisted out of the k loop). `cache` tiles (M, N, K) first so the B panel
    stays in L1/L2.
    """

    mr: int
    nr: int
    cache: tuple[int, int, int]
    min_flops: int


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
#: Below 64^3 the schedule is not worth its compile time: a 64^3 module
#: compiled in 80 ms instead of 35 ms and ran in 22 us instead of 118 us;
#: at 32^3 the call (25 us) is all Python overhead either way.
_MATMUL_MIN_FLOPS = 2 * 64 ** 3

MATMUL_BY_VECTOR_BITS = {
    512: MatmulSchedule(mr=8, nr=32, cache=(128, 256, 128), min_flops=_MATMUL_MIN_FLOPS),
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

#: Multithreading thresholds: below these an op stays on the calling thread
#: (an OpenMP fork/join costs a few microseconds).
PARALLEL_MIN_FLOPS = 2 * 128 ** 3
PARALLEL_MIN_ELEMENTS = 1 << 16

#: Transposes: square blocks of this many elements per side.
TRANSPOSE_BLOCK = {32: 8, 64: 4}

#: Reductions: 16 f32 / 8 f64 partial sums per row.
REDUCTION = ReductionSchedule(lanes={32: 16, 64: 8}, min_elements=4096)

#: Bound on the error, in ulp of the float32 result, of each f32 approximation,
#: asserted by test/python/test_cpu_pipeline.py against numpy's float64
#: functions on every 4099th f32 bit pattern (all signs and exponents,
#: subnormals included) plus special values. Measured maxima: exp 0.95,
#: log 0.75, tanh 1.20 ulp; inf/nan/+-0/subnormal results as libm.
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
    kind: str  # "matmul", "batch_matmul", "elementwise", "reduction", "outer_reduction"
    ranges: list[int]  # static loop ranges
    width: int  # element bit width
    reduced: list[int] = dataclasses.field(default_factory=list)  # reduction loops


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


def classify(op: ir.Operation) -> Candidate | None:
    """The schedule kind of `op`, or None to leave it to the naive lowering."""
    name = op.name
    if name in ("linalg.matmul", "linalg.batch_matmul"):
        width = _element_width(op)
        if width != 32 or "indexing_maps" in op.attributes and _has_custom_maps(op):
            return None  # f64 matmuls keep the scalar loops for now; transposed maps too
        a, b = (v.type for v in op.operands[:2])
        if name == "linalg.matmul":
            (m, k), n = a.shape, b.shape[1]
            ranges = [m, n, k]
        else:
            (bt, m, k), n = a.shape, b.shape[2]
            ranges = [bt, m, n, k]
        if 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
            return None
        return Candidate(op, name.removeprefix("linalg."), ranges, width)
    if name == "linalg.fill":
        width = _element_width(op)
        shape = op.results[0].type.shape if width else None
        if not shape or pymath.prod(shape) < ELEMENTWISE.min_elements:
            return None
        return Candidate(op, "elementwise", list(shape), width)
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
    if width is None or not _body_ok(op):
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
    if pymath.prod(ranges) < minimum:
        return None
    if all(i.endswith("<parallel>") for i in iters):
        return Candidate(op, "elementwise", ranges, width)
    if len(op.results) != 1:
        return None
    if name == "linalg.generic" and len(op.operands) - len(op.results) != 1:
        # Contractions written as generics (two or more inputs, e.g. a batched
        # matvec from vmap) vectorize into shapes (vector<1x1x1x16xf32>) the
        # LLVM lowering rejects; they keep the scalar loops until they get a
        # contraction schedule.
        return None
    # Inner reductions: the reduced dim is the last loop, all others parallel.
    if iters[-1].endswith("<reduction>") and all(i.endswith("<parallel>") for i in iters[:-1]):
        return Candidate(op, "reduction", ranges, width)
    # Outer reductions (e.g. column sums): the last loop is parallel.
    if iters[-1].endswith("<parallel>"):
        reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
        return Candidate(op, "outer_reduction", ranges, width, reduced)
    return None


_DEFAULT_MAPS = {
    "linalg.matmul": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)",
                      "(d0, d1, d2) -> (d0, d1)"],
    "linalg.batch_matmul": ["(d0, d1, d2, d3) -> (d0, d1, d3)",
                            "(d0, d1, d2, d3) -> (d0, d3, d2)",
                            "(d0, d1, d2, d3) -> (d0, d1, d2)"],
}


def _has_custom_maps(op: ir.Operation) -> bool:
    """linalg.matmul with user indexing_maps (e.g. transposed operands): not scheduled yet."""
    maps = [str(ir.AffineMapAttr(m).value) for m in op.attributes["indexing_maps"]]
    return maps != _DEFAULT_MAPS[op.name]


# -- transform script builders ----------------------------------------------------------------


def _largest_divisor(n: int, choices: Sequence[int]) -> int:
    for c in choices:
        if n % c == 0:
            return c
    return 1


class _Script:
    """Accumulates transform-dialect text for one module."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.vectorize: list[str] = []
        self.vectorize_contract: list[str] = []
        self.hoist: list[str] = []  # loop handles whose accumulators go to registers
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

    def match(self, tag: int, generalize: bool = False) -> str:
        h = self.fresh("op")
        self.lines.append(
            f"{h} = transform.structured.match attributes {{{_TAG} = {tag} : i64}} in %root "
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

    def tile(self, h: str, sizes: Sequence[int], hoist_innermost: bool = False) -> str:
        """Tile `h`; with `hoist_innermost`, hoist the accumulator out of the innermost loop."""
        nloops = sum(1 for s in sizes if s)
        if nloops == 0:
            return h
        t = self.fresh("t")
        loops = self.fresh("l")
        if hoist_innermost:
            self.hoist.append(f"{loops}#{nloops - 1}" if nloops > 1 else loops)
        anys = ", ".join(["!transform.any_op"] * (nloops + 1))
        self.lines.append(
            f"{t}, {loops}:{nloops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
            if nloops > 1 else
            f"{t}, {loops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
        )
        return t


_TAG = "autodiff.cpu_schedule"


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


def _schedule_matmul(s: _Script, c: Candidate, tag: int) -> None:
    h = s.match(tag)
    batch = [1] if c.kind == "batch_matmul" else []
    m, n, k = c.ranges[-3:]
    # Register tile: divisors of the shape, so every tile is static and
    # vectorizes without masks or peeling.
    sched = matmul_schedule()
    nr = _register_tile(n, sched.nr, 8)
    mr = _register_tile(m, sched.mr, 1)
    par = _thread_split(s.threads, c, [m, n], [mr, nr], PARALLEL_MIN_FLOPS)
    if par is not None:
        # One chunk of M (or N) per thread; cache tiles then divide the chunk.
        sizes = [0] * len(c.ranges)
        chunk = (m, n)[par] // s.threads
        sizes[len(batch) + par] = chunk
        h = s.forall(h, sizes)
        m, n = (chunk, n) if par == 0 else (m, chunk)
    cache = [_cache_tile(m, sched.cache[0], mr), _cache_tile(n, sched.cache[1], nr),
             _cache_tile(k, sched.cache[2], 1)]
    if any(cache):
        h = s.tile(h, batch + cache)
        batch = [0] * len(batch)
    h = s.tile(h, batch + [mr, nr, 1], hoist_innermost=True)
    # Vectorize straight to vector.contract (not broadcast + multi_reduction,
    # which for batch_matmul folds into a contract that lowers to dot products).
    s.vectorize_contract.append(h)


def _split_outer(s: _Script, h: str, c: Candidate, inner: int, min_elements: int) -> str:
    """Distribute the outermost (parallel) loop over the threads if it splits evenly.

    A 1-D op splits into chunks that stay multiples of its vector tile `inner`.
    """
    t = s.threads
    if t <= 1 or pymath.prod(c.ranges) < min_elements:
        return h
    e = c.ranges[0]
    step = inner if len(c.ranges) == 1 else 1
    if e % t or (e // t) % step:
        return h
    return s.forall(h, [e // t] + [0] * (len(c.ranges) - 1))


def _schedule_elementwise(s: _Script, c: Candidate, tag: int) -> None:
    h = s.match(tag)
    lanes = ELEMENTWISE.lanes[c.width]
    v = _largest_divisor(c.ranges[-1], (lanes, lanes // 2, lanes // 4, 2))
    h = _split_outer(s, h, c, v, PARALLEL_MIN_ELEMENTS)
    sizes = [1] * (len(c.ranges) - 1) + [v]
    # A dim of extent 1 needs no loop.
    sizes = [0 if r == 1 else t for t, r in zip(sizes, c.ranges)]
    s.vectorize.append(s.tile(h, sizes))


def _schedule_reduction(s: _Script, c: Candidate, tag: int) -> None:
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = REDUCTION.lanes[c.width]
    v = _largest_divisor(c.ranges[-1], (lanes, lanes // 2, lanes // 4, 2))
    if len(c.ranges) > 1:
        h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    outer = [0 if r == 1 else 1 for r in c.ranges[:-1]] + [0]
    h = s.tile(h, outer)
    if v == 1:
        return
    fill, split, comb, loop = (s.fresh(x) for x in ("fill", "split", "comb", "rl"))
    sizes = [0] * (len(c.ranges) - 1) + [v]
    s.lines.append(
        f"{fill}, {split}, {comb}, {loop} = transform.structured.tile_reduction_using_for {h} "
        f"by tile_sizes = {sizes} : (!transform.any_op) -> (!transform.any_op, "
        "!transform.any_op, !transform.any_op, !transform.any_op)"
    )
    s.vectorize += [fill, split, comb]
    s.hoist.append(loop)


def _schedule_outer_reduction(s: _Script, c: Candidate, tag: int) -> None:
    """Loops in their natural order, the contiguous last dim by `lanes`.

    The accumulator row is re-read from L1 at each step. Putting the
    reduction loops innermost (accumulators in registers) was measured
    slower: column sums of 4096x1024 f32 ran at 10 GB/s that way (a new page
    per step) against 27 GB/s in the natural order.
    """
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = REDUCTION.lanes[c.width]
    v = _largest_divisor(c.ranges[-1], (lanes, lanes // 2, lanes // 4, 2))
    sizes = [0 if r == 1 else 1 for r in c.ranges[:-1]] + [v]
    s.vectorize.append(s.tile(h, sizes))


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
    "matmul": _schedule_matmul,
    "batch_matmul": _schedule_matmul,
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
        "%funcs = transform.structured.match ops{[\"func.func\"]} in %root "
        ": (!transform.any_op) -> !transform.any_op",
        "transform.apply_patterns to %funcs {",
        "  transform.apply_patterns.vector.reduction_to_contract",
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
    body += [
        # convert-vector-to-llvm does not lower vector.multi_reduction.
        "transform.apply_patterns to %funcs {",
        "  transform.apply_patterns.vector.lower_multi_reduction "
        "lowering_strategy = \"innerreduction\"",
        "  transform.apply_patterns.vector.cast_away_vector_leading_one_dim",
        "  transform.apply_patterns.canonicalization",
        "} : !transform.any_op",
    ]
    text = "\n    ".join(body)
    return (
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main("
        "%root: !transform.any_op {transform.readonly}) {\n"
        f"    {text}\n"
        "    transform.yield\n"
        "  }\n"
        "}\n"
    )


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

    out = arith.mulf(arith.mulf(y, pow2(n1)), pow2(n2))
    is_nan = arith.cmpf(arith.CmpFPredicate.UNO, x, x)
    return arith.select(is_nan, x, out)


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


def _tanh_f32(x: ir.Value) -> ir.Value:
    """Cephes tanhf: x + x^3 P(x^2) for |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)).

    Chosen over the Eigen/XLA rational approximation, which measured 4.2 ulp
    (relative error, near |x| = 0.03 and 3.8) and saturates at 1 - 2^-22.
    """
    from mlir.dialects import arith, math

    ax = math.absf(x)
    z = arith.mulf(x, x)
    p = _horner(z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                    1.33314422036e-1, -3.33332819422e-1])
    small = math.fma(arith.mulf(p, z), x, x)
    e = _exp_f32(arith.addf(ax, ax))
    big = arith.subf(_f32(1.0), arith.divf(_f32(2.0), arith.addf(e, _f32(1.0))))
    # NaN compares false and takes the polynomial path, which keeps it NaN.
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
        candidates = _candidates(module)
        if not candidates:
            return
        with module.context, module.location:
            self._schedule(module, candidates)

    def _schedule(self, module: ir.Operation, candidates: list[Candidate]) -> None:
        from mlir.dialects.transform import interpreter

        i64 = ir.IntegerType.get_signless(64)
        for i, c in enumerate(candidates):
            c.op.attributes[_TAG] = ir.IntegerAttr.get(i64, i)
            if c.kind in ("elementwise", "reduction", "outer_reduction"):
                approximate_f32_math(c.op)
        script = ir.Module.parse(build_script(candidates, self.threads))
        entry = script.body.operations[0]
        # A schedule that does not apply must not cost the user a compile
        # error: every transform step leaves valid IR, so a partly scheduled
        # module still lowers correctly (only slower). Its diagnostics are
        # kept from the pass manager; AUTODIFF_STRICT_SCHEDULES=1 raises them.
        messages: list[str] = []

        def swallow(diag: ir.Diagnostic) -> bool:
            messages.append(f"{diag.location}: {diag.message}")
            return True

        handler = module.context.attach_diagnostic_handler(swallow)
        try:
            interpreter.apply_named_sequence(module, entry, script)
        except Exception as err:  # the interpreter raises ValueError/MLIRError
            if os.environ.get("AUTODIFF_STRICT_SCHEDULES") == "1":
                raise RuntimeError(f"CPU schedule failed: {err}: {messages}") from None
        finally:
            handler.detach()
            _drop_tags(module)


def _drop_tags(module: ir.Operation) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        if _TAG in op.attributes:
            del op.attributes[_TAG]
        return ir.WalkResult.ADVANCE

    module.walk(visit)


#: After bufferization: lower the vector ops the schedules produced. n-D
#: transfers are unrolled to 1-D ones; contractions become outer products
#: (FMAs); reductions reassociate (a vector of partial sums, as numpy's
#: pairwise summation also reorders).
LOWER_VECTORS: tuple[str, ...] = (
    "canonicalize",
    "convert-vector-to-scf{full-unroll=true}",
    "convert-vector-to-llvm{reassociate-fp-reductions vector-contract-lowering=outerproduct "
    "vector-transpose-lowering=shuffle1d}",
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
    never aliases an argument, so writing it early is safe.
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
                owner = src.owner
                alloc = next((a for a in allocs if a == owner), None)
                if alloc is None:
                    continue
                copy.erase()
                src.replace_all_uses_with(dst)
                allocs = [a for a in allocs if a is not alloc]
                alloc.erase()


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


def openmp_runtime_library() -> str | None:
    """Path of LLVM's OpenMP runtime (Debian: `apt-get install libomp-dev`), if installed."""
    for path in ("/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/llvm-14/lib/libomp.so",
                 "/usr/lib/libomp.so", "/usr/local/lib/libomp.so"):
        if os.path.exists(path):
            return path
    return None
