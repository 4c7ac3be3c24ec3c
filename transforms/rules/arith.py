"""Derivative rules of the `arith` dialect.

Integer, index and i1 ops need no rules: the drivers never differentiate an
op without float results (they are inactive by type).
"""

from __future__ import annotations

from ..ad_support import element_type
from .registry import defjvp, defjvp_rule, defvjp, defzero

defjvp("arith.addf", lambda b, g, x, y: g, lambda b, g, x, y: g)
defjvp("arith.subf", lambda b, g, x, y: g, lambda b, g, x, y: b.negf(g))
defjvp("arith.mulf", lambda b, g, x, y: b.mulf(g, y), lambda b, g, x, y: b.mulf(g, x))
defjvp(
    "arith.divf",
    lambda b, g, x, y: b.divf(g, y),
    lambda b, g, x, y: b.negf(b.mulf(g, b.divf(b.ans, y))),
)
defjvp("arith.negf", lambda b, g, x: b.negf(g))
# Ties send the derivative to the first operand (JAX splits it; both are subgradients).
defjvp(
    "arith.maximumf",
    lambda b, g, x, y: b.select(b.cmpf("oge", x, y), g, b.zeros_like(g)),
    lambda b, g, x, y: b.select(b.cmpf("oge", x, y), b.zeros_like(g), g),
)
defjvp(
    "arith.minimumf",
    lambda b, g, x, y: b.select(b.cmpf("ole", x, y), g, b.zeros_like(g)),
    lambda b, g, x, y: b.select(b.cmpf("ole", x, y), b.zeros_like(g), g),
)
defjvp("arith.maxnumf", *(
    lambda b, g, x, y: b.select(b.cmpf("oge", x, y), g, b.zeros_like(g)),
    lambda b, g, x, y: b.select(b.cmpf("oge", x, y), b.zeros_like(g), g),
))
defjvp("arith.minnumf", *(
    lambda b, g, x, y: b.select(b.cmpf("ole", x, y), g, b.zeros_like(g)),
    lambda b, g, x, y: b.select(b.cmpf("ole", x, y), b.zeros_like(g), g),
))
defjvp(
    "arith.select",
    None,
    lambda b, g, c, x, y: b.select(c, g, b.zeros_like(g)),
    lambda b, g, c, x, y: b.select(c, b.zeros_like(g), g),
)
# remf(x, y) = x - y * trunc(x / y)
defjvp(
    "arith.remf",
    lambda b, g, x, y: g,
    lambda b, g, x, y: b.negf(b.mulf(g, b.math("trunc", b.divf(x, y)))),
)

for _name in ("arith.fptosi", "arith.fptoui", "arith.cmpf", "arith.sitofp", "arith.uitofp"):
    # Integer results or integer operands: no derivative flows through.
    defzero(_name)


def _extf_jvp(b, op, ts):
    (t,) = ts
    return [None if t is None else b.cast("arith.extf", t, op.results[0].type)]


def _truncf_jvp(b, op, ts):
    (t,) = ts
    return [None if t is None else b.cast("arith.truncf", t, op.results[0].type)]


defjvp_rule("arith.extf", _extf_jvp)
defjvp_rule("arith.truncf", _truncf_jvp)
# The transpose of a widening cast is the narrowing one and vice versa.
defvjp("arith.extf", lambda b, op, cts: [
    None if cts[0] is None else b.cast("arith.truncf", cts[0], element_type(op.operands[0].type))
])
defvjp("arith.truncf", lambda b, op, cts: [
    None if cts[0] is None else b.cast("arith.extf", cts[0], element_type(op.operands[0].type))
])


def _constant_jvp(b, op, ts):
    return [None]


defjvp_rule("arith.constant", _constant_jvp)
defvjp("arith.constant", lambda b, op, cts: [])
