"""`mlir_autodiff.example_libraries`: the calling conventions of jax's
`jax.example_libraries`, which many published jax programs build on.

`stax` composes layers as `(init_fun, apply_fun)` pairs (`serial`, `Dense`,
`Conv`, `MaxPool`, ...) and `optimizers` gives optimizers as
`(init_fun, update_fun, get_params)` triples over pytrees of parameters
(`sgd`, `momentum`, `adam`, ...), so a program written against them runs with
only its imports changed. Both are written with `mlir_autodiff.numpy`, `lax`
and `nn`: every transform applies. Keyed initializers draw from this
project's Philox streams, so initial parameters differ from jax's draws (their
distributions are the same).
"""

from __future__ import annotations

from . import optimizers, stax

__all__ = ["optimizers", "stax"]
