"""f32 exp, log and tanh as polynomial arith/`math.fma` code (Cephes expf, logf, tanhf).

This MLIR build registers no polynomial-approximation pass or transform op,
and a vectorized `math.exp` becomes one libm call per element.
`approximate_f32_math` replaces f32 `math.exp`, `math.log` and `math.tanh` in
the bodies of ops that get vectorized; `APPROX_MAX_ULP` bounds their error.
f64 keeps libm (scalar calls inside the vector loop): the f64 tests compare
at 1e-12 and no approximation here is that accurate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from mlir import ir

from ..ad_support import horner

#: Bound on the error, in ulp of the float32 result, of each f32 approximation, asserted by
#: test/python/test_cpu_approximations.py against numpy's float64 functions on every 4099th f32 bit
#: pattern (all signs and exponents, subnormals included) plus special values;
#: inf/nan/+-0/subnormal results as libm. (measurements: benchmarks/notes/cpu-schedules.md)
APPROX_MAX_ULP = {"math.exp": 1.5, "math.log": 1.5, "math.tanh": 2.0}


# -- f32 transcendental approximations ----------------------------------------------------------


def _f32(x: float) -> ir.Value:
    from mlir.dialects import arith

    return arith.constant(ir.F32Type.get(), x)


def _i32(x: int) -> ir.Value:
    from mlir.dialects import arith

    return arith.constant(ir.IntegerType.get_signless(32), x)


#: The approximations' polynomials: coefficients from the highest degree down, one
#: FMA a step.
_horner = functools.partial(horner, fused=True, highest_first=True)


def _exp_f32(x: ir.Value) -> ir.Value:
    """Cephes expf: 2^n * p(r), r = x - n ln2 (Cody-Waite, FMA), p degree 7.

    2^n is applied as two factors 2^(n>>1) * 2^(n - n>>1) so the result is
    right in the subnormal range and overflows to inf past ln(FLT_MAX).
    """
    from mlir.dialects import arith, math

    i32 = ir.IntegerType.get_signless(32)
    # Below -104 the result is +0 (as libm's). Computed, it would be the
    # product y * 2^-75 * 2^-75 underflowing, which Intel cores run through a
    # microcode assist of ~100 cycles per instruction: a causal softmax's
    # masked scores (-1e9, half of them) ran 3-4x slower than without the
    # mask. Those lanes compute exp(0) instead and select +0 at the end.
    under = arith.cmpf(arith.CmpFPredicate.OLT, x, _f32(-104.0))
    x = arith.select(under, _f32(0.0), x)
    xc = arith.minimumf(arith.maximumf(x, _f32(-104.0)), _f32(89.0))
    n = math.floor(math.fma(xc, _f32(1.44269504088896341), _f32(0.5)))
    r = math.fma(n, _f32(-0.693359375), xc)
    r = math.fma(n, _f32(2.12194440e-4), r)
    p = _horner(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                    4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1])
    y = arith.addf(math.fma(p, arith.mulf(r, r), r), _f32(1.0))
    ni = arith.fptosi(i32, n)
    n1 = arith.shrsi(ni, _i32(1))
    n2 = arith.subi(ni, n1)
    f32 = ir.F32Type.get()

    def pow2(k: ir.Value) -> ir.Value:
        return arith.bitcast(f32, arith.shli(arith.addi(k, _i32(127)), _i32(23)))

    # NaN needs no select: the clamps (maximumf/minimumf) propagate it into
    # r, so y is NaN and so is y times any scale the garbage n gives.
    return arith.select(under, _f32(0.0), arith.mulf(arith.mulf(y, pow2(n1)), pow2(n2)))


def _log_f32(x: ir.Value) -> ir.Value:
    """Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9 polynomial."""
    from mlir.dialects import arith, math

    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    # Subnormals: scale into the normal range first.
    is_sub = arith.cmpf(arith.CmpFPredicate.OLT, x, _f32(1.17549435e-38))
    xs = arith.select(is_sub, arith.mulf(x, _f32(8388608.0)), x)
    e_adj = arith.select(is_sub, _f32(-23.0), _f32(0.0))
    bits = arith.bitcast(i32, xs)
    e = arith.subi(arith.andi(arith.shrui(bits, _i32(23)), _i32(0xFF)), _i32(126))
    m = arith.bitcast(f32, arith.ori(arith.andi(bits, _i32(0x007FFFFF)), _i32(0x3F000000)))
    ef = arith.addf(arith.sitofp(f32, e), e_adj)
    # m in [0.5, 1): below sqrt(1/2) use 2m - 1 and e - 1, else m - 1.
    small = arith.cmpf(arith.CmpFPredicate.OLT, m, _f32(0.707106781186547524))
    t = arith.select(small, arith.addf(m, m), m)
    t = arith.subf(t, _f32(1.0))
    ef = arith.subf(ef, arith.select(small, _f32(1.0), _f32(0.0)))
    z = arith.mulf(t, t)
    p = _horner(t, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                    1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                    3.3333331174e-1])
    y = arith.mulf(arith.mulf(p, t), z)
    y = math.fma(ef, _f32(-2.12194440e-4), y)
    y = math.fma(z, _f32(-0.5), y)
    r = arith.addf(t, y)
    r = math.fma(ef, _f32(0.693359375), r)
    # Special values: log(0) = -inf, log(x < 0) = nan, log(inf) = inf, log(nan) = nan.
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, x, _f32(float("inf"))), x, r)
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, x, _f32(0.0)),
                     _f32(float("-inf")), r)
    neg_or_nan = arith.cmpf(arith.CmpFPredicate.ULT, x, _f32(0.0))
    return arith.select(neg_or_nan, _f32(float("nan")), r)


def _exp_f32_small(u: ir.Value) -> ir.Value:
    """exp(u) for u in [0, 18] (tanh's large-argument branch): no scaling tricks.

    n = round(u log2 e) is read off the bits of `u log2 e + MAGIC`
    (1.5 * 2^23 + 127: the low bits then hold n + 127, 2^n's biased
    exponent), r = u - n ln2 in two FMA steps, and e^r is Cephes' degree-7
    polynomial in Horner form. With n <= 26 the result is a normal float:
    no overflow or subnormal handling is needed, which `_exp_f32` pays for.
    """
    from mlir.dialects import arith, math

    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    magic = 12582912.0 + 127.0
    t = math.fma(u, _f32(1.44269504088896341), _f32(magic))
    n = arith.subf(t, _f32(magic))
    r = math.fma(n, _f32(-0.693359375), u)
    r = math.fma(n, _f32(2.12194440e-4), r)
    p = _horner(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                    1.6666665459e-1, 5.0000001201e-1, 1.0, 1.0])
    scale = arith.bitcast(f32, arith.shli(arith.bitcast(i32, t), _i32(23)))
    return arith.mulf(p, scale)


def _tanh_f32(x: ir.Value) -> ir.Value:
    """Cephes tanhf: x + x^3 P(x^2) for |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)).

    Chosen over the Eigen/XLA rational approximation (less accurate, and it
    saturates early). Both branches run on every lane, so the large one is
    kept cheap: 2|x| is clamped to 18 (tanh(9) rounds to 1 in f32) and its
    exp needs no range handling (`_exp_f32_small`)
    (measurements: benchmarks/notes/cpu-schedules.md).
    """
    from mlir.dialects import arith, math

    ax = math.absf(x)
    z = arith.mulf(x, x)
    p = _horner(z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                    1.33314422036e-1, -3.33332819422e-1])
    small = math.fma(arith.mulf(p, z), x, x)
    e = _exp_f32_small(arith.minimumf(arith.addf(ax, ax), _f32(18.0)))
    big = arith.subf(_f32(1.0), arith.divf(_f32(2.0), arith.addf(e, _f32(1.0))))
    # NaN compares false and takes the polynomial path, which keeps it NaN
    # (the large branch's value for NaN, whatever it is, is not selected).
    r = arith.select(arith.cmpf(arith.CmpFPredicate.OGE, ax, _f32(0.625)), big, small)
    return math.copysign(r, x)  # odd; also keeps tanh(-0) = -0


_APPROXIMATIONS: dict[str, Callable[[ir.Value], ir.Value]] = {
    "math.exp": _exp_f32,
    "math.log": _log_f32,
    "math.tanh": _tanh_f32,
}


def approximate_f32_math(op: ir.Operation) -> None:
    """Replace f32 exp/log/tanh in the body of linalg op `op` by polynomial code."""
    f32 = ir.F32Type.get()
    for body_op in list(op.regions[0].blocks[0].operations):
        body_op = body_op.operation
        fn = _APPROXIMATIONS.get(body_op.name)
        if fn is None or body_op.results[0].type != f32:
            continue
        with ir.InsertionPoint(body_op), body_op.location:
            new = fn(body_op.operands[0])
        body_op.results[0].replace_all_uses_with(new)
        body_op.erase()
