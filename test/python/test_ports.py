"""The published-program ports in examples/ports/ run, and agree with jax.

Each port is written against jax's API; its `# <imports>` block is the only
place it differs from the program run under jax. This test runs every port
found in the folder as it is (mlir_autodiff) and, where jax is installed, a
copy whose import block is rewritten to jax's (`mlir_autodiff.numpy` ->
`jax.numpy`, `mlir_autodiff.<m>` -> `jax.<m>`, `mlir_autodiff` -> `jax`), and
compares every result of `run(small=True)` to 1e-8 relative in float64.

The ports of torch.func's tutorials are also compared, where torch is
installed, with a torch.func reference program of our own in the tutorial's
idiom (examples/ports/torch_reference/<name>.py: nn.Module models,
`functional_call`, `grad`, `vmap`, `jacrev`, ...), which takes the port's
`inputs(small=True)` and returns the port's keys.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
import types

import numpy as np
import pytest

PORTS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ports"
NAMES = sorted(p.stem for p in PORTS.glob("*.py"))
TORCH = PORTS / "torch_reference"
TORCH_NAMES = sorted(p.stem for p in TORCH.glob("*.py"))
BLOCK = re.compile(r"# <imports>\n(.*?)# </imports>\n", re.S)


def _source(name: str) -> str:
    return (PORTS / f"{name}.py").read_text()


def jax_imports(block: str) -> str:
    """The import block as the jax original has it."""
    out = []
    for line in block.splitlines():
        line = re.sub(r"\bmlir_autodiff\.numpy\b", "jax.numpy", line)
        line = re.sub(r"\bmlir_autodiff\.scipy\b", "jax.scipy", line)
        line = re.sub(r"\bmlir_autodiff\b", "jax", line)
        line = re.sub(r"^import jax as jax$", "import jax", line)
        out.append(line)
    return "\n".join(out) + "\n"


def _load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(f"port_{name}")
    module.__file__ = str(PORTS / f"{name}.py")
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def test_every_port_has_one_import_block_and_a_run_function() -> None:
    assert len(NAMES) >= 1
    for name in NAMES:
        src = _source(name)
        blocks = BLOCK.findall(src)
        assert len(blocks) == 1, f"{name}: exactly one '# <imports>' block"
        rest = BLOCK.sub("", src)
        # outside the block nothing names the project: the rest is jax's program
        assert "mlir_autodiff" not in rest and "anp." not in rest, name
        assert "\ndef run(small=True):" in rest, name


def test_every_torch_func_port_has_a_torch_reference() -> None:
    """A port whose docstring says it follows a torch.func tutorial has a torch
    reference of the same name that names it, and every reference has its port."""
    followed = [name for name in NAMES
                if "torch.func" in (ast.get_docstring(ast.parse(_source(name))) or "")]
    assert len(followed) >= 4, followed
    assert TORCH_NAMES == followed, (f"ports after torch.func tutorials: {followed}; "
                                     f"torch references: {TORCH_NAMES}")
    for name in TORCH_NAMES:
        src = (TORCH / f"{name}.py").read_text()
        doc = ast.get_docstring(ast.parse(src)) or ""
        assert f"examples/ports/{name}.py" in doc, name
        assert "\ndef run(" in src and "from torch.func import" in src, name
        assert "\ndef inputs(small=True):" in _source(name), name


@functools.cache
def _ours(name: str) -> dict:
    """run(small=True) of the port as it is (mlir_autodiff); computed once per process
    for the jax and the torch comparisons."""
    ours = _load(name, _source(name)).run(small=True)
    assert ours, name
    for key, value in ours.items():
        assert np.all(np.isfinite(np.asarray(value, dtype=np.float64))), (name, key)
    return ours


@pytest.fixture(scope="module")
def jax_module():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _compare(ours: dict, theirs: dict, name: str) -> None:
    assert sorted(ours) == sorted(theirs), name
    for key in ours:
        a, b = np.asarray(ours[key]), np.asarray(theirs[key])
        assert a.shape == b.shape, (name, key, a.shape, b.shape)
        # 1e-8 in float64; where either side is float32 (jax makes some results
        # float32 even with x64 on, e.g. the mean of a bool array) at that precision
        rtol = 1e-8 if np.float32 not in (a.dtype, b.dtype) else 2e-7
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-4 * max(1.0, np.abs(b).max(
            initial=0.0)), err_msg=f"{name}: {key}")


@pytest.mark.parametrize("name", NAMES)
def test_port_runs_and_matches_jax(name: str, jax_module) -> None:
    src = _source(name)
    ours = _ours(name)
    block = BLOCK.search(src).group(1)
    theirs = _load(name, src.replace(block, jax_imports(block), 1)).run(small=True)
    _compare(ours, theirs, name)


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_port_matches_torch_reference(name: str) -> None:
    pytest.importorskip("torch")
    port = _load(name, _source(name))
    reference = types.ModuleType(f"torch_reference_{name}")
    reference.__file__ = str(TORCH / f"{name}.py")
    exec(compile((TORCH / f"{name}.py").read_text(), reference.__file__, "exec"),
         reference.__dict__)
    theirs = reference.run(*port.inputs(small=True))
    for key, value in theirs.items():
        assert np.asarray(value).dtype == np.float64, (name, key)
    _compare(_ours(name), theirs, name)
