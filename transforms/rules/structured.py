"""Helpers of the rules for structured ops (linalg, and tensor ops built from generics).

Indexing maps and iterator types of any linalg op (`structure`, named ops
included), building a `linalg.generic` (`make_generic`), the sums that
reverse-mode broadcasts need (`sum_to`, `sum_all`), transposes, and the
static slices and reshapes that the indexing-map rules emit. Shared by the
jvp, vjp and batching rules of `linalg.py`, `linalg_generic.py`,
`linalg_reductions.py`, `tensor.py` and `scf*.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import Builder, clone_remapped, element_type, op_name

PAR = "parallel"
RED = "reduction"


def value_of(x) -> ir.Value:
    """The value of a linalg helper's result (some helpers return the op)."""
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, ir.OpResultList):
        return x[0]
    return x.results[0]


def iterator_attr(kind: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#linalg.iterator_type<{kind}>")


def iterators(op: ir.Operation) -> list[str]:
    return ["reduction" if "reduction" in str(a) else "parallel"
            for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def indexing_maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def map_dims(m: ir.AffineMap) -> list[int] | None:
    """The loop dims of a projected permutation map, or None if it is not one."""
    out = []
    for e in m.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        out.append(e.position)
    return out


def num_inputs(op: ir.Operation) -> int:
    """The number of inputs (`ins`) of a linalg op."""
    if "operandSegmentSizes" in op.attributes:
        seg = op.attributes["operandSegmentSizes"]
        return list(ir.DenseI32ArrayAttr(seg))[0]
    n = len(op.operands)
    return n // 2 if op_name(op) == "linalg.reduce" else n - 1


def attrs_of(op: ir.Operation) -> dict[str, ir.Attribute]:
    """`op`'s attributes as a dict (to re-create it with some of them changed)."""
    return {k: op.attributes[k] for k in op.attributes}


def make_generic(b: Builder, inputs: Sequence[ir.Value], inits: Sequence[ir.Value],
                 maps: Sequence[ir.AffineMap], iters: Sequence[str],
                 body: Callable[[Builder, list[ir.Value]], list[ir.Value]] | None = None
                 ) -> ir.Operation:
    """Build a linalg.generic; `body(bb, block_args)` returns the yielded values."""
    gen = linalg.GenericOp(
        [v.type for v in inits], list(inputs), list(inits),
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([iterator_attr(k) for k in iters]),
        loc=b.loc, ip=b.ip,
    )
    types = [element_type(v.type) for v in [*inputs, *inits]]
    block = gen.regions[0].blocks.append(*types)
    if body is not None:
        bb = Builder(ir.InsertionPoint(block), b.loc, b.ad)
        linalg.YieldOp(body(bb, list(block.arguments)), loc=b.loc, ip=bb.ip)
    return gen.operation


def identity_map(n: int) -> ir.AffineMap:
    return ir.AffineMap.get_identity(n)


def projection(n: int, dims: Sequence[int]) -> ir.AffineMap:
    return ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in dims])


def sum_to(b: Builder, x: ir.Value, keep: Sequence[int], like: ir.Value | None = None
           ) -> ir.Value:
    """Sum tensor `x` over every dim not in `keep` (a generic reduction)."""
    t = x.type
    n = t.rank
    shape = [t.shape[d] for d in keep]
    out_t = ir.RankedTensorType.get(shape, t.element_type)
    if like is not None:
        init = b.zeros_like(like)
    else:
        init = b.constant(out_t, 0.0)
    iters = [PAR if d in keep else RED for d in range(n)]
    gen = make_generic(b, [x], [init], [identity_map(n), projection(n, keep)], iters,
                       lambda bb, a: [bb.addf(a[1], a[0])])
    return gen.result


def sum_all(b: Builder, x: ir.Value) -> ir.Value:
    """The sum of every element of tensor `x`, as a scalar."""
    s = sum_to(b, x, [])
    return b.create("tensor.extract", [s], [x.type.element_type]).result


def transpose(b: Builder, x: ir.Value, perm: Sequence[int]) -> ir.Value:
    t = x.type
    shape = [t.shape[p] for p in perm]
    init = b.empty(ir.RankedTensorType.get(shape, t.element_type))
    with b.loc, b.ip:
        return value_of(linalg.transpose(x, outs=[init], permutation=list(perm)))


def implicit_structure(op: ir.Operation) -> tuple[list[ir.AffineMap], list[str]]:
    """Indexing maps and iterator types of linalg.reduce, linalg.map and the
    elementwise named ops (their maps are implied by their operands)."""
    name = op_name(op)
    operands = list(op.operands)
    if name == "linalg.reduce":
        rank = operands[0].type.rank
        red = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        n_in = len(operands) // 2
        keep = [d for d in range(rank) if d not in red]
        maps = [identity_map(rank)] * n_in + [projection(rank, keep)] * n_in
        return maps, [RED if d in red else PAR for d in range(rank)]
    if "indexing_maps" in op.attributes:
        maps = indexing_maps(op)
        return maps, [PAR] * maps[0].n_dims
    rank = operands[-1].type.rank
    return [identity_map(rank)] * len(operands), [PAR] * rank


def structure(op: ir.Operation) -> tuple[list[ir.AffineMap], list[str]]:
    """Indexing maps and iterator types of a linalg op (named or generic)."""
    name = op_name(op)
    if name == "linalg.generic":
        return indexing_maps(op), iterators(op)
    if "indexing_maps" in op.attributes:
        maps = indexing_maps(op)
        out_dims = {e.position for e in maps[-1].results if isinstance(e, ir.AffineDimExpr)}
        return maps, [PAR if d in out_dims else RED for d in range(maps[0].n_dims)]
    ops = list(op.operands)
    if name == "linalg.matmul":
        return ([projection(3, [0, 2]), projection(3, [2, 1]), projection(3, [0, 1])],
                [PAR, PAR, RED])
    if name == "linalg.batch_matmul":
        return ([projection(4, [0, 1, 3]), projection(4, [0, 3, 2]), projection(4, [0, 1, 2])],
                [PAR, PAR, PAR, RED])
    if name == "linalg.matvec":
        return [projection(2, [0, 1]), projection(2, [1]), projection(2, [0])], [PAR, RED]
    if name == "linalg.vecmat":
        return [projection(2, [1]), projection(2, [1, 0]), projection(2, [0])], [PAR, RED]
    if name == "linalg.dot":
        return [projection(1, [0]), projection(1, [0]), projection(1, [])], [RED]
    if name == "linalg.fill":
        r = ops[1].type.rank
        return [projection(r, []), identity_map(r)], [PAR] * r
    if name == "linalg.copy":
        r = ops[1].type.rank
        return [identity_map(r), identity_map(r)], [PAR] * r
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        r = len(perm)
        return [identity_map(r), projection(r, perm)], [PAR] * r
    if name == "linalg.broadcast":
        dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        r = ops[1].type.rank
        return [projection(r, [d for d in range(r) if d not in dims]), identity_map(r)], [PAR] * r
    return implicit_structure(op)


# -- loops of a generic, its body ------------------------------------------------


def loop_sizes(b: Builder, op: ir.Operation) -> list[int]:
    """The static trip count of each loop of a generic (from an operand dim
    its map reads as a plain loop dim)."""
    maps = indexing_maps(op)
    operands = list(op.operands)
    sizes: list[int | None] = [None] * maps[0].n_dims
    for v, m in zip(operands, maps):
        for pos, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr) and sizes[e.position] is None:
                t = v.type
                if isinstance(t, ir.ShapedType) and not t.is_dynamic_dim(pos):
                    sizes[e.position] = t.shape[pos]
    if any(z is None for z in sizes):
        raise b.ad.fail(op, "reverse mode of this 'linalg.generic' needs static loop sizes "
                            "that an operand reads as a plain loop dim")
    return sizes  # type: ignore[return-value]


def clone_body(op: ir.Operation, ip: ir.InsertionPoint, vmap: dict, skip) -> list:
    """Clone `op`'s body ops but the terminator and those in `skip` at `ip`."""
    block = op.regions[0].blocks[0]
    clones = []
    for o in list(block.operations)[:-1]:
        if o.operation in skip:
            continue
        clones.append(clone_remapped(o, ip, vmap))
    return clones


# -- affine expressions, static slices and reshapes -------------------------------


def linear_form(e: ir.AffineExpr) -> tuple[dict[int, int], int] | None:
    """`e` as ({dim: coefficient}, constant), None if not linear in the dims."""
    if isinstance(e, ir.AffineDimExpr):
        return {e.position: 1}, 0
    if isinstance(e, ir.AffineConstantExpr):
        return {}, e.value
    if isinstance(e, ir.AffineAddExpr):
        lhs, rhs = linear_form(e.lhs), linear_form(e.rhs)
        if lhs is None or rhs is None:
            return None
        co = dict(lhs[0])
        for d, c in rhs[0].items():
            co[d] = co.get(d, 0) + c
        return {d: c for d, c in co.items() if c}, lhs[1] + rhs[1]
    if isinstance(e, ir.AffineMulExpr):
        lhs, rhs = linear_form(e.lhs), linear_form(e.rhs)
        if lhs is None or rhs is None:
            return None
        if not lhs[0]:
            lhs, rhs = rhs, lhs
        if rhs[0]:
            return None
        k = rhs[1]
        return {d: c * k for d, c in lhs[0].items() if c * k}, lhs[1] * k
    return None


def static_slice_attrs(offsets, sizes, strides, n_src: int) -> dict:
    return {
        "static_offsets": ir.DenseI64ArrayAttr.get(list(offsets)),
        "static_sizes": ir.DenseI64ArrayAttr.get(list(sizes)),
        "static_strides": ir.DenseI64ArrayAttr.get(list(strides)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1] * n_src + [0, 0, 0]),
    }


def extract_slice(b: Builder, x: ir.Value, offsets, sizes, strides) -> ir.Value:
    t = ir.RankedTensorType.get(list(sizes), element_type(x.type))
    return b.create("tensor.extract_slice", [x], [t],
                    static_slice_attrs(offsets, sizes, strides, 1)).result


def insert_slice(b: Builder, src: ir.Value, dest: ir.Value, offsets, strides) -> ir.Value:
    return b.create("tensor.insert_slice", [src, dest], [dest.type],
                    static_slice_attrs(offsets, list(src.type.shape), strides, 2)).result


def reassociation(groups: Sequence[Sequence[int]]) -> ir.Attribute:
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), i) for i in g]) for g in groups])


def collapse(b: Builder, x: ir.Value, groups, shape) -> ir.Value:
    t = ir.RankedTensorType.get(list(shape), element_type(x.type))
    if list(shape) == list(x.type.shape):
        return x
    return b.create("tensor.collapse_shape", [x], [t],
                    {"reassociation": reassociation(groups)}).result


def expand(b: Builder, x: ir.Value, groups, shape) -> ir.Value:
    t = ir.RankedTensorType.get(list(shape), element_type(x.type))
    if list(shape) == list(x.type.shape):
        return x
    return b.create("tensor.expand_shape", [x], [t], {
        "reassociation": reassociation(groups),
        "static_output_shape": ir.DenseI64ArrayAttr.get(list(shape))}).result
