"""The GPU check: export the benchmark rows for a GPU here, run them on a GPU machine there.

    ./dev gpu-check --prepare build/gpu-check            # here (no GPU needed)
    python3 benchmarks/gpu_check.py --run build/gpu-check   # on the GPU machine

`--prepare` (needs the compiler) exports every benchmark row of the full run
that makes sense on a GPU, plus a Philox dropout row, as GPU artifacts
(`ad.export(..., device="gpu", chip=...)`) into one folder, with what each
row needs on the other side: which of the row's inputs each argument is (the
inputs themselves are regenerated there from the same seed: numpy's
Generator streams are stable), and the expected outputs computed here by
the CPU pipeline (all of a small output, a fixed sample of 65536 elements of
a large one). The folder stays well under 64 MiB.

`--run` needs only numpy and this repository's `python/` folder (it imports
`mlir_autodiff.aot`, which never imports MLIR; the run checks that `mlir` was
not imported). Per row it loads the artifact, checks it against the expected
outputs (f32 rtol 1e-4, f64 1e-10, Philox draws bit-identical), counts kernel
launches, and times it steady-state beside `jax.jit` on the GPU (inputs on
the device; f32 matmuls at jax's "highest" precision, i.e. no TF32, as ours)
and torch CUDA eager (and `torch.compile` for the kernel rows), where
installed. Our time is a whole call from numpy arrays in host memory to numpy
results (copies in and out included, as the artifact's convention is); the
peers' are on device-resident inputs. A machine without a CUDA device gets
"no CUDA device: ..." and exit status 0 for `--run` (nothing to check).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

SEED = 0
SAMPLE = 65536
DROPOUT_SEED = 1234
#: rows timed beside torch.compile too (compiling the big gradient rows takes minutes)
TORCH_COMPILE_ROWS = ("matmul", "tanh(x*y+z)", "softmax (rows)")


def _rows() -> list[Any]:
    import run

    return _acceptance_cases() + _contraction_cases() + [c for c in run.CASES if c.full]


def _gpu_cases() -> list[Any]:
    """The rows this check adds to the CPU benchmark's."""
    return _acceptance_cases() + _contraction_cases()


def _bf16(rng: np.random.Generator, *shape: int) -> np.ndarray:
    import ml_dtypes

    return rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16)


_ACCEPTANCE: list[Any] = []


def _acceptance_cases() -> list[Any]:
    """The GPU issue's two acceptance rows, which the CPU benchmark does not run: a bf16
    matmul 4096^3 (against torch.matmul, i.e. cuBLAS) and a 4096 x 4096 f32 row softmax
    (against the copy bandwidth torch measures)."""
    import run

    if not _ACCEPTANCE:
        n = 4096
        _ACCEPTANCE.append(run.Case(
            name="bf16 matmul", size=f"{n}^3",
            inputs=lambda rng: (_bf16(rng, n, n), _bf16(rng, n, n)),
            ours=run.ours_kernel(lambda anp, nn: lambda a, b: a @ b),
            jax=run.jax_kernel(lambda jnp, jnn: lambda a, b: a @ b),
            torch=run.torch_kernel(lambda torch: lambda a, b: a @ b),
            flops=2.0 * n ** 3, rtol=2e-2, atol=0.1, full=False, quick=False))
        _ACCEPTANCE.append(run.Case(
            name="softmax (rows)", size=f"{n}x{n}",
            inputs=lambda rng: (rng.standard_normal((n, n), dtype=np.float32),),
            ours=run.ours_kernel(lambda anp, nn: lambda a: nn.softmax(a, axis=-1)),
            jax=run.jax_kernel(lambda jnp, jnn: lambda a: jnn.softmax(a, axis=-1)),
            torch=run.torch_kernel(lambda torch: lambda a: torch.softmax(a, dim=-1)),
            bytes=2.0 * 4 * n * n, rtol=1e-4, atol=1e-6, full=False, quick=False))
    return _ACCEPTANCE


_CONTRACTIONS: list[Any] = []
#: row key -> the tensor-core tile (transforms/gpu/contractions.py `Tile` fields) its
#: export uses instead of the default large tile: the same bf16 matmul, tiled
#: differently, timed side by side.
TILE_VARIANTS: dict[str, tuple[int, ...]] = {}
_VARIANTS = ((128, 128, 2, 2, 32, 4), (128, 128, 2, 2, 64, 2), (128, 128, 2, 2, 64, 3),
             (64, 128, 1, 2, 32, 3), (128, 64, 2, 1, 32, 3))


#: row key -> the buffers in flight, the tile's columns and whose descriptors
#: (transforms/gpu/warpgroup_tiles.py `STAGES`, `TILE_N`: 256 is two warpgroups,
#: `OWN_DESCRIPTORS`) of the sm_90a warpgroup tile its export uses: prepared with
#: `--chip sm_90a` only (elsewhere they would be the mma.sync tile again).
WGMMA_VARIANTS: dict[str, tuple[int, int, bool]] = {}
WGMMA_STAGES = ((2, 128, False), (4, 128, False), (2, 256, False), (3, 256, False),
                (3, 128, True))


def _contraction_cases() -> list[Any]:
    """bf16 contractions in every operand layout (what reverse mode makes of a matmul)
    and a batch, at sizes that take the large tensor-core tile and one that takes the
    small (64 x 64) tile, each checked against the CPU pipeline; and the 4096^3 matmul
    under other tiles (`TILE_VARIANTS`) and other warpgroup stages (`WGMMA_VARIANTS`),
    timed without peers."""
    import run

    if _CONTRACTIONS:
        return _CONTRACTIONS
    m, n, k = 2048, 1024, 256
    mm = lambda a, b: a @ b  # noqa: E731
    layouts = {  # name: (body, shapes, m * n * k)
        "nn": (mm, ((m, k), (k, n)), m * n * k),
        "nt": (lambda a, b: a @ b.T, ((m, k), (n, k)), m * n * k),
        "tn": (lambda a, b: a.T @ b, ((k, m), (k, n)), m * n * k),
        "tt": (lambda a, b: a.T @ b.T, ((k, m), (n, k)), m * n * k),
        "batch": (mm, ((4, 1024, k), (4, k, 1024)), 4 * 1024 * 1024 * k),
        "small nn": (mm, ((192, 128), (128, 256)), 192 * 256 * 128),
    }
    for name, (body, shapes, mnk) in layouts.items():
        size = f"{name} " + " x ".join("x".join(map(str, s)) for s in shapes)
        _CONTRACTIONS.append(run.Case(
            name="bf16 contraction", size=size,
            inputs=lambda rng, shapes=shapes: tuple(_bf16(rng, *s) for s in shapes),
            ours=run.ours_kernel(lambda anp, nn, body=body: body),
            jax=run.jax_kernel(lambda jnp, jnn, body=body: body),
            torch=run.torch_kernel(lambda torch, body=body: body),
            flops=2.0 * mnk, rtol=2e-2, atol=0.1, full=False, quick=False))
    size = 4096
    for stages, tile_n, own in WGMMA_STAGES:
        case = run.Case(
            name="bf16 matmul wgmma", size=f"{size}^3 128x{tile_n} {stages} stages"
            + (" own descriptors" if own else ""),
            inputs=lambda rng: (_bf16(rng, size, size), _bf16(rng, size, size)),
            ours=run.ours_kernel(lambda anp, nn: lambda a, b: a @ b),
            flops=2.0 * size ** 3, rtol=2e-2, atol=0.1, full=False, quick=False)
        WGMMA_VARIANTS[case.key] = (stages, tile_n, own)
        _CONTRACTIONS.append(case)
    for tile in _VARIANTS:
        bm, bn, wm, wn, sk, st = tile
        case = run.Case(
            name="bf16 matmul tile", size=f"{size}^3 {bm}x{bn}x{sk} {wm}x{wn}w {st}s",
            inputs=lambda rng: (_bf16(rng, size, size), _bf16(rng, size, size)),
            ours=run.ours_kernel(lambda anp, nn: lambda a, b: a @ b),
            flops=2.0 * size ** 3, rtol=2e-2, atol=0.1, full=False, quick=False)
        TILE_VARIANTS[case.key] = tile
        _CONTRACTIONS.append(case)
    return _CONTRACTIONS


@contextlib.contextmanager
def _tile(key: str) -> Any:
    """Export the row `key` with its tile variant (or warpgroup stages), if it has one."""
    from mlir_autodiff.transforms.gpu import contractions, warpgroup_tiles

    if key in WGMMA_VARIANTS:
        saved = warpgroup_tiles.STAGES, warpgroup_tiles.TILE_N, warpgroup_tiles.OWN_DESCRIPTORS
        (warpgroup_tiles.STAGES, warpgroup_tiles.TILE_N,
         warpgroup_tiles.OWN_DESCRIPTORS) = WGMMA_VARIANTS[key]
        try:
            yield
        finally:
            (warpgroup_tiles.STAGES, warpgroup_tiles.TILE_N,
             warpgroup_tiles.OWN_DESCRIPTORS) = saved
        return
    if key not in TILE_VARIANTS:
        yield
        return
    saved = contractions.LARGE, contractions.LARGE_MIN_TILES
    contractions.LARGE, contractions.LARGE_MIN_TILES = \
        contractions.Tile(*TILE_VARIANTS[key]), 1
    try:
        yield
    finally:
        contractions.LARGE, contractions.LARGE_MIN_TILES = saved


def _slug(key: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in key)
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_")


def _sample_indices(n: int) -> np.ndarray | None:
    if n <= SAMPLE:
        return None
    return np.sort(np.random.default_rng(12345).choice(n, SAMPLE, replace=False))


def _sampled(a: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(a).ravel()
    if flat.dtype.kind == "V" or flat.dtype.name == "bfloat16":  # bf16: npz keeps f32
        flat = flat.astype(np.float32)
    idx = _sample_indices(flat.size)
    return flat if idx is None else flat[idx]


# --------------------------------------------------------------------------- the dropout row

def _dropout_inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(1 << 20).astype(np.float32),)


def _ours_dropout(x: Any) -> Any:
    from mlir_autodiff import nn, random

    return nn.dropout(x, 0.1), random.uniform(x.shape)


# --------------------------------------------------------------------------- prepare

class _Recorder:
    """Stands in for `ours_jit` while a row's thunk is built: records the function and
    the arguments of its call and returns what the CPU pipeline computes."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def __call__(self, fn: Callable[..., Any], **_: Any) -> Callable[..., Any]:
        import mlir_autodiff as ad

        jitted = ad.jit(fn)

        def call(*args: Any) -> Any:
            self.calls.append((fn, args))
            return jitted(*args)

        return call


def _arg_plan(args: tuple[Any, ...], inputs: Sequence[np.ndarray], extra: dict[str, Any]
              ) -> tuple[Any, list[Any]]:
    """(structure, per leaf: ["input", i] or ["extra", key]) of the call's arguments."""
    from mlir_autodiff import pytree

    leaves, tree = pytree.tree_flatten(args)
    plan: list[Any] = []
    for leaf in leaves:
        i = next((i for i, x in enumerate(inputs) if leaf is x), None)
        if i is not None:
            plan.append(["input", i])
        else:
            key = f"a{len(extra)}"
            extra[key] = np.asarray(leaf)
            plan.append(["extra", key])
    return pytree.treedef_to_json(tree), plan


def prepare(folder: str, chip: str, only: Sequence[str] = ()) -> int:
    import run

    import mlir_autodiff as ad
    from mlir_autodiff import random as arandom
    from mlir_autodiff.transforms.gpu import warpgroup_tiles

    # sm_90a: the warpgroup (TMA + wgmma) tiles, still experimental elsewhere
    warpgroup_tiles.ENABLED = warpgroup_tiles.supported_chip(chip)
    os.makedirs(folder, exist_ok=True)
    recorder = _Recorder()
    for mod in ("run", "grad_cases", "adbench_cases", "cnn_cases", "transformer_cases"):
        sys.modules[mod].ours_jit = recorder  # type: ignore[attr-defined]
    rows: list[dict[str, Any]] = []
    expected: dict[str, np.ndarray] = {}
    extra: dict[str, np.ndarray] = {}
    cases = _rows() + [run.Case(name="philox dropout + uniform", size="2^20",
                                inputs=_dropout_inputs)]
    for case in cases:
        if only and not any(o in case.key for o in only):
            continue
        if case.key in WGMMA_VARIANTS and not warpgroup_tiles.ENABLED:
            continue  # the default tile again
        t0 = time.perf_counter()
        slug = _slug(case.key)
        inputs = case.inputs(np.random.default_rng(SEED))
        recorder.calls.clear()
        if case.ours is not None:
            thunk = case.ours(inputs)
            result = thunk()  # the CPU pipeline's output, the reference
            output = (case.output or run.to_numpy)(result)
            fn, args = recorder.calls[-1]
        else:  # the dropout row: fixed generator state, outputs checked bit for bit
            fn, args = _ours_dropout, tuple(inputs)
            arandom.set_state((DROPOUT_SEED, 0))
            y, u = ad.jit(fn)(*args)
            output = np.concatenate([y.ravel(), u.ravel()])
        tree, plan = _arg_plan(args, inputs, extra)
        with _tile(case.key):
            ad.export(fn, *args, path=os.path.join(folder, slug), device="gpu", chip=chip)
        expected[slug] = _sampled(output)
        rows.append({"key": case.key, "name": case.name, "slug": slug, "args_tree": tree,
                     "args": plan, "size": int(output.size), "dtype": output.dtype.str,
                     "bitwise": case.ours is None, "rtol": case.rtol, "atol": case.atol,
                     "half": output.dtype.itemsize == 2,
                     "rng_state": [DROPOUT_SEED, 0] if case.ours is None else None,
                     "prepare_s": round(time.perf_counter() - t0, 2)})
        print(f"prepared {case.key} ({rows[-1]['prepare_s']} s)", flush=True)
    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    np.savez_compressed(os.path.join(folder, "extra_args.npz"), **extra)
    with open(os.path.join(folder, "rows.json"), "w") as f:
        json.dump({"chip": chip, "seed": SEED, "sample": SAMPLE, "rows": rows}, f, indent=1)
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(folder) for n in ns)
    print(f"{len(rows)} rows in {folder}: {total / 2**20:.1f} MiB")
    return 0


# --------------------------------------------------------------------------- run

def _time(thunk: Callable[[], Any], min_time: float = 0.2, repeats: int = 5) -> float:
    """Median seconds per call over `repeats` batches of at least `min_time` each."""
    thunk()
    t0 = time.perf_counter()
    thunk()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, min(10000, int(min_time / one)))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            thunk()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def _torch_numpy(t: Any) -> np.ndarray:
    t = t.detach()
    if str(t.dtype) == "torch.bfloat16":  # numpy has no bf16: through f32 (exact)
        t = t.float()
    return t.cpu().numpy()


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, (tuple, list)):
        return np.concatenate([_to_numpy(v).astype(np.float64).ravel() for v in value])
    if hasattr(value, "detach"):
        value = _torch_numpy(value)
    return np.asarray(value)


def _host(value: Any) -> Any:
    """`value` with torch tensors (and jax arrays) as numpy arrays, tuples, lists and
    dicts kept."""
    if isinstance(value, (tuple, list)):
        return type(value)(_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    if hasattr(value, "detach"):
        return _torch_numpy(value)
    return np.asarray(value)


def _check(got: np.ndarray, want: np.ndarray, row: dict[str, Any]) -> tuple[bool, float]:
    got_s = _sampled(got)
    if got_s.shape != want.shape:
        return False, float("inf")
    if row["bitwise"]:
        return bool(np.array_equal(got_s, want)), float(np.count_nonzero(got_s != want))
    rtol = 1e-10 if want.dtype == np.float64 and row["rtol"] < 1e-6 else 1e-4
    if row.get("half"):  # bf16/f16 results: a different summation order moves an ulp
        rtol = max(rtol, row["rtol"])
    err = np.abs(got_s.astype(np.float64) - want.astype(np.float64))
    scale = np.abs(want.astype(np.float64)) + 1e-30
    rel = float(np.max(err / np.maximum(scale, 1.0))) if err.size else 0.0
    ok = bool(np.all(err <= rtol * np.abs(want) + max(row["atol"], rtol * 1e-2)))
    return ok, rel


def _peer_builders(case: Any) -> dict[str, Any]:
    out = {}
    if case is None:
        return out
    for fw in ("jax", "torch", "torch_compile"):
        b = case.builder(fw)
        compiled = os.environ.get("AUTODIFF_GPU_CHECK_TORCH_COMPILE", "1") != "0"
        if b is not None and (fw != "torch_compile" or (compiled and case.name
                                                         in TORCH_COMPILE_ROWS)):
            out[fw] = b
    return out


def _dropout_peers() -> dict[str, Any]:
    def jax_build(inputs):
        import jax

        x = jax.device_put(inputs[0])
        key = jax.random.key(0)

        @jax.jit
        def f(x, key):
            k1, k2 = jax.random.split(key)
            keep = jax.random.bernoulli(k1, 0.9, x.shape)
            return jax.numpy.where(keep, x / 0.9, 0.0), jax.random.uniform(k2, x.shape)

        return lambda: jax.block_until_ready(f(x, key))

    def torch_build(inputs):
        import torch

        x = torch.from_numpy(inputs[0])

        def call():
            return torch.nn.functional.dropout(x, 0.1), torch.rand(x.shape, device=x.device)

        return call

    return {"jax": jax_build, "torch": torch_build}


def _gpu_torch() -> Any:
    """torch with `from_numpy` returning CUDA tensors (the rows' builders use it), or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if not getattr(torch, "_autodiff_gpu_check", False):
        host = torch.from_numpy

        def to_device(a: np.ndarray) -> Any:
            a = np.ascontiguousarray(a)
            if a.dtype.name == "bfloat16":  # ml_dtypes' bf16: the same bits
                return host(a.view(np.int16)).view(torch.bfloat16).cuda()
            return host(a).cuda()

        torch.from_numpy = to_device
        torch._autodiff_gpu_check = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch


def _child(folder: str, slug: str, peers: bool, row_timeout: float, profile: bool
           ) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """Run one row in a child process: (its result or None, run info, why it failed)."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [sys.executable, os.path.abspath(__file__), "--run", folder, "--slug", slug,
               "--json", tmp.name, "--in-process"]
        env = dict(os.environ)
        if not peers or profile:
            cmd.append("--no-peers")
        if profile:
            cmd.append("--profile")
            env["AUTODIFF_CUDA_PROFILE"] = "1"
        try:
            proc = subprocess.run(cmd, timeout=row_timeout, capture_output=True, text=True,
                                  env=env)
            why = f"child exited with {proc.returncode}: " + " | ".join(
                (proc.stdout + proc.stderr).strip().splitlines()[-3:])
        except subprocess.TimeoutExpired:
            why = f"timed out after {row_timeout:.0f} s"
        data = None
        if os.path.getsize(tmp.name):
            with open(tmp.name) as f:
                data = json.load(f)
    if data and data["results"]:
        res = data["results"][0]
        if "timed out" in why:
            res["note"] = why
        return res, {k: v for k, v in data.items() if k != "results"}, why
    return None, {}, why


def run_isolated(folder: str, out_json: str | None, peers: bool, only: Sequence[str],
                 row_timeout: float, profile: bool = False, deadline: float = 1e9) -> int:
    """`run_check`, each row in a child process: a row that crashes the process (a bad
    kernel, a driver fault) or hangs is reported as such and the others still run."""
    from mlir_autodiff import aot

    try:
        device = aot.cuda_device(os.environ.get(aot.DRIVER_ENV, aot.DRIVER_LIBRARY))
    except aot.NoCudaDevice as err:
        print(err)
        return 0
    with open(os.path.join(folder, "rows.json")) as f:
        meta = json.load(f)
    print(f"device: {device.name} ({device.chip}); rows compiled for {meta['chip']}", flush=True)
    results: list[dict[str, Any]] = []
    extra_info: dict[str, Any] = {}
    start = time.perf_counter()
    for row in meta["rows"]:
        if only and not any(o in row["key"] for o in only):
            continue
        left = deadline - (time.perf_counter() - start)
        if left < 10:
            results.append({"key": row["key"], "ok": False, "error": "not run: out of time"})
            continue
        row_timeout = min(row_timeout, left)
        res, info, why = _child(folder, row["slug"], peers, row_timeout, False)
        if res is None:
            res = {"key": row["key"], "ok": False, "error": why[-300:]}
        else:
            extra_info = info
        if profile and "error" not in res:
            prof, _, why = _child(folder, row["slug"], False, row_timeout, True)
            res["kernel_ms"] = prof.get("kernel_ms") if prof else None
            if prof and prof.get("launch_ms"):
                res["launch_ms"] = prof["launch_ms"]
        if out_json:
            with open(out_json, "w") as f:
                json.dump({"device": device.name, "chip": device.chip, **extra_info,
                           "results": results + [res]}, f, indent=1)
        results.append(res)
        print(_line(res), flush=True)
    print()
    print("\n".join(table(results)))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"device": device.name, "chip": device.chip, **extra_info,
                       "results": results}, f, indent=1)
    return 0 if all(r.get("ok") for r in results) else 1


def run_check(folder: str, out_json: str | None, peers: bool = True,
              only: Sequence[str] = (), slug: str | None = None, profile: bool = False
              ) -> int:
    from mlir_autodiff import aot, pytree, rng_state

    assert "mlir" not in sys.modules, "the runner must not import MLIR"
    try:
        device = aot.cuda_device(os.environ.get(aot.DRIVER_ENV, aot.DRIVER_LIBRARY))
    except aot.NoCudaDevice as err:
        print(err)
        return 0
    with open(os.path.join(folder, "rows.json")) as f:
        meta = json.load(f)
    expected = np.load(os.path.join(folder, "expected.npz"))
    extra = np.load(os.path.join(folder, "extra_args.npz"))
    print(f"device: {device.name} ({device.chip}); rows compiled for {meta['chip']}", flush=True)
    import run  # the rows' inputs, and the peers' builders (jax/torch imported when built)

    cases = {c.key: c for c in run.CASES + _gpu_cases()}
    jax_device = "not used"
    if peers:
        try:
            import jax

            jax.config.update("jax_enable_x64", True)
            jax.config.update("jax_default_matmul_precision", "highest")
            jax_device = str(jax.devices()[0])
        except Exception as err:  # noqa: BLE001
            jax_device = f"unavailable ({err})"
    torch = _gpu_torch() if peers else None
    print(f"jax: {jax_device}; torch CUDA: {'yes' if torch is not None else 'no'}", flush=True)
    results: list[dict[str, Any]] = []
    all_ok = True

    def save() -> None:  # after every step: a killed child still leaves what it measured
        if out_json:
            with open(out_json + ".tmp", "w") as f:
                json.dump({"device": device.name, "chip": device.chip, "jax": jax_device,
                           "results": results}, f, indent=1)
            os.replace(out_json + ".tmp", out_json)

    for row in meta["rows"]:
        if only and not any(o in row["key"] for o in only):
            continue
        if slug is not None and row["slug"] != slug:
            continue
        res: dict[str, Any] = {"key": row["key"]}
        results.append(res)
        try:
            t0 = time.perf_counter()
            art = aot.load(os.path.join(folder, row["slug"]))
            res["load_s"] = time.perf_counter() - t0
            case = cases.get(row["key"])
            gen = case.inputs if case is not None else _dropout_inputs
            inputs = gen(np.random.default_rng(meta["seed"]))
            leaves = [inputs[i] if kind == "input" else extra[i] for kind, i in row["args"]]
            args = pytree.tree_unflatten(pytree.treedef_from_json(row["args_tree"]), leaves)
            if row["rng_state"] is not None:
                rng_state.set_state(tuple(row["rng_state"]))
            before = art.kernel_launches()
            out = art(*args)
            res["launches"] = art.kernel_launches() - before
            got = _to_numpy(case.output(out) if case is not None and case.output else out)
            ok, err = _check(got, expected[row["slug"]], row)
            res["ok"], res["err"] = ok, err
            all_ok &= ok
            save()
            if profile:  # kernel time per call (events around each launch)
                art.reset_counters()
                for _ in range(3):
                    art(*args)
                res["kernel_ms"] = art.kernel_ms() / 3
                each = art.launch_ms()
                if each and len(each) % 3 == 0:  # per launch of one call, the mean of 3
                    n = len(each) // 3
                    res["launch_ms"] = [sum(each[i::n]) / 3 for i in range(n)]
                print(_line(res), flush=True)
                continue
            res["ours_s"] = _time(lambda: art(*args))
            save()
            builders = _peer_builders(case) if case is not None else _dropout_peers()
            for fw, build in builders.items() if peers else ():
                if fw.startswith("torch") and torch is None:
                    continue
                if fw == "jax" and not (jax_device.startswith(("cuda", "gpu", "Cuda"))
                                        or os.environ.get("AUTODIFF_GPU_CHECK_CPU_PEERS")):
                    continue
                try:
                    thunk = build(inputs)
                    if fw.startswith("torch"):
                        inner = thunk

                        def thunk(inner=inner):
                            r = inner()
                            torch.cuda.synchronize()
                            return r
                    t0 = time.perf_counter()
                    first = thunk()
                    res[f"{fw}_first_s"] = time.perf_counter() - t0
                    if not row["bitwise"]:
                        host = _host(first)
                        peer = _to_numpy(case.output(host) if case.output else host)
                        if peer.size == got.size:
                            d = np.abs(peer.astype(np.float64).ravel() - got.astype(np.float64)
                                       .ravel())
                            res[f"{fw}_maxdiff"] = float(d.max()) if d.size else 0.0
                    res[f"{fw}_s"] = _time(thunk)
                    save()
                except Exception as err:  # noqa: BLE001 - a peer failing is reported
                    res[f"{fw}_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        except Exception as err:  # noqa: BLE001 - report and go on to the next row
            res["ok"] = False
            res["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            all_ok = False
        print(_line(res), flush=True)
    print()
    print("\n".join(table(results)))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"device": device.name, "chip": device.chip, "jax": jax_device,
                       "results": results}, f, indent=1)
    return 0 if all_ok else 1


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:.3f}"


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def baselines(out_json: str | None) -> int:
    """The device's ceilings as torch measures them (CUDA events, median of 20 after 3
    warm-ups): device-to-device copy bandwidth (bytes read + written) of a 4096 x 4096
    f32 tensor (the softmax row's size) and of 1 GiB, and torch.matmul's bf16 rate
    (cuBLAS) at 4096^3 and 8192^3 on random data."""
    try:
        import torch
    except ImportError:
        print("no torch: no baselines")
        return 0
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: no baselines")
        return 0

    def timed(fn: Callable[[], Any]) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)

    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
    for label, n in (("copy 4096x4096 f32", 4096 * 4096), ("copy 1 GiB", 1 << 28)):
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        t = timed(lambda: y.copy_(x))
        out[label + " GB/s"] = 2 * 4 * n / t / 1e9
    for n in (4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda: a @ b)
        out[f"torch bf16 matmul {n}^3 TFLOP/s"] = 2 * n ** 3 / t / 1e12
        out[f"torch bf16 matmul {n}^3 ms"] = t * 1e3
    for k, v in out.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _line(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"{res['key']}: ERROR {res['error']}"
    return (f"{res['key']}: ok={res['ok']} err={res['err']:.2e} launches={res.get('launches')} "
            f"ours={_ms(res.get('ours_s'))} ms jax={_ms(res.get('jax_s'))} ms "
            f"torch={_ms(res.get('torch_s'))} ms")


def table(results: Sequence[dict[str, Any]]) -> list[str]:
    head = ["row", "correct", "launches", "ours ms", "kernels ms", "jax ms", "torch ms",
            "torch.compile ms", "ours/jax", "kernels/jax", "kernels/torch"]
    body = []
    for r in results:
        ratio = (lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}")
        body.append([r["key"], "ERROR" if "error" in r else ("yes" if r["ok"] else "NO"),
                     str(r.get("launches", "-")), _ms(r.get("ours_s")),
                     "-" if r.get("kernel_ms") is None else f"{r['kernel_ms']:.3f}",
                     _ms(r.get("jax_s")),
                     _ms(r.get("torch_s")), _ms(r.get("torch_compile_s")),
                     ratio(r.get("ours_s"), r.get("jax_s")),
                     ratio(_s(r.get("kernel_ms")), r.get("jax_s")),
                     ratio(_s(r.get("kernel_ms")), r.get("torch_s"))])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(b) + " |" for b in body]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", metavar="DIR", help="export the rows into DIR")
    mode.add_argument("--run", metavar="DIR", help="run the prepared rows in DIR")
    mode.add_argument("--baselines", action="store_true",
                      help="measure the device's copy bandwidth and cuBLAS bf16 rate (torch)")
    p.add_argument("--chip", default="sm_90", help="SM the kernels are compiled for")
    p.add_argument("--json", metavar="FILE", help="--run: write the results here")
    p.add_argument("--no-peers", action="store_true", help="--run: do not time jax/torch")
    p.add_argument("--only", action="append", default=[],
                   help="rows whose key contains this text (repeatable)")
    p.add_argument("--in-process", action="store_true",
                   help="--run: all rows in this process (default: one child per row)")
    p.add_argument("--slug", help=argparse.SUPPRESS)
    p.add_argument("--profile", action="store_true",
                   help="--run: also measure our kernel time per call (a second child per row)")
    p.add_argument("--row-timeout", type=float, default=120.0,
                   help="--run: seconds a row may take")
    p.add_argument("--deadline", type=float, default=1e9,
                   help="--run: seconds after which the remaining rows are not started")
    a = p.parse_args(argv)
    if a.prepare:
        return prepare(a.prepare, a.chip, a.only)
    if a.baselines:
        return baselines(a.json)
    if a.in_process:
        return run_check(a.run, a.json, peers=not a.no_peers, only=a.only, slug=a.slug,
                         profile=a.profile)
    return run_isolated(a.run, a.json, not a.no_peers, a.only, a.row_timeout, a.profile,
                        a.deadline)


if __name__ == "__main__":
    sys.exit(main())
