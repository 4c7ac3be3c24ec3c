"""torch.func reference for examples/ports/neural_tangent_kernel.py.

The port's program written the way torch.func's neural-tangent-kernel
tutorial writes it: the network is an `nn.Module` called on one example
through `functional_call` (`unsqueeze(0)` / `squeeze(0)`); the kernel is the
contraction of the per-example Jacobians from `vmap(jacrev(...), (None, 0))`
over every parameter, and again from NTK-vector products (`vjp` at one
input, `jvp` at the other, `vmap` over the basis of outputs and over both
batches). `run` takes the port's `inputs(small)` and returns the port's keys;
test_ports.py compares the two to 1e-8 relative in float64.
"""

import pathlib
import runpy

import torch
from torch import nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap


class Net(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(m, n, dtype=torch.float64)
                                    for m, n in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        *hidden, last = self.layers
        for layer in hidden:
            x = layer(x).tanh()
        return last(x)


def run(params, x1, x2):
    net = Net([params[0][0].shape[0]] + [w.shape[1] for w, _ in params])
    state = {}
    for i, (w, b) in enumerate(params):  # the port's w is (in, out), nn.Linear's (out, in)
        state[f"layers.{i}.weight"] = torch.from_numpy(w.T.copy())
        state[f"layers.{i}.bias"] = torch.from_numpy(b)
    net.load_state_dict(state)
    weights = {k: v.detach() for k, v in net.named_parameters()}
    x1, x2 = torch.from_numpy(x1), torch.from_numpy(x2)

    def fnet_single(weights, x):
        return functional_call(net, weights, (x.unsqueeze(0),)).squeeze(0)

    def ntk_jacobian_contraction(weights, x1, x2):
        jac1 = vmap(jacrev(fnet_single), (None, 0))(weights, x1)
        jac2 = vmap(jacrev(fnet_single), (None, 0))(weights, x2)
        blocks = [torch.einsum("Naf,Mbf->NMab", j1.flatten(2), j2.flatten(2))
                  for j1, j2 in zip(jac1.values(), jac2.values())]
        return torch.stack(blocks).sum(0)

    def ntk_vector_products(weights, x1, x2):
        def block(a, b):
            def at_a(w):
                return fnet_single(w, a)

            def at_b(w):
                return fnet_single(w, b)

            out, vjp_fn = vjp(at_a, weights)

            def row(v):  # v = e_i: row i of the block, J(a)_i . J(b)^T
                (cotangent,) = vjp_fn(v)
                return jvp(at_b, (weights,), (cotangent,))[1]

            return vmap(row)(torch.eye(out.numel(), dtype=out.dtype))

        return vmap(vmap(block, (None, 0)), (0, None))(x1, x2)

    full = ntk_jacobian_contraction(weights, x1, x2)
    out = {"ntk": full, "ntk_products": ntk_vector_products(weights, x1, x2),
           "trace": torch.einsum("NMaa->NM", full)}
    return {k: v.detach().numpy() for k, v in out.items()}


if __name__ == "__main__":
    port = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "neural_tangent_kernel.py"))
    for k, v in run(*port["inputs"](small=False)).items():
        print(k, v.shape)
