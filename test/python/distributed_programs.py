"""Programs the distributed tests run under mpiexec (test_distributed.py).

    mpiexec -n N python distributed_programs.py <case> <out-dir>

`collectives`: every collective of mlir_autodiff.distributed in one
shard_map (one compilation), 20 steps of data-parallel SGD (gradients of
each process's rows, psum'd) and the error of a gradient through psum; each
process saves its results to <out-dir>/rank<r>.npz, and the test compares
them with numpy and jax.
`raise`: process 1 raises while process 0 waits in a psum.
`mesh-mismatch`: a mesh whose size is not the number of processes.
`shape-mismatch`: the processes call shard_map with different shapes.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

P = ad.PartitionSpec


def inputs(n: int) -> dict[str, np.ndarray]:
    """The global arguments (the test builds the same ones for its expectations)."""
    rng = np.random.default_rng(23)
    w = rng.standard_normal((2 * n, 3)).astype(np.float32)
    w[0, 0], w[1, 1], w[-1, 2] = -0.0, np.nan, -np.inf
    return {
        "x": rng.standard_normal((2 * n, 3)),
        "z": rng.standard_normal((n * n, 2)),
        "w": w,
        "k": rng.integers(-50, 50, size=(n, 4)).astype(np.int32),
        "X": rng.standard_normal((8 * n, 3)),
        "y": rng.standard_normal(8 * n),
        "w0": rng.standard_normal(3),
    }


def permutation(n: int) -> list[tuple[int, int]]:
    """A permutation with a cycle, a chain and (for n > 2) a process receiving nothing."""
    return [(0, 1), (1, 0)] if n == 2 else [(0, 2), (2, 0), (1, 3)]


def collectives(out_dir: str) -> None:
    ad.distributed.initialize()
    n, r = ad.distributed.process_count(), ad.distributed.process_index()
    mesh = ad.Mesh((n,), ("x",))
    perm = permutation(n)

    def f(x, z, w, k):
        return {
            "psum": ad.lax.psum(x, "x"),
            "pmax": ad.lax.pmax(x, "x"),
            "pmin": ad.lax.pmin(x, "x"),
            "pmean": ad.lax.pmean(x.sum(), "x"),
            "psum_int": ad.lax.psum(k, "x"),
            "gather": ad.lax.all_gather(x, "x"),
            "gather_tiled1": ad.lax.all_gather(x, "x", axis=1, tiled=True),
            "gather_f32": ad.lax.all_gather(w, "x", tiled=True),
            "scatter": ad.lax.psum_scatter(z, "x"),
            "scatter_tiled": ad.lax.psum_scatter(z, "x", tiled=True),
            "ppermute": ad.lax.ppermute(x, "x", perm),
            "shift": ad.lax.ppermute(x, "x", [(i, (i + 1) % n) for i in range(n)]),
            "index": anp.reshape(ad.lax.axis_index("x"), (1,)),
            "local": x * 2.0,
        }

    split = {"scatter", "scatter_tiled", "ppermute", "shift", "index", "local"}
    args = inputs(n)
    out_specs = {name: P("x") if name in split else P() for name in [
        "psum", "pmax", "pmin", "pmean", "psum_int", "gather", "gather_tiled1", "gather_f32",
        "scatter", "scatter_tiled", "ppermute", "shift", "index", "local"]}
    g = ad.shard_map(f, mesh, in_specs=(P("x"), P("x"), P("x"), P("x")), out_specs=out_specs)
    out = g(args["x"], args["z"], args["w"], args["k"])
    results = {k: np.asarray(v) for k, v in out.items()}
    results["dp_w"] = data_parallel_sgd(mesh, args)
    try:  # not yet supported: a clear error naming the op and the line
        ad.shard_map(lambda xb: ad.grad(lambda v: ad.lax.psum(v.sum(), "x"))(xb), mesh,
                     in_specs=P("x"), out_specs=P("x"))(args["x"])
        results["grad_psum_error"] = np.array("")
    except Exception as err:  # noqa: BLE001
        results["grad_psum_error"] = np.array(f"{type(err).__name__}: {err}")
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **results)


def sgd_loss(w, xb, yb):
    return anp.sum((anp.tanh(xb @ w) - yb) ** 2)


def data_parallel_sgd(mesh, args, steps=20, lr=0.01):
    """Data-parallel SGD: each process's gradient on its rows, summed with psum
    (the shard_map inside jit, with an update outside it)."""

    def grads(w, xb, yb):
        return ad.lax.psum(ad.grad(sgd_loss)(w, xb, yb), "x")

    g = ad.shard_map(grads, mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())
    st = ad.jit(lambda w, X, y: w - lr * g(w, X, y))
    w = args["w0"]
    for _ in range(steps):
        w = st(w, args["X"], args["y"])
    return w


def raise_on_one(out_dir: str) -> None:
    ad.distributed.initialize()
    n, r = ad.distributed.process_count(), ad.distributed.process_index()
    if r == 1:
        raise RuntimeError("process 1 fails on purpose")
    mesh = ad.Mesh((n,), ("x",))
    ad.shard_map(lambda x: ad.lax.psum(x, "x"), mesh, in_specs=(P(),), out_specs=P())(
        np.ones(3))


def mesh_mismatch(out_dir: str) -> None:
    ad.distributed.initialize()
    n = ad.distributed.process_count()
    mesh = ad.Mesh((n + 1,), ("x",))
    ad.shard_map(lambda x: x, mesh, in_specs=(P(),), out_specs=P())(np.ones(3))


def shape_mismatch(out_dir: str) -> None:
    ad.distributed.initialize()
    n, r = ad.distributed.process_count(), ad.distributed.process_index()
    mesh = ad.Mesh((n,), ("x",))
    ad.shard_map(lambda x: ad.lax.psum(x, "x"), mesh, in_specs=(P(),), out_specs=P())(
        np.ones(3 + r))


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    {"collectives": collectives, "raise": raise_on_one, "mesh-mismatch": mesh_mismatch,
     "shape-mismatch": shape_mismatch}[case](out)
