"""`mlir_autodiff.numpy.linalg`: numpy.linalg's names (algorithms and rules in linalg.py).

Results follow numpy.linalg (shapes, orders, batching over leading
dimensions); derivatives are jax's. `eigh` and `svd` are Jacobi iterations
in our own IR: results to a few ulps of the matrix's norm (see linalg.py);
their derivatives are undefined at repeated eigenvalues / singular values,
as jax's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import linalg as _L
from . import numpy as _anp

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "norm", "qr", "slogdet", "solve",
           "svd"]


def solve(a: Any, b: Any) -> Any:
    """x with a @ x = b (LU with partial pivoting); b is a vector only when 1-d."""
    return _L.solve(a, b)


def inv(a: Any) -> Any:
    """The inverse of a (LU with partial pivoting)."""
    return _L.inv(a)


def det(a: Any) -> Any:
    """The determinant (product of U's diagonal times the permutation's sign)."""
    return _L.det(a)


def slogdet(a: Any) -> tuple[Any, Any]:
    """(sign, log|det|)."""
    return _L.slogdet(a)


def cholesky(a: Any) -> Any:
    """The lower Cholesky factor (reads the lower triangle, as numpy)."""
    return _L.cholesky(a)


def qr(a: Any, mode: str = "reduced") -> Any:
    """(Q, R) for mode 'reduced' / 'complete', R for mode 'r' (Householder, LAPACK's signs)."""
    return _L.qr(a, mode)


def eigh(a: Any, UPLO: str = "L") -> tuple[Any, Any]:
    """(eigenvalues ascending, eigenvectors as columns) of a symmetric matrix.

    The triangle named by UPLO is read (the other is ignored, as numpy)."""
    return _L.eigh(_L.symmetric_from(a, UPLO, "eigh"))


def eigvalsh(a: Any, UPLO: str = "L") -> Any:
    """The eigenvalues of a symmetric matrix, ascending."""
    return eigh(a, UPLO)[0]


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> Any:
    """(U, S, Vh) with S descending, or S for compute_uv=False (one-sided Jacobi)."""
    del hermitian  # a real symmetric matrix needs no special path here
    return _L.svd(a, full_matrices, compute_uv)


def _vector_norm(x: Any, ord: Any, axis: int, keepdims: bool) -> Any:
    ax = _anp.abs(x)
    if ord is None or ord == 2:
        return _anp.sqrt(_anp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return _anp.max(ax, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return _anp.min(ax, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _anp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _anp.sum(ax, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: invalid norm order {ord!r} for vectors")
    p = float(ord)
    return _anp.sum(ax ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, int], keepdims: bool) -> Any:
    r, c = axes
    ax = _anp.abs(x)
    if ord is None or ord == "fro":
        out = _anp.sqrt(_anp.sum(x * x, axis=axes))
    elif ord in (1, -1):
        s = _anp.sum(ax, axis=r)
        out = (_anp.max if ord == 1 else _anp.min)(s, axis=c - 1 if c > r else c)
    elif ord in (np.inf, -np.inf):
        s = _anp.sum(ax, axis=c)
        out = (_anp.max if ord == np.inf else _anp.min)(s, axis=r - 1 if r > c else r)
    elif ord in (2, -2, "nuc"):
        m = _anp.moveaxis(x, (r, c), (-2, -1))
        s = _L.svd(m, False, False)
        out = (_anp.sum(s, axis=-1) if ord == "nuc" else
               s[..., 0] if ord == 2 else s[..., -1])
    else:
        raise ValueError(f"norm: invalid norm order {ord!r} for matrices")
    if keepdims:
        out = _anp.expand_dims(out, tuple(sorted(axes)))
    return out


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy.linalg.norm: vector orders (None/2, 1, inf, -inf, 0, any p) and matrix
    orders ('fro', 'nuc', 1, -1, inf, -inf, 2, -2 through the singular values)."""
    x = _L._float(x)
    nd = x.ndim
    if axis is None:
        if ord is None:
            out = _anp.sqrt(_anp.sum(x * x))
            return _anp.reshape(out, (1,) * nd) if keepdims else out
        if nd == 1:
            axis = 0
        elif nd == 2:
            axis = (0, 1)
        else:
            raise ValueError("norm: improper number of dimensions to norm")
    if isinstance(axis, (tuple, list)):
        if len(axis) == 1:
            axis = axis[0]
        elif len(axis) == 2:
            axes = (int(axis[0]) % nd, int(axis[1]) % nd)
            if axes[0] == axes[1]:
                raise ValueError("norm: duplicate axes given")
            return _matrix_norm(x, ord, axes, keepdims)
        else:
            raise ValueError("norm: improper number of dimensions to norm")
    return _vector_norm(x, ord, int(axis) % nd, keepdims)
