"""What is not supported yet, exactly as the README's table lists it.

Each row of the README's "Not supported yet" table has an entry here with a
reproducer; the reproducer must fail with a clear user-facing error (a
front-end exception naming the user's line, or `autodiff-opt` printing
`<stdin>:line:col: error: ...` naming the op, exit code 1) -- never a
traceback, an internal error or a silently computed value. The README's rows
and this table must be the same set, so an entry that starts working (or a new
limitation) changes both.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax

ROOT = Path(__file__).resolve().parents[2]
OPT = Path(sys.executable).parent / "autodiff-opt"
X = np.array([0.3, 0.5, 0.7])


def _vmap_loop_bounds():
    body = lambda i, c: c * c  # noqa: E731
    ad.jit(ad.vmap(lambda n, x: lax.fori_loop(0, n, body, x)))(np.array([1, 2, 3]), X)


def _rng_in_while():
    def body(c):
        return c[0] * ad.random.uniform((3,)), c[1] + 1
    ad.jit(lambda x: lax.while_loop(lambda c: c[1] < 3, body, (x, 0))[0])(X)


_RECURSION = """
func.func @even(%x: f64, %n: i64) -> f64 {
  %c0 = arith.constant 0 : i64
  %p = arith.cmpi eq, %n, %c0 : i64
  %r = scf.if %p -> f64 {
    scf.yield %x : f64
  } else {
    %c1 = arith.constant 1 : i64
    %m = arith.subi %n, %c1 : i64
    %s = math.sin %x : f64
    %o = func.call @odd(%s, %m) : (f64, i64) -> f64
    scf.yield %o : f64
  }
  return %r : f64
}
func.func @odd(%x: f64, %n: i64) -> f64 {
  %c = math.cos %x : f64
  %r = func.call @even(%c, %n) : (f64, i64) -> f64
  return %r : f64
}
func.func @main(%x: f64, %n: i64, %ct: f64) -> (f64, f64) {
  %r:2 = "autodiff.vjp"(%x, %n, %ct) {fn = @even, wrt = array<i64: 0>} : (f64, i64, f64) -> (f64, f64)
  return %r#0, %r#1 : f64, f64
}
"""

_MIXED_INDEX = """
func.func @conv(%x: tensor<5xf64>, %k: tensor<3xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i + j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x, %k : tensor<5xf64>, tensor<3xf64>) outs(%f : tensor<3xf64>) {
  ^bb0(%a: f64, %w: f64, %acc: f64):
    %m = arith.mulf %a, %w : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  } -> tensor<3xf64>
  return %r : tensor<3xf64>
}
func.func @main(%x: tensor<5xf64>, %k: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<3xf64>, tensor<5xf64>) {
  %0:2 = "autodiff.vjp"(%x, %k, %c) {fn = @conv, wrt = array<i64: 0>} : (tensor<5xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<5xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<5xf64>
}
"""

_NO_RULE = """
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  %e = tensor.empty() : tensor<3xf64>
  %r = linalg.softmax dimension(0) ins(%x : tensor<3xf64>) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  return %r : tensor<3xf64>
}
func.func @main(%x: tensor<3xf64>, %t: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %r:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %r#0, %r#1 : tensor<3xf64>, tensor<3xf64>
}
"""


def _opt(text: str, *flags: str):
    def run():
        proc = subprocess.run([str(OPT), "-", *flags], input=text, capture_output=True,
                              text=True, timeout=120)
        return proc
    return run


#: README row id -> (reproducer, pattern the error message must match).
UNSUPPORTED = {
    "vmap-loop-bounds": (_vmap_loop_bounds,
                         r"fori_loop: the loop bounds depend on a batched .*test_unsupported\.py:\d+"),
    "rng-in-while": (_rng_in_while,
                     r"test_unsupported\.py:\d+:\d+: error: autodiff-functionalize-rng: random draw "
                     r"inside 'scf\.while' is not supported"),
    "vjp-recursion": (_opt(_RECURSION, "--autodiff-vjp"),
                      r"<stdin>:\d+:\d+: error: autodiff-vjp: reverse mode of the recursive "
                      r"function @\w+ is not supported"),
    "vjp-mixed-index": (_opt(_MIXED_INDEX, "--autodiff-vjp"),
                        r"<stdin>:\d+:\d+: error: autodiff-vjp: reverse mode of 'linalg\.generic' "
                        r"does not support the indexing expression 'd0 \+ d1'"),
    "rules-linalg-conv": (_opt(_NO_RULE, "--autodiff-jvp"),
                          r"<stdin>:\d+:\d+: error: autodiff-jvp: no forward rule for "
                          r"'linalg\.softmax'"),
}


def readme_rows() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Not supported yet", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M)


def test_readme_table_is_this_table():
    rows = readme_rows()
    assert len(rows) == len(set(rows)), rows
    assert set(rows) == set(UNSUPPORTED)


@pytest.mark.parametrize("key", list(UNSUPPORTED))
def test_unsupported_is_a_clear_error(key):
    repro, pattern = UNSUPPORTED[key]
    try:
        result = repro()
    except Exception as err:  # noqa: BLE001 - the front end's error is the subject
        msg = str(err)
        assert "internal error" not in msg.lower(), msg
        assert "Traceback" not in msg, msg
        assert re.search(pattern, msg, flags=re.S), msg
        return
    assert isinstance(result, subprocess.CompletedProcess), f"{key}: no error was raised"
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert re.search(pattern, result.stderr), result.stderr
