"""Every `autodiff.*` name is spelled once, in `dialects/vocabulary.py`.

The source (python/, transforms/, tools/, dialects/) is parsed with `ast`: a
string literal or f-string piece naming an autodiff op or attribute outside the
vocabulary module fails the test (docstrings, which describe the IR, are
exempt; `ALLOWED` lists the literals that stay, with the reason). The
vocabulary's ops are exactly the ops of the IRDL definition, and every
attribute says what it means; the attributes a user writes are the README's.
"""

from __future__ import annotations

import ast
import pathlib
import re

from mlir import ir

from mlir_autodiff.dialects import IRDL_FILE
from mlir_autodiff.dialects import vocabulary as V

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = [ROOT / d for d in ("python", "transforms", "tools", "dialects")]
VOCABULARY = ROOT / "dialects" / "vocabulary.py"
#: A literal that is an autodiff name (or the bare prefix an f-string or
#: `startswith` completes), or that quotes one as diagnostics do ('autodiff.vmap').
#: Prose that mentions an op (a pass's description) is documentation and stays.
NAME = re.compile(r"^autodiff\.|'autodiff\.[a-z_]")

#: (file relative to the root, the literal) -> why it stays.
ALLOWED: dict[tuple[str, str], str] = {
    ("dialects/__init__.py", "autodiff.irdl.mlir"): "a file name, not an op or attribute",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings (or bare string statements)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
    return out


def _literals(path: pathlib.Path):
    """(line, text) of each string literal and f-string piece that is not a docstring."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def test_no_autodiff_literal_outside_the_vocabulary():
    found = []
    for folder in SOURCE:
        for path in sorted(folder.rglob("*.py")):
            if path == VOCABULARY:
                continue
            rel = path.relative_to(ROOT).as_posix()
            for line, text in _literals(path):
                if NAME.search(text) and (rel, text) not in ALLOWED:
                    found.append(f"{rel}:{line}: {text!r}")
    assert not found, ("autodiff names spelled outside dialects/vocabulary.py "
                       "(import the constant instead):\n" + "\n".join(found))


def test_the_check_sees_a_literal(tmp_path):
    """The scan is not vacuous: a literal, an f-string piece and a message are found."""
    src = tmp_path / "m.py"
    src.write_text('"""Doc of `autodiff.vmap`."""\nA = "autodiff.vjp"\n'
                   'B = f"autodiff.{A}"\nC = "\'autodiff.vmap\' needs fn"\n'
                   'D = "Lower autodiff.jvp ops"\nE = "use mlir_autodiff.numpy"\n')
    hits = [text for _, text in _literals(src) if NAME.search(text)]
    assert sorted(hits) == sorted(["autodiff.vjp", "autodiff.", "'autodiff.vmap' needs fn"])


def _irdl_ops() -> set[str]:
    with ir.Context():
        module = ir.Module.parse(IRDL_FILE.read_text())
        out = set()
        for dialect in module.body.operations:
            if dialect.operation.name != "irdl.dialect":
                continue
            prefix = ir.StringAttr(dialect.attributes["sym_name"]).value
            for op in dialect.regions[0].blocks[0].operations:
                if op.operation.name == "irdl.operation":
                    out.add(f"{prefix}.{ir.StringAttr(op.attributes['sym_name']).value}")
        return out


def _constants() -> dict[str, str]:
    return {k: v for k, v in vars(V).items()
            if k.isupper() and isinstance(v, str) and v.startswith(V.PREFIX) and k != "PREFIX"}


def test_every_name_is_an_op_or_a_documented_attribute():
    ops = _irdl_ops()
    assert set(V.OPS) == ops, "vocabulary ops differ from dialects/autodiff.irdl.mlir"
    for const, name in _constants().items():
        if name in ops:
            continue
        assert name in V.ATTRIBUTES and V.ATTRIBUTES[name].strip(), \
            f"{const} = {name!r} is neither an IRDL op nor a documented attribute"
    assert set(V.ATTRIBUTES) == set(_constants().values()) - ops, \
        "ATTRIBUTES documents a name that has no constant"


def test_user_attributes_are_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    after = readme.split("Function attributes the passes read:")[1].lstrip("\n").splitlines()
    rows = []
    for line in after:
        if not line.startswith("|"):
            break
        rows.append(line)
    table = "\n".join(rows)
    assert len(rows) > 3, "the README's table of function attributes is gone"
    in_table = set(re.findall(r"autodiff\.[a-z_]+", table)) - set(V.OPS)
    assert in_table == set(V.USER_ATTRIBUTES)
