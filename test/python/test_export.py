"""ad.export and mlir_autodiff.aot: artifacts that run without MLIR.

- Every quick row of the benchmark suite is exported (`cpu="native"`: the
  JIT's target) and run in a fresh process where `import mlir` fails; the
  results equal `jit`'s bit for bit.
- The calling convention is jit's: pytrees in and out, constants and
  arguments returned, donation, the random generator; wrong arguments are
  refused with errors naming the argument.
- The portable default target (x86-64-v3) agrees with jit to rounding.
- Broken artifacts and machines that cannot run them give ArtifactError /
  ExportError / NoCudaDevice, never a crash.
- GPU artifacts build here (ptxas) and, with a fake CUDA driver, load their
  kernels and launch them; a host loop with tens of thousands of launches
  no longer overflows the stack.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fake_cuda import build_fake_driver

import mlir_autodiff as ad
from mlir_autodiff import aot, exporting, lax, nn, pytree
from mlir_autodiff import numpy as anp
from mlir_autodiff import random as arandom

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler `cc`")
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
pytestmark = needs_cc

#: Prepended to scripts run in a child process: MLIR cannot be imported there.
NO_MLIR = textwrap.dedent(f"""
    import sys
    sys.modules["mlir"] = None  # `import mlir` raises ImportError
    sys.path.insert(0, {str(ROOT / "python")!r})
    sys.path.insert(0, {str(BENCH)!r})
""")


def _child(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", NO_MLIR + textwrap.dedent(script)],
                          capture_output=True, text=True, env=full, timeout=600)


def _bits(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.dtype.str.encode() + str(a.shape).encode() + a.view(np.uint8).tobytes()


# --------------------------------------------------------------------------- benchmark rows


def _quick_rows():
    sys.path.insert(0, str(BENCH))
    import run

    return [c for c in run.CASES if c.quick]


def test_benchmark_rows_round_trip_bit_for_bit_without_mlir(tmp_path):
    sys.path.insert(0, str(BENCH))
    import gpu_check

    importlib.import_module("run")  # the registry whose `ours_jit` is replaced below
    recorder = gpu_check._Recorder()
    saved = {m: sys.modules[m].ours_jit for m in ("run", "grad_cases", "adbench_cases")}
    rows, expected, extra = [], {}, {}
    try:
        for m in saved:
            sys.modules[m].ours_jit = recorder
        for i, case in enumerate(_quick_rows()):
            inputs = case.inputs(np.random.default_rng(i))
            recorder.calls.clear()
            case.ours(inputs)()
            fn, args = recorder.calls[-1]
            want = ad.jit(fn)(*args)
            tree, plan = gpu_check._arg_plan(args, inputs, extra)
            path = tmp_path / f"row{i}"
            ad.export(fn, *args, path=path, cpu="native")
            leaves, out_tree = pytree.tree_flatten(want)
            for k, leaf in enumerate(leaves):
                expected[f"r{i}_{k}"] = np.asarray(leaf)
            rows.append({"key": case.key, "path": str(path), "seed": i, "tree": tree,
                         "args": plan, "n_out": len(leaves),
                         "out_tree": pytree.treedef_to_json(out_tree)})
    finally:
        for m, f in saved.items():
            sys.modules[m].ours_jit = f
    assert len(rows) >= 10
    np.savez(tmp_path / "expected.npz", **expected)
    np.savez(tmp_path / "extra.npz", **extra)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    proc = _child(f"""
        import json
        import numpy as np
        import run
        from mlir_autodiff import aot, pytree
        assert "mlir" not in sys.modules or sys.modules["mlir"] is None
        cases = {{c.key: c for c in run.CASES}}
        rows = json.load(open({str(tmp_path / "rows.json")!r}))
        expected = np.load({str(tmp_path / "expected.npz")!r})
        extra = np.load({str(tmp_path / "extra.npz")!r})
        for i, row in enumerate(rows):
            inputs = cases[row["key"]].inputs(np.random.default_rng(row["seed"]))
            leaves = [inputs[j] if kind == "input" else extra[j] for kind, j in row["args"]]
            args = pytree.tree_unflatten(pytree.treedef_from_json(row["tree"]), leaves)
            out = aot.load(row["path"])(*args)
            got, tree = pytree.tree_flatten(out)
            assert pytree.treedef_to_json(tree) == row["out_tree"], row["key"]
            for k, g in enumerate(got):
                w = expected[f"r{{i}}_{{k}}"]
                g = np.asarray(g)
                assert g.dtype == w.dtype and g.shape == w.shape, row["key"]
                assert g.tobytes() == w.tobytes(), (row["key"], k)
            print("ok", row["key"])
        print("mlir imported:", [m for m in sys.modules if m.split(".")[0] == "mlir"
                                 and sys.modules[m] is not None])
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("\nok ") + proc.stdout.startswith("ok ") == len(rows)
    assert "mlir imported: []" in proc.stdout


# --------------------------------------------------------------------------- calling convention

Pair = collections.namedtuple("Pair", ["first", "second"])


def _structured(p, x, scale):
    h = anp.tanh(x @ p["w"] + p["b"])
    return {"loss": anp.sum(h * h) * scale, "h": h, "none": None,
            "pair": Pair(h[0], 3.0), "x": x}


def _structured_args():
    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((5, 4)), "b": rng.standard_normal(4)}
    return p, rng.standard_normal((3, 5)), 0.5


def _same(a, b) -> None:
    la, ta = pytree.tree_flatten(a)
    lb, tb = pytree.tree_flatten(b)
    assert pytree.treedef_to_json(ta) == pytree.treedef_to_json(tb)
    for u, v in zip(la, lb):
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        assert _bits(u) == _bits(v)


def test_pytrees_constants_and_arguments_as_jit(tmp_path):
    args = _structured_args()
    ad.export(_structured, *args, path=tmp_path / "s", cpu="native")
    f = aot.load(tmp_path / "s")
    got, want = f(*args), ad.jit(_structured)(*args)
    _same(got, want)
    assert isinstance(got["pair"], Pair)  # the namedtuple class is found again
    assert got["x"] is not args[1] and not np.shares_memory(got["x"], args[1])
    # gradients of a pytree function, exported like any function
    g = ad.grad(lambda p, x, s: _structured(p, x, s)["loss"])
    ad.export(g, *args, path=tmp_path / "g", cpu="native")
    _same(aot.load(tmp_path / "g")(*args), ad.jit(g)(*args))


def test_namedtuple_of_a_module_the_loader_lacks_becomes_a_look_alike():
    td = pytree.treedef_from_json({"kind": "namedtuple", "namedtuple": [
        "no_such_module_xyz", "Point", ["x", "y"]], "children": [{"kind": "leaf"}] * 2})
    p = pytree.tree_unflatten(td, [1, 2])
    assert type(p).__name__ == "Point" and p.x == 1 and p.y == 2


def test_static_arguments_are_fixed_at_export_and_jit_options_are_taken(tmp_path):
    def f(x, n, *, mode):
        return x * n if mode == "mul" else x + n

    jf = ad.jit(f, static_argnums=1, static_argnames="mode")
    x = np.arange(4.0)
    ad.export(jf, x, 3, path=tmp_path / "a", kwargs={"mode": "mul"})
    out = aot.load(tmp_path / "a")(x)  # the static 3 and "mul" are part of the artifact
    np.testing.assert_array_equal(out, x * 3)


def test_donation_writes_in_place_like_jit(tmp_path):
    def step(w, g):
        return w - 0.5 * g

    w, g = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    ad.export(step, w, g, path=tmp_path / "d", donate_argnums=0, cpu="native")
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["donated"] == [0] and manifest["in_place"] == {"0": 0}
    # native code records the CPU features it may use; this machine has them
    assert manifest["target"]["cpu"] == "native"
    assert set(manifest["target"]["cpu_flags"]) <= (aot.cpu_flags() or set())
    assert "avx2" in manifest["target"]["cpu_flags"] or "avx2" not in (aot.cpu_flags() or ())
    f = aot.load(tmp_path / "d")
    w1 = w.copy()
    out = f(w1, g)
    assert out is w1  # computed in the donated buffer and handed back, as jit does
    np.testing.assert_array_equal(out, w - 0.5)
    w2 = w.copy()
    jout = ad.jit(step, donate_argnums=0)(w2, g)
    assert jout is w2 and _bits(jout) == _bits(out)
    # a read-only donated array is copied first, never written
    ro = w.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(f(ro, g), w - 0.5)
    np.testing.assert_array_equal(ro, w)


def test_random_draws_follow_the_generator_like_jit(tmp_path):
    def f(x):
        return nn.dropout(x, 0.25) + arandom.uniform(x.shape)

    x = np.ones(257, np.float32)
    ad.export(f, x, path=tmp_path / "r", cpu="native")
    g = aot.load(tmp_path / "r")
    arandom.manual_seed(7)
    a1, a2 = g(x), g(x)
    state_after = arandom.get_state()
    arandom.manual_seed(7)
    jf = ad.jit(f)
    j1, j2 = jf(x), jf(x)
    assert _bits(a1) == _bits(j1) and _bits(a2) == _bits(j2)
    assert arandom.get_state() == state_after
    assert not np.array_equal(a1, a2)


def test_bool_and_integer_arguments_and_results(tmp_path):
    def f(mask, k, x):
        return anp.where(mask, x * k, -x), mask & (x > 0)

    mask, x = np.array([True, False, True]), np.array([1.0, -2.0, 3.0])
    ad.export(f, mask, 2, x, path=tmp_path / "b", cpu="native")
    got = aot.load(tmp_path / "b")(mask, 2, x)
    _same(got, ad.jit(f)(mask, 2, x))
    assert got[1].dtype == np.bool_


def test_function_with_nothing_to_compute(tmp_path):
    def f(x):
        return x, 2.0

    ad.export(f, np.ones(3), path=tmp_path / "c")
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["library"] is None and not (tmp_path / "c" / "artifact.so").exists()
    x, two = aot.load(tmp_path / "c")(np.ones(3))
    np.testing.assert_array_equal(x, np.ones(3))
    assert float(two) == 2.0


def test_loops_and_threads(tmp_path):
    def f(x):
        return lax.fori_loop(0, 5, lambda i, c: anp.sin(c) + i, x)

    x = np.linspace(0, 1, 1000)
    ad.export(f, x, path=tmp_path / "l", cpu="native")
    _same(aot.load(tmp_path / "l")(x), ad.jit(f)(x))


def test_wrong_arguments_are_refused_with_the_argument_named(tmp_path):
    args = _structured_args()
    ad.export(_structured, *args, path=tmp_path / "s")
    f = aot.load(tmp_path / "s")
    p, x, s = args
    with pytest.raises(ValueError, match=r"argument 2 .*expected shape \(3, 5\), got \(4, 5\)"):
        f(p, np.ones((4, 5)), s)
    with pytest.raises(TypeError, match=r"argument 2 .*expected dtype float64, got float32"):
        f(p, x.astype(np.float32), s)
    with pytest.raises(TypeError, match="structure"):
        f(p, x)
    with pytest.raises(TypeError, match="structure"):
        f({"w": p["w"]}, x, s)
    with pytest.raises(TypeError, match="strings|cannot convert"):
        f(p, "x", s)
    # a Python float for the weakly typed scalar is fine, as in jit
    _same(f(p, x, 1), ad.jit(_structured)(p, x, 1.0))


def test_portable_target_agrees_with_jit_to_rounding(tmp_path):
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(
        (32, 64)).astype(np.float32)

    def loss(w, x):
        return anp.mean(anp.tanh(x @ w) ** 2)

    vg = ad.value_and_grad(loss)
    ad.export(vg, w, x, path=tmp_path / "p")  # default: x86-64-v3
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["target"]["cpu"] == "x86-64-v3"
    got, want = aot.load(tmp_path / "p")(w, x), ad.jit(vg)(w, x)
    for g, v in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        np.testing.assert_allclose(g, v, rtol=2e-5, atol=1e-7)


# --------------------------------------------------------------------------- errors


def test_export_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="cpu must be one of"):
        ad.export(anp.sin, np.ones(2), path=tmp_path / "e", cpu="pentium")
    with pytest.raises(ValueError, match="device must be one of"):
        ad.export(anp.sin, np.ones(2), path=tmp_path / "e", device="tpu")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(exporting.ExportError, match="C compiler .*/nonexistent/cc"):
        ad.export(anp.sin, np.ones(2), path=tmp_path / "e")
    assert not (tmp_path / "e").exists()  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export-")]


def test_broken_artifacts_and_machines(tmp_path):
    with pytest.raises(aot.ArtifactError, match="no such artifact"):
        aot.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(aot.ArtifactError, match="no manifest.json"):
        aot.load(tmp_path / "empty")
    ad.export(anp.sin, np.ones(2), path=tmp_path / "a")
    manifest_path = tmp_path / "a" / "manifest.json"
    good = manifest_path.read_text()
    manifest_path.write_text(good[: len(good) // 2])
    with pytest.raises(aot.ArtifactError, match="unreadable manifest"):
        aot.load(tmp_path / "a")
    manifest = json.loads(good)
    manifest["version"] = 99
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(aot.ArtifactError, match="format version 99"):
        aot.load(tmp_path / "a")
    manifest["version"] = exporting.FORMAT_VERSION
    manifest["target"]["cpu_flags"] = ["no_such_cpu_feature"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(aot.ArtifactError, match="lacks no_such_cpu_feature"):
        aot.load(tmp_path / "a")
    manifest_path.write_text(good)
    (tmp_path / "a" / "artifact.so").write_bytes(b"not a library")
    with pytest.raises(aot.ArtifactError, match="cannot load artifact.so"):
        aot.load(tmp_path / "a")
    (tmp_path / "a" / "artifact.so").unlink()
    with pytest.raises(aot.ArtifactError, match="artifact.so is missing"):
        aot.load(tmp_path / "a")


# --------------------------------------------------------------------------- GPU artifacts


@needs_ptxas
def test_gpu_artifact_builds_and_runs_on_a_fake_driver(tmp_path):
    def f(x, y):
        return anp.tanh(x) * y, anp.sum(x)

    x, y = np.linspace(-1, 1, 1024, dtype=np.float32), np.ones(1024, np.float32)
    ad.export(f, x, y, path=tmp_path / "g", device="gpu", chip="sm_90")
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["target"]["chip"] == "sm_90"
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(tmp_path / "g" / "artifact.so")],
                        capture_output=True, text=True).stdout
    assert "mgpu" not in nm and "mlir" not in nm.lower()  # our runtime is inside
    # no driver: the same NoCudaDevice as the JIT runtime, before loading anything
    proc = _child(f"""
        from mlir_autodiff import aot
        try:
            aot.load({str(tmp_path / "g")!r})
        except aot.NoCudaDevice as err:
            print("NoCudaDevice:", err)
    """, {"AUTODIFF_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
    assert "NoCudaDevice: no CUDA device: cannot load the CUDA driver" in proc.stdout, proc.stderr
    # a fake driver: the kernels load at load time; a call allocates, copies in,
    # launches the kernel (the elementwise product and the sum share one since the
    # GPU fusion of independent loops), copies out and frees
    driver = build_fake_driver(tmp_path / "fake", CC)
    log = tmp_path / "driver.log"
    proc = _child(f"""
        import numpy as np
        from mlir_autodiff import aot
        g = aot.load({str(tmp_path / "g")!r})
        print("loaded")
        x = np.linspace(-1, 1, 1024, dtype=np.float32)
        out, s = g(x, np.ones(1024, np.float32))
        print("launches", g.kernel_launches(), out.shape, out.dtype)
    """, {"AUTODIFF_CUDA_DRIVER": str(driver), "FAKE_CUDA_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert "launches 1 (1024,) float32" in proc.stdout
    calls = [line.split()[0] for line in log.read_text().splitlines()]
    load = calls.index("cuModuleLoadData")
    first_launch = calls.index("cuLaunchKernel")
    assert load < calls.index("cuModuleGetFunction") < first_launch
    assert calls.count("cuLaunchKernel") == 1
    between = calls[load:first_launch]
    assert "cuMemAllocAsync" in between and "cuMemcpyAsync" in between
    after = calls[first_launch:]
    assert "cuMemcpyAsync" in after and "cuMemFreeAsync" in after
    assert calls[-1] == "cuModuleUnload" or "cuModuleUnload" in calls


@needs_ptxas
def test_host_loop_with_many_launches_does_not_grow_the_stack(tmp_path):
    """Each launch's argument array is a stack allocation at the launch; in a host
    loop they were freed only at return: 30000 launches overflowed a 1 MiB stack."""
    def f(x):
        return lax.fori_loop(0, 30000, lambda i, c: c * 0.5 + 1.0, x)

    ad.export(f, np.ones(64, np.float32), path=tmp_path / "loop", device="gpu")
    driver = build_fake_driver(tmp_path / "fake", CC)
    proc = _child(f"""
        import threading
        import numpy as np
        from mlir_autodiff import aot
        g = aot.load({str(tmp_path / "loop")!r})
        def go():
            g(np.ones(64, np.float32))
            print("launches", g.kernel_launches())
        threading.stack_size(1 << 20)
        t = threading.Thread(target=go)
        t.start()
        t.join()
    """, {"AUTODIFF_CUDA_DRIVER": str(driver)})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert int(proc.stdout.split("launches")[1]) >= 30000


@needs_ptxas
def test_gpu_check_prepares_a_small_folder_and_runs_cleanly_without_a_gpu(tmp_path):
    folder = tmp_path / "check"
    script = str(BENCH / "gpu_check.py")
    proc = subprocess.run([sys.executable, script, "--prepare", str(folder), "--only",
                           "matmul 64", "--only", "dropout", "--only", "softmax (rows) 64"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((folder / "rows.json").read_text())["rows"]
    assert {r["key"] for r in rows} >= {"philox dropout + uniform 2^20"}
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 64 << 20
    env = dict(os.environ, AUTODIFF_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    proc = subprocess.run([sys.executable, script, "--run", str(folder)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no CUDA device:")
    # with a fake driver the runner loads and calls every row (the fake computes
    # nothing, so no row is correct) and prints the table with launch counts
    driver = build_fake_driver(tmp_path / "fake", CC)
    env = dict(os.environ, AUTODIFF_CUDA_DRIVER=str(driver))
    proc = subprocess.run([sys.executable, script, "--run", str(folder), "--no-peers",
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 1, proc.stderr  # rows are wrong on a fake
    result = json.loads((tmp_path / "r.json").read_text())["results"]
    assert len(result) == len(rows)
    assert all(r["launches"] >= 1 and r["ok"] is False for r in result)
    assert "| row | correct | launches |" in proc.stdout
