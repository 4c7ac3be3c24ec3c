"""Prints the module of jit(f, in_shardings=...) at a stage (in-shardings-stages.mlir):
`annotated` (differentiated, inlined, sharding annotations) or `partitioned`."""

import sys

import numpy as np

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

P = ad.PartitionSpec


def loss(w, x):
    return anp.sum(anp.tanh(x @ w))


mesh = ad.Mesh((2,), ("x",))
f = ad.grad(loss) if sys.argv[2] == "grad" else loss
j = ad.jit(f, in_shardings=(ad.NamedSharding(mesh, P()), ad.NamedSharding(mesh, P("x"))))
print(j.lowered_text(np.zeros((3, 4)), np.zeros((8, 3)), stage=sys.argv[1]))
