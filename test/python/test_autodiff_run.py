"""autodiff-run: --arg parsing, the printed number format, and the driver end to end.

The driver is called in-process (`main(argv)`), which is what the console
script does, so each case costs one compilation and no interpreter start.
Expected numbers are hand-computed.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlir_autodiff.tools.autodiff_run import format_scalar, format_value, main, parse_literal
from mlir_autodiff.transforms.passes import lookup

# -- --arg literals ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("3", 3),
    ("-2.5", -2.5),
    ("1e-3", 1e-3),
    (".5", 0.5),
    ("0x10", 16),
    ("true", True),
    ("False", False),
    ("[]", []),
    ("[1, 2.5, -3]", [1, 2.5, -3]),
    ("[[1,2],[3,4]]", [[1, 2], [3, 4]]),
    ("  [ [ true ] , [ false ] ]  ", [[True], [False]]),
])
def test_parse_literal(text: str, value) -> None:
    got = parse_literal(text)
    assert got == value and type(got) is type(value)


def test_parse_literal_special_floats() -> None:
    got = parse_literal("[inf, -inf, nan]")
    assert got[0] == float("inf") and got[1] == float("-inf") and got[2] != got[2]


@pytest.mark.parametrize("text, message", [
    ("", "empty value"),
    ("[1, 2", "missing ']'"),
    ("[1,, 2]", "unexpected ','"),
    ("[1 2]", "expected ',' or ']', got '2'"),
    ("1 2", "unexpected '2' after the value"),
    ("abc", "'abc' is not a number"),
    ("1.2.3", "'1.2.3' is not a number"),
    ("]", "unexpected ']'"),
])
def test_parse_literal_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_literal(text)


# -- the printed number format ----------------------------------------------------------------


@pytest.mark.parametrize("value, text", [
    (np.float32(2.0), "2"),
    (np.float32(1 / 3), "0.333333"),
    (np.float64(1 / 3), "0.333333333333"),
    (np.float16(1 / 3), "0.3333"),
    (np.float32(1e-7), "1e-07"),
    (np.float32(-0.0), "-0"),
    (np.float64(1e20), "1e+20"),
    (np.float32(np.inf), "inf"),
    (np.float32(-np.inf), "-inf"),
    (np.float64(np.nan), "nan"),
    (np.int64(-9_000_000_000), "-9000000000"),
    (np.uint8(255), "255"),
    (np.bool_(True), "true"),
    (False, "false"),
])
def test_format_scalar(value, text: str) -> None:
    assert format_scalar(value) == text


@pytest.mark.parametrize("value, text", [
    (np.array([[1, 2], [3, 4]], np.float32), "[[1, 2], [3, 4]]"),
    (np.array([[[0.5]], [[-1.25]]], np.float64), "[[[0.5]], [[-1.25]]]"),
    (np.array(7, np.int32), "7"),
    (np.zeros((0,), np.float32), "[]"),
    (np.zeros((2, 0), np.int8), "[[], []]"),
    (np.array([True, False]), "[true, false]"),
    (np.arange(2000, dtype=np.int32), "[" + ", ".join(map(str, range(2000))) + "]"),
])
def test_format_value_is_one_unpadded_unsummarized_line(value, text: str) -> None:
    assert format_value(value) == text


def test_format_value_precision_override() -> None:
    assert format_value(np.array([0.1], np.float64), 17) == "[0.10000000000000001]"


# -- end to end ---------------------------------------------------------------------------------

PROGRAM = """\
func.func @main(%a: tensor<2x2xf32>, %s: f64) -> (tensor<2x2xf32>, f64, i1) {
  %e = tensor.empty() : tensor<2x2xf32>
  %r = linalg.add ins(%a, %a : tensor<2x2xf32>, tensor<2x2xf32>)
                  outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t = arith.mulf %s, %s : f64
  %zero = arith.constant 0.0 : f64
  %neg = arith.cmpf olt, %s, %zero : f64
  return %r, %t, %neg : tensor<2x2xf32>, f64, i1
}

func.func @ints(%v: tensor<3xi64>) -> tensor<3xi64> {
  %e = tensor.empty() : tensor<3xi64>
  %r = linalg.mul ins(%v, %v : tensor<3xi64>, tensor<3xi64>)
                  outs(%e : tensor<3xi64>) -> tensor<3xi64>
  return %r : tensor<3xi64>
}

func.func @nothing(%x: f32) {
  return
}

func.func private @hidden() {
  return
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("run") / "program.mlir"
    path.write_text(PROGRAM)
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_main_and_prints_one_line_per_result(program, capsys) -> None:
    code, out, err = run([str(program), "--arg", "[[1, 2], [3, 4.5]]", "--arg", "-1.5"], capsys)
    assert (code, err) == (0, "")
    assert out == ("result[0]: tensor<2x2xf32> = [[2, 4], [6, 9]]\n"
                   "result[1]: f64 = 2.25\n"
                   "result[2]: i1 = true\n")


def test_typed_literals_and_entry(program, capsys) -> None:
    code, out, _ = run([str(program), "--entry", "ints", "--arg", "[3, -4, 3037000499]:i64"],
                       capsys)
    assert code == 0
    assert out == "result[0]: tensor<3xi64> = [9, 16, 9223372030926249001]\n"


def test_npy_arguments(program, tmp_path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.array([[0.5, 1], [1.5, 2]], np.float32))
    code, out, _ = run([str(program), f"--arg=@{tmp_path / 'a.npy'}", "--arg=2"], capsys)
    assert code == 0
    assert out.splitlines()[0] == "result[0]: tensor<2x2xf32> = [[1, 2], [3, 4]]"


def test_function_without_results_prints_nothing(program, capsys) -> None:
    assert run([str(program), "--entry", "nothing", "--arg", "1"], capsys) == (0, "", "")


def test_stdin_input(monkeypatch, capsys) -> None:
    text = "func.func @main() -> f32 {\n  %c = arith.constant 0.125 : f32\n  return %c : f32\n}\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert run([], capsys) == (0, "result[0]: f32 = 0.125\n", "")


def test_print_ir_and_precision(program, capsys) -> None:
    code, out, _ = run([str(program), "--arg", "[[0, 0], [0, 0]]", "--arg", "0.1", "--print-ir",
                        "--precision", "17"], capsys)
    assert code == 0
    assert "llvm.func @_mlir_ciface_main(" in out
    assert "result[1]: f64 = 0.010000000000000002\n" in out


def test_autodiff_ops_are_transformed(tmp_path, capsys) -> None:
    """With the forward-mode pass registered, d/dx x^2 at 3 along 1 is 6."""
    if lookup("autodiff-jvp") is None:
        pytest.skip("--autodiff-jvp is not implemented yet")
    path = tmp_path / "jvp.mlir"
    path.write_text(
        "func.func private @square(%x: f32) -> f32 {\n"
        "  %y = arith.mulf %x, %x : f32\n  return %y : f32\n}\n"
        "func.func @main(%x: f32, %t: f32) -> (f32, f32) {\n"
        '  %r:2 = "autodiff.jvp"(%x, %t) {fn = @square} : (f32, f32) -> (f32, f32)\n'
        "  return %r#0, %r#1 : f32, f32\n}\n")
    assert run([str(path), "--arg", "3", "--arg", "1"], capsys) == (
        0, "result[0]: f32 = 9\nresult[1]: f32 = 6\n", "")


@pytest.mark.parametrize("argv, message", [
    (["{p}", "--entry", "missing"], "autodiff-run: error: no function '@missing' in '{p}' "
                                    "(functions: @main, @ints, @nothing, @hidden)"),
    (["{p}", "--entry", "hidden"], "{p}:22:1: error: '@hidden' is private; only public "
                                   "functions can be run"),
    (["{p}"], "autodiff-run: error: @main takes 2 arguments (tensor<2x2xf32>, f64), got 0"),
    (["{p}", "--arg", "[1, 2]", "--arg", "1"],
     "autodiff-run: error: @main: argument 0 (tensor<2x2xf32>): expected rank 2 with shape "
     "(2, 2), got rank 1 with shape (2,)"),
    (["{p}", "--arg", "[[1, 2], [3, 4]]:f64", "--arg", "1"],
     "autodiff-run: error: @main: argument 0 (tensor<2x2xf32>): expected dtype float32, "
     "got float64"),
    (["{p}", "--entry", "ints", "--arg", "[1.5, 2, 3]"],
     "autodiff-run: error: @ints: argument 0 (tensor<3xi64>): expected int64 values, "
     "got float64"),
    (["{p}", "--entry", "ints", "--arg", "[1, 2, 3]:i1"],
     "autodiff-run: error: --arg 0 '[1, 2, 3]:i1': expected bool values, got int64"),
    (["{p}", "--arg", "[[1, 2], [3, 4]"],
     "autodiff-run: error: --arg 0: malformed value '[[1, 2], [3, 4]': missing ']'"),
    (["{p}", "--arg", "@/nonexistent/x.npy"],
     "autodiff-run: error: --arg 0: cannot read '/nonexistent/x.npy': No such file or directory"),
    (["{p}", "--precision", "40"], "autodiff-run: error: --precision must be between 1 and 17"),
    (["{p}", "--pass-pipeline", "builtin.module(canonicalize"],
     "autodiff-run: error: invalid pass pipeline 'builtin.module(canonicalize': unbalanced '(' "
     "or '{' in pass pipeline 'builtin.module(canonicalize'"),
    (["/nonexistent/file.mlir"],
     "autodiff-run: error: could not open input file '/nonexistent/file.mlir': No such file or "
     "directory"),
    (["{p}", "-O", "7"], "autodiff-run: error: argument -O/--opt-level: invalid choice: 7 "
                         "(choose from 0, 1, 2, 3)"),
])
def test_errors_are_one_diagnostic_line(program, capsys, argv, message) -> None:
    argv = [a.replace("{p}", str(program)) for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 1 and out == ""
    assert err == message.replace("{p}", str(program)) + "\n"


def test_parse_error_points_into_the_file(tmp_path, capsys) -> None:
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @main() -> f32 {\n  %0 = arith.constant 1 : i32\n"
                    "  return %0 : f32\n}\n")
    code, out, err = run([str(path)], capsys)
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (f"{path}:3:10: error: use of value '%0' expects different "
                                   "type than prior uses: 'f32' vs 'i32'")
    assert "Traceback" not in err


def test_binary_garbage_is_rejected(tmp_path, capsys) -> None:
    path = tmp_path / "random.mlir"
    path.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)))
    code, out, err = run([str(path)], capsys)
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"{path}:1:1: error: ")


def test_dynamic_result_is_reported_at_the_function(tmp_path, capsys) -> None:
    path = tmp_path / "dyn.mlir"
    path.write_text("func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {\n"
                    "  return %x : tensor<?xf32>\n}\n")
    code, out, err = run([str(path), "--arg", "[1, 2]"], capsys)
    assert code == 1 and out == ""
    assert err.startswith(f"{path}:1:1: error: autodiff-lower-to-cpu: result type "
                          "tensor<?xf32> has a dynamic shape")


def test_console_script_exit_code_and_streams(program) -> None:
    """The installed entry point: results on stdout, exit 0; a diagnostic on stderr, exit 1."""
    cmd = [sys.executable, "-c", "import sys; from mlir_autodiff.tools.autodiff_run import main; "
                                 "sys.exit(main())"]
    ok = subprocess.run([*cmd, str(program), "--entry", "ints", "--arg", "[1, 2, 3]"],
                        capture_output=True, text=True, timeout=120)
    assert (ok.returncode, ok.stdout, ok.stderr) == (
        0, "result[0]: tensor<3xi64> = [1, 4, 9]\n", "")
    bad = subprocess.run([*cmd, str(program), "--entry", "ints", "--arg", "[1, 2]"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == ("autodiff-run: error: @ints: argument 0 (tensor<3xi64>): expected "
                          "shape (3,), got (2,)\n")
