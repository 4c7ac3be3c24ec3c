"""`jit` and `lower`: trace a Python function once per signature, compile, call.

Argument convention (documented choice):

- Arguments are pytrees (tuples, lists, dicts, namedtuples; `None` is empty
  structure) whose leaves are numpy arrays, numpy scalars or Python scalars.
- numpy arrays and numpy scalars are *strongly* typed arguments of their
  dtype (numpy scalars are 0-d arrays).
- Python `float`/`int`/`bool` leaves are traced too — as 0-d float64/int64/bool
  arguments (`tensor<f64>`, ...) — but *weakly typed* (as in JAX): `x_f32 * s`
  with a Python float `s` stays float32. Changing the value does not retrace;
  changing the Python type does.
- `static_argnums` (and keyword `static_argnames`) arguments are passed to
  the function as they are (they must be hashable); each distinct value
  traces a new version.
- `donate_argnums` arguments' arrays may be overwritten by outputs of the
  same shape and dtype, which are then the caller's arrays (see `jit`).

The cache key of a compiled version is (argument tree structure, per-leaf
shape/dtype/weak type, static values and their types, donated leaves).
Each `jit`-wrapped function owns one MLIR `Context`; every version it
compiles lives in that context.

Outputs may be any pytree; leaves that are not traced values (Python or
numpy constants) are returned as numpy arrays without being compiled, and
an output that is just an input is returned as a copy of that input (a
donated input is handed back itself). No two outputs share memory, and no
output shares memory with an input that was not donated: every call
returns fresh arrays, which later calls never overwrite.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import functools
import gc
import inspect
import itertools
import logging
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import bufferization, func

from . import compile_cache, dialects, pytree
from . import numpy as _numpy  # noqa: F401 - installs the Tracer's operators and methods
from .call_plan import CallPlan
from .dialects.vocabulary import PHILOX, RANDOM
from .eager import Array
from .errors import CompilationError, InvalidArgumentError, UnsupportedError
from .native_build import (
    ExportError,
    NotCallable,
    Target,
    _spec_json,
    background,
    build_input,
    build_library_from,
    lower_main,
    missing_tool,
)
from .runtime import COMPILE_LOCK, CompiledModule, default_opt_level
from .tracebacks import api_boundary
from .tracing import (
    FunctionTrace,
    ShapedArray,
    Tracer,
    as_tracer,
    canonical_dtype,
    current_trace,
    is_float_dtype,
)
from .transforms.cpu.pipeline import cpu_pipeline, cpu_threads
from .transforms.diagnostics import to_diag
from .transforms.passes import lookup
from .transforms.pipeline import PipelineError, run_pipeline

#: Transform passes run (when registered) before lowering, in this order.
AUTODIFF_PASSES = ("autodiff-jvp", "autodiff-vjp", "autodiff-vmap")
LOWER_PASS = "autodiff-lower-to-cpu"


#: With random draws: functionalize before the transforms (so recomputation in
#: the backward pass or under checkpoint replays the forward's numbers), expand
#: Philox after them.
RNG_FUNCTIONALIZE_PASS = "autodiff-functionalize-rng"
RNG_LOWER_PASS = "autodiff-lower-rng"


def autodiff_pipeline() -> list[str]:
    """The registered transform passes among AUTODIFF_PASSES."""
    return [name for name in AUTODIFF_PASSES if lookup(name) is not None]


def _draws_random(module: ir.Module, op_name: str = RANDOM) -> bool:
    """Whether the traced module contains a stateful draw (`autodiff.random`), or `op_name`."""
    found = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if op.name == op_name:
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _transform_passes(module: ir.Module) -> list[str]:
    """The passes that take a traced module to plain upstream MLIR."""
    if _draws_random(module):
        return [RNG_FUNCTIONALIZE_PASS] + autodiff_pipeline() + [RNG_LOWER_PASS]
    if _draws_random(module, PHILOX):  # keyed draws only: functional already
        return autodiff_pipeline() + [RNG_LOWER_PASS]
    return autodiff_pipeline()


# --------------------------------------------------------------------------- arguments

def _leaf_aval(x: Any, where: str) -> tuple[ShapedArray, Any]:
    """(abstract value, runtime value) of one argument leaf."""
    if isinstance(x, np.generic):  # numpy scalars (even np.float64, a float) are strong
        x = np.asarray(x)
    if isinstance(x, bool):
        return ShapedArray((), np.bool_, True), np.asarray(x)
    if isinstance(x, int):
        if not -(1 << 63) <= x < (1 << 63):
            raise InvalidArgumentError(f"{where}: the Python int {x} does not fit in int64; "
                                       "pass it as a float or a numpy array")
        return ShapedArray((), np.int64, True), np.asarray(x, np.int64)
    if isinstance(x, float):
        return ShapedArray((), np.float64, True), np.asarray(x, np.float64)
    if isinstance(x, (np.ndarray, np.generic)) or hasattr(x, "__array__"):
        arr = np.asarray(x)
        try:
            aval = ShapedArray(arr.shape, arr.dtype)
        except UnsupportedError as err:
            raise TypeError(f"{where}: {err}") from None
        return aval, arr
    raise InvalidArgumentError(
        f"{where}: a value of type {type(x).__name__} is not a valid jit argument (arrays, "
        "numpy scalars, Python scalars and tuples/lists/dicts of them are); pass it with "
        "static_argnums if it is configuration"
    )


def _arg_name(path_index: int) -> str:
    return f"argument leaf {path_index}"


@dataclasses.dataclass
class _Signature:
    key: Any
    in_tree: pytree.TreeDef
    in_avals: list[ShapedArray]
    values: list[Any]
    static: dict[int, Any]
    n_args: int
    #: keyword arguments named in static_argnames, passed to the function as they are
    static_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: leaf indices of the donated numpy arrays, in order
    donated: tuple[int, ...] = ()


def _argnum(fname: str, what: str, i: int, n: int) -> int:
    """Positional index `i` (negative counts from the end) checked against `n` arguments."""
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        raise TypeError(f"jit({fname}): {what} {i} is out of range for {n} positional "
                        "arguments")
    return j


def _static_key(fname: str, static: dict[Any, Any]) -> tuple[Any, ...]:
    """Hashable key of the static values and their types (1, 1.0, True: three versions)."""
    try:
        key = tuple(sorted(((k, type(v), v) for k, v in static.items()),
                           key=lambda kv: kv[0]))
        hash(key)
    except TypeError:
        raise TypeError(f"jit({fname}): static arguments must be hashable, got "
                        f"{[type(v).__name__ for v in static.values()]}") from None
    return key


def _donated_leaves(fname: str, args: Sequence[Any], dyn_index: list[int],
                    donate: Sequence[int], static: dict[int, Any]) -> tuple[int, ...]:
    """Leaf indices of the numpy arrays in the donated positional arguments.

    Python and numpy scalars have no buffer the caller could give up: a
    donated argument without any array is an error, scalar leaves inside
    a donated pytree are simply not donated.
    """
    starts, offset = {}, 0
    for i in dyn_index:
        starts[i] = offset
        offset += len(pytree.tree_leaves(args[i]))
    out: list[int] = []
    for i in sorted(set(donate)):
        if i in static:
            raise TypeError(f"jit({fname}): argument {i} is in both static_argnums and "
                            "donate_argnums; static arguments are not buffers and cannot "
                            "be donated")
        leaves = pytree.tree_leaves(args[i])
        arrays = [starts[i] + k for k, leaf in enumerate(leaves)
                  if isinstance(leaf, np.ndarray)]
        if not arrays:
            raise TypeError(f"jit({fname}): donate_argnums {i}: argument {i} "
                            f"({type(args[i]).__name__}) holds no numpy array; only "
                            "arrays (or pytrees of arrays) can be donated")
        out += arrays
    return tuple(out)


def _array_key(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[np.ndarray]] | None:
    """(key, leaves) if `args` are numpy arrays nested in tuples and lists only, else None.

    The key (structure, shapes and dtypes) determines the full `_signature`
    key of such arguments when nothing is static or donated, and the leaves
    are its `values`: exact ndarrays pass through `_leaf_aval` unchanged.
    """
    key: list[Any] = []
    leaves: list[np.ndarray] = []
    todo: list[Any] = [args]
    while todo:
        x = todo.pop()
        t = type(x)
        if t is np.ndarray:
            key.append((x.shape, x.dtype))
            leaves.append(x)
        elif t is Array:  # the outputs of jit and of eager anp calls
            key.append((x.shape, x.dtype))
            leaves.append(x.view(np.ndarray))
        elif t is tuple or t is list:
            key.append((t, len(x)))
            todo.extend(reversed(x))
        else:
            return None
    return tuple(key), leaves


def _signature(fname: str, args: Sequence[Any], kwargs: dict[str, Any],
               static_argnums: tuple[int, ...], donate_argnums: tuple[int, ...] = (),
               static_argnames: tuple[str, ...] = ()) -> _Signature:
    n = len(args)
    static = {j: args[j] for j in (_argnum(fname, "static_argnums", i, n)
                                   for i in static_argnums)}
    donate = [_argnum(fname, "donate_argnums", i, n) for i in donate_argnums]
    static_kwargs = {k: v for k, v in kwargs.items() if k in static_argnames}
    kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    dyn_index = [i for i in range(n) if i not in static]
    donated = _donated_leaves(fname, args, dyn_index, donate, static)
    dyn = tuple(args[i] for i in dyn_index)
    leaves, in_tree = pytree.tree_flatten((dyn, kwargs))
    avals, values = [], []
    for i, leaf in enumerate(leaves):
        aval, value = _leaf_aval(leaf, f"jit({fname}): {_arg_name(i)}")
        avals.append(aval)
        values.append(value)
    static_key = (_static_key(fname, static), _static_key(fname, static_kwargs))
    key = (in_tree, tuple((a.shape, a.dtype.str, a.weak_type) for a in avals), static_key,
           donated)
    return _Signature(key, in_tree, avals, values, static, n, static_kwargs, donated)


# --------------------------------------------------------------------------- tracing to a module

@dataclasses.dataclass
class _Traced:
    module: ir.Module
    out_tree: pytree.TreeDef
    #: per output leaf: ("result", i) | ("arg", leaf index) | ("const", ndarray)
    plan: list[tuple[str, Any]]
    in_avals: list[ShapedArray]
    out_avals: list[ShapedArray]
    #: @main draws random numbers: after compilation it takes trailing (seed, offset)
    #: i64 arguments and returns the advanced offset as a trailing i64 result.
    uses_rng: bool = False


def _trace_main(fun: Callable[..., Any], context: ir.Context, sig: _Signature) -> _Traced:
    with context, ir.Location.unknown(context):
        module = ir.Module.create()
    trace = FunctionTrace(module, "main", sig.in_avals, fun=fun)
    with trace.active():
        dyn, kwargs = pytree.tree_unflatten(sig.in_tree, trace.args)
        it = iter(dyn)
        call_args = [sig.static[i] if i in sig.static else next(it) for i in range(sig.n_args)]
        _check_call(fun, call_args, {**kwargs, **sig.static_kwargs})
        out = fun(*call_args, **kwargs, **sig.static_kwargs)
        out_leaves, out_tree = pytree.tree_flatten(out)
        plan: list[tuple[str, Any]] = []
        results: list[Tracer] = []
        arg_index = {id(a): i for i, a in enumerate(trace.args)}
        seen: dict[int, int] = {}
        for i, leaf in enumerate(out_leaves):
            if not isinstance(leaf, Tracer):
                plan.append(("const", _constant_output(function_name(fun), i, leaf)))
                continue
            if id(leaf) in arg_index:
                plan.append(("arg", arg_index[id(leaf)]))
                continue
            t = as_tracer(leaf)  # rejects tracers leaked from other traces
            if id(t) not in seen:
                seen[id(t)] = len(results)
                results.append(t)
            plan.append(("result", seen[id(t)]))
        trace.finish(results)
    return _Traced(module, out_tree, plan, list(sig.in_avals), trace.out_avals,
                   _draws_random(module))


def _check_call(fun: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """The arguments fit `fun`'s signature, or an InvalidArgumentError naming the function
    (not the function's own TypeError from inside the library)."""
    try:
        signature = inspect.signature(fun, follow_wrapped=False)
    except (TypeError, ValueError):  # builtins and callables without a signature
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        raise InvalidArgumentError(
            f"jit({function_name(fun)}): the call does not fit the function's signature "
            f"{signature}: {err}") from None


def _constant_output(fname: str, i: int, leaf: Any) -> np.ndarray:
    """An output leaf that is not traced (a constant) as an array; InvalidArgumentError
    for anything but arrays and numbers of the supported dtypes."""
    if isinstance(leaf, (bool, int, float, np.ndarray, np.generic)):
        arr = np.asarray(leaf)
        if arr.dtype.kind in "biuf" or is_float_dtype(arr.dtype):
            try:
                canonical_dtype(arr.dtype)
                return arr
            except UnsupportedError:
                pass
    raise InvalidArgumentError(
        f"jit({fname}): output leaf {i} is a value of type {type(leaf).__name__}, not an "
        "array: a jitted function returns arrays, numbers and tuples/lists/dicts of them")


def _module_text(module: ir.Module, debug_info: bool = True) -> str:
    # Keep locations: the pipeline's diagnostics must point at the user's code.
    return module.operation.get_asm(enable_debug_info=debug_info)


def _build_in_background(inp: Any, target: Any, path: str) -> None:
    """The compilation cache's entry build, its tools at a lower priority than the
    program (it runs in a thread while the program goes on)."""
    with background():
        build_library_from(inp, target, path)


def _render_mlir_error(err: ir.MLIRError) -> list[str]:
    lines = []
    for d in err.error_diagnostics:
        try:
            lines.append(to_diag(d).render())
        except Exception:  # noqa: BLE001 - never fail while reporting an error
            lines.append(str(d))
    return lines or [str(err)]


def _compile_error(what: str, err: Exception) -> CompilationError:
    if isinstance(err, ir.MLIRError):
        diags = _render_mlir_error(err)
        return CompilationError(f"{what} failed:\n" + "\n".join(diags), diags)
    return CompilationError(f"{what} failed: {err}", [str(err)])


def _reparse(module: ir.Module, context: ir.Context, what: str) -> ir.Module:
    """A copy of `module` (with locations); invalid IR becomes a CompilationError."""
    try:
        with context, ir.Location.unknown(context):
            return ir.Module.parse(_module_text(module))
    except ir.MLIRError as err:
        raise _compile_error(what, err) from None


def _run_pipeline(module: ir.Module, passes: Sequence[str], what: str) -> None:
    if not passes:
        return
    try:
        run_pipeline(module, ",".join(passes))
    except (ir.MLIRError, PipelineError) as err:
        raise _compile_error(what, err) from None


# --------------------------------------------------------------------------- jit

def _main_func(module: ir.Module) -> ir.OpView:
    return next(op for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")


def _donate_buffers(module: ir.Module, donated: Sequence[int],
                    candidates: Sequence[int]) -> dict[int, int]:
    """Let results live in donated arguments' buffers; returns argument -> result index.

    Each donated argument takes the first free result (of `candidates`) of
    exactly its type, as JAX pairs them. Soundness is bufferization's job,
    so the pairing is stated in the IR it analyses: the result is written
    into the argument with `bufferization.materialize_in_destination` and
    the argument is marked `bufferization.writable = true`. One-shot
    bufferization then computes in place only what may be (an elementwise
    update, not a matmul that still reads the argument), and the lowering
    drops the result from the signature when it is the argument's buffer.
    """
    main = _main_func(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1].operation
    taken: set[int] = set()
    pairs: dict[int, int] = {}
    for a in donated:
        r = next((r for r in candidates
                  if r not in taken and ret.operands[r].type == block.arguments[a].type), None)
        if r is not None:
            taken.add(r)
            pairs[a] = r
    with module.context, ret.location, ir.InsertionPoint(ret):
        for a, r in pairs.items():
            dest = block.arguments[a]
            if ret.operands[r] != dest:
                ret.operands[r] = bufferization.MaterializeInDestinationOp(
                    dest.type, ret.operands[r], dest).result
        n = len(block.arguments)
        old = main.attributes.get("arg_attrs")
        attrs = []
        for i in range(n):
            entries = {}
            if old is not None:
                d = ir.DictAttr(old[i])
                entries = {d[k].name: d[k].attr for k in range(len(d))}
            if i in pairs:
                entries["bufferization.writable"] = ir.BoolAttr.get(True)
            attrs.append(ir.DictAttr.get(entries))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
    return pairs


def _dedupe_results(module: ir.Module) -> list[int]:
    """Make @main return each SSA value once; returns result index -> unique index.

    Why: CSE can merge two results into one value, and returning one value
    twice crashes the CPU lowering (buffer-results-to-out-params); the
    runtime copies the array instead.
    """
    main = _main_func(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    operands = list(ret.operands)
    unique: list[ir.Value] = []
    remap: list[int] = []
    for v in operands:
        for j, u in enumerate(unique):
            if u == v:
                remap.append(j)
                break
        else:
            remap.append(len(unique))
            unique.append(v)
    if len(unique) < len(operands):
        with module.context, ret.location:
            ret.operation.erase()
            with ir.InsertionPoint(block):
                func.ReturnOp(unique)
            ftype = main.attributes["function_type"].value
            main.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(list(ftype.inputs), [u.type for u in unique]))
    return remap


def _build(module: ir.Module, context: ir.Context, device: str, threads: int = 1) -> Any:
    """JIT-compile `module` for `device` (raises what the runtimes raise). The CPU
    compile lowers `module` itself: callers pass a module of their own (`_reparse`)."""
    if device == "gpu":
        from .gpu import CompiledGpuModule

        return CompiledGpuModule(module, context=context)
    if _draws_random(module, "shard.grid"):  # shard_map inside jit: collectives over MPI
        threads_opt = f"{{threads={threads}}}" if threads > 1 else ""
        return CompiledModule(module, pipeline="autodiff-lower-to-cpu-mpi" + threads_opt,
                              context=context, consume=True)
    return CompiledModule(module, pipeline=cpu_pipeline(threads), context=context,
                          consume=True)


@dataclasses.dataclass
class _NativeCompiled:
    """A traced version transformed and lowered to the LLVM dialect for a `Target`."""

    #: the lowered module (None: nothing to compute)
    lowered: ir.Module | None
    #: @main's native calling convention (`native_build.lower_main`), or None
    main: dict[str, Any] | None
    remap: list[int]
    #: donated argument leaf -> unique result index computed in its buffer
    in_place: dict[int, int]
    #: donated leaves returned as outputs unchanged
    returned_donated: list[int]


def _compile_native(traced: _Traced, context: ir.Context, who: str, target: Target,
                    donated: Sequence[int] = ()) -> _NativeCompiled:
    """Transform and lower `traced` for `target` (`jit`'s cache and `export` share it).

    Donated leaves that are not returned unchanged are paired with results
    (`_donate_buffers`); when bufferization cannot honour the pairing, the
    version is compiled without it.
    """
    what = f"{who}: compiling the traced module"
    returned = {w for kind, w in traced.plan if kind == "arg"}
    returned_donated = [a for a in donated if a in returned]
    if not traced.out_avals:
        return _NativeCompiled(None, None, [], {}, returned_donated)
    module = _reparse(traced.module, context, what)
    # symbol-dce: the traced primal functions the transforms replaced are dead.
    _run_pipeline(module, _transform_passes(module) + ["canonicalize", "cse", "symbol-dce"],
                  what)
    remap = _dedupe_results(module)
    lowered: tuple[ir.Module, dict[str, Any]] | None = None
    pairs: dict[int, int] = {}
    wanted = [a for a in donated if a not in returned]
    if wanted and target.device == "cpu":
        trial = _reparse(module, context, what)
        pairs = _donate_buffers(trial, wanted, sorted(set(remap)))
        if pairs:
            # Bufferization cannot honour every pairing and says so in a diagnostic:
            # compile without donation then. Anything else (a pass's InternalError)
            # is a bug and propagates.
            with contextlib.suppress(ir.MLIRError):
                lowered = trial, lower_main(trial, target)
    if lowered is None:
        pairs = {}
        lowered = _lower_main(_reparse(module, context, what), target, what)
    module, info = lowered
    in_place = {a: r for a, r in pairs.items() if info["result_args"][r] == a}
    return _NativeCompiled(module, info, remap, in_place, returned_donated)


def _lower_main(module: ir.Module, target: Target,
                what: str) -> tuple[ir.Module, dict[str, Any]]:
    try:
        return module, lower_main(module, target)
    except NotCallable as err:
        raise ExportError(f"{what}: {err}") from None
    except (ir.MLIRError, ValueError, RuntimeError) as err:
        raise _compile_error(what, err) from None


class _SharedVersion:
    """A compiled module and how to call it, shared by the versions (of any jitted
    function) whose traces are the same module; freed with the last of them."""

    __slots__ = ("compiled", "remap", "in_place", "main", "cache_entry", "__weakref__")

    def __init__(self, compiled: Any, remap: list[int], in_place: dict[int, int], main: Any,
                 cache_entry: Any) -> None:
        self.compiled, self.remap, self.in_place = compiled, remap, in_place
        self.main, self.cache_entry = main, cache_entry


#: (module text without locations, device, threads, donated, returned leaves) -> the
#: compiled module of that trace, while some version uses it.
_COMPILED_BY_MODULE: weakref.WeakValueDictionary[tuple[Any, ...], _SharedVersion] = \
    weakref.WeakValueDictionary()
#: The most recently compiled modules, kept even when no jitted function holds them: a
#: function re-created in a loop (each iteration's jit object is dropped) finds its
#: module here. Bounded by AUTODIFF_JIT_CACHE_SIZE.
_RECENT_MODULES: collections.OrderedDict[tuple[Any, ...], _SharedVersion] = \
    collections.OrderedDict()


def _remember(mkey: tuple[Any, ...], shared: _SharedVersion) -> None:
    _COMPILED_BY_MODULE[mkey] = shared
    _RECENT_MODULES[mkey] = shared
    _RECENT_MODULES.move_to_end(mkey)
    while len(_RECENT_MODULES) > JIT_CACHE_SIZE:
        _RECENT_MODULES.popitem(last=False)

#: AUTODIFF_LOG_COMPILES=1 logs every compilation and why (jax's jax_log_compiles).
LOG_COMPILES_ENV = "AUTODIFF_LOG_COMPILES"
_LOGGER = logging.getLogger("mlir_autodiff")


def _log_compile(fname: str, traced: _Traced, what: str) -> None:
    if os.environ.get(LOG_COMPILES_ENV, "").strip().lower() in ("", "0", "false", "off"):
        return
    avals = ", ".join(str(a) for a in traced.in_avals)
    _LOGGER.warning("jit(%s) for (%s): %s", fname, avals, what)


class _Executable:
    """One compiled version of a jitted function (one signature)."""

    #: when it was last called (a tick of `_USE_CLOCK`), for least-recently-used eviction
    last_used: int = 0

    def release(self) -> None:
        """Break the references that keep the compiled code alive in a cycle (a
        compiled module and its functions point at each other), so it is freed as
        soon as no call is using it rather than at the next full garbage collection."""
        compiled = self.compiled
        if compiled is not None and hasattr(compiled, "_functions"):
            compiled._functions.clear()

    def __init__(self, traced: _Traced, context: ir.Context, fname: str,
                 device: str = "cpu", donated: Sequence[int] = (), threads: int = 1) -> None:
        self.traced = traced
        self.threads = threads
        self.fname = fname
        self.compiled = None
        self.remap: list[int] = []
        #: donated argument leaf -> unique result index computed in its buffer
        self.in_place: dict[int, int] = {}
        #: donated leaves returned as outputs unchanged (handed back, not copied)
        returned = {what for kind, what in traced.plan if kind == "arg"}
        self.returned_donated = [a for a in donated if a in returned]
        self._main: Any = None  # compiled["main"], looked up on the first call
        #: the cache entry this version runs from (None: compiled with the ExecutionEngine)
        self.cache_entry: compile_cache.Entry | None = None
        # Versions that trace to the same module (a function re-created in a loop,
        # `jit(grad(h))` built anew) share one compiled module in this process.
        text = _module_text(traced.module, debug_info=False) if traced.out_avals else ""
        mkey = (text, device, threads, tuple(donated), tuple(sorted(returned)))
        shared = _COMPILED_BY_MODULE.get(mkey) if traced.out_avals else None
        # Not cached on disk: code calling MPI (shard_map inside jit) needs libmpi,
        # which the cache's shared libraries are not linked with.
        cache = (compile_cache.active()
                 if device == "cpu" and traced.out_avals and shared is None
                 and not _draws_random(traced.module, "shard.grid") else None)
        key = self._cache_key(cache, donated, text) if cache is not None else None
        #: the trace is a module already compiled in this process (see SHARED_CONTEXT_USES)
        self.reused = shared is not None
        if shared is not None:
            self.compiled, self.remap, self.in_place = shared.compiled, shared.remap, \
                shared.in_place
            self._main, self.cache_entry = shared.main, shared.cache_entry
            _remember(mkey, shared)
            _log_compile(fname, traced, "reusing the compiled module of an identical trace")
        elif cache is not None and key is not None and self._from_cache(cache, key):
            _log_compile(fname, traced, "loaded from the persistent compilation cache")
        elif traced.out_avals:
            _log_compile(fname, traced, "compiling (no compiled version of this module in "
                         "this process" + (" or the persistent cache)" if cache else ")"))
            what = f"jit({fname}): compiling the traced module"
            module = _reparse(traced.module, context, what)
            # symbol-dce: the traced primal functions the transforms replaced are dead.
            _run_pipeline(module, _transform_passes(module) + ["canonicalize", "cse",
                                                               "symbol-dce"], what)
            self.remap = _dedupe_results(module)
            if device == "gpu":
                # gpu.NoCudaDevice ("no CUDA device: ...") is raised as it is, before
                # anything compiles, when no driver or device is present.
                from .gpu import cuda_device

                cuda_device()
            else:
                self._compile_donating(module, context, what,
                                       [a for a in donated if a not in returned])
            if self.compiled is None:
                try:
                    self.compiled = _build(module, context, device, self.threads)
                except (ir.MLIRError, ValueError, RuntimeError) as err:
                    raise _compile_error(what, err) from None
            if cache is not None and key is not None:
                self._store_later(cache, key)
        if traced.out_avals and shared is None:
            shared = _SharedVersion(self.compiled, self.remap, self.in_place, self._main,
                                    self.cache_entry)
            _remember(mkey, shared)
        #: keeps the shared compiled module alive while this version lives
        self._shared = shared
        self._warn_unused(donated)
        self.call_plan = CallPlan(traced.out_tree, traced.plan,
                                  [a.dtype for a in traced.in_avals],
                                  [a.dtype for a in traced.out_avals], self.remap,
                                  self.returned_donated, traced.uses_rng)

    def _cache_key(self, cache: compile_cache.Cache, donated: Sequence[int],
                   text: str) -> str | None:
        """This version's key in the persistent cache, or None (with a warning) when
        versions cannot be cached here (a missing tool)."""
        missing = missing_tool()
        if missing is not None:
            compile_cache._warn_once(f"{missing}; compiling without the cache")
            return None
        return cache.key(text, device="cpu", threads=self.threads, donated=donated,
                         opt_level=default_opt_level())

    def _from_cache(self, cache: compile_cache.Cache, key: str) -> bool:
        """Load this version from the persistent cache; False on a miss."""
        entry = cache.load(key, self.fname)
        if entry is None:
            compile_cache.stats["misses"] += 1
            return False
        compile_cache.stats["hits"] += 1
        self.cache_entry = entry
        self.remap = list(entry.meta["remap"])
        self.in_place = {int(a): r for a, r in entry.meta["in_place"].items()}
        self._main = entry.main
        return True

    def _store_later(self, cache: compile_cache.Cache, key: str) -> None:
        """Write the version just compiled in memory into the cache, in the background
        (see compile_cache.py): its lowered module becomes a shared library."""
        compiled = self.compiled
        if compiled is None or not isinstance(compiled, CompiledModule):
            return
        main = compiled["main"]
        lowered = compiled.module
        try:
            inp = build_input(lowered, [main.symbol])
        except ExportError as err:  # @main's C interface has a type export cannot pass
            compile_cache._warn_once(f"{err}; this version is not cached")
            return
        info = {
            "symbol": main.symbol,
            "params": [_spec_json(p) for p in main.params],
            "results": [_spec_json(r) for r in main.results],
            "donated_params": sorted(main.donated),
            "result_args": list(main.result_args),
            "openmp": inp.openmp,
        }
        meta = {"main": info, "remap": self.remap,
                "in_place": {str(a): r for a, r in self.in_place.items()},
                "returned_donated": self.returned_donated}
        # the level the in-memory compile chose (by the lowered module's size)
        target = Target("cpu", cpu="native", threads=self.threads,
                        opt_level=compiled.opt_level)
        compile_cache.store_in_background(
            cache, key, self.fname, meta,
            lambda path: _build_in_background(inp, target, path))

    def _compile_donating(self, module: ir.Module, context: ir.Context, what: str,
                          donated: Sequence[int]) -> None:
        """Compile with results in donated buffers; leaves `compiled` None if that fails."""
        if not donated:
            return
        candidates = sorted({self.remap[i] for i in range(len(self.traced.out_avals))})
        trial = _reparse(module, context, what)
        pairs = _donate_buffers(trial, donated, candidates)
        if not pairs:
            return
        try:
            self.compiled = _build(trial, context, "cpu", self.threads)
        except ir.MLIRError:
            # Bufferization cannot honour every pairing (e.g. two donated
            # arguments whose results read each other) and says so in a
            # diagnostic: fresh outputs instead. Anything else (a pass's
            # InternalError, a JIT failure) is a bug and propagates.
            return
        result_args = self.compiled["main"].result_args
        self.in_place = {a: r for a, r in pairs.items() if result_args[r] == a}

    def _warn_unused(self, donated: Sequence[int]) -> None:
        unused = [a for a in donated
                  if a not in self.in_place and a not in self.returned_donated]
        if unused:
            avals = ", ".join(f"{self.traced.in_avals[a]} ({_arg_name(a)})" for a in unused)
            warnings.warn(f"jit({self.fname}): Some donated buffers were not usable: {avals} "
                          "(no output of the same shape and dtype could be computed in "
                          "place; those arrays are left unchanged)", stacklevel=4)

    def __call__(self, values: list[Any]) -> Any:
        if self.compiled is not None and self._main is None:
            self._main = self.compiled["main"]
        return self.call_plan(self._main, values)


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


#: Compiled versions each jitted function keeps (AUTODIFF_JIT_CACHE_SIZE, default 64)
#: and all of them together keep (AUTODIFF_JIT_CACHE_TOTAL, default 512): beyond, the
#: least recently used version is dropped (and its native code freed with it). Each
#: version holds its machine code and MLIR (about 1.5 MB for a small function), so
#: a function called with ever new shapes no longer grows the process without bound.
JIT_CACHE_SIZE = _env_int("AUTODIFF_JIT_CACHE_SIZE", 64)
JIT_CACHE_TOTAL = _env_int("AUTODIFF_JIT_CACHE_TOTAL", 512)
_LIVE_JITS: weakref.WeakSet[JitFunction] = weakref.WeakSet()
_USE_CLOCK = itertools.count()

#: Jitted functions take their MLIR context from a shared one, which takes this many
#: traces of new modules before a fresh one replaces it. Making a context (loading
#: every dialect) costs 3-6 ms and dropping one ~1 ms, more than a re-created
#: `jit(grad(h))`'s whole call; one per function would also keep them apart for
#: nothing, since every compile holds COMPILE_LOCK anyway. Rotating bounds what a
#: context accumulates (uniqued types, attributes and locations are freed only with
#: it): it dies with the last function that uses it. A trace whose module is one
#: already compiled in this process (the same function re-created in a loop) is not
#: counted: it uniques only what an identical module already put in a context, so a
#: context grows by at most one copy of each distinct module (and those are bounded by
#: `_RECENT_MODULES`) beyond the counted ones. Only traces count, not functions: a
#: function that traces many signatures fills its context as much as many functions.
SHARED_CONTEXT_USES = _env_int("AUTODIFF_SHARED_CONTEXT_USES", 32)
_SHARED_CONTEXT: list[Any] = [None, 0]   # [context, new modules traced into it]


def _shared_context() -> ir.Context:
    """The context for a function that needs one (call with COMPILE_LOCK held)."""
    context, served = _SHARED_CONTEXT
    if context is None or served >= SHARED_CONTEXT_USES:
        context = ir.Context()
        dialects.load(context)
        _SHARED_CONTEXT[:] = [context, 0]
    return context


def _count_trace(context: ir.Context) -> None:
    """A module that may add to what `context` holds was traced into it."""
    if _SHARED_CONTEXT[0] is context:
        _SHARED_CONTEXT[1] += 1


def _cached_versions() -> int:
    return sum(len(jf._cache) for jf in list(_LIVE_JITS))


def clear_caches() -> None:
    """Drop every compiled version of every jitted function (jax.clear_caches).

    Their native code and MLIR contexts are freed; the next call of each
    function compiles again. Freed memory is handed back to the system.
    """
    with COMPILE_LOCK:
        for jf in list(_LIVE_JITS):
            jf.clear_cache()
        _RECENT_MODULES.clear()
        _COMPILED_BY_MODULE.clear()
        _SHARED_CONTEXT[:] = [None, 0]
        gc.collect()
    _trim_heap()


def _trim_heap() -> None:
    """Return free heap pages to the system (glibc keeps them otherwise, see runtime)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class JitFunction:
    """A function compiled on first call per signature; see `jit`."""

    def __init__(self, fun: Callable[..., Any], static_argnums: int | Sequence[int] = (),
                 device: str = "cpu", donate_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), threads: int | None = None):
        if isinstance(fun, JitFunction):
            fun = fun.fun
        if not callable(fun):
            raise InvalidArgumentError(f"jit: expected a function, got a value of type "
                                       f"{type(fun).__name__}")
        if device not in DEVICES:
            raise ValueError(f"jit: device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.device = device
        try:
            self.threads = cpu_threads(threads)
        except ValueError as err:
            raise ValueError(f"jit: {err}") from None
        self.fun = fun
        self.static_argnums = _int_tuple(static_argnums, "static_argnums")
        self.donate_argnums = _int_tuple(donate_argnums, "donate_argnums")
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        self.static_argnames = tuple(static_argnames)
        self._context: ir.Context | None = None
        self._cache: dict[Any, _Executable] = {}
        #: `_array_key` -> the version compiled for such arguments (see `__call__`)
        self._by_arrays: dict[Any, _Executable] = {}
        self._arrays_only = not (self.static_argnums or self.donate_argnums
                                 or self.static_argnames)
        self._name = getattr(fun, "__name__", "fn")
        functools.update_wrapper(self, fun)
        _LIVE_JITS.add(self)

    @property
    def context(self) -> ir.Context:
        """The MLIR context that holds every version of this function (shared with
        a few other functions, see `SHARED_CONTEXT_USES`)."""
        if self._context is None:
            with COMPILE_LOCK:
                if self._context is None:
                    self._context = _shared_context()
        return self._context

    def _cache_size(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        """Drop this function's compiled versions (and its hold on its MLIR context)."""
        with COMPILE_LOCK:
            for exe in self._cache.values():
                exe.release()
            self._cache.clear()
            self._by_arrays.clear()
            self._context = None

    def _insert(self, key: Any, exe: _Executable) -> None:
        """Keep `exe` for `key`; evict least recently used versions beyond the bounds."""
        self._cache[key] = exe
        exe.last_used = next(_USE_CLOCK)
        while len(self._cache) > JIT_CACHE_SIZE:
            self._evict_oldest()
        if _cached_versions() > JIT_CACHE_TOTAL:
            victims = [jf for jf in list(_LIVE_JITS) if jf._cache]
            while victims and _cached_versions() > JIT_CACHE_TOTAL:
                oldest = min(victims, key=lambda jf: min(e.last_used
                                                         for e in jf._cache.values()))
                oldest._evict_oldest()
                victims = [jf for jf in victims if jf._cache]

    def _evict_oldest(self) -> None:
        key = min(self._cache, key=lambda k: self._cache[k].last_used)
        exe = self._cache.pop(key)
        for k in [k for k, e in self._by_arrays.items() if e is exe]:
            del self._by_arrays[k]
        exe.release()

    @api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            # Called while tracing another function: inline into that trace.
            return self.fun(*args, **kwargs)
        # Fast path: numpy arrays in tuples and lists, a version already
        # compiled for their shapes and dtypes. The full signature (pytree
        # flattening, abstract values, static and donation checks) took
        # ~18 us of a ~40 us call; this key takes a few.
        fast = _array_key(args) if self._arrays_only and not kwargs else None
        if fast is not None:
            exe = self._by_arrays.get(fast[0])
            if exe is not None:
                exe.last_used = next(_USE_CLOCK)
                return exe(fast[1])
        sig = self._signature(args, kwargs)
        exe = self._cache.get(sig.key)
        if exe is None:
            # One compile at a time (the context is shared, see runtime.COMPILE_LOCK);
            # a thread that waited finds the version another one compiled.
            with COMPILE_LOCK:
                exe = self._cache.get(sig.key)
                if exe is None:
                    try:
                        exe = _Executable(_trace_main(self.fun, self.context, sig),
                                          self.context, self._name, self.device,
                                          sig.donated, self.threads)
                    finally:
                        if exe is None or not exe.reused:
                            _count_trace(self.context)
                    self._insert(sig.key, exe)
                if fast is not None:
                    self._by_arrays[fast[0]] = exe
        else:
            exe.last_used = next(_USE_CLOCK)
            if fast is not None:
                self._by_arrays[fast[0]] = exe
        return exe(sig.values)

    def _signature(self, args: Sequence[Any], kwargs: dict[str, Any]) -> _Signature:
        return _signature(self._name, args, kwargs, self.static_argnums, self.donate_argnums,
                          self.static_argnames)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace for these arguments and return the MLIR at each stage (see `lower`)."""
        sig = self._signature(args, kwargs)
        with COMPILE_LOCK:
            traced = _trace_main(self.fun, self.context, sig)
            _count_trace(self.context)
            return Lowered(traced, self.context, self._name)

    def __repr__(self) -> str:
        return f"<jit {self._name}>"


DEVICES = ("cpu", "gpu")


def _int_tuple(value: int | Sequence[int], what: str) -> tuple[int, ...]:
    """`static_argnums`/`donate_argnums` as a tuple of ints (TypeError otherwise)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    try:
        items = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        items = (value,)
    for i in items:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"jit: {what} must be an int or a sequence of ints, got {value!r}")
    return tuple(int(i) for i in items)


#: `jit(f, in_shardings=..., out_shardings=...)`: set by mlir_autodiff.distributed (a
#: higher layer, which builds on jit) when it loads; the `NamedSharding`s those
#: arguments take are defined there, so it has loaded whenever they are given.
PARTITIONED_JIT: Callable[..., Any] | None = None


def jit(fun: Callable[..., Any] | None = None, *,
        static_argnums: int | Sequence[int] = (), device: str = "cpu",
        donate_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), threads: int | None = None,
        in_shardings: Any = None, out_shardings: Any = None) -> Any:
    """Compile `fun` with MLIR: trace once per argument signature, cache, call.

    `jit(f)(*args)` flattens the argument pytrees, traces `f` on abstract
    values into `func.func @main`, runs the autodiff passes and
    `--autodiff-lower-to-cpu`, compiles it, and returns numpy arrays in
    `f`'s output structure. CPU versions are compiled into shared libraries
    kept in the persistent compilation cache (compile_cache.py:
    AUTODIFF_CACHE_DIR, AUTODIFF_CACHE_MAX_MB; a later process that traces
    the same module loads the library without compiling); with
    AUTODIFF_CACHE=0, and for the GPU, the ExecutionEngine compiles in memory. See the module docstring for the argument
    convention. Usable as `@jit` or `@jit(static_argnums=(1,))`.

    `static_argnums` / `static_argnames`: positional / keyword arguments
    passed to `f` as they are (configuration: ints, strings, tuples, frozen
    dataclasses...). They must be hashable; each distinct value (of a
    distinct type: 1, 1.0 and True are different) traces and compiles a
    new version.

    `donate_argnums` (JAX semantics, CPU): the numpy arrays of those
    positional arguments (arrays or pytrees of arrays; their Python-scalar
    leaves are not donated) are given to the compiled code, which may
    compute an output of the same shape and dtype in an argument's buffer:
    that output *is* the caller's array (`np.shares_memory(out, w)`), with
    no allocation or copy. Donated arrays are paired with outputs in order,
    each with the first free output of its exact shape and dtype. After the
    call the caller must not use a donated array except through the
    outputs: its contents are unspecified. The update is sound: the pairing
    is written into the IR (`bufferization.materialize_in_destination` into
    an argument marked `bufferization.writable`), so bufferization computes
    in place only what may be (`w - lr * g` is, `w @ x` is computed in a
    temporary and then stored into `w`). A donated array that is read-only
    or overlaps another argument (the same array passed twice) is copied
    first. A donated array that no output can use is left unchanged with a
    `UserWarning` ("Some donated buffers were not usable", as in JAX); so
    is every donation with `device="gpu"`. Donating a static argument, an
    argument without arrays (e.g. a Python float) or an index out of range
    is a `TypeError` at the call.

    `device="gpu"` compiles with `--autodiff-lower-to-gpu` and runs through
    the MLIR CUDA runtime; without a CUDA driver or device the first call
    raises `mlir_autodiff.gpu.NoCudaDevice` ("no CUDA device: ...").

    `threads` (CPU; default: the environment variable AUTODIFF_CPU_THREADS,
    else 1) distributes large kernels over that many OpenMP threads
    (`--autodiff-lower-to-cpu{threads=N}`); small kernels stay on the
    calling thread. More than one thread needs an OpenMP runtime (the
    `intel-openmp` dependency on Linux x86-64, or LLVM's libomp); without
    one, compilation fails with a `CompilationError` saying so.

    `in_shardings` / `out_shardings` (`ad.NamedSharding`s, in a pytree prefix of
    the arguments / results): automatic partitioning over MPI processes through
    upstream's sharding propagation and partitioning (mlir_autodiff.distributed).
    """
    def make(f: Callable[..., Any]) -> Any:
        if in_shardings is not None or out_shardings is not None:
            if PARTITIONED_JIT is None:
                raise TypeError("jit: in_shardings/out_shardings take ad.NamedSharding "
                                "values (mlir_autodiff.distributed)")
            return PARTITIONED_JIT(f, in_shardings, out_shardings)
        return JitFunction(f, static_argnums, device, donate_argnums, static_argnames, threads)

    return make if fun is None else make(fun)


def function_name(fun: Callable[..., Any]) -> str:
    """A function's name for generated symbols and messages ("fn" for lambdas' objects)."""
    return getattr(fun, "__name__", "fn")


#: Leaf types a transform passes through unchanged when it does not transform the
#: argument (exact types: numpy scalars are arrays and stay traced).
_STATIC_LEAF_TYPES = (bool, int, float, complex, str)


def is_static_value(x: Any) -> bool:
    """Whether `x` is a plain Python value (a number, a string, None, or a hashable
    container of them) that jax's transforms hand to the function as it is when they
    do not transform that argument, e.g. `grad(f)(x, 4)` or `vmap(f, (0, None))(x, 4)`:
    `f` sees the int 4, usable as a shape or a loop bound."""
    leaves = pytree.tree_leaves(x)
    if not all(type(leaf) in _STATIC_LEAF_TYPES for leaf in leaves):
        return False
    try:
        hash(x)
    except TypeError:
        return False
    return True


def static_positions(args: Sequence[Any], transformed: Any) -> tuple[int, ...]:
    """The positional arguments outside `transformed` (a collection of positions)
    that are passed through unchanged (`is_static_value`)."""
    return tuple(i for i, a in enumerate(args) if i not in transformed and is_static_value(a))


def bind_static(fun: Callable[..., Any], args: Sequence[Any], static: Sequence[int]
                ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """`(bound, rest)`: `bound(*rest)` calls `fun(*args)` with the `static` positions'
    values fixed (closed over, never traced) and the others taken from `rest`."""
    fixed = {i: args[i] for i in static}
    n = len(args)

    def bound(*rest: Any) -> Any:
        it = iter(rest)
        return fun(*[fixed[i] if i in fixed else next(it) for i in range(n)])

    bound.__name__ = function_name(fun)
    return bound, tuple(a for i, a in enumerate(args) if i not in fixed)


def traced_or_jitted(transform: Callable[..., Any],
                     static: Callable[[tuple[Any, ...]], Sequence[int]] | None = None
                     ) -> Callable[..., Any]:
    """Run a transform's body inside the active trace, or else under a cached `jit`.

    This is how `grad`, `vmap` and the others work eagerly on numpy arrays:
    outside a trace, the transform compiles itself once per signature.
    `static(args)` names the positional arguments the transform passes through
    unchanged (plain Python values it does not transform, see `static_positions`):
    eagerly they are static arguments of the `jit`, so the transform sees them as
    they are, as it does inside a trace.
    """
    jitted = JitFunction(transform)
    by_static: dict[tuple[int, ...], JitFunction] = {}

    @functools.wraps(transform)
    @api_boundary
    def run(*args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            return transform(*args, **kwargs)
        positions = tuple(static(args)) if static is not None and not kwargs else ()
        if positions:
            fn = by_static.get(positions)
            if fn is None:
                fn = by_static[positions] = JitFunction(transform, static_argnums=positions)
            return fn(*args)
        return jitted(*args, **kwargs)

    return run


# --------------------------------------------------------------------------- lower

STAGES = ("capture", "autodiff", "llvm")


class Lowered:
    """The MLIR of one traced signature at each stage of compilation.

    - "capture": the module as traced (upstream ops plus any autodiff ops);
    - "autodiff": after the registered autodiff transform passes (with random
      draws: between `--autodiff-functionalize-rng` and `--autodiff-lower-rng`);
    - "llvm": after `--autodiff-lower-to-cpu` (LLVM dialect).
    Later stages are computed on copies, on first request.
    """

    def __init__(self, traced: _Traced, context: ir.Context, fname: str) -> None:
        self._traced = traced
        self._context = context
        self._fname = fname
        self._text: dict[str, str] = {"capture": str(traced.module.operation)}
        self._debug_text = _module_text(traced.module)

    @property
    def module(self) -> ir.Module:
        """The captured module (do not modify it)."""
        return self._traced.module

    def _stage(self, stage: str) -> str:
        if stage in self._text:
            return self._text[stage]
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        passes = _transform_passes(self._traced.module)
        if stage == "llvm":
            passes = passes + [LOWER_PASS]
        what = f"lower({self._fname}): stage '{stage}'"
        with COMPILE_LOCK:
            copy = _reparse(self._traced.module, self._context, what)
            _run_pipeline(copy, passes, what)
            self._text[stage] = str(copy.operation)
        return self._text[stage]

    def as_text(self, stage: str = "capture", *, debug_info: bool = False) -> str:
        """The module's MLIR text at `stage` ("capture", "autodiff" or "llvm")."""
        if debug_info and stage == "capture":
            return self._debug_text
        return self._stage(stage)

    def __str__(self) -> str:
        return self.as_text("capture")


def lower(fun: Callable[..., Any], *args: Any, static_argnums: int | Sequence[int] = (),
          **kwargs: Any) -> Lowered:
    """Trace `fun(*args, **kwargs)` and return a `Lowered` to inspect its MLIR by stage.

    `str(ad.lower(f, x))` is the captured module; `.as_text("autodiff")` and
    `.as_text("llvm")` show it after the transform passes and after lowering.
    """
    jf = fun if isinstance(fun, JitFunction) else JitFunction(fun, static_argnums)
    return jf.lower(*args, **kwargs)


#: jax.ShapeDtypeStruct: a shape and dtype standing for an array (`eval_shape`'s inputs
#: and outputs); the abstract value a trace keeps for each array.
ShapeDtypeStruct = ShapedArray


def _abstract_leaf(leaf: Any, where: str) -> ShapedArray:
    if isinstance(leaf, ShapedArray):
        return leaf
    if (hasattr(leaf, "shape") and hasattr(leaf, "dtype")
            and not isinstance(leaf, (np.ndarray, np.generic, Tracer))):
        return ShapedArray(tuple(leaf.shape), leaf.dtype)   # jax's ShapeDtypeStruct & co
    return _leaf_aval(leaf, where)[0]


@api_boundary
def eval_shape(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """jax.eval_shape: the shapes and dtypes of `fun(*args, **kwargs)` without running it.

    Arguments are arrays, scalars or `ShapeDtypeStruct`s (anything with `.shape` and
    `.dtype`) in pytrees; `fun` is traced once, nothing is compiled, and the result is
    its output pytree with a `ShapeDtypeStruct` (`ShapedArray`: `.shape`, `.dtype`,
    `.weak_type`) per leaf."""
    fname = function_name(fun)
    leaves, in_tree = pytree.tree_flatten((tuple(args), kwargs))
    avals = [_abstract_leaf(leaf, f"eval_shape({fname}): {_arg_name(i)}")
             for i, leaf in enumerate(leaves)]
    sig = _Signature(None, in_tree, avals, [], {}, len(args))
    with COMPILE_LOCK:
        context = _shared_context()
        traced = _trace_main(fun, context, sig)
        _count_trace(context)
    out = []
    for kind, ref in traced.plan:
        if kind == "result":
            out.append(traced.out_avals[ref])
        elif kind == "arg":
            out.append(avals[ref])
        else:
            out.append(ShapedArray(np.shape(ref), np.asarray(ref).dtype))
    return pytree.tree_unflatten(traced.out_tree, out)


__all__ = ["AUTODIFF_PASSES", "JitFunction", "Lowered", "ShapeDtypeStruct",
           "autodiff_pipeline", "eval_shape", "function_name", "jit", "lower",
           "traced_or_jitted"]
