"""Reductions inside a `linalg.generic`: their classification and derivative weights.

A generic with reduction loops whose body reads its output as an
accumulator is supported for `acc + g`, `acc * g` and `max/min(acc, g)`.
Each is linearized as `dout = sum_d W(d) dg(d) + w_init dinit` over the loop
points d: W = 1 for sums; for max/min (JAX's convention at ties) W is
1/count at the loop points equal to the result (the init counts as one more
element when it ties, unless it is the identity +-inf) and 0 elsewhere, so a
tied cotangent is split evenly and the tangent is the mean of the tied
tangents (a NaN result has NaN weights: its derivative is NaN, as the
difference quotient's); for products W(d) is the product of every other factor (init
included), computed without division by a pairwise tree (exact with any
number of zeros). Forward mode emits the same weighted sum (`weighted_jvp`),
a plain `addf` reduction, so every order composes; reverse mode
(`linalg_generic.py`) multiplies each loop point's cotangent by W.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import linalg

from ..ad_support import Builder, element_type, is_float, op_name
from .structured import (
    PAR,
    RED,
    clone_body,
    collapse,
    expand,
    extract_slice,
    identity_map,
    indexing_maps,
    insert_slice,
    iterators,
    loop_sizes,
    make_generic,
    map_dims,
    num_inputs,
    transpose,
)

REDUCERS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
            "arith.minnumf")
#: The kind of a reduction's combiner.
REDUCE_KIND = {"arith.addf": "add", "arith.mulf": "mul", "arith.maximumf": "max",
               "arith.maxnumf": "max", "arith.minimumf": "min", "arith.minnumf": "min"}


def classify_reductions(op: ir.Operation, n_in: int) -> dict[int, tuple] | None:
    """`reductions` without the diagnostic: None when a body is not of that form."""
    class _Quiet:
        class ad:
            @staticmethod
            def fail(*a):
                return ValueError()
    try:
        return reductions(_Quiet, op, n_in)  # type: ignore[arg-type]
    except ValueError:
        return None


def reductions(b: Builder, op: ir.Operation, n_in: int) -> dict[int, tuple]:
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
            cur = insert_slice(b, cur, pad, [0] * (k + 1), [1] * (k + 1))
        h = (n + 1) // 2
        ev = extract_slice(b, cur, [0] * (k + 1), lead + [h], ones1 + [2])
        od = extract_slice(b, cur, [0] * k + [1], lead + [h], ones1 + [2])
        levels.append((n, h, ev, od))
        cur = b.mulf(ev, od)
    prod_all = cur
    out = init
    for n, h, ev, od in reversed(levels):
        o_ev = b.mulf(out, od)
        o_od = b.mulf(out, ev)
        full = b.empty(ir.RankedTensorType.get(lead + [2 * h], element_type(a.type)))
        full = insert_slice(b, o_ev, full, [0] * (k + 1), ones1 + [2])
        full = insert_slice(b, o_od, full, [0] * k + [1], ones1 + [2])
        out = full if 2 * h == n else extract_slice(b, full, [0] * (k + 1), lead + [n],
                                                     [1] * (k + 1))
    return out, prod_all


def _g_values(b: Builder, op: ir.Operation, red: dict, js: Sequence[int], extra_ins,
              extra_maps, inits, out_maps, iters, body):
    """A generic over `op`'s loops reading `op`'s inputs and `extra_ins`, whose
    body recomputes each reduced value g_j (j in js) and yields
    `body(bb, gs, extra_args, accs)`."""
    n_in = num_inputs(op)
    inputs = list(op.operands)[:n_in]
    maps = indexing_maps(op)
    gen = make_generic(b, inputs + list(extra_ins), list(inits),
                       maps[:n_in] + list(extra_maps) + list(out_maps), iters)
    nb = gen.regions[0].blocks[0]
    nargs = list(nb.arguments)
    args = list(op.regions[0].blocks[0].arguments)
    vmap = {args[i]: nargs[i] for i in range(n_in)}
    ip = ir.InsertionPoint(nb)
    clone_body(op, ip, vmap, {red[j][0] for j in red})
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
    n_in = num_inputs(op)
    maps = indexing_maps(op)
    outputs = list(op.operands)[n_in:]
    ys = [op.results[j] for j in js]

    def body(bb, gs, ys_, accs):
        out = []
        for g, y, acc in zip(gs, ys_, accs):
            one, zero = bb.constant(g.type, 1.0), bb.constant(g.type, 0.0)
            out.append(bb.addf(acc, bb.select(bb.cmpf("oeq", g, y), one, zero)))
        return out

    gen = _g_values(b, op, red, js, ys, [maps[n_in + j] for j in js],
                    [b.zeros_like(y) for y in ys], [maps[n_in + j] for j in js], iterators(op),
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
        # A NaN result (a NaN among the points) ties with no point: its weight is
        # NaN, so the derivative is NaN as the difference quotient's is (and
        # JAX's), not a silent 0.
        inv = b.select(b.cmpf("uno", y, y), y, b.recip(b.addf(c, tie)))
        aux[j] = (inv, b.mulf(tie, inv))
    return aux


def _mul_aux(b: Builder, op: ir.Operation, red: dict, j: int) -> tuple[ir.Value, ir.Value]:
    """For a product output j: (E, P): E over the loop space (in loop order) is
    init times the product of every other factor of its output element; P (the
    output's shape) is the product of all factors but the init."""
    n_in = num_inputs(op)
    maps = indexing_maps(op)
    iters = iterators(op)
    n = maps[0].n_dims
    sizes = loop_sizes(b, op)
    out_dims = map_dims(maps[n_in + j])
    par = [d for d in range(n) if iters[d] == PAR]
    red_dims = [d for d in range(n) if iters[d] == RED]
    if out_dims is None or sorted(out_dims) != par:
        raise b.ad.fail(op, "a product reduction of 'linalg.generic' needs an output map "
                            "that is a permutation of the parallel loops")
    init = list(op.operands)[n_in + j]
    et = element_type(init.type)
    loop_t = ir.RankedTensorType.get(sizes, et)
    gen = _g_values(b, op, red, [j], [], [], [b.empty(loop_t)], [identity_map(n)], [PAR] * n,
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
    a = collapse(b, g, groups, lead + [total])
    init1 = expand(b, init, [[i] for i in range(k - 1)] + [[k - 1, k]] if k else [],
                    lead + [1])
    if total == 0:
        e = a
        p = b.constant(ir.RankedTensorType.get(lead + [1], et), 1.0)
    else:
        e, p = _exclusive_products(b, a, init1)
    e = expand(b, e, groups, lead + r_sizes)
    if order != list(range(n)):
        e = transpose(b, e, [order.index(d) for d in range(n)])
    p = collapse(b, p, [[i] for i in range(k - 1)] + [[k - 1, k]] if k else [], lead)
    return e, p


def special_aux(b: Builder, op: ir.Operation, red: dict) -> tuple[dict, dict]:
    maxes = [j for j in red if red[j][2] in ("max", "min")]
    aux_max = _max_aux(b, op, red, maxes) if maxes else {}
    aux_mul = {j: _mul_aux(b, op, red, j) for j in red if red[j][2] == "mul"}
    return aux_max, aux_mul


def reduction_weight(bb: Builder, kind: str, g: ir.Value, y: ir.Value | None, w: ir.Value | None
            ) -> ir.Value | None:
    """The scalar weight W(d) of a loop point (None: 1)."""
    if kind == "add":
        return None
    if kind == "mul":
        return w
    # every point carries the NaN weight of a NaN result (see _max_aux)
    return bb.select(bb.cmpf("uno", y, y), w,
                     bb.select(bb.cmpf("oeq", g, y), w, bb.zeros_like(w)))


def weighted_jvp(b: Builder, op: ir.Operation, ts: list, red: dict) -> list:
    """Forward mode of a generic with product or max/min reductions: one more
    generic summing W(d) * dg(d) over the loops (see the module docstring)."""
    ad = b.ad
    n_in = num_inputs(op)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = indexing_maps(op)
    iters = iterators(op)
    args = list(op.regions[0].blocks[0].arguments)
    yielded = list(list(op.regions[0].blocks[0].operations)[-1].operands)
    aux_max, aux_mul = special_aux(b, op, red)
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
            in_maps.append(identity_map(maps[0].n_dims))
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
    clone_body(op, ip, vmap, {red[j][0] for j in red})
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
            w = reduction_weight(bb, kind, g, nargs[y_pos] if y_pos >= 0 else None, nargs[w_pos])
        vals.append(bb.addf(acc, tg if w is None else bb.mulf(w, tg)))
    linalg.YieldOp(vals, loc=op.location, ip=ir.InsertionPoint(term))
    term.erase()
    out: list = [None] * n_out
    for k, j in enumerate(fl_out):
        out[j] = gen.results[k]
    return out
