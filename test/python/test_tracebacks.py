"""Tracebacks show the user's frames (issue 25 item 8), AUTODIFF_TRACEBACK=1 shows all.

A shape error inside a jitted function showed 16 frames, 13 of them the
library's. Run in child processes so the environment variable is read fresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, traceback
    import numpy as np
    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp

    def f(x):
        return x + np.ones(3)          # the user's mistake

    out = {}
    for name, call in [("jit", lambda: ad.jit(f)(np.ones(4))),
                       ("grad", lambda: ad.grad(lambda x: f(x).sum())(np.ones(4))),
                       ("vmap", lambda: ad.vmap(f)(np.ones((2, 4))))]:
        try:
            call()
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)
            out[name] = {"type": type(e).__name__,
                         "frames": [(fr.filename, fr.name) for fr in tb],
                         "notes": getattr(e, "__notes__", [])}
    print(json.dumps(out))
""")


def _run(env_extra):
    env = {k: v for k, v in os.environ.items() if k != "AUTODIFF_TRACEBACK"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ours(frames):
    return [name for fname, name in frames if "mlir_autodiff" in fname
            or os.sep + "transforms" + os.sep in fname]


def test_library_frames_are_hidden_by_default():
    out = _run({})
    for name in ("jit", "grad", "vmap"):
        r = out[name]
        assert r["type"] == "ShapeError"
        assert _ours(r["frames"]) == ["boundary"], (name, r["frames"])  # the re-raise only
        assert any(n == "f" for _, n in r["frames"])  # the user's line is there
        assert any("AUTODIFF_TRACEBACK=1" in n for n in r["notes"])


def test_every_frame_with_autodiff_traceback():
    out = _run({"AUTODIFF_TRACEBACK": "1"})
    r = out["jit"]
    assert len(_ours(r["frames"])) >= 5 and not r["notes"]
