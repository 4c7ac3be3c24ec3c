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
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import func, linalg

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
)
from .ad_support import (
    Builder,
    captured_values,
    is_float,
    is_tensor,
    op_name,
    unique_name,
    walk_ops,
)
from .autodiff_common import register_inner_lowerer
from .diagnostics import PassFailure, fail
from .passes import Pass, PipelineElement, register
from .rules.batching import ALWAYS_RULE, BatchBuilder, batch_type, rule_for

PASS = "autodiff-vmap"


def _sym_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _i64s(op: ir.Operation, key: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[key]))


def _v(x: Any) -> ir.Value:
    return x if isinstance(x, ir.Value) else x.results[0]


def moveaxis_perm(rank: int, src: int, dst: int) -> list[int]:
    """The linalg.transpose permutation moving dimension `src` to position `dst`."""
    order = [d for d in range(rank) if d != src]
    order.insert(dst, src)
    return order


class BatchTrace:
    """Batching of one function body for one batch size: old values -> (new value, batched)."""

    def __init__(self, driver: Driver, size: int, randomness: str):
        self.driver = driver
        self.size = size
        self.randomness = randomness
        self.env: dict[ir.Value, tuple[ir.Value, bool]] = {}

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def lookup(self, v: ir.Value) -> tuple[ir.Value, bool]:
        return self.env[v]

    def batched_callee(self, name: str, flags: list[bool], at: Any
                       ) -> tuple[str, list[ir.Type], list[bool]]:
        return self.driver.batched_function(name, flags, self.size, self.randomness, at)

    # -- analysis ------------------------------------------------------------------

    def is_tainted(self, v: ir.Value, tainted: set[ir.Value]) -> bool:
        return v in tainted or (v in self.env and self.env[v][1])

    def taint(self, block: ir.Block, seeds: set[ir.Value]) -> set[ir.Value]:
        """Values of `block` that depend on `seeds` or on batched outer values."""
        tainted = set(seeds)
        for op in list(block.operations):
            op = op.operation
            reads = list(op.operands) + (captured_values(op) if op.regions else [])
            if op_name(op) in ALWAYS_RULE or any(self.is_tainted(v, tainted) for v in reads):
                tainted.update(op.results)
        return tainted

    def captures_batched(self, op: ir.Operation) -> bool:
        return any(v in self.env and self.env[v][1] for v in captured_values(op))

    # -- cloning -------------------------------------------------------------------

    def clone_unbatched(self, op: ir.Operation, ip: ir.InsertionPoint,
                        operands: Sequence[ir.Value] | None = None,
                        result_types: Sequence[ir.Type] | None = None,
                        attrs: dict[str, ir.Attribute] | None = None) -> ir.Operation:
        """Clone `op` at `ip` with outer values remapped (they must be unbatched).

        `operands`/`result_types`/`attrs` replace the clone's own (regions are kept).
        """
        c = op.operation.clone(ip=ip)
        if operands is not None:
            for k, v in enumerate(operands):
                c.operands[k] = v
        for inner in walk_ops(c)[(1 if operands is not None else 0):]:
            for k, v in enumerate(list(inner.operands)):
                if v in self.env:
                    nv, batched = self.env[v]
                    if batched:
                        raise self.fail(op, f"cannot batch '{op_name(op)}': its region uses "
                                            "a batched value")
                    inner.operands[k] = nv
        for r, t in zip(c.results, result_types or []):
            r.set_type(t)
        for k, a in (attrs or {}).items():
            c.attributes[k] = a
        return c

    def lane_body(self, src: ir.Block, dst: ir.Block, args: Sequence[ir.Value], *,
                  shift_index: bool, terminator: str | None = None) -> None:
        """Clone a linalg-style body into `dst`, where it runs once per (lane, element).

        Block arguments map to `args`; `linalg.index d` becomes `d + 1` when the
        batch loop was prepended; outer batched scalars become `tensor.extract`
        at the lane (`linalg.index 0`), outer batched tensors may only be read by
        `tensor.extract`, which gains the lane index.
        """
        local: dict[ir.Value, ir.Value] = dict(zip(src.arguments, args))
        loc = dst.owner.location if dst.owner is not None else ir.Location.unknown()
        lane: list[ir.Value] = []

        def lane_index() -> ir.Value:
            if not lane:
                lane.append(ir.Operation.create(
                    "linalg.index", results=[ir.IndexType.get()],
                    attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
                    loc=loc, ip=ir.InsertionPoint.at_block_begin(dst)).result)
            return lane[0]

        # Per-lane copies of batched outer scalars first, so they dominate the body.
        tensors: dict[ir.Value, ir.Value] = {}
        for o in _block_ops(src):
            for v in o.operands:
                if v in self.env and v not in local and v not in tensors:
                    nv, batched = self.env[v]
                    if not batched:
                        local[v] = nv
                    elif is_tensor(v.type):
                        tensors[v] = nv
                    else:
                        local[v] = ir.Operation.create(
                            "tensor.extract", results=[v.type], operands=[nv, lane_index()],
                            loc=loc, ip=ir.InsertionPoint(dst)).result
        ip = ir.InsertionPoint(dst)
        ops = list(src.operations)
        for o in ops:
            o = o.operation
            if o == ops[-1].operation and terminator is not None:
                ir.Operation.create(terminator, results=[],
                                    operands=[local.get(v, v) for v in o.operands],
                                    loc=o.location, ip=ip)
                continue
            c = o.clone(ip=ip)
            results = list(c.results)
            dead = []
            for inner in walk_ops(c):
                for k, v in enumerate(list(inner.operands)):
                    if v in local:
                        inner.operands[k] = local[v]
                    elif v in tensors:
                        if op_name(inner) != "tensor.extract" or k != 0:
                            raise self.fail(o, f"cannot batch '{op_name(inner)}' reading a "
                                               "batched tensor inside a linalg body")
                        rest = [local.get(x, x) for x in list(inner.operands)[1:]]
                        new = ir.Operation.create(
                            "tensor.extract", results=[inner.results[0].type],
                            operands=[tensors[v], lane_index(), *rest], loc=inner.location,
                            ip=ir.InsertionPoint(inner))
                        inner.results[0].replace_all_uses_with(new.results[0])
                        if inner == c:
                            results = list(new.results)
                        dead.append(inner)
                        break
                if shift_index and op_name(inner) == "linalg.index":
                    d = ir.IntegerAttr(inner.attributes["dim"]).value
                    inner.attributes["dim"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), d + 1)
            for old, new in zip(o.results, results):
                local[old] = new
            for d in dead:
                d.erase()

    # -- batching --------------------------------------------------------------------

    def batch_block(self, src: ir.Block, ip: ir.InsertionPoint,
                    args: Sequence[tuple[ir.Value, bool]]) -> list[tuple[ir.Value, bool]]:
        """Batch every op of `src` but its terminator at `ip`; return the terminator's operands."""
        for a, nv in zip(src.arguments, args):
            self.env[a] = nv
        ops = list(src.operations)
        for op in ops[:-1]:
            self.batch_op(op.operation, ip)
        return [self.env[v] for v in ops[-1].operands]

    def batch_op(self, op: ir.Operation, ip: ir.InsertionPoint) -> None:
        name = op_name(op)
        pairs = [self.env[v] for v in op.operands]
        vals = [v for v, _ in pairs]
        flags = [f for _, f in pairs]
        if name in ALWAYS_RULE or any(flags) or (op.regions and self.captures_batched(op)):
            rule = rule_for(name)
            if rule is None:
                raise self.fail(op, f"no batching rule for '{name}'")
            b = BatchBuilder(ip, op.location, self, op)
            outs = rule(b, op, vals, flags)
            for r, out in zip(op.results, outs):
                self.env[r] = out
        else:
            c = self.clone_unbatched(op, ip)
            for r, nr in zip(op.results, c.results):
                self.env[r] = (nr, False)


def _block_ops(block: ir.Block) -> list[ir.Operation]:
    out = []
    for o in block.operations:
        out.extend(walk_ops(o))
    return out


class Driver:
    """Per-pass-run state: the module, the batched-function cache, the AD driver."""

    def __init__(self, module: ir.Operation, ad_driver: Any = None):
        self.module = module
        self.body = module.regions[0].blocks[0]
        self.cache: dict[tuple, tuple[str, list[ir.Type], list[bool]]] = {}
        self.in_progress: set[tuple] = set()
        self.prepared: set[str] = set()
        self._ad = ad_driver
        #: batched functions whose primal has custom derivative rules still to batch
        self.pending: list[_Pending] = []
        self.depth = 0

    def fail(self, where: Any, msg: str) -> PassFailure:
        return fail(where, f"{PASS}: {msg}")

    def functions(self) -> dict[str, ir.Operation]:
        return {_sym_name(op): op.operation for op in self.body.operations
                if op_name(op) == "func.func"}

    def lookup(self, name: str, at: Any) -> ir.Operation:
        fn = self.functions().get(name)
        if fn is None:
            raise self.fail(at, f"'{op_name(at)}' refers to an unknown function @{name}")
        from .lift_cf import lift_control_flow  # cf branches, multi-block regions -> scf

        lift_control_flow(fn, self.fail, f"batch @{name}")
        if len(fn.regions[0].blocks) != 1:
            what = "only a declaration" if not fn.regions[0].blocks else "has several blocks"
            raise self.fail(at, f"cannot batch @{name}: it is {what}")
        return fn

    def unique_name(self, base: str) -> str:
        return unique_name(self.functions(), base)

    def ad_driver(self) -> Any:
        if self._ad is None:
            from .autodiff_common import Driver as AdDriver

            self._ad = AdDriver(self.module, PASS)
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
                callee = ir.FlatSymbolRefAttr(o.attributes["callee"]).value
                callee_fn = self.functions().get(callee)
                if callee_fn is not None and callee_fn.regions[0].blocks:
                    self.prepare(callee, o)
        return fn

    def lower_all(self, root: ir.Operation) -> None:
        """Lower every autodiff.vmap under `root`, one at a time (the IR changes)."""
        while True:
            found = [o for o in walk_ops(root) if op_name(o) == VMAP]
            if not found:
                return
            self.lower(found[0])

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
            self.pending.append(_Pending(fn, name, new.operation, list(flags), result[2], size,
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
                            f"{size}: {have}; expected a rule taking ({_types(want)}) with "
                            f"{IN_AXES} = array<i64: {axes}> (a rule may batch an unbatched "
                            "argument, not the converse)")

    # -- batched custom derivative rules (generate_vmap_rule) ----------------------------------

    def attach_custom_rules(self, p: _Pending) -> None:
        """Give a batched function the batched versions of its primal's custom_vjp and
        custom_jvp rules, so grad/jvp of vmap use the rules (see `CustomRuleBatcher`)."""
        CustomRuleBatcher(self, p).attach()

    # -- the op ------------------------------------------------------------------------------

    def lower(self, op: ir.Operation) -> None:
        """Replace one autodiff.vmap by transposes, a call of the batched function, transposes."""
        if "fn" not in op.attributes or not isinstance(op.attributes["fn"],
                                                       ir.FlatSymbolRefAttr):
            raise self.fail(op, f"'{VMAP}' needs an 'fn' symbol attribute")
        fname = ir.FlatSymbolRefAttr(op.attributes["fn"]).value
        for key in ("in_axes", "out_axes"):
            if key not in op.attributes or not isinstance(op.attributes[key],
                                                          ir.DenseI64ArrayAttr):
                raise self.fail(op, f"'{VMAP}' needs an '{key}' array<i64> attribute")
        in_axes, out_axes = _i64s(op, "in_axes"), _i64s(op, "out_axes")
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
                v = _transpose(b, v, moveaxis_perm(v.type.rank, a, 0))
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
                outs.append(_broadcast(b, v, r.type, a))
            elif a > 0:
                outs.append(_transpose(b, v, moveaxis_perm(v.type.rank, 0, a)))
            else:
                outs.append(v)
        for r, v in zip(results, outs):
            r.replace_all_uses_with(v)
        op.erase()


    def _rng_lanes(self, op: ir.Operation, fn: ir.Operation, in_axes: list[int],
                   out_axes: list[int]) -> int:
        """Check a vmap of an RNG-functionalized function; the blocks one call consumes."""
        name = _sym_name(fn)
        if RNG_BLOCKS not in fn.attributes:
            raise self.fail(op, f"randomness = \"different\" needs @{name} to consume a static "
                                "number of Philox blocks")
        if len(in_axes) < 2 or in_axes[-1] >= 0 or in_axes[-2] >= 0 or out_axes[-1] >= 0:
            raise self.fail(op, "the RNG state operands (seed, offset) and the returned offset "
                                "of a vmap must not be batched")
        return ir.IntegerAttr(fn.attributes[RNG_BLOCKS]).value


# -- custom rules -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VmapRule:
    """One checked `autodiff.custom_vmap` rule: @name for batch size `size`."""

    name: str
    type: ir.FunctionType
    in_axes: list[int]
    out_axes: list[int]
    size: int


def _types(ts: Sequence[ir.Type]) -> str:
    return ", ".join(str(t) for t in ts)


def _axes(xs: Sequence[int]) -> str:
    return f"array<i64: {', '.join(map(str, xs))}>"


def _with_batch(t: ir.Type, axis: int, size: int) -> ir.Type | None:
    """`t` with a dimension `size` inserted at `axis` (-1: `t` itself; None: out of range)."""
    if axis < 0:
        return t
    shape = list(t.shape) if is_tensor(t) else []
    if axis > len(shape):
        return None
    shape.insert(axis, size)
    return ir.RankedTensorType.get(shape, t.element_type if is_tensor(t) else t)


def check_vmap_rule(fail: Any, rule: str, ft: ir.FunctionType, rt: ir.FunctionType,
                    in_axes: list[int], out_axes: list[int]) -> VmapRule:
    """Check rule @rule (type `rt`) against the primal's type `ft`; `fail(msg)` makes the
    diagnostic. Its batch size is the size of its first batched argument's batch axis;
    every batched argument and result must have the primal's type with that size
    inserted at its axis, every unbatched one the primal's type."""
    ins, outs = list(ft.inputs), list(ft.results)
    for key, axes, what in ((IN_AXES, in_axes, ins), (OUT_AXES, out_axes, outs)):
        if len(axes) != len(what):
            kind = "arguments" if key == IN_AXES else "results"
            raise fail(f"has {key} = {_axes(axes)} with {len(axes)} entries for the "
                       f"{len(what)} {kind} of the primal function")
        if any(a < -1 for a in axes):
            raise fail(f"has {key} = {_axes(axes)}: an entry is -1 (unbatched) or an axis")
    first = next((i for i, a in enumerate(in_axes) if a >= 0), None)
    if first is None:
        raise fail(f"batches no argument (every {IN_AXES} entry is -1)")
    if len(rt.inputs) != len(ins) or len(rt.results) != len(outs):
        raise fail(f"has type {rt}, but the primal function has type {ft}")
    t, a = rt.inputs[first], in_axes[first]
    if not is_tensor(t) or t.rank <= a or t.is_dynamic_dim(a):
        raise fail(f"has type {rt}: argument {first} has no static dimension {a} to batch "
                   "along")
    size = t.shape[a]
    want_in = [_with_batch(x, a, size) for x, a in zip(ins, in_axes)]
    want_out = [_with_batch(x, a, size) for x, a in zip(outs, out_axes)]
    for key, axes, want, what in ((IN_AXES, in_axes, want_in, ins),
                                  (OUT_AXES, out_axes, want_out, outs)):
        for i, w in enumerate(want):
            if w is None:
                raise fail(f"has {key}[{i}] = {axes[i]}, out of range for type {what[i]}")
    if list(rt.inputs) != want_in or list(rt.results) != want_out:
        raise fail(f"has type {rt}, expected ({_types(want_in)}) -> ({_types(want_out)}) "
                   f"for {IN_AXES} = {_axes(in_axes)} and {OUT_AXES} = {_axes(out_axes)} at "
                   f"batch size {size}")
    return VmapRule(rule, rt, list(in_axes), list(out_axes), size)


def call_vmap_rule(b: BatchBuilder, rule: VmapRule, args: list[ir.Value],
                   flags: list[bool]) -> list[tuple[ir.Value, bool]]:
    """Call `rule` on arguments batched at axis 0 (`flags`): each batched one moves to
    the rule's axis, an unbatched one the rule wants batched is broadcast; results
    come back at axis 0, or unbatched where the rule's out_axes entry is -1."""
    operands = []
    for v, f, a, t in zip(args, flags, rule.in_axes, rule.type.inputs):
        if a >= 0 and not f:
            v = _broadcast(b, v, t, a)
        elif a > 0:
            v = _transpose(b, v, moveaxis_perm(t.rank, 0, a))
        operands.append(v)
    call = b.create("func.call", operands, list(rule.type.results),
                    {"callee": ir.FlatSymbolRefAttr.get(rule.name)})
    outs = []
    for r, a in zip(call.results, rule.out_axes):
        if a > 0:
            r = _transpose(b, r, moveaxis_perm(r.type.rank, a, 0))
        outs.append((r, a >= 0))
    return outs


@dataclasses.dataclass
class _Pending:
    """A batched function @batched of @name whose custom derivative rules await batching."""

    fn: ir.Operation
    name: str
    batched: ir.Operation
    flags: list[bool]
    out_flags: list[bool]
    size: int
    randomness: str


class CustomRuleBatcher:
    """The batched custom_vjp / custom_jvp rules of one batched function @f_b of @f
    (generate_vmap_rule, as torch.func calls it; JAX batches custom_vjp the same way).

    @f_b's signature (which arguments and results carry the batch) is fixed by
    @f's body or its custom_vmap rule. The rule functions are batched like any
    function with the same batched arguments, then adapted to @f_b in small
    wrappers @f_b_fwd, @f_b_bwd, @f_b_jvp:

    - fwd: a primal result that batched fwd returns unbatched and @f_b batched
      is broadcast; the converse takes lane 0 (rule and body compute the same
      function, and @f_b's result does not read a batched value, so every lane
      holds it). Residuals are returned as batched fwd makes them.
    - bwd: the residuals fwd returns batched are batched arguments of the
      batched bwd, and so are the cotangents of batched results. The cotangent
      of an unbatched result is the total over the lanes, which all share that
      result: each lane receives 1/B of it (what a loop over the lanes gives for
      a loss symmetric in them; exact for any bwd that is linear in its
      cotangents, as a VJP is). A cotangent the batched bwd gives per lane for an
      unbatched argument is summed over the lanes; one it gives unbatched is the
      same in every lane, so the sum is B times it; an unbatched cotangent of a
      batched argument is broadcast. Integer arguments get zeros.
    - jvp: primals and tangents are batched like @f_b's arguments; primal
      results are adapted as for fwd. A tangent the rule makes per lane for a
      result @f_b computes without a batched value cannot be represented: an
      error at @f.
    """

    def __init__(self, driver: Driver, p: _Pending):
        self.d = driver
        self.p = p
        ft = p.fn.attributes["function_type"].value
        self.params, self.results = list(ft.inputs), list(ft.results)
        bft = p.batched.attributes["function_type"].value
        self.b_params, self.b_results = list(bft.inputs), list(bft.results)
        self.trace = BatchTrace(driver, p.size, p.randomness)
        self.base = _sym_name(p.batched)

    def attach(self) -> None:
        fn, name, ad = self.p.fn, self.p.name, self.d.ad_driver()
        attrs: dict[str, ir.Attribute] = {}
        if CUSTOM_VJP in fn.attributes:
            fwd, bwd, _, _ = ad.custom_vjp(fn, name, list(range(len(self.params))))
            fwd_b, bwd_b = self.vjp(fwd, bwd)
            attrs[CUSTOM_VJP] = ir.DictAttr.get({"fwd": ir.FlatSymbolRefAttr.get(fwd_b),
                                                 "bwd": ir.FlatSymbolRefAttr.get(bwd_b)})
        rule = ad.custom_jvp_rule(fn, name)
        if rule is not None:
            attrs[CUSTOM_JVP] = ir.FlatSymbolRefAttr.get(self.jvp(rule))
        for k, v in attrs.items():
            self.p.batched.attributes[k] = v

    def batched(self, name: str, flags: list[bool]) -> tuple[str, list[ir.Type], list[bool]]:
        return self.d.batched_function(name, flags, self.p.size, self.p.randomness, self.p.fn)

    def new_function(self, suffix: str, inputs: list[ir.Type], results: list[ir.Type]
                     ) -> tuple[str, list[ir.Value], BatchBuilder]:
        name = self.d.unique_name(f"{self.base}_{suffix}")
        fn = func.FuncOp(name, (inputs, results), loc=self.p.fn.location,
                         ip=ir.InsertionPoint(self.d.body))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
        blk = fn.add_entry_block()
        b = BatchBuilder(ir.InsertionPoint(blk), self.p.fn.location, self.trace)
        return name, list(blk.arguments), b

    def call(self, b: BatchBuilder, callee: str, args: list[ir.Value],
             types: list[ir.Type]) -> list[ir.Value]:
        return list(b.create("func.call", args, types,
                             {"callee": ir.FlatSymbolRefAttr.get(callee)}).results)

    def ret(self, b: BatchBuilder, values: list[ir.Value]) -> None:
        func.ReturnOp(values, loc=b.loc, ip=b.ip)

    # -- adapting values to @f_b's signature ------------------------------------------------

    def primal(self, b: BatchBuilder, v: ir.Value, have: bool, want: bool,
               t: ir.Type) -> ir.Value:
        if want and not have:
            return b.bcast(v)
        if have and not want:
            return _lane0(b, v, t)
        return v

    def cotangent(self, b: BatchBuilder, v: ir.Value, have: bool, want: bool,
                  t: ir.Type, bt: ir.Type) -> ir.Value:
        if not is_float(t):
            return _zeros(b, bt)
        if want and not have:
            return b.bcast(v)
        if have and not want:
            return _sum_lanes(b, v, t)
        if not want:
            return b.scale(v, float(self.p.size))
        return v

    # -- the rules -----------------------------------------------------------------------------

    def vjp(self, fwd: str, bwd: str) -> tuple[str, str]:
        flags, oflags, n = self.p.flags, self.p.out_flags, len(self.results)
        fwd_b, fwd_types, fwd_flags = self.batched(fwd, flags)
        res_types, res_flags = fwd_types[n:], fwd_flags[n:]
        fname, args, b = self.new_function("fwd", self.b_params, self.b_results + res_types)
        outs = self.call(b, fwd_b, args, fwd_types)
        self.ret(b, [self.primal(b, v, h, w, t) for v, h, w, t in
                     zip(outs, fwd_flags, oflags, self.results)] + outs[n:])
        bwd_b, bwd_types, bwd_flags = self.batched(bwd, res_flags + oflags)
        bname, args, b = self.new_function("bwd", res_types + self.b_results, self.b_params)
        res, cts = args[:len(res_types)], args[len(res_types):]
        cts = [ct if f or not is_float(ct.type) else b.scale(ct, 1.0 / self.p.size)
               for ct, f in zip(cts, oflags)]
        grads = self.call(b, bwd_b, res + cts, bwd_types)
        self.ret(b, [self.cotangent(b, g, h, w, t, bt) for g, h, w, t, bt in
                     zip(grads, bwd_flags, flags, self.params, self.b_params)])
        return fname, bname

    def jvp(self, rule: str) -> str:
        flags, oflags, n = self.p.flags, self.p.out_flags, len(self.results)
        rule_b, types, rflags = self.batched(rule, flags + flags)
        name, args, b = self.new_function("jvp", self.b_params * 2, self.b_results * 2)
        outs = self.call(b, rule_b, args, types)
        for j, (h, w) in enumerate(zip(rflags[n:], oflags)):
            if h and not w:
                raise self.d.fail(self.p.fn, f"{CUSTOM_JVP} rule @{rule} of @{self.p.name} "
                                             f"gives a per-lane tangent of result {j}, which "
                                             f"@{self.p.name} computes from unbatched "
                                             "arguments only; cannot batch it")
        self.ret(b, [self.primal(b, v, h, w, t) for v, h, w, t in
                     zip(outs, rflags, oflags * 2, self.results * 2)])
        return name


def _lane0(b: Builder, v: ir.Value, t: ir.Type) -> ir.Value:
    """Lane 0 of batched `v`, of per-lane type `t`."""
    if not is_tensor(t):
        return b.create("tensor.extract", [v, b.index(0)], [t]).result
    r = t.rank
    return b.create("tensor.extract_slice", [v], [t], {
        "static_offsets": ir.DenseI64ArrayAttr.get([0] * (r + 1)),
        "static_sizes": ir.DenseI64ArrayAttr.get([1, *t.shape]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * (r + 1)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
    }).result


def _sum_lanes(b: Builder, v: ir.Value, t: ir.Type) -> ir.Value:
    """The sum over the lanes of batched `v`, of per-lane type `t`."""
    from .rules.structured import sum_to

    s = sum_to(b, v, list(range(1, v.type.rank)))
    return s if is_tensor(t) else b.create("tensor.extract", [s], [t]).result


def _zeros(b: Builder, t: ir.Type) -> ir.Value:
    if is_float(t):
        return b.constant(t, 0.0)
    attr = ir.IntegerAttr.get(t.element_type if is_tensor(t) else t, 0)
    if is_tensor(t):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return b.create("arith.constant", [], [t], {"value": attr}).result


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


def _transpose(b: Builder, x: ir.Value, perm: list[int]) -> ir.Value:
    t = x.type
    init = b.empty(ir.RankedTensorType.get([t.shape[p] for p in perm], t.element_type))
    with b.loc, b.ip:
        return _v(linalg.transpose(x, outs=[init], permutation=perm))


def _broadcast(b: Builder, v: ir.Value, t: ir.RankedTensorType, axis: int) -> ir.Value:
    """An unbatched result repeated along a new dimension `axis` (its out_axes entry)."""
    if not is_tensor(v.type):
        return b.fill(b.empty(t), v)
    with b.loc, b.ip:
        return _v(linalg.broadcast(v, outs=[b.empty(t)], dimensions=[axis]))


#: The batching driver of each differentiation driver (one cache per pass run).
_BY_AD_DRIVER: weakref.WeakKeyDictionary[Any, Driver] = weakref.WeakKeyDictionary()


def lower_inner_vmap(ad_driver: Any, op: ir.Operation) -> None:
    """Lower an autodiff.vmap found inside code being differentiated.

    Registered with the differentiation driver (`register_inner_lowerer`), so
    grad/jvp of vmap work whichever pass runs first.
    """
    driver = _BY_AD_DRIVER.get(ad_driver)
    if driver is None:
        driver = _BY_AD_DRIVER[ad_driver] = Driver(ad_driver.module, ad_driver)
    driver.lower(op)


def lower_vmaps_in(module: ir.Operation, root: ir.Operation, ad_driver: Any = None) -> None:
    """Lower every autodiff.vmap under `root`."""
    if any(op_name(o) == VMAP for o in walk_ops(root)):
        Driver(module, ad_driver).lower_all(root)


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
    from .autodiff_common import fold_stop_gradients, lower_checkpoints

    with module.location:
        Driver(module).lower_all(module)
        fold_stop_gradients(module)
        # Checkpoints only matter to a later jvp/vjp: none left, they become calls.
        lower_checkpoints(module)
        for o in walk_ops(module):  # bookkeeping of inner vjp lowerings (see autodiff_common)
            for attr in (TAPED, TAPE):
                if attr in o.attributes:
                    del o.attributes[attr]


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
