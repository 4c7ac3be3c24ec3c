"""Custom derivative rules and checkpointing: `custom_vjp`, `custom_jvp`, `Function`,
`checkpoint`, `checkpoint_name`, `print_saved_residuals`.

Like every transform here, these only *emit* IR; the passes differentiate.

- `custom_vjp` / `custom_jvp` (JAX semantics) and `Function` (torch.autograd.Function
  semantics) trace the primal function and the rule functions into their own
  `func.func`s and mark the primal with the function attributes listed in the README,
  `autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}` and
  `autodiff.custom_jvp = @f_jvp`; the call site is a plain `func.call @f`. So the
  rules apply wherever `@f` is differentiated, under `jit`, `grad`, `jvp`, `vmap`,
  `hessian` in any nesting. Composition beyond JAX: forward mode of a function with
  only a custom VJP differentiates the primal body; reverse mode of one with only a
  custom JVP transposes the JVP rule (as JAX does); higher orders differentiate the
  rule functions themselves.
- Under vmap the passes batch the rules with the function: the batched function
  carries batched custom_vjp/custom_jvp rules, so grad of vmap uses them.
  `Function.vmap` (torch.func's batching rule) becomes `autodiff.custom_vmap`,
  traced for the innermost enclosing vmap level (`batching.VmapLevel`).
- Values a rule closes over (traced values of an enclosing function) become extra
  arguments of the generated functions; they are treated as constants of the rule:
  no derivative flows to them (as in JAX, where closing over a differentiated value
  inside custom_vjp is an error; use an explicit argument instead).
- `checkpoint(f, policy=...)` emits `autodiff.checkpoint {fn = @f, policy = "..."}`:
  the reverse pass recomputes @f's internals in the backward pass, saving only
  what the policy allows. `checkpoint_name(x, "h")` is a `func.call` to a private
  identity function carrying `autodiff.checkpoint_name = "h"` (a marker the pass
  recognizes through any differentiation; it disappears once nothing is left to
  differentiate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import func

from . import dialects, pytree, random
from .api import JitFunction, _leaf_aval
from .batching import _prefix_leaves, active_vmap_level, peeled
from .dialects.vocabulary import (
    CHECKPOINT,
    CHECKPOINT_NAME,
    CUSTOM_JVP,
    CUSTOM_VJP,
    CUSTOM_VMAP,
    IN_AXES,
    OUT_AXES,
)
from .tracing import (
    FunctionTrace,
    ShapedArray,
    TracedFunction,
    Tracer,
    as_tracer,
    current_trace,
    emit_call,
    function_location,
    require_trace,
    trace_function,
)
from .transforms.ad_residuals import residual_report
from .transforms.ad_support import unique_symbol as _unique_symbol
from .transforms.vmap import batched_outputs

# --------------------------------------------------------------------------- helpers


def _name(fun: Any) -> str:
    name = getattr(fun, "__name__", "fn")
    return name if isinstance(name, str) and name.isidentifier() else "fn"


def _nums(nums: int | Sequence[int], n: int, who: str) -> tuple[int, ...]:
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
_ARRAY_TYPES = (Tracer, np.ndarray, np.generic)


def _is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating)


def _zeros(aval: ShapedArray) -> Tracer:
    return as_tracer(np.zeros(aval.shape, aval.dtype))


def _leaf_like(x: Any, aval: ShapedArray, who: str, what: str) -> Tracer:
    """`x` as a tracer of `aval`'s shape and dtype (weak scalars adopt the dtype)."""
    t = as_tracer(x)
    if t.shape != aval.shape:
        raise TypeError(f"{who}: {what} has shape {t.shape}, expected {aval.shape}")
    if t.dtype != aval.dtype:
        if not (t.weak_type or (_is_float(t.dtype) and _is_float(aval.dtype))):
            raise TypeError(f"{who}: {what} has dtype {t.dtype}, expected {aval.dtype}")
        t = as_tracer(t, aval.dtype)
    return t


def _unique_captures(*fns: TracedFunction) -> list[Tracer]:
    """The union of the functions' captured outer values, each once."""
    out: list[Tracer] = []
    for fn in fns:
        for c in fn.captures:
            if not any(c.value == o.value for o in out):
                out.append(c)
    return out


def _index_of(caps: Sequence[Tracer], c: Tracer) -> int:
    return next(i for i, o in enumerate(caps) if o.value == c.value)


class _Wrapper:
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
class _Primal:
    """A custom function's call site: the traced primal and its flat arguments."""

    trace: FunctionTrace
    fn: TracedFunction
    tracers: list[Tracer]
    avals: list[ShapedArray]
    in_tree: pytree.TreeDef
    loc: ir.Location


#: The custom functions whose primal is being traced: (key, in_tree, avals, static);
#: None where the tracing of some function's rules began (see `_tracing_rules`).
_IN_PRIMAL: list[tuple[Any, pytree.TreeDef, list[ShapedArray], list[Any]] | None] = []


def _user_function(key: Any, name: str) -> tuple[str, Callable[..., Any] | None]:
    """How to name a custom function's primal in errors, and the user's function."""
    if isinstance(key, type):  # a Function subclass
        return f"{name}.forward", getattr(key, "forward", None)
    return name, getattr(key, "fun", None)


def _trace_primal(fun: Callable[..., Any], diff_args: tuple[Any, ...], name: str,
                  key: Any = None, static: Sequence[Any] = ()) -> _Primal:
    """Trace the primal of a custom function. With `key`, a call of the same custom
    function with the same argument types and static values while its primal is
    traced, with no rules traced in between (a recursion that can never end: rules
    end theirs by calling the traced primal, `_reentrant_call`), is an error naming
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
                    f"count, on each call){_rule_site(user)}")
        _IN_PRIMAL.append((key, in_tree, strong, list(static)))
    try:
        fn = trace_function(fun, avals, in_tree, name=name)
    finally:
        if key is not None:
            _IN_PRIMAL.pop()
    with trace.context:
        loc = function_location(fun, trace.context)
    return _Primal(trace, fn, tracers, avals, in_tree, loc)


@dataclasses.dataclass
class _RngPin:
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
    def of(fns: Sequence[TracedFunction | None]) -> _RngPin | None:
        """A pin (its key drawn in the active trace) if one of `fns` draws, else None."""
        if not any(fn is not None and random.draws_statefully(fn.func_op.operation)
                   for fn in fns):
            return None
        return _RngPin(random.state_key())

    def mark(self, w: _Wrapper, index: int) -> None:
        """Make wrapper `w` key-rooted at its argument `index`."""
        with w.op.context:
            w.op.attributes[random.KEY_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), index)
        self.wrappers.append(w.name)

    def pin(self) -> None:
        random.pin_key_to(self.key, self.wrappers)


def _caps_with(caps: list[Tracer], rng: _RngPin | None) -> list[Tracer]:
    return caps + [rng.key] if rng is not None else caps


def _emit_custom(p: _Primal, name: str, caps: list[Tracer],
                 attrs: dict[str, Callable[[], ir.Attribute]],
                 rng: _RngPin | None = None) -> Any:
    """Emit the wrapper @name (args + captures) -> outs, marked with `attrs`, and call it.
    With `rng` (its key one of `caps`) @name is key-rooted too, and the key is pinned
    to every wrapper (the rules' are marked by now)."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    w = _Wrapper(p.trace, name, x_types + c_types, out_types, p.loc)
    nx = len(x_types)
    ops = w.args[:nx] + [w.args[nx + _index_of(caps, c)] for c in p.fn.captures]
    w.ret(w.call(p.fn, ops))
    with p.trace.context, p.loc:
        for attr_name, make in attrs.items():
            w.op.attributes[attr_name] = make()
        if rng is not None:
            rng.mark(w, nx + _index_of(caps, rng.key))
            rng.pin()
    trace = p.trace
    operands = [trace.lift(t) for t in p.tracers] + [trace.lift(c) for c in caps]
    with trace.emitting():
        call = func.CallOp(out_types, ir.FlatSymbolRefAttr.get(w.name),
                           [o.value for o in operands])
    outs = [trace.wrap(v, a) for v, a in zip(call.results, p.fn.out_avals)]
    return pytree.tree_unflatten(p.fn.out_tree, outs)


def _vjp_rule_functions(p: _Primal, name: str, fwd: TracedFunction,
                        bwd: TracedFunction, caps: list[Tracer], rng: _RngPin | None = None
                        ) -> tuple[Callable[[], ir.Attribute], list[Tracer]]:
    """@name_fwd (xs, caps) -> (outs, residuals, bwd's captures) and @name_bwd
    (residuals, bwd's captures, cts) -> (one cotangent per x and per capture).
    With `rng` both are key-rooted; the key reaches @name_bwd as one more of its
    captures."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    res_types = [a.mlir_type() for a in fwd.out_avals[len(out_types):]]
    bwd_caps = _caps_with(list(bwd.captures), rng)
    bc_types = [c.value.type for c in bwd_caps]
    nx = len(x_types)
    fw = _Wrapper(p.trace, f"{name}_fwd", x_types + c_types,
                  out_types + res_types + bc_types, p.loc)
    ops = fw.args[:nx] + [fw.args[nx + _index_of(caps, c)] for c in fwd.captures]
    fw.ret(fw.call(fwd, ops) + [fw.args[nx + _index_of(caps, c)] for c in bwd_caps])
    bw = _Wrapper(p.trace, f"{name}_bwd", res_types + bc_types + out_types,
                  x_types + c_types, p.loc)
    nr, nb = len(res_types), len(bc_types)
    res, bcaps, cts = bw.args[:nr], bw.args[nr:nr + nb], bw.args[nr + nb:]
    grads = bw.call(bwd, res + cts + bcaps[:len(bwd.captures)])
    bw.ret(grads + [bw.zero(t) for t in c_types])
    if rng is not None:
        rng.mark(fw, nx + _index_of(caps, rng.key))
        rng.mark(bw, nr + nb - 1)

    def attr() -> ir.Attribute:
        return ir.DictAttr.get({"fwd": ir.FlatSymbolRefAttr.get(fw.name),
                                "bwd": ir.FlatSymbolRefAttr.get(bw.name)})

    return attr, caps


def _jvp_rule_function(p: _Primal, name: str, jvp: TracedFunction, caps: list[Tracer],
                       rng: _RngPin | None = None) -> Callable[[], ir.Attribute]:
    """@name_jvp (xs, caps, txs, tcaps) -> (outs, touts): the traced rule (captures
    are constants of the rule: their tangents are ignored). Key-rooted at the primal
    copy of the key with `rng`."""
    x_types = [a.mlir_type() for a in p.avals]
    c_types = [c.value.type for c in caps]
    out_types = [a.mlir_type() for a in p.fn.out_avals]
    nx, nc = len(x_types), len(c_types)
    jw = _Wrapper(p.trace, f"{name}_jvp", (x_types + c_types) * 2, out_types * 2, p.loc)
    xs, cs, txs = jw.args[:nx], jw.args[nx:nx + nc], jw.args[nx + nc:2 * nx + nc]
    jw.ret(jw.call(jvp, xs + txs + [cs[_index_of(caps, c)] for c in jvp.captures]))
    if rng is not None:
        rng.mark(jw, nx + _index_of(caps, rng.key))
    return lambda: ir.FlatSymbolRefAttr.get(jw.name)


def _split_args(args: tuple[Any, ...], nondiff: tuple[int, ...]
                ) -> tuple[tuple[Any, ...], list[Any], Callable[[Sequence[Any]], list[Any]]]:
    diff = tuple(a for i, a in enumerate(args) if i not in nondiff)
    static = [args[i] for i in nondiff]

    def merge(d: Sequence[Any]) -> list[Any]:
        it = iter(d)
        return [args[i] if i in nondiff else next(it) for i in range(len(args))]

    return diff, static, merge


def _has_array(x: Any) -> bool:
    return any(isinstance(leaf, _ARRAY_TYPES) for leaf in pytree.tree_leaves(x))


def _eager_jit(cache: dict[tuple[int, ...], JitFunction], fun: Callable[..., Any],
               args: tuple[Any, ...], static: tuple[int, ...]) -> Any:
    """`fun(*args)` outside a trace: `jit` with the arguments at `static` static (each
    new value traces new code), cached in `cache` per static positions; unhashable
    static values are bound into an uncached jit."""
    try:
        hash(tuple(args[i] for i in static))
    except TypeError:
        _, _, merge = _split_args(args, static)
        return JitFunction(lambda *d: fun(*merge(d)))(
            *[a for i, a in enumerate(args) if i not in static])
    if static not in cache:
        cache[static] = JitFunction(fun, static_argnums=static)
    return cache[static](*args)


class _EagerCache:
    """Run a custom function outside a trace: `jit` with the non-array nondiff
    arguments static, so they reach the function as the Python values they are
    (as under an enclosing trace, where nondiff arguments are never traced)."""

    def __init__(self, fun: Callable[..., Any]) -> None:
        self.fun = fun
        self.jits: dict[tuple[int, ...], JitFunction] = {}

    def __call__(self, args: tuple[Any, ...], nondiff: tuple[int, ...]) -> Any:
        static = tuple(i for i in nondiff if not _has_array(args[i]))
        return _eager_jit(self.jits, self.fun, args, static)


def _grads_tree(g: Any, diff: tuple[Any, ...], avals: list[ShapedArray], who: str
                ) -> list[Tracer]:
    """bwd's output (one entry per differentiable argument, None = zero) as flat leaves."""
    if not isinstance(g, (tuple, list)):
        raise TypeError(f"{who}: the bwd rule must return a tuple with one cotangent per "
                        f"differentiable argument ({len(diff)}), got {type(g).__name__}")
    if len(g) != len(diff):
        raise TypeError(f"{who}: the bwd rule returned {len(g)} cotangent(s) for "
                        f"{len(diff)} differentiable argument(s)")
    leaves: list[Tracer] = []
    it = iter(avals)
    for k, (gk, arg) in enumerate(zip(g, diff)):
        tree = pytree.tree_structure(arg)
        arg_avals = [next(it) for _ in range(tree.num_leaves)]
        if gk is None:
            leaves += [_zeros(a) for a in arg_avals]
            continue
        gl, gt = pytree.tree_flatten(gk)
        if gt != tree:
            raise TypeError(f"{who}: the cotangent of argument {k} has structure {gt}, "
                            f"expected {tree}")
        for j, (x, a) in enumerate(zip(gl, arg_avals)):
            leaves.append(_zeros(a) if not _is_float(a.dtype) else
                          _leaf_like(x, a, who, f"the cotangent of argument {k} (leaf {j})"))
    return leaves


# --------------------------------------------------------------------------- custom_vjp


class custom_vjp:
    """A function with a user-defined reverse-mode rule (JAX's `jax.custom_vjp`).

        @ad.custom_vjp
        def clip_gradient(x):
            return x
        def fwd(x):
            return x, None                  # (output, residuals)
        def bwd(res, g):
            return (anp.clip(g, -1, 1),)    # one entry per input; None = zero
        clip_gradient.defvjp(fwd, bwd)

    `nondiff_argnums` arguments are passed to `fwd` in place and to `bwd` first
    (`bwd(*nondiff, residuals, cts)`); they get no cotangent.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._eager = _EagerCache(self)

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the rule: `fwd(*args) -> (out, residuals)`, `bwd(residuals, ct) -> tuple`."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        name = _name(self.fun)
        if self.fwd is None or self.bwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        nondiff = _nums(self.nondiff_argnums, len(args), f"custom_vjp({name})")
        if current_trace() is None:
            return self._eager(args, nondiff)
        return _custom_vjp_call(self.fun, self.fwd, self.bwd, args, nondiff, name,
                                key=self)


@dataclasses.dataclass
class _RuleFrame:
    """One custom function call whose rules are being traced."""

    primal: _Primal
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
def _tracing_rules(key: Any, p: _Primal, static: list[Any]) -> Iterator[None]:
    """Record that `key`'s rules are being traced for the call `p` (see `_reentrant_call`)."""
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


def _reentrant_call(key: Any, fun: Callable[..., Any], args: tuple[Any, ...],
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
    diff, static, merge = _split_args(args, nondiff)
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
    p = _trace_primal(lambda *d: fun(*merge(d)), diff, name, key, static)
    return pytree.tree_unflatten(p.fn.out_tree, emit_call(p.fn, p.tracers))


def _custom_vjp_call(fun: Callable[..., Any], fwd: Callable[..., Any],
                     bwd: Callable[..., Any], args: tuple[Any, ...], nondiff: tuple[int, ...],
                     name: str, jvp: Callable[..., Any] | None = None,
                     key: Any = None, vmap: _VmapSpec | None = None) -> Any:
    who = f"custom_vjp({name})"
    again = _reentrant_call(key, fun, args, nondiff, name)
    if again is not None:
        return again
    diff, static, merge = _split_args(args, nondiff)
    p = _trace_primal(lambda *d: fun(*merge(d)), diff, name, key, static)
    with _tracing_rules(key, p, static):
        return _custom_vjp_rules(p, fwd, bwd, static, merge, diff, name, who, jvp, vmap)


def _custom_vjp_rules(p: _Primal, fwd: Callable[..., Any], bwd: Callable[..., Any],
                      static: list[Any], merge: Callable[[Sequence[Any]], list[Any]],
                      diff: tuple[Any, ...], name: str, who: str,
                      jvp: Callable[..., Any] | None, vmap: _VmapSpec | None = None) -> Any:
    trees: dict[str, pytree.TreeDef] = {}

    def fwd_flat(*d: Any) -> Any:
        r = fwd(*merge(d))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the fwd rule must return a pair (output, residuals)")
        out, res = r
        out_leaves, trees["out"] = pytree.tree_flatten(out)
        res_leaves, trees["res"] = pytree.tree_flatten(res)
        if trees["out"] != p.fn.out_tree:
            raise TypeError(f"{who}: the fwd rule's output has structure {trees['out']}, but "
                            f"the function's has {p.fn.out_tree}")
        outs = [_leaf_like(x, a, who, f"output leaf {i} of the fwd rule")
                for i, (x, a) in enumerate(zip(out_leaves, p.fn.out_avals))]
        return outs, [as_tracer(x) for x in res_leaves]

    fwd_fn = trace_function(fwd_flat, p.avals, p.in_tree, name=f"{name}_fwd_rule")
    n_out = len(p.fn.out_avals)
    res_avals = fwd_fn.out_avals[n_out:]
    ct_avals = [a.strong() for a in p.fn.out_avals]

    def bwd_flat(*flat: Any) -> Any:
        res = pytree.tree_unflatten(trees["res"], flat[: len(res_avals)])
        cts = pytree.tree_unflatten(p.fn.out_tree, flat[len(res_avals):])
        return _grads_tree(bwd(*static, res, cts), diff, p.avals, who)

    bwd_fn = trace_function(bwd_flat, [a.strong() for a in res_avals] + ct_avals,
                            name=f"{name}_bwd_rule")
    jvp_fn = _trace_jvp_rule(p, jvp, static, name) if jvp is not None else None
    vmap_fn, out_axes = _trace_vmap_rule(p, vmap, name) if vmap is not None else (None, [])
    caps = _unique_captures(p.fn, fwd_fn, bwd_fn, *([jvp_fn] if jvp_fn else []),
                            *([vmap_fn] if vmap_fn else []))
    rng = _RngPin.of([p.fn, fwd_fn, bwd_fn, jvp_fn, vmap_fn])
    caps = _caps_with(caps, rng)
    with p.trace.context, p.loc:
        vjp_attr, caps = _vjp_rule_functions(p, name, fwd_fn, bwd_fn, caps, rng)
        attrs = {CUSTOM_VJP: vjp_attr}
        if jvp_fn is not None:
            attrs[CUSTOM_JVP] = _jvp_rule_function(p, name, jvp_fn, caps, rng)
        if vmap_fn is not None:
            attrs[CUSTOM_VMAP] = _vmap_rule_function(p, name, vmap, vmap_fn,
                                                                out_axes, caps, rng)
        return _emit_custom(p, name, caps, attrs, rng)


# --------------------------------------------------------------------------- custom vmap


@dataclasses.dataclass(frozen=True)
class VmapInfo:
    """torch.func's `info` of a `Function.vmap` rule: the size of the vmapped
    dimension and the enclosing vmap's `randomness`."""

    batch_size: int
    randomness: str


@dataclasses.dataclass
class _VmapSpec:
    """The batching rule a custom function emits for one vmap level.

    `call(diff_args, diff_in_dims)` runs the user's rule and returns its
    `(outputs, out_dims)`; `flags` says, per flat argument leaf, whether the
    rule receives it batched (at axis 0)."""

    level: Any  # batching.VmapLevel
    flags: list[bool]
    call: Callable[[tuple[Any, ...], tuple[Any, ...]], Any]
    #: the user's rule (for error messages)
    rule: Callable[..., Any] | None = None


def _rule_site(rule: Callable[..., Any] | None) -> str:
    """` (defined at file:line)` for a user's function, or nothing."""
    code = getattr(getattr(rule, "__wrapped__", rule), "__code__", None)
    return "" if code is None else f" (defined at {code.co_filename}:{code.co_firstlineno})"


def _out_dims_leaves(out_dims: Any, tree: pytree.TreeDef, who: str, site: str
                     ) -> list[int | None]:
    """`out_dims` (an int or None per output, a prefix of the outputs' structure)
    broadcast to the output leaves; anything else is an error naming the rule."""

    ok = all(d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool))
             for d in pytree.tree_leaves(out_dims))
    try:
        if ok:
            return _prefix_leaves(out_dims, tree, "out_dims", out_dims)
    except ValueError:
        pass
    raise ValueError(f"{who}: out_dims {out_dims!r} is not a tree prefix of the outputs "
                     f"(structure {tree}) with an int or None per output{site}")


def _trace_vmap_rule(p: _Primal, spec: _VmapSpec, name: str
                     ) -> tuple[TracedFunction, list[int]]:
    """Trace the user's batching rule on batched arguments into a function
    (leaves, batched where `spec.flags` says, batch at axis 0) -> output leaves,
    each with its batch axis (-1: unbatched), checked against the primal's outputs:
    the structure, each output's shape and dtype with its out_dims, and no output
    computed from a batched argument declared unbatched (out_dims None). Errors
    name the rule and where it is defined."""
    who, site = f"{name}.vmap", _rule_site(spec.rule)
    size = spec.level.size
    avals = [ShapedArray((size, *a.shape), a.dtype) if f else a.strong()
             for a, f in zip(p.avals, spec.flags)]
    axes: list[int] = []

    def vmap_flat(*diff: Any) -> Any:
        dims = pytree.tree_unflatten(p.in_tree, [0 if f else None for f in spec.flags])
        with peeled(spec.level):
            r = spec.call(tuple(diff), tuple(dims))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the vmap staticmethod must return a pair "
                            f"(outputs, out_dims), got {type(r).__name__}{site}")
        out, out_dims = r
        leaves, tree = pytree.tree_flatten(out)
        if tree != p.fn.out_tree:
            raise TypeError(f"{who}: the vmap staticmethod returned outputs of structure "
                            f"{tree}, but forward returns {p.fn.out_tree}{site}")
        dims_flat = _out_dims_leaves(out_dims, tree, who, site)
        outs = []
        for j, (x, d, a) in enumerate(zip(leaves, dims_flat, p.fn.out_avals)):
            t = as_tracer(x)
            if d is not None:
                d = int(d)
                d0 = d + a.ndim + 1 if d < 0 else d
                if not 0 <= d0 <= a.ndim:
                    raise ValueError(f"{who}: out_dims {d} is out of range for output {j} "
                                     f"(forward's output has rank {a.ndim}, so its batched "
                                     f"value has rank {a.ndim + 1}){site}")
                d = d0
            want = a.shape if d is None else (*a.shape[:d], size, *a.shape[d:])
            if t.shape != want:
                where = "unbatched" if d is None else f"the batch size {size} at dim {d}"
                raise ValueError(f"{who}: output {j} has shape {t.shape} with out_dims "
                                 f"{'None' if d is None else d}, expected {want} "
                                 f"(forward's output shape {a.shape}, {where}){site}")
            try:
                outs.append(_leaf_like(t, ShapedArray(want, a.dtype), who, f"output {j}"))
            except TypeError as e:
                raise TypeError(f"{e}{site}") from None
            axes.append(-1 if d is None else d)
        return outs

    fn = trace_function(vmap_flat, avals, p.in_tree, name=f"{name}_vmap_rule")
    depends = batched_outputs(fn.func_op.operation,
                              list(spec.flags) + [False] * len(fn.captures))
    for j, (a, dep) in enumerate(zip(axes, depends)):
        if a < 0 and dep:
            raise ValueError(f"{who}: output {j} depends on the batched arguments but its "
                             "out_dims is None (an unbatched output must be the same for "
                             f"every element of the batch){site}")
    return fn, axes


def _vmap_rule_function(p: _Primal, name: str, spec: _VmapSpec, vmap_fn: TracedFunction,
                        out_axes: list[int], caps: list[Tracer], rng: _RngPin | None = None
                        ) -> Callable[[], ir.Attribute]:
    """@name_vmap (leaves, caps) -> outputs, marked with `autodiff.in_axes` /
    `autodiff.out_axes` (-1: unbatched); values the rules close over are unbatched
    arguments (an error here if the enclosing vmap batches one)."""
    if True in spec.level.batched_leaves(caps):
        raise ValueError(f"{name}: its forward or rules close over a value that the enclosing "
                         "vmap batches; pass that value as an argument of apply()")
    x_types = [a.mlir_type() for a in vmap_fn.in_avals]
    c_types = [c.value.type for c in caps]
    w = _Wrapper(p.trace, f"{name}_vmap", x_types + c_types,
                 [a.mlir_type() for a in vmap_fn.out_avals], p.loc)
    nx = len(x_types)
    w.ret(w.call(vmap_fn, w.args[:nx] + [w.args[nx + _index_of(caps, c)]
                                         for c in vmap_fn.captures]))
    in_axes = [0 if f else -1 for f in spec.flags] + [-1] * len(caps)
    w.op.attributes[IN_AXES] = ir.DenseI64ArrayAttr.get(in_axes)
    w.op.attributes[OUT_AXES] = ir.DenseI64ArrayAttr.get(out_axes)
    if rng is not None:
        rng.mark(w, nx + _index_of(caps, rng.key))
    return lambda: ir.FlatSymbolRefAttr.get(w.name)


# --------------------------------------------------------------------------- custom_jvp


def _trace_jvp_rule(p: _Primal, rule: Callable[..., Any], static: list[Any], name: str
                    ) -> TracedFunction:
    """Trace `rule(*static, primals, tangents) -> (out, tangent_out)` into a function
    (primal leaves..., tangent leaves...) -> (out leaves..., tangent leaves...)."""
    who = f"custom_jvp({name})"
    n = len(p.avals)

    def jvp_flat(*flat: Any) -> Any:
        primals = pytree.tree_unflatten(p.in_tree, flat[:n])
        tangents = pytree.tree_unflatten(p.in_tree, flat[n:])
        r = rule(*static, tuple(primals), tuple(tangents))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the jvp rule must return a pair (primal_out, tangent_out)")
        out, tan = r
        ol, ot = pytree.tree_flatten(out)
        tl, tt = pytree.tree_flatten(tan)
        if ot != p.fn.out_tree or tt != p.fn.out_tree:
            raise TypeError(f"{who}: the jvp rule's primal and tangent outputs must have the "
                            f"function's output structure {p.fn.out_tree}, got {ot} and {tt}")
        outs = [_leaf_like(x, a, who, f"primal output leaf {i}")
                for i, (x, a) in enumerate(zip(ol, p.fn.out_avals))]
        tans = [_leaf_like(x, a, who, f"tangent output leaf {i}")
                for i, (x, a) in enumerate(zip(tl, p.fn.out_avals))]
        return outs, tans

    return trace_function(jvp_flat, [a.strong() for a in p.avals] * 2,
                          name=f"{name}_jvp_rule")


class custom_jvp:
    """A function with a user-defined forward-mode rule (JAX's `jax.custom_jvp`).

        @ad.custom_jvp
        def log1pexp(x):
            return anp.log1p(anp.exp(x))

        @log1pexp.defjvp
        def log1pexp_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return log1pexp(x), t * (1 - 1 / (1 + anp.exp(x)))

    Reverse mode transposes the rule (it must be linear in the tangents).
    `nondiff_argnums` arguments are passed to the rule first: `rule(*nondiff,
    primals, tangents)` with the other arguments in `primals`.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable[..., Any] | None = None
        self._eager = _EagerCache(self)

    def defjvp(self, jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Set the rule `jvp(primals, tangents) -> (primal_out, tangent_out)`; returns it."""
        self.jvp = jvp
        return jvp

    def __call__(self, *args: Any) -> Any:
        name = _name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        nondiff = _nums(self.nondiff_argnums, len(args), f"custom_jvp({name})")
        if current_trace() is None:
            return self._eager(args, nondiff)
        again = _reentrant_call(self, self.fun, args, nondiff, name)
        if again is not None:
            return again
        diff, static, merge = _split_args(args, nondiff)
        p = _trace_primal(lambda *d: self.fun(*merge(d)), diff, name, self, static)
        with _tracing_rules(self, p, static):
            jvp_fn = _trace_jvp_rule(p, self.jvp, static, name)
        caps = _unique_captures(p.fn, jvp_fn)
        rng = _RngPin.of([p.fn, jvp_fn])
        caps = _caps_with(caps, rng)
        with p.trace.context, p.loc:
            attr = _jvp_rule_function(p, name, jvp_fn, caps, rng)
            return _emit_custom(p, name, caps, {CUSTOM_JVP: attr}, rng)


# --------------------------------------------------------------------------- Function


class FunctionCtx:
    """torch's `ctx`: `save_for_backward(*tensors)` / `saved_tensors`, any other
    attribute (Python values, or traced arrays, which are saved as residuals)."""

    def __init__(self, needs_input_grad: tuple[bool, ...] = ()) -> None:
        self.to_save: tuple[Any, ...] = ()
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        self.to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return tuple(self.to_save)

    def mark_non_differentiable(self, *args: Any) -> None:
        """Accepted for compatibility: such outputs simply get no cotangent from the user."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _ctx_tracers(ctx: FunctionCtx) -> tuple[list[str], list[Any]]:
    """The ctx attributes holding traced values (saved_tensors first)."""
    keys, vals = [], []
    for k, v in vars(ctx).items():
        if k in ("needs_input_grad", "materialize_grads"):
            continue
        if k == "to_save" or any(isinstance(x, Tracer) for x in pytree.tree_leaves(v)):
            keys.append(k)
            vals.append(v)
    return keys, vals


def _static_positions(args: tuple[Any, ...], who: str) -> tuple[int, ...]:
    """Positions of `Function.apply`'s non-array arguments (passed to the rules as
    they are). An array, or a container (pytree) of arrays only, is differentiable;
    a container mixing arrays with other values is an error (its arrays would get
    no gradient)."""
    static = []
    for i, a in enumerate(args):
        leaves = pytree.tree_leaves(a)
        arrays = [isinstance(x, _ARRAY_TYPES) for x in leaves]
        if leaves and all(arrays):
            continue
        if any(arrays):
            raise TypeError(f"{who}: argument {i} ({type(a).__name__}) mixes arrays with "
                            "other values; pass the arrays (differentiable inputs) and the "
                            "Python values (passed to forward as they are) as separate "
                            "arguments")
        static.append(i)
    return tuple(static)


#: Function class -> static positions -> the jit that runs `apply` outside a trace
_EAGER_FUNCTIONS: weakref.WeakKeyDictionary[type, dict[tuple[int, ...], JitFunction]] = \
    weakref.WeakKeyDictionary()


def _function_eager(cls: type, args: tuple[Any, ...], static: tuple[int, ...]) -> Any:
    """`cls.apply(*args)` outside a trace: `jit` with the non-array arguments static
    (a new value traces new code, as each value is new code in torch), cached per
    class."""
    return _eager_jit(_EAGER_FUNCTIONS.setdefault(cls, {}), lambda *a: cls.apply(*a), args,
                      static)


class Function:
    """A differentiable operation with user rules, as `torch.autograd.Function`.

        class Exp(ad.Function):
            @staticmethod
            def forward(x):
                return anp.exp(x)
            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(output)
            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y
            @staticmethod
            def jvp(ctx, t):               # optional: forward mode
                (y,) = ctx.saved_tensors
                return t * y

        y = Exp.apply(x)

    `forward(ctx, *args)` without `setup_context` works too. `backward` returns
    one gradient per input (a single value for one input; None = zero).
    Inputs that are not arrays (Python ints, floats, bools, strings, None...)
    reach forward, setup_context, jvp and vmap as the Python objects, as in
    torch: backward returns None for them (anything else is an error), `jvp`
    gets None as their tangent and `vmap` None as their in_dim; each value
    traces its own code (like a static argument of `jit`), so a number that
    changes from call to call (or needs a gradient) should be an array
    (`np.float64(v)`, `anp.asarray(v)`).
    Without `jvp`, forward mode differentiates `forward`'s body. The rules may
    call `apply` of their own class or of other Functions.

    Under `vmap` (torch.func semantics) the class needs one of:

    - `generate_vmap_rule = True`: the passes batch `forward`, `backward`
      and `jvp` like any code (the batched function keeps batched versions of
      the derivative rules, so grad of vmap still uses `backward`);
    - a staticmethod `vmap(info, in_dims, *args) -> (outputs, out_dims)`:
      `info.batch_size`, `info.randomness`; `in_dims[i]` is the batch dim of
      argument i (0) or None for an unbatched or non-array argument;
      `out_dims` is an int or None per output (a prefix of the outputs'
      structure), negative dims count from the end. It is traced for the
      innermost enclosing vmap level into an `autodiff.custom_vmap` rule;
      enclosing levels batch the rule's code generically, and grad/jvp of the
      vmapped function use the batched `backward`/`jvp`.

    Without either, `apply` on a batched argument raises torch's RuntimeError
    (see `_vmap_spec` for the cases only the passes can decide).
    """

    #: torch's flag: batch forward/backward/jvp automatically under vmap.
    generate_vmap_rule: bool = False

    @staticmethod
    def forward(*args: Any) -> Any:
        raise NotImplementedError("subclasses of ad.Function must implement forward")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: Any) -> None:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Any) -> Any:
        raise NotImplementedError("subclasses of ad.Function must implement backward")

    @staticmethod
    def vmap(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def _has(cls, name: str) -> bool:
        return getattr(cls, name).__qualname__ != getattr(Function, name).__qualname__ \
            if hasattr(cls, name) and hasattr(Function, name) else hasattr(cls, name)

    @classmethod
    def _run_forward(cls, ctx: FunctionCtx, args: Sequence[Any]) -> Any:
        if cls._has("setup_context"):
            out = cls.forward(*args)
            cls.setup_context(ctx, tuple(args), out)
            return out
        return cls.forward(ctx, *args)

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run the function (differentiable with the class's rules).

        Arrays (traced values, numpy arrays and scalars, or containers holding
        only arrays) are the differentiable inputs; every other argument (a
        Python int, float, bool, string, None, ...) reaches forward,
        setup_context, jvp and vmap as the Python object itself, and its
        gradient in backward's result must be None (torch's semantics)."""
        name = cls.__name__ if cls.__name__.isidentifier() else "fn"
        static = _static_positions(args, f"{name}.apply")
        if current_trace() is None:
            return _function_eager(cls, args, static)
        ctx_box: dict[str, Any] = {}
        n_diff = len(args) - len(static)
        if not n_diff:  # nothing to differentiate or batch: forward, inline
            return cls._run_forward(FunctionCtx((False,) * len(args)), args)

        def fun(*a: Any) -> Any:
            return cls._run_forward(FunctionCtx(), a)

        def fwd(*a: Any) -> Any:
            ctx = FunctionCtx(tuple(i not in static for i in range(len(args))))
            out = cls._run_forward(ctx, a)
            keys, vals = _ctx_tracers(ctx)
            ctx_box["ctx"], ctx_box["keys"] = ctx, keys
            return out, vals

        def bwd(*rest: Any) -> Any:
            res, cts = rest[-2], rest[-1]
            ctx = ctx_box["ctx"]
            for k, v in zip(ctx_box["keys"], res):
                setattr(ctx, k, v)
            grads = cls.backward(ctx, *(cts if isinstance(cts, tuple) else (cts,)))
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != len(args):
                raise TypeError(f"{name}.backward returned {len(grads)} gradient(s), "
                                f"expected {len(args)} (one per input to forward)"
                                f"{_rule_site(cls.backward)}")
            for i in static:
                if grads[i] is not None:
                    raise TypeError(
                        f"{name}.backward returned a gradient different than None at "
                        f"position {i}, but the corresponding forward input was not an "
                        f"array ({type(args[i]).__name__}){_rule_site(cls.backward)}")
            return tuple(g for i, g in enumerate(grads) if i not in static)

        jvp = None
        if cls._has("jvp"):
            def jvp(*rest: Any) -> Any:
                primals, tangents = rest[-2], rest[-1]
                it, itt = iter(primals), iter(tangents)
                full = [args[i] if i in static else next(it) for i in range(len(args))]
                # one tangent per input of forward, None for a non-array one (torch)
                tfull = [None if i in static else next(itt) for i in range(len(args))]
                ctx = FunctionCtx(tuple(i not in static for i in range(len(args))))
                out = cls._run_forward(ctx, full)
                return out, cls.jvp(ctx, *tfull)

        vmap = cls._vmap_spec(args, static, name)
        return _custom_vjp_call(fun, fwd, bwd, args, static, name, jvp, key=cls, vmap=vmap)

    @classmethod
    def _vmap_spec(cls, args: tuple[Any, ...], static: tuple[int, ...], name: str
                   ) -> _VmapSpec | None:
        """The batching rule to emit when `apply` runs under vmap (torch.func semantics).

        Nothing is emitted outside vmap, when no argument depends on a batched
        value of the innermost vmap level, or with `generate_vmap_rule = True`
        (the pass then batches forward and the derivative rules themselves).
        Without either, an argument known to be batched is torch's RuntimeError;
        where batching is only known to the passes (below), the function is
        batched like `generate_vmap_rule` (sound here: every rule is traced
        code), so the vmaps inside `jacfwd`/`jacrev`/`hessian` keep working.
        With a `vmap` staticmethod, the rule is traced for that level's batch
        size: arguments known to be unbatched get in_dims None, the others 0;
        an argument whose batching is only known to the passes (inside a
        function nested in the vmapped one, e.g. under grad) is passed batched,
        which is always usable: the pass broadcasts an unbatched value into it.
        Other vmap levels batch the rule's code generically.
        """
        level = active_vmap_level()
        if level is None:
            return None
        diff = [a for i, a in enumerate(args) if i not in static]
        found = level.batched_leaves(pytree.tree_leaves(diff))
        if not any(f is not False for f in found):
            return None
        has_rule, generate = cls._has("vmap"), bool(getattr(cls, "generate_vmap_rule", False))
        if has_rule and generate:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it has both generate_vmap_rule=True and "
                "an overridden vmap staticmethod. Please set generate_vmap_rule=False or "
                "delete the overridden vmap staticmethod to avoid ambiguity.")
        if not has_rule and not generate and True in found:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it does not have vmap support. Please "
                "override and implement the vmap staticmethod or set generate_vmap_rule=True.")
        if not has_rule:
            return None
        info = VmapInfo(level.size, level.randomness)

        def call(diff_args: tuple[Any, ...], diff_dims: tuple[Any, ...]) -> Any:
            it, itd = iter(diff_args), iter(diff_dims)
            full = [args[i] if i in static else next(it) for i in range(len(args))]
            dims = tuple(None if i in static else next(itd) for i in range(len(args)))
            return cls.vmap(info, dims, *full)

        return _VmapSpec(level, [f is not False for f in found], call, cls.vmap)


# --------------------------------------------------------------------------- checkpoint

POLICIES = ("nothing_saveable", "everything_saveable", "dots_saveable")


@dataclasses.dataclass(frozen=True)
class Policy:
    """A checkpoint policy: which values of the checkpointed function the forward
    pass saves (the rest is recomputed in the backward pass)."""

    name: str
    names: tuple[str, ...] = ()


class checkpoint_policies:
    """JAX's policy names: `nothing_saveable` (the default), `everything_saveable`,
    `dots_saveable` (contraction outputs), `save_only_these_names(*names)`."""

    nothing_saveable = Policy("nothing_saveable")
    everything_saveable = Policy("everything_saveable")
    dots_saveable = Policy("dots_saveable")
    checkpoint_dots = dots_saveable

    @staticmethod
    def save_only_these_names(*names: str) -> Policy:
        return Policy("save_only_these_names", tuple(names))


def _policy(policy: Any) -> Policy:
    if policy is None:
        return checkpoint_policies.nothing_saveable
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in POLICIES:
        return Policy(policy)
    raise ValueError(f"checkpoint: unknown policy {policy!r}; use one of "
                     "ad.checkpoint_policies.{nothing_saveable, everything_saveable, "
                     "dots_saveable, save_only_these_names(...)}")


def checkpoint(fun: Callable[..., Any], policy: Any = None, *, prevent_cse: bool = True,
               static_argnums: int | Sequence[int] = ()) -> Callable[..., Any]:
    """`fun` with its internals recomputed in the backward pass instead of saved
    (JAX's `jax.checkpoint` / `remat`). `policy` picks values that are saved
    anyway (see `checkpoint_policies`); the default saves nothing but the inputs.
    Emits `autodiff.checkpoint {fn = @fun, policy = "..."}`."""
    pol = _policy(policy)
    name = _name(fun)

    @functools.wraps(fun)
    def wrapped(*args: Any) -> Any:
        nums = _nums(static_argnums, len(args), f"checkpoint({name})")
        if current_trace() is None:
            return eager(args, nums)
        diff, _, merge = _split_args(args, nums)
        p = _trace_primal(lambda *d: fun(*merge(d)), diff, name)
        trace = p.trace
        operands = [trace.lift(t) for t in p.tracers] + [trace.lift(c) for c in p.fn.captures]
        with trace.emitting():
            attrs: dict[str, ir.Attribute] = {"fn": p.fn.symbol,
                                              "policy": ir.StringAttr.get(pol.name)}
            if pol.name == "save_only_these_names":
                attrs["names"] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in pol.names])
            op = ir.Operation.create(
                CHECKPOINT, results=[a.mlir_type() for a in p.fn.out_avals],
                operands=[o.value for o in operands], attributes=attrs)
        outs = [trace.wrap(v, a) for v, a in zip(op.results, p.fn.out_avals)]
        return pytree.tree_unflatten(p.fn.out_tree, outs)

    eager = _EagerCache(wrapped)
    return wrapped


remat = checkpoint


def checkpoint_name(x: Any, name: str) -> Any:
    """`x`, named for `checkpoint_policies.save_only_these_names(name)`.

    Each leaf goes through `func.call` of a private identity function marked
    `autodiff.checkpoint_name = "<name>"` (one per name and type)."""
    if current_trace() is None:
        return x
    trace = require_trace("checkpoint_name")

    def one(leaf: Any) -> Any:
        t = trace.lift(as_tracer(leaf))
        fname = _name_function(trace, name, t.value.type)
        with trace.emitting():
            call = func.CallOp([t.value.type], ir.FlatSymbolRefAttr.get(fname), [t.value])
        return trace.wrap(call.results[0], t.aval)

    return pytree.tree_map(one, x)


def _name_function(trace: FunctionTrace, name: str, t: ir.Type) -> str:
    for op in trace.module.body.operations:
        if op.operation.name == "func.func" and CHECKPOINT_NAME in op.attributes \
                and ir.StringAttr(op.attributes[CHECKPOINT_NAME]).value == name \
                and op.attributes["function_type"].value.inputs[0] == t:
            return ir.StringAttr(op.attributes["sym_name"]).value
    base = "checkpoint_name_" + "".join(c if c.isalnum() else "_" for c in name)
    with trace.context, ir.Location.unknown(), ir.InsertionPoint.at_block_begin(
            trace.module.body):
        fn = func.FuncOp(_unique_symbol(trace.module, base), ir.FunctionType.get([t], [t]),
                         visibility="private")
        fn.attributes[CHECKPOINT_NAME] = ir.StringAttr.get(name)
        blk = fn.add_entry_block()
        with ir.InsertionPoint(blk):
            func.ReturnOp([blk.arguments[0]])
        return ir.StringAttr(fn.attributes["sym_name"]).value


# --------------------------------------------------------------------------- residuals


@dataclasses.dataclass(frozen=True)
class SavedResidual:
    """One value reverse mode keeps from the forward to the backward pass."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    #: "argument <name>" or "output of <op>"
    source: str
    #: `file:line:col` of the op that produced it ("" for arguments)
    location: str

    def __str__(self) -> str:
        aval = ShapedArray(self.shape, self.dtype).str_short()
        where = f" at {self.location}" if self.location else ""
        return f"{aval} ({self.nbytes} bytes) {self.source}{where}"


def _arg_names(fun: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"#{i}"
        n = len(pytree.tree_leaves(a))
        names += [base] if n == 1 and pytree.tree_structure(a).is_leaf else \
            [f"{base}[leaf {k}]" for k in range(n)]
    return names


def saved_residuals(fun: Callable[..., Any], *args: Any) -> list[SavedResidual]:
    """What reverse mode of `fun` (w.r.t. every float argument) saves for the
    backward pass: arguments it reads there and values of the forward code."""
    leaves, in_tree = pytree.tree_flatten(args)
    avals = [_leaf_aval(x, f"saved_residuals({_name(fun)})")[0] for x in leaves]
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
    main = FunctionTrace(module, "main", avals, fun=fun)
    with main.active():
        fn = trace_function(fun, avals, in_tree, name=_name(fun))
        main.finish([])
    wrt = [i for i, a in enumerate(avals) if _is_float(a.dtype)]
    names = _arg_names(fun, args)
    out = []
    with ctx:
        for r in residual_report(module.operation, fn.sym_name, wrt):
            aval = ShapedArray.from_type(r.type)
            nbytes = aval.size * aval.dtype.itemsize
            if r.arg is not None:
                out.append(SavedResidual(aval.shape, aval.dtype, nbytes,
                                         f"from the argument {names[r.arg]}", ""))
            else:
                out.append(SavedResidual(aval.shape, aval.dtype, nbytes,
                                         f"output of {r.op}", r.location))
    return out


def print_saved_residuals(fun: Callable[..., Any], *args: Any) -> None:
    """Print what reverse mode of `fun` saves (JAX's `print_saved_residuals`):
    one line per value (shape, dtype, bytes, the op and source line), then the total."""
    res = saved_residuals(fun, *args)
    for r in res:
        print(r)
    print(f"total: {sum(r.nbytes for r in res)} bytes in {len(res)} residual(s)")


__all__ = ["Function", "FunctionCtx", "Policy", "SavedResidual", "VmapInfo", "checkpoint",
           "checkpoint_name", "checkpoint_policies", "custom_jvp", "custom_vjp",
           "print_saved_residuals", "remat", "saved_residuals"]
