"""Prints the module of jit(f, in_shardings=...) at its stages (in-shardings-stages.mlir):
`all`: "annotated" (differentiated, inlined, sharding annotations) and "partitioned"
for the value, then "partitioned" for the gradient; `grad`: that last module only."""

import sys

import numpy as np

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

P = ad.PartitionSpec


def loss(w, x):
    return anp.sum(anp.tanh(x @ w))


mesh = ad.Mesh((2,), ("x",))
shardings = (ad.NamedSharding(mesh, P()), ad.NamedSharding(mesh, P("x")))
args = (np.zeros((3, 4)), np.zeros((8, 3)))
value = ad.jit(loss, in_shardings=shardings)
grad = ad.jit(ad.grad(loss), in_shardings=shardings)
if sys.argv[1] == "all":
    for title, j, stage in (("annotated", value, "annotated"),
                            ("partitioned", value, "partitioned"),
                            ("grad partitioned", grad, "partitioned")):
        print(f"// ---- {title}")
        print(j.lowered_text(*args, stage=stage))
else:
    print(grad.lowered_text(*args))
