"""Tracing: Python functions on `Tracer` values become `func.func`s on tensors.

A `FunctionTrace` owns one `func.func` being built; while it is active (on a
per-thread stack), every `mlir_autodiff.numpy` call appends upstream ops
(`arith`, `math`, `tensor`, `linalg`) to it. A `Tracer` wraps the `ir.Value`
of one tensor plus its abstract value (`ShapedArray`: shape, numpy dtype,
weak type); `mlir_autodiff.numpy` installs numpy's operators and methods on
it. This module imports nothing of the package above it (errors, pytree).

Transforms build on this module: `trace_function(fun, in_avals, in_tree)`
traces a sub-function into its own private `func.func` in the module of the
active trace, so a transform can emit an op that names it by symbol
(`autodiff.vjp {fn = @f}`). Values the sub-function closes over are
*captured*: they become extra trailing arguments of the sub-function, and
`TracedFunction.captures` lists the outer values a caller must pass for them
(`emit_call` does so).

Loops (`mlir_autodiff.lax`) trace their bodies into a `RegionTrace`: the
body block of an `scf.for` / `scf.while` of the enclosing trace, which sees
the enclosing values directly (regions are not isolated from above).

Every emitted op is located at the user's source line (`file:line:col` of
the first Python frame outside this package), so MLIR diagnostics from any
later pass point at the user's code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import linecache
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from mlir import ir
from mlir.dialects import func

from . import pytree
from .errors import (
    ConcretizationTypeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    UnexpectedTracerError,
    UnsupportedError,
)
from .transforms.ad_support import unique_symbol

# --------------------------------------------------------------------------- dtypes

#: bfloat16 as numpy knows it (the ml_dtypes extension type, as jax uses).
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT16 = np.dtype(np.float16)

#: numpy dtypes the tracer supports, and their MLIR element types.
_ELEMENT_TYPES: dict[np.dtype, Callable[[], ir.Type]] = {
    FLOAT16: ir.F16Type.get,
    BFLOAT16: ir.BF16Type.get,
    np.dtype(np.float32): ir.F32Type.get,
    np.dtype(np.float64): ir.F64Type.get,
    np.dtype(np.bool_): lambda: ir.IntegerType.get_signless(1),
    np.dtype(np.int8): lambda: ir.IntegerType.get_signless(8),
    np.dtype(np.int16): lambda: ir.IntegerType.get_signless(16),
    np.dtype(np.int32): lambda: ir.IntegerType.get_signless(32),
    np.dtype(np.int64): lambda: ir.IntegerType.get_signless(64),
}
_DTYPE_OF_ELEMENT = {"f16": np.float16, "bf16": BFLOAT16, "f32": np.float32, "f64": np.float64, "i1": np.bool_, "i8": np.int8,
                     "i16": np.int16, "i32": np.int32, "i64": np.int64}

#: Booleans are *stored* in tensors as i8 (0/1) and computed on as i1 inside
#: `linalg.generic` bodies (comparisons give i1, extended to i8 on yield).
#: Why: this MLIR build's memref-to-LLVM lowering asserts (aborts the process)
#: on any load/store of an i1 memref, and every bool tensor that is not fused
#: away is bufferized into one. numpy's bool_ is one byte per element too, so
#: i8 storage also matches numpy's memory layout at the runtime boundary.
#: Set to False once i1 memrefs lower: nothing else depends on the choice.
BOOL_AS_I8 = True

SUPPORTED_DTYPES = tuple(_ELEMENT_TYPES)
_BOOL = np.dtype(np.bool_)


def is_float_dtype(dtype: Any) -> bool:
    """Whether `dtype` is a floating-point type: float16/32/64 or bfloat16 (whose numpy
    kind is 'V', so `kind == "f"` and `np.issubdtype(.., np.floating)` miss it)."""
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt == BFLOAT16


def canonical_dtype(dtype: Any) -> np.dtype:
    """`dtype` as an np.dtype the tracer supports; raises UnsupportedError otherwise."""
    dt = np.dtype(dtype)
    if dt not in _ELEMENT_TYPES:
        supported = ", ".join(str(d) for d in _ELEMENT_TYPES)
        raise UnsupportedError(
            f"dtype {dt} is not supported by mlir_autodiff (supported: {supported})"
        )
    return dt


def element_type(dtype: np.dtype) -> ir.Type:
    """The MLIR element type that *stores* `dtype` in tensors (bool: i8, see BOOL_AS_I8)."""
    dt = canonical_dtype(dtype)
    if dt == _BOOL and BOOL_AS_I8:
        return ir.IntegerType.get_signless(8)
    return _ELEMENT_TYPES[dt]()


def compute_type(dtype: np.dtype) -> ir.Type:
    """The MLIR scalar type ops compute `dtype` in (bool: i1)."""
    return _ELEMENT_TYPES[canonical_dtype(dtype)]()


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The numpy dtype the runtime sees for `dtype` (bool arrays travel as int8)."""
    dt = canonical_dtype(dtype)
    return np.dtype(np.int8) if dt == _BOOL and BOOL_AS_I8 else dt


def dtype_of(t: ir.Type) -> np.dtype:
    """The numpy dtype of an MLIR element type."""
    key = str(t)
    if key not in _DTYPE_OF_ELEMENT:
        raise UnsupportedError(f"MLIR element type {t} has no numpy dtype here")
    return np.dtype(_DTYPE_OF_ELEMENT[key])


@dataclasses.dataclass(frozen=True)
class ShapedArray:
    """The abstract value of a traced array: static shape, dtype, weak type.

    `weak_type` marks values that came from Python scalars: like JAX (and
    NEP 50), they adopt the dtype of the arrays they are combined with, so
    `x_f32 * 2.0` stays float32.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    weak_type: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def mlir_type(self) -> ir.RankedTensorType:
        """`tensor<...>` of this value (needs an active Context)."""
        return ir.RankedTensorType.get(list(self.shape), element_type(self.dtype))

    def strong(self) -> ShapedArray:
        return dataclasses.replace(self, weak_type=False)

    @staticmethod
    def from_type(t: ir.Type, weak_type: bool = False, dtype: Any = None) -> ShapedArray:
        """The abstract value of a ranked tensor type with static shape.

        Pass `dtype` when the element type is ambiguous (i8 stores int8 and bool).
        """
        if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
            raise UnsupportedError(f"only statically shaped ranked tensors are traced, got {t}")
        return ShapedArray(tuple(t.shape), dtype if dtype is not None else
                           dtype_of(t.element_type), weak_type)

    def str_short(self) -> str:
        name = {"float32": "f32", "float64": "f64", "bool": "bool"}.get(self.dtype.name,
                                                                        self.dtype.name)
        return f"{name}[{','.join(str(d) for d in self.shape)}]"

    def __str__(self) -> str:
        return self.str_short() + ("{weak}" if self.weak_type else "")


# --------------------------------------------------------------------------- locations

_PACKAGE = __name__.rsplit(".", 1)[0]  # "mlir_autodiff"


#: Standard-library modules our own frames pass through (context managers, wrappers).
_PASS_THROUGH = frozenset({"contextlib", "functools"})


def _is_internal(frame: types.FrameType) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == _PACKAGE or name.startswith(_PACKAGE + ".") or name in _PASS_THROUGH


def user_frame() -> types.FrameType | None:
    """The innermost Python frame outside the mlir_autodiff package (the user's code)."""
    f: types.FrameType | None = sys._getframe(1)
    while f is not None and _is_internal(f):
        f = f.f_back
    return f


def _frame_position(f: types.FrameType) -> tuple[str, int, int]:
    line, col = f.f_lineno, 0
    try:
        pos = next(itertools.islice(f.f_code.co_positions(), f.f_lasti // 2, None))
        if pos[0] is not None:
            line = pos[0]
        if pos[2] is not None:
            col = pos[2]
    except (StopIteration, AttributeError, ValueError):
        pass
    return f.f_code.co_filename, line or 0, col + 1  # MLIR columns are 1-based


def user_site() -> tuple[str, int, int]:
    """(file, line, column) of the user's code currently being traced."""
    f = user_frame()
    if f is None:
        return "<unknown>", 0, 0
    return _frame_position(f)


def format_site(site: tuple[str, int, int] | None = None) -> str:
    """`file.py:12` for error messages (the user's code by default)."""
    file, line, _ = site or user_site()
    return f"{file}:{line}"


def user_location(context: ir.Context | None = None) -> ir.Location:
    """An MLIR FileLineColLoc at the user's source position."""
    file, line, col = user_site()
    return ir.Location.file(file, line, col, context=context)


def function_location(fun: Callable[..., Any] | None,
                      context: ir.Context | None = None) -> ir.Location:
    """Where `fun` is defined (file:line of its `def`), else the user's current line."""
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    if code is None:
        return user_location(context)
    return ir.Location.file(code.co_filename, code.co_firstlineno, 1, context=context)


def _bool_construct(site: tuple[str, int, int]) -> str:
    """Which Python construct asked for a bool, from the source line (best effort)."""
    text = linecache.getline(site[0], site[1]).strip()
    for kw in ("if", "elif", "while", "assert"):
        if text.startswith((kw + " ", kw + "(")):
            return f"`{kw}`"
    for kw in (" and ", " or ", "not "):
        if kw in text:
            return f"`{kw.strip()}`"
    if " if " in text:
        return "a conditional expression"
    return "bool()"


# --------------------------------------------------------------------------- the trace stack

class _TraceState(threading.local):
    def __init__(self) -> None:
        self.stack: list[FunctionTrace] = []


_STATE = _TraceState()


def current_trace() -> FunctionTrace | None:
    """The innermost active function trace, or None when not tracing."""
    stack = _STATE.stack
    return stack[-1] if stack else None


def require_trace(what: str) -> FunctionTrace:
    trace = current_trace()
    if trace is None:
        raise UnexpectedTracerError(
            f"{what} needs an active trace (call it inside a function given to "
            f"mlir_autodiff.jit) at {format_site()}"
        )
    return trace


class FunctionTrace:
    """One `func.func` under construction; `args` are its parameter tracers."""

    def __init__(self, module: ir.Module, name: str, in_avals: Sequence[ShapedArray], *,
                 parent: FunctionTrace | None = None, private: bool = False,
                 fun: Callable[..., Any] | None = None) -> None:
        self.module = module
        self.context = module.context
        self.parent = parent
        self.finished = False
        with self.context, function_location(fun, self.context):
            ftype = ir.FunctionType.get([a.mlir_type() for a in in_avals], [])
            with ir.InsertionPoint(module.body):
                self.func_op = func.FuncOp(unique_symbol(module, name), ftype,
                                           visibility="private" if private else None)
            self.block = self.func_op.add_entry_block()
        self.args = [Tracer(v, a, self) for v, a in zip(self.block.arguments, in_avals)]
        self.in_avals = list(in_avals)
        #: outer tracers (of `parent`) captured as extra trailing arguments.
        self.captures: list[Tracer] = []
        self._captured: dict[int, Tracer] = {}
        self.out_avals: list[ShapedArray] = []

    @property
    def name(self) -> str:
        return ir.StringAttr(self.func_op.attributes["sym_name"]).value

    def is_self_or_ancestor(self, other: FunctionTrace) -> bool:
        t: FunctionTrace | None = self
        while t is not None:
            if t is other:
                return True
            t = t.parent
        return False

    @contextlib.contextmanager
    def active(self) -> Iterator[FunctionTrace]:
        """Make this the trace that numpy calls append to."""
        _STATE.stack.append(self)
        try:
            yield self
        finally:
            popped = _STATE.stack.pop()
            assert popped is self, "trace stack corrupted"

    @contextlib.contextmanager
    def emitting(self, loc: ir.Location | None = None) -> Iterator[None]:
        """Context, location (the user's line by default) and insertion point to add ops."""
        if self.finished:
            raise UnexpectedTracerError(
                f"function @{self.name} is already traced; cannot add operations "
                f"(a traced value escaped its function) at {format_site()}"
            )
        with self.context, loc or user_location(self.context), ir.InsertionPoint(self.block):
            yield

    def wrap(self, value: ir.Value, aval: ShapedArray | None = None) -> Tracer:
        """A Tracer for an `ir.Value` created in this trace (e.g. a transform op's result).

        Give `aval` to keep a dtype the type cannot tell (bool vs int8) or a weak type.
        """
        return Tracer(value, aval if aval is not None else ShapedArray.from_type(value.type),
                      self)

    def lift(self, t: Tracer) -> Tracer:
        """`t` as a value of this function, capturing it from an enclosing trace if needed."""
        if t.trace is self:
            return t
        if self.parent is None or not self.parent.is_self_or_ancestor(t.trace):
            raise UnexpectedTracerError(
                f"a traced value ({t.aval}) from another function trace was used at "
                f"{format_site()}; traced values must not escape the function they "
                "were created in (e.g. stored in a global or a closure of an earlier call)"
            )
        outer = self.parent.lift(t)
        inner = self._captured.get(id(outer))
        if inner is None:
            with self.context:
                arg = self.block.add_argument(outer.value.type, user_location(self.context))
            inner = Tracer(arg, outer.aval, self)
            self.captures.append(outer)
            self._captured[id(outer)] = inner
        return inner

    def finish(self, outs: Sequence[Tracer]) -> None:
        """Return `outs` from the function and fix its type (captures included)."""
        outs = [self.lift(o) for o in outs]
        with self.context, user_location(self.context):
            with ir.InsertionPoint(self.block):
                func.ReturnOp([o.value for o in outs])
            arg_types = [a.type for a in self.block.arguments]
            ftype = ir.FunctionType.get(arg_types, [o.value.type for o in outs])
            self.func_op.attributes["function_type"] = ir.TypeAttr.get(ftype)
        self.out_avals = [o.aval for o in outs]
        self.finished = True


class RegionTrace(FunctionTrace):
    """The body block of a structured control-flow op (`scf.for`, `scf.while`) being traced.

    Like a function trace, numpy calls append to `block` while it is active,
    and its block arguments are its `args`. Unlike a function, a region is
    not isolated from above: a value of the enclosing trace (or of any trace
    around that) is used directly, so `lift` wraps the enclosing value
    instead of adding a block argument, and `captures` stays empty. Values
    of the region must not escape it: once `finished`, adding ops is an
    error, and the enclosing trace refuses its tracers (`lift`).
    """

    def __init__(self, parent: FunctionTrace, block: ir.Block,
                 in_avals: Sequence[ShapedArray], what: str) -> None:
        # No func.func of its own: the block belongs to an op of `parent`.
        self.module = parent.module
        self.context = parent.context
        self.parent = parent
        self.finished = False
        self.func_op = parent.func_op
        self.block = block
        self.args = [Tracer(v, a, self) for v, a in zip(block.arguments, in_avals)]
        self.in_avals = list(in_avals)
        self.captures: list[Tracer] = []
        self._captured: dict[int, Tracer] = {}
        self._outer: list[Tracer] = []  # keeps the ids in `_captured` alive
        self.out_avals: list[ShapedArray] = []
        self.what = what

    @property
    def name(self) -> str:
        return f"{self.what} in @{self.parent.name}"

    def lift(self, t: Tracer) -> Tracer:
        """`t` as a value of this region: enclosing values are visible as they are."""
        if t.trace is self:
            return t
        outer = self.parent.lift(t)  # raises for values of unrelated traces
        inner = self._captured.get(id(outer))
        if inner is None:
            inner = Tracer(outer.value, outer.aval, self)
            self._captured[id(outer)] = inner
            self._outer.append(outer)
        return inner

    def finish(self, outs: Sequence[Tracer]) -> None:
        """Record the region's results; the caller emits the terminator that yields them."""
        self.out_avals = [o.aval for o in outs]
        self.finished = True


# --------------------------------------------------------------------------- sub-functions

@dataclasses.dataclass
class TracedFunction:
    """A Python function traced into its own `func.func` (see `trace_function`)."""

    func_op: func.FuncOp
    sym_name: str
    in_avals: list[ShapedArray]
    out_avals: list[ShapedArray]
    out_tree: pytree.TreeDef
    #: Tracers of the calling trace to pass as trailing arguments after `in_avals`.
    captures: list[Tracer]

    @property
    def symbol(self) -> ir.FlatSymbolRefAttr:
        return ir.FlatSymbolRefAttr.get(self.sym_name, context=self.func_op.context)


def trace_function(fun: Callable[..., Any], in_avals: Sequence[ShapedArray],
                   in_tree: pytree.TreeDef | None = None, *, name: str | None = None,
                   private: bool = True) -> TracedFunction:
    """Trace `fun` into a new private `func.func` of the active trace's module.

    `in_avals` are the flat abstract arguments; `in_tree` their structure (a
    flat tuple of positional arguments by default). Output leaves that are
    not traced values (Python or numpy constants) are returned as constants,
    so the function returns every output leaf. Values from enclosing traces
    that `fun` uses become trailing arguments; see `TracedFunction.captures`.
    """
    outer = require_trace("trace_function")
    if in_tree is None:
        in_tree = pytree.tree_structure(tuple(range(len(in_avals))))
    base = name or getattr(fun, "__name__", "fn")
    if not base.isidentifier():
        base = "fn"
    trace = FunctionTrace(outer.module, base, in_avals, parent=outer, private=private, fun=fun)
    with trace.active():
        args = pytree.tree_unflatten(in_tree, trace.args)
        out = fun(*args)
        out_leaves, out_tree = pytree.tree_flatten(out)
        outs = [as_tracer(leaf) for leaf in out_leaves]
        trace.finish(outs)
    return TracedFunction(trace.func_op, trace.name, list(in_avals), trace.out_avals,
                          out_tree, list(trace.captures))


def abstractify(x: Any) -> ShapedArray:
    """The abstract value of a Tracer, numpy array/scalar or Python scalar (weak)."""
    if isinstance(x, Tracer):
        return x.aval
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        dt = np.bool_ if isinstance(x, bool) else np.int64 if isinstance(x, int) else np.float64
        return ShapedArray((), dt, weak_type=True)
    arr = np.asarray(x)
    return ShapedArray(arr.shape, arr.dtype)


def emit_call(fn: TracedFunction, args: Sequence[Tracer]) -> list[Tracer]:
    """Emit `func.call @fn(args..., captures...)` in the active trace."""
    trace = require_trace("emit_call")
    operands = [trace.lift(a) for a in list(args) + list(fn.captures)]
    with trace.emitting():
        call = func.CallOp([a.mlir_type() for a in fn.out_avals], fn.symbol,
                           [o.value for o in operands])
    return [Tracer(r, a, trace) for r, a in zip(call.results, fn.out_avals)]


#: The two ops `as_tracer` needs: a constant of a value that is not traced, and a
#: dtype conversion. They are primitives (`primitives.constant_like`,
#: `primitives.convert`), a layer above this module, which installs them when it is
#: imported (see `set_lift_ops`), so tracing imports nothing above it.
_LIFT_OPS: dict[str, Callable[..., Tracer]] = {}


def set_lift_ops(constant_like: Callable[[Any, Any], Tracer],
                 convert: Callable[[Tracer, Any], Tracer]) -> None:
    """Install the constant and conversion ops of `as_tracer` (done by `primitives`)."""
    _LIFT_OPS["constant_like"] = constant_like
    _LIFT_OPS["convert"] = convert


def as_tracer(x: Any, dtype: Any = None) -> Tracer:
    """`x` (Tracer, numpy array or Python scalar) as a Tracer of the active trace."""
    trace = require_trace("as_tracer")
    if isinstance(x, Tracer):
        t = trace.lift(x)
        return _LIFT_OPS["convert"](t, dtype) if dtype is not None else t
    return _LIFT_OPS["constant_like"](x, dtype)


# --------------------------------------------------------------------------- Tracer

class Tracer:
    """A traced array: an SSA value of a `tensor<...>` with numpy's interface.

    This class holds the value and its abstract value, the array attributes
    (`.shape/.ndim/.dtype/.size`) and the errors for using it as a concrete
    Python value (`if x:`, `float(x)`, `np.asarray(x)` raise a TracerError
    that names the source line). Its numpy interface is installed by
    `mlir_autodiff.numpy` when that module is imported (as jax.numpy installs
    its array methods): the operators (`+ - * / // % ** @`, comparisons,
    `&|^~`, unary `-`/`abs`, indexing), `.T`, `.mT`, the functional updates
    `x.at[idx].set(v)` / `.add(v)` and the common ndarray methods (`sum`,
    `mean`, `reshape`, `astype`, ...), so this module imports nothing above it.
    `mlir_autodiff.api` imports `numpy`, so every trace sees a complete Tracer.
    """

    __slots__ = ("aval", "trace", "value")
    # Make numpy defer to us in `ndarray <op> tracer` (via __array_ufunc__).
    __array_priority__ = 1000

    def __init__(self, value: ir.Value, aval: ShapedArray, trace: FunctionTrace) -> None:
        self.value = value
        self.aval = aval
        self.trace = trace

    # -- array attributes ---------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def size(self) -> int:
        return self.aval.size

    @property
    def weak_type(self) -> bool:
        return self.aval.weak_type

    def __repr__(self) -> str:
        return f"Traced<{self.aval}>"

    # -- conversions a trace cannot do ----------------------------------------
    def __bool__(self) -> bool:
        site = user_site()
        raise TracerBoolConversionError(
            f"cannot use a traced value ({self.aval.str_short()}) as a Python bool at "
            f"{format_site(site)} (in {_bool_construct(site)}): its value is not known while "
            "tracing; use anp.where(cond, x, y) to choose between values"
        )

    def _concrete(self, what: str) -> ConcretizationTypeError:
        return ConcretizationTypeError(
            f"{what} of a traced value ({self.aval.str_short()}) at {format_site()}: the value "
            "is not known while tracing; keep it an array, or pass the argument with "
            "static_argnums if it must be a Python number"
        )

    def __float__(self) -> float:
        raise self._concrete("float()")

    def __int__(self) -> int:
        raise self._concrete("int()")

    def __complex__(self) -> complex:
        raise self._concrete("complex()")

    def __index__(self) -> int:
        raise self._concrete("use as an index (__index__)")

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError(f"len() of unsized object (a 0-d traced value) at {format_site()}")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tracer]:
        if self.ndim == 0:
            raise TypeError(f"iteration over a 0-d traced value at {format_site()}")
        return (self[i] for i in range(self.shape[0]))

    def __hash__(self) -> int:  # like ndarray: unhashable, but with the tracer's error
        raise ConcretizationTypeError(
            f"unhashable type: a traced value ({self.aval.str_short()}) cannot be hashed "
            f"(a dict key, a set element, hash()) at {format_site()}: its value is not known "
            "while tracing; pass it with static_argnums if it must be a Python value")

    def tolist(self) -> Any:
        raise TracerArrayConversionError(
            f"cannot convert a traced value ({self.aval.str_short()}) to a Python list "
            f"(.tolist()) at {format_site()}: its value is not known while tracing"
        )

    def item(self, *args: Any) -> Any:
        raise self._concrete(".item()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TracerArrayConversionError(
            f"cannot convert a traced value ({self.aval.str_short()}) to a numpy array "
            f"(np.asarray/np.array) at {format_site()}: its value is not known while "
            "tracing; use mlir_autodiff.numpy functions on it instead"
        )

    def __setitem__(self, idx: Any, value: Any) -> None:
        raise TypeError(
            f"traced arrays are immutable (item assignment at {format_site()}); "
            "use x = x.at[idx].set(value)"
        )


def is_tracer(x: Any) -> bool:
    return isinstance(x, Tracer)


__all__ = [
    "BOOL_AS_I8",
    "SUPPORTED_DTYPES",
    "FunctionTrace",
    "RegionTrace",
    "ShapedArray",
    "TracedFunction",
    "Tracer",
    "abstractify",
    "as_tracer",
    "canonical_dtype",
    "compute_type",
    "current_trace",
    "dtype_of",
    "element_type",
    "emit_call",
    "format_site",
    "is_tracer",
    "set_lift_ops",
    "storage_dtype",
    "trace_function",
    "user_location",
    "user_site",
]
