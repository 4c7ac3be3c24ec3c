"""`--autodiff-vmap`: batching. Lowers every `autodiff.vmap` op to a call of `@f_batched_*`.

For `"autodiff.vmap"(args) {fn = @f, in_axes, out_axes, randomness}` the pass
generates `@f_batched_<B>_<sig>` once per batching signature: the batch size
B and, per argument, `b` (batched) or `u` (unbatched). Inside a batched
function every batched value carries the batch dimension at axis 0: the op's
replacement moves each argument's batch axis to the front with a
`linalg.transpose` before the call and each result's batch axis to its
`out_axes` position after it, so per-op rules (`rules/batching.py`) only
ever see axis 0. Unbatched values keep their types and are never broadcast,
except where a value must vary per lane (a loop carry or a destination).

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
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

from mlir import ir
from mlir.dialects import func, linalg

from .ad_support import Builder, captured_values, is_tensor, op_name, unique_name, walk_ops
from .autodiff_common import register_inner_lowerer
from .diagnostics import PassFailure, fail
from .passes import Pass, PipelineElement, register
from .rules.batching import ALWAYS_RULE, BatchBuilder, batch_type, rule_for

PASS = "autodiff-vmap"
#: Attributes of --autodiff-functionalize-rng on functions that draw.
RNG_STATE = "autodiff.rng_state"
RNG_BLOCKS = "autodiff.rng_blocks"
AD_OPS = ("autodiff.jvp", "autodiff.vjp")


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

    def fail(self, where: Any, msg: str) -> PassFailure:
        return fail(where, f"{PASS}: {msg}")

    def functions(self) -> dict[str, ir.Operation]:
        return {_sym_name(op): op.operation for op in self.body.operations
                if op_name(op) == "func.func"}

    def lookup(self, name: str, at: Any) -> ir.Operation:
        fn = self.functions().get(name)
        if fn is None:
            raise self.fail(at, f"'{op_name(at)}' refers to an unknown function @{name}")
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
            found = [o for o in walk_ops(root) if op_name(o) == "autodiff.vmap"]
            if not found:
                return
            self.lower(found[0])

    # -- batched functions ---------------------------------------------------------------

    def batched_function(self, name: str, flags: Sequence[bool], size: int, randomness: str,
                         at: Any) -> tuple[str, list[ir.Type], list[bool]]:
        """@name batched for (flags, size): its name, result types and which results are batched."""
        key = (name, tuple(flags), size, randomness)
        if key in self.cache:
            return self.cache[key]
        if key in self.in_progress:
            raise self.fail(at, f"cannot batch the recursive function @{name}")
        fn = self.prepare(name, at)
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
            outs = trace.batch_block(fn.regions[0].blocks[0], ir.InsertionPoint(block),
                                     list(zip(block.arguments, flags)))
            ret = list(fn.regions[0].blocks[0].operations)[-1]
            func.ReturnOp([v for v, _ in outs], loc=ret.location, ip=ir.InsertionPoint(block))
            types = [v.type for v, _ in outs]
            new.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(arg_types, types))
        finally:
            self.in_progress.discard(key)
        result = (new_name, types, [f for _, f in outs])
        self.cache[key] = result
        return result

    # -- the op ------------------------------------------------------------------------------

    def lower(self, op: ir.Operation) -> None:
        """Replace one autodiff.vmap by transposes, a call of the batched function, transposes."""
        if "fn" not in op.attributes or not isinstance(op.attributes["fn"],
                                                       ir.FlatSymbolRefAttr):
            raise self.fail(op, "'autodiff.vmap' needs an 'fn' symbol attribute")
        fname = ir.FlatSymbolRefAttr(op.attributes["fn"]).value
        for key in ("in_axes", "out_axes"):
            if key not in op.attributes or not isinstance(op.attributes[key],
                                                          ir.DenseI64ArrayAttr):
                raise self.fail(op, f"'autodiff.vmap' needs an '{key}' array<i64> attribute")
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
            raise self.fail(op, f"@{fname} has type {ft} but 'autodiff.vmap' has "
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
            raise self.fail(op, "'autodiff.vmap' needs at least one batched operand "
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


def _lane_offsets(b: Builder, offset: ir.Value, size: int, blocks: int) -> ir.Value:
    """tensor<B x i64> of `offset + l * blocks`: lane l's start in the Philox counter space."""
    from .rules.linalg import make_generic

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
    if any(op_name(o) == "autodiff.vmap" for o in walk_ops(root)):
        Driver(module, ad_driver).lower_all(root)


register_inner_lowerer("autodiff.vmap", lower_inner_vmap)


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
            for attr in ("autodiff.taped", "autodiff.tape"):
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
