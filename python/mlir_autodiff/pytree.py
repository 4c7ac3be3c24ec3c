"""Pytrees: nested tuples, lists, dicts and namedtuples of leaves (JAX's convention).

`tree_flatten(tree)` returns the leaves in a fixed order and a hashable
`TreeDef`; `tree_unflatten(treedef, leaves)` rebuilds the structure. `None`
is a structure node with no leaves (so an optional argument may be None).
Dict keys are visited in sorted order, as in JAX, so `{"b": .., "a": ..}`
and `{"a": .., "b": ..}` have the same structure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

_LEAF = "leaf"
_NONE = "none"
_TUPLE = "tuple"
_LIST = "list"
_DICT = "dict"
_NAMEDTUPLE = "namedtuple"


@dataclasses.dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree: a node kind, per-kind data and children."""

    kind: str
    aux: Any = None  # dict keys (tuple) or the namedtuple class
    children: tuple[TreeDef, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == _LEAF:
            return 1
        return sum(c.num_leaves for c in self.children)

    @property
    def is_leaf(self) -> bool:
        return self.kind == _LEAF

    def __str__(self) -> str:
        if self.kind == _LEAF:
            return "*"
        if self.kind == _NONE:
            return "None"
        inner = ", ".join(str(c) for c in self.children)
        if self.kind == _TUPLE:
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.kind == _LIST:
            return f"[{inner}]"
        if self.kind == _DICT:
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.aux, self.children)) + "}"
        return f"{self.aux.__name__}({inner})"


LEAF = TreeDef(_LEAF)


def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError:  # keys of mixed types: keep insertion order
        return tuple(d)


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                 ) -> tuple[list[Any], TreeDef]:
    """Flatten `tree` into (leaves, treedef)."""
    leaves: list[Any] = []

    def rec(x: Any) -> TreeDef:
        if is_leaf is not None and is_leaf(x):
            leaves.append(x)
            return LEAF
        if x is None:
            return TreeDef(_NONE)
        if _is_namedtuple(x):
            return TreeDef(_NAMEDTUPLE, type(x), tuple(rec(c) for c in x))
        if type(x) is tuple:
            return TreeDef(_TUPLE, None, tuple(rec(c) for c in x))
        if type(x) is list:
            return TreeDef(_LIST, None, tuple(rec(c) for c in x))
        if type(x) is dict:
            keys = _sorted_keys(x)
            return TreeDef(_DICT, keys, tuple(rec(x[k]) for k in keys))
        leaves.append(x)
        return LEAF

    treedef = rec(tree)
    return leaves, treedef


def tree_unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild the pytree of structure `treedef` from `leaves` (in flatten order)."""
    it = iter(leaves)

    def rec(t: TreeDef) -> Any:
        if t.kind == _LEAF:
            return next(it)
        if t.kind == _NONE:
            return None
        kids = [rec(c) for c in t.children]
        if t.kind == _TUPLE:
            return tuple(kids)
        if t.kind == _LIST:
            return kids
        if t.kind == _DICT:
            return dict(zip(t.aux, kids))
        return t.aux(*kids)

    try:
        out = rec(treedef)
    except StopIteration:
        raise ValueError(f"tree_unflatten: too few leaves for structure {treedef}") from None
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over for structure {treedef}")
    return out


_KEY_TYPES = {"str": str, "int": int, "bool": bool}


def treedef_to_json(treedef: TreeDef) -> Any:
    """`treedef` as JSON-ready data (exported artifacts store their structures so).

    Dict keys must be str, int or bool; a namedtuple is stored by its module,
    qualified name and fields. Raises TypeError for anything else.
    """
    out: dict[str, Any] = {"kind": treedef.kind}
    if treedef.kind == _DICT:
        keys = []
        for k in treedef.aux:
            if type(k) not in (str, int, bool):
                raise TypeError(f"a dict key {k!r} of type {type(k).__name__} cannot be "
                                "stored (keys of str, int or bool can)")
            keys.append([type(k).__name__, k])
        out["keys"] = keys
    elif treedef.kind == _NAMEDTUPLE:
        cls = treedef.aux
        out["namedtuple"] = [cls.__module__, cls.__qualname__, list(cls._fields)]
    if treedef.children:
        out["children"] = [treedef_to_json(c) for c in treedef.children]
    return out


def _namedtuple_class(module: str, qualname: str, fields: list[str]) -> type:
    """The namedtuple class `module.qualname` if it imports with these fields, else a
    namedtuple of the same name and fields (the loading program may lack the module)."""
    import collections
    import importlib

    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and list(getattr(obj, "_fields", ())) == fields:
            return obj
    except Exception:  # noqa: BLE001 - any failure to import falls back to a look-alike
        pass
    return collections.namedtuple(qualname.rsplit(".", 1)[-1], fields)  # type: ignore[misc]


def treedef_from_json(data: Any) -> TreeDef:
    """The inverse of `treedef_to_json`; ValueError for malformed data."""
    try:
        kind = data["kind"]
        children = tuple(treedef_from_json(c) for c in data.get("children", ()))
        if kind == _DICT:
            aux: Any = tuple(_KEY_TYPES[t](k) for t, k in data["keys"])
        elif kind == _NAMEDTUPLE:
            aux = _namedtuple_class(*data["namedtuple"])
        elif kind in (_LEAF, _NONE, _TUPLE, _LIST):
            aux = None
        else:
            raise ValueError(f"unknown pytree node kind {kind!r}")
    except (KeyError, TypeError) as err:
        raise ValueError(f"malformed pytree structure: {err!r}") from None
    return TreeDef(kind, aux, children)


def tree_leaves(tree: Any) -> list[Any]:
    return tree_flatten(tree)[0]


def tree_structure(tree: Any) -> TreeDef:
    return tree_flatten(tree)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply `f` to corresponding leaves of `tree` and of each tree in `rest`."""
    leaves, treedef = tree_flatten(tree)
    others = []
    for r in rest:
        r_leaves, r_def = tree_flatten(r)
        if r_def != treedef:
            raise ValueError(f"tree_map: structures differ: {treedef} vs {r_def}")
        others.append(r_leaves)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


__all__ = [
    "TreeDef",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]
