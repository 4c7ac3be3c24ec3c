"""The benchmark harness (benchmarks/run.py) in its quick mode, ours and numpy only.

CI checks that every quick row builds, agrees with its reference and gets a
time, and that the report's acceptance arithmetic is right; the timings
themselves (and jax/torch) are for `./dev bench`.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import adbench_cases
import run
from adbench import DATA as ADBENCH_DATA


def test_quick_mode_runs_every_quick_row_for_ours_and_numpy(tmp_path):
    out = tmp_path / "quick.json"
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--frameworks", "ours,numpy", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads(out.read_text())
    assert result["threads"] == 1
    assert result["peak_gflops"] > 1.0  # the FMA peak kernel compiled and ran
    rows = {f"{r['name']} {r['size']}": r for r in result["rows"]}
    quick = [c.key for c in run.CASES if c.quick]
    assert sorted(rows) == sorted(quick)
    for key, row in rows.items():
        problems = {fw: msg for fw, msg in row["problems"].items() if "not cross-checked" not in msg}
        assert not problems, (key, problems)
        assert not row["skipped"], (key, row["skipped"])  # the ADBench inputs ship too
        assert row["seconds"]["ours"] > 0, key
        assert row["first_call"]["ours"] >= row["seconds"]["ours"], key
    assert "== 1 thread(s) ==" in proc.stdout
    assert "time(grad f) / time(f)" in proc.stdout
    assert len(result["recreated"]["ours"]) == run.RECREATED_ITERATIONS
    assert len(result["recreated"]["ours cpu"]) == run.RECREATED_ITERATIONS
    assert "re-created jit(grad(h)) in a loop" in proc.stdout


def test_every_adbench_row_reads_an_input_that_ships_unchanged():
    """Every ADBench row, quick or full, loads its input from benchmarks/data
    (no row can be skipped for want of a file), and the shipped files are
    exactly the ones benchmarks/data/README.md lists, with its digests."""
    rows = [c for c in run.CASES if c.name.startswith("ADBench")]
    assert {c.size for c in rows} >= {"test.txt", "d10 K25 n1000", "d20 K50 n1000", "l2 c1024"}
    for case in rows:
        inputs = case.inputs(np.random.default_rng(0))
        assert inputs and all(np.isfinite(a).all() for a in inputs), case.key
    readme = (ADBENCH_DATA.parent / "README.md").read_text()
    listed = {path.removeprefix("adbench/"): digest for digest, path
              in re.findall(r"^([0-9a-f]{64})  (adbench/\S+)$", readme, re.MULTILINE)}
    shipped = {p.relative_to(ADBENCH_DATA).as_posix() for p in ADBENCH_DATA.rglob("*")
               if p.is_file() and p.name != "LICENSE.txt"}
    assert set(adbench_cases._LOADED) == shipped == set(listed)
    for relative, digest in listed.items():
        assert hashlib.sha256((ADBENCH_DATA / relative).read_bytes()).hexdigest() == digest
    assert "MIT License" in (ADBENCH_DATA / "LICENSE.txt").read_text()


def _column(threads: int, peak: float, times: dict[str, dict[str, float]]) -> run.Column:
    return run.Column(threads, peak, {key: {"seconds": fws, "first_call": {}}
                                      for key, fws in times.items()})


def _cases() -> list[run.Case]:
    no_inputs = lambda rng: ()
    return [
        run.Case("matmul", "512^3", no_inputs, flops=2.0 * 512**3, acceptance=True),
        run.Case("f", "s", no_inputs),
        run.Case("grad", "s", no_inputs, primal="f", acceptance=True, grad_ratio_limit=3.0),
    ]


def test_acceptance_lines_pass_and_fail_as_measured():
    gflop = 2.0 * 512**3 / 1e9
    good = _column(1, 100.0, {
        "matmul 512^3": {"ours": gflop / 70, "jax": gflop / 60},  # 70% of peak, 0.86x
        "f s": {"ours": 1.0, "jax": 2.0},
        "grad s": {"ours": 2.5, "jax": 5.0},  # 0.5x jax, grad/f 2.5
    })
    lines = run.acceptance(_cases(), [good])
    verdicts = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 4
    assert all(v.startswith("PASS") for v in verdicts[:1] + verdicts[2:]), verdicts
    # geometric mean of 0.857 and 0.5 is 0.65 <= 0.8
    assert verdicts[1].startswith("PASS"), verdicts
    assert any("geometric mean ours/jax, 1 thread(s): 0.65x over 2 of 2 rows" in line
               for line in lines)

    bad = _column(1, 100.0, {
        "matmul 512^3": {"ours": gflop / 50, "jax": gflop / 60},  # 50% of peak, 1.2x
        "f s": {"ours": 1.0, "jax": 2.0},
        "grad s": {"ours": 3.5, "jax": 5.0},  # grad/f 3.5
    })
    text = "\n".join(run.acceptance(_cases(), [bad]))
    assert "FAIL  every row <= 1.0x jax, 1T: matmul 512^3 (1.20x)" in text
    assert "matmul 512^3 (50%)" in text
    assert "grad s (3.50x)" in text


def test_recreated_gradient_line_passes_and_fails_as_measured():
    fast = {"threads": 1, "recreated": {"ours": [400.0] + [1.5] * 9, "jax": [90.0] + [20.0] * 9}}
    text = "\n".join(run.recreated_lines([fast]))
    assert "PASS  re-created grad(h): iterations 2+ < 5 ms each, 1T" in text
    assert "jax" in text and "400.0" in text
    slow = {"threads": 2, "recreated": {"ours": [400.0, 1.0, 7.25] + [1.0] * 7}}
    assert "FAIL  re-created grad(h): iterations 2+ < 5 ms each, 2T: 7.25 ms" in \
        "\n".join(run.recreated_lines([slow]))
    assert run.recreated_lines([{"threads": 1, "recreated": {}}]) == []


def test_acceptance_needs_jax_in_the_run():
    col = _column(1, 100.0, {"matmul 512^3": {"ours": 1.0}})
    assert run.acceptance(_cases(), [col], ("ours", "numpy")) == [
        "acceptance: not evaluated (jax was not part of this run)"]


@pytest.mark.parametrize("threads", [1, 2])
def test_worker_environment_sets_every_framework_knob(threads):
    env = run.thread_env(threads, {"XLA_FLAGS": "--xla_dump_to=x"})
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "AUTODIFF_CPU_THREADS"):
        assert env[var] == str(threads)
    assert env["XLA_FLAGS"].startswith("--xla_dump_to=x")
    assert ("--xla_cpu_multi_thread_eigen=false" in env["XLA_FLAGS"]) == (threads == 1)


def _constant(value: np.ndarray):
    return lambda inputs: (lambda: value)


def test_a_result_that_disagrees_with_numpy_is_reported_and_not_timed():
    right, wrong = np.ones(3), np.array([1.0, 1.0, 1.5])
    case = run.Case("t", "s", lambda rng: (right,), numpy=_constant(right),
                    ours=_constant(wrong), jax=_constant(right))
    (row,) = run.run_cases([case], ["numpy", "ours", "jax"], min_time=1e-3, repeats=1,
                           log=io.StringIO())
    assert row.seconds["ours"] is None
    assert row.problems["ours"] == "WRONG RESULT (max abs error 0.5 vs numpy)"
    assert row.seconds["jax"] > 0 and "jax" not in row.problems


def test_a_row_without_numpy_is_cross_checked_against_jax():
    right, wrong = np.zeros(2), np.array([0.0, 1e-3])
    case = run.Case("g", "s", lambda rng: (right,), ours=_constant(wrong),
                    torch=_constant(right), jax=_constant(right), atol=1e-5)
    (row,) = run.run_cases([case], ["ours", "torch", "jax"], min_time=1e-3, repeats=1,
                           log=io.StringIO())
    assert row.seconds["ours"] is None
    assert row.problems["ours"] == "WRONG RESULT (max abs error 0.001 vs jax)"
    assert row.seconds["torch"] > 0 and row.seconds["jax"] > 0


def test_a_skipped_framework_says_why():
    def skip(inputs):
        raise run.Skipped("too long to compile")

    case = run.Case("k", "s", lambda rng: (np.ones(1),), ours=skip, numpy=_constant(np.ones(1)))
    (row,) = run.run_cases([case], ["numpy", "ours"], min_time=1e-3, repeats=1,
                           log=io.StringIO())
    assert row.skipped == {"ours": "too long to compile"}
    assert row.seconds["ours"] is None


def test_samples_of_a_row_are_interleaved_across_frameworks(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(run, "_calls_per_sample", lambda thunk, min_time: 2)

    def thunk(name):
        return lambda: calls.append(name)

    times = run.time_thunks({"ours": thunk("ours"), "jax": thunk("jax")}, min_time=1e-4,
                            repeats=4, gap=0.0)
    assert set(times) == {"ours", "jax"} and all(t > 0 for t in times.values())
    # 8 samples of 3 calls (one warm-up, two timed), one of each framework per
    # round: at least 5 runs of one framework's calls (timed one after the
    # other, there would be 2).
    assert len(calls) == 2 * 4 * 3 and calls.count("ours") == 4 * 3
    runs = 1 + sum(a != b for a, b in itertools.pairwise(calls))
    assert runs >= 4 + 1


def test_a_gradient_row_is_timed_with_its_primal_row(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(run, "_calls_per_sample", lambda thunk, min_time: 2)

    def logging(name):
        return lambda inputs: (lambda: calls.append(name) or np.ones(1))

    one = lambda rng: (np.ones(1),)
    f = run.Case("f", "s", one, ours=logging("f"), jax=logging("f"))
    g = run.Case("g", "s", one, ours=logging("g"), jax=logging("g"), primal="f")
    h = run.Case("h", "s", one, ours=logging("h"), jax=logging("h"))
    assert run._timing_groups([f, h, g]) == [[0, 2], [1]]
    rows = run.run_cases([f, g], ["ours", "jax"], min_time=1e-4, repeats=3, log=io.StringIO())
    assert all(r.seconds["ours"] > 0 and r.seconds["jax"] > 0 for r in rows)
    # f's samples are taken after g was built (its first call): the two rows
    # are timed in the same rounds, not f's row to the end, then g's.
    assert calls[:4] == ["f", "f", "g", "g"] and calls[4:].count("f") == 2 * 3 * 3
