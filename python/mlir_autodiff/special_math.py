"""Special functions written with `mlir_autodiff.numpy`: the bodies behind
`mlir_autodiff.scipy.special`, `scipy.stats` and the truncated-normal initializers.

Everything here is a composite of elementwise ops (libm's `erf`/`erfc` through
the math dialect, `exp`, `log`, ...), so every transform differentiates it;
`scipy.special` adds `custom_jvp` rules where the closed-form derivative is
cheaper or more accurate than differentiating the algorithm (erfinv, xlogy).

Algorithms (our own; the constants are the Bernoulli-number coefficients of
the classical asymptotic expansions):

* gammaln, digamma, trigamma: the recurrence Gamma(x + 1) = x Gamma(x) shifts
  x below `_SHIFT` = 12 up by 12, then Stirling's series (to x^-13), the
  asymptotic series of psi (to x^-14) or of psi' (to x^-15); x < 0 uses the
  reflection formulas with the argument reduced mod 1 first. Relative error
  a few 1e-15 in float64 except near the zeros of the function (gammaln at 1
  and 2 and between the negative poles, digamma at 1.4616... and between its
  poles), where the error is about 1e-14 absolute.
* erfinv / ndtri: Winitzki's closed-form guess (relative error < 2e-3),
  refined by three Halley steps on erf(y) = x, or on erfc(y) = 1 - x for
  |x| > 1/2 (so the tails stay accurate in relative terms). Halley converges
  cubically: 2e-3 -> 1e-8 -> 1e-16.
"""

from __future__ import annotations

import math as _pymath
from typing import Any

import numpy as np
from mlir.dialects import math as _m

from . import numpy as anp
from . import primitives as P
from .errors import UnexpectedTracerError
from .tracing import Tracer, current_trace, format_site

ArrayLike = Any

_SHIFT = 12
_HALF_LOG_2PI = 0.5 * _pymath.log(2.0 * _pymath.pi)
_SQRT_PI_2 = 0.5 * _pymath.sqrt(_pymath.pi)      # erfinv'(0)
_TWO_SQRT_PI = 2.0 / _pymath.sqrt(_pymath.pi)      # erf'(0)


def as_float(x: ArrayLike) -> Any:
    """x as a float array (ints and bools become the default float, as numpy's ufuncs)."""
    x = anp.asarray(x)
    return x if x.dtype.kind == "f" else anp.astype(x, anp._float_of(x.dtype))


def erf(x: ArrayLike) -> Any:
    """The error function (libm's erf through `math.erf`)."""
    return anp._erf(x)


def erfc(x: ArrayLike) -> Any:
    """1 - erf(x), accurate in relative terms for large x (libm's erfc through `math.erfc`)."""
    if current_trace() is None:
        if isinstance(x, Tracer):
            raise UnexpectedTracerError(f"traced value used outside its trace at {format_site()}")
        a = np.asarray(x)
        dt = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
        return np.vectorize(_pymath.erfc, otypes=[dt])(a.astype(dt))[()]
    t = as_float(x)
    return P.elementwise("erfc", [t], t.dtype, lambda v: _m.erfc(v[0]), weak_type=t.weak_type)


# --------------------------------------------------------------------------- erfinv

def _solve_erf(a: Any, c: Any) -> Any:
    """y >= 0 with erf(y) = a, given a in [0, 1] and c = 1 - a (exactly, for the tails).

    Returns +inf at c == 0 and NaN outside [0, 1].
    """
    ok = (c > 0) & (a >= 0)
    cs = anp.where(ok, c, 0.5)
    as_ = anp.where(ok, a, 0.5)
    small = as_ < 0.05
    # Winitzki: erfinv(a) ~ sqrt(sqrt(t^2 - L/k) - t), t = 2/(pi k) + L/2, L = log(1 - a^2)
    # (fed only a >= 0.05: at a = 0 its derivative is infinite, which `where` would
    # turn into NaN in the derivative of the small-a branch).
    k = 0.147
    cg = anp.where(small, 0.5, cs)
    L = anp.log(cg) + anp.log(2.0 - cg)
    t = 2.0 / (_pymath.pi * k) + 0.5 * L
    guess = anp.sqrt(anp.sqrt(t * t - L / k) - t)
    series = _SQRT_PI_2 * as_ * (1.0 + (_pymath.pi / 12.0) * as_ * as_)
    y = anp.where(small, series, guess)
    tail = as_ > 0.5
    for _ in range(3):
        # f(y) = erf(y) - a = c - erfc(y); f' = 2/sqrt(pi) exp(-y^2); f''/f' = -2y
        f = anp.where(tail, cs - erfc(y), erf(y) - as_)
        step = f / (_TWO_SQRT_PI * anp.exp(-(y * y)))
        y = y - step / (1.0 + y * step)
    y = anp.where(c == 0, np.inf, y)
    return anp.where(ok | (c == 0), y, np.nan)


def erfinv(x: ArrayLike) -> Any:
    """The inverse of erf on (-1, 1): +-inf at +-1, NaN outside [-1, 1]."""
    x = as_float(x)
    sign = anp.where(x < 0, -1.0, 1.0)   # not abs: its derivative at 0 is 0
    a = x * sign
    return sign * _solve_erf(a, 1.0 - a)


def ndtri(q: ArrayLike) -> Any:
    """The inverse of the standard normal cdf: sqrt(2) erfinv(2q - 1), computed from
    erfc(y) = 2 min(q, 1 - q) so that small q keeps its relative accuracy."""
    q = as_float(q)
    lower = q < 0.5
    c = 2.0 * anp.where(lower, q, 1.0 - q)
    y = _SQRT_2 * _solve_erf(1.0 - c, c)
    return anp.where(lower, -y, y)


_SQRT_2 = _pymath.sqrt(2.0)


# --------------------------------------------------------------------------- gamma family

def _poly(w: Any, coeffs: tuple[float, ...]) -> Any:
    """coeffs[0] + coeffs[1] w + ... (Horner)."""
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * w + c
    return acc


def _positive(x: Any, asym: Any, shift: Any) -> Any:
    """f(x) for x > 0: asym(x) for x >= _SHIFT, else shift(x) (which uses asym(x + _SHIFT)).

    Each branch only sees arguments where it is finite and accurate."""
    big = x >= _SHIFT
    xb = anp.where(big, x, float(_SHIFT))
    xs = anp.where(big, 1.0, x)
    return anp.where(big, asym(xb), shift(xs))


def _reduced(x: Any) -> Any:
    """x - round(x), in [-1/2, 1/2]: sin(pi x) and tan(pi x) from it lose nothing."""
    return x - anp.rint(x)


def _gammaln_asym(z: Any) -> Any:
    w = 1.0 / (z * z)
    series = _poly(w, (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360,
                       1 / 156)) / z
    return (z - 0.5) * anp.log(z) - z + _HALF_LOG_2PI + series


def _gammaln_shift(x: Any) -> Any:
    prod = x
    for k in range(1, _SHIFT):
        prod = prod * (x + float(k))
    return _gammaln_asym(x + float(_SHIFT)) - anp.log(prod)


def gammaln(x: ArrayLike) -> Any:
    """log|Gamma(x)| (scipy.special.gammaln); +inf at 0 and the negative integers."""
    x = as_float(x)
    neg = x < 0
    xp = anp.where(neg, 1.0 - x, anp.where(x == 0, 1.0, x))
    pos = _positive(xp, _gammaln_asym, _gammaln_shift)
    r = anp.where(neg, _reduced(x), 0.5)
    s = anp.abs(anp.sin(_pymath.pi * r))
    refl = _pymath.log(_pymath.pi) - anp.log(s) - pos
    out = anp.where(neg, refl, pos)
    return anp.where(x == 0, np.inf, out)


def _digamma_asym(z: Any) -> Any:
    w = 1.0 / (z * z)
    series = w * _poly(w, (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760,
                           1 / 12))
    return anp.log(z) - 0.5 / z - series


def _digamma_shift(x: Any) -> Any:
    acc = 1.0 / x
    for k in range(1, _SHIFT):
        acc = acc + 1.0 / (x + float(k))
    return _digamma_asym(x + float(_SHIFT)) - acc


def digamma(x: ArrayLike) -> Any:
    """psi(x) = d/dx log Gamma(x) (scipy.special.digamma); NaN at 0 and the negative
    integers (poles)."""
    x = as_float(x)
    neg = x < 0
    xp = anp.where(neg, 1.0 - x, anp.where(x == 0, 1.0, x))
    pos = _positive(xp, _digamma_asym, _digamma_shift)
    r = anp.where(neg, _reduced(x), 0.25)
    # pi cot(pi r) as cos / sin: tan's derivatives overflow and cancel at r = +-1/2
    refl = pos - _pymath.pi * anp.cos(_pymath.pi * r) / anp.sin(_pymath.pi * r)
    out = anp.where(neg, refl, pos)
    return anp.where(x == 0, np.nan, out)


def _trigamma_asym(z: Any) -> Any:
    w = 1.0 / (z * z)
    series = _poly(w, (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)) / (z * z * z)
    return 1.0 / z + 0.5 * w + series


def _trigamma_shift(x: Any) -> Any:
    acc = 1.0 / (x * x)
    for k in range(1, _SHIFT):
        acc = acc + 1.0 / ((x + float(k)) * (x + float(k)))
    return _trigamma_asym(x + float(_SHIFT)) + acc


def trigamma(x: ArrayLike) -> Any:
    """psi'(x) = polygamma(1, x); NaN at 0 and the negative integers (poles)."""
    x = as_float(x)
    neg = x < 0
    xp = anp.where(neg, 1.0 - x, anp.where(x == 0, 1.0, x))
    pos = _positive(xp, _trigamma_asym, _trigamma_shift)
    r = anp.where(neg, _reduced(x), 0.25)
    s = anp.sin(_pymath.pi * r)
    refl = (_pymath.pi * _pymath.pi) / (s * s) - pos
    out = anp.where(neg, refl, pos)
    return anp.where(x == 0, np.nan, out)


# --------------------------------------------------------------------------- normal cdf

# log(ndtr(z)) for z << 0: -z^2/2 - log(-z) - log(2 pi)/2 + log(sum_n (-1)^n (2n-1)!! z^-2n)
_LOG_NDTR_TERMS = tuple((-1.0) ** n * float(np.prod(np.arange(1, 2 * n, 2))) for n in range(13))
_LOG_NDTR_ASYM = -10.0


def ndtr(z: ArrayLike) -> Any:
    """The standard normal cdf, erfc(-z / sqrt(2)) / 2 (accurate in the lower tail)."""
    z = as_float(z)
    return 0.5 * erfc(z * (-1.0 / _SQRT_2))


def log_ndtr(z: ArrayLike) -> Any:
    """log of the standard normal cdf: log1p(-ndtr(-z)) for z > 0, log(ndtr(z)) down to
    z = -10 and the asymptotic series (13 terms, relative error < 1e-13) below."""
    z = as_float(z)
    asym = z < _LOG_NDTR_ASYM
    za = anp.where(asym, z, _LOG_NDTR_ASYM)
    w = 1.0 / (za * za)
    tail = (-0.5 * za * za - anp.log(-za) - _HALF_LOG_2PI
            + anp.log(_poly(w, _LOG_NDTR_TERMS)))
    zm = anp.where(asym, _LOG_NDTR_ASYM, z)
    upper = zm > 0
    zu = anp.where(upper, zm, 0.0)
    zl = anp.where(upper, 0.0, zm)
    mid = anp.where(upper, anp.log1p(-ndtr(-zu)), anp.log(ndtr(zl)))
    return anp.where(asym, tail, mid)


__all__: list[str] = []
