"""`mlir_autodiff.tree_util`: JAX's `jax.tree_util` API over the project's pytrees.

    from mlir_autodiff import tree_util

    @tree_util.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class Params:
        w: Any
        b: Any
        act: str = dataclasses.field(default="tanh", metadata={"static": True})

Registered types are nodes for every transform (`jit`, `grad`, `vjp`, `jvp`,
`vmap` in_axes prefixes, `jacfwd`/`jacrev`, `scan` carries). The
implementation lives in `mlir_autodiff.pytree`; this module is its public name.
"""

from __future__ import annotations

from .pytree import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    TreeDef,
    all_leaves,
    keystr,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_pytree_with_keys,
    register_static,
    tree_all,
    tree_flatten,
    tree_flatten_with_path,
    tree_leaves,
    tree_leaves_with_path,
    tree_map,
    tree_map_with_path,
    tree_reduce,
    tree_structure,
    tree_transpose,
    tree_unflatten,
    treedef_children,
)

#: jax.tree_util's name for a structure.
PyTreeDef = TreeDef

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "PyTreeDef",
    "SequenceKey",
    "TreeDef",
    "all_leaves",
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
    "treedef_children",
]
