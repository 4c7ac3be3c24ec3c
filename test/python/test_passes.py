"""The pass registry (transforms/passes.py): every pass that `autodiff-opt
--list-passes` shows is reachable by its flag and inside `--pass-pipeline`.

The tool runs as a fresh subprocess each time: the registry imports pass
modules lazily, so a pass is only known in a process that has not already
imported its module by another route if the registry declares it.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from mlir_autodiff.transforms import passes

#: A small valid module: every project pass accepts it (most leave it as it is).
TINY = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %y = linalg.mul ins(%x, %x : tensor<4xf32>, tensor<4xf32>)
                  outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
"""

OPT = [sys.executable, "-m", "mlir_autodiff.tools.autodiff_opt"]


def _opt(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([*OPT, *args], input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)


def _listed() -> list[str]:
    """The pass flags `autodiff-opt --list-passes` prints (without the dashes)."""
    proc = _opt("--list-passes")
    assert proc.returncode == 0, proc.stderr
    return re.findall(r"^  --([\w-]+)$", proc.stdout, re.MULTILINE)


LISTED = _listed()


def test_list_passes_shows_every_declared_pass():
    """The listing and the registry's lazy-import table name the same passes."""
    assert len(LISTED) >= 10 and "autodiff-vjp" in LISTED
    assert sorted(LISTED) == sorted(passes._PASS_MODULES)


@pytest.mark.parametrize("spelling", ["flag", "pipeline"])
@pytest.mark.parametrize("name", LISTED)
def test_every_listed_pass_runs_by_its_flag(name, spelling):
    args = [f"--{name}"] if spelling == "flag" else [f"--pass-pipeline=builtin.module({name})"]
    proc = _opt("-", *args, stdin=TINY)
    assert "registered pass" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "func.func @f" in proc.stdout or "llvm.func @f" in proc.stdout, proc.stdout


def test_an_undeclared_project_pass_cannot_register():
    """A pass of the package that the lazy-import table does not name (or names
    with another module) is refused where it is defined, not at a user's flag."""

    def define(module: str, name: str) -> type[passes.Pass]:
        cls = dataclasses.make_dataclass("Undeclared", [], bases=(passes.Pass,), frozen=True,
                                         namespace={"name": name, "summary": "x"})
        cls.__module__ = module
        return passes.register(cls)

    with pytest.raises(TypeError, match="not declared in passes._PASS_MODULES"):
        define("mlir_autodiff.transforms.cpu.pipeline", "autodiff-not-in-the-table")
    with pytest.raises(TypeError, match="not declared in passes._PASS_MODULES"):
        define("mlir_autodiff.transforms.vmap", "autodiff-unshare-empty-tensors")
    assert passes.lookup("autodiff-not-in-the-table") is None
    assert passes.lookup("autodiff-unshare-empty-tensors").__module__.endswith("bufferize")
