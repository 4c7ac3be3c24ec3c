"""The machinery of custom functions, shared by `custom_vjp`, `custom_jvp`, `Function`
and `checkpoint`: trace the primal into its own `func.func` (`trace_primal`),
build the private wrapper functions of the rules and the marked call site
(`Wrapper`, `vjp_rule_functions`, `jvp_rule_function`, `emit_custom`), run a
custom function outside a trace (`EagerCache`), handle a custom function
called inside its own rules (`tracing_rules`, `reentrant_call`), and pin the
generator's key to the primal and every rule when one of them draws (`RngPin`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import func

from . import pytree, random
from .api import JitFunction
from .tracing import (
    FunctionTrace,
    ShapedArray,
    TracedFunction,
    Tracer,
    as_tracer,
    emit_call,
    function_location,
    is_float_dtype,
    require_trace,
    trace_function,
)
from .transforms.ad_support import unique_symbol as _unique_symbol


def fun_name(fun: Any) -> str:
    """The name of `fun` for generated symbols and messages (`fn` if it has none)."""
    name = getattr(fun, "__name__", "fn")
    return name if isinstance(name, str) and name.isidentifier() else "fn"


def argnums(nums: int | Sequence[int], n: int, who: str) -> tuple[int, ...]:
    """`nums` (an int or ints, negative from the end) as sorted positions among `n`."""
    nums = (nums,) if isinstance(nums, int) else tuple(nums)
    out = []
    for i in nums:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise ValueError(f"{who}: argnum {i} is out of range for {n} positional arguments")
        out.append(j)
    return tuple(sorted(set(out)))


#: What counts as an array argument of a custom function (everything else is a
#: Python value passed through as it is).
ARRAY_TYPES = (Tracer, np.ndarray, np.generic)


def is_float(dtype: np.dtype) -> bool:
    """Whether `dtype` is a floating-point type (one that has derivatives)."""
    return is_float_dtype(dtype)


def leaf_like(x: Any, aval: ShapedArray, who: str, what: str) -> Tracer:
    """`x` as a tracer of `aval`'s shape and dtype (weak scalars adopt the dtype)."""
    t = as_tracer(x)
    if t.shape != aval.shape:
        raise TypeError(f"{who}: {what} has shape {t.shape}, expected {aval.shape}")
    if t.dtype != aval.dtype:
        if not (t.weak_type or (is_float(t.dtype) and is_float(aval.dtype))):
            raise TypeError(f"{who}: {what} has dtype {t.dtype}, expected {aval.dtype}")
        t = as_tracer(t, aval.dtype)
    return t


def unique_captures(*fns: TracedFunction) -> list[Tracer]:
    """The union of the functions' captured outer values, each once."""
    out: list[Tracer] = []
    for fn in fns:
        for c in fn.captures:
            if not any(c.value == o.value for o in out):
                out.append(c)
    return out


def index_of(caps: Sequence[Tracer], c: Tracer) -> int:
    """The position of captured value `c` in `caps`."""
    return next(i for i, o in enumerate(caps) if o.value == c.value)


class Wrapper:
    """A private `func.func` built directly in the module of the active trace."""

    def __init__(self, trace: FunctionTrace, base: str, inputs: Sequence[ir.Type],
                 results: Sequence[ir.Type], loc: ir.Location) -> None:
        self.loc = loc
        with trace.context, loc, ir.InsertionPoint(trace.module.body):
            self.op = func.FuncOp(_unique_symbol(trace.module, base),
                                  ir.FunctionType.get(list(inputs), list(results)),
                                  visibility="private")
            self.block = self.op.add_entry_block()
        self.args = list(self.block.arguments)

    @property
    def name(self) -> str:
        return ir.StringAttr(self.op.attributes["sym_name"]).value

    def call(self, fn: TracedFunction, operands: Sequence[ir.Value]) -> list[ir.Value]:
        with self.loc, ir.InsertionPoint(self.block):
            types = [a.mlir_type() for a in fn.out_avals]
            return list(func.CallOp(types, fn.symbol, list(operands)).results)

    def zero(self, t: ir.Type) -> ir.Value:
        with self.loc, ir.InsertionPoint(self.block):
            et = t.element_type
            attr = (ir.FloatAttr.get(et, 0.0) if isinstance(et, ir.FloatType)
                    else ir.IntegerAttr.get(et, 0))
            return ir.Operation.create("arith.constant", results=[t], attributes={
                "value": ir.DenseElementsAttr.get_splat(t, attr)}).result

    def ret(self, values: Sequence[ir.Value]) -> None:
        with self.loc, ir.InsertionPoint(self.block):
            func.ReturnOp(list(values))


@dataclasses.dataclass
class Primal:
    """A custom function's call site: the traced primal and its flat arguments."""

    trace: FunctionTrace
    fn: TracedFunction
    tracers: list[Tracer]
    avals: list[ShapedArray]
    in_tree: pytree.TreeDef
    loc: ir.Location


#: The custom functions whose primal is being traced: (key, in_tree, avals, static);
#: None where the tracing of some function's rules began (see `tracing_rules`).
_IN_PRIMAL: list[tuple[Any, pytree.TreeDef, list[ShapedArray], list[Any]] | None] = []


def _user_function(key: Any, name: str) -> tuple[str, Callable[..., Any] | None]:
    """How to name a custom function's primal in errors, and the user's function."""
    if isinstance(key, type):  # a Function subclass
        return f"{name}.forward", getattr(key, "forward", None)
    return name, getattr(key, "fun", None)


def trace_primal(fun: Callable[..., Any], diff_args: tuple[Any, ...], name: str,
                 key: Any = None, static: Sequence[Any] = ()) -> Primal:
    """Trace the primal of a custom function. With `key`, a call of the same custom
    function with the same argument types and static values while its primal is
    traced, with no rules traced in between (a recursion that can never end: rules
    end theirs by calling the traced primal, `reentrant_call`), is an error naming
    the user's function."""
    trace = require_trace(name)
    leaves, in_tree = pytree.tree_flatten(diff_args)
    tracers = [as_tracer(x) for x in leaves]
    avals = [t.aval for t in tracers]
    if key is not None:
        strong = [a.strong() for a in avals]
        for entry in reversed(_IN_PRIMAL):
            if entry is None:
                break
            k, tree, av, st = entry
            if k is key and tree == in_tree and av == strong and _same_static(st, static):
                what, user = _user_function(key, name)
                types = ", ".join(a.str_short() for a in avals) or "no arrays"
                raise RecursionError(
                    f"{what} calls {name if what == name else name + '.apply'} again with "
                    f"arguments of the same types ({types}) and the same non-array values "
                    "while it is being traced: this recursion never ends (a recursive "
                    "custom function must change a non-array argument, such as a depth "
                    f"count, on each call){rule_site(user)}")
        _IN_PRIMAL.append((key, in_tree, strong, list(static)))
    try:
        fn = trace_function(fun, avals, in_tree, name=name)
    finally:
        if key is not None:
            _IN_PRIMAL.pop()
    with trace.context:
        loc = function_location(fun, trace.context)
    return Primal(trace, fn, tracers, avals, in_tree, loc)


@dataclasses.dataclass
class RngPin:
    """The key of a custom function whose primal or rules draw from the generator.

    Its rules re-run the primal's computation (fwd calls `f`, a bwd rule calls
    `vjp(f, x)`, a JVP rule `jvp(f, ...)`), and each run would draw new numbers.
    Instead every wrapper (@name, @name_fwd, @name_bwd, @name_jvp, @name_vmap) takes
    `key` as an extra argument and is marked `autodiff.rng_key`, so each starts its
    draws from the same state: the state at the call, which the key's draw (pinned
    to all of them, `pin`) becomes; the generator then continues past the most any
    of them draws. So the rules see the numbers the primal call draws, as
    checkpoint recomputation does, and no later draw reuses one of them.
    """

    key: Tracer
    wrappers: list[str] = dataclasses.field(default_factory=list)

    @staticmethod
    def of(fns: Sequence[TracedFunction | None]) -> RngPin | None:
        """A pin (its key drawn in the active trace) if one of `fns` draws, else None."""
        if not any(fn is not None and random.draws_statefully(fn.func_op.operation)
                   for fn in fns):
            return None
        return RngPin(random.state_key())

    def mark(self, w: Wrapper, index: int) -> None:
        """Make wrapper `w` key-rooted at its argument `index`."""
        with w.op.context:
            w.op.attributes[random.KEY_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), index)
        self.wrappers.append(w.name)

    def pin(self) -> None:
        random.pin_key_to(self.key, self.wrappers)


def caps_with(caps: list[Tracer], rng: RngPin | None) -> list[Tracer]:
    """`caps`, plus the pinned key when there is one."""
    return caps + [rng.key] if rng is not None else caps


def emit_custom(p: Primal, name: str, caps: list[Tracer],
                attrs: dict[str, Callable[[], ir.Attribute]],
                rng: RngPin | None = None) -> Any:
    """Emit the wrapper @name (args + captures) -> outs, marked with `attrs`, and call it.
    With `rng` (its key one of `caps`) @name is key-rooted too, and the key is pinned
    to every wrapper (the rules' are marked by now)."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    w = Wrapper(p.trace, name, x_types + c_types, out_types, p.loc)
    nx = len(x_types)
    ops = w.args[:nx] + [w.args[nx + index_of(caps, c)] for c in p.fn.captures]
    w.ret(w.call(p.fn, ops))
    with p.trace.context, p.loc:
        for attr_name, make in attrs.items():
            w.op.attributes[attr_name] = make()
        if rng is not None:
            rng.mark(w, nx + index_of(caps, rng.key))
            rng.pin()
    trace = p.trace
    operands = [trace.lift(t) for t in p.tracers] + [trace.lift(c) for c in caps]
    with trace.emitting():
        call = func.CallOp(out_types, ir.FlatSymbolRefAttr.get(w.name),
                           [o.value for o in operands])
    outs = [trace.wrap(v, a) for v, a in zip(call.results, p.fn.out_avals)]
    return pytree.tree_unflatten(p.fn.out_tree, outs)


def vjp_rule_functions(p: Primal, name: str, fwd: TracedFunction,
                       bwd: TracedFunction, caps: list[Tracer], rng: RngPin | None = None
                       ) -> tuple[Callable[[], ir.Attribute], list[Tracer]]:
    """@name_fwd (xs, caps) -> (outs, residuals, bwd's captures) and @name_bwd
    (residuals, bwd's captures, cts) -> (one cotangent per x and per capture).
    With `rng` both are key-rooted; the key reaches @name_bwd as one more of its
    captures."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    res_types = [a.mlir_type() for a in fwd.out_avals[len(out_types):]]
    bwd_caps = caps_with(list(bwd.captures), rng)
    bc_types = [c.value.type for c in bwd_caps]
    nx = len(x_types)
    fw = Wrapper(p.trace, f"{name}_fwd", x_types + c_types,
                 out_types + res_types + bc_types, p.loc)
    ops = fw.args[:nx] + [fw.args[nx + index_of(caps, c)] for c in fwd.captures]
    fw.ret(fw.call(fwd, ops) + [fw.args[nx + index_of(caps, c)] for c in bwd_caps])
    bw = Wrapper(p.trace, f"{name}_bwd", res_types + bc_types + out_types,
                 x_types + c_types, p.loc)
    nr, nb = len(res_types), len(bc_types)
    res, bcaps, cts = bw.args[:nr], bw.args[nr:nr + nb], bw.args[nr + nb:]
    grads = bw.call(bwd, res + cts + bcaps[:len(bwd.captures)])
    bw.ret(grads + [bw.zero(t) for t in c_types])
    if rng is not None:
        rng.mark(fw, nx + index_of(caps, rng.key))
        rng.mark(bw, nr + nb - 1)

    def attr() -> ir.Attribute:
        return ir.DictAttr.get({"fwd": ir.FlatSymbolRefAttr.get(fw.name),
                                "bwd": ir.FlatSymbolRefAttr.get(bw.name)})

    return attr, caps


def jvp_rule_function(p: Primal, name: str, jvp: TracedFunction, caps: list[Tracer],
                      rng: RngPin | None = None) -> Callable[[], ir.Attribute]:
    """@name_jvp (xs, caps, txs, tcaps) -> (outs, touts): the traced rule (captures
    are constants of the rule: their tangents are ignored). Key-rooted at the primal
    copy of the key with `rng`."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    nx, nc = len(x_types), len(c_types)
    jw = Wrapper(p.trace, f"{name}_jvp", (x_types + c_types) * 2, out_types * 2, p.loc)
    xs, cs, txs = jw.args[:nx], jw.args[nx:nx + nc], jw.args[nx + nc:2 * nx + nc]
    jw.ret(jw.call(jvp, xs + txs + [cs[index_of(caps, c)] for c in jvp.captures]))
    if rng is not None:
        rng.mark(jw, nx + index_of(caps, rng.key))
    return lambda: ir.FlatSymbolRefAttr.get(jw.name)


def split_args(args: tuple[Any, ...], nondiff: tuple[int, ...]
               ) -> tuple[tuple[Any, ...], list[Any], Callable[[Sequence[Any]], list[Any]]]:
    """(the differentiable arguments, the `nondiff` ones, a function merging
    differentiable arguments back with the `nondiff` ones into a full argument list)."""
    diff = tuple(a for i, a in enumerate(args) if i not in nondiff)
    static = [args[i] for i in nondiff]

    def merge(d: Sequence[Any]) -> list[Any]:
        it = iter(d)
        return [args[i] if i in nondiff else next(it) for i in range(len(args))]

    return diff, static, merge


def _has_array(x: Any) -> bool:
    return any(isinstance(leaf, ARRAY_TYPES) for leaf in pytree.tree_leaves(x))


def eager_jit(cache: dict[tuple[int, ...], JitFunction], fun: Callable[..., Any],
              args: tuple[Any, ...], static: tuple[int, ...]) -> Any:
    """`fun(*args)` outside a trace: `jit` with the arguments at `static` static (each
    new value traces new code), cached in `cache` per static positions; unhashable
    static values are bound into an uncached jit."""
    try:
        hash(tuple(args[i] for i in static))
    except TypeError:
        _, _, merge = split_args(args, static)
        return JitFunction(lambda *d: fun(*merge(d)))(
            *[a for i, a in enumerate(args) if i not in static])
    if static not in cache:
        cache[static] = JitFunction(fun, static_argnums=static)
    return cache[static](*args)


class EagerCache:
    """Run a custom function outside a trace: `jit` with the non-array nondiff
    arguments static, so they reach the function as the Python values they are
    (as under an enclosing trace, where nondiff arguments are never traced)."""

    def __init__(self, fun: Callable[..., Any]) -> None:
        self.fun = fun
        self.jits: dict[tuple[int, ...], JitFunction] = {}

    def __call__(self, args: tuple[Any, ...], nondiff: tuple[int, ...]) -> Any:
        static = tuple(i for i in nondiff if not _has_array(args[i]))
        return eager_jit(self.jits, self.fun, args, static)


@dataclasses.dataclass
class _RuleFrame:
    """One custom function call whose rules are being traced."""

    primal: Primal
    static: list[Any]


@dataclasses.dataclass
class _RuleStack:
    frames: list[_RuleFrame]
    #: how deep calls of the function inside its own rules still get rules
    budget: int


#: Custom functions whose rules are being traced: key -> the calls being traced.
_IN_RULES: dict[Any, _RuleStack] = {}


def _nesting(trace: FunctionTrace) -> int:
    """How many functions enclose `trace`'s: at most this many transforms apply to it."""
    n, t = 0, trace.parent
    while t is not None:
        n, t = n + 1, t.parent
    return n


@contextlib.contextmanager
def tracing_rules(key: Any, p: Primal, static: list[Any]) -> Iterator[None]:
    """Record that `key`'s rules are being traced for the call `p` (see `reentrant_call`)."""
    stack = _IN_RULES.get(key)
    if stack is None:
        stack = _IN_RULES[key] = _RuleStack([], _nesting(p.trace))
    stack.frames.append(_RuleFrame(p, list(static)))
    _IN_PRIMAL.append(None)
    try:
        yield
    finally:
        _IN_PRIMAL.pop()
        stack.frames.pop()
        if not stack.frames:
            del _IN_RULES[key]


def _same_static(a: Sequence[Any], b: Sequence[Any]) -> bool:
    def same(x: Any, y: Any) -> bool:
        if x is y:
            return True
        if type(x) is not type(y) or isinstance(x, (Tracer, np.ndarray)):
            return False
        try:
            return bool(x == y)
        except Exception:  # noqa: BLE001 - incomparable values are different
            return False

    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def reentrant_call(key: Any, fun: Callable[..., Any], args: tuple[Any, ...],
                   nondiff: tuple[int, ...], name: str) -> Any:
    """A custom function called inside its own rules (a JVP rule returning `f(x)`, a
    fwd rule calling `f`, a bwd rule solving another problem with `f`, a `vmap` rule
    calling `apply` on batched arguments): None when the call should trace rules of
    its own, else its outputs.

    A call with the same arguments (types and static values) as one whose rules are
    being traced calls that traced primal; its derivatives are the primal body's.
    A call with other arguments gets rules of its own (traced now, as the passes
    differentiate after tracing), but only as deep as derivatives can reach: rules
    nested k deep are differentiated only by k enclosing transforms, and every
    transform encloses the traced code in one more function, so the number of
    functions around the outermost call bounds the depth. Deeper calls are plain
    calls of the primal. Without that bound a rule calling its own function (the
    bwd rule of a fixed-point solver solves another fixed point) would trace
    rules for ever."""
    stack = _IN_RULES.get(key)
    if stack is None:
        return None
    diff, static, merge = split_args(args, nondiff)
    leaves, tree = pytree.tree_flatten(diff)
    tracers = [as_tracer(x) for x in leaves]
    for fr in reversed(stack.frames):
        p = fr.primal
        if tree == p.in_tree and [t.aval.strong() for t in tracers] == \
                [a.strong() for a in p.avals] and _same_static(static, fr.static):
            outs = emit_call(p.fn, [as_tracer(t, a.dtype) for t, a in zip(tracers, p.avals)])
            return pytree.tree_unflatten(p.fn.out_tree, outs)
    if len(stack.frames) <= stack.budget:
        return None
    p = trace_primal(lambda *d: fun(*merge(d)), diff, name, key, static)
    return pytree.tree_unflatten(p.fn.out_tree, emit_call(p.fn, p.tracers))


def rule_site(rule: Callable[..., Any] | None) -> str:
    """` (defined at file:line)` for a user's function, or nothing."""
    code = getattr(getattr(rule, "__wrapped__", rule), "__code__", None)
    return "" if code is None else f" (defined at {code.co_filename}:{code.co_firstlineno})"
