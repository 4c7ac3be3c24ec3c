"""`--autodiff-vmap`: batching. Lowers every `autodiff.vmap` op to a call of `@f_batched_*`.

For `"autodiff.vmap"(args) {fn = @f, in_axes, out_axes, randomness}` the pass
generates `@f_batched_<B>_<sig>` once per batching signature: the batch size
B and, per argument, `b` (batched) or `u` (unbatched). Inside a batched
function every batched value carries the batch dimension at axis 0: the op's
replacement moves each argument's batch axis to the front with a
`linalg.transpose` before the call and each result's batch axis to its
`out_axes` position after it, so per-op batching rules (`rules/<dialect>.py`,
beside their jvp and vjp rules) only ever see axis 0. Unbatched values keep
their types and are never broadcast, except where a value must vary per lane
(a loop carry or a destination).

Results of `@f_batched_*` are batched only if they depend on a batched
argument; an unbatched result with `out_axes[j] >= 0` is broadcast at the
call site (JAX's semantics), a batched one with `out_axes[j] = -1` is an error.

Randomness: a random op under vmap is an error with randomness = "error".
With "same" an unbatched draw is made once and shared by the lanes. With
"different" the code must be RNG-functionalized first
(`--autodiff-functionalize-rng`): lane l then runs with the Philox offset
`offset + l * C` (C: the blocks one call consumes, `autodiff.rng_blocks`),
so the lanes draw exactly what B calls in a row would, and the op returns
`offset + B * C`.

Composition: before a function is batched, the autodiff.vmap ops inside it
and its callees are lowered first (vmap of vmap), and so are its
autodiff.jvp/vjp ops, with the differentiation driver (vmap of grad).
For the converse (grad of vmap) this module registers `lower_inner_vmap`
with the differentiation driver, which lowers inner vmap ops first.

Custom rules (function attributes listed in the README, wherever @f is batched):

- `autodiff.custom_vmap = @r` or `[@r1, @r2, ...]`: each rule function
  carries `autodiff.in_axes` / `autodiff.out_axes` (array<i64>, one entry per
  argument / result of @f: the axis of the batch dimension, -1 unbatched);
  its types are @f's with the batch size B inserted at those axes, so a rule
  is written for one B. Batching @f at size B with batched arguments `flags`
  picks a rule for B that takes exactly those arguments batched, else the one
  broadcasting the fewest unbatched arguments (a rule never receives a batched
  argument unbatched); none of them fitting is an error naming the rules and
  the signature expected. Arguments move to the rule's axes, results back to
  axis 0. At a size no rule has, @f's body is batched: that is what happens to
  enclosing levels of nested vmaps, which batch `@f_batched_B` (a call of the
  rule) and so the rule's code generically. Malformed attributes or rule
  types are errors at @f (`check_vmap_rule`).
- `autodiff.custom_vjp` / `autodiff.custom_jvp`: the batched function carries
  batched rules (`CustomRuleBatcher`), so grad/jvp of vmap call the rules
  instead of differentiating the batched body; this holds whether @f's body
  or its custom_vmap rule batched it.

Modules: this one holds the pass and its driver (`VmapDriver`: batched
functions per signature, the lowering of each vmap op, rule choice);
`vmap_batch.py` batches one function's body op by op (`BatchTrace`);
`vmap_custom.py` checks and calls custom_vmap rules and batches custom
differentiation rules (`CustomRuleBatcher`).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import (
    AD_OPS,
    CUSTOM_JVP,
    CUSTOM_VJP,
    CUSTOM_VMAP,
    IN_AXES,
    OUT_AXES,
    RNG_BLOCKS,
    RNG_STATE,
    TAPE,
    TAPED,
    VMAP,
    i64s_of,
    symbol_of,
)
from .ad_cleanup import finish_pass
from .ad_driver import ADDriver, register_inner_lowerer
from .ad_support import (
    Builder,
    FunctionTable,
    captured_values,
    is_tensor,
    lower_each,
    op_name,
    sym_name,
    unique_name,
    walk_ops,
)
from .diagnostics import PassFailure, fail
from .passes import Pass, PipelineElement, register
from .rules.batching import BatchBuilder, batch_type
from .vmap_batch import BatchTrace, broadcast_at, moveaxis_perm, transpose
from .vmap_custom import (
    CustomRuleBatcher,
    PendingRules,
    VmapRule,
    call_vmap_rule,
    check_vmap_rule,
    types_text,
)

PASS = "autodiff-vmap"


class VmapDriver:
    """Per-pass-run state: the module, the batched-function cache, the AD driver."""

    def __init__(self, module: ir.Operation, ad_driver: Any = None):
        self.module = module
        self.body = module.regions[0].blocks[0]
        self.cache: dict[tuple, tuple[str, list[ir.Type], list[bool]]] = {}
        self.in_progress: set[tuple] = set()
        self.prepared: set[str] = set()
        self._ad = ad_driver
        #: batched functions whose primal has custom derivative rules still to batch
        self.pending: list[PendingRules] = []
        self.depth = 0
        #: functions lift_control_flow has made (or found) structured
        self.structured: set[str] = set()

    def fail(self, where: Any, msg: str) -> PassFailure:
        return fail(where, f"{PASS}: {msg}")

    def functions(self) -> FunctionTable:
        return FunctionTable(self.module)

    def lookup(self, name: str, at: Any) -> ir.Operation:
        fn = self.functions().get(name)
        if fn is None:
            raise self.fail(at, f"'{op_name(at)}' refers to an unknown function @{name}")
        if name not in self.structured:
            from .lift_cf import lift_control_flow  # cf branches, multi-block regions -> scf

            lift_control_flow(fn, self.fail, f"batch @{name}")
            # (batched functions only get single-block regions: checked once per function)
            self.structured.add(name)
        if len(fn.regions[0].blocks) != 1:
            what = "only a declaration" if not fn.regions[0].blocks else "has several blocks"
            raise self.fail(at, f"cannot batch @{name}: it is {what}")
        return fn

    def unique_name(self, base: str) -> str:
        # any symbol's name is taken, not only the functions'
        return unique_name(self.functions().symbols, base)

    def ad_driver(self) -> Any:
        if self._ad is None:
            self._ad = ADDriver(self.module, PASS)
            _BY_AD_DRIVER[self._ad] = self  # its inner vmap ops share this cache
        return self._ad

    # -- preparing: inner transforms first --------------------------------------------

    def prepare(self, name: str, at: Any) -> ir.Operation:
        """Lower vmap, jvp and vjp ops inside @name and its callees before batching it."""
        fn = self.lookup(name, at)
        if name in self.prepared:
            return fn
        self.prepared.add(name)
        self.lower_all(fn)
        if any(op_name(o) in AD_OPS for o in walk_ops(fn)):
            self.ad_driver().prepare(name, at)
        for o in walk_ops(fn):
            if op_name(o) == "func.call":
                callee = symbol_of(o, "callee")
                callee_fn = self.functions().get(callee)
                if callee_fn is not None and callee_fn.regions[0].blocks:
                    self.prepare(callee, o)
        return fn

    def lower_all(self, root: ir.Operation) -> None:
        """Lower every autodiff.vmap under `root`, one at a time (the IR changes)."""
        lower_each(root, (VMAP,), self.lower)

    # -- batched functions ---------------------------------------------------------------

    def batched_function(self, name: str, flags: Sequence[bool], size: int, randomness: str,
                         at: Any) -> tuple[str, list[ir.Type], list[bool]]:
        """@name batched for (flags, size): its name, result types and which results are batched.

        The batched custom derivative rules of functions batched meanwhile are
        generated once the outermost request is done (`attach_custom_rules`), so a
        rule calling its own primal finds the primal's batched function cached.
        """
        self.depth += 1
        try:
            result = self._batched_function(name, flags, size, randomness, at)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self.depth += 1
            try:
                while self.pending:
                    self.attach_custom_rules(self.pending.pop(0))
            finally:
                self.depth -= 1
        return result

    def _batched_function(self, name: str, flags: Sequence[bool], size: int, randomness: str,
                          at: Any) -> tuple[str, list[ir.Type], list[bool]]:
        key = (name, tuple(flags), size, randomness)
        if key in self.cache:
            return self.cache[key]
        if key in self.in_progress:
            raise self.fail(at, f"cannot batch the recursive function @{name}")
        fn = self.prepare(name, at)
        rule = self.pick_vmap_rule(fn, name, list(flags), size)
        ft = fn.attributes["function_type"].value
        arg_types = [batch_type(t, size) if f else t for t, f in zip(ft.inputs, flags)]
        sig = "".join("b" if f else "u" for f in flags)
        new_name = self.unique_name(f"{name}_batched_{size}_{sig}")
        self.in_progress.add(key)
        try:
            new = func.FuncOp(new_name, (arg_types, []), loc=fn.location,
                              ip=ir.InsertionPoint(self.body))
            new.attributes["sym_visibility"] = ir.StringAttr.get("private")
            block = new.add_entry_block()
            trace = BatchTrace(self, size, randomness)
            ret = list(fn.regions[0].blocks[0].operations)[-1]
            if rule is None:
                outs = trace.batch_block(fn.regions[0].blocks[0], ir.InsertionPoint(block),
                                         list(zip(block.arguments, flags)))
            else:
                b = BatchBuilder(ir.InsertionPoint(block), ret.location, trace)
                outs = call_vmap_rule(b, rule, list(block.arguments), list(flags))
            func.ReturnOp([v for v, _ in outs], loc=ret.location, ip=ir.InsertionPoint(block))
            types = [v.type for v, _ in outs]
            new.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(arg_types, types))
        finally:
            self.in_progress.discard(key)
        result = (new_name, types, [f for _, f in outs])
        self.cache[key] = result
        if CUSTOM_VJP in fn.attributes or CUSTOM_JVP in fn.attributes:
            self.pending.append(PendingRules(fn, name, new.operation, list(flags), result[2], size,
                                         randomness))
        return result

    # -- custom batching rules (autodiff.custom_vmap) -----------------------------------------

    def vmap_rules(self, fn: ir.Operation, name: str) -> list[VmapRule]:
        """@name's `autodiff.custom_vmap` rules, each checked against @name's type."""
        if CUSTOM_VMAP not in fn.attributes:
            return []
        attr = fn.attributes[CUSTOM_VMAP]
        refs = list(attr) if isinstance(attr, ir.ArrayAttr) else [attr]
        if not refs or not all(isinstance(r, ir.FlatSymbolRefAttr) for r in refs):
            raise self.fail(fn, f"{CUSTOM_VMAP} of @{name} must name a function (@rule) or "
                                f"an array of functions, got {attr}")
        return [self._vmap_rule(fn, name, ir.FlatSymbolRefAttr(r).value) for r in refs]

    def _vmap_rule(self, fn: ir.Operation, name: str, rule: str) -> VmapRule:
        rfn = self.functions().get(rule)
        where = f"{CUSTOM_VMAP} of @{name}"
        if rfn is None:
            raise self.fail(fn, f"{where} refers to an unknown function @{rule}")
        axes = []
        for key in (IN_AXES, OUT_AXES):
            if key not in rfn.attributes or not isinstance(rfn.attributes[key],
                                                           ir.DenseI64ArrayAttr):
                raise self.fail(fn, f"{where}: @{rule} needs the attributes {IN_AXES} and "
                                    f"{OUT_AXES} (array<i64>, -1 for an unbatched value)")
            axes.append(list(ir.DenseI64ArrayAttr(rfn.attributes[key])))
        ft, rt = fn.attributes["function_type"].value, rfn.attributes["function_type"].value
        return check_vmap_rule(lambda msg: self.fail(fn, f"{where}: @{rule} {msg}"),
                               rule, ft, rt, axes[0], axes[1])

    def pick_vmap_rule(self, fn: ir.Operation, name: str, flags: list[bool],
                       size: int) -> VmapRule | None:
        """The custom_vmap rule batching @name for (flags, size), None: batch its body.

        Rules are written for one batch size (their types say which); at a size
        no rule has, the body is batched (an enclosing vmap level batches the
        function generically). Among the rules for `size`, one whose batched
        arguments are exactly `flags` wins; else the one broadcasting the fewest
        unbatched arguments. A rule may not take a batched argument unbatched.
        """
        rules = [r for r in self.vmap_rules(fn, name) if r.size == size]
        if not rules:
            return None
        usable = [r for r in rules if all(a >= 0 for a, f in zip(r.in_axes, flags) if f)]
        if usable:
            return min(usable, key=lambda r: sum(a >= 0 for a in r.in_axes) - sum(flags))
        ft = fn.attributes["function_type"].value
        want = [batch_type(t, size) if f else t for t, f in zip(ft.inputs, flags)]
        axes = ", ".join("0" if f else "-1" for f in flags)
        have = "; ".join(f"@{r.name} has {IN_AXES} = array<i64: "
                         f"{', '.join(map(str, r.in_axes))}>" for r in rules)
        raise self.fail(fn, f"no {CUSTOM_VMAP} rule of @{name} takes its arguments batched as "
                            f"({', '.join('b' if f else 'u' for f in flags)}) at batch size "
                            f"{size}: {have}; expected a rule taking ({types_text(want)}) with "
                            f"{IN_AXES} = array<i64: {axes}> (a rule may batch an unbatched "
                            "argument, not the converse)")

    # -- batched custom derivative rules (generate_vmap_rule) ----------------------------------

    def attach_custom_rules(self, p: PendingRules) -> None:
        """Give a batched function the batched versions of its primal's custom_vjp and
        custom_jvp rules, so grad/jvp of vmap use the rules (see `CustomRuleBatcher`)."""
        CustomRuleBatcher(self, p).attach()

    # -- the op ------------------------------------------------------------------------------

    def lower(self, op: ir.Operation) -> None:
        """Replace one autodiff.vmap by transposes, a call of the batched function, transposes."""
        if "fn" not in op.attributes or not isinstance(op.attributes["fn"],
                                                       ir.FlatSymbolRefAttr):
            raise self.fail(op, f"'{VMAP}' needs an 'fn' symbol attribute")
        fname = symbol_of(op, "fn")
        for key in ("in_axes", "out_axes"):
            if key not in op.attributes or not isinstance(op.attributes[key],
                                                          ir.DenseI64ArrayAttr):
                raise self.fail(op, f"'{VMAP}' needs an '{key}' array<i64> attribute")
        in_axes, out_axes = i64s_of(op, "in_axes"), i64s_of(op, "out_axes")
        randomness = "error"
        if "randomness" in op.attributes:
            randomness = ir.StringAttr(op.attributes["randomness"]).value
        fn = self.lookup(fname, op)
        ft = fn.attributes["function_type"].value
        args, results = list(op.operands), list(op.results)
        if len(in_axes) != len(args):
            raise self.fail(op, f"in_axes has {len(in_axes)} entries for {len(args)} operands")
        if len(out_axes) != len(results):
            raise self.fail(op, f"out_axes has {len(out_axes)} entries for {len(results)} "
                                "results")
        if len(ft.inputs) != len(args) or len(ft.results) != len(results):
            raise self.fail(op, f"@{fname} has type {ft} but '{VMAP}' has "
                                f"{len(args)} operands and {len(results)} results")
        size = None
        for i, (v, a, t) in enumerate(zip(args, in_axes, ft.inputs)):
            if a < 0:
                if v.type != t:
                    raise self.fail(op, f"operand {i} (not batched) has type {v.type}, "
                                        f"but @{fname} takes {t}")
                continue
            vt = v.type
            if not is_tensor(vt) or vt.rank <= a:
                raise self.fail(op, f"in_axes[{i}] = {a} is out of range for operand {i} of "
                                    f"type {vt}")
            n = vt.shape[a]
            if n == ir.ShapedType.get_dynamic_size():
                raise self.fail(op, f"operand {i} has a dynamic batch dimension ({vt})")
            per_example = list(vt.shape[:a]) + list(vt.shape[a + 1:])
            expect = (ir.RankedTensorType.get(per_example, vt.element_type)
                      if is_tensor(t) else vt.element_type)
            if not (expect == t and (is_tensor(t) or vt.rank == 1)):
                raise self.fail(op, f"operand {i} of type {vt} batched at axis {a} does not "
                                    f"match @{fname}'s argument type {t}")
            if size is not None and n != size:
                raise self.fail(op, f"inconsistent batch sizes: operand {i} has {n} at axis "
                                    f"{a}, an earlier operand has {size}")
            size = n
        if size is None:
            raise self.fail(op, f"'{VMAP}' needs at least one batched operand "
                                "(every in_axes entry is -1)")
        for j, (r, a, t) in enumerate(zip(results, out_axes, ft.results)):
            if a < 0:
                expect = t
            else:
                shape = list(t.shape) if is_tensor(t) else []
                if a > len(shape):
                    raise self.fail(op, f"out_axes[{j}] = {a} is out of range for result "
                                        f"{j} of @{fname} ({t})")
                shape.insert(a, size)
                expect = ir.RankedTensorType.get(shape, t.element_type if is_tensor(t) else t)
            if r.type != expect:
                raise self.fail(op, f"result {j} has type {r.type}, expected {expect}")
        b = Builder(ir.InsertionPoint(op), op.location, None, op)
        flags = [a >= 0 for a in in_axes]
        moved = []
        for v, a in zip(args, in_axes):
            if a > 0:
                v = transpose(b, v, moveaxis_perm(v.type.rank, a, 0))
            moved.append(v)
        rng_blocks = None
        if randomness == "different" and RNG_STATE in fn.attributes:
            rng_blocks = self._rng_lanes(op, fn, in_axes, out_axes)
            moved[-1] = _lane_offsets(b, moved[-1], size, rng_blocks)
            flags[-1] = True
        name, types, out_flags = self.batched_function(fname, flags, size, randomness, op)
        call = b.create("func.call", moved, types, {"callee": ir.FlatSymbolRefAttr.get(name)})
        outs = []
        for j, (v, batched, a, r) in enumerate(zip(call.results, out_flags, out_axes, results)):
            if rng_blocks is not None and j == len(results) - 1:
                # The B lanes used B consecutive ranges of the counter space.
                total = b.create("arith.constant", [], [r.type], {
                    "value": ir.IntegerAttr.get(r.type, size * rng_blocks)}).result
                outs.append(b.create("arith.addi", [args[-1], total], [r.type]).result)
            elif a < 0:
                if batched:
                    raise self.fail(op, f"out_axes[{j}] = -1 (not batched), but result {j} of "
                                        f"@{fname} depends on a batched operand")
                outs.append(v)
            elif not batched:
                outs.append(broadcast_at(b, v, r.type, a))
            elif a > 0:
                outs.append(transpose(b, v, moveaxis_perm(v.type.rank, 0, a)))
            else:
                outs.append(v)
        for r, v in zip(results, outs):
            r.replace_all_uses_with(v)
        op.erase()


    def _rng_lanes(self, op: ir.Operation, fn: ir.Operation, in_axes: list[int],
                   out_axes: list[int]) -> int:
        """Check a vmap of an RNG-functionalized function; the blocks one call consumes."""
        name = sym_name(fn)
        if RNG_BLOCKS not in fn.attributes:
            raise self.fail(op, f"randomness = \"different\" needs @{name} to consume a static "
                                "number of Philox blocks")
        if len(in_axes) < 2 or in_axes[-1] >= 0 or in_axes[-2] >= 0 or out_axes[-1] >= 0:
            raise self.fail(op, "the RNG state operands (seed, offset) and the returned offset "
                                "of a vmap must not be batched")
        return ir.IntegerAttr(fn.attributes[RNG_BLOCKS]).value


# -- custom rules -------------------------------------------------------------------------


def _lane_offsets(b: Builder, offset: ir.Value, size: int, blocks: int) -> ir.Value:
    """tensor<B x i64> of `offset + l * blocks`: lane l's start in the Philox counter space."""
    from .rules.structured import make_generic

    t = offset.type
    init = b.empty(ir.RankedTensorType.get([size], t))

    def body(bb: Builder, a: list[ir.Value]) -> list[ir.Value]:
        lane = bb.create("linalg.index", [], [ir.IndexType.get()], {
            "dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)}).result
        lane = bb.create("arith.index_cast", [lane], [t]).result
        step = bb.create("arith.constant", [], [t], {"value": ir.IntegerAttr.get(t, blocks)})
        start = bb.create("arith.muli", [lane, step.result], [t]).result
        return [bb.create("arith.addi", [a[0], start], [t]).result]

    maps = [ir.AffineMap.get(1, 0, []), ir.AffineMap.get_identity(1)]
    return make_generic(b, [offset], [init], maps, ["parallel"], body).result


_BY_AD_DRIVER: weakref.WeakKeyDictionary[Any, VmapDriver] = weakref.WeakKeyDictionary()


def lower_inner_vmap(ad_driver: Any, op: ir.Operation) -> None:
    """Lower an autodiff.vmap found inside code being differentiated.

    Registered with the differentiation driver (`register_inner_lowerer`), so
    grad/jvp of vmap work whichever pass runs first.
    """
    driver = _BY_AD_DRIVER.get(ad_driver)
    if driver is None:
        driver = _BY_AD_DRIVER[ad_driver] = VmapDriver(ad_driver.module, ad_driver)
    driver.lower(op)


def lower_vmaps_in(module: ir.Operation, root: ir.Operation, ad_driver: Any = None) -> None:
    """Lower every autodiff.vmap under `root`."""
    if any(op_name(o) == VMAP for o in walk_ops(root)):
        VmapDriver(module, ad_driver).lower_all(root)


register_inner_lowerer(VMAP, lower_inner_vmap)


def batched_outputs(fn: ir.Operation, flags: Sequence[bool]) -> list[bool]:
    """Which results of function `fn` depend on the arguments marked in `flags`.

    A conservative dependence analysis (an op's results depend on everything
    it reads), used by the front end to reject `out_axes=None` on an output
    that would be batched before anything is compiled.
    """
    block = fn.regions[0].blocks[0]
    tainted = {a for a, f in zip(block.arguments, flags) if f}
    ops = list(block.operations)
    for op in ops[:-1]:
        op = op.operation
        reads = list(op.operands) + (captured_values(op) if op.regions else [])
        if any(v in tainted for v in reads):
            tainted.update(op.results)
    return [v in tainted for v in ops[-1].operands]


def run_pass(module: ir.Operation) -> None:

    with module.location:
        VmapDriver(module).lower_all(module)
        # Once no jvp/vjp is left: stop_gradient folds and checkpoints (they only
        # matter to a later jvp/vjp) become calls; the bookkeeping of inner vjp
        # lowerings goes (see ad_cleanup).
        finish_pass(module, (TAPED, TAPE))


@dataclasses.dataclass(frozen=True)
class VmapCore(Pass):
    name = "autodiff-vmap-core"
    summary = "Lower autodiff.vmap ops (without clean-up)"

    def run(self, module: ir.Operation) -> None:
        run_pass(module)


@register
@dataclasses.dataclass(frozen=True)
class Vmap(Pass):
    name = PASS
    summary = "Batching: lower autodiff.vmap to calls of generated batched functions"

    def expand(self) -> Sequence[PipelineElement]:
        from .jvp import CLEANUP, DedupeResults

        return [VmapCore(), *CLEANUP, DedupeResults()]
