"""torch.func reference for examples/ports/per_sample_gradients.py.

The port's program written the way torch.func's per-sample-gradients tutorial
writes it: the classifier is an `nn.Module`, the loss of one example is taken
through `functional_call`, `grad` of it is mapped over the batch with `vmap`
(`in_dims=(None, None, 0, 0)`), the check is a loop of `torch.autograd.grad`
calls on the module, and the DP-SGD step clips, averages and noises the
per-sample gradients. `run` takes the port's `inputs(small)` and returns the
port's keys (weight gradients transposed to the port's (in, out) layout);
test_ports.py compares the two to 1e-8 relative in float64.
"""

import pathlib
import runpy

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap


class Classifier(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(m, n, dtype=torch.float64)
                                    for m, n in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        *hidden, last = self.layers
        for layer in hidden:
            x = F.gelu(layer(x), approximate="tanh")  # jax.nn.gelu's default form
        return last(x)


def state(params):
    """The port's [(w, b)] (w of shape (in, out)) as a Classifier state dict."""
    out = {}
    for i, (w, b) in enumerate(params):
        out[f"layers.{i}.weight"] = torch.from_numpy(w.T.copy())
        out[f"layers.{i}.bias"] = torch.from_numpy(b)
    return out


def run(params, x, y, noise):
    model = Classifier([params[0][0].shape[0]] + [w.shape[1] for w, _ in params])
    model.load_state_dict(state(params))
    x, y = torch.from_numpy(x), torch.from_numpy(y)

    weights = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(weights, buffers, sample, target):
        logits = functional_call(model, (weights, buffers), (sample.unsqueeze(0),))
        return F.cross_entropy(logits, target.unsqueeze(0), reduction="sum")

    per_sample = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(weights, buffers, x, y)

    loop = []
    for i in range(x.shape[0]):
        loss = F.cross_entropy(model(x[i:i + 1]), y[i:i + 1], reduction="sum")
        loop.append(torch.autograd.grad(loss, list(model.parameters())))
    batch_loss = F.cross_entropy(model(x), y, reduction="sum")
    batch_grad = torch.autograd.grad(batch_loss, list(model.parameters()))

    # DP-SGD: scale each example's gradient to norm <= 1, average, add the noise
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample.values()))
    scale = torch.clamp(1.0 / (norms + 1e-12), max=1.0)
    noise = state(noise)
    update = {k: (g * scale.view(-1, *[1] * (g.dim() - 1))).mean(0) + noise[k]
              for k, g in per_sample.items()}

    out = {"w0": per_sample["layers.0.weight"].transpose(1, 2),
           "b1": per_sample["layers.1.bias"],
           "loop_w0": torch.stack([g[0].T for g in loop]),
           "batch_grad_w0": batch_grad[0].T,
           "dp_update_w0": update["layers.0.weight"].T,
           "dp_update_b1": update["layers.1.bias"]}
    return {k: v.detach().numpy() for k, v in out.items()}


if __name__ == "__main__":
    port = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "per_sample_gradients.py"))
    for k, v in run(*port["inputs"](small=False)).items():
        print(k, v.shape)
