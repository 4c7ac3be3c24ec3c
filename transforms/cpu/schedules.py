"""Transform-script builders: one per schedule kind (`SCHEDULE_BUILDERS`), and `build_script`.

Tiles always divide the shape (register tiles are chosen among divisors), so
every tile is static and vectorizes without masks or peeling. With threads >
1, large ops are first distributed over the threads (`scf.forall`).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence

from mlir import ir

from .classify import Candidate
from .parameters import (
    ELEMENTWISE,
    ELEMENTWISE_WHOLE_ROW_VECTORS,
    MATMUL_K_UNROLL,
    PARALLEL_MIN_ELEMENTS,
    PARALLEL_MIN_FLOPS,
    TRANSPOSE_BLOCK,
    host_vector_bits,
    matmul_schedule,
    reduction_schedule,
)
from .script import Script, named_sequence

# -- transform script builders ----------------------------------------------------------------


def _largest_divisor(n: int, choices: Sequence[int]) -> int:
    for c in choices:
        if n % c == 0:
            return c
    return 1


def _register_tile(extent: int, preferred: int, multiple: int) -> int:
    """The register tile along one dim: the whole dim if it fits, else a divisor.

    Among divisors <= `preferred`, one that is a multiple of `multiple` (whole
    vector registers) and at least half of `preferred` wins; else the largest.
    An MLP's output layer (N = 10) runs as one (widened) 10-wide vector, not
    2-wide tiles (measurements: benchmarks/notes/cpu-schedules.md).
    """
    if extent <= preferred:
        return extent
    divisors = [d for d in range(preferred, 0, -1) if extent % d == 0]
    good = [d for d in divisors if d % multiple == 0 and 2 * d >= preferred]
    return (good or divisors)[0]


def _lane_tile(extent: int, preferred: int, lanes: int) -> int:
    """The register tile along the vector dim: `_register_tile`, except that a
    tile wider than one register must fill whole registers.

    A tile of one and a quarter registers (10 f64 on AVX-512) ran no faster
    than scalar loops (measurements: benchmarks/notes/cpu-schedules.md).
    """
    tile = _register_tile(extent, preferred, lanes // 2)
    if tile <= lanes or tile % lanes == 0:
        return tile
    return next(d for d in range(lanes, 0, -1) if extent % d == 0)


def cache_tile(extent: int, preferred: int, reg: int) -> int:
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


def _schedule_contraction(s: Script, c: Candidate, tag: int) -> None:
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
        h = s.specialize(h)  # the batch_matmul this is, see `contraction_dims`
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
    # 2T the objective was slower than on one thread.
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
    cache = [cache_tile(m, sched.cache[0], mr)] if has_m else []
    cache += [cache_tile(n, sched.cache[1], nr)]
    cache += [0] * (n_k - 1) + [cache_tile(k, sched.cache[2], 1)]
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
    (mr x 16 in two zmm per row, mr x 4 in one ymm). A rest that is not a
    power of two is split off too (190 = 184 + 6)
    (measurements: benchmarks/notes/cpu-schedules.md).
    """
    rest = n % lanes
    if nr >= lanes or (nr > 1 and not nr & (nr - 1)) or not rest or n < lanes:
        return None
    return n - rest


def packed_k_tile(k: int) -> int:
    """The cache tile of a packed matmul's K (0: the whole K in each register tile)."""
    return cache_tile(k, matmul_schedule().packed_k, 1)


def _schedule_packed_matmul(s: Script, c: Candidate, tag: int) -> None:
    """Loops (i, j1, j0, k) of `pack_rhs`: cache tiles, then mr rows x one packed
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
    cache = [cache_tile(m, sched.cache[0], mr), cache_tile(n1, sched.packed_n // nr, 1), 0,
             packed_k_tile(k)]
    if any(cache):
        h = s.tile(h, cache)
    s.vectorize.append(s.tile(h, [mr, 1, 0, 1], hoist_innermost=True, unroll_innermost=True))


def _schedule_pack(s: Script, c: Candidate, tag: int) -> None:
    """The packing copy B[k, j1, j0] -> Bp[j1, k, j0]: one contiguous nr-vector per
    (j1, k), the panels j1 split over the threads. On one thread the copy slowed 2T
    matmuls (measurements: benchmarks/notes/cpu-schedules.md)."""
    h = s.match(tag)
    h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    s.vectorize.append(s.tile(h, [1, 1, 0]))


def _split_outer(s: Script, h: str, c: Candidate, inner: int, min_elements: int) -> str:
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


def _schedule_elementwise(s: Script, c: Candidate, tag: int) -> None:
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


def _schedule_reduction(s: Script, c: Candidate, tag: int) -> None:
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = reduction_schedule().lanes[c.width]
    n = c.ranges[-1]
    v = _largest_divisor(n, (lanes, lanes // 2, lanes // 4, lanes // 8, 4, 2))
    register = ELEMENTWISE.lanes[c.width]
    if v == 1 and register < n <= ELEMENTWISE_WHOLE_ROW_VECTORS * register:
        # A short row no vector piece divides (a prime width: a 43-character
        # vocabulary's log-softmax) is one vector of its full length, as
        # elementwise rows are, not a scalar loop (5x slower at 43 f32).
        v = n
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
    sizes = [0] * (len(c.ranges) - 1) + [v]
    if reads_loop_index(c.op, {len(c.ranges) - 1}):
        # MLIR 22's partial reduction (tile_reduction_using_for) leaves
        # `linalg.index` of the tiled loop at its position within the tile:
        # the body would read 0..v-1 at every step, a silently wrong sum
        # (fixed upstream later: llvm-project pull request 188261). A plain
        # tile offsets it (one horizontal add per step instead of one per row).
        s.vectorize_late.append(s.tile(h, sizes, hoist_innermost=True))
        return
    fill, split, comb, loop = (s.fresh(x) for x in ("fill", "split", "comb", "rl"))
    s.lines.append(
        f"{fill}, {split}, {comb}, {loop} = transform.structured.tile_reduction_using_for {h} "
        f"by tile_sizes = {sizes} : (!transform.any_op) -> (!transform.any_op, "
        "!transform.any_op, !transform.any_op, !transform.any_op)"
    )
    s.vectorize_late += [fill, split, comb]
    s.hoist.append(loop)


def reads_loop_index(op: ir.Operation, dims: set[int]) -> bool:
    """The body of linalg op `op` reads `linalg.index d` for some d in `dims`."""
    for region in op.regions:
        for block in region.blocks:
            for body_op in block.operations:
                body_op = body_op.operation
                if body_op.name == "linalg.index" and \
                        ir.IntegerAttr(body_op.attributes["dim"]).value in dims:
                    return True
                if reads_loop_index(body_op, dims):
                    return True
    return False


def _schedule_outer_reduction(s: Script, c: Candidate, tag: int) -> None:
    """Loops in their natural order, the contiguous last dim by `lanes`.

    The accumulator row is re-read from L1 at each step. Putting the
    reduction loops innermost (accumulators in registers) was slower: a new
    page per step (measurements: benchmarks/notes/cpu-schedules.md).

    Vectorized after `reduction_to_contract`, as inner reductions are: a sum
    of products (GMM's sum_n g[k, n, d] (x[n, d] - mu[k, d])) became a
    vector.contract over the unit reduced dim, which lowered to one scalar
    add per lane (measurements: benchmarks/notes/cpu-schedules.md).

    Single sums keep that order. Hoisting a single sum's row (GMM's sum over
    points, [50, 1000, 20] -> [50, 20]) out of its reduced innermost loop
    was slower: as 16 + 4 pieces each piece is one chain of dependent adds.
    Several sums merged into one op (`MergeSiblingReductions`) carry one
    chain per result and are hoisted
    (measurements: benchmarks/notes/cpu-schedules.md).
    """
    h = s.match(tag, generalize=c.op.name == "linalg.reduce")
    lanes = reduction_schedule().lanes[c.width]
    v = _outer_reduction_step(c.ranges[-1], lanes)
    if s.outer_reduction_threads and len(c.ranges) > 2 and 0 not in c.reduced:
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
    return (_outer_reduction_step(n, reduction_schedule().lanes[c.width]) == n and bool(loops)
            and loops[-1] in c.reduced and len(_binary_pieces(n)) <= 3)


def _binary_pieces(n: int) -> list[int]:
    """`n` as a sum of decreasing powers of two (20 -> [16, 4])."""
    return [1 << b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]


def _outer_reduction_step(n: int, lanes: int) -> int:
    """The vector step along an outer reduction's contiguous last dim: the
    whole dim up to `lanes`, else the largest of a few divisors
    (measurements: benchmarks/notes/cpu-schedules.md)."""
    if n <= lanes:
        return n
    return _largest_divisor(n, (lanes, lanes // 2, lanes // 4, 4, 2))


def _schedule_transpose(s: Script, c: Candidate, tag: int) -> None:
    """Square blocks, transposed in registers (vector.transpose -> shuffles).

    Naive loops read one operand with a stride of a whole row
    (measurements: benchmarks/notes/cpu-schedules.md).
    """
    h = s.match(tag)
    b = TRANSPOSE_BLOCK[c.width]
    sizes = [_largest_divisor(r, (b, b // 2, b // 4, 2)) for r in c.ranges]
    s.vectorize.append(s.tile(h, sizes))


#: A convolution's tile: up to `CONV_OW_TILE` output columns (all if that
#: many) by `CONV_F_VECTORS` vectors of output features, input features by
#: `CONV_C_TILE`, and the kernel row unrolled while it and the features hold
#: at most `CONV_UNROLL` products per output (else a loop over its columns).
#: Unrolling 8 columns of 128 features (the filter cotangent's "kernel" in
#: reverse mode) took 6 s to compile; one output column per tile made that
#: convolution 3x slower than these tiles (see `_schedule_conv`).
CONV_OW_TILE = 4
CONV_F_VECTORS = 2
CONV_C_TILE = 16
CONV_UNROLL = 128


def _schedule_conv(s: Script, c: Candidate, tag: int) -> None:
    """A 2-D NHWC convolution: tiles of one output row (`ow` by a few
    elements, `f` by vector lanes) and one kernel row, decomposed to the 1-D
    convolution (`transform.structured.decompose`) that linalg's vectorizer
    turns into outer products over the input features. Left to the scalar
    loops, a 3x3 convolution of 128x10x10x16 images to 32 features took 78 ms,
    with this schedule 1.6 ms (jax: 3.8 ms; 2 shared cores)."""
    h = s.match(tag)
    n, oh, ow, f, kh, kw, ci = c.ranges
    lanes = ELEMENTWISE.lanes[c.width]
    ft = _largest_divisor(f, (CONV_F_VECTORS * lanes, lanes, lanes // 2, lanes // 4, 2))
    wt = ow if ow <= CONV_OW_TILE else _largest_divisor(
        ow, (CONV_OW_TILE, CONV_OW_TILE // 2, 2))
    ct = ci if ci <= CONV_C_TILE else _largest_divisor(
        ci, (CONV_C_TILE, CONV_C_TILE // 2, CONV_C_TILE // 4))
    kt = 0 if kw * ct <= CONV_UNROLL else 1
    _tile_decompose_vectorize(s, h, c, [1, 1, wt, ft, 1, kt, 0 if ct == ci else ct])


def _tile_decompose_vectorize(s: Script, h: str, c: Candidate, sizes: list[int]) -> None:
    """A named 2-D convolution `h`: its outer loop over the threads, tiles of
    `sizes` (0 for a unit loop), decomposed to the 1-D convolution and vectorized."""
    h = _split_outer(s, h, c, 1, PARALLEL_MIN_ELEMENTS)
    sizes = [0 if r == 1 else t for t, r in zip(sizes, c.ranges)]
    t = s.tile(h, sizes)
    d = s.fresh("dec")
    s.lines.append(f"{d} = transform.structured.decompose {t} "
                   ": (!transform.any_op) -> !transform.any_op")
    s.vectorize.append(d)


#: Depthwise windows up to this many columns are unrolled into the vector code.
DEPTHWISE_UNROLL_KW = 8


def _schedule_depthwise(s: Script, c: Candidate, tag: int) -> None:
    """A 2-D NHWC depthwise convolution: tiles of one output row (`ow` by a
    few elements, channels by vector lanes) and one kernel row, decomposed to
    the 1-D depthwise convolution that linalg's vectorizer turns into
    multiply-adds over channel vectors. Left to the loops, the kernel window
    is innermost and the channels a stride apart (scalar code)."""
    h = s.match(tag)
    n, oh, ow, ch, kh, kw = c.ranges
    lanes = ELEMENTWISE.lanes[c.width]
    ct = _largest_divisor(ch, (lanes, lanes // 2, lanes // 4, 2))
    wt = ow if ow <= CONV_OW_TILE else _largest_divisor(ow, (CONV_OW_TILE, 2))
    kt = 0 if kw <= DEPTHWISE_UNROLL_KW else 1
    _tile_decompose_vectorize(s, h, c, [1, 1, wt, ct, 1, kt])


SCHEDULE_BUILDERS: dict[str, Callable[[Script, Candidate, int], None]] = {
    "contraction": _schedule_contraction,
    "packed_matmul": _schedule_packed_matmul,
    "pack": _schedule_pack,
    "elementwise": _schedule_elementwise,
    "reduction": _schedule_reduction,
    "outer_reduction": _schedule_outer_reduction,
    "transpose": _schedule_transpose,
    "conv": _schedule_conv,
    "depthwise": _schedule_depthwise,
}


def build_script(candidates: Sequence[Candidate], threads: int = 1,
                 outer_reduction_threads: bool = True) -> str:
    """The transform module scheduling `candidates` (tagged with their index).

    With `threads` > 1, large ops are distributed over that many threads
    (`scf.forall`, later OpenMP; see openmp.py); `outer_reduction_threads`
    False keeps outer reductions on one thread.
    """
    s = Script()
    s.threads = threads
    s.outer_reduction_threads = outer_reduction_threads
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
        # lowers to per-lane code (slower; benchmarks/notes/cpu-schedules.md).
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
    return named_sequence(body)
