"""Derivative rules of the `linalg` dialect.

`linalg.generic` is the workhorse:

* JVP: one generic with the tangent inputs and tangent outputs appended,
  whose body is the forward-mode derivative of the original body (the same
  scalar rules as at function level).
* VJP w.r.t. input i: a generic over the same iteration space whose output
  has input i's indexing map (dims of that map parallel, the others
  reductions, accumulating), and whose body recomputes the primal body and
  runs the scalar reverse rules over it, seeded with the output cotangents.
  Reductions (the body reads its output as an accumulator) are supported for
  `acc + g`, `acc * g` and `max/min(acc, g)`. Each is linearized as
  `dout = sum_d W(d) dg(d) + w_init dinit` over the loop points d:
  W = 1 for sums; for max/min (JAX's convention at ties) W is 1/count at the
  loop points equal to the result (the init counts as one more element when
  it ties, unless it is the identity +-inf) and 0 elsewhere, so a tied
  cotangent is split evenly and the tangent is the mean of the tied
  tangents; for products W(d) is the product of every other factor (init
  included), computed without division by a pairwise tree (exact with any
  number of zeros). Forward mode emits the same weighted sum, a plain `addf`
  reduction, so every order composes.
* Indexing maps that are not projected permutations (flips `n-1-i`, repeated
  dims `(i, i)`, strides and offsets `s*i + c`, constants): the cotangent is
  first gathered over the loop dims the map uses, then embedded into the
  operand's shape by a generic over the embedding's whole index space
  (zeros off a diagonal) and a strided `tensor.insert_slice`; no generic
  ever writes through a map that misses some of its output's elements.

Elementwise named ops and `linalg.map`/`linalg.reduce` become generics
first. Contractions (matmul, batch_matmul, matvec, vecmat, dot)
differentiate into contractions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import (
    Builder,
    append_tangents,
    element_type,
    is_float,
    op_name,
    tangent_results,
)
from .registry import FORWARD_AUGMENT, defjvp_rule, defvjp

PAR = "parallel"
RED = "reduction"
REDUCERS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
            "arith.minnumf")
#: The kind of a reduction's combiner.
REDUCE_KIND = {"arith.addf": "add", "arith.mulf": "mul", "arith.maximumf": "max",
               "arith.maxnumf": "max", "arith.minimumf": "min", "arith.minnumf": "min"}


def _v(x) -> ir.Value:
    """The value of a linalg helper's result (some helpers return the op)."""
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, ir.OpResultList):
        return x[0]
    return x.results[0]


def _iter_attr(kind: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#linalg.iterator_type<{kind}>")


def _iters(op: ir.Operation) -> list[str]:
    return ["reduction" if "reduction" in str(a) else "parallel"
            for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _map_dims(m: ir.AffineMap) -> list[int] | None:
    """The loop dims of a projected permutation map, or None if it is not one."""
    out = []
    for e in m.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        out.append(e.position)
    return out


def _n_ins(op: ir.Operation) -> int:
    seg = op.attributes["operandSegmentSizes"]
    return list(ir.DenseI32ArrayAttr(seg))[0]


def make_generic(b: Builder, inputs: Sequence[ir.Value], inits: Sequence[ir.Value],
                 maps: Sequence[ir.AffineMap], iters: Sequence[str],
                 body: Callable[[Builder, list[ir.Value]], list[ir.Value]] | None = None
                 ) -> ir.Operation:
    """Build a linalg.generic; `body(bb, block_args)` returns the yielded values."""
    gen = linalg.GenericOp(
        [v.type for v in inits], list(inputs), list(inits),
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([_iter_attr(k) for k in iters]),
        loc=b.loc, ip=b.ip,
    )
    types = [element_type(v.type) for v in [*inputs, *inits]]
    block = gen.regions[0].blocks.append(*types)
    if body is not None:
        bb = Builder(ir.InsertionPoint(block), b.loc, b.ad)
        linalg.YieldOp(body(bb, list(block.arguments)), loc=b.loc, ip=bb.ip)
    return gen.operation


def _identity(n: int) -> ir.AffineMap:
    return ir.AffineMap.get_identity(n)


def _proj(n: int, dims: Sequence[int]) -> ir.AffineMap:
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
    gen = make_generic(b, [x], [init], [_identity(n), _proj(n, keep)], iters,
                       lambda bb, a: [bb.addf(a[1], a[0])])
    return gen.result


def sum_all(b: Builder, x: ir.Value) -> ir.Value:
    """The sum of every element of tensor `x`, as a scalar."""
    s = sum_to(b, x, [])
    return b.create("tensor.extract", [s], [x.type.element_type]).result


# ----------------------------------------------------------------------------
# linalg.generic
# ----------------------------------------------------------------------------


def _move_body(old: ir.Block, new: ir.Block, arg_map: Sequence[ir.Value]) -> None:
    for a, n in zip(old.arguments, arg_map):
        a.replace_all_uses_with(n)
    ip = ir.InsertionPoint(new)
    for o in list(old.operations):
        ip.insert(o.operation.detach_from_parent())


def _generic_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    n_in = _n_ins(op)
    if RED in _iters(op):
        red = _classify_reductions(op, n_in)
        if red and any(k != "add" for _, _, k in red.values()):
            return _generic_jvp_weighted(b, op, ts, red)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = _maps(op)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    act_in = [i for i in range(n_in) if ts[i] is not None]
    fl_out = [j for j in range(n_out) if is_float(outputs[j].type)]
    t_inits = []
    for j in fl_out:
        reads = len(list(args[n_in + j].uses)) > 0
        t_inits.append(b.materialize(ts[n_in + j], outputs[j]) if reads else outputs[j])
    new_ins = inputs + [ts[i] for i in act_in]
    new_outs = outputs + t_inits
    new_maps = maps[:n_in] + [maps[i] for i in act_in] + maps[n_in:] + [maps[n_in + j]
                                                                       for j in fl_out]
    gen = make_generic(b, new_ins, new_outs, new_maps, _iters(op))
    nb = gen.regions[0].blocks[0]
    nargs = list(nb.arguments)
    k_out = n_in + len(act_in)
    arg_map = nargs[:n_in] + nargs[k_out : k_out + n_out]
    _move_body(block, nb, arg_map)
    ad = b.ad
    for pos, i in enumerate(act_in):
        ad.t[nargs[i]] = nargs[n_in + pos]
    for pos, j in enumerate(fl_out):
        ad.t[nargs[k_out + j]] = nargs[k_out + n_out + pos]
    ad.run_block(nb)
    append_tangents(ad, list(nb.operations)[-1], fl_out,
                    lambda vals, loc, ip: linalg.YieldOp(vals, loc=loc, ip=ip))
    return tangent_results(ad, op, gen.results, n_out, fl_out)


def _classify_reductions(op: ir.Operation, n_in: int) -> dict[int, tuple] | None:
    """`_reductions` without the diagnostic: None when a body is not of that form."""
    class _Quiet:
        class ad:
            @staticmethod
            def fail(*a):
                return ValueError()
    try:
        return _reductions(_Quiet, op, n_in)  # type: ignore[arg-type]
    except ValueError:
        return None


def _reductions(b: Builder, op: ir.Operation, n_in: int) -> dict[int, tuple]:
    """For a generic with reduction loops: output j -> (reducer op, g, kind)."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    yielded = list(list(block.operations)[-1].operands)
    out: dict[int, tuple] = {}
    for j, acc in enumerate(args[n_in:]):
        uses = list(acc.uses)
        if not uses:
            continue
        user = uses[0].owner.operation
        ok = (len(uses) == 1 and op_name(user) in REDUCERS and user.results[0] == yielded[j]
              and len(list(user.results[0].uses)) == 1)
        if not ok:
            raise b.ad.fail(op, "unsupported reduction in 'linalg.generic': the accumulator "
                                "must be combined once by addf/mulf/maximumf/minimumf and "
                                "yielded")
        other = [v for v in user.operands if v != acc]
        if not other:
            raise b.ad.fail(op, "unsupported reduction in 'linalg.generic': the accumulator "
                                "is combined with itself")
        out[j] = (user, other[0], REDUCE_KIND[op_name(user)])
    return out


#: Scalar ops whose derivative rule (rules/math.py) is written with the op's
#: result: a linalg.generic yielding one reads its result in reverse mode.
USES_RESULT = frozenset(("math.exp", "math.exp2", "math.expm1", "math.tan", "math.tanh",
                         "math.sqrt", "math.rsqrt", "math.cbrt"))


def _drop_unused_inputs(b: Builder, gen: ir.Operation) -> ir.Operation:
    """`gen` without the inputs its body does not read (a reverse-mode generic
    lists every primal input; an unused one would still be kept alive as a
    residual, and taped per iteration inside a loop). Inputs whose maps alone
    bound a loop dimension stay."""
    n_in = _n_ins(gen)
    block = gen.regions[0].blocks[0]
    args = list(block.arguments)
    unused = {i for i in range(n_in) if not any(True for _ in args[i].uses)}
    if not unused:
        return gen
    maps = _maps(gen)
    keep = [i for i in range(len(maps)) if i not in unused]
    bound = {d for i in keep for d in (_map_dims(maps[i]) or [])}
    if any(_map_dims(maps[i]) is None for i in keep) or len(bound) < maps[0].n_dims:
        return gen
    operands = list(gen.operands)
    new = make_generic(Builder(ir.InsertionPoint(gen), gen.location, b.ad),
                       [operands[i] for i in keep if i < n_in], operands[n_in:],
                       [maps[i] for i in keep], _iters(gen))
    nblock = new.regions[0].blocks[0]
    for a, na in zip([args[i] for i in keep], nblock.arguments):
        a.replace_all_uses_with(na)
    ip = ir.InsertionPoint(nblock)
    for o in list(block.operations):
        ip.insert(o.operation.detach_from_parent())
    for r, nr in zip(gen.results, new.results):
        r.replace_all_uses_with(nr)
    gen.erase()
    return new



# -- helpers of the reduction and indexing-map rules --------------------------


def _loop_sizes(b: Builder, op: ir.Operation) -> list[int]:
    """The static trip count of each loop of a generic (from an operand dim
    its map reads as a plain loop dim)."""
    maps = _maps(op)
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


def _clone_body(op: ir.Operation, ip: ir.InsertionPoint, vmap: dict, skip) -> list:
    """Clone `op`'s body ops but the terminator and those in `skip` at `ip`."""
    block = op.regions[0].blocks[0]
    clones = []
    for o in list(block.operations)[:-1]:
        if o.operation in skip:
            continue
        c = o.operation.clone(ip=ip)
        for k, v in enumerate(list(c.operands)):
            if v in vmap:
                c.operands[k] = vmap[v]
        for r_old, r_new in zip(o.results, c.results):
            vmap[r_old] = r_new
        clones.append(c)
    return clones


def _linear(e: ir.AffineExpr) -> tuple[dict[int, int], int] | None:
    """`e` as ({dim: coefficient}, constant), None if not linear in the dims."""
    if isinstance(e, ir.AffineDimExpr):
        return {e.position: 1}, 0
    if isinstance(e, ir.AffineConstantExpr):
        return {}, e.value
    if isinstance(e, ir.AffineAddExpr):
        lhs, rhs = _linear(e.lhs), _linear(e.rhs)
        if lhs is None or rhs is None:
            return None
        co = dict(lhs[0])
        for d, c in rhs[0].items():
            co[d] = co.get(d, 0) + c
        return {d: c for d, c in co.items() if c}, lhs[1] + rhs[1]
    if isinstance(e, ir.AffineMulExpr):
        lhs, rhs = _linear(e.lhs), _linear(e.rhs)
        if lhs is None or rhs is None:
            return None
        if not lhs[0]:
            lhs, rhs = rhs, lhs
        if rhs[0]:
            return None
        k = rhs[1]
        return {d: c * k for d, c in lhs[0].items() if c * k}, lhs[1] * k
    return None


def _static_attrs(offsets, sizes, strides, n_src: int) -> dict:
    return {
        "static_offsets": ir.DenseI64ArrayAttr.get(list(offsets)),
        "static_sizes": ir.DenseI64ArrayAttr.get(list(sizes)),
        "static_strides": ir.DenseI64ArrayAttr.get(list(strides)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1] * n_src + [0, 0, 0]),
    }


def _extract(b: Builder, x: ir.Value, offsets, sizes, strides) -> ir.Value:
    t = ir.RankedTensorType.get(list(sizes), element_type(x.type))
    return b.create("tensor.extract_slice", [x], [t],
                    _static_attrs(offsets, sizes, strides, 1)).result


def _insert(b: Builder, src: ir.Value, dest: ir.Value, offsets, strides) -> ir.Value:
    return b.create("tensor.insert_slice", [src, dest], [dest.type],
                    _static_attrs(offsets, list(src.type.shape), strides, 2)).result


def _reassoc(groups: Sequence[Sequence[int]]) -> ir.Attribute:
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), i) for i in g]) for g in groups])


def _collapse(b: Builder, x: ir.Value, groups, shape) -> ir.Value:
    t = ir.RankedTensorType.get(list(shape), element_type(x.type))
    if list(shape) == list(x.type.shape):
        return x
    return b.create("tensor.collapse_shape", [x], [t], {"reassociation": _reassoc(groups)}).result


def _expand(b: Builder, x: ir.Value, groups, shape) -> ir.Value:
    t = ir.RankedTensorType.get(list(shape), element_type(x.type))
    if list(shape) == list(x.type.shape):
        return x
    return b.create("tensor.expand_shape", [x], [t], {
        "reassociation": _reassoc(groups),
        "static_output_shape": ir.DenseI64ArrayAttr.get(list(shape))}).result


def _exclusive_products(b: Builder, a: ir.Value, init: ir.Value) -> tuple[ir.Value, ir.Value]:
    """For `a` of shape (..., R) and `init` of shape (..., 1): E[..., r] = init *
    prod of a[..., s] over s != r, and P = prod over r of a[..., r] (shape
    (..., 1)). A pairwise tree (no division: exact with zeros)."""
    shape = list(a.type.shape)
    lead = shape[:-1]
    k = len(lead)
    ones1 = [1] * k
    levels = []  # (padded level value, its length before padding, half length)
    cur = a
    while cur.type.shape[-1] > 1:
        n = cur.type.shape[-1]
        if n % 2:
            pad = b.constant(ir.RankedTensorType.get(lead + [n + 1], element_type(a.type)), 1.0)
            cur = _insert(b, cur, pad, [0] * (k + 1), [1] * (k + 1))
        h = (n + 1) // 2
        ev = _extract(b, cur, [0] * (k + 1), lead + [h], ones1 + [2])
        od = _extract(b, cur, [0] * k + [1], lead + [h], ones1 + [2])
        levels.append((n, h, ev, od))
        cur = b.mulf(ev, od)
    prod_all = cur
    out = init
    for n, h, ev, od in reversed(levels):
        o_ev = b.mulf(out, od)
        o_od = b.mulf(out, ev)
        full = b.empty(ir.RankedTensorType.get(lead + [2 * h], element_type(a.type)))
        full = _insert(b, o_ev, full, [0] * (k + 1), ones1 + [2])
        full = _insert(b, o_od, full, [0] * k + [1], ones1 + [2])
        out = full if 2 * h == n else _extract(b, full, [0] * (k + 1), lead + [n], [1] * (k + 1))
    return out, prod_all


def _g_values(b: Builder, op: ir.Operation, red: dict, js: Sequence[int], extra_ins,
              extra_maps, inits, out_maps, iters, body):
    """A generic over `op`'s loops reading `op`'s inputs and `extra_ins`, whose
    body recomputes each reduced value g_j (j in js) and yields
    `body(bb, gs, extra_args, accs)`."""
    n_in = _n_ins(op)
    inputs = list(op.operands)[:n_in]
    maps = _maps(op)
    gen = make_generic(b, inputs + list(extra_ins), list(inits),
                       maps[:n_in] + list(extra_maps) + list(out_maps), iters)
    nb = gen.regions[0].blocks[0]
    nargs = list(nb.arguments)
    args = list(op.regions[0].blocks[0].arguments)
    vmap = {args[i]: nargs[i] for i in range(n_in)}
    ip = ir.InsertionPoint(nb)
    _clone_body(op, ip, vmap, {red[j][0] for j in red})
    bb = Builder(ip, op.location, b.ad)
    gs = [vmap.get(red[j][1], red[j][1]) for j in js]
    n_extra = len(extra_ins)
    vals = body(bb, gs, nargs[n_in:n_in + n_extra], nargs[n_in + n_extra:])
    linalg.YieldOp(vals, loc=op.location, ip=ip)
    for o in reversed(list(nb.operations)[:-1]):
        if not any(True for r in o.results for _ in r.uses):
            o.operation.erase()
    return gen


def _max_aux(b: Builder, op: ir.Operation, red: dict, js: Sequence[int]) -> dict:
    """For max/min outputs j: (inv_j, w_init_j): the weight of each tied loop
    point (1/count) and of the init (1/count where it ties, else 0)."""
    n_in = _n_ins(op)
    maps = _maps(op)
    outputs = list(op.operands)[n_in:]
    ys = [op.results[j] for j in js]

    def body(bb, gs, ys_, accs):
        out = []
        for g, y, acc in zip(gs, ys_, accs):
            one, zero = bb.constant(g.type, 1.0), bb.constant(g.type, 0.0)
            out.append(bb.addf(acc, bb.select(bb.cmpf("oeq", g, y), one, zero)))
        return out

    gen = _g_values(b, op, red, js, ys, [maps[n_in + j] for j in js],
                    [b.zeros_like(y) for y in ys], [maps[n_in + j] for j in js], _iters(op),
                    body)
    aux = {}
    for pos, j in enumerate(js):
        c, y, init = gen.results[pos], op.results[j], outputs[j]
        ident = b.constant(y, float("-inf") if red[j][2] == "max" else float("inf"))
        one, zero = b.ones_like(y), b.zeros_like(y)
        # The init ties when it equals the result, unless it is the identity
        # and some loop point ties (an empty or all-(-inf) max is the init's).
        tie = b.select(b.cmpf("oeq", init, y),
                       b.select(b.cmpf("oeq", init, ident),
                                b.select(b.cmpf("oeq", c, zero), one, zero), one), zero)
        inv = b.recip(b.addf(c, tie))
        aux[j] = (inv, b.mulf(tie, inv))
    return aux


def _mul_aux(b: Builder, op: ir.Operation, red: dict, j: int) -> tuple[ir.Value, ir.Value]:
    """For a product output j: (E, P): E over the loop space (in loop order) is
    init times the product of every other factor of its output element; P (the
    output's shape) is the product of all factors but the init."""
    n_in = _n_ins(op)
    maps = _maps(op)
    iters = _iters(op)
    n = maps[0].n_dims
    sizes = _loop_sizes(b, op)
    out_dims = _map_dims(maps[n_in + j])
    par = [d for d in range(n) if iters[d] == PAR]
    red_dims = [d for d in range(n) if iters[d] == RED]
    if out_dims is None or sorted(out_dims) != par:
        raise b.ad.fail(op, "a product reduction of 'linalg.generic' needs an output map "
                            "that is a permutation of the parallel loops")
    init = list(op.operands)[n_in + j]
    et = element_type(init.type)
    loop_t = ir.RankedTensorType.get(sizes, et)
    gen = _g_values(b, op, red, [j], [], [], [b.empty(loop_t)], [_identity(n)], [PAR] * n,
                    lambda bb, gs, ex, accs: [gs[0]])
    g = gen.results[0]
    order = out_dims + red_dims
    if order != list(range(n)):
        g = transpose(b, g, order)
    k = len(out_dims)
    lead = [sizes[d] for d in out_dims]
    r_sizes = [sizes[d] for d in red_dims]
    total = 1
    for z in r_sizes:
        total *= z
    groups = [[i] for i in range(k)] + [list(range(k, n))]
    a = _collapse(b, g, groups, lead + [total])
    init1 = _expand(b, init, [[i] for i in range(k - 1)] + [[k - 1, k]] if k else [],
                    lead + [1])
    if total == 0:
        e = a
        p = b.constant(ir.RankedTensorType.get(lead + [1], et), 1.0)
    else:
        e, p = _exclusive_products(b, a, init1)
    e = _expand(b, e, groups, lead + r_sizes)
    if order != list(range(n)):
        e = transpose(b, e, [order.index(d) for d in range(n)])
    p = _collapse(b, p, [[i] for i in range(k - 1)] + [[k - 1, k]] if k else [], lead)
    return e, p


def _special_aux(b: Builder, op: ir.Operation, red: dict) -> tuple[dict, dict]:
    maxes = [j for j in red if red[j][2] in ("max", "min")]
    aux_max = _max_aux(b, op, red, maxes) if maxes else {}
    aux_mul = {j: _mul_aux(b, op, red, j) for j in red if red[j][2] == "mul"}
    return aux_max, aux_mul


def _weight(bb: Builder, kind: str, g: ir.Value, y: ir.Value | None, w: ir.Value | None
            ) -> ir.Value | None:
    """The scalar weight W(d) of a loop point (None: 1)."""
    if kind == "add":
        return None
    if kind == "mul":
        return w
    return bb.select(bb.cmpf("oeq", g, y), w, bb.zeros_like(w))


def _generic_jvp_weighted(b: Builder, op: ir.Operation, ts: list, red: dict) -> list:
    """Forward mode of a generic with product or max/min reductions: one more
    generic summing W(d) * dg(d) over the loops (see the module docstring)."""
    ad = b.ad
    n_in = _n_ins(op)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = _maps(op)
    iters = _iters(op)
    args = list(op.regions[0].blocks[0].arguments)
    yielded = list(list(op.regions[0].blocks[0].operations)[-1].operands)
    aux_max, aux_mul = _special_aux(b, op, red)
    act_in = [i for i in range(n_in) if ts[i] is not None]
    fl_out = [j for j in range(n_out) if is_float(outputs[j].type)]
    ins = inputs + [ts[i] for i in act_in]
    in_maps = maps[:n_in] + [maps[i] for i in act_in]
    extra: dict[int, tuple[int, int]] = {}
    for j in fl_out:
        if j in aux_max:
            extra[j] = (len(ins), len(ins) + 1)
            ins += [op.results[j], aux_max[j][0]]
            in_maps += [maps[n_in + j]] * 2
        elif j in aux_mul:
            extra[j] = (-1, len(ins))
            ins.append(aux_mul[j][0])
            in_maps.append(_identity(maps[0].n_dims))
    inits = []
    for j in fl_out:
        t0 = ts[n_in + j]
        if j not in red or t0 is None:
            inits.append(b.zeros_like(outputs[j]))
        elif red[j][2] == "add":
            inits.append(t0)
        elif j in aux_max:
            inits.append(b.mulf(aux_max[j][1], t0))
        else:
            inits.append(b.mulf(aux_mul[j][1], t0))
    gen = make_generic(b, ins, inits, in_maps + [maps[n_in + j] for j in fl_out], iters)
    nb = gen.regions[0].blocks[0]
    nargs = list(nb.arguments)
    vmap = {args[i]: nargs[i] for i in range(n_in)}
    ip = ir.InsertionPoint(nb)
    _clone_body(op, ip, vmap, {red[j][0] for j in red})
    for pos, i in enumerate(act_in):
        ad.t[nargs[i]] = nargs[n_in + pos]
    term = linalg.YieldOp([nargs[len(ins) + k] for k in range(len(fl_out))], loc=op.location,
                          ip=ip)
    ad.run_block(nb)
    bb = Builder(ir.InsertionPoint(term), op.location, ad)
    vals = []
    for k, j in enumerate(fl_out):
        acc = nargs[len(ins) + k]
        if j not in red:
            y = vmap.get(yielded[j], yielded[j])
            vals.append(bb.materialize(ad.tangent(y), y))
            continue
        _, g_old, kind = red[j]
        g = vmap.get(g_old, g_old)
        tg = ad.tangent(g)
        if tg is None:
            vals.append(acc)
            continue
        w = None
        if j in extra:
            y_pos, w_pos = extra[j]
            w = _weight(bb, kind, g, nargs[y_pos] if y_pos >= 0 else None, nargs[w_pos])
        vals.append(bb.addf(acc, tg if w is None else bb.mulf(w, tg)))
    linalg.YieldOp(vals, loc=op.location, ip=ir.InsertionPoint(term))
    term.erase()
    out: list = [None] * n_out
    for k, j in enumerate(fl_out):
        out[j] = gen.results[k]
    return out


def _embedding(b: Builder, op: ir.Operation, m: ir.AffineMap, x: ir.Value
               ) -> tuple[list[int], list]:
    """For an input map that is not a projected permutation: the loop dims it
    uses (in order of first use) and per result (dim, stride, offset) or
    (None, 0, constant)."""
    parts = []
    dims: list[int] = []
    for e in m.results:
        lin = _linear(e)
        if lin is None or len(lin[0]) > 1:
            raise b.ad.fail(op, f"reverse mode of 'linalg.generic' does not support the "
                                f"indexing expression '{e}' (each index must be "
                                f"stride * dim + offset or a constant)")
        if not lin[0]:
            parts.append((None, 0, lin[1]))
            continue
        (d, s), = lin[0].items()
        parts.append((d, s, lin[1]))
        if d not in dims:
            dims.append(d)
    return dims, parts


def _embed(b: Builder, op: ir.Operation, s: ir.Value, dims: list[int], parts: list,
           sizes: list[int], x: ir.Value) -> ir.Value:
    """The cotangent of input `x` from `s` (indexed by `dims`): x[map(d)] gets s[d]."""
    et = element_type(x.type)
    rank = len(parts)
    t_shape = [sizes[d] if d is not None else 1 for d, _, _ in parts]
    first = {}
    for r, (d, _, _) in enumerate(parts):
        if d is not None and d not in first:
            first[d] = r
    exprs = []
    for d in dims:
        r = first[d]
        e = ir.AffineDimExpr.get(r)
        if parts[r][1] < 0:
            e = ir.AffineConstantExpr.get(sizes[d] - 1) - e
        exprs.append(e)
    in_map = ir.AffineMap.get(rank, 0, exprs)
    checks = [(r, first[d]) for r, (d, _, _) in enumerate(parts)
              if d is not None and first[d] != r]
    if in_map == _identity(rank) and not checks:
        t = s
    else:
        def body(bb, a):
            v = a[0]
            if not checks:
                return [v]
            idx_t = ir.IndexType.get()
            cond = None
            for r, r0 in checks:
                d = parts[r][0]

                def loop_dim(rr):
                    i = bb.create("linalg.index", [], [idx_t],
                                  {"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                             rr)}).result
                    if parts[rr][1] < 0:
                        i = bb.create("arith.subi", [bb.index(sizes[d] - 1), i],
                                      [idx_t]).result
                    return i

                eq = bb.create("arith.cmpi", [loop_dim(r), loop_dim(r0)],
                               [ir.IntegerType.get_signless(1)],
                               {"predicate": ir.IntegerAttr.get(
                                   ir.IntegerType.get_signless(64), 0)}).result
                cond = eq if cond is None else bb.create(
                    "arith.andi", [cond, eq], [eq.type]).result
            return [bb.select(cond, v, bb.zeros_like(v))]

        t = make_generic(b, [s], [b.empty(ir.RankedTensorType.get(t_shape, et))],
                         [in_map, _identity(rank)], [PAR] * rank, body).result
    offsets, strides = [], []
    for r, (d, st, c) in enumerate(parts):
        if d is None:
            offsets.append(c)
            strides.append(1)
        else:
            offsets.append(c if st > 0 else c + st * (sizes[d] - 1))
            strides.append(abs(st))
    if offsets == [0] * rank and strides == [1] * rank and t_shape == list(x.type.shape):
        return t
    return _insert(b, t, b.zeros_like(x), offsets, strides)


def _generic_vjp(b: Builder, op: ir.Operation, cts: list) -> list:
    from ..ad_support import captured_values

    ad = b.ad
    n_in = _n_ins(op)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = _maps(op)
    iters = _iters(op)
    n_loops = maps[0].n_dims
    has_red = RED in iters
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body_ops = list(block.operations)[:-1]
    yielded = list(list(block.operations)[-1].operands)
    for o in body_ops:
        if len(o.operation.regions):
            raise ad.fail(o, "ops with regions inside a 'linalg.generic' body are not supported")
    red = _reductions(b, op, n_in) if has_red else {}
    fl_out = [j for j in range(n_out) if is_float(outputs[j].type)]
    ct_vals = {j: b.materialize(cts[j], op.results[j]) for j in fl_out}
    aux_max, aux_mul = _special_aux(b, op, red)

    # What gets a cotangent: active inputs, active inits (read by the body) and
    # active scalars captured from above.
    targets: list[tuple[str, object]] = []
    for i in range(n_in):
        if ad.is_active(inputs[i]) and is_float(inputs[i].type):
            targets.append(("in", i))
    if not has_red:
        for j in range(n_out):
            if ad.is_active(outputs[j]) and list(args[n_in + j].uses):
                targets.append(("out", j))
    for v in captured_values(op):
        if ad.is_active(v):
            if isinstance(v.type, ir.ShapedType):
                raise ad.fail(op, "a 'linalg.generic' body uses an active tensor from above")
            targets.append(("cap", v))

    result: list = [None] * (n_in + n_out)
    for kind, what in targets:
        ins = list(inputs)
        in_maps = list(maps[:n_in])
        out_pos = {}
        if not has_red:
            # A parallel generic that reads its init treats it as one more input.
            for j in range(n_out):
                if list(args[n_in + j].uses):
                    out_pos[j] = len(ins)
                    ins.append(outputs[j])
                    in_maps.append(maps[n_in + j])
        ct_pos = {}
        for j in fl_out:
            ct_pos[j] = len(ins)
            ins.append(ct_vals[j])
            in_maps.append(maps[n_in + j])
        res_pos = {}
        for j in red:
            res_pos[j] = len(ins)
            ins.append(op.results[j])
            in_maps.append(maps[n_in + j])
        # The weights of max/min (1/count, read per output element) and of
        # products (the other factors' product, per loop point).
        w_pos = {}
        for j in fl_out:
            if j in aux_max:
                w_pos[j] = len(ins)
                ins.append(aux_max[j][0])
                in_maps.append(maps[n_in + j])
            elif j in aux_mul:
                w_pos[j] = len(ins)
                ins.append(aux_mul[j][0])
                in_maps.append(_identity(n_loops))
        # A parallel result computed last by an op whose derivative is written
        # with its result (exp, tanh, sqrt...) is read back, not recomputed.
        reuse_pos = {}
        if not has_red:
            for j in fl_out:
                y = yielded[j]
                if isinstance(y, ir.OpResult) and op_name(y.owner) in USES_RESULT:
                    reuse_pos[j] = len(ins)
                    ins.append(op.results[j])
                    in_maps.append(maps[n_in + j])
        embed = None
        if kind == "in":
            tmap = maps[what]
            # Accumulate into the cotangent gathered so far (in place after
            # bufferization, which keeps loop-carried cotangents in their buffers).
            cur = ad.ct.get(inputs[what])
            init = cur if cur is not None else b.zeros_like(inputs[what])
            tdims = _map_dims(tmap)
            if tdims is None or len(set(tdims)) != len(tdims):
                # Gather over the loop dims the map uses, then embed (see
                # the module docstring).
                e_dims, parts = _embedding(b, op, tmap, inputs[what])
                sizes = _loop_sizes(b, op)
                embed = (e_dims, parts, sizes, cur)
                tmap = _proj(n_loops, e_dims)
                cur = None
                init = b.constant(ir.RankedTensorType.get(
                    [sizes[d] for d in e_dims], element_type(inputs[what].type)), 0.0)
        elif kind == "out":
            tmap = maps[n_in + what]
            init = b.zeros_like(outputs[what])
        else:
            tmap = ir.AffineMap.get(n_loops, 0, [])
            init = b.constant(ir.RankedTensorType.get([], what.type), 0.0)
        dims = _map_dims(tmap)
        if dims is None or len(set(dims)) != len(dims):
            raise ad.fail(op, "reverse mode needs projected-permutation indexing maps")
        new_iters = [PAR if d in dims else RED for d in range(n_loops)]
        gen = make_generic(b, ins, [init], in_maps + [tmap], new_iters)
        nb = gen.regions[0].blocks[0]
        nargs = list(nb.arguments)
        vmap: dict[ir.Value, ir.Value] = {}
        for i in range(n_in):
            vmap[args[i]] = nargs[i]
        for j in range(n_out):
            if j in red:
                vmap[args[n_in + j]] = nargs[res_pos[j]]
            elif j in out_pos:
                vmap[args[n_in + j]] = nargs[out_pos[j]]
        bip = ir.InsertionPoint(nb)
        clones = []
        skip = {red[j][0] for j in red}
        for o in body_ops:
            c = o.operation.clone(ip=bip)
            for k, v in enumerate(list(c.operands)):
                if v in vmap:
                    c.operands[k] = vmap[v]
            for r_old, r_new in zip(o.results, c.results):
                vmap[r_old] = r_new
            if o.operation not in skip:
                clones.append(c)
        if kind == "in":
            seed = nargs[what]
        elif kind == "out":
            seed = nargs[out_pos[what]]
        else:
            seed = what
        sub = ad.sub({seed})
        sub.propagate(clones)
        bb = Builder(bip, op.location, sub)
        for j in fl_out:
            ctj = nargs[ct_pos[j]]
            if j in red:
                _, g, rkind = red[j]
                gv = vmap.get(g, g)
                w = _weight(bb, rkind, gv, nargs[res_pos[j]],
                            nargs[w_pos[j]] if j in w_pos else None)
                sub.add_ct(bb, gv, ctj if w is None else bb.mulf(ctj, w))
            else:
                y = vmap.get(yielded[j], yielded[j])
                sub.add_ct(bb, y, ctj)
        sub.sweep(clones, bip)
        for j, pos in reuse_pos.items():
            vmap[yielded[j]].replace_all_uses_with(nargs[pos])
        contrib = sub.ct.get(seed)
        acc = nargs[-1]
        zero_init = kind == "out" or (kind == "in" and cur is None)
        if contrib is not None and zero_init and RED not in new_iters:
            # Nothing to accumulate into: the contribution is the cotangent
            # (no `0 + x` pass over memory; a -0 cotangent now stays -0).
            linalg.YieldOp([contrib], loc=op.location, ip=bip)
            before = Builder(ir.InsertionPoint(gen.operation), op.location, ad)
            gen.operation.operands[len(gen.operation.operands) - 1] = before.empty_like(init)
        else:
            linalg.YieldOp([acc if contrib is None else bb.addf(acc, contrib)],
                           loc=op.location, ip=bip)
        # Recomputed primal ops nothing reads (the ones a read-back result
        # replaced, and what only they used) go, so their inputs can too.
        for o in reversed(list(nb.operations)[:-1]):
            if not any(True for r in o.results for _ in r.uses):
                o.operation.erase()
        g_res = _drop_unused_inputs(b, gen).results[0]
        if embed is not None:
            e_dims, parts, sizes, prev = embed
            g_res = _embed(b, op, g_res, e_dims, parts, sizes, inputs[what])
            if prev is not None:
                g_res = b.accumulate(prev, g_res)
        if kind == "in":
            ad.ct[inputs[what]] = g_res
        elif kind == "out":
            result[n_in + what] = g_res
        else:
            ad.add_ct(b, what, b.create("tensor.extract", [g_res], [what.type]).result)
    # Cotangents of reduction inits: the output's times the init's weight.
    for j, (_, _, rkind) in red.items():
        if not ad.is_active(outputs[j]):
            continue
        if rkind == "add":
            result[n_in + j] = ct_vals[j]
        elif j in aux_max:
            result[n_in + j] = b.mulf(ct_vals[j], aux_max[j][1])
        else:
            result[n_in + j] = b.mulf(ct_vals[j], aux_mul[j][1])
    return result


defjvp_rule("linalg.generic", _generic_jvp)
defvjp("linalg.generic", _generic_vjp)


# ----------------------------------------------------------------------------
# Ops that are generics in disguise: map, reduce, elementwise named ops
# ----------------------------------------------------------------------------

ELEMENTWISE_NAMED = (
    "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.exp", "linalg.log",
    "linalg.abs", "linalg.ceil", "linalg.floor", "linalg.negf", "linalg.max", "linalg.min",
    "linalg.powf", "linalg.sqrt", "linalg.rsqrt", "linalg.square", "linalg.tanh", "linalg.erf",
    "linalg.reciprocal", "linalg.map", "linalg.elementwise",
)


def _structure(op: ir.Operation) -> tuple[list[ir.AffineMap], list[str]]:
    name = op_name(op)
    operands = list(op.operands)
    if name == "linalg.reduce":
        rank = operands[0].type.rank
        red = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        n_in = len(operands) // 2
        keep = [d for d in range(rank) if d not in red]
        maps = [_identity(rank)] * n_in + [_proj(rank, keep)] * n_in
        return maps, [RED if d in red else PAR for d in range(rank)]
    if "indexing_maps" in op.attributes:
        maps = _maps(op)
        return maps, [PAR] * maps[0].n_dims
    rank = operands[-1].type.rank
    return [_identity(rank)] * len(operands), [PAR] * rank


def to_generic(b: Builder, op: ir.Operation) -> ir.Operation:
    """Rewrite a map/reduce/elementwise named op into an equivalent linalg.generic."""
    maps, iters = _structure(op)
    operands = list(op.operands)
    n_in = _n_ins(op) if "operandSegmentSizes" in op.attributes else (
        len(operands) // 2 if op_name(op) == "linalg.reduce" else len(operands) - 1)
    if not op.regions or not op.regions[0].blocks:
        raise b.ad.fail(op, f"cannot differentiate '{op_name(op)}' without a body")
    gen = make_generic(b, operands[:n_in], operands[n_in:], maps, iters)
    block = op.regions[0].blocks[0]
    _move_body(block, gen.regions[0].blocks[0], list(gen.regions[0].blocks[0].arguments))
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


# ----------------------------------------------------------------------------
# Data movement: fill, copy, transpose, broadcast
# ----------------------------------------------------------------------------


def _fill_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    return [b.fill(list(op.operands)[1], ts[0])]


def _fill_vjp(b, op, cts):
    return [sum_all(b, cts[0]), None]


def _copy_jvp(b, op, ts):
    return [ts[0]]


def _copy_vjp(b, op, cts):
    return [cts[0], None]


def _perm(op) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def _transpose_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    x, init = list(op.operands)
    with b.loc, b.ip:
        return [_v(linalg.transpose(ts[0], outs=[init], permutation=_perm(op)))]


def transpose(b: Builder, x: ir.Value, perm: Sequence[int]) -> ir.Value:
    t = x.type
    shape = [t.shape[p] for p in perm]
    init = b.empty(ir.RankedTensorType.get(shape, t.element_type))
    with b.loc, b.ip:
        return _v(linalg.transpose(x, outs=[init], permutation=list(perm)))


def _transpose_vjp(b, op, cts):
    perm = _perm(op)
    inv = [perm.index(i) for i in range(len(perm))]
    return [transpose(b, cts[0], inv), None]


def _bcast_dims(op) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))


def _broadcast_jvp(b, op, ts):
    if ts[0] is None:
        return [None]
    x, init = list(op.operands)
    with b.loc, b.ip:
        return [_v(linalg.broadcast(ts[0], outs=[init], dimensions=_bcast_dims(op)))]


def _broadcast_vjp(b, op, cts):
    added = _bcast_dims(op)
    rank = cts[0].type.rank
    keep = [d for d in range(rank) if d not in added]
    return [sum_to(b, cts[0], keep), None]


defjvp_rule("linalg.fill", _fill_jvp)
defvjp("linalg.fill", _fill_vjp)
defjvp_rule("linalg.copy", _copy_jvp)
defvjp("linalg.copy", _copy_vjp)
defjvp_rule("linalg.transpose", _transpose_jvp)
defvjp("linalg.transpose", _transpose_vjp)
defjvp_rule("linalg.broadcast", _broadcast_jvp)
defvjp("linalg.broadcast", _broadcast_vjp)


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
        return _v(CONTRACTIONS[name](x, y, outs=[init]))


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
    return make_generic(b, [u, v], [init], [_proj(2, [0]), _proj(2, [1]), _identity(2)],
                        [PAR, PAR], lambda bb, a: [bb.mulf(a[0], a[1])]).result


def _scale_tensor(b: Builder, s: ir.Value, v: ir.Value) -> ir.Value:
    """out = s * v for a rank-0 tensor s."""
    n = v.type.rank
    init = b.empty_like(v)
    return make_generic(b, [s, v], [init], [ir.AffineMap.get(n, 0, []), _identity(n),
                                            _identity(n)], [PAR] * n,
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
