"""torch.func reference for examples/ports/model_ensembling.py.

The port's program written the way torch.func's model-ensembling tutorial
writes it: each model is an `nn.Module` MLP, `stack_module_state` stacks
their parameters, a copy of one model on the "meta" device is called through
`functional_call`, and `vmap` runs every model on one minibatch
(`in_dims=(0, 0, None)`) or each on its own; the ensemble's gradients are
`vmap(grad(loss))`. `run` takes the port's `inputs(small)` and returns the
port's keys (weight gradients transposed to the port's (in, out) layout);
test_ports.py compares the two to 1e-8 relative in float64.
"""

import copy
import pathlib
import runpy

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for m, n in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(m, n, dtype=torch.float64), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x)


def model(params):
    """The port's [(w, b)] (w of shape (in, out)) as an MLP."""
    mlp = MLP([params[0][0].shape[0]] + [w.shape[1] for w, _ in params])
    linears = [name for name, m in mlp.named_modules() if isinstance(m, nn.Linear)]
    state = {}
    for name, (w, b) in zip(linears, params):
        state[f"{name}.weight"] = torch.from_numpy(w.T.copy())
        state[f"{name}.bias"] = torch.from_numpy(b)
    mlp.load_state_dict(state)
    return mlp


def run(models, x, xs, labels):
    modules = [model(p) for p in models]
    linears = [name for name, m in modules[0].named_modules() if isinstance(m, nn.Linear)]
    params, buffers = stack_module_state(modules)
    base = copy.deepcopy(modules[0]).to("meta")

    def fmodel(params, buffers, x):
        return functional_call(base, (params, buffers), (x,))

    def loss(params, buffers, x, labels):
        return F.cross_entropy(fmodel(params, buffers, x), labels)

    x, xs, labels = torch.from_numpy(x), torch.from_numpy(xs), torch.from_numpy(labels)
    grads = vmap(grad(loss))(params, buffers, xs, labels)
    out = {"same_minibatch": vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x),
           "different_minibatches": vmap(fmodel)(params, buffers, xs),
           "python_loop": torch.stack([m(x) for m in modules]),
           "grad_w0": grads[f"{linears[0]}.weight"].transpose(1, 2),
           "grad_b_last": grads[f"{linears[-1]}.bias"],
           "losses": vmap(loss)(params, buffers, xs, labels)}
    return {k: v.detach().numpy() for k, v in out.items()}


if __name__ == "__main__":
    port = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "model_ensembling.py"))
    for k, v in run(*port["inputs"](small=False)).items():
        print(k, v.shape)
