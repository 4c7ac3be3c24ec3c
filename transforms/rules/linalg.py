"""Rules of the named `linalg` ops (jvp, vjp and batching side by side).

`linalg.generic` has its own module (`linalg_generic.py`, reductions in
`linalg_reductions.py`); the helpers on indexing maps are in `structured.py`.

* Elementwise named ops and `linalg.map`/`linalg.reduce` are generics in
  disguise: forward mode rewrites them to a generic first, reverse mode
  before the sweep (`FORWARD_AUGMENT`); batching keeps a reduce whose inputs
  are all batched and turns the others into a generic with one more loop.
* Data movement (fill, copy, transpose, broadcast) is linear: the same op on
  the tangents; the adjoint movement (a sum for broadcast) in reverse mode.
* Contractions (matmul, batch_matmul, matvec, vecmat, dot) differentiate
  into contractions; a matmul with both operands batched is a batch_matmul.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import Builder, op_name
from .batching import BatchBuilder, Batched, defbatch, defstructured, structured_rule, unbatch_type
from .linalg_generic import _generic_jvp
from .regions import move_ops
from .registry import FORWARD_AUGMENT, defjvp_rule, deflinear, defvjp
from .structured import (
    PAR,
    identity_map,
    implicit_structure,
    indexing_maps,
    make_generic,
    num_inputs,
    projection,
    reassociation,
    sum_all,
    sum_to,
    transpose,
    value_of,
)

# -- batching helpers: keep a named op's own form when every input is batched ------


def _keeps_named_form(b: BatchBuilder, op: ir.Operation, batched: list[bool]) -> bool:
    """True when the op's own named form can be kept: every input batched, no capture."""
    n_in = num_inputs(op)
    return all(batched[:n_in]) and not b.bt.captures_batched(op)


def _renamed(b: BatchBuilder, op: ir.Operation, vals: list[ir.Value], batched: list[bool],
             attrs: dict[str, ir.Attribute] | None = None) -> list[Batched]:
    """The same linalg op on batched operands (destinations re-created batched)."""
    n_in = num_inputs(op)
    operands = vals[:n_in] + [b.ensure_batched(v, bb) for v, bb in
                              zip(vals[n_in:], batched[n_in:])]
    new = b.bt.clone_unbatched(op, b.ip, operands=operands,
                               result_types=[v.type for v in operands[n_in:]][: len(op.results)],
                               attrs=attrs)
    return [(r, True) for r in new.results]


def _shifted_attr(op: ir.Operation, key: str, lead: list[int]) -> ir.Attribute:
    old = list(ir.DenseI64ArrayAttr(op.attributes[key]))
    return ir.DenseI64ArrayAttr.get(lead + [d + 1 for d in old])


# ----------------------------------------------------------------------------
# Ops that are generics in disguise: map, reduce, elementwise named ops
# ----------------------------------------------------------------------------

ELEMENTWISE_NAMED = (
    "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.exp", "linalg.log",
    "linalg.abs", "linalg.ceil", "linalg.floor", "linalg.negf", "linalg.max", "linalg.min",
    "linalg.powf", "linalg.sqrt", "linalg.rsqrt", "linalg.square", "linalg.tanh", "linalg.erf",
    "linalg.reciprocal", "linalg.map", "linalg.elementwise",
)


def to_generic(b: Builder, op: ir.Operation) -> ir.Operation:
    """Rewrite a map/reduce/elementwise named op into an equivalent linalg.generic."""
    maps, iters = implicit_structure(op)
    operands = list(op.operands)
    n_in = num_inputs(op)
    if not op.regions or not op.regions[0].blocks:
        raise b.ad.fail(op, f"cannot differentiate '{op_name(op)}' without a body")
    gen = make_generic(b, operands[:n_in], operands[n_in:], maps, iters)
    block = op.regions[0].blocks[0]
    move_ops(block, gen.regions[0].blocks[0], list(gen.regions[0].blocks[0].arguments))
    b.ad.replace_op(op, list(gen.results))
    return gen


def _via_generic_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    gen = to_generic(b, op)
    return _generic_jvp(Builder(b.ip, b.loc, b.ad, gen), gen, ts)


def _via_generic_augment(ad, op: ir.Operation) -> None:
    b = Builder(ir.InsertionPoint(op), op.location, ad, op)
    to_generic(b, op)
    for d in ad.dead:
        d.erase()
    ad.dead.clear()


for _name in ELEMENTWISE_NAMED + ("linalg.reduce",):
    defjvp_rule(_name, _via_generic_jvp)
    FORWARD_AUGMENT[_name] = _via_generic_augment

def _reduce_batch(b, op, vals, batched):
    """A reduce over batched inputs stays a reduce: the batch dim is one more kept dim."""
    if not _keeps_named_form(b, op, batched):
        return structured_rule(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"dimensions": _shifted_attr(op, "dimensions", [])})

defbatch("linalg.reduce", _reduce_batch)
defstructured(*ELEMENTWISE_NAMED)


# ----------------------------------------------------------------------------
# Data movement: fill, copy, transpose, broadcast
# ----------------------------------------------------------------------------


def _fill_vjp(b, op, cts):
    return [sum_all(b, cts[0]), None]


def _copy_jvp(b, op, ts):
    return [ts[0]]


def _copy_vjp(b, op, cts):
    return [cts[0], None]


def _perm(op) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def _transpose_vjp(b, op, cts):
    perm = _perm(op)
    inv = [perm.index(i) for i in range(len(perm))]
    return [transpose(b, cts[0], inv), None]


def _bcast_dims(op) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))


def _broadcast_vjp(b, op, cts):
    added = _bcast_dims(op)
    rank = cts[0].type.rank
    keep = [d for d in range(rank) if d not in added]
    return [sum_to(b, cts[0], keep), None]


def _fill_batch(b, op, vals, batched):
    if batched[0]:  # a per-lane scalar: broadcast it along the tensor's dims
        init = b.ensure_batched(vals[1], batched[1])
        r = init.type.rank
        with b.loc, b.ip:
            return [(value_of(linalg.broadcast(vals[0], outs=[init],
                                         dimensions=list(range(1, r)))), True)]
    # Only the destination is batched; a fill overwrites it.
    return [(b.fill(b.empty(unbatch_type(vals[1].type, True)), vals[0]), False)]


def _transpose_batch(b, op, vals, batched):
    if not batched[0]:
        return structured_rule(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"permutation": _shifted_attr(op, "permutation", [0])})


def _broadcast_batch(b, op, vals, batched):
    if not batched[0]:
        return structured_rule(b, op, vals, batched)
    return _renamed(b, op, vals, batched, {"dimensions": _shifted_attr(op, "dimensions", [])})


def _copy_batch(b, op, vals, batched):
    if not batched[0]:
        return structured_rule(b, op, vals, batched)
    return _renamed(b, op, vals, batched)


# linear in the filled value; the destination is overwritten
deflinear("linalg.fill", 0)
defvjp("linalg.fill", _fill_vjp)
defbatch("linalg.fill", _fill_batch)
defjvp_rule("linalg.copy", _copy_jvp)  # the tangent itself (no copy)
defvjp("linalg.copy", _copy_vjp)
defbatch("linalg.copy", _copy_batch)
deflinear("linalg.transpose", 0)
defvjp("linalg.transpose", _transpose_vjp)
defbatch("linalg.transpose", _transpose_batch)
deflinear("linalg.broadcast", 0)
defvjp("linalg.broadcast", _broadcast_vjp)
defbatch("linalg.broadcast", _broadcast_batch)


# ----------------------------------------------------------------------------
# Contractions: bilinear, so JVP = op(tA, B) + op(A, tB) accumulated through
# the init, and each VJP is another contraction.
# ----------------------------------------------------------------------------

CONTRACTIONS = {
    "linalg.matmul": linalg.matmul,
    "linalg.batch_matmul": linalg.batch_matmul,
    "linalg.matvec": linalg.matvec,
    "linalg.vecmat": linalg.vecmat,
    "linalg.dot": linalg.dot,
}


def _check_default_maps(b, op):
    if "indexing_maps" in op.attributes and op_name(op) in ("linalg.matmul",
                                                             "linalg.batch_matmul"):
        default = "affine_map<(d0, d1, d2) -> (d0, d2)>"
        if op_name(op) == "linalg.matmul" and default not in str(op.attributes["indexing_maps"]):
            raise b.ad.fail(op, f"'{op_name(op)}' with custom indexing_maps is not supported")


def _contract(b: Builder, name: str, x: ir.Value, y: ir.Value, init: ir.Value) -> ir.Value:
    with b.loc, b.ip:
        return value_of(CONTRACTIONS[name](x, y, outs=[init]))


def _contraction_jvp(b, op, ts):
    _check_default_maps(b, op)
    name = op_name(op)
    x, y, init = list(op.operands)
    tx, ty, tinit = ts
    if tx is None and ty is None and tinit is None:
        return [None]
    acc = b.materialize(tinit, init)
    if tx is not None:
        acc = _contract(b, name, tx, y, acc)
    if ty is not None:
        acc = _contract(b, name, x, ty, acc)
    return [acc]


def _outer(b: Builder, u: ir.Value, v: ir.Value) -> ir.Value:
    """out[i, j] = u[i] * v[j] (not a contraction: a parallel generic)."""
    t = ir.RankedTensorType.get([u.type.shape[0], v.type.shape[0]], u.type.element_type)
    init = b.empty(t)
    return make_generic(b, [u, v], [init],
                        [projection(2, [0]), projection(2, [1]), identity_map(2)],
                        [PAR, PAR], lambda bb, a: [bb.mulf(a[0], a[1])]).result


def _scale_tensor(b: Builder, s: ir.Value, v: ir.Value) -> ir.Value:
    """out = s * v for a rank-0 tensor s."""
    n = v.type.rank
    init = b.empty_like(v)
    return make_generic(b, [s, v], [init], [ir.AffineMap.get(n, 0, []), identity_map(n),
                                            identity_map(n)], [PAR] * n,
                        lambda bb, a: [bb.mulf(a[0], a[1])]).result


def _contraction_vjp(b, op, cts):
    _check_default_maps(b, op)
    name = op_name(op)
    x, y, init = list(op.operands)
    (ct,) = cts
    ad = b.ad
    gx = gy = None
    if name == "linalg.matmul":
        if ad.is_active(x):
            gx = _contract(b, name, ct, transpose(b, y, [1, 0]), b.zeros_like(x))
        if ad.is_active(y):
            gy = _contract(b, name, transpose(b, x, [1, 0]), ct, b.zeros_like(y))
    elif name == "linalg.batch_matmul":
        if ad.is_active(x):
            gx = _contract(b, name, ct, transpose(b, y, [0, 2, 1]), b.zeros_like(x))
        if ad.is_active(y):
            gy = _contract(b, name, transpose(b, x, [0, 2, 1]), ct, b.zeros_like(y))
    elif name == "linalg.matvec":  # y = A v
        if ad.is_active(x):
            gx = _outer(b, ct, y)
        if ad.is_active(y):
            gy = _contract(b, "linalg.vecmat", ct, x, b.zeros_like(y))
    elif name == "linalg.vecmat":  # y = v A
        if ad.is_active(x):
            gx = _contract(b, "linalg.matvec", y, ct, b.zeros_like(x))
        if ad.is_active(y):
            gy = _outer(b, x, ct)
    elif name == "linalg.dot":
        if ad.is_active(x):
            gx = _scale_tensor(b, ct, y)
        if ad.is_active(y):
            gy = _scale_tensor(b, ct, x)
    return [gx, gy, ct]


for _name in CONTRACTIONS:
    defjvp_rule(_name, _contraction_jvp)
    defvjp(_name, _contraction_vjp)
def _matmul_batch(b, op, vals, batched):
    """matmul with both operands batched is a batch_matmul; otherwise a generic contraction."""
    default = [projection(3, [0, 2]), projection(3, [2, 1]), projection(3, [0, 1])]
    if "indexing_maps" in op.attributes and indexing_maps(op) != default:
        return structured_rule(b, op, vals, batched)  # transposed operands: a generic contraction
    if batched[0] and batched[1]:
        init = b.ensure_batched(vals[2], batched[2])
        with b.loc, b.ip:
            return [(value_of(linalg.batch_matmul(vals[0], vals[1], outs=[init])), True)]
    if batched[0] and vals[0].type.has_static_shape:
        # Only the left operand is batched: fold the batch into its rows (JAX's dot_general
        # rule), one (B*M x K) @ (K x N) matmul; the right operand is not broadcast.
        a, w = vals[0], vals[1]
        init = b.ensure_batched(vals[2], batched[2])
        nb, m, _ = a.type.shape
        rows = [[0, 1], [2]]
        flat = b.create("tensor.collapse_shape", [a], [ir.RankedTensorType.get(
            [nb * m, a.type.shape[2]], a.type.element_type)],
            {"reassociation": reassociation(rows)}).result
        out_t = init.type
        flat_init = b.create("tensor.collapse_shape", [init], [ir.RankedTensorType.get(
            [nb * m, out_t.shape[2]], out_t.element_type)],
            {"reassociation": reassociation(rows)}).result
        with b.loc, b.ip:
            prod = value_of(linalg.matmul(flat, w, outs=[flat_init]))
        return [(b.create("tensor.expand_shape", [prod], [out_t], {
            "reassociation": reassociation(rows),
            "static_output_shape": ir.DenseI64ArrayAttr.get(list(out_t.shape))}).result, True)]
    return structured_rule(b, op, vals, batched)


defbatch("linalg.matmul", _matmul_batch)
defstructured("linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot")
