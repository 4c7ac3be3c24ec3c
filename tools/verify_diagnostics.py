"""`--verify-diagnostics`: MLIR's expected-* comment checking, in Python.

The upstream bindings do not expose MLIR's `SourceMgrDiagnosticVerifierHandler`,
so this module re-implements its semantics (mlir/lib/IR/Diagnostics.cpp):

* A line containing `expected-(error|warning|note|remark)(-re)? @designator? {{text}}`
  (anywhere on the line, the `{{...}}` last on it) expects a diagnostic of that
  severity whose message contains `text`. Designators: `@+N` / `@-N` (line
  offsets), `@above` (the last line without an expectation), `@below` (the
  next line without one), `@unknown` (a diagnostic without a file location).
* `-re`: the parts of `text` inside `{{...}}` are regular expressions, the
  rest is literal.
* A diagnostic (and each of its notes) is matched against the expectations on
  its line, first match wins (an expectation may absorb several identical
  diagnostics, as upstream). Same text but another severity is a "near miss".
* Unmatched diagnostics and expectations are errors; the run passes iff there
  are none.

Diagnostics are duck-typed (`severity`, `message`, `file`, `line`, `col`,
`notes`), e.g. `mlir_autodiff.transforms.diagnostics.Diag`; this module does
not import MLIR.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Protocol

_EXPECTED_RE = re.compile(
    r"expected-(error|note|remark|warning)(-re)? *(@([+-][0-9]+|above|below|unknown))? *"
    r"\{\{(.*)\}\}$"
)


class DiagLike(Protocol):
    severity: str
    message: str
    file: str | None
    line: int | None
    col: int | None
    notes: list


@dataclasses.dataclass
class Expectation:
    """One `expected-*` designator found in the source."""

    severity: str
    #: The line the diagnostic is expected on (1-based); None for `@unknown`.
    line: int | None
    #: Where the designator itself is written (for "was not produced").
    source_line: int
    source_col: int
    text: str
    regex: re.Pattern[str] | None = None
    matched: bool = False

    def matches(self, message: str) -> bool:
        if self.regex is not None:
            return self.regex.search(message) is not None
        return self.text in message


def _compile_expectation_regex(text: str) -> re.Pattern[str]:
    """`{{regex}}` blocks are regular expressions, everything else is literal.

    Raises ValueError with MLIR's wording on a malformed pattern.
    """
    pattern, rest = [], text
    while rest:
        start = rest.find("{{")
        if start < 0:
            pattern.append(re.escape(rest))
            break
        pattern.append(re.escape(rest[:start]))
        rest = rest[start + 2 :]
        end = rest.find("}}")
        if end < 0:
            raise ValueError("found start of regex with no end '}}'")
        block = rest[:end]
        try:
            re.compile(block)
        except re.error as err:
            raise ValueError(f"invalid regex: {err}") from None
        pattern.append(f"({block})")
        rest = rest[end + 2 :]
    return re.compile("".join(pattern))


def parse_expectations(text: str) -> tuple[list[Expectation], list[tuple[int, int, str]]]:
    """All expectations in `text`, and (line, col, message) for malformed ones."""
    expectations: list[Expectation] = []
    problems: list[tuple[int, int, str]] = []
    lines = text.split("\n")
    last_non_designator = 0  # 0-based index, as upstream
    pending_below: list[Expectation] = []
    for index, raw in enumerate(lines):
        m = _EXPECTED_RE.search(raw.rstrip())
        if m is None:
            for e in pending_below:
                e.line = index + 1
            pending_below.clear()
            last_non_designator = index
            continue
        severity, is_re, designator, body = m.group(1), m.group(2), m.group(4), m.group(5)
        record = Expectation(severity, index + 1, index + 1, m.start() + 1, body)
        if is_re:
            try:
                record.regex = _compile_expectation_regex(body)
            except ValueError as err:
                problems.append((index + 1, m.start() + 1, str(err)))
                continue
        if designator is not None:
            if designator[0] in "+-":
                offset = int(designator[1:])
                record.line = index + 1 + (offset if designator[0] == "+" else -offset)
            elif designator == "unknown":
                record.line = None
            elif designator == "above":
                record.line = last_non_designator + 1
            else:  # below: the next line without a designator; if none, the last line
                record.line = len(lines)
                pending_below.append(record)
        expectations.append(record)
    return expectations, problems


class DiagnosticVerifier:
    """Checks the diagnostics of one buffer against its expected-* comments.

    `process(diag)` returns the error lines to print for that diagnostic (an
    unexpected diagnostic or a near miss, printed as they happen, like
    mlir-opt); `finish()` returns the lines for expectations never produced.
    `failed` tells whether anything did not match.
    """

    def __init__(self, text: str, filename: str, *, only_expected: bool = False) -> None:
        self.filename = filename
        self.only_expected = only_expected
        self.expectations, problems = parse_expectations(text)
        self.failed = bool(problems)
        self._pending: list[str] = [
            f"{filename}:{line}:{col}: error: {msg}" for line, col, msg in problems
        ]

    def initial_errors(self) -> list[str]:
        """Errors found while reading the expectations (malformed regexes)."""
        out, self._pending = self._pending, []
        return out

    def process(self, diag: DiagLike) -> list[str]:
        out = self._process_one(diag)
        for note in diag.notes:
            out.extend(self._process_one(note))
        return out

    def _process_one(self, diag: DiagLike) -> list[str]:
        if diag.file is None:
            candidates = [e for e in self.expectations if e.line is None]
        elif diag.file == self.filename:
            candidates = [e for e in self.expectations if e.line == diag.line]
        else:
            candidates = []  # another buffer: nothing can be expected there
        near_miss: Expectation | None = None
        for e in candidates:
            if e.matches(diag.message):
                if e.severity == diag.severity:
                    e.matched = True
                    return []
                near_miss = e
        if self.only_expected:
            return []
        self.failed = True
        if near_miss is not None:
            where = f"{self.filename}:{near_miss.source_line}:{near_miss.source_col}: "
            message = (
                f"'{diag.severity}' diagnostic emitted when expecting a '{near_miss.severity}'"
            )
            return [f"{where}error: {message}"]
        return [f"{_where(diag)}error: unexpected {diag.severity}: {diag.message}"]

    def finish(self) -> list[str]:
        out = []
        for e in self.expectations:
            if not e.matched:
                self.failed = True
                out.append(
                    f"{self.filename}:{e.source_line}:{e.source_col}: error: "
                    f'expected {e.severity} "{e.text}" was not produced'
                )
        return out


def _where(diag: DiagLike) -> str:
    if diag.file is None:
        return "<unknown>:0: "
    return f"{diag.file}:{diag.line}:{diag.col}: "


def verify(text: str, filename: str, diags: Iterable[DiagLike]) -> tuple[bool, list[str]]:
    """One-shot check: (ok, error lines) for `diags` against the expectations in `text`."""
    v = DiagnosticVerifier(text, filename)
    lines = v.initial_errors()
    for d in diags:
        lines.extend(v.process(d))
    lines.extend(v.finish())
    return not v.failed, lines
