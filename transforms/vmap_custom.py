"""Custom rules under `--autodiff-vmap`: a function's `autodiff.custom_vmap` rules
(checked against the function's type and called with the batch axes they
declare), and the batching of its `autodiff.custom_vjp` / `custom_jvp` rules
(`CustomRuleBatcher`), so a batched function keeps rules of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlir import ir
from mlir.dialects import func

from ..dialects.vocabulary import (
    CUSTOM_JVP,
    CUSTOM_VJP,
    IN_AXES,
    OUT_AXES,
)
from .ad_support import (
    Builder,
    is_float,
    is_tensor,
    sym_name,
)
from .rules.batching import BatchBuilder
from .vmap_batch import BatchTrace, broadcast_at, moveaxis_perm, transpose

if TYPE_CHECKING:
    from .vmap import VmapDriver


@dataclasses.dataclass(frozen=True)
class VmapRule:
    """One checked `autodiff.custom_vmap` rule: @name for batch size `size`."""

    name: str
    type: ir.FunctionType
    in_axes: list[int]
    out_axes: list[int]
    size: int


def types_text(ts: Sequence[ir.Type]) -> str:
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
        raise fail(f"has type {rt}, expected ({types_text(want_in)}) -> ({types_text(want_out)}) "
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
            v = broadcast_at(b, v, t, a)
        elif a > 0:
            v = transpose(b, v, moveaxis_perm(t.rank, 0, a))
        operands.append(v)
    call = b.create("func.call", operands, list(rule.type.results),
                    {"callee": ir.FlatSymbolRefAttr.get(rule.name)})
    outs = []
    for r, a in zip(call.results, rule.out_axes):
        if a > 0:
            r = transpose(b, r, moveaxis_perm(r.type.rank, a, 0))
        outs.append((r, a >= 0))
    return outs


@dataclasses.dataclass
class PendingRules:
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

    def __init__(self, driver: VmapDriver, p: PendingRules):
        self.d = driver
        self.p = p
        ft = p.fn.attributes["function_type"].value
        self.params, self.results = list(ft.inputs), list(ft.results)
        bft = p.batched.attributes["function_type"].value
        self.b_params, self.b_results = list(bft.inputs), list(bft.results)
        self.trace = BatchTrace(driver, p.size, p.randomness)
        self.base = sym_name(p.batched)

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
