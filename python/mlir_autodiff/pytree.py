"""Pytrees: nested tuples, lists, dicts and namedtuples of leaves (JAX's convention),
plus node types registered by the user.

`tree_flatten(tree)` returns the leaves in a fixed order and a hashable
`TreeDef`; `tree_unflatten(treedef, leaves)` rebuilds the structure. `None`
is a structure node with no leaves (so an optional argument may be None).
Dict keys are visited in sorted order, as in JAX, so `{"b": .., "a": ..}`
and `{"a": .., "b": ..}` have the same structure.

Other types are leaves unless registered: `register_pytree_node(cls,
flatten, unflatten)` (flatten returns (children, aux_data), aux_data hashable),
`register_pytree_node_class`, `register_dataclass` (data fields are
children, meta fields part of the structure) and `register_static` (no
children; the object itself is the structure). A registered type is a node
everywhere: `jit`, `grad`, `vjp`, `jvp`, `vmap` (in_axes prefixes too),
`jacfwd`/`jacrev` and `scan` carries all flatten with this module.
`mlir_autodiff.tree_util` is the public face (JAX's `jax.tree_util`), with
key paths (`tree_flatten_with_path`, `keystr`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from typing import Any

_LEAF = "leaf"
_NONE = "none"
_TUPLE = "tuple"
_LIST = "list"
_DICT = "dict"
_NAMEDTUPLE = "namedtuple"
_CUSTOM = "custom"


@dataclasses.dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree: a node kind, per-kind data and children.

    `aux` is the dict keys (a tuple), the namedtuple class, or for a
    registered node `(cls, aux_data)`.
    """

    kind: str
    aux: Any = None
    children: tuple[TreeDef, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == _LEAF:
            return 1
        return sum(c.num_leaves for c in self.children)

    @property
    def num_nodes(self) -> int:
        return 1 + sum(c.num_nodes for c in self.children)

    @property
    def is_leaf(self) -> bool:
        return self.kind == _LEAF

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        return tree_unflatten(self, leaves)

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The subtrees of `tree` at the leaves of this structure (a prefix of `tree`'s)."""
        return flatten_up_to(self, tree)

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
        if self.kind == _CUSTOM:
            cls, data = self.aux
            return f"CustomNode({cls.__name__}[{data!r}], [{inner}])"
        return f"{self.aux.__name__}({inner})"


LEAF = TreeDef(_LEAF)


# --------------------------------------------------------------------------- key paths

@dataclasses.dataclass(frozen=True)
class DictKey:
    """The key of a dict entry in a key path (`['w']`)."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The index of a tuple or list entry in a key path (`[0]`)."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The attribute of a namedtuple or dataclass field in a key path (`.w`)."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """The position of a child of a node registered without keys."""

    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


def keystr(keys: tuple[Any, ...], *, simple: bool = False, separator: str = "") -> str:
    """A key path as a string: `"['a'][0].w"`; with `simple=True` the bare keys joined
    by `separator` (`"a/0/w"` with separator "/")."""
    if not simple:
        return separator.join(str(k) for k in keys)

    def bare(k: Any) -> str:
        for field in ("key", "idx", "name"):
            if hasattr(k, field):
                return str(getattr(k, field))
        return str(k)

    return separator.join(bare(k) for k in keys)


# --------------------------------------------------------------------------- registry

@dataclasses.dataclass(frozen=True)
class _Node:
    flatten: Callable[[Any], tuple[Iterable[Any], Hashable]]
    unflatten: Callable[[Any, Iterable[Any]], Any]
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Hashable]] | None


_REGISTRY: dict[type, _Node] = {}
_BUILTIN = (type(None), tuple, list, dict)


def _register(cls: type, node: _Node, who: str) -> None:
    if not isinstance(cls, type):
        raise TypeError(f"{who}: expected a class, got {cls!r}")
    if cls in _BUILTIN or cls in _REGISTRY:
        raise ValueError(f"{who}: {cls.__name__} is already registered as a pytree node")
    _REGISTRY[cls] = node


def register_pytree_node(nodetype: type, flatten_func: Callable[[Any], tuple[Any, Any]],
                         unflatten_func: Callable[[Any, Any], Any]) -> None:
    """Make `nodetype` a pytree node (jax.tree_util.register_pytree_node).

    `flatten_func(x)` returns `(children, aux_data)`: the children are
    flattened further, `aux_data` (hashable, compared with ==) is part of the
    structure, so it must not hold arrays. `unflatten_func(aux_data, children)`
    rebuilds a node; the transforms call it with traced values, so it must
    not inspect the children.
    """
    _register(nodetype, _Node(flatten_func, unflatten_func, None), "register_pytree_node")


def register_pytree_with_keys(nodetype: type,
                              flatten_with_keys: Callable[[Any], tuple[Any, Any]],
                              unflatten_func: Callable[[Any, Any], Any],
                              flatten_func: Callable[[Any], tuple[Any, Any]] | None = None
                              ) -> None:
    """`register_pytree_node` whose flatten returns `((key, child), ...)` pairs, so key
    paths name the children (jax.tree_util.register_pytree_with_keys)."""
    if flatten_func is None:
        def flatten_func(x: Any) -> tuple[Any, Any]:
            pairs, aux = flatten_with_keys(x)
            return [c for _, c in pairs], aux

    _register(nodetype, _Node(flatten_func, unflatten_func, flatten_with_keys),
              "register_pytree_with_keys")


def register_pytree_node_class(cls: type) -> type:
    """Class decorator: `cls.tree_flatten(self) -> (children, aux_data)` and the
    classmethod `cls.tree_unflatten(aux_data, children)` make it a node."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_dataclass(nodetype: type, data_fields: Iterable[str] | None = None,
                       meta_fields: Iterable[str] | None = None,
                       drop_fields: Iterable[str] = ()) -> type:
    """Make a dataclass a pytree node (jax.tree_util.register_dataclass); usable as a
    decorator.

    `data_fields` are children (arrays, or pytrees of them); `meta_fields` are
    static (hashable) and part of the structure. Without both lists, `nodetype`
    must be a dataclass: fields declared `dataclasses.field(metadata={"static":
    True})` are meta, the other init fields data. Rebuilding calls
    `nodetype(**fields)`, so frozen dataclasses work.
    """
    who = "register_dataclass"
    if data_fields is None and meta_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(f"{who}: {nodetype!r} is not a dataclass; pass data_fields and "
                            "meta_fields")
        drop = set(drop_fields)
        fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop]
        meta = tuple(f.name for f in fields if f.metadata.get("static", False))
        data = tuple(f.name for f in fields if not f.metadata.get("static", False))
    elif data_fields is None or meta_fields is None:
        raise TypeError(f"{who}: pass both data_fields and meta_fields, or neither")
    else:
        data, meta = tuple(data_fields), tuple(meta_fields)
        if dataclasses.is_dataclass(nodetype):
            init = {f.name for f in dataclasses.fields(nodetype) if f.init}
            given = set(data) | set(meta) | set(drop_fields)
            if given != init:
                raise ValueError(
                    f"{who}: data_fields, meta_fields and drop_fields must list the init "
                    f"fields of {nodetype.__name__} exactly once: missing "
                    f"{sorted(init - given)}, unknown {sorted(given - init)}")
        overlap = set(data) & set(meta)
        if overlap:
            raise ValueError(f"{who}: fields {sorted(overlap)} are both data and meta")

    def flatten_with_keys(x: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
        return ([(GetAttrKey(n), getattr(x, n)) for n in data],
                tuple(getattr(x, n) for n in meta))

    def flatten(x: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return [getattr(x, n) for n in data], tuple(getattr(x, n) for n in meta)

    def unflatten(aux: tuple[Any, ...], children: Iterable[Any]) -> Any:
        return nodetype(**dict(zip(data, children)), **dict(zip(meta, aux)))

    register_pytree_with_keys(nodetype, flatten_with_keys, unflatten, flatten)
    return nodetype


def register_static(cls: type) -> type:
    """Make `cls` a node without children (jax.tree_util.register_static): its
    instances (hashable) are part of the structure, as static arguments are."""
    register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux)
    return cls


# --------------------------------------------------------------------------- flatten

def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError:  # keys of mixed types: keep insertion order
        return tuple(d)


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _node(x: Any, with_keys: bool = False) -> tuple[str, Any, list[Any], list[Any]] | None:
    """One level of `x`: (kind, aux, children, keys), or None if `x` is a leaf. Keys
    are computed only `with_keys`."""
    node = _REGISTRY.get(type(x))
    if node is not None:
        if with_keys and node.flatten_with_keys is not None:
            pairs, data = node.flatten_with_keys(x)
            pairs = list(pairs)
            return (_CUSTOM, (type(x), data), [c for _, c in pairs], [k for k, _ in pairs])
        children, data = node.flatten(x)
        children = list(children)
        keys = [FlattenedIndexKey(i) for i in range(len(children))] if with_keys else []
        return _CUSTOM, (type(x), data), children, keys
    if x is None:
        return _NONE, None, [], []
    if _is_namedtuple(x):
        keys = [GetAttrKey(f) for f in type(x)._fields] if with_keys else []
        return _NAMEDTUPLE, type(x), list(x), keys
    if type(x) is tuple or type(x) is list:
        keys = [SequenceKey(i) for i in range(len(x))] if with_keys else []
        return (_TUPLE if type(x) is tuple else _LIST), None, list(x), keys
    if type(x) is dict:
        sk = _sorted_keys(x)
        return _DICT, sk, [x[k] for k in sk], ([DictKey(k) for k in sk] if with_keys else [])
    return None


def _flatten(tree: Any, is_leaf: Callable[[Any], bool] | None, with_keys: bool
             ) -> tuple[list[Any], list[tuple[Any, ...]], TreeDef]:
    leaves: list[Any] = []
    paths: list[tuple[Any, ...]] = []

    def rec(x: Any, path: tuple[Any, ...]) -> TreeDef:
        node = None if is_leaf is not None and is_leaf(x) else _node(x, with_keys)
        if node is None:
            leaves.append(x)
            paths.append(path)
            return LEAF
        kind, aux, children, keys = node
        if with_keys:
            kids = tuple(rec(c, path + (k,)) for c, k in zip(children, keys))
        else:
            kids = tuple(rec(c, path) for c in children)
        return TreeDef(kind, aux, kids)

    treedef = rec(tree, ())
    return leaves, paths, treedef


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                 ) -> tuple[list[Any], TreeDef]:
    """Flatten `tree` into (leaves, treedef); `is_leaf(x)` True stops at `x`."""
    leaves, _, treedef = _flatten(tree, is_leaf, False)
    return leaves, treedef


def tree_flatten_with_path(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                           ) -> tuple[list[tuple[tuple[Any, ...], Any]], TreeDef]:
    """([(key path, leaf), ...], treedef): each path a tuple of DictKey / SequenceKey /
    GetAttrKey / FlattenedIndexKey from the root to the leaf."""
    leaves, paths, treedef = _flatten(tree, is_leaf, True)
    return list(zip(paths, leaves)), treedef


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
        if t.kind == _CUSTOM:
            cls, data = t.aux
            node = _REGISTRY.get(cls)
            if node is None:
                raise ValueError(f"tree_unflatten: {cls.__name__} is not a registered "
                                 "pytree node")
            return node.unflatten(data, tuple(kids))
        return t.aux(*kids)

    try:
        out = rec(treedef)
    except StopIteration:
        raise ValueError(f"tree_unflatten: too few leaves for structure {treedef}") from None
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over for structure {treedef}")
    return out


def _same_node(t: TreeDef, kind: str, aux: Any) -> bool:
    if kind != t.kind:
        return False
    if kind == _DICT:
        return tuple(sorted(aux, key=repr)) == tuple(sorted(t.aux, key=repr))
    return aux == t.aux


def flatten_up_to(treedef: TreeDef, tree: Any) -> list[Any]:
    """The subtrees of `tree` at the leaves of `treedef`, which must be a prefix of
    `tree`'s structure (ValueError naming both otherwise)."""
    out: list[Any] = []

    def rec(t: TreeDef, x: Any) -> None:
        if t.kind == _LEAF:
            out.append(x)
            return
        node = _node(x)
        if node is None or not _same_node(t, node[0], node[1]) \
                or len(node[2]) != len(t.children):
            raise ValueError(f"tree structure {t} is not a prefix of the value's structure "
                             f"{tree_structure(x)}")
        kind, aux, children, _ = node
        if kind == _DICT:  # visit in treedef's key order
            children = [x[k] for k in t.aux]
        for c, k in zip(t.children, children):
            rec(c, k)

    rec(treedef, tree)
    return out


def treedef_children(treedef: TreeDef) -> list[TreeDef]:
    return list(treedef.children)


_KEY_TYPES = {"str": str, "int": int, "bool": bool}


def treedef_to_json(treedef: TreeDef) -> Any:
    """`treedef` as JSON-ready data (exported artifacts store their structures so).

    Dict keys must be str, int or bool; a namedtuple is stored by its module,
    qualified name and fields. Raises TypeError for anything else (registered
    nodes included).
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
    elif treedef.kind == _CUSTOM:
        raise TypeError(f"a registered pytree node ({treedef.aux[0].__name__}) cannot be "
                        "stored; pass its fields as tuples, lists, dicts or namedtuples")
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


# --------------------------------------------------------------------------- utilities

def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    return tree_flatten(tree, is_leaf)[1]


def _rest_leaves(who: str, treedef: TreeDef, rest: tuple[Any, ...]) -> list[list[Any]]:
    others = []
    for r in rest:
        try:
            others.append(flatten_up_to(treedef, r))
        except ValueError:
            raise ValueError(f"{who}: structures differ: {treedef} vs "
                             f"{tree_structure(r)}") from None
    return others


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply `f` to corresponding leaves of `tree` and of each tree in `rest` (each has
    `tree`'s structure, or `tree`'s structure as a prefix: then `f` gets its subtrees)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = _rest_leaves("tree_map", treedef, rest)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """`tree_map` whose `f` takes the leaf's key path first."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = _rest_leaves("tree_map_with_path", treedef, rest)
    return tree_unflatten(treedef, [f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])


def tree_leaves_with_path(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                          ) -> list[tuple[tuple[Any, ...], Any]]:
    return tree_flatten_with_path(tree, is_leaf)[0]


def all_leaves(iterable: Iterable[Any], is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """Whether every element of `iterable` is a leaf (None and containers are not)."""
    if is_leaf is None:
        return all(_node(x) is None for x in iterable)
    return all(tree_structure(x, is_leaf).is_leaf for x in iterable)


def tree_all(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """Whether every leaf of `tree` is truthy."""
    return all(tree_leaves(tree, is_leaf))


_NO_INIT = object()


def tree_reduce(function: Callable[[Any, Any], Any], tree: Any, initializer: Any = _NO_INIT,
                is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """functools.reduce of `function` over the leaves of `tree`."""
    import functools

    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INIT:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_transpose(outer_treedef: TreeDef, inner_treedef: TreeDef | None,
                   pytree_to_transpose: Any) -> Any:
    """A tree of structure outer(inner) as one of structure inner(outer)."""
    subtrees = flatten_up_to(outer_treedef, pytree_to_transpose)
    if inner_treedef is None:
        if not subtrees:
            raise ValueError("tree_transpose: cannot infer the inner structure of an empty "
                             "outer tree; pass inner_treedef")
        inner_treedef = tree_structure(subtrees[0])
    columns = [flatten_up_to(inner_treedef, s) for s in subtrees]
    per_inner = [tree_unflatten(outer_treedef, [col[j] for col in columns])
                 for j in range(inner_treedef.num_leaves)]
    return tree_unflatten(inner_treedef, per_inner)


__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "SequenceKey",
    "TreeDef",
    "all_leaves",
    "flatten_up_to",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_static",
    "tree_all",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
]
