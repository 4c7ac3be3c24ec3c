"""Rules of the `arith` dialect: jvp and vjp per op, and batching.

Batching: every arith op but `arith.constant` is elementwise
(ElementwiseMappable), registered with `defvectorized` below; a constant has
no operands, so vmap never sends it to a rule.

Integer, index and i1 ops need no derivative rules: the drivers never differentiate an
op without float results (they are inactive by type), and a float produced
from integers (sitofp, uitofp, bitcast) has a zero derivative. The
block-scaled conversions (scaling_extf, scaling_truncf) are not
differentiable: a diagnostic at the op says so.
"""

from __future__ import annotations

from ..ad_support import element_type
from .batching import defvectorized
from .registry import JVP_RULES, VJP_RULES, defjvp, defjvp_rule, deflinear, defvjp, defzero

defvectorized(
    # float
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf",
    "arith.select", "arith.extf", "arith.truncf", "arith.scaling_extf", "arith.scaling_truncf",
    # conversions between float and integer
    "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.bitcast",
    # integer and index
    "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.ceildivsi",
    "arith.ceildivui", "arith.floordivsi", "arith.remsi", "arith.remui", "arith.andi",
    "arith.ori", "arith.xori", "arith.cmpi", "arith.maxsi", "arith.maxui", "arith.minsi",
    "arith.minui", "arith.shli", "arith.shrsi", "arith.shrui", "arith.extsi", "arith.extui",
    "arith.trunci", "arith.index_cast", "arith.index_castui", "arith.addui_extended",
    "arith.mulsi_extended", "arith.mului_extended",
)

defjvp("arith.addf", lambda b, g, x, y: g, lambda b, g, x, y: g)
defjvp("arith.subf", lambda b, g, x, y: g, lambda b, g, x, y: b.negf(g))
defjvp("arith.mulf", lambda b, g, x, y: b.mulf(g, y), lambda b, g, x, y: b.mulf(g, x))
defjvp(
    "arith.divf",
    lambda b, g, x, y: b.divf(g, y),
    lambda b, g, x, y: b.negf(b.mulf(g, b.divf(b.ans, y))),
    uses_result=True,
)
defjvp("arith.negf", lambda b, g, x: b.negf(g))


def _balanced(b, g, x, y):
    """g * d max(x, y)/dx for the max/min family, with JAX's convention at a tie.

    The operand equal to the result gets the derivative; when both are (a
    tie, x == y), each gets half, so the jvp is the mean of the tangents and
    the cotangent is split evenly. Written against the result (`b.ans`), the
    same rule fits maximumf/minimumf (NaN propagates: no operand equals a
    NaN result, both partials are 0) and maxnumf/minnumf (a NaN operand is
    ignored: the other one equals the result and gets all of it).
    """
    zero = b.zeros_like(g)
    return b.select(b.cmpf("oeq", x, b.ans),
                    b.select(b.cmpf("oeq", y, b.ans), b.scale(g, 0.5), g), zero)


for _name in ("arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf"):
    defjvp(_name, lambda b, g, x, y: _balanced(b, g, x, y),
           lambda b, g, x, y: _balanced(b, g, y, x))

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

for _name in ("arith.fptosi", "arith.fptoui", "arith.cmpf", "arith.sitofp", "arith.uitofp",
              "arith.bitcast"):
    # Integer results or integer operands: no derivative flows through.
    defzero(_name)


deflinear("arith.extf")
deflinear("arith.truncf")
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


def _not_differentiable(name: str, why: str) -> None:
    def rule(b, op, vals):
        raise b.ad.fail(op, f"'{name}' is not differentiable ({why})")

    JVP_RULES[name] = rule
    VJP_RULES[name] = rule


for _name in ("arith.scaling_extf", "arith.scaling_truncf"):
    _not_differentiable(_name, "a block-scaled conversion to or from a low-precision type "
                               "with an exponent-only scale")
