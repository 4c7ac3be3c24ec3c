"""No import circle among the compiler's modules (dialects/, transforms/, tools/).

Every import a module makes at run time counts (module level and inside
functions; imports under `if TYPE_CHECKING:` do not run and do not count). The
one allowed circle is the rule registry's self-registration inside
`transforms/rules/` (`registry.load_all` imports the dialect modules, which
register into it). The front end's own layering is test_layering.py's.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = {"dialects": "mlir_autodiff.dialects", "transforms": "mlir_autodiff.transforms",
            "tools": "mlir_autodiff.tools"}
#: Modules that may import each other in a circle: (package prefix, why).
ALLOWED_CIRCLE = ("mlir_autodiff.transforms.rules.",
                  "the rule registry imports the dialect rule modules, which register into it")


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts
                     if p != "__init__"]
            out[".".join([package, *parts])] = (path, path.name == "__init__.py")
    return out


MODULES = _modules()


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    out = []
    for a in node.names:
        if f"{base}.{a.name}" in MODULES:
            out.append(f"{base}.{a.name}")
        elif base in MODULES:
            out.append(base)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, (path, is_package) in MODULES.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            graph[module].update(t for t in _targets(module, is_package, node) if t != module)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_drivers_imports():
    graph = _graph()
    assert "mlir_autodiff.transforms.rules.registry" in graph["mlir_autodiff.transforms.ad_driver"]
    assert "mlir_autodiff.transforms.passes" in graph["mlir_autodiff.transforms.vjp"]


def test_no_import_circle_outside_the_rule_registry():
    prefix, _why = ALLOWED_CIRCLE
    bad = [c for c in _circles(_graph()) if not all(m.startswith(prefix) for m in c)]
    assert not bad, f"import circles: {bad}"


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
