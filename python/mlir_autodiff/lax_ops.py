"""jax.lax's everyday operations (`lax.add`, `lax.exp`, `lax.dot_general`, `lax.pad`, ...).

Re-exported by `mlir_autodiff.lax`. Each is a composite of the
`mlir_autodiff.numpy` functions (or, for the integer-only operations, one
elementwise op), so jvp, vjp, vmap and every order of derivative come from
the rules those ops already have, and outside a trace they run on numpy.

lax is strict where numpy promotes, and so are these:

- binary operations need operands of one dtype; a Python scalar (or a
  weakly typed traced value) adopts the other operand's dtype when its kind
  matches (`lax.add(x_f32, 1.0)` is float32, as in jax's default mode), and
  `lax.add(x_float, 1)` is a TypeError. Shapes must be equal, except that a
  0-d operand broadcasts and, in operands of equal rank, a dimension of
  size 1 does (as jax.lax allows); different ranks are a TypeError;
- the float functions (`exp`, `sin`, `erf`, `floor`, ...) reject integers;
  the bitwise ones and the shifts reject floats;
- where lax's semantics differ from numpy's, these follow lax: `div` of
  integers truncates toward zero (-1 for a zero divisor), `rem` has the sign
  of the dividend (C's fmod; the dividend for a zero divisor), `round`
  rounds half away from zero unless `rounding_method` is `TO_NEAREST_EVEN`,
  `convert_element_type` from float to int saturates (NaN -> 0), the shifts
  give 0 (or the sign fill) for shift amounts outside [0, bits), `pad`
  takes (low, high, interior) per dimension with negative low/high cropping.

Reductions take a tuple of axes; `reduce(operand, init, computation,
dimensions)` knows the monoids `add`, `mul`, `max`, `min` and the bitwise
and/or/xor (these functions, numpy's, operator's) and folds any other binary
function pairwise over the reduced axes (as XLA, assuming it associative);
the init value is combined once unless it is the monoid's identity. The same
functions are accepted as `reduce_window`'s `computation`.
"""

from __future__ import annotations

import builtins
import enum
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith

from . import numpy as anp
from . import primitives as P
from . import pytree
from . import special_math as _sm
from .convolution import _pad as _pad_impl
from .differentiate import stop_gradient
from .tracing import Tracer, canonical_dtype, current_trace, format_site, is_float_dtype

_bmax, _bmin, _babs, _bround, _bslice = builtins.max, builtins.min, builtins.abs, \
    builtins.round, builtins.slice


class RoundingMethod(enum.IntEnum):
    """jax.lax.RoundingMethod: how `round` breaks ties."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


# --------------------------------------------------------------------------- checking

def _site() -> str:
    return f"(at {format_site()})"


def _dtype_of(x: Any) -> tuple[np.dtype, bool]:
    """(dtype, weak) of an operand: Python scalars and weakly typed tracers are weak."""
    if isinstance(x, (list, tuple)):
        raise TypeError(f"lax functions take arrays and scalars, got a {type(x).__name__} "
                        f"{_site()}")
    return anp._info(x)


def _category(dt: np.dtype) -> str:
    if is_float_dtype(dt):
        return "floating"
    if dt == np.bool_:
        return "bool"
    return "integer"


def _common_dtype(name: str, xs: Sequence[Any]) -> np.dtype:
    """The one dtype of lax's operands, or jax's TypeError."""
    infos = [_dtype_of(x) for x in xs]
    strong = [d for d, w in infos if not w]
    if strong and builtins.any(d != strong[0] for d in strong):
        raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(d.name for d in strong)} {_site()} (anp.{name} is the "
                        "promoting counterpart)")
    if strong:
        base = strong[0]
        for d, w in infos:
            if w and _category(d) != _category(base):
                raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                                f"{', '.join(dd.name for dd, _ in infos)} {_site()}: a "
                                f"Python {_category(d)} scalar does not adopt {base.name}")
        return canonical_dtype(base)
    return builtins.max((d for d, _ in infos), key=lambda d: ("bif".index(d.kind), d.itemsize))


def _check_shapes(name: str, xs: Sequence[Any]) -> None:
    shapes = [tuple(anp.shape(x)) for x in xs]
    arrays = [s for s in shapes if len(s)]
    if not arrays:
        return
    if len({len(s) for s in arrays}) > 1:
        raise TypeError(f"lax.{name}: arrays must have the same number of dimensions, got "
                        f"shapes {', '.join(map(str, shapes))} {_site()}")
    for dims in zip(*arrays):
        big = {d for d in dims if d != 1}
        if len(big) > 1:
            raise TypeError(f"lax.{name} got incompatible shapes for broadcasting: "
                            f"{', '.join(map(str, shapes))} {_site()}")


_KINDS = {"floating": ("floating",), "integer": ("integer",),
          "int_or_bool": ("integer", "bool"), "number": ("floating", "integer"),
          "any": ("floating", "integer", "bool")}


def _accept(name: str, dt: np.dtype, kinds: str) -> None:
    if _category(dt) not in _KINDS[kinds]:
        raise TypeError(f"lax.{name} does not accept dtype {dt.name}; accepted dtypes are "
                        f"{' and '.join(_KINDS[kinds])} {_site()}")


def _operands(name: str, xs: Sequence[Any], kinds: str = "any") -> np.dtype:
    dt = _common_dtype(name, xs)
    _accept(name, dt, kinds)
    _check_shapes(name, xs)
    return dt


def _traced() -> bool:
    return current_trace() is not None


def _cast(x: Any, dt: np.dtype) -> Any:
    """A weak operand in the common dtype (strong operands already have it)."""
    if isinstance(x, Tracer):
        return anp.astype(x, dt) if x.dtype != dt else x
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return np.asarray(x, dt)
    return x


# --------------------------------------------------------------------------- elementwise

def _binary(name: str, fn: Callable[[Any, Any], Any], kinds: str = "number") -> Any:
    def op(x: Any, y: Any) -> Any:
        dt = _operands(name, [x, y], kinds)
        return fn(_cast(x, dt), _cast(y, dt))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"jax.lax.{name}: elementwise, operands of one dtype and shape."
    op.__module__ = __name__
    return op


def _unary(name: str, fn: Callable[[Any], Any], kinds: str = "floating") -> Any:
    def op(x: Any) -> Any:
        dt = _operands(name, [x], kinds)
        return fn(_cast(x, dt))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"jax.lax.{name}: elementwise ({' or '.join(_KINDS[kinds])} operands)."
    op.__module__ = __name__
    return op


def _int_elementwise(name: str, x: Any, y: Any, body: Callable[..., ir.Value],
                     eager: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Any:
    """One integer elementwise op (no derivative): traced `body(dtype, a, b)`, eager numpy."""
    dt = _common_dtype(name, [x, y])
    x, y = _cast(x, dt), _cast(y, dt)
    if not _traced():
        with np.errstate(all="ignore"):
            return anp.asarray(eager(np.asarray(x, dt), np.asarray(y, dt)).astype(dt))
    a, b = anp._t(x), anp._t(y)
    return P.elementwise(name, [a, b], dt, lambda v: body(dt, v[0], v[1]))


def _int_div_body(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    safe, is_zero = anp._safe_divisor(d, a, b)
    return arith.select(is_zero, anp._f(d, -1), arith.divsi(a, safe))


def _int_rem_body(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    safe, is_zero = anp._safe_divisor(d, a, b)
    return arith.select(is_zero, a, arith.remsi(a, safe))


def _eager_trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    q = np.where((a < 0) != (safe < 0), -q, q)
    return np.where(b == 0, -1, q)


def _eager_trunc_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, a, np.fmod(a, safe))


def div(x: Any, y: Any) -> Any:
    """jax.lax.div: float division, or integer division truncating toward zero
    (x / 0 is -1 and INT_MIN / -1 is INT_MIN, as in jax)."""
    dt = _operands("div", [x, y], "number")
    if is_float_dtype(dt):
        return anp.true_divide(_cast(x, dt), _cast(y, dt))
    return _int_elementwise("div", x, y, _int_div_body, _eager_trunc_div)


def rem(x: Any, y: Any) -> Any:
    """jax.lax.rem: the remainder with the sign of the dividend (C's fmod); an
    integer remainder by 0 is the dividend."""
    dt = _operands("rem", [x, y], "number")
    if is_float_dtype(dt):
        return anp.fmod(_cast(x, dt), _cast(y, dt))
    return _int_elementwise("rem", x, y, _int_rem_body, _eager_trunc_rem)


def _shift(name: str, op: Callable[[ir.Value, ir.Value], ir.Value], arithmetic: bool,
           eager: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Any:
    def body(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
        bits = anp._f(d, d.itemsize * 8)
        out_of_range = arith.cmpi(arith.CmpIPredicate.uge, b, bits)
        safe = arith.select(out_of_range, anp._f(d, 0), b)
        fill = (arith.shrsi(a, anp._f(d, d.itemsize * 8 - 1)) if arithmetic
                else anp._f(d, 0))
        return arith.select(out_of_range, fill, op(a, safe))

    def eager_fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = a.dtype.itemsize * 8
        bad = (b < 0) | (b >= bits)
        fill = (a >> (bits - 1)) if arithmetic else np.zeros_like(a)
        return np.where(bad, fill, eager(a, np.where(bad, 0, b)))

    def fn(x: Any, y: Any) -> Any:
        _operands(name, [x, y], "integer")
        return _int_elementwise(name, x, y, body, eager_fn)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"jax.lax.{name} of integers; shift amounts outside [0, bits) give "
                  f"{'the sign fill' if arithmetic else '0'}.")
    return fn


def _srl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return (u >> b.astype(u.dtype)).view(a.dtype)


shift_left = _shift("shift_left", arith.shli, False, lambda a, b: a << b)
shift_right_logical = _shift("shift_right_logical", arith.shrui, False, _srl)
shift_right_arithmetic = _shift("shift_right_arithmetic", arith.shrsi, True,
                                lambda a, b: a >> b)

add = _binary("add", anp.add)
sub = _binary("sub", anp.subtract)
mul = _binary("mul", anp.multiply)
max = _binary("max", anp.maximum)  # noqa: A001 - jax.lax's name
min = _binary("min", anp.minimum)  # noqa: A001 - jax.lax's name
atan2 = _binary("atan2", anp.arctan2, "floating")
eq = _binary("eq", anp.equal, "any")
ne = _binary("ne", anp.not_equal, "any")
lt = _binary("lt", anp.less)
le = _binary("le", anp.less_equal)
gt = _binary("gt", anp.greater)
ge = _binary("ge", anp.greater_equal)
bitwise_and = _binary("bitwise_and", anp.bitwise_and, "int_or_bool")
bitwise_or = _binary("bitwise_or", anp.bitwise_or, "int_or_bool")
bitwise_xor = _binary("bitwise_xor", anp.bitwise_xor, "int_or_bool")
bitwise_not = _unary("bitwise_not", anp.invert, "int_or_bool")

neg = _unary("neg", anp.negative, "number")
abs = _unary("abs", anp.abs, "number")  # noqa: A001 - jax.lax's name
sign = _unary("sign", anp.sign, "number")
square = _unary("square", anp.square, "number")
exp = _unary("exp", anp.exp)
exp2 = _unary("exp2", anp.exp2)
log = _unary("log", anp.log)
log1p = _unary("log1p", anp.log1p)
expm1 = _unary("expm1", anp.expm1)
sin = _unary("sin", anp.sin)
cos = _unary("cos", anp.cos)
tan = _unary("tan", anp.tan)
asin = _unary("asin", anp.arcsin)
acos = _unary("acos", anp.arccos)
atan = _unary("atan", anp.arctan)
sinh = _unary("sinh", anp.sinh)
cosh = _unary("cosh", anp.cosh)
tanh = _unary("tanh", anp.tanh)
asinh = _unary("asinh", anp.arcsinh)
acosh = _unary("acosh", anp.arccosh)
atanh = _unary("atanh", anp.arctanh)
sqrt = _unary("sqrt", anp.sqrt)
rsqrt = _unary("rsqrt", lambda x: 1.0 / anp.sqrt(x))
cbrt = _unary("cbrt", anp.cbrt)
reciprocal = _unary("reciprocal", anp.reciprocal)
floor = _unary("floor", anp.floor)
ceil = _unary("ceil", anp.ceil)
is_finite = _unary("is_finite", anp.isfinite)
erf = _unary("erf", _sm.erf)
erfc = _unary("erfc", _sm.erfc)
erf_inv = _unary("erf_inv", _sm.erfinv)
lgamma = _unary("lgamma", _sm.gammaln)
digamma = _unary("digamma", _sm.digamma)


def _logistic(x: Any) -> Any:
    pos = x >= 0
    e = anp.exp(anp.where(pos, -x, x))   # exp of a non-positive number: no overflow
    return anp.where(pos, 1.0 / (1.0 + e), e / (1.0 + e))


logistic = _unary("logistic", _logistic)


def round(x: Any, rounding_method: Any = RoundingMethod.AWAY_FROM_ZERO) -> Any:  # noqa: A001
    """jax.lax.round: to the nearest integer, ties away from zero (rounding_method 0,
    the default) or to even (1); its derivative is 0."""
    dt = _operands("round", [x], "floating")
    x = _cast(x, dt)
    method = RoundingMethod(int(rounding_method))
    if method == RoundingMethod.TO_NEAREST_EVEN:
        return anp.rint(x)
    t = anp.trunc(x)   # x - trunc(x) is exact: the tie test is exact
    return anp.where(anp.abs(x - t) >= 0.5, t + anp.sign(x), t)


def integer_pow(x: Any, y: int) -> Any:
    """jax.lax.integer_pow: x ** y for a static int y, by repeated squaring
    (a negative y is the reciprocal, floats only)."""
    dt = _operands("integer_pow", [x], "number")
    x = _cast(x, dt)
    y = int(y)
    if y < 0 and not is_float_dtype(dt):
        raise TypeError(f"lax.integer_pow: integers cannot be raised to negative powers, got "
                        f"{dt.name} ** {y} {_site()}")
    n, acc, base = _babs(y), None, x
    while n:
        if n & 1:
            acc = base if acc is None else anp.multiply(acc, base)
        n >>= 1
        if n:
            base = anp.multiply(base, base)
    if acc is None:
        return anp.ones_like(x)
    return anp.reciprocal(acc) if y < 0 else acc


def pow(x: Any, y: Any) -> Any:  # noqa: A001 - jax.lax's name
    """jax.lax.pow: a float base to a float exponent of its dtype or to an integer exponent."""
    dtx, _ = _dtype_of(x)
    dty, wy = _dtype_of(y)
    _accept("pow", dtx, "floating")
    if is_float_dtype(dty):
        dt = _operands("pow", [x, y], "floating")
        return anp.power(_cast(x, dt), _cast(y, dt))
    _accept("pow", dty, "integer")
    _check_shapes("pow", [x, y])
    return anp.power(x, y)


def clamp(min: Any, x: Any, max: Any) -> Any:  # noqa: A002 - jax.lax's signature
    """jax.lax.clamp(min, x, max): `min` and `max` are 0-d or of x's shape. Derivatives
    as jax's away from ties: to x where min < x < max, to min where x < min, to max where
    the result is max."""
    lo, hi = min, max
    dt = _common_dtype("clamp", [lo, x, hi])
    _accept("clamp", dt, "number")
    shape = tuple(anp.shape(x))
    for what, b in (("min", lo), ("max", hi)):
        if tuple(anp.shape(b)) not in ((), shape):
            raise TypeError(f"lax.clamp requires {what}.shape == operand.shape or "
                            f"{what}.shape == (), got {what}.shape={anp.shape(b)}, "
                            f"operand.shape={shape} {_site()}")
    lo, x, hi = _cast(lo, dt), _cast(x, dt), _cast(hi, dt)
    t = anp.where(x < lo, lo, x)        # max(x, lo), then min(., hi): jax's value
    return anp.where(t > hi, hi, t)


def convert_element_type(operand: Any, new_dtype: Any) -> Any:
    """jax.lax.convert_element_type: numpy's astype, except that float -> int saturates at
    the integer range and maps NaN to 0 (as XLA converts)."""
    dt = canonical_dtype(new_dtype)
    x = anp.asarray(operand)
    src = np.dtype(x.dtype)
    if is_float_dtype(src) and dt.kind in "iu":
        info = np.iinfo(dt)
        hi, lo = float(info.max), float(info.min)   # float(max) may round up: compare >=
        bad = anp.isnan(x) | (x >= hi) | (x <= lo)
        r = anp.astype(anp.where(bad, anp.zeros((), src), x), dt)
        return anp.where(x >= hi, np.asarray(info.max, dt),
                         anp.where(x <= lo, np.asarray(info.min, dt), r))
    return anp.astype(x, dt)


# --------------------------------------------------------------------------- reductions

def _axes(name: str, axes: Any, ndim: int) -> tuple[int, ...]:
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(int(a) for a in axes)
    for a in axes:
        if not 0 <= a < ndim:
            raise ValueError(f"lax.{name}: reduction axis {a} is out of range for an operand "
                             f"of rank {ndim} {_site()}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"lax.{name}: duplicate axes {axes} {_site()}")
    return axes


def _fold(x: Any, axes: Sequence[int], fn: Callable[[Any, Any], Any]) -> Any:
    """`fn` folded over `axes` pairwise (log2 depth): for monoids without a numpy reduction."""
    for ax in sorted(axes, reverse=True):
        while anp.shape(x)[ax] > 1:
            n = anp.shape(x)[ax]
            h = n // 2
            idx = [_bslice(None)] * anp.ndim(x)
            lo, hi, tail = list(idx), list(idx), list(idx)
            lo[ax], hi[ax], tail[ax] = _bslice(0, h), _bslice(h, 2 * h), _bslice(2 * h, n)
            y = fn(x[tuple(lo)], x[tuple(hi)])
            x = anp.concatenate([y, x[tuple(tail)]], ax) if n % 2 else y
        x = anp.squeeze(x, ax)
    return x


def _bit_reduce(name: str, op: Callable[[Any, Any], Any], logical: Callable[..., Any]) -> Any:
    def fn(operand: Any, axes: Any) -> Any:
        x = anp.asarray(operand)
        _accept(name, np.dtype(x.dtype), "int_or_bool")
        ax = _axes(name, axes, x.ndim)
        if np.dtype(x.dtype) == np.bool_:
            return logical(x, axis=ax)
        if builtins.any(anp.shape(x)[a] == 0 for a in ax):
            raise ValueError(f"lax.{name} of an empty axis is not supported {_site()}")
        return _fold(x, ax, op)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"jax.lax.{name} over `axes` (bool or integer operands)."
    return fn


reduce_and = _bit_reduce("reduce_and", anp.bitwise_and, anp.all)
reduce_or = _bit_reduce("reduce_or", anp.bitwise_or, anp.any)
reduce_xor = _bit_reduce("reduce_xor", anp.bitwise_xor,
                         lambda x, axis: _fold(x, axis, anp.not_equal))


def _reducer(name: str, fn: Callable[..., Any], kinds: str = "number") -> Any:
    def red(operand: Any, axes: Any) -> Any:
        x = anp.asarray(operand)
        dt = np.dtype(x.dtype)
        _accept(name, dt, kinds)
        return anp.astype(fn(x, axis=_axes(name, axes, x.ndim)), dt)

    red.__name__ = red.__qualname__ = name
    red.__doc__ = f"jax.lax.{name} over `axes` (a tuple); the result keeps the operand's dtype."
    return red


reduce_sum = _reducer("reduce_sum", anp.sum)
reduce_prod = _reducer("reduce_prod", anp.prod)
reduce_max = _reducer("reduce_max", anp.max, "any")
reduce_min = _reducer("reduce_min", anp.min, "any")

#: The monoids `reduce` and `reduce_window` know: computation -> (name, identity of a dtype).
_MONOIDS: dict[Any, str] = {}
for _names, _kind in (((add, anp.add, np.add, operator.add), "add"),
                      ((mul, anp.multiply, np.multiply, operator.mul), "mul"),
                      ((max, anp.maximum, np.maximum), "max"),
                      ((min, anp.minimum, np.minimum), "min"),
                      ((bitwise_and, anp.bitwise_and, np.bitwise_and, operator.and_), "and"),
                      ((bitwise_or, anp.bitwise_or, np.bitwise_or, operator.or_), "or"),
                      ((bitwise_xor, anp.bitwise_xor, np.bitwise_xor, operator.xor), "xor")):
    for _f in _names:
        _MONOIDS[_f] = _kind
for _f, _kind in ((add, "add"), (max, "max"), (min, "min")):
    _f.reduce_window_kind = _kind   # read by convolution.reduce_window


def _identity(kind: str, dt: np.dtype) -> Any:
    if kind in ("add", "or", "xor"):
        return 0
    if kind == "mul":
        return 1
    if kind == "and":
        return True if dt == np.bool_ else -1
    if is_float_dtype(dt):
        return -np.inf if kind == "max" else np.inf
    if dt == np.bool_:
        return kind == "min"
    info = np.iinfo(dt)
    return info.min if kind == "max" else info.max


_REDUCERS = {"add": reduce_sum, "mul": reduce_prod, "max": reduce_max, "min": reduce_min,
             "and": reduce_and, "or": reduce_or, "xor": reduce_xor}
_COMBINE = {"add": add, "mul": mul, "max": max, "min": min, "and": bitwise_and,
            "or": bitwise_or, "xor": bitwise_xor}


def reduce(operands: Any, init_values: Any, computation: Callable[[Any, Any], Any],
           dimensions: Sequence[int]) -> Any:
    """jax.lax.reduce of one array: `computation` over `dimensions`.

    A known monoid (add, mul, max, min, bitwise and/or/xor: these functions,
    numpy's or operator's) is that reduction, and `init_values` is combined
    once unless it is the identity (0, 1, -inf, ...). Any other binary
    function is folded pairwise (it must be associative and commutative, as
    for XLA), then combined with `init_values`."""
    if isinstance(operands, (tuple, list)) or isinstance(init_values, (tuple, list)):
        raise NotImplementedError(f"lax.reduce of several operands (a variadic reduce) is not "
                                  f"supported; reduce each operand {_site()}")
    x = anp.asarray(operands)
    dt = np.dtype(x.dtype)
    ax = _axes("reduce", dimensions, x.ndim)
    try:
        kind = _MONOIDS.get(computation)
    except TypeError:
        kind = None
    if kind is not None:
        out = _REDUCERS[kind](x, ax)
        static = not isinstance(init_values, Tracer)
        if static and anp.ndim(init_values) == 0:
            init = np.asarray(init_values).item()
            ident = _identity(kind, dt)
            if init == ident:
                return out
        return _COMBINE[kind](out, _cast_init(init_values, dt))
    if not callable(computation):
        raise TypeError(f"lax.reduce: computation must be a binary function, got "
                        f"{computation!r} {_site()}")
    return computation(_fold(x, ax, computation), _cast_init(init_values, dt))


def _cast_init(init: Any, dt: np.dtype) -> Any:
    if isinstance(init, Tracer):
        return init if init.dtype == dt else anp.astype(init, dt)
    return np.asarray(init, dt)


def argmax(operand: Any, axis: int, index_dtype: Any) -> Any:
    """jax.lax.argmax: the index of the first maximum along `axis` (NaN counts as the
    maximum), in `index_dtype`."""
    x = anp.asarray(operand)
    return anp.astype(anp.argmax(x, axis=_axes("argmax", (axis,), x.ndim)[0]), index_dtype)


def argmin(operand: Any, axis: int, index_dtype: Any) -> Any:
    """jax.lax.argmin: the index of the first minimum along `axis`, in `index_dtype`."""
    x = anp.asarray(operand)
    return anp.astype(anp.argmin(x, axis=_axes("argmin", (axis,), x.ndim)[0]), index_dtype)


# --------------------------------------------------------------------------- contractions

def _pet(x: Any, preferred: Any) -> Any:
    return x if preferred is None else anp.astype(x, preferred)


def dot(lhs: Any, rhs: Any, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """jax.lax.dot: vector-vector, matrix-vector, vector-matrix or matrix-matrix product
    (dtypes promote; `preferred_element_type` is the dtype it accumulates and returns)."""
    a, b = anp.asarray(lhs), anp.asarray(rhs)
    if a.ndim not in (1, 2) or b.ndim not in (1, 2) or a.shape[-1] != b.shape[0]:
        raise TypeError(f"lax.dot: only un-batched matrix/vector products are supported "
                        f"(use dot_general), got shapes {a.shape} and {b.shape} {_site()}")
    return anp.dot(_pet(a, preferred_element_type), _pet(b, preferred_element_type))


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Any, precision: Any = None,
                preferred_element_type: Any = None) -> Any:
    """jax.lax.dot_general: `dimension_numbers` = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch)); the result's axes are the batch axes, lhs's free axes,
    rhs's free axes. One (batched) matmul between transposes and reshapes."""
    a, b = anp.asarray(lhs), anp.asarray(rhs)
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(v) for v in t) for t in (lc, rc, lb, rb))
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise TypeError(f"lax.dot_general: contracting {lc}/{rc} and batch {lb}/{rb} "
                        f"dimensions must pair up {_site()}")
    for i, j in zip(lc + lb, rc + rb):
        if a.shape[i] != b.shape[j]:
            raise TypeError(f"lax.dot_general: lhs dimension {i} (size {a.shape[i]}) and rhs "
                            f"dimension {j} (size {b.shape[j]}) must match {_site()}")
    lf = [i for i in range(a.ndim) if i not in lc + lb]
    rf = [i for i in range(b.ndim) if i not in rc + rb]
    size = lambda t, dims: int(np.prod([t.shape[i] for i in dims], dtype=np.int64))  # noqa: E731
    batch = [a.shape[i] for i in lb]
    nb, m, k, n = size(a, lb), size(a, lf), size(a, lc), size(b, rf)
    a3 = anp.reshape(anp.transpose(_pet(a, preferred_element_type), lb + tuple(lf) + lc),
                     (nb, m, k))
    b3 = anp.reshape(anp.transpose(_pet(b, preferred_element_type), rb + rc + tuple(rf)),
                     (nb, k, n))
    out = anp.matmul(a3, b3)
    return anp.reshape(out, tuple(batch) + tuple(a.shape[i] for i in lf)
                       + tuple(b.shape[i] for i in rf))


def batch_matmul(lhs: Any, rhs: Any, precision: Any = None,
                 preferred_element_type: Any = None) -> Any:
    """jax.lax.batch_matmul: matmul over equal leading batch dimensions (rank >= 2)."""
    a, b = anp.asarray(lhs), anp.asarray(rhs)
    if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
        raise TypeError(f"lax.batch_matmul requires operands of equal rank >= 2 with equal "
                        f"batch dimensions, got {a.shape} and {b.shape} {_site()}")
    return anp.matmul(_pet(a, preferred_element_type), _pet(b, preferred_element_type))


# --------------------------------------------------------------------------- shapes

def _perm_check(name: str, perm: Sequence[int], ndim: int) -> tuple[int, ...]:
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(ndim)):
        raise TypeError(f"lax.{name}: {perm} is not a permutation of the operand's "
                        f"{ndim} dimensions {_site()}")
    return perm


def transpose(operand: Any, permutation: Sequence[int]) -> Any:
    """jax.lax.transpose: axes permuted (no negative entries, as in jax)."""
    x = anp.asarray(operand)
    return anp.transpose(x, _perm_check("transpose", permutation, x.ndim))


def reshape(operand: Any, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None,
            ) -> Any:
    """jax.lax.reshape: to `new_sizes` (no -1), after transposing by `dimensions` if given."""
    x = anp.asarray(operand)
    new = tuple(int(d) for d in new_sizes)
    if builtins.any(d < 0 for d in new) or int(np.prod(new, dtype=np.int64)) != x.size:
        raise TypeError(f"lax.reshape: new_sizes {new} do not match the {x.size} elements of "
                        f"shape {x.shape} {_site()}")
    if dimensions is not None:
        x = anp.transpose(x, _perm_check("reshape", dimensions, x.ndim))
    return anp.reshape(x, new)


def broadcast(operand: Any, sizes: Sequence[int]) -> Any:
    """jax.lax.broadcast: new leading dimensions of `sizes`."""
    x = anp.asarray(operand)
    return anp.broadcast_to(x, tuple(int(s) for s in sizes) + tuple(x.shape))


def broadcast_in_dim(operand: Any, shape: Sequence[int],
                     broadcast_dimensions: Sequence[int]) -> Any:
    """jax.lax.broadcast_in_dim: operand dimension i becomes output dimension
    broadcast_dimensions[i] (strictly increasing; size 1 or equal)."""
    x = anp.asarray(operand)
    shape = tuple(int(s) for s in shape)
    dims = tuple(int(d) for d in broadcast_dimensions)
    ok = (len(dims) == x.ndim and all(0 <= d < len(shape) for d in dims)
          and list(dims) == sorted(set(dims))
          and all(x.shape[i] in (1, shape[d]) for i, d in enumerate(dims)))
    if not ok:
        raise TypeError(f"lax.broadcast_in_dim: operand of shape {x.shape} cannot be "
                        f"broadcast to {shape} with broadcast_dimensions {dims} (one strictly "
                        f"increasing output dimension per operand dimension, each of size 1 "
                        f"or equal) {_site()}")
    inter = [1] * len(shape)
    for i, d in enumerate(dims):
        inter[d] = x.shape[i]
    return anp.broadcast_to(anp.reshape(x, tuple(inter)), shape)


def squeeze(array: Any, dimensions: Sequence[int]) -> Any:
    """jax.lax.squeeze: remove the listed dimensions, which must have size 1."""
    x = anp.asarray(array)
    dims = tuple(d % x.ndim if x.ndim else d for d in (int(v) for v in dimensions))
    if builtins.any(x.shape[d] != 1 for d in dims):
        raise ValueError(f"lax.squeeze: cannot squeeze dimensions {tuple(dimensions)} of shape "
                         f"{x.shape}: their size is not 1 {_site()}")
    return anp.squeeze(x, dims) if dims else x


def expand_dims(array: Any, dimensions: Sequence[int]) -> Any:
    """jax.lax.expand_dims: insert size-1 dimensions at `dimensions` (of the result)."""
    return anp.expand_dims(anp.asarray(array), tuple(int(d) for d in dimensions))


def concatenate(operands: Sequence[Any], dimension: int) -> Any:
    """jax.lax.concatenate: operands of one dtype joined along `dimension`."""
    ops = [anp.asarray(o) if not isinstance(o, Tracer) else o for o in operands]
    _common_dtype("concatenate", [o for o in ops])
    return anp.concatenate(ops, int(dimension))


def pad(operand: Any, padding_value: Any, padding_config: Sequence[Sequence[int]]) -> Any:
    """jax.lax.pad: per dimension (low, high, interior): `interior` values between
    elements, then `low`/`high` at the ends (negative: cropped). `padding_value` is a
    scalar of the operand's dtype (it may be traced and is differentiated)."""
    x = anp.asarray(operand)
    dt = np.dtype(x.dtype)
    _common_dtype("pad", [x, padding_value])
    if anp.ndim(padding_value) != 0:
        raise TypeError(f"lax.pad: padding_value must be a scalar, got shape "
                        f"{anp.shape(padding_value)} {_site()}")
    config = [tuple(int(v) for v in c) for c in padding_config]
    if len(config) != x.ndim or builtins.any(len(c) != 3 or c[2] < 0 for c in config):
        raise ValueError(f"lax.pad: padding_config needs one (low, high, interior >= 0) per "
                         f"dimension of shape {x.shape}, got {config} {_site()}")
    for (lo, hi, it), n in zip(config, x.shape):
        if n and (n - 1) * (it + 1) + 1 + lo + hi < 1:
            raise ValueError(f"lax.pad: padding {config} leaves no element of a dimension of "
                             f"size {n} {_site()}")
    value = _cast_init(padding_value, dt)
    if not isinstance(value, Tracer):
        value = value.item()
        return _pad_impl(x, range(x.ndim), [c[:2] for c in config],
                         [c[2] + 1 for c in config], value)
    # a traced padding value: pad a zero-filled copy and add value * (pad mask)
    zero = _pad_impl(x, range(x.ndim), [c[:2] for c in config], [c[2] + 1 for c in config], 0)
    mask = _pad_impl(anp.zeros(x.shape, np.bool_), range(x.ndim), [c[:2] for c in config],
                     [c[2] + 1 for c in config], True)
    return anp.where(mask, value, zero)


def _norm(i: int, n: int) -> int:
    return i + n if i < 0 else i


def slice(operand: Any, start_indices: Sequence[int], limit_indices: Sequence[int],  # noqa: A001
          strides: Sequence[int] | None = None) -> Any:
    """jax.lax.slice: the static window [start, limit) with `strides` per dimension."""
    x = anp.asarray(operand)
    st = [int(v) for v in start_indices]
    lim = [int(v) for v in limit_indices]
    sd = [1] * x.ndim if strides is None else [int(v) for v in strides]
    if not len(st) == len(lim) == len(sd) == x.ndim or builtins.any(
            not 0 <= s <= e <= n or d < 1 for s, e, d, n in zip(st, lim, sd, x.shape)):
        raise TypeError(f"lax.slice: start {tuple(st)}, limit {tuple(lim)} and strides "
                        f"{tuple(sd)} must satisfy 0 <= start <= limit <= shape {x.shape} "
                        f"(strides >= 1) {_site()}")
    return x[tuple(_bslice(s, e, d) for s, e, d in zip(st, lim, sd))]


def slice_in_dim(operand: Any, start_index: int | None, limit_index: int | None,
                 stride: int = 1, axis: int = 0) -> Any:
    """jax.lax.slice_in_dim: `slice` along one axis (negative indices count from the end)."""
    x = anp.asarray(operand)
    ax = _norm(int(axis), x.ndim)
    n = x.shape[ax]
    s = 0 if start_index is None else _norm(int(start_index), n)
    e = n if limit_index is None else _norm(int(limit_index), n)
    st, lim, sd = [0] * x.ndim, list(x.shape), [1] * x.ndim
    st[ax], lim[ax], sd[ax] = s, e, int(stride)
    return slice(x, st, lim, sd)


def index_in_dim(operand: Any, index: int, axis: int = 0, keepdims: bool = True) -> Any:
    """jax.lax.index_in_dim: the static `index` along `axis` (negative counts from the end)."""
    x = anp.asarray(operand)
    ax = _norm(int(axis), x.ndim)
    i = _norm(int(index), x.shape[ax])
    out = slice_in_dim(x, i, i + 1, 1, ax)
    return out if keepdims else anp.squeeze(out, ax)


def rev(operand: Any, dimensions: Sequence[int]) -> Any:
    """jax.lax.rev: reverse the listed dimensions."""
    x = anp.asarray(operand)
    dims = tuple(int(d) for d in dimensions)
    if builtins.any(not 0 <= d < x.ndim for d in dims):
        raise TypeError(f"lax.rev: dimensions {dims} must be in [0, {x.ndim}) {_site()}")
    return anp.flip(x, dims) if dims else x


def collapse(operand: Any, start_dimension: int, stop_dimension: int | None = None) -> Any:
    """jax.lax.collapse: merge dimensions [start, stop) into one."""
    x = anp.asarray(operand)
    s = _norm(int(start_dimension), x.ndim)
    e = x.ndim if stop_dimension is None else _norm(int(stop_dimension), x.ndim)
    shape = tuple(x.shape)
    return anp.reshape(x, shape[:s] + (int(np.prod(shape[s:e], dtype=np.int64)),) + shape[e:])


def iota(dtype: Any, size: int) -> Any:
    """jax.lax.iota: 0, 1, ..., size - 1 in `dtype`."""
    return anp.arange(int(size), dtype=canonical_dtype(dtype))


def full(shape: Any, fill_value: Any, dtype: Any = None) -> Any:
    """jax.lax.full: `shape` filled with the scalar `fill_value` (which may be traced)."""
    if anp.ndim(fill_value) != 0:
        raise TypeError(f"lax.full: fill_value must be a scalar, got shape "
                        f"{anp.shape(fill_value)} {_site()}")
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    return anp.full(shape, fill_value, dtype=dtype)


def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> Any:
    """jax.lax.full_like: like `x` (or of `shape`) in x's dtype (or `dtype`)."""
    dt = dtype if dtype is not None else _dtype_of(x)[0]
    return full(anp.shape(x) if shape is None else shape, fill_value, dt)


# --------------------------------------------------------------------------- scans

def _interleave(even: Any, odd: Any, axis: int) -> Any:
    """even[0], odd[0], even[1], ... along `axis` (len(even) is len(odd) or one more)."""
    ne, no = anp.shape(even)[axis], anp.shape(odd)[axis]
    if ne > no:
        idx = [_bslice(None)] * anp.ndim(even)
        idx[axis] = _bslice(0, no)
        head = _interleave(even[tuple(idx)], odd, axis)
        idx[axis] = _bslice(no, ne)
        return anp.concatenate([head, even[tuple(idx)]], axis)
    both = anp.stack([even, odd], axis=axis + 1)
    shape = list(anp.shape(even))
    shape[axis] = ne + no
    return anp.reshape(both, tuple(shape))


def _strided(x: Any, axis: int, start: int, stop: int, step: int = 1) -> Any:
    idx = [_bslice(None)] * anp.ndim(x)
    idx[axis] = _bslice(start, stop, step)
    return x[tuple(idx)]


def associative_scan(fn: Callable[[Any, Any], Any], elems: Any, reverse: bool = False,
                     axis: int = 0) -> Any:
    """jax.lax.associative_scan: inclusive prefix combination of the pytree `elems` along
    `axis` by the associative `fn(earlier, later)` (odd/even recursion: 2 log2(n) steps)."""
    leaves, tree = pytree.tree_flatten(elems)
    leaves = [anp.asarray(v) for v in leaves]
    if not leaves:
        raise ValueError(f"lax.associative_scan needs at least one array {_site()}")
    ax = _norm(int(axis), anp.ndim(leaves[0]))
    n = anp.shape(leaves[0])[ax]
    if builtins.any(anp.shape(v)[ax] != n for v in leaves):
        raise ValueError(f"lax.associative_scan: every array needs the same length along axis "
                         f"{ax} {_site()}")
    if reverse:
        leaves = [anp.flip(v, ax) for v in leaves]

    def combine(a: list[Any], b: list[Any]) -> list[Any]:
        out = fn(pytree.tree_unflatten(tree, a), pytree.tree_unflatten(tree, b))
        return [anp.asarray(v) for v in pytree.tree_leaves(out)]

    def scan(e: list[Any]) -> list[Any]:
        m = anp.shape(e[0])[ax]
        if m < 2:
            return e
        odd = scan(combine([_strided(v, ax, 0, m - 1, 2) for v in e],
                           [_strided(v, ax, 1, m, 2) for v in e]))
        even = [_strided(v, ax, 0, 1) for v in e]
        if m > 2:
            k = anp.shape(odd[0])[ax]
            prev = [_strided(v, ax, 0, k - 1) for v in odd] if m % 2 == 0 else odd
            rest = combine(prev, [_strided(v, ax, 2, m, 2) for v in e])
            even = [anp.concatenate([a, b], ax) for a, b in zip(even, rest)]
        return [_interleave(a, b, ax) for a, b in zip(even, odd)]

    out = scan(leaves)
    if reverse:
        out = [anp.flip(v, ax) for v in out]
    return pytree.tree_unflatten(tree, out)


__all__ = [
    "abs", "acos", "acosh", "add", "argmax", "argmin", "asin", "asinh", "associative_scan",
    "atan", "atan2", "atanh", "batch_matmul", "bitwise_and", "bitwise_not", "bitwise_or",
    "bitwise_xor", "broadcast", "broadcast_in_dim", "cbrt", "ceil", "clamp", "collapse",
    "concatenate", "convert_element_type", "cos", "cosh", "digamma", "div", "dot",
    "dot_general", "eq", "erf", "erf_inv", "erfc", "exp", "exp2", "expand_dims", "expm1",
    "floor", "full", "full_like", "ge", "gt", "index_in_dim", "integer_pow", "iota",
    "is_finite", "le", "lgamma", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne",
    "neg", "pad", "pow", "reciprocal", "reduce", "reduce_and", "reduce_max", "reduce_min",
    "reduce_or", "reduce_prod", "reduce_sum", "reduce_xor", "rem", "reshape", "rev", "round",
    "rsqrt", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sin",
    "sinh", "slice", "slice_in_dim", "sqrt", "square", "squeeze", "stop_gradient", "sub",
    "tan", "tanh", "transpose",
]
