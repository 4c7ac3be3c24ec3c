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
