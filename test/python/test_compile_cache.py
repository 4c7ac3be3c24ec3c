"""jit's persistent compilation cache (compile_cache.py): hits across processes without
any MLIR pass, misses on every key change, corrupted and unsafe entries rebuilt,
processes compiling the same key at once, eviction, and the ExecutionEngine path when
the cache is off."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import api, compile_cache, runtime
from mlir_autodiff import numpy as anp
from mlir_autodiff.runtime import CompiledModule

#: Run in a fresh process: the MLP train step (value_and_grad of a tanh MLP's loss), with
#: counters on every pass-manager run and every library build; prints a JSON report.
SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import mlir_autodiff as ad
    from mlir_autodiff import api, compile_cache, numpy as anp
    from mlir_autodiff.transforms import pipeline

    passes = []
    run = pipeline.PassManagerRunner.run
    pipeline.PassManagerRunner.run = lambda self, *a, **k: (passes.append(1), run(self, *a, **k))[1]
    builds = []
    build = api.build_library_from
    def counted_build(*a, **k):
        builds.append(1)
        build(*a, **k)
        time.sleep(float(os.environ.get("SLOW_BUILD", "0")))  # widen a race
    api.build_library_from = counted_build

    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        h = anp.tanh(x @ w1 + b1)
        return ((h @ w2 + b2 - y) ** 2).mean()

    rng = np.random.default_rng(0)
    dt = np.dtype(os.environ.get("DTYPE", "float32"))
    n = int(os.environ.get("WIDTH", "16"))
    params = ((rng.standard_normal((8, n)).astype(dt), np.zeros(n, dt)),
              (rng.standard_normal((n, 3)).astype(dt), np.zeros(3, dt)))
    x = rng.standard_normal((5, 8)).astype(dt)
    y = rng.standard_normal((5, 3)).astype(dt)
    f = ad.jit(ad.value_and_grad(loss), threads=int(os.environ.get("THREADS", "1")))
    value, grads = f(params, x, y)
    leaves = [value] + [g for pair in grads for g in pair]
    exe = next(iter(f._cache.values()))
    compile_cache.flush()  # the entry of a miss is written in the background
    print(json.dumps({"stats": compile_cache.stats, "passes": len(passes),
                      "builds": len(builds), "cached": exe.cache_entry is not None,
                      "out": [np.asarray(v).tobytes().hex() for v in leaves]}))
""")


def _env(cache: os.PathLike[str] | str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AUTODIFF_CACHE", None)
    return dict(env, AUTODIFF_CACHE_DIR=str(cache), **extra)


def _script(tmp_path) -> str:
    path = tmp_path / "train_step.py"
    path.write_text(SCRIPT)
    return str(path)


def _run(tmp_path, cache, **extra: str) -> dict:
    proc = subprocess.run([sys.executable, _script(tmp_path)], env=_env(cache, **extra),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(cache) -> list[str]:
    return sorted(n for n in os.listdir(cache) if not n.startswith("."))


def test_a_fresh_process_hits_without_running_a_pass(tmp_path):
    cache = tmp_path / "cache"
    cold = _run(tmp_path, cache)
    assert cold["stats"]["misses"] == 1 and cold["stats"]["stores"] == 1
    # a miss runs from memory (the ExecutionEngine) while its entry is written
    assert cold["passes"] > 0 and cold["builds"] == 1 and not cold["cached"]
    warm = _run(tmp_path, cache)
    assert warm["stats"]["hits"] == 1 and warm["stats"]["misses"] == 0
    assert warm["passes"] == 0 and warm["builds"] == 0 and warm["cached"]
    assert warm["out"] == cold["out"]  # bit for bit
    # ... and the ExecutionEngine's build of the same step agrees bit for bit.
    engine = _run(tmp_path, cache, AUTODIFF_CACHE="0")
    assert not engine["cached"] and engine["passes"] > 0 and engine["builds"] == 0
    assert engine["out"] == cold["out"]
    assert len(_entries(cache)) == 1


def test_the_cache_directory_is_private(tmp_path):
    cache = tmp_path / "deep" / "cache"
    old = os.umask(0)
    try:
        _run(tmp_path, cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    (entry,) = _entries(cache)
    for name in os.listdir(cache / entry):
        assert not os.stat(cache / entry / name).st_mode & 0o077


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch):
    """The suite runs with the cache off (conftest); these tests are about it. Versions
    compiled earlier in this process would be reused in memory (an identical trace)
    without asking the cache: each test starts without them."""
    monkeypatch.setenv("AUTODIFF_CACHE", "1")
    ad.clear_caches()


def _stats_delta(before: dict[str, int]) -> dict[str, int]:
    return {k: compile_cache.stats[k] - before[k] for k in before}


def _sq(x):
    return anp.sin(x) * x


def test_the_cached_library_is_built_at_the_level_the_jit_chose(tmp_path, monkeypatch):
    # the library written into the cache is built at the level the in-memory compile
    # used (runtime.default_opt_level), not at a native build's own default (O3)
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AUTODIFF_OPT_LEVEL", raising=False)
    monkeypatch.setattr(runtime, "DEFAULT_OPT_LEVEL", 1)  # neither O3 nor the usual O2
    levels = []
    build = api._build_in_background

    def recording(inp, target, path):
        levels.append(target.opt_level)
        build(inp, target, path)

    monkeypatch.setattr(api, "_build_in_background", recording)
    x = np.linspace(0.0, 1.0, 12)
    np.testing.assert_allclose(ad.jit(_sq)(x), np.sin(x) * x, rtol=1e-12)
    compile_cache.flush()
    assert levels == [1]
    ad.clear_caches()
    hits = compile_cache.stats["hits"]
    np.testing.assert_allclose(ad.jit(_sq)(x), np.sin(x) * x, rtol=1e-12)  # from the cache
    assert compile_cache.stats["hits"] == hits + 1


def test_every_key_change_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(0.0, 1.0, 12, dtype=np.float32)

    def misses(fun, *args, **jit_options) -> int:
        ad.clear_caches()  # not the in-process reuse of an identical trace: the disk
        before = dict(compile_cache.stats)
        want = np.sin(args[0]) * args[0]  # before the call: a donated argument is consumed
        out = ad.jit(fun, **jit_options)(*args)
        compile_cache.flush()
        np.testing.assert_allclose(out, want, rtol=1e-6)
        delta = _stats_delta(before)
        assert delta["hits"] + delta["misses"] == 1
        return delta["misses"]

    assert misses(_sq, x) == 1
    assert misses(_sq, x) == 0                          # a new jit object, same key: a hit
    assert misses(_sq, x[:6]) == 1                      # shape
    assert misses(_sq, x.astype(np.float64)) == 1       # dtype
    assert misses(_sq, x, threads=2) == 1               # threads
    assert misses(_sq, x.copy(), donate_argnums=0) == 1  # donation
    monkeypatch.setenv("AUTODIFF_OPT_LEVEL", "1")
    assert misses(_sq, x) == 1                          # LLVM optimization level
    monkeypatch.delenv("AUTODIFF_OPT_LEVEL")
    assert misses(lambda v: anp.sin(v) * v + 0.0 * v, x) == 1  # another body

    # Locations are not part of the key: the same body written elsewhere hits.
    def same_body_elsewhere(x):
        return anp.sin(x) * x

    assert misses(same_body_elsewhere, x) == 0
    # Another version of the package (or of MLIR, LLVM's tools) misses.
    versions = compile_cache.tool_versions()
    monkeypatch.setattr(compile_cache, "tool_versions",
                        lambda: {**versions, "mlir_autodiff": versions["mlir_autodiff"] + "+1"})
    assert misses(_sq, x) == 1
    # So does an edited source file of the package (its fingerprint changes).
    monkeypatch.setattr(compile_cache, "source_fingerprint", lambda: "edited")
    assert misses(_sq, x) == 1
    assert len(_entries(tmp_path / "cache")) == 9


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache holding the train step's entry, written by another process."""
    tmp = tmp_path_factory.mktemp("populated")
    report = _run(tmp, tmp / "cache")
    return tmp / "cache", report


def _corrupt(entry, how: str) -> None:
    lib, meta = entry / compile_cache.LIBRARY, entry / compile_cache.ENTRY_JSON
    if how == "truncated library":
        with open(lib, "r+b") as f:
            f.truncate(os.path.getsize(lib) // 2)
    elif how == "garbled library":
        data = bytearray(lib.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
    elif how == "missing library":
        lib.unlink()
    elif how == "garbled json":
        meta.write_text(meta.read_text()[:40])
    elif how == "wrong hash recorded":
        doc = json.loads(meta.read_text())
        doc["sha256"] = "0" * 64
        meta.write_text(json.dumps(doc))
    elif how == "another key recorded":
        doc = json.loads(meta.read_text())
        doc["key"] = "f" * 64
        meta.write_text(json.dumps(doc))
    elif how == "group-writable library":
        os.chmod(lib, 0o770)
    elif how == "world-writable entry":
        os.chmod(entry, 0o707)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", [
    "truncated library", "garbled library", "missing library", "garbled json",
    "wrong hash recorded", "another key recorded", "group-writable library",
    "world-writable entry"])
def test_a_corrupted_or_unsafe_entry_is_rebuilt(populated, tmp_path, how):
    source, first = populated
    cache = tmp_path / "cache"
    shutil.copytree(source, cache)
    (entry,) = _entries(cache)
    _corrupt(cache / entry, how)
    again = _run(tmp_path, cache)
    assert again["stats"]["rebuilt"] == 1 and again["stats"]["misses"] == 1
    assert again["builds"] == 1 and not again["cached"]  # rebuilt: runs from memory
    assert again["out"] == first["out"]
    # The rebuilt entry is sound: the next process hits it.
    assert _entries(cache) == [entry]
    assert _run(tmp_path, cache)["stats"]["hits"] == 1


def test_two_processes_compiling_the_same_function_at_once(tmp_path):
    cache = tmp_path / "cache"
    script = _script(tmp_path)
    # Each build sleeps 2 s after linking, so both compile before either renames.
    procs = [subprocess.Popen([sys.executable, script], env=_env(cache, SLOW_BUILD="2"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["builds"] for r in reports] == [1, 1]  # both compiled ...
    assert sorted(r["stats"]["stores"] for r in reports) == [0, 1]  # ... one rename won
    assert reports[0]["out"] == reports[1]["out"]
    assert len(_entries(cache)) == 1
    assert not [n for n in os.listdir(cache) if n.startswith(".")]  # no leftovers
    assert _run(tmp_path, cache)["stats"]["hits"] == 1


def _entry_size(path) -> int:
    return sum(os.path.getsize(path / n) for n in os.listdir(path))


def test_least_recently_used_entries_are_evicted_under_the_cap(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(cache))
    x = np.linspace(0.0, 1.0, 8)
    keys = {}
    for name, fun in (("sin", anp.sin), ("cos", anp.cos)):
        ad.clear_caches()
        before = set(_entries(cache)) if cache.exists() else set()
        np.testing.assert_allclose(ad.jit(fun)(x), getattr(np, name)(x))
        compile_cache.flush()
        (keys[name],) = set(_entries(cache)) - before
        time.sleep(0.05)
    sizes = {k: _entry_size(cache / v) for k, v in keys.items()}
    # Room for about two and a half entries: a third store must evict one.
    cap = sizes["sin"] + sizes["cos"] + sizes["sin"] // 2
    monkeypatch.setenv("AUTODIFF_CACHE_MAX_MB", repr(cap / 2**20))
    ad.clear_caches()
    before = dict(compile_cache.stats)
    ad.jit(anp.sin)(x)  # a hit: sin is now the most recently used
    assert _stats_delta(before)["hits"] == 1
    time.sleep(0.05)
    np.testing.assert_allclose(ad.jit(anp.tanh)(x), np.tanh(x))
    compile_cache.flush()
    assert _stats_delta(before)["evicted"] == 1
    remaining = set(_entries(cache))
    assert keys["cos"] not in remaining and keys["sin"] in remaining and len(remaining) == 2
    # A cap smaller than any entry keeps just the newest.
    monkeypatch.setenv("AUTODIFF_CACHE_MAX_MB", "0.000001")
    ad.jit(anp.exp)(x)
    compile_cache.flush()
    assert len(_entries(cache)) == 1


def test_cache_off_uses_the_execution_engine(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(cache))
    monkeypatch.setenv("AUTODIFF_CACHE", "0")
    f = ad.jit(_sq)
    x = np.linspace(0.0, 1.0, 6)
    np.testing.assert_allclose(f(x), np.sin(x) * x)
    (exe,) = f._cache.values()
    assert isinstance(exe.compiled, CompiledModule) and exe.cache_entry is None
    assert not cache.exists()
    monkeypatch.delenv("AUTODIFF_CACHE")
    ad.clear_caches()  # else g reuses f's compiled module (an identical trace)
    g = ad.jit(_sq)
    np.testing.assert_array_equal(g(x), f(x))  # a miss: from memory, stored meanwhile
    (exe,) = g._cache.values()
    assert isinstance(exe.compiled, CompiledModule) and exe.cache_entry is None
    compile_cache.flush()
    ad.clear_caches()
    h = ad.jit(_sq)
    np.testing.assert_array_equal(h(x), f(x))  # a hit: the stored library
    (exe,) = h._cache.values()
    assert exe.compiled is None and exe.cache_entry is not None


def test_an_unsafe_cache_root_is_not_used(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(cache))
    compile_cache._warned.clear()
    f = ad.jit(_sq)
    x = np.linspace(0.0, 1.0, 6)
    with pytest.warns(RuntimeWarning, match="owned by this user and closed to writes"):
        np.testing.assert_allclose(f(x), np.sin(x) * x)
    (exe,) = f._cache.values()
    assert exe.cache_entry is None and isinstance(exe.compiled, CompiledModule)
    assert os.listdir(cache) == []


def test_nothing_to_compile_writes_no_entry(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(cache))
    x = np.ones(3)
    out = ad.jit(lambda a: (a, np.float32(2.0)))(x)
    np.testing.assert_array_equal(out[0], x)
    assert not cache.exists() or _entries(cache) == []


def _sgd(w, g):
    return w - 0.5 * g, g.sum()


def test_a_hit_keeps_donation_and_random_draws(tmp_path, monkeypatch):
    """What an entry records beside the library (results computed in donated buffers,
    the generator state threaded through @main) works the same on a hit."""
    monkeypatch.setenv("AUTODIFF_CACHE_DIR", str(tmp_path / "cache"))
    g = np.linspace(0.0, 1.0, 64)
    for want_hit in (0, 1):
        ad.clear_caches()
        before = dict(compile_cache.stats)
        w = np.arange(64.0)
        new_w, dot = ad.jit(_sgd, donate_argnums=0)(w, g)
        compile_cache.flush()
        assert _stats_delta(before)["hits"] == want_hit
        assert np.shares_memory(new_w, w)  # computed in the donated buffer
        np.testing.assert_array_equal(new_w, np.arange(64.0) - 0.5 * g)
        np.testing.assert_allclose(dot, g.sum(), rtol=1e-12)

    def noisy(x):
        return x + ad.random.normal((4,))

    draws = []
    for want_hit in (0, 1):
        ad.clear_caches()
        before = dict(compile_cache.stats)
        ad.random.manual_seed(7)
        f = ad.jit(noisy)
        draws.append((f(np.zeros(4)), f(np.zeros(4))))
        compile_cache.flush()
        assert _stats_delta(before)["hits"] == want_hit
    np.testing.assert_array_equal(draws[0][0], draws[1][0])  # same seed, same numbers
    np.testing.assert_array_equal(draws[0][1], draws[1][1])
    assert not np.array_equal(draws[0][0], draws[0][1])      # the state advances


def test_a_process_that_exits_right_after_a_miss_still_stores_its_entry(tmp_path):
    """The entry is built in the background; the process waits for it at exit (the
    build's temporary folder was once removed under it by an earlier exit handler)."""
    cache = tmp_path / "cache"
    code = textwrap.dedent("""
        import numpy as np
        import mlir_autodiff as ad
        from mlir_autodiff import numpy as anp
        w = np.random.default_rng(0).standard_normal((256, 256))
        f = ad.jit(ad.grad(lambda x: anp.sum(anp.tanh(x @ w) ** 2)))
        f(np.ones((64, 256)))      # no flush: the exit handler waits
    """)
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code],
                              env=_env(cache), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "could not store" not in proc.stderr
    assert len(_entries(cache)) == 1


def _idle_scheduling() -> bool:
    return hasattr(os, "SCHED_IDLE") and sys.platform.startswith("linux")


def test_background_builds_run_their_tools_at_a_lower_priority() -> None:
    # the cache builds entries while the program goes on; its opt/llc/cc must not
    # take the cores from the program (a re-created jit(grad(h)) loop slowed 5-10x
    # at +10 niceness; SCHED_IDLE where Linux has it)
    from mlir_autodiff import native_build

    base = os.getpriority(os.PRIO_PROCESS, 0)
    fg = native_build._spawn(["sleep", "5"])
    with native_build.background():
        bg = native_build._spawn(["sleep", "5"])
    try:
        if _idle_scheduling():
            assert os.sched_getscheduler(fg.pid) == os.sched_getscheduler(0)
            assert os.sched_getscheduler(bg.pid) == os.SCHED_IDLE
        else:
            assert os.getpriority(os.PRIO_PROCESS, fg.pid) == base
            assert os.getpriority(os.PRIO_PROCESS, bg.pid) == min(
                19, base + native_build.BACKGROUND_NICENESS)
    finally:
        for p in (fg, bg):
            p.kill()
            p.communicate()


@pytest.mark.skipif(not _idle_scheduling(), reason="SCHED_IDLE is Linux's")
def test_the_cache_builder_thread_and_its_tools_grandchildren_run_idle() -> None:
    # the builder thread itself is SCHED_IDLE, so a tool's own children (cc's cc1) are
    # idle from their start: lowering each tool after its spawn raced them (seen: a
    # cc1 at normal priority beside an idle cc)
    seen = {}

    class Recording:  # the thread's whole work is cache.store(...)
        def store(self, key, name, meta, build) -> None:
            seen["thread"] = os.sched_getscheduler(0)
            out = subprocess.run(["sh", "-c", "sh -c 'cat /proc/self/stat'"],
                                 capture_output=True, text=True, check=True).stdout
            seen["grandchild"] = int(out.rsplit(")", 1)[1].split()[38])  # field 41: policy

    compile_cache.store_in_background(Recording(), "0" * 64, "f", {}, print).join(60)
    assert seen == {"thread": os.SCHED_IDLE, "grandchild": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the caller's thread is untouched


@pytest.mark.parametrize("bad", ["4", "-1", "fast", "O2"])
def test_a_bad_opt_level_is_a_clear_error(monkeypatch, bad):
    monkeypatch.setenv("AUTODIFF_OPT_LEVEL", bad)
    with pytest.raises(ValueError, match=r"AUTODIFF_OPT_LEVEL=.*expected 0, 1, 2 or 3"):
        ad.jit(_sq)(np.ones(3))
