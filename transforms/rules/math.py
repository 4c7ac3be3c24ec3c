"""Rules of the `math` dialect: jvp and vjp per op (elementwise: one partial per
operand), and batching: every math op is elementwise (ElementwiseMappable),
registered with `defvectorized` below.

`b.ans` is the primal result, reused where the derivative is a function of
it (exp, tanh, sqrt ...), as JAX's rules do.
"""

from __future__ import annotations

from ..ad_support import LN2, LN10, TWO_OVER_SQRT_PI
from .batching import defvectorized
from .registry import defjvp, defjvp_rule, defvjp, defzero

defvectorized(
    "math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p", "math.log2", "math.log10",
    "math.sin", "math.cos", "math.tan", "math.tanh", "math.sinh", "math.cosh", "math.atan",
    "math.asin", "math.acos", "math.atan2", "math.asinh", "math.acosh", "math.atanh",
    "math.sincos", "math.sqrt", "math.rsqrt", "math.cbrt", "math.powf", "math.fpowi",
    "math.absf", "math.erf", "math.erfc", "math.copysign", "math.fma", "math.clampf",
    "math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc",
    # integer results or operands
    "math.absi", "math.ctlz", "math.ctpop", "math.cttz", "math.ipowi", "math.isfinite",
    "math.isinf", "math.isnan", "math.isnormal",
)


def _one_plus(b, x):
    return b.addf(b.ones_like(x), x)


defjvp("math.exp", lambda b, g, x: b.mulf(g, b.ans),
       uses_result=True)
defjvp("math.exp2", lambda b, g, x: b.mulf(g, b.scale(b.ans, LN2)),
       uses_result=True)
defjvp("math.expm1", lambda b, g, x: b.mulf(g, _one_plus(b, b.ans)),
       uses_result=True)
defjvp("math.log", lambda b, g, x: b.divf(g, x))
defjvp("math.log1p", lambda b, g, x: b.divf(g, _one_plus(b, x)))
defjvp("math.log2", lambda b, g, x: b.divf(g, b.scale(x, LN2)))
defjvp("math.log10", lambda b, g, x: b.divf(g, b.scale(x, LN10)))
defjvp("math.sin", lambda b, g, x: b.mulf(g, b.math("cos", x)))
defjvp("math.cos", lambda b, g, x: b.negf(b.mulf(g, b.math("sin", x))))
defjvp("math.tan", lambda b, g, x: b.mulf(g, _one_plus(b, b.square(b.ans))),
       uses_result=True)
defjvp("math.tanh", lambda b, g, x: b.mulf(g, b.subf(b.ones_like(x), b.square(b.ans))),
       uses_result=True)
defjvp("math.sinh", lambda b, g, x: b.mulf(g, b.math("cosh", x)))
defjvp("math.cosh", lambda b, g, x: b.mulf(g, b.math("sinh", x)))
defjvp("math.atan", lambda b, g, x: b.divf(g, _one_plus(b, b.square(x))))
defjvp("math.asin", lambda b, g, x: b.mulf(g, b.math("rsqrt", b.subf(b.ones_like(x),
                                                                     b.square(x)))))
defjvp("math.acos", lambda b, g, x: b.negf(b.mulf(g, b.math("rsqrt", b.subf(b.ones_like(x),
                                                                            b.square(x))))))
# atan2(y, x): d = (x dy - y dx) / (x^2 + y^2)
defjvp(
    "math.atan2",
    lambda b, g, y, x: b.divf(b.mulf(g, x), b.addf(b.square(x), b.square(y))),
    lambda b, g, y, x: b.negf(b.divf(b.mulf(g, y), b.addf(b.square(x), b.square(y)))),
)
defjvp("math.sqrt", lambda b, g, x: b.divf(g, b.scale(b.ans, 2.0)),
       uses_result=True)
# rsqrt(x) = x^-1/2: d = -1/2 rsqrt(x) / x
defjvp("math.rsqrt", lambda b, g, x: b.mulf(g, b.divf(b.scale(b.ans, -0.5), x)),
       uses_result=True)
# cbrt(x): d = 1 / (3 cbrt(x)^2)
defjvp("math.cbrt", lambda b, g, x: b.divf(g, b.scale(b.square(b.ans), 3.0)),
       uses_result=True)
# powf(x, y) = x^y: dx = y x^(y-1), dy = log(x) x^y, with log(x) read as 0 at
# x == 0 (JAX's convention: d/dy 0^y = 0). Where x < 0 and y is an integer
# the value is finite but d/dy is NaN; a zero tangent (or cotangent) for y
# then contributes an exact 0 instead of 0 * NaN, so a y that is computed but
# not differentiated (an integer array converted to float, floor(x),
# stop_gradient(x), a residual whose tangent is a materialized zero) does not
# poison higher derivatives with NaN.


def _strong_zero(b, g, v):
    """g * v, and exactly 0 where g == 0 (even where v is inf or NaN)."""
    return b.select(b.cmpf("oeq", g, b.zeros_like(g)), b.zeros_like(g), b.mulf(g, v))


def _powf_dy(b, g, x, y):
    safe_x = b.select(b.cmpf("oeq", x, b.zeros_like(x)), b.ones_like(x), x)
    return _strong_zero(b, g, b.mulf(b.math("log", safe_x), b.ans))


defjvp(
    "math.powf",
    lambda b, g, x, y: b.mulf(g, b.mulf(y, b.math("powf", x, b.subf(y, b.ones_like(y))))),
    _powf_dy,
    uses_result=True,
)


def _fpowi_dx(b, g, x, n):
    # n x^(n-1), with the integer exponent converted to x's float type.
    nf = b.cast("arith.sitofp", n, x.type)
    one = b.create("arith.constant", [], [n.type], {"value": _int_one(n.type)}).result
    nm1 = b.create("arith.subi", [n, one], [n.type]).result
    return b.mulf(g, b.mulf(nf, b.create("math.fpowi", [x, nm1], [x.type]).result))


def _int_one(t):
    from mlir import ir

    if isinstance(t, ir.RankedTensorType):
        return ir.DenseElementsAttr.get_splat(t, ir.IntegerAttr.get(t.element_type, 1))
    return ir.IntegerAttr.get(t, 1)


defjvp("math.fpowi", _fpowi_dx, None)
# |x|: JAX's convention, d|x| = g where x >= 0 (so +1 at -0 and at 0), -g below.
defjvp("math.absf", lambda b, g, x: b.select(b.cmpf("oge", x, b.zeros_like(x)), g, b.negf(g)))
defjvp("math.erf", lambda b, g, x: b.mulf(
    g, b.scale(b.math("exp", b.negf(b.square(x))), TWO_OVER_SQRT_PI)))
defjvp("math.erfc", lambda b, g, x: b.mulf(
    g, b.scale(b.math("exp", b.negf(b.square(x))), -TWO_OVER_SQRT_PI)))
# Inverse hyperbolics, in JAX's forms: (x - 1)(x + 1) and (1 - x)(1 + x) keep
# their accuracy near |x| = 1 where x^2 - 1 would cancel.
defjvp("math.asinh", lambda b, g, x: b.mulf(g, b.math("rsqrt", _one_plus(b, b.square(x)))))
defjvp("math.acosh", lambda b, g, x: b.mulf(g, b.math("rsqrt", b.mulf(
    b.subf(x, b.ones_like(x)), _one_plus(b, x)))))
defjvp("math.atanh", lambda b, g, x: b.divf(g, b.mulf(
    b.subf(b.ones_like(x), x), _one_plus(b, x))))
defjvp(
    "math.fma",
    lambda b, g, x, y, z: b.mulf(g, y),
    lambda b, g, x, y, z: b.mulf(g, x),
    lambda b, g, x, y, z: g,
)
# copysign(x, y) = |x| sign(y): dx = d|x| * sign(y), with d|x| as for absf (+1 at
# -0, as JAX); sign(y) from y's sign bit; dy = 0 (almost everywhere)
defjvp(
    "math.copysign",
    lambda b, g, x, y: b.mulf(b.select(b.cmpf("oge", x, b.zeros_like(x)), g, b.negf(g)),
                         b.math("copysign", b.ones_like(y), y)),
    None,
)

for _name in ("math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc"):
    defzero(_name)


# clampf(v, lo, hi) is defined (and expanded upstream) as maximumf(minimumf(v, lo), hi);
# its partials are those of that composition, ties split evenly as in arith.maximumf.


def _tie(b, g, x, y, ans):
    """g where x is the result of a max/min of x and y, g/2 at a tie, else 0."""
    zero = b.zeros_like(g)
    return b.select(b.cmpf("oeq", x, ans),
                    b.select(b.cmpf("oeq", y, ans), b.scale(g, 0.5), g), zero)


def _clampf_inner(b, v, lo):
    return b.create("arith.minimumf", [v, lo], [v.type]).result


def _clampf_dv(b, g, v, lo, hi):
    m = _clampf_inner(b, v, lo)
    return _tie(b, _tie(b, g, m, hi, b.ans), v, lo, m)


def _clampf_dlo(b, g, v, lo, hi):
    m = _clampf_inner(b, v, lo)
    return _tie(b, _tie(b, g, m, hi, b.ans), lo, v, m)


defjvp("math.clampf", _clampf_dv, _clampf_dlo,
       lambda b, g, v, lo, hi: _tie(b, g, hi, _clampf_inner(b, v, lo), b.ans))


# sincos(x) = (sin x, cos x): two results.
def _sincos_jvp(b, op, ts):
    (t,) = ts
    if t is None:
        return [None, None]
    s, c = op.results
    return [b.mulf(t, c), b.negf(b.mulf(t, s))]


def _sincos_vjp(b, op, cts):
    cs, cc = cts
    s, c = op.results
    out = None
    if cs is not None:
        out = b.mulf(cs, c)
    if cc is not None:
        out = b.add_any(out, b.negf(b.mulf(cc, s)))
    return [out]


defjvp_rule("math.sincos", _sincos_jvp)
defvjp("math.sincos", _sincos_vjp)
