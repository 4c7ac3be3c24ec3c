"""What every command-line driver shares: no Python traceback ever reaches a user.

`guarded_main(main)` runs a driver's main function; expected failures raise
`ToolError` (message already MLIR-shaped) and exit 1; anything else is a bug,
reported on one line with how to see the traceback (AUTODIFF_TRACEBACK=1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class ToolError(Exception):
    """An expected failure: bad input, bad options, failed pass. Exit code 1."""


TRACEBACK_ENV = "AUTODIFF_TRACEBACK"


def guarded_main(tool: str, main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return main(argv)
    except ToolError as err:
        if str(err):
            sys.stderr.write(f"{err}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{tool}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    except SystemExit:
        raise
    except BaseException as err:  # a bug in the project, never the user's fault
        if os.environ.get(TRACEBACK_ENV):
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        sys.stderr.write(
            f"{tool}: internal error: {type(err).__name__}: {first} "
            f"(set {TRACEBACK_ENV}=1 for the traceback)\n"
        )
        return 1


def read_input(path: str) -> tuple[str, str]:
    """(text, buffer name) of an input file or '-' for stdin; ToolError if unreadable."""
    data, name = read_bytes(path)
    return decode_input(data, name), name


#: The first bytes of an MLIR bytecode file.
BYTECODE_MAGIC = b"ML\xefR"


def read_bytes(path: str) -> tuple[bytes, str]:
    """(contents, buffer name) of an input file or '-' for stdin; ToolError if unreadable."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
            name = "<stdin>"
        else:
            with open(path, "rb") as f:
                data = f.read()
            name = path
    except OSError as err:
        raise ToolError(f"error: could not open input file '{path}': {err.strerror}") from None
    return data, name


def decode_input(data: bytes, name: str) -> str:
    """The text of an input; ToolError if it is not UTF-8 MLIR text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ToolError(
            f"{name}:1:1: error: input is not valid UTF-8 text (byte {err.start})"
        ) from None
    if "\x00" in text:
        raise ToolError(f"{name}:1:1: error: input contains a NUL byte; expected MLIR text")
    return text


def tool_version(tool: str) -> str:
    """`<tool> (mlir-autodiff X.Y) on the upstream MLIR 22 Python bindings`, as --version prints."""
    try:
        from importlib.metadata import version as dist_version

        ours = dist_version("mlir-autodiff")
    except Exception:  # not installed as a distribution (a bare checkout)
        ours = "unknown"
    return f"{tool} (mlir-autodiff {ours}) on the upstream MLIR 22 Python bindings\n"
