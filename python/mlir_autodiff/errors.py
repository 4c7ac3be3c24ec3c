"""The exceptions the Python front end raises, in one place.

Every error that comes from misusing traced values names the operation and
the user's source line (`file.py:12`), found by walking the Python stack to
the first frame outside the `mlir_autodiff` package.

    AutodiffError
    ├── TracerError                      misuse of traced values while tracing
    │   ├── TracerBoolConversionError    `if x > 0:` on a traced value (also a TypeError)
    │   ├── ConcretizationTypeError      float()/int()/index() of a traced value (TypeError)
    │   ├── TracerArrayConversionError   np.asarray(tracer) (TypeError)
    │   ├── UnsupportedNumpyFunctionError  np.xyz(tracer) with no traced equivalent (TypeError)
    │   ├── UnexpectedTracerError        a traced value used outside the trace it belongs to
    │   ├── ShapeError                   broadcasting/reshape/matmul shape mismatch (ValueError)
    │   └── UnsupportedError             a numpy feature this front end does not trace
    ├── InvalidArgumentError             a jit argument or output that is not an array, a
    │                                    scalar or a pytree of them; a call that does not fit
    │                                    the function's signature; jit of a non-function
    └── CompilationError                 the MLIR pipeline rejected the traced module
"""

from __future__ import annotations


class AutodiffError(Exception):
    """Base class of every error raised by mlir_autodiff's Python front end."""


class TracerError(AutodiffError):
    """A traced value was used in a way tracing cannot capture."""


class TracerBoolConversionError(TracerError, TypeError):
    """A traced value was used where Python needs a concrete bool (`if`, `while`, `and`)."""


class ConcretizationTypeError(TracerError, TypeError):
    """A traced value was converted to a concrete Python number (float(), int(), index)."""


class TracerArrayConversionError(TracerError, TypeError):
    """A traced value was converted to a numpy array (np.asarray, np.array)."""


class UnsupportedNumpyFunctionError(TracerError, TypeError):
    """A `numpy` function was applied to a traced value; use `mlir_autodiff.numpy`."""


class UnexpectedTracerError(TracerError):
    """A traced value escaped the function trace it belongs to (e.g. stored globally)."""


class ShapeError(TracerError, ValueError):
    """Operand shapes do not fit together (broadcasting, reshape, matmul, concatenate)."""


class UnsupportedError(TracerError, NotImplementedError):
    """A numpy feature (argument, index kind, dtype) that the tracer does not support."""


class InvalidArgumentError(AutodiffError, TypeError):
    """What `jit` was given or returned is not a pytree of arrays and scalars, or the
    call does not fit the function's signature (also a TypeError)."""


class CompilationError(AutodiffError):
    """The MLIR pipeline failed on a traced module; the message holds its diagnostics."""

    def __init__(self, message: str, diagnostics: list[str] | None = None) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics or []


__all__ = [
    "AutodiffError",
    "CompilationError",
    "ConcretizationTypeError",
    "InvalidArgumentError",
    "ShapeError",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerError",
    "UnexpectedTracerError",
    "UnsupportedError",
    "UnsupportedNumpyFunctionError",
]
