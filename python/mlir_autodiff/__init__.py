"""mlir-autodiff: a differentiable compiler on upstream MLIR.

    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp

    @ad.jit
    def f(x, w):
        return anp.tanh(x @ w).sum()

`numpy` traces numpy-style code into MLIR on tensors, `lax` holds the loops
(`fori_loop`, `scan`, `while_loop`, also at top level) that trace their body
once into `scf.for` / `scf.while`, and `map`, `cond`, `switch`, `select`, `nn` holds neural-network functions, `jit` compiles per argument signature, `lower` shows the MLIR at each
stage; `grad`, `value_and_grad`, `vjp`, `jvp`, `jacfwd`, `jacrev`, `hessian`
emit autodiff ops that the MLIR passes differentiate. Errors raised while
tracing are subclasses of `TracerError`.

The package's attributes are imported on first use (PEP 562), so the
command-line tools, which live in `mlir_autodiff.tools`, do not pay for (or
depend on) the front end.
"""

# The front end's layers. A module imports only modules of lower layers, at
# module level or inside a function (test/python/test_layering.py reads this
# table and checks every import), so there is no import circle:
#
#   layer 0  dialects, transforms        the compiler, own packages: no front-end imports
#   layer 1  argspec, cuda_driver, errors, index_items, pytree, rng_state, tracebacks  argument
#                                        specs; the CUDA driver query; exceptions; an index's
#                                        items per dimension; pytrees; the generator state;
#                                        filtered tracebacks
#   layer 2  signatures, native_call, tree_util, eager  specs read from MLIR; calling
#                                        compiled code (no MLIR); jax.tree_util's API over
#                                        pytree; eager arrays (ndarrays with `.at`)
#   layer 3  tracing, runtime, call_plan  Tracer and traces; the CPU JIT runtime; a compiled
#                                        call's outputs (numpy only)
#   layer 4  aot, native_build           loading exported artifacts (numpy and ctypes only);
#                                        building shared libraries from lowered modules
#   layer 5  primitives, gpu, compile_cache  the ops a trace emits; the GPU runtime; jit's
#                                        persistent compilation cache
#   layer 6  indexing, numpy_dtypes, array_manip  gathers and scatters of array/traced
#                                        indices; dtype names; numpy's pad, split, nan*, ...
#                                        (composed of numpy's functions, handed over by numpy
#                                        at import: `array_manip.bind`)
#   layer 7  numpy                       numpy's API; installs Tracer's operators and methods
#   layer 8  api, special_math           jit and lower (imports numpy: traces see a full Tracer);
#                                        erfinv, gammaln & co. written with numpy
#   layer 9  batching, exporting, distributed, convolution  vmap; ahead-of-time export;
#                                        MPI processes, meshes, shard_map; convolution and
#                                        pooling composites
#   layer 10 random_sharding             a process's block of a global keyed draw
#                                        (`out_sharding`: needs vmap and the mesh)
#   layer 11 random                      random draws
#   layer 12 custom_core, differentiate, nn_initializers  custom functions' shared
#                                        machinery; grad & co; keyed initializers
#   layer 13 custom_vmap, checkpointing, nn, optim, lax_ops  custom batching rules;
#                                        checkpoint and residuals; optimizers; jax.lax's
#                                        everyday operations (add, dot_general, pad, ...)
#   layer 14 custom, lax                 custom_vjp, custom_jvp; loops (and lax_ops' names)
#   layer 15 custom_function, linalg     the torch-style Function (a custom_vjp call); linear
#                                        algebra (factorizations with custom_jvp rules)
#   layer 16 linalg_numpy, scipy, example_libraries  numpy.linalg's and scipy.linalg's
#                                        names; jax.example_libraries' stax and optimizers
#   layer 17 __init__                    this namespace, imported lazily (PEP 562)

from __future__ import annotations

import importlib
from typing import Any

#: public name -> submodule that defines it (None: the name is the submodule).
_EXPORTS: dict[str, str | None] = {
    "aot": None,
    "errors": None,
    "example_libraries": None,
    "lax": None,
    "distributed": None,
    "Mesh": "distributed",
    "PartitionSpec": "distributed",
    "NamedSharding": "distributed",
    "shard_map": "distributed",
    "nn": None,
    "optim": None,
    "numpy": None,
    "pytree": None,
    "random": None,
    "scipy": None,
    "tree_util": None,
    "JitFunction": "api",
    "Lowered": "api",
    "jit": "api",
    "clear_caches": "api",
    "eval_shape": "api",
    "ShapeDtypeStruct": "api",
    "export": "exporting",
    "lower": "api",
    "grad": "differentiate",
    "hessian": "differentiate",
    "jacfwd": "differentiate",
    "jacrev": "differentiate",
    "jvp": "differentiate",
    "stop_gradient": "differentiate",
    "value_and_grad": "differentiate",
    "vjp": "differentiate",
    "vmap": "batching",
    "Function": "custom_function",
    "FunctionCtx": "custom_function",
    "SavedResidual": "checkpointing",
    "checkpoint": "checkpointing",
    "checkpoint_name": "checkpointing",
    "checkpoint_policies": "checkpointing",
    "custom_jvp": "custom",
    "custom_vjp": "custom",
    "print_saved_residuals": "checkpointing",
    "remat": "checkpointing",
    "saved_residuals": "checkpointing",
    "AutodiffError": "errors",
    "CompilationError": "errors",
    "ConcretizationTypeError": "errors",
    "InvalidArgumentError": "errors",
    "ShapeError": "errors",
    "TracerArrayConversionError": "errors",
    "TracerBoolConversionError": "errors",
    "TracerError": "errors",
    "UnexpectedTracerError": "errors",
    "UnsupportedError": "errors",
    "UnsupportedNumpyFunctionError": "errors",
    "tree_flatten": "pytree",
    "tree_leaves": "pytree",
    "tree_map": "pytree",
    "tree_structure": "pytree",
    "tree_unflatten": "pytree",
    "fori_loop": "lax",
    "scan": "lax",
    "while_loop": "lax",
    "ShapedArray": "tracing",
    "Tracer": "tracing",
}

__all__ = sorted(_EXPORTS)


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mlir-autodiff")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "0+unknown"


__version__ = _package_version()


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mlir_autodiff' has no attribute '{name}'")
    module = _EXPORTS[name]
    if module is None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
