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
`jvp of vjp`, `vjp of vjp` ... compose.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import func

from .ad_support import (
    Builder,
    captured_values,
    is_float,
    op_name,
    residual_operands,
    walk_ops,
)
from .diagnostics import PassFailure, fail
from .rules.registry import JVP_RULES, VJP_RULES, load_all

AD_OPS = ("autodiff.jvp", "autodiff.vjp")


def _sym_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _fn_attr(op: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["fn"]).value


def _func_type(fn: ir.Operation) -> ir.FunctionType:
    return fn.attributes["function_type"].value


def _zero_of(b: Builder, v: ir.Value) -> ir.Value:
    """A zero of `v`'s type, float or integer (tangents of integer outputs)."""
    if is_float(v.type):
        return b.zeros_like(v)
    t = v.type
    et = t.element_type if isinstance(t, ir.ShapedType) else t
    attr = ir.IntegerAttr.get(et, 0)
    if isinstance(t, ir.RankedTensorType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return b.create("arith.constant", [], [t], {"value": attr}).result


class Driver:
    """Per-pass-run state: the module, the caches, the pass name for diagnostics."""

    def __init__(self, module: ir.Operation, pass_name: str):
        load_all()
        self.module = module
        self.pass_name = pass_name
        self.body = module.regions[0].blocks[0]
        self.jvp_cache: dict[str, str] = {}
        self.vjp_cache: dict[tuple[str, tuple[int, ...]], tuple] = {}
        self.prepared: set[str] = set()
        self.in_progress: set[str] = set()

    # -- utilities -------------------------------------------------------------

    def fail(self, where: Any, msg: str) -> PassFailure:
        return fail(where, f"{self.pass_name}: {msg}")

    def functions(self) -> dict[str, ir.Operation]:
        out = {}
        for op in self.body.operations:
            if op_name(op) == "func.func":
                out[_sym_name(op)] = op.operation
        return out

    def lookup(self, name: str, at: Any) -> ir.Operation:
        fn = self.functions().get(name)
        if fn is None:
            raise self.fail(at, f"'{op_name(at)}' refers to an unknown function @{name}")
        if len(fn.regions[0].blocks) == 0:
            raise self.fail(at, f"cannot differentiate @{name}: it is only a declaration")
        if len(fn.regions[0].blocks) != 1:
            raise self.fail(at, f"cannot differentiate @{name}: it has more than one block")
        return fn

    def unique_name(self, base: str) -> str:
        names = self.functions()
        if base not in names:
            return base
        i = 1
        while f"{base}_{i}" in names:
            i += 1
        return f"{base}_{i}"

    def clone_function(self, fn: ir.Operation, name: str) -> ir.Operation:
        new = fn.clone(ip=ir.InsertionPoint(self.body))
        new.attributes["sym_name"] = ir.StringAttr.get(name)
        new.attributes["sym_visibility"] = ir.StringAttr.get("private")
        for attr in ("autodiff.custom_vjp", "autodiff.custom_jvp", "llvm.emit_c_interface"):
            if attr in new.attributes:
                del new.attributes[attr]
        return new

    # -- lowering autodiff ops ---------------------------------------------------

    def lower_all(self, root: ir.Operation, kinds: Sequence[str]) -> None:
        """Lower every op of `kinds` under `root`, one at a time (the IR changes)."""
        while True:
            found = [o for o in walk_ops(root) if op_name(o) in kinds]
            if not found:
                return
            self.lower(found[0])

    def prepare(self, name: str, at: Any) -> ir.Operation:
        """Lower autodiff ops inside @name and its callees before differentiating it."""
        fn = self.lookup(name, at)
        if name in self.prepared or name in self.in_progress:
            return fn
        self.in_progress.add(name)
        try:
            self.lower_all(fn, AD_OPS)
            for o in walk_ops(fn):
                if op_name(o) == "func.call":
                    callee = ir.FlatSymbolRefAttr(o.attributes["callee"]).value
                    if callee in self.functions():
                        self.prepare(callee, o)
        finally:
            self.in_progress.discard(name)
        self.prepared.add(name)
        return fn

    def lower(self, op: ir.Operation) -> None:
        if op_name(op) == "autodiff.jvp":
            self.lower_jvp_op(op)
        else:
            self.lower_vjp_op(op)

    def _check_types(self, op: ir.Operation, what: str, got: Sequence[ir.Type],
                     want: Sequence[ir.Type]) -> None:
        if len(got) != len(want):
            raise self.fail(op, f"expected {len(want)} {what}, got {len(got)}")
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise self.fail(op, f"{what} #{i} has type {g}, expected {w}")

    def lower_jvp_op(self, op: ir.Operation) -> None:
        name = _fn_attr(op)
        fn = self.lookup(name, op)
        ft = _func_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        self._check_types(op, "operands (primals and tangents of @" + name + ")",
                          [v.type for v in op.operands], params * 2)
        self._check_types(op, "results (outputs and output tangents of @" + name + ")",
                          [r.type for r in op.results], results * 2)
        gen = self.jvp_function(name, op)
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
                raise self.fail(op, f"wrt index {i} is out of range: @{_fn_attr(op)} has "
                                    f"{len(params)} parameters")
            if not is_float(params[i]):
                raise self.fail(op, f"wrt index {i} refers to a parameter of non-float type "
                                    f"{params[i]}")
        if len(set(wrt)) != len(wrt) or wrt != sorted(wrt):
            raise self.fail(op, "wrt indices must be strictly increasing")
        return wrt

    def lower_vjp_op(self, op: ir.Operation) -> None:
        name = _fn_attr(op)
        fn = self.lookup(name, op)
        ft = _func_type(fn)
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

    def jvp_function(self, name: str, at: Any) -> str:
        if name not in self.jvp_cache:
            fn = self.lookup(name, at)
            if "autodiff.custom_jvp" in fn.attributes:
                # A user-supplied rule: (primals..., tangents...) -> (outs..., tangents...).
                custom = ir.FlatSymbolRefAttr(fn.attributes["autodiff.custom_jvp"]).value
                self.lookup(custom, fn)
                self.jvp_cache[name] = custom
            else:
                fn = self.prepare(name, at)
                self.jvp_cache[name] = self.generate_jvp(fn, name)
        return self.jvp_cache[name]

    def vjp_functions(self, name: str, wrt: Sequence[int], at: Any
                      ) -> tuple[str, str, list[ir.Type], list[int]]:
        """(fwd, bwd, types of the residuals fwd returns, residual spec): see
        `residual_operands` for how a call site assembles bwd's operands."""
        key = (name, tuple(wrt))
        if key not in self.vjp_cache:
            fn = self.lookup(name, at)
            if "autodiff.custom_vjp" in fn.attributes:
                self.vjp_cache[key] = self.custom_vjp(fn, name, list(wrt))
            else:
                fn = self.prepare(name, at)
                self.vjp_cache[key] = self.generate_vjp(fn, name, list(wrt))
        return self.vjp_cache[key]

    def custom_vjp(self, fn: ir.Operation, name: str, wrt: list[int]) -> tuple:
        """`autodiff.custom_vjp = {fwd, bwd}`: fwd (args) -> (outs, residuals), bwd
        (residuals, cotangents) -> cotangents of every input; a small wrapper
        selects the `wrt` ones."""
        spec = ir.DictAttr(fn.attributes["autodiff.custom_vjp"])
        if "fwd" not in spec or "bwd" not in spec:
            raise self.fail(fn, "autodiff.custom_vjp needs {fwd = @..., bwd = @...}")
        fwd = ir.FlatSymbolRefAttr(spec["fwd"]).value
        bwd = ir.FlatSymbolRefAttr(spec["bwd"]).value
        ft = _func_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        fwd_t = _func_type(self.lookup(fwd, fn))
        bwd_t = _func_type(self.lookup(bwd, fn))
        res_types = list(fwd_t.results)[len(results):]
        if list(fwd_t.results)[: len(results)] != results or \
                list(bwd_t.inputs) != res_types + results or list(bwd_t.results) != params:
            raise self.fail(fn, f"autodiff.custom_vjp of @{name}: @{fwd} must map the "
                                "parameters to (results, residuals) and @{bwd} (residuals, "
                                "result cotangents) to one cotangent per parameter")
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

    def generate_jvp(self, fn: ir.Operation, name: str) -> str:
        new_name = self.unique_name(f"{name}_jvp")
        new = self.clone_function(fn, new_name)
        ft = _func_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        block = new.regions[0].blocks[0]
        loc = new.location
        targs = [block.add_argument(t, loc) for t in params]
        tmap = {a: t for a, t in zip(list(block.arguments)[: len(params)], targs)
                if is_float(a.type)}
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
        ft = _func_type(fn)
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
                           "autodiff.boundary": ir.UnitAttr.get()})
        for v, c in zip(ret.operands, ctargs):
            rev.add_ct(b, v, c)
        rev.sweep(ops[:-1], ip)
        grads = [b.materialize(rev.ct.get(args[i]), args[i]) for i in wrt]
        outs = list(ret.operands)
        bwd_name = self.unique_name(f"{name}_bwd")
        res_types, spec = self._split(comb, marker, ret, outs, grads, ctargs, params, results,
                                      wrt, bwd_name)
        return fwd_name, bwd_name, res_types, spec

    def _split(self, comb, marker, ret, outs, grads, ctargs, params, results, wrt, bwd_name):
        block = comb.regions[0].blocks[0]
        ops = list(block.operations)
        k = next(i for i, o in enumerate(ops) if o.operation == marker.operation)
        prefix, suffix = ops[:k], ops[k + 1 : -1]
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


class ForwardAD:
    """Tangent propagation through the ops of a block (in place, after each op)."""

    def __init__(self, driver: Driver, tmap: dict[ir.Value, ir.Value]):
        self.driver = driver
        self.t = tmap
        self.replaced: dict[ir.Value, ir.Value] = {}
        self.dead: list[ir.Operation] = []
        self.depth = 0

    def tangent(self, v: ir.Value) -> ir.Value | None:
        return self.t.get(v)

    def is_active(self, v: ir.Value) -> bool:
        return v in self.t

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def jvp_function(self, name: str, at: Any) -> str:
        return self.driver.jvp_function(name, at)

    def replace_op(self, op: ir.Operation, new: Sequence[ir.Value]) -> None:
        """Route the uses of `op`'s results to `new` and erase `op` after its rule."""
        for old, nv in zip(op.results, new):
            old.replace_all_uses_with(nv)
            self.replaced[old] = nv
        self.dead.append(op.operation)

    def run_block(self, block: ir.Block) -> None:
        """Differentiate every op of `block` but its terminator."""
        ops = list(block.operations)
        for i, op in enumerate(ops[:-1]):
            self.visit(op.operation, ops[i + 1])

    def visit(self, op: ir.Operation, next_op: Any) -> None:
        name = op_name(op)
        if not any(is_float(r.type) for r in op.results):
            return  # integer, index and i1 results are never active
        ts = [self.t.get(v) for v in op.operands]
        if all(t is None for t in ts):
            if not op.regions or not any(v in self.t for v in captured_values(op)):
                return
        rule = JVP_RULES.get(name)
        if rule is None:
            raise self.fail(op, f"no forward rule for '{name}'")
        b = Builder(ir.InsertionPoint(next_op), op.location, self, op)
        results = list(op.results)
        self.depth += 1
        try:
            touts = rule(b, op, ts)
        finally:
            self.depth -= 1
        for r, t in zip(results, touts):
            if t is not None and is_float(r.type):
                while r in self.replaced:
                    r = self.replaced[r]
                self.t[r] = t
        if self.depth == 0:
            # Replaced ops die only once no enclosing rule can still refer to them.
            for d in self.dead:
                d.erase()
            self.dead.clear()
            self.replaced.clear()


class ReverseAD:
    """Activity, forward augmentation and the backward sweep over a block's ops."""

    def __init__(self, driver: Driver, seeds: set[ir.Value]):
        self.driver = driver
        self.active: set[ir.Value] = set(seeds)
        self.ct: dict[ir.Value, ir.Value] = {}
        self.dead: list[ir.Operation] = []
        self.tapes: dict[Any, Any] = {}

    def is_active(self, v: ir.Value) -> bool:
        return v in self.active

    def fail(self, op: Any, msg: str) -> PassFailure:
        return self.driver.fail(op, msg)

    def vjp_functions(self, name: str, wrt: Sequence[int], at: Any):
        return self.driver.vjp_functions(name, wrt, at)

    def forward_builder(self, op: ir.Operation) -> Builder:
        """A builder emitting forward (primal-side) code just before `op`."""
        return Builder(ir.InsertionPoint(op), op.location, self, op)

    def replace_op(self, op: ir.Operation, new: Sequence[ir.Value]) -> None:
        for old, nv in zip(op.results, new):
            old.replace_all_uses_with(nv)
            if old in self.active:
                self.active.add(nv)
        self.dead.append(op.operation)

    def sub(self, seeds: set[ir.Value]) -> ReverseAD:
        """A nested reverse pass (e.g. over a linalg.generic body)."""
        return ReverseAD(self.driver, seeds)

    def propagate(self, ops: Sequence[Any]) -> None:
        """Forward activity: float results of ops that read an active value."""
        for op in ops:
            op = op.operation
            if op_name(op) == "autodiff.stop_gradient":
                continue
            reads = list(op.operands)
            if op.regions:
                reads += captured_values(op)
            if any(v in self.active for v in reads):
                for r in op.results:
                    if is_float(r.type):
                        self.active.add(r)

    def prepare_forward(self, ops: Sequence[Any]) -> None:
        """Let region rules augment the forward code (tapes) before the sweep."""
        from .rules.registry import FORWARD_AUGMENT

        for op in ops:
            op = op.operation
            aug = FORWARD_AUGMENT.get(op_name(op))
            if aug is not None and any(r in self.active for r in op.results):
                aug(self, op)

    def add_ct(self, b: Builder, v: ir.Value, c: ir.Value | None) -> None:
        if c is None or v not in self.active:
            return
        old = self.ct.get(v)
        self.ct[v] = c if old is None else b.addf(old, c)

    def sweep(self, ops: Sequence[Any], ip: ir.InsertionPoint) -> None:
        """Emit the backward code of `ops` (walked in reverse) at `ip`."""
        for op in reversed(list(ops)):
            op = op.operation
            cts = [self.ct.get(r) for r in op.results]
            if all(c is None for c in cts):
                continue
            reads = list(op.operands)
            if op.regions:
                reads += captured_values(op)
            if not any(v in self.active for v in reads):
                continue
            name = op_name(op)
            rule = VJP_RULES.get(name)
            if rule is None:
                raise self.fail(op, f"no reverse rule for '{name}'")
            b = Builder(ip, op.location, self, op)
            ins = rule(b, op, cts)
            if len(ins) != len(op.operands):
                ins = list(ins) + [None] * (len(op.operands) - len(ins))
            for v, c in zip(list(op.operands), ins):
                self.add_ct(b, v, c)
            for d in self.dead:
                d.erase()
            self.dead.clear()


def dedupe_private_results(module: ir.Operation) -> None:
    """Make private functions return each value once; calls reuse the duplicates.

    Generated functions often return one value twice (e.g. both cotangents of
    `x + y` are the output cotangent), which upstream
    buffer-results-to-out-params{hoist-static-allocs} crashes on (MLIR 22).
    """
    body = module.regions[0].blocks[0]
    funcs = [op.operation for op in body.operations if op_name(op) == "func.func"]
    calls: dict[str, list[ir.Operation]] = {}
    for fn in funcs:
        for o in walk_ops(fn):
            if op_name(o) == "func.call":
                calls.setdefault(ir.FlatSymbolRefAttr(o.attributes["callee"]).value,
                                 []).append(o)
    for fn in funcs:
        vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
        if vis is None or ir.StringAttr(vis).value != "private" or not fn.regions[0].blocks:
            continue
        blocks = list(fn.regions[0].blocks)
        if len(blocks) != 1:
            continue
        ret = list(blocks[0].operations)[-1]
        vals = list(ret.operands)
        first: dict[ir.Value, int] = {}
        keep, where = [], []
        for v in vals:
            if v not in first:
                first[v] = len(keep)
                keep.append(v)
            where.append(first[v])
        if len(keep) == len(vals):
            continue
        name = _sym_name(fn)
        ft = _func_type(fn)
        func.ReturnOp(keep, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ft.inputs), [v.type for v in keep]))
        for c in calls.get(name, []):
            new = func.CallOp([v.type for v in keep], ir.FlatSymbolRefAttr.get(name),
                              list(c.operands), loc=c.location, ip=ir.InsertionPoint(c))
            for old, k in zip(list(c.results), where):
                old.replace_all_uses_with(new.results[k])
            c.erase()


def fold_stop_gradients(module: ir.Operation) -> None:
    """Once no autodiff.jvp/vjp is left, stop_gradient is the identity: drop it."""
    ops = walk_ops(module)
    if any(op_name(o) in AD_OPS for o in ops):
        return  # a later differentiation pass still needs them
    for o in ops:
        if op_name(o) == "autodiff.stop_gradient":
            o.results[0].replace_all_uses_with(o.operands[0])
            o.erase()


def run_pass(module: ir.Operation, pass_name: str, kind: str) -> None:
    """Body of --autodiff-jvp / --autodiff-vjp: lower every op of `kind`."""
    with module.location:
        Driver(module, pass_name).lower_all(module, (kind,))
        fold_stop_gradients(module)
        for o in walk_ops(module):  # bookkeeping attributes of the tape rewrite
            for attr in ("autodiff.taped", "autodiff.tape"):
                if attr in o.attributes:
                    del o.attributes[attr]
