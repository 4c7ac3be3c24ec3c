"""Training the digits MLP over MPI processes with mlir-autodiff: data or tensor parallel.

Data parallel (the default): every process holds the parameters and its share
of the batch rows; the loss is the `ad.lax.psum` of the processes' losses on
their rows (an MPI allreduce in the compiled code), and `ad.grad` of that
function -- taken outside the `shard_map`, on the global loss -- is the
full-batch gradient: the parameters every process holds are replicated
arguments, whose gradient the shard_map's boundary assembles from the
processes' copies.

Tensor parallel (`--tensor-parallel`): every process sees the whole batch and
holds a block of the hidden layer, in Megatron's split: the first weight
matrix by columns (`PartitionSpec(None, "x")`, its bias with it), the second
by rows (`PartitionSpec("x", None)`), one psum of the partial logits at the
end. The gradient, again taken outside the shard_map, comes back split the
same way as the parameters' global arrays.

Either way, every process ends with the parameters one process gets training
on the whole batch; in float64 they agree up to rounding, and the example
prints the largest difference (`--check` also makes it the exit status).

    mpiexec -n 2 python examples/distributed_mlp.py [--tensor-parallel] [--steps N] [--check]

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


def logits_of(params, x):
    h = x
    for w, b in params[:-1]:
        h = anp.tanh(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def summed_loss_of_logits(logits, onehot):
    """The negative log-likelihood summed over the rows (the caller divides by the batch)."""
    return -anp.sum(onehot * nn.log_softmax(logits, axis=-1))


def summed_loss(params, x, onehot):
    return summed_loss_of_logits(logits_of(params, x), onehot)


def sgd(params, grads, lr):
    return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)]


def data_parallel_loss(mesh):
    """The global loss: each process's rows' loss, summed over the processes."""
    def local(params, xb, yb):
        return ad.lax.psum(summed_loss(params, xb, yb), "x")

    return ad.shard_map(local, mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())


def tensor_parallel_loss(mesh):
    """The global loss of a one-hidden-layer MLP whose hidden units are split over
    the processes (Megatron's column- then row-parallel pair)."""
    def partial_logits(w1, b1, w2, x):
        return ad.lax.psum(anp.tanh(x @ w1 + b1) @ w2, "x")

    logits = ad.shard_map(partial_logits, mesh,
                          in_specs=(P(None, "x"), P("x"), P("x", None), P()), out_specs=P())

    def loss(params, x, onehot):
        (w1, b1), (w2, b2) = params
        return summed_loss_of_logits(logits(w1, b1, w2, x) + b2, onehot)

    return loss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="global batch (rows)")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--tensor-parallel", action="store_true",
                        help="split the hidden layer over the processes (default: the batch)")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless equal to single-process training (1e-10)")
    args = parser.parse_args(argv)

    ad.distributed.initialize()
    n, rank = ad.distributed.process_count(), ad.distributed.process_index()
    if args.tensor_parallel and args.hidden % n:
        parser.error(f"--hidden {args.hidden} must be a multiple of the {n} processes")
    if not args.tensor_parallel and args.batch % n:
        parser.error(f"--batch {args.batch} must be a multiple of the {n} processes")
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data[:args.batch] / 16.0
    onehot = np.eye(10)[digits.target[:args.batch]]
    params = init_params(np.random.default_rng(0), [64, args.hidden, 10])
    scale = args.lr / args.batch

    mesh = ad.Mesh((n,), ("x",))
    mode = "tensor-parallel" if args.tensor_parallel else "data-parallel"
    loss = tensor_parallel_loss(mesh) if args.tensor_parallel else data_parallel_loss(mesh)
    # grad outside the shard_map: the gradient of the global loss
    step = ad.jit(lambda params, x, y: sgd(params, ad.grad(loss)(params, x, y), scale))
    start = time.perf_counter()
    p = params
    for _ in range(args.steps):
        p = step(p, x, onehot)
    elapsed = time.perf_counter() - start
    if rank == 0:
        procs = f"{n} process" + ("es" if n != 1 else "")
        print(f"{mode}, {procs}: {args.steps} steps of {args.batch} rows in {elapsed:.2f} s "
              "(first step compiles)")

    one_step = ad.jit(lambda params, x, y: sgd(params, ad.grad(summed_loss)(params, x, y),
                                               scale))
    q = params
    for _ in range(args.steps):
        q = one_step(q, x, onehot)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
               for pa, qa in zip(p, q) for a, b in zip(pa, qa))
    moved = max(float(np.max(np.abs(np.asarray(a) - b)))
                for pa, qa in zip(p, params) for a, b in zip(pa, qa))
    print(f"process {rank}: max |{mode} - full batch| = {diff:.3g} "
          f"(parameters moved by up to {moved:.3g})")
    if args.check and (not diff <= 1e-10 or moved < 1e-3):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
