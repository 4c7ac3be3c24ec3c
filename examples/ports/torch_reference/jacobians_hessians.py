"""torch.func reference for examples/ports/jacobians_hessians.py.

The port's program written the way torch.func's "Jacobians, Hessians, hvp,
vhp, and more" tutorial writes it: the layer is `F.linear(...).tanh()`, its
Jacobians come from `jacrev` and `jacfwd` (with `argnums`), batch Jacobians
from `vmap(jacrev)` with `in_dims` and from the Jacobian of the output summed
over the batch (`movedim`), Hessians from `hessian`, `jacfwd(jacrev)` and
`jacrev(jacrev)`, and the Hessian-vector product from `jvp` of `grad`. `run`
takes the port's `inputs(small)` and returns the port's keys; test_ports.py
compares the two to 1e-8 relative in float64.
"""

import pathlib
import runpy

import torch
import torch.nn.functional as F
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap


def predict(weight, bias, x):
    return F.linear(x, weight, bias).tanh()


def hvp(f, primals, tangents):
    return jvp(grad(f), primals, tangents)[1]


def run(weight, bias, x, xs, v):
    weight, bias, x, xs, v = (torch.from_numpy(a) for a in (weight, bias, x, xs, v))
    d = x.shape[0]
    batched = (None, None, 0)
    jac_weight, jac_bias = jacrev(predict, argnums=(0, 1))(weight, bias, x)
    out = {
        "jacrev_x": jacrev(predict, argnums=2)(weight, bias, x),
        "jacfwd_x": jacfwd(predict, argnums=2)(weight, bias, x),
        "jacrev_wb": torch.cat([jac_weight.reshape(d, -1), jac_bias.reshape(d, -1)], dim=1),
        "batch_jacobian": vmap(jacrev(predict, argnums=2), in_dims=batched)(weight, bias, xs),
        "batch_jacobian_sum": jacrev(
            lambda xs: predict(weight, bias, xs).sum(0))(xs).movedim(1, 0),
        "hessian": hessian(predict, argnums=2)(weight, bias, x),
        "hessian_fwdrev": jacfwd(jacrev(predict, argnums=2), argnums=2)(weight, bias, x),
        "hessian_revrev": jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x),
        "batch_hessian": vmap(hessian(predict, argnums=2), in_dims=batched)(weight, bias, xs),
    }

    def f(x):
        return predict(weight, bias, x).pow(2).sum()

    out["hvp"] = hvp(f, (x,), (v,))
    out["hvp_dense"] = hessian(f)(x) @ v
    return {k: t.detach().numpy() for k, t in out.items()}


if __name__ == "__main__":
    port = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "jacobians_hessians.py"))
    for k, t in run(*port["inputs"](small=False)).items():
        print(k, t.shape)
