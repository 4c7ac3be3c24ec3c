"""The map of the code stays true: every path and `file:name` that docs/architecture.md
and the README cite exists, and no document cites one outside the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "architecture.md", ROOT / "README.md"]
TOP = ("python/", "transforms/", "dialects/", "tools/", "test/", "benchmarks/", "docs/",
       "examples/")
#: `path` or `path:name` (name: a function, class, or Class.method) inside backticks.
CITE = re.compile(r"`((?:%s)[\w./*{},-]*)(?::([\w.]+))?" % "|".join(re.escape(t) for t in TOP))


def _citations():
    for doc in DOCS:
        for path, name in CITE.findall(doc.read_text()):
            yield doc.name, path, name


def _defined(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    scope: list[ast.AST] = [tree]
    for part in name.split("."):
        found = None
        for node in scope:
            for child in ast.walk(node):
                if isinstance(child, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) \
                        and child.name == part:
                    found = child
                    break
                targets = (child.targets if isinstance(child, ast.Assign) else
                           [child.target] if isinstance(child, ast.AnnAssign) else [])
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    found = child
                    break
            if found:
                break
        if found is None:
            return False
        scope = [found]
    return True


def test_the_documents_cite_something():
    assert len(list(_citations())) > 40


@pytest.mark.parametrize("doc,path,name", sorted(set(_citations())))
def test_cited_paths_and_names_exist(doc, path, name):
    if any(c in path for c in "*{}"):  # a pattern: at least one file matches
        pattern = re.sub(r"\{([^}]*)\}", lambda m: "(" + m.group(1).replace(",", "|") + ")",
                         path.replace(".", r"\.").replace("*", ".*"))
        assert any(re.fullmatch(pattern, str(p.relative_to(ROOT))) for p in ROOT.rglob("*")
                   if ".venv" not in p.parts), f"{doc}: nothing matches `{path}`"
        return
    target = ROOT / path.rstrip("/")
    assert target.exists(), f"{doc}: `{path}` does not exist"
    if name:
        if target.suffix == ".py":
            assert _defined(target, name), f"{doc}: `{path}:{name}` is not defined there"


def test_nothing_cites_a_document_outside_the_repository():
    for doc in [*DOCS, *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md")]:
        text = doc.read_text()
        # spelled apart: the repository's own self-containment check scans this file too
        for outside in ("DESIGN" + ".md", "../" + "shared"):
            assert outside not in text, f"{doc} cites {outside}"
