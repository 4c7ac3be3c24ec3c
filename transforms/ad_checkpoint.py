"""Checkpointing in the differentiation passes: `autodiff.checkpoint {fn = @g, policy, names}`.

Reverse mode differentiates a checkpoint by the plan `checkpoint_plan` makes: the
forward code keeps what the policy saves, the backward code recomputes the rest
(`remat`). `policy` is one of POLICIES (default nothing_saveable: only the inputs
stay alive), `names` the `checkpoint_name`s that save_only_these_names keeps; a
`checkpoint_name` is a call of a private identity function carrying
`autodiff.checkpoint_name = "h"`. Once no jvp/vjp op is left, `lower_checkpoints`
turns checkpoints into calls and drops the name markers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import AD_OPS, CHECKPOINT, CHECKPOINT_NAME, string_of, symbol_of
from .ad_support import captured_values, function_type, op_name, sym_name, walk_ops

if TYPE_CHECKING:
    from .ad_driver import ADDriver

#: The checkpoint policies `autodiff.checkpoint {policy = ...}` accepts (JAX's names).
POLICIES = ("nothing_saveable", "everything_saveable", "dots_saveable",
            "save_only_these_names")
#: Ops whose outputs `dots_saveable` saves (contractions).
CONTRACTION_OPS = ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat",
                   "linalg.dot", "linalg.batch_matvec", "linalg.batch_vecmat",
                   "linalg.contract", "linalg.matmul_transpose_a", "linalg.matmul_transpose_b")


@dataclasses.dataclass
class CheckpointPlan:
    """How a reverse pass differentiates `autodiff.checkpoint {fn = @f}` (see
    `checkpoint_plan`): the forward code calls `fwd` (args -> outs...,
    saved...), the backward code calls `remat` (args..., saved...) -> the
    residuals of @f's vjp (None: `saved` already are all of them), then `bwd`."""

    fwd: str
    saved_types: list[ir.Type]
    remat: str | None
    res_types: list[ir.Type]
    bwd: str
    spec: list[int]


def _is_contraction(op: ir.Operation) -> bool:
    """A `linalg.generic` that multiplies two inputs and sums (what einsum emits)."""
    if op_name(op) != "linalg.generic" or "reduction" not in str(op.attributes["iterator_types"]):
        return False
    n_in = len(op.operands) - len(op.results)
    return n_in >= 2 and any(op_name(o) == "arith.mulf" for o in walk_ops(op))


def checkpoint_plan(driver: ADDriver, op: ir.Operation, wrt: Sequence[int]) -> CheckpointPlan:
    """Reverse mode of `autodiff.checkpoint {fn = @f, policy, names}`.

    The residuals of @f's vjp that the policy saves are returned by the
    forward call; the others are recomputed in the backward pass by `remat`
    (a copy of @f's forward that takes the saved ones as arguments), so the
    enclosing function only keeps the checkpoint's inputs and the saved
    values alive. Cached per (function, wrt, policy, names)."""
    name = symbol_of(op, "fn")
    policy = "nothing_saveable"
    if "policy" in op.attributes:
        pa = op.attributes["policy"]
        policy = pa.value if isinstance(pa, ir.StringAttr) else str(pa)
    if policy not in POLICIES:
        raise driver.fail(op, f"unknown checkpoint policy '{policy}' (expected one of "
                            f"{', '.join(POLICIES)})")
    names: list[str] = []
    if "names" in op.attributes:
        na = op.attributes["names"]
        if not isinstance(na, ir.ArrayAttr) or \
                not all(isinstance(a, ir.StringAttr) for a in na):
            raise driver.fail(op, "checkpoint 'names' must be an array of strings")
        names = [ir.StringAttr(a).value for a in na]
    if policy == "save_only_these_names" and "names" not in op.attributes:
        raise driver.fail(op, "checkpoint policy 'save_only_these_names' needs a 'names' "
                            "attribute (an array of strings)")
    key = ("checkpoint", name, tuple(wrt), policy, tuple(names))
    if key in driver.vjp_cache:
        return driver.vjp_cache[key]
    fn = driver.lookup(name, op)
    results = list(function_type(fn).results)
    params = list(function_type(fn).inputs)
    driver._check_types(op, f"operands (arguments of @{name})",
                      [v.type for v in op.operands], params)
    driver._check_types(op, f"results (results of @{name})",
                      [r.type for r in op.results], results)
    fwd, bwd, res_types, spec = driver.vjp_functions(name, wrt, op)
    fwd_fn = driver.functions()[fwd]
    fret = list(fwd_fn.regions[0].blocks[0].operations)[-1]
    res_vals = list(fret.operands)[len(results):]
    saved = [_saveable(driver, v, policy, set(names), 0) for v in res_vals]
    saved_types = [t for t, s in zip(res_types, saved) if s]
    # Saveable values the recomputation would otherwise redo (a dot whose
    # output only tanh's result, a residual, is computed from): saved too.
    extra = _saveable_intermediates(driver, fwd_fn, res_vals, saved, policy, set(names))
    fops = list(fwd_fn.regions[0].blocks[0].operations)
    saved_types += [fops[i].results[r].type for i, r in extra]
    if all(saved) and not extra:
        plan = CheckpointPlan(fwd, saved_types, None, res_types, bwd, spec)
    else:
        ckpt_fwd = name
        if any(saved) or extra:  # a copy of fwd returning the outputs and what is saved
            ckpt_fwd = driver.unique_name(f"{name}_ckpt_fwd")
            new = driver.clone_function(fwd_fn, ckpt_fwd)
            nops = list(new.regions[0].blocks[0].operations)
            ret = nops[-1]
            vals = list(ret.operands)
            keep = vals[: len(results)] + [v for v, s in zip(vals[len(results):], saved)
                                           if s] + [nops[i].results[r] for i, r in extra]
            func.ReturnOp(keep, loc=ret.location, ip=ir.InsertionPoint(ret))
            ret.erase()
            new.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(params, results + saved_types))
        remat = driver.unique_name(f"{name}_remat")
        new = driver.clone_function(fwd_fn, remat)
        blk = new.regions[0].blocks[0]
        ret = list(blk.operations)[-1]
        rops = list(blk.operations)
        inner = [rops[i].results[r] for i, r in extra]
        for v, s in zip(list(ret.operands)[len(results):], saved):
            if s:
                v.replace_all_uses_with(blk.add_argument(v.type, new.location))
        for v in inner:
            v.replace_all_uses_with(blk.add_argument(v.type, new.location))
        func.ReturnOp(list(ret.operands)[len(results):], loc=ret.location,
                      ip=ir.InsertionPoint(ret))
        ret.erase()
        new.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(params + saved_types, res_types))
        plan = CheckpointPlan(ckpt_fwd, saved_types, remat, res_types, bwd, spec)
    driver.vjp_cache[key] = plan
    return plan

def _saveable_intermediates(driver: ADDriver, fwd_fn: ir.Operation, res_vals: Sequence[ir.Value],
                            saved: Sequence[bool], policy: str,
                            names: set[str]) -> list[tuple[int, int]]:
    """Values of `fwd_fn` (top-level op index, result number) that the policy
    saves and that the residuals it does not save are computed from.

    A residual is whatever the reverse rules read (tanh's rule reads its
    result, not the dot before it); JAX's policies instead name the values
    that may be kept, and the recomputation starts from them. So under
    dots_saveable the dot under a tanh is saved and only the tanh recomputed.
    """
    if policy not in ("dots_saveable", "save_only_these_names"):
        return []
    ops = [o.operation for o in fwd_fn.regions[0].blocks[0].operations]
    index = {o: i for i, o in enumerate(ops)}
    seen = {v for v, s in zip(res_vals, saved) if s}
    stack = [v for v, s in zip(res_vals, saved) if not s]
    roots = set(stack)
    out: list[tuple[int, int]] = []
    while stack:
        v = stack.pop()
        if v in seen or not isinstance(v, ir.OpResult):
            continue
        seen.add(v)
        op = v.owner.operation
        if op not in index:
            continue
        if v not in roots and _saveable(driver, v, policy, names, 0):
            out.append((index[op], v.result_number))
            continue
        stack.extend(op.operands)
        if op.regions:
            stack.extend(captured_values(op))
    return sorted(set(out))

def _saveable(driver: ADDriver, v: ir.Value, policy: str, names: set[str], depth: int) -> bool:
    """Whether the policy saves residual `v` (looking through calls to its origin)."""
    if policy == "everything_saveable":
        return True
    if policy == "nothing_saveable" or isinstance(v.owner, ir.Block) or depth > 16:
        return False
    op = v.owner.operation
    kind = op_name(op)
    if policy == "dots_saveable" and (kind in CONTRACTION_OPS or _is_contraction(op)):
        return True
    if policy == "save_only_these_names":
        # The operand of a named identity is the named value itself (a
        # rule may read it before the name was given, e.g. exp's result).
        for use in v.uses:
            if op_name(use.owner) != "func.call":
                continue
            named = driver.functions().get(
                symbol_of(use.owner, "callee"))
            if named is not None and CHECKPOINT_NAME in named.attributes and \
                    string_of(named, CHECKPOINT_NAME) in names:
                return True
    if kind != "func.call":
        return False
    callee = driver.functions().get(symbol_of(op, "callee"))
    if callee is None or not callee.regions[0].blocks:
        return False
    if CHECKPOINT_NAME in callee.attributes:
        return policy == "save_only_these_names" and \
            string_of(callee, CHECKPOINT_NAME) in names
    ret = list(callee.regions[0].blocks[0].operations)[-1]
    k = list(op.results).index(v)
    return _saveable(driver, ret.operands[k], policy, names, depth + 1)


def _walk(module: ir.Operation) -> tuple[list[ir.Operation], list[str | None]]:
    ops = walk_ops(module)
    return ops, [o.name for o in ops]


def lower_checkpoints(module: ir.Operation,
                      walked: tuple[list[ir.Operation], list[str | None]] | None = None
                      ) -> None:
    """Once no autodiff.jvp/vjp is left, nothing will be differentiated any more:
    `autodiff.checkpoint` becomes a plain `func.call` and the named identities of
    `checkpoint_name` disappear. Other passes (vmap) may call this at their end.

    `walked`: the module's ops (pre-order) and their names, from a walk the
    caller already made (`ad_cleanup.finish_pass`); ops erased since then are
    skipped by name (`None`)."""
    ops, names = walked if walked is not None else _walk(module)
    if any(n in AD_OPS for n in names):
        return
    body = module.regions[0].blocks[0]
    named = {}
    for f in body.operations:
        if op_name(f) == "func.func" and CHECKPOINT_NAME in f.attributes and f.regions[0].blocks:
            blk = f.regions[0].blocks[0]
            ret = list(blk.operations)[-1]
            args = list(blk.arguments)
            if len(list(blk.operations)) == 1 and all(v in args for v in ret.operands):
                named[sym_name(f)] = [args.index(v) for v in ret.operands]
    for o, kind in zip(ops, names):
        if kind == CHECKPOINT:
            call = func.CallOp([r.type for r in o.results], ir.FlatSymbolRefAttr.get(
                symbol_of(o, "fn")), list(o.operands), loc=o.location, ip=ir.InsertionPoint(o))
            for old, nv in zip(o.results, call.results):
                old.replace_all_uses_with(nv)
            o.erase()
        elif kind == "func.call":
            where = named.get(symbol_of(o, "callee"))
            if where is not None:
                for old, i in zip(o.results, where):
                    old.replace_all_uses_with(o.operands[i])
                o.erase()
