"""Train a handwritten-digit classifier with mlir-autodiff.

The loss is written with the numpy-like API; `ad.value_and_grad` emits an
`autodiff.vjp` op, the `--autodiff-vjp` pass generates the backward pass in
MLIR, and `ad.jit` lowers the result to native code on the CPU. Training
applies dropout to the hidden layer: `nn.dropout` draws its mask with
`autodiff.random`, which jit functionalizes into Philox seed/offset code, so the
backward pass uses exactly the forward's mask and `--seed` replays a run bit
for bit. The data set is scikit-learn's bundled 8x8 digits (1,797 images, no
download).

    ./dev demo            (or: python examples/demo.py [--epochs N] [--out loss.png])
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import nn


def init_params(rng: np.random.Generator, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32)
        params.append((w, np.zeros(fan_out, np.float32)))
    return params


def forward(params, x, dropout: float = 0.0):
    """Logits; `dropout` > 0 (training only) drops hidden units with that probability."""
    h = x
    for w, b in params[:-1]:
        h = anp.tanh(h @ w + b)
        if dropout:
            h = nn.dropout(h, dropout)
    w, b = params[-1]
    return h @ w + b


def loss(params, x, onehot, dropout: float = 0.1):
    logits = forward(params, x, dropout)
    nll = -anp.mean(anp.sum(onehot * nn.log_softmax(logits, axis=-1), axis=-1))
    l2 = sum(anp.sum(w * w) for w, _ in params)
    return nll + 1e-4 * l2


def progress(epoch: int, epochs: int, loss_value: float, acc: float, elapsed: float) -> None:
    width = 30
    done = int(width * epoch / epochs)
    bar = "#" * done + "-" * (width - done)
    end = "\r" if sys.stdout.isatty() else "\n"
    if end == "\n" and epoch % 5 and epoch != epochs:
        return  # a log, not a terminal: every fifth epoch
    sys.stdout.write(
        f"{end if end == chr(13) else ''}[{bar}] epoch {epoch:3d}/{epochs}  loss {loss_value:.4f}  "
        f"test acc {acc * 100:5.1f}%  {elapsed:5.1f}s" + ("" if end == "\r" else "\n")
    )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="loss_curve.png")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.1,
                        help="dropout probability on the hidden layer while training")
    args = parser.parse_args(argv)

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=args.seed, stratify=y
    )
    onehot_train = np.eye(10, dtype=np.float32)[y_train]
    rng = np.random.default_rng(args.seed)
    ad.random.manual_seed(args.seed)  # the dropout masks' generator
    params = init_params(rng, [64, 64, 10])
    velocity = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]

    # The dropout rate is configuration, not data: closed over, a compile-time constant.
    step = ad.jit(ad.value_and_grad(lambda p, x, t: loss(p, x, t, args.dropout)))
    predict = ad.jit(forward)  # no dropout at test time

    n_batches = len(x_train) // args.batch
    history: list[float] = []
    start = time.perf_counter()
    print(f"training a 64-64-10 tanh MLP with dropout {args.dropout} on {len(x_train)} "
          f"digits ({n_batches} batches of {args.batch} per epoch)")
    acc = 0.0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        epoch_loss = 0.0
        for i in range(n_batches):
            idx = order[i * args.batch:(i + 1) * args.batch]
            value, grads = step(params, x_train[idx], onehot_train[idx])
            epoch_loss += float(value)
            new_params, new_velocity = [], []
            for (w, b), (vw, vb), (gw, gb) in zip(params, velocity, grads):
                vw = 0.9 * vw - args.lr * gw
                vb = 0.9 * vb - args.lr * gb
                new_params.append((w + vw, b + vb))
                new_velocity.append((vw, vb))
            params, velocity = new_params, new_velocity
        history.append(epoch_loss / n_batches)
        acc = float(np.mean(np.argmax(predict(params, x_test), axis=-1) == y_test))
        progress(epoch, args.epochs, history[-1], acc, time.perf_counter() - start)
    if sys.stdout.isatty():
        print()
    elapsed = time.perf_counter() - start
    print(f"test accuracy {acc * 100:.2f}% after {args.epochs} epochs in {elapsed:.1f}s")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, len(history) + 1), history, marker="o", markersize=3)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (cross-entropy + L2)")
    ax.set_yscale("log")
    ax.set_title(f"digits MLP, mlir-autodiff: test accuracy {acc * 100:.1f}%")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"loss curve written to {args.out}")
    return 0 if acc >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
