"""Data-parallel MLP training steps over 1 and 2 processes: ours (MPI) beside torch DDP (gloo).

    python benchmarks/distributed_dp.py                      # 1 and 2 processes
    python benchmarks/distributed_dp.py --procs 1,2,4 --steps 100 --json out.json
    python benchmarks/distributed_dp.py --torch-python /path/to/python-with-torch

The model is the digits MLP (64-64-10, tanh, softmax cross-entropy averaged
over the global batch), float32, plain SGD. One step: every process takes its
rows of the global batch, computes the gradient of its share of the loss,
the gradients are averaged over the processes, and every process updates
its copy of the parameters.

- ours: `ad.jit` of a `shard_map` (gradient of the local loss, `ad.lax.psum`
  of the gradients, the update), run under the `mpich` wheel's `mpiexec`;
  the psum is an MPI allreduce in the compiled code.
- torch: `DistributedDataParallel` with the gloo backend, processes started
  by this script (`MASTER_ADDR`/`MASTER_PORT`, one `init_process_group` each),
  `torch.set_num_threads(1)`. Without torch (or with `--torch-python` naming
  an interpreter that lacks it) the torch column shows "-" with the reason.

Both start from the same parameters and data and run the same steps; the
report checks that their final parameters agree (float32 rounding:
rtol 1e-3), so a wrong gradient is never timed as if right. Each process
runs one thread. Times are the median over `--repeats` samples of `--steps`
steps each, after warm-up steps (the first call's compilation is excluded),
taken on process 0; every step ends in a collective, so all processes are
in step. On a shared 2-core machine, more than 2 processes oversubscribe.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SIZES = (64, 64, 10)


def problem(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters and one global batch (the digits when scikit-learn is there)."""
    rng = np.random.default_rng(seed)
    try:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)
        y = digits.target
        idx = rng.choice(len(x), batch, replace=batch > len(x))
        x, y = x[idx], y[idx]
    except ImportError:
        x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
        y = rng.integers(0, SIZES[-1], batch)
    out = {"x": x, "onehot": np.eye(SIZES[-1], dtype=np.float32)[y]}
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        out[f"w{i}"] = rng.normal(0.0, np.sqrt(1.0 / a), (a, b)).astype(np.float32)
        out[f"b{i}"] = np.zeros(b, np.float32)
    return out


def _layers(p: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(p[f"w{i}"], p[f"b{i}"]) for i in range(len(SIZES) - 1)]


# -------------------------------------------------------------------- workers


def worker_ours(args: argparse.Namespace) -> None:
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp
    from mlir_autodiff import nn

    P = ad.PartitionSpec
    ad.distributed.initialize()
    n, rank = ad.distributed.process_count(), ad.distributed.process_index()
    data = problem(args.batch)
    mesh = ad.Mesh((n,), ("x",))
    scale = 1.0 / args.batch

    def local_loss(params, xb, onehot):
        h = xb
        for w, b in params[:-1]:
            h = anp.tanh(h @ w + b)
        w, b = params[-1]
        return -anp.sum(onehot * nn.log_softmax(h @ w + b, axis=-1)) * scale

    def body(params, xb, onehot):
        grads = ad.lax.psum(ad.grad(local_loss)(params, xb, onehot), "x")
        return [(w - args.lr * gw, b - args.lr * gb)
                for (w, b), (gw, gb) in zip(params, grads)]

    step = ad.jit(ad.shard_map(body, mesh, in_specs=(P(), P("x"), P("x")), out_specs=P()))
    params = _layers(data)
    x, onehot = data["x"], data["onehot"]
    for _ in range(args.warmup):
        params = step(params, x, onehot)
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            params = step(params, x, onehot)
        samples.append((time.perf_counter() - t0) / args.steps)
    if rank == 0:
        _write(args.out, samples, params)


def worker_torch(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    rank, n = args.rank, args.world
    dist.init_process_group("gloo", rank=rank, world_size=n)
    data = problem(args.batch)
    layers = []
    for w, b in _layers(data):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, torch.nn.Tanh()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers[:-1]))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    rows = args.batch // n
    xb = torch.from_numpy(data["x"][rank * rows:(rank + 1) * rows])
    yb = torch.from_numpy(data["onehot"][rank * rows:(rank + 1) * rows])

    def one_step() -> None:
        opt.zero_grad(set_to_none=True)
        # the mean over this process's rows; DDP averages the gradients over the
        # processes: the mean over the global batch, as ours
        loss = -(yb * torch.log_softmax(model(xb), dim=-1)).sum(-1).mean()
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        one_step()
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            one_step()
        samples.append((time.perf_counter() - t0) / args.steps)
    if rank == 0:
        lins = [m for m in model.module if isinstance(m, torch.nn.Linear)]
        params = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in lins]
        _write(args.out, samples, params)
    dist.destroy_process_group()


def _write(path: str, samples: list[float], params) -> None:
    flat = np.concatenate([np.asarray(a, np.float64).ravel() for wb in params for a in wb])
    np.save(path + ".npy", flat)
    with open(path, "w") as f:
        json.dump({"samples": samples}, f)


# -------------------------------------------------------------------- the parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_args(args: argparse.Namespace) -> list[str]:
    return ["--batch", str(args.batch), "--steps", str(args.steps), "--lr", str(args.lr),
            "--warmup", str(args.warmup), "--repeats", str(args.repeats)]


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", AUTODIFF_CPU_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_ours(n: int, args: argparse.Namespace, out: str) -> tuple[float | None, str]:
    from mlir_autodiff import distributed

    mpiexec = distributed.mpiexec()
    if mpiexec is None:
        return None, "no mpiexec (pip install 'mlir-autodiff[mpi]')"
    cmd = [mpiexec, "-n", str(n), "-launcher", "fork", sys.executable, __file__,
           "--worker", "ours", "--out", out, *_worker_args(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(),
                          timeout=args.timeout)
    if proc.returncode != 0:
        return None, f"ours failed: {proc.stderr.strip().splitlines()[-1:]}"
    return statistics.median(json.load(open(out))["samples"]), ""


def run_torch(n: int, args: argparse.Namespace, out: str) -> tuple[float | None, str]:
    python = args.torch_python or sys.executable
    if shutil.which(python) is None and not os.path.exists(python):
        return None, f"{python} not found"
    probe = subprocess.run([python, "-c", "import torch, torch.distributed as d; "
                            "assert d.is_gloo_available()"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"torch with gloo is not installed for {python}"
    env = _env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    procs = [subprocess.Popen([python, __file__, "--worker", "torch", "--rank", str(r),
                               "--world", str(n), "--out", out, *_worker_args(args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
             for r in range(n)]
    errors = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        if p.returncode != 0:
            errors.append(err.strip().splitlines()[-1:] or [f"exit {p.returncode}"])
    if errors:
        return None, f"torch DDP failed: {errors[0]}"
    return statistics.median(json.load(open(out))["samples"]), ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="1,2", help="process counts, comma-separated")
    parser.add_argument("--batch", type=int, default=256, help="global batch (rows)")
    parser.add_argument("--steps", type=int, default=50, help="steps per sample")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--torch-python", default=None,
                        help="interpreter for the torch workers (default: this one)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--worker", choices=("ours", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "ours":
        worker_ours(args)
        return 0
    if args.worker == "torch":
        worker_torch(args)
        return 0

    counts = [int(c) for c in args.procs.split(",")]
    for n in counts:
        if args.batch % n:
            parser.error(f"--batch {args.batch} must be a multiple of {n}")
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            ours_out, torch_out = os.path.join(tmp, f"ours{n}"), os.path.join(tmp, f"torch{n}")
            ours, why_ours = run_ours(n, args, ours_out)
            theirs, why_torch = run_torch(n, args, torch_out)
            for why in (why_ours, why_torch):
                if why and why not in notes:
                    notes.append(why)
            if ours is not None and theirs is not None:
                a, b = np.load(ours_out + ".npy"), np.load(torch_out + ".npy")
                if not np.allclose(a, b, rtol=1e-3, atol=1e-5):
                    notes.append(f"{n} processes: the final parameters differ from torch's "
                                 f"(max {np.abs(a - b).max():.2e}); times not shown")
                    ours = theirs = None
            rows.append({"processes": n, "ours_ms": None if ours is None else ours * 1e3,
                         "torch_ddp_ms": None if theirs is None else theirs * 1e3})

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    print(f"Data-parallel MLP {'-'.join(map(str, SIZES))} step, global batch {args.batch}, "
          "float32, 1 thread per process (ms per step, median)")
    print("| processes | ours (MPI) | torch DDP (gloo) | ours / torch |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        ratio = "-" if r["ours_ms"] is None or r["torch_ddp_ms"] is None \
            else f"{r['ours_ms'] / r['torch_ddp_ms']:.2f}"
        print(f"| {r['processes']} | {fmt(r['ours_ms'])} | {fmt(r['torch_ddp_ms'])} | {ratio} |")
    for note in notes:
        print(f"note: {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "notes": notes, "batch": args.batch}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
