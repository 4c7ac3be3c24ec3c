"""`mlir_autodiff.scipy.linalg`: scipy.linalg's triangular and Cholesky solvers.

Algorithms and derivative rules are in `mlir_autodiff.linalg` (jax's
formulas); matrices may carry leading batch dimensions.
"""

from __future__ import annotations

from typing import Any

from .. import linalg as _L
from .. import numpy as _anp

__all__ = ["cho_factor", "cho_solve", "cholesky", "solve_triangular"]

_TRANS = {0: 0, 1: 1, 2: 1, "N": 0, "T": 1, "C": 1}


def solve_triangular(a: Any, b: Any, trans: Any = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True) -> Any:
    """x with a x = b (trans 0/'N') or a^T x = b (1/'T', 2/'C'); only the `lower`
    (else upper) triangle of a is read, its diagonal taken as 1 for unit_diagonal."""
    del overwrite_b, check_finite
    if trans not in _TRANS:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', "
                         f"got {trans!r}")
    return _L.triangular_solve(a, b, bool(lower), _TRANS[trans], bool(unit_diagonal))


def cholesky(a: Any, lower: bool = False, overwrite_a: bool = False,
             check_finite: bool = True) -> Any:
    """The Cholesky factor: upper (a = U^T U) by default, lower with lower=True.
    Reads that triangle of a only (as scipy; jax symmetrizes a instead)."""
    del overwrite_a, check_finite
    low = _L.cholesky(a, "L" if lower else "U")
    return low if lower else _anp.swapaxes(low, -1, -2)


def cho_factor(a: Any, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True) -> tuple[Any, bool]:
    """(c, lower) for cho_solve: c holds the factor in its `lower` (else upper)
    triangle; the other triangle is zero here (scipy leaves garbage there)."""
    return cholesky(a, lower=lower), bool(lower)


def cho_solve(c_and_lower: tuple[Any, bool], b: Any, overwrite_b: bool = False,
              check_finite: bool = True) -> Any:
    """x with a x = b from cho_factor(a)'s (c, lower)."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    if lower:
        y = solve_triangular(c, b, trans=0, lower=True)
        return solve_triangular(c, y, trans=1, lower=True)
    y = solve_triangular(c, b, trans=1, lower=False)
    return solve_triangular(c, y, trans=0, lower=False)
