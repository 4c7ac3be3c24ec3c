"""`mlir_autodiff.numpy`: numpy's names and semantics, traced into MLIR on tensors.

Import it as `anp`. Inside a function given to `mlir_autodiff.jit` (or any
transform), these functions take traced values, numpy arrays and Python
scalars and emit upstream MLIR (`arith`, `math`, `tensor`, `linalg`; see
`primitives.py` for the exact vocabulary). Outside a trace they fall back to
numpy itself, so `anp.zeros(3)` at top level is `np.zeros(3)`, returned as an
`eager.Array` (an ndarray that also has `.at[]`; see eager.py). This
module also gives traced values (`tracing.Tracer`) their operators and ndarray
methods: `x + y`, `x.sum()`, `x.T`, `x[i]`, `x.at[i].set(v)` call the functions
here (installed on import; see the end of the file).

Semantics follow numpy (broadcasting, axis/keepdims, `@`, basic slicing,
dtype promotion) with these documented choices:

- Python scalars are *weakly typed* (NEP 50 / JAX): `x_f32 * 2.0` stays
  float32; an int array with a Python float becomes float64, as in numpy.
- Creation functions default to float64 (numpy's default, not JAX's float32).
- Arrays are immutable: use `x.at[idx].set(v)` / `.add(v)` (JAX-style) for
  updates; they return new arrays.
- Indexing supports ints (negative too), slices (any step), `None`, `...`;
  array ("advanced") indexing raises UnsupportedError.
- Supported dtypes: float64, float32, float16, bfloat16, bool, int8/16/32/64.
  Float functions of int arrays compute in float64 (float32 for
  bool/int8/int16). float16 and bfloat16 promote as in jax (integers do not
  widen them; together they give float32); their sums, means and
  contractions accumulate in float32.
"""

from __future__ import annotations

import builtins
import functools
import math as _pymath
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith
from mlir.dialects import math as _m

from . import array_manip as _manip
from . import eager as _eager
from . import indexing as _ix
from . import primitives as P
from .array_manip import (  # noqa: F401 - re-exported (implemented there)
    allclose,
    array_split,
    average,
    cross,
    diag,
    fliplr,
    flipud,
    hypot,
    isclose,
    kron,
    linspace,
    meshgrid,
    nan_to_num,
    nanmax,
    nanmean,
    nanmin,
    nansum,
    pad,
    repeat,
    roll,
    rot90,
    sinc,
    split,
    tile,
    trace,
)
from .eager import eager_argsort as _eager_argsort
from .eager import eager_sort as _eager_sort
from .eager import sort_args as _sort_args
from .eager import wrap as _eager_result
from .errors import (
    ConcretizationTypeError,
    ShapeError,
    UnexpectedTracerError,
    UnsupportedError,
)
from .errors import UnsupportedNumpyFunctionError as _UnsupportedNumpyFunctionError
from .index_items import expand_ellipsis as _expand_ellipsis
from .tracing import (
    BFLOAT16,
    Tracer,
    canonical_dtype,
    current_trace,
    format_site,
    is_float_dtype,
)

# --------------------------------------------------------------------------- dtypes & constants

float16 = np.float16
bfloat16 = BFLOAT16.type
float32 = np.float32
float64 = np.float64
int8 = np.int8
int16 = np.int16
int32 = np.int32
int64 = np.int64
bool_ = np.bool_
dtype = np.dtype
pi = np.pi
e = np.e
inf = np.inf
nan = np.nan
newaxis = None

# dtype queries and type names (numpy_dtypes.py)
from .numpy_dtypes import (  # noqa: E402, F401
    bool,
    complexfloating,
    finfo,
    floating,
    generic,
    iinfo,
    inexact,
    integer,
    iscomplexobj,
    issubdtype,
    ndarray,
    number,
    promote_types,
    signedinteger,
    unsignedinteger,
)
from .numpy_dtypes import promote_strong as _promote_strong  # noqa: E402

ArrayLike = Any

_F16 = np.dtype(np.float16)
_BF16 = BFLOAT16
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}


def _is_float(dt: np.dtype) -> bool:
    return is_float_dtype(dt)


def _is_bool(dt: np.dtype) -> bool:
    return dt == _BOOL


# --------------------------------------------------------------------------- eager fallback

def _has_tracer(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, Tracer):
            return True
        if isinstance(a, (list, tuple)) and builtins.any(isinstance(b, Tracer) for b in a):
            return True
    return False


def _api(np_name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a traced implementation of numpy's `np_name` (default: the function's name).

    Outside any trace, calls on concrete values go to numpy itself.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        np_fn = getattr(np, np_name or fn.__name__, None)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if current_trace() is None:
                if _has_tracer(args, kwargs):
                    raise UnexpectedTracerError(
                        f"anp.{fn.__name__} got a traced value outside of any trace at "
                        f"{format_site()}; traced values must not escape their function"
                    )
                if np_fn is not None:
                    return _eager_result(np_fn(*args, **kwargs))
            return fn(*args, **kwargs)

        return wrapper

    return deco


# --------------------------------------------------------------------------- promotion

def _info(x: Any) -> tuple[np.dtype, bool]:
    """(dtype, weak) of an operand."""
    if isinstance(x, Tracer):
        return x.dtype, x.weak_type
    d = P.python_scalar_dtype(x)
    if d is not None:
        return d, True
    dt = np.asarray(x).dtype
    if dt.kind == "f" and dt.itemsize > 8:  # long double: as constant_like takes it
        dt = _F64
    return dt, False


def _rank(dt: np.dtype) -> int:
    return 2 if is_float_dtype(dt) else _KIND_RANK[dt.kind]


def _result_dtype(infos: Sequence[tuple[np.dtype, bool]]) -> tuple[np.dtype, bool]:
    """numpy's promotion for strong dtypes; weak (Python scalar) ones adopt them (NEP 50)."""
    strong = [d for d, w in infos if not w]
    weak = [d for d, w in infos if w]
    if strong:
        base = _promote_strong(strong)
        if weak:
            wk = builtins.max(_KIND_RANK[d.kind] for d in weak)
            if wk > _rank(base):
                base = _F64 if wk == 2 else _I64
        return canonical_dtype(base), False
    return builtins.max(weak, key=lambda d: (_KIND_RANK[d.kind], d.itemsize)), True


def result_type(*args: Any) -> np.dtype:
    """The dtype numpy (with weak Python scalars) gives an op on `args`."""
    return _result_dtype([_info(a) for a in args])[0]


def _as(x: Any, dt: np.dtype) -> Tracer:
    if isinstance(x, Tracer):
        return P.convert(x, dt)
    return P.constant_like(x, dt)


def _prep(*xs: Any, to_float: bool = False) -> tuple[list[Tracer], np.dtype, bool]:
    """Promote operands to their common dtype; returns (tracers, dtype, weak)."""
    dt, weak = _result_dtype([_info(x) for x in xs])
    if to_float and not _is_float(dt):
        dt = _float_of(dt)
    return [_as(x, dt) for x in xs], dt, weak


def _float_of(dt: np.dtype) -> np.dtype:
    # numpy computes float functions of int32/int64 in float64; we have no float16
    # for the smaller ones and use float32.
    if _is_float(dt):
        return dt
    return _F64 if dt.itemsize >= 4 else _F32


def asarray(a: ArrayLike, dtype: Any = None) -> Any:
    """`a` as a traced array (a constant for numpy values) or, outside a trace, np.asarray."""
    if current_trace() is None:
        if isinstance(a, Tracer):
            raise UnexpectedTracerError(f"traced value used outside its trace at {format_site()}")
        return _eager_result(np.asarray(a, dtype=dtype))
    if isinstance(a, Tracer):
        return P.convert(a, dtype, weak_type=False) if dtype is not None else a
    if isinstance(a, (list, tuple)) and builtins.any(isinstance(v, Tracer) for v in a):
        return stack([asarray(v) for v in a]) if dtype is None else \
            stack([asarray(v) for v in a]).astype(dtype)
    return P.constant_like(a, dtype)


def array(a: ArrayLike, dtype: Any = None) -> Any:
    """asarray, except that an array built from a list or tuple is strongly typed, as
    numpy's and jax's are (`array([s, s])` of a Python float `s` is float64)."""
    r = asarray(a, dtype)
    if isinstance(a, (list, tuple)) and isinstance(r, Tracer) and r.weak_type:
        return P.convert(r, r.dtype, weak_type=False)
    return r


def _t(x: Any) -> Tracer:
    return x if isinstance(x, Tracer) else asarray(x)


@_api()
def astype(x: ArrayLike, dtype: Any) -> Any:
    """`x` converted to `dtype` (numpy casting: float -> int truncates, nonzero -> True)."""
    return P.convert(_t(x), canonical_dtype(dtype), weak_type=False)


# --------------------------------------------------------------------------- elementwise: binary

def _f(dt: np.dtype, value: float) -> ir.Value:
    return P.scalar_constant(dt, value)


def _binary(name: str, x1: Any, x2: Any, f_op: Callable[..., ir.Value] | None,
            i_op: Callable[..., ir.Value] | None, b_op: Callable[..., ir.Value] | None = None,
            *, to_float: bool = False, bool_as: np.dtype | None = None) -> Tracer:
    (a, b), dt, weak = _prep(x1, x2, to_float=to_float)
    if _is_bool(dt) and b_op is None:
        if bool_as is None:
            raise TypeError(f"numpy boolean {name} is not supported at {format_site()}; "
                            "convert with .astype(...) first")
        a, b, dt = P.convert(a, bool_as), P.convert(b, bool_as), bool_as
    op = f_op if _is_float(dt) else (b_op if _is_bool(dt) else i_op)
    if op is None:
        raise TypeError(f"anp.{name} is not supported for dtype {dt} (at {format_site()})")
    return P.elementwise(name, [a, b], dt, lambda v: op(dt, v[0], v[1]), weak_type=weak)


@_api()
def add(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("add", x1, x2, lambda d, a, b: arith.addf(a, b),
                   lambda d, a, b: arith.addi(a, b), lambda d, a, b: arith.ori(a, b))


@_api()
def subtract(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("subtract", x1, x2, lambda d, a, b: arith.subf(a, b),
                   lambda d, a, b: arith.subi(a, b))


@_api()
def multiply(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("multiply", x1, x2, lambda d, a, b: arith.mulf(a, b),
                   lambda d, a, b: arith.muli(a, b), lambda d, a, b: arith.andi(a, b))


@_api()
def true_divide(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("true_divide", x1, x2, lambda d, a, b: arith.divf(a, b), None,
                   to_float=True)


divide = _api("divide")(true_divide.__wrapped__)  # type: ignore[attr-defined]


def _fmod_fix(d: np.dtype, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """numpy's float divmod (npy_divmod): returns (floor_divide, remainder)."""
    zero = _f(d, 0.0)
    mod = arith.remf(a, b)
    div = arith.divf(arith.subf(a, mod), b)
    mod_nz = arith.cmpf(arith.CmpFPredicate.UNE, mod, zero)
    b_neg = arith.cmpf(arith.CmpFPredicate.OLT, b, zero)
    mod_neg = arith.cmpf(arith.CmpFPredicate.OLT, mod, zero)
    fix = arith.andi(mod_nz, arith.xori(b_neg, mod_neg))
    mod = arith.select(fix, arith.addf(mod, b), mod)
    div = arith.select(fix, arith.subf(div, _f(d, 1.0)), div)
    # a zero remainder takes the sign of the divisor, as an exact function of
    # `mod` (d/da = 1 there as everywhere, as in JAX): +0 is mod + 0 and -0 is
    # -((-mod) + 0) for either sign of mod.
    signed_zero = arith.select(b_neg, arith.negf(arith.addf(arith.negf(mod), zero)),
                               arith.addf(mod, zero))
    mod = arith.select(mod_nz, mod, signed_zero)
    floordiv = _m.floor(div)
    gt_half = arith.cmpf(arith.CmpFPredicate.OGT, arith.subf(div, floordiv), _f(d, 0.5))
    floordiv = arith.select(gt_half, arith.addf(floordiv, _f(d, 1.0)), floordiv)
    # b == 0: numpy gives a / b (inf or nan)
    b_zero = arith.cmpf(arith.CmpFPredicate.OEQ, b, zero)
    floordiv = arith.select(b_zero, arith.divf(a, b), floordiv)
    return floordiv, mod


# Integer division never traps (x86's idiv raises SIGFPE for a zero divisor and for
# INT_MIN / -1): jax's defined results instead. Truncating division by zero is -1
# (all bits set), INT_MIN / -1 is INT_MIN; the truncating remainder by zero is the
# dividend and INT_MIN % -1 is 0; floor_divide corrects the truncated quotient by
# the signs as jax does (so 7 // 0 == -2, 0 // 0 == -1); remainder and fmod by zero
# are 0. The divisor the hardware sees is 1 wherever it would trap.

def _safe_divisor(d: np.dtype, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(b with 1 where dividing by it would trap, b == 0)."""
    eq = arith.CmpIPredicate.eq
    is_zero = arith.cmpi(eq, b, _f(d, 0))
    overflow = arith.andi(arith.cmpi(eq, a, _f(d, int(np.iinfo(d).min))),
                          arith.cmpi(eq, b, _f(d, -1)))
    return arith.select(arith.ori(is_zero, overflow), _f(d, 1), b), is_zero


def _signs_differ(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    """sign(a) != sign(b), with sign(0) == 0."""
    zero = _f(d, 0)
    neg = [arith.cmpi(arith.CmpIPredicate.slt, v, zero) for v in (a, b)]
    pos = [arith.cmpi(arith.CmpIPredicate.sgt, v, zero) for v in (a, b)]
    return arith.ori(arith.xori(*neg), arith.xori(*pos))


def _int_mod(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's (and jax's) remainder: the sign of the divisor; 0 for a zero divisor."""
    zero = _f(d, 0)
    safe, _ = _safe_divisor(d, a, b)
    r = arith.remsi(a, safe)
    r_nz = arith.cmpi(arith.CmpIPredicate.ne, r, zero)
    sign_differs = arith.xori(arith.cmpi(arith.CmpIPredicate.slt, r, zero),
                              arith.cmpi(arith.CmpIPredicate.slt, b, zero))
    return arith.select(arith.andi(r_nz, sign_differs), arith.addi(r, b), r)


def _int_floor_divide(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    safe, is_zero = _safe_divisor(d, a, b)
    q = arith.select(is_zero, _f(d, -1), arith.divsi(a, safe))
    rem = arith.select(is_zero, a, arith.remsi(a, safe))
    fix = arith.andi(_signs_differ(d, a, b),
                     arith.cmpi(arith.CmpIPredicate.ne, rem, _f(d, 0)))
    return arith.select(fix, arith.subi(q, _f(d, 1)), q)


def _int_fmod(d: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    """C's truncating remainder; 0 for a zero divisor (and for INT_MIN % -1)."""
    return arith.remsi(a, _safe_divisor(d, a, b)[0])


@_api()
def floor_divide(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("floor_divide", x1, x2, lambda d, a, b: _fmod_fix(d, a, b)[0],
                   _int_floor_divide, bool_as=np.dtype(np.int8))


@_api()
def remainder(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("remainder", x1, x2, lambda d, a, b: _fmod_fix(d, a, b)[1], _int_mod,
                   bool_as=np.dtype(np.int8))


mod = _api("mod")(remainder.__wrapped__)  # type: ignore[attr-defined]


@_api()
def fmod(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("fmod", x1, x2, lambda d, a, b: arith.remf(a, b), _int_fmod)


def _int_pow_static(d: np.dtype, a: ir.Value, n: int) -> ir.Value:
    """a ** n for a static n >= 0 by repeated squaring (muli only)."""
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else arith.muli(result, base)
        n >>= 1
        if n:
            base = arith.muli(base, base)
    return result if result is not None else _f(d, 1)


def _float_pow_static(t: Tracer, n: float) -> Tracer | None:
    """t ** n for float `t` and a few constant `n`, without math.powf; None for other n.

    Why: math.powf is a scalar libm call per element that keeps the whole
    fused elementwise op (tanh included) off the vectorized schedule:
    `sum(tanh(x @ w) ** 2)` on 128 x 256 f32 took 0.87 ms with powf and
    0.20 ms with `t * t`. Multiplies and sqrt vectorize, and their
    derivatives come from the mulf/divf/sqrt rules. Accuracy: x ** 2,
    x ** -1 and x ** 0.5 are correctly rounded either way; x ** 3 rounds
    twice (within 1.5 ulp, as jax's integer_pow). x ** 0.5 is sqrt(x), as
    numpy computes it (also at -0 and -inf, where C's pow differs).
    """
    if n == 2:
        return multiply(t, t)
    if n == 3:
        return multiply(multiply(t, t), t)
    if n == -1:
        return reciprocal(t)
    if n == 0.5:
        return sqrt(t)
    return None


@_api()
def power(x1: ArrayLike, x2: ArrayLike) -> Any:
    """x1 ** x2 (math.powf for floats; integer powers by squaring or math.ipowi;
    float powers 2, 3, -1 and 0.5 by multiplies, a division or sqrt)."""
    if type(x2) is int and 0 <= x2 <= 1 << 16:
        t = _t(x1)
        dt = _result_dtype([_info(t), _info(x2)])[0]
        if dt.kind == "i":
            t = P.convert(t, dt)
            return P.elementwise("power", [t], dt, lambda v: _int_pow_static(dt, v[0], x2),
                                 weak_type=t.weak_type)
    if type(x2) in (int, float):
        t = _t(x1)
        if _is_float(t.dtype) and _result_dtype([_info(t), _info(x2)])[0] == t.dtype:
            out = _float_pow_static(t, x2)
            if out is not None:
                return out
    return _binary("power", x1, x2, lambda d, a, b: _m.powf(a, b),
                   lambda d, a, b: _m.ipowi(a, b), bool_as=np.dtype(np.int8))


@_api()
def maximum(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise maximum; NaN propagates (arith.maximumf), as in numpy."""
    return _binary("maximum", x1, x2, lambda d, a, b: arith.maximumf(a, b),
                   lambda d, a, b: arith.maxsi(a, b), lambda d, a, b: arith.ori(a, b))


@_api()
def minimum(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise minimum; NaN propagates (arith.minimumf), as in numpy."""
    return _binary("minimum", x1, x2, lambda d, a, b: arith.minimumf(a, b),
                   lambda d, a, b: arith.minsi(a, b), lambda d, a, b: arith.andi(a, b))


@_api()
def arctan2(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("arctan2", x1, x2, lambda d, a, b: _m.atan2(a, b), None, to_float=True)


@_api()
def copysign(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _binary("copysign", x1, x2, lambda d, a, b: _m.copysign(a, b), None, to_float=True)


@_api()
def logaddexp(x1: ArrayLike, x2: ArrayLike) -> Any:
    """log(exp(x1) + exp(x2)) without overflow: hi + log1p(exp(lo - hi)).

    hi and lo are picked by ONE comparison, so on each side of it the
    formula is the same analytic function of x1 and x2: every derivative is
    right everywhere, also at a tie (x1 == x2: each gets half, as in JAX),
    and exp never sees a positive argument (no inf * 0 in a gradient).
    """
    (a, b), _, _ = _prep(x1, x2, to_float=True)
    first = a >= b
    hi, lo = where(first, a, b), where(first, b, a)
    res = hi + log1p(exp(lo - hi))
    # +-inf on both sides: inf - inf would be NaN; numpy gives that infinity.
    return where(isinf(a) & (a == b), a, res)


@_api()
def logaddexp2(x1: ArrayLike, x2: ArrayLike) -> Any:
    """log2(2**x1 + 2**x2) without overflow (logaddexp in base 2, same tie rule)."""
    (a, b), _, _ = _prep(x1, x2, to_float=True)
    first = a >= b
    hi, lo = where(first, a, b), where(first, b, a)
    res = hi + log1p(exp2(lo - hi)) * (1.0 / _pymath.log(2.0))
    return where(isinf(a) & (a == b), a, res)


@_api()
def fmax(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise maximum ignoring NaN (arith.maxnumf), as numpy.fmax."""
    return _binary("fmax", x1, x2, lambda d, a, b: arith.maxnumf(a, b),
                   lambda d, a, b: arith.maxsi(a, b), lambda d, a, b: arith.ori(a, b))


@_api()
def fmin(x1: ArrayLike, x2: ArrayLike) -> Any:
    """Elementwise minimum ignoring NaN (arith.minnumf), as numpy.fmin."""
    return _binary("fmin", x1, x2, lambda d, a, b: arith.minnumf(a, b),
                   lambda d, a, b: arith.minsi(a, b), lambda d, a, b: arith.andi(a, b))


def _bitwise(name: str, x1: Any, x2: Any, op: Callable[[ir.Value, ir.Value], ir.Value]) -> Any:
    (a, b), dt, weak = _prep(x1, x2)
    if _is_float(dt):
        raise TypeError(f"anp.{name} is not supported for float inputs (at {format_site()})")
    return P.elementwise(name, [a, b], dt, lambda v: op(v[0], v[1]), weak_type=weak)


@_api()
def bitwise_and(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _bitwise("bitwise_and", x1, x2, arith.andi)


@_api()
def bitwise_or(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _bitwise("bitwise_or", x1, x2, arith.ori)


@_api()
def bitwise_xor(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _bitwise("bitwise_xor", x1, x2, arith.xori)


def _logical(name: str, x1: Any, x2: Any, op: Callable[[ir.Value, ir.Value], ir.Value]) -> Any:
    a, b = P.convert(_t(x1), _BOOL), P.convert(_t(x2), _BOOL)
    return P.elementwise(name, [a, b], _BOOL, lambda v: op(v[0], v[1]))


@_api()
def logical_and(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _logical("logical_and", x1, x2, arith.andi)


@_api()
def logical_or(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _logical("logical_or", x1, x2, arith.ori)


@_api()
def logical_xor(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _logical("logical_xor", x1, x2, arith.xori)


# --------------------------------------------------------------------------- comparisons

def _compare(name: str, x1: Any, x2: Any, fpred: Any, ipred: Any) -> Tracer:
    (a, b), dt, _ = _prep(x1, x2)
    if _is_float(dt):
        def body(v: list[ir.Value]) -> ir.Value:
            return arith.cmpf(fpred, v[0], v[1])
    else:
        def body(v: list[ir.Value]) -> ir.Value:
            return arith.cmpi(ipred, v[0], v[1])
    return P.elementwise(name, [a, b], _BOOL, body)


_FP, _IP = arith.CmpFPredicate, arith.CmpIPredicate


@_api()
def less(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _compare("less", x1, x2, _FP.OLT, _IP.slt)


@_api()
def less_equal(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _compare("less_equal", x1, x2, _FP.OLE, _IP.sle)


@_api()
def greater(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _compare("greater", x1, x2, _FP.OGT, _IP.sgt)


@_api()
def greater_equal(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _compare("greater_equal", x1, x2, _FP.OGE, _IP.sge)


@_api()
def equal(x1: ArrayLike, x2: ArrayLike) -> Any:
    return _compare("equal", x1, x2, _FP.OEQ, _IP.eq)


@_api()
def not_equal(x1: ArrayLike, x2: ArrayLike) -> Any:
    # unordered: NaN != NaN is True, as in numpy
    return _compare("not_equal", x1, x2, _FP.UNE, _IP.ne)


# --------------------------------------------------------------------------- elementwise: unary

def _unary_float(name: str, op: Callable[[ir.Value], ir.Value], doc: str = "") -> Any:
    def fn(x: ArrayLike) -> Any:
        t = _t(x)
        dt = _float_of(t.dtype)
        return P.elementwise(name, [P.convert(t, dt)], dt, lambda v: op(v[0]),
                             weak_type=t.weak_type)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"Elementwise numpy.{name} (math dialect)."
    return _api(name)(fn)


exp = _unary_float("exp", _m.exp)
exp2 = _unary_float("exp2", _m.exp2)
log = _unary_float("log", _m.log)
log2 = _unary_float("log2", _m.log2)
log10 = _unary_float("log10", _m.log10)
log1p = _unary_float("log1p", _m.log1p)
expm1 = _unary_float("expm1", _m.expm1)
sqrt = _unary_float("sqrt", _m.sqrt)
cbrt = _unary_float("cbrt", _m.cbrt)
tanh = _unary_float("tanh", _m.tanh)
sin = _unary_float("sin", _m.sin)
cos = _unary_float("cos", _m.cos)
tan = _unary_float("tan", _m.tan)
arcsin = _unary_float("arcsin", _m.asin)
arccos = _unary_float("arccos", _m.acos)
arctan = _unary_float("arctan", _m.atan)
sinh = _unary_float("sinh", _m.sinh)
cosh = _unary_float("cosh", _m.cosh)
arcsinh = _unary_float("arcsinh", _m.asinh)
arccosh = _unary_float("arccosh", _m.acosh)
arctanh = _unary_float("arctanh", _m.atanh)


def _erf(x: ArrayLike) -> Any:
    """The error function (math.erf); not a numpy name, used by nn.gelu."""
    if current_trace() is None:
        if isinstance(x, Tracer):
            raise UnexpectedTracerError(f"traced value used outside its trace at {format_site()}")
        a = np.asarray(x)
        dt = _float_of(a.dtype)
        return np.vectorize(_pymath.erf, otypes=[dt])(a.astype(dt))[()]
    t = _t(x)
    dt = _float_of(t.dtype)
    return P.elementwise("erf", [P.convert(t, dt)], dt, lambda v: _m.erf(v[0]),
                         weak_type=t.weak_type)


floor = _unary_float("floor", _m.floor)
ceil = _unary_float("ceil", _m.ceil)
trunc = _unary_float("trunc", _m.trunc)
rint = _unary_float("rint", _m.roundeven, "Round to nearest, ties to even (numpy.rint).")


@_api()
def round(a: ArrayLike, decimals: int = 0) -> Any:
    """Round half to even to `decimals` digits (numpy.round)."""
    t = _t(a)
    if not _is_float(t.dtype):
        return t
    if decimals == 0:
        return rint(t)
    scale = 10.0 ** decimals
    return rint(t * scale) / scale


around = round


@_api()
def negative(x: ArrayLike) -> Any:
    t = _t(x)
    dt = t.dtype
    if _is_bool(dt):
        raise TypeError(f"numpy boolean negative is not supported at {format_site()}; "
                        "use anp.logical_not")
    if _is_float(dt):
        return P.elementwise("negative", [t], dt, lambda v: arith.negf(v[0]), t.weak_type)
    return P.elementwise("negative", [t], dt, lambda v: arith.subi(_f(dt, 0), v[0]),
                         t.weak_type)


@_api()
def positive(x: ArrayLike) -> Any:
    return _t(x)


@_api()
def absolute(x: ArrayLike) -> Any:
    t = _t(x)
    dt = t.dtype
    if _is_bool(dt):
        return t
    op = _m.absf if _is_float(dt) else _m.absi
    return P.elementwise("absolute", [t], dt, lambda v: op(v[0]), t.weak_type)


abs = _api("abs")(absolute.__wrapped__)  # type: ignore[attr-defined]


@_api()
def sign(x: ArrayLike) -> Any:
    """-1, 0 or 1 by sign (NaN stays NaN for floats)."""
    t = _t(x)
    dt = t.dtype
    if _is_bool(dt):
        return t

    def body(v: list[ir.Value]) -> ir.Value:
        a = v[0]
        if _is_float(dt):
            zero = _f(dt, 0.0)
            pos = arith.cmpf(_FP.OGT, a, zero)
            neg = arith.cmpf(_FP.OLT, a, zero)
            # 0 for +-0 and NaN for NaN, through a * 0 + 0: a zero derivative
            # (returning `a` itself there would pass its derivative on).
            rest = arith.addf(arith.mulf(a, zero), zero)
            return arith.select(pos, _f(dt, 1.0), arith.select(neg, _f(dt, -1.0), rest))
        zero = _f(dt, 0)
        pos = arith.cmpi(_IP.sgt, a, zero)
        neg = arith.cmpi(_IP.slt, a, zero)
        return arith.select(pos, _f(dt, 1), arith.select(neg, _f(dt, -1), zero))

    return P.elementwise("sign", [t], dt, body, t.weak_type)


@_api()
def square(x: ArrayLike) -> Any:
    t = _t(x)
    return multiply(t, t)


@_api()
def reciprocal(x: ArrayLike) -> Any:
    t = _t(x)
    return true_divide(np.ones((), t.dtype) if _is_float(t.dtype) else 1.0, t)


@_api()
def invert(x: ArrayLike) -> Any:
    t = _t(x)
    dt = t.dtype
    if _is_float(dt):
        raise TypeError(f"anp.invert is not supported for float inputs (at {format_site()})")
    allones = True if _is_bool(dt) else -1
    return P.elementwise("invert", [t], dt, lambda v: arith.xori(v[0], _f(dt, allones)),
                         t.weak_type)


@_api()
def logical_not(x: ArrayLike) -> Any:
    t = P.convert(_t(x), _BOOL)
    return P.elementwise("logical_not", [t], _BOOL, lambda v: arith.xori(v[0], _f(_BOOL, 1)))


def _float_test(name: str, fpred: Callable[[np.dtype, ir.Value], ir.Value],
                int_value: bool) -> Any:
    def fn(x: ArrayLike) -> Any:
        t = _t(x)
        if not _is_float(t.dtype):
            return P.constant(np.full(t.shape, int_value, dtype=bool))
        return P.elementwise(name, [t], _BOOL, lambda v: fpred(t.dtype, v[0]))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise numpy.{name}."
    return _api(name)(fn)


isnan = _float_test("isnan", lambda d, a: arith.cmpf(_FP.UNO, a, a), False)
isinf = _float_test("isinf", lambda d, a: arith.cmpf(_FP.OEQ, _m.absf(a), _f(d, np.inf)),
                    False)
isfinite = _float_test("isfinite", lambda d, a: arith.cmpf(_FP.OLT, _m.absf(a), _f(d, np.inf)),
                       True)


@_api()
def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None) -> Any:
    """Elementwise choice `x if condition else y` (both sides are computed)."""
    if x is None or y is None:
        raise UnsupportedError(
            f"anp.where(condition) (nonzero) has a data-dependent shape and is not supported "
            f"at {format_site()}; pass both x and y"
        )
    c = P.convert(_t(condition), _BOOL)
    (a, b), dt, weak = _prep(x, y)
    return P.elementwise("where", [c, a, b], dt, lambda v: arith.select(v[0], v[1], v[2]),
                         weak_type=weak)


@_api()
def clip(a: ArrayLike, a_min: ArrayLike = None, a_max: ArrayLike = None) -> Any:
    """Limit values to [a_min, a_max] (either may be None)."""
    out = _t(a)
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


# --------------------------------------------------------------------------- reductions

def _norm_axis(axis: int, ndim: int, opname: str) -> int:
    a = int(axis)
    if not -ndim <= a < builtins.max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
        raise np.exceptions.AxisError(f"{opname}: axis {axis} is out of bounds for array of "
                                      f"dimension {ndim} (at {format_site()})")
    return a % ndim if ndim else 0


def _norm_axes(axis: Any, ndim: int, opname: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(_norm_axis(a, ndim, opname) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"{opname}: duplicate value in 'axis' (at {format_site()})")
        return axes
    return (_norm_axis(axis, ndim, opname),)


def _keep(t: Tracer, shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> Tracer:
    if not keepdims:
        return t
    return P.reshape(t, [1 if i in axes else d for i, d in enumerate(shape)])


def _sum_dtype(dt: np.dtype) -> np.dtype:
    # numpy sums bools and small ints in the platform integer (int64 here)
    if _is_bool(dt) or (dt.kind == "i" and dt.itemsize < 8):
        return _I64
    return dt


def _reduction(kind: str, opname: str, a: Any, axis: Any, dtype: Any, keepdims: bool,
               identity: bool) -> Tracer:
    t = _t(a)
    axes = _norm_axes(axis, t.ndim, opname)
    if not identity and builtins.any(t.shape[i] == 0 for i in axes):
        raise ValueError(f"zero-size array to reduction operation {opname} which has no "
                         f"identity (at {format_site()})")
    if dtype is not None:
        t = P.convert(t, canonical_dtype(dtype), weak_type=False)
    elif kind in ("sum", "prod"):
        t = P.convert(t, _sum_dtype(t.dtype))
    # a reduction is a new array, not a Python scalar: never weakly typed (numpy's
    # sum of a Python float is float64, as jax's)
    r = P.convert(P.reduce(t, axes, kind), t.dtype, weak_type=False)
    return _keep(r, t.shape, axes, keepdims)


@_api()
def sum(a: ArrayLike, axis: Any = None, dtype: Any = None,
        keepdims: bool = False) -> Any:
    """Sum over `axis` (None: all; int or tuple), like numpy.sum."""
    return _reduction("sum", "sum", a, axis, dtype, keepdims, True)


@_api()
def prod(a: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return _reduction("prod", "prod", a, axis, dtype, keepdims, True)


@_api()
def max(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """Maximum over `axis`; NaN propagates."""
    return _reduction("max", "maximum", a, axis, None, keepdims, False)


@_api()
def min(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """Minimum over `axis`; NaN propagates."""
    return _reduction("min", "minimum", a, axis, None, keepdims, False)


amax = _api("amax")(max.__wrapped__)  # type: ignore[attr-defined]
amin = _api("amin")(min.__wrapped__)  # type: ignore[attr-defined]


@_api()
def all(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    t = P.convert(_t(a), _BOOL)
    return _reduction("min", "all", t, axis, None, keepdims, True)


@_api()
def any(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    t = P.convert(_t(a), _BOOL)
    return _reduction("max", "any", t, axis, None, keepdims, True)


@_api()
def mean(a: ArrayLike, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """Arithmetic mean over `axis` (ints average in float64, as in numpy)."""
    t = _t(a)
    axes = _norm_axes(axis, t.ndim, "mean")
    dt = canonical_dtype(dtype) if dtype is not None else _float_of(t.dtype)
    if _is_float(t.dtype) or dtype is not None:
        t = P.convert(t, dt)
    else:
        t = P.convert(t, _F64)
    count = _pymath.prod(t.shape[i] for i in axes)
    half = dt.itemsize == 2  # float16/bfloat16: in float32 (the count may not fit)
    s = P.reduce(P.convert(t, _F32) if half else t, axes, "sum")
    r = true_divide(P.convert(s, s.dtype, weak_type=False), float(count) if count else np.nan)
    return _keep(P.convert(r, dt) if half else r, t.shape, axes, keepdims)


@_api()
def var(a: ArrayLike, axis: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: int | None = None) -> Any:
    """Variance over `axis` with `ddof` (or `correction`) delta degrees of freedom."""
    if correction is not None:
        ddof = correction
    t = _t(a)
    axes = _norm_axes(axis, t.ndim, "var")
    if not _is_float(t.dtype):
        t = P.convert(t, _F64)
    if t.dtype.itemsize == 2:  # float16/bfloat16: in float32, rounded once
        return astype(var(astype(t, _F32), axes, ddof, keepdims), t.dtype)
    centered = t - mean(t, axis=axes, keepdims=True)
    count = _pymath.prod(t.shape[i] for i in axes)
    s = sum(centered * centered, axis=axes, keepdims=keepdims)
    return s / float(builtins.max(count - ddof, 0))


@_api()
def std(a: ArrayLike, axis: Any = None, ddof: int = 0, keepdims: bool = False, *,
        correction: int | None = None) -> Any:
    return sqrt(var(a, axis=axis, ddof=ddof, keepdims=keepdims, correction=correction))


def _arg(kind: str, a: Any, axis: Any, keepdims: bool) -> Tracer:
    t = _t(a)
    name = "arg" + kind
    if t.size == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence (at {format_site()})")
    if axis is None:
        r = P.arg_reduce(P.reshape(t, (t.size,)), 0, kind)
        return P.reshape(r, (1,) * t.ndim) if keepdims else r
    ax = _norm_axis(axis, t.ndim, name)
    r = P.arg_reduce(t, ax, kind)
    return _keep(r, t.shape, (ax,), keepdims)


@_api()
def argmax(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """Index of the first maximum along `axis` (flattened when None), int64."""
    return _arg("max", a, axis, keepdims)


@_api()
def argmin(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """Index of the first minimum along `axis` (flattened when None), int64."""
    return _arg("min", a, axis, keepdims)


# --------------------------------------------------------------------------- shapes

def shape(a: ArrayLike) -> tuple[int, ...]:
    return a.shape if isinstance(a, Tracer) else np.shape(a)


def ndim(a: ArrayLike) -> int:
    return a.ndim if isinstance(a, Tracer) else np.ndim(a)


def size(a: ArrayLike) -> int:
    return a.size if isinstance(a, Tracer) else np.size(a)


def _fmt(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@_api()
def reshape(a: ArrayLike, newshape: Any = None, order: str = "C", *, shape: Any = None) -> Any:
    """numpy.reshape (C order; one dimension may be -1)."""
    if order != "C":
        raise UnsupportedError(f"reshape: only order='C' is supported (at {format_site()})")
    t = _t(a)
    target = shape if shape is not None else newshape
    if isinstance(target, (int, np.integer)):
        target = (int(target),)
    target = [int(d) for d in target]
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1:
        raise ValueError(f"reshape: can only specify one unknown dimension (at {format_site()})")
    known = _pymath.prod(d for d in target if d != -1)
    if unknown:
        if known == 0 or t.size % known:
            raise ShapeError(f"reshape: cannot reshape array of size {t.size} into shape "
                             f"{_fmt(target)} at {format_site()}")
        target[unknown[0]] = t.size // known
    if _pymath.prod(target) != t.size:
        raise ShapeError(f"reshape: cannot reshape array of size {t.size} into shape "
                         f"{_fmt(target)} at {format_site()}")
    return P.reshape(t, target)


@_api()
def ravel(a: ArrayLike) -> Any:
    t = _t(a)
    return P.reshape(t, (t.size,))


@_api()
def transpose(a: ArrayLike, axes: Any = None) -> Any:
    """Permute dims (reverse them when `axes` is None) with linalg.transpose."""
    t = _t(a)
    if axes is None:
        perm = list(range(t.ndim))[::-1]
    else:
        perm = [_norm_axis(ax, t.ndim, "transpose") for ax in axes]
        if sorted(perm) != list(range(t.ndim)):
            raise ValueError(f"transpose: axes {tuple(axes)} don't match array of "
                             f"{t.ndim} dims (at {format_site()})")
    return P.transpose(t, perm)


permute_dims = transpose


@_api()
def swapaxes(a: ArrayLike, axis1: int, axis2: int) -> Any:
    t = _t(a)
    perm = list(range(t.ndim))
    i, j = _norm_axis(axis1, t.ndim, "swapaxes"), _norm_axis(axis2, t.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return P.transpose(t, perm)


@_api()
def moveaxis(a: ArrayLike, source: Any, destination: Any) -> Any:
    t = _t(a)
    src = _norm_axes(source, t.ndim, "moveaxis")
    dst = _norm_axes(destination, t.ndim, "moveaxis")
    if len(src) != len(dst):
        raise ValueError("moveaxis: `source` and `destination` must have the same length")
    order = [i for i in range(t.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return P.transpose(t, order)


@_api()
def expand_dims(a: ArrayLike, axis: Any) -> Any:
    t = _t(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = t.ndim + len(axes)
    norm = sorted(_norm_axis(ax, out_ndim, "expand_dims") for ax in axes)
    dims = iter(t.shape)
    return P.reshape(t, [1 if i in norm else next(dims) for i in range(out_ndim)])


@_api()
def squeeze(a: ArrayLike, axis: Any = None) -> Any:
    t = _t(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        axes = _norm_axes(axis, t.ndim, "squeeze")
        for ax in axes:
            if t.shape[ax] != 1:
                raise ValueError(f"squeeze: cannot select an axis to squeeze out which has "
                                 f"size not equal to one (axis {ax}, at {format_site()})")
    return P.reshape(t, [d for i, d in enumerate(t.shape) if i not in axes])


@_api()
def broadcast_to(array: ArrayLike, shape: Any) -> Any:
    shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return P.broadcast_to(_t(array), shp)


def _real_only(x: Any, who: str) -> Tracer:
    if not isinstance(x, Tracer) and np.asarray(x).dtype.kind == "c":
        raise UnsupportedError(f"anp.{who}: complex dtype {np.asarray(x).dtype} is not "
                               f"supported (at {format_site()})")
    return _t(x)


@_api()
def real(val: ArrayLike) -> Any:
    """The real part: `val` itself (there are no complex dtypes)."""
    return _real_only(val, "real")


@_api()
def imag(val: ArrayLike) -> Any:
    """The imaginary part: zeros of `val`'s shape and dtype (there are no complex dtypes)."""
    return zeros_like(_real_only(val, "imag"))


@_api()
def conjugate(x: ArrayLike) -> Any:
    """The complex conjugate: `x` itself (there are no complex dtypes)."""
    return _real_only(x, "conjugate")


@_api("conjugate")
def conj(x: ArrayLike) -> Any:
    """numpy's short name of `conjugate`."""
    return _real_only(x, "conj")


@_api()
def copy(a: ArrayLike) -> Any:
    """A copy of `a`: the value itself in a trace (arrays there are immutable)."""
    return _t(a)


@_api()
def concat(arrays: Sequence[ArrayLike], /, *, axis: Any = 0) -> Any:
    """The array-API name of `concatenate`."""
    return concatenate(arrays, axis=axis)


@_api()
def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: builtins.bool = False) -> Any:
    """Whether the shapes match and every element is equal (a traced bool; a shape
    mismatch is a constant False, as in numpy)."""
    x, y = _t(a1), _t(a2)
    if x.shape != y.shape:
        return asarray(False)
    same = equal(x, y)
    if equal_nan and _is_float(result_type(x, y)):
        same = logical_or(same, logical_and(isnan(x), isnan(y)))
    return all(same)


@_api()
def array_equiv(a1: ArrayLike, a2: ArrayLike) -> Any:
    """Whether the arrays broadcast to one shape and are equal everywhere."""
    x, y = _t(a1), _t(a2)
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return asarray(False)
    return all(equal(x, y))


@_api()
def broadcast_arrays(*args: ArrayLike) -> Any:
    ts = [_t(a) for a in args]
    shp = P.broadcast_shapes("broadcast_arrays", *[t.shape for t in ts])
    return [P.broadcast_to(t, shp) for t in ts]


@_api()
def concatenate(arrays: Sequence[ArrayLike], axis: Any = 0) -> Any:
    """Join arrays along an existing axis (axis=None: flatten first)."""
    if len(arrays) == 0:
        raise ValueError("need at least one array to concatenate")
    ts, _, _ = _prep(*arrays)
    if axis is None:
        ts = [P.reshape(t, (t.size,)) for t in ts]
        axis = 0
    first = ts[0]
    if first.ndim == 0:
        raise ValueError(f"zero-dimensional arrays cannot be concatenated (at {format_site()})")
    ax = _norm_axis(axis, first.ndim, "concatenate")
    for i, t in enumerate(ts):
        if t.ndim != first.ndim:
            raise ShapeError(
                f"concatenate: all the input arrays must have same number of dimensions, but "
                f"the array at index 0 has {first.ndim} dimension(s) and the array at index "
                f"{i} has {t.ndim} dimension(s) (at {format_site()})")
        for d in range(t.ndim):
            if d != ax and t.shape[d] != first.shape[d]:
                raise ShapeError(
                    f"concatenate: all the input array dimensions except for the "
                    f"concatenation axis must match exactly, but along dimension {d}, the "
                    f"array at index 0 has size {first.shape[d]} and the array at index {i} "
                    f"has size {t.shape[d]} (at {format_site()})")
    if len(ts) == 1:
        return ts[0]
    return P.concatenate(ts, ax)


@_api()
def stack(arrays: Sequence[ArrayLike], axis: int = 0) -> Any:
    """Join arrays along a new axis."""
    if len(arrays) == 0:
        raise ValueError("need at least one array to stack")
    ts, _, _ = _prep(*arrays)
    shapes = {t.shape for t in ts}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all input arrays must have the same shape, got "
                         f"{' '.join(_fmt(s) for s in [t.shape for t in ts])} "
                         f"(at {format_site()})")
    ax = _norm_axis(axis, ts[0].ndim + 1, "stack")
    return concatenate([expand_dims(t, ax) for t in ts], axis=ax)


@_api()
def hstack(tup: Sequence[ArrayLike]) -> Any:
    ts = [atleast_1d(t) for t in tup]
    return concatenate(ts, axis=0 if ts[0].ndim == 1 else 1)


@_api()
def vstack(tup: Sequence[ArrayLike]) -> Any:
    return concatenate([atleast_2d(t) for t in tup], axis=0)


@_api()
def atleast_1d(a: ArrayLike) -> Any:
    t = _t(a)
    return P.reshape(t, (1,)) if t.ndim == 0 else t


@_api()
def atleast_2d(a: ArrayLike) -> Any:
    t = _t(a)
    return P.reshape(t, (1,) * (2 - t.ndim) + t.shape) if t.ndim < 2 else t


@_api()
def flip(m: ArrayLike, axis: Any = None) -> Any:
    """Reverse the order of elements along `axis` (all axes when None)."""
    t = _t(m)
    return P.reverse(t, _norm_axes(axis, t.ndim, "flip"))


@_api()
def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """numpy.diagonal: the (offset) diagonal of the (axis1, axis2) planes, as the last axis."""
    t = _t(a)
    if t.ndim < 2:
        raise ValueError(f"diag requires an array of at least two dimensions (at "
                         f"{format_site()})")
    a1 = _norm_axis(axis1, t.ndim, "diagonal")
    a2 = _norm_axis(axis2, t.ndim, "diagonal")
    if a1 == a2:
        raise ValueError(f"axis1 and axis2 cannot be the same (at {format_site()})")
    return P.diagonal(t, int(offset), a1, a2)


@_api()
def diff(a: ArrayLike, n: int = 1, axis: int = -1) -> Any:
    t = _t(a)
    ax = _norm_axis(axis, t.ndim, "diff")
    lead = (slice(None),) * ax
    for _ in range(n):
        t = t[lead + (slice(1, None),)] - t[lead + (slice(None, -1),)]
    return t


def _tri_mask(n: int, m: int, k: int, upper: bool) -> np.ndarray:
    return np.triu(np.ones((n, m), bool), k) if upper else np.tril(np.ones((n, m), bool), k)


def _tri_operand(m: ArrayLike, name: str) -> Tracer:
    t = _t(m)
    if t.ndim < 2:
        raise ValueError(f"{name} requires an array of at least 2 dimensions, got {t.ndim} "
                         f"(at {format_site()})")
    return t


@_api()
def tril(m: ArrayLike, k: int = 0) -> Any:
    t = _tri_operand(m, "tril")
    return where(_tri_mask(t.shape[-2], t.shape[-1], k, False), t, np.zeros((), t.dtype))


@_api()
def triu(m: ArrayLike, k: int = 0) -> Any:
    t = _tri_operand(m, "triu")
    return where(_tri_mask(t.shape[-2], t.shape[-1], k, True), t, np.zeros((), t.dtype))


# --------------------------------------------------------------------------- indexing

class _Index:
    """A basic index resolved against a shape: one extract_slice (+ flips, reshape)."""

    def __init__(self, shape: tuple[int, ...], idx: Any) -> None:
        if not isinstance(idx, tuple):
            idx = (idx,)
        items = _expand_ellipsis([self._check(i) for i in idx], len(shape), format_site())
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.strides: list[int] = []
        self.drop: list[int] = []
        self.flip: list[int] = []  # source dims read backwards (negative steps)
        layout: list[int | None] = []  # per result dim: source dim or None (newaxis)
        dim = 0
        for it in items:
            if it is None:
                layout.append(None)
                continue
            n = shape[dim]
            if isinstance(it, int):
                i = it + n if it < 0 else it
                if not 0 <= i < n:
                    raise IndexError(f"index {it} is out of bounds for axis {dim} with size "
                                     f"{n} (at {format_site()})")
                self.offsets.append(i)
                self.sizes.append(1)
                self.strides.append(1)
                self.drop.append(dim)
            else:
                start, stop, step = it.indices(n)
                length = len(range(start, stop, step))
                if length == 0:
                    off, stride = 0, 1
                elif step > 0:
                    off, stride = start, step
                else:  # read the same elements forwards, then flip them
                    off, stride = start + (length - 1) * step, -step
                    if length > 1:
                        self.flip.append(dim)
                self.offsets.append(off)
                self.sizes.append(length)
                self.strides.append(stride)
                layout.append(dim)
            dim += 1
        kept = [d for d in range(len(shape)) if d not in self.drop]
        #: dims of the extracted slice that must be flipped
        self.flip_in_slice = [kept.index(d) for d in self.flip]
        self.slice_shape = [self.sizes[d] for d in kept]
        self.result_shape = [1 if d is None else self.sizes[d] for d in layout]

    @staticmethod
    def _check(i: Any) -> Any:
        if i is None or i is Ellipsis or isinstance(i, slice):
            if isinstance(i, slice):
                for part in (i.start, i.stop, i.step):
                    if isinstance(part, Tracer):
                        raise UnsupportedError(
                            f"slice bounds must be static Python ints, got a traced value at "
                            f"{format_site()}")
            return i
        if isinstance(i, (builtins.bool, np.bool_)):
            raise UnsupportedError(f"boolean indices are not supported (at {format_site()})")
        if isinstance(i, (int, np.integer)):
            return int(i)
        if isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype.kind == "i":
            return int(i)
        if isinstance(i, Tracer):
            raise UnsupportedError(
                f"indexing with a traced value (dynamic or array indexing) is not supported at "
                f"{format_site()}; use static ints and slices, or anp.where / one-hot products")
        raise UnsupportedError(
            f"advanced indexing with {type(i).__name__} is not supported at {format_site()}; "
            "use ints, slices, None and ...")

    def read(self, t: Tracer) -> Tracer:
        r = P.extract_slice(t, self.offsets, self.sizes, self.strides, self.drop)
        if self.flip_in_slice:
            r = P.reverse(r, self.flip_in_slice)
        return P.reshape(r, self.result_shape)

    def write(self, t: Tracer, value: Tracer) -> Tracer:
        """Insert `value` (shaped like the slice, before flips/newaxes) into `t`."""
        if self.flip_in_slice:
            value = P.reverse(value, self.flip_in_slice)
        if 0 in self.sizes:
            return t
        return P.insert_slice(t, value, self.offsets, self.sizes, self.strides)


def _getitem(x: Tracer, idx: Any) -> Tracer:
    if _ix.has_array_items(idx):  # integer arrays / traced indices: a gather
        return _ix.advanced_getitem(x, idx, _Index)
    return _Index(x.shape, idx).read(x)


class _IndexUpdateRef:
    """`x.at[idx]`: functional updates returning a new array (JAX's `.at`)."""

    def __init__(self, x: Tracer, idx: Any) -> None:
        self.x = x
        self.idx = idx

    def get(self, **options: Any) -> Tracer:
        """x[idx]; out-of-range array indices clamp (jax's options accepted:
        `mode` "clip"/"promise_in_bounds", `indices_are_sorted`, `unique_indices`)."""
        _ix.check_options("at[].get", options, ("clip", "promise_in_bounds"))
        return _getitem(self.x, self.idx)

    def _update(self, v: Any, combine: Callable[[Tracer, Tracer], Tracer] | None,
                opname: str, options: dict[str, Any] | None = None) -> Tracer:
        x = self.x
        _ix.check_options(opname, options or {}, ("drop", "promise_in_bounds"))
        if _ix.has_array_items(self.idx):  # integer arrays / traced indices: a scatter
            return _scatter_update(x, self.idx, v, opname)
        index = _Index(x.shape, self.idx)
        val = P.convert(_t(v), x.dtype)
        val = P.broadcast_to(val, index.result_shape, opname)
        val = P.reshape(val, index.slice_shape)
        if combine is not None:
            cur = P.extract_slice(x, index.offsets, index.sizes, index.strides, index.drop)
            if index.flip_in_slice:
                val = P.reverse(val, index.flip_in_slice)
            val = P.convert(combine(cur, val), x.dtype)
            if index.flip_in_slice:
                val = P.reverse(val, index.flip_in_slice)
        return index.write(x, val)

    def set(self, values: Any, **options: Any) -> Tracer:
        """x with x[idx] replaced by `values` (broadcast to x[idx].shape, cast to x.dtype)."""
        return self._update(values, None, "at[].set", options)

    def add(self, values: Any, **options: Any) -> Tracer:
        """x with `values` added at x[idx]."""
        return self._update(values, add, "at[].add", options)

    def subtract(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, subtract, "at[].subtract", options)

    def multiply(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, multiply, "at[].multiply", options)

    mul = multiply

    def divide(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, true_divide, "at[].divide", options)

    def power(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, power, "at[].power", options)

    def min(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, minimum, "at[].min", options)

    def max(self, values: Any, **options: Any) -> Tracer:
        return self._update(values, maximum, "at[].max", options)


class _IndexUpdateHelper:
    def __init__(self, x: Tracer) -> None:
        self.x = x

    def __getitem__(self, idx: Any) -> _IndexUpdateRef:
        return _IndexUpdateRef(self.x, idx)


def _traced_at(x: np.ndarray, idx: Any) -> _IndexUpdateRef | None:
    """`x.at[idx]` of an eager array inside a trace: traced, as its operands may be."""
    return None if current_trace() is None else _IndexUpdateRef(P.constant_like(x), idx)


def _traced_getitem(x: np.ndarray, idx: Any) -> Tracer | None:
    """`x[idx]` of an eager array whose index holds a traced value: a traced gather
    from the constant `x` (None, numpy's indexing, for any other index)."""
    if current_trace() is None:
        return None
    items = idx if isinstance(idx, tuple) else (idx,)
    if not builtins.any(isinstance(i, Tracer) for i in items):
        return None
    return P.constant_like(x)[idx]


_eager.traced_at = _traced_at
_eager.traced_getitem = _traced_getitem


# --------------------------------------------------------------------------- linear algebra

@_api()
def matmul(x1: ArrayLike, x2: ArrayLike) -> Any:
    """numpy.matmul: 1-D, 2-D (linalg.matmul) and broadcast batched N-D (linalg.batch_matmul)."""
    (a, b), dt, _ = _prep(x1, x2)
    if _is_bool(dt):
        raise UnsupportedError(f"matmul of boolean arrays is not supported (at {format_site()})")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: Input operand {0 if a.ndim == 0 else 1} does not have "
                         f"enough dimensions (at {format_site()})")
    a2 = P.reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = P.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature (n?,k),(k,m?)->(n?,m?) (size {b2.shape[-2]} is different from "
            f"{a2.shape[-1]}): shapes {_fmt(a.shape)} and {_fmt(b.shape)} at {format_site()}")
    batch = P.broadcast_shapes("matmul", a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    if not batch:
        r = P.matmul2d(a2, b2)
    else:
        nb = _pymath.prod(batch)
        a3 = P.reshape(P.broadcast_to(a2, batch + (m, k), "matmul"), (nb, m, k))
        b3 = P.reshape(P.broadcast_to(b2, batch + (k, n), "matmul"), (nb, k, n))
        r = P.reshape(P.matmul2d(a3, b3), batch + (m, n))
    out = list(batch)
    if a.ndim > 1:
        out.append(m)
    if b.ndim > 1:
        out.append(n)
    return P.reshape(r, out)


@_api()
def dot(a: ArrayLike, b: ArrayLike) -> Any:
    """numpy.dot: products for scalars, matmul up to 2-D, else sum over a[-1] and b[-2]."""
    ta, tb = _t(a), _t(b)
    if ta.ndim == 0 or tb.ndim == 0:
        return multiply(ta, tb)
    if tb.ndim <= 2 and ta.ndim <= 2:
        return matmul(ta, tb)
    if tb.ndim == 1:
        return tensordot(ta, tb, axes=([ta.ndim - 1], [0]))
    return tensordot(ta, tb, axes=([ta.ndim - 1], [tb.ndim - 2]))


@_api()
def vdot(a: ArrayLike, b: ArrayLike) -> Any:
    return dot(ravel(a), ravel(b))


@_api()
def inner(a: ArrayLike, b: ArrayLike) -> Any:
    ta, tb = _t(a), _t(b)
    if ta.ndim == 0 or tb.ndim == 0:
        return multiply(ta, tb)
    return tensordot(ta, tb, axes=([ta.ndim - 1], [tb.ndim - 1]))


@_api()
def outer(a: ArrayLike, b: ArrayLike) -> Any:
    ta, tb = ravel(a), ravel(b)
    return multiply(P.reshape(ta, (ta.size, 1)), P.reshape(tb, (1, tb.size)))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@_api()
def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2) -> Any:
    """Sum products over `axes` (an int N: last N of a with first N of b; or two lists)."""
    ta, tb = _t(a), _t(b)
    if isinstance(axes, (int, np.integer)):
        ax_a = list(range(ta.ndim - int(axes), ta.ndim))
        ax_b = list(range(int(axes)))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
    ax_a = [_norm_axis(x, ta.ndim, "tensordot") for x in ax_a]
    ax_b = [_norm_axis(x, tb.ndim, "tensordot") for x in ax_b]
    if len(ax_a) != len(ax_b):
        raise ValueError("tensordot: shape-mismatch for sum")
    la = list(_LETTERS[: ta.ndim])
    lb = list(_LETTERS[ta.ndim: ta.ndim + tb.ndim])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
          [c for j, c in enumerate(lb) if j not in ax_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", ta, tb)


@_api()
def einsum(subscripts: str, *operands: ArrayLike, optimize: Any = False) -> Any:
    """numpy.einsum with explicit (`ij,jk->ik`) or implicit subscripts; `...` stands
    for broadcast dims (array_manip.expand_ellipsis). `optimize` is accepted and
    ignored (the order of contraction is left to right).

    Two-operand contractions become one `linalg.generic` with reduction
    iterators; more operands are contracted pairwise, left to right.
    """
    spec = subscripts.replace(" ", "")
    if "." in spec:
        spec, shapes = _manip.expand_ellipsis(spec, [shape(o) for o in operands])
        operands = tuple(broadcast_to(o, s) for o, s in zip(operands, shapes))
    if "->" in spec:
        lhs, out = spec.split("->")
    else:
        lhs = spec
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(operands)} operands "
                         f"(at {format_site()})")
    ts, dt, _ = _prep(*operands)
    if _is_bool(dt):
        ts, dt = [P.convert(t, _I64) for t in ts], _I64
    sizes: dict[str, int] = {}
    for letters, t in zip(ins, ts):
        if len(letters) != t.ndim:
            raise ShapeError(f"einsum: operand with subscripts '{letters}' has {t.ndim} "
                             f"dimensions (at {format_site()})")
        for ch, d in zip(letters, t.shape):
            if sizes.setdefault(ch, d) != d:
                raise ShapeError(f"einsum: size of label '{ch}' differs between operands "
                                 f"({sizes[ch]} vs {d}) at {format_site()}")
    for ch in out:
        if ch not in sizes:
            raise ValueError(f"einsum: output label '{ch}' not in any input (at "
                             f"{format_site()})")
    if len(ts) == 1 and len(set(ins[0])) == len(ins[0]) and sorted(ins[0]) == sorted(out):
        return P.transpose(ts[0], [ins[0].index(c) for c in out])
    # Pairwise contraction, keeping the labels still needed later.
    cur, cur_letters = ts[0], ins[0]
    if len(ts) == 1:
        return P.contract([cur], [cur_letters], out, sizes)
    for i in range(1, len(ts)):
        nxt, nxt_letters = ts[i], ins[i]
        if i == len(ts) - 1:
            keep = out
        else:
            later = set(out) | set("".join(ins[i + 1:]))
            keep = "".join(dict.fromkeys(c for c in cur_letters + nxt_letters if c in later))
        cur = P.contract([cur, nxt], [cur_letters, nxt_letters], keep, sizes)
        cur_letters = keep
    return cur


# --------------------------------------------------------------------------- creation

def _make(arr: np.ndarray) -> Any:
    """A constant: a traced one inside a trace, else the numpy array."""
    if current_trace() is None:
        return _eager_result(arr)
    return P.constant(arr)


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def zeros(shape: Any, dtype: Any = float) -> Any:
    return _make(np.zeros(_shape_tuple(shape), dtype))


def ones(shape: Any, dtype: Any = float) -> Any:
    return _make(np.ones(_shape_tuple(shape), dtype))


empty = zeros


def full(shape: Any, fill_value: ArrayLike, dtype: Any = None) -> Any:
    """An array of `shape` filled with `fill_value` (which may be traced)."""
    shp = _shape_tuple(shape)
    if isinstance(fill_value, Tracer):
        t = P.convert(fill_value, dtype, weak_type=False) if dtype is not None else fill_value
        return P.broadcast_to(t, shp, "full")
    return _make(np.full(shp, fill_value, dtype))


def zeros_like(a: ArrayLike, dtype: Any = None) -> Any:
    return zeros(shape(a), dtype if dtype is not None else _like_dtype(a))


def ones_like(a: ArrayLike, dtype: Any = None) -> Any:
    return ones(shape(a), dtype if dtype is not None else _like_dtype(a))


def full_like(a: ArrayLike, fill_value: ArrayLike, dtype: Any = None) -> Any:
    return full(shape(a), fill_value, dtype if dtype is not None else _like_dtype(a))


def _like_dtype(a: ArrayLike) -> np.dtype:
    return a.dtype if isinstance(a, Tracer) else np.asarray(a).dtype


def _static(name: str, *xs: Any) -> None:
    for x in xs:
        if isinstance(x, Tracer):
            raise ConcretizationTypeError(
                f"anp.{name} needs static (Python) arguments, got a traced value at "
                f"{format_site()}; the result's shape would depend on a runtime value")


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> Any:
    _static("arange", start, stop, step)
    return _make(np.arange(start, stop, step, dtype=dtype) if stop is not None
                 else np.arange(start, dtype=dtype) if step is None
                 else np.arange(0, start, step, dtype=dtype))


def _make_result(value: Any) -> Any:
    """`_make` of an array, or of each array of a tuple (numpy.linspace's retstep)."""
    if isinstance(value, tuple):
        return tuple(_make(np.asarray(v)) if isinstance(v, np.ndarray) else v for v in value)
    return _make(value)


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = float) -> Any:
    _static("eye", N, M, k)
    return _make(np.eye(N, M, k, dtype=dtype))


def identity(n: int, dtype: Any = float) -> Any:
    return eye(n, dtype=dtype)


# --------------------------------------------------------------------------- sorting and scans
# Sorting is a bitonic network written in our own IR (`P.bitonic_sort`: one
# scf.for over log2(n)^2 steps, each vectorized over the other axes; O(n log^2 n)
# work and IR of the same size for every n), stable (ties are broken by position), NaNs last. Values move
# with their tangents through the network's selects, so jvp, vjp, vmap and
# higher orders come from the existing rules, and the derivative of `sort` is
# the permutation, as jax's. Scans are jax's associative scan (the same
# combination tree, so derivatives at ties equal jax's).

def _with_eager(eager: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like `_api`, for functions whose keywords numpy lacks: `eager` runs on numpy values."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if current_trace() is None:
                if _has_tracer(args, kwargs):
                    raise UnexpectedTracerError(
                        f"anp.{fn.__name__} got a traced value outside of any trace at "
                        f"{format_site()}; traced values must not escape their function")
                return _eager_result(eager(*args, **kwargs))
            return fn(*args, **kwargs)

        return wrapper

    return deco


def _sort_axis(t: Tracer, axis: Any, name: str) -> tuple[Tracer, int]:
    """`t` flattened for axis=None, and the normalized axis."""
    if axis is None:
        return P.reshape(t, (t.size,)), 0
    if t.ndim == 0:
        raise np.exceptions.AxisError(f"{name}: axis {axis} is out of bounds for array of "
                                      f"dimension 0 (at {format_site()})")
    return t, _norm_axis(axis, t.ndim, name)


def _to_last(t: Tracer, axis: int) -> Tracer:
    return t if axis == t.ndim - 1 else moveaxis(t, axis, -1)


def _from_last(t: Tracer, axis: int) -> Tracer:
    return t if axis == t.ndim - 1 else moveaxis(t, -1, axis)


def _sort_last(t: Tracer, payloads: Sequence[Tracer] = (), num_keys: int = 1
               ) -> tuple[Tracer, Tracer, list[Tracer]]:
    """Stable ascending sort along the last axis by `t` (and the first `num_keys - 1`
    payloads, lexicographically): (values, int64 positions, payloads moved alike).
    NaNs go last; bools sort as False < True."""
    shape, n = t.shape, t.shape[-1]
    rows = _pymath.prod(shape[:-1])
    pos = P.broadcast_to(P.constant(np.arange(n, dtype=np.int64)), shape)
    if n <= 1 or t.size == 0:
        return t, pos, list(payloads)
    ops = [t, *payloads]
    work = [P.convert(x, np.int8) if _is_bool(x.dtype) else x for x in ops]
    size = 1 << (n - 1).bit_length()
    flat = [P.reshape(x, (rows, n)) for x in work]
    flat_pos = P.reshape(pos, (rows, n))
    if size > n:
        # Padding sorts after every element: NaN (or the largest integer) in every key, at
        # later positions.
        def pad(x: Tracer, value: Any) -> Tracer:
            fill = np.full((1, size - n), value, dtype=x.dtype)
            return P.concatenate([x, P.broadcast_to(P.constant(fill), (rows, size - n))], 1)
        flat = [pad(x, (np.nan if _is_float(x.dtype) else np.iinfo(x.dtype).max)
                    if k < num_keys else 0) for k, x in enumerate(flat)]
        flat_pos = pad(flat_pos, np.arange(n, size)[None])
    keys, p, rest = P.bitonic_sort(flat[:num_keys], flat_pos, flat[num_keys:])
    out = [P.reshape(P.extract_slice(x, [0, 0], [rows, n], [1, 1]), shape)
           for x in (*keys, *rest, p)]
    out = [P.convert(o, x.dtype) if _is_bool(x.dtype) else o for o, x in zip(out, ops)] + \
        [out[-1]]
    return out[0], out[-1], out[1:-1]


def _argsort_last(t: Tracer, descending: bool) -> tuple[Tracer, Tracer]:
    """(sorted values, int64 indices) along the last axis; descending keeps ties in
    their original order (jax's argsort(descending=True), lax.top_k)."""
    if not descending:
        v, i, _ = _sort_last(t)
        return v, i
    n = t.shape[-1]
    v, i, _ = _sort_last(P.reverse(t, [t.ndim - 1]))
    i = subtract(n - 1, P.reverse(i, [t.ndim - 1]))
    return P.reverse(v, [t.ndim - 1]), i


@_with_eager(_eager_sort)
def sort(a: ArrayLike, axis: Any = -1, *, kind: Any = None, order: Any = None,
         stable: bool = True, descending: bool = False) -> Any:
    """A sorted copy along `axis` (None: flattened), as jax.numpy.sort: stable, NaNs last;
    `descending=True` reverses the ascending result. Its derivative is the permutation."""
    _sort_args("sort", kind, order)
    t, ax = _sort_axis(_t(a), axis, "sort")
    v, _, _ = _sort_last(_to_last(t, ax))
    if descending:
        v = P.reverse(v, [v.ndim - 1])
    return _from_last(v, ax)


@_with_eager(_eager_argsort)
def argsort(a: ArrayLike, axis: Any = -1, *, kind: Any = None, order: Any = None,
            stable: bool = True, descending: bool = False) -> Any:
    """int64 indices that sort along `axis` (None: flattened), stable (ties keep their
    order, also when `descending`), NaNs last (first when descending)."""
    _sort_args("argsort", kind, order)
    t, ax = _sort_axis(_t(a), axis, "argsort")
    _, i = _argsort_last(_to_last(t, ax), descending)
    return _from_last(i, ax)


@_api()
def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: Any = None) -> Any:
    """Insertion points of `v` in the sorted 1-D `a` (int64), by binary search: NaNs sort
    last as in numpy.sort. `sorter`: the indices that sort `a` (argsort's result)."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r} (at "
                         f"{format_site()})")
    (ta, tv), dt, _ = _prep(a, v)
    if ta.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got shape {_fmt(ta.shape)} (at "
                         f"{format_site()})")
    if _is_bool(dt):
        ta, tv = P.convert(ta, np.int8), P.convert(tv, np.int8)
    ts = None
    if sorter is not None:
        ts = _t(sorter)
        if ts.shape != ta.shape or ts.dtype.kind not in "iu":
            raise ValueError(f"searchsorted: sorter must be integer indices of a's shape "
                             f"{_fmt(ta.shape)}, got {ts.aval} (at {format_site()})")
    return P.search_sorted(ta, tv, side == "right", ts)


def _strided(t: Tracer, axis: int, start: int, stop: int, step: int = 1) -> Tracer:
    """t[start:stop:step] along `axis` (static, non-empty or empty)."""
    count = builtins.max(0, -(-(stop - start) // step))
    offs, sizes, strides = [0] * t.ndim, list(t.shape), [1] * t.ndim
    offs[axis], sizes[axis], strides[axis] = start if count else 0, count, step
    return P.extract_slice(t, offs, sizes, strides)


def _interleave(even: Tracer, odd: Tracer, axis: int) -> Tracer:
    """[e0, o0, e1, o1, ...] along `axis` (even may be one longer)."""
    m = odd.shape[axis]
    head = _strided(even, axis, 0, m) if even.shape[axis] > m else even
    both = stack([head, odd], axis=axis + 1)
    shape = list(head.shape)
    shape[axis] = 2 * m
    out = P.reshape(both, shape)
    if even.shape[axis] > m:
        out = P.concatenate([out, _strided(even, axis, m, m + 1)], axis)
    return out


def _associative_scan(fn: Callable[[Any, Any], Any], x: Tracer, axis: int,
                     reverse: bool = False) -> Tracer:
    """Inclusive prefix combination of `x` along `axis` by the associative `fn(earlier,
    later)`: jax's odd/even recursion (O(n) work, 2 log2(n) steps)."""
    if reverse:
        return P.reverse(_associative_scan(fn, P.reverse(x, [axis]), axis), [axis])

    def scan(e: Tracer) -> Tracer:
        n = e.shape[axis]
        if n < 2:
            return e
        odd = scan(fn(_strided(e, axis, 0, n - 1, 2), _strided(e, axis, 1, n, 2)))
        even = _strided(e, axis, 0, 1)
        if n > 2:
            rest = _strided(e, axis, 2, n, 2)
            prev = _strided(odd, axis, 0, odd.shape[axis] - 1) if n % 2 == 0 else odd
            even = P.concatenate([even, fn(prev, rest)], axis)
        return _interleave(even, odd, axis)

    return scan(x)


def _cumulative(name: str, fn: Callable[[Any, Any], Any], a: Any, axis: Any,
                dtype: Any) -> Tracer:
    t = _t(a)
    if axis is None or t.ndim == 0:
        t = P.reshape(t, (t.size,))
        axis = 0
    ax = _norm_axis(axis, t.ndim, name)
    if dtype is not None:
        t = P.convert(t, canonical_dtype(dtype), weak_type=False)
    else:
        t = P.convert(t, _sum_dtype(t.dtype), weak_type=False)
    if t.shape[ax] == 0:
        return t
    return _associative_scan(fn, t, ax)


@_api()
def cumsum(a: ArrayLike, axis: Any = None, dtype: Any = None) -> Any:
    """Running sum along `axis` (None: flattened); bools and small ints sum in int64, as
    numpy. Its transpose is the reversed running sum."""
    return _cumulative("cumsum", add, a, axis, dtype)


@_api()
def cumprod(a: ArrayLike, axis: Any = None, dtype: Any = None) -> Any:
    """Running product along `axis` (None: flattened); exact derivatives through zeros
    (products of prefixes, no division)."""
    return _cumulative("cumprod", multiply, a, axis, dtype)


_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name: str, a: Any, q: Any, axis: Any, method: str, keepdims: bool,
              out: Any = None) -> Tracer:
    if out is not None:
        raise UnsupportedError(f"{name}: out= is not supported; arrays are immutable (at "
                               f"{format_site()})")
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"{name}: method must be one of {', '.join(_QUANTILE_METHODS)}; got "
                         f"{method!r} (at {format_site()})")
    t = _t(a)
    a_dtype = t.dtype
    tq = _t(q)
    if tq.ndim > 1:
        raise ValueError(f"{name}: q must have rank <= 1, got shape {_fmt(tq.shape)} (at "
                         f"{format_site()})")
    if not isinstance(q, Tracer):
        qv = np.asarray(q, dtype=np.float64)
        if np.any((qv < 0) | (qv > 1)):
            raise ValueError(f"{name}: quantiles must be in the range [0, 1] (at "
                             f"{format_site()})")
    dt = _float_of(result_type(t, q))
    t, tq = P.convert(t, dt), P.convert(tq, dt, weak_type=False)
    axes = _norm_axes(axis, t.ndim, name)
    if t.size == 0 or builtins.any(t.shape[i] == 0 for i in axes):
        raise ValueError(f"{name}: cannot take a quantile of an empty axis (at "
                         f"{format_site()})")
    keep_shape = [1 if i in axes else d for i, d in enumerate(t.shape)]
    rest = [i for i in range(t.ndim) if i not in axes]
    moved = transpose(t, rest + list(axes)) if t.ndim else t
    n = _pymath.prod(t.shape[i] for i in axes)
    x = P.reshape(moved, [t.shape[i] for i in rest] + [n])
    # any NaN along the axis makes the result NaN (as numpy and jax)
    x = where(any(isnan(x), axis=-1, keepdims=True), np.nan, x)
    x, _, _ = _sort_last(x)
    pos = tq * float(n - 1)
    low = floor(pos)
    high = ceil(pos)
    w_high = pos - low
    low = clip(low, 0.0, float(n - 1))
    high = clip(high, 0.0, float(n - 1))
    if method == "nearest":  # numpy rounds half to even
        low = high = clip(round(pos), 0.0, float(n - 1))
    grid = P.constant(np.arange(n, dtype=dt))
    qshape = tq.shape

    def take(i: Tracer) -> Tracer:
        # x[..., i] for every q: a one-hot select and sum (exact; no inf * 0)
        xi = P.reshape(x, (1,) * len(qshape) + x.shape)
        ii = P.reshape(i, qshape + (1,) * x.ndim)
        hit = equal(grid, ii)
        return sum(where(hit, xi, 0.0), axis=-1)

    lo_v = take(low)
    if method in ("lower", "nearest"):
        out = lo_v
    else:
        hi_v = take(high)
        w = P.reshape(w_high, qshape + (1,) * (x.ndim - 1))
        if method == "higher":
            out = hi_v
        elif method == "midpoint":
            out = (lo_v + hi_v) * 0.5
        else:
            out = lo_v * (1.0 - w) + hi_v * w
    if method in ("lower", "higher", "nearest"):
        out = P.convert(out, a_dtype, weak_type=False)  # an element of `a`, as numpy
    if keepdims:
        out = P.reshape(out, qshape + tuple(keep_shape))
    return out


@_api()
def quantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None,
             overwrite_input: bool = False, method: str = "linear",
             keepdims: bool = False) -> Any:
    """The q-th quantiles (q in [0, 1], a scalar or 1-D, static or traced) over `axis`
    (None, int or tuple); methods linear, lower, higher, midpoint, nearest (half to even,
    as numpy). A NaN along the axis gives NaN. Differentiable in `a` (through the sort)
    and, for linear, in `q`."""
    return _quantile("quantile", a, q, axis, method, keepdims, out)


@_api()
def percentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: None = None,
               overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False) -> Any:
    """`quantile(a, q / 100, ...)`."""
    if not isinstance(q, Tracer):
        qv = np.asarray(q, dtype=np.float64)
        if np.any((qv < 0) | (qv > 100)):
            raise ValueError(f"percentile: percentiles must be in the range [0, 100] (at "
                             f"{format_site()})")
        # a Python scalar stays weakly typed (float32 data keeps float32, as numpy)
        q = q / 100 if isinstance(q, (int, float)) else np.true_divide(q, 100)
    else:
        q = true_divide(q, 100.0)
    return _quantile("percentile", a, q, axis, method, keepdims, out)


@_api()
def median(a: ArrayLike, axis: Any = None, out: None = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The median over `axis`: the mean of the two middle values for an even count."""
    return _quantile("median", a, 0.5, axis, "midpoint", keepdims, out)


# --------------------------------------------------------------------------- Tracer's interface
# `tracing.Tracer` holds a value and its abstract value; numpy's interface on it
# (operators, `.T`, `.at`, ndarray methods, numpy's ufunc protocol) is the
# functions of this module, installed on the class here, as jax.numpy installs
# its array methods. So tracing imports nothing above it, and whoever traces
# imports this module (`api` does).

#: numpy ufuncs that Python operators on ndarrays turn into -> our function name.
_OPERATOR_UFUNCS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "true_divide",
    "true_divide": "true_divide", "floor_divide": "floor_divide", "remainder": "remainder",
    "power": "power", "matmul": "matmul", "less": "less", "less_equal": "less_equal",
    "greater": "greater", "greater_equal": "greater_equal", "equal": "equal",
    "not_equal": "not_equal", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor",
}


def _unsupported_numpy(full_name: str, base: str) -> _UnsupportedNumpyFunctionError:
    hint = (f"use mlir_autodiff.numpy.{base}" if base in globals() and not base.startswith("_")
            else f"mlir_autodiff.numpy has no '{base}' yet")
    return _UnsupportedNumpyFunctionError(
        f"numpy.{full_name} is not supported on traced values at {format_site()}; {hint}"
    )


def _array_ufunc(self: Tracer, ufunc: np.ufunc, method: str, *inputs: Any,
                 **kwargs: Any) -> Any:
    # `ndarray + tracer` reaches us as np.add(ndarray, tracer): dispatch the
    # ufuncs behind Python operators; any other numpy function is an error.
    name = _OPERATOR_UFUNCS.get(ufunc.__name__)
    if method == "__call__" and name is not None and not kwargs:
        return globals()[name](*inputs)
    full = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
    raise _unsupported_numpy(full, ufunc.__name__)


def _array_function(self: Tracer, fn: Any, types_: Any, args: Any, kwargs: Any) -> Any:
    raise _unsupported_numpy(fn.__name__, fn.__name__)


def _forward(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`x.op(o)` -> fn(x, o)."""
    return lambda self, o: fn(self, o)


def _reflected(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`x.__rop__(o)` -> fn(o, x)."""
    return lambda self, o: fn(o, self)


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self: fn(self)


def _reduction_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`x.sum(axis=None, dtype=None, keepdims=False)` and the like."""
    def method(self: Tracer, axis: Any = None, dtype: Any = None,
               keepdims: bool = False) -> Tracer:
        return fn(self, axis=axis, dtype=dtype, keepdims=keepdims)
    return method


def _axis_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`x.max(axis=None, keepdims=False)` and the like."""
    def method(self: Tracer, axis: Any = None, keepdims: bool = False) -> Tracer:
        return fn(self, axis=axis, keepdims=keepdims)
    return method


def _moment_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`x.var(axis=None, ddof=0, keepdims=False)`, `x.std(...)`."""
    def method(self: Tracer, axis: Any = None, ddof: int = 0,
               keepdims: bool = False) -> Tracer:
        return fn(self, axis=axis, ddof=ddof, keepdims=keepdims)
    return method


def _reshape_method(self: Tracer, *shape: Any, order: str = "C") -> Tracer:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return reshape(self, shape, order=order)


def _transpose_method(self: Tracer, *axes: Any) -> Tracer:
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return transpose(self, axes or None)


def _squeeze_method(self: Tracer, axis: Any = None) -> Tracer:
    return squeeze(self, axis)


def _swapaxes_method(self: Tracer, a: int, b: int) -> Tracer:
    return swapaxes(self, a, b)


def _clip_method(self: Tracer, min: Any = None, max: Any = None) -> Tracer:
    return clip(self, min, max)


def _at_property(self: Tracer) -> _IndexUpdateHelper:
    """Functional updates: `x.at[idx].set(v)`, `.add(v)`, `.multiply(v)`, `.get()`..."""
    return _IndexUpdateHelper(self)


#: Binary operators `__op__` / `__rop__` -> the function they call.
_BINARY_OPERATORS = {
    "add": add, "sub": subtract, "mul": multiply, "truediv": true_divide,
    "floordiv": floor_divide, "mod": remainder, "pow": power, "matmul": matmul,
    "and": bitwise_and, "or": bitwise_or, "xor": bitwise_xor,
}
_COMPARISONS = {"lt": less, "le": less_equal, "gt": greater, "ge": greater_equal,
                "eq": equal, "ne": not_equal}

#: Tracer attribute -> its implementation (functions take the Tracer first).
_TRACER_METHODS: dict[str, Any] = {
    # operators
    **{f"__{op}__": _forward(fn) for op, fn in _BINARY_OPERATORS.items()},
    **{f"__r{op}__": _reflected(fn) for op, fn in _BINARY_OPERATORS.items()},
    **{f"__{op}__": _forward(fn) for op, fn in _COMPARISONS.items()},
    "__neg__": _unary(negative),
    "__pos__": lambda self: self,
    "__abs__": _unary(abs),
    "__invert__": _unary(invert),
    "__getitem__": _forward(_getitem),
    # numpy's protocols: `ndarray <op> tracer`; np.* functions are errors
    "__array_ufunc__": _array_ufunc,
    "__array_function__": _array_function,
    # ndarray methods
    "astype": _forward(astype),
    "reshape": _reshape_method,
    "transpose": _transpose_method,
    "swapaxes": _swapaxes_method,
    "squeeze": _squeeze_method,
    "ravel": _unary(ravel),
    "flatten": _unary(ravel),
    "sum": _reduction_method(sum),
    "mean": _reduction_method(mean),
    "prod": _reduction_method(prod),
    "var": _moment_method(var),
    "std": _moment_method(std),
    "max": _axis_method(max),
    "min": _axis_method(min),
    "all": _axis_method(all),
    "any": _axis_method(any),
    "argmax": _axis_method(argmax),
    "argmin": _axis_method(argmin),
    "clip": _clip_method,
    "dot": _forward(dot),
    # jax's (not numpy's in-place) sort: a sorted copy
    "sort": lambda self, axis=-1, **kw: sort(self, axis, **kw),
    "argsort": lambda self, axis=-1, **kw: argsort(self, axis, **kw),
    "cumsum": lambda self, axis=None, dtype=None: cumsum(self, axis, dtype),
    "cumprod": lambda self, axis=None, dtype=None: cumprod(self, axis, dtype),
    "repeat": lambda self, repeats, axis=None: repeat(self, repeats, axis),
    "diagonal": lambda self, offset=0, axis1=0, axis2=1: diagonal(self, offset, axis1, axis2),
}
#: Tracer properties.
_TRACER_PROPERTIES: dict[str, Callable[[Tracer], Any]] = {
    "T": _unary(transpose),
    "mT": lambda self: swapaxes(self, -1, -2),
    "at": _at_property,
}


def _install_tracer_interface() -> None:
    for name, fn in _TRACER_METHODS.items():
        fn.__name__, fn.__qualname__ = name, f"Tracer.{name}"
        setattr(Tracer, name, fn)
    for name, get in _TRACER_PROPERTIES.items():
        setattr(Tracer, name, property(get))


_install_tracer_interface()


# --------------------------------------------------------------------------- gather / scatter
# (integer-array and traced indices: indexing.py; semantics documented there)

def _scatter_update(x: Tracer, idx: Any, values: Any, opname: str) -> Tracer:
    """x.at[idx].<op>(values) with array/traced indices: one scatter."""
    kind = {"set": "set", "add": "add", "subtract": "add", "multiply": "mul",
            "divide": "mul", "min": "min", "max": "max"}.get(opname[5:])
    if kind is None:
        raise UnsupportedError(f"{opname} with array or traced indices is not supported "
                               f"(at {format_site()})")
    if opname.endswith("subtract"):
        values = negative(_t(values))
    elif opname.endswith("divide"):
        if not _is_float(x.dtype):
            raise UnsupportedError(f"{opname} of an integer array with array indices is not "
                                   f"supported (at {format_site()})")
        values = reciprocal(P.convert(_t(values), x.dtype))
    return _ix.advanced_update(x, idx, values, kind, opname, _Index)


def _ix_axis(axis: int, ndim: int, who: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{who}: axis {axis} is out of bounds for an array of dimension "
                         f"{ndim} (at {format_site()})")
    return axis % ndim


def _fill_value(dtype: np.dtype, fill_value: Any) -> Any:
    if fill_value is not None:
        return fill_value
    if is_float_dtype(dtype):
        return np.nan
    if dtype.kind == "b":
        return True
    if dtype.kind == "u":
        return np.iinfo(dtype).max
    return np.iinfo(dtype).min


def _mode_indices(idx: Tracer, n: int, mode: str | None, who: str) -> tuple[Tracer, Any]:
    """Indices for `mode` and, for "fill", the in-range mask (else None)."""
    if mode in (None, "fill"):
        i = idx.astype(_I64) if idx.dtype.kind == "u" else idx
        ok = logical_and(greater_equal(i, -n), less(i, n))
        return idx, ok
    if mode in ("clip", "promise_in_bounds"):
        return clip(idx, 0, builtins.max(n - 1, 0)), None
    if mode == "wrap":
        return remainder(idx, n), None
    raise ValueError(f"{who}: invalid mode {mode!r}; expected 'fill', 'clip', 'wrap' or "
                     f"'promise_in_bounds' (at {format_site()})")


def _ix_axis(axis: int, ndim: int, who: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{who}: axis {axis} is out of bounds for an array of dimension "
                         f"{ndim} (at {format_site()})")
    return axis % ndim


@_api()
def take(a: Any, indices: Any, axis: int | None = None, out: Any = None,
         mode: str | None = None, unique_indices: bool = False,
         indices_are_sorted: bool = False, fill_value: Any = None) -> Any:
    """Elements of `a` at `indices` along `axis` (flattened `a` when None).

    Out-of-range indices follow jax's `mode`: "fill" (default: NaN for floats,
    the most negative integer, True), "clip" (clamp, no negative wrap) or
    "wrap" (modulo); negative indices wrap in "fill" mode.
    """
    if out is not None:
        raise UnsupportedError(f"take: the out= argument is not supported (at {format_site()})")
    x = _t(a)
    if axis is None:
        x = ravel(x)
        axis = 0
    if x.ndim == 0:
        raise ValueError(f"take: cannot index a 0-d array (at {format_site()})")
    ax = _ix_axis(axis, x.ndim, "take")
    idx = _ix._int_tracer(indices, "take: indices")
    idx, ok = _mode_indices(idx, x.shape[ax], mode, "take")
    r = x[(slice(None),) * ax + (idx,)]
    if ok is not None:
        ok = reshape(ok, (1,) * ax + ok.shape + (1,) * (x.ndim - ax - 1))
        r = where(ok, r, asarray(_fill_value(x.dtype, fill_value), x.dtype))
    return r


@_api()
def take_along_axis(arr: Any, indices: Any, axis: int | None, mode: str | None = None,
                    fill_value: Any = None) -> Any:
    """`arr` read at `indices` along `axis`, the other dims matched (broadcast)
    position by position; out-of-range indices as in `take`."""
    x = _t(arr)
    idx = _ix._int_tracer(indices, "take_along_axis: indices")
    if axis is None:
        x = ravel(x)
        if idx.ndim != 1:
            raise ValueError(f"take_along_axis: with axis=None the indices must be 1-D, got "
                             f"{idx.ndim}-D (at {format_site()})")
        axis = 0
    if idx.ndim != x.ndim:
        raise ShapeError(
            f"take_along_axis: indices and arr must have the same number of dimensions; "
            f"got {idx.ndim} and {x.ndim} (at {format_site()})")
    ax = _ix_axis(axis, x.ndim, "take_along_axis")
    idx, ok = _mode_indices(idx, x.shape[ax], mode, "take_along_axis")
    shape = list(P.broadcast_shapes(
        "take_along_axis", [d for i, d in enumerate(x.shape) if i != ax],
        [d for i, d in enumerate(idx.shape) if i != ax]))
    shape.insert(ax, idx.shape[ax])
    idx = P.broadcast_to(idx, shape, "take_along_axis")
    xs = list(shape)
    xs[ax] = x.shape[ax]
    x = P.broadcast_to(x, xs, "take_along_axis")
    spec: list[Any] = list(range(x.ndim))
    spec[ax] = (idx, list(range(x.ndim)))
    r = P.gather(x, spec, shape)
    if ok is not None:
        r = where(P.broadcast_to(ok, shape, "take_along_axis"), r,
                      asarray(_fill_value(x.dtype, fill_value), x.dtype))
    return r


_manip.bind(sys.modules[__name__])   # array_manip composes this module's functions


def __getattr__(name: str) -> Any:
    """`linalg` (numpy.linalg's names, linalg_numpy.py) is loaded on first use: it
    builds on custom_jvp and the loops, which sit above this module's layer."""
    if name == "linalg":
        import importlib
        import sys

        mod = importlib.import_module("mlir_autodiff.linalg_numpy")
        sys.modules.setdefault(f"{__name__}.linalg", mod)
        globals()["linalg"] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
