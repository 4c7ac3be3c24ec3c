"""Rewrites of reductions: generalized for fusion, summed before contracting, siblings merged.

`GeneralizeReductions` turns `linalg.reduce` into generics that fusion
understands; `SumBeforeContracting` moves a sum over a contraction's result
onto the operand that has the summed dim; `MergeSiblingReductions` computes
outer reductions over one operand in one pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from ..ad_support import captured_values, defining_op, post_order_ops
from ..passes import Pass
from .classify import classify, contraction_maps, is_mul_add, map_dims
from .fusion import all_parallel
from .schedules import rows_stay_in_registers
from .script import apply_quietly, named_sequence


@dataclasses.dataclass(frozen=True)
class GeneralizeReductions(Pass):
    """`linalg.reduce` -> `linalg.generic` (before elementwise fusion), so the
    elementwise ops that produce a reduction's input fuse into it.

    Upstream elementwise fusion only fuses into generics: the weight decay
    sum(w * w) computed w * w into a temporary and summed it in a second
    pass. Fused, it is one pass of FMAs (measurements: benchmarks/notes/cpu-schedules.md).
    """

    name = "autodiff-generalize-reductions"
    summary = "Rewrite linalg.reduce as linalg.generic"

    strict: bool = dataclasses.field(default=False, metadata={
        "help": "raise when the transform script fails (else keep the unscheduled ops)"})

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            apply_quietly(module, named_sequence([
                ("%r = transform.structured.match ops{[\"linalg.reduce\"]} in %root "
                 ": (!transform.any_op) -> !transform.any_op"),
                ("%g = transform.structured.generalize %r "
                 ": (!transform.any_op) -> !transform.any_op"),
            ]), self.strict)


# -- sums of contractions ---------------------------------------------------------------------
#
# Reverse mode writes a contraction's input cotangent in full and leaves it
# to the consumer to reduce it: GMM's d(means) is sum_n L_k^T dqx[k, n],
# computed as a [50, 1000, 20] batched matvec (40 MFLOP, 8 MB written and
# read back) and then summed over n. Summing is linear, so the sum can move
# to the operand that has the summed dim: L_k^T (sum_n dqx[k, n]) costs one
# pass over dqx and a [50, 20, 20] contraction.


def _generic_maps(op: ir.Operation) -> list[list[int]] | None:
    """The loop dims each operand of generic `op` reads, or None unless every
    map is a projected permutation."""
    return map_dims(contraction_maps(op))


def _linear_sign(op: ir.Operation, arg: ir.Value) -> int | None:
    """If generic `op`'s body yields `out + s * arg + h` through addf/subf/negf
    only (h not reading `arg` or the init `out`), the sign s (+1 or -1)."""
    block = op.regions[0].blocks[0]
    out = block.arguments[len(block.arguments) - 1]
    coeff: dict[ir.Value, tuple[int, int]] = {arg: (1, 0), out: (0, 1)}
    for body_op in block.operations:
        body_op = body_op.operation
        terms = [coeff.get(v) for v in body_op.operands]
        if all(t is None for t in terms):
            continue
        if body_op.name == "linalg.yield":
            if len(terms) != 1 or terms[0] is None or terms[0][1] != 1 or abs(terms[0][0]) != 1:
                return None
            return terms[0][0]
        zero = (0, 0)
        if body_op.name == "arith.addf":
            a, b = (t or zero for t in terms)
            coeff[body_op.results[0]] = (a[0] + b[0], a[1] + b[1])
        elif body_op.name == "arith.subf":
            a, b = (t or zero for t in terms)
            coeff[body_op.results[0]] = (a[0] - b[0], a[1] - b[1])
        elif body_op.name == "arith.negf":
            coeff[body_op.results[0]] = (-terms[0][0], -terms[0][1])
        else:
            return None
    return None


def _is_zero_tensor(v: ir.Value) -> bool:
    """`v` is a splat +0.0 constant or a `linalg.fill` of +0.0."""
    op = defining_op(v)
    if op is None:
        return False
    if op.name == "linalg.fill":
        op = defining_op(op.operands[0])
        attr = op.attributes["value"] if op is not None and op.name == "arith.constant" else None
    elif op.name == "arith.constant":
        attr = op.attributes["value"]
        attr = attr.get_splat_value() if isinstance(attr, ir.DenseElementsAttr) \
            and attr.is_splat else None
    else:
        return False
    return (isinstance(attr, ir.FloatAttr) and attr.value == 0.0
            and not str(attr).startswith("-"))


def _only_sums(op: ir.Operation, arg: ir.Value) -> bool:
    """Generic `op`'s body reads nothing but `arg` and its init (with `_linear_sign`:
    it yields `out + s * arg`)."""
    block = op.regions[0].blocks[0]
    known = {arg, block.arguments[len(block.arguments) - 1]}
    for body_op in block.operations:
        if any(v not in known for v in body_op.operands):
            return False
        known.update(body_op.results)
    return True


@dataclasses.dataclass(frozen=True)
class _SummedContraction:
    """Reduction `red` sums contraction `con`'s result (input `index` of `red`)
    over dims `summed` of `con`, which only `con`'s input `keep` (0 or 1) lacks."""

    red: ir.Operation
    index: int
    sign: int
    con: ir.Operation
    summed: frozenset[int]
    keep: int


def _summed_contraction(red: ir.Operation) -> _SummedContraction | None:
    if red.name != "linalg.generic" or len(red.results) != 1 or all_parallel(red):
        return None
    red_maps = _generic_maps(red)
    if red_maps is None:
        return None
    iters = _iterators(red)
    n_red = len(iters)
    if sorted(red_maps[-1]) != [d for d in range(n_red) if iters[d]]:
        return None
    n_in = len(red.opview.inputs)
    block = red.regions[0].blocks[0]
    for index in range(n_in):
        con = defining_op(red.operands[index])
        if (con is None or con.name != "linalg.generic" or len(con.results) != 1
                or len(list(con.results[0].uses)) != 1 or len(con.opview.inputs) != 2
                or not is_mul_add(con) or not _is_zero_tensor(con.operands[2])
                or not all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape
                           for v in con.operands)):
            continue
        if sorted(red_maps[index]) != list(range(n_red)):
            continue  # each element of the contraction read once
        con_maps = _generic_maps(con)
        if con_maps is None:
            continue
        # Loop d of `red` reads the contraction's result axis t, con's loop con_maps[2][t].
        to_con = {d: con_maps[2][t] for t, d in enumerate(red_maps[index])}
        summed = frozenset(to_con[d] for d in range(n_red) if not iters[d])
        users = [k for k in (0, 1) if summed & set(con_maps[k])]
        if len(users) != 1:
            continue
        sign = _linear_sign(red, block.arguments[index])
        if sign is None:
            continue
        indexed = {d for i, ds in enumerate(red_maps) if i != index for d in ds}
        if len(indexed) < n_red and not _only_sums(red, block.arguments[index]):
            continue  # the reduction without the contraction would lose a loop
        return _SummedContraction(red, index, sign, con, summed, 1 - users[0])
    return None


def _dim_map(n: int, dims: Sequence[int]) -> ir.AffineMap:
    return ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in dims])


def _iterators(op: ir.Operation) -> list[bool]:
    """Per loop of generic `op`: parallel (True) or reduction."""
    return ["parallel" in str(a) for a in op.attributes["iterator_types"]]


def _sum_before_contracting(m: _SummedContraction) -> None:
    """Rewrite `m.red` = `init + sum(s * contraction + h)`: first `init +
    contraction(kept input, s * the other input summed over m.summed)`, then
    `sum(h)` accumulated onto that. Call in the module's context."""
    from mlir.dialects import arith, linalg, tensor

    red, con = m.red, m.con
    red_maps, con_maps = _generic_maps(red), _generic_maps(con)
    par, rdc = linalg.IteratorType.parallel, linalg.IteratorType.reduction
    other = 1 - m.keep
    c_arg = red.regions[0].blocks[0].arguments[m.index]
    with ir.InsertionPoint(red), red.location:
        # 1. The other input summed over m.summed (with the sign: the
        # contraction stays `acc + a * b` for its schedule, and `acc - x` is
        # no reduction linalg's vectorizer knows).
        b = con.operands[other]
        b_dims = con_maps[other]
        kept_axes = [t for t, d in enumerate(b_dims) if d not in m.summed]
        elt = b.type.element_type
        s_init = linalg.fill(arith.constant(elt, 0.0), outs=[
            tensor.empty([b.type.shape[t] for t in kept_axes], elt)])
        s_gen = linalg.GenericOp_(
            [b], [s_init], [_dim_map(len(b_dims), range(len(b_dims))),
                            _dim_map(len(b_dims), kept_axes)],
            [rdc if d in m.summed else par for d in b_dims])
        block = s_gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            x = block.arguments[0] if m.sign > 0 else arith.negf(block.arguments[0])
            linalg.YieldOp([arith.addf(block.arguments[1], x)])
        # 2. The contraction without the summed loops, accumulated into the
        # reduction's init, in the reduction's output layout.
        loops = [d for d in range(len(_iterators(con))) if d not in m.summed]
        new = {d: i for i, d in enumerate(loops)}
        to_con = {d: con_maps[2][t] for t, d in enumerate(red_maps[m.index])}
        ins, maps = [None, None], [None, None]
        ins[m.keep], maps[m.keep] = con.operands[m.keep], [new[d] for d in con_maps[m.keep]]
        ins[other], maps[other] = s_gen.results[0], [new[b_dims[t]] for t in kept_axes]
        maps.append([new[to_con[d]] for d in red_maps[-1]])
        con_iters = _iterators(con)
        c_gen = linalg.GenericOp_(
            ins, [red.operands[len(red.operands) - 1]],
            [_dim_map(len(loops), ds) for ds in maps],
            [par if con_iters[d] else rdc for d in loops])
        block = c_gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            p, q, acc = block.arguments
            linalg.YieldOp([arith.addf(acc, arith.mulf(p, q))])
        result = c_gen.results[0]
        if not _only_sums(red, c_arg):  # else the reduction was `out + s * contraction`
            # 3. The reduction without the contraction's input; -0.0 in its
            # place (x + -0.0 folds to x; x + 0.0 does not: -0.0 + 0.0 is +0.0).
            c_arg.replace_all_uses_with(arith.constant(elt, -0.0))
            keep_in = [i for i in range(len(red.opview.inputs)) if i != m.index]
            new_red = linalg.GenericOp_(
                [red.operands[i] for i in keep_in], [result],
                [_dim_map(len(_iterators(red)), red_maps[i])
                 for i in (*keep_in, len(red_maps) - 1)],
                [par if it else rdc for it in _iterators(red)])
            old_block = red.regions[0].blocks[0]
            new_block = new_red.regions[0].blocks[0]  # arguments: kept inputs, init
            kept_args = [a for i, a in enumerate(old_block.arguments) if i != m.index]
            for a, na in zip(kept_args, new_block.arguments):
                a.replace_all_uses_with(na)
            for body_op in list(old_block.operations):
                new_block.append(body_op.operation)
            result = new_red.results[0]
    red.results[0].replace_all_uses_with(result)
    red.erase()
    init = con.operands[2]
    con.erase()
    _erase_if_unused(init)


def _erase_if_unused(v: ir.Value) -> None:
    """Erase the op defining `v` (a fill, an empty tensor, a constant) and, in
    turn, its operands' producers, while they have no other use."""
    op = defining_op(v)
    if (op is None or op.name not in ("linalg.fill", "tensor.empty", "arith.constant")
            or list(op.results[0].uses)):
        return
    operands = list(op.operands)
    op.erase()
    for w in operands:
        _erase_if_unused(w)


@dataclasses.dataclass(frozen=True)
class SumBeforeContracting(Pass):
    """After elementwise fusion: `sum_n (out + s * (A . B)[..n..] + h)`, with n
    a dim of B but not of A, becomes `sum_n (out + h) + A . (sum_n s * B)`:
    the reduction moves in front of the contraction (see "sums of
    contractions" above). (measurements: benchmarks/notes/cpu-schedules.md)"""

    name = "autodiff-sum-before-contracting"
    summary = "Sum a contraction's operand instead of its result where a reduction sums it"

    enabled: bool = dataclasses.field(default=True, metadata={
        "help": "off: contractions that are summed over one of their output dims stay whole"})

    def run(self, module: ir.Operation) -> None:
        if not self.enabled:
            return
        with module.context:
            for op in post_order_ops(module):
                m = _summed_contraction(op)
                if m is not None:
                    _sum_before_contracting(m)


# -- sibling reductions ------------------------------------------------------------------------
#
# Reverse mode sums one cotangent over the same dim for every input it flows
# to: GMM's gradient sums dqx[k, n, d] over the points three times, times
# different factors (for the means, twice, and for the diagonal), three
# passes over the same 8 MB. Merged into one generic with three results,
# one pass reads it (see `_schedule_outer_reduction` for its schedule).


def _sibling_key(op: ir.Operation) -> tuple[str, str, str, int] | None:
    """What two mergeable outer reductions share: loop ranges, iterators, the
    result map and the element width; None unless `op` is an outer reduction
    `classify` takes (with every result in that one map)."""
    if op.name != "linalg.generic":
        return None
    c = classify(op)
    if c is None or c.kind != "outer_reduction" or not rows_stay_in_registers(c):
        return None  # merged, it would not be scheduled any better
    n_out = len(op.results)
    out_maps = {str(m) for m in list(op.attributes["indexing_maps"])[len(op.operands) - n_out:]}
    if len(out_maps) != 1:
        return None
    return str(c.ranges), str(op.attributes["iterator_types"]), out_maps.pop(), c.width


def _whole_inputs(op: ir.Operation) -> set[tuple[ir.Value, str]]:
    """Inputs of generic `op` read in full at every step (their map names every loop)."""
    n_in = len(op.operands) - len(op.results)
    maps = list(op.attributes["indexing_maps"])
    n_loops = len(op.attributes["iterator_types"])
    out = set()
    for v, m in zip(list(op.operands)[:n_in], maps):
        dims = map_dims([ir.AffineMapAttr(m).value])
        if dims is not None and len(set(dims[0])) == n_loops:
            out.add((v, str(m)))
    return out


def _in_block(op: ir.Operation, block_ops: dict[ir.Operation, int]) -> int | None:
    """Position of `op`'s ancestor among `block_ops`, or None."""
    while op is not None and op not in block_ops:
        parent = op.parent
        op = parent if parent is not None and parent.name != "builtin.module" else None
    return None if op is None else block_ops[op]


def _reads_result_of(op: ir.Operation, earlier: ir.Operation,
                     block_ops: dict[ir.Operation, int], skip_init: bool) -> bool:
    """`op` (its operands, and values its body captures) depends on `earlier`'s
    results, through ops of the block after `earlier`. With `skip_init`, `op`'s
    own inits are not followed."""
    start = block_ops[earlier]
    seen: set[ir.Operation] = set()
    n_in = len(op.operands) - len(op.results)
    stack = [v for i, v in enumerate(op.operands) if not (skip_init and i >= n_in)]
    stack += captured_values(op)
    while stack:
        owner = defining_op(stack.pop())
        pos = None if owner is None else _in_block(owner, block_ops)
        if pos is None or pos < start or owner in seen:
            continue
        if pos == start:
            return True
        seen.add(owner)
        stack += [*owner.operands, *captured_values(owner)]
    return False


def _zero_init_sum(op: ir.Operation, at: ir.Operation) -> ir.Value | None:
    """If `op` sums (combiner addf) onto one init, give it a +0 init (made
    before `at`) instead and return the old one, to be added to the sum
    afterwards; else None."""
    from mlir.dialects import arith, linalg, tensor

    block = op.regions[0].blocks[0]
    yielded = block.operations[len(block.operations) - 1].operands[0]
    if len(op.results) != 1 or isinstance(yielded.owner, ir.Block) \
            or yielded.owner.name != "arith.addf":
        return None
    init = op.operands[len(op.operands) - 1]
    t = init.type
    with ir.InsertionPoint(at), op.location:
        zero = linalg.fill(arith.constant(t.element_type, 0.0),
                           outs=[tensor.empty(t.shape, t.element_type)])
    op.operands[len(op.operands) - 1] = zero
    return init


def _add_init_after(op: ir.Operation, init: ir.Value) -> None:
    """Readers of `op`'s result read `init + result` instead (computed right after `op`)."""
    from mlir.dialects import arith, linalg, tensor

    result = op.results[0]
    t = result.type
    n = t.rank
    par = linalg.IteratorType.parallel
    with ir.InsertionPoint.after(op), op.location:
        gen = linalg.GenericOp_([init, result], [tensor.empty(t.shape, t.element_type)],
                                [_dim_map(n, range(n))] * 3, [par] * n)
        block = gen.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.addf(block.arguments[0], block.arguments[1])])
    total = gen.results[0]
    for use in list(result.uses):
        if use.owner != gen.operation:
            use.owner.operands[use.operand_number] = total


def _merge_reductions(a: ir.Operation, b: ir.Operation, at: ir.Operation) -> None:
    """One generic computing `a`'s results then `b`'s, placed before `at`."""
    from mlir.dialects import linalg

    maps = list(a.attributes["indexing_maps"]), list(b.attributes["indexing_maps"])
    n_in = [len(op.operands) - len(op.results) for op in (a, b)]
    ins: list[tuple[ir.Value, str]] = []
    in_maps: list[ir.AffineMap] = []
    arg_of: list[list[int]] = [[], []]
    for k, op in enumerate((a, b)):
        for v, m in zip(list(op.operands)[:n_in[k]], maps[k]):
            key = (v, str(m))
            if key not in ins:
                ins.append(key)
                in_maps.append(ir.AffineMapAttr(m).value)
            arg_of[k].append(ins.index(key))
    outs = list(a.operands)[n_in[0]:] + list(b.operands)[n_in[1]:]
    out_maps = [ir.AffineMapAttr(m).value for k in (0, 1) for m in maps[k][n_in[k]:]]
    par, rdc = linalg.IteratorType.parallel, linalg.IteratorType.reduction
    with ir.InsertionPoint(at), b.location:
        merged = linalg.GenericOp_([v for v, _ in ins], outs, in_maps + out_maps,
                                   [par if p else rdc for p in _iterators(b)])
    block = merged.regions[0].blocks[0]
    out_arg = len(ins)
    yields: list[ir.Value] = []
    for k, op in enumerate((a, b)):
        old = op.regions[0].blocks[0]
        args = list(old.arguments)
        for i, arg in enumerate(args[:n_in[k]]):
            arg.replace_all_uses_with(block.arguments[arg_of[k][i]])
        for arg in args[n_in[k]:]:
            arg.replace_all_uses_with(block.arguments[out_arg])
            out_arg += 1
        body = list(old.operations)
        yields += list(body[-1].operands)
        for body_op in body[:-1]:
            block.append(body_op.operation)
    with ir.InsertionPoint(block), b.location:
        linalg.YieldOp(yields)
    for old_result, new in zip([*a.results, *b.results], merged.results):
        old_result.replace_all_uses_with(new)
    a.erase()
    b.erase()


def _try_merge(a: ir.Operation, b: ir.Operation, block_ops: dict[ir.Operation, int]) -> bool:
    """Merge sibling reduction `b` into the earlier `a` if their results and
    inputs allow one place for both: `b`'s place when nothing between them
    reads `a`, else `a`'s place when `b` reads nothing made after `a` (an
    init made after `a`, e.g. a sum `a` flows into, is then added after)."""
    if _reads_result_of(b, a, block_ops, skip_init=True):
        return False
    pos_a, pos_b = block_ops[a], block_ops[b]
    uses = [_in_block(getattr(u.owner, "operation", u.owner), block_ops)
            for r in a.results for u in r.uses]
    if not any(p is not None and p < pos_b for p in uses) \
            and not _reads_result_of(b, a, block_ops, skip_init=False):
        _merge_reductions(a, b, b)
        return True
    n_in = len(b.operands) - len(b.results)
    values = list(b.operands)[:n_in] + captured_values(b)
    constants = []
    for v in values:
        owner = defining_op(v)
        pos = None if owner is None else _in_block(owner, block_ops)
        if pos is None or pos == pos_b or pos < pos_a:
            continue  # a block argument, made in `b`'s own body, or before `a`
        if owner.name != "arith.constant":
            return False
        constants.append(owner)  # moved in front of `a`
    init = b.operands[len(b.operands) - 1]
    owner = defining_op(init)
    pos = None if owner is None else _in_block(owner, block_ops)
    if pos is not None and pos >= pos_a:
        old_init = _zero_init_sum(b, a)
        if old_init is None:
            return False
        _add_init_after(b, old_init)
    for c in constants:
        c.move_before(a)
    _merge_reductions(a, b, a)
    return True


def _merge_siblings_in(block: ir.Block) -> None:
    changed = True
    while changed:
        changed = False
        ops = [op.operation for op in block.operations]
        block_ops = {op: i for i, op in enumerate(ops)}
        keys = {op: _sibling_key(op) for op in ops}
        for i, a in enumerate(ops):
            if keys[a] is None:
                continue
            shared = _whole_inputs(a)
            for b in ops[i + 1:]:
                if keys[b] == keys[a] and shared & _whole_inputs(b) \
                        and _try_merge(a, b, block_ops):
                    changed = True
                    break
            if changed:
                break


@dataclasses.dataclass(frozen=True)
class MergeSiblingReductions(Pass):
    """Outer reductions over the same loops that read one whole operand
    become one generic with several results: one pass over that operand.
    A sum whose init another of them flows into starts from +0 and has its
    init added after. (measurements: benchmarks/notes/cpu-schedules.md)"""

    name = "autodiff-merge-sibling-reductions"
    summary = "Merge outer reductions that read the same operand into one multi-result generic"

    enabled: bool = dataclasses.field(default=True, metadata={
        "help": "off: sibling outer reductions stay separate ops"})

    def run(self, module: ir.Operation) -> None:
        if not self.enabled:
            return
        with module.context:
            for op in post_order_ops(module):
                if op.name == "func.func" and len(op.regions[0].blocks) == 1:
                    _merge_siblings_in(op.regions[0].blocks[0])
