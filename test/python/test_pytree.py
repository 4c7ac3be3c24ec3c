"""Pytrees: flatten/unflatten of nested tuples, lists, dicts, namedtuples and None."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from mlir_autodiff import pytree

Pair = collections.namedtuple("Pair", ["a", "b"])


@pytest.mark.parametrize("tree,n", [
    (1.0, 1),
    (None, 0),
    ((), 0),
    ([1, 2, 3], 3),
    ({"b": 1, "a": (2, [3, None])}, 3),
    (Pair(1, {"x": 2}), 2),
    ([np.zeros(2), (np.ones(3),)], 2),
])
def test_roundtrip(tree: object, n: int) -> None:
    leaves, treedef = pytree.tree_flatten(tree)
    assert len(leaves) == n == treedef.num_leaves
    rebuilt = pytree.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is type(tree)
    assert pytree.tree_structure(rebuilt) == treedef
    assert repr(pytree.tree_map(lambda v: 0, rebuilt)) == repr(pytree.tree_map(lambda v: 0, tree))


def test_dict_keys_are_sorted_and_structures_hashable() -> None:
    leaves, t1 = pytree.tree_flatten({"b": 2, "a": 1})
    assert leaves == [1, 2]
    _, t2 = pytree.tree_flatten({"a": 10, "b": 20})
    assert t1 == t2 and hash(t1) == hash(t2)
    assert pytree.tree_structure((1, 2)) != pytree.tree_structure([1, 2])
    assert pytree.tree_structure((1, None)) != pytree.tree_structure((1, 2))
    assert str(pytree.tree_structure({"a": (1, [2])})) == "{'a': (*, [*])}"


def test_tree_map_multiple_trees() -> None:
    out = pytree.tree_map(lambda x, y: x + y, {"a": 1, "b": (2, 3)}, {"a": 10, "b": (20, 30)})
    assert out == {"a": 11, "b": (22, 33)}
    with pytest.raises(ValueError, match="structures differ"):
        pytree.tree_map(lambda x, y: x, (1, 2), [1, 2])


def test_unflatten_checks_leaf_count() -> None:
    _, t = pytree.tree_flatten((1, 2))
    with pytest.raises(ValueError, match="left over"):
        pytree.tree_unflatten(t, [1, 2, 3])
    with pytest.raises(ValueError, match="too few"):
        pytree.tree_unflatten(t, [1])


def test_is_leaf_and_leaves() -> None:
    tree = {"p": (1, 2), "q": [3]}
    leaves, t = pytree.tree_flatten(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), 3]
    assert pytree.tree_leaves(tree) == [1, 2, 3]
    assert pytree.tree_unflatten(t, ["x", "y"]) == {"p": "x", "q": ["y"]}
