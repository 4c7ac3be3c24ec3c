"""mlir_autodiff.distributed: collectives over MPI processes (issue 23).

The multi-process tests launch test/python/distributed_programs.py with the
`mpich` wheel's mpiexec (2 processes, and 4 oversubscribed on this 2-core
machine) and compare every process's results with numpy. They are skipped,
with the reason, when the wheel (the `mpi` extra; the `test` extra installs
it) is missing. The in-process tests need no MPI.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import distributed

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import distributed_programs as programs  # noqa: E402

needs_mpi = pytest.mark.skipif(
    not distributed.is_available() or distributed.mpiexec() is None,
    reason="the mpich wheel is not installed (pip install 'mlir-autodiff[mpi]')")

P = ad.PartitionSpec


def launch(n: int, case: str, out: pathlib.Path, timeout: float = 120
           ) -> subprocess.CompletedProcess:
    # the processes check values: LLVM -O0 (as conftest's llvm_o0; a quarter less CPU time
    # for the n processes that each compile the same programs)
    env = dict(os.environ, PYTHONUNBUFFERED="1", AUTODIFF_OPT_LEVEL="0")
    # hydra's launcher: processes on this host only, no ssh
    cmd = [distributed.mpiexec(), "-n", str(n), "-launcher", "fork", sys.executable,
           str(HERE / "distributed_programs.py"), case, str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def expected(n: int) -> dict[str, np.ndarray]:
    """Each collective's result, from numpy, on the arguments the program uses."""
    a = programs.inputs(n)
    x = a["x"].reshape(n, 2, 3)      # block r of x is x[r]
    z = a["z"].reshape(n, n, 2)
    k = a["k"].reshape(n, 1, 4)
    out = {
        "psum": x.sum(0), "pmax": x.max(0), "pmin": x.min(0),
        "pmean": x.sum((1, 2)).mean(), "psum_int": k.sum(0, dtype=np.int32),
        "gather": x, "gather_tiled1": np.concatenate(list(x), axis=1),
        "gather_f32": a["w"],
        "index": np.arange(n, dtype=np.int32),
        "local": a["x"] * 2,
    }
    # psum_scatter: process p keeps row p of the summed (n, 2) blocks.
    summed = z.sum(0)
    out["scatter"] = summed.reshape(-1)
    out["scatter_tiled"] = summed
    moved = np.zeros_like(x)
    for s, d in programs.permutation(n):
        moved[d] = x[s]
    out["ppermute"] = moved.reshape(2 * n, 3)
    out["shift"] = np.roll(x, 1, axis=0).reshape(2 * n, 3)
    return out


def full_batch_hvp(a: dict[str, np.ndarray]) -> np.ndarray:
    """jax's Hessian-vector product of the full-batch loss at w0 along ones."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def loss(w):
        return jnp.sum((jnp.tanh(a["X"] @ w) - a["y"]) ** 2)

    w = jnp.asarray(a["w0"])
    return np.asarray(jax.jvp(jax.grad(loss), (w,), (jnp.ones_like(w),))[1])


def full_batch_sgd(a: dict[str, np.ndarray], steps: int = 20, lr: float = 0.01) -> np.ndarray:
    """The same SGD as programs.data_parallel_sgd, on the whole batch, with jax."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def loss(w):
        return jnp.sum((jnp.tanh(a["X"] @ w) - a["y"]) ** 2)

    w = jnp.asarray(a["w0"])
    for _ in range(steps):
        w = w - lr * jax.grad(loss)(w)
    return np.asarray(w)


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_collectives_match_numpy(n, tmp_path):
    proc = launch(n, "collectives", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = expected(n)
    dp_w = full_batch_sgd(programs.inputs(n))
    hvp = full_batch_hvp(programs.inputs(n))
    ad_in = programs.ad_inputs(n)
    for r in range(n):
        got = np.load(tmp_path / f"rank{r}.npz")
        # data-parallel training equals full-batch training (jax, f64), with the
        # gradients psum'd inside the body and with grad outside the shard_map
        np.testing.assert_allclose(got["dp_w"], dp_w, rtol=0, atol=1e-10)
        np.testing.assert_allclose(got["dp_w_grad_outside"], dp_w, rtol=0, atol=1e-10)
        # grad inside the body: each process's program, psum transposing to psum
        np.testing.assert_array_equal(got["grad_inside"], np.full((2 * n, 3), float(n)))
        # second order through the collectives, under checkpoint
        np.testing.assert_allclose(got["hvp_checkpoint"], hvp, rtol=1e-12, atol=1e-12)
        check_transforms(got, ad_in, r)
        # a bfloat16 argument of shard_map under grad: d sum(v^2) = 2 v (exact here)
        np.testing.assert_array_equal(got["grad_bf16"], 2 * np.arange(2 * n, dtype=np.float32))
        extra = {"dp_w", "dp_w_grad_outside", "grad_inside", "hvp_checkpoint", "grad_bf16"}
        ad_keys = {k for k in got.files if k.startswith("ad_")}
        assert sorted(set(got.files) - extra - ad_keys) == sorted(want), (r, got.files)
        for name, w in want.items():
            g = got[name]
            assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, \
                (r, name, g.shape, g.dtype)
            if name == "gather_f32":  # bit for bit: -0.0, NaN and -inf included
                np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
            elif g.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13, err_msg=f"{r} {name}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{r} {name}")


def check_transforms(got, ad_in, r: int) -> None:
    """jvp through each collective against central differences (f64, eps 1e-6), vjp
    by the transpose identity <ct, jvp(t)> = <vjp(ct), t>, vmap against F at each
    point (a loop)."""
    cases = [k[3:-4] for k in got.files if k.startswith("ad_") and k.endswith("_jvp")]
    assert len(cases) == 9, cases
    for k in cases:
        jvp, batched = got[f"ad_{k}_jvp"], got[f"ad_{k}_vmap"]
        fd = (batched[0] - batched[1]) / 2e-6
        assert np.abs(jvp).max() > 0.1, (r, k)
        np.testing.assert_allclose(jvp, fd, rtol=1e-6, atol=1e-8, err_msg=f"{r} {k} jvp")
        vjp, ct, t = got[f"ad_{k}_vjp"], got[f"ad_{k}_ct"], ad_in["t"][k]
        assert vjp.shape == t.shape, (r, k)
        lhs, rhs = np.vdot(ct, jvp), np.vdot(vjp, t)
        assert abs(lhs - rhs) <= 1e-12 * (1 + abs(lhs)), (r, k, lhs, rhs)
        np.testing.assert_allclose(batched[2:], got[f"ad_{k}_loop"], rtol=1e-14,
                                   atol=1e-14, err_msg=f"{r} {k} vmap")
        assert not np.array_equal(batched[2], batched[3]), (r, k)


@needs_mpi
def test_a_failing_process_stops_all_of_them(tmp_path):
    start = time.monotonic()
    proc = launch(2, "raise", tmp_path, timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    assert "process 1 fails on purpose" in proc.stderr
    assert "aborting all 2 processes" in proc.stderr


@needs_mpi
def test_mesh_must_match_the_number_of_processes(tmp_path):
    proc = launch(2, "mesh-mismatch", tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "the mesh has 3 positions but 2 MPI processes run" in proc.stderr


@needs_mpi
def test_processes_with_different_shapes_are_an_error(tmp_path):
    proc = launch(2, "shape-mismatch", tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "the processes were called with different argument shapes" in proc.stderr
    assert "f64[3]" in proc.stderr or "f64[4]" in proc.stderr


@needs_mpi
def test_data_parallel_mlp_example_equals_full_batch_training():
    """examples/distributed_mlp.py: 20 data-parallel steps over 2 processes equal 20
    single-process full-batch steps to 1e-10 in f64 (the example's --check)."""
    proc = subprocess.run(
        [distributed.mpiexec(), "-n", "2", "-launcher", "fork", sys.executable,
         str(HERE.parents[1] / "examples" / "distributed_mlp.py"), "--steps", "20",
         "--batch", "64", "--hidden", "16", "--check"],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("max |data-parallel - full batch|") == 2


# -- multi-axis meshes: one launch per process count ----------------------------


def _group_of(shape, tag: str, i: int, j: int) -> list[tuple[int, int]]:
    """The group of process (i, j) of a ("dp", "tp") mesh for the axes `tag`, in group
    order (row-major over the axes named, in their order)."""
    a, b = shape
    return {"dp": [(k, j) for k in range(a)], "tp": [(i, k) for k in range(b)],
            "both": [(p, q) for p in range(a) for q in range(b)],
            "swapped": [(p, q) for q in range(b) for p in range(a)]}[tag]


def mesh_expected(shape) -> dict[str, np.ndarray]:
    """numpy's value of every entry of programs.mesh_values, process by process."""
    a, b = shape
    args = programs.mesh_inputs(shape)
    X = {(i, j): args["x"][2 * i:2 * i + 2, 3 * j:3 * j + 3] for i in range(a) for j in range(b)}
    Y = {(i, j): args["y"][4 * i:4 * i + 4, 3 * j:3 * j + 3] for i in range(a) for j in range(b)}

    def assemble(fn):
        return np.block([[fn(i, j) for j in range(b)] for i in range(a)])

    out = {}
    for tag in programs.MESH_AXES:
        def group(i, j, tag=tag):
            return _group_of(shape, tag, i, j)

        def stack(i, j, blocks=X, tag=tag):
            return np.stack([blocks[m] for m in group(i, j, tag)])

        out[f"psum_{tag}"] = assemble(lambda i, j: stack(i, j).sum(0))
        out[f"pmax_{tag}"] = assemble(lambda i, j: stack(i, j).max(0))
        out[f"pmin_{tag}"] = assemble(lambda i, j: stack(i, j).min(0))
        out[f"pmean_{tag}"] = assemble(lambda i, j: stack(i, j).mean(0))
        out[f"gather_{tag}"] = assemble(lambda i, j: np.concatenate(list(stack(i, j)), 1))

        def scatter(i, j, tag=tag):
            g, n = group(i, j).index((i, j)), len(group(i, j))
            total = stack(i, j, Y).sum(0)
            rows = total.shape[0] // n
            return total[g * rows:(g + 1) * rows]

        def permute(i, j, tag=tag):
            members = group(i, j)
            g = members.index((i, j))
            src = {d: s for s, d in programs.mesh_perm(len(members))}
            return X[members[src[g]]] if g in src else np.zeros((2, 3))

        out[f"scatter_{tag}"] = assemble(scatter)
        out[f"ppermute_{tag}"] = assemble(permute)
        out[f"index_{tag}"] = assemble(
            lambda i, j, tag=tag: np.array([[group(i, j, tag).index((i, j))]], np.int32))
    out["flat_double"] = 2 * args["y"]
    out["flat_index"] = np.arange(a * b, dtype=np.int32)
    # every process ends with the mean of all blocks, plus one per iteration
    mean = np.mean([X[k] for k in X], axis=0) + programs.MESH_LOOP[a * b]
    out["loop"] = np.block([[mean] * b] * a)
    return out


def partitioned_expected(n: int) -> dict[str, np.ndarray]:
    """jax's (unsharded) values of programs.partitioned."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    a = programs.partitioned_inputs(n)

    def tanh_sum(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    def mlp_loss(p, X, y):
        h = jnp.tanh(X @ p["W1"] + p["b1"])
        return jnp.mean((h @ p["W2"] + p["b2"] - y) ** 2)

    gx, gw = jax.grad(tanh_sum, argnums=(0, 1))(a["x"], a["w"])
    out = {"pj_tanh_sum": tanh_sum(a["x"], a["w"]), "pj_tanh_sum_gx": gx,
           "pj_tanh_sum_gw": gw, "pj_tanh": jnp.tanh(a["x"] @ a["w"]),
           "pj_mlp": mlp_loss(a["params"], a["x"], a["y"])}
    grads = jax.grad(mlp_loss)(a["params"], a["x"], a["y"])
    out.update({f"pj_mlp_g{k}": v for k, v in grads.items()})
    return {k: np.asarray(v) for k, v in out.items()}


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_multi_axis_meshes(n, tmp_path):
    """Meshes ("dp", "tp") of (2, 2) on 4 processes and (1, 2), (2, 1) on 2: every
    collective over each axis, both and both swapped against numpy; jvp (central
    differences), vjp (transpose identity) and vmap through them over each axis and
    both (not for (1, 2): (2, 1) transposed); a loop of more collectives over
    sub-axes than MPICH has communicators (2 processes). On the last mesh,
    jit(in_shardings=...) (upstream's partitioning) of a matmul+tanh+sum and of an
    MLP loss, and their gradients, against jax's unsharded values."""
    proc = launch(n, "multi-axis-meshes", tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for shape in programs.MESH_SHAPES[n]:
        want = mesh_expected(shape)
        if shape == programs.MESH_SHAPES[n][-1]:
            want.update(partitioned_expected(n))
        mesh = ad.Mesh(shape, ("dp", "tp"))
        pts = programs.mesh_ad_inputs(mesh)
        for r in range(n):
            got = np.load(tmp_path / f"mesh{shape[0]}x{shape[1]}_rank{r}.npz")
            for name, w in want.items():
                g = got[name]
                assert g.shape == w.shape and g.dtype == w.dtype, (shape, r, name, g.shape)
                tol = 1e-9 if name == "loop" else 1e-12 if name.startswith("pj_") else 1e-13
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol,
                                           err_msg=f"{shape} {r} {name}")
            ad_cases = programs.mesh_ad_cases(mesh) if shape in programs.MESH_AD_SHAPES else {}
            assert any(k.startswith("ad_") for k in got.files) == bool(ad_cases)
            for k in ad_cases:
                jvp, batched = got[f"ad_{k}_jvp"], got[f"ad_{k}_vmap"]
                fd = (batched[0] - batched[1]) / 2e-6
                assert np.abs(jvp).max() > 0.1, (shape, r, k)
                np.testing.assert_allclose(jvp, fd, rtol=1e-6, atol=1e-8,
                                           err_msg=f"{shape} {r} {k} jvp")
                vjp, ct, t = got[f"ad_{k}_vjp"], pts["ct"][k], pts["t"][k]
                assert vjp.shape == t.shape, (shape, r, k)
                lhs, rhs = np.vdot(ct, jvp), np.vdot(vjp, t)
                assert abs(lhs - rhs) <= 1e-12 * (1 + abs(lhs)), (shape, r, k, lhs, rhs)
                np.testing.assert_allclose(batched[2:], got[f"ad_{k}_loop"], rtol=1e-14,
                                           atol=1e-14, err_msg=f"{shape} {r} {k} vmap")


# -- in-process: tracing and errors (no MPI) --------------------------------------


def test_benchmark_without_torch_says_why(tmp_path):
    """benchmarks/distributed_dp.py: an interpreter without torch gives the torch
    column "-" and the reason, not an error."""
    import importlib.util

    path = HERE.parents[1] / "benchmarks" / "distributed_dp.py"
    spec = importlib.util.spec_from_file_location("distributed_dp", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    no_torch = tmp_path / "python"
    no_torch.write_text("#!/bin/sh\nexit 1\n")
    no_torch.chmod(0o755)
    args = bench.argparse.Namespace(torch_python=str(no_torch), timeout=30)
    assert bench.run_torch(2, args, str(tmp_path / "out")) == (
        None, f"torch with gloo is not installed for {no_torch}")


def test_collectives_map_over_pytrees():
    mesh = ad.Mesh((2,), ("x",))
    g = ad.shard_map(lambda t: ad.lax.psum(t, "x"), mesh, in_specs=P(), out_specs=P())
    text = g.lowered_text([(np.zeros((2, 3)), np.zeros(3)), (np.zeros(2), np.zeros(()))])
    assert text.count("shard.all_reduce") == 4


def test_collective_outside_shard_map_is_a_name_error():
    with pytest.raises(NameError, match="psum: unbound axis name 'i'"):
        ad.jit(lambda x: ad.lax.psum(x, "i"))(np.ones(2))


def test_traced_program_holds_shard_ops():
    mesh = ad.Mesh((2,), ("x",))

    def f(x):
        return ad.lax.psum(x, "x"), ad.lax.all_gather(x, "x"), ad.lax.axis_index("x")

    g = ad.shard_map(f, mesh, in_specs=P("x"), out_specs=(P(), P(), P()))
    text = g.lowered_text(np.zeros((4, 3)))
    assert "shard.grid @mesh_2(shape = 2)" in text
    assert "tensor.extract_slice %arg0[%" in text and "[2, 3] [1, 1]" in text
    assert "shard.all_reduce" in text and "shard.all_gather" in text
    assert "shard.process_linear_index on @mesh_2" in text


def test_specs_are_checked():
    mesh = ad.Mesh((2,), ("x",))
    with pytest.raises(ValueError, match="does not divide it"):
        ad.shard_map(lambda x: x, mesh, in_specs=P("x"), out_specs=P()).lowered_text(
            np.zeros(3))
    with pytest.raises(ValueError, match="names axis 'y'"):
        ad.shard_map(lambda x: x, mesh, in_specs=P("y"), out_specs=P()).lowered_text(
            np.zeros(4))
    with pytest.raises(ValueError, match="psum_scatter: dimension 0"):
        ad.shard_map(lambda x: ad.lax.psum_scatter(x, "x"), mesh, in_specs=P(),
                     out_specs=P()).lowered_text(np.zeros(3))
    with pytest.raises(ValueError, match="ppermute: perm must pair distinct"):
        ad.shard_map(lambda x: ad.lax.ppermute(x, "x", [(0, 1), (1, 1)]), mesh,
                     in_specs=P(), out_specs=P()).lowered_text(np.zeros(3))
    with pytest.raises(TypeError, match="all_gather: boolean arrays are not supported"):
        ad.shard_map(lambda x: ad.lax.all_gather(x, "x"), mesh,
                     in_specs=P(), out_specs=P()).lowered_text(np.zeros(3, bool))
    with pytest.raises(ValueError, match="axis sizes but"):
        ad.Mesh((2, 2), ("x",))


def test_multi_axis_specs_and_collectives_trace():
    """A ("dp", "tp") mesh: blocks split over one axis, the other, or both (one
    dimension over a tuple of axes, the first major); collectives carry the grid axes
    in the order named; errors name the axis."""
    mesh = ad.Mesh((2, 2), ("dp", "tp"))

    def f(x, y):
        return (ad.lax.psum(x, "tp"), ad.lax.all_gather(x, ("tp", "dp"), tiled=True),
                ad.lax.axis_index(("dp", "tp")), y)

    g = ad.shard_map(f, mesh, in_specs=(P("dp", "tp"), P(("dp", "tp"))),
                     out_specs=(P("dp"), P(), P(), P(("tp", "dp"))))
    text = g.lowered_text(np.zeros((4, 6)), np.zeros(8))
    assert "shard.grid @mesh_2x2(shape = 2x2)" in text
    assert "grid_axes = [1] : tensor<2x3xf64>" in text          # psum over "tp"
    assert "grid_axes = [1, 0] gather_axis = 0" in text          # the tuple, in order
    assert "shard.process_multi_index on @mesh_2x2 axes = [0] : index" in text
    assert "[2, 3] [1, 1] : tensor<4x6xf64> to tensor<2x3xf64>" in text
    assert "[2] [1] : tensor<8xf64> to tensor<2xf64>" in text    # P(("dp", "tp"))
    with pytest.raises(NameError, match="psum: axis name 'z' is not an axis of the mesh"):
        ad.shard_map(lambda x: ad.lax.psum(x, ("dp", "z")), mesh, in_specs=P(),
                     out_specs=P()).lowered_text(np.zeros(2))
    with pytest.raises(ValueError, match=r"names axis 'dp' twice"):
        ad.shard_map(lambda x: x, mesh, in_specs=P(("dp", "tp"), "dp"),
                     out_specs=P()).lowered_text(np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"split over mesh axes \('dp', 'tp'\) of size 4"):
        ad.shard_map(lambda x: x, mesh, in_specs=P(("dp", "tp")),
                     out_specs=P()).lowered_text(np.zeros(6))


def test_jit_in_shardings_partitions_or_names_the_op():
    """jit(in_shardings=...): upstream's passes give the per-process function (the
    batch's block, an all_reduce of the partial sums); an op they have no rule for
    is an error naming it and the user's line; a split over part of a 2-D mesh (which
    upstream's resharding would abort on) is refused."""
    mesh = ad.Mesh((2,), ("x",))
    batch, rep = ad.NamedSharding(mesh, P("x")), ad.NamedSharding(mesh, P())
    j = ad.jit(programs.tanh_sum, in_shardings=(batch, rep))
    text = j.lowered_text(np.zeros((8, 3)), np.zeros((3, 4)))
    assert "func.func @main(%arg0: tensor<4x3xf64>, %arg1: tensor<3x4xf64>)" in text
    assert "math.tanh" in text and "tensor<4x4xf64>" in text
    assert "shard.all_reduce" in text and "shard.all_gather" not in text
    with pytest.raises(NotImplementedError,
                       match=r"test_distributed.py\":\d+:\d+: .*'tensor.expand_shape' has "
                             r"no sharding rule"):
        ad.jit(lambda x: ad.nn.log_softmax(x), in_shardings=batch).lowered_text(
            np.zeros((8, 3)))
    mesh2 = ad.Mesh((2, 2), ("dp", "tp"))
    with pytest.raises(NotImplementedError, match="reshards on 1-D grids only"):
        ad.jit(programs.tanh_sum, in_shardings=(ad.NamedSharding(mesh2, P("dp")),
                                                ad.NamedSharding(mesh2, P()))).lowered_text(
            np.zeros((8, 3)), np.zeros((3, 4)))


#: Every public name of mlir_autodiff.distributed -> the test above that covers it
#: (the collectives cannot run in the single-process differential table).
COVERAGE = {
    "Mesh": "test_specs_are_checked", "PartitionSpec": "test_traced_program_holds_shard_ops",
    "NamedSharding": "test_jit_in_shardings_partitions_or_names_the_op",
    "MpiUnavailableError": "raised by initialize without the wheel",
    "shard_map": "test_collectives_match_numpy", "initialize": "test_collectives_match_numpy",
    "process_count": "test_collectives_match_numpy",
    "process_index": "test_collectives_match_numpy",
    "is_available": "needs_mpi", "mpi_library": "needs_mpi", "mpiexec": "launch",
    **{name: "test_collectives_match_numpy" for name in (
        "psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
        "axis_index")},
}


def test_every_public_name_is_covered():
    assert sorted(distributed.__all__) == sorted(COVERAGE)
    for name in ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
                 "axis_index"):
        assert getattr(ad.lax, name) is getattr(distributed, name)
