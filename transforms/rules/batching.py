"""Batching rules (vmap), keyed by upstream op name, JAX style.

A batching rule is `rule(b, op, vals, batched) -> [(value, batched), ...]`:
`vals` are the op's operands in the batched function, `batched[i]` tells
whether operand i carries the batch dimension. Inside a batched function
every batched value has the batch dimension at axis 0 (`--autodiff-vmap`
moves axes at the boundary), so a batched `f32` is a `tensor<Bxf32>` and a
batched `tensor<3x4xf32>` a `tensor<Bx3x4xf32>`; unbatched values keep their
type. A rule returns, per result, the new value and whether it is batched.

`b` is a `BatchBuilder` (an `ad_support.Builder` that also knows the batch
size) positioned where the batched code goes; `b.bt` is the pass's trace,
which region rules use to batch nested blocks (`batch_block`), to clone a
body lane by lane (`lane_body`), to analyse which values depend on batched
ones (`taint`) and to batch callees (`batched_callee`).

Combinators keep most rules to one line:

* `defvectorized(name)`: an elementwise op (arith/math on scalars or tensors).
  With every operand batched the op is re-created on the batched types; with
  a mix, it becomes a `linalg.generic` with one more parallel dimension in
  which unbatched operands simply do not index the batch dimension, so no
  broadcast is materialized.
* `defstructured(name)`: a linalg op with indexing maps; the batch dimension
  becomes an extra parallel loop of the equivalent `linalg.generic`.

Sections below: arith/math, linalg, tensor, scf, func, autodiff.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mlir import ir
from mlir.dialects import linalg, scf

from ..ad_support import Builder, element_type, is_tensor, op_name
from .linalg import PAR, RED, _identity, _iters, _maps, _n_ins, _proj, _structure, _v, make_generic

Batched = tuple[ir.Value, bool]
BatchRule = Callable[[Any, ir.Operation, list[ir.Value], list[bool]], list[Batched]]

BATCH_RULES: dict[str, BatchRule] = {}


def defrule(name: str, rule: BatchRule) -> None:
    BATCH_RULES[name] = rule


def rule_for(name: str) -> BatchRule | None:
    """The rule of `name`; arith/math ops without their own rule are elementwise."""
    rule = BATCH_RULES.get(name)
    if rule is None and name.split(".", 1)[0] in ("arith", "math"):
        return _elementwise_rule
    return rule


# ----------------------------------------------------------------------------
# The builder
# ----------------------------------------------------------------------------


def batch_type(t: ir.Type, size: int) -> ir.RankedTensorType:
    """`t` with a leading batch dimension of `size` (scalars become 1-d tensors)."""
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get([size, *t.shape], t.element_type)
    return ir.RankedTensorType.get([size], t)


def unbatch_type(t: ir.RankedTensorType, was_tensor: bool) -> ir.Type:
    if not was_tensor:
        return t.element_type
    return ir.RankedTensorType.get(list(t.shape)[1:], t.element_type)


def dim(i: int) -> ir.AffineExpr:
    return ir.AffineDimExpr.get(i)


def shift_map(m: ir.AffineMap, batched: bool) -> ir.AffineMap:
    """`m` over one more leading loop d0 (old d_i become d_{i+1}); batched maps index d0."""
    exprs = [e.shift_dims(m.n_dims, 1) for e in m.results]
    return ir.AffineMap.get(m.n_dims + 1, 0, ([dim(0)] if batched else []) + exprs)


class BatchBuilder(Builder):
    """A `Builder` that knows the batch size and the batching trace `bt`."""

    def __init__(self, ip: ir.InsertionPoint, loc: ir.Location, bt: Any,
                 op: ir.Operation | None = None):
        super().__init__(ip, loc, bt, op)
        self.bt = bt
        self.size: int = bt.size

    def btype(self, t: ir.Type) -> ir.RankedTensorType:
        return batch_type(t, self.size)

    def fail(self, op: Any, msg: str) -> Exception:
        return self.bt.fail(op, msg)

    def static(self, t: ir.Type, what: str) -> None:
        if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
            raise self.fail(self.op, f"cannot batch {what} of dynamic type {t} "
                                     "(batching needs static shapes)")

    def bcast(self, v: ir.Value) -> ir.Value:
        """An unbatched value repeated along a new leading batch dimension.

        Only used where a value must carry the batch dimension (a loop carry,
        a destination written per lane); empty/fill/splat constants are
        re-created batched instead of broadcast.
        """
        t = self.btype(v.type)
        # Dynamic dims (a while loop's tape in its backward code) keep their sizes.
        dyn = self.dims(v) if is_tensor(v.type) else []
        d = v.owner
        if not isinstance(d, ir.Block):
            name = op_name(d)
            if name == "tensor.empty":
                return self.empty(t, list(d.operands))
            if name == "linalg.fill":
                return self.fill(self.empty(t, dyn), d.operands[0])
            if name == "arith.constant":
                attr = d.attributes["value"]
                if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
                    splat = ir.DenseElementsAttr.get_splat(t, attr.get_splat_value())
                    return self.create("arith.constant", [], [t], {"value": splat}).result
        if not is_tensor(v.type):
            return self.fill(self.empty(t), v)
        with self.loc, self.ip:
            return _v(linalg.broadcast(v, outs=[self.empty(t, dyn)], dimensions=[0]))

    def ensure_batched(self, v: ir.Value, batched: bool) -> ir.Value:
        """`v` if it is batched, else `bcast(v)`."""
        return v if batched else self.bcast(v)



def loop_index(b: Builder, d: int) -> ir.Value:
    """`linalg.index d` at `b` (inside a linalg body; d = 0 is the lane)."""
    return b.create("linalg.index", [], [ir.IndexType.get()],
                    {"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)}).result


def _attrs(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {k: op.attributes[k] for k in op.attributes}


def _orig_rank(v: ir.Value, batched: bool) -> int:
    return v.type.rank - (1 if batched else 0) if is_tensor(v.type) else 0


# ----------------------------------------------------------------------------
# Elementwise ops: arith, math (scalars at function level, or tensors)
# ----------------------------------------------------------------------------


def elementwise(b: BatchBuilder, name: str, vals: Sequence[ir.Value], batched: Sequence[bool],
                result_types: Sequence[ir.Type], attrs: dict[str, ir.Attribute]
                ) -> list[Batched]:
    """Batch an elementwise op given its operands and its unbatched result types."""
    ranks = [_orig_rank(v, bb) for v, bb in zip(vals, batched)]
    n = max([0, *ranks, *[t.rank if is_tensor(t) else 0 for t in result_types]])
    out_types = [b.btype(t) for t in result_types]
    if all(batched) and all(r == n for r in ranks):
        new = b.create(name, list(vals), out_types, attrs)
        return [(r, True) for r in new.results]
    maps = []
    for r, bb in zip(ranks, batched):
        if r not in (0, n):
            raise b.fail(b.op, f"cannot batch '{name}' with operands of ranks {ranks}")
        exprs = ([dim(0)] if bb else []) + ([dim(1 + i) for i in range(n)] if r == n else [])
        maps.append(ir.AffineMap.get(n + 1, 0, exprs))
    for t in out_types:
        b.static(t, f"'{name}'")
    inits = [b.empty(t) for t in out_types]
    maps += [_identity(n + 1)] * len(inits)
    scalar_types = [element_type(t) for t in result_types]

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        return list(bb.create(name, args[: len(vals)], scalar_types, attrs).results)

    gen = make_generic(b, list(vals), inits, maps, [PAR] * (n + 1), body)
    return [(r, True) for r in gen.results]


def _elementwise_rule(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                      batched: list[bool]) -> list[Batched]:
    return elementwise(b, op_name(op), vals, batched, [r.type for r in op.results], _attrs(op))


def defvectorized(*names: str) -> None:
    """Register elementwise ops (ElementwiseMappable: scalars or same-shape tensors)."""
    for name in names:
        BATCH_RULES[name] = _elementwise_rule


defvectorized(
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf",
    "arith.select", "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp",
    "arith.fptosi", "arith.fptoui", "arith.addi", "arith.subi", "arith.muli", "arith.divsi",
    "arith.divui", "arith.remsi", "arith.remui", "arith.andi", "arith.ori", "arith.xori",
    "arith.cmpi", "arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci",
    "arith.maxsi", "arith.minsi", "arith.shli", "arith.shrsi", "arith.shrui",
    "arith.bitcast",
    "math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p", "math.log2",
    "math.log10", "math.sin", "math.cos", "math.tan", "math.tanh", "math.sinh", "math.cosh",
    "math.atan", "math.asin", "math.acos", "math.atan2", "math.sqrt", "math.rsqrt",
    "math.cbrt", "math.powf", "math.fpowi", "math.absf", "math.erf", "math.copysign",
    "math.floor", "math.ceil", "math.round", "math.trunc", "math.fma",
    "autodiff.stop_gradient",
)


# ----------------------------------------------------------------------------
# linalg: every structured op batches as a generic with one more parallel loop
# ----------------------------------------------------------------------------


def _named_structure(op: ir.Operation) -> tuple[list[ir.AffineMap], list[str]]:
    """Indexing maps and iterator types of a linalg op (named or generic)."""
    name = op_name(op)
    if name == "linalg.generic":
        return _maps(op), _iters(op)
    if "indexing_maps" in op.attributes:
        maps = _maps(op)
        out_dims = {e.position for e in maps[-1].results if isinstance(e, ir.AffineDimExpr)}
        return maps, [PAR if d in out_dims else RED for d in range(maps[0].n_dims)]
    ops = list(op.operands)
    if name == "linalg.matmul":
        return [_proj(3, [0, 2]), _proj(3, [2, 1]), _proj(3, [0, 1])], [PAR, PAR, RED]
    if name == "linalg.batch_matmul":
        return ([_proj(4, [0, 1, 3]), _proj(4, [0, 3, 2]), _proj(4, [0, 1, 2])],
                [PAR, PAR, PAR, RED])
    if name == "linalg.matvec":
        return [_proj(2, [0, 1]), _proj(2, [1]), _proj(2, [0])], [PAR, RED]
    if name == "linalg.vecmat":
        return [_proj(2, [1]), _proj(2, [1, 0]), _proj(2, [0])], [PAR, RED]
    if name == "linalg.dot":
        return [_proj(1, [0]), _proj(1, [0]), _proj(1, [])], [RED]
    if name == "linalg.fill":
        r = ops[1].type.rank
        return [_proj(r, []), _identity(r)], [PAR] * r
    if name == "linalg.copy":
        r = ops[1].type.rank
        return [_identity(r), _identity(r)], [PAR] * r
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        r = len(perm)
        return [_identity(r), _proj(r, perm)], [PAR] * r
    if name == "linalg.broadcast":
        dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        r = ops[1].type.rank
        return [_proj(r, [d for d in range(r) if d not in dims]), _identity(r)], [PAR] * r
    return _structure(op)


def _split(op: ir.Operation) -> int:
    """The number of inputs (`ins`) of a linalg op."""
    if "operandSegmentSizes" in op.attributes:
        return _n_ins(op)
    n = len(op.operands)
    return n // 2 if op_name(op) == "linalg.reduce" else n - 1


def _reads_outputs(op: ir.Operation, n_in: int) -> bool:
    block = op.regions[0].blocks[0]
    return any(len(list(a.uses)) for a in list(block.arguments)[n_in:])


def _structured(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                batched: list[bool]) -> list[Batched]:
    """Any linalg op -> linalg.generic with a leading parallel batch loop.

    Unbatched inputs keep their maps (they do not index the batch loop), so
    nothing is broadcast; outputs are written per lane, so they are batched
    (an unbatched destination is re-created batched by `bcast`).
    """
    n_in = _split(op)
    ins, outs = vals[:n_in], vals[n_in:]
    maps, iters = _named_structure(op)
    if not any(batched[:n_in]) and not b.bt.captures_batched(op) \
            and not _reads_outputs(op, n_in):
        # Only a destination is batched, and its values are overwritten: keep the op unbatched.
        fresh = [b.empty(unbatch_type(v.type, True)) for v in outs]
        new = b.bt.clone_unbatched(op, b.ip, operands=ins + fresh)
        return [(r, False) for r in new.results]
    new_outs = [b.ensure_batched(v, bb) for v, bb in zip(outs, batched[n_in:])]
    new_maps = [shift_map(m, bb) for m, bb in zip(maps[:n_in], batched[:n_in])]
    new_maps += [shift_map(m, True) for m in maps[n_in:]]
    gen = make_generic(b, ins, new_outs, new_maps, [PAR, *iters])
    block = gen.regions[0].blocks[0]
    b.bt.lane_body(op.regions[0].blocks[0], block, list(block.arguments), shift_index=True)
    return [(r, True) for r in gen.results]


def defstructured(*names: str) -> None:
    for name in names:
        BATCH_RULES[name] = _structured


defstructured(
    "linalg.generic", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot",
    "linalg.map", "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.exp",
    "linalg.log", "linalg.abs", "linalg.ceil", "linalg.floor", "linalg.negf", "linalg.max",
    "linalg.min", "linalg.powf", "linalg.sqrt", "linalg.rsqrt", "linalg.square",
    "linalg.tanh", "linalg.erf", "linalg.reciprocal", "linalg.elementwise",
)


def _keeps_named_form(b: BatchBuilder, op: ir.Operation, batched: list[bool]) -> bool:
    """True when the op's own named form can be kept: every input batched, no capture."""
    n_in = _split(op)
    return all(batched[:n_in]) and not b.bt.captures_batched(op)


def _renamed(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value], batched: list[bool],
             attrs: dict[str, ir.Attribute] | None = None) -> list[Batched]:
    """The same linalg op on batched operands (destinations re-created batched)."""
    n_in = _split(op)
    operands = vals[:n_in] + [b.ensure_batched(v, bb) for v, bb in
                              zip(vals[n_in:], batched[n_in:])]
    new = b.bt.clone_unbatched(op, b.ip, operands=operands,
                               result_types=[v.type for v in operands[n_in:]][: len(op.results)],
                               attrs=attrs)
    return [(r, True) for r in new.results]


def _matmul(b, op, vals, batched):
    """matmul with both operands batched is a batch_matmul; otherwise a generic contraction."""
    default = [_proj(3, [0, 2]), _proj(3, [2, 1]), _proj(3, [0, 1])]
    if "indexing_maps" in op.attributes and _maps(op) != default:
        return _structured(b, op, vals, batched)  # transposed operands: a generic contraction
    if batched[0] and batched[1]:
        init = b.ensure_batched(vals[2], batched[2])
        with b.loc, b.ip:
            return [(_v(linalg.batch_matmul(vals[0], vals[1], outs=[init])), True)]
    if batched[0] and vals[0].type.has_static_shape:
        # Only the left operand is batched: fold the batch into its rows (JAX's dot_general
        # rule), one (B*M x K) @ (K x N) matmul; the right operand is not broadcast.
        a, w = vals[0], vals[1]
        init = b.ensure_batched(vals[2], batched[2])
        nb, m, _ = a.type.shape
        rows = [[0, 1], [2]]
        flat = b.create("tensor.collapse_shape", [a], [ir.RankedTensorType.get(
            [nb * m, a.type.shape[2]], a.type.element_type)],
            {"reassociation": _reassoc_attr(rows)}).result
        out_t = init.type
        flat_init = b.create("tensor.collapse_shape", [init], [ir.RankedTensorType.get(
            [nb * m, out_t.shape[2]], out_t.element_type)],
            {"reassociation": _reassoc_attr(rows)}).result
        with b.loc, b.ip:
            prod = _v(linalg.matmul(flat, w, outs=[flat_init]))
        return [(b.create("tensor.expand_shape", [prod], [out_t], {
            "reassociation": _reassoc_attr(rows),
            "static_output_shape": ir.DenseI64ArrayAttr.get(list(out_t.shape))}).result, True)]
    return _structured(b, op, vals, batched)


def _fill(b, op, vals, batched):
    if batched[0]:  # a per-lane scalar: broadcast it along the tensor's dims
        init = b.ensure_batched(vals[1], batched[1])
        r = init.type.rank
        with b.loc, b.ip:
            return [(_v(linalg.broadcast(vals[0], outs=[init],
                                         dimensions=list(range(1, r)))), True)]
    # Only the destination is batched; a fill overwrites it.
    return [(b.fill(b.empty(unbatch_type(vals[1].type, True)), vals[0]), False)]


def _shifted_attr(op: ir.Operation, key: str, lead: list[int]) -> ir.Attribute:
    old = list(ir.DenseI64ArrayAttr(op.attributes[key]))
    return ir.DenseI64ArrayAttr.get(lead + [d + 1 for d in old])


def _transpose(b, op, vals, batched):
    if not batched[0]:
        return _structured(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"permutation": _shifted_attr(op, "permutation", [0])})


def _broadcast(b, op, vals, batched):
    if not batched[0]:
        return _structured(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"dimensions": _shifted_attr(op, "dimensions", [])})


def _copy(b, op, vals, batched):
    if not batched[0]:
        return _structured(b, op, vals, batched)
    return _renamed(b, op, vals, batched)


def _reduce(b, op, vals, batched):
    """A reduce over batched inputs stays a reduce: the batch dim is one more kept dim."""
    if not _keeps_named_form(b, op, batched):
        return _structured(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"dimensions": _shifted_attr(op, "dimensions", [])})


defrule("linalg.matmul", _matmul)
defrule("linalg.fill", _fill)
defrule("linalg.transpose", _transpose)
defrule("linalg.broadcast", _broadcast)
defrule("linalg.copy", _copy)
defrule("linalg.reduce", _reduce)


# ----------------------------------------------------------------------------
# tensor
# ----------------------------------------------------------------------------


def _static_array(op: ir.Operation, key: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[key]))


def _extract(b, op, vals, batched):
    """extract from a batched tensor at unbatched indices is a slice; otherwise a gather."""
    src, *idx = vals
    et = op.results[0].type
    t = b.btype(et)
    if batched[0] and not any(batched[1:]):
        rank = src.type.rank - 1
        dyn = ir.ShapedType.get_dynamic_size()
        new = b.create("tensor.extract_slice", [src, *idx], [t], {
            "static_offsets": ir.DenseI64ArrayAttr.get([0] + [dyn] * rank),
            "static_sizes": ir.DenseI64ArrayAttr.get([b.size] + [1] * rank),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * (rank + 1)),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, rank, 0, 0]),
        })
        return [(new.result, True)]
    # Gather: one lane per batch element; batched indices are inputs of the generic.
    ins = [v for v, bb in zip(idx, batched[1:]) if bb]

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        it = iter(args)
        lane = [loop_index(bb, 0)] if batched[0] else []
        ix = [next(it) if flag else v for v, flag in zip(idx, batched[1:])]
        return [bb.create("tensor.extract", [src, *lane, *ix], [et]).result]

    gen = make_generic(b, ins, [b.empty(t)], [_identity(1)] * (len(ins) + 1), [PAR], body)
    return [(gen.result, True)]


def _insert(b, op, vals, batched):
    """insert at unbatched indices is an insert_slice; at batched indices a masked scatter."""
    s, dest, *idx = vals
    dest_b = b.ensure_batched(dest, batched[1])
    rank = dest_b.type.rank - 1
    if not any(batched[2:]):
        src = b.ensure_batched(s, batched[0])
        dyn = ir.ShapedType.get_dynamic_size()
        new = b.create("tensor.insert_slice", [src, dest_b, *idx], [dest_b.type], {
            "static_offsets": ir.DenseI64ArrayAttr.get([0] + [dyn] * rank),
            "static_sizes": ir.DenseI64ArrayAttr.get([b.size] + [1] * rank),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * (rank + 1)),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, rank, 0, 0]),
        })
        return [(new.result, True)]
    # Scatter: every element of the batched destination keeps its value unless
    # it is the lane's indexed element (no loop over lanes, no data-dependent writes).
    ins = [v for v, bb in [(s, batched[0])] + list(zip(idx, batched[2:])) if bb]
    maps = [_proj(rank + 1, [0])] * len(ins) + [_identity(rank + 1)]
    i1 = ir.IntegerType.get_signless(1)

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        it = iter(args[:-1])
        sv = next(it) if batched[0] else s
        ix = [next(it) if flag else v for v, flag in zip(idx, batched[2:])]
        cond = None
        for k, v in enumerate(ix):
            here = loop_index(bb, k + 1)
            eq = bb.create("arith.cmpi", [here, v], [i1],
                           {"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)}
                           ).result
            cond = eq if cond is None else bb.create("arith.andi", [cond, eq], [i1]).result
        return [bb.select(cond, sv, args[-1])]

    gen = make_generic(b, ins, [dest_b], maps, [PAR] * (rank + 1), body)
    return [(gen.result, True)]


def _slice_attrs(op: ir.Operation, size: int) -> dict[str, ir.Attribute]:
    attrs = _attrs(op)
    attrs["static_offsets"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_offsets"))
    attrs["static_sizes"] = ir.DenseI64ArrayAttr.get([size] + _static_array(op, "static_sizes"))
    attrs["static_strides"] = ir.DenseI64ArrayAttr.get([1] + _static_array(op,
                                                                           "static_strides"))
    return attrs


def _slice_gather(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value],
                  batched: list[bool]) -> list[Batched]:
    """extract_slice at batched offsets: a gather, one generic over (lane, result element).

    Element (l, i...) reads `src[(l,) offset_l + i * stride]`; sizes and strides
    must be static, and a rank-reducing slice may only drop its unit dimensions.
    """
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[2] or seg[3]:
        raise b.fail(op, "cannot batch 'tensor.extract_slice' with batched offsets and "
                         "dynamic sizes or strides")
    dyn = ir.ShapedType.get_dynamic_size()
    offsets = _static_array(op, "static_offsets")
    sizes = _static_array(op, "static_sizes")
    strides = _static_array(op, "static_strides")
    t = op.results[0].type
    kept = [d for d, n in enumerate(sizes) if n != 1 or t.rank == len(sizes)]
    if [sizes[d] for d in kept] != list(t.shape):
        raise b.fail(op, "cannot batch a rank-reducing 'tensor.extract_slice' that keeps unit "
                         "dimensions at batched offsets")
    off_vals = list(zip(vals[1:1 + seg[1]], batched[1:1 + seg[1]]))
    ins = [v for v, f in off_vals if f]
    n = t.rank + 1
    idx_t = ir.IndexType.get()

    def body(bb: Builder, args: list[ir.Value]) -> list[ir.Value]:
        it_in, it_off = iter(args), iter(off_vals)
        index = [loop_index(bb, 0)] if batched[0] else []
        for d, (o, st) in enumerate(zip(offsets, strides)):
            if o == dyn:
                v, f = next(it_off)
                base = next(it_in) if f else v
            else:
                base = bb.index(o)
            if d in kept:
                i = loop_index(bb, 1 + kept.index(d))
                if st != 1:
                    i = bb.create("arith.muli", [i, bb.index(st)], [idx_t]).result
                base = bb.create("arith.addi", [base, i], [idx_t]).result
            index.append(base)
        return [bb.create("tensor.extract", [vals[0], *index], [t.element_type]).result]

    rt = b.btype(t)
    maps = [_proj(n, [0])] * len(ins) + [_identity(n)]
    gen = make_generic(b, ins, [b.empty(rt)], maps, [PAR] * n, body)
    return [(gen.result, True)]


def _extract_slice(b, op, vals, batched):
    if any(batched[1:]):
        return _slice_gather(b, op, vals, batched)
    new = b.create("tensor.extract_slice", vals, [b.btype(op.results[0].type)],
                   _slice_attrs(op, b.size))
    return [(new.result, True)]


def _insert_slice(b, op, vals, batched):
    if any(batched[2:]):
        raise b.fail(op, "cannot batch 'tensor.insert_slice' with batched offsets or sizes")
    src, dest = b.ensure_batched(vals[0], batched[0]), b.ensure_batched(vals[1], batched[1])
    new = b.create("tensor.insert_slice", [src, dest, *vals[2:]], [dest.type],
                   _slice_attrs(op, b.size))
    return [(new.result, True)]


def _reassoc(op: ir.Operation, expanded_rank: int) -> ir.Attribute:
    """The reassociation with the batch dimension as its own leading group.

    Reshaping to or from a 0-d tensor has no groups: the unit dimensions then
    join the batch dimension's group.
    """
    groups = [[ir.IntegerAttr(i).value + 1 for i in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(op.attributes["reassociation"])]
    return _reassoc_attr([[0], *groups] if groups else [list(range(expanded_rank + 1))])


def _expand_shape(b, op, vals, batched):
    attrs = _attrs(op)
    attrs["reassociation"] = _reassoc(op, op.results[0].type.rank)
    attrs["static_output_shape"] = ir.DenseI64ArrayAttr.get(
        [b.size] + _static_array(op, "static_output_shape"))
    new = b.create("tensor.expand_shape", vals, [b.btype(op.results[0].type)], attrs)
    return [(new.result, True)]


def _collapse_shape(b, op, vals, batched):
    attrs = _attrs(op)
    attrs["reassociation"] = _reassoc(op, op.operands[0].type.rank)
    new = b.create("tensor.collapse_shape", vals, [b.btype(op.results[0].type)], attrs)
    return [(new.result, True)]


def _reassoc_attr(groups: list[list[int]]) -> ir.Attribute:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g])
                             for g in groups])


def reshape_batched(b: BatchBuilder, x: ir.Value, out: ir.RankedTensorType) -> ir.Value:
    """Reshape the per-lane shape of batched `x` to `out` (static), via collapse + expand."""
    t = x.type
    b.static(t, "a reshape")
    r = t.rank - 1
    if r != 1:
        flat_t = ir.RankedTensorType.get([b.size, max(1, _prod(t.shape[1:]))], t.element_type)
        if r == 0:
            x = b.create("tensor.expand_shape", [x], [flat_t], {
                "reassociation": _reassoc_attr([[0, 1]]),
                "static_output_shape": ir.DenseI64ArrayAttr.get(list(flat_t.shape))}).result
        else:
            x = b.create("tensor.collapse_shape", [x], [flat_t], {
                "reassociation": _reassoc_attr([[0], list(range(1, r + 1))])}).result
    bt = b.btype(out)
    if out.rank == 1:
        return x
    if out.rank == 0:
        return b.create("tensor.collapse_shape", [x], [bt],
                        {"reassociation": _reassoc_attr([[0, 1]])}).result
    return b.create("tensor.expand_shape", [x], [bt], {
        "reassociation": _reassoc_attr([[0], list(range(1, out.rank + 1))]),
        "static_output_shape": ir.DenseI64ArrayAttr.get(list(bt.shape))}).result


def _prod(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _reshape(b, op, vals, batched):
    if batched[1]:
        raise b.fail(op, "cannot batch 'tensor.reshape' with a batched shape operand")
    out = op.results[0].type
    b.static(out, "'tensor.reshape'")
    return [(reshape_batched(b, vals[0], out), True)]


def _cast(b, op, vals, batched):
    return [(b.create("tensor.cast", vals, [b.btype(op.results[0].type)]).result, True)]


def _concat(b, op, vals, batched):
    attrs = _attrs(op)
    d = ir.IntegerAttr(op.attributes["dim"]).value
    attrs["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d + 1)
    ins = [b.ensure_batched(v, bb) for v, bb in zip(vals, batched)]
    return [(b.create("tensor.concat", ins, [b.btype(op.results[0].type)], attrs).result,
             True)]


def _splat(b, op, vals, batched):
    """A batched scalar splat: broadcast the lane values along the tensor's dims."""
    if any(batched[1:]):
        raise b.fail(op, "cannot batch 'tensor.splat' with batched dynamic sizes")
    t = b.btype(op.results[0].type)
    b.static(t, "'tensor.splat'")
    with b.loc, b.ip:
        return [(_v(linalg.broadcast(vals[0], outs=[b.empty(t)],
                                     dimensions=list(range(1, t.rank)))), True)]


def _from_elements(b, op, vals, batched):
    """Stack the (batched) elements as columns, then reshape to the tensor's shape."""
    et = element_type(op.results[0].type)
    cols = []
    col_t = ir.RankedTensorType.get([b.size, 1], et)
    for v, bb in zip(vals, batched):
        lane = b.ensure_batched(v, bb)
        cols.append(b.create("tensor.expand_shape", [lane], [col_t], {
            "reassociation": _reassoc_attr([[0, 1]]),
            "static_output_shape": ir.DenseI64ArrayAttr.get([b.size, 1])}).result)
    flat_t = ir.RankedTensorType.get([b.size, len(cols)], et)
    flat = cols[0] if len(cols) == 1 else b.create(
        "tensor.concat", cols, [flat_t],
        {"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}).result
    return [(reshape_batched(b, flat, op.results[0].type), True)]


def _generate(b, op, vals, batched):
    """tensor.generate capturing batched values -> a generic with the body per lane."""
    if any(batched):
        raise b.fail(op, "cannot batch 'tensor.generate' with batched dynamic sizes")
    t = b.btype(op.results[0].type)
    b.static(t, "'tensor.generate'")
    n = t.rank
    gen = make_generic(b, [], [b.empty(t)], [_identity(n)], [PAR] * n)
    block = gen.regions[0].blocks[0]
    idx = [_index_in(b, block, d + 1) for d in range(n - 1)]
    b.bt.lane_body(op.regions[0].blocks[0], block, idx, shift_index=False,
                   terminator="linalg.yield")
    return [(gen.result, True)]


def _empty(b, op, vals, batched):
    """Only reached with a batched size: each lane would need its own shape."""
    raise b.fail(op, "cannot batch 'tensor.empty' whose dynamic size differs per lane "
                     "(e.g. a loop's trip count under vmap); batching needs one shape "
                     "for every lane")


def _index_in(b: BatchBuilder, block: ir.Block, d: int) -> ir.Value:
    """`linalg.index d` appended to `block` (a generic's body under construction)."""
    return loop_index(Builder(ir.InsertionPoint(block), b.loc), d)


def _pad(b, op, vals, batched):
    if any(batched[1:]):
        raise b.fail(op, "cannot batch 'tensor.pad' with batched low/high sizes")
    if b.bt.captures_batched(op):
        raise b.fail(op, "cannot batch 'tensor.pad' with a batched padding value")
    attrs = _attrs(op)
    attrs["static_low"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_low"))
    attrs["static_high"] = ir.DenseI64ArrayAttr.get([0] + _static_array(op, "static_high"))
    new = ir.Operation.create("tensor.pad", results=[b.btype(op.results[0].type)],
                              operands=vals, attributes=attrs, regions=1, loc=b.loc, ip=b.ip)
    old = op.regions[0].blocks[0]
    block = new.regions[0].blocks.append(*([ir.IndexType.get()] * (len(old.arguments) + 1)))
    b.bt.lane_body(old, block, list(block.arguments)[1:], shift_index=False)
    return [(new.result, True)]


def _dim(b, op, vals, batched):
    """tensor.dim of a batched tensor: the same size, one dimension further."""
    if batched[1]:
        raise b.fail(op, "cannot batch 'tensor.dim' with a batched index")
    one = b.index(1)
    d = b.create("arith.addi", [vals[1], one], [ir.IndexType.get()]).result
    return [(b.create("tensor.dim", [vals[0], d], [ir.IndexType.get()]).result, False)]


defrule("tensor.extract", _extract)
defrule("tensor.insert", _insert)
defrule("tensor.extract_slice", _extract_slice)
defrule("tensor.insert_slice", _insert_slice)
defrule("tensor.expand_shape", _expand_shape)
defrule("tensor.collapse_shape", _collapse_shape)
defrule("tensor.reshape", _reshape)
defrule("tensor.cast", _cast)
defrule("tensor.concat", _concat)
defrule("tensor.splat", _splat)
defrule("tensor.from_elements", _from_elements)
defrule("tensor.generate", _generate)
defrule("tensor.empty", _empty)
defrule("tensor.pad", _pad)
defrule("tensor.dim", _dim)


# ----------------------------------------------------------------------------
# scf
# ----------------------------------------------------------------------------


def _fixpoint(flags: list[bool], step: Callable[[list[bool]], list[bool]]) -> list[bool]:
    """Iterate `flags |= step(flags)` until nothing changes (carries only become batched)."""
    while True:
        new = [f or g for f, g in zip(flags, step(flags))]
        if new == flags:
            return flags
        flags = new


def _terminator(block: ir.Block) -> ir.Operation:
    return list(block.operations)[-1].operation


def _for(b, op, vals, batched):
    """scf.for stays one loop; carried values that depend on batched ones get the batch dim."""
    if any(batched[:3]):
        raise b.fail(op, "cannot batch 'scf.for' with batched bounds or step (use scf.while)")
    inits = vals[3:]
    body = op.regions[0].blocks[0]
    args = list(body.arguments)
    yields = list(_terminator(body).operands)

    def step(flags: list[bool]) -> list[bool]:
        tainted = b.bt.taint(body, {a for a, f in zip(args[1:], flags) if f})
        return [b.bt.is_tainted(y, tainted) for y in yields]

    carry = _fixpoint(list(batched[3:]), step)
    new_inits = [b.ensure_batched(v, bb) if c else v for v, bb, c in zip(inits, batched[3:], carry)]
    loop = scf.ForOp(vals[0], vals[1], vals[2], new_inits, loc=b.loc, ip=b.ip)
    nb = loop.body
    env = [(nb.arguments[0], False)] + list(zip(list(nb.arguments)[1:], carry))
    outs = b.bt.batch_block(body, ir.InsertionPoint(nb), env)
    yb = BatchBuilder(ir.InsertionPoint(nb), b.loc, b.bt, op)
    scf.YieldOp([yb.ensure_batched(v, f) if c else v for (v, f), c in zip(outs, carry)],
                loc=b.loc, ip=ir.InsertionPoint(nb))
    return list(zip(loop.results, carry))


def _if(b, op, vals, batched):
    """scf.if: an unbatched predicate keeps the if; a batched one runs both branches and selects.

    The select is JAX's rule for `cond` under vmap: both branches are pure
    tensor code, so evaluating both is correct (the unused branch is wasted work).
    """
    then_b = op.regions[0].blocks[0]
    else_b = op.regions[1].blocks[0] if len(op.regions[1].blocks) else None
    if batched[0]:
        t_outs = b.bt.batch_block(then_b, b.ip, [])
        e_outs = b.bt.batch_block(else_b, b.ip, []) if else_b is not None else []
        out: list[Batched] = []
        for r, (tv, tb), (ev, eb) in zip(op.results, t_outs, e_outs):
            out += elementwise(b, "arith.select", [vals[0], tv, ev], [True, tb, eb], [r.type],
                               {})
        return out
    flags = []
    for k in range(len(op.results)):
        f = False
        for blk in [then_b] + ([else_b] if else_b is not None else []):
            f = f or b.bt.is_tainted(list(_terminator(blk).operands)[k], b.bt.taint(blk, set()))
        flags.append(f)
    types = [b.btype(r.type) if f else r.type for r, f in zip(op.results, flags)]
    new = scf.IfOp(vals[0], types, has_else=else_b is not None, loc=b.loc, ip=b.ip)
    for src, dst in [(then_b, new.then_block)] + (
            [(else_b, new.else_block)] if else_b is not None else []):
        outs = b.bt.batch_block(src, ir.InsertionPoint(dst), [])
        yb = BatchBuilder(ir.InsertionPoint(dst), b.loc, b.bt, op)
        scf.YieldOp([yb.ensure_batched(v, vb) if f else v for (v, vb), f in zip(outs, flags)],
                    loc=b.loc, ip=ir.InsertionPoint(dst))
    return list(zip(new.results, flags))


def _any(b: BatchBuilder, mask: ir.Value) -> ir.Value:
    """OR of a tensor<Bxi1>: whether any lane is still running."""
    i1 = ir.IntegerType.get_signless(1)
    t0 = ir.RankedTensorType.get([], i1)
    false = b.create("arith.constant", [], [i1], {"value": ir.IntegerAttr.get(i1, 0)}).result
    init = b.fill(b.empty(t0), false)
    gen = make_generic(b, [mask], [init], [_identity(1), _proj(1, [])], [RED],
                       lambda bb, a: [bb.create("arith.ori", [a[0], a[1]], [i1]).result])
    return b.create("tensor.extract", [gen.result], [i1]).result


def _while(b, op, vals, batched):
    """scf.while with a batched condition runs until every lane is done.

    Lanes whose condition is false keep their arguments (the after region's
    results are selected per lane by the condition), so the before region,
    recomputed from them, forwards again the values the lane had when its
    own condition first failed: the loop's results are right for every lane.
    """
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    cond_op = _terminator(before)
    bargs = list(before.arguments)
    fwd = list(cond_op.operands)[1:]
    aargs = list(after.arguments)
    ayields = list(_terminator(after).operands)

    def cond_batched(flags: list[bool]) -> bool:
        tainted = b.bt.taint(before, {a for a, f in zip(bargs, flags) if f})
        return b.bt.is_tainted(cond_op.operands[0], tainted)

    def step(flags: list[bool]) -> list[bool]:
        if cond_batched(flags):
            return [True] * len(flags)
        tb = b.bt.taint(before, {a for a, f in zip(bargs, flags) if f})
        fwd_flags = [b.bt.is_tainted(v, tb) for v in fwd]
        ta = b.bt.taint(after, {a for a, f in zip(aargs, fwd_flags) if f})
        return [f or b.bt.is_tainted(y, ta) for f, y in zip(fwd_flags, ayields)]

    carry = _fixpoint(list(batched), step)
    masked = cond_batched(carry)
    tainted = b.bt.taint(before, {a for a, f in zip(bargs, carry) if f})
    fwd_flags = [masked or b.bt.is_tainted(v, tainted) for v in fwd]
    # With a mask, finished lanes keep their arguments; when the before region does
    # not just forward them, they travel beside the forwarded values to the after region.
    forwards = len(fwd) == len(bargs) and all(f == a for f, a in zip(fwd, bargs))
    extra = masked and not forwards
    inits = [b.ensure_batched(v, bb) if c else v for v, bb, c in zip(vals, batched, carry)]
    types = [v.type for v in inits]
    fwd_types = [b.btype(r.type) if f else r.type for r, f in zip(op.results, fwd_flags)]
    mask_t = b.btype(ir.IntegerType.get_signless(1))
    res_types = fwd_types + (types if extra else []) + ([mask_t] if masked else [])
    new = scf.WhileOp(res_types, inits, loc=b.loc, ip=b.ip)
    nbefore = new.before.blocks.append(*types)
    nafter = new.after.blocks.append(*res_types)
    outs = b.bt.batch_block(before, ir.InsertionPoint(nbefore),
                            list(zip(nbefore.arguments, carry)))
    cb = BatchBuilder(ir.InsertionPoint(nbefore), b.loc, b.bt, op)
    (c, _), fwd_outs = outs[0], outs[1:]
    fvals = [cb.ensure_batched(v, vb) if f else v for (v, vb), f in zip(fwd_outs, fwd_flags)]
    if masked:
        kept = list(nbefore.arguments) if extra else []
        scf.ConditionOp(_any(cb, c), fvals + kept + [c], loc=b.loc,
                        ip=ir.InsertionPoint(nbefore))
    else:
        scf.ConditionOp(c, fvals, loc=b.loc, ip=ir.InsertionPoint(nbefore))
    aargs_new = list(nafter.arguments)
    outs = b.bt.batch_block(after, ir.InsertionPoint(nafter),
                            list(zip(aargs_new[: len(fwd)], fwd_flags)))
    ab = BatchBuilder(ir.InsertionPoint(nafter), b.loc, b.bt, op)
    yvals = [ab.ensure_batched(v, vb) if f else v for (v, vb), f in zip(outs, carry)]
    if masked:
        prev = aargs_new[len(fwd): len(fwd) + len(types)] if extra else aargs_new[: len(fwd)]
        mask = aargs_new[-1]
        yvals = [elementwise(ab, "arith.select", [mask, y, p], [True, True, True],
                             [unbatch_type(p.type, is_tensor(a.type))], {})[0][0]
                 for y, p, a in zip(yvals, prev, bargs)]
    scf.YieldOp(yvals, loc=b.loc, ip=ir.InsertionPoint(nafter))
    return list(zip(list(new.results)[: len(fwd)], fwd_flags))


defrule("scf.for", _for)
defrule("scf.if", _if)
defrule("scf.while", _while)


# ----------------------------------------------------------------------------
# func and autodiff
# ----------------------------------------------------------------------------


def _call(b, op, vals, batched):
    """func.call batches its callee once per signature (which arguments are batched)."""
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    name, types, flags = b.bt.batched_callee(callee, list(batched), op)
    call = b.create("func.call", vals, types, {"callee": ir.FlatSymbolRefAttr.get(name)})
    return list(zip(call.results, flags))


def _checkpoint(b, op, vals, batched):
    """A checkpointed call stays a checkpoint, of the batched callee."""
    callee = ir.FlatSymbolRefAttr(op.attributes["fn"]).value
    name, types, flags = b.bt.batched_callee(callee, list(batched), op)
    attrs = _attrs(op)
    attrs["fn"] = ir.FlatSymbolRefAttr.get(name)
    new = b.create("autodiff.checkpoint", vals, types, attrs)
    return list(zip(new.results, flags))


def _random(b, op, vals, batched):
    """A stateful draw under vmap: "same" draws once for every lane; the others are errors.

    randomness = "different" works on functionalized code (--autodiff-functionalize-rng
    first): then every lane gets its own Philox offset, see `_philox`.
    """
    mode = b.bt.randomness
    if mode == "same" and not any(batched):
        new = b.bt.clone_unbatched(op, b.ip)
        return [(r, False) for r in new.results]
    hint = ""
    if mode == "different":
        hint = " yet (run --autodiff-functionalize-rng before --autodiff-vmap)"
    elif mode != "error":
        hint = " yet"
    what = f"random op '{op_name(op)}'"
    if op_name(op) == "autodiff.philox" and mode == "error":
        # jit turns autodiff.random draws into philox before vmap runs
        what += " (a random draw, e.g. ad.random.uniform)"
        hint = "; pass randomness=\"same\" or \"different\" to vmap"
    raise b.fail(op, f"{what} under vmap with randomness = \"{mode}\" is not supported{hint}")


def _philox(b, op, vals, batched):
    """A functional draw: per-lane (seed, offset) draw per lane; unbatched ones as `_random`.

    Lanes are drawn one by one into their row of the batched tensor: each
    lane's counter range is its own (the vmap op gives lane l the offset
    `offset + l * C`, C the blocks one call consumes), so the draws are
    exactly those of B unbatched calls made one after the other. An unbatched
    draw marked `keyed` (from an explicit key, see `lower_rng`) is a pure function
    of its operands, so every randomness mode shares it among the lanes.
    """
    if not any(batched):
        if b.bt.randomness == "error" and "keyed" not in op.attributes:
            return _random(b, op, vals, batched)
        new = b.bt.clone_unbatched(op, b.ip)
        return [(r, False) for r in new.results]
    t = op.results[0].type
    bt = b.btype(t)
    b.static(bt, "'autodiff.philox'")
    loop = scf.ForOp(b.index(0), b.index(b.size), b.index(1), [b.empty(bt)], loc=b.loc, ip=b.ip)
    lb = BatchBuilder(ir.InsertionPoint(loop.body), b.loc, b.bt, op)
    lane = loop.induction_variable
    args = [lb.create("tensor.extract", [v, lane], [v.type.element_type]).result if f else v
            for v, f in zip(vals, batched)]
    draw = lb.create(op_name(op), args, [t], _attrs(op)).result
    r = t.rank
    dyn = ir.ShapedType.get_dynamic_size()
    row = lb.create("tensor.insert_slice", [draw, loop.inner_iter_args[0], lane], [bt], {
        "static_offsets": ir.DenseI64ArrayAttr.get([dyn] + [0] * r),
        "static_sizes": ir.DenseI64ArrayAttr.get([1] + list(t.shape)),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0, 0]),
    }).result
    scf.YieldOp([row], loc=b.loc, ip=ir.InsertionPoint(loop.body))
    return [(loop.results[0], True)]


defrule("func.call", _call)
defrule("autodiff.checkpoint", _checkpoint)
defrule("autodiff.random", _random)
defrule("autodiff.philox", _philox)

#: Ops sent to their rule even when no operand is batched (a draw differs per lane).
ALWAYS_RULE = ("autodiff.random", "autodiff.philox")
