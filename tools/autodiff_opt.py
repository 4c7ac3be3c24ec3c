"""autodiff-opt: an mlir-opt look-alike over the upstream MLIR Python bindings.

    autodiff-opt model.mlir --autodiff-vjp --canonicalize --autodiff-lower-to-cpu
    autodiff-opt --split-input-file --verify-diagnostics invalid.mlir
    autodiff-opt --pass-pipeline='builtin.module(autodiff-jvp, func.func(cse))' -o out.mlir

Everything an mlir-opt user knows works the same way: the input is a file or
stdin, top-level ops get an implicit `module`, every pass (ours and any
upstream one) is a flag applied in command-line order or part of
`--pass-pipeline`, and the everyday flags mean what they mean there:
`--split-input-file`, `--verify-diagnostics`, the `--mlir-print-ir-*` family
(before/after a named pass, ours included, before-all, after-all,
after-change, after-failure, module scope; see ir_printing.py), `--verify-each`,
`--mlir-pass-statistics`, `--dump-pass-pipeline`, `--mlir-timing`,
`--mlir-pass-pipeline-crash-reproducer` / `--run-reproducer`,
`--mlir-diagnostic-verbosity-level`, `--mlir-print-op-on-diagnostic`,
`--no-implicit-module`, `--emit-bytecode` (and bytecode input),
`--show-dialects`, `--help-hidden`. Diagnostics are printed as mlir-opt
prints them (`file:line:col: error: message`, the source line and a caret
under the column) on stderr, and the exit code is 1 on failure; a Python
traceback never reaches the user.
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

from .common import (
    BYTECODE_MAGIC,
    TRACEBACK_ENV,
    ToolError,
    decode_input,
    guarded_main,
    read_bytes,
    tool_version,
)
from .ir_printing import CapturedStderr, Selection, dump_pipeline
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
from .supervisor import set_stage, supervised
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
    print_ir_before_all: bool = False
    print_ir_before: list[str] = dataclasses.field(default_factory=list)
    print_ir_after: list[str] = dataclasses.field(default_factory=list)
    print_ir_after_failure: bool = False
    print_ir_after_change: bool = False
    print_ir_module_scope: bool = False
    verify_each: bool = True
    pass_statistics: bool = False
    pass_statistics_display: str = "pipeline"
    dump_pass_pipeline: bool = False
    show_dialects: bool = False
    emit_bytecode: bool = False
    crash_reproducer: str | None = None
    verbosity: str = "remarks"  # errors, warnings or remarks (everything)
    no_implicit_module: bool = False
    help_hidden: bool = False
    print_op_on_diagnostic: bool = True
    elide_elements_limit: int | None = None
    allow_unregistered: bool = False
    disable_threading: bool = False
    timing: bool = False
    list_passes: bool = False
    print_machine: bool = False
    run_reproducer: bool = False
    help: bool = False
    version: bool = False


_BOOL_FLAGS = {
    "mlir-print-debuginfo": "print_debuginfo",
    "mlir-pretty-debuginfo": "pretty_debuginfo",
    "mlir-print-op-generic": "print_generic",
    "mlir-print-local-scope": "print_local_scope",
    "mlir-print-ir-after-all": "print_ir_after_all",
    "mlir-print-ir-before-all": "print_ir_before_all",
    "mlir-print-ir-after-failure": "print_ir_after_failure",
    "mlir-print-ir-after-change": "print_ir_after_change",
    "mlir-print-ir-module-scope": "print_ir_module_scope",
    "verify-each": "verify_each",
    "mlir-pass-statistics": "pass_statistics",
    "dump-pass-pipeline": "dump_pass_pipeline",
    "show-dialects": "show_dialects",
    "emit-bytecode": "emit_bytecode",
    "no-implicit-module": "no_implicit_module",
    "help-hidden": "help_hidden",
    "mlir-print-op-on-diagnostic": "print_op_on_diagnostic",
    "allow-unregistered-dialect": "allow_unregistered",
    "mlir-disable-threading": "disable_threading",
    "mlir-timing": "timing",
    "list-passes": "list_passes",
    "print-machine": "print_machine",
    "run-reproducer": "run_reproducer",
    "help": "help",
    "h": "help",
    "version": "version",
}
_VALUE_FLAGS = (
    "o",
    "pass-pipeline",
    "irdl-file",
    "mlir-elide-elementsattrs-if-larger",
    "mlir-print-ir-before",
    "mlir-print-ir-after",
    "mlir-pass-pipeline-crash-reproducer",
    "mlir-diagnostic-verbosity-level",
    "mlir-pass-statistics-display",
)
_CHOICES = {
    "mlir-diagnostic-verbosity-level": ("verbosity", ("errors", "warnings", "remarks")),
    "mlir-pass-statistics-display": ("pass_statistics_display", ("list", "pipeline")),
}

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
  --mlir-print-ir-before=<pass>[,<pass>...]
                                    Print the IR before each run of these passes (stderr)
  --mlir-print-ir-after=<pass>[,<pass>...]
                                    Print the IR after each run of these passes (stderr)
  --mlir-print-ir-before-all        Print the IR before every pass
  --mlir-print-ir-after-all         Print the IR after every pass
  --mlir-print-ir-after-change      Print the IR after a pass only if it changed it
  --mlir-print-ir-after-failure     Print the IR after a pass that failed
  --mlir-print-ir-module-scope      Print the whole module, not the pass's op
                                    (needs --mlir-disable-threading)
  --mlir-print-op-on-diagnostic=<bool>
                                    Attach the op to pass and verifier errors (default true)
  --mlir-diagnostic-verbosity-level=<errors|warnings|remarks>
                                    Lowest severity of diagnostics shown (default remarks)
  --mlir-pass-pipeline-crash-reproducer=<file>
                                    On a pass failure, write the input and the pipeline
                                    to <file> (rerun with --run-reproducer)
  --mlir-pass-statistics            Report pass statistics (to stderr)
  --verify-each=<bool>              Verify the IR after every pass (default true)
  --dump-pass-pipeline              Print the pass pipeline before running it (stderr)
  --emit-bytecode                   Write MLIR bytecode instead of text
  --no-implicit-module              The input's single top-level op is the root; no
                                    implicit module
  --show-dialects                   List the dialects available and exit
  --mlir-disable-threading          Run single-threaded
  --mlir-timing                     Report pass timings (to stderr)
  --list-passes                     List the mlir-autodiff passes and their options
  --print-machine                   Print the CPU the schedules are derived for and
                                    the tiles derived from it (AUTODIFF_CPU_* overrides)
  --version                         Print the version
  --help-hidden                     Print this help and the rarely used options
  -h, --help                        Print this help
"""

HIDDEN_HELP = """\

HIDDEN OPTIONS:
  --mlir-pass-statistics-display=<list|pipeline>
                                    Statistics per pass (list) or per pipeline (default)
  --run-reproducer                  Run the pipeline written in the input's
                                    '{-# external_resources: { mlir_reproducer ... #-}'
  --mlir-pretty-debuginfo           Print locations inline (not re-parseable)
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
    elif name in ("mlir-print-ir-before", "mlir-print-ir-after"):
        # A comma-separated list, and the flag may repeat (as in mlir-opt).
        target = opts.print_ir_before if name.endswith("before") else opts.print_ir_after
        target.extend(v.strip() for v in value.split(",") if v.strip())
    elif name == "mlir-pass-pipeline-crash-reproducer":
        opts.crash_reproducer = value
    elif name in _CHOICES:
        field, choices = _CHOICES[name]
        if value not in choices:
            raise ToolError(
                f"{TOOL}: for the --{name} option: Cannot find option named '{value}'!"
            )
        setattr(opts, field, value)
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


_DIALECTS_WITHOUT_MODULE = (
    "acc", "amx", "arm_neon", "arm_sme", "arm_sve", "async", "dlti", "mpi", "omp", "pdl_interp", "ptr",
    "wasmssa", "x86vector", "xegpu", "xevm",
)


def show_dialects() -> str:
    """mlir-opt's --show-dialects: every dialect the bindings register, and ours."""
    import pkgutil

    import mlir.dialects
    from mlir import ir

    candidates = {m.name.split(".")[0] for m in pkgutil.iter_modules(mlir.dialects.__path__)}
    # Registered upstream dialects that have no Python module of their own.
    candidates.update(_DIALECTS_WITHOUT_MODULE)
    ctx = ir.Context()
    names = {"autodiff"}
    for candidate in candidates:
        if candidate.startswith("_"):
            continue
        try:
            ctx.dialects[candidate]
        except Exception:  # a helper module, not a dialect
            continue
        names.add(candidate)
    return "Available Dialects: " + ",".join(sorted(names)) + "\n"


def version() -> str:
    return tool_version(TOOL)


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


#: While passes run with a per-pass IR printing filter, stderr goes through it.
_CAPTURE: CapturedStderr | None = None

#: The text of every buffer diagnostics may point into (name -> lines), for
#: the source line and caret under each diagnostic (llvm::SourceMgr's format).
_SOURCES: dict[str, list[str]] = {}


def _write_err(lines: list[str] | str) -> None:
    if isinstance(lines, str):
        lines = [lines]
    text = "".join(line + "\n" for line in lines)
    if _CAPTURE is not None:
        _CAPTURE.write(text)
        return
    sys.stderr.write(text)
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


def _try_add_upstream(
    ctx: ir.Context, element: str, anchor: str = "builtin.module"
) -> tuple[str | None, list[str]]:
    """(None, _) if `element` is a valid upstream pipeline element, else (error, stderr)."""
    from mlir import passmanager

    pm = passmanager.PassManager(anchor, ctx)
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


def source_excerpt(file: str | None, line: int | None, col: int | None) -> str | None:
    """The source line and a caret under `col`, as llvm::SourceMgr prints them.

    Tabs expand to 8-column stops; None for a location outside the input.
    """
    lines = _SOURCES.get(file) if file is not None else None
    if lines is None or line is None or col is None or not 1 <= line <= len(lines) or col < 1:
        return None
    raw = lines[line - 1].rstrip("\r")
    if not raw.isascii():
        return raw  # like llvm::SourceMgr: no caret where columns are not characters
    expanded, caret_at = "", None
    for i, ch in enumerate(raw):
        if i == col - 1:
            caret_at = len(expanded)
        expanded += " " * (8 - len(expanded) % 8) if ch == "\t" else ch
    if caret_at is None:
        caret_at = len(expanded) + (col - 1 - len(raw))
    return f"{expanded}\n{' ' * caret_at}^"


def render(d: Diag) -> str:
    """mlir-opt's diagnostic: `file:line:col: severity: message`, the source line and
    a caret, then each note (its source line only where its location differs
    from the one before, as MLIR's SourceMgr handler does)."""

    def one(x: Diag, with_source: bool) -> str:
        where = f"{x.file}:{x.line}:{x.col}: " if x.file is not None else "<unknown>:0: "
        text = f"{where}{x.severity}: {x.message}"
        excerpt = source_excerpt(x.file, x.line, x.col) if with_source else None
        return text if excerpt is None else f"{text}\n{excerpt}"

    parts = [one(d, True)]
    previous = (d.file, d.line, d.col)
    for note in d.notes:
        here = (note.file, note.line, note.col)
        parts.append(one(note, here != previous))
        previous = here
    return "\n".join(parts)


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


def _leaf_pass_names() -> dict[str, bool]:
    """Flag names of the project passes that pipeline passes expand into."""
    from ..transforms.passes import Pass, all_passes
    from ..transforms.pipeline import expand

    names: dict[str, bool] = {}
    for cls in all_passes().values():
        try:
            leaves = expand([cls()])
        except Exception:  # a pass that needs options: its leaves are named alike
            continue
        names.update((e.name, True) for e in leaves if isinstance(e, Pass))
    return names


#: --mlir-diagnostic-verbosity-level: the lowest severity each level shows.
_SEVERITY_RANK = {"error": 0, "errors": 0, "warning": 1, "warnings": 1, "remark": 2,
                  "remarks": 2, "note": 2}

_REPRODUCER_WARNING = "ignoring unknown external resources for 'mlir_reproducer'"

_FOUND_N = "source must contain a single top-level operation, found:"


def _with_op_note(diag: Diag) -> Diag:
    """An error a project pass reports at an op gets MLIR's note printing the op
    (generic form), as Operation::emitError attaches it."""
    from ..transforms.diagnostics import Diag, reporting_op

    op = reporting_op()
    if op is None or diag.severity != "error":
        return diag
    if any(n.message.startswith(_SEE_OP_NOTE) for n in diag.notes):
        return diag
    try:
        text = op.operation.get_asm(print_generic_op_form=True, assume_verified=True)
    except Exception:  # never fail while reporting
        return diag
    if "\n" in text:
        text = "\n" + text
    note = Diag("note", f"{_SEE_OP_NOTE} {text}", diag.file, diag.line, diag.col)
    return dataclasses.replace(diag, notes=[*diag.notes, note])


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
        diag = _with_op_note(diag)
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
        if self.opts.disable_threading:
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

    def make_runner(
        self, ctx: ir.Context, anchor: str = "builtin.module"
    ) -> PassManagerRunner | None:
        from ..transforms.pipeline import PassManagerRunner, PipelineError, parse_pipeline

        if self.opts.pass_pipeline is not None:
            try:
                elements = parse_pipeline(self.opts.pass_pipeline)
            except PipelineError as err:
                raise ToolError(f"{TOOL}: error: {err}") from None
        else:
            elements = [self._resolve_pass_flag(ctx, p, anchor) for p in self.opts.passes]
        from ..transforms.passes import Pass

        for e in elements:
            if isinstance(e, Pass) and anchor != "builtin.module":
                raise ToolError(
                    f"{TOOL}: error: pass '{e.name}' runs on a 'builtin.module'; the input's "
                    f"root is a '{anchor}' (--no-implicit-module)"
                )
        self.pipeline_text = "builtin.module(" + ", ".join(
            e.pipeline_text() if isinstance(e, Pass) else e for e in elements
        ) + ")"
        selection = self._selection(ctx)
        if self.opts.dump_pass_pipeline and not elements and anchor == "builtin.module":
            _write_err(dump_pipeline("builtin.module()"))
        if not elements:
            return None
        runner = None
        with _captured_stderr_fd() as captured:
            try:
                runner = PassManagerRunner(
                    self._with_markers(elements),
                    ctx,
                    anchor=anchor,
                    print_debuginfo=self.opts.print_debuginfo,
                    verify_each=self.opts.verify_each,
                    timing=self.opts.timing,
                )
            except PipelineError as err:
                error = str(err)
        if runner is None:
            extra = _llvm_message(captured)
            if extra and extra not in error:
                error += f": {extra}"
            raise ToolError(f"{TOOL}: error: {error}")
        self._configure(runner.pm, selection)
        return runner

    # -- IR printing, statistics, pipeline dump --------------------------------

    def _selection(self, ctx: ir.Context) -> Selection | None:
        """What --mlir-print-ir-* asks for; validates the pass names given."""
        o = self.opts
        for flag, names in (("before", o.print_ir_before), ("after", o.print_ir_after)):
            for name in names:
                if not self._is_pass_name(ctx, name):
                    raise ToolError(
                        f"{TOOL}: for the --mlir-print-ir-{flag} option: "
                        f"Cannot find option named '{name}'!"
                    )
        if not (o.print_ir_before_all or o.print_ir_after_all or o.print_ir_before
                or o.print_ir_after or o.print_ir_after_failure):
            return None
        if o.print_ir_module_scope and not o.disable_threading:
            raise ToolError(
                "<unknown>:0: error: IR print for module scope can't be setup on a "
                "pass-manager without disabling multi-threading first.\n"
            )
        return Selection(
            before_all=o.print_ir_before_all,
            after_all=o.print_ir_after_all,
            before=frozenset(o.print_ir_before),
            after=frozenset(o.print_ir_after),
            after_failure=o.print_ir_after_failure,
        )

    @staticmethod
    def _is_pass_name(ctx: ir.Context, name: str) -> bool:
        from ..transforms.passes import lookup

        if lookup(name) is not None or _leaf_pass_names().get(name):
            return True
        message, _ = _try_add_upstream(ctx, name)
        return message is None or "does not refer to a registered pass" not in message

    def _asm_options(self) -> tuple:
        o = self.opts
        return (
            ("enable_debug_info", o.print_debuginfo),
            ("pretty_debug_info", o.pretty_debuginfo),
            ("print_generic_op_form", o.print_generic),
            ("large_elements_limit", o.elide_elements_limit),
            ("assume_verified", True),
        )

    def _with_markers(self, elements: list) -> list:
        """Put PrintIR markers around project pipeline passes named by a print filter."""
        from ..transforms.passes import Pass
        from .ir_printing import class_name, print_ir_pass

        o = self.opts
        out: list = []
        for e in elements:
            if isinstance(e, Pass) and e.expand() is not None:
                scope = o.print_ir_module_scope
                if e.name in o.print_ir_before:
                    header = f"IR Dump Before {class_name(e)} ({e.name})"
                    out.append(print_ir_pass(header, scope, self._asm_options()))
                out.append(e)
                if e.name in o.print_ir_after:
                    header = f"IR Dump After {class_name(e)} ({e.name})"
                    out.append(print_ir_pass(header, scope, self._asm_options()))
            else:
                out.append(e)
        return out

    def _configure(self, pm: Any, selection: Selection | None) -> None:
        from mlir import passmanager

        o = self.opts
        self.capture_selection = None
        if selection is not None:
            filtered = bool(selection.before or selection.after)
            pm.enable_ir_printing(
                print_before_all=selection.before_all or bool(selection.before),
                print_after_all=selection.after_all
                or bool(selection.after)
                or selection.after_failure,
                print_module_scope=o.print_ir_module_scope,
                print_after_change=o.print_ir_after_change,
                print_after_failure=o.print_ir_after_failure,
                large_elements_limit=o.elide_elements_limit,
                enable_debug_info=o.print_debuginfo,
                print_generic_op_form=o.print_generic,
            )
            if filtered:
                self.capture_selection = selection
        if o.pass_statistics:
            mode = passmanager.PassDisplayMode.LIST
            if o.pass_statistics_display == "pipeline":
                mode = passmanager.PassDisplayMode.PIPELINE
            pm.enable_statistics(mode)
        if o.dump_pass_pipeline and not self._defers_dump():
            _write_err(dump_pipeline(str(pm)))

    def runner_for_root(self, ctx: ir.Context, runner: Any, op: Any) -> Any:
        """--no-implicit-module with pass flags: the passes run on the root op, whatever
        it is (mlir-opt anchors its pass manager there); a --pass-pipeline names
        its own anchor."""
        name = op.operation.name  # (an OpView's `name` may be its symbol)
        if (
            runner is None
            or not self.opts.no_implicit_module
            or self.opts.pass_pipeline is not None
            or name == "builtin.module"
        ):
            return runner
        cache = self.__dict__.setdefault("_root_runners", {})
        if name not in cache:
            cache[name] = self.make_runner(ctx, anchor=name)
        return cache[name]

    def _defers_dump(self) -> bool:
        """Pass flags with --no-implicit-module: the root op sets the anchor (per chunk)."""
        return self.opts.no_implicit_module and self.opts.pass_pipeline is None

    def _resolve_pass_flag(self, ctx: ir.Context, p: PassFlag, anchor: str = "builtin.module") -> Any:
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
        message, captured = _try_add_upstream(ctx, element, anchor)
        if message is None:
            return element
        nested = re.search(r"restricted to '([^']+)'", message)
        if nested is not None:
            # Like mlir-opt's implicit nesting: a pass restricted to an op
            # (func.func, gpu.module) runs on those ops inside the module.
            element = f"{nested.group(1)}({element})"
            message, captured = _try_add_upstream(ctx, element, anchor)
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
            if op.name == "builtin.module" or self.opts.no_implicit_module:
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
        if self.opts.no_implicit_module:
            return None, direct, []
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
            if _SEVERITY_RANK.get(d.severity, 0) > _SEVERITY_RANK[opts.verbosity]:
                return
            if opts.run_reproducer and d.message.startswith(_REPRODUCER_WARNING):
                return  # the resource --run-reproducer reads
            d = _fix_diag(d, name, shifts)
            if verifier is not None:
                # mlir-opt does not attach the op to diagnostics when verifying.
                _write_err(verifier.process(_without_op_notes(d)))
            else:
                _write_err(render(d if opts.print_op_on_diagnostic else _without_op_notes(d)))

        set_stage(f"parsing '{name}'")
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
        runner = self.runner_for_root(ctx, runner, op)
        if runner is not None and opts.dump_pass_pipeline and self._defers_dump():
            dumped = self.__dict__.setdefault("_dumped", set())
            if id(runner) not in dumped:
                dumped.add(id(runner))
                _write_err(dump_pipeline(str(runner.pm)))
        before = op.get_asm() if runner is not None and opts.crash_reproducer else None
        try:
            if runner is not None:
                set_stage(f"running the pass pipeline on '{name}'")
                sys.stderr.flush()  # IR printing writes to fd 2 from C++
                self._run_passes(runner, op)
                # The pass manager's verifier cannot see into autodiff ops.
                if not dialects.verify(op, allow_unregistered=opts.allow_unregistered):
                    return "", False, False
        except ir.MLIRError:
            self._reproducer(op, before, report)
            return "", False, False  # the diagnostics went through `report`
        except InternalError as err:
            _write_err(self._internal_error(err))
            self._reproducer(op, before, report, err.pass_name)
            return "", False, True
        finally:
            self.router.target = previous
        set_stage(f"printing the result for '{name}'")
        if opts.emit_bytecode:
            import io

            buffer = io.BytesIO()
            op.write_bytecode(buffer)
            return buffer.getvalue(), True, False
        output = op.get_asm(
            enable_debug_info=opts.print_debuginfo,
            pretty_debug_info=opts.pretty_debuginfo,
            print_generic_op_form=opts.print_generic,
            use_local_scope=opts.print_local_scope,
            large_elements_limit=opts.elide_elements_limit,
            assume_verified=True,  # verified by the parser and after each pass
        )
        return output + "\n", True, False

    def _run_passes(self, runner: PassManagerRunner, op: Any) -> None:
        global _CAPTURE
        selection = getattr(self, "capture_selection", None)
        if selection is None:
            runner.run(op)
            return
        with CapturedStderr(selection) as capture:
            _CAPTURE = capture
            try:
                runner.run(op)
            finally:
                _CAPTURE = None

    def _reproducer(
        self, op: Any, before: str | None, report: Callable, pass_name: str | None = None
    ) -> None:
        """--mlir-pass-pipeline-crash-reproducer: the input of the failed pipeline and
        the pipeline, in the file mlir-opt writes (rerun with --run-reproducer)."""
        from ..transforms.diagnostics import Diag, _file_location

        path = self.opts.crash_reproducer
        if path is None or before is None:
            return
        pipeline = self.pipeline_text.replace("\\", "\\\\").replace('"', '\\"')
        text = (
            f"{before}\n{{-#\n  external_resources: {{\n    mlir_reproducer: {{\n"
            f'      pipeline: "{pipeline}",\n'
            f"      disable_threading: {str(self.opts.disable_threading).lower()},\n"
            f"      verify_each: {str(self.opts.verify_each).lower()}\n"
            "    }\n  }\n#-}\n"
        )
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            where = f"reproducer generated at `{path}`"
        except OSError as err:
            where = f"could not write reproducer to `{path}`: {err.strerror}"
        file, line, col = _file_location(op.location)
        failed = f" while executing `{pass_name}`" if pass_name else ""
        report(
            Diag(
                "error",
                "Failures have been detected while processing an MLIR pass pipeline",
                file,
                line,
                col,
                [Diag("note", f"Pipeline failed{failed}: {where}", file, line, col)],
            )
        )

    def _internal_error(self, err: Exception) -> str:
        if os.environ.get(TRACEBACK_ENV):
            import traceback

            cause = getattr(err, "error", err)
            traceback.print_exception(type(cause), cause, cause.__traceback__)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"{TOOL}: error: {first} (set {TRACEBACK_ENV}=1 for the traceback)"

    # -- the whole run -----------------------------------------------------------

    def _bytecode_as_text(self, data: bytes, name: str) -> str:
        """MLIR bytecode input (as mlir-opt reads it), as text with its locations."""
        from mlir import ir

        ctx = ir.Context()
        ctx.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(data, ctx)
        except Exception as err:
            diags = getattr(err, "error_diagnostics", None) or []
            first = diags[0].message if diags else "malformed bytecode"
            raise ToolError(f"{name}:0:0: error: invalid MLIR bytecode: {first}") from None
        return module.operation.get_asm(enable_debug_info=True, assume_verified=True)

    def _use_reproducer(self, text: str, name: str) -> None:
        """--run-reproducer: take the pipeline and its settings from the input."""
        m = re.search(
            r'mlir_reproducer\s*:\s*\{(?P<body>(?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}', text
        )
        pipeline = m and re.search(r'pipeline\s*:\s*"((?:[^"\\]|\\.)*)"', m["body"])
        if not pipeline:
            raise ToolError(
                f"{name}:1:1: error: --run-reproducer: the input has no "
                "'mlir_reproducer' pipeline in its external resources"
            )
        if self.opts.passes:
            raise ToolError(f"{TOOL}: error: --run-reproducer takes no pass flags")
        self.opts.pass_pipeline = re.sub(r"\\(.)", r"\1", pipeline.group(1))
        for key in ("disable_threading", "verify_each"):
            flag = re.search(rf"{key}\s*:\s*(true|false)", m["body"])
            if flag:
                value = flag.group(1) == "true"
                if key == "disable_threading":
                    self.opts.disable_threading = self.opts.disable_threading or value
                else:
                    self.opts.verify_each = value

    def run(self) -> int:
        try:
            data, name = read_bytes(self.opts.input)
            set_stage(f"parsing '{name}'")
            if data.startswith(BYTECODE_MAGIC):
                text = self._bytecode_as_text(data, name)
            else:
                text = decode_input(data, name)
        except ToolError as err:
            message = str(err)
            raise ToolError(
                f"{TOOL}: {message}" if message.startswith("error:") else message
            ) from None
        if self.opts.run_reproducer:
            self._use_reproducer(text, name)
        ctx = self.make_context()
        runner = self.make_runner(ctx)
        # Like mlir-opt, one verifier sees the whole file: expectations are
        # matched by original line numbers, and the ones never produced are
        # reported after every chunk ran.
        verifier = None
        if self.opts.verify:
            verifier = DiagnosticVerifier(
                text, name, only_expected=self.opts.verify == "only-expected"
            )
            _write_err(verifier.initial_errors())
        _SOURCES[name] = text.split("\n")
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
        if self.opts.emit_bytecode:
            data = [o if isinstance(o, bytes) else o.encode() for o in outputs]
            result_bytes = (marker + "\n").encode().join(data) if marker else data[0]
        else:
            result = (marker + "\n").join(outputs) if marker else outputs[0]
            result_bytes = result.encode("utf-8")
        if self.opts.output == "-":
            if self.opts.emit_bytecode:
                sys.stdout.flush()
                binary = getattr(sys.stdout, "buffer", None)
                if binary is None:
                    raise ToolError(f"{TOOL}: error: stdout takes no bytes; use -o <file>")
                binary.write(result_bytes)
            else:
                sys.stdout.write(result)
            sys.stdout.flush()
        elif ok:  # like mlir-opt, a failed run leaves no output file behind
            try:
                with open(self.opts.output, "wb") as f:
                    f.write(result_bytes)
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
    if opts.help or opts.help_hidden:
        sys.stdout.write(HELP + (HIDDEN_HELP if opts.help_hidden else ""))
        return 0
    if opts.show_dialects:
        sys.stdout.write(show_dialects())
        return 0
    if opts.version:
        sys.stdout.write(version())
        return 0
    if opts.list_passes:
        sys.stdout.write(list_passes())
        return 0
    if opts.print_machine:
        from ..transforms.cpu.machine import read_machine
        from ..transforms.cpu.parameters import machine_report

        try:
            machine = read_machine()
        except ValueError as err:
            raise ToolError(f"{TOOL}: error: {err}") from None
        sys.stdout.write(machine_report(machine))
        return 0
    return _call_with_big_stack(OptRun(opts).run)


def main(argv: list[str] | None = None) -> int:
    """Run autodiff-opt on `argv` (default: sys.argv[1:]) and return the exit code.

    The console script calls `sys.exit(main())`; it runs supervised (see
    supervisor.py): a fatal signal in MLIR becomes one line and exit code 1.
    """
    if argv is None:
        return supervised(TOOL, lambda: guarded_main(TOOL, _main, argv))
    return guarded_main(TOOL, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
