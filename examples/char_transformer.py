"""Train a two-layer character-level transformer on a bundled text with mlir-autodiff.

A decoder-only transformer over the characters of examples/data/lighthouse.txt
(a short story, ~4 KB): token embedding lookup with integer ids plus a learned
positional embedding, two pre-layernorm blocks of causal multi-head
self-attention and a gelu MLP, a final layernorm and a linear read-out to the
vocabulary, trained with mean cross-entropy against integer next-character
labels (`take_along_axis` of the log-softmax). One training step is
`ad.jit(ad.value_and_grad(loss))` and a jitted Adam update from
`mlir_autodiff.optim`. The initial parameters and the minibatch order come
from numpy, so a run is reproducible and the same program under jax (only the
`# <imports>` block and the optimizer differ; see
test/python/test_transformer.py) starts from the same point.

    python examples/char_transformer.py [--steps N] [--batch B] [--lr LR] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import pathlib
import time
from typing import NamedTuple

import numpy as np

# <imports>
import mlir_autodiff as ad
import mlir_autodiff.numpy as jnp
from mlir_autodiff import nn, optim

# </imports>

CORPUS = pathlib.Path(__file__).resolve().parent / "data" / "lighthouse.txt"


class Config(NamedTuple):
    vocab: int
    context: int = 32       # characters per training window
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 4            # hidden width of the MLP, in multiples of d_model


def load_corpus(path: pathlib.Path = CORPUS) -> tuple[np.ndarray, str]:
    """The text as int32 character ids, and the sorted alphabet (id -> character)."""
    text = path.read_text(encoding="utf-8")
    alphabet = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(alphabet)}
    return np.array([lookup[c] for c in text], dtype=np.int32), alphabet


def init_params(cfg: Config, rng: np.random.Generator, dtype=np.float32) -> dict:
    """Numpy arrays: embeddings N(0, 0.1^2), dense weights N(0, 1/fan_in), layernorm
    gains 1, biases 0."""
    def dense(m: int, n: int) -> np.ndarray:
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(dtype)

    def norm() -> tuple[np.ndarray, np.ndarray]:
        return np.ones(cfg.d_model, dtype), np.zeros(cfg.d_model, dtype)

    d, h = cfg.d_model, cfg.mlp * cfg.d_model
    blocks = []
    for _ in range(cfg.layers):
        blocks.append({"ln1": norm(), "qkv": dense(d, 3 * d), "out": dense(d, d),
                       "ln2": norm(), "w1": dense(d, h), "b1": np.zeros(h, dtype),
                       "w2": dense(h, d), "b2": np.zeros(d, dtype)})
    return {"tok": (0.1 * rng.standard_normal((cfg.vocab, d))).astype(dtype),
            "pos": (0.1 * rng.standard_normal((cfg.context, d))).astype(dtype),
            "blocks": blocks, "ln_f": norm(), "head": dense(d, cfg.vocab)}


def layer_norm(x, scale_bias, eps=1e-5):
    gain, bias = scale_bias
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * gain + bias


def causal_attention(x, qkv, out, heads):
    batch, length, d = x.shape
    q, k, v = jnp.split(x @ qkv, 3, axis=-1)
    q, k, v = (a.reshape(batch, length, heads, d // heads) for a in (q, k, v))
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d // heads)  # a Python float: keeps the dtype
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))   # query t sees keys s <= t
    logits = jnp.where(causal, logits, -1e9)
    weights = nn.softmax(logits, axis=-1)
    return jnp.einsum("bhts,bshd->bthd", weights, v).reshape(batch, length, d) @ out


def forward(params, tokens, heads):
    """Logits (batch, length, vocab) for int32 `tokens` (batch, length)."""
    x = params["tok"][tokens] + params["pos"][:tokens.shape[1]]
    for block in params["blocks"]:
        x = x + causal_attention(layer_norm(x, block["ln1"]), block["qkv"], block["out"],
                                 heads)
        h = nn.gelu(layer_norm(x, block["ln2"]) @ block["w1"] + block["b1"])
        x = x + h @ block["w2"] + block["b2"]
    return layer_norm(x, params["ln_f"]) @ params["head"]


def loss(params, tokens, targets, heads):
    """Mean cross-entropy of the next character, `targets` int32 like `tokens`."""
    logp = nn.log_softmax(forward(params, tokens, heads), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def batches(data: np.ndarray, context: int, batch: int, steps: int,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(steps, batch, context) windows of `data` and the same windows shifted by one."""
    starts = rng.integers(0, len(data) - context - 1, size=(steps, batch))
    idx = starts[..., None] + np.arange(context)
    return data[idx], data[idx + 1]


def train(steps=100, batch=16, lr=1e-2, seed=0, dtype=np.float32, context=32, d_model=64,
          heads=4, verbose=True) -> dict:
    """Train with Adam(lr); return the loss curve, the final parameters, the
    configuration and the alphabet."""
    data, alphabet = load_corpus()
    cfg = Config(vocab=len(alphabet), context=context, d_model=d_model, heads=heads)
    rng = np.random.default_rng(seed)
    params = init_params(cfg, rng, dtype)
    xs, ys = batches(data, cfg.context, batch, steps, rng)
    opt = optim.adam(lr)
    state = opt.init(params)

    # Two compiled functions, the model's value and gradient and the optimizer's
    # step (jitted apart they compile in about 60% of the time of one fused step).
    loss_and_grad = ad.jit(ad.value_and_grad(loss), static_argnums=3)  # heads: an int

    @ad.jit
    def update(grads, state, params):
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state

    losses = []
    start = time.perf_counter()
    for i in range(steps):
        value, grads = loss_and_grad(params, xs[i], ys[i], cfg.heads)
        params, state = update(grads, state, params)
        losses.append(float(value))
        if verbose and (i % 10 == 0 or i == steps - 1):
            print(f"step {i:4d}  loss {losses[-1]:.4f}  {time.perf_counter() - start:5.1f}s",
                  flush=True)
    return {"losses": np.array(losses), "params": params, "config": cfg,
            "alphabet": alphabet}


def sample(params, cfg: Config, alphabet: str, prompt: str, length: int,
           rng: np.random.Generator, temperature: float = 0.8) -> str:
    """Continue `prompt` by `length` characters drawn from the model's softmax.

    The model reads a fixed window of `cfg.context` characters (one compilation):
    a shorter text is padded on the right, which a causal model never looks at.
    """
    logits_of = ad.jit(lambda p, t: forward(p, t, cfg.heads))
    ids = [alphabet.index(c) for c in prompt]
    for _ in range(length):
        window = ids[-cfg.context:]
        tokens = np.zeros((1, cfg.context), np.int32)
        tokens[0, :len(window)] = window
        logits = np.asarray(logits_of(params, tokens), np.float64)[0, len(window) - 1]
        p = np.exp((logits - logits.max()) / temperature)
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return "".join(alphabet[i] for i in ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=200, help="characters to generate")
    args = parser.parse_args(argv)
    result = train(args.steps, args.batch, args.lr, args.seed)
    curve = result["losses"]
    print("loss curve (every 10th step): "
          + " ".join(f"{v:.3f}" for v in curve[::10]) + f" ... {curve[-1]:.3f}")
    text = sample(result["params"], result["config"], result["alphabet"], "The light ",
                  args.sample, np.random.default_rng(args.seed))
    print("sample:\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
