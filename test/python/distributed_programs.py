"""Programs the distributed tests run under mpiexec (test_distributed.py).

    mpiexec -n N python distributed_programs.py <case> <out-dir>

`collectives`: every collective of mlir_autodiff.distributed in one
shard_map (one compilation), jvp/vjp/vmap through each of them (one jit,
`transforms`), 20 steps of data-parallel SGD twice (gradients of each
process's rows, psum'd; and `grad` of the psum'd loss outside the
shard_map) and a gradient through psum inside the body; each process saves
its results to <out-dir>/rank<r>.npz, and the test compares them with
numpy, finite differences and jax.
`raise`: process 1 raises while process 0 waits in a psum.
`mesh-mismatch`: a mesh whose size is not the number of processes.
`shape-mismatch`: the processes call shard_map with different shapes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

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
    # grad inside the body differentiates each process's program: psum's transpose is
    # psum, so d/dv psum(sum(v)) is the number of processes (as in pmap)
    results["grad_inside"] = np.asarray(ad.shard_map(
        lambda xb: ad.grad(lambda v: ad.lax.psum(v.sum(), "x"))(xb), mesh,
        in_specs=P("x"), out_specs=P("x"))(args["x"]))
    results.update(transforms(mesh, n))
    results["dp_w_grad_outside"] = data_parallel_sgd_grad_outside(mesh, args)
    results["hvp_checkpoint"] = hvp_through_checkpoint(mesh, args)
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **results)


def ad_cases(n: int) -> dict[str, tuple]:
    """name -> (the collective, the global argument's shape (split over the
    processes by rows), the shard_map's out_spec) of the transform checks."""
    perm = permutation(n)
    return {
        "psum": (lambda v: ad.lax.psum(v, "x"), (2 * n, 3), P()),
        "pmean": (lambda v: ad.lax.pmean(v, "x"), (2 * n, 3), P()),
        "pmax": (lambda v: ad.lax.pmax(v, "x"), (2 * n, 3), P()),
        "pmin": (lambda v: ad.lax.pmin(v, "x"), (2 * n, 3), P()),
        # every process holds the maximum: one process's tangent, not their sum
        "pmax_tied": (lambda v: ad.lax.pmax(ad.lax.psum(v, "x"), "x"), (2 * n, 3), P()),
        # (tiled, along axis 1: the rules read the axis attribute)
        "all_gather": (lambda v: ad.lax.all_gather(v, "x", axis=1, tiled=True), (2 * n, 3),
                       P()),
        "psum_scatter": (lambda v: ad.lax.psum_scatter(v, "x"), (n * n, 2), P("x")),
        "ppermute": (lambda v: ad.lax.ppermute(v, "x", perm), (2 * n, 3), P("x")),
        "axis_index": (lambda v: v * (ad.lax.axis_index("x") + 1.0), (2 * n, 3), P("x")),
    }


def ad_inputs(n: int) -> dict[str, dict[str, np.ndarray]]:
    """Points, tangents and cotangents of the transform checks (f64; the lanes of
    the vmap check are `x` and `x + t`)."""
    rng = np.random.default_rng(2323)
    cases = ad_cases(n)
    xs = {k: rng.standard_normal(c[1]) for k, c in cases.items()}
    ts = {k: rng.standard_normal(c[1]) for k, c in cases.items()}
    return {"x": xs, "t": ts}


def transforms(mesh, n: int) -> dict[str, np.ndarray]:
    """jvp, vjp and vmap through every collective, in one jit: each collective sits
    between two nonlinear functions in a shard_map over the global argument, and
    the results hold jvp(F)(x; t), vjp(F)(x; ct), vmap(F) over x + eps t, x - eps t,
    x and x + t (the central difference's points and two lanes to compare with F's
    unbatched values, the loop), and F at x and x + t."""
    cases = ad_cases(n)

    def F(xs):
        out = {}
        for k, (coll, _, spec) in cases.items():
            body = lambda v, coll=coll: anp.tanh(coll(anp.sin(v)))  # noqa: E731
            out[k] = ad.shard_map(body, mesh, in_specs=P("x"), out_specs=spec)(xs[k])
        return out

    def everything(xs, ts, cts, eps):
        y, tangent = ad.jvp(F, (xs,), (ts,))
        _, pull = ad.vjp(F, xs)
        (cot,) = pull(cts)
        # vmap over four points: the two of the central difference, x and x + t
        lanes = {k: anp.stack([xs[k] + eps * ts[k], xs[k] - eps * ts[k], xs[k],
                               xs[k] + ts[k]]) for k in xs}
        return y, tangent, cot, ad.vmap(F)(lanes), F({k: xs[k] + ts[k] for k in xs})

    def half(h):
        """A bfloat16 argument: its cotangent is averaged in f32 (MPI has no bf16)."""
        loss = ad.shard_map(lambda v: ad.lax.psum((v * v).sum().astype(anp.float32), "x"),
                            mesh, in_specs=P("x"), out_specs=P())
        return ad.grad(loss)(h)

    a = ad_inputs(n)
    shapes = out_shapes(cases, n)
    rng = np.random.default_rng(77)
    cts = {k: rng.standard_normal(shapes[k]) for k in cases}
    y, tangent, cot, batched, last = ad.jit(everything)(a["x"], a["t"], cts, 1e-6)
    out = {"grad_bf16": np.asarray(ad.jit(half)(
        np.arange(2 * n, dtype=np.float32).astype(anp.bfloat16))).astype(np.float32)}
    for k in cases:
        out[f"ad_{k}_jvp"] = np.asarray(tangent[k])
        out[f"ad_{k}_vjp"] = np.asarray(cot[k])
        out[f"ad_{k}_ct"] = cts[k]
        out[f"ad_{k}_vmap"] = np.asarray(batched[k])
        out[f"ad_{k}_loop"] = np.stack([np.asarray(y[k]), np.asarray(last[k])])
    return out


def out_shapes(cases, n: int) -> dict[str, tuple[int, ...]]:
    """The global output shape of each case."""
    shapes = {}
    for k, (_, shape, spec) in cases.items():
        if k == "all_gather":
            shapes[k] = (2, 3 * n)
        elif k == "psum_scatter":
            shapes[k] = (2 * n,)
        elif spec == P():
            shapes[k] = (shape[0] // n,) + shape[1:]
        else:
            shapes[k] = shape
    return shapes


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


def data_parallel_sgd_grad_outside(mesh, args, steps=20, lr=0.01):
    """The same SGD with `grad` outside the shard_map: the loss is the psum of each
    process's rows' loss, and the gradient of the replicated `w` is assembled by the
    shard_map's boundary (the mean of the processes' copies)."""

    def loss(w, X, y):
        return ad.shard_map(lambda w, xb, yb: ad.lax.psum(sgd_loss(w, xb, yb), "x"), mesh,
                            in_specs=(P(), P("x"), P("x")), out_specs=P())(w, X, y)

    st = ad.jit(lambda w, X, y: w - lr * ad.grad(loss)(w, X, y))
    w = args["w0"]
    for _ in range(steps):
        w = st(w, args["X"], args["y"])
    return w


def hvp_through_checkpoint(mesh, args):
    """A Hessian-vector product (jvp of grad) of the psum'd loss, its body under
    `ad.checkpoint` (recomputed, collectives included, in the backward pass)."""

    def loss(w, X, y):
        body = ad.checkpoint(lambda w, xb, yb: ad.lax.psum(sgd_loss(w, xb, yb), "x"))
        return ad.shard_map(body, mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())(
            w, X, y)

    hvp = ad.jit(lambda w, X, y, v: ad.jvp(lambda u: ad.grad(loss)(u, X, y), (w,), (v,))[1])
    return np.asarray(hvp(args["w0"], args["X"], args["y"], np.ones_like(args["w0"])))


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


# ---- multi-axis meshes (issue 23: meshes of several axes, collectives over part of them)

#: The mesh shapes run with n processes (axes "dp", "tp").
MESH_SHAPES = {4: [(2, 2)], 2: [(1, 2), (2, 1)]}

#: The meshes whose transforms are checked too ((1, 2) is (2, 1) transposed: its
#: values are checked, its derivatives would repeat (2, 1)'s compile time).
MESH_AD_SHAPES = [(2, 2), (2, 1)]

#: The axis selections every collective is checked over.
MESH_AXES = {"dp": "dp", "tp": "tp", "both": ("dp", "tp"), "swapped": ("tp", "dp")}

#: Iterations of the loop of collectives over sub-axes (two per iteration), by the
#: number of processes: with 2, more collectives than the 2,048 communicators MPICH
#: has, were one split off per call (4 oversubscribed processes wait ~15 ms per
#: collective on 2 cores, so that loop is short).
MESH_LOOP = {2: 1060, 4: 8}


def mesh_inputs(shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """Global arguments, split P("dp", "tp") into blocks of 2x3 (`x`) and 4x3 (`y`)."""
    a, b = shape
    rng = np.random.default_rng(2300 + 10 * a + b)
    return {"x": rng.standard_normal((2 * a, 3 * b)), "y": rng.standard_normal((4 * a, 3 * b))}


def mesh_perm(n: int) -> list[tuple[int, int]]:
    """A permutation of a group of n (with a process receiving nothing for n = 4)."""
    return {1: [(0, 0)], 2: [(0, 1), (1, 0)], 4: [(0, 2), (2, 0), (1, 3)]}[n]


def _group_n(mesh, axes) -> int:
    names = (axes,) if isinstance(axes, str) else axes
    return int(np.prod([mesh.axis_size(a) for a in names]))


def mesh_values(mesh) -> dict[str, np.ndarray]:
    """Every collective over each axis selection, in one shard_map; every output is
    split P("dp", "tp"), so the global result holds each process's own block."""

    def f(x, y):
        out = {}
        for tag, axes in MESH_AXES.items():
            n = _group_n(mesh, axes)
            out[f"psum_{tag}"] = ad.lax.psum(x, axes)
            out[f"pmax_{tag}"] = ad.lax.pmax(x, axes)
            out[f"pmin_{tag}"] = ad.lax.pmin(x, axes)
            out[f"pmean_{tag}"] = ad.lax.pmean(x, axes)
            out[f"gather_{tag}"] = ad.lax.all_gather(x, axes, axis=1, tiled=True)
            out[f"scatter_{tag}"] = ad.lax.psum_scatter(y, axes, tiled=True)
            out[f"ppermute_{tag}"] = ad.lax.ppermute(x, axes, mesh_perm(n))
            out[f"index_{tag}"] = anp.reshape(ad.lax.axis_index(axes), (1, 1))
        return out

    args = mesh_inputs(mesh.shape)
    g = ad.shard_map(f, mesh, in_specs=P("dp", "tp"), out_specs=P("dp", "tp"))
    out = {k: np.asarray(v) for k, v in g(args["x"], args["y"]).items()}
    # a dimension split over both axes (P(("dp", "tp"))), gathered back the same way
    flat = ad.shard_map(lambda v: (v * 2.0, anp.reshape(ad.lax.axis_index(("dp", "tp")),
                                                         (1,))),
                        mesh, in_specs=P(("dp", "tp")), out_specs=P(("dp", "tp")))
    out["flat_double"], out["flat_index"] = (np.asarray(v) for v in flat(args["y"]))
    return out


def mesh_ad_cases(mesh) -> dict[str, tuple]:
    """name -> (a chain of every collective over one axis selection, global shape):
    pmax, psum, all_gather (axis 1) and psum_scatter (axis 1, back to the block's
    shape), ppermute, scaled by axis_index + 1; the argument is split P("dp", "tp")
    into 2x3 blocks, the output the same way."""
    a, b = mesh.shape
    cases = {}
    for tag, axes in (("dp", "dp"), ("tp", "tp"), ("both", ("dp", "tp"))):
        n = _group_n(mesh, axes)

        def chain(v, ax=axes, p=mesh_perm(n)):
            v = ad.lax.psum(ad.lax.pmax(v, ax) * v, ax)
            v = ad.lax.psum_scatter(anp.sin(ad.lax.all_gather(v, ax, axis=1, tiled=True)),
                                    ax, scatter_dimension=1, tiled=True)
            return ad.lax.ppermute(v, ax, p) * (ad.lax.axis_index(ax) + 1.0) + v

        cases[tag] = (chain, (2 * a, 3 * b))
    return cases


def mesh_transforms(mesh) -> dict[str, np.ndarray]:
    """jvp, vjp and vmap through each collective over each axis and both, in one jit
    (as `transforms`): F(x) = tanh(collective(sin(block))) per process."""
    cases = mesh_ad_cases(mesh)

    def F(xs):
        return {k: ad.shard_map(lambda v, c=c: anp.tanh(c(anp.sin(v))), mesh,
                                in_specs=P("dp", "tp"), out_specs=P("dp", "tp"))(xs[k])
                for k, (c, _) in cases.items()}

    def everything(xs, ts, cts, eps):
        y, tangent = ad.jvp(F, (xs,), (ts,))
        _, pull = ad.vjp(F, xs)
        (cot,) = pull(cts)
        lanes = {k: anp.stack([xs[k] + eps * ts[k], xs[k] - eps * ts[k], xs[k],
                               xs[k] + ts[k]]) for k in xs}
        return y, tangent, cot, ad.vmap(F)(lanes), F({k: xs[k] + ts[k] for k in xs})

    pts = mesh_ad_inputs(mesh)
    y, tangent, cot, batched, last = ad.jit(everything)(pts["x"], pts["t"], pts["ct"], 1e-6)
    out = {}
    for k in cases:
        out[f"ad_{k}_jvp"] = np.asarray(tangent[k])
        out[f"ad_{k}_vjp"] = np.asarray(cot[k])
        out[f"ad_{k}_vmap"] = np.asarray(batched[k])
        out[f"ad_{k}_loop"] = np.stack([np.asarray(y[k]), np.asarray(last[k])])
    return out


def mesh_ad_inputs(mesh) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2324)
    cases = mesh_ad_cases(mesh)
    xs = {k: rng.standard_normal(c[1]) for k, c in cases.items()}
    ts = {k: rng.standard_normal(c[1]) for k, c in cases.items()}
    cts = {k: rng.standard_normal(c[1]) for k, c in cases.items()}
    return {"x": xs, "t": ts, "ct": cts}


def mesh_loop(mesh) -> np.ndarray:
    """MESH_LOOP[number of processes] iterations of a pmean over "tp" and a pmean over "dp" (one fori_loop),
    each a collective over a sub-communicator: made once, not per call."""

    def body(v):
        return ad.lax.fori_loop(0, MESH_LOOP[mesh.size], lambda i, c: ad.lax.pmean(
            ad.lax.pmean(c, "tp"), "dp") + 1.0, v)

    g = ad.shard_map(body, mesh, in_specs=P("dp", "tp"), out_specs=P("dp", "tp"))
    return np.asarray(g(mesh_inputs(mesh.shape)["x"]))


def partitioned_inputs(n: int) -> dict[str, Any]:
    """Arguments of the jit(in_shardings=...) checks (the batch: 4 rows per process)."""
    rng = np.random.default_rng(2325)
    return {"x": rng.standard_normal((4 * n, 3)), "w": rng.standard_normal((3, 4)),
            "params": {"W1": rng.standard_normal((3, 5)), "b1": rng.standard_normal(5),
                       "W2": rng.standard_normal((5, 2)), "b2": rng.standard_normal(2)},
            "y": rng.standard_normal((4 * n, 2))}


def tanh_sum(x, w):
    return anp.sum(anp.tanh(x @ w))


def mlp_loss(p, X, y):
    h = anp.tanh(X @ p["W1"] + p["b1"])
    return anp.mean((h @ p["W2"] + p["b2"] - y) ** 2)


def partitioned(mesh) -> dict[str, np.ndarray]:
    """jit(f, in_shardings=...) with the batch split over both mesh axes (upstream's
    propagation and partitioning): values and gradients (differentiated, then
    partitioned), and an out_shardings split result, all global arrays."""
    batch = ad.NamedSharding(mesh, P(("dp", "tp")))
    rep = ad.NamedSharding(mesh, P())
    a = partitioned_inputs(mesh.size)
    out = {}
    out["pj_tanh_sum"] = ad.jit(tanh_sum, in_shardings=(batch, rep))(a["x"], a["w"])
    gx, gw = ad.jit(ad.grad(tanh_sum, argnums=(0, 1)), in_shardings=(batch, rep))(
        a["x"], a["w"])
    out["pj_tanh_sum_gx"], out["pj_tanh_sum_gw"] = gx, gw
    out["pj_tanh"] = ad.jit(lambda x, w: anp.tanh(x @ w), in_shardings=(batch, rep),
                            out_shardings=batch)(a["x"], a["w"])
    out["pj_mlp"] = ad.jit(mlp_loss, in_shardings=(rep, batch, batch))(
        a["params"], a["x"], a["y"])
    grads = ad.jit(ad.grad(mlp_loss), in_shardings=(rep, batch, batch))(
        a["params"], a["x"], a["y"])
    out.update({f"pj_mlp_g{k}": v for k, v in grads.items()})
    return {k: np.asarray(v) for k, v in out.items()}


def multi_axis_meshes(out_dir: str) -> None:
    import time

    ad.distributed.initialize()
    n, r = ad.distributed.process_count(), ad.distributed.process_index()
    for shape in MESH_SHAPES[n]:
        mesh = ad.Mesh(shape, ("dp", "tp"))
        start = time.perf_counter()
        results = mesh_values(mesh)
        t1 = time.perf_counter()
        if shape in MESH_AD_SHAPES:
            results.update(mesh_transforms(mesh))
        t2 = time.perf_counter()
        results["loop"] = mesh_loop(mesh)
        t3 = time.perf_counter()
        if shape == MESH_SHAPES[n][-1]:
            results.update(partitioned(mesh))
        results["seconds"] = np.array([t1 - start, t2 - t1, t3 - t2, time.perf_counter() - t3])
        np.savez(os.path.join(out_dir, f"mesh{shape[0]}x{shape[1]}_rank{r}.npz"), **results)


# -- tensor parallelism and sharded random draws (issue 23) ----------------------
#
# `sharded`: one launch per process count for all of these: a Megatron-style
# tensor-parallel MLP (value, global gradient, jvp; its weights passed or
# closed over), each process's block of global random draws
# (`out_sharding`), plain and rank-folded draws in the body, and 20 steps of
# data-parallel training with dropout, and the tensor-parallel example. The
# test compares them with jax and with the single-process programs below (run
# in the test's own process).

#: tensor-parallel layer sizes: batch, input, hidden (split), output
TP_SIZES = (3, 5, 8, 2)


def tp_inputs() -> dict[str, np.ndarray]:
    """The layer pair's arguments, tangents and the cotangent-free loss's inputs
    (the same for every process count: the hidden size 8 splits over 2 and 4)."""
    rng = np.random.default_rng(2301)
    b, d, h, o = TP_SIZES
    shapes = {"x": (b, d), "w1": (d, h), "b1": (h,), "w2": (h, o), "b2": (o,)}
    a = {k: rng.standard_normal(s) for k, s in shapes.items()}
    a.update({"t_" + k: rng.standard_normal(s) for k, s in shapes.items()})
    return a


def mlp_pair(x, w1, b1, w2, b2):
    """The unsharded layer pair: tanh(x w1 + b1) w2 + b2."""
    return anp.tanh(x @ w1 + b1) @ w2 + b2


def tp_loss_of(y):
    return anp.sum(anp.sin(y) * y)


def tensor_parallel(mesh, a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layer pair over the mesh in Megatron's split: w1 by columns, b1 with them,
    w2 by rows, one psum at the end (x and b2 replicated). In one jit: its value,
    `grad` of a loss of it (outside the shard_map: the global gradient) and `jvp`
    with the weights passed as arguments, and `grad` with them closed over by the
    body (inside a loop and a checkpoint of the body)."""

    def body(x, w1, b1, w2, b2):
        return ad.lax.psum(anp.tanh(x @ w1 + b1) @ w2, "x") + b2

    tp = ad.shard_map(body, mesh, in_specs=(P(), P(None, "x"), P("x"), P("x", None), P()),
                      out_specs=P())

    def closed_over(x, w1, b1, w2, b2):
        """Only w1 passed (split): x, b2 and the global b1 and w2 (of which the body
        takes its block) closed over, used in a checkpoint inside a loop (y / 2 after
        two steps)."""
        def inner(w1b):
            cols = _tp_columns(mesh, b1.shape[0])
            step = ad.checkpoint(
                lambda y: y + ad.lax.psum(anp.tanh(x @ w1b + b1[cols]) @ w2[cols], "x") + b2)
            return ad.lax.fori_loop(0, 2, lambda i, y: step(y),
                                    anp.zeros((x.shape[0], b2.shape[0])))
        return ad.shard_map(inner, mesh, in_specs=P(None, "x"), out_specs=P())(w1) / 2

    names = ("x", "w1", "b1", "w2", "b2")

    def everything(args, tangents):
        y = tp(*args)
        grads = {}
        for label, f in (("", tp), ("_closed", closed_over)):
            grads[label] = ad.grad(lambda xs, f=f: tp_loss_of(f(*xs)))(args)
        _, ty = ad.jvp(tp, args, tangents)
        return y, grads, ty

    y, grads, ty = ad.jit(everything)(tuple(a[k] for k in names),
                                      tuple(a["t_" + k] for k in names))
    out = {"tp_y": np.asarray(y), "tp_jvp": np.asarray(ty)}
    for label, g in grads.items():
        for k, v in zip(names, g):
            out[f"tp_grad{label}_{k}"] = np.asarray(v)
    return out


def _tp_columns(mesh, size):
    """This process's block of `size` indices along the mesh axis: a traced slice
    (the closed-over b1 and w2 are global; the body takes its block itself)."""
    n = mesh.shape[0]
    return anp.arange(size // n) + ad.lax.axis_index("x") * (size // n)


def draw_cases(n: int) -> dict[str, tuple]:
    """name -> (draw(key, global shape, out_sharding), global shape, out_sharding):
    blocks split by rows and by inner dimensions, runs that start inside a Philox
    block (1 and 2 elements per word pair), 32- and 64-bit, every distribution."""
    R = ad.random
    return {
        "bernoulli": (lambda k, s, o: R.bernoulli(k, 0.3, s, out_sharding=o).astype(np.float32),
                      (2 * n, 3), P("x")),
        "uniform_f64": (lambda k, s, o: R.uniform(k, s, np.float64, out_sharding=o),
                        (n, 5), P("x")),
        "uniform_bounds": (lambda k, s, o: R.uniform(k, s, np.float64, anp.asarray(-2.0),
                                                     3.0, out_sharding=o), (3 * n,), P("x")),
        "normal_cols": (lambda k, s, o: R.normal(k, s, np.float32, out_sharding=o),
                        (3, 2 * n), P(None, "x")),
        "normal_f64_mid": (lambda k, s, o: R.normal(k, s, np.float64, out_sharding=o),
                           (2, 3 * n, 3), P(None, "x")),
        "randint": (lambda k, s, o: R.randint(k, s, -5, 100, out_sharding=o), (2 * n, 3), P("x")),
        "uniform_aligned": (lambda k, s, o: R.uniform(k, s, out_sharding=o), (4 * n, 4), P("x")),
        "uniform_bf16": (lambda k, s, o: R.uniform(k, s, anp.bfloat16, out_sharding=o)
                         .astype(np.float32), (3 * n,), P("x")),
        "replicated": (lambda k, s, o: R.normal(k, s, np.float64, out_sharding=o), (2, 3),
                       P(None, None)),
    }


#: the key of the draws and of the dropout training
RNG_SEED = 2323


def sharded_draws(mesh, n: int) -> dict[str, np.ndarray]:
    """Each process's block of the global draws (gathered by out_specs), a plain
    keyed draw and one of the implicit generator in the body (the same numbers on
    every process) and a draw of the key folded with axis_index (each its own)."""
    cases = draw_cases(n)
    key = ad.random.key(RNG_SEED)

    def body(k):
        out = {name: f(k, s, o) for name, (f, s, o) in cases.items()}
        out["plain"] = ad.random.uniform(k, (2, 3), np.float64)
        out["folded"] = ad.random.uniform(ad.random.fold_in(k, ad.lax.axis_index("x")),
                                          (2, 3), np.float64)
        out["stateful"] = ad.random.normal((4,), np.float64)
        return out

    specs = {name: o for name, (_, _, o) in cases.items()}
    specs.update(plain=P(), folded=P("x"), stateful=P())
    ad.random.manual_seed(RNG_SEED)
    out = ad.shard_map(body, mesh, in_specs=P(), out_specs=specs)(key)
    return {"draw_" + k: np.asarray(v) for k, v in out.items()}


def single_process_draws(n: int) -> dict[str, np.ndarray]:
    """What `sharded_draws` must give, drawn in one process: the global draws; a
    process's plain draw; the folded draws of every position, stacked."""
    def draws(key):
        out = {name: f(key, s, None) for name, (f, s, _) in draw_cases(n).items()}
        out["plain"] = ad.random.uniform(key, (2, 3), np.float64)
        out["folded"] = anp.concatenate([ad.random.uniform(
            ad.random.fold_in(key, r), (2, 3), np.float64) for r in range(n)])
        out["stateful"] = ad.random.normal((4,), np.float64)
        return out

    ad.random.manual_seed(RNG_SEED)
    out = ad.jit(draws)(ad.random.key(RNG_SEED))
    return {"draw_" + k: np.asarray(v) for k, v in out.items()}


#: the dropout MLP: global batch, sizes, dropout rate, steps and learning rate
DROPOUT = {"batch": 8, "sizes": (4, 6, 3), "rate": 0.25, "steps": 20, "lr": 0.05}


def dropout_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2302)
    d, h, o = DROPOUT["sizes"]
    b = DROPOUT["batch"]
    return {"x": rng.standard_normal((b, d)), "y": np.eye(o)[rng.integers(0, o, b)],
            "w1": rng.standard_normal((d, h)) * 0.5, "b1": np.zeros(h),
            "w2": rng.standard_normal((h, o)) * 0.5, "b2": np.zeros(o)}


def dropout_loss(params, x, y, key, out_sharding=None):
    """Summed cross-entropy of a one-hidden-layer MLP with dropout on the hidden
    units; the mask is the global batch's (`out_sharding`: this process's rows)."""
    w1, b1, w2, b2 = params
    rate = DROPOUT["rate"]
    h = anp.tanh(x @ w1 + b1)
    keep = ad.random.bernoulli(key, 1.0 - rate, (DROPOUT["batch"], h.shape[1]),
                               out_sharding=out_sharding)
    h = anp.where(keep, h / (1.0 - rate), 0.0)
    return -anp.sum(y * ad.nn.log_softmax(h @ w2 + b2, axis=-1))


def dropout_training(mesh=None) -> list[np.ndarray]:
    """DROPOUT["steps"] SGD steps, the key of step t `fold_in(key, t)`: over the mesh,
    the batch split by rows and `grad` outside the shard_map (the global gradient);
    without a mesh, in one process on the whole batch."""
    a = dropout_inputs()
    if mesh is None:
        loss = dropout_loss
    else:
        def loss(params, x, y, key):
            local = ad.shard_map(
                lambda p, xb, yb, k: ad.lax.psum(dropout_loss(p, xb, yb, k, P("x")), "x"),
                mesh, in_specs=(P(), P("x"), P("x"), P()), out_specs=P())
            return local(params, x, y, key)

    def step(params, x, y, key, t):
        g = ad.grad(loss)(params, x, y, ad.random.fold_in(key, t))
        return tuple(p - DROPOUT["lr"] * gp for p, gp in zip(params, g))

    st = ad.jit(step)
    params = tuple(a[k] for k in ("w1", "b1", "w2", "b2"))
    key = ad.random.key(RNG_SEED)
    for t in range(DROPOUT["steps"]):
        params = st(params, a["x"], a["y"], key, np.int32(t))
    return [np.asarray(p) for p in params]


def sharded(out_dir: str) -> None:
    ad.distributed.initialize()
    n, r = ad.distributed.process_count(), ad.distributed.process_index()
    mesh = ad.Mesh((n,), ("x",))
    results = tensor_parallel(mesh, tp_inputs())
    results.update(sharded_draws(mesh, n))
    for i, p in enumerate(dropout_training(mesh)):
        results[f"dropout_p{i}"] = p
    if n == 2:  # (the example's check is the same at any count: once is enough)
        results["example_tp_rc"] = np.int64(tensor_parallel_example())
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **results)


def tensor_parallel_example() -> int:
    """examples/distributed_mlp.py --tensor-parallel --check, small, in this launch:
    its exit status (0: equal to single-process training to 1e-10)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "distributed_mlp.py"
    spec = importlib.util.spec_from_file_location("distributed_mlp", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example.main(["--tensor-parallel", "--steps", "20", "--batch", "32",
                         "--hidden", "8", "--check"])


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    {"collectives": collectives, "raise": raise_on_one, "mesh-mismatch": mesh_mismatch,
     "shape-mismatch": shape_mismatch, "multi-axis-meshes": multi_axis_meshes,
     "sharded": sharded}[case](out)
