"""Tracebacks that show the user's frames, not the library's (jax's traceback filtering).

A shape error raised while tracing used to show 16 frames, 13 of them inside
mlir_autodiff. The public entry points (`jit`'d calls, `grad` & co. called
eagerly) are API boundaries: an exception leaving the outermost one has the
package's frames removed from its traceback (the boundary's own frame, where
it is re-raised, is the one that remains) and a note saying so.
`AUTODIFF_TRACEBACK=1` keeps every frame.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
import types
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_ROOTS: tuple[str, ...] = ()
_STATE = threading.local()
NOTE = ("(mlir_autodiff's internal frames are hidden from this traceback; set "
        "AUTODIFF_TRACEBACK=1 to see them)")


def _roots() -> tuple[str, ...]:
    """Directories whose files are the library: the front end, the compiler packages."""
    global _ROOTS
    if not _ROOTS:
        # The compiler packages are mapped from other folders of the tree (pyproject):
        # ask where they are without importing them here.
        roots = [os.path.dirname(os.path.abspath(__file__))]
        for name in ("mlir_autodiff.dialects", "mlir_autodiff.transforms"):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                roots += [os.path.abspath(p) for p in spec.submodule_search_locations]
        _ROOTS = tuple(r + os.sep for r in roots)
    return _ROOTS


def _internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_roots())


def filter_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without the library's frames."""
    kept = []
    while tb is not None:
        if not _internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def api_boundary(fn: F) -> F:
    """Mark `fn` as a public entry point (see the module doc)."""

    @functools.wraps(fn)
    def boundary(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_STATE, "depth", 0)
        _STATE.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if depth or os.environ.get("AUTODIFF_TRACEBACK") == "1":
                raise
            filtered = filter_traceback(err.__traceback__)
            if NOTE not in getattr(err, "__notes__", ()):
                err.add_note(NOTE)
            raise err.with_traceback(filtered) from err.__cause__
        finally:
            _STATE.depth = depth

    return boundary  # type: ignore[return-value]
