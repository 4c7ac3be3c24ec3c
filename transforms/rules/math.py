"""Derivative rules of the `math` dialect (elementwise: one partial per operand).

`b.ans` is the primal result, reused where the derivative is a function of
it (exp, tanh, sqrt ...), as JAX's rules do.
"""

from __future__ import annotations

from ..ad_support import LN2, LN10, TWO_OVER_SQRT_PI
from .registry import defjvp, defzero


def _one_plus(b, x):
    return b.addf(b.ones_like(x), x)


defjvp("math.exp", lambda b, g, x: b.mulf(g, b.ans))
defjvp("math.exp2", lambda b, g, x: b.mulf(g, b.scale(b.ans, LN2)))
defjvp("math.expm1", lambda b, g, x: b.mulf(g, _one_plus(b, b.ans)))
defjvp("math.log", lambda b, g, x: b.divf(g, x))
defjvp("math.log1p", lambda b, g, x: b.divf(g, _one_plus(b, x)))
defjvp("math.log2", lambda b, g, x: b.divf(g, b.scale(x, LN2)))
defjvp("math.log10", lambda b, g, x: b.divf(g, b.scale(x, LN10)))
defjvp("math.sin", lambda b, g, x: b.mulf(g, b.math("cos", x)))
defjvp("math.cos", lambda b, g, x: b.negf(b.mulf(g, b.math("sin", x))))
defjvp("math.tan", lambda b, g, x: b.mulf(g, _one_plus(b, b.square(b.ans))))
defjvp("math.tanh", lambda b, g, x: b.mulf(g, b.subf(b.ones_like(x), b.square(b.ans))))
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
defjvp("math.sqrt", lambda b, g, x: b.divf(g, b.scale(b.ans, 2.0)))
# rsqrt(x) = x^-1/2: d = -1/2 rsqrt(x) / x
defjvp("math.rsqrt", lambda b, g, x: b.mulf(g, b.divf(b.scale(b.ans, -0.5), x)))
# cbrt(x): d = 1 / (3 cbrt(x)^2)
defjvp("math.cbrt", lambda b, g, x: b.divf(g, b.scale(b.square(b.ans), 3.0)))
# powf(x, y) = x^y: dx = y x^(y-1), dy = log(x) x^y
defjvp(
    "math.powf",
    lambda b, g, x, y: b.mulf(g, b.mulf(y, b.math("powf", x, b.subf(y, b.ones_like(y))))),
    lambda b, g, x, y: b.mulf(g, b.mulf(b.math("log", x), b.ans)),
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
defjvp("math.absf", lambda b, g, x: b.mulf(g, b.math("copysign", b.ones_like(x), x)))
defjvp("math.erf", lambda b, g, x: b.mulf(
    g, b.scale(b.math("exp", b.negf(b.square(x))), TWO_OVER_SQRT_PI)))
defjvp(
    "math.fma",
    lambda b, g, x, y, z: b.mulf(g, y),
    lambda b, g, x, y, z: b.mulf(g, x),
    lambda b, g, x, y, z: g,
)
# copysign(x, y) = |x| sign(y): dx = sign(x) sign(y), dy = 0 (almost everywhere)
defjvp(
    "math.copysign",
    lambda b, g, x, y: b.mulf(g, b.mulf(b.math("copysign", b.ones_like(x), x),
                                        b.math("copysign", b.ones_like(y), y))),
    None,
)

for _name in ("math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc"):
    defzero(_name)
