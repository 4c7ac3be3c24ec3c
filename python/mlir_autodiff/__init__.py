"""mlir-autodiff: a differentiable compiler on upstream MLIR.

    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp

    @ad.jit
    def f(x, w):
        return anp.tanh(x @ w).sum()

`numpy` traces numpy-style code into MLIR on tensors, `nn` holds neural-network
functions, `jit` compiles per argument signature, `lower` shows the MLIR at each
stage. Errors raised while tracing are subclasses of `TracerError`.
"""

from . import errors, nn, numpy, pytree
from .api import JitFunction, Lowered, jit, lower
from .errors import (
    AutodiffError,
    CompilationError,
    ConcretizationTypeError,
    ShapeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerError,
    UnexpectedTracerError,
    UnsupportedError,
    UnsupportedNumpyFunctionError,
)
from .pytree import tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten
from .tracing import ShapedArray, Tracer

__all__ = [
    "AutodiffError",
    "CompilationError",
    "ConcretizationTypeError",
    "JitFunction",
    "Lowered",
    "ShapeError",
    "ShapedArray",
    "Tracer",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerError",
    "UnexpectedTracerError",
    "UnsupportedError",
    "UnsupportedNumpyFunctionError",
    "errors",
    "jit",
    "lower",
    "nn",
    "numpy",
    "pytree",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]
