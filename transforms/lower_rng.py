"""`--autodiff-lower-rng`: expand `autodiff.philox` into Philox4x32-10 code.

Every `autodiff.philox(%seed, %offset) {distribution = ...} -> tensor<...xT>`
becomes one `linalg.generic` over the output's elements whose body is pure
`arith`: no `math` ops, no calls, no libm or libdevice, no lookup tables.
Integer operations and correctly rounded float `+ - * /` are all it uses
(ln, sin, cos and sqrt are fixed polynomial and Newton sequences of them), so
the same IR gives bitwise-identical numbers on the CPU and the GPU pipelines
(provided neither contracts `a * b + c` into an fma, which LLVM only does
under fast-math flags this pass never sets; the NVPTX back-end emits
`mul.rn`/`add.rn`/`div.rn` for them).

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC'11; the Random123 reference): a 128-bit counter `(c0, c1, c2, c3)` and a
64-bit key `(k0, k1)`; ten rounds of

    (lo0, hi0) = 0xD2511F53 * c0        (lo1, hi1) = 0xCD9E8D57 * c2
    (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

with the key bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85) between
rounds. One block yields four 32-bit words. `philox4x32_10` emits one block
for given SSA counter/key words; it is what the known-answer tests exercise.

Stream layout (the contract `--autodiff-functionalize-rng` relies on)
--------------------------------------------------------------------
* key = (seed & 0xffffffff, seed >> 32), the i64 seed's two halves.
* `offset` counts 128-bit counter *blocks*. Block `b` of a draw uses the
  counter (c0, c1, c2, c3) = lo32/hi32 of (offset + b) (mod 2^64), then the
  optional `stream : i64` attribute's lo32/hi32 (default 0): independent
  sub-streams that never meet the offset-indexed ones.
* A unit attribute `keyed` marks a draw from an explicit key (the Python
  API's `random.key`, or a function marked `autodiff.rng_key`) rather than
  from the implicit generator's threaded state. It changes no number; it
  tells `--autodiff-vmap` that an unbatched draw is a pure function of its
  key, shared by all lanes whatever the `randomness` mode.
* Words: word `w` of a draw is lane `w mod 4` of block `w div 4`. Elements
  are taken in row-major (linear index) order.
* Elements of 64-bit types (f64, i64) use two consecutive words (w = 2i,
  2i + 1; low word first); every other element type uses one word (w = i).
* `bits`: integers. i32 (and narrower, truncated): the word itself; i64:
  `w0 | w1 << 32`.
* `uniform`: floats in [0, 1) by mantissa construction, exact, never 1:
  with p the type's significand width (f16 11, bf16 8, f32 24, f64 53),
  u = (x >> (W - p)) * 2^-p where x is the element's 32-bit word (W = 32) or
  its 64-bit pair (W = 64). With `low`/`high`: `low + (high - low) * u`
  computed in T (both constants rounded to T once), clamped below `high`.
* `normal`: Box-Muller on pairs of elements. Elements 2j and 2j + 1 share two
  uniforms u1, u2 (the words of "elements" 2j and 2j + 1 of a uniform draw of
  the same type, so both lie in one block):
  r = sqrt(-2 ln(1 - u1)), theta = 2 pi u2, element 2j = r cos(theta),
  element 2j + 1 = r sin(theta); then `mean + std * z`. `1 - u1` is in
  (0, 1], so the log is finite. ln, sin and cos are evaluated in-line by
  fixed polynomials (exact range reduction from the uniforms' integer bits),
  sqrt by Newton steps, in f32 for types up to 32 bits and in f64 for f64,
  then rounded to T.
* `blocks_consumed(type, distribution)` = ceil(words / 4) with
  words = n * wpe (uniform, bits) or 2 * ceil(n / 2) * wpe (normal), n the
  element count and wpe the words per element (1 or 2). A draw at `offset`
  touches exactly the blocks [offset, offset + blocks_consumed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from ..dialects.vocabulary import PHILOX
from .ad_support import horner, post_order_ops
from .diagnostics import fail
from .passes import Pass, register

#: Philox4x32 multipliers and Weyl key increments (Random123).
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10

DISTRIBUTIONS = ("uniform", "normal", "bits")
_PARAMS = {"uniform": ("low", "high"), "normal": ("mean", "std"), "bits": ()}


# ----------------------------------------------------------------------------
# Stream layout helpers (shared with --autodiff-functionalize-rng)
# ----------------------------------------------------------------------------


def _bitwidth(t: ir.Type) -> int:
    if isinstance(t, ir.IntegerType):
        return t.width
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(str(t), 0)


def words_per_element(element_type: ir.Type) -> int:
    """32-bit Philox words per output element: 2 for 64-bit types, else 1."""
    return 2 if _bitwidth(element_type) == 64 else 1


def blocks_consumed(result_type: ir.Type, distribution: str) -> int:
    """How many 128-bit counter blocks a draw of `result_type` consumes.

    A draw at `offset` uses exactly the blocks [offset, offset + result).
    """
    if not isinstance(result_type, ir.RankedTensorType) or not result_type.has_static_shape:
        raise ValueError(f"a draw needs a statically shaped tensor type, got {result_type}")
    n = math.prod(result_type.shape)
    wpe = words_per_element(result_type.element_type)
    words = 2 * ((n + 1) // 2) * wpe if distribution == "normal" else n * wpe
    return (words + 3) // 4


@dataclasses.dataclass(frozen=True)
class DrawSpec:
    """What a random op asks for, validated."""

    result_type: ir.RankedTensorType
    distribution: str
    params: dict[str, float]
    stream: int

    @property
    def blocks(self) -> int:
        return blocks_consumed(self.result_type, self.distribution)


_FLOAT_TYPES = ("f16", "bf16", "f32", "f64")


def draw_spec(op: ir.Operation, pass_name: str) -> DrawSpec:
    """Validate an `autodiff.random` / `autodiff.philox` op; raise a diagnostic if bad."""
    name = op.name
    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        raise fail(op, f"{pass_name}: '{name}' must produce one ranked tensor")
    rtype = op.results[0].type
    if not rtype.has_static_shape:
        raise fail(
            op,
            f"{pass_name}: '{name}' has a non-static result shape {rtype}; "
            "the numbers a draw consumes must be known at compile time",
        )
    if "distribution" not in op.attributes:
        raise fail(op, f"{pass_name}: '{name}' has no 'distribution' attribute")
    dist = ir.StringAttr(op.attributes["distribution"]).value
    if dist not in DISTRIBUTIONS:
        raise fail(op, f"{pass_name}: unknown distribution '{dist}' on '{name}'")
    elt = rtype.element_type
    if dist == "bits":
        if not isinstance(elt, ir.IntegerType) or elt.width not in (1, 8, 16, 32, 64):
            raise fail(
                op, f"{pass_name}: 'bits' draws need an integer element type, got {elt}"
            )
    elif str(elt) not in _FLOAT_TYPES:
        raise fail(
            op,
            f"{pass_name}: '{dist}' draws need a float element type "
            f"({', '.join(_FLOAT_TYPES)}), got {elt}",
        )
    params: dict[str, float] = {}
    for key in ("low", "high", "mean", "std"):
        if key not in op.attributes:
            continue
        if key not in _PARAMS[dist]:
            raise fail(op, f"{pass_name}: attribute '{key}' does not apply to '{dist}' draws")
        attr = op.attributes[key]
        if isinstance(attr, (ir.FloatAttr, ir.IntegerAttr)):
            params[key] = float(attr.value)
        else:
            raise fail(op, f"{pass_name}: attribute '{key}' must be a float, got {attr}")
    if dist == "uniform":
        low, high = params.get("low", 0.0), params.get("high", 1.0)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise fail(op, f"{pass_name}: uniform draw needs finite low < high, got "
                           f"[{low}, {high})")
    if dist == "normal":
        mean, std = params.get("mean", 0.0), params.get("std", 1.0)
        if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
            raise fail(op, f"{pass_name}: normal draw needs a finite mean and std >= 0, got "
                           f"mean={mean}, std={std}")
    stream = 0
    if "stream" in op.attributes:
        attr = op.attributes["stream"]
        if not isinstance(attr, ir.IntegerAttr):
            raise fail(op, f"{pass_name}: attribute 'stream' must be an integer, got {attr}")
        stream = attr.value & 0xFFFFFFFFFFFFFFFF
    return DrawSpec(rtype, dist, params, stream)


# ----------------------------------------------------------------------------
# Emission helpers (at the current insertion point and location)
# ----------------------------------------------------------------------------


def _signed(value: int, width: int) -> int:
    """Two's-complement representation of an unsigned constant (the bindings want signed)."""
    value &= (1 << width) - 1
    return value - (1 << width) if value >= 1 << (width - 1) else value


def _iconst(t: ir.Type, value: int) -> ir.Value:
    width = 64 if isinstance(t, ir.IndexType) else t.width
    return arith.constant(t, ir.IntegerAttr.get(t, _signed(value, width)))


def _fconst(t: ir.Type, value: float) -> ir.Value:
    return arith.constant(t, ir.FloatAttr.get(t, value))


def philox4x32_10(ctr: Sequence[ir.Value], key: Sequence[ir.Value]) -> list[ir.Value]:
    """Emit one Philox4x32-10 block: four i32 counter words, two i32 key words -> four words."""
    i32 = ir.IntegerType.get_signless(32)
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    m0, m1 = _iconst(i32, PHILOX_M0), _iconst(i32, PHILOX_M1)
    w0, w1 = _iconst(i32, PHILOX_W0), _iconst(i32, PHILOX_W1)
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = arith.addi(k0, w0), arith.addi(k1, w1)
        lo0, hi0 = arith.mului_extended(m0, c0)
        lo1, hi1 = arith.mului_extended(m1, c2)
        c0, c1, c2, c3 = (
            arith.xori(arith.xori(hi1, c1), k0),
            lo1,
            arith.xori(arith.xori(hi0, c3), k1),
            lo0,
        )
    return [c0, c1, c2, c3]


def _split64(v: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(lo32, hi32) of an i64 value."""
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    return arith.trunci(i32, v), arith.trunci(i32, arith.shrui(v, _iconst(i64, 32)))


def philox_block_at(seed: ir.Value, block: ir.Value, stream: int) -> list[ir.Value]:
    """The four words of counter block `block` (i64) of the stream keyed by `seed` (i64)."""
    i32 = ir.IntegerType.get_signless(32)
    c0, c1 = _split64(block)
    c2, c3 = _iconst(i32, stream & 0xFFFFFFFF), _iconst(i32, stream >> 32)
    return philox4x32_10([c0, c1, c2, c3], list(_split64(seed)))


def _pick(sel_hi: ir.Value, sel_lo: ir.Value | None, words: Sequence[ir.Value]) -> ir.Value:
    """words[2 * sel_hi + sel_lo] (sel_lo None: words[2 * sel_hi])."""
    if sel_lo is None:
        return arith.select(sel_hi, words[2], words[0])
    return arith.select(
        sel_hi, arith.select(sel_lo, words[3], words[2]), arith.select(sel_lo, words[1], words[0])
    )


def _bit(v: ir.Value, k: int) -> ir.Value:
    """Bit k of an i64 as an i1."""
    i1, i64 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
    if k:
        v = arith.shrui(v, _iconst(i64, k))
    return arith.trunci(i1, v)


def _join64(lo: ir.Value, hi: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    return arith.ori(
        arith.extui(i64, lo), arith.shli(arith.extui(i64, hi), _iconst(i64, 32))
    )


def _significand_bits(t: ir.Type) -> int:
    return {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}[str(t)]


def _mantissa_int(word: ir.Value, p: int) -> ir.Value:
    """The top p bits of `word` (i32 or i64) as an integer of the same width."""
    width = word.type.width
    return arith.shrui(word, _iconst(word.type, width - p))


def _uniform_from_int(m: ir.Value, t: ir.Type, p: int) -> ir.Value:
    """m * 2^-p in float type t (exact: m < 2^p)."""
    return arith.mulf(arith.uitofp(t, m), _fconst(t, 2.0**-p))


def _round_to(t: ir.Type, value: float) -> float:
    """`value` rounded to float type t (round to nearest even), as a Python float."""
    if str(t) == "bf16":
        bits = int(np.array(value, np.float32).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return float(np.array(bits, np.uint32).view(np.float32))
    return float({"f16": np.float16, "f32": np.float32, "f64": np.float64}[str(t)](value))


def _prev_float(t: ir.Type, value: float) -> float:
    """The largest value of type t below `value` (which is representable in t)."""
    if str(t) == "bf16":
        x = np.array(value, np.float32).view(np.uint32)
        step = 1 << 16
        bits = int(x) - step if value > 0 else int(x) + step
        if value == 0:
            bits = 0x80000000 | step
        return float(np.array(bits, np.uint32).view(np.float32))
    nt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[str(t)]
    return float(np.nextafter(nt(value), nt(-np.inf)))


# --- log, sin, cos as fixed polynomials ------------------------------------

# Terms of the series below, per compute type: enough for the type's epsilon
# on the reduced ranges (|s| <= 0.1716 for log, |x| <= pi/4 for sin/cos).
_LOG_TERMS = {"f32": 6, "f64": 11}
_SIN_TERMS = {"f32": 6, "f64": 9}
_COS_TERMS = {"f32": 6, "f64": 10}
# ln 2 split so that e * LN2_HI is exact for the exponents met here (fdlibm).
_LN2_HI = {"f32": 0.693145751953125, "f64": 6.93147180369123816490e-01}
_LN2_LO = {"f32": 1.428606765330187045e-06, "f64": 1.90821492927058770002e-10}


def _log_unit(v: ir.Value) -> ir.Value:
    """ln(v) for v a positive normal float (f32 or f64).

    v = m * 2^e with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = (m-1)/(m+1).
    """
    t = v.type
    key = str(t)
    width, mant, bias = (32, 23, 127) if key == "f32" else (64, 52, 1023)
    it = ir.IntegerType.get_signless(width)
    bits = arith.bitcast(it, v)
    e = arith.subi(arith.shrui(bits, _iconst(it, mant)), _iconst(it, bias))
    mbits = arith.ori(
        arith.andi(bits, _iconst(it, (1 << mant) - 1)), _iconst(it, bias << mant)
    )
    m = arith.bitcast(t, mbits)
    big = arith.cmpf(arith.CmpFPredicate.OGT, m, _fconst(t, math.sqrt(2.0)))
    m = arith.select(big, arith.mulf(m, _fconst(t, 0.5)), m)
    e = arith.select(big, arith.addi(e, _iconst(it, 1)), e)
    s = arith.divf(arith.subf(m, _fconst(t, 1.0)), arith.addf(m, _fconst(t, 1.0)))
    s2 = arith.mulf(s, s)
    series = horner(s2, [1.0 / (2 * k + 1) for k in range(_LOG_TERMS[key])])
    ln_m = arith.mulf(arith.mulf(_fconst(t, 2.0), s), series)
    ef = arith.sitofp(t, e)
    return arith.addf(
        arith.mulf(ef, _fconst(t, _LN2_HI[key])),
        arith.addf(arith.mulf(ef, _fconst(t, _LN2_LO[key])), ln_m),
    )


# Newton steps for sqrt from the bit-trick first guess (relative error < 3.5%,
# squared at each step): enough for the type's last bit.
_SQRT_STEPS = {"f32": 4, "f64": 5}
# bits(sqrt(x)) ~ bits(x) / 2 + K: halve the exponent, K re-biases it (and
# centres the mantissa error).
_SQRT_MAGIC = {"f32": 0x1FBD1DF5, "f64": 0x1FF7A3BEA91D9B1B}


def _sqrt_nonneg(x: ir.Value) -> ir.Value:
    """sqrt(x) for x >= 0 (f32 or f64) by Newton's method on add/mul/div only.

    Not `math.sqrt`: the GPU pipeline calls libdevice's `__nv_sqrtf`, which is
    approximate unless the module asks for precise sqrt, so the two back-ends
    would differ in the last bits. These steps are plain IEEE operations.
    """
    t = x.type
    key = str(t)
    it = ir.IntegerType.get_signless(32 if key == "f32" else 64)
    guess = arith.addi(
        arith.shrui(arith.bitcast(it, x), _iconst(it, 1)), _iconst(it, _SQRT_MAGIC[key])
    )
    y = arith.bitcast(t, guess)
    half = _fconst(t, 0.5)
    for _ in range(_SQRT_STEPS[key]):
        y = arith.mulf(half, arith.addf(y, arith.divf(x, y)))
    zero = _fconst(t, 0.0)
    positive = arith.cmpf(arith.CmpFPredicate.OGT, x, zero)
    return arith.select(positive, y, zero)


def _sincos_turn(mi: ir.Value, p: int, t: ir.Type) -> tuple[ir.Value, ir.Value]:
    """(sin, cos) of 2 pi u with u = mi * 2^-p, mi an integer in [0, 2^p).

    The quarter-turn reduction is exact in integers: q = round(4u),
    f = 4u - q in [-1/2, 1/2], x = f * pi/2 in [-pi/4, pi/4].
    """
    it = mi.type
    key = str(t)
    q = arith.shrui(arith.addi(mi, _iconst(it, 1 << (p - 3))), _iconst(it, p - 2))
    r = arith.subi(mi, arith.shli(q, _iconst(it, p - 2)))
    x = arith.mulf(
        arith.mulf(arith.sitofp(t, r), _fconst(t, 2.0 ** -(p - 2))), _fconst(t, math.pi / 2)
    )
    x2 = arith.mulf(x, x)
    sin_c = [(-1) ** k / math.factorial(2 * k + 1) for k in range(_SIN_TERMS[key])]
    cos_c = [(-1) ** k / math.factorial(2 * k) for k in range(_COS_TERMS[key])]
    sin_x = arith.mulf(x, horner(x2, sin_c))
    cos_x = horner(x2, cos_c)
    # Quadrant q mod 4: (sin, cos)(x + q pi/2) = (s, c), (c, -s), (-s, -c), (-c, s).
    i1 = ir.IntegerType.get_signless(1)
    q0 = arith.trunci(i1, q)
    q1 = arith.trunci(i1, arith.shrui(q, _iconst(it, 1)))
    a = arith.select(q0, cos_x, sin_x)  # |sin| before the sign
    b = arith.select(q0, sin_x, cos_x)  # |cos| before the sign
    neg_sin = q1
    neg_cos = arith.xori(q0, q1)
    sin_t = arith.select(neg_sin, arith.negf(a), a)
    cos_t = arith.select(neg_cos, arith.negf(b), b)
    return sin_t, cos_t


# --- one element of a draw --------------------------------------------------


def _element(spec: DrawSpec, seed: ir.Value, offset: ir.Value, lin: ir.Value) -> ir.Value:
    """The value of element `lin` (i64 linear index) of the draw `spec`."""
    i64 = ir.IntegerType.get_signless(64)
    elt = spec.result_type.element_type
    wpe = words_per_element(elt)
    dist = spec.distribution

    if dist == "normal":
        # Pair j = lin div 2; its two uniforms' words start at word 2 * j * wpe.
        j = arith.shrui(lin, _iconst(i64, 1))
        if wpe == 1:
            block = arith.addi(offset, arith.shrui(j, _iconst(i64, 1)))
            words = philox_block_at(seed, block, spec.stream)
            upper = _bit(j, 0)  # lanes (2, 3) instead of (0, 1)
            x1, x2 = _pick(upper, None, words), _pick(upper, None, words[1:] + words[:1])
            ct = ir.F32Type.get()
            p = 24
            m1, m2 = _mantissa_int(x1, p), _mantissa_int(x2, p)
        else:
            block = arith.addi(offset, j)
            w = philox_block_at(seed, block, spec.stream)
            ct = ir.F64Type.get()
            p = 53
            m1 = _mantissa_int(_join64(w[0], w[1]), p)
            m2 = _mantissa_int(_join64(w[2], w[3]), p)
        one = _fconst(ct, 1.0)
        v = arith.subf(one, _uniform_from_int(m1, ct, p))  # in (0, 1]
        radius = _sqrt_nonneg(arith.mulf(_fconst(ct, -2.0), _log_unit(v)))
        sin_t, cos_t = _sincos_turn(m2, p, ct)
        z = arith.mulf(radius, arith.select(_bit(lin, 0), sin_t, cos_t))
        if ct != elt:
            z = arith.truncf(elt, z)
        mean, std = spec.params.get("mean", 0.0), spec.params.get("std", 1.0)
        if std != 1.0:
            z = arith.mulf(z, _fconst(elt, _round_to(elt, std)))
        if mean != 0.0:
            z = arith.addf(z, _fconst(elt, _round_to(elt, mean)))
        return z

    # uniform and bits: element lin uses word(s) lin * wpe (+ 1).
    if wpe == 1:
        block = arith.addi(offset, arith.shrui(lin, _iconst(i64, 2)))
        words = philox_block_at(seed, block, spec.stream)
        x = _pick(_bit(lin, 1), _bit(lin, 0), words)
    else:
        block = arith.addi(offset, arith.shrui(lin, _iconst(i64, 1)))
        words = philox_block_at(seed, block, spec.stream)
        upper = _bit(lin, 0)
        x = _join64(_pick(upper, None, words), _pick(upper, None, words[1:] + words[:1]))

    if dist == "bits":
        if elt.width < x.type.width:
            x = arith.trunci(elt, x)
        return x

    p = _significand_bits(elt)
    u = _uniform_from_int(_mantissa_int(x, p), elt, p)
    low, high = spec.params.get("low", 0.0), spec.params.get("high", 1.0)
    if (low, high) != (0.0, 1.0):
        scale = _round_to(elt, high - low)
        u = arith.addf(_fconst(elt, _round_to(elt, low)), arith.mulf(_fconst(elt, scale), u))
        # Rounding may reach `high`; the interval is half-open.
        u = arith.minimumf(u, _fconst(elt, _prev_float(elt, _round_to(elt, high))))
    return u


def emit_draw(spec: DrawSpec, seed: ir.Value, offset: ir.Value) -> ir.Value:
    """Emit `tensor.empty` + `linalg.generic` computing the draw; return the tensor."""
    rtype = spec.result_type
    rank = rtype.rank
    elt = rtype.element_type
    empty = tensor.empty(list(rtype.shape), elt)
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    generic = linalg.GenericOp(
        result_tensors=[rtype],
        inputs=[],
        outputs=[empty],
        indexing_maps=ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))]),
        iterator_types=ir.ArrayAttr.get([parallel] * rank),
    )
    body = generic.regions[0].blocks.append(elt)
    with ir.InsertionPoint(body):
        index = ir.IndexType.get()
        lin = _iconst(index, 0) if rank == 0 else linalg.IndexOp(0).result
        for d in range(1, rank):
            lin = arith.addi(
                arith.muli(lin, _iconst(index, rtype.shape[d])), linalg.IndexOp(d).result
            )
        lin64 = arith.index_cast(ir.IntegerType.get_signless(64), lin)
        linalg.YieldOp([_element(spec, seed, offset, lin64)])
    return generic.result


# ----------------------------------------------------------------------------
# The pass
# ----------------------------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class LowerRng(Pass):
    name = "autodiff-lower-rng"
    summary = "Expand autodiff.philox into linalg/arith Philox4x32-10 code (CPU and GPU alike)"

    def run(self, module: ir.Operation) -> None:
        with module.context:
            ops = [o for o in post_order_ops(module) if o.name == PHILOX]
            specs = [draw_spec(op, self.name) for op in ops]  # every error before any rewrite
            for op, spec in zip(ops, specs):
                with op.location, ir.InsertionPoint(op):
                    value = emit_draw(spec, op.operands[0], op.operands[1])
                op.results[0].replace_all_uses_with(value)
                op.erase()
