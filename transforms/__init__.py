"""Passes of mlir-autodiff: one module per pass, rules per upstream dialect in `rules/`."""

from .diagnostics import PassFailure, emit_error, fail
from .passes import Pass, all_passes, lookup, register
from .pipeline import (
    InternalError,
    PassManagerRunner,
    PipelineError,
    parse_pipeline,
    run_pipeline,
)

__all__ = [
    "Pass", "PassFailure", "emit_error", "fail", "all_passes", "lookup", "register",
    "InternalError", "PassManagerRunner", "PipelineError", "parse_pipeline", "run_pipeline",
]
