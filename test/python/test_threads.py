"""jit from several threads: compiling new signatures and calling at once (issue 25 item 3).

Four threads each compiling new shapes of the same jitted functions aborted
the process (an MLIR assertion: the shared context was reconfigured while
another thread's pass manager ran on it). Compiles are now serialized
(runtime.COMPILE_LOCK); calls of compiled code still run in parallel. The
scenario runs in a child process, so an abort fails the test instead of
killing the test worker.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCENARIO = textwrap.dedent("""
    import threading
    import numpy as np
    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp

    f = ad.jit(lambda x: anp.tanh(x) * 2 + x.sum())
    g = ad.jit(ad.grad(lambda x: anp.sum(anp.sin(x) ** 2)))
    h = ad.jit(ad.vmap(lambda w, x: anp.dot(w, x), in_axes=(None, 0)))
    errors, calls = [], []

    def work(t, rnd):
        try:
            n_calls = 0
            for k in range(10):                       # 10 new signatures per thread
                n = 3 + 40 * rnd + 10 * t + k
                x = np.linspace(-1, 1, n)
                w = np.cos(np.arange(n, dtype=np.float64))
                xs = np.stack([x, 2 * x])
                for _ in range(34):                   # ~1000 calls per thread
                    np.testing.assert_allclose(f(x), np.tanh(x) * 2 + x.sum(), rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(g(x), 2 * np.sin(x) * np.cos(x), rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(h(w, xs), xs @ w, rtol=1e-12, atol=1e-12)
                    n_calls += 3
            calls.append(n_calls)
        except Exception as e:
            errors.append(f"thread {t}: {e!r}")

    for rnd in range(2):                              # repeated
        ts = [threading.Thread(target=work, args=(t, rnd)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    print("errors", errors)
    print("calls", sum(calls))
""")


def test_four_threads_compile_and_call_at_once():
    proc = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "errors []" in proc.stdout, proc.stdout
    assert "calls 8160" in proc.stdout
