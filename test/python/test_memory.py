"""Compiled versions are bounded and freed (issue 25 item 5).

A function called with ever new shapes kept every compiled version while it
lived (about 1.2 MB each here: 300 signatures grew the process by 360 MB).
Each jitted function now keeps the AUTODIFF_JIT_CACHE_SIZE most recently used
versions (and all together AUTODIFF_JIT_CACHE_TOTAL), an evicted version is
freed at once, and `ad.clear_caches()` drops them all. Measured in a child
process (RSS from /proc/self/statm), with small bounds to keep it quick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp

SCENARIO = textwrap.dedent("""
    import json, os
    import numpy as np
    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    f = ad.jit(lambda x: anp.tanh(x) * 2.0 + 1.0)
    g = ad.jit(lambda x: anp.sin(x) * x)
    f(np.ones(2)); g(np.ones(2))
    start = rss()
    marks = {}
    for n in range(3, 123):
        x = np.linspace(0, 1, n)
        assert np.allclose(f(x), np.tanh(x) * 2 + 1) and np.allclose(g(x), np.sin(x) * x)
        if n in (35, 122):
            marks[n] = rss()
    cached = [f._cache_size(), g._cache_size()]
    ad.clear_caches()
    after = rss()
    x = np.linspace(0, 1, 5)
    again = bool(np.allclose(f(x), np.tanh(x) * 2 + 1))  # compiles again after clearing
    print(json.dumps({"start": start, "marks": marks, "cached": cached, "after": after,
                      "again": again}))
""")


def test_rss_is_bounded_over_many_signatures_and_clear_caches_returns_it():
    env = dict(os.environ, AUTODIFF_JIT_CACHE_SIZE="16", AUTODIFF_JIT_CACHE_TOTAL="24",
               AUTODIFF_CACHE="0")
    proc = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["cached"][0] <= 16 and r["cached"][1] <= 16 and sum(r["cached"]) <= 24
    # 87 more signatures of two functions after the caches filled: unbounded, that was
    # ~200 MB here; bounded, the process stays within a few MB
    grown = r["marks"]["122"] - r["marks"]["35"]
    assert grown < 30, r
    assert r["after"] <= r["start"] * 1.10, r
    assert r["again"]


def test_least_recently_used_version_is_the_one_evicted(monkeypatch):
    from mlir_autodiff import api

    monkeypatch.setattr(api, "JIT_CACHE_SIZE", 2)
    f = ad.jit(lambda x: x * 2.0)
    a, b, c = np.ones(1), np.ones(2), np.ones(3)
    f(a), f(b), f(a), f(c)  # b is the least recently used when c arrives
    shapes = sorted(k[1][0][0] for k in f._cache)
    assert shapes == [(1,), (3,)]
    np.testing.assert_array_equal(f(b), 2 * b)  # evicted: compiles again, right result
    assert f._cache_size() == 2


def test_clear_caches_keeps_functions_working():
    f = ad.jit(lambda x: anp.cos(x))
    x = np.linspace(0, 1, 7)
    y = f(x)
    ad.clear_caches()
    assert f._cache_size() == 0
    np.testing.assert_array_equal(f(x), y)
