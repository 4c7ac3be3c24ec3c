"""CPU runtime: compile an upstream-MLIR module on tensors and call it with numpy arrays.

`CompiledModule(module)` runs `--autodiff-lower-to-cpu` on a copy of the
module and JIT-compiles it with the upstream ExecutionEngine. Its public
functions are called with numpy arrays, numpy scalars, Python scalars or
nested lists, and return numpy arrays (tensor results) or numpy scalars
(scalar results):

    cm = CompiledModule(text)
    z = cm["add"](x, y)            # one result: the array; several: a tuple; none: None

Calling convention (see transforms/cpu/pipeline.py): every tensor result is
written into a numpy array the runtime allocates before the call
(destination passing via upstream `buffer-results-to-out-params`), so the
compiled code never hands back memory that needs freeing and repeated calls
do not leak. Results never alias the arguments, even for `return %arg0`.
Arguments are read-only: the runtime marks every tensor parameter of a
public function `bufferization.writable = false` before bufferization, so
the compiled code copies instead of writing into the caller's arrays —
unless the module already marks it `bufferization.writable = true`: the
caller then *donates* that array. The compiled code may overwrite it, and a
result the lowering proves to live in its buffer (e.g. the result of
`bufferization.materialize_in_destination %r in %arg`) is that very array
(no out-param, no copy). A donated array that is read-only or overlaps
another argument is copied first. `jit(..., donate_argnums=...)` builds on
this.

Argument checking happens before any native code runs: a wrong number of
arguments is a `TypeError`; a wrong rank or shape a `ValueError`; a wrong
dtype a `TypeError`; each message names the function, the argument (index
and, if given, name) and its MLIR type. numpy arrays (and anything with a
`dtype`, e.g. jax arrays) must have exactly the parameter's dtype; Python
scalars and lists are converted when that loses nothing (int -> float is
fine, float -> int is not, out-of-range integers are refused).
Non-contiguous or unaligned arrays are copied. Dynamic dimensions
(`tensor<?xf32>`) accept any size; results must have static shapes.

Argument specs, their checks and conversions are in signatures.py.

Supported element types: f16, f32, f64, i1 (numpy bool, one byte per
element in memory), i8, i16, i32, i64 and index (int64).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType

from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_autodiff import dialects
from mlir_autodiff.native_call import (  # noqa: F401  (memref_descriptor: re-exported)
    NativeFunction,
    memref_descriptor,
)
from mlir_autodiff.signatures import (
    ArgSpec,
    donated_arguments,
    function_signatures,
    mark_args_read_only,
    symbol_name,
    uncallable_functions,
)
from mlir_autodiff.transforms import llvm_options
from mlir_autodiff.transforms.cpu.donation import RESULT_ARGS
from mlir_autodiff.transforms.cpu.openmp import openmp_shared_libs
from mlir_autodiff.transforms.diagnostics import collect_diagnostics
from mlir_autodiff.transforms.passes import PipelineElement
from mlir_autodiff.transforms.pipeline import run_pipeline
from mlir_autodiff.transforms.reserved_symbols import in_process, renamed_symbols

#: Held while anything builds or transforms IR for compilation (tracing for jit,
#: the pass pipelines, the ExecutionEngine): MLIR contexts are shared (one per
#: jitted function) and may not be reconfigured while a pass manager runs on them
#: in another thread (an assertion aborted the process). Calls of compiled code do
#: not take it, so they run in parallel. Re-entrant: a compile may nest another.
COMPILE_LOCK = threading.RLock()

#: LLVM's optimization level for JIT-compiled CPU code when the caller names none:
#: the environment variable AUTODIFF_OPT_LEVEL (0-3; XLA's
#: --xla_backend_optimization_level), else `DEFAULT_OPT_LEVEL`. Lower levels compile
#: faster and run slower; the MLIR schedules (tiling, vectorization) are the same at
#: every level.
OPT_LEVEL_ENV = "AUTODIFF_OPT_LEVEL"

#: O2, for modules of every size. The MLIR schedules have already tiled, unrolled and
#: vectorized the loops, and what O3 adds bought no speed on any benchmark row while
#: costing compile time: on a Zen 4, two alternating fresh processes each, the 20
#: kernel, MLP and ADBench rows compiled in 6.7 s in all against 8.0 s (the MLP train
#: step 0.81 against 1.22 s, a 128x784x512 matmul 0.07 against 0.12 s) with the
#: steady state alike (geometric mean 1.02x, within the machine's noise; MLP train
#: step, tanh, softmax, per-sample grads rerun three times each: alike); on the
#: transformer train step's 28k-op @main O3 had cost 1.7x O2's (8.0 against 4.7 s)
#: for nothing (benchmarks/notes/compile-profile.md).
DEFAULT_OPT_LEVEL = 2


def default_opt_level() -> int:
    """AUTODIFF_OPT_LEVEL, read at each compilation (a bad value raises ValueError);
    `DEFAULT_OPT_LEVEL` when unset."""
    level = _env_opt_level()
    return DEFAULT_OPT_LEVEL if level is None else level


def _env_opt_level() -> int | None:
    raw = os.environ.get(OPT_LEVEL_ENV, "").strip()
    if not raw:
        return None
    if raw not in ("0", "1", "2", "3"):
        raise ValueError(f"{OPT_LEVEL_ENV}={raw!r}: expected 0, 1, 2 or 3")
    return int(raw)


def shared_libs(module: ir.Module | ir.Operation | None = None) -> list[str]:
    """Runtime libraries the JIT-compiled code may call (memref copies, printing): MLIR's
    runtime library, unless the lowered `module` calls only functions the process
    already has (malloc, free, libm: most modules), which spares loading it and MLIR's
    and LLVM's libraries behind it (~35 ms, a first compile's largest fixed cost)."""
    if module is not None and not _calls_outside_process(module):
        return []
    libdir = os.path.join(os.path.dirname(ir.__file__), "lib")
    return [os.path.join(libdir, "libmlir_c_runner_utils.so")]


def _calls_outside_process(module: ir.Module | ir.Operation) -> bool:
    """Whether lowered `module` declares a function the process's symbols lack."""
    body = module.operation.regions[0].blocks[0]
    for op in body.operations:
        op = op.operation
        if op.name == "llvm.func" and not op.regions[0].blocks:
            if not in_process(ir.StringAttr(op.attributes["sym_name"]).value):
                return True
    return False


class CompiledFunction(NativeFunction):
    """A callable view of one public function of a CompiledModule (see NativeFunction)."""

    def __init__(self, module: CompiledModule, name: str, params: list[ArgSpec],
                 results: list[ArgSpec], donated: Sequence[int] = (),
                 result_args: Sequence[int] | None = None, symbol: str | None = None):
        self.module = module
        symbol = symbol or name
        addr = module.engine.raw_lookup("_mlir_ciface_" + symbol)
        if not addr:
            raise RuntimeError(f"compiled module has no C interface for '@{name}'")
        super().__init__(name, params, results, addr, donated, result_args, symbol)


def _result_arguments(lowered: ir.Module) -> dict[str, list[int]]:
    """Function name -> per result, the argument it was proved to be, or -1.

    Read from `RESULT_ARGS`, which `--autodiff-lower-to-cpu` sets on
    functions with donated arguments when it drops such results from the
    native signature.
    """
    source = {v: k for k, v in renamed_symbols(lowered.operation).items()}
    out = {}
    for op in lowered.body.operations:
        if op.operation.name in ("llvm.func", "func.func") and RESULT_ARGS in op.attributes:
            name = symbol_name(op)
            out[source.get(name, name)] = list(
                ir.DenseI64ArrayAttr(op.attributes[RESULT_ARGS]))
    return out


class CompileError(RuntimeError):
    """The ExecutionEngine could not translate or compile the lowered module."""


class CompiledModule:
    """A module lowered with --autodiff-lower-to-cpu and JIT-compiled.

    `module` is MLIR text or an `ir.Module`; it is copied (with its
    locations) into `context` (default: a fresh one), so the caller's IR is
    untouched -- unless `consume` is set: the caller hands over an `ir.Module`
    of `context` that it will not use again, which is verified and lowered in
    place (no print and parse of a copy). `pipeline` overrides the lowering pipeline (textual, as
    autodiff-opt accepts it, or a list of pipeline elements); `opt_level` is
    LLVM's (0-3; default `default_opt_level()`). `source_name` names text input in locations (default "-").

    Raises `ir.MLIRError` (with the diagnostics) if the module does not
    parse or the pipeline fails, `PipelineError` for a malformed pipeline,
    and `CompileError` if the ExecutionEngine rejects the lowered module.
    `cm["name"]` returns a `CompiledFunction`; compilation happens once, here.
    """

    def __init__(self, module: ir.Module | str, *,
                 pipeline: str | Sequence[PipelineElement] = "autodiff-lower-to-cpu",
                 opt_level: int | None = None, context: ir.Context | None = None,
                 source_name: str | None = None, consume: bool = False):
        if consume and (context is None or not isinstance(module, ir.Module)
                        or module.context != context):
            raise ValueError("CompiledModule(consume=True) takes an ir.Module of `context`")
        with COMPILE_LOCK:
            self._compile(module, pipeline, opt_level, context, source_name, consume)
        self._functions: dict[str, CompiledFunction] = {}

    def _compile(self, module: ir.Module | str, pipeline: str | Sequence[PipelineElement],
                 opt_level: int | None, context: ir.Context | None,
                 source_name: str | None, consume: bool = False) -> None:
        self.context = context or ir.Context()
        dialects.load(self.context)
        with self.context, ir.Location.unknown():
            if consume:
                assert isinstance(module, ir.Module)
                module.operation.verify()  # (what parsing a copy checked)
                self.module = module
            else:
                self.module = parsed_module(module, source_name)
            self.signatures = function_signatures(self.module)
            self._uncallable = uncallable_functions(self.module)
            self._donated = donated_arguments(self.module)
            mark_args_read_only(self.module)
            run_pipeline(self.module, pipeline)
            #: the LLVM optimization level this module was compiled at
            self.opt_level = default_opt_level() if opt_level is None else opt_level
            # (only functions with donated arguments carry RESULT_ARGS; walking the
            # lowered module would import the llvm dialect's op classes, ~80 ms)
            self._result_args = _result_arguments(self.module) if self._donated else {}
            with collect_diagnostics(self.context) as diags:
                try:
                    # threads > 1: the code calls LLVM's OpenMP runtime, loaded here.
                    libs = shared_libs(self.module) + openmp_shared_libs(self.module)
                    llvm_options.configure_for_cpu()
                    self.engine = ExecutionEngine(self.module, opt_level=self.opt_level,
                                                  shared_libs=libs)
                except RuntimeError as err:
                    detail = diags.render() or str(err)
                    raise CompileError(f"JIT compilation failed: {detail}") from None
            self.engine.initialize()

    #: Set by __init__; subclasses with another pipeline keep these defaults.
    opt_level: int = 3
    _donated: Mapping[str, list[int]] = MappingProxyType({})
    _result_args: Mapping[str, list[int]] = MappingProxyType({})

    @property
    def lowered_text(self) -> str:
        """The lowered (LLVM dialect) module as text."""
        return str(self.module)

    @property
    def function_names(self) -> list[str]:
        """Names of the public functions callable from numpy."""
        return list(self.signatures)

    def __contains__(self, name: str) -> bool:
        return name in self.signatures

    def __iter__(self) -> Iterator[str]:
        return iter(self.signatures)

    def __getitem__(self, name: str) -> CompiledFunction:
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        with COMPILE_LOCK:  # the first lookup materializes the function in the JIT
            return self._lookup(name)

    def _lookup(self, name: str) -> CompiledFunction:
        fn = self._functions.get(name)
        if fn is None:
            if name in self._uncallable:
                raise TypeError(f"@{name} cannot be called from numpy: {self._uncallable[name]}")
            if name not in self.signatures:
                known = ", ".join(f"@{n}" for n in self.signatures) or "none"
                raise KeyError(f"no public function '@{name}' (callable functions: {known})")
            params, results = self.signatures[name]
            # A function named like a library routine was renamed by the lowering.
            symbol = renamed_symbols(self.module.operation).get(name, name)
            fn = self._functions[name] = CompiledFunction(
                self, name, params, results, self._donated.get(name, ()),
                self._result_args.get(name), symbol)
        return fn


_STDIN_LOC = re.compile(r'"-":(\d+):(\d+)')


def parsed_module(module: ir.Module | str, source_name: str | None = None) -> ir.Module:
    """A new module in the active context: `module`'s text parsed (its locations
    naming `source_name`), or a module reparsed from its print with locations, so
    diagnostics still point into the source and the caller's module is untouched."""
    if isinstance(module, str):
        return _parse(module, source_name)
    return ir.Module.parse(module.operation.get_asm(enable_debug_info=True))


def _parse(text: str, source_name: str | None) -> ir.Module:
    """Parse `text` into a module whose locations name `source_name` (default "-")."""
    if not source_name:
        return ir.Module.parse(text)
    try:
        op = ir.Operation.parse(text, source_name=source_name)
    except ir.MLIRError as err:
        if "single top-level operation" not in str(err):
            raise
        # Several top-level ops: only Module.parse wraps them, and it names
        # the buffer "-". Rename the buffer in the printed locations.
        module = ir.Module.parse(text)
        printed = module.operation.get_asm(enable_debug_info=True)
        name = source_name.replace("\\", "\\\\").replace('"', '\\"')
        return ir.Module.parse(_STDIN_LOC.sub(lambda m: f'"{name}":{m[1]}:{m[2]}', printed))
    if op.operation.name == "builtin.module":
        # Operation.parse returns an OpView; the engine wants an ir.Module.
        return ir.Module.parse(op.operation.get_asm(enable_debug_info=True))
    module = ir.Module.create(loc=op.location)
    module.body.append(op)
    return module
