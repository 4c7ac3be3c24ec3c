"""numpy.linalg / scipy.linalg: values against numpy and scipy, derivatives against jax
(x64) and central finite differences, the transpose identity, second order.

Each test compiles one `ad.jit` that returns everything it checks (the
factorizations are loops: compiling them is the cost). The per-function rows
of every transform are in the differential table (differential_cases.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
import mlir_autodiff.scipy.linalg as asl

# values and derivatives, not LLVM's code: compiled at -O0 (conftest's llvm_o0), which
# cuts the compile time of these loop algorithms by a third
pytestmark = pytest.mark.usefixtures("llvm_o0")

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402

EPS = np.finfo(np.float64).eps
RNG = np.random.default_rng(20)
A43 = RNG.standard_normal((4, 3))
A34 = RNG.standard_normal((3, 4))
M = RNG.standard_normal((3, 3)) + 2 * np.eye(3)
SPD = A43.T @ A43 + np.eye(3)
SYM = M + M.T
B = RNG.standard_normal((3, 2))
MB = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)


def _close(got, want, tol=1e-12, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = np.max(np.abs(got - want)) if got.size else 0.0
    assert err <= tol * max(1.0, np.max(np.abs(want))), f"{what}: error {err:.3g}"


def test_values_match_numpy_and_scipy() -> None:
    L = anp.linalg

    def values(a43, a34, m, spd, sym, b, mb):
        return dict(
            solve_vec=L.solve(m, b[:, 0]), solve=L.solve(m, b), solve_b=L.solve(mb, b),
            inv=L.inv(mb), det=L.det(mb), slogdet=L.slogdet(m), chol=L.cholesky(spd),
            qr=L.qr(a43), qr_c=L.qr(a43, mode="complete"), qr_r=L.qr(a34, mode="r"),
            qr_wide=L.qr(a34), eigh=L.eigh(sym), eigh_u=L.eigvalsh(sym, UPLO="U"),
            svd=L.svd(a43, full_matrices=False), svd_full=L.svd(a34),
            svd_vals=L.svd(mb, compute_uv=False), svd_zero=L.svd(anp.zeros((3, 2))),
            norms=anp.stack([L.norm(a43), L.norm(a43, "fro"), L.norm(a43, "nuc"),
                             L.norm(a43, 2), L.norm(a43, -2), L.norm(a43, 1),
                             L.norm(a43, -1), L.norm(a43, np.inf), L.norm(a43, -np.inf),
                             L.norm(b[:, 0], 0), L.norm(b[:, 0], 3), L.norm(b[:, 0], np.inf),
                             L.norm(b[:, 0], -np.inf), L.norm(b[:, 0], 1)]),
            norm_axis=L.norm(mb, 1, axis=(2, 1), keepdims=True),
            tri=[asl.solve_triangular(m, b, lower=True),
                 asl.solve_triangular(m, b, trans="T", unit_diagonal=True),
                 asl.solve_triangular(mb, b[:, 0], lower=False, trans=1)],
            cho=asl.cho_solve(asl.cho_factor(spd), b),
            cho_low=asl.cho_solve(asl.cho_factor(spd, lower=True), b),
            chol_up=asl.cholesky(spd))

    got = ad.jit(values)(A43, A34, M, SPD, SYM, B, MB)
    N = np.linalg
    _close(got["solve_vec"], N.solve(M, B[:, 0]), what="solve vector")
    _close(got["solve"], N.solve(M, B), what="solve")
    _close(got["solve_b"], N.solve(MB, B), what="batched solve (b broadcast)")
    _close(got["inv"], N.inv(MB), what="inv")
    _close(got["det"], N.det(MB), what="det")
    _close(got["slogdet"], N.slogdet(M), what="slogdet")
    _close(got["chol"], N.cholesky(SPD), what="cholesky")
    for key, want in (("qr", N.qr(A43)), ("qr_c", N.qr(A43, mode="complete")),
                      ("qr_wide", N.qr(A34))):   # LAPACK's signs: equal, not up to sign
        _close(got[key][0], want[0], what=f"{key} Q")
        _close(got[key][1], want[1], what=f"{key} R")
    _close(got["qr_r"], N.qr(A34, mode="r"), what="qr r")
    w, v = got["eigh"]
    scale = np.linalg.norm(SYM)
    _close(w, N.eigvalsh(SYM), tol=8 * EPS * scale, what="eigh eigenvalues")
    _close(got["eigh_u"], N.eigvalsh(SYM, UPLO="U"), tol=8 * EPS * scale, what="UPLO=U")
    assert np.max(np.abs(SYM @ v - v * w)) <= 8 * EPS * scale
    assert np.max(np.abs(v.T @ v - np.eye(3))) <= 8 * EPS
    u, s, vt = got["svd"]
    _close(s, N.svd(A43, compute_uv=False), tol=8 * EPS, what="singular values")
    _close((u * s) @ vt, A43, tol=8 * EPS, what="U S Vh")
    assert np.max(np.abs(u.T @ u - np.eye(3))) <= 8 * EPS
    u, s, vt = got["svd_full"]
    assert u.shape == (3, 3) and vt.shape == (4, 4)
    _close((u * s) @ vt[:3], A34, tol=8 * EPS, what="full U S Vh")
    assert np.max(np.abs(vt @ vt.T - np.eye(4))) <= 8 * EPS
    _close(got["svd_vals"], N.svd(MB, compute_uv=False), tol=8 * EPS, what="batched svd")
    u, s, vt = got["svd_zero"]
    _close(s, np.zeros(2), what="zero matrix")
    assert np.max(np.abs(u @ u.T - np.eye(3))) <= 8 * EPS   # completed to a basis
    wn = [N.norm(A43), N.norm(A43, "fro"), N.norm(A43, "nuc"), N.norm(A43, 2),
          N.norm(A43, -2), N.norm(A43, 1), N.norm(A43, -1), N.norm(A43, np.inf),
          N.norm(A43, -np.inf), N.norm(B[:, 0], 0), N.norm(B[:, 0], 3),
          N.norm(B[:, 0], np.inf), N.norm(B[:, 0], -np.inf), N.norm(B[:, 0], 1)]
    _close(got["norms"], wn, tol=1e-14, what="norms")
    _close(got["norm_axis"], N.norm(MB, 1, axis=(2, 1), keepdims=True), what="norm axes")
    _close(got["tri"][0], sl.solve_triangular(M, B, lower=True), what="tri lower")
    _close(got["tri"][1], sl.solve_triangular(M, B, trans="T", unit_diagonal=True),
           what="tri trans unit")
    _close(got["tri"][2], np.stack([sl.solve_triangular(x, B[:, 0], trans=1) for x in MB]),
           what="tri batched")
    _close(got["cho"], sl.cho_solve(sl.cho_factor(SPD), B), what="cho_solve")
    _close(got["cho_low"], sl.cho_solve(sl.cho_factor(SPD, lower=True), B), what="cho lower")
    _close(got["chol_up"], sl.cholesky(SPD), what="scipy cholesky (upper)")


def _loss(np_, sl_, a43, m, b):
    """A scalar touching every function; eigen/singular vectors enter squared."""
    L = np_.linalg
    spd = a43.T @ a43 + np_.eye(3)
    q, r = L.qr(a43)
    w, v = L.eigh(m + m.T)
    u, s, vt = L.svd(a43, full_matrices=False)
    return (np_.sum(np_.sin(L.solve(m, b))) + L.slogdet(m)[1] + 0.3 * L.det(m)
            + np_.sum(np_.cos(L.inv(m))) + np_.sum(np_.sin(L.cholesky(spd)))
            + np_.sum(q * np_.cos(q)) + np_.sum(0.1 * r ** 3) + np_.sum(w ** 3)
            + np_.sum(v ** 2 * m) + np_.sum(s ** 2 * np_.sin(s)) + np_.sum((u * u)[:, :2])
            + np_.sum(vt ** 2 * m) + L.norm(a43, "nuc") + L.norm(a43, 2) + L.norm(m, -2)
            + np_.sum(np_.sin(sl_.solve_triangular(m, b, lower=True, trans=1)))
            + np_.sum(sl_.cho_solve(sl_.cho_factor(spd, lower=True), b) ** 2)
            + np_.sum(sl_.cholesky(spd) ** 2 * m))


# jax's value and gradient of _loss: one XLA compilation (per input shapes), not one per op
_jax_value_and_grad = jax.jit(jax.value_and_grad(lambda *x: _loss(jnp, jsl, *x),
                                                 argnums=(0, 1, 2)))


def test_first_order_matches_jax_and_transposes() -> None:
    args = (A43, M, B)
    ts = tuple(RNG.standard_normal(x.shape) for x in args)

    def both(a43, m, b, t1, t2, t3):
        f = lambda *x: _loss(anp, asl, *x)  # noqa: E731
        val, g = ad.value_and_grad(f, argnums=(0, 1, 2))(a43, m, b)
        _, tangent = ad.jvp(f, (a43, m, b), (t1, t2, t3))
        return val, g, tangent

    val, g, tangent = ad.jit(both)(*args, *ts)
    jval, jg = _jax_value_and_grad(*args)
    _close(val, jval, tol=1e-12, what="value")
    for got, want, name in zip(g, jg, ("a43", "m", "b")):
        _close(got, want, tol=1e-10, what=f"grad wrt {name}")
    # <grad, t> = jvp(t): forward rules and their transposes agree
    _close(tangent, sum(np.sum(x * t) for x, t in zip(g, ts)), tol=1e-11, what="transpose")


def test_second_order_matches_jax() -> None:
    def f(np_, m, b):
        L = np_.linalg
        return L.slogdet(m)[1] + np_.sum(L.solve(m, b) ** 2) + np_.sum(L.eigh(m @ m.T)[0] ** 2)

    h = ad.jit(lambda m, b: ad.hessian(lambda *x: f(anp, *x), argnums=(0, 1))(m, b))(M, B)
    jh = jax.jit(jax.hessian(lambda *x: f(jnp, *x), argnums=(0, 1)))(M, B)
    for i in range(2):
        for j in range(2):
            _close(h[i][j], jh[i][j], tol=1e-9, what=f"hessian block {i}{j}")


def _fd(fun, x, h=1e-6):
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = h
        e = e.reshape(x.shape)
        cols.append((np.asarray(fun(x + e)) - np.asarray(fun(x - e))) / (2 * h))
    return np.stack(cols, axis=-1)


def test_derivatives_jax_leaves_undefined() -> None:
    """qr(mode='complete') of a tall matrix, qr of a wide one and svd(full_matrices=True)
    of a non-square one: jax has no rule; ours differentiate the completed basis as
    computed. Oracle: central differences (numpy's qr computes the same Q; for the svd,
    our own compiled primal, whose values test_values_match_numpy_and_scipy checks)."""
    def outs(a43, a34):
        qc, rc = anp.linalg.qr(a43, mode="complete")
        qw, rw = anp.linalg.qr(a34)
        u, _, _ = anp.linalg.svd(a43)
        _, _, vt = anp.linalg.svd(a34)
        return anp.concatenate([qc.ravel(), rc.ravel(), qw.ravel(), rw.ravel(),
                                u[:, 3:].ravel() ** 2, vt[3:].ravel() ** 2])

    prim = ad.jit(outs)
    jac = ad.jit(ad.jacfwd(outs, argnums=(0, 1)))(A43, A34)
    jac_r = ad.jit(ad.jacrev(outs, argnums=(0, 1)))(A43, A34)
    n_qr = 16 + 12 + 9 + 12

    def np_outs(a43, a34):
        qc, rc = np.linalg.qr(a43, mode="complete")
        qw, rw = np.linalg.qr(a34)
        return np.concatenate([qc.ravel(), rc.ravel(), qw.ravel(), rw.ravel()])

    fd0 = _fd(lambda x: np_outs(x, A34), A43)
    fd1 = _fd(lambda x: np_outs(A43, x), A34)
    _close(jac[0][:n_qr].reshape(fd0.shape), fd0, tol=1e-7, what="qr jacfwd wrt tall")
    _close(jac[1][:n_qr].reshape(fd1.shape), fd1, tol=1e-7, what="qr jacfwd wrt wide")
    sv0 = _fd(lambda x: prim(x, A34)[n_qr:], A43)
    sv1 = _fd(lambda x: prim(A43, x)[n_qr:], A34)
    _close(jac[0][n_qr:].reshape(sv0.shape), sv0, tol=1e-7, what="svd full U")
    _close(jac[1][n_qr:].reshape(sv1.shape), sv1, tol=1e-7, what="svd full Vh")
    for a, b in zip(jac, jac_r):
        _close(a, b, tol=1e-10, what="jacfwd = jacrev")


@pytest.mark.parametrize("call, message", [
    (lambda x: anp.linalg.solve(x, x[0]), "solve: expected a square matrix"),
    (lambda x: anp.linalg.qr(x, mode="full"), "qr: mode must be"),
    (lambda x: anp.linalg.norm(x, "bad"), "norm: invalid norm order 'bad' for matrices"),
    (lambda x: asl.solve_triangular(x[:2, :2], x[:2, 0], trans=3), "trans must be"),
])
def test_bad_arguments_raise_clear_errors(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        ad.jit(call)(A43)


def test_float32_value_and_gradient_match_float64() -> None:
    # the differential table runs these loop algorithms in float64 only (each compile
    # is the cost); here their float32 paths, values and reverse mode at once (the
    # loss's `eye(3)` is float64, as in numpy, so only the Cholesky terms promote)
    args32 = tuple(x.astype(np.float32) for x in (A43, M, B))
    val, g = ad.jit(ad.value_and_grad(lambda *x: _loss(anp, asl, *x), argnums=(0, 1, 2)))(
        *args32)
    jval, jg = _jax_value_and_grad(*(x.astype(np.float64) for x in args32))
    _close(val, jval, tol=1e-4, what="float32 value")
    for got, want, name in zip(g, jg, ("a43", "m", "b")):
        assert got.dtype == np.float32
        _close(got, want, tol=2e-3, what=f"float32 grad wrt {name}")
