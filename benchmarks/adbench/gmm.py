"""ADBench's Gaussian mixture model objective (Srajer, Kukelova, Fitzgibbon 2018).

File layout (`benchmarks/data/adbench/gmm/*.txt`): `D K N`; K lines alpha;
K lines of D means; K lines of icf (D log-diagonal entries q, then D(D-1)/2
strictly-lower entries l, filled column by column); N lines of D points; the
last line `gamma m`. The data files replicate one point N times when the
file holds fewer lines (ADBench's convention) — handled by the loader.

Objective (ADBench sign convention), with Q_k = diag(exp(q_k)) + L_k:

    beta_ik = alpha_k + sum(q_k) - 0.5 * ||Q_k (x_i - mu_k)||^2
    F = -N*D/2*log(2 pi) + sum_i logsumexp_k(beta_ik) - N * logsumexp(alpha)
        + sum_k [0.5 * gamma^2 * (||exp(q_k)||^2 + ||l_k||^2) - m * sum(q_k)]
        - K * (n' * D * log(gamma / sqrt 2) - multigammaln(n'/2, D)),  n' = D + m + 1

The strictly-lower part is built as a contraction with a constant 0/1
selection tensor (`lower_selector`), so the traced program is made of
differentiable tensor ops only (no scatter).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass
class GmmInput:
    d: int
    k: int
    n: int
    alphas: np.ndarray  # (K,)
    means: np.ndarray  # (K, D)
    icf: np.ndarray  # (K, D + D(D-1)/2)
    x: np.ndarray  # (N, D)
    gamma: float
    m: int


def load(path: str | Path) -> GmmInput:
    tokens = Path(path).read_text().split()
    pos = 0

    def take(count: int) -> np.ndarray:
        nonlocal pos
        out = np.array([float(t) for t in tokens[pos:pos + count]], dtype=np.float64)
        pos += count
        return out

    d, k, n = (int(v) for v in take(3))
    alphas = take(k)
    means = take(k * d).reshape(k, d)
    icf_size = d + d * (d - 1) // 2
    icf = take(k * icf_size).reshape(k, icf_size)
    remaining = len(tokens) - pos - 2
    # ADBench files store either all N points or a single point replicated N times.
    points = remaining // d
    x = take(points * d).reshape(points, d)
    if points != n:
        x = np.repeat(x[:1], n, axis=0)
    gamma, m = take(2)
    return GmmInput(d, k, n, alphas, means, icf, x, float(gamma), int(m))


def lower_selector(d: int) -> np.ndarray:
    """S with L[i, j] = sum_p S[i, j, p] * l[p]: ADBench's column-major strict lower fill."""
    p = d * (d - 1) // 2
    s = np.zeros((d, d, p))
    idx = 0
    for col in range(d):
        for row in range(col + 1, d):
            s[row, col, idx] = 1.0
            idx += 1
    return s


def log_gamma_distrib(a: float, p: int) -> float:
    """log of the multivariate gamma function Gamma_p(a)."""
    out = 0.25 * p * (p - 1) * math.log(math.pi)
    for j in range(1, p + 1):
        out += math.lgamma(a + 0.5 * (1 - j))
    return out


def constant_terms(inp: GmmInput) -> float:
    """The parts of F that do not depend on the differentiated parameters."""
    n_prime = inp.d + inp.m + 1
    c = -inp.n * inp.d * 0.5 * math.log(2 * math.pi)
    c -= inp.k * (n_prime * inp.d * math.log(inp.gamma / math.sqrt(2))
                  - log_gamma_distrib(0.5 * n_prime, inp.d))
    return c


def _logsumexp(xp: Any, a: Any, axis: int) -> Any:
    mx = xp.max(a, axis=axis, keepdims=True)
    return xp.log(xp.sum(xp.exp(a - mx), axis=axis)) + xp.squeeze(mx, axis=axis)


def objective(xp: Any, alphas: Any, means: Any, icf: Any, x: Any, selector: Any,
              gamma: float, m: int, const: float) -> Any:
    """F without the data-independent constant `const` added at the end.

    alphas (K,), means (K, D), icf (K, D + P), x (N, D), selector (D, D, P).
    """
    d = x.shape[1]
    n = x.shape[0]
    q = icf[:, :d]  # (K, D)
    l = icf[:, d:]  # (K, P)
    diag = xp.exp(q)  # (K, D)
    lower = xp.einsum("ijp,kp->kij", selector, l)  # (K, D, D)
    xc = xp.expand_dims(x, 0) - xp.expand_dims(means, 1)  # (K, N, D)
    # Q_k (x - mu): diagonal part plus strictly-lower part.
    qx = xp.expand_dims(diag, 1) * xc + xp.einsum("kij,knj->kni", lower, xc)  # (K, N, D)
    sq = xp.sum(qx * qx, axis=2)  # (K, N)
    beta = xp.expand_dims(alphas + xp.sum(q, axis=1), 1) - 0.5 * sq  # (K, N)
    lse_points = xp.sum(_logsumexp(xp, beta, 0))
    lse_alpha = _logsumexp(xp, xp.expand_dims(alphas, 0), 1)
    prior = xp.sum(0.5 * gamma * gamma * (xp.sum(diag * diag, axis=1) + xp.sum(l * l, axis=1))
                   - m * xp.sum(q, axis=1))
    return lse_points - n * xp.sum(lse_alpha) + prior + const


def reference(inp: GmmInput) -> float:
    """F in float64 numpy, straight from the formula (an independent loop form)."""
    d = inp.d
    total = 0.0
    for i in range(inp.n):
        betas = []
        for k in range(inp.k):
            q = inp.icf[k, :d]
            l = inp.icf[k, d:]
            qmat = np.diag(np.exp(q))
            idx = 0
            for col in range(d):
                for row in range(col + 1, d):
                    qmat[row, col] = l[idx]
                    idx += 1
            v = qmat @ (inp.x[i] - inp.means[k])
            betas.append(inp.alphas[k] + q.sum() - 0.5 * v @ v)
        b = np.array(betas)
        total += b.max() + math.log(np.exp(b - b.max()).sum())
    a = inp.alphas
    total -= inp.n * (a.max() + math.log(np.exp(a - a.max()).sum()))
    for k in range(inp.k):
        q = inp.icf[k, :d]
        l = inp.icf[k, d:]
        total += 0.5 * inp.gamma ** 2 * (np.sum(np.exp(q) ** 2) + np.sum(l ** 2)) - inp.m * q.sum()
    return total + constant_terms(inp)
