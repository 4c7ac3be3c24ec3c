"""The front end's import layering: no circles, no hidden upward imports.

`python/mlir_autodiff/__init__.py` lists the layers in a comment; this test
reads that table and parses every module's imports with `ast` (module level
and inside functions alike): a module imports only modules of lower layers.
A function-local import of a package module is allowed only where
`FUNCTION_LOCAL` gives the reason.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "mlir_autodiff"
#: Packages of `mlir_autodiff.*` that live in their own top-level folders (pyproject's
#: package-dir): the compiler, which must not import the front end.
COMPILER = {"dialects": ROOT / "dialects", "transforms": ROOT / "transforms"}

#: Function-local imports of package modules that stay, (module, imported module) -> why.
FUNCTION_LOCAL: dict[tuple[str, str], str] = {
    ("api", "mlir_autodiff.gpu"):
        "the GPU back end (transforms/gpu) loads only when a function is jitted for device='gpu'",
}


def layer_table() -> dict[str, int]:
    """Unit (front-end module stem, or compiler package) -> layer, from __init__.py."""
    table: dict[str, int] = {}
    for line in (PACKAGE / "__init__.py").read_text().splitlines():
        m = re.match(r"#\s+layer (\d+)\s+(\w+(?:, \w+)*)", line)
        if m:
            for name in m.group(2).split(", "):
                assert name not in table, f"{name} is listed in two layers"
                table[name] = int(m.group(1))
    return table


LAYERS = layer_table()


@dataclasses.dataclass(frozen=True)
class Import:
    module: str        # importing unit ("api", "transforms", ...)
    target: str        # imported module, "mlir_autodiff.x.y"
    line: int
    local: bool        # inside a function

    @property
    def unit(self) -> str:
        """The layer unit of the target: `mlir_autodiff.transforms.vmap` -> transforms."""
        parts = self.target.split(".")
        return "__init__" if len(parts) == 1 else parts[1]


def _is_module(dotted: str) -> bool:
    """Whether `mlir_autodiff.<...>` names a module or package (not a name inside one)."""
    parts = dotted.split(".")[1:]
    if not parts:
        return True
    path = (COMPILER[parts[0]].joinpath(*parts[1:]) if parts[0] in COMPILER
            else PACKAGE.joinpath(*parts))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_name(path: pathlib.Path) -> tuple[str, str]:
    """(unit, dotted name of the package holding `path`) of a source file."""
    if path.parent == PACKAGE:
        return path.stem, "mlir_autodiff"
    if path.parent.parent == PACKAGE:   # a front-end subpackage (scipy/): one unit
        return path.parent.name, f"mlir_autodiff.{path.parent.name}"
    for name, folder in COMPILER.items():
        if folder in path.parents:
            rel = path.parent.relative_to(folder).parts
            return name, ".".join(("mlir_autodiff", name, *rel))
    raise AssertionError(f"{path} is not a source file of the package")


def imports_of(path: pathlib.Path, text: str | None = None) -> list[Import]:
    """Every import of a `mlir_autodiff` module in `path` (or in `text`, as if it were
    that file), resolved to the module it loads."""
    unit, package = _module_name(path)
    out: list[Import] = []

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if not isinstance(node, ast.ImportFrom):
            return []
        source = node.module or ""
        if node.level:
            base = package.split(".")
            source = ".".join(base[:len(base) - node.level + 1] + ([source] if source else []))
        # `from pkg import sub` loads the submodule; `from mod import name`, the module.
        return [f"{source}.{a.name}" if _is_module(f"{source}.{a.name}") else source
                for a in node.names]

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            for t in dict.fromkeys(targets(child)):
                if t.split(".")[0] == "mlir_autodiff":
                    out.append(Import(unit, t, child.lineno, local))
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text() if text is None else text, str(path)), False)
    return out


#: The package's modules and the modules of its front-end subpackages (scipy/).
FRONT_END = sorted(PACKAGE.glob("*.py")) + sorted(PACKAGE.glob("*/*.py"))
COMPILER_FILES = sorted(f for folder in COMPILER.values() for f in folder.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    modules = {_module_name(p)[0] for p in FRONT_END} | set(COMPILER)
    assert set(LAYERS) == modules, (
        f"modules without a layer in __init__.py: {sorted(modules - set(LAYERS))}; "
        f"listed but missing: {sorted(set(LAYERS) - modules)}")
    assert {LAYERS[c] for c in COMPILER} == {0}


@pytest.mark.parametrize("path", FRONT_END, ids=lambda p: (
    p.stem if p.parent == PACKAGE else f"{p.parent.name}.{p.stem}"))
def test_imports_go_down(path: pathlib.Path) -> None:
    """A front-end module imports only modules of lower layers (none of its own)."""
    unit = _module_name(path)[0]
    bad = [f"{path.name}:{i.line}: {i.target} (layer {LAYERS[i.unit]}"
           f"{', inside a function' if i.local else ''})"
           for i in imports_of(path) if LAYERS[i.unit] >= LAYERS[unit]
           # a subpackage (one unit) may import its own modules
           and not (i.unit == unit and path.parent != PACKAGE)]
    assert not bad, (f"{unit} (layer {LAYERS[unit]}) imports from its own or a "
                     f"higher layer: {bad}")


def test_compiler_does_not_import_the_front_end() -> None:
    bad = [f"{p.relative_to(ROOT)}:{i.line}: {i.target}"
           for p in COMPILER_FILES for i in imports_of(p) if i.unit not in COMPILER]
    assert not bad, f"the compiler imports the front end: {bad}"


def test_function_local_imports_are_listed() -> None:
    local = [i for p in FRONT_END for i in imports_of(p) if i.local]
    unlisted = [f"{i.module}.py:{i.line}: {i.target}" for i in local
                if (i.module, i.target) not in FUNCTION_LOCAL]
    assert not unlisted, (f"function-local imports of package modules (import at module "
                          f"level, or add a reason to FUNCTION_LOCAL): {unlisted}")
    stale = sorted(set(FUNCTION_LOCAL) - {(i.module, i.target) for i in local})
    assert not stale, f"FUNCTION_LOCAL lists imports that are gone: {stale}"


def test_the_parser_sees_each_kind_of_import() -> None:
    """The checks above are only as good as `imports_of`: each import form resolves."""
    probe = """
import mlir_autodiff
import mlir_autodiff.numpy as anp
from . import random, pytree
from .tracing import Tracer, ShapedArray
from mlir_autodiff import api, jit
from mlir_autodiff.transforms.vmap import batched_outputs
from .transforms import passes
import numpy
class C:
    def method(self):
        if True:
            from . import nn
"""
    found = {(i.target, i.local) for i in imports_of(PACKAGE / "probe.py", probe)}
    assert found == {
        ("mlir_autodiff", False), ("mlir_autodiff.numpy", False),
        ("mlir_autodiff.random", False), ("mlir_autodiff.pytree", False),
        ("mlir_autodiff.tracing", False), ("mlir_autodiff.api", False),
        ("mlir_autodiff.transforms.vmap", False), ("mlir_autodiff.transforms.passes", False),
        ("mlir_autodiff.nn", True),
    }
    rules = COMPILER["transforms"] / "rules" / "probe.py"
    found = {i.target for i in imports_of(rules, "from ..vmap import x\nfrom ...tracing import y")}
    assert found == {"mlir_autodiff.transforms.vmap", "mlir_autodiff.tracing"}


def _fresh(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_tracing_loads_nothing_above_it() -> None:
    """Importing tracing loads no front-end module of a higher layer (checked at run time,
    which also sees imports the parser cannot, such as importlib)."""
    out = _fresh("import sys, mlir_autodiff.tracing\n"
                 "print(' '.join(m for m in sys.modules if m.startswith('mlir_autodiff.')))")
    loaded = {m.split(".")[1] for m in out.split()}
    assert {m for m in loaded if LAYERS[m] >= LAYERS["tracing"]} == {"tracing"}, loaded


def test_jit_gives_traces_the_numpy_interface() -> None:
    """Tracer's operators come from mlir_autodiff.numpy; a program that never imports it
    still traces `x + 1`, `x.T`, `.sum()` and `ndarray * x` under jit (api imports it)."""
    out = _fresh("import numpy as np, mlir_autodiff as ad\n"
                 "f = ad.jit(lambda x: (np.full((2, 2), 2.0) * (x.T + 1)).sum())\n"
                 "print(f(np.arange(4.0).reshape(2, 2)))")
    assert float(out) == 2.0 * (np.arange(4.0) + 1).sum()


def test_random_keeps_its_public_names() -> None:
    """The generator state moved to rng_state; random still offers the same objects."""
    from mlir_autodiff import random, rng_state

    for name in rng_state.__all__:
        assert getattr(random, name) is getattr(rng_state, name)
        assert name in random.__all__

