"""autodiff-opt: robustness against garbage, the verifier of expected-* comments,
source splitting and wrapping, and the console entry points.

Most cases run the driver in-process through `main(argv)` (process startup
costs ~0.3 s); a few run it as a real subprocess to prove that bad input never
kills the process with a signal. Expected diagnostics come from MLIR's own
messages or from the mlir-opt conventions, never from our own output.
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlir import ir

from mlir_autodiff.tools import autodiff_opt
from mlir_autodiff.tools.opt_input import (
    MAX_NESTING,
    ColumnShift,
    comment_start,
    line_col,
    nesting_error,
    split_input,
    wrap_in_module,
)
from mlir_autodiff.tools.verify_diagnostics import DiagnosticVerifier, parse_expectations, verify
from mlir_autodiff.transforms import diagnostics, passes
from mlir_autodiff.transforms.diagnostics import Diag

# `file:line:col: error: ...` or `autodiff-opt: error: ...` (MLIR / mlir-opt shapes).
_DIAG_HEAD = re.compile(r"^\S+:\d+:\d+: (error|warning|note|remark): ")
_CARET = re.compile(r"^ *\^$")
LOCATED_ERROR = re.compile(r"^(\S+:\d+:\d+: error: .+|autodiff-opt: error: .+)$")

VALID = """\
// A valid input: the truncation tests cut it anywhere inside the module.
module {
  func.func @f(%x: tensor<4xf32>, %seed: i64) -> (tensor<4xf32>, tensor<4xf32>) {
    %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %y = arith.mulf %x, %c : tensor<4xf32>
    %s = "autodiff.stop_gradient"(%y) : (tensor<4xf32>) -> tensor<4xf32>
    %r = "autodiff.philox"(%seed, %seed) {distribution = "normal"} : (i64, i64) -> tensor<4xf32>
    %o, %t = "autodiff.jvp"(%x, %x) {fn = @g}
        : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    return %s, %r : tensor<4xf32>, tensor<4xf32>
  }
  func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
    %e = tensor.empty() : tensor<4xf32>
    %0 = linalg.add ins(%x, %x : tensor<4xf32>, tensor<4xf32>)
        outs(%e : tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]

    @property
    def diag_lines(self) -> list[str]:
        """The diagnostic lines without the source line and caret under each
        (llvm::SourceMgr's format, which mlir-opt prints)."""
        lines, out, i = self.err.splitlines(), [], 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            out.append(line)
            if line.endswith("see current operation: "):
                continue  # the op follows on its own lines, no source line
            if _DIAG_HEAD.match(line) and i < len(lines) and not _DIAG_HEAD.match(lines[i]):
                i += 1  # the source line
                if i < len(lines) and _CARET.match(lines[i]):
                    i += 1
        return out


def run(argv: list[str], stdin: bytes = b"") -> Result:
    """Run the driver in this process with captured stdio."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    sys.stdout, sys.stderr = out, err
    try:
        code = autodiff_opt.main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return Result(code, out.getvalue(), err.getvalue())


def assert_clean_failure(r: Result, *, one_line: bool = True) -> None:
    """Exit 1 with an MLIR-shaped error first, never a traceback."""
    assert r.code == 1, r
    assert "Traceback" not in r.err
    assert r.err_lines, "no diagnostic at all"
    assert LOCATED_ERROR.match(r.err_lines[0]), r.err_lines[0]
    if one_line:
        assert len(r.diag_lines) == 1, r.err
    assert r.out == ""


@pytest.fixture
def write(tmp_path: Path):
    def _write(data: str | bytes, name: str = "in.mlir") -> str:
        path = tmp_path / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        return str(path)

    return _write


# ----------------------------------------------------------------------------
# Sanity: the valid input really is valid, so the truncations below fail
# because of the cut and nothing else.
# ----------------------------------------------------------------------------


def test_valid_input_round_trips(write):
    path = write(VALID)
    first = run([path])
    assert first.code == 0, first.err
    assert "func.func @f" in first.out and "autodiff.philox" in first.out
    second = run(["-"], stdin=first.out.encode())
    assert second.code == 0 and second.out == first.out


# ----------------------------------------------------------------------------
# Fuzz-ish robustness: random bytes, random text, random token soup,
# random truncations, mutated pass names and options.
# ----------------------------------------------------------------------------

_RNG = random.Random(20240611)

RANDOM_BYTES = [
    bytes(_RNG.randrange(256) for _ in range(_RNG.randrange(1, 400))) for _ in range(10)
]
# Printable garbage that starts with a character no MLIR file can start with.
RANDOM_TEXT = [
    _RNG.choice(")]}>=,:")
    + "".join(chr(_RNG.randrange(33, 127)) for _ in range(_RNG.randrange(5, 200)))
    for _ in range(10)
]
_TOKENS = [
    "func.func", "@f", "(", ")", "{", "}", "%x", "%0", ":", "i32", "f32", "->", "tensor<",
    "4x", ">", '"autodiff.philox"', '"autodiff.jvp"', ",", "=", "return", "module", "[", "]",
    "arith.addf", "dense<", "1.0", "#map", "!t", "loc(", '"', "^bb0", "affine_map<", "\n",
]
# Token soups end with an unbalanced opener, so none of them is valid MLIR.
RANDOM_TOKENS = [
    " ".join(_RNG.choice(_TOKENS) for _ in range(_RNG.randrange(1, 60))) + " {"
    for _ in range(10)
]
# Cut strictly inside the module's braces: the module is never closed.
_OPEN, _CLOSE = VALID.index("{") + 1, VALID.rindex("}")
TRUNCATIONS = sorted(_RNG.sample(range(_OPEN, _CLOSE), 30))


@pytest.mark.parametrize("data", RANDOM_BYTES, ids=lambda b: f"bytes{len(b)}")
def test_random_bytes(write, data):
    r = run([write(data)])
    assert_clean_failure(r)
    assert "not valid UTF-8" in r.err or "NUL byte" in r.err or "error:" in r.err


@pytest.mark.parametrize("text", RANDOM_TEXT, ids=lambda t: f"text{len(t)}")
def test_random_text(write, text):
    assert_clean_failure(run([write(text)]))


@pytest.mark.parametrize("text", RANDOM_TOKENS, ids=lambda t: f"tokens{len(t)}")
def test_random_token_soup(write, text):
    # A soup may get far enough to fail verification, which adds notes.
    assert_clean_failure(run([write(text)]), one_line=False)


@pytest.mark.parametrize("cut", TRUNCATIONS)
def test_random_truncation(write, cut):
    r = run([write(VALID[:cut])])
    assert_clean_failure(r)
    # The error is located inside what is left of the file.
    line = int(r.err_lines[0].split(":")[1])
    assert 1 <= line <= VALID[:cut].count("\n") + 1


@pytest.mark.parametrize("cut", TRUNCATIONS[::3])
def test_random_truncation_split_verify(write, cut):
    """The same cuts under --split-input-file --verify-diagnostics: an unexpected error."""
    r = run(["--split-input-file", "--verify-diagnostics", write(VALID[:cut])])
    assert_clean_failure(r)
    assert "unexpected error:" in r.err_lines[0]


def _mutations(name: str, rng: random.Random) -> list[str]:
    i = rng.randrange(1, len(name) - 1)
    # Swap two different neighbours (swapping "ff" would change nothing).
    j = next(k for k in range(i, len(name) - 1) if name[k] != name[k + 1])
    return [
        name[:i] + name[i + 1 :],  # drop a character
        name[:j] + name[j + 1] + name[j] + name[j + 2 :],  # swap two
        name[:i] + "x" + name[i:],  # insert one
    ]


_MUTATED = [
    m
    for n in (
        "canonicalize", "autodiff-lower-to-cpu", "one-shot-bufferize", "convert-linalg-to-loops"
    )
    for m in _mutations(n, _RNG)
]


@pytest.mark.parametrize("name", _MUTATED)
def test_mutated_pass_name(write, name):
    r = run([write(VALID), f"--{name}"])
    assert_clean_failure(r)
    assert f"'{name}' does not refer to a registered pass" in r.err


@pytest.mark.parametrize("name", _MUTATED[::2])
def test_mutated_pass_name_in_pipeline(write, name):
    r = run([write(VALID), f"--pass-pipeline=builtin.module(cse,{name})"])
    assert_clean_failure(r)
    assert f"'{name}' does not refer to a registered pass" in r.err


BAD_OPTIONS = [
    ("--canonicalize=no-such-option=1", "invalid option for pass 'canonicalize'"),
    ("--canonicalize=max-iterations=lots", "'lots' value invalid"),
    ("--canonicalize=top-down=perhaps", "invalid option for pass 'canonicalize'"),
    ("--one-shot-bufferize=bufferize-function-boundaries=3", "one-shot-bufferize"),
    ("--cse=x=1", "invalid option for pass 'cse'"),
    ("--autodiff-lower-to-cpu=bogus=1", "pass 'autodiff-lower-to-cpu' has no option 'bogus'"),
    ("--autodiff-lower-to-cpu{bogus=1}", "pass 'autodiff-lower-to-cpu' has no option 'bogus'"),
    ("--cse{", "missing closing '}'"),
    ("--pass-pipeline=builtin.module(cse", "unbalanced"),
    ("--pass-pipeline=builtin.module(cse))", "unbalanced"),
    ("--pass-pipeline=builtin.module(canonicalize{no-such-option=1})", "no such option"),
    ("--pass-pipeline=builtin.module(autodiff-lower-to-cpu{bogus=1})", "has no option 'bogus'"),
    ("--pass-pipeline=builtin.module(autodiff-lower-to-cpu(cse))", "takes no nested pipeline"),
    ("--pass-pipeline=builtin.module(func.func(no-such-pass))", "does not refer to a registered"),
    ("--verify-diagnostics=sometimes", "expected 'all' or 'only-expected'"),
    ("--mlir-elide-elementsattrs-if-larger=many", "expects an integer"),
    ("-", "too many positional arguments"),
]


@pytest.mark.parametrize("flag,message", BAD_OPTIONS, ids=[f for f, _ in BAD_OPTIONS])
def test_bad_option(write, flag, message):
    r = run([write(VALID), flag])
    assert_clean_failure(r)
    assert message in r.err


# ----------------------------------------------------------------------------
# Crashing and failing Python passes: one line, never a traceback.
# ----------------------------------------------------------------------------


@passes.register
@dataclasses.dataclass(frozen=True)
class _OptCrash(passes.Pass):
    name = "test-opt-crash"
    summary = "raise an unexpected exception (test only)"

    def run(self, module: ir.Operation) -> None:
        raise KeyError("missing rule")


@passes.register
@dataclasses.dataclass(frozen=True)
class _OptReject(passes.Pass):
    name = "test-opt-reject"
    summary = "reject the first function (test only)"

    def run(self, module: ir.Operation) -> None:
        first = module.regions[0].blocks[0].operations[0]
        raise diagnostics.fail(first, "test-opt-reject: no thanks")


SEEN_OPTIONS: list[tuple] = []


@passes.register
@dataclasses.dataclass(frozen=True)
class _OptOptions(passes.Pass):
    name = "test-opt-options"
    summary = "record its options (test only)"

    count: int = 1
    label: str = ""
    axes: tuple[int, ...] = ()

    def run(self, module: ir.Operation) -> None:
        SEEN_OPTIONS.append((self.count, self.label, self.axes))


@pytest.mark.parametrize("argv", [
    ["--test-opt-options=count=3,label=hi,axes=0,1"],
    ["--test-opt-options=count=3 label=hi axes=0,1"],
    ["-test-opt-options{count=3 label=hi axes=0,1}"],
    ["--pass-pipeline=builtin.module(test-opt-options{count=3 label=hi axes=0,1})"],
], ids=["commas", "spaces", "braces", "pipeline"])
def test_our_pass_options_in_every_spelling(write, argv):
    SEEN_OPTIONS.clear()
    r = run([write(VALID), *argv])
    assert r.code == 0, r.err
    assert SEEN_OPTIONS == [(3, "hi", (0, 1))]


def test_our_pass_flags_run_in_command_line_order(write):
    SEEN_OPTIONS.clear()
    r = run([write(VALID), "--test-opt-options=count=1", "--cse", "--test-opt-options=count=2"])
    assert r.code == 0, r.err
    assert SEEN_OPTIONS == [(1, "", ()), (2, "", ())]


def test_list_passes_shows_options():
    r = run(["--list-passes"])
    assert r.code == 0
    assert "--test-opt-options" in r.out
    assert "count=<int>" in r.out and "(default: 1)" in r.out


def test_crashing_pass_is_one_line(write, monkeypatch):
    monkeypatch.delenv("AUTODIFF_TRACEBACK", raising=False)
    r = run([write(VALID), "--test-opt-crash"])
    assert_clean_failure(r)
    assert r.err_lines[0] == (
        "autodiff-opt: error: internal error in pass 'test-opt-crash': KeyError: 'missing rule' "
        "(set AUTODIFF_TRACEBACK=1 for the traceback)"
    )


def test_crashing_pass_traceback_on_request(write, monkeypatch):
    monkeypatch.setenv("AUTODIFF_TRACEBACK", "1")
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = autodiff_opt.main([write(VALID), "--test-opt-crash"])
    finally:
        sys.stdout, sys.stderr = saved
    assert code == 1
    assert "Traceback" in err.getvalue() and "KeyError: 'missing rule'" in err.getvalue()


def test_crash_fails_even_when_diagnostics_match(write):
    """--verify-diagnostics cannot hide a crash."""
    r = run(["--verify-diagnostics", write("func.func @f() {\n  return\n}\n"), "--test-opt-crash"])
    assert r.code == 1 and "internal error in pass 'test-opt-crash'" in r.err


def test_failing_pass_reports_at_the_op(write):
    path = write("// comment\nfunc.func @first() {\n  return\n}\n")
    r = run([path, "--test-opt-reject"])
    assert_clean_failure(r, one_line=False)
    assert r.err_lines[0] == f"{path}:2:1: error: test-opt-reject: no thanks"
    # The op at fault follows, as mlir-opt attaches it to an upstream pass's error.
    assert r.diag_lines[1] == f"{path}:2:1: note: see current operation: "
    assert r.diag_lines[2].startswith('"func.func"()')
    r = run([path, "--test-opt-reject", "--mlir-print-op-on-diagnostic=false"])
    assert_clean_failure(r)


def test_failing_pass_verified(write):
    path = write(
        "// expected-error @+1 {{test-opt-reject: no thanks}}\nfunc.func @first() {\n"
        "  return\n}\n"
    )
    r = run(["--verify-diagnostics", path, "--test-opt-reject"])
    assert r.code == 0 and r.err == "" and r.out == ""


def test_failing_chunk_does_not_stop_the_others(write):
    path = write(
        "func.func @a() {\n  return\n}\n// -----\nfunc.func @b() {\n  %x = bogus\n}\n"
        "// -----\nfunc.func @c() {\n  return\n}\n"
    )
    r = run(["--split-input-file", path])
    assert r.code == 1
    assert r.diag_lines == [
        f"{path}:6:8: error: custom op 'bogus' is unknown (tried 'func.bogus' as well)"
    ]
    assert r.err_lines[1:] == ["  %x = bogus", "       ^"]
    chunks = r.out.split("// -----\n")
    assert len(chunks) == 3 and "@a" in chunks[0] and chunks[1] == "" and "@c" in chunks[2]


# ----------------------------------------------------------------------------
# The verifier of expected-* comments (pure Python, MLIR's semantics).
# ----------------------------------------------------------------------------


def d(severity: str, message: str, line: int | None, file: str | None = "f.mlir", notes=()):
    return Diag(severity, message, file, line, 1 if line else None, list(notes))


def test_designators():
    text = "\n".join([
        "op1",                                   # 1
        "// expected-error @+2 {{plus}}",         # 2 -> 4
        "// expected-error @-2 {{minus}}",        # 3 -> 1
        "op4",                                   # 4
        "// expected-warning @above {{above}}",  # 5 -> 4
        "// expected-remark @below {{below}}",   # 6 -> 8 (skips line 7)
        "// expected-note {{here}}",             # 7 -> 7
        "op8",                                   # 8
        "// expected-error @unknown {{nowhere}}",  # 9 -> None
        "// expected-error-re @above {{a{{[0-9]+}}b}}",  # 10 -> 8
    ])
    exps, problems = parse_expectations(text)
    assert problems == []
    got = [(e.severity, e.line, e.text, e.source_line, e.source_col) for e in exps]
    assert got == [
        ("error", 4, "plus", 2, 4),
        ("error", 1, "minus", 3, 4),
        ("warning", 4, "above", 5, 4),
        ("remark", 8, "below", 6, 4),
        ("note", 7, "here", 7, 4),
        ("error", None, "nowhere", 9, 4),
        ("error", 8, "a{{[0-9]+}}b", 10, 4),
    ]
    assert exps[-1].matches("xa123by") and not exps[-1].matches("ab")


def test_dangling_below_points_past_the_end():
    exps, _ = parse_expectations("op\n// expected-error @below {{x}}")
    assert exps[0].line == 2


def test_every_severity_and_notes_match():
    text = (
        "a // expected-error {{E}}\nb // expected-warning {{W}}\n"
        "c // expected-remark {{R}}\nd // expected-note {{N}}\n"
    )
    ok, lines = verify(text, "f.mlir", [
        d("error", "xEx", 1, notes=[d("note", "N!", 4)]),
        d("warning", "W", 2),
        d("remark", "R", 3),
    ])
    assert ok and lines == []


def test_unexpected_and_not_produced():
    ok, lines = verify("a\n// expected-error @-1 {{wanted}}\n", "f.mlir", [d("error", "other", 1)])
    assert not ok
    assert lines == [
        "f.mlir:1:1: error: unexpected error: other",
        'f.mlir:2:4: error: expected error "wanted" was not produced',
    ]


def test_near_miss_names_both_severities():
    ok, lines = verify("a // expected-warning {{msg}}\n", "f.mlir", [d("error", "the msg", 1)])
    assert not ok
    assert lines[0] == "f.mlir:1:6: error: 'error' diagnostic emitted when expecting a 'warning'"
    assert lines[1] == 'f.mlir:1:6: error: expected warning "msg" was not produced'


def test_first_matching_expectation_wins():
    """As upstream: one expectation absorbs repeated diagnostics; a twin stays unmatched."""
    text = "a // expected-error {{dup}}\n// expected-error @-1 {{dup}}\n"
    ok, lines = verify(text, "f.mlir", [d("error", "dup", 1), d("error", "dup", 1)])
    assert not ok
    assert lines == ['f.mlir:2:4: error: expected error "dup" was not produced']


def test_unknown_location_and_other_files():
    text = "// expected-error @unknown {{lost}}\n"
    assert verify(text, "f.mlir", [d("error", "lost", None, file=None)]) == (True, [])
    ok, lines = verify("a // expected-error {{x}}\n", "f.mlir", [d("error", "x", 1, file="g.mlir")])
    assert not ok and lines[0] == "g.mlir:1:1: error: unexpected error: x"
    ok, lines = verify("", "f.mlir", [d("error", "x", None, file=None)])
    assert lines == ["<unknown>:0: error: unexpected error: x"]


def test_only_expected_mode_ignores_extras():
    v = DiagnosticVerifier("a // expected-error {{x}}\n", "f.mlir", only_expected=True)
    assert v.process(d("error", "x", 1)) == [] and v.process(d("error", "y", 1)) == []
    assert v.finish() == [] and not v.failed


@pytest.mark.parametrize("body,message", [
    ("{{a{{b}}", "found start of regex with no end '}}'"),
    ("{{a{{(}}b}}", "invalid regex"),
])
def test_malformed_regex(body, message):
    v = DiagnosticVerifier(f"x // expected-error-re {body}\n", "f.mlir")
    errors = v.initial_errors()
    assert v.failed and len(errors) == 1
    assert errors[0].startswith("f.mlir:1:6: error: " + message)


def test_not_a_designator_without_braces():
    exps, problems = parse_expectations("// expected-error something\n// expected-fatal {{x}}\n")
    assert exps == [] and problems == []


# ----------------------------------------------------------------------------
# Source handling: splitting, nesting, implicit-module wrapping.
# ----------------------------------------------------------------------------


def test_split_keeps_line_numbers():
    text = "a\nb\n// -----\nc\n  // -----\nd"
    original = text.split("\n")
    chunks = split_input(text, "// -----")
    assert [c.first_line for c in chunks] == [1, 3, 5]
    assert [c.text for c in chunks] == ["a\nb\n", "\n\n\nc\n  ", "\n\n\n\n\nd"]
    for c in chunks:  # every non-blank chunk line is on its original line
        for index, line in enumerate(c.text.split("\n")):
            if line.strip():
                assert line.strip() in original[index]
    assert split_input(text, None)[0].text == text


def test_nesting_limit_ignores_comments_strings_and_arrows():
    assert nesting_error("(" * MAX_NESTING + ")" * MAX_NESTING) is None
    assert nesting_error("x" + "<" * (MAX_NESTING + 1)) == MAX_NESTING + 1
    assert nesting_error("// " + "{" * (MAX_NESTING + 5)) is None
    assert nesting_error('"' + "[" * (MAX_NESTING + 5) + '"') is None
    assert nesting_error("(d0) -> (d0) " * (MAX_NESTING + 5)) is None
    assert line_col("ab\ncd", 4) == (2, 2)


def test_comment_start_skips_strings():
    assert comment_start('#a = "x // y" // z') == 14
    assert comment_start('#a = "x \\" // y"') == len('#a = "x \\" // y"')


def test_wrap_keeps_lines_and_reports_shifts():
    text = "#m = affine_map<(d0) -> (d0)>\nfunc.func @a()\nfunc.func @b()\n#loc = loc(\"x\":1:1)\n"
    wrapped, shifts = wrap_in_module(text, (2, 1), 3, 'loc("x":0:0)')
    lines = wrapped.split("\n")
    assert lines[0].endswith("module { ") and lines[1] == "func.func @a()"
    assert lines[3].startswith('} loc("x":0:0) #loc') and shifts == [ColumnShift(4, 1, 15)]
    wrapped, shifts = wrap_in_module("func.func @a()\nfunc.func @b()", (1, 1), 2, "loc(unknown)")
    assert wrapped.startswith("module {func.func @a()") and shifts == [ColumnShift(1, 1, 8)]
    assert shifts[0].fix(1, 20) == 12 and shifts[0].fix(2, 20) == 20
    wrapped, shifts = wrap_in_module("        func.func @a()", (1, 9), 1, "loc(unknown)")
    assert wrapped.startswith("module {func.func") and shifts == []


def test_implicit_module_locations_match_the_file(write):
    """Line-1 ops keep their columns in the printed locations of the diagnostics."""
    path = write('func.func @a() { "autodiff.bad"() : () -> () }\nfunc.func @b() {\n  return\n}\n')
    r = run([path])
    assert r.code == 1
    assert r.err_lines[0].startswith(f"{path}:1:18: error: ")


# ----------------------------------------------------------------------------
# The real console entry points, as subprocesses.
# ----------------------------------------------------------------------------


def _console_script() -> str:
    path = Path(sys.executable).with_name("autodiff-opt")
    if not path.exists():
        pytest.skip("console script not installed next to the interpreter")
    return str(path)


def _subprocess(argv: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("AUTODIFF_TRACEBACK", None)
    return subprocess.run(
        argv, input=stdin, capture_output=True, timeout=120, env=env, check=False
    )


def test_console_script_round_trip():
    p = _subprocess([_console_script(), "-"], stdin=VALID.encode())
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().startswith("module {")


def test_python_dash_m_entry_point():
    p = _subprocess(
        [sys.executable, "-m", "mlir_autodiff.tools.autodiff_opt", "--canonicalize"],
        stdin=b"func.func @f() {\n  return\n}\n",
    )
    assert p.returncode == 0, p.stderr
    assert b"func.func @f()" in p.stdout


SUBPROCESS_GARBAGE = [
    RANDOM_BYTES[0],
    RANDOM_TEXT[0].encode(),
    RANDOM_TOKENS[0].encode(),
    VALID[:TRUNCATIONS[0]].encode(),
    ("module {" * 50000 + "}" * 50000).encode(),
    ("func.func @f() -> " + "tensor<" * 30000).encode(),
    b"\xff\xfe" + "module {}".encode("utf-16-le"),
]


@pytest.mark.parametrize("data", SUBPROCESS_GARBAGE, ids=range(len(SUBPROCESS_GARBAGE)))
def test_garbage_never_kills_the_process(data):
    p = _subprocess([_console_script()], stdin=data)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 1, (p.returncode, err)  # negative would mean a signal
    assert "Traceback" not in err
    assert LOCATED_ERROR.match(err.splitlines()[0]), err
