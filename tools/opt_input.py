"""Source-text handling of autodiff-opt that needs no MLIR: splitting, nesting, wrapping.

* `split_input` cuts a file at `// -----` markers (mlir-opt's --split-input-file)
  and pads each chunk with newlines so diagnostics keep the original line numbers.
* `nesting_error` rejects pathologically nested input before MLIR's recursive
  parser overflows the stack (a crash is never an acceptable answer to input).
* `wrap_in_module` builds the implicit `module { ... }` that mlir-opt puts
  around several top-level ops, without moving any line: the `module {` goes at
  the end of the line before the first op (or into its leading blanks), the
  closing brace after the last op.
"""

from __future__ import annotations

import dataclasses
import re

SPLIT_MARKER = "// -----"

#: Deepest bracket nesting accepted. Real IR stays far below; MLIR's parser
#: recurses per level, and this bound keeps it well inside the driver's stack.
MAX_NESTING = 2000


@dataclasses.dataclass
class Chunk:
    """One piece of a (split) input; `text` is padded so line numbers match the file."""

    text: str
    first_line: int


def split_input(text: str, marker: str | None) -> list[Chunk]:
    """The chunks of `text` separated by `marker` (None: no split).

    Like mlir-opt, every occurrence of the marker splits, wherever it is on
    its line; the rest of that line starts the next chunk.
    """
    if not marker:
        return [Chunk(text, 1)]
    chunks, start = [], 0
    while (found := text.find(marker, start)) >= 0:
        chunks.append(_padded(text, start, found))
        start = found + len(marker)
    chunks.append(_padded(text, start, len(text)))
    return chunks


def _padded(text: str, start: int, end: int) -> Chunk:
    newlines = text.count("\n", 0, start)
    return Chunk("\n" * newlines + text[start:end], newlines + 1)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


# Comments and strings are skipped; `->` is an arrow, not a closing bracket.
_BRACKET_TOKENS = re.compile(r'//[^\n]*|"(?:[^"\\\n]|\\.)*"|->|[(\[{<)\]}>]')


def nesting_error(text: str, limit: int = MAX_NESTING) -> int | None:
    """Offset at which bracket nesting first exceeds `limit`, or None."""
    depth = 0
    for m in _BRACKET_TOKENS.finditer(text):
        tok = m.group()
        if len(tok) != 1:
            continue
        if tok in "([{<":
            depth += 1
            if depth > limit:
                return m.start()
        elif depth > 0:
            depth -= 1
    return None


def comment_start(line: str) -> int:
    """Index of a `//` comment in `line` outside string literals (len(line) if none)."""
    in_string = False
    i = 0
    while i < len(line):
        ch = line[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif line.startswith("//", i):
            return i
        i += 1
    return len(line)


_TRAILER_RE = re.compile(r"^\s*(?:[#!][\w.$\-]+\s*=|\{-#)")


@dataclasses.dataclass
class ColumnShift:
    """Text of `width` characters was inserted on `line` before column `col`."""

    line: int
    col: int
    width: int

    def fix(self, line: int | None, col: int | None) -> int | None:
        if line == self.line and col is not None and col >= self.col + self.width:
            return col - self.width
        return col


def wrap_in_module(
    text: str,
    first: tuple[int, int] | None,
    last_line: int | None,
    module_loc: str,
) -> tuple[str, list[ColumnShift]]:
    """`text` inside `module { ... } <module_loc>`, every op keeping its line.

    `first` is the (line, col) where the first top-level op starts and
    `last_line` the line where the last one starts (None if unknown: then the
    module opens at the start of line 1). Top-level alias definitions after
    the ops (`#loc = ...`) and `{-# ... #-}` resources stay outside.
    """
    lines = text.split("\n")
    shifts: list[ColumnShift] = []
    opener = "module {"
    line_no, col = first if first is not None else (1, 1)
    if not 1 <= line_no <= len(lines):
        line_no, col = 1, 1
    current = lines[line_no - 1]
    prefix = current[: col - 1]
    if prefix.strip() == "" and len(prefix) >= len(opener):
        # Overwrite leading blanks: no column moves.
        lines[line_no - 1] = prefix[: -len(opener)] + opener + current[col - 1 :]
    elif prefix.strip() == "" and line_no > 1:
        # Open at the end of the previous line (before its comment, if any).
        prev = lines[line_no - 2]
        cut = comment_start(prev)
        sep = " " if prev[:cut].strip() else ""
        lines[line_no - 2] = prev[:cut] + sep + opener + " " + prev[cut:]
    else:
        lines[line_no - 1] = prefix + opener + current[col - 1 :]
        shifts.append(ColumnShift(line_no, col, len(opener)))

    closer = "} " + module_loc
    after = last_line if last_line is not None else len(lines)
    for index in range(max(after, line_no), len(lines)):
        if _TRAILER_RE.match(lines[index]):
            lines[index] = closer + " " + lines[index]
            shifts.append(ColumnShift(index + 1, 1, len(closer) + 1))
            break
    else:
        lines.append(closer)
    return "\n".join(lines), shifts
