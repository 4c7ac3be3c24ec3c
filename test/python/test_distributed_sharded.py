"""Tensor parallelism and sharded random draws over MPI processes (issue 23).

One mpiexec launch per process count (2, and 4 oversubscribed) runs
distributed_programs.py's `sharded` case; its results are compared with jax
(the tensor-parallel layer pair's value, gradient and jvp) and with the same
programs run in this process without a mesh (the global random draws and
dropout training with the same key), and runs examples/distributed_mlp.py
--tensor-parallel --check: see distributed_programs.py.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys

import distributed_programs as programs
import numpy as np
import pytest
from test_distributed import needs_mpi

import mlir_autodiff as ad
from mlir_autodiff import distributed

P = ad.PartitionSpec
NAMES = ("x", "w1", "b1", "w2", "b2")


def launch_in_background(n: int, case: str, out: pathlib.Path) -> subprocess.Popen:
    """`launch` (test_distributed.py) without waiting."""
    # the processes check values: LLVM -O0 (as conftest's llvm_o0; a quarter less CPU time
    # for the n processes that each compile the same programs)
    env = dict(os.environ, PYTHONUNBUFFERED="1", AUTODIFF_OPT_LEVEL="0")
    cmd = [distributed.mpiexec(), "-n", str(n), "-launcher", "fork", sys.executable,
           str(pathlib.Path(programs.__file__).resolve()), case, str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


@functools.lru_cache(maxsize=None)
def tp_reference() -> dict[str, np.ndarray]:
    """The unsharded layer pair with jax (f64): value, gradient of the loss, jvp."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    a = programs.tp_inputs()

    def pair(x, w1, b1, w2, b2):
        return jnp.tanh(x @ w1 + b1) @ w2 + b2

    args = tuple(jnp.asarray(a[k]) for k in NAMES)
    y, ty = jax.jvp(pair, args, tuple(jnp.asarray(a["t_" + k]) for k in NAMES))
    grads = jax.grad(lambda xs: jnp.sum(jnp.sin(pair(*xs)) * pair(*xs)))(args)
    out = {"tp_y": np.asarray(y), "tp_jvp": np.asarray(ty)}
    out.update({f"grad_{k}": np.asarray(g) for k, g in zip(NAMES, grads)})
    return out


@functools.lru_cache(maxsize=None)
def single_process_dropout() -> list[np.ndarray]:
    """Dropout training on the whole batch in this process (no mesh)."""
    return programs.dropout_training()


def single_process(n: int) -> dict[str, np.ndarray]:
    """The single-process results the n processes' must equal."""
    out = programs.single_process_draws(n)
    for i, p in enumerate(single_process_dropout()):
        out[f"dropout_p{i}"] = p
    return out


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
def test_tensor_parallel_and_sharded_random(n, tmp_path):
    # the references are computed here while the processes run
    proc = launch_in_background(n, "sharded", tmp_path)
    try:
        ref, single = tp_reference(), single_process(n)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:  # (a reference failed, or the processes hang)
            proc.terminate()     # mpiexec passes it on to the processes
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out + err
    for r in range(n):
        got = np.load(tmp_path / f"rank{r}.npz")
        # Megatron-style layer pair: value, global gradient (grad outside the
        # shard_map; weights passed, and closed over in a loop) and jvp
        for k in ("tp_y", "tp_jvp"):
            np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-10, err_msg=f"{r} {k}")
        for label in ("", "_closed"):
            for k in NAMES:
                np.testing.assert_allclose(got[f"tp_grad{label}_{k}"], ref[f"grad_{k}"], rtol=0,
                                           atol=1e-10, err_msg=f"{r} grad{label} {k}")
        # each block of a global draw is that block of the single-process draw, bit
        # for bit; a plain keyed or implicit-generator draw is the same everywhere;
        # the key folded with axis_index gives process r the draw of fold_in(key, r)
        for k, want in single.items():
            if k.startswith("draw_"):
                assert got[k].shape == want.shape, (r, k, got[k].shape, want.shape)
                np.testing.assert_array_equal(got[k], want, err_msg=f"{r} {k}")
        # data-parallel training with dropout equals single-process training on the
        # whole batch with the same key (the masks are the global batch's rows)
        for i in range(4):
            np.testing.assert_allclose(got[f"dropout_p{i}"], single[f"dropout_p{i}"], rtol=0,
                                       atol=1e-10, err_msg=f"{r} dropout param {i}")
        if n == 2:  # examples/distributed_mlp.py --tensor-parallel --check
            assert got["example_tp_rc"] == 0, r
    if n == 2:
        assert out.count("max |tensor-parallel - full batch|") == n
    w0 = programs.dropout_inputs()["w1"]
    assert np.abs(single["dropout_p0"] - w0).max() > 1e-2  # training moved the weights


def test_out_sharding_outside_shard_map_is_an_error():
    key = ad.random.key(0)
    with pytest.raises(NameError, match="out_sharding PartitionSpec\\('x'\\) names mesh axes"):
        ad.random.uniform(key, (4,), out_sharding=P("x"))
    with pytest.raises(NameError, match="uniform out_sharding: unbound axis name 'x'"):
        ad.jit(lambda k: ad.random.uniform(k, (4,), out_sharding=P("x")))(key)
    with pytest.raises(TypeError, match="out_sharding needs the keyed form"):
        ad.random.normal((4,), out_sharding=P("x"))
    # nothing split: the plain draw
    np.testing.assert_array_equal(ad.random.uniform(key, (4,), out_sharding=P(None)),
                                  ad.random.uniform(key, (4,)))


def test_out_sharding_is_checked():
    mesh = ad.Mesh((2,), ("x",))
    key = ad.random.key(0)

    def lowered(shape, spec):
        return ad.shard_map(lambda k: ad.random.uniform(k, shape, out_sharding=spec), mesh,
                            in_specs=P(), out_specs=P()).lowered_text(key)

    with pytest.raises(ValueError, match="dimension 0 of the shape \\(3,\\) is split"):
        lowered((3,), P("x"))
    with pytest.raises(ValueError, match="more entries than the shape"):
        lowered((4,), P(None, "x"))
    with pytest.raises(NameError, match="unbound axis name 'y'"):
        lowered((4,), P("y"))
    with pytest.raises(TypeError, match="out_sharding must be an ad.PartitionSpec"):
        lowered((4,), ("x",))
    # a block of one run: one draw at a moved offset; of several runs, one draw
    # vmapped over the runs' keys (3 runs of 2 elements, each drawn with the 3 that
    # may precede it in its Philox block)
    one = lowered((4, 3), P("x"))
    assert one.count("autodiff.philox") == 1 and "autodiff.vmap" not in one
    several = lowered((3, 4), P(None, "x"))
    assert "-> tensor<3x2xf32>" in several and "-> tensor<5xf32>" in several

