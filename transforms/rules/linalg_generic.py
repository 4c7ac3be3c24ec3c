"""Rules of `linalg.generic`, the workhorse of the linalg rules.

* JVP: one generic with the tangent inputs and tangent outputs appended,
  whose body is the forward-mode derivative of the original body (the same
  scalar rules as at function level).
* VJP w.r.t. input i: a generic over the same iteration space whose output
  has input i's indexing map (dims of that map parallel, the others
  reductions, accumulating), and whose body recomputes the primal body and
  runs the scalar reverse rules over it, seeded with the output cotangents.
  Where the body yields the result of an op whose rule is written with its
  own result (`defjvp(..., uses_result=True)`: exp, tanh, x / y ...), the
  primal result is read back instead of recomputing the op.
  Reductions (the body reads its output as an accumulator): see
  `linalg_reductions.py`.
* Indexing maps that are not projected permutations (flips `n-1-i`, repeated
  dims `(i, i)`, strides and offsets `s*i + c`, constants): the cotangent is
  first gathered over the loop dims the map uses, then embedded into the
  operand's shape by a generic over the embedding's whole index space
  (zeros off a diagonal) and a strided `tensor.insert_slice`; no generic
  ever writes through a map that misses some of its output's elements.
* Batching: one more parallel loop (`batching.defstructured`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg, scf

from ..ad_support import (
    Builder,
    append_tangents,
    captured_values,
    clone_remapped,
    element_type,
    is_float,
    is_inside,
    op_name,
    tangent_results,
)
from .batching import defstructured
from .linalg_reductions import (
    classify_reductions,
    reduction_weight,
    reductions,
    special_aux,
    weighted_jvp,
)
from .regions import marker_op, move_ops, sweep_recomputed
from .registry import USES_RESULT, defjvp_rule, defvjp
from .structured import (
    PAR,
    RED,
    identity_map,
    indexing_maps,
    insert_slice,
    iterators,
    linear_form,
    loop_sizes,
    make_generic,
    map_dims,
    num_inputs,
    projection,
)


def _generic_jvp(b: Builder, op: ir.Operation, ts: list) -> list:
    n_in = num_inputs(op)
    if RED in iterators(op):
        red = classify_reductions(op, n_in)
        if red and any(k != "add" for _, _, k in red.values()):
            return weighted_jvp(b, op, ts, red)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = indexing_maps(op)
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
    gen = make_generic(b, new_ins, new_outs, new_maps, iterators(op))
    nb = gen.regions[0].blocks[0]
    nargs = list(nb.arguments)
    k_out = n_in + len(act_in)
    arg_map = nargs[:n_in] + nargs[k_out : k_out + n_out]
    move_ops(block, nb, arg_map)
    ad = b.ad
    for pos, i in enumerate(act_in):
        ad.t[nargs[i]] = nargs[n_in + pos]
    for pos, j in enumerate(fl_out):
        ad.t[nargs[k_out + j]] = nargs[k_out + n_out + pos]
    ad.run_block(nb)
    append_tangents(ad, list(nb.operations)[-1], fl_out,
                    lambda vals, loc, ip: linalg.YieldOp(vals, loc=loc, ip=ip))
    return tangent_results(ad, op, gen.results, n_out, fl_out)

def _drop_unused_inputs(b: Builder, gen: ir.Operation) -> ir.Operation:
    """`gen` without the inputs its body does not read (a reverse-mode generic
    lists every primal input; an unused one would still be kept alive as a
    residual, and taped per iteration inside a loop). Inputs whose maps alone
    bound a loop dimension stay."""
    n_in = num_inputs(gen)
    block = gen.regions[0].blocks[0]
    args = list(block.arguments)
    unused = {i for i in range(n_in) if not any(True for _ in args[i].uses)}
    if not unused:
        return gen
    maps = indexing_maps(gen)
    keep = [i for i in range(len(maps)) if i not in unused]
    bound = {d for i in keep for d in (map_dims(maps[i]) or [])}
    if any(map_dims(maps[i]) is None for i in keep) or len(bound) < maps[0].n_dims:
        return gen
    operands = list(gen.operands)
    new = make_generic(Builder(ir.InsertionPoint(gen), gen.location, b.ad),
                       [operands[i] for i in keep if i < n_in], operands[n_in:],
                       [maps[i] for i in keep], iterators(gen))
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


def _embedding(b: Builder, op: ir.Operation, m: ir.AffineMap, x: ir.Value
               ) -> tuple[list[int], list]:
    """For an input map that is not a projected permutation: the loop dims it
    uses (in order of first use) and per result (dim, stride, offset) or
    (None, 0, constant)."""
    parts = []
    dims: list[int] = []
    for e in m.results:
        lin = linear_form(e)
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
    if in_map == identity_map(rank) and not checks:
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
                         [in_map, identity_map(rank)], [PAR] * rank, body).result
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
    return insert_slice(b, t, b.zeros_like(x), offsets, strides)


def _generic_vjp(b: Builder, op: ir.Operation, cts: list) -> list:

    ad = b.ad
    n_in = num_inputs(op)
    operands = list(op.operands)
    inputs, outputs = operands[:n_in], operands[n_in:]
    n_out = len(outputs)
    maps = indexing_maps(op)
    iters = iterators(op)
    n_loops = maps[0].n_dims
    has_red = RED in iters
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body_ops = list(block.operations)[:-1]
    yielded = list(list(block.operations)[-1].operands)
    for o in body_ops:
        if len(o.operation.regions):
            raise ad.fail(o, "ops with regions inside a 'linalg.generic' body are not supported")
    red = reductions(b, op, n_in) if has_red else {}
    fl_out = [j for j in range(n_out) if is_float(outputs[j].type)]
    ct_vals = {j: b.materialize(cts[j], op.results[j]) for j in fl_out}
    aux_max, aux_mul = special_aux(b, op, red)

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
    gathered = []
    for v in captured_values(op):
        if ad.is_active(v):
            if isinstance(v.type, ir.ShapedType):
                if not _only_extracted(op, v) or has_red:
                    raise ad.fail(op, "a 'linalg.generic' body uses an active tensor from "
                                      "above (other than by 'tensor.extract' in a parallel "
                                      "generic: a gather)")
                gathered.append(v)
                continue
            targets.append(("cap", v))
    if gathered:
        _gather_vjp(b, op, ct_vals, gathered)

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
                in_maps.append(identity_map(n_loops))
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
            tdims = map_dims(tmap)
            if tdims is None or len(set(tdims)) != len(tdims):
                # Gather over the loop dims the map uses, then embed (see
                # the module docstring).
                e_dims, parts = _embedding(b, op, tmap, inputs[what])
                sizes = loop_sizes(b, op)
                embed = (e_dims, parts, sizes, cur)
                tmap = projection(n_loops, e_dims)
                cur = None
                init = b.constant(ir.RankedTensorType.get(
                    [sizes[d] for d in e_dims], element_type(inputs[what].type)), 0.0)
        elif kind == "out":
            tmap = maps[n_in + what]
            init = b.zeros_like(outputs[what])
        else:
            tmap = ir.AffineMap.get(n_loops, 0, [])
            init = b.constant(ir.RankedTensorType.get([], what.type), 0.0)
        dims = map_dims(tmap)
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
            c = clone_remapped(o, bip, vmap)
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
                w = reduction_weight(bb, rkind, gv, nargs[res_pos[j]],
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


def _only_extracted(op: ir.Operation, v: ir.Value) -> bool:
    """Whether the body reads captured tensor `v` only with `tensor.extract`
    directly in its block (a gather)."""
    block = op.regions[0].blocks[0]
    return all(u.owner.operation.name == "tensor.extract" and u.operand_number == 0
               and u.owner.operation.block == block
               for u in v.uses if is_inside(u.owner.operation, op.operation))


def _gather_vjp(b: Builder, op: ir.Operation, ct_vals: dict, gathered: list) -> None:
    """Cotangents of captured tensors a parallel generic reads with
    `tensor.extract` (a gather): one `scf.for` over the iteration space (its
    points in row-major order) that recomputes the body at each point and adds
    the cotangent of every extracted element at its index (a scatter-add:
    duplicate indices accumulate)."""
    ad = b.ad
    n_in = num_inputs(op)
    operands = list(op.operands)
    maps = indexing_maps(op)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body = list(block.operations)
    yielded = list(body[-1].operands)
    sizes = loop_sizes(b, op)
    idx_t = ir.IndexType.get()
    dims_of = []
    for m in maps:
        d = map_dims(m)
        if d is None:
            raise ad.fail(op, "reverse mode of a gather needs projected-permutation "
                              "indexing maps")
        dims_of.append(d)
    acc = [ad.ct.pop(v, None) or b.zeros_like(v) for v in gathered]
    total = 1
    for z in sizes:
        total *= z
    loop = scf.ForOp(b.index(0), b.index(total), b.index(1), acc, loc=b.loc, ip=b.ip)
    ip = ir.InsertionPoint(loop.body)
    bb = Builder(ip, b.loc, ad)
    rem = loop.induction_variable
    ivs: list = [None] * len(sizes)
    for k in reversed(range(len(sizes))):
        if k:
            ivs[k] = bb.create("arith.remui", [rem, bb.index(sizes[k])], [idx_t]).result
            rem = bb.create("arith.divui", [rem, bb.index(sizes[k])], [idx_t]).result
        else:
            ivs[k] = rem
    vmap: dict = {}
    for i, a in enumerate(args):
        if not list(a.uses):
            continue
        vmap[a] = bb.create("tensor.extract", [operands[i], *[ivs[d] for d in dims_of[i]]],
                            [a.type]).result
    cts = []
    for j, y in enumerate(yielded):
        if j in ct_vals:
            cts.append(bb.create("tensor.extract",
                                 [ct_vals[j], *[ivs[d] for d in dims_of[n_in + j]]],
                                 [y.type]).result)
        else:
            cts.append(None)
    marker = marker_op(bb)
    for o in body[:-1]:
        if o.operation.name == "linalg.index":
            dim = ir.IntegerAttr(o.attributes["dim"]).value
            vmap[o.results[0]] = ivs[dim]
            continue
        clone_remapped(o, ip, vmap)
    outs = [vmap.get(y, y) for y in yielded]
    reads = [o for o in bb.ip.block.operations if o.operation.name == "tensor.extract"
             and o.operands[0] in gathered]
    sub = sweep_recomputed(ad, bb, marker, outs, cts, {o.results[0] for o in reads})
    sb = Builder(ip, b.loc, sub)
    new_acc = []
    for a, v in zip(list(loop.inner_iter_args), gathered):
        for o in reads:
            c = sub.ct.get(o.results[0])
            if o.operands[0] == v and c is not None:
                idx = list(o.operands)[1:]
                old = sb.create("tensor.extract", [a, *idx], [c.type]).result
                a = sb.create("tensor.insert", [sb.addf(old, c), a, *idx], [a.type]).result
        new_acc.append(a)
    scf.YieldOp(new_acc, loc=b.loc, ip=ip)
    for v, g in zip(gathered, list(loop.results)):
        ad.add_ct(b, v, g)


defjvp_rule("linalg.generic", _generic_jvp)
defvjp("linalg.generic", _generic_vjp)
defstructured("linalg.generic")
