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
- `static_argnums` arguments are passed to the function as they are (they
  must be hashable); each distinct value traces a new version.

The cache key of a compiled version is (argument tree structure, per-leaf
shape/dtype/weak type, static values). Each `jit`-wrapped function owns one
MLIR `Context`; every version it compiles lives in that context.

Outputs may be any pytree; leaves that are not traced values (Python or
numpy constants) are returned as numpy arrays without being compiled, and
an output that is just an input is returned as a copy of that input.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir

from . import dialects, pytree
from .errors import CompilationError, UnsupportedError
from .tracing import (
    FunctionTrace,
    ShapedArray,
    Tracer,
    as_tracer,
    current_trace,
    storage_dtype,
)

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
    from .transforms.passes import lookup

    return [name for name in AUTODIFF_PASSES if lookup(name) is not None]


def _draws_random(module: ir.Module) -> bool:
    """Whether the traced module contains a stateful draw (`autodiff.random`)."""
    found = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if op.name == "autodiff.random":
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _transform_passes(module: ir.Module) -> list[str]:
    """The passes that take a traced module to plain upstream MLIR."""
    if _draws_random(module):
        return [RNG_FUNCTIONALIZE_PASS] + autodiff_pipeline() + [RNG_LOWER_PASS]
    return autodiff_pipeline()


# --------------------------------------------------------------------------- arguments

def _leaf_aval(x: Any, where: str) -> tuple[ShapedArray, Any]:
    """(abstract value, runtime value) of one argument leaf."""
    if isinstance(x, np.generic):  # numpy scalars (even np.float64, a float) are strong
        x = np.asarray(x)
    if isinstance(x, bool):
        return ShapedArray((), np.bool_, True), np.asarray(x)
    if isinstance(x, int):
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
    raise TypeError(
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


def _signature(fname: str, args: Sequence[Any], kwargs: dict[str, Any],
               static_argnums: tuple[int, ...]) -> _Signature:
    n = len(args)
    static = {}
    for i in static_argnums:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise TypeError(f"jit({fname}): static_argnums {i} is out of range for {n} "
                            "positional arguments")
        static[j] = args[j]
    dyn = tuple(a for i, a in enumerate(args) if i not in static)
    leaves, in_tree = pytree.tree_flatten((dyn, kwargs))
    avals, values = [], []
    for i, leaf in enumerate(leaves):
        aval, value = _leaf_aval(leaf, f"jit({fname}): {_arg_name(i)}")
        avals.append(aval)
        values.append(value)
    try:
        static_key = tuple(sorted(static.items()))
        hash(static_key)
    except TypeError:
        raise TypeError(f"jit({fname}): static arguments must be hashable, got "
                        f"{[type(v).__name__ for v in static.values()]}") from None
    key = (in_tree, tuple((a.shape, a.dtype.str, a.weak_type) for a in avals), static_key)
    return _Signature(key, in_tree, avals, values, static, n)


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
        out = fun(*call_args, **kwargs)
        out_leaves, out_tree = pytree.tree_flatten(out)
        plan: list[tuple[str, Any]] = []
        results: list[Tracer] = []
        arg_index = {id(a): i for i, a in enumerate(trace.args)}
        seen: dict[int, int] = {}
        for leaf in out_leaves:
            if not isinstance(leaf, Tracer):
                plan.append(("const", np.asarray(leaf)))
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


def _module_text(module: ir.Module) -> str:
    # Keep locations: the pipeline's diagnostics must point at the user's code.
    return module.operation.get_asm(enable_debug_info=True)


def _render_mlir_error(err: ir.MLIRError) -> list[str]:
    from .transforms.diagnostics import to_diag

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
    from .transforms.pipeline import PipelineError, run_pipeline

    if not passes:
        return
    try:
        run_pipeline(module, ",".join(passes))
    except (ir.MLIRError, PipelineError) as err:
        raise _compile_error(what, err) from None


# --------------------------------------------------------------------------- jit

def _dedupe_results(module: ir.Module) -> list[int]:
    """Make @main return each SSA value once; returns result index -> unique index.

    Why: CSE can merge two results into one value, and returning one value
    twice crashes the CPU lowering (buffer-results-to-out-params); the
    runtime copies the array instead.
    """
    from mlir.dialects import func

    main = next(op for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")
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


class _Executable:
    """One compiled version of a jitted function (one signature)."""

    def __init__(self, traced: _Traced, context: ir.Context, fname: str,
                 device: str = "cpu") -> None:
        from .runtime import CompiledModule

        self.traced = traced
        self.compiled = None
        self.remap: list[int] = []
        if traced.out_avals:
            what = f"jit({fname}): compiling the traced module"
            module = _reparse(traced.module, context, what)
            # symbol-dce: the traced primal functions the transforms replaced are dead.
            _run_pipeline(module, _transform_passes(module) + ["canonicalize", "cse",
                                                               "symbol-dce"], what)
            self.remap = _dedupe_results(module)
            if device == "gpu":
                # gpu.NoCudaDevice ("no CUDA device: ...") is raised as it is, before
                # anything compiles, when no driver or device is present.
                from .gpu import CompiledGpuModule, cuda_device

                cuda_device()
            try:
                if device == "gpu":
                    self.compiled = CompiledGpuModule(module, context=context)
                else:
                    self.compiled = CompiledModule(module, pipeline=LOWER_PASS, context=context)
            except (ir.MLIRError, ValueError, RuntimeError) as err:
                raise _compile_error(what, err) from None

    def __call__(self, values: list[Any]) -> Any:
        outs: list[Any] = []
        if self.compiled is not None:
            # bool arrays travel as int8 (see tracing.BOOL_AS_I8): reinterpret, no copy
            args = [v.view(storage_dtype(a.dtype)) if a.dtype == np.bool_ else v
                    for v, a in zip(values, self.traced.in_avals)]
            main = self.compiled["main"]

            def call(a: list[Any]) -> list[Any]:
                unique = main.call(a)
                return [unique[j] for j in self.remap]

            if self.traced.uses_rng:
                from . import random

                # Trailing (seed, offset) in, advanced offset out (functionalize-rng).
                outs = random.call_with_state(call, args)
            else:
                outs = call(args)
            outs = [o.view(np.bool_) if a.dtype == np.bool_ else o
                    for o, a in zip(outs, self.traced.out_avals)]
        used: set[int] = set()
        leaves = []
        for kind, what in self.traced.plan:
            if kind == "const":
                leaves.append(np.array(what))
            elif kind == "arg":
                leaves.append(np.array(values[what]))
            else:
                out = outs[what]
                if id(out) in used:  # one array returned twice: give independent copies
                    out = np.array(out)
                used.add(id(out))
                leaves.append(out)
        return pytree.tree_unflatten(self.traced.out_tree, leaves)


class JitFunction:
    """A function compiled on first call per signature; see `jit`."""

    def __init__(self, fun: Callable[..., Any], static_argnums: int | Sequence[int] = (),
                 device: str = "cpu"):
        if isinstance(fun, JitFunction):
            fun = fun.fun
        if device not in DEVICES:
            raise ValueError(f"jit: device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.device = device
        self.fun = fun
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        self.static_argnums = tuple(int(i) for i in static_argnums)
        self._context: ir.Context | None = None
        self._cache: dict[Any, _Executable] = {}
        self._name = getattr(fun, "__name__", "fn")
        functools.update_wrapper(self, fun)

    @property
    def context(self) -> ir.Context:
        """The MLIR context that holds every version of this function."""
        if self._context is None:
            self._context = ir.Context()
            dialects.load(self._context)
        return self._context

    def _cache_size(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        self._cache.clear()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            # Called while tracing another function: inline into that trace.
            return self.fun(*args, **kwargs)
        sig = _signature(self._name, args, kwargs, self.static_argnums)
        exe = self._cache.get(sig.key)
        if exe is None:
            traced = _trace_main(self.fun, self.context, sig)
            exe = _Executable(traced, self.context, self._name, self.device)
            self._cache[sig.key] = exe
        return exe(sig.values)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Trace for these arguments and return the MLIR at each stage (see `lower`)."""
        sig = _signature(self._name, args, kwargs, self.static_argnums)
        return Lowered(_trace_main(self.fun, self.context, sig), self.context, self._name)

    def __repr__(self) -> str:
        return f"<jit {self._name}>"


DEVICES = ("cpu", "gpu")


def jit(fun: Callable[..., Any] | None = None, *,
        static_argnums: int | Sequence[int] = (), device: str = "cpu") -> Any:
    """Compile `fun` with MLIR: trace once per argument signature, cache, call.

    `jit(f)(*args)` flattens the argument pytrees, traces `f` on abstract
    values into `func.func @main`, runs the autodiff passes and
    `--autodiff-lower-to-cpu`, JIT-compiles it, and returns numpy arrays in
    `f`'s output structure. See the module docstring for the argument
    convention. Usable as `@jit` or `@jit(static_argnums=(1,))`.

    `device="gpu"` compiles with `--autodiff-lower-to-gpu` and runs through
    the MLIR CUDA runtime; without a CUDA driver or device the first call
    raises `mlir_autodiff.gpu.NoCudaDevice` ("no CUDA device: ...").
    """
    if fun is None:
        return lambda f: JitFunction(f, static_argnums, device)
    return JitFunction(fun, static_argnums, device)


def function_name(fun: Callable[..., Any]) -> str:
    """A function's name for generated symbols and messages ("fn" for lambdas' objects)."""
    return getattr(fun, "__name__", "fn")


def traced_or_jitted(transform: Callable[..., Any]) -> Callable[..., Any]:
    """Run a transform's body inside the active trace, or else under a cached `jit`.

    This is how `grad`, `vmap` and the others work eagerly on numpy arrays:
    outside a trace, the transform compiles itself once per signature.
    """
    jitted = JitFunction(transform)

    @functools.wraps(transform)
    def run(*args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            return transform(*args, **kwargs)
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


__all__ = ["AUTODIFF_PASSES", "JitFunction", "Lowered", "autodiff_pipeline", "function_name",
           "jit", "lower", "traced_or_jitted"]
