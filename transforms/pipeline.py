"""Textual pass pipelines mixing the project's Python passes and upstream passes.

`parse_pipeline("builtin.module(autodiff-vjp, canonicalize, func.func(cse))")`
returns the list of elements; `build_pass_manager` turns it into one upstream
`PassManager` in which Python passes run as external passes, so IR printing,
timing and verification treat every pass alike.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from mlir import ir, passmanager

from .diagnostics import PassFailure
from .passes import Pass, PipelineElement, lookup


class PipelineError(ValueError):
    """A pipeline string that does not parse, or names an unknown pass or option."""


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced ')' or '}}' in pass pipeline '{text}'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise PipelineError(f"unbalanced '(' or '{{' in pass pipeline '{text}'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_options(text: str) -> dict[str, str]:
    """Parse MLIR pass options `key=value key2 key3="a b"` (space or comma separated)."""
    opts: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            break
        j = i
        while j < n and text[j] not in "= \t,":
            j += 1
        key = text[i:j]
        value = ""
        if j < n and text[j] == "=":
            j += 1
            if j < n and text[j] in "\"'":
                quote = text[j]
                end = text.find(quote, j + 1)
                if end < 0:
                    raise PipelineError(f"unterminated quote in pass options '{text}'")
                value, j = text[j + 1 : end], end + 1
            else:
                k = j
                depth = 0
                while k < n and (depth > 0 or text[k] not in " \t"):
                    if text[k] in "[{(":
                        depth += 1
                    elif text[k] in "]})":
                        depth -= 1
                    k += 1
                value, j = text[j:k], k
        if not key:
            raise PipelineError(f"malformed pass options '{text}'")
        opts[key] = value
        i = j
    return opts


def _split_element(elem: str) -> tuple[str, str | None, str | None]:
    """'name{opts}(nested)' -> (name, opts or None, nested or None)."""
    i = 0
    while i < len(elem) and elem[i] not in "{(":
        i += 1
    name, rest = elem[:i].strip(), elem[i:].strip()
    opts = nested = None
    if rest.startswith("{"):
        end = rest.rfind("}")
        opts, rest = rest[1:end], rest[end + 1 :].strip()
    if rest.startswith("("):
        if not rest.endswith(")"):
            raise PipelineError(f"malformed pass pipeline element '{elem}'")
        nested, rest = rest[1:-1], ""
    if rest or not name:
        raise PipelineError(f"malformed pass pipeline element '{elem}'")
    return name, opts, nested


def make_pass(name: str, options: dict[str, str] | None = None) -> Pass:
    cls = lookup(name)
    if cls is None:
        raise PipelineError(f"'{name}' does not refer to a registered pass")
    try:
        return cls.from_options(options or {})
    except ValueError as err:
        raise PipelineError(str(err)) from None


def parse_pipeline(text: str) -> list[PipelineElement]:
    """Parse a textual pipeline into Python passes and upstream element strings.

    Accepts `builtin.module(...)` or a bare comma-separated list. Upstream
    elements are validated later, when added to a pass manager.
    """
    text = text.strip()
    elements = _split_top_level(text)
    if len(elements) == 1:
        name, opts, nested = _split_element(elements[0])
        if name == "builtin.module" and opts is None:
            return parse_pipeline(nested or "")
    out: list[PipelineElement] = []
    for elem in elements:
        name, opts, nested = _split_element(elem)
        cls = lookup(name)
        if cls is not None:
            if nested is not None:
                raise PipelineError(f"pass '{name}' takes no nested pipeline")
            out.append(make_pass(name, parse_options(opts or "")))
        else:
            out.append(elem)
    return out


def expand(elements: Sequence[PipelineElement]) -> list[PipelineElement]:
    """Replace passes that stand for pipelines by their elements, recursively."""
    out: list[PipelineElement] = []
    for e in elements:
        sub = e.expand() if isinstance(e, Pass) else None
        if sub is None:
            out.append(e)
        else:
            out.extend(expand(sub))
    return out


@dataclasses.dataclass
class _Crash:
    """Holds an unexpected exception raised inside a Python pass callback."""

    error: BaseException | None = None
    pass_name: str = ""


def _callback(p: Pass, crash: _Crash):
    def run(op: ir.Operation, pass_: Any) -> None:
        if crash.error is not None:
            pass_.signal_pass_failure()
            return
        try:
            # A pass builds IR in the op's context, whatever context the caller
            # has active (none, when a pipeline runs on a module held by an object).
            with op.context:
                p.run(op)
        except PassFailure:
            pass_.signal_pass_failure()
        except Exception as err:
            # A pass may trip over a malformed autodiff op (one built by an earlier
            # pass or by hand): that is the op's error, named at its location.
            if not _autodiff_ops_verify(op):
                pass_.signal_pass_failure()
                return
            crash.error, crash.pass_name = err, p.name
            pass_.signal_pass_failure()
        except BaseException as err:  # a bug: keep it for the driver to report
            crash.error, crash.pass_name = err, p.name
            pass_.signal_pass_failure()

    run.__name__ = type(p).__name__
    return run


def _autodiff_ops_verify(op: ir.Operation) -> bool:
    """Whether the autodiff ops under `op` are well formed (errors emitted at those that are not)."""
    from ..dialects.verify import verify

    try:
        with op.context:
            return verify(op, allow_unregistered=True)
    except Exception:  # the IR is too broken to check: report the pass's own error
        return True


class InternalError(RuntimeError):
    """A Python pass raised an unexpected exception (a bug in the project)."""

    def __init__(self, pass_name: str, error: BaseException):
        super().__init__(f"internal error in pass '{pass_name}': {type(error).__name__}: {error}")
        self.pass_name = pass_name
        self.error = error


class PassManagerRunner:
    """An upstream PassManager built from mixed elements, with crash capture."""

    def __init__(
        self,
        elements: Sequence[PipelineElement],
        context: ir.Context,
        *,
        print_ir_after_all: bool = False,
        print_debuginfo: bool = False,
        verify_each: bool = True,
        timing: bool = False,
        anchor: str = "builtin.module",
    ):
        self._crash = _Crash()
        self.pm = passmanager.PassManager(anchor, context)
        self.pm.enable_verifier(verify_each)
        if print_ir_after_all:
            self.pm.enable_ir_printing(
                print_after_all=True, print_module_scope=True, enable_debug_info=print_debuginfo
            )
        if timing:
            self.pm.enable_timing()
        for e in expand(elements):
            if isinstance(e, Pass) and anchor != "builtin.module":
                raise PipelineError(
                    f"pass '{e.name}' runs on a 'builtin.module', not on '{anchor}'"
                )
            if isinstance(e, Pass):
                self.pm.add(
                    _callback(e, self._crash),
                    type(e).__name__,
                    e.name,
                    e.summary,
                )
            else:
                try:
                    self.pm.add(e)
                except ValueError as err:
                    raise PipelineError(_clean_pipeline_error(str(err), e)) from None

    def run(self, module: ir.Operation) -> None:
        """Run; raises ir.MLIRError on pass failure, InternalError on a crash."""
        self._crash.error = None
        try:
            self.pm.run(module)
        finally:
            if self._crash.error is not None:
                raise InternalError(self._crash.pass_name, self._crash.error)


def _clean_pipeline_error(message: str, element: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln.split("error:", 1)[1].strip()
    # option errors: "<Pass-Options-Parser>: no such option foo" / "failed to add ..."
    for ln in lines:
        if ln.startswith("<Pass-Options-Parser>:"):
            return f"invalid options for pass '{element}': {ln.split(':', 1)[1].strip()}"
    return lines[0] if lines else f"invalid pass pipeline element '{element}'"


#: "1": the library's pipelines (`run_pipeline`: jit, export, lowering) verify the IR
#: after every pass; otherwise once, at the end (the test suite sets it).
VERIFY_EACH_ENV = "AUTODIFF_VERIFY_EACH"


def verify_each_default() -> bool:
    """Whether `run_pipeline` verifies after every pass (`VERIFY_EACH_ENV` is "1")."""
    return os.environ.get(VERIFY_EACH_ENV) == "1"


def run_pipeline(
    module: ir.Module | ir.Operation, pipeline: str | Sequence[PipelineElement], *,
    verify_each: bool | None = None, **kwargs: Any
) -> None:
    """Parse (if text) and run a pipeline on `module`; errors as in PassManagerRunner.run.

    `verify_each` (default `verify_each_default()`): verify the IR after every pass,
    as autodiff-opt does. Off, the result is verified once, at the end (invalid IR
    raises ir.MLIRError with the verifier's diagnostics): the verifier after each
    of a compilation's ~80 passes is 10-30% of the time the passes take."""
    op = module.operation if isinstance(module, ir.Module) else module
    elements = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    if verify_each is None:
        verify_each = verify_each_default()
    PassManagerRunner(elements, op.context, verify_each=verify_each, **kwargs).run(op)
    if not verify_each:
        op.verify()
