"""benchmarks/compile_profile.py: the per-stage compile-time profile runs and adds up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compile_profile.py"


def test_one_row_profile_has_every_stage_and_named_passes():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--row", "matmul 64^3"],
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "AUTODIFF_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    stages = [row[f"{s}_s"] for s in ("trace", "transforms", "lowering", "codegen", "call")]
    assert all(t >= 0 for t in stages)
    assert row["lowering_s"] > 0 and row["codegen_s"] > 0
    assert sum(stages) <= row["total_s"] * 1.001
    names = [name for name, _ in row["top_passes"]]
    assert names and all(not name[0].isdigit() and "%" not in name for name in names)
    assert any(n in names for n in ("ScheduleLinalgForCpu", "RenameReservedSymbols",
                                    "Canonicalizer", "BoolBuffersToBytes"))
