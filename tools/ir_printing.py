"""autodiff-opt's IR printing around passes, as mlir-opt's --mlir-print-ir-* flags.

MLIR's own IR printer instrumentation does the printing, for upstream passes
and the project's Python passes alike (they run as external passes in the same
pass manager, under their flag names). The bindings' `enable_ir_printing` has
no per-pass filter, so `--mlir-print-ir-before=<pass>` / `-after=<pass>` print
around every pass into a temporary file standing in for stderr, and
`DumpFilter` passes on the dumps of the selected passes only, in order and
interleaved with the diagnostics the run emits.

A project pass that stands for a pipeline (`autodiff-vjp` expands into
several passes) is selected by `PrintIR` marker passes put around its
expansion: they print the module under the pipeline's own name.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

#: `// -----// IR Dump Before CSE (cse) ('func.func' operation: @f) //----- //`
HEADER_RE = re.compile(
    r"^// -----// IR Dump (?P<when>Before|After) (?P<name>.*?)(?P<failed> Failed)? "
    r"\((?P<arg>[^()]*)\)(?: \('[^']*' operation(?:: @\S+)?\))? //----- //$"
)

#: Flag name of the marker passes (never printed as passes of their own).
MARKER = "autodiff-print-ir"


@dataclasses.dataclass
class Selection:
    """Which dumps the user asked for (mlir-opt's meaning of each flag)."""

    before_all: bool = False
    after_all: bool = False
    before: frozenset[str] = frozenset()
    after: frozenset[str] = frozenset()
    after_failure: bool = False

    def show(self, when: str, arg: str, failed: bool) -> bool:
        if arg == MARKER:
            return False
        if when == "Before":
            return self.before_all or arg in self.before
        if failed and self.after_failure:
            return True
        if self.after_failure and not failed:
            return False  # --mlir-print-ir-after-failure: only failures are printed
        return self.after_all or arg in self.after


class DumpFilter:
    """Line filter over MLIR's IR printer output: keeps the selected dumps only.

    A dump is its header line, the printed op and a blank line; anything
    else (statistics, timing, a pass's own output) is kept as it comes.
    """

    def __init__(self, selection: Selection, out: Callable[[str], None]):
        self.selection = selection
        self.out = out
        self.skipping = False  # inside a dump that is not shown
        self.after_skipped = False  # blank lines right after such a dump
        self.in_resources = False
        self.partial = ""

    def feed(self, text: str) -> None:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        self.out("".join(line + "\n" for line in lines if self._keep(line)))

    def finish(self) -> None:
        if self.partial:
            rest, self.partial = self.partial, ""
            if self._keep(rest):
                self.out(rest)

    def _keep(self, line: str) -> bool:
        m = HEADER_RE.match(line)
        if m is not None:
            shown = self.selection.show(m["when"], m["arg"], bool(m["failed"]))
            self.skipping, self.after_skipped = not shown, False
            return shown
        if self.skipping:
            if self.in_resources:
                self.in_resources = not line.startswith("#-}")
            elif line == "":
                self.skipping, self.after_skipped = False, True
            return False
        if self.after_skipped:
            if line == "":
                return False
            if line.startswith("{-#"):  # the module's resources, printed after it
                self.skipping, self.in_resources = True, True
                return False
            self.after_skipped = False
        return True


class CapturedStderr:
    """Redirects fd 2 to a file while passes run; `DumpFilter` forwards it.

    `write` (used for diagnostics while active) first forwards what MLIR
    printed so far, so dumps and diagnostics keep their order.
    """

    def __init__(self, selection: Selection):
        self.selection = selection
        self._saved: int | None = None
        self._tmp: Any = None
        self._offset = 0
        self.filter: DumpFilter | None = None
        # Diagnostics of passes running on several threads arrive concurrently.
        self._lock = threading.Lock()

    def __enter__(self) -> CapturedStderr:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        os.dup2(self._tmp.fileno(), 2)
        self.filter = DumpFilter(self.selection, self._write_real)
        return self

    def _write_real(self, text: str) -> None:
        if text and self._saved is not None:
            data = text.encode("utf-8")
            while data:
                data = data[os.write(self._saved, data) :]

    def drain(self) -> None:
        assert self._tmp is not None and self.filter is not None
        self._tmp.seek(self._offset)
        data = self._tmp.read()
        self._offset += len(data)
        self._tmp.seek(0, os.SEEK_END)
        if data:
            self.filter.feed(data.decode("utf-8", "replace"))

    def write(self, text: str) -> None:
        with self._lock:
            sys.stderr.flush()
            self.drain()
            self._write_real(text)

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        with self._lock:
            self.drain()
        assert self.filter is not None and self._saved is not None
        self.filter.finish()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        self._tmp.close()


_PRINT_IR: Any = None


def print_ir_pass(header: str, module_scope: bool, asm_options: tuple) -> Any:
    """A marker pass printing the module under `header` (MLIR's dump format)."""
    global _PRINT_IR
    if _PRINT_IR is None:
        from ..transforms.passes import Pass

        @dataclasses.dataclass(frozen=True)
        class PrintIR(Pass):
            name = MARKER
            summary = "Print the IR (marker put around a pass that is a pipeline)"

            header: str = ""
            module_scope: bool = False
            asm_options: tuple = ()

            def run(self, module: Any) -> None:
                text = module.get_asm(**dict(self.asm_options))
                scope = " ('builtin.module' operation)" if self.module_scope else ""
                sys.stderr.flush()
                data = f"// -----// {self.header}{scope} //----- //\n{text}\n\n".encode()
                while data:
                    data = data[os.write(2, data) :]

        _PRINT_IR = PrintIR
    return _PRINT_IR(header, module_scope, asm_options)


def _split_pipeline(text: str) -> list[tuple[str, str]]:
    """Top-level elements of a textual pipeline: (name{options}, nested or '')."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in ", \t\n":
            i += 1
        start = i
        while i < n and text[i] not in "{(,":
            i += 1
        if i < n and text[i] == "{":
            depth, quote = 0, None
            while i < n:
                ch = text[i]
                if quote:
                    quote = None if ch == quote else quote
                elif ch in "\"'":
                    quote = ch
                elif ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        head = text[start:i].strip()
        nested = ""
        if i < n and text[i] == "(":
            depth, j = 0, i
            while j < n:
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            nested, i = text[i + 1 : j], j + 1
            head = head or ""
            out.append((head, nested if nested else "\0"))
        elif head:
            out.append((head, ""))
    return out


def _pretty(name: str, nested: str, indent: int) -> list[str]:
    pad = "  " * indent
    if not nested:
        return [pad + name]
    inner = [] if nested == "\0" else _split_pipeline(nested)
    inner = [(h, sub) for h, sub in inner if h != MARKER]
    lines = [f"{pad}{name}("]
    body: list[str] = []
    for k, (h, sub) in enumerate(inner):
        chunk = _pretty(h, sub, indent + 1)
        if k < len(inner) - 1:
            chunk[-1] += ","
        body.extend(chunk)
    lines.extend(body or [""])
    lines.append(f"{pad})")
    return lines


def dump_pipeline(text: str) -> list[str]:
    """mlir-opt's --dump-pass-pipeline of the pass manager printed as `text`."""
    top = _split_pipeline(text.strip())
    name, nested = top[0] if top else ("builtin.module", "\0")
    count = len([h for h, _ in _split_pipeline(nested) if h != MARKER]) if nested != "\0" else 0
    return [f"Pass Manager with {count} passes:", *_pretty(name, nested or "\0", 0), ""]


def class_name(p: Any) -> str:
    """The name MLIR prints for a project pass (the external pass's name)."""
    return type(p).__name__
