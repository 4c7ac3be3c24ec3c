"""Resolving the items of an index against an array's rank (shared by jit and eager).

`x[idx]` is written with at most one ellipsis and may leave trailing
dimensions out; both `numpy`'s basic indexing, `indexing`'s integer-array
indexing and `eager`'s `.at[]` first turn the items into one item per
operand dimension (plus `None`s, which add dimensions).
"""

from __future__ import annotations

from typing import Any


def expand_ellipsis(items: list[Any], rank: int, site: str = "") -> list[Any]:
    """`items` with the ellipsis replaced by full slices, or full slices appended
    for the dimensions no item names; `site` (`file.py:12`) goes into the errors."""
    at = f" (at {site})" if site else ""
    ellipses = [k for k, it in enumerate(items) if it is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'){at}")
    n_real = sum(1 for it in items if it is not None and it is not Ellipsis)
    if n_real > rank:
        raise IndexError(f"too many indices for array: array is {rank}-dimensional, "
                         f"but {n_real} were indexed{at}")
    fill = [slice(None)] * (rank - n_real)
    if ellipses:
        k = ellipses[0]
        return items[:k] + fill + items[k + 1:]
    return items + fill
