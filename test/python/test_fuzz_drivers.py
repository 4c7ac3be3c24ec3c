"""Fuzzing the drivers: no input makes autodiff-opt or autodiff-run die from a signal.

A few hundred inputs, mutated with a fixed seed from the project's own lit
files, go through `autodiff-opt` (each with one of our passes, every pass
covered) and through `autodiff-run` (with the arguments of the lit file's
RUN line). Each run must exit 0 or 1 with MLIR-style diagnostics on stderr:
no Python traceback, no signal, no hang. Then the inputs known to have
crashed the drivers (issue 25) are replayed by name through the installed
console scripts.

The mutated inputs run in one Python process that imports the drivers once
and forks one child per input; the child calls the console entry point
(`main()` with the input's argv in sys.argv), exactly what the console
script does, so every run is supervised as a user's is.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST = ROOT / "test"
SEED = 20260525
N_OPT = 300
N_RUN = 40

#: How a fuzzed input runs one of our passes, where not as plain `--<name>`
#: (the GPU pipeline stops before ptxas, which the machine may lack).
PASS_FLAGS = {"autodiff-lower-to-gpu": "--autodiff-lower-to-gpu=stage=nvvm"}


def our_passes() -> dict[str, str]:
    """Every registered pass of ours -> its flag: a new pass is fuzzed without a change here."""
    from mlir_autodiff.transforms.passes import all_passes

    return {name: PASS_FLAGS.get(name, f"--{name}") for name in all_passes()}


#: A diagnostic's first line: `file:line:col: error: ...` (`<unknown>:0: error: ...` for
#: an op whose location is `loc(unknown)`, as MLIR prints it) or the tool's own prefix.
_FIRST_LINE = re.compile(
    r"^(?:(?:[^\n]*:\d+:\d+|<unknown>:0): (?:error|warning|remark|note): "
    r"|autodiff-(?:opt|run): (?:error|internal error): )"
)


# ----------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------


def _lit_files(under: str) -> list[Path]:
    return sorted((TEST / under).rglob("*.mlir"))


def _chunks(path: Path) -> list[str]:
    text = path.read_text()
    body = [ln for ln in text.split("\n") if not ln.lstrip().startswith("// RUN:")]
    return [c for c in re.split(r"^// -----.*$", "\n".join(body), flags=re.M) if c.strip()]


#: Replacements that reach attribute parsers and verifiers with values of the
#: wrong kind, the sort that once crashed the drivers.
_ODD_NUMBERS = ("nan", "1e400", "-1", "0", "18446744073709551616", "0x7fffffff", "-0.0",
                "inf", "2147483648", "1.5")
_ODD_TYPES = ("index", "f32", "i1", "i32", "f64", "i8", "bf16", "none", "i0")
_ODD_ARRAYS = ("array<index: 0>", "array<f32: 2.0>", "array<i32: 0>", "array<i1: true>",
               "array<i64>", "[0]", "dense<0> : tensor<1xi64>", "unit", "\"0\"", "@f")


def _mutate(text: str, rng: random.Random) -> str:
    """`text` with one to three small random edits."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(9)
        if kind == 0:  # a number becomes an odd literal
            spots = list(re.finditer(r"(?<![\w%#@])-?\d+(\.\d+)?(e[+-]?\d+)?(?![\w])", text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + rng.choice(_ODD_NUMBERS) + text[m.end():]
        elif kind == 1:  # an element type changes
            spots = list(re.finditer(r"\b(f16|f32|f64|i1|i8|i32|i64|index)\b", text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + rng.choice(_ODD_TYPES) + text[m.end():]
        elif kind == 2:  # an attribute value becomes one of another kind
            spots = list(re.finditer(r"(?<== )(array<[^>]*>|\[[^\]\[]*\]|\"[^\"]*\"|@\w+)",
                                     text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + rng.choice(_ODD_ARRAYS) + text[m.end():]
        elif kind == 3:  # a line goes
            lines = text.split("\n")
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif kind == 4:  # a line is repeated
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == 5:  # the input ends early
            text = text[: rng.randrange(len(text) + 1)]
        elif kind == 6:  # one character goes
            if text:
                i = rng.randrange(len(text))
                text = text[:i] + text[i + 1:]
        elif kind == 7:  # an SSA value is replaced by another one
            names = re.findall(r"%[\w]+", text)
            if len(names) >= 2:
                a, b = rng.sample(names, 2)
                text = text.replace(a, b, 1)
        else:  # a shape changes
            spots = list(re.finditer(r"(?<=[<x])\d+(?=x)", text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + rng.choice(("0", "?", "1", "7")) + text[m.end():]
    return text


def _run_lines(path: Path) -> list[list[str]]:
    """The autodiff-run command lines of a lit file (arguments after the tool name)."""
    text = path.read_text().replace("\\\n// RUN:", " ")
    out = []
    for m in re.finditer(r"^// RUN: autodiff-run %s([^|\n]*)", text, flags=re.M):
        try:
            out.append(shlex.split(m.group(1)))
        except ValueError:
            continue
    return out


def _jobs(tmp: Path) -> list[dict]:
    rng = random.Random(SEED)
    opt_seeds = [c for p in _lit_files(".") if "python" not in p.relative_to(TEST).parts
                 for c in _chunks(p)]
    flags = our_passes()
    passes = sorted(flags)
    jobs = []
    for i in range(N_OPT):
        text = _mutate(rng.choice(opt_seeds), rng)
        flag = flags[passes[i % len(passes)]]
        path = tmp / f"opt{i}.mlir"
        path.write_text(text)
        argv = [str(path), flag, "--allow-unregistered-dialect"] if i % 7 == 0 else \
            [str(path), flag]
        jobs.append({"tool": "autodiff-opt", "argv": argv, "name": path.name})
    run_seeds = [(p, args) for p in _lit_files("Execution") for args in _run_lines(p)]
    for i in range(N_RUN):
        source, args = rng.choice(run_seeds)
        text = _mutate(source.read_text(), rng)
        path = tmp / f"run{i}.mlir"
        path.write_text(text)
        jobs.append({"tool": "autodiff-run", "argv": [str(path), *args], "name": path.name})
    return jobs


#: Runs each job in a forked child that calls the driver's console entry
#: point; writes one JSON line per job: exit status, stdout size, stderr.
_HARNESS = textwrap.dedent("""
    import json, os, signal, sys, time
    from mlir_autodiff.tools import autodiff_opt, autodiff_run
    from mlir_autodiff.transforms.passes import all_passes
    from mlir_autodiff.tools.autodiff_opt import OptRun  # noqa: F401 (imported once, here)
    import mlir_autodiff.dialects, mlir_autodiff.runtime  # noqa: F401
    all_passes()
    MAINS = {"autodiff-opt": autodiff_opt.main, "autodiff-run": autodiff_run.main}
    jobs = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2]
    for n, job in enumerate(jobs):
        err_path = os.path.join(out_dir, f"{n}.err")
        out_path = os.path.join(out_dir, f"{n}.out")
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # a hang ends as SIGALRM, which the test reports
            fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0)
            os.dup2(os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            sys.argv = [job["tool"], *job["argv"]]
            sys.exit(MAINS[job["tool"]]())
        _, status = os.waitpid(pid, 0)
        took = time.perf_counter() - start
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"rc": rc, "signal": sig, "s": took, "stderr": open(err_path, errors="replace").read()}),
              flush=True)
""")


def _problems(tool: str, name: str, rc: int | None, sig: int | None, stderr: str) -> list[str]:
    where = f"{tool} {name}"
    found = []
    if sig is not None:
        found.append(f"{where}: killed by signal {sig}")
    elif rc not in (0, 1):
        found.append(f"{where}: exit code {rc}")
    if "Traceback" in stderr:
        found.append(f"{where}: Python traceback:\n{stderr}")
    if rc == 1 and stderr.strip():
        first = stderr.lstrip("\n").split("\n", 1)[0]
        if not _FIRST_LINE.match(first):
            found.append(f"{where}: not an MLIR-style diagnostic: {first!r}")
    if rc == 1 and not stderr.strip():
        found.append(f"{where}: failed without a diagnostic")
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["AUTODIFF_CACHE"] = "0"  # no background builds of cache entries
    env.pop("AUTODIFF_TRACEBACK", None)
    env.pop("AUTODIFF_SUPERVISE", None)
    return env


def test_fuzzed_lit_inputs_never_kill_a_driver(tmp_path):
    jobs = _jobs(tmp_path)
    covered = {j["argv"][1].split("=")[0].lstrip("-") for j in jobs if j["tool"] == "autodiff-opt"}
    assert covered == set(our_passes())  # every pass of ours, each about equally often
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _HARNESS, str(jobs_file), str(out_dir)],
        capture_output=True, text=True, env=_env(), timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(jobs)
    problems = []
    for job, res in zip(jobs, results):
        problems += _problems(job["tool"], job["name"], res["rc"], res["signal"], res["stderr"])
    assert not problems, "\n".join(problems[:20])
    # the fuzzing reaches past the parser: some inputs pass, some fail
    codes = [r["rc"] for r in results]
    assert codes.count(0) >= len(jobs) // 10 and codes.count(1) >= len(jobs) // 10


# ----------------------------------------------------------------------------
# The crashing inputs of issue 25, replayed by name
# ----------------------------------------------------------------------------

_REDUCE = """\
func.func @main(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %r = linalg.reduce ins(%a : tensor<2x3xf32>) outs(%i : tensor<2xf32>) dimensions = [DIM]
    (%x: f32, %acc: f32) {
      %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<2xf32>
}
"""

_VMAP = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.exp %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = IN, out_axes = OUT, randomness = "error"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
"""

_UB = """\
func.func @main(%a: i32, %b: i32) -> i32 {
  %r = arith.OP %a, %b : i32
  return %r : i32
}
"""

_OOB = """\
func.func @main(%t: tensor<4xf32>, %i: index) -> f32 {
  %r = tensor.extract %t[%i] : tensor<4xf32>
  return %r : f32
}
"""

_MIN = str(-(2 ** 31))

#: name -> (tool, input, arguments after the input, what the one line says)
CRASHERS = {
    "reduce-dimensions-nan-cpu": ("autodiff-opt", _REDUCE.replace("DIM", "nan"),
                                  ["--autodiff-lower-to-cpu"], "MLIR aborted while parsing"),
    "reduce-dimensions-1e400-cpu": ("autodiff-opt", _REDUCE.replace("DIM", "1e400"),
                                    ["--autodiff-lower-to-cpu"], "MLIR aborted while parsing"),
    "reduce-dimensions-nan-run": ("autodiff-run", _REDUCE.replace("DIM", "nan"),
                                  ["--arg", "[[1, 2, 3], [4, 5, 6]]"],
                                  "MLIR aborted while parsing"),
    "reduce-dimensions-1e400-run": ("autodiff-run", _REDUCE.replace("DIM", "1e400"),
                                    ["--arg", "[[1, 2, 3], [4, 5, 6]]"],
                                    "MLIR aborted while parsing"),
    "vmap-in-axes-index-gpu": ("autodiff-opt",
                               _VMAP.replace("IN", "array<index: 0>").replace(
                                   "OUT", "array<i64: 0>"),
                               ["--autodiff-lower-to-gpu=stage=nvvm"],
                               "Type::getIntOrFloatBitWidth"),
    "vmap-out-axes-index-rng": ("autodiff-opt",
                                _VMAP.replace("IN", "array<i64: 0>").replace(
                                    "OUT", "array<index: 0>"),
                                ["--autodiff-lower-rng"], "Type::getIntOrFloatBitWidth"),
    "vmap-in-axes-f32-gpu": ("autodiff-opt",
                             _VMAP.replace("IN", "array<f32: 2.0>").replace(
                                 "OUT", "array<i64: 0>"),
                             ["--autodiff-lower-to-gpu=stage=nvvm"],
                             "'autodiff.vmap' op attribute 'in_axes': expected an array<i64"),
    "vmap-out-axes-f32-rng": ("autodiff-opt",
                              _VMAP.replace("IN", "array<i64: 0>").replace(
                                  "OUT", "array<f32: 2.0>"),
                              ["--autodiff-lower-rng"],
                              "'autodiff.vmap' op attribute 'out_axes': expected an array<i64"),
    "run-tensor-extract-out-of-bounds": ("autodiff-run", _OOB,
                                         ["--arg", "[1, 2, 3, 4]", "--arg", "100000000000"],
                                         "@main crashed with SIGSEGV"),
    **{
        f"run-{op}-by-zero": ("autodiff-run", _UB.replace("OP", op), ["--arg", "7", "--arg", "0"],
                              "@main crashed with SIGFPE")
        for op in ("divsi", "remsi", "divui", "remui", "floordivsi", "ceildivsi")
    },
    "run-divsi-int-min-by-minus-one": ("autodiff-run", _UB.replace("OP", "divsi"),
                                       ["--arg", _MIN, "--arg", "-1"],
                                       "@main crashed with SIGFPE"),
}


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


@pytest.mark.parametrize("name", sorted(CRASHERS))
def test_crashing_input_is_one_line(name, tmp_path):
    tool, text, args, expected = CRASHERS[name]
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    proc = subprocess.run([_tool(tool), str(path), *args], capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    first = proc.stderr.split("\n", 1)[0]
    assert _FIRST_LINE.match(first), proc.stderr
    assert expected in proc.stderr, proc.stderr
    if "MLIR aborted" in expected:  # one line, nothing else: no crash report
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert first.startswith(f"{tool}: internal error: MLIR aborted while parsing '{path}': ")


# ----------------------------------------------------------------------------
# What the supervision must not change
# ----------------------------------------------------------------------------


def test_supervised_output_is_the_unsupervised_output(tmp_path):
    """Bytes on stdout (bytecode), and stdout and stderr interleaved in one file, pass unchanged."""
    opt = _tool("autodiff-opt")
    source = TEST / "Transforms" / "autodiff-vmap-invalid.mlir"
    runs = {
        "bytecode": [str(TEST / "Transforms" / "autodiff-vmap.mlir"), "--split-input-file",
                     "--autodiff-vmap", "--emit-bytecode"],
        "errors": [str(source), "--split-input-file", "--autodiff-vmap",
                   "--mlir-disable-threading", "--mlir-print-ir-after-all"],
    }
    for name, argv in runs.items():
        outs = []
        for supervise in ("1", "0"):
            env = {**_env(), "AUTODIFF_SUPERVISE": supervise}
            proc = subprocess.run([opt, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env, timeout=120)
            outs.append((proc.returncode, proc.stdout))
        assert outs[0] == outs[1], name
        assert outs[0][1], name


@pytest.mark.parametrize("pass_name, bad", [
    ("autodiff-functionalize-rng", "array<i0: 0>"),
    ("autodiff-vmap", "array<i0: 0>"),
    ("autodiff-vmap", "array<i32: 0>"),
    ("autodiff-vmap", "array<f32: 0.0>"),
])
def test_a_pass_that_meets_a_malformed_autodiff_op_reports_the_op(pass_name, bad):
    """Through the Python API no driver verifies first: the pass names the op, not a crash."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.pipeline import PassManagerRunner, parse_pipeline

    ctx = ir.Context()
    dialects.load(ctx)
    module = ir.Module.parse(_VMAP.replace("IN", bad).replace("OUT", "array<i64: 0>"), ctx)
    runner = PassManagerRunner(parse_pipeline(pass_name), ctx)
    with pytest.raises(ir.MLIRError) as err:
        runner.run(module.operation)
    messages = [d.message for d in err.value.error_diagnostics]
    assert any("'autodiff.vmap'" in m and "'in_axes'" in m for m in messages), messages


@pytest.mark.parametrize("report, text", [
    ("python3: /src/mlir/lib/IR/OperationSupport.cpp:128: mlir::Attribute "
     "mlir::NamedAttrList::set(llvm::StringRef, mlir::Attribute): Assertion `value && "
     "\"attributes may never be null\"' failed.",
     "NamedAttrList::set: Assertion `value && \"attributes may never be null\"' failed"),
    ("python3: /src/mlir/lib/IR/Types.cpp:123: unsigned int mlir::Type::getIntOrFloatBitWidth() "
     "const: Assertion `isIntOrFloat()' failed.",
     "Type::getIntOrFloatBitWidth: Assertion `isIntOrFloat()' failed"),
    ("python3: /src/llvm/Support/Casting.h:560: decltype(auto) llvm::cast(const From&) "
     "[with To = mlir::StringAttr; From = mlir::Attribute]: Assertion `isa<To>(Val)' failed.",
     "cast: Assertion `isa<To>(Val)' failed"),
    ("LLVM ERROR: out of memory\n", "out of memory"),
    ("Segmentation fault\n", None),
])
def test_the_crash_line_names_the_assertion(report, text):
    from mlir_autodiff.tools.supervisor import assertion_text

    assert assertion_text(report) == text
