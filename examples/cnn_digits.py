"""Train a small convolutional network on the bundled 8x8 digits with mlir-autodiff.

conv 3x3 SAME 1->16, relu, 2x2 max pool, conv 3x3 SAME 16->32, relu, 2x2 max
pool, dense 128->10; `lax.conv_general_dilated` (NHWC / HWIO) and
`nn.max_pool`, trained by `ad.jit(ad.value_and_grad(loss))` with SGD and
momentum. The data set is scikit-learn's bundled digits (1,797 images, no
download); a quarter is held out for the test accuracy.

    python examples/cnn_digits.py [--epochs N] [--batch B] [--seed S]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import lax, nn

NHWC = ("NHWC", "HWIO", "NHWC")


def init_params(rng: np.random.Generator) -> list[np.ndarray]:
    def he(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[:-1]))).astype(
            np.float32)
    return [he(3, 3, 1, 16), np.zeros(16, np.float32), he(3, 3, 16, 32),
            np.zeros(32, np.float32), he(128, 10), np.zeros(10, np.float32)]


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = nn.relu(lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=NHWC) + b1)
    h = nn.max_pool(h, (2, 2), (2, 2))                       # 8x8 -> 4x4
    h = nn.relu(lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=NHWC) + b2)
    h = nn.max_pool(h, (2, 2), (2, 2))                       # 4x4 -> 2x2
    return anp.reshape(h, (h.shape[0], -1)) @ w3 + b3


def loss(params, x, onehot, decay: float = 1e-4):
    nll = -anp.mean(anp.sum(onehot * nn.log_softmax(forward(params, x), axis=-1), axis=-1))
    return nll + decay * sum(anp.sum(w * w) for w in params[::2])


def train(epochs: int = 30, batch: int = 64, lr: float = 0.05, seed: int = 0,
          verbose: bool = True) -> float:
    """Train and return the test accuracy."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]       # (n, 8, 8, 1)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=seed, stratify=digits.target)
    onehot = np.eye(10, dtype=np.float32)[y_train]
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    velocity = [np.zeros_like(p) for p in params]

    @ad.jit
    def step(params, velocity, x, t):
        value, grads = ad.value_and_grad(loss)(params, x, t)
        velocity = [0.9 * v - lr * g for v, g in zip(velocity, grads)]
        return value, [p + v for p, v in zip(params, velocity)], velocity

    predict = ad.jit(forward)
    n_batches = len(x_train) // batch
    start = time.perf_counter()
    acc = 0.0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        total = 0.0
        for i in range(n_batches):
            idx = order[i * batch:(i + 1) * batch]
            value, params, velocity = step(params, velocity, x_train[idx], onehot[idx])
            total += float(value)
        acc = float(np.mean(np.argmax(predict(params, x_test), axis=-1) == y_test))
        if verbose and (epoch % 5 == 0 or epoch == 1):
            print(f"epoch {epoch:3d}  loss {total / n_batches:.4f}  test acc {acc * 100:5.1f}%  "
                  f"{time.perf_counter() - start:5.1f}s", flush=True)
    if verbose:
        print(f"test accuracy {acc * 100:.2f}% after {epochs} epochs in "
              f"{time.perf_counter() - start:.1f}s")
    return acc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train(args.epochs, args.batch, args.lr, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
