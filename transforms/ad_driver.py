"""The differentiation driver shared by `--autodiff-jvp` and `--autodiff-vjp`.

For an `autodiff.jvp {fn = @f}` the driver generates `@f_jvp` (primals...,
tangents...) -> (outputs..., output tangents...) by cloning `@f` and inserting
tangent code after every active op (per-op rules from `rules/`). For an
`autodiff.vjp {fn = @f, wrt}` it generates `@f_fwd` (primals...) ->
(outputs..., residuals...) and `@f_bwd` (residuals..., output cotangents...)
-> (cotangents of the wrt inputs...): it first builds one combined function
(a clone of `@f`, then the backward sweep in reverse op order), then splits it
at the boundary; the residuals are exactly the forward values the backward
code uses. Generated functions are cached per (function, mode, wrt).

Higher order: before a function is differentiated, every autodiff.jvp/vjp op
inside it (and inside its callees) is lowered first, whichever pass runs, so
`jvp of vjp`, `vjp of vjp` ... compose. Other passes' ops (autodiff.vmap) plug
into the same step through `register_inner_lowerer`.

Custom rules (function attributes, wherever @f is differentiated, directly or
through calls): `autodiff.custom_jvp = @r` is called by forward mode;
`autodiff.custom_vjp = {fwd, bwd}` by reverse mode. Where a mode has no rule
the driver composes: forward mode of a custom_vjp-only function
differentiates the primal body (sound: rule and body compute the same
function); reverse mode of a custom_jvp-only function transposes the JVP rule
(reverse mode of @r with respect to its tangents, at zero tangents), as JAX
does. Higher orders differentiate the rule functions. Rule signatures are
checked where they are used, with a diagnostic at @f.

Checkpointing: `autodiff.checkpoint {fn = @g, policy, names}` is a call whose
residuals are recomputed in the backward pass (`ad_checkpoint.checkpoint_plan`);
`policy` is one of POLICIES (default nothing_saveable: only the inputs stay
alive), `names` the `checkpoint_name`s that save_only_these_names keeps. A
`checkpoint_name` is a call of a private identity function carrying
`autodiff.checkpoint_name = "h"`. Forward mode keeps a checkpoint a checkpoint
(of the jvp function); once no jvp/vjp op is left, checkpoints become calls and
name markers disappear (`lower_checkpoints`).

Modules: this one holds the driver (`ADDriver`: generated functions, custom
rules, the combined function and its split); `ad_modes.py` the forward and
reverse sweeps over a block; `ad_checkpoint.py` checkpoint plans and their
lowering; `ad_cleanup.py` the clean-up ending each pass; `ad_residuals.py` the
report of what reverse mode saves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import (
    AD_OPS,
    BOUNDARY,
    CUSTOM_JVP,
    CUSTOM_VJP,
    CUSTOM_VMAP,
    JVP,
    VJP,
    VMAP,
    symbol_of,
)
from .ad_checkpoint import CheckpointPlan, checkpoint_plan
from .ad_cleanup import finish_pass, strip_bookkeeping
from .ad_modes import ForwardAD, ReverseAD
from .ad_support import (
    Builder,
    FunctionTable,
    function_type,
    is_float,
    is_known_zero,
    lower_each,
    op_name,
    residual_operands,
    unique_name,
    walk_ops,
)
from .diagnostics import PassFailure, fail
from .rules.registry import load_all

#: Inner op lowerers: op name -> `lower(driver, op)` replacing `op` (e.g. an
#: `autodiff.vmap`) by ordinary IR. Before a function is differentiated, every
#: such op inside it (and its callees) is lowered, as jvp/vjp ops are, so a
#: transform defined in another pass (vmap) composes under differentiation
#: without that pass knowing about this driver's internals.
INNER_LOWERERS: dict[str, Callable[[Any, ir.Operation], None]] = {}
#: op name -> module under `mlir_autodiff.transforms` whose import registers its
#: lowerer (imported lazily, only when such an op must be lowered).
INNER_LOWERER_MODULES: dict[str, str] = {VMAP: "vmap"}

def register_inner_lowerer(name: str, lower: Callable[[Any, ir.Operation], None]) -> None:
    """Let the differentiation passes lower `name` ops found inside differentiated code."""
    INNER_LOWERERS[name] = lower


def _inner_kinds() -> tuple[str, ...]:
    return AD_OPS + tuple(INNER_LOWERERS)


def _zero_of(b: Builder, v: ir.Value) -> ir.Value:
    """A zero of `v`'s type, float or integer (tangents of integer outputs), of
    `v`'s shape where it is dynamic."""
    return b.materialize(None, v)


def _zero_of_type(b: Builder, t: ir.Type, at: Any) -> ir.Value:
    """A zero constant of static type `t` (float or integer, scalar or tensor)."""
    if isinstance(t, ir.ShapedType) and not t.has_static_shape:
        raise fail(at, f"cannot build a zero of the dynamically shaped type {t}")
    et = t.element_type if isinstance(t, ir.ShapedType) else t
    attr = ir.FloatAttr.get(et, 0.0) if is_float(t) else ir.IntegerAttr.get(et, 0)
    if isinstance(t, ir.ShapedType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return b.create("arith.constant", [], [t], {"value": attr}).result


class ADDriver:
    """Per-pass-run state: the module, the caches, the pass name for diagnostics."""

    def __init__(self, module: ir.Operation, pass_name: str):
        load_all()
        self.module = module
        self.pass_name = pass_name
        self.body = module.regions[0].blocks[0]
        self.jvp_cache: dict[tuple[str, frozenset[int]], str] = {}
        self.vjp_cache: dict[tuple[str, tuple[int, ...]], tuple] = {}
        self.prepared: set[str] = set()
        self.in_progress: set[str] = set()
        #: functions whose fwd/bwd are being generated (a call reaching one is recursion)
        self.vjp_in_progress: set[str] = set()
        #: functions lift_control_flow has made (or found) structured
        self.structured: set[str] = set()

    # -- utilities -------------------------------------------------------------

    def fail(self, where: Any, msg: str) -> PassFailure:
        return fail(where, f"{self.pass_name}: {msg}")

    def functions(self) -> FunctionTable:
        return FunctionTable(self.module)

    def lookup(self, name: str, at: Any) -> ir.Operation:
        fn = self.functions().get(name)
        if fn is None:
            raise self.fail(at, f"'{op_name(at)}' refers to an unknown function @{name}")
        if len(fn.regions[0].blocks) == 0:
            raise self.fail(at, f"cannot differentiate @{name}: it is only a declaration")
        if name not in self.structured:
            from .lift_cf import lift_control_flow  # cf branches, multi-block regions -> scf

            lift_control_flow(fn, self.fail, f"differentiate @{name}")
            # (the rules only build single-block regions: checked once per function)
            self.structured.add(name)
        if len(fn.regions[0].blocks) != 1:
            raise self.fail(at, f"cannot differentiate @{name}: it has more than one block")
        return fn

    def unique_name(self, base: str) -> str:
        # any symbol's name is taken, not only the functions'
        return unique_name(self.functions().symbols, base)

    def clone_function(self, fn: ir.Operation, name: str) -> ir.Operation:
        new = fn.clone(ip=ir.InsertionPoint(self.body))
        new.attributes["sym_name"] = ir.StringAttr.get(name)
        new.attributes["sym_visibility"] = ir.StringAttr.get("private")
        for attr in (CUSTOM_VJP, CUSTOM_JVP, CUSTOM_VMAP,
                     "llvm.emit_c_interface"):
            if attr in new.attributes:
                del new.attributes[attr]
        return new

    # -- lowering autodiff ops ---------------------------------------------------

    def lower_all(self, root: ir.Operation, kinds: Sequence[str]) -> None:
        """Lower every op of `kinds` under `root`, one at a time (the IR changes)."""
        lower_each(root, kinds, self.lower)

    def prepare(self, name: str, at: Any) -> ir.Operation:
        """Lower autodiff ops inside @name and its callees before differentiating it."""
        fn = self.lookup(name, at)
        if name in self.prepared or name in self.in_progress:
            return fn
        self.in_progress.add(name)
        try:
            self._load_inner_lowerers(fn)
            self.lower_all(fn, _inner_kinds())
            for o in walk_ops(fn):
                if op_name(o) == "func.call":
                    callee = symbol_of(o, "callee")
                    if callee in self.functions():
                        self.prepare(callee, o)
        finally:
            self.in_progress.discard(name)
        self.prepared.add(name)
        return fn

    def lower(self, op: ir.Operation) -> None:
        kind = op_name(op)
        if kind == JVP:
            self.lower_jvp_op(op)
        elif kind == VJP:
            self.lower_vjp_op(op)
        else:
            INNER_LOWERERS[kind](self, op)

    def _load_inner_lowerers(self, root: ir.Operation) -> None:
        """Import the modules registering lowerers of the inner ops under `root`."""
        if all(kind in INNER_LOWERERS for kind in INNER_LOWERER_MODULES):
            return  # all imported already: no walk
        for o in walk_ops(root):
            kind = op_name(o)
            if kind not in INNER_LOWERERS and kind in INNER_LOWERER_MODULES:
                importlib.import_module(f"{__package__}.{INNER_LOWERER_MODULES[kind]}")

    def _check_types(self, op: ir.Operation, what: str, got: Sequence[ir.Type],
                     want: Sequence[ir.Type]) -> None:
        if len(got) != len(want):
            raise self.fail(op, f"expected {len(want)} {what}, got {len(got)}")
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise self.fail(op, f"{what} #{i} has type {g}, expected {w}")

    def lower_jvp_op(self, op: ir.Operation) -> None:
        name = symbol_of(op, "fn")
        fn = self.lookup(name, op)
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        self._check_types(op, "operands (primals and tangents of @" + name + ")",
                          [v.type for v in op.operands], params * 2)
        self._check_types(op, "results (outputs and output tangents of @" + name + ")",
                          [r.type for r in op.results], results * 2)
        tangents = list(op.operands)[len(params):]
        gen = self.jvp_function(name, op, frozenset(
            i for i, t in enumerate(tangents) if is_known_zero(t)))
        call = func.CallOp([r.type for r in op.results], ir.FlatSymbolRefAttr.get(gen),
                           list(op.operands), loc=op.location, ip=ir.InsertionPoint(op))
        for old, new in zip(op.results, call.results):
            old.replace_all_uses_with(new)
        op.erase()

    def parse_wrt(self, op: ir.Operation, params: list[ir.Type]) -> list[int]:
        if "wrt" not in op.attributes:
            wrt = [i for i, t in enumerate(params) if is_float(t)]
        else:
            wrt = list(ir.DenseI64ArrayAttr(op.attributes["wrt"]))
        for i in wrt:
            if not 0 <= i < len(params):
                raise self.fail(op, f"wrt index {i} is out of range: @{symbol_of(op, 'fn')} has "
                                    f"{len(params)} parameters")
            if not is_float(params[i]):
                raise self.fail(op, f"wrt index {i} refers to a parameter of non-float type "
                                    f"{params[i]}")
        if len(set(wrt)) != len(wrt) or wrt != sorted(wrt):
            raise self.fail(op, "wrt indices must be strictly increasing")
        return wrt

    def lower_vjp_op(self, op: ir.Operation) -> None:
        name = symbol_of(op, "fn")
        fn = self.lookup(name, op)
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        wrt = self.parse_wrt(op, params)
        self._check_types(op, "operands (primals and output cotangents of @" + name + ")",
                          [v.type for v in op.operands], params + results)
        self._check_types(op, "results (outputs and cotangents of @" + name + ")",
                          [r.type for r in op.results], results + [params[i] for i in wrt])
        fwd, bwd, res_types, spec = self.vjp_functions(name, wrt, op)
        ip, loc = ir.InsertionPoint(op), op.location
        xs = list(op.operands)[: len(params)]
        cts = list(op.operands)[len(params):]
        fcall = func.CallOp(results + res_types, ir.FlatSymbolRefAttr.get(fwd), xs,
                            loc=loc, ip=ip)
        outs = list(fcall.results)
        bcall = func.CallOp([params[i] for i in wrt], ir.FlatSymbolRefAttr.get(bwd),
                            residual_operands(spec, xs, outs[len(results):]) + cts,
                            loc=loc, ip=ip)
        for old, new in zip(op.results, outs[: len(results)] + list(bcall.results)):
            old.replace_all_uses_with(new)
        op.erase()

    # -- generated functions (cached) --------------------------------------------

    def jvp_function(self, name: str, at: Any, zeros: frozenset[int] = frozenset()) -> str:
        """The forward-mode function of @name: its `autodiff.custom_jvp` rule if it has
        one, else generated from its body (also when it only has a custom_vjp: the
        primal body is differentiated in forward mode, which is sound, as the rule
        and the body compute the same function).

        `zeros`: parameters whose tangent every caller passes as zero (JAX's
        symbolic zeros). The generated function keeps its signature but treats
        them as inactive, so no tangent work is spent on them (a closed-over
        weight in a Hessian-vector product would cost two extra matmuls)."""
        key = (name, zeros)
        if key not in self.jvp_cache:
            fn = self.lookup(name, at)
            rule = self.custom_jvp_rule(fn, name)
            if rule is not None:
                self.jvp_cache[key] = rule
            else:
                fn = self.prepare(name, at)
                self.jvp_cache[key] = self.generate_jvp(fn, name, zeros)
        return self.jvp_cache[key]

    def vjp_functions(self, name: str, wrt: Sequence[int], at: Any
                      ) -> tuple[str, str, list[ir.Type], list[int]]:
        """(fwd, bwd, types of the residuals fwd returns, residual spec): see
        `residual_operands` for how a call site assembles bwd's operands.

        A `custom_vjp` is used as it is; a function with only a `custom_jvp` is
        differentiated by transposing its rule (reverse mode of the rule with
        respect to the tangents, which it is linear in), as JAX does."""
        key = (name, tuple(wrt))
        if key not in self.vjp_cache:
            fn = self.lookup(name, at)
            if CUSTOM_VJP in fn.attributes:
                self.vjp_cache[key] = self.custom_vjp(fn, name, list(wrt))
            elif self.custom_jvp_rule(fn, name) is not None:
                self.vjp_cache[key] = self.transposed_jvp(fn, name, list(wrt))
            else:
                if name in self.vjp_in_progress:
                    # The residuals of a recursive call depend on how deep it
                    # recurses: no fixed signature of @f_fwd can return them.
                    raise self.fail(at, f"reverse mode of the recursive function @{name} is "
                                        "not supported (it is reached again from its own "
                                        "body; forward mode supports it)")
                fn = self.prepare(name, at)
                self.vjp_in_progress.add(name)
                try:
                    self.vjp_cache[key] = self.generate_vjp(fn, name, list(wrt))
                finally:
                    self.vjp_in_progress.discard(name)
        return self.vjp_cache[key]

    # -- custom rules -------------------------------------------------------------

    def _rule_function(self, fn: ir.Operation, name: str, attr: str, ref: Any) -> str:
        """The function a custom-rule attribute names, checked to exist with a body."""
        if not isinstance(ref, ir.FlatSymbolRefAttr):
            raise self.fail(fn, f"{attr} of @{name} must name a function (@rule), got {ref}")
        rule = ref.value
        rfn = self.functions().get(rule)
        if rfn is None:
            raise self.fail(fn, f"{attr} of @{name} refers to an unknown function @{rule}")
        if len(rfn.regions[0].blocks) != 1:
            raise self.fail(fn, f"{attr} of @{name}: @{rule} must have a body of one block")
        return rule

    def custom_jvp_rule(self, fn: ir.Operation, name: str) -> str | None:
        """@name's checked `autodiff.custom_jvp` rule, None without one."""
        if CUSTOM_JVP not in fn.attributes:
            return None
        rule = self._rule_function(fn, name, CUSTOM_JVP,
                                   fn.attributes[CUSTOM_JVP])
        ft = function_type(fn)
        want = ir.FunctionType.get(list(ft.inputs) * 2, list(ft.results) * 2)
        got = function_type(self.functions()[rule])
        if got != want:
            raise self.fail(fn, f"{CUSTOM_JVP} of @{name}: @{rule} has type {got}, "
                                f"expected {want} (primals, tangents) -> (results, tangents)")
        return rule

    def custom_vjp(self, fn: ir.Operation, name: str, wrt: list[int]) -> tuple:
        """`autodiff.custom_vjp = {fwd, bwd}`: fwd (args) -> (outs, residuals), bwd
        (residuals, cotangents) -> cotangents of every input; a small wrapper
        selects the `wrt` ones."""
        attr = CUSTOM_VJP
        spec = fn.attributes[attr]
        if not isinstance(spec, ir.DictAttr) or "fwd" not in spec or "bwd" not in spec:
            raise self.fail(fn, f"{attr} of @{name} must be {{fwd = @..., bwd = @...}}")
        fwd = self._rule_function(fn, name, attr, spec["fwd"])
        bwd = self._rule_function(fn, name, attr, spec["bwd"])
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        fwd_t = function_type(self.functions()[fwd])
        bwd_t = function_type(self.functions()[bwd])
        res_types = list(fwd_t.results)[len(results):]

        def types(ts: Sequence[ir.Type]) -> str:
            return "(" + ", ".join(str(t) for t in ts) + ")"

        if list(fwd_t.inputs) != params or list(fwd_t.results)[: len(results)] != results:
            raise self.fail(fn, f"{attr} of @{name}: @{fwd} has type {fwd_t}, expected "
                                f"{types(params)} -> {types(results)} followed by residuals")
        if list(bwd_t.inputs) != res_types + results or list(bwd_t.results) != params:
            raise self.fail(fn, f"{attr} of @{name}: @{bwd} has type {bwd_t}, expected "
                                f"{types(res_types + results)} -> {types(params)} "
                                "(residuals, result cotangents) -> one cotangent per parameter")
        spec = list(range(len(res_types)))
        if wrt == list(range(len(params))):
            return fwd, bwd, res_types, spec
        sel_name = self.unique_name(f"{bwd}_wrt")
        sel = func.FuncOp(sel_name, (res_types + results, [params[i] for i in wrt]),
                          loc=fn.location, ip=ir.InsertionPoint(self.body))
        sel.attributes["sym_visibility"] = ir.StringAttr.get("private")
        blk = sel.add_entry_block()
        call = func.CallOp(params, ir.FlatSymbolRefAttr.get(bwd), list(blk.arguments),
                           loc=fn.location, ip=ir.InsertionPoint(blk))
        func.ReturnOp([call.results[i] for i in wrt], loc=fn.location,
                      ip=ir.InsertionPoint(blk))
        return fwd, sel_name, res_types, spec

    def _new_function(self, name: str, inputs: Sequence[ir.Type], results: Sequence[ir.Type],
                      loc: ir.Location) -> tuple[str, ir.Block]:
        name = self.unique_name(name)
        fn = func.FuncOp(name, (list(inputs), list(results)), loc=loc,
                         ip=ir.InsertionPoint(self.body))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
        return name, fn.add_entry_block()

    def transposed_jvp(self, fn: ir.Operation, name: str, wrt: list[int]) -> tuple:
        """Reverse mode of a function that only has a `custom_jvp` rule @r.

        @r (xs, ts) -> (ys, dys) is linear in ts, so the cotangents of the
        inputs are the cotangents of ts in r's own reverse mode at ts = 0
        (with a zero cotangent for ys): fwd(xs) = r_fwd(xs, 0) and
        bwd(res, ct) = r_bwd(res, 0, ct). Higher orders differentiate r."""
        rule = self.custom_jvp_rule(fn, name)
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        n = len(params)
        rfwd, rbwd, rres, rspec = self.vjp_functions(rule, [n + i for i in wrt], fn)
        loc = fn.location
        # fwd: the rule's forward at zero tangents; returns what bwd needs.
        ret_idx = sorted({e for e in rspec if e >= 0})
        fwd_name, blk = self._new_function(f"{name}_fwd", params,
                                           results + [rres[e] for e in ret_idx], loc)
        b = Builder(ir.InsertionPoint(blk), loc)
        xs = list(blk.arguments)
        zeros = [_zero_of(b, x) for x in xs]
        call = func.CallOp(results * 2 + rres, ir.FlatSymbolRefAttr.get(rfwd), xs + zeros,
                           loc=loc, ip=b.ip)
        outs = list(call.results)
        returned = outs[2 * len(results):]
        func.ReturnOp(outs[: len(results)] + [returned[e] for e in ret_idx], loc=loc, ip=b.ip)
        # bwd: residual operands in rspec order (primal args by spec, tangents are zeros).
        spec: list[int] = []
        res_types: list[ir.Type] = []
        for e in rspec:
            if e >= 0:
                spec.append(ret_idx.index(e))
                res_types.append(rres[e])
            elif -1 - e < n:
                spec.append(e)
                res_types.append(params[-1 - e])
        bwd_name, blk = self._new_function(f"{name}_bwd", res_types + results,
                                           [params[i] for i in wrt], loc)
        b = Builder(ir.InsertionPoint(blk), loc)
        args = list(blk.arguments)
        res_args, cts = args[: len(res_types)], args[len(res_types):]
        it = iter(res_args)
        operands = []
        for e in rspec:
            if e >= 0 or -1 - e < n:
                operands.append(next(it))
            else:  # a tangent of the rule: zero
                operands.append(_zero_of_type(b, params[-1 - e - n], fn))
        zero_cts = [_zero_of_type(b, t, fn) for t in results]
        call = func.CallOp([params[i] for i in wrt], ir.FlatSymbolRefAttr.get(rbwd),
                           operands + zero_cts + cts, loc=loc, ip=b.ip)
        func.ReturnOp(list(call.results), loc=loc, ip=b.ip)
        # The return-order of fwd's residuals is ret_idx order; spec refers to it.
        return fwd_name, bwd_name, [rres[e] for e in ret_idx], spec

    # -- checkpointing --------------------------------------------------------------

    def checkpoint_plan(self, op: ir.Operation, wrt: Sequence[int]) -> CheckpointPlan:
        """Reverse mode of `autodiff.checkpoint` (see `ad_checkpoint.checkpoint_plan`)."""
        return checkpoint_plan(self, op, wrt)

    def generate_jvp(self, fn: ir.Operation, name: str,
                     zeros: frozenset[int] = frozenset()) -> str:
        new_name = self.unique_name(f"{name}_jvp")
        new = self.clone_function(fn, new_name)
        # Known before its body is differentiated: a recursive call (directly or
        # through other functions) calls the function being generated.
        self.jvp_cache[(name, zeros)] = new_name
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        block = new.regions[0].blocks[0]
        loc = new.location
        targs = [block.add_argument(t, loc) for t in params]
        tmap = {a: t for i, (a, t) in enumerate(zip(list(block.arguments)[: len(params)], targs))
                if is_float(a.type) and i not in zeros}
        fwd = ForwardAD(self, tmap)
        fwd.run_block(block)
        ret = list(block.operations)[-1]
        outs = list(ret.operands)
        b = Builder(ir.InsertionPoint(ret), ret.location, fwd)
        touts = []
        for v in outs:
            t = fwd.tangent(v)
            touts.append(t if t is not None else _zero_of(b, v))
        func.ReturnOp(outs + touts, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        new.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(params * 2, results * 2))
        return new_name

    def generate_vjp(self, fn: ir.Operation, name: str, wrt: list[int]) -> tuple:
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        fwd_name = self.unique_name(f"{name}_fwd")
        comb = self.clone_function(fn, fwd_name)
        block = comb.regions[0].blocks[0]
        loc = comb.location
        ctargs = [block.add_argument(t, loc) for t in results]
        args = list(block.arguments)[: len(params)]
        rev = ReverseAD(self, {args[i] for i in wrt})
        ops = list(block.operations)
        ret = ops[-1]
        rev.propagate(ops[:-1])
        rev.prepare_forward(ops[:-1])
        ops = list(block.operations)
        rev.propagate(ops[:-1])  # ops the augmentation created or inlined
        ip = ir.InsertionPoint(ret)
        b = Builder(ip, ret.location, rev)
        idx = ir.IndexType.get()
        # The boundary between the forward and the backward code.
        marker = b.create("arith.constant", [], [idx],
                          {"value": ir.IntegerAttr.get(idx, 0),
                           BOUNDARY: ir.UnitAttr.get()})
        for v, c in zip(ret.operands, ctargs):
            rev.add_ct(b, v, c)
        rev.sweep(ops[:-1], ip)
        grads = [b.materialize(rev.ct.get(args[i]), args[i]) for i in wrt]
        outs = list(ret.operands)
        bwd_name = self.unique_name(f"{name}_bwd")
        res_types, spec = self._split(comb, marker, ret, outs, grads, ctargs, params, results,
                                      wrt, bwd_name)
        # The tape bookkeeping belongs to this differentiation only: left on the
        # generated functions, a later one (reverse over reverse) would take this
        # level's tape writes and counters for its own and drop them from the
        # code it recomputes and differentiates.
        funcs = self.functions()
        strip_bookkeeping(funcs[fwd_name])
        strip_bookkeeping(funcs[bwd_name])
        return fwd_name, bwd_name, res_types, spec

    def _same_values_once(self, prefix: Sequence[Any]) -> None:
        """A call result that is another result or an argument of the call
        (its callee returns the same value twice, or returns an argument: a
        checkpoint's output that is also a residual, a `checkpoint_name`
        identity) is replaced by that value, so the backward function gets
        the value once."""
        for o in prefix:
            if op_name(o) != "func.call":
                continue
            callee = self.functions().get(symbol_of(o, "callee"))
            if callee is None or not callee.regions[0].blocks:
                continue
            cblock = callee.regions[0].blocks[0]
            rets = list(list(cblock.operations)[-1].operands)
            cargs = list(cblock.arguments)
            for k, r in enumerate(o.results):
                same = next((o.results[j] for j in range(k) if rets[j] == rets[k]), None)
                if same is None and rets[k] in cargs:
                    same = o.operands[cargs.index(rets[k])]
                if same is not None:
                    r.replace_all_uses_with(same)

    def _split(self, comb, marker, ret, outs, grads, ctargs, params, results, wrt, bwd_name):
        block = comb.regions[0].blocks[0]
        ops = list(block.operations)
        k = next(i for i, o in enumerate(ops) if o.operation == marker.operation)
        prefix, suffix = ops[:k], ops[k + 1 : -1]
        self._same_values_once(prefix)
        marker_op, ret_op, comb_op = marker.operation, ret.operation, comb.operation

        def in_suffix(user: Any) -> bool:
            # The ancestor of `user` in the function's block, then its side of the marker.
            o = user.operation
            while o.parent is not None and o.parent.operation != comb_op:
                o = o.parent.operation
            return o != ret_op and o != marker_op and marker_op.is_before_in_block(o)

        candidates = list(block.arguments)[: len(params)]
        for o in prefix:
            candidates.extend(o.results)
        grad_set = set(grads)
        residuals = []
        suffix_uses: dict[int, list[tuple[Any, int]]] = {}
        consts: list[tuple[ir.Value, list[tuple[Any, int]]]] = []
        for v in candidates:
            uses = [(u.owner.operation, u.operand_number) for u in v.uses if in_suffix(u.owner)]
            d = v.owner
            if uses and not isinstance(d, ir.Block) and op_name(d) == "arith.constant" \
                    and v not in grad_set:
                consts.append((v, uses))  # rematerialized in the backward function
            elif uses or v in grad_set:
                suffix_uses[len(residuals)] = uses
                residuals.append(v)
        ct_uses = [[(u.owner.operation, u.operand_number) for u in c.uses if in_suffix(u.owner)]
                   for c in ctargs]
        res_types = [v.type for v in residuals]
        bwd = func.FuncOp(bwd_name, (res_types + results, [params[i] for i in wrt]),
                          loc=comb.location, ip=ir.InsertionPoint(self.body))
        bwd.attributes["sym_visibility"] = ir.StringAttr.get("private")
        bblock = bwd.add_entry_block()
        bargs = list(bblock.arguments)
        bip = ir.InsertionPoint(bblock)
        for o in suffix:
            bip.insert(o.operation.detach_from_parent())
        for v, uses in consts:
            c = v.owner.operation.clone(ip=ir.InsertionPoint.at_block_begin(bblock))
            for owner, n in uses:
                owner.operands[n] = c.results[0]
        for i, uses in suffix_uses.items():
            for owner, n in uses:
                owner.operands[n] = bargs[i]
        for j, uses in enumerate(ct_uses):
            for owner, n in uses:
                owner.operands[n] = bargs[len(residuals) + j]
        remap = dict(zip(residuals, bargs)) | dict(zip(ctargs, bargs[len(residuals):]))
        func.ReturnOp([remap.get(g, g) for g in grads], loc=ret.location, ip=bip)
        # The forward function: outputs and residuals. A residual that is a
        # primal argument is not returned: the caller passes its own operand
        # (spec entry -1 - i), so no tensor is copied out just to come back.
        args = list(block.arguments)[: len(params)]
        spec, returned = [], []
        for r in residuals:
            if r in args:
                spec.append(-1 - args.index(r))
            else:
                spec.append(len(returned))
                returned.append(r)
        func.ReturnOp(outs + returned, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        marker.erase()
        for i in reversed(range(len(params), len(params) + len(results))):
            block.erase_argument(i)
        out_types = [r.type for r in returned]
        comb.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(params, results + out_types))
        return out_types, spec


def run_pass(module: ir.Operation, pass_name: str, kind: str) -> None:
    """Body of --autodiff-jvp / --autodiff-vjp: lower every op of `kind`."""
    with module.location:
        ADDriver(module, pass_name).lower_all(module, (kind,))
        finish_pass(module)
