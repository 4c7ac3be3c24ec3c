"""Contractions rewritten into the canonical forms the matmul schedule handles.

`collapse_contraction_dims` merges runs of loop dims that every operand
indexes together; `drop_unit_dims` removes unit parallel dims, transposes a
vector operand whose lanes are strided and orders the inputs lhs/rhs;
`pack_rhs` makes large matmuls read B as contiguous panels.
`OuterProductsToElementwise` turns contractions over unit reduction dims
(outer products) into elementwise generics before fusion.
"""

from __future__ import annotations

import dataclasses
import itertools
import math as pymath
from collections.abc import Sequence

from mlir import ir

from ..passes import Pass
from .classify import (
    Candidate,
    contraction_dims,
    contraction_maps,
    float_width,
    is_mul_add,
    map_dims,
    ranges_from_maps,
    unit_parallel_dims,
    without,
)
from .parameters import PACK_MIN_FLOPS, matmul_schedule


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

    new_dims, new_ranges = without(dims, ranges, drop)
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


def _mul_add_generics(module: ir.Operation) -> list[ir.Operation]:
    """The `linalg.generic` contractions `acc + a * b` of `module`, in walk order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.generic" and len(op.operands) == 3 and is_mul_add(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def collapse_contraction_dims(module: ir.Operation) -> None:
    """Contractions `acc + a * b` whose loop dims come in runs (`_dim_groups`)
    become contractions over one loop per run, on reshaped (collapse_shape)
    operands: ADBench GMM's `einsum("ijp,kp->kij")` is a plain matmul
    (50 x 190 x 400) once i and j are one dim, which the matmul schedule
    handles; its reverse (i, j both reduced) likewise
    (measurements: benchmarks/notes/cpu-schedules.md)."""
    from mlir.dialects import tensor

    for op in _mul_add_generics(module):
        maps = contraction_maps(op)
        dims = map_dims(maps)
        if dims is None or float_width(op) is None or ranges_from_maps(maps, op) is None:
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


def _permuted_copy(v: ir.Value, perm: Sequence[int]) -> ir.Value:
    """`v` with its dims permuted (result dim p is `v`'s dim perm[p]) as an
    elementwise `linalg.generic` copy (the elementwise schedule vectorizes it;
    `linalg.transpose` keeps scalar loops beyond 2-D)."""
    from mlir.dialects import linalg, tensor

    t = v.type
    n = t.rank
    empty = tensor.empty([t.shape[q] for q in perm], t.element_type)
    in_map = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(list(perm).index(q))
                                     for q in range(n)])
    gen = linalg.GenericOp_([v], [empty], [in_map, ir.AffineMap.get_identity(n)],
                            [linalg.IteratorType.parallel] * n)
    with ir.InsertionPoint(gen.regions[0].blocks[0]):
        linalg.YieldOp([gen.regions[0].blocks[0].arguments[0]])
    return gen.results[0]


def _permuted_init(v: ir.Value, perm: Sequence[int]) -> ir.Value:
    """The accumulator `v` permuted: a fresh fill where `v` is a fill used once."""
    from mlir.dialects import linalg, tensor

    owner = v.owner
    if (isinstance(owner, ir.OpView) and owner.operation.name == "linalg.fill"
            and len(list(v.uses)) == 1):
        t = v.type
        empty = tensor.empty([t.shape[q] for q in perm], t.element_type)
        return linalg.fill(owner.operation.operands[0], outs=[empty])
    return _permuted_copy(v, perm)


def _batch_merged_roles(dims: Sequence[Sequence[int]], ranges: Sequence[int], nb: int):
    """The schedule's roles of contraction `dims` (batch dims leading, the
    first `nb` of each) once the batch dims are one loop (and unit dims gone)."""
    batch = list(dims[2][:nb])
    rest = [d for d in range(len(ranges)) if d not in batch]
    new = {d: i + 1 for i, d in enumerate(rest)}
    merged = [[0] + [new[d] for d in ds[nb:]] for ds in dims]
    mranges = [pymath.prod(ranges[d] for d in batch)] + [ranges[d] for d in rest]
    unit = unit_parallel_dims(merged, mranges)
    if any(not [d for d in ds if d not in unit] for ds in merged):
        return None
    return contraction_dims(*without(merged, mranges, unit))


def leading_batch_dims(module: ir.Operation) -> None:
    """Contractions `acc + a * b` with several batch dims (dims of both inputs
    and the result) that do not lead every operand in one order get them
    there through permuted copies (the result computed permuted and copied
    back): `collapse_contraction_dims` then makes them one batch loop, a
    batch matmul the schedule handles. Attention's
    `einsum("bthd,bshd->bhts")` (batch b and h, h between t and d) and
    `einsum("bhts,bshd->bthd")` and the contractions of their derivatives
    ran as scalar loops; jax's dot_general transposes its operands likewise.
    Only where the flops pay for the copies (`matmul_schedule().min_flops`)
    and the merged form is a schedulable contraction."""
    from mlir.dialects import arith, linalg

    for op in _mul_add_generics(module):
        maps = contraction_maps(op)
        dims = map_dims(maps)
        ranges = ranges_from_maps(maps, op) if dims is not None else None
        if dims is None or ranges is None or float_width(op) is None:
            continue
        batch = [d for d in dims[2] if d in dims[0] and d in dims[1]]
        nb = len(batch)
        if nb < 2 or all(list(ds[:nb]) == batch for ds in dims):
            continue
        if 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
            continue
        new_dims = [batch + [d for d in ds if d not in batch] for ds in dims]
        if _batch_merged_roles(new_dims, ranges, nb) is None:
            continue
        n = len(ranges)
        with ir.InsertionPoint(op), op.location:
            vals = []
            for i, (v, ds, nds) in enumerate(zip(op.operands, dims, new_dims)):
                perm = [list(ds).index(d) for d in nds]
                if perm == list(range(len(ds))):
                    vals.append(v)
                else:
                    vals.append((_permuted_init if i == 2 else _permuted_copy)(v, perm))
            new_maps = [ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in ds])
                        for ds in new_dims]
            iters = [linalg.IteratorType.parallel if d in dims[2]
                     else linalg.IteratorType.reduction for d in range(n)]
            gen = linalg.GenericOp_(vals[:2], [vals[2]], new_maps, iters)
            with ir.InsertionPoint(gen.regions[0].blocks[0]):
                p, q, acc = gen.regions[0].blocks[0].arguments
                linalg.YieldOp([arith.addf(acc, arith.mulf(p, q))])
            res = gen.results[0]
            if new_dims[2] != list(dims[2]):
                res = _permuted_copy(res, [new_dims[2].index(d) for d in dims[2]])
        op.results[0].replace_all_uses_with(res)
        op.erase()


def drop_unit_dims(c: Candidate) -> Candidate:
    """Rewrite a contraction with unit parallel dims (vmap of a matvec gives
    [B, 1, N] x [K, N]) or a strided vector operand as a generic without them.

    Vectorized with the unit dims, the register tile's vector.contract
    carried them between its vector dims; the vector patterns then turned
    it into transposes and dot products (or, before this schedule existed,
    vectors LLVM translation rejected). The new op is a plain generic
    (`acc + a * b`) between reshapes, with the vector operand transposed
    when `ContractionDims.relayout` says so.
    """
    dims = map_dims(contraction_maps(c.op))
    assert dims is not None and c.contraction is not None
    unit = unit_parallel_dims(dims, c.ranges)
    relayout, swap = c.contraction.relayout, c.contraction.swap
    if not unit and relayout is None and not swap:
        return c
    gen = _rewrite_without(c.op, dims, c.ranges, unit, relayout, swap)
    new_dims, new_ranges = without(dims, c.ranges, unit)
    if relayout is not None:
        i, perm = relayout
        new_dims[i] = [new_dims[i][p] for p in perm]
    if swap:
        new_dims[0], new_dims[1] = new_dims[1], new_dims[0]
    roles = contraction_dims(new_dims, new_ranges)
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
        for op in _contraction_candidates(module):
            _outer_product_to_elementwise(op)


def _contraction_candidates(module: ir.Operation) -> list[ir.Operation]:
    """The linalg.matmul, batch_matmul and generic ops of `module`, in walk order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("linalg.matmul", "linalg.batch_matmul", "linalg.generic"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def _outer_product_to_elementwise(op: ir.Operation) -> None:
    if float_width(op) is None or len(op.results) != 1:
        return
    if op.name == "linalg.generic" and (len(op.operands) != 3 or not is_mul_add(op)):
        return
    maps = contraction_maps(op)
    dims = map_dims(maps) if len(maps) == 3 else None
    ranges = ranges_from_maps(maps, op) if dims else None
    if not dims or not ranges:
        return
    k = [d for d in range(len(ranges)) if d not in dims[2]]
    if not k or any(ranges[d] != 1 for d in k):
        return
    with op.context, op.location:
        _rewrite_without(op, dims, ranges, k)


def pack_rhs(c: Candidate) -> list[Candidate]:
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
    dims = map_dims(contraction_maps(c.op))
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


def _broadcast_source(v: ir.Value) -> tuple[ir.Value, list[int]] | None:
    """If `v` is a `linalg.broadcast` result: its input and the dims of `v`
    that the input keeps (in order)."""
    owner = v.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "linalg.broadcast":
        return None
    op = owner.operation
    added = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    rank = ir.RankedTensorType(v.type).rank
    return op.operands[0], [d for d in range(rank) if d not in added]


def _read_broadcasts_in_place(op: ir.Operation) -> None:
    """Rewrite contraction `op` (matmul, batch_matmul or a generic `acc + a * b`)
    with an input that is a `linalg.broadcast` to read the broadcast's input
    through a map without the broadcast dims."""
    if len(op.results) != 1 or float_width(op) is None:
        return
    if op.name == "linalg.generic" and (len(op.operands) != 3 or not is_mul_add(op)):
        return
    maps = contraction_maps(op)
    dims = map_dims(maps) if len(maps) == 3 else None
    if dims is None:
        return
    ins = list(op.operands[:2])
    broadcasts = []
    for i in range(2):
        src = _broadcast_source(ins[i])
        if src is None:
            continue
        broadcasts.append(ins[i].owner.operation)
        ins[i], kept = src
        dims[i] = [dims[i][p] for p in kept]
    if not broadcasts:
        return
    with op.context, op.location, ir.InsertionPoint(op):
        _replace_by_mul_add(op, ins[0], ins[1], op.operands[2], dims, maps[0].n_dims,
                            [[p] for p in range(len(dims[2]))])
    for bc in broadcasts:
        if not list(bc.results[0].uses):
            bc.erase()


@dataclasses.dataclass(frozen=True)
class ReadBroadcastsInContractions(Pass):
    """Contractions read a broadcast operand in place instead of its broadcast copy.

    `x @ w` for a batch of rows x [b, m, k] and one matrix w [k, n] is traced
    as numpy broadcasts it: a batch_matmul of x and w copied b times (a
    transformer's `x @ qkv` with x [16, 32, 64]: 16 copies of w, written and
    read again per call). Read through a map without the batch dim, w is a
    plain matrix, and `collapse_contraction_dims` then makes the batch and
    row loops one: a [b * m, k] x [k, n] matmul. The unused broadcast goes
    away in canonicalization.
    """

    name = "autodiff-read-broadcasts-in-contractions"
    summary = "Contractions read broadcast operands through maps instead of their copies"

    def run(self, module: ir.Operation) -> None:
        for op in _contraction_candidates(module):
            _read_broadcasts_in_place(op)
