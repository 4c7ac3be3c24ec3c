"""autodiff-opt: an mlir-opt look-alike over the upstream MLIR Python bindings.

    autodiff-opt model.mlir --autodiff-vjp --canonicalize --autodiff-lower-to-cpu
    autodiff-opt --split-input-file --verify-diagnostics invalid.mlir
    autodiff-opt --pass-pipeline='builtin.module(autodiff-jvp, func.func(cse))' -o out.mlir

Everything an mlir-opt user knows works the same way: the input is a file or
stdin, top-level ops get an implicit `module`, every pass (ours and any
upstream one) is a flag applied in command-line order or part of
`--pass-pipeline`, and `--split-input-file`, `--verify-diagnostics`,
`--mlir-print-ir-after-all`, `--mlir-print-debuginfo` and
`--mlir-print-op-generic` mean what they mean there. Diagnostics are
`file:line:col: error: message` on stderr and the exit code is 1 on failure;
a Python traceback never reaches the user.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .common import TRACEBACK_ENV, ToolError, guarded_main, read_input
from .opt_input import (
    MAX_NESTING,
    SPLIT_MARKER,
    Chunk,
    ColumnShift,
    line_col,
    nesting_error,
    split_input,
    wrap_in_module,
)
from .verify_diagnostics import DiagnosticVerifier

if TYPE_CHECKING:  # the bindings are imported lazily: --help and --version stay instant
    from mlir import ir

    from ..transforms.diagnostics import Diag
    from ..transforms.pipeline import PassManagerRunner

TOOL = "autodiff-opt"

#: MLIR's parser, verifier and printer recurse once per nesting level; all the
#: work runs on a thread with this much stack so that MAX_NESTING is far from
#: an overflow (the memory is only reserved, not committed).
STACK_BYTES = 512 * 1024 * 1024

_SEE_OP_NOTE = "see current operation:"


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class PassFlag:
    """A pass given as its own flag: `--canonicalize`, `--autodiff-x=opt=v`, `--x{opt=v}`."""

    flag: str
    name: str
    options: str | None


@dataclasses.dataclass
class Options:
    """Everything the command line says; `parse_args` fills it in."""

    input: str = "-"
    output: str = "-"
    split_marker: str | None = None
    verify: str | None = None  # None, "all" or "only-expected"
    pass_pipeline: str | None = None
    passes: list[PassFlag] = dataclasses.field(default_factory=list)
    irdl_files: list[str] = dataclasses.field(default_factory=list)
    print_debuginfo: bool = False
    pretty_debuginfo: bool = False
    print_generic: bool = False
    print_local_scope: bool = False
    print_ir_after_all: bool = False
    print_op_on_diagnostic: bool = True
    elide_elements_limit: int | None = None
    allow_unregistered: bool = False
    disable_threading: bool = False
    timing: bool = False
    list_passes: bool = False
    help: bool = False
    version: bool = False


_BOOL_FLAGS = {
    "mlir-print-debuginfo": "print_debuginfo",
    "mlir-pretty-debuginfo": "pretty_debuginfo",
    "mlir-print-op-generic": "print_generic",
    "mlir-print-local-scope": "print_local_scope",
    "mlir-print-ir-after-all": "print_ir_after_all",
    "mlir-print-op-on-diagnostic": "print_op_on_diagnostic",
    "allow-unregistered-dialect": "allow_unregistered",
    "mlir-disable-threading": "disable_threading",
    "mlir-timing": "timing",
    "list-passes": "list_passes",
    "help": "help",
    "h": "help",
    "version": "version",
}
_VALUE_FLAGS = ("o", "pass-pipeline", "irdl-file", "mlir-elide-elementsattrs-if-larger")

HELP = f"""\
OVERVIEW: {TOOL}: mlir-opt for the mlir-autodiff passes (and every upstream pass)

USAGE: {TOOL} [options] [<input file> | -]

Reads MLIR from the file (stdin if absent or '-'), runs the passes in
command-line order and prints the result.

OPTIONS:
  -o <file>                         Output file ('-' for stdout, the default)
  --pass-pipeline=<pipeline>        A textual pipeline, e.g. 'builtin.module(autodiff-vjp,cse)'
  --<pass>[=<options>]              Add a pass: ours (see --list-passes) or any upstream
                                    one: --canonicalize, --cse,
                                    --one-shot-bufferize="bufferize-function-boundaries"
  --split-input-file[=<marker>]     Process each '// -----' separated chunk on its own
  --verify-diagnostics[=all|only-expected]
                                    Check diagnostics against expected-* comments
  --irdl-file=<file>                Load extra IRDL dialects
  --allow-unregistered-dialect      Accept ops of unknown dialects
  --mlir-print-debuginfo            Print locations
  --mlir-pretty-debuginfo           Print locations inline (not re-parseable)
  --mlir-print-op-generic           Print every op in generic form
  --mlir-print-local-scope          Print attributes and types without aliases
  --mlir-elide-elementsattrs-if-larger=<n>
                                    Elide elements attributes larger than n
  --mlir-print-ir-after-all         Print the IR after every pass (to stderr)
  --mlir-print-op-on-diagnostic=<bool>
                                    Attach the failing op to verifier errors (default true)
  --mlir-disable-threading          Run single-threaded
  --mlir-timing                     Report pass timings (to stderr)
  --list-passes                     List the mlir-autodiff passes and their options
  --version                         Print the version
  -h, --help                        Print this help
"""


def _bool_value(flag: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("", "1", "true", "on", "yes"):
        return True
    if low in ("0", "false", "off", "no"):
        return False
    raise ToolError(f"{TOOL}: error: option '{flag}' expects true or false, got '{raw}'")


def parse_args(argv: list[str]) -> Options:
    """Parse the command line, mlir-opt style (one or two dashes, `=` or a separate value)."""
    opts = Options()
    positionals: list[str] = []
    i = 0
    only_positionals = False
    while i < len(argv):
        arg = argv[i]
        i += 1
        if only_positionals or arg == "-" or not arg.startswith("-"):
            positionals.append(arg)
            continue
        if arg == "--":
            only_positionals = True
            continue
        body = arg[2:] if arg.startswith("--") else arg[1:]
        brace, eq = body.find("{"), body.find("=")
        if brace >= 0 and (eq < 0 or brace < eq):
            # `--pass{opts}`: options in pipeline syntax.
            if not body.endswith("}"):
                raise ToolError(f"{TOOL}: error: missing closing '}}' in pass options of '{arg}'")
            opts.passes.append(PassFlag(arg, body[:brace], body[brace + 1 : -1]))
            continue
        name, has_value, value = body.partition("=")
        if name in _VALUE_FLAGS:
            if not has_value:
                if i >= len(argv):
                    raise ToolError(f"{TOOL}: error: option '{arg}' requires a value")
                value = argv[i]
                i += 1
            _set_value(opts, arg, name, value)
        elif name in _BOOL_FLAGS:
            setattr(opts, _BOOL_FLAGS[name], _bool_value(arg, value) if has_value else True)
        elif name == "split-input-file":
            opts.split_marker = value if has_value and value else SPLIT_MARKER
        elif name == "verify-diagnostics":
            mode = value if has_value and value else "all"
            if mode not in ("all", "only-expected"):
                raise ToolError(
                    f"{TOOL}: error: option '{arg}': expected 'all' or 'only-expected'"
                )
            opts.verify = mode
        elif not name:
            raise ToolError(f"{TOOL}: error: unknown command line argument '{arg}'")
        else:
            opts.passes.append(PassFlag(arg, name, value if has_value else None))
    if len(positionals) > 1:
        raise ToolError(
            f"{TOOL}: error: too many positional arguments: {' '.join(positionals)} "
            "(expected one input file)"
        )
    if positionals:
        opts.input = positionals[0]
    if opts.pass_pipeline is not None and opts.passes:
        raise ToolError(
            f"{TOOL}: error: '--pass-pipeline' option can't be used with individual pass "
            f"options ({opts.passes[0].flag})"
        )
    return opts


def _set_value(opts: Options, arg: str, name: str, value: str) -> None:
    if name == "o":
        opts.output = value
    elif name == "pass-pipeline":
        opts.pass_pipeline = value
    elif name == "irdl-file":
        opts.irdl_files.append(value)
    else:
        try:
            opts.elide_elements_limit = int(value, 0)
        except ValueError:
            raise ToolError(f"{TOOL}: error: option '{arg}' expects an integer") from None


# ----------------------------------------------------------------------------
# Help screens
# ----------------------------------------------------------------------------


def list_passes() -> str:
    from ..transforms.passes import all_passes

    lines = [f"{TOOL} passes (options as --pass=opt=value,... or --pass{{opt=value ...}}):"]
    for name, cls in all_passes().items():
        lines.append(f"  --{name}")
        if cls.summary:
            lines.append(f"      {cls.summary}")
        for field in cls.options():
            kind = field.type if isinstance(field.type, str) else field.type.__name__
            default = "" if field.default is dataclasses.MISSING else f" (default: {field.default})"
            help_text = field.metadata.get("help", "")
            lines.append(f"      {field.name.replace('_', '-')}=<{kind}>  {help_text}{default}")
    lines.append("")
    lines.append(
        "Every upstream MLIR pass and pass pipeline is accepted as well, as a flag "
        "(--canonicalize, --cse, --one-shot-bufferize=\"bufferize-function-boundaries\") "
        "or inside --pass-pipeline; see `mlir-opt --help` for the list."
    )
    return "\n".join(lines) + "\n"


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        ours = dist_version("mlir-autodiff")
    except Exception:  # not installed as a distribution (a bare checkout)
        ours = "unknown"
    return f"{TOOL} (mlir-autodiff {ours}) on the upstream MLIR 22 Python bindings\n"


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _write_err(lines: list[str] | str) -> None:
    if isinstance(lines, str):
        lines = [lines]
    for line in lines:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


@contextmanager
def _captured_stderr_fd() -> Iterator[list[str]]:
    """Capture what C++ code writes to file descriptor 2 (LLVM's option parser does)."""
    sink: list[str] = []
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (embedded use): nothing to capture
        yield sink
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield sink
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace"))


def _llvm_message(captured: list[str]) -> str:
    """The useful part of LLVM command-line parser output (`<prog>: for the --x option: ...`)."""
    text = " ".join(ln.strip() for ln in "".join(captured).splitlines() if ln.strip())
    return re.sub(r"^[^:]*: (?=for the )", "", text)


def _upstream_error(message: str, name: str, captured: list[str]) -> str:
    """One line out of the multi-line error the bindings raise for a bad pass element."""
    extra = _llvm_message(captured)
    if "does not refer to a registered pass" in message:
        return f"'{name}' does not refer to a registered pass or pass pipeline"
    m = re.search(r"<Pass-Options-Parser>: (.*)", message)
    if m:
        return f"invalid option for pass '{name}': {m.group(1).strip()}"
    m = re.search(r"error: (.*)", message)
    if m:
        return f"invalid pass '{name}': {m.group(1).strip()}"
    if extra:
        return f"invalid option for pass '{name}': {extra}"
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return f"invalid pass '{name}': {first or 'cannot be added to the pass manager'}"


def _try_add_upstream(ctx: ir.Context, element: str) -> tuple[str | None, list[str]]:
    """(None, _) if `element` is a valid upstream pipeline element, else (error, stderr)."""
    from mlir import passmanager

    pm = passmanager.PassManager("builtin.module", ctx)
    with _captured_stderr_fd() as captured:
        try:
            pm.add(element)
            message = None
        except ValueError as err:
            message = str(err)
    return message, captured


def _call_with_big_stack(fn: Callable[[], int]) -> int:
    """Run `fn` on a thread with STACK_BYTES of stack; re-raise whatever it raises."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as err:  # handed to the main thread
            result["error"] = err

    previous = threading.stack_size()
    worker = threading.Thread(target=target, name=TOOL, daemon=True)
    try:
        threading.stack_size(STACK_BYTES)
        worker.start()
    except (ValueError, RuntimeError):  # no such stack here (ulimit -v): use this thread
        return fn()
    finally:
        threading.stack_size(previous)
    worker.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def render(d: Diag) -> str:
    """`file:line:col: severity: message`, notes on their own lines (mlir-opt's shape)."""
    where = f"{d.file}:{d.line}:{d.col}: " if d.file is not None else "<unknown>:0: "
    text = f"{where}{d.severity}: {d.message}"
    for note in d.notes:
        text += "\n" + render(note)
    return text


def _fix_diag(d: Diag, name: str, shifts: list[ColumnShift], rename: str | None = None) -> Diag:
    """Undo the columns moved by the implicit module; map the probe's '-' buffer to `name`."""
    file = name if rename is not None and d.file == rename else d.file
    col = d.col
    if file == name:
        for s in shifts:
            col = s.fix(d.line, col)
    notes = [_fix_diag(n, name, shifts, rename) for n in d.notes]
    return dataclasses.replace(d, file=file, col=col, notes=notes)


def _without_op_notes(d: Diag) -> Diag:
    notes = [_without_op_notes(n) for n in d.notes if not n.message.startswith(_SEE_OP_NOTE)]
    return dataclasses.replace(d, notes=notes)


_FOUND_N = "source must contain a single top-level operation, found:"


class _Router:
    """The context's one diagnostic handler; forwards to whoever listens now."""

    def __init__(self) -> None:
        self.target: Callable[[Diag], None] | None = None

    def __call__(self, d: ir.Diagnostic) -> bool:
        from ..transforms.diagnostics import Diag, to_diag

        try:
            diag = to_diag(d)
        except Exception:  # never fail while reporting
            diag = Diag("error", str(getattr(d, "message", d)), None, None, None)
        if self.target is not None:
            self.target(diag)
        else:
            _write_err(render(diag))
        return True

    @contextmanager
    def collect(self) -> Iterator[list[Diag]]:
        sink: list[Diag] = []
        previous, self.target = self.target, sink.append
        try:
            yield sink
        finally:
            self.target = previous


# ----------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------


class OptRun:
    """One run of autodiff-opt: a context, a pass pipeline, the input's chunks."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.router = _Router()
        self._handler: Any = None  # keeps the context's diagnostic handler attached

    # -- setup ---------------------------------------------------------------

    def make_context(self) -> ir.Context:
        from mlir import ir

        from ..dialects import load

        ctx = ir.Context()
        if self.opts.print_ir_after_all or self.opts.disable_threading:
            # MLIR refuses module-scope IR printing on a multi-threaded context.
            ctx.enable_multithreading(False)
        # Every diagnostic, errors included, goes through our handler instead
        # of being folded into MLIRError: one path for parse, verifier and pass
        # errors, in emission order, so nothing is counted twice.
        ctx.emit_error_diagnostics = True
        self._handler = ctx.attach_diagnostic_handler(self.router)
        # Autodiff ops parse as unregistered ops and are checked by
        # `dialects.verify` after parsing, which also enforces
        # --allow-unregistered-dialect for every other dialect.
        load(ctx)
        for path in self.opts.irdl_files:
            self._load_irdl(ctx, path)
        return ctx

    def _load_irdl(self, ctx: ir.Context, path: str) -> None:
        from mlir import ir

        from ..dialects import load_irdl_file

        with self.router.collect() as diags:
            try:
                load_irdl_file(path, ctx)
                return
            except OSError as err:
                reason = err.strerror or str(err)
            except UnicodeDecodeError:
                reason = "not valid UTF-8 text"
            except ir.MLIRError:
                reason = "not a valid IRDL file"
        _write_err([render(_fix_diag(d, path, [], rename="-")) for d in diags])
        raise ToolError(f"{TOOL}: error: could not load IRDL file '{path}': {reason}")

    def make_runner(self, ctx: ir.Context) -> PassManagerRunner | None:
        from ..transforms.pipeline import PassManagerRunner, PipelineError, parse_pipeline

        if self.opts.pass_pipeline is not None:
            try:
                elements = parse_pipeline(self.opts.pass_pipeline)
            except PipelineError as err:
                raise ToolError(f"{TOOL}: error: {err}") from None
        else:
            elements = [self._resolve_pass_flag(ctx, p) for p in self.opts.passes]
        if not elements:
            return None
        with _captured_stderr_fd() as captured:
            try:
                return PassManagerRunner(
                    elements,
                    ctx,
                    print_ir_after_all=self.opts.print_ir_after_all,
                    print_debuginfo=self.opts.print_debuginfo,
                    timing=self.opts.timing,
                )
            except PipelineError as err:
                error = str(err)
        extra = _llvm_message(captured)
        if extra and extra not in error:
            error += f": {extra}"
        raise ToolError(f"{TOOL}: error: {error}")

    def _resolve_pass_flag(self, ctx: ir.Context, p: PassFlag) -> Any:
        """Our pass instance, or a validated upstream pipeline element string."""
        from ..transforms.passes import lookup
        from ..transforms.pipeline import PipelineError, make_pass, parse_options

        if lookup(p.name) is not None:
            # `--pass=a=1,b=2` as well as MLIR's `--pass="a=1 b=2"`; a comma
            # inside a list value (`wrt=0,1`) is not followed by `key=`.
            options = re.sub(r",(?=\s*[A-Za-z][\w-]*=)", " ", p.options or "")
            try:
                return make_pass(p.name, parse_options(options))
            except PipelineError as err:
                raise ToolError(f"{TOOL}: error: {err}") from None
        element = p.name if p.options is None else f"{p.name}{{{p.options}}}"
        message, captured = _try_add_upstream(ctx, element)
        if message is None:
            return element
        nested = re.search(r"restricted to '([^']+)'", message)
        if nested is not None:
            # Like mlir-opt's implicit nesting: a pass restricted to an op
            # (func.func, gpu.module) runs on those ops inside the module.
            element = f"{nested.group(1)}({element})"
            message, captured = _try_add_upstream(ctx, element)
            if message is None:
                return element
        if "does not refer to a registered pass" in message:
            raise ToolError(
                f"{TOOL}: error: unknown option '{p.flag}': '{p.name}' does not refer to a "
                "registered pass or pass pipeline (see --list-passes)"
            )
        raise ToolError(f"{TOOL}: error: {_upstream_error(message, p.name, captured)}")

    # -- one chunk -------------------------------------------------------------

    def parse(self, ctx: ir.Context, text: str, name: str) -> tuple[Any, list[Diag], list]:
        """(module op or None, diagnostics to report, column shifts) for one buffer.

        mlir-opt semantics: a single top-level builtin.module is the module;
        anything else is wrapped in an implicit module (located at name:0:0).
        """
        from mlir import ir

        module_loc = str(ir.Location.file(name, 0, 0, ctx))
        with self.router.collect() as direct:
            try:
                op = ir.Operation.parse(text, source_name=name, context=ctx)
            except ir.MLIRError:
                op = None
        if op is not None:
            if op.name == "builtin.module":
                return self._checked(op, direct), direct, []
            # One op that is not a module: move it into the implicit module and
            # verify again, now that symbol uses can be resolved in the module.
            module = self._empty_module(ctx, name, module_loc)
            module.regions[0].blocks[0].append(op)
            with self.router.collect() as direct_after:
                try:
                    module.verify()
                except ir.MLIRError:
                    module = None
            direct += direct_after
            return self._checked(module, direct), direct, []
        found_n = any(d.message.startswith(_FOUND_N) for d in direct)
        # Several top-level ops (or one that is not a module): find where the
        # ops start with the bindings' own implicit-module parse (buffer "-").
        with self.router.collect() as probe_diags:
            try:
                probe = ir.Module.parse(text, ctx)
            except ir.MLIRError:
                probe = None
        if probe is None:
            if not found_n:
                return None, direct, []
            return None, [_fix_diag(d, name, [], rename="-") for d in probe_diags], []
        ops = list(probe.body.operations)
        if not ops:
            return self._empty_module(ctx, name, module_loc), [], []
        first, last_line = _probe_position(ops[0]), _probe_position(ops[-1])
        del ops, probe
        wrapped, shifts = wrap_in_module(
            text, first, last_line[0] if last_line and first else None, module_loc
        )
        with self.router.collect() as diags:
            try:
                op = ir.Operation.parse(wrapped, source_name=name, context=ctx)
            except ir.MLIRError:
                op = None
        return self._checked(op, diags), diags, shifts

    def _checked(self, module: Any, diags: list[Diag]) -> Any:
        """`module` if its autodiff ops (and unregistered ops) verify, else None.

        Our contexts parse autodiff ops as unregistered ops (MLIR 22's IRDL
        cannot express their variadic operand lists, see dialects/verify.py),
        so the driver checks them right after the parse, as MLIR's verifier
        would; errors are appended to `diags`.
        """
        from ..dialects import verify

        if module is None:
            return None
        with self.router.collect() as found:
            ok = verify(module, allow_unregistered=self.opts.allow_unregistered)
        diags.extend(found)
        return module if ok else None

    @staticmethod
    def _empty_module(ctx: ir.Context, name: str, module_loc: str) -> Any:
        from mlir import ir

        return ir.Operation.parse(f"module {{\n}} {module_loc}", source_name=name, context=ctx)

    def process_chunk(
        self,
        ctx: ir.Context,
        runner: PassManagerRunner | None,
        chunk: Chunk,
        name: str,
        verifier: DiagnosticVerifier | None,
    ) -> tuple[str, bool, bool]:
        """(printed output or "", processing succeeded, a pass crashed) for one chunk."""
        from mlir import ir

        from .. import dialects
        from ..transforms.diagnostics import Diag
        from ..transforms.pipeline import InternalError

        opts = self.opts
        shifts: list[ColumnShift] = []

        def report(d: Diag) -> None:
            d = _fix_diag(d, name, shifts)
            if verifier is not None:
                # mlir-opt does not attach the op to diagnostics when verifying.
                _write_err(verifier.process(_without_op_notes(d)))
            else:
                _write_err(render(d if opts.print_op_on_diagnostic else _without_op_notes(d)))

        too_deep = nesting_error(chunk.text)
        if too_deep is not None:
            line, col = line_col(chunk.text, too_deep)
            report(Diag("error", f"input nested deeper than {MAX_NESTING} levels", name, line, col))
            return "", False, False
        op, diags, found_shifts = self.parse(ctx, chunk.text, name)
        shifts.extend(found_shifts)
        for d in diags:
            report(d)
        if op is None:
            return "", False, False
        previous, self.router.target = self.router.target, report
        try:
            if runner is not None:
                sys.stderr.flush()  # IR printing writes to fd 2 from C++
                runner.run(op)
                # The pass manager's verifier cannot see into autodiff ops.
                if not dialects.verify(op, allow_unregistered=opts.allow_unregistered):
                    return "", False, False
        except ir.MLIRError:
            return "", False, False  # the diagnostics went through `report`
        except InternalError as err:
            _write_err(self._internal_error(err))
            return "", False, True
        finally:
            self.router.target = previous
        output = op.get_asm(
            enable_debug_info=opts.print_debuginfo,
            pretty_debug_info=opts.pretty_debuginfo,
            print_generic_op_form=opts.print_generic,
            use_local_scope=opts.print_local_scope,
            large_elements_limit=opts.elide_elements_limit,
            assume_verified=True,  # verified by the parser and after each pass
        )
        return output + "\n", True, False

    def _internal_error(self, err: Exception) -> str:
        if os.environ.get(TRACEBACK_ENV):
            import traceback

            cause = getattr(err, "error", err)
            traceback.print_exception(type(cause), cause, cause.__traceback__)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"{TOOL}: error: {first} (set {TRACEBACK_ENV}=1 for the traceback)"

    # -- the whole run -----------------------------------------------------------

    def run(self) -> int:
        ctx = self.make_context()
        runner = self.make_runner(ctx)
        try:
            text, name = read_input(self.opts.input)
        except ToolError as err:
            message = str(err)
            raise ToolError(
                f"{TOOL}: {message}" if message.startswith("error:") else message
            ) from None
        # Like mlir-opt, one verifier sees the whole file: expectations are
        # matched by original line numbers, and the ones never produced are
        # reported after every chunk ran.
        verifier = None
        if self.opts.verify:
            verifier = DiagnosticVerifier(
                text, name, only_expected=self.opts.verify == "only-expected"
            )
            _write_err(verifier.initial_errors())
        outputs, processed, crashed = [], True, False
        for chunk in split_input(text, self.opts.split_marker):
            output, chunk_ok, chunk_crashed = self.process_chunk(
                ctx, runner, chunk, name, verifier
            )
            outputs.append(output)
            processed = processed and chunk_ok
            crashed = crashed or chunk_crashed
        if verifier is not None:
            _write_err(verifier.finish())
            ok = not verifier.failed and not crashed
        else:
            ok = processed
        marker = self.opts.split_marker
        result = (marker + "\n").join(outputs) if marker else outputs[0]
        if self.opts.output == "-":
            sys.stdout.write(result)
            sys.stdout.flush()
        elif ok:  # like mlir-opt, a failed run leaves no output file behind
            try:
                with open(self.opts.output, "w", encoding="utf-8") as f:
                    f.write(result)
            except OSError as err:
                raise ToolError(
                    f"{TOOL}: error: could not open output file '{self.opts.output}': "
                    f"{err.strerror}"
                ) from None
        return 0 if ok else 1


def _probe_position(op: Any) -> tuple[int, int] | None:
    """(line, col) of an op parsed from the probe buffer "-", if its location says so."""
    loc = op.location
    try:
        if loc.is_a_file() and loc.filename == "-":
            return loc.start_line, loc.start_col
    except Exception:  # unusual location kinds: fall back to line 1
        pass
    return None


def _main(argv: list[str]) -> int:
    opts = parse_args(argv)
    if opts.help:
        sys.stdout.write(HELP)
        return 0
    if opts.version:
        sys.stdout.write(version())
        return 0
    if opts.list_passes:
        sys.stdout.write(list_passes())
        return 0
    return _call_with_big_stack(OptRun(opts).run)


def main(argv: list[str] | None = None) -> int:
    """Run autodiff-opt on `argv` (default: sys.argv[1:]) and return the exit code.

    The console script calls `sys.exit(main())`.
    """
    return guarded_main(TOOL, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
