"""Which linalg ops the CPU schedules take, and as what kind (`classify`).

A `Candidate` is one op with its kind (contraction, elementwise, inner
reduction, outer reduction, 2-D transpose), static loop ranges and element
width. Contractions (named matmuls, batch matmuls and the `acc + a * b`
generics vmap and reverse mode write) are recognized here with the roles of
their loop dims (`ContractionDims`); their rewriting into canonical form is
in `contraction.py`.
"""

from __future__ import annotations

import dataclasses
import math as pymath
from collections.abc import Sequence

from mlir import ir

from ...dialects.vocabulary import CPU_ROW_GROUP as ROW_TAG
from .parameters import (
    ELEMENTWISE,
    MASK_ELEMENT_TYPES,
    RELAYOUT_MIN_REUSE,
    VECTOR_ELEMENT_TYPES,
    VECTORIZABLE_BODY_OPS,
    matmul_schedule,
    reduction_schedule,
)

# -- classification ---------------------------------------------------------------------------


@dataclasses.dataclass
class Candidate:
    """One linalg op the schedule will transform."""

    op: ir.Operation
    kind: str  # "contraction", "elementwise", "reduction", ..., "conv", "depthwise"
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


def _element_width(op: ir.Operation, masks: bool = False) -> int | None:
    """The common bit width of the op's element types, if all are vectorizable.

    With `masks`, inputs of `MASK_ELEMENT_TYPES` (boolean masks stored as
    bytes: `where(mask, x, y)`, a causal mask) do not count: the vectors of
    the other types set the width, and the masks are read as vectors of as
    many lanes.
    """
    types = _static_operand_types(op)
    if types is None:
        return None
    n_in = len(op.operands) - len(op.results)
    widths = set()
    for i, t in enumerate(types):
        et = _element_type(t)
        if masks and i < n_in and et is not None and str(et) in MASK_ELEMENT_TYPES:
            continue
        if et is None or str(et) not in VECTOR_ELEMENT_TYPES:
            return None
        widths.add(int(str(et)[1:]))
    return widths.pop() if len(widths) == 1 else None


def loop_ranges(op: ir.Operation) -> list[int] | None:
    """Static loop ranges of a linalg.generic from its indexing maps and operand shapes."""
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    return ranges_from_maps(maps, op)


def ranges_from_maps(maps: Sequence[ir.AffineMap], op: ir.Operation) -> list[int] | None:
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
        if not (name.startswith("arith.") or name in VECTORIZABLE_BODY_OPS):
            return False
    return True


def classify(op: ir.Operation, sized: bool = True) -> Candidate | None:
    """The schedule kind of `op`, or None to leave it to the naive lowering.

    Ops below the size thresholds are left alone, unless `sized` is False or
    the op is part of a fused row group (`FuseRowGroups`): those are small
    tiles of a large computation, and each runs once per tile.
    """
    name = op.name
    in_rows = ROW_TAG in op.attributes
    sized = sized and not in_rows
    if name in ("linalg.matmul", "linalg.batch_matmul"):
        return _contraction_candidate(op, named_maps(op))
    if name in CONV_OPS:
        return _conv_candidate(op, sized)
    if name == DEPTHWISE_OP:
        return _depthwise_candidate(op, sized)
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
    width = _element_width(op, masks=True)
    if width is None or not _body_ok(op) or not plain_maps(op):
        return None
    if name == "linalg.reduce":
        # Scheduled as the linalg.generic it generalizes to (same loop order).
        ranges = list(op.operands[0].type.shape)
        reduced_dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        iters = ["<reduction>" if i in reduced_dims else "<parallel>"
                 for i in range(len(ranges))]
    else:
        ranges = loop_ranges(op)
        iters = [str(a) for a in op.attributes["iterator_types"]]
    if ranges is None or not ranges:
        return None
    parallel = [i.endswith("<parallel>") for i in iters]
    minimum = ELEMENTWISE.min_elements if all(parallel) else reduction_schedule().min_elements
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
        # contraction) are reductions (vectorized: see
        # benchmarks/notes/cpu-schedules.md).
        maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
        if is_mul_add(op):
            contraction = _contraction_candidate(op, maps)
            if contraction is not None or maps[0] != maps[1]:
                return contraction
    if not _vectorizable_reduction(op):
        return None
    # Inner reductions: the reduced dim is the last loop. Outer loops may reduce
    # too (a sum over a whole matrix, e.g. the weight decay sum(w * w)): they
    # become scalar loops around the vectorized last one. Left to the scalar
    # loops, such a sum ran one dependent add per element
    # (measurements: benchmarks/notes/cpu-schedules.md).
    if iters[-1].endswith("<reduction>"):
        reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
        return Candidate(op, "reduction", ranges, width, reduced, in_rows=in_rows)
    # Outer reductions (e.g. column sums): the last loop is parallel.
    if iters[-1].endswith("<parallel>"):
        reduced = [i for i, it in enumerate(iters) if it.endswith("<reduction>")]
        return Candidate(op, "outer_reduction", ranges, width, reduced)
    return None


#: Named convolutions with a schedule (`schedules._schedule_conv`): the loops
#: (n, oh, ow, f, kh, kw, c) of the 2-D NHWC / HWCF convolution.
CONV_OPS = ("linalg.conv_2d_nhwc_hwcf",)


def _conv_candidate(op: ir.Operation, sized: bool) -> Candidate | None:
    """A static f32/f64 `linalg.conv_2d_nhwc_hwcf` of at least a matmul's minimum
    size (the loops: n, oh, ow, f, kh, kw, c)."""
    width = _element_width(op)
    if width is None:
        return None
    w = op.operands[1].type.shape
    out = op.results[0].type.shape
    ranges = [out[0], out[1], out[2], out[3], w[0], w[1], w[2]]
    if sized and 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
        return None
    return Candidate(op, "conv", ranges, width, reduced=[4, 5, 6])


#: The depthwise convolution with a schedule (`schedules._schedule_depthwise`):
#: loops (n, oh, ow, c, kh, kw).
DEPTHWISE_OP = "linalg.depthwise_conv_2d_nhwc_hwc"


def _depthwise_candidate(op: ir.Operation, sized: bool) -> Candidate | None:
    """A static f32/f64 `linalg.depthwise_conv_2d_nhwc_hwc` of at least a
    matmul's minimum size."""
    width = _element_width(op)
    if width is None:
        return None
    w = op.operands[1].type.shape
    out = op.results[0].type.shape
    ranges = [out[0], out[1], out[2], out[3], w[0], w[1]]
    if sized and 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
        return None
    return Candidate(op, "depthwise", ranges, width, reduced=[4, 5])


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


def plain_maps(op: ir.Operation) -> bool:
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


def named_maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The indexing maps of a named matmul/batch_matmul (user maps, e.g. transposed, or default)."""
    if "indexing_maps" in op.attributes:
        return [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    return [ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{m}>")).value
            for m in _DEFAULT_MAPS[op.name]]


def is_mul_add(op: ir.Operation) -> bool:
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


def map_dims(maps: Sequence[ir.AffineMap]) -> list[list[int]] | None:
    """The loop dim of each result of each map, or None unless all are projected permutations."""
    out = []
    for m in maps:
        ds = [e.position for e in m.results if isinstance(e, ir.AffineDimExpr)]
        if len(ds) != len(m.results) or len(set(ds)) != len(ds):
            return None  # constants or sums of dims
        out.append(ds)
    return out


def contraction_dims(dims: Sequence[Sequence[int]], ranges: Sequence[int]
                      ) -> ContractionDims | None:
    """Roles of the loop dims of C[dims[2]] += A[dims[0]] * B[dims[1]], or None.

    Unit parallel dims must be gone (`drop_unit_dims`): they would sit
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


def float_width(op: ir.Operation) -> int | None:
    """32 or 64 if every operand is an f32 (f64) tensor: the contraction schedules
    rebuild bodies with arith.mulf/addf (an i32 matmul keeps its loops)."""
    width = _element_width(op)
    types = [_element_type(v.type) for v in op.operands]
    if width is None or any(str(t) not in ("f32", "f64") for t in types):
        return None
    return width


def unit_parallel_dims(dims: Sequence[Sequence[int]], ranges: Sequence[int]) -> list[int]:
    return [d for d in dims[2] if ranges[d] == 1]


def without(dims: Sequence[Sequence[int]], ranges: Sequence[int], drop: Sequence[int]
             ) -> tuple[list[list[int]], list[int]]:
    """`dims` and `ranges` with the loop dims `drop` removed and the rest renumbered."""
    keep = [d for d in range(len(ranges)) if d not in drop]
    new = {d: i for i, d in enumerate(keep)}
    return [[new[d] for d in ds if d in new] for ds in dims], [ranges[d] for d in keep]


def _contraction_candidate(op: ir.Operation, maps: Sequence[ir.AffineMap]) -> Candidate | None:
    """A matmul-schedule candidate for a contraction of f32/f64 tensors large enough to pay.

    Its roles are those of the op without unit parallel dims, which the
    schedule drops first (`drop_unit_dims`).
    """
    width = float_width(op)
    dims = map_dims(maps) if len(maps) == 3 else None
    if width is None or dims is None:
        return None
    ranges = ranges_from_maps(maps, op)
    if ranges is None or 2 * pymath.prod(ranges) < matmul_schedule().min_flops:
        return None
    unit = unit_parallel_dims(dims, ranges)
    if any(not [d for d in ds if d not in unit] for ds in dims):
        return None  # an operand would become a scalar
    roles = contraction_dims(*without(dims, ranges, unit))
    if roles is None:
        return None
    return Candidate(op, "contraction", ranges, width, contraction=roles)


def contraction_maps(op: ir.Operation) -> list[ir.AffineMap]:
    if op.name != "linalg.generic":
        return named_maps(op)
    return [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
