"""MLIR-shaped diagnostics for passes and drivers.

Passes report problems at the op at fault with `emit_error(op, message)`
(which goes through MLIR's diagnostic engine, so `--verify-diagnostics` and
every handler see it) and then raise `PassFailure`. Drivers collect
diagnostics with `DiagnosticCollector` and print them as
`file:line:col: error: message`.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mlir import ir


class PassFailure(Exception):
    """A pass failed after emitting its diagnostics through MLIR."""


#: The op an `emit_error` in progress reports at (per thread), for handlers
#: that attach it as MLIR's "see current operation" note does.
_REPORTING = threading.local()


def emit_error(where: ir.Operation | ir.OpView | ir.Location, message: str) -> None:
    if isinstance(where, ir.Location):
        where.emit_error(message)
        return
    _REPORTING.op = where
    try:
        where.location.emit_error(message)
    finally:
        _REPORTING.op = None


def reporting_op() -> ir.Operation | ir.OpView | None:
    """The op of the `emit_error(op, ...)` being handled now, if any."""
    return getattr(_REPORTING, "op", None)


def fail(where: ir.Operation | ir.OpView | ir.Location, message: str) -> PassFailure:
    """Emit `message` as an error at `where`; return the exception to raise."""
    emit_error(where, message)
    return PassFailure(message)


_SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}


@dataclasses.dataclass
class Diag:
    severity: str
    message: str
    file: str | None
    line: int | None
    col: int | None
    notes: list[Diag] = dataclasses.field(default_factory=list)

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.file else ""
        text = f"{where}{self.severity}: {self.message}"
        for note in self.notes:
            text += "\n" + note.render()
        return text


_LOC_RE = re.compile(r'^loc\("(?P<file>(?:[^"\\]|\\.)*)":(?P<line>\d+):(?P<col>\d+)')


def _file_location(loc: ir.Location) -> tuple[str | None, int | None, int | None]:
    """The first file:line:col inside `loc` (through fused, name and callsite locations)."""
    try:
        if loc.is_a_file():
            return loc.filename, loc.start_line, loc.start_col
        if loc.is_a_name():
            return _file_location(loc.child_loc)
        if loc.is_a_callsite():
            return _file_location(loc.callee)
        if loc.is_a_fused():
            for inner in loc.locations:
                found = _file_location(inner)
                if found[0] is not None:
                    return found
            return None, None, None
    except Exception:  # pragma: no cover - defensive: never fail while reporting
        pass
    m = _LOC_RE.match(str(loc))
    if m:
        return m["file"], int(m["line"]), int(m["col"])
    return None, None, None


def to_diag(d: ir.Diagnostic) -> Diag:
    file, line, col = _file_location(d.location)
    return Diag(
        _SEVERITY.get(d.severity, "error"),
        d.message,
        file,
        line,
        col,
        [to_diag(n) for n in d.notes],
    )


class DiagnosticCollector:
    """Collects every diagnostic emitted in a context while attached."""

    def __init__(self) -> None:
        self.diagnostics: list[Diag] = []

    def __call__(self, d: ir.Diagnostic) -> bool:
        self.diagnostics.append(to_diag(d))
        return True  # handled: do not print to stderr

    @property
    def errors(self) -> list[Diag]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def clear(self) -> None:
        self.diagnostics.clear()


@contextmanager
def collect_diagnostics(context: ir.Context) -> Iterator[DiagnosticCollector]:
    collector = DiagnosticCollector()
    handler = context.attach_diagnostic_handler(collector)
    try:
        yield collector
    finally:
        handler.detach()


def mlir_error_diags(err: ir.MLIRError) -> list[Diag]:
    """Diagnostics carried by an `MLIRError` raised from the bindings."""
    return [to_diag(d) for d in getattr(err, "error_diagnostics", [])]
