"""Data-parallel training of the digits MLP over MPI processes with mlir-autodiff.

Every process holds the parameters; each computes the gradient of the loss on
its share of the batch rows, `ad.lax.psum` adds the shares (an MPI allreduce
in the compiled code), and every process takes the same SGD step. In float64
the result equals training on the whole batch in one process up to rounding:
`--check` runs that single-process training too and compares.

    mpiexec -n 2 python examples/distributed_mlp.py [--steps N] [--check]

(mpiexec from the `mpich` wheel: pip install 'mlir-autodiff[mpi]'.)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import nn

P = ad.PartitionSpec


def init_params(rng: np.random.Generator, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.normal(0.0, np.sqrt(2.0 / a), (a, b)), np.zeros(b))
            for a, b in zip(sizes[:-1], sizes[1:])]


def summed_loss(params, x, onehot):
    """The negative log-likelihood summed over the rows (the caller divides by the batch)."""
    h = x
    for w, b in params[:-1]:
        h = anp.tanh(h @ w + b)
    w, b = params[-1]
    return -anp.sum(onehot * nn.log_softmax(h @ w + b, axis=-1))


def sgd(params, grads, lr):
    return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="global batch (rows)")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--check", action="store_true",
                        help="compare with single-process full-batch training")
    args = parser.parse_args(argv)

    ad.distributed.initialize()
    n, rank = ad.distributed.process_count(), ad.distributed.process_index()
    if args.batch % n:
        parser.error(f"--batch {args.batch} must be a multiple of the {n} processes")
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data[:args.batch] / 16.0
    onehot = np.eye(10)[digits.target[:args.batch]]
    params = init_params(np.random.default_rng(0), [64, args.hidden, 10])
    scale = args.lr / args.batch

    def step(params, xb, yb):
        grads = ad.grad(summed_loss)(params, xb, yb)
        return sgd(params, ad.lax.psum(grads, "x"), scale)

    mesh = ad.Mesh((n,), ("x",))
    dp_step = ad.shard_map(step, mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())
    start = time.perf_counter()
    p = params
    for _ in range(args.steps):
        p = dp_step(p, x, onehot)
    elapsed = time.perf_counter() - start
    if rank == 0:
        procs = f"{n} process" + ("es" if n != 1 else "")
        print(f"{procs}: {args.steps} steps of {args.batch} rows in {elapsed:.2f} s "
              "(first step compiles)")
    if args.check:
        one_step = ad.jit(lambda params, x, y: sgd(params, ad.grad(summed_loss)(params, x, y),
                                                   scale))
        q = params
        for _ in range(args.steps):
            q = one_step(q, x, onehot)
        diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                   for pa, qa in zip(p, q) for a, b in zip(pa, qa))
        moved = max(float(np.max(np.abs(np.asarray(a) - b)))
                    for pa, qa in zip(p, params) for a, b in zip(pa, qa))
        print(f"process {rank}: max |data-parallel - full batch| = {diff:.3g} "
              f"(parameters moved by up to {moved:.3g})")
        if not diff <= 1e-10 or moved < 1e-3:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
