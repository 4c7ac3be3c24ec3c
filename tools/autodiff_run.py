"""autodiff-run: JIT-compile an MLIR file for the CPU, call one function, print its results.

    autodiff-run FILE [--entry main] [--arg VALUE]... [--pass-pipeline P] [--print-ir]

What it does, in order:
  1. parses FILE (`-` for stdin) with real file locations, the autodiff
     dialect loaded;
  2. if the module holds autodiff ops, runs the transform passes that exist
     (`DEFAULT_TRANSFORMS`, skipping those not implemented yet), or the
     `--pass-pipeline` given instead;
  3. lowers with `--autodiff-lower-to-cpu` and JIT-compiles (mlir_autodiff.runtime);
  4. calls `@ENTRY` with the `--arg` values, checked against its signature;
  5. prints one line per result (nothing for a function without results):

         result[0]: tensor<2x2xf32> = [[1, 2], [3, 4]]
         result[1]: i1 = true

`--arg` forms:
  `[[1, 2], [3, 4]]:f32`  a nested list or a scalar, with an optional element-type
                          suffix (f16 bf16 f32 f64 i1 i8 i16 i32 i64 index); without
                          one, the parameter's element type is used. Atoms are
                          integers, floats (`1e-3`, `inf`, `-inf`, `nan`) and
                          `true`/`false`. A value starting with '-' may follow
                          `--arg` directly: `--arg -2.5`.
  `@x.npy`                an array saved with numpy.save (no pickles).

Number format (stable, for FileCheck): arrays print as nested lists separated
by ", " without alignment padding or summarization; floats use C's `%.Ng`
with N significant digits (f16: 4, bf16: 3, f32: 6, f64: 12; `--precision` overrides),
so 2.0 prints `2`, 1/3 prints `0.333333` and 1e-7 prints `1e-07`; `inf`,
`-inf`, `nan`; integers in decimal; i1 as `true`/`false`.

Errors are one-line MLIR-style diagnostics (`file:line:col: error: ...` or
`autodiff-run: error: ...`) and exit code 1; never a Python traceback.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.dialects.vocabulary import is_autodiff
from mlir_autodiff.runtime import CompiledModule, CompileError
from mlir_autodiff.signatures import check_args, from_python, signature_of
from mlir_autodiff.tools.common import ToolError, guarded_main, read_input, tool_version
from mlir_autodiff.tools.supervisor import set_stage, supervised
from mlir_autodiff.tracing import BFLOAT16
from mlir_autodiff.transforms.ad_support import walk_ops
from mlir_autodiff.transforms.diagnostics import Diag, mlir_error_diags
from mlir_autodiff.transforms.passes import lookup
from mlir_autodiff.transforms.pipeline import (
    InternalError,
    PassManagerRunner,
    PipelineError,
    parse_pipeline,
)

TOOL = "autodiff-run"

#: The transform passes run (when they exist) on a module holding autodiff
#: ops, before the CPU lowering: differentiation and batching in the order
#: the Python front end runs them (`api.AUTODIFF_PASSES`), between making
#: random draws functional and expanding them into Philox code.
#: `--pass-pipeline` sets another pipeline.
DEFAULT_TRANSFORMS = (
    "autodiff-functionalize-rng",
    "autodiff-jvp",
    "autodiff-vjp",
    "autodiff-vmap",
    "autodiff-lower-rng",
)

LOWERING = "autodiff-lower-to-cpu"

_DTYPES = {
    "f16": np.float16, "bf16": BFLOAT16, "f32": np.float32, "f64": np.float64, "i1": np.bool_,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64,
}

#: Significant digits printed per float dtype (about the type's precision).
_DIGITS = {np.dtype(np.float16): 4, BFLOAT16: 3, np.dtype(np.float32): 6,
           np.dtype(np.float64): 12}


def _error(message: str) -> NoReturn:
    raise ToolError(f"{TOOL}: error: {message}")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one diagnostic line and exit code 1."""

    def error(self, message: str) -> NoReturn:
        _error(message)


def _make_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=TOOL,
        add_help=False,
        description="JIT-compile an MLIR module for the CPU, call one function and print "
        "its results (one line each).",
        epilog="--arg VALUE: a nested list or scalar with an optional :dtype suffix "
        "([[1,2],[3,4]]:f32, 3.5:f64, true:i1), or @file.npy.",
    )
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--version", action="store_true")
    p.add_argument("input", nargs="?", default="-", help="input MLIR file ('-' for stdin)")
    p.add_argument("--entry", default="main", help="function to call (default: main)")
    p.add_argument("--arg", action="append", default=[], metavar="VALUE",
                   help="an argument of the entry function, in order (repeatable)")
    p.add_argument("--pass-pipeline", default=None, metavar="PIPELINE",
                   help="passes to run before the CPU lowering, replacing the default "
                   "autodiff transforms ('' for none)")
    p.add_argument("--print-ir", action="store_true",
                   help="print the lowered (LLVM dialect) module before running it")
    p.add_argument("-O", "--opt-level", type=int, default=2, choices=range(4),
                   metavar="{0,1,2,3}", help="LLVM optimization level (default 2)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"),
                   help="where to run: cpu (default) or gpu (--autodiff-lower-to-gpu and the "
                   "MLIR CUDA runtime; 'no CUDA device' without one)")
    p.add_argument("--precision", type=int, default=None, metavar="N",
                   help="significant digits of printed floats (default: by dtype)")
    return p


def _join_arg_values(argv: Sequence[str]) -> list[str]:
    """`--arg -2.5` -> `--arg=-2.5`, so argparse does not take the value for an option."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--arg" and i + 1 < len(argv):
            out.append("--arg=" + argv[i + 1])
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# -- --arg literals ---------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<punct>[\[\],])|(?P<atom>[^\[\],\s]+))")


def _atom(text: str) -> bool | int | float:
    low = text.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a number") from None
    if low.lstrip("+-") not in ("inf", "infinity", "nan") and not re.fullmatch(
        r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text
    ):
        raise ValueError(f"'{text}' is not a number")
    return value


def parse_literal(text: str) -> Any:
    """A nested list or scalar from `[[1, 2], [3.5, -inf]]` or `true`."""
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        tokens.append(m["punct"] or m["atom"])
        pos = m.end()
    if not tokens:
        raise ValueError("empty value")
    i = 0

    def value() -> Any:
        nonlocal i
        if i >= len(tokens):
            raise ValueError("unexpected end of value")
        tok = tokens[i]
        i += 1
        if tok == "[":
            items: list[Any] = []
            if i < len(tokens) and tokens[i] == "]":
                i += 1
                return items
            while True:
                items.append(value())
                if i >= len(tokens):
                    raise ValueError("missing ']'")
                sep = tokens[i]
                i += 1
                if sep == "]":
                    return items
                if sep != ",":
                    raise ValueError(f"expected ',' or ']', got '{sep}'")
        if tok in "],":
            raise ValueError(f"unexpected '{tok}'")
        return _atom(tok)

    result = value()
    if i != len(tokens):
        raise ValueError(f"unexpected '{tokens[i]}' after the value")
    return result


class ArgValue:
    """One `--arg`: a parsed Python value (converted later, by the signature) or an array."""

    def __init__(self, index: int, text: str):
        self.index = index
        self.text = text
        self.value: Any
        self.dtype: np.dtype | None = None
        if text.startswith("@"):
            self.value = _load_npy(index, text[1:])
            return
        literal, sep, suffix = text.rpartition(":")
        if not sep:
            literal, suffix = text, ""
        elif suffix.strip() not in _DTYPES:
            _error(f"--arg {index}: unknown element type '{suffix}' in '{text}' "
                   f"(expected one of {', '.join(_DTYPES)})")
        try:
            self.value = parse_literal(literal)
        except ValueError as err:
            _error(f"--arg {index}: malformed value '{text}': {err}")
        if suffix:
            self.dtype = np.dtype(_DTYPES[suffix.strip()])
            self.value = self._typed(self.value, self.dtype)

    def _typed(self, value: Any, dtype: np.dtype) -> np.ndarray:
        """The literal as an array of the suffix's dtype (the runtime's conversion rules)."""
        try:
            return from_python(value, dtype, f"--arg {self.index} '{self.text}'")
        except (TypeError, ValueError) as err:
            _error(str(err))


def _load_npy(index: int, path: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
            f.seek(0)
            # Check the magic first: np.load would take any other file for a pickle.
            if magic != b"\x93NUMPY":
                kind = "a .npz archive" if magic.startswith(b"PK") else "not a .npy file"
                _error(f"--arg {index}: '{path}' is {kind}; save one array with numpy.save")
            arr = np.load(f, allow_pickle=False)
    except OSError as err:
        _error(f"--arg {index}: cannot read '{path}': {err.strerror or err}")
    except (ValueError, EOFError) as err:
        first = str(err).splitlines()[0] if str(err) else "truncated file"
        _error(f"--arg {index}: '{path}' is not a valid .npy file: {first}")
    return arr


# -- printing ---------------------------------------------------------------------------------


def format_scalar(x: Any, digits: int | None = None) -> str:
    """One element in the stable text form (see the module docstring)."""
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    value = float(x)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if digits is None:
        digits = _DIGITS.get(np.asarray(x).dtype, 6)
    return f"{value:.{digits}g}"


def format_value(value: Any, digits: int | None = None) -> str:
    """Nested-list text of an array or scalar, one line, no padding, no summarization."""
    arr = np.asarray(value)
    if digits is None:
        digits = _DIGITS.get(arr.dtype, 6)
    if arr.ndim == 0:
        return format_scalar(arr[()], digits)

    def rec(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(format_scalar(x, digits) for x in a.tolist()) + "]"
        return "[" + ", ".join(rec(sub) for sub in a) + "]"

    return rec(arr)


# -- the driver -------------------------------------------------------------------------------


def _render(diags: Sequence[Diag], fallback: str) -> str:
    errors = [d for d in diags if d.severity == "error"] or list(diags)
    if not errors:
        return f"{TOOL}: error: {fallback}"
    return "\n".join(d.render() for d in errors)


def _parse_module(path: str, ctx: ir.Context) -> ir.Module:
    try:
        text, name = read_input(path)
    except ToolError as err:
        msg = str(err)
        raise ToolError(f"{TOOL}: {msg}" if msg.startswith("error:") else msg) from None
    try:
        if path == "-":
            return ir.Module.parse(text, ctx)
        return ir.Module.parseFile(path, ctx)
    except ir.MLIRError as err:
        diags = mlir_error_diags(err)
        if path == "-":
            for d in diags:
                d.file = name if d.file in ("-", None) else d.file
        raise ToolError(_render(diags, f"cannot parse '{name}'")) from None


def _has_autodiff_ops(module: ir.Module) -> bool:
    return any(is_autodiff(op.name) for op in walk_ops(module.operation))


def _pass_runner(pipeline: str, ctx: ir.Context) -> PassManagerRunner | None:
    """The pass manager for `pipeline` (None if empty); a diagnostic if it is malformed."""
    if not pipeline.strip():
        return None
    try:
        return PassManagerRunner(parse_pipeline(pipeline), ctx)
    except PipelineError as err:
        _error(f"invalid pass pipeline '{pipeline}': {err}")


def _run_passes(runner: PassManagerRunner, module: ir.Module) -> None:
    try:
        runner.run(module.operation)
    except ir.MLIRError as err:
        raise ToolError(_render(mlir_error_diags(err), str(err).splitlines()[0])) from None


def _transform_pipeline(module: ir.Module, override: str | None) -> str:
    if override is not None:
        return override
    if not _has_autodiff_ops(module):
        return ""  # plain upstream MLIR: nothing to transform
    return ",".join(name for name in DEFAULT_TRANSFORMS if lookup(name) is not None)


def _entry_location(module: ir.Module, name: str) -> str:
    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == name:
            loc = op.location
            if loc.is_a_file():
                return f"{loc.filename}:{loc.start_line}:{loc.start_col}: "
    return ""


def _find_entry(module: ir.Module, name: str, source: str) -> ir.OpView:
    """`@name`, a public function with a body numpy can call; else a diagnostic."""
    funcs = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    op = funcs.get(name)
    if op is None:
        known = ", ".join(f"@{n}" for n in funcs) or "none"
        _error(f"no function '@{name}' in '{source}' (functions: {known})")
    where = _entry_location(module, name)
    if len(op.regions[0].blocks) == 0:
        raise ToolError(f"{where}error: '@{name}' is a declaration without a body")
    if "sym_visibility" in op.attributes and \
            ir.StringAttr(op.attributes["sym_visibility"]).value != "public":
        raise ToolError(f"{where}error: '@{name}' is private; only public functions can be run")
    return op


def run(args: argparse.Namespace, out: Any = None) -> int:
    """Run the parsed command line; results go to `out` (default: stdout)."""
    out = out or sys.stdout
    arg_values = [ArgValue(i, text) for i, text in enumerate(args.arg)]
    ctx = ir.Context()
    dialects.load(ctx)
    source = "<stdin>" if args.input == "-" else args.input
    with ctx, ir.Location.unknown():
        set_stage(f"parsing '{source}'")
        module = _parse_module(args.input, ctx)
        entry = _find_entry(module, args.entry, source)
        runner = _pass_runner(_transform_pipeline(module, args.pass_pipeline), ctx)
        # Check the arguments against the signature before the (slower) compilation.
        sig = signature_of(entry)
        if isinstance(sig, str):
            where = _entry_location(module, args.entry)
            raise ToolError(f"{where}error: @{args.entry} cannot be called from autodiff-run: "
                            f"{sig}")
        try:
            values = check_args(args.entry, sig[0], [a.value for a in arg_values])
        except (TypeError, ValueError) as err:
            _error(str(err))
        if runner is not None:
            set_stage(f"running the transforms on '{source}'")
            _run_passes(runner, module)
        set_stage(f"compiling '{source}'")
        try:
            if args.device == "gpu":
                from ..gpu import CompiledGpuModule, NoCudaDevice

                try:
                    cm = CompiledGpuModule(module, context=ctx, opt_level=args.opt_level)
                except NoCudaDevice as err:
                    _error(str(err))
            else:
                cm = CompiledModule(module, context=ctx, opt_level=args.opt_level,
                                    pipeline=LOWERING)
        except PipelineError as err:
            _error(f"invalid lowering pipeline: {err}")
        except ir.MLIRError as err:
            raise ToolError(_render(mlir_error_diags(err), str(err).splitlines()[0])) from None
        except CompileError as err:
            _error(str(err))
        if args.print_ir:
            out.write(cm.lowered_text + "\n")
        try:
            fn = cm[args.entry]
        except (KeyError, TypeError) as err:
            where = _entry_location(module, args.entry)
            msg = err.args[0] if err.args else str(err)
            raise ToolError(f"{where}error: {msg}") from None
        set_stage(_RUNNING + args.entry)
        try:
            results = fn.call(values)
        except (TypeError, ValueError) as err:
            _error(str(err))
    set_stage("printing the results")
    for i, (spec, value) in enumerate(zip(fn.results, results)):
        out.write(f"result[{i}]: {spec.mlir_type} = {format_value(value, args.precision)}\n")
    out.flush()
    return 0


HELP = f"""\
OVERVIEW: {TOOL}: JIT-compile an MLIR module, call one function and print its results

USAGE: {TOOL} [options] [<input file> | -]

Reads MLIR from the file (stdin if absent or '-'), runs the autodiff transforms
(or --pass-pipeline) and the CPU (or GPU) lowering, calls the entry function
and prints one line per result: `result[i]: <type> = <value>`.

OPTIONS:
  --entry=<name>                    Function to call (default: main)
  --arg=<value>                     An argument of the entry function, in order
                                    (repeatable): a nested list or scalar with an
                                    optional :dtype suffix ([[1,2],[3,4]]:f32,
                                    3.5:f64, true:i1), or @file.npy
  --pass-pipeline=<pipeline>        Passes to run before the lowering, replacing the
                                    default autodiff transforms ('' for none)
  --print-ir                        Print the lowered (LLVM dialect) module first
  -O <0|1|2|3>, --opt-level=<n>     LLVM optimization level (default 2)
  --device=<cpu|gpu>                Where to run (default cpu; gpu lowers with
                                    --autodiff-lower-to-gpu and needs a CUDA device)
  --precision=<n>                   Significant digits of printed floats (default:
                                    by dtype: f16 4, bf16 3, f32 6, f64 12)
  --version                         Print the version
  -h, --help                        Print this help
"""


def _main(argv: list[str]) -> int:
    args = _make_parser().parse_args(_join_arg_values(argv))
    if args.help:
        sys.stdout.write(HELP)
        return 0
    if args.version:
        sys.stdout.write(tool_version(TOOL))
        return 0
    if args.precision is not None and not 1 <= args.precision <= 17:
        _error("--precision must be between 1 and 17")
    try:
        return run(args)
    except InternalError as err:
        raise ToolError(f"{TOOL}: {err}") from None


#: The stage while the user's function runs: a crash then is the program's.
_RUNNING = "running @"


def _user_program(stage: str) -> str | None:
    return "@" + stage[len(_RUNNING):] if stage.startswith(_RUNNING) else None


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`autodiff-run`), supervised (see supervisor.py): a
    fatal signal in MLIR or in the program run becomes one line and exit code 1."""
    if argv is None:
        return supervised(TOOL, lambda: guarded_main(TOOL, _main, argv), _user_program)
    return guarded_main(TOOL, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
