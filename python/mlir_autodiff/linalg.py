"""Dense linear algebra in our own IR: factorizations as loops, derivatives by formula.

The algorithms are written with `lax.fori_loop` / `lax.while_loop` over whole
matrices (each step selects rows/columns with `where`, so every shape is
static); each factorization is a `custom_jvp` whose rule is the closed-form
derivative (the formulas jax uses), so no transform ever differentiates the
pivoting or the iterations. Reverse mode transposes those rules; higher orders
differentiate the rules. The triangular solves the rules apply to tangents are
plain substitution loops (linear in the tangent, no pivoting, no iteration to
convergence), differentiated and transposed by the passes like any loop.

Every public function takes a matrix or a stack of them (leading batch
dimensions, as numpy): the 2-d core is `vmap`ped over them.

- `lu(a)` -> (lu, perm, parity): partial pivoting (the row of largest |value|,
  the first on ties, as LAPACK's getrf), `a[perm] = L @ U`.
- `cholesky(a)`: lower factor, reading the lower triangle (numpy's UPLO='L');
  its derivative is taken for symmetric tangents (jax's).
- `eigh(a)`: cyclic Jacobi rotations until the off-diagonal is below
  `eps * |A|_F` (at most 40 sweeps): eigenvalues ascending, to a few ulps of
  |A|; eigenvectors orthonormal to a few ulps. Derivative: jax's formula with
  1/(w_j - w_i) off the diagonal: undefined (inf/nan) for repeated
  eigenvalues, as jax.
- `svd(a)`: one-sided (Hestenes) Jacobi on the columns of the taller
  orientation (same tolerance), singular values descending; U is completed to
  an orthonormal basis (zero singular values, `full_matrices=True`) by a
  Householder QR of the computed columns. Derivative: jax's formula
  (`full_matrices=False` or `compute_uv=False`; undefined for repeated
  singular values).
- `qr(a, mode)`: Householder reflections with LAPACK's signs (R's diagonal may
  be negative, as numpy). Derivative: jax's formula for m >= n, reduced
  (or complete with m == n).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from . import lax
from . import numpy as anp
from .batching import vmap
from .custom import custom_jvp

_MAX_SWEEPS = 40


# --------------------------------------------------------------------------- helpers

def _float(a: Any) -> Any:
    a = anp.asarray(a)
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    return a


def _square(a: Any, who: str) -> Any:
    a = _float(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{who}: expected a square matrix (or a stack of them), "
                         f"got shape {tuple(a.shape)}")
    return a


def batched(core: Callable[..., Any], *arrays: Any, core_ndims: tuple[int, ...]) -> Any:
    """`core` applied to the trailing `core_ndims[i]` dimensions of `arrays[i]`, vmapped
    over the leading (batch) dimensions, which broadcast as numpy's."""
    batch_shapes = [tuple(a.shape[:a.ndim - k]) for a, k in zip(arrays, core_ndims)]
    batch = np.broadcast_shapes(*batch_shapes)
    if not batch:
        return core(*arrays)
    arrays = [anp.broadcast_to(a, batch + tuple(a.shape[a.ndim - k:]))
              for a, k in zip(arrays, core_ndims)]
    nb = int(np.prod(batch))
    flat = [anp.reshape(a, (nb,) + tuple(a.shape[len(batch):])) for a in arrays]
    out = vmap(core)(*flat)
    return _unflatten_batch(out, batch)


def _unflatten_batch(out: Any, batch: tuple[int, ...]) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_unflatten_batch(o, batch) for o in out)
    return anp.reshape(out, batch + tuple(out.shape[1:]))


def _mT(x: Any) -> Any:
    return anp.swapaxes(x, -1, -2)


def _idx(n: int) -> Any:
    return anp.arange(n)


def _set_row(x: Any, i: Any, row: Any) -> Any:
    return anp.where((_idx(x.shape[0]) == i)[:, None], row[None, :], x)


def _set_col(x: Any, j: Any, col: Any) -> Any:
    return anp.where((_idx(x.shape[1]) == j)[None, :], col[:, None], x)


def _row(x: Any, i: Any) -> Any:
    """x[i] for a traced i, as a masked sum: no dynamic slice, so every transform
    (vmap of the reverse mode of the loops included) sees only elementwise ops."""
    return anp.sum(anp.where((_idx(x.shape[0]) == i)[:, None], x, 0), axis=0)


def _col(x: Any, j: Any) -> Any:
    return anp.sum(anp.where((_idx(x.shape[1]) == j)[None, :], x, 0), axis=1)


def _entry(x: Any, i: Any, j: Any) -> Any:
    return anp.sum(anp.where((_idx(x.shape[0]) == i)[:, None]
                             & (_idx(x.shape[1]) == j)[None, :], x, 0))


# --------------------------------------------------------------------------- triangular solves

def trsm(t: Any, b: Any, lower: bool, unit_diagonal: bool = False) -> Any:
    """x with t @ x = b (t n×n triangular, only its `lower`/upper triangle read;
    b n×k): substitution, one row per step. No custom rule: it is linear in b."""
    n = t.shape[0]
    idx = _idx(n)

    def body(step: Any, x: Any) -> Any:
        i = step if lower else n - 1 - step
        row = _row(t, i)
        off = anp.where(idx < i, row, 0) if lower else anp.where(idx > i, row, 0)
        xi = _row(b, i) - off @ x
        if not unit_diagonal:
            xi = xi / anp.sum(anp.where(idx == i, row, 0))
        return _set_row(x, i, xi)

    return lax.fori_loop(0, n, body, anp.zeros_like(b))


def _tri(t: Any, lower: bool, unit_diagonal: bool) -> Any:
    """The triangle trsm reads, as a full matrix (its diagonal 1 for unit_diagonal)."""
    n = t.shape[0]
    if unit_diagonal:
        m = anp.tril(t, -1) if lower else anp.triu(t, 1)
        return m + anp.eye(n, dtype=t.dtype)
    return anp.tril(t) if lower else anp.triu(t)


@functools.lru_cache(maxsize=None)
def _triangular_solve(lower: bool, unit_diagonal: bool) -> Any:
    @custom_jvp
    def solve_tri(t: Any, b: Any) -> Any:
        return trsm(t, b, lower, unit_diagonal)

    @solve_tri.defjvp
    def solve_tri_jvp(primals: Any, tangents: Any) -> Any:
        (t, b), (dt, db) = primals, tangents
        x = solve_tri(t, b)
        dtri = anp.tril(dt, -1 if unit_diagonal else 0) if lower else \
            anp.triu(dt, 1 if unit_diagonal else 0)
        return x, trsm(t, db - dtri @ x, lower, unit_diagonal)

    return solve_tri


def solve_triangular_2d(t: Any, b: Any, lower: bool, trans: int, unit_diagonal: bool) -> Any:
    """t n×n, b n×k; trans 0: t x = b, 1 or 2: t^T x = b."""
    if trans:
        t, lower = t.T, not lower
    return _triangular_solve(bool(lower), bool(unit_diagonal))(t, b)


# --------------------------------------------------------------------------- LU

def _lu_loop(a: Any) -> tuple[Any, Any, Any]:
    n = a.shape[0]
    idx = _idx(n)

    def body(k: Any, carry: Any) -> Any:
        a, perm, parity = carry
        col = _col(a, k)
        p = anp.argmax(anp.where(idx >= k, anp.abs(col), -1.0))
        src = anp.where(idx == k, p, anp.where(idx == p, k, idx))
        a = a[src]
        perm = perm[src]
        parity = anp.where(p != k, -parity, parity)
        rowk = _row(a, k)
        pivot = anp.sum(anp.where(idx == k, rowk, 0))
        col = _col(a, k)
        below = idx > k
        l = anp.where(below, col / anp.where(pivot == 0, 1, pivot), 0)
        a = a - l[:, None] * anp.where(idx > k, rowk, 0)[None, :]
        a = anp.where(below[:, None] & (idx == k)[None, :], l[:, None], a)
        return a, perm, parity

    init = (a, idx.astype(np.int32), anp.ones((), a.dtype))
    return lax.fori_loop(0, n, body, init)


def _permute_rows(perm: Any, x: Any) -> Any:
    """x[perm] as a product with the permutation matrix: the derivatives of a
    gather (a scatter loop) would be batched again under vmap of a Hessian."""
    p = (perm[:, None] == _idx(x.shape[0])[None, :]).astype(x.dtype)
    return p @ x


def _lu_split(lu_: Any) -> tuple[Any, Any]:
    n = lu_.shape[0]
    return anp.tril(lu_, -1) + anp.eye(n, dtype=lu_.dtype), anp.triu(lu_)


@custom_jvp
def lu_2d(a: Any) -> tuple[Any, Any, Any]:
    """(lu, perm, parity) of a square matrix: a[perm] = L U, L unit lower (below the
    diagonal of lu), U upper; parity = det of the permutation (+-1)."""
    return _lu_loop(a)


@lu_2d.defjvp
def _lu_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    lu_, perm, parity = lu_2d(a)
    lo, up = _lu_split(lu_)
    # jax's rule: X = L^-1 P dA U^-1, dL = L strict_lower(X), dU = upper(X) U
    y = trsm(lo, _permute_rows(perm, da), True, True)
    x = trsm(up.T, y.T, True).T
    dlu = lo @ anp.tril(x, -1) + anp.triu(x) @ up
    return (lu_, perm, parity), (dlu, anp.zeros_like(perm), anp.zeros_like(parity))


def lu_solve_2d(lu_: Any, perm: Any, b: Any) -> Any:
    y = trsm(lu_, _permute_rows(perm, b), True, True)
    return trsm(lu_, y, False)


@custom_jvp
def solve_2d(a: Any, b: Any) -> Any:
    lu_, perm, _ = lu_2d(a)
    return lu_solve_2d(lu_, perm, b)


@solve_2d.defjvp
def _solve_jvp(primals: Any, tangents: Any) -> Any:
    (a, b), (da, db) = primals, tangents
    lu_, perm, _ = lu_2d(a)
    x = lu_solve_2d(lu_, perm, b)
    return x, lu_solve_2d(lu_, perm, db - da @ x)


def _det_parts(a: Any) -> tuple[Any, Any, Any, Any]:
    lu_, perm, parity = lu_2d(a)
    return lu_, perm, parity, anp.diagonal(lu_)


@custom_jvp
def det_2d(a: Any) -> Any:
    _, _, parity, d = _det_parts(a)
    return parity * anp.prod(d)


@det_2d.defjvp
def _det_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    lu_, perm, parity, d = _det_parts(a)
    y = parity * anp.prod(d)
    return y, y * anp.trace(lu_solve_2d(lu_, perm, da))


@custom_jvp
def slogdet_2d(a: Any) -> tuple[Any, Any]:
    _, _, parity, d = _det_parts(a)
    sign = parity * anp.prod(anp.sign(d))
    logabs = anp.sum(anp.log(anp.abs(d)))
    return sign, logabs


@slogdet_2d.defjvp
def _slogdet_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    lu_, perm, parity, d = _det_parts(a)
    sign = parity * anp.prod(anp.sign(d))
    logabs = anp.sum(anp.log(anp.abs(d)))
    return (sign, logabs), (anp.zeros_like(sign), anp.trace(lu_solve_2d(lu_, perm, da)))


# --------------------------------------------------------------------------- Cholesky

def _cholesky_loop(a: Any) -> Any:
    n = a.shape[0]
    idx = _idx(n)

    def body(j: Any, l_: Any) -> Any:
        v = _col(a, j) - l_ @ _row(l_, j)
        d = anp.sqrt(anp.sum(anp.where(idx == j, v, 0)))
        col = anp.where(idx > j, v / d, anp.where(idx == j, d, 0))
        return _set_col(l_, j, col)

    return lax.fori_loop(0, n, body, anp.zeros_like(a))


@custom_jvp
def cholesky_2d(a: Any) -> Any:
    return _cholesky_loop(a)


@cholesky_2d.defjvp
def _cholesky_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    l_ = cholesky_2d(a)
    da = (da + da.T) / 2
    # jax's rule: dL = L Phi(L^-1 dA L^-T), Phi = lower triangle with half the diagonal
    y = trsm(l_, da, True)
    x = trsm(l_, y.T, True)
    n = a.shape[0]
    phi = anp.tril(x) - anp.eye(n, dtype=x.dtype) * x / 2
    return l_, l_ @ phi


# --------------------------------------------------------------------------- Jacobi rotations

def _rotation(app: Any, aqq: Any, apq: Any) -> tuple[Any, Any]:
    """(c, s) of the rotation that zeroes apq of [[app, apq], [apq, aqq]]."""
    zero = apq == 0
    safe = anp.where(zero, 1, apq)
    theta = (aqq - app) / (2 * safe)
    sgn = anp.where(theta >= 0, 1.0, -1.0).astype(app.dtype)
    at = anp.abs(theta)
    big = at > 0.5 * float(np.sqrt(np.finfo(app.dtype).max))   # theta**2 would overflow
    t = sgn / (at + anp.sqrt(anp.where(big, 1, theta * theta) + 1))
    t = anp.where(big, 1 / (2 * theta), t)
    t = anp.where(zero, 0, t)
    c = 1 / anp.sqrt(t * t + 1)
    return c, t * c


@functools.lru_cache(maxsize=None)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    ps, qs = zip(*[(p, q) for p in range(n) for q in range(p + 1, n)]) if n > 1 else ((), ())
    return np.asarray(ps, np.int64), np.asarray(qs, np.int64)


def _rotate_cols(x: Any, p: Any, q: Any, c: Any, s: Any) -> Any:
    cp, cq = _col(x, p), _col(x, q)
    x = _set_col(x, p, c * cp - s * cq)
    return _set_col(x, q, s * cp + c * cq)


def _eps(dtype: np.dtype) -> float:
    return float(np.finfo(dtype).eps)


def _eigh_loop(a: Any) -> tuple[Any, Any]:
    n = a.shape[0]
    if n == 1:
        return anp.reshape(a, (1,)), anp.ones_like(a)
    ps, qs = _pairs(n)
    npairs = len(ps)
    pa, qa = anp.asarray(ps), anp.asarray(qs)
    idx = _idx(n)
    offmask = idx[:, None] != idx[None, :]
    tol2 = (_eps(a.dtype) * 0.5) ** 2 * anp.sum(a * a)

    def sweep(_: Any, carry: Any) -> Any:
        a, v = carry
        p, q = pa[_], qa[_]
        c, s = _rotation(_entry(a, p, p), _entry(a, q, q), _entry(a, p, q))
        a = _rotate_cols(a, p, q, c, s)
        a = _rotate_cols(a.T, p, q, c, s).T
        return a, _rotate_cols(v, p, q, c, s)

    def cond(state: Any) -> Any:
        a, _, k = state
        return (anp.sum(anp.where(offmask, a * a, 0)) > tol2) & (k < _MAX_SWEEPS)

    def body(state: Any) -> Any:
        a, v, k = state
        a, v = lax.fori_loop(0, npairs, sweep, (a, v))
        return a, v, k + 1

    a = (a + a.T) / 2
    a, v, _ = lax.while_loop(cond, body, (a, anp.eye(n, dtype=a.dtype), anp.asarray(0)))
    w = anp.diagonal(a)
    order = anp.argsort(w)
    return w[order], v[:, order]


@custom_jvp
def eigh_2d(a: Any) -> tuple[Any, Any]:
    return _eigh_loop(a)


@eigh_2d.defjvp
def _eigh_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    w, v = eigh_2d(a)
    da = (da + da.T) / 2
    vdv = v.T @ da @ v
    n = a.shape[0]
    eye = anp.eye(n, dtype=w.dtype)
    diff = w[None, :] - w[:, None]
    f = 1 / (diff + eye) - eye
    return (w, v), (anp.diagonal(vdv), v @ (f * vdv))


# --------------------------------------------------------------------------- QR

def _householder_loop(a: Any) -> tuple[Any, Any]:
    """Complete Q (m×m) and R (m×n) by Householder reflections, LAPACK's signs."""
    m, n = a.shape
    idx = _idx(m)

    def body(k: Any, carry: Any) -> Any:
        r, q = carry
        x = anp.where(idx >= k, _col(r, k), 0)
        alpha = anp.sum(anp.where(idx == k, x, 0))
        tail = anp.where(idx > k, x, 0)
        sub = anp.sqrt(anp.sum(tail * tail))
        norm = anp.sqrt(alpha * alpha + sub * sub)
        beta = -anp.where(alpha >= 0, 1.0, -1.0).astype(a.dtype) * norm
        noop = sub == 0
        v0 = alpha - beta
        v = anp.where(idx == k, 1, tail / anp.where(noop, 1, v0))
        tau = anp.where(noop, 0, (beta - alpha) / anp.where(noop, 1, beta))
        r = r - tau * v[:, None] * (v @ r)[None, :]
        q = q - tau * (q @ v)[:, None] * v[None, :]
        return r, q

    steps = min(m - 1, n)
    r, q = lax.fori_loop(0, steps, body, (a, anp.eye(m, dtype=a.dtype)))
    return q, anp.triu(r)


@custom_jvp
def qr_reduced_2d(a: Any) -> tuple[Any, Any]:
    """Reduced QR of an m×n matrix, m >= n."""
    n = a.shape[1]
    q, r = _householder_loop(a)
    return q[:, :n], r[:n]


@qr_reduced_2d.defjvp
def _qr_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    q, r = qr_reduced_2d(a)
    # jax's rule: C = Q^T dA R^-1, Omega = tril(C,-1) - tril(C,-1)^T,
    # dQ = Q Omega + (dA - Q Q^T dA) R^-1, dR = (C - Omega) R
    qt_da = q.T @ da
    c = trsm(r.T, qt_da.T, True).T
    low = anp.tril(c, -1)
    om = low - low.T
    rest = da - q @ qt_da
    dq = q @ om + trsm(r.T, rest.T, True).T
    dr = (c - om) @ r
    return (q, r), (dq, dr)


def complete_basis(q: Any) -> Any:
    """q (m×n, orthonormal columns) followed by m-n orthonormal columns spanning the
    rest: those of the Householder QR of q. Differentiable as written (the extra
    columns are not unique, so jax defines no derivative for them; this gives the
    derivative of the basis computed here)."""
    m, n = q.shape
    if m == n:
        return q
    h, _ = _householder_loop(q)
    return anp.concatenate([q, h[:, n:]], axis=1)


def qr_2d(a: Any, complete: bool) -> tuple[Any, Any]:
    """m >= n: the reduced rule (completed for mode='complete'); m < n: the square
    left block's QR, R = [R1, Q^T A2] (both as jax differentiates them)."""
    m, n = a.shape
    if m < n:
        q, r1 = qr_reduced_2d(a[:, :m])
        return q, anp.concatenate([r1, q.T @ a[:, m:]], axis=1)
    q, r = qr_reduced_2d(a)
    if complete and m > n:
        return complete_basis(q), anp.concatenate([r, anp.zeros((m - n, n), r.dtype)], axis=0)
    return q, r


# --------------------------------------------------------------------------- SVD

def _svd_tall(a: Any) -> tuple[Any, Any, Any]:
    """m >= n: (U m×n, s (n,), V n×n) by one-sided Jacobi."""
    m, n = a.shape
    if n == 1:
        s = anp.sqrt(anp.sum(a * a, axis=0))
        g = a
        v = anp.ones((1, 1), a.dtype)
    else:
        ps, qs = _pairs(n)
        npairs = len(ps)
        pa, qa = anp.asarray(ps), anp.asarray(qs)
        eps = _eps(a.dtype)

        def sweep(k: Any, carry: Any) -> Any:
            g, v, off = carry
            p, q = pa[k], qa[k]
            gp, gq = _col(g, p), _col(g, q)
            alpha, beta, gamma = gp @ gp, gq @ gq, gp @ gq
            c, s = _rotation(alpha, beta, gamma)
            off = anp.maximum(off, anp.abs(gamma) / anp.sqrt(anp.where(
                alpha * beta == 0, 1, alpha * beta)) * (alpha * beta != 0))
            return _rotate_cols(g, p, q, c, s), _rotate_cols(v, p, q, c, s), off

        def cond(state: Any) -> Any:
            _, _, off, k = state
            return (off > eps) & (k < _MAX_SWEEPS)

        def body(state: Any) -> Any:
            g, v, off, k = state
            g, v, off = lax.fori_loop(0, npairs, sweep, (g, v, anp.zeros((), a.dtype)))
            return g, v, off, k + 1

        init = (a, anp.eye(n, dtype=a.dtype), anp.ones((), a.dtype), anp.asarray(0))
        g, v, _, _ = lax.while_loop(cond, body, init)
        s = anp.sqrt(anp.sum(g * g, axis=0))
    order = anp.argsort(-s)
    s, g, v = s[order], g[:, order], v[:, order]
    u = g / anp.where(s == 0, 1, s)[None, :]
    u = anp.where((s == 0)[None, :], 0, u)
    # complete U: Householder QR of the computed columns (zero columns get a basis vector)
    q, r = _householder_loop(u)
    sg = anp.where(anp.diagonal(r) < 0, -1.0, 1.0).astype(a.dtype)
    keep = anp.where(s == 0, 1.0, sg)
    return q[:, :n] * keep[None, :], s, v


@custom_jvp
def svd_reduced_2d(a: Any) -> tuple[Any, Any, Any]:
    m, n = a.shape
    if m >= n:
        u, s, v = _svd_tall(a)
        return u, s, v.T
    u, s, v = _svd_tall(a.T)
    return v, s, u.T


@svd_reduced_2d.defjvp
def _svd_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    u, s, vt = svd_reduced_2d(a)
    m, n = a.shape
    v = vt.T
    ds_mat = u.T @ da @ v
    ds = anp.diagonal(ds_mat)
    k = s.shape[0]
    eye = anp.eye(k, dtype=s.dtype)
    srow = s[None, :]
    diffs = (srow + srow.T) * (srow - srow.T)
    f = 1 / (diffs + eye) - eye
    dss = srow * ds_mat           # dS diag(s)
    sds = srow.T * ds_mat         # diag(s) dS
    du = u @ (f * (dss + dss.T))
    dv = v @ (f * (sds + sds.T))
    sinv = 1 / anp.where(s == 0, 1, s) * (s != 0)
    if m > n:
        dav = da @ v
        du = du + (dav - u @ (u.T @ dav)) * sinv[None, :]
    if n > m:
        dau = da.T @ u
        dv = dv + (dau - v @ (v.T @ dau)) * sinv[None, :]
    return (u, s, vt), (du, ds, dv.T)


def svd_2d(a: Any, full: bool) -> tuple[Any, Any, Any]:
    """The reduced rule; full_matrices completes U (m > n) or Vh (m < n) by
    `complete_basis` (jax defines no derivative there)."""
    u, s, vt = svd_reduced_2d(a)
    if full:
        m, n = a.shape
        if m > n:
            u = complete_basis(u)
        elif n > m:
            vt = complete_basis(vt.T).T
    return u, s, vt


@custom_jvp
def svdvals_2d(a: Any) -> Any:
    return svd_reduced_2d(a)[1]


@svdvals_2d.defjvp
def _svdvals_jvp(primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    u, s, vt = svd_reduced_2d(a)
    return s, anp.diagonal(u.T @ da @ vt.T)


# --------------------------------------------------------------------------- entry points

def triangular_solve(a: Any, b: Any, lower: bool, trans: int, unit_diagonal: bool) -> Any:
    a, b = _square(a, "solve_triangular"), _float(b)
    vec = b.ndim == 1
    if vec:
        b = b[:, None]
    dtype = np.result_type(a.dtype, b.dtype)
    x = batched(lambda t, r: solve_triangular_2d(t, r, lower, trans, unit_diagonal),
                a.astype(dtype), b.astype(dtype), core_ndims=(2, 2))
    return x[..., 0] if vec else x


def solve(a: Any, b: Any) -> Any:
    a, b = _square(a, "solve"), _float(b)
    vec = b.ndim == 1   # numpy 2: b is a vector only when 1-d
    if vec:
        b = b[:, None]
    dtype = np.result_type(a.dtype, b.dtype)
    x = batched(solve_2d, a.astype(dtype), b.astype(dtype), core_ndims=(2, 2))
    return x[..., 0] if vec else x


def inv(a: Any) -> Any:
    a = _square(a, "inv")
    n = a.shape[-1]
    return batched(lambda m: solve_2d(m, anp.eye(n, dtype=m.dtype)), a, core_ndims=(2,))


def det(a: Any) -> Any:
    return batched(det_2d, _square(a, "det"), core_ndims=(2,))


def slogdet(a: Any) -> tuple[Any, Any]:
    return batched(slogdet_2d, _square(a, "slogdet"), core_ndims=(2,))


def symmetric_from(a: Any, uplo: str, who: str) -> Any:
    """The symmetric matrix whose `uplo` ('L' or 'U') triangle is a's (the other
    triangle is not read, so it gets no derivative), as numpy/LAPACK read one."""
    if uplo not in ("L", "U"):
        raise ValueError(f"{who}: UPLO must be 'L' or 'U', got {uplo!r}")
    a = _square(a, who)
    t = anp.tril(a) if uplo == "L" else anp.triu(a)
    return t + _mT(t) - t * anp.eye(a.shape[-1], dtype=a.dtype)


def cholesky(a: Any, uplo: str = "L") -> Any:
    """The lower factor of the symmetric matrix read from a's `uplo` triangle."""
    return batched(cholesky_2d, symmetric_from(a, uplo, "cholesky"), core_ndims=(2,))


def eigh(a: Any) -> tuple[Any, Any]:
    return batched(eigh_2d, _square(a, "eigh"), core_ndims=(2,))


def qr(a: Any, mode: str = "reduced") -> Any:
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    a = _float(a)
    if a.ndim < 2:
        raise ValueError(f"qr: expected a matrix, got shape {tuple(a.shape)}")
    q, r = batched(lambda m: qr_2d(m, mode == "complete"), a, core_ndims=(2,))
    return r if mode == "r" else (q, r)


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    a = _float(a)
    if a.ndim < 2:
        raise ValueError(f"svd: expected a matrix, got shape {tuple(a.shape)}")
    if not compute_uv:
        return batched(svdvals_2d, a, core_ndims=(2,))
    return batched(lambda m: svd_2d(m, bool(full_matrices)), a, core_ndims=(2,))
