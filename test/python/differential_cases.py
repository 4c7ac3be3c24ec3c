"""The case table of the differential API harness (test_differential_api.py).

A case is one call of one public function of `mlir_autodiff.numpy` or
`mlir_autodiff.nn` (or a Tracer method/operator) on one set of arguments:

    D("numpy.sum", lambda f, x: f(x, axis=1, keepdims=True), [A("3x4")], "axis1_keepdims")

`call(f, *args)` is written once and called with `f` resolved in three
modules: ours (`mlir_autodiff.numpy.sum`, traced under `jit`), numpy
(`numpy.sum`: the value oracle and the function that finite differences
evaluate) and jax (`jax.numpy.sum`, x64: the derivative oracle). For `nn`
functions numpy has no counterpart: `NN_REF` below holds plain numpy
definitions written from the formulas (never from our implementation), and
jax's `jax.nn` function is the second oracle.

`D` rows are differentiated with respect to every argument given as `A(...)`
(float arguments); `C(...)` arguments are passed to the compiled function as
traced values but not differentiated (int/bool arrays, exponents held fixed).
`V` rows are the functions that have no derivative to check (constructors,
shape queries, integer/bool results): their value is checked against numpy.

Inputs are drawn per case from a seed derived from the case id and rounded
to float32, so the float64 and float32 runs see exactly the same numbers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- arguments


@dataclasses.dataclass(frozen=True)
class A:
    """A float argument: shape ("3x4", "" for 0-d), domain, or a literal array.

    Domains: real (standard normal), pos (> 0.2), unit (|x| < 0.9), nonzero
    (|x| > 0.5), gt1 (> 1.2), nonint (at least 0.15 from every integer),
    wide (normal * 8: large |x| for the overflow-safe formulas).
    """

    shape: str = "3x4"
    domain: str = "real"
    value: Any = None  # a literal (nested lists): ties, zeros, exact points

    def draw(self, rng: np.random.Generator, slice_index: int = 0) -> np.ndarray:
        if self.value is not None:
            v = np.asarray(self.value, dtype=np.float64)
            # batch slices of a literal keep its ties, zeros and signs
            return v * 0.5 ** slice_index
        shape = tuple(int(d) for d in self.shape.split("x")) if self.shape else ()
        x = rng.standard_normal(shape)
        d = self.domain
        if d == "pos":
            x = np.abs(x) + 0.2
        elif d == "unit":
            x = rng.uniform(-0.85, 0.85, shape)
        elif d == "nonzero":
            x = np.where(x >= 0, 1.0, -1.0) * (np.abs(x) + 0.5)
        elif d == "gt1":
            x = np.abs(x) + 1.2
        elif d == "nonint":
            x = np.floor(2 * x) + rng.uniform(0.15, 0.85, shape)
        elif d == "wide":
            x = 8.0 * x
        elif d != "real":
            raise ValueError(d)
        return np.asarray(x.astype(np.float32).astype(np.float64))


@dataclasses.dataclass(frozen=True)
class C:
    """A non-differentiated argument (passed traced): a literal of any dtype,
    or a float A() whose draw is kept fixed."""

    value: Any

    def draw(self, rng: np.random.Generator, slice_index: int = 0) -> np.ndarray:
        if isinstance(self.value, A):
            return self.value.draw(rng)
        return np.asarray(self.value)


# --------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Case:
    func: str                                  # "numpy.sum" | "nn.relu" | "Tracer.__getitem__"
    call: Callable[..., Any]
    args: Sequence[A | C]
    label: str
    nondiff: bool = False   # the point is not differentiable: no finite differences, jax decides
    ref: Callable[..., Any] | None = None      # numpy oracle (default: call with numpy's f)
    jref: Callable[..., Any] | None = None     # jax oracle (default: call with jax's f)
    jax_name: str | None = None                # jax's name where it differs
    tol: float = 1.0                           # tolerance multiplier (ill-conditioned ops)
    inputs: Callable[[np.random.Generator], list[np.ndarray]] | None = None  # joint draw
    diff: bool = True                          # False: a V row (value check only)
    no_f32: bool = False                       # no float32 column (say why at the row)
    f32_jit_only: bool = False                 # float32 under jit only (composites)

    @property
    def id(self) -> str:
        return f"{self.func}[{self.label}]"

    @property
    def module(self) -> str:
        return self.func.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.func.split(".", 1)[1]

    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    def draw(self, slice_index: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed(), slice_index])
        if self.inputs is not None:
            return [np.asarray(v) for v in self.inputs(rng)]
        return [a.draw(rng, slice_index) for a in self.args]

    def diff_mask(self) -> list[bool]:
        return [isinstance(a, A) for a in self.args]


def D(func: str, call: Callable[..., Any], args: Sequence[A | C], label: str,
      **kw: Any) -> Case:
    return Case(func, call, list(args), label, **kw)


def V(func: str, call: Callable[..., Any], args: Sequence[Any], label: str, **kw: Any) -> Case:
    return Case(func, call, [a if isinstance(a, (A, C)) else C(a) for a in args], label,
                diff=False, **kw)


# --------------------------------------------------------------------------- nn references

def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _np_softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, 0.0).astype(np.result_type(x, np.float32))


def _np_logsumexp(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def _np_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return x - _np_logsumexp(x, axis=axis, keepdims=True)


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _np_gelu(x: np.ndarray, approximate: bool = True) -> np.ndarray:
    if approximate:
        c = np.sqrt(2.0 / np.pi).astype(x.dtype)
        return 0.5 * x * (1.0 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))
    return 0.5 * x * (1.0 + _np_erf(x / x.dtype.type(np.sqrt(2.0))))


def _np_one_hot(labels: np.ndarray, num_classes: int, dtype: Any = np.float32) -> np.ndarray:
    return (np.asarray(labels)[..., None] == np.arange(num_classes)).astype(dtype)


def _np_cross_entropy(logits: np.ndarray, labels: np.ndarray, reduction: str = "mean"):
    logp = _np_log_softmax(logits, axis=-1)
    if labels.ndim == logits.ndim:
        target = labels
    else:
        target = _np_one_hot(labels, logits.shape[-1], logits.dtype)
    losses = -np.sum(target * logp, axis=-1)
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](losses)


def _np_dropout(x: np.ndarray, p: float = 0.5, training: bool = True) -> np.ndarray:
    assert not training or p == 0.0, "only the deterministic forms have a reference"
    return np.asarray(x)


NN_REF: dict[str, Callable[..., Any]] = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _np_sigmoid,
    "log_sigmoid": lambda x: -_np_softplus(-x),
    "softplus": _np_softplus,
    "silu": lambda x: x * _np_sigmoid(x),
    "gelu": _np_gelu,
    "logsumexp": _np_logsumexp,
    "softmax": lambda x, axis=-1: np.exp(_np_log_softmax(x, axis)),
    "log_softmax": _np_log_softmax,
    "one_hot": _np_one_hot,
    "cross_entropy": _np_cross_entropy,
    "dropout": _np_dropout,
}


def _jax_cross_entropy(logits: Any, labels: Any, reduction: str = "mean") -> Any:
    import jax
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(logits, axis=-1)
    if labels.ndim == logits.ndim:
        target = labels
    else:
        target = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    losses = -jnp.sum(target * logp, axis=-1)
    return {"mean": jnp.mean, "sum": jnp.sum, "none": lambda v: v}[reduction](losses)


def _jax_dropout(x: Any, p: float = 0.5, training: bool = True) -> Any:
    return x


JAX_NN_OVERRIDE: dict[str, Callable[..., Any]] = {
    "cross_entropy": _jax_cross_entropy,
    "dropout": _jax_dropout,
}


# --------------------------------------------------------------------------- the tables

S = "3x4"
UNARY_DOMAINS = {
    # name: (domain, smooth at 0 and for negatives)
    "exp": ("real", True), "exp2": ("real", True), "expm1": ("real", True),
    "log": ("pos", False), "log10": ("pos", False), "log2": ("pos", False),
    "log1p": ("unit", True), "sqrt": ("pos", False), "cbrt": ("nonzero", False),
    "tanh": ("real", True), "sin": ("real", True), "cos": ("real", True),
    "tan": ("unit", True), "arcsin": ("unit", True), "arccos": ("unit", True),
    "arctan": ("real", True), "sinh": ("real", True), "cosh": ("real", True),
    "arcsinh": ("real", True), "arccosh": ("gt1", False), "arctanh": ("unit", True),
    "floor": ("nonint", False), "ceil": ("nonint", False), "trunc": ("nonint", False),
    "rint": ("nonint", False), "round": ("nonint", False), "around": ("nonint", False),
    "negative": ("real", True), "positive": ("real", True), "absolute": ("nonzero", False),
    "abs": ("nonzero", False), "sign": ("nonzero", False), "square": ("real", True),
    "reciprocal": ("nonzero", False),
}
ZEROS_NEG = [[0.0, -0.5, 0.25], [-0.0, 0.75, -0.3]]   # zeros and negatives, all in (-0.9, 0.9)

DIFF: list[Case] = []
VALUE: list[Case] = []


def _d(*a: Any, **k: Any) -> None:
    DIFF.append(D(*a, **k))


def _v(*a: Any, **k: Any) -> None:
    VALUE.append(V(*a, **k))


# -- elementwise unary: a matrix, a 0-d array, a 3-d array; zeros and negatives where smooth
for _name, (_dom, _smooth) in UNARY_DOMAINS.items():
    _f = f"numpy.{_name}"
    _d(_f, lambda f, x: f(x), [A(S, _dom)], "3x4")
    if _name in ("exp", "log", "sqrt", "tanh", "sign", "arctan", "arccosh", "cbrt", "log10",
                 "log2", "ceil", "trunc", "rint"):
        _d(_f, lambda f, x: f(x), [A("", _dom)], "0d")
    if _name in ("exp", "log", "sin", "sqrt", "floor", "absolute", "tanh", "reciprocal"):
        _d(_f, lambda f, x: f(x), [A("2x3x2", _dom)], "3d")
    if _smooth:
        _d(_f, lambda f, x: f(x), [A(value=ZEROS_NEG)], "zeros_negatives")
for _name in ("absolute", "abs", "sign"):
    # at 0 the derivative does not exist: jax's value (0 for sign, 1 for |x| at +0) decides
    _d(f"numpy.{_name}", lambda f, x: f(x), [A(value=ZEROS_NEG)], "at_zero", nondiff=True)
_d("numpy.round", lambda f, x: f(x, 1), [A(value=[[0.123, -1.56, 2.011], [0.47, -0.33, 3.21]])],
   "decimals1")
_d("numpy.around", lambda f, x: f(x, 2), [A(value=[0.1234, -1.5678, 2.0131])], "decimals2")
_d("numpy.exp", lambda f, x: f(x * 0.1), [A("7", "wide")], "wide")

# -- elementwise binary: equal shapes, broadcasting, a 0-d operand, a Python scalar operand
BINARY_DOMAINS = {
    "add": ("real", "real"), "subtract": ("real", "real"), "multiply": ("real", "real"),
    "true_divide": ("real", "nonzero"), "divide": ("real", "nonzero"),
    "power": ("pos", "real"), "arctan2": ("real", "nonzero"), "copysign": ("real", "nonzero"),
    "logaddexp": ("real", "real"), "maximum": ("real", "real"), "minimum": ("real", "real"),
    "logaddexp2": ("real", "real"),
}
FULL_BINARY = ("add", "subtract", "multiply", "true_divide", "power", "maximum")
for _name, (_d1, _d2) in BINARY_DOMAINS.items():
    _f = f"numpy.{_name}"
    _d(_f, lambda f, x, y: f(x, y), [A(S, _d1), A(S, _d2)], "3x4_3x4")
    _d(_f, lambda f, x, y: f(x, y), [A(S, _d1), A("4", _d2)], "bcast_3x4_4")
    _sc = 1.5 if _d2 != "real" else -0.75
    _d(_f, lambda f, x, s=_sc: f(x, s), [A(S, _d1)], "py_scalar_rhs")
    if _name in FULL_BINARY:
        _d(_f, lambda f, x, y: f(x, y), [A("2x1x4", _d1), A("3x1", _d2)], "bcast_2x1x4_3x1")
        _d(_f, lambda f, x, y: f(x, y), [A("", _d1), A("3", _d2)], "0d_3")
        if _name in ("subtract", "true_divide", "power", "maximum"):
            _d(_f, lambda f, y, s=1.25: f(s, y), [A("4", _d2)], "py_scalar_lhs")
# ties: the convention of jax (the cotangent is split evenly between equal operands)
TIE_X = [[1.0, -2.0, 0.5, 3.0], [0.0, 2.0, -1.0, 0.25]]
TIE_Y = [[1.0, -1.0, 0.5, 2.0], [0.0, 2.0, -3.0, 0.25]]
for _name in ("maximum", "minimum", "logaddexp"):
    _f = f"numpy.{_name}"
    _d(_f, lambda f, x, y: f(x, y), [A(value=TIE_X), A(value=TIE_Y)], "ties",
       nondiff=_name != "logaddexp")
    _d(_f, lambda f, x: f(x, 0.0), [A(value=ZEROS_NEG)], "ties_with_py_zero",
       nondiff=_name != "logaddexp")
    _d(_f, lambda f, x: f(x, x), [A(S)], "same_operand")  # = x (or x + log 2): smooth
_d("numpy.logaddexp", lambda f, x: f(x, 0.0), [A(value=[0.0, 0.0, 0.0])], "zeros_vs_zero")
_d("numpy.logaddexp2", lambda f, x: f(x, 0.0), [A(value=[0.0, 0.0, 0.0])], "zeros_vs_zero")
# fmax/fmin: maximum/minimum that ignore NaN. jnp.fmax gives a tie to its second
# operand, while ours splits it as maximum does, so jax's maximum is the oracle.
for _name, _jax in (("fmax", "maximum"), ("fmin", "minimum")):
    _d(f"numpy.{_name}", lambda f, x, y: f(x, y), [A(S), A(S)], "3x4_3x4", jax_name=_jax)
    _d(f"numpy.{_name}", lambda f, x, y: f(x, y), [A(S), A("4")], "bcast_3x4_4", jax_name=_jax)
    _d(f"numpy.{_name}", lambda f, x, y: f(x, y), [A(value=TIE_X), A(value=TIE_Y)], "ties",
       nondiff=True, jax_name=_jax)
_d("numpy.power", lambda f, x: f(x, 2.0), [A(S)], "py_square")
_d("numpy.power", lambda f, x: f(x, 3), [A(S)], "py_int_cube")
_d("numpy.power", lambda f, x: f(x, -2), [A(S, "nonzero")], "py_int_neg")
_d("numpy.power", lambda f, x, e: f(x, e),
   [A(value=[[-1.5, -0.5, 2.0], [-0.8, 1.2, -2.0]]), C([[2.0, 3.0, 2.0], [3.0, 4.0, 1.0]])],
   "negative_base_traced_int_exponent")


def _ratio_safe(rng: np.random.Generator, shape: tuple[int, ...] = (3, 4)) -> list[np.ndarray]:
    """x, y with x / y at least 0.1 from every integer (floor/trunc of it are locally constant)."""
    x = rng.uniform(-3, 3, shape)
    y = np.where(rng.uniform(size=shape) < 0.5, -1.0, 1.0) * rng.uniform(0.5, 1.5, shape)
    x, y = x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)
    q = x / y
    bad = np.abs(q - np.round(q)) < 0.1
    x = np.where(bad, (np.round(q) + 0.5) * y, x).astype(np.float32).astype(np.float64)
    return [x, y]


for _name in ("floor_divide", "remainder", "mod", "fmod"):
    _f = f"numpy.{_name}"
    _d(_f, lambda f, x, y: f(x, y), [A(S), A(S)], "3x4_3x4", inputs=_ratio_safe)
    _d(_f, lambda f, x: f(x, 0.75), [A("5")], "py_scalar_rhs",
       inputs=lambda rng: [np.asarray([0.3, -1.1, 2.2, -2.9, 1.4])])

# -- where / clip
_d("numpy.where", lambda f, c, x, y: f(c, x, y),
   [C([[True, False, True, False], [False, False, True, True], [True, True, False, False]]),
    A(S), A(S)], "3x4")
_d("numpy.where", lambda f, c, x, y: f(c, x, y), [C([True, False, True, True]), A(S), A("4")],
   "bcast")
_d("numpy.where", lambda f, c, x: f(c, x, 0.0), [C([[True, False], [False, True]]), A("2x2")],
   "py_zero")
_d("numpy.where", lambda f, x: f(x > 0, x, -2.0 * x), [A(S, "nonzero")], "traced_cond")
_d("numpy.clip", lambda f, x: f(x, -0.5, 0.7), [A(S)], "py_bounds",
   inputs=lambda rng: [np.asarray([[-1.2, -0.3, 0.1, 0.9], [0.6, -0.8, 1.7, 0.05]])])
_d("numpy.clip", lambda f, x, lo, hi: f(x, lo, hi), [A("4"), A("4"), A("4")], "traced_bounds",
   inputs=lambda rng: [np.asarray([-1.0, 0.2, 0.8, 2.0]), np.asarray([-0.5, -0.5, 0.1, 0.1]),
                       np.asarray([0.5, 0.5, 0.6, 1.5])])
_d("numpy.clip", lambda f, x: f(x, -0.5, None), [A("4")], "lower_only",
   inputs=lambda rng: [np.asarray([-1.0, 0.2, -0.3, 2.0])])
_d("numpy.clip", lambda f, x: f(x, -0.5, 0.5), [A(value=[-0.5, 0.5, 0.0, 1.0])], "at_bounds",
   nondiff=True)

# -- reductions
REDUCE_AXES = [(None, False, "all"), (1, False, "axis1"), (0, True, "axis0_keepdims"),
               ((0, 1), False, "axes01")]  # the last only for sum, mean, prod
for _name in ("sum", "mean", "prod", "max", "min", "var", "std", "amax", "amin"):
    _f = f"numpy.{_name}"
    _dom = "pos" if _name == "prod" else "real"
    for _ax, _kd, _lab in REDUCE_AXES[:2 if _name in ("amax", "amin") else
                                      None if _name in ("sum", "mean", "prod") else 3]:
        _d(_f, lambda f, x, ax=_ax, kd=_kd: f(x, axis=ax, keepdims=kd), [A(S, _dom)], _lab)
    if _name not in ("amax", "amin"):
        _d(_f, lambda f, x: f(x, axis=(0, 2)), [A("2x3x2", _dom)], "3d_axes02")
    if _name in ("sum", "prod"):
        _d(_f, lambda f, x: f(x), [A("5", _dom)], "1d")
# ties along both axes, for the maximum and for the minimum
TIES = [[1.0, 2.0, 2.0, -1.0], [3.0, 3.0, 3.0, 3.0], [3.0, 0.5, 2.0, -1.0]]
for _name in ("max", "min", "amax", "amin"):
    _f = f"numpy.{_name}"
    _d(_f, lambda f, x: f(x, axis=1), [A(value=TIES)], "ties_axis1", nondiff=True)
    if _name in ("max", "min"):
        _d(_f, lambda f, x: f(x), [A(value=[1.0, 2.0, 2.0, 1.0])], "ties_1d", nondiff=True)
        _d(_f, lambda f, x: f(x, axis=0, keepdims=True), [A(value=TIES)],
           "ties_axis0_keepdims", nondiff=True)
        _d(_f, lambda f, x: f(x), [A(value=TIES)], "ties_all", nondiff=True)
for _name in ("var", "std"):
    _d(f"numpy.{_name}", lambda f, x: f(x, axis=1, ddof=1), [A(S)], "axis1_ddof1")
_d("numpy.sum", lambda f, x: f(x, axis=0, dtype=np.float64), [A(S)], "dtype_f64")
_d("numpy.mean", lambda f, x: f(x, axis=1, dtype=np.float64), [A(S)], "dtype_f64")
_d("numpy.prod", lambda f, x: f(x, axis=1), [A(value=[[1.5, 0.0, -2.0], [0.5, 2.0, -1.0]])],
   "one_zero")
_d("numpy.prod", lambda f, x: f(x), [A(value=[[1.5, 0.0, -2.0], [0.0, 2.0, -1.0]])], "two_zeros")
_d("numpy.prod", lambda f, x: f(x, axis=0), [A(S, "real")], "negatives")

# -- shape manipulation
_d("numpy.reshape", lambda f, x: f(x, (4, 3)), [A(S)], "4x3")
_d("numpy.reshape", lambda f, x: f(x, (2, -1)), [A(S)], "infer")
_d("numpy.ravel", lambda f, x: f(x), [A(S)], "3x4")
_d("numpy.ravel", lambda f, x: f(x), [A("2x3x2")], "3d")
_d("numpy.transpose", lambda f, x: f(x), [A(S)], "default")
_d("numpy.transpose", lambda f, x: f(x, (1, 2, 0)), [A("2x3x4")], "perm120")
_d("numpy.permute_dims", lambda f, x: f(x, (1, 0)), [A(S)], "2d")
_d("numpy.permute_dims", lambda f, x: f(x, (2, 0, 1)), [A("2x3x4")], "perm201")
_d("numpy.swapaxes", lambda f, x: f(x, 0, 2), [A("2x3x4")], "0_2")
_d("numpy.swapaxes", lambda f, x: f(x, -1, 0), [A(S)], "-1_0")
_d("numpy.moveaxis", lambda f, x: f(x, 0, -1), [A("2x3x4")], "0_to_-1")
_d("numpy.moveaxis", lambda f, x: f(x, (0, 1), (2, 0)), [A("2x3x4")], "two_axes")
_d("numpy.expand_dims", lambda f, x: f(x, (0, 3)), [A(S)], "axes03")
_d("numpy.expand_dims", lambda f, x: f(x, 0), [A("")], "0d")
_d("numpy.squeeze", lambda f, x: f(x), [A("1x3x1x4")], "all")
_d("numpy.squeeze", lambda f, x: f(x, 2), [A("1x3x1x4")], "axis2")
_d("numpy.broadcast_to", lambda f, x: f(x, (3, 4)), [A("4")], "4_to_3x4")
_d("numpy.broadcast_to", lambda f, x: f(x, (2, 3, 4)), [A("3x1")], "3x1_to_2x3x4")
_d("numpy.broadcast_arrays", lambda f, x, y: f(x, y)[0], [A("3x1"), A("4")], "first")
_d("numpy.broadcast_arrays", lambda f, x, y: f(x, y)[1], [A("3x1"), A("4")], "second")
_d("numpy.concatenate", lambda f, x, y: f([x, y]), [A(S), A("2x4")], "axis0")
_d("numpy.concatenate", lambda f, x, y: f((x, y, x), axis=1), [A(S), A("3x2")], "axis1_reuse")
_d("numpy.stack", lambda f, x, y: f([x, y]), [A(S), A(S)], "axis0")
_d("numpy.stack", lambda f, x, y: f([x, y, x], axis=1), [A("3"), A("3")], "1d_axis1")
_d("numpy.hstack", lambda f, x, y: f([x, y]), [A(S), A("3x2")], "2d")
_d("numpy.hstack", lambda f, x, y: f((x, y)), [A("3"), A("2")], "1d")
_d("numpy.vstack", lambda f, x, y: f([x, y]), [A(S), A("2x4")], "2d")
_d("numpy.vstack", lambda f, x, y: f((x, y)), [A("4"), A("4")], "1d")
for _name in ("atleast_1d", "atleast_2d"):
    _d(f"numpy.{_name}", lambda f, x: f(x), [A("")], "0d")
    _d(f"numpy.{_name}", lambda f, x: f(x), [A("3")], "1d")
_d("numpy.flip", lambda f, x: f(x), [A(S)], "all")
_d("numpy.flip", lambda f, x: f(x, axis=-1), [A("2x3x2")], "axis-1")
_d("numpy.roll", lambda f, x: f(x, -2, axis=1), [A(S)], "axis1_neg")
_d("numpy.roll", lambda f, x: f(x, 4, axis=0), [A(S)], "axis0_wrap")
_d("numpy.diff", lambda f, x: f(x), [A(S)], "default")
_d("numpy.diff", lambda f, x: f(x, n=2, axis=0), [A("4x3")], "n2_axis0")
for _name in ("tril", "triu"):
    _d(f"numpy.{_name}", lambda f, x: f(x), [A(S)], "k0")
    _d(f"numpy.{_name}", lambda f, x: f(x, 1), [A(S)], "k1")
_d("numpy.asarray", lambda f, x: f(x), [A(S)], "identity")
_d("numpy.asarray", lambda f, x, y: f([x, y]), [A(""), A("")], "list_of_scalars")
_d("numpy.array", lambda f, x: f(x), [A(S)], "identity")
_d("numpy.array", lambda f, x, y: f([x, y, x]), [A("3"), A("3")], "list_of_arrays")
_d("numpy.astype", lambda f, x: f(x, np.float64), [A(S)], "to_f64")
_d("numpy.zeros_like", lambda f, x: f(x), [A(S)], "3x4")
_d("numpy.zeros_like", lambda f, x: x * 2.0 + f(x), [A("3")], "plus_x")
_d("numpy.ones_like", lambda f, x: f(x), [A("")], "0d")
_d("numpy.ones_like", lambda f, x: x * f(x), [A(S)], "times_x")
_d("numpy.full_like", lambda f, x: f(x, 2.5), [A(S)], "py_fill")
_d("numpy.full_like", lambda f, x, v: f(x, v), [A("3"), A("")], "traced_fill")
_d("numpy.full", lambda f, v: f((2, 3), v), [A("")], "traced_fill")
_d("numpy.full", lambda f, v: f((4,), v), [A("")], "traced_fill_1d")

# -- contractions
_d("numpy.matmul", lambda f, x, y: f(x, y), [A(S), A("4x2")], "mat_mat")
_d("numpy.matmul", lambda f, x, y: f(x, y), [A("4"), A("4x2")], "vec_mat")
_d("numpy.matmul", lambda f, x, y: f(x, y), [A(S), A("4")], "mat_vec")
_d("numpy.matmul", lambda f, x, y: f(x, y), [A("2x3x4"), A("2x4x2")], "batch")
_d("numpy.matmul", lambda f, x: f(x, x.T), [A(S)], "x_xT")
_d("numpy.dot", lambda f, x, y: f(x, y), [A(S), A("4x2")], "mat_mat")
_d("numpy.dot", lambda f, x, y: f(x, y), [A("4"), A("4")], "vec_vec")
_d("numpy.dot", lambda f, x, y: f(x, y), [A(""), A(S)], "scalar_mat")
_d("numpy.vdot", lambda f, x, y: f(x, y), [A("5"), A("5")], "1d")
_d("numpy.vdot", lambda f, x, y: f(x, y), [A(S), A(S)], "2d_flattened")
_d("numpy.inner", lambda f, x, y: f(x, y), [A("4"), A("4")], "1d")
_d("numpy.inner", lambda f, x, y: f(x, y), [A(S), A("2x4")], "2d")
_d("numpy.outer", lambda f, x, y: f(x, y), [A("3"), A("4")], "1d")
_d("numpy.outer", lambda f, x, y: f(x, y), [A("2x2"), A("3")], "flattens")
_d("numpy.tensordot", lambda f, x, y: f(x, y, axes=1), [A(S), A("4x2")], "axes1")
_d("numpy.tensordot", lambda f, x, y: f(x, y), [A("2x3x4"), A("3x4x2")], "axes2")
_d("numpy.tensordot", lambda f, x, y: f(x, y, axes=([0], [1])), [A(S), A("2x3")], "axes_lists")
_d("numpy.diagonal", lambda f, x: f(x), [A(S)], "2d")
_d("numpy.diagonal", lambda f, x: f(x, 1), [A(S)], "offset1")
_d("numpy.diagonal", lambda f, x: f(x, -1), [A("4x3")], "offset_neg1")
_d("numpy.diagonal", lambda f, x: f(x, 0, 0, 2), [A("3x2x4")], "3d_axes02")
_d("numpy.trace", lambda f, x: f(x), [A("3x3")], "square")
_d("numpy.trace", lambda f, x: f(x, 1), [A(S)], "offset1")
for _spec, _shapes, _lab in [
        ("ij,jk->ik", ("3x4", "4x2"), "matmul"), ("ij->ji", ("3x4",), "transpose"),
        ("ij,j->i", ("3x4", "4"), "matvec"), ("i,i->", ("4", "4"), "dot"),
        ("bij,bjk->bik", ("2x3x4", "2x4x2"), "batched"), ("ii->i", ("3x3",), "diagonal"),
        ("ii->", ("3x3",), "trace"), ("ij,ij->i", ("3x4", "3x4"), "rowdot"),
        ("ijk->kji", ("2x3x2",), "permute3"), ("ij,kj->ik", ("3x4", "2x4"), "a_bT")]:
    _d("numpy.einsum", lambda f, *xs, s=_spec: f(s, *xs), [A(s) for s in _shapes], _lab)

# -- Tracer methods and operators (not module functions, but the same API surface)
_IDX = [(lambda x: x[1], "int"), (lambda x: x[1:3], "slice"), (lambda x: x[:, 1], "col"),
        (lambda x: x[::-1], "rev_rows"), (lambda x: x[:, ::-2], "neg_step2"),
        (lambda x: x[..., None], "newaxis"), (lambda x: x[0:3:2, 1:4:2], "strided")]
for _fn, _lab in _IDX:
    _d("Tracer.__getitem__", lambda f, x, g=_fn: g(x), [A(S)], _lab)


def _np_at_set(x: np.ndarray, y: np.ndarray, idx: Any) -> np.ndarray:
    out = np.array(x, copy=True)
    out[idx] = y
    return out


def _np_at_op(x: np.ndarray, y: np.ndarray, idx: Any, op: Any) -> np.ndarray:
    out = np.array(x, copy=True)
    out[idx] = op(out[idx], y)
    return out


def _np_at_add(x: np.ndarray, y: np.ndarray, idx: Any) -> np.ndarray:
    out = np.array(x, copy=True)
    out[idx] += y
    return out


for _idx, _yshape, _lab in [(1, "4", "row"), ((slice(None), 2), "3", "col"),
                             (slice(None, None, -2), "2x4", "neg_step")]:
    _d("Tracer.at.set", lambda f, x, y, i=_idx: x.at[i].set(y), [A(S), A(_yshape)], _lab,
       ref=lambda x, y, i=_idx: _np_at_set(x, y, i))
    _d("Tracer.at.add", lambda f, x, y, i=_idx: x.at[i].add(y), [A(S), A(_yshape)], _lab,
       ref=lambda x, y, i=_idx: _np_at_add(x, y, i))
_d("Tracer.__pow__", lambda f, x: x ** 3, [A(S)], "int3")
_d("Tracer.__pow__", lambda f, x, y: x ** y, [A(S, "pos"), A("4")], "traced")
_d("Tracer.__rpow__", lambda f, x: 2.0 ** x, [A(S)], "py_base")
_d("Tracer.__matmul__", lambda f, x, y: x @ y, [A(S), A("4x2")], "mat_mat")
_d("Tracer.__rtruediv__", lambda f, x: 1.0 / x, [A(S, "nonzero")], "py_lhs")
_d("Tracer.T", lambda f, x: x.T, [A(S)], "2d")
_d("Tracer.sum", lambda f, x: x.sum(axis=0), [A(S)], "axis0")
_d("Tracer.reshape", lambda f, x: x.reshape(2, 6), [A(S)], "2x6")
_d("Tracer.sort", lambda f, x: x.sort(axis=0), [A(S)], "axis0_copy", ref=lambda x: np.sort(x, 0))
_d("Tracer.cumsum", lambda f, x: x.cumsum(axis=1), [A(S)], "axis1")
_d("Tracer.cumprod", lambda f, x: x.cumprod(), [A(S)], "flat")
_v("Tracer.argsort", lambda f, x: x.argsort(axis=0), [A(value=[[1.0, 2.0], [1.0, 0.0]])],
   "ties", ref=lambda x: np.argsort(x, axis=0, kind="stable"))
_d("Tracer.flatten", lambda f, x: x.flatten(), [A(S)], "3x4")

# -- gathers and scatters: integer-array and traced indices (in range, where
#    numpy, jax and we agree; out-of-range behaviour: test_gather_scatter.py)
_d("numpy.take", lambda f, x, i: f(x, i, axis=1), [A(S), C([3, 0, 3, 1, 2])], "axis1_dups")
_d("numpy.take", lambda f, x, i: f(x, i), [A(S), C([[11, -1], [0, 5]])], "flat_2d_negative")
_d("numpy.take", lambda f, x, i: f(x, i, axis=0), [A(S), C(2)], "traced_scalar")
_d("numpy.take_along_axis", lambda f, x, i: f(x, i, axis=1),
   [A(S), C([[0, 3], [1, 1], [2, 0]])], "axis1")
_d("numpy.take_along_axis", lambda f, x, i: f(x, i, axis=0), [A(S), C([[2, 0, 1, 2]])],
   "axis0_bcast")


def _np_at_add_dups(x: np.ndarray, y: np.ndarray, idx: Any) -> np.ndarray:
    out = np.array(x, copy=True)
    np.add.at(out, idx, y)
    return out


_GATHERS = [(lambda x, i: x[i], [C([2, 0, 2, -1])], "int_array_rows"),
            (lambda x, i: x[:, i], [C([3, 1, 3])], "int_array_cols"),
            (lambda x, i: x[i], [C(1)], "traced_scalar"),
            (lambda x, i: x[1, i], [C([[0, 3], [2, 2]])], "int_and_array"),
            (lambda x, i, j: x[i[:, None], j], [C([2, 0]), C([1, 3, 3])], "two_arrays_bcast"),
            (lambda x, i: x[None, 1:, i], [C([0, -2])], "newaxis_slice_array")]
for _fn, _cs, _lab in _GATHERS:
    _d("Tracer.__getitem__", lambda f, x, *i, g=_fn: g(x, *i), [A(S), *_cs], _lab)
_d("Tracer.at.add", lambda f, x, y, i: x.at[i].add(y), [A(S), A("3x4"), C([0, 2, 0])],
   "int_array_dups", ref=lambda x, y, i: _np_at_add_dups(x, y, i))
_d("Tracer.at.set", lambda f, x, y, i: x.at[i[0], i[1]].set(y),
   [A(S), A("2"), C([[2, 0], [1, 3]])], "int_array_pairs",
   ref=lambda x, y, i: _np_at_set(x, y, (i[0], i[1])))
for _k, _np_op in (("multiply", np.multiply), ("min", np.minimum), ("max", np.maximum)):
    _d(f"Tracer.at.{_k}", lambda f, x, y, i, k=_k: getattr(x.at[i], k)(y),
       [A(S), A("2x4"), C([2, 0])], "int_array",
       ref=lambda x, y, i, op=_np_op: _np_at_op(x, y, i, op),
       # (jax differentiates a multiply-scatter only when told the indices are unique)
       jref=lambda x, y, i, k=_k: getattr(x.at[i], k)(y, unique_indices=True))


# -- nn
for _name in ("relu", "sigmoid", "log_sigmoid", "softplus", "silu", "gelu"):
    _f = f"nn.{_name}"
    _d(_f, lambda f, x: f(x), [A(S, "nonzero" if _name == "relu" else "wide")], "3x4")
    if _name in ("relu", "sigmoid"):
        _d(_f, lambda f, x: f(x), [A("", "nonzero" if _name == "relu" else "real")], "0d")
    _d(_f, lambda f, x: f(x), [A(value=[-30.0, -0.5, 30.0, 0.75])], "large_magnitude")
    _d(_f, lambda f, x: f(x), [A(value=ZEROS_NEG)], "zeros_negatives", nondiff=_name == "relu")
_d("nn.gelu", lambda f, x: f(x, approximate=True), [A(S)], "tanh_approx")
_d("nn.gelu", lambda f, x: f(x, approximate=False), [A(S)], "exact")
_d("nn.gelu", lambda f, x: f(x, approximate=False), [A("", "nonzero")], "exact_0d")
for _name in ("softmax", "log_softmax"):
    _f = f"nn.{_name}"
    _d(_f, lambda f, x: f(x), [A(S)], "last_axis")
    _d(_f, lambda f, x: f(x, axis=0), [A(S)], "axis0")
    _d(_f, lambda f, x: f(x), [A("5", "wide")], "1d_wide")
    # ties in the shifted maximum: the function is smooth there, finite differences apply
    _d(_f, lambda f, x: f(x, axis=1), [A(value=TIE_X)], "max_ties")
_d("nn.logsumexp", lambda f, x: f(x), [A(S)], "all")
_d("nn.logsumexp", lambda f, x: f(x, axis=1), [A(S)], "axis1")
_d("nn.logsumexp", lambda f, x: f(x, axis=(0, 2)), [A("2x3x2")], "axes02")
_d("nn.logsumexp", lambda f, x: f(x, axis=1), [A(value=TIE_X)], "max_ties")
_d("nn.cross_entropy", lambda f, x, y: f(x, y), [A(S), C([0, 3, 1])], "int_labels_mean")
_d("nn.cross_entropy", lambda f, x, y: f(x, y, reduction="sum"), [A(S), C([2, 2, 0])],
   "int_labels_sum")
_d("nn.cross_entropy", lambda f, x, y: f(x, y, reduction="none"), [A(S), C([1, 0, 3])],
   "int_labels_none")
_d("nn.cross_entropy", lambda f, x, y: f(x, y), [A(S), A(S, "pos")], "prob_labels")
_d("nn.dropout", lambda f, x: f(x, 0.5, training=False), [A(S)], "eval")
_d("nn.dropout", lambda f, x: f(x, 0.0), [A(S)], "p0")

# --------------------------------------------------------------------------- lax rows
# `lax` functions take Python functions: a row's branch/body lambdas use only
# operators and array methods, so the same call runs with our tracers, numpy
# arrays (LAX_REF: plain numpy definitions of jax.lax's contracts) and jax
# arrays (jax.lax). The literal _P34 has x[0, 0] = 0.5: slice 0 of a vmap
# batch takes `x[0, 0] > 0.3`, slice 1 (0.25) does not, so a predicate read
# from x is batched with lanes on both sides; a predicate or index given as
# C(...) is unbatched (vmap batches only the A arguments).

def _np_tree_stack(rows: list[Any]) -> Any:
    first = rows[0]
    if isinstance(first, dict):
        return {k: _np_tree_stack([r[k] for r in rows]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_np_tree_stack([r[i] for r in rows]) for i in range(len(first)))
    return np.stack([np.asarray(r) for r in rows])


def _np_tree_row(xs: Any, i: int) -> Any:
    if isinstance(xs, dict):
        return {k: _np_tree_row(v, i) for k, v in xs.items()}
    if isinstance(xs, (tuple, list)):
        return type(xs)(_np_tree_row(v, i) for v in xs)
    return np.asarray(xs)[i]


def _np_tree_len(xs: Any) -> int:
    if isinstance(xs, dict):
        return _np_tree_len(next(iter(xs.values())))
    if isinstance(xs, (tuple, list)):
        return _np_tree_len(xs[0])
    return np.shape(xs)[0]


def _np_scan(f: Callable[..., Any], init: Any, xs: Any, length: Any = None,
             reverse: bool = False) -> Any:
    n = _np_tree_len(xs)
    carry, ys = init, [None] * n
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, ys[i] = f(carry, _np_tree_row(xs, i))
    return carry, _np_tree_stack(ys)


def _np_while(cond_fun: Callable[..., Any], body_fun: Callable[..., Any], val: Any) -> Any:
    while cond_fun(val):
        val = body_fun(val)
    return val


def _np_fori(lower: int, upper: int, body: Callable[..., Any], val: Any) -> Any:
    for i in range(int(lower), int(upper)):
        val = body(i, val)
    return val


LAX_REF: dict[str, Callable[..., Any]] = {
    "cond": lambda p, t, f, *ops: t(*ops) if p else f(*ops),
    "switch": lambda i, bs, *ops: bs[int(np.clip(i, 0, len(bs) - 1))](*ops),
    "select": lambda p, a, b: np.where(p, a, b),
    "map": lambda f, xs: _np_tree_stack([f(_np_tree_row(xs, i))
                                         for i in range(_np_tree_len(xs))]),
    "scan": _np_scan,
    "while_loop": _np_while,
    "fori_loop": _np_fori,
}

_P34 = [[0.5, -1.0, 2.0, 0.25], [1.0, 1.5, -3.0, 2.5], [0.75, 4.0, 0.5, -0.5]]
_SW3 = [lambda a, b: a * b, lambda a, b: a - b * b, lambda a, b: a * a * b]


def _jax_while_as_fori(x: Any) -> Any:  # jax cannot reverse-differentiate while_loop
    import jax
    return jax.lax.fori_loop(0, 3, lambda i, c: c * c * 0.5 + c, x)


_d("lax.cond", lambda f, x: f(x[0, 0] > 0.3, lambda a: a * a * 2.0, lambda a: -a ** 3, x),
   [A(value=_P34)], "batched_pred_true")
_d("lax.cond", lambda f, x: f(x[0, 0] < 0.3, lambda a: a * a * 2.0, lambda a: -a ** 3, x),
   [A(value=_P34)], "batched_pred_false")
_d("lax.cond", lambda f, p, x, y: f(p, lambda a, b: a * b, lambda a, b: a - b, x, y),
   [C(True), A(S), A(S)], "unbatched_pred_two_operands")
_d("lax.cond", lambda f, p, x, y: (lambda o: o[0] + o[1])(
    f(p, lambda a, b: (a * b, b), lambda a, b: (a, a * b * b), x, y)),
   [C(np.int32(0)), A(S), A(S)], "int_pred_pytree")
_d("lax.cond", lambda f, x, y: f(x.sum() > 100.0, lambda a: a * y, lambda a: a * a * y, x),
   [A(S), A(S)], "closure")
for _k in (0, 1, 2, -3, 7):
    _d("lax.switch", lambda f, i, x, y: f(i, _SW3, x, y), [C(np.int32(_k)), A(S), A(S)],
       f"unbatched_index_{_k}".replace("-", "m"))
_d("lax.switch", lambda f, x, y: f((x[0, 0] > 0.3) * 1 + (x[0, 0] > 0.4) * 1, _SW3, x, y),
   [A(value=_P34), A(S)], "batched_index")
_d("lax.select", lambda f, x, y: f(x > y, x * y, x - y), [A(S), A(S)], "array_pred")
_d("lax.select", lambda f, p, x, y: f(p, x * x, y), [C(False), A(S), A(S)], "scalar_pred")
_d("lax.map", lambda f, x: f(lambda r: r * r.sum(), x), [A(S)], "rows")
_d("lax.map", lambda f, x, y: (lambda o: o["a"] + o["b"].sum())(
    f(lambda t: {"a": t[0] * t[1], "b": t[0] ** 3}, (x, y))), [A(S), A(S)], "pytree")
_d("lax.fori_loop", lambda f, x: f(0, 3, lambda i, c: c * x + 0.5, x), [A(S)], "closure")
_d("lax.fori_loop", lambda f, x, y: f(0, 4, lambda i, c: (c[0] * c[1], c[1] + c[0] * 0.5),
                                       (x, y))[0], [A(S, "unit"), A(S, "unit")], "pair")
_d("lax.scan", lambda f, x, y: (lambda o: o[0] + o[1].sum(0))(
    f(lambda c, r: (c * r + r, c * c), x[0], y)), [A(S), A(S)], "carry_and_ys")
_d("lax.scan", lambda f, x, y: (lambda o: o[0] * o[1].sum(0))(
    f(lambda c, r: (c * r, c + r), x[0], y, reverse=True)), [A(S), A(S)], "reverse")
_d("lax.while_loop", lambda f, x: f(lambda c: c[1] < 3,
                                    lambda c: (c[0] * c[0] * 0.5 + c[0], c[1] + 1), (x, 0))[0],
   [A(S, "unit")], "counter", jref=_jax_while_as_fori)
_d("lax.while_loop", lambda f, x, y: f(lambda c: c[1] < 2,
                                       lambda c: (c[0] * y, c[1] + 1), (x, 0))[0],
   [A(S), A(S)], "closure",
   jref=lambda x, y: x * y * y)


# --------------------------------------------------------------------------- value-only rows

_I34 = [[3, -1, 0, 7], [2, 2, -5, 1], [0, 9, 4, -2]]
_B34 = [[True, False, True, False], [False, False, True, True], [True, True, False, False]]
_F34 = [[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -3.0, 2.5], [0.0, 4.0, 0.5, -0.5]]
_F4 = [1.0, 1.0, -3.0, 0.0]
_FNAN = [[np.nan, 1.0, -np.inf], [np.inf, 0.0, -2.0]]

for _name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
    _f = f"numpy.{_name}"
    _v(_f, lambda f, x, y: f(x, y), [A(value=_F34), A(value=_F34[1])], "ties_bcast")
    _v(_f, lambda f, x: f(x, 1.0), [A(value=_F34)], "py_scalar")
    _v(_f, lambda f, x, y: f(x, y), [_I34, [2, 2, 0, 1]], "int")
for _name in ("logical_and", "logical_or", "logical_xor"):
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [_B34, [True, False, True, True]], "bool")
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [A(value=_F34), _I34], "float_int")
_v("numpy.logical_not", lambda f, x: f(x), [_B34], "bool")
_v("numpy.logical_not", lambda f, x: f(x), [A(value=_F34)], "float")
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [_I34, [6, 3, 12, -1]], "int64")
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [_B34, [True, False, True, False]], "bool")
    _v(f"numpy.{_name}", lambda f, x: f(x, 5), [np.asarray(_I34, np.int32)], "int32_py")
_v("numpy.invert", lambda f, x: f(x), [_I34], "int64")
_v("numpy.invert", lambda f, x: f(x), [_B34], "bool")
for _name in ("isnan", "isinf", "isfinite"):
    _v(f"numpy.{_name}", lambda f, x: f(x), [A(value=_FNAN)], "special")
    _v(f"numpy.{_name}", lambda f, x: f(x), [_I34], "int")
for _name in ("argmax", "argmin"):
    _TIES = [[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [-2.0, 0.5, -2.0, 0.5]]
    _v(f"numpy.{_name}", lambda f, x: f(x), [A(value=_TIES)], "ties_flat")
    _v(f"numpy.{_name}", lambda f, x: f(x, axis=1), [A(value=_TIES)], "ties_axis1")
    _v(f"numpy.{_name}", lambda f, x: f(x, axis=0, keepdims=True), [A(S)], "axis0_keepdims")
    _v(f"numpy.{_name}", lambda f, x: f(x, axis=-1), [_I34], "int")
for _name in ("all", "any"):
    _v(f"numpy.{_name}", lambda f, x: f(x), [_B34], "flat")
    _v(f"numpy.{_name}", lambda f, x: f(x, axis=0), [_B34], "axis0")
    _v(f"numpy.{_name}", lambda f, x: f(x, axis=1, keepdims=True), [A(value=_F34)], "float_kd")
for _name in ("floor_divide", "remainder", "mod", "fmod"):
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [_I34, [3, -2, 5, 4]], "int")
for _name in ("add", "subtract", "multiply", "maximum", "minimum"):
    _v(f"numpy.{_name}", lambda f, x, y: f(x, y), [_I34, [3, -2, 5, 4]], "int")
_v("numpy.power", lambda f, x: f(x, 3), [_I34], "int_py")
_v("numpy.true_divide", lambda f, x, y: f(x, y), [_I34, [3, -2, 5, 4]], "int_to_float")
_v("numpy.negative", lambda f, x: f(x), [_I34], "int")
_v("numpy.absolute", lambda f, x: f(x), [_I34], "int")
_v("numpy.sign", lambda f, x: f(x), [_I34], "int")
_v("numpy.square", lambda f, x: f(x), [_I34], "int")
_v("numpy.sum", lambda f, x: f(x, axis=1), [_I34], "int")
_v("numpy.max", lambda f, x: f(x, axis=0), [_I34], "int")
_v("numpy.prod", lambda f, x: f(x), [[[1, 2], [-3, 4]]], "int")
_v("numpy.where", lambda f, c, x: f(c, x, -1), [_B34, _I34], "int")
_v("numpy.astype", lambda f, x: f(x, np.int32), [A(value=_F34)], "f_to_i32")
_v("numpy.astype", lambda f, x: f(x, np.bool_), [A(value=_F34)], "f_to_bool")
_v("numpy.astype", lambda f, x: f(x, np.float32), [_I34], "i_to_f32")
_v("numpy.astype", lambda f, x: f(x, np.float32), [A(S)], "to_f32")
_v("numpy.zeros", lambda f, x: x + f((2, 3)), [A("")], "2x3")
_v("numpy.zeros", lambda f, x: f(4, np.int32), [A("")], "int32")
_v("numpy.ones", lambda f, x: x * f((3,)), [A("")], "3")
_v("numpy.ones", lambda f, x: f((2, 2), np.bool_), [A("")], "bool")
_v("numpy.empty", lambda f, x: f((2, 3)).shape, [A("")], "shape",
   ref=lambda x: np.empty((2, 3)).shape)
_v("numpy.empty", lambda f, x: f((4,), np.int32).dtype.name, [A("")], "dtype",
   ref=lambda x: np.empty((4,), np.int32).dtype.name)
_v("numpy.full", lambda f, x: f((2, 3), 1.5), [A("")], "py_fill")
_v("numpy.full", lambda f, x: f((2,), 7, np.int32), [A("")], "int_fill")
_v("numpy.eye", lambda f, x: f(3), [A("")], "3")
_v("numpy.eye", lambda f, x: f(3, 4, k=1), [A("")], "3x4_k1")
_v("numpy.identity", lambda f, x: f(3), [A("")], "3")
_v("numpy.identity", lambda f, x: f(2, np.int32), [A("")], "int32")
_v("numpy.arange", lambda f, x: f(5), [A("")], "stop")
_v("numpy.arange", lambda f, x: f(1, 7, 2), [A("")], "start_stop_step")
_v("numpy.arange", lambda f, x: f(0.0, 1.0, 0.25), [A("")], "float")
_v("numpy.linspace", lambda f, x: f(0.0, 1.0, 5), [A("")], "endpoint")
_v("numpy.linspace", lambda f, x: f(-1.0, 1.0, 4, endpoint=False), [A("")], "no_endpoint")
_v("numpy.shape", lambda f, x: f(x), [A("2x3x4")], "3d")
_v("numpy.shape", lambda f, x: f(x), [A("")], "0d")
_v("numpy.ndim", lambda f, x: f(x), [A("2x3x4")], "3d")
_v("numpy.ndim", lambda f, x: f(x), [A("")], "0d")
_v("numpy.size", lambda f, x: f(x), [A("2x3x4")], "3d")
_v("numpy.size", lambda f, x: f(x), [A("")], "0d")
_v("numpy.result_type", lambda f, x: str(f(x, 1.0)), [A("")], "float_weak")
_v("numpy.result_type", lambda f, x, i: str(f(x, i)), [A(""), np.int64(3)], "float_int")
_v("numpy.result_type", lambda f, i: str(f(i, 1.0)), [np.asarray([1, 2], np.int32)], "int_weak")
_v("nn.one_hot", lambda f, x: f(x, 4), [[0, 3, 1, 5]], "f32_default")
_v("nn.one_hot", lambda f, x: f(x, 3, np.float64), [[[0, 2], [1, 1]]], "2d_f64")

# -- sorting and scans (numpy): the derivative of a sort is its permutation
_d("numpy.sort", lambda f, x: f(x), [A(S)], "last_axis")
_d("numpy.sort", lambda f, x: f(x, axis=0), [A("5x3")], "axis0_pad")
_d("numpy.sort", lambda f, x: f(x, axis=None), [A("2x3x2")], "flattened")
_d("numpy.sort", lambda f, x: f(x), [A(value=[3.0, 1.0, 3.0, 2.0, 1.0, 3.0])], "ties",
   nondiff=True)
_d("numpy.cumsum", lambda f, x: f(x), [A(S)], "flattened")
_d("numpy.cumsum", lambda f, x: f(x, axis=1), [A("3x5")], "axis1")
_d("numpy.cumsum", lambda f, x: f(x, axis=0), [A("7x2")], "axis0_odd")
_d("numpy.cumprod", lambda f, x: f(x, axis=1), [A("3x5")], "axis1")
_d("numpy.cumprod", lambda f, x: f(x), [A(value=[[1.5, 0.0, -2.0], [0.0, 2.0, -1.0]])],
   "two_zeros")
_d("numpy.cumprod", lambda f, x: f(x, axis=0), [A(value=[[1.5, 0.5], [0.0, 2.0], [3.0, -1.0]])],
   "one_zero_axis0")
_d("numpy.quantile", lambda f, x: f(x, 0.3), [A(S)], "flat")
_d("numpy.quantile", lambda f, x: f(x, np.array([0.25, 0.5, 0.9]), axis=1), [A("3x5")], "q_list_axis1")
_d("numpy.quantile", lambda f, x: f(x, 0.4, axis=0, keepdims=True, method="midpoint"),
   [A("4x3")], "midpoint_keepdims")
_d("numpy.quantile", lambda f, x: f(x, np.array([0.1, 0.7]), axis=(0, 2), method="lower"),
   [A("2x3x4")], "lower_axes02")
_d("numpy.quantile", lambda f, x: f(x, 0.65, axis=-1, method="higher"), [A("2x6")], "higher")
_d("numpy.quantile", lambda f, x, q: f(x, q), [A("7"), A("")], "traced_q",
   inputs=lambda rng: [rng.standard_normal(7).astype(np.float32).astype(np.float64),
                       np.asarray(0.37)])
_d("numpy.percentile", lambda f, x: f(x, np.array([10.0, 75.0]), axis=0), [A("5x3")], "axis0")
_d("numpy.percentile", lambda f, x: f(x, 40.0, method="nearest"), [A("6")], "nearest")
_d("numpy.median", lambda f, x: f(x), [A(S)], "even")
_d("numpy.median", lambda f, x: f(x, axis=1), [A("3x5")], "odd_axis1")
_d("numpy.median", lambda f, x: f(x, axis=0, keepdims=True), [A("4x2")], "keepdims")
_ARGS_TIES = [[2.0, -1.0, 2.0, 0.5, -1.0, 2.0], [np.nan, 1.0, -0.0, 0.0, np.nan, -np.inf]]
_stable_argsort = lambda x, axis=-1: np.argsort(x, axis=axis, kind="stable")  # noqa: E731
_v("numpy.argsort", lambda f, x: f(x), [A(value=_ARGS_TIES)], "ties_nans",
   ref=_stable_argsort)
_v("numpy.argsort", lambda f, x: f(x, axis=0), [A("5x3")], "axis0",
   ref=lambda x: _stable_argsort(x, axis=0))
_v("numpy.argsort", lambda f, x: f(x, axis=None), [_I34], "int_flat",
   ref=lambda x: _stable_argsort(np.ravel(x)))
_v("numpy.argsort", lambda f, x: f(x, descending=True), [A(value=_ARGS_TIES)], "descending",
   ref=lambda x: np.flip(x.shape[-1] - 1 - _stable_argsort(np.flip(x, -1)), -1))
_v("numpy.searchsorted", lambda f, a, v: f(a, v), [[-1.0, 0.5, 0.5, 2.0, np.nan],
                                                  [[0.5, -3.0], [9.0, np.nan]]], "left_nan")
_v("numpy.searchsorted", lambda f, a, v: f(a, v, side="right"),
   [[-1.0, 0.5, 0.5, 2.0, 2.0, 3.0], [0.5, 2.0, -1.0, 3.5]], "right")
_v("numpy.searchsorted", lambda f, a, v: f(a, v), [[1, 3, 3, 7], 3], "int_scalar")
_v("numpy.searchsorted", lambda f, a, v, s: f(a, v, sorter=s),
   [[3.0, 1.0, 2.0], [2.5, 0.0, 1.0], [1, 2, 0]], "sorter")
_v("numpy.sort", lambda f, x: f(x, axis=0), [_I34], "int")
_v("numpy.sort", lambda f, x: f(x), [_B34], "bool")
_v("numpy.sort", lambda f, x: f(x), [A(value=_ARGS_TIES)], "nans")
_v("numpy.cumsum", lambda f, x: f(x, axis=1), [_I34], "int")
_v("numpy.cumsum", lambda f, x: f(x), [_B34], "bool_to_int64")
_v("numpy.cumsum", lambda f, x: f(x, axis=0), [np.asarray(_I34, np.int8)], "int8_to_int64")
_v("numpy.cumprod", lambda f, x: f(x, axis=0), [_I34], "int")
_v("numpy.cumsum", lambda f, x: f(x, dtype=np.float32), [_I34], "dtype_f32")

# -- lax: sorting and cumulative reductions (numpy references written from the definitions)
def _np_top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]   # no NaN in these draws
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def _np_cum(ufunc: Any, x: np.ndarray, axis: int = 0, reverse: bool = False) -> np.ndarray:
    if reverse:
        return np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis)
    return ufunc.accumulate(x, axis=axis)


_d("lax.sort", lambda f, x: f(x), [A(S)], "last", ref=lambda x: np.sort(x, -1))
_d("lax.sort", lambda f, x: f(x, dimension=0), [A("5x2")], "dim0",
   ref=lambda x: np.sort(x, 0))
_d("lax.sort", lambda f, x, y: f((x, y))[1], [A("6"), A("6")], "key_val",
   ref=lambda x, y: y[np.argsort(x, kind="stable")])
_d("lax.sort_key_val", lambda f, x, y: f(x, y)[1], [A("2x5"), A("2x5")], "values",
   ref=lambda x, y: np.take_along_axis(y, np.argsort(x, -1, kind="stable"), -1))
_d("lax.sort_key_val", lambda f, x, y: f(x, y, dimension=0)[0], [A("3x2"), A("3x2")], "keys",
   ref=lambda x, y: np.sort(x, 0))
_d("lax.top_k", lambda f, x: f(x, 3)[0], [A(S)], "values", ref=lambda x: _np_top_k(x, 3)[0])
_d("lax.top_k", lambda f, x: f(x, 2)[0], [A(value=[1.0, 3.0, 3.0, -2.0, 3.0])], "ties",
   nondiff=True, ref=lambda x: _np_top_k(x, 2)[0])
_v("lax.top_k", lambda f, x: f(x, 4)[1], [A(value=[[1.0, 3.0, 3.0, -2.0, 3.0]])],
   "indices_ties", ref=lambda x: _np_top_k(x, 4)[1])
_v("lax.top_k", lambda f, x: f(x, 2)[1], [A("3x5")], "indices", ref=lambda x: _np_top_k(x, 2)[1])
for _name, _uf in (("cumsum", np.add), ("cumprod", np.multiply), ("cummax", np.maximum),
                   ("cummin", np.minimum), ("cumlogsumexp", np.logaddexp)):
    _d(f"lax.{_name}", lambda f, x: f(x), [A("5x3")], "axis0",
       ref=lambda x, u=_uf: _np_cum(u, x))
    _d(f"lax.{_name}", lambda f, x: f(x, axis=1, reverse=True), [A("2x6")], "axis1_reverse",
       ref=lambda x, u=_uf: _np_cum(u, x, 1, True))
for _name, _uf in (("cummax", np.maximum), ("cummin", np.minimum)):
    _d(f"lax.{_name}", lambda f, x: f(x), [A(value=[1.0, 1.0, 1.0, 0.5, 1.0, -1.0, -1.0])],
       "ties", nondiff=True, ref=lambda x, u=_uf: _np_cum(u, x))
_d("lax.cumprod", lambda f, x: f(x, axis=1), [A(value=[[2.0, 0.0, 3.0, 0.0], [0.0, 1.5, 2.0, -1.0]])],
   "zeros", ref=lambda x: _np_cum(np.multiply, x, 1))

# -- lax windows at traced offsets (gathers and scatters): numpy references of
#    jax's contract (negative starts wrap, then clamp so the window fits)

def _np_window(x: np.ndarray, starts: Any, sizes: Any) -> tuple:
    out = []
    for s, size, n in zip(starts, sizes, np.shape(x)):
        s = int(s)
        s = min(max(s + n if s < 0 else s, 0), n - int(size))
        out.append(slice(s, s + int(size)))
    return tuple(out)


def _np_dynamic_update_slice(x: np.ndarray, u: np.ndarray, starts: Any) -> np.ndarray:
    out = np.array(x, copy=True)
    out[_np_window(x, starts, np.shape(u))] = u
    return out


def _np_in_dim(x: np.ndarray, start: Any, size: int, axis: int) -> tuple[list, list]:
    starts = [0] * np.ndim(x)
    starts[axis] = start
    sizes = list(np.shape(x))
    sizes[axis] = size
    return starts, sizes


LAX_REF.update({
    "dynamic_slice": lambda x, starts, sizes: x[_np_window(x, starts, sizes)],
    "dynamic_update_slice": _np_dynamic_update_slice,
    "dynamic_slice_in_dim": lambda x, s, size, axis=0: x[_np_window(
        x, *_np_in_dim(x, s, size, axis))],
    "dynamic_index_in_dim": lambda x, i, axis=0, keepdims=True: (
        (lambda r: r if keepdims else np.squeeze(r, axis))(
            x[_np_window(x, *_np_in_dim(x, i, 1, axis))])),
    "dynamic_update_slice_in_dim": lambda x, u, s, axis: _np_dynamic_update_slice(
        x, u, _np_in_dim(x, s, 1, axis)[0]),
    "dynamic_update_index_in_dim": lambda x, u, i, axis: _np_dynamic_update_slice(
        x, np.expand_dims(u, axis) if np.ndim(u) == np.ndim(x) - 1 else u,
        _np_in_dim(x, i, 1, axis)[0]),
})
_d("lax.dynamic_slice", lambda f, x, i, j: f(x, (i, j), (2, 3)),
   [A(S), C(np.int32(1)), C(np.int32(-1))], "negative_start_clamped")
_d("lax.dynamic_slice", lambda f, x, i: f(x, (i, 0), (1, 4)), [A(S), C(np.int64(7))],
   "start_past_end")
_d("lax.dynamic_update_slice", lambda f, x, u, i, j: f(x, u, (i, j)),
   [A(S), A("2x2"), C(np.int32(2)), C(np.int32(1))], "clamped_rows")
_d("lax.dynamic_update_slice", lambda f, x, u, i: f(x, u, (0, i)),
   [A(S), A("3x1"), C(np.int64(-2))], "negative_start")
_d("lax.dynamic_slice_in_dim", lambda f, x, i: f(x, i, 2, 1), [A(S), C(np.int32(1))],
   "axis1")
_d("lax.dynamic_slice_in_dim", lambda f, x, i: f(x, i, 2), [A(S), C(np.int32(5))],
   "axis0_clamped")
_d("lax.dynamic_index_in_dim", lambda f, x, i: f(x, i, 1, keepdims=False),
   [A(S), C(np.int32(-1))], "axis1_drop")
_d("lax.dynamic_index_in_dim", lambda f, x, i: f(x, i), [A(S), C(np.int32(2))],
   "axis0_keep")
_d("lax.dynamic_update_slice_in_dim", lambda f, x, u, i: f(x, u, i, 0),
   [A(S), A("2x4"), C(np.int32(1))], "axis0")
_d("lax.dynamic_update_slice_in_dim", lambda f, x, u, i: f(x, u, i, 1),
   [A(S), A("3x2"), C(np.int32(3))], "axis1_clamped")
_d("lax.dynamic_update_index_in_dim", lambda f, x, u, i: f(x, u, i, 0),
   [A(S), A("4"), C(np.int32(-1))], "row")
_d("lax.dynamic_update_index_in_dim", lambda f, x, u, i: f(x, u, i, 1),
   [A(S), A("3x1"), C(np.int32(2))], "col_keepdim")

# Rows from here on are composites of the functions above (convolution, array
# manipulation, optimizers, special functions, linear algebra): their float32
# column runs under jit only (values and dtypes; the float32 derivatives are those
# of the primitives they are built from, checked above), to keep the table's time.
_COMPOSITES = len(DIFF)


# ---- conv (issue 20 item 5)
# Convolution and pooling. The numpy oracles below are written from jax.lax's
# contracts (direct loops over output positions, base dilation by strided
# assignment, np.pad), not from the implementation (im2col of strided slices).


def _np_same_pads(sizes: Sequence[int], window: Sequence[int], strides: Sequence[int],
                  kind: str) -> list[tuple[int, int]]:
    pads = []
    for n, k, s in zip(sizes, window, strides):
        total = max((math.ceil(n / s) - 1) * s + k - n, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if kind == "SAME" else (big, small))
    return pads


def _np_dilate_pad(x: np.ndarray, lead: int, dil: Sequence[int], pads: Any,
                   fill: float) -> np.ndarray:
    """Base dilation (fill between elements) and padding (negative crops) of the
    trailing dims after `lead` leading ones."""
    nd = x.ndim - lead
    shape = x.shape[:lead] + tuple((n - 1) * d + 1 for n, d in zip(x.shape[lead:], dil))
    xd = np.full(shape, fill, dtype=x.dtype)
    xd[(slice(None),) * lead + tuple(slice(None, None, d) for d in dil)] = x
    pos = [(0, 0)] * lead + [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    xd = np.pad(xd, pos, constant_values=fill)
    crop = tuple(slice(max(-lo, 0), xd.shape[lead + i] - max(-hi, 0))
                 for i, (lo, hi) in enumerate(pads))
    assert len(crop) == nd
    return xd[(slice(None),) * lead + crop]


def _np_conv(lhs: np.ndarray, rhs: np.ndarray, strides: Sequence[int], padding: Any,
             lhs_dilation: Any = None, rhs_dilation: Any = None,
             dimension_numbers: Any = None, feature_group_count: int = 1) -> np.ndarray:
    """jax.lax.conv_general_dilated in numpy: for every output position, the
    window (rhs-dilated, strided) of the dilated, padded lhs times the kernel."""
    nd = lhs.ndim - 2
    if dimension_numbers is None:
        sp = "".join(chr(ord("a") + i) for i in range(nd))
        dimension_numbers = ("NC" + sp, "OI" + sp, "NC" + sp)
    ls, rs, os_ = dimension_numbers
    sp = [c for c in rs if c not in "OI"]
    x = np.transpose(lhs, [ls.index(c) for c in ["N", "C", *sp]])
    w = np.transpose(rhs, [rs.index(c) for c in ["O", "I", *sp]])
    ld = list(lhs_dilation or [1] * nd)
    rd = list(rhs_dilation or [1] * nd)
    ksz = w.shape[2:]
    eff = [(k - 1) * d + 1 for k, d in zip(ksz, rd)]
    if isinstance(padding, str):
        padding = (_np_same_pads(x.shape[2:], eff, strides, padding)
                   if padding != "VALID" else [(0, 0)] * nd)
    xp = _np_dilate_pad(x, 2, ld, padding, 0.0)
    out_sz = [(n - e) // s + 1 for n, e, s in zip(xp.shape[2:], eff, strides)]
    g = feature_group_count
    n_, c = x.shape[:2]
    o = w.shape[0]
    xg = xp.reshape(n_, g, c // g, *xp.shape[2:])
    wg = w.reshape(g, o // g, c // g, *ksz)
    y = np.zeros((n_, g, o // g, *out_sz), dtype=np.result_type(lhs, rhs))
    for pos in itertools.product(*[range(m) for m in out_sz]):
        win = xg[(slice(None),) * 3 + tuple(slice(p * s, p * s + e, d)
                                            for p, s, e, d in zip(pos, strides, eff, rd))]
        y[(slice(None),) * 3 + pos] = np.einsum(win.reshape(n_, g, c // g, -1),
                                                [0, 1, 2, 3],
                                                wg.reshape(g, o // g, c // g, -1),
                                                [1, 4, 2, 3], [0, 1, 4])
    y = y.reshape(n_, o, *out_sz)
    canon = ["N", "C", *sp]
    return np.transpose(y, [canon.index(ch) for ch in os_])


def _np_reduce_window(x: np.ndarray, init: float, kind: str, window: Sequence[int],
                      strides: Sequence[int], padding: Any, base_dilation: Any = None,
                      window_dilation: Any = None) -> np.ndarray:
    nd = x.ndim
    bd = list(base_dilation or [1] * nd)
    wd = list(window_dilation or [1] * nd)
    eff = [(k - 1) * d + 1 for k, d in zip(window, wd)]
    if isinstance(padding, str):
        base = [(n - 1) * b + 1 for n, b in zip(x.shape, bd)]
        padding = (_np_same_pads(base, eff, strides, padding)
                   if padding != "VALID" else [(0, 0)] * nd)
    xp = _np_dilate_pad(x, 0, bd, padding, init)
    out_sz = [(n - e) // s + 1 for n, e, s in zip(xp.shape, eff, strides)]
    red = {"max": np.max, "min": np.min, "add": np.sum}[kind]
    y = np.empty(out_sz, dtype=x.dtype)
    for pos in itertools.product(*[range(m) for m in out_sz]):
        win = xp[tuple(slice(p * s, p * s + e, d) for p, s, e, d in zip(pos, strides, eff, wd))]
        v = red(win)
        y[pos] = {"max": max, "min": min, "add": lambda a, b: a + b}[kind](v, init)
    return y


def _jax_reduce_window(x: Any, init: float, kind: str, *a: Any, **k: Any) -> Any:
    import jax
    return jax.lax.reduce_window(x, init, {"max": jax.lax.max, "min": jax.lax.min,
                                           "add": jax.lax.add}[kind], *a, **k)


def _pool_window(x: np.ndarray, window: Sequence[int], strides: Any) -> tuple[list, list]:
    lead = x.ndim - len(window) - 1
    strides = list(strides or [1] * len(window))
    return [1] * lead + list(window) + [1], [1] * lead + strides + [1]


def _np_avg_pool(x: np.ndarray, window: Sequence[int], strides: Any = None,
                 padding: Any = "VALID", count_include_pad: bool = True) -> np.ndarray:
    w, s = _pool_window(x, window, strides)
    total = _np_reduce_window(x, 0.0, "add", w, s, padding)
    if count_include_pad:
        return total / math.prod(window)
    return total / _np_reduce_window(np.ones_like(x), 0.0, "add", w, s, padding)


def _jax_avg_pool(x: Any, window: Sequence[int], strides: Any = None, padding: Any = "VALID",
                  count_include_pad: bool = True) -> Any:
    import jax.numpy as jnp
    w, s = _pool_window(x, window, strides)
    total = _jax_reduce_window(x, 0.0, "add", w, s, padding)
    if count_include_pad:
        return total / math.prod(window)
    return total / _jax_reduce_window(jnp.ones_like(x), 0.0, "add", w, s, padding)


def _conv_row(label: str, xs: str, ws: str, *a: Any, name: str = "conv_general_dilated",
              **k: Any) -> None:
    _d(f"lax.{name}", lambda f, x, w: f(x, w, *a, **k), [A(xs), A(ws)], label,
       ref=lambda x, w: _np_conv(x, w, *a, **k))


_NHWC = ("NHWC", "HWIO", "NHWC")
_conv_row("nhwc_same_stride2", "1x5x6x2", "3x3x2x3", (2, 2), "SAME", dimension_numbers=_NHWC)
_conv_row("rhs_dilation_explicit_pad_mixed_layouts", "1x2x6x5", "3x2x2x2", (1, 2),
          [(1, 0), (2, 1)], rhs_dilation=(2, 1), dimension_numbers=("NCHW", "HWIO", "NHWC"))
_conv_row("groups2_nhwc", "1x4x4x4", "2x2x2x4", (1, 1), "SAME", dimension_numbers=_NHWC,
          feature_group_count=2)
_conv_row("1d_depthwise_same_lower", "2x7x3", "3x1x6", (2,), "SAME_LOWER",
          dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=3)
# one filter per channel (groups = in = out features): linalg.depthwise_conv_2d_nhwc_hwc
_conv_row("depthwise_nhwc_stride_dilation", "2x6x5x3", "3x2x1x3", (2, 1), "SAME",
          rhs_dilation=(1, 2), dimension_numbers=_NHWC, feature_group_count=3)
_conv_row("3d_ncdhw", "1x1x3x2x3", "2x1x2x1x2", (1, 1, 1), "VALID")
_conv_row("stride_same", "1x2x5x5", "2x2x3x2", (2, 2), "SAME", name="conv")
_conv_row("dilations", "1x2x4x5", "2x2x2x2", (1, 2), [(1, 1), (0, 1)], (2, 1), (1, 2),
          name="conv_with_general_padding")
_conv_row("1d_explicit_pad", "2x2x6", "3x2x2", (1,), [(2, 0)], name="conv")
_conv_row("lhs_dilation_negative_pad", "1x1x3x4", "2x1x3x2", (2, 1), [(1, -1), (2, 0)], (2, 2),
          None,
          name="conv_with_general_padding")
# 1x5x4, ties inside windows. jax's forward mode of a max window
# (select_and_gather_add) may pick another tied element than its reverse mode
# (select_and_scatter_add: the first in row-major window order, which ours
# follows in both modes); the literal avoids windows where jax's two differ
# (test_conv.py checks the ties against jax's reverse mode).
_P_TIES = [[[0.5, 0.5, 2.0, 2.0], [0.5, -2.0, 2.0, 2.0], [1.5, 1.5, 0.25, -0.5],
            [1.5, 1.5, 3.0, 3.0], [0.0, -1.0, 3.0, 1.0]]]


def _rw_row(label: str, shape: str, init: float, kind: str, *a: Any, value: Any = None,
            **k: Any) -> None:
    arg = A(shape) if value is None else A(value=value)
    _d("lax.reduce_window", lambda f, x: f(x, init, kind, *a, **k), [arg], label,
       ref=lambda x: _np_reduce_window(x, init, kind, *a, **k),
       jref=lambda x: _jax_reduce_window(x, init, kind, *a, **k), nondiff=value is not None)


_rw_row("max_same_stride2", "2x5x4", -math.inf, "max", (1, 2, 2), (1, 2, 2), "SAME")
_rw_row("max_ties", "", -math.inf, "max", (1, 2, 2), (1, 1, 2), "VALID", value=_P_TIES)
_rw_row("min_explicit_pad", "3x6", math.inf, "min", (2, 2), (1, 2), [(0, 1), (1, 0)])
_rw_row("add_dilations", "3x4", 0.0, "add", (2, 3), (1, 2), "SAME", base_dilation=(2, 1),
        window_dilation=(1, 2))
_d("nn.max_pool", lambda f, x: f(x, (2, 2), (2, 2)), [A("2x4x5x3")], "2x2_stride2",
   ref=lambda x: _np_reduce_window(x, -math.inf, "max", (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
   jref=lambda x: _jax_reduce_window(x, -math.inf, "max", (1, 2, 2, 1), (1, 2, 2, 1),
                                     "VALID"))
_d("nn.max_pool", lambda f, x: f(x[..., None], (3, 2), padding="SAME")[..., 0],
   [A(value=_P_TIES)], "ties_same", nondiff=True,
   ref=lambda x: _np_reduce_window(x, -math.inf, "max", (1, 3, 2), (1, 1, 1), "SAME"),
   jref=lambda x: _jax_reduce_window(x, -math.inf, "max", (1, 3, 2), (1, 1, 1), "SAME"))
_d("nn.avg_pool", lambda f, x: f(x, (2, 2), (1, 2)), [A("2x4x5x3")], "2x2",
   ref=lambda x: _np_avg_pool(x, (2, 2), (1, 2)),
   jref=lambda x: _jax_avg_pool(x, (2, 2), (1, 2)))
_d("nn.avg_pool", lambda f, x: f(x, (3,), padding="SAME", count_include_pad=False),
   [A("2x5x3")], "1d_same_exclude_pad",
   ref=lambda x: _np_avg_pool(x, (3,), padding="SAME", count_include_pad=False),
   jref=lambda x: _jax_avg_pool(x, (3,), padding="SAME", count_include_pad=False))


# ---- lead: dtype helpers and real-only complex functions (issue 20, the name survey)
_d("numpy.real", lambda f, x: f(x), [A(S)], "real_input")
_d("numpy.imag", lambda f, x: f(x) + x, [A(S)], "real_input_zeros")
_d("numpy.conj", lambda f, x: f(x) * x, [A(S)], "real_input")
_d("numpy.conjugate", lambda f, x: f(x[1:]), [A(S)], "real_input_sliced")
_d("numpy.copy", lambda f, x: f(x) * 2.0, [A(S)], "scaled")
_d("numpy.copy", lambda f, x: f(x), [A("")], "scalar")
_d("numpy.real", lambda f, x: f(x) * x, [A("")], "scalar")
_d("numpy.imag", lambda f, x: f(x * x), [A("2x3x2")], "3d")
_d("numpy.conj", lambda f, x: f(x), [A("")], "scalar")
_d("numpy.conjugate", lambda f, x: f(x) + 1.0, [A("2x3x2")], "3d")
_d("numpy.concat", lambda f, x, y: f([x, y], axis=1), [A(S), A("3x2")], "axis1")
_d("numpy.concat", lambda f, x, y: f((x, y)), [A("4"), A("2")], "vectors")
_v("numpy.array_equal", lambda f, x, y: f(x, y), [C([1.0, np.nan, 2.0]), C([1.0, np.nan, 2.0])],
   "nan_not_equal")
_v("numpy.array_equal", lambda f, x, y: f(x, y, equal_nan=True),
   [C([1.0, np.nan, 2.0]), C([1.0, np.nan, 2.0])], "nan_equal")
_v("numpy.array_equal", lambda f, x, y: f(x, y), [C([[1, 2], [3, 4]]), C([[1, 2], [3, 5]])],
   "ints_differ")
_v("numpy.array_equal", lambda f, x, y: f(x, y), [C([1.0, 2.0]), C([1.0, 2.0, 3.0])],
   "shape_mismatch")
_v("numpy.array_equiv", lambda f, x, y: f(x, y), [C([[1.0, 2.0], [1.0, 2.0]]), C([1.0, 2.0])],
   "broadcast_equal")
_v("numpy.array_equiv", lambda f, x, y: f(x, y), [C([[1.0, 2.0], [1.0, 3.0]]), C([1.0, 2.0])],
   "broadcast_differ")
_v("numpy.array_equiv", lambda f, x, y: f(x, y), [C([1.0, 2.0, 3.0]), C([1.0, 2.0])],
   "not_broadcastable")

# ---- npnames (issue 20 item 6): array manipulation, NaN-aware reductions, hypot, sinc
_NANS = [[0.5, np.nan, -1.0, 2.0], [np.nan, 1.5, 0.25, -0.5], [3.0, -2.0, np.nan, 1.0]]
_d("numpy.pad", lambda f, x, c: f(x, 1, constant_values=c), [A("2x3"), A("")], "traced_value")
_d("numpy.pad", lambda f, x: f(x, ((2, 1), (1, 2)), mode="edge"), [A(S)], "edge")
_d("numpy.pad", lambda f, x: f(x, ((2, 4), (3, 5)), mode="reflect"), [A(S)], "reflect_wide")
_d("numpy.pad", lambda f, x: f(x, (1, 2), mode="symmetric", reflect_type="odd"), [A(S)],
   "symmetric_odd")
_d("numpy.pad", lambda f, x: f(x, ((0, 0), (5, 2)), mode="wrap"), [A(S)], "wrap")
_d("numpy.repeat", lambda f, x: f(x, 2, axis=1), [A(S)], "int_axis1")
_d("numpy.repeat", lambda f, x: f(x, np.array([2, 0, 1]), axis=0), [A(S)], "per_element")
_d("numpy.tile", lambda f, x: f(x, (2, 1, 3)), [A("2x3")], "3d_reps")
_d("numpy.split", lambda f, x: f(x, 2, axis=1)[1], [A(S)], "sections")
_d("numpy.split", lambda f, x: f(x, [1, 3], axis=1)[2], [A(S)], "indices")
_d("numpy.array_split", lambda f, x: f(x, 3, axis=1)[0], [A("3x5")], "unequal")
_d("numpy.diag", lambda f, x: f(x, -2), [A("3")], "vector_k-2")
_d("numpy.diag", lambda f, x: f(x, -1), [A(S)], "matrix_k-1")
_d("numpy.fliplr", lambda f, x: f(x), [A("2x3x2")], "3d")
_d("numpy.flipud", lambda f, x: f(x), [A("5")], "1d")
_d("numpy.rot90", lambda f, x: f(x, 3, axes=(2, 0)), [A("2x3x2")], "k3_axes20")
_d("numpy.kron", lambda f, x, y: f(x, y), [A("2x3"), A("2x2")], "2d_2d")
_d("numpy.cross", lambda f, x, y: f(x, y), [A("2x3"), A("3")], "3vec_bcast")
_d("numpy.cross", lambda f, x, y: f(x, y), [A("3x2"), A("3x2")], "2vec",
   ref=lambda x, y: x[..., 0] * y[..., 1] - x[..., 1] * y[..., 0])   # (numpy warns on 2-vectors)
_d("numpy.meshgrid", lambda f, x, y: f(x, y)[0] * f(x, y)[1], [A("3"), A("4")], "xy")
_d("numpy.hypot", lambda f, x, y: f(x, y),
   [A(value=[3.0, 0.0, -1.5, 1.0]), A(value=[0.0, -2.0, 2.0, -1.0])], "one_leg_zero_tie")
_d("numpy.hypot", lambda f, x, y: f(x, y), [A(value=[0.0, 1.0]), A(value=[0.0, 0.5])],
   "both_zero", nondiff=True)
_d("numpy.sinc", lambda f, x: f(x), [A(value=[0.0, 0.5, -1.0, 0.25])], "at_zero")
_d("numpy.nansum", lambda f, x: f(x, axis=1), [A(value=_NANS)], "axis1")
_d("numpy.nanmean", lambda f, x: f(x, axis=0), [A(value=_NANS)], "axis0")
for _name in ("nanmax", "nanmin"):
    _d(f"numpy.{_name}", lambda f, x: f(x, axis=1, keepdims=True), [A(value=_NANS)], "axis1")
_d("numpy.nan_to_num", lambda f, x: f(x, nan=0.5, posinf=5.0, neginf=-7.0),
   [A(value=[np.nan, np.inf, -np.inf, 1.5, -0.25])], "specials")
_d("numpy.average", lambda f, x, w: f(x, axis=1, weights=w), [A(S), A("4", "pos")],
   "weights_1d")
_d("numpy.average", lambda f, x, w: f(x, axis=0, weights=w, returned=True)[1] * f(
    x, axis=0, weights=w, returned=True)[0], [A(S), A(S, "pos")], "returned")
_d("numpy.isclose", lambda f, x, y: x * f(x, y, atol=1e-3),
   [A(value=[0.5, -1.0, 2.0, 0.25]), C([0.5, -1.5, 2.0, 1.0])], "as_mask")
_d("numpy.allclose", lambda f, x, y: x * f(x, y, atol=0.1), [A(S), C(A(S))], "false")
_d("numpy.trace", lambda f, x: f(x, -1, 2, 0), [A("3x2x4")], "axes20_offset")
_d("numpy.roll", lambda f, x: f(x, (1, -2), axis=(0, 1)), [A(S)], "tuple_shifts")
for _spec, _shapes, _lab in [
        ("...ij,...jk->...ik", ("2x3x4", "4x2"), "ellipsis_batched"),
        ("...ij,...j->...i", ("2x1x3x4", "2x4"), "ellipsis_bcast")]:
    _d("numpy.einsum", lambda f, *xs, s=_spec: f(s, *xs), [A(s) for s in _shapes], _lab)
_F_SPECIAL = [1.0, np.nan, np.inf, -np.inf, 1e-9, 2.0, np.nan]
_G_SPECIAL = [1.000001, np.nan, np.inf, np.inf, 0.0, 2.1, 0.0]
_v("numpy.isclose", lambda f, x, y: f(x, y), [A(value=_F_SPECIAL), A(value=_G_SPECIAL)],
   "specials")
_v("numpy.isclose", lambda f, x, y: f(x, y, rtol=0.1, equal_nan=True),
   [A(value=_F_SPECIAL), A(value=_G_SPECIAL)], "equal_nan")
_v("numpy.isclose", lambda f, x, y: f(x, y), [[100000000, 3, -2], [100000001, 4, -2]], "int")
_v("numpy.allclose", lambda f, x, y: f(x, y, equal_nan=True),
   [A(value=[np.nan, 1.0]), A(value=[np.nan, 1.0 + 1e-7])], "equal_nan")


def _np_quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` without numpy's RuntimeWarning about all-NaN slices (NaN is the point)."""
    def run(*a: Any, **k: Any) -> Any:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(*a, **k)
    return run


_v("numpy.nanmax", lambda f, x: f(x, axis=0), [A(value=[[np.nan, 1.0], [np.nan, -2.0]])],
   "all_nan_column", ref=_np_quiet(lambda x: np.nanmax(x, axis=0)))
_v("numpy.nanmean", lambda f, x: f(x, axis=1), [_I34], "int")
_v("numpy.nansum", lambda f, x: f(x, axis=0), [_I34], "int")
_v("numpy.hypot", lambda f, x, y: f(x, y), [[3, -5, 0], [4, 12, 0]], "int_to_f64")
_v("numpy.hypot", lambda f, x, y: f(x, y), [A(S, "wide"), A("4")], "bcast")
_v("numpy.sinc", lambda f, x: f(x), [[0, 1, -2]], "int_to_f64")
_v("numpy.pad", lambda f, x: f(x, ((1, 0), (2, 1)), constant_values=7), [_I34], "int")
_v("numpy.pad", lambda f, x: f(x, 2, mode="mean"), [_I34], "int_mean_rounded")
_v("numpy.repeat", lambda f, x: f(x, np.array([1, 0, 3, 2]), axis=1), [_B34], "bool")
_v("numpy.kron", lambda f, x, y: f(x, y), [[[1, 2], [3, 4]], [[0, 1], [1, 0]]], "int")
_v("numpy.cross", lambda f, x, y: f(x, y), [[1, 0, 0], [0, 1, 0]], "int")
_v("numpy.average", lambda f, x, w: f(x, axis=1, weights=w), [_I34, [1, 2, 3, 4]], "int")
_v("numpy.nan_to_num", lambda f, x: f(x), [_I34], "int_unchanged")
_v("numpy.diag", lambda f, x: f(x, 1), [_I34], "int")
_v("numpy.meshgrid", lambda f, x, y: f(x, y, indexing="ij")[0], [[1, 2, 3], [4, 5]], "int")
_v("numpy.tile", lambda f, x: f(x, (2, 2)), [_B34], "bool")
_v("numpy.trace", lambda f, x: f(x, dtype=np.float32), [_I34], "int_dtype_f32")
_d("numpy.linspace", lambda f, a, b: f(a, b, 5), [A(""), A("")], "traced_ends")
_d("numpy.linspace", lambda f, a, b: f(a, b, 4, endpoint=False, retstep=True, axis=1)[0] * f(
    a, b, 4, endpoint=False, retstep=True, axis=1)[1][:, None], [A("3"), A("3")],
   "vector_ends_axis1_retstep")
_v("numpy.linspace", lambda f, a: f(a, 7.0, 4, dtype=np.int64), [A("")], "traced_int_dtype")
# value rows for what the D rows above leave out (cheaper: one compilation, no transforms)
_v("numpy.pad", lambda f, x: f(x, ((1, 2), (0, 3)), constant_values=((1.5, -2.0), (0.5, 3.0))),
   [A(S)], "constant_pairs")
_v("numpy.pad", lambda f, x: f(x, ((2, 1), (0, 2)), mode="maximum"), [A(S)], "maximum")
_v("numpy.repeat", lambda f, x: f(x, 2), [A("2x2")], "flattened")
_v("numpy.array_split", lambda f, x: f(x, [2, -1])[1], [A("5x2")], "indices")
_v("numpy.fliplr", lambda f, x: f(x), [_I34], "int")
_v("numpy.flipud", lambda f, x: f(x), [_I34], "int")
_v("numpy.rot90", lambda f, x: f(x, -2), [A(S)], "k-2")
_v("numpy.rot90", lambda f, x: f(x, 1), [_I34], "int_k1")
_v("numpy.cross", lambda f, x, y: f(x, y, axisa=0, axisb=0, axisc=0), [A("3x2"), A("3x2")],
   "axes0")
_v("numpy.meshgrid", lambda f, x, y, z: f(x, y, z, indexing="ij", sparse=True)[1],
   [A("2"), A("3"), A("4")], "ij_sparse")
_v("numpy.nanmin", lambda f, x: f(x), [A(value=_NANS)], "all")
_v("numpy.average", lambda f, x: f(x, axis=(0, 1), keepdims=True), [A(S)], "no_weights")
_v("numpy.roll", lambda f, x: f(x, 5), [A(S)], "flattened")
_v("numpy.einsum", lambda f, x: f("i...->...", x), [A("2x3x2")], "ellipsis_sum_first")
_v("numpy.einsum", lambda f, x, y: f("...j,j", x, y), [A("2x3x4"), A("4")], "ellipsis_implicit")


# ---- optim (issue 20 item 9)
# `mlir_autodiff.optim`: each transformation/optimizer row builds it, initializes
# from p and returns the SECOND update (so the state matters), for the gradients
# g and then g * p + 0.5; differentiated with respect to g and p. The numpy
# references below are the published update rules for those two steps. Schedules
# (functions of an integer step count) are V rows against closed forms.

def _opt_two_steps(opt: Any, g: Any, p: Any) -> Any:
    state = opt.init(p)
    _, state = opt.update(g, state, p)
    return opt.update(g * p + 0.5, state, p)[0]


def _np_g2(g: np.ndarray, p: np.ndarray) -> np.ndarray:
    return g * p + 0.5


def _np_adam_dir(g, p, b1=0.9, b2=0.999, eps=1e-8):
    g2 = _np_g2(g, p)
    m = b1 * (1 - b1) * g + (1 - b1) * g2
    v = b2 * (1 - b2) * g * g + (1 - b2) * g2 * g2
    return (m / (1 - b1 ** 2)) / (np.sqrt(v / (1 - b2 ** 2)) + eps)


def _np_rms_dir(g, p, decay=0.9, eps=1e-8, centered=False):
    g2 = _np_g2(g, p)
    nu = decay * (1 - decay) * g * g + (1 - decay) * g2 * g2
    mu = decay * (1 - decay) * g + (1 - decay) * g2
    return g2 / np.sqrt((nu - mu * mu if centered else nu) + eps)


def _np_trace(g, p, decay, nesterov=False):
    g2 = _np_g2(g, p)
    t2 = g2 + decay * g
    return g2 + decay * t2 if nesterov else t2


def _np_rss_dir(g, p, init=0.1, eps=1e-7):
    g2 = _np_g2(g, p)
    return g2 / np.sqrt(init + g * g + g2 * g2 + eps)


def _np_clip_norm(g, p, max_norm):
    g2 = _np_g2(g, p)
    n = math.sqrt(float(np.sum(g2.astype(np.float64) ** 2)))
    return g2 if n < max_norm else g2 * (max_norm / n)


def _opt_row(name: str, build: Callable[[Any], Any], ref: Callable[..., Any], label: str,
             shape: str = "2x3") -> None:
    _d(f"optim.{name}", lambda f, g, p, b=build: _opt_two_steps(b(f), g, p),
       [A(shape), A(shape)], label, ref=ref)


def _halving(c: Any) -> float:  # exponential_decay(0.1, 1, 0.5) at count c
    return 0.1 * 0.5 ** c


_opt_row("sgd", lambda f: f(0.1), lambda g, p: -0.1 * _np_g2(g, p), "plain")
_opt_row("sgd", lambda f: f(0.1, momentum=0.9), lambda g, p: -0.1 * _np_trace(g, p, 0.9),
         "momentum")
_opt_row("sgd", lambda f: f(0.1, momentum=0.9, nesterov=True),
         lambda g, p: -0.1 * _np_trace(g, p, 0.9, True), "nesterov")
_opt_row("adam", lambda f: f(0.1), lambda g, p: -0.1 * _np_adam_dir(g, p), "lr")
_opt_row("adam", lambda f: f(_optim().exponential_decay(0.1, 1, 0.5), b1=0.5, b2=0.9),
         lambda g, p: -_halving(1) * _np_adam_dir(g, p, 0.5, 0.9), "schedule")
_opt_row("adamw", lambda f: f(0.1, weight_decay=0.3),
         lambda g, p: -0.1 * (_np_adam_dir(g, p) + 0.3 * p), "decay")
_opt_row("adamw", lambda f: f(0.1, weight_decay=0.3, mask=False),
         lambda g, p: -0.1 * _np_adam_dir(g, p), "masked_off")
_opt_row("rmsprop", lambda f: f(0.1), lambda g, p: -0.1 * _np_rms_dir(g, p), "plain")
_opt_row("rmsprop", lambda f: f(0.1, centered=True, decay=0.5),
         lambda g, p: -0.1 * _np_rms_dir(g, p, 0.5, centered=True), "centered")
_opt_row("adagrad", lambda f: f(0.1), lambda g, p: -0.1 * _np_rss_dir(g, p), "default")
_opt_row("adagrad", lambda f: f(0.1, initial_accumulator_value=1.0),
         lambda g, p: -0.1 * _np_rss_dir(g, p, 1.0), "init1")
_opt_row("scale_by_adam", lambda f: f(), _np_adam_dir, "default")
_opt_row("scale_by_adam", lambda f: f(0.5, 0.9, 1e-3),
         lambda g, p: _np_adam_dir(g, p, 0.5, 0.9, 1e-3), "b1_b2_eps")
_opt_row("scale_by_rms", lambda f: f(), _np_rms_dir, "default")
_opt_row("scale_by_rms", lambda f: f(0.5, 1e-3), lambda g, p: _np_rms_dir(g, p, 0.5, 1e-3),
         "decay_eps")
_opt_row("scale_by_stddev", lambda f: f(0.5),
         lambda g, p: _np_rms_dir(g, p, 0.5, centered=True), "decay")
_opt_row("scale_by_stddev", lambda f: f(0.8, 1e-2),
         lambda g, p: _np_rms_dir(g, p, 0.8, 1e-2, centered=True), "decay_eps")
_opt_row("scale_by_rss", lambda f: f(), _np_rss_dir, "default")
_opt_row("scale_by_rss", lambda f: f(0.5, 1e-3), lambda g, p: _np_rss_dir(g, p, 0.5, 1e-3),
         "init_eps")
_opt_row("trace", lambda f: f(0.9), lambda g, p: _np_trace(g, p, 0.9), "momentum")
_opt_row("trace", lambda f: f(0.5, nesterov=True), lambda g, p: _np_trace(g, p, 0.5, True),
         "nesterov")
_opt_row("add_decayed_weights", lambda f: f(0.3), lambda g, p: _np_g2(g, p) + 0.3 * p, "all")
_opt_row("add_decayed_weights", lambda f: f(0.3, mask=lambda params: True),
         lambda g, p: _np_g2(g, p) + 0.3 * p, "mask_fn")
_opt_row("scale", lambda f: f(-0.7), lambda g, p: -0.7 * _np_g2(g, p), "neg")
_opt_row("scale", lambda f: f(2.0), lambda g, p: 2.0 * _np_g2(g, p), "pos")
_opt_row("scale_by_learning_rate", lambda f: f(0.1), lambda g, p: -0.1 * _np_g2(g, p), "const")
_opt_row("scale_by_learning_rate", lambda f: f(_halving, flip_sign=False),
         lambda g, p: _halving(1) * _np_g2(g, p), "schedule_no_flip")
_opt_row("scale_by_schedule", lambda f: f(_halving), lambda g, p: _halving(1) * _np_g2(g, p),
         "halving")
_opt_row("scale_by_schedule", lambda f: f(lambda c: 1.0 + c),
         lambda g, p: 2.0 * _np_g2(g, p), "linear")
_opt_row("clip", lambda f: f(0.4), lambda g, p: np.clip(_np_g2(g, p), -0.4, 0.4), "delta")
_opt_row("clip", lambda f: f(10.0), _np_g2, "inactive")
_opt_row("clip_by_global_norm", lambda f: f(1.0), lambda g, p: _np_clip_norm(g, p, 1.0),
         "clipped")
_opt_row("clip_by_global_norm", lambda f: f(100.0), _np_g2, "inactive")
_opt_row("identity", lambda f: f(), _np_g2, "2x3")
_opt_row("identity", lambda f: f(), _np_g2, "0d", shape="")
_opt_row("chain", lambda f: f(_optim().clip(0.4), _optim().scale(-0.5)),
         lambda g, p: -0.5 * np.clip(_np_g2(g, p), -0.4, 0.4), "clip_scale")
_opt_row("chain", lambda f: f(_optim().scale_by_adam(), _optim().add_decayed_weights(0.1),
                              _optim().scale(-0.1)),
         lambda g, p: -0.1 * (_np_adam_dir(g, p) + 0.1 * p), "adamw_parts")
_d("optim.apply_updates", lambda f, p, u: f(p, u), [A("2x3"), A("2x3")], "array",
   ref=lambda p, u: p + u)
_d("optim.apply_updates", lambda f, p, u: f({"w": p, "v": [u]}, {"w": u, "v": [p]})["v"][0],
   [A("3"), A("3")], "pytree", ref=lambda p, u: u + p)
_d("optim.global_norm", lambda f, a, b: f({"a": a, "b": (b,)}), [A("2x3"), A("2")], "pytree",
   ref=lambda a, b: np.sqrt(np.sum(a * a) + np.sum(b * b)))
_d("optim.global_norm", lambda f, a: f(a), [A("3")], "array",
   ref=lambda a: np.sqrt(np.sum(a * a)))


def _optim() -> Any:
    import mlir_autodiff.optim as optim

    return optim


def _sched_row(name: str, build: Callable[[Any], Any], closed: Callable[[int], float],
               label: str, count: int) -> None:
    _v(f"optim.{name}", lambda f, c, b=build: b(f)(c), [C(np.int32(count))], label,
       ref=lambda c, cl=closed: np.float64(cl(int(c))))


for _c in (0, 3):
    _sched_row("constant_schedule", lambda f: f(0.3), lambda t: 0.3, f"at{_c}", _c)
_sched_row("exponential_decay", lambda f: f(1.0, 2, 0.5, transition_begin=1),
           lambda t: 0.5 ** (max(t - 1, 0) / 2), "smooth", 4)
_sched_row("exponential_decay", lambda f: f(1.0, 2, 0.5, staircase=True, end_value=0.3),
           lambda t: max(0.5 ** (t // 2), 0.3), "staircase_end", 5)
_sched_row("cosine_decay_schedule", lambda f: f(2.0, 4, alpha=0.1),
           lambda t: 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 4) / 4)) + 0.1),
           "mid", 1)
_sched_row("cosine_decay_schedule", lambda f: f(2.0, 4), lambda t: 0.0, "after", 6)
_sched_row("linear_schedule", lambda f: f(1.0, 0.2, 4, transition_begin=1),
           lambda t: 1.0 + (0.2 - 1.0) * min(max(t - 1, 0), 4) / 4, "mid", 3)
_sched_row("linear_schedule", lambda f: f(1.0, 0.2, 4), lambda t: 0.2, "end", 9)
_sched_row("piecewise_constant_schedule", lambda f: f(1.0, {2: 0.5, 4: 0.1}),
           lambda t: 0.5, "between", 3)
_sched_row("piecewise_constant_schedule", lambda f: f(1.0, {2: 0.5, 4: 0.1}),
           lambda t: 0.05, "after", 4)
_sched_row("warmup_cosine_decay_schedule", lambda f: f(0.0, 0.05, 2, 6, end_value=0.001),
           lambda t: 0.025, "warmup", 1)
_sched_row("warmup_cosine_decay_schedule", lambda f: f(0.0, 0.05, 2, 6, end_value=0.001),
           lambda t: 0.001 + 0.049 * 0.5 * (1 + math.cos(math.pi * 0.5)), "decay", 4)
_sched_row("join_schedules", lambda f: f([_optim().constant_schedule(1.0),
                                          _optim().linear_schedule(0.5, 0.0, 2)], [3]),
           lambda t: 1.0, "first", 2)
_sched_row("join_schedules", lambda f: f([_optim().constant_schedule(1.0),
                                          _optim().linear_schedule(0.5, 0.0, 2)], [3]),
           lambda t: 0.25, "second", 4)


# ---- nnscipy (issue 20 item 6)
# jax.nn's remaining activations, dot_product_attention and the constant
# initializers; mlir_autodiff.scipy.special and scipy.stats. `scipy.*` rows
# resolve the dotted name in scipy (the value / finite-difference oracle; cast
# to the inputs' float type, as scipy.stats computes in float64) and in
# jax.scipy (the derivative oracle).

_SELU = (1.6732632423543772848170429916717, 1.0507009873554804934193349852946)


def _np_attention(q, k, v, bias=None, mask=None, *, scale=None, is_causal=False):
    """softmax(q.k * scale + bias, masked) . v from the formula, [B, T, N, H] layout."""
    N, K = q.shape[-2], k.shape[-2]
    k = np.repeat(k, N // K, axis=-2)
    v = np.repeat(v, N // K, axis=-2)
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * s
    if bias is not None:
        logits = logits + bias
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep = keep & mask
    if is_causal:
        keep = keep & np.tril(np.ones(logits.shape[-2:], bool))
    logits = np.where(keep, logits, -0.7 * np.finfo(logits.dtype).max)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", w, v).astype(q.dtype)


def _jax_attention(q, k, v, bias=None, mask=None, *, scale=None, is_causal=False):
    """jax.nn.dot_product_attention's formula with the softmax in the inputs' precision
    (jax's own always takes the softmax in float32, 1e-7 off a float64 result)."""
    import jax
    import jax.numpy as jnp
    N, K = q.shape[-2], k.shape[-2]
    k = jnp.repeat(k, N // K, axis=-2)
    v = jnp.repeat(v, N // K, axis=-2)
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) * s
    if bias is not None:
        logits = logits + bias
    keep = jnp.ones(logits.shape, bool)
    if mask is not None:
        keep = keep & mask
    if is_causal:
        keep = keep & jnp.tril(jnp.ones(logits.shape[-2:], bool))
    logits = jnp.where(keep, logits, -0.7 * jnp.finfo(logits.dtype).max)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), v)


def _np_standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
    if mean is None:
        mean = np.mean(x, axis=axis, keepdims=True)
    if variance is None:
        variance = np.mean(x * x, axis=axis, keepdims=True) - mean * mean
    return ((x - mean) / np.sqrt(variance + epsilon)).astype(x.dtype)


def _np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype)


def _np_glu(x, axis=-1):
    a, b = np.split(x, 2, axis=axis)
    return a * _np_sigmoid(b)


def _np_relu6(x):
    return np.minimum(np.maximum(x, 0), 6)


def _np_log1mexp(x):
    return np.log(-np.expm1(-x))


NN_REF.update({
    "relu6": _np_relu6,
    "elu": _np_elu,
    "celu": lambda x, alpha=1.0: (np.maximum(x, 0) + alpha * np.expm1(np.minimum(x, 0) / alpha)
                                  ).astype(x.dtype),
    "selu": lambda x: (_SELU[1] * _np_elu(x, _SELU[0])).astype(x.dtype),
    "leaky_relu": lambda x, negative_slope=0.01: np.where(x >= 0, x, negative_slope * x
                                                          ).astype(x.dtype),
    "swish": lambda x: x * _np_sigmoid(x),
    "glu": _np_glu,
    "mish": lambda x: x * np.tanh(_np_softplus(x)),
    "soft_sign": lambda x: x / (np.abs(x) + 1),
    "hard_sigmoid": lambda x: _np_relu6(x + 3) / 6,
    "hard_silu": lambda x: x * _np_relu6(x + 3) / 6,
    "hard_swish": lambda x: x * _np_relu6(x + 3) / 6,
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "squareplus": lambda x, b=4: ((x + np.sqrt(x * x + b)) / 2).astype(x.dtype),
    "log1mexp": _np_log1mexp,
    "standardize": _np_standardize,
    "dot_product_attention": _np_attention,
    "initializers.zeros": lambda key, shape, dtype=np.float32: np.zeros(shape, dtype),
    "initializers.ones": lambda key, shape, dtype=np.float32: np.ones(shape, dtype),
    "initializers.constant": lambda value, dtype=np.float32: (
        lambda key, shape, dtype=dtype: np.full(shape, value, dtype)),
})
JAX_NN_OVERRIDE["dot_product_attention"] = _jax_attention

ZEROS_KINKS = [[0.0, -0.5, 6.0, -3.0], [3.0, 1.0, -1.0, 0.25]]   # relu6/hard_*/hard_tanh kinks
for _name in ("relu6", "elu", "celu", "selu", "leaky_relu", "swish", "mish", "soft_sign",
              "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh"):
    _f = f"nn.{_name}"
    _d(_f, lambda f, x: f(x), [A(S, "wide")], "wide")
    _d(_f, lambda f, x: f(x), [A(value=ZEROS_KINKS)], "kinks",
       nondiff=_name not in ("swish", "mish"))
_d("nn.elu", lambda f, x: f(x, alpha=0.5), [A(S)], "alpha")
_d("nn.celu", lambda f, x: f(x, alpha=2.0), [A(S)], "alpha")
_d("nn.leaky_relu", lambda f, x: f(x, negative_slope=0.2), [A(S)], "slope")
_d("nn.swish", lambda f, x: f(x), [A("")], "0d")
_d("nn.glu", lambda f, x: f(x), [A(S)], "last_axis")
_d("nn.glu", lambda f, x: f(x, axis=0), [A("4x3")], "axis0")
_d("nn.squareplus", lambda f, x: f(x), [A(S, "wide")], "wide")
_d("nn.squareplus", lambda f, x: f(x, b=1.0), [A(S)], "b1")
_d("nn.log1mexp", lambda f, x: f(x), [A(S, "pos")], "pos")
_d("nn.log1mexp", lambda f, x: f(x), [A(value=[[0.05, 0.68, 0.7], [2.0, 30.0, 0.1]])],
   "both_branches")
_d("nn.standardize", lambda f, x: f(x), [A(S)], "last_axis")
_d("nn.standardize", lambda f, x: f(x, axis=0, epsilon=0.1), [A("4x3")], "axis0_eps")
_d("nn.standardize", lambda f, x, m, v: f(x, mean=m, variance=v), [A(S), A("3x1"),
                                                                    A("3x1", "pos")],
   "given_moments")
_Q, _KV, _KV1 = "1x2x2x2", "1x3x2x2", "1x3x1x2"     # [B, T, N, H], [B, S, K, H]
_d("nn.dot_product_attention", lambda f, q, k, v: f(q, k, v), [A(_Q), A(_KV), A(_KV)],
   "plain")
_d("nn.dot_product_attention", lambda f, q, k, v, b: f(q, k, v, bias=b, is_causal=True),
   [A(_Q), A(_KV), A(_KV), A("1x2x2x3")], "causal_bias")
_d("nn.dot_product_attention", lambda f, q, k, v, m: f(q, k, v, mask=m, scale=0.7),
   [A(_Q), A(_KV1), A(_KV1), C(np.array([[[[True, False, True], [False, True, True]]]]))],
   "mask_grouped_heads")
_v("nn.initializers.zeros", lambda f, x: f(None, x.shape, x.dtype) + x, [A("2x3")], "2x3")
_v("nn.initializers.zeros", lambda f, x: f(None, 4, x.dtype) * x, [A("")], "int_shape")
_v("nn.initializers.ones", lambda f, x: f(None, x.shape, x.dtype) + x, [A("2x3")], "2x3")
_v("nn.initializers.ones", lambda f, x: f(None, (3, 1), x.dtype) * x, [A("")], "3x1")
_v("nn.initializers.constant", lambda f, x: f(0.5)(None, x.shape, x.dtype) + x, [A("2x3")],
   "half")
_v("nn.initializers.constant", lambda f, x: f(-2.0, x.dtype)(None, (2, 2)) * x, [A("")],
   "dtype_at_factory")


def _scipy_ref(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """scipy's function `name` (dotted) under `call`, cast to the float inputs' type."""
    import scipy.special
    import scipy.stats

    fn: Any = scipy
    for part in name.split("."):
        fn = getattr(fn, part)

    def ref(*xs: Any) -> Any:
        out = call(fn, *xs)
        dt = np.result_type(*[x for x in xs if np.asarray(x).dtype.kind == "f"])
        return np.asarray(out).astype(dt) if np.asarray(out).dtype.kind == "f" else out

    return ref


def _sp(func: str, call: Callable[..., Any], args: Sequence[A | C], label: str,
        **kw: Any) -> None:
    kw.setdefault("ref", _scipy_ref(func.split(".", 1)[1], call))
    _d(func, call, args, label, **kw)


_UNIT_P = lambda x: 0.5 + 0.45 * x  # noqa: E731 - a probability from a "unit" draw
for _name in ("erf", "erfc", "expit"):
    _sp(f"scipy.special.{_name}", lambda f, x: f(x), [A(S)], "real")
    _sp(f"scipy.special.{_name}", lambda f, x: f(x), [A(value=[[-6.0, -1.5, 0.0],
                                                               [0.5, 3.0, 9.0]])], "tails")
_sp("scipy.special.erfinv", lambda f, x: f(x), [A(S, "unit")], "unit")
_sp("scipy.special.erfinv", lambda f, x: f(x), [A(value=[[0.0, -0.95, 1e-4], [0.6, 0.95, -0.3]])],
    "tails")
_sp("scipy.special.gammaln", lambda f, x: f(x), [A(S, "pos")], "pos")
_sp("scipy.special.gammaln", lambda f, x: f(x), [A(value=[[-2.5, -0.3, 1.0], [2.0, 15.5, 40.25]])],
    "negative_large")
_sp("scipy.special.digamma", lambda f, x: f(x), [A(S, "pos")], "pos")
_sp("scipy.special.digamma", lambda f, x: f(x), [A(value=[[-1.5, -0.7, 0.1], [1.4616, 13.0, 25.5]])],
    "negative_large")
_sp("scipy.special.xlogy", lambda f, x, y: f(x, y), [A(S), A(S, "pos")], "real_pos")
_sp("scipy.special.xlogy", lambda f, x, y: f(x, y), [A(value=[[0.0, 1.5], [0.0, -2.0]]),
                                                      A(value=[[0.5, 2.0], [1.0, 3.0]])],
    "x_zero")
_sp("scipy.special.xlog1py", lambda f, x, y: f(x, y), [A(S), A(S, "unit")], "real_unit")
_sp("scipy.special.xlog1py", lambda f, x, y: f(x, y), [A(value=[[0.0, 1.5], [0.0, -2.0]]),
                                                        A(value=[[0.5, -0.5], [-0.25, 3.0]])],
    "x_zero")
_sp("scipy.special.logit", lambda f, x: f(_UNIT_P(x)), [A(S, "unit")], "unit")
_sp("scipy.special.logit", lambda f, x: f(_UNIT_P(x)), [A("", "unit")], "0d")
_sp("scipy.special.logsumexp", lambda f, x: f(x), [A(S, "wide")], "all")
_sp("scipy.special.logsumexp", lambda f, x: f(x, axis=0, keepdims=True), [A(S)], "axis0_keep")
_sp("scipy.special.logsumexp", lambda f, x, b: f(x, axis=1, b=b), [A(S), A(S, "pos")],
    "b_pos")
_sp("scipy.special.logsumexp",
    lambda f, x, b: (lambda r: r[0] * r[1])(f(x, axis=1, b=b, return_sign=True)),
    [A(S), A(value=[[1.0, -0.5, 2.0, 0.25], [-1.0, -2.0, 0.5, 0.3], [0.7, 0.2, -0.1, 1.5]])],
    "b_signed_return_sign")

_sp("scipy.stats.norm.logpdf", lambda f, x: f(x), [A(S, "wide")], "standard")
_sp("scipy.stats.norm.logpdf", lambda f, x, m, s: f(x, m, s), [A(S), A("4"), A("3x1", "pos")],
    "loc_scale")
_sp("scipy.stats.norm.pdf", lambda f, x: f(x), [A(S)], "standard")
_sp("scipy.stats.norm.pdf", lambda f, x, m, s: f(x, m, s), [A(S), A(""), A("", "pos")],
    "loc_scale")
_sp("scipy.stats.norm.cdf", lambda f, x: f(x), [A(S, "wide")], "wide")
_sp("scipy.stats.norm.cdf", lambda f, x, m, s: f(x, m, s), [A(S), A("4"), A("", "pos")],
    "loc_scale")
_sp("scipy.stats.norm.logcdf", lambda f, x: f(x), [A(S, "wide")], "wide")
_sp("scipy.stats.norm.logcdf", lambda f, x: f(x),
    [A(value=[[-40.0, -12.0, -9.9], [0.5, 4.0, 12.0]])], "tails")
_sp("scipy.stats.norm.logcdf", lambda f, x, m, s: f(x, m, s), [A(S), A(""), A("", "pos")],
    "loc_scale")
_sp("scipy.stats.norm.ppf", lambda f, x: f(_UNIT_P(x)), [A(S, "unit")], "unit")
def _exp(x: Any) -> Any:
    """exp in the module of x (numpy, jax or ours), for calls that transform an input."""
    if isinstance(x, (np.ndarray, np.generic)):
        return np.exp(x)
    if type(x).__module__.startswith("jax"):
        import jax.numpy as jnp
        return jnp.exp(x)
    from mlir_autodiff import numpy as anp
    return anp.exp(x)


# small tail probabilities as exp(x): finite differences stay inside (0, 1)
_sp("scipy.stats.norm.ppf", lambda f, x, m, s: f(_exp(x), m, s),
    [A(value=[[-23.0, -7.0], [-0.7, -0.05]]), A(""), A("", "pos")], "tails_loc_scale")


def _spd_inputs(batch: tuple[int, ...], n: int, fixed_mean: bool = False
                ) -> Callable[[np.random.Generator], list[np.ndarray]]:
    def draw(rng: np.random.Generator) -> list[np.ndarray]:
        r32 = lambda a: np.asarray(a, np.float32).astype(np.float64)  # noqa: E731
        m = rng.standard_normal((n, n))
        return [r32(rng.standard_normal(batch + (n,))), r32(rng.standard_normal(n)),
                r32(m @ m.T / n + np.eye(n))]
    return draw


for _name in ("logpdf", "pdf"):
    _sp(f"scipy.stats.multivariate_normal.{_name}", lambda f, x, m, c: f(x, m, c),
        [A("3x2"), A("2"), A("2x2")], "batch_n2",
        ref=_scipy_ref(f"stats.multivariate_normal.{_name}",
                       lambda f, x, m, c: f(x, m, (c + c.T) / 2)),
        inputs=_spd_inputs((3,), 2))
    _sp(f"scipy.stats.multivariate_normal.{_name}", lambda f, x, m, c: f(x, m, c),
        [A("3"), C(A("3")), A("3x3")], "single_n3",
        ref=_scipy_ref(f"stats.multivariate_normal.{_name}",
                       lambda f, x, m, c: f(x, m, (c + c.T) / 2)),
        inputs=_spd_inputs((), 3))

_K01 = C(np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]], np.int32))
for _name in ("logpmf", "pmf"):
    _sp(f"scipy.stats.bernoulli.{_name}", lambda f, k, x: f(k, _UNIT_P(x)), [_K01, A(S, "unit")],
        "int_k")
    _sp(f"scipy.stats.bernoulli.{_name}", lambda f, k, x: f(k, _UNIT_P(x), 1),
        [C(np.array([1.0, 2.0, 2.0, 1.0])), A("4", "unit")], "float_k_loc")
_v("scipy.stats.bernoulli.logpmf", lambda f, k, x: f(k, x),
   [[-1, 2, 0, 1], A(value=[0.3, 0.6, 0.25, 0.8])], "outside_support",
   ref=_scipy_ref("stats.bernoulli.logpmf", lambda f, k, x: f(k, x)))


def _np_categorical(k: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.broadcast_to(p, np.broadcast_shapes(k.shape, p.shape[:-1]) + p.shape[-1:])
    k = np.broadcast_to(k, p.shape[:-1])
    inside = (k >= 0) & (k < p.shape[-1])
    picked = np.take_along_axis(p, np.clip(k, 0, p.shape[-1] - 1)[..., None], -1)[..., 0]
    return np.where(inside, np.log(np.where(inside, picked, 1.0)), -np.inf)


def _jax_categorical(k: Any, p: Any) -> Any:
    import jax.numpy as jnp
    p = jnp.broadcast_to(p, jnp.broadcast_shapes(k.shape, p.shape[:-1]) + p.shape[-1:])
    picked = jnp.take_along_axis(p, jnp.clip(k, 0, p.shape[-1] - 1)[..., None], -1)[..., 0]
    return jnp.log(picked)


_norm_rows = lambda x: x / x.sum(-1, keepdims=True)  # noqa: E731
for _name, _post, _jpost in (("logpmf", lambda v: v, lambda v: v),
                              ("pmf", np.exp, lambda v: __import__("jax").numpy.exp(v))):
    _d(f"scipy.stats.categorical.{_name}", lambda f, k, x: f(k, _norm_rows(x)),
       [C(np.array([0, 3, 2], np.int32)), A(S, "pos")], "rows",
       ref=lambda k, x, post=_post: post(_np_categorical(k, _norm_rows(x))).astype(x.dtype),
       jref=lambda k, x, jpost=_jpost: jpost(_jax_categorical(k, _norm_rows(x))))
    _d(f"scipy.stats.categorical.{_name}", lambda f, k, x: f(k, _norm_rows(x)),
       [C(np.array([[1, 0], [2, 2]], np.int32)), A("3", "pos")], "shared_p",
       ref=lambda k, x, post=_post: post(_np_categorical(k, _norm_rows(x))).astype(x.dtype),
       jref=lambda k, x, jpost=_jpost: jpost(_jax_categorical(k, _norm_rows(x))))
_v("scipy.stats.categorical.logpmf", lambda f, k, x: f(k, x), [[-1, 3, 1], A("3", "pos")],
   "outside_support", ref=lambda k, x: _np_categorical(k, x).astype(x.dtype))



# ---- linalg (issue 20 item 4)
# numpy.linalg and scipy.linalg: matrices well conditioned by construction (x + 3I,
# x x^T + 3I), symmetric inputs built inside the call (numpy reads one triangle,
# jax symmetrizes), eigen/singular vectors compared squared (their signs are free).
_I3 = np.eye(3)
_d("numpy.linalg.solve", lambda f, a, b: f(a + 3 * _I3, b), [A("3x3"), A("3")], "vector_rhs")
_d("numpy.linalg.solve", lambda f, a, b: f(a + 3 * _I3, b), [A("2x3x3"), A("2x3x2")],
   "batched_matrix_rhs")
_d("numpy.linalg.inv", lambda f, a: f(a + 3 * _I3), [A("3x3")], "3x3")
_d("numpy.linalg.inv", lambda f, a: f(a), [A(value=[[2.0, 1.0], [0.5, -1.5]])], "pivoting")
_d("numpy.linalg.det", lambda f, a: f(a), [A("3x3")], "3x3")
_d("numpy.linalg.det", lambda f, a: f(a), [A("2x2x2")], "batched")
_d("numpy.linalg.slogdet", lambda f, a: f(a)[1], [A("3x3")], "logabsdet")
_d("numpy.linalg.slogdet", lambda f, a: f(a)[0] * f(a)[1], [A("4x4")], "sign_times_logabsdet")
_d("numpy.linalg.cholesky", lambda f, a: f(a @ a.T + 3 * _I3), [A("3x3")], "spd")
_d("numpy.linalg.cholesky", lambda f, a: f(a + 2 * np.eye(4)), [A(value=np.tril(
    [[1.0, 0, 0, 0], [0.3, 1.2, 0, 0], [-0.2, 0.4, 0.9, 0], [0.1, -0.3, 0.2, 1.1]]))],
   "lower_triangle_read", jref=lambda a: _jax_lower_cholesky(a + 2 * np.eye(4)))
_d("numpy.linalg.qr", lambda f, a: f(a)[0], [A("4x3")], "reduced_q")
_d("numpy.linalg.qr", lambda f, a: f(a)[1], [A("3x3")], "square_r")
_d("numpy.linalg.eigh", lambda f, a: f(a + a.T)[0], [A("3x3")], "eigenvalues")
_d("numpy.linalg.eigh", lambda f, a: f(a + a.T)[1] ** 2, [A("3x3")], "eigenvectors_squared")
_d("numpy.linalg.eigvalsh", lambda f, a: f(a), [A("3x3")], "lower",
   jref=lambda a: _jax_eigvalsh_of(a, "L"))
_d("numpy.linalg.eigvalsh", lambda f, a: f(a, UPLO="U"), [A("3x3")], "upper",
   jref=lambda a: _jax_eigvalsh_of(a, "U"))
_d("numpy.linalg.svd", lambda f, a: f(a, compute_uv=False), [A("4x3")], "values")
_d("numpy.linalg.svd", lambda f, a: f(a, full_matrices=False)[0] ** 2, [A("3x4")],
   "u_squared_wide")
_d("numpy.linalg.norm", lambda f, x: f(x), [A("3x4")], "fro_default")
_d("numpy.linalg.norm", lambda f, x: f(x, 3, axis=1), [A("3x4")], "vector_p3_axis1")
_d("numpy.linalg.norm", lambda f, x: f(x, np.inf), [A("2x3")], "matrix_inf")
_d("numpy.linalg.norm", lambda f, x: f(x, -1, axis=(2, 0), keepdims=True), [A("3x2x2")],
   "matrix_minus1_keepdims")
_d("scipy.linalg.solve_triangular", lambda f, a, b: f(a + 3 * _I3, b, lower=True),
   [A("3x3"), A("3x2")], "lower")
_d("scipy.linalg.solve_triangular",
   lambda f, a, b: f(a, b, trans=1, unit_diagonal=True), [A("3x3"), A("3")], "upper_trans_unit")
_d("scipy.linalg.cholesky", lambda f, a: f(a @ a.T + 3 * _I3), [A("3x3")], "upper")
_d("scipy.linalg.cholesky", lambda f, a: f(a @ a.T + 3 * _I3, lower=True), [A("3x3")], "lower")


def _jax_eigvalsh_of(a: Any, uplo: str) -> Any:
    """numpy reads one triangle; jax symmetrizes: give jax the matrix numpy reads."""
    import jax.numpy as jnp

    t = jnp.tril(a) if uplo == "L" else jnp.triu(a)
    return jnp.linalg.eigvalsh(t + t.T - jnp.diag(jnp.diag(t)))


def _jax_lower_cholesky(a: Any) -> Any:
    """numpy reads the lower triangle; jax symmetrizes: give jax the matrix numpy reads."""
    import jax.numpy as jnp

    return jnp.linalg.cholesky(jnp.tril(a) + jnp.tril(a, -1).T)


def _np_cho_factor(a: np.ndarray, lower: bool) -> np.ndarray:
    """scipy's factor with its unused triangle (arbitrary data) zeroed."""
    import scipy.linalg

    c, _ = scipy.linalg.cho_factor(a @ a.T + 3 * _I3, lower=lower)
    return np.tril(c) if lower else np.triu(c)


def _jax_cho_factor(a: Any, lower: bool) -> Any:
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    c, _ = jsl.cho_factor(a @ a.T + 3 * _I3, lower=lower)
    return jnp.tril(c) if lower else jnp.triu(c)


for _low in (True, False):
    _d("scipy.linalg.cho_factor", lambda f, a, lo=_low: f(a @ a.T + 3 * _I3, lower=lo)[0],
       [A("3x3")], "lower" if _low else "upper",
       ref=lambda a, lo=_low: _np_cho_factor(a, lo),
       jref=lambda a, lo=_low: _jax_cho_factor(a, lo))
_d("scipy.linalg.cho_solve", lambda f, c, b: f((c + 3 * _I3, True), b), [A("3x3"), A("3x2")],
   "lower")
_d("scipy.linalg.cho_solve", lambda f, c, b: f((c + 3 * _I3, False), b), [A("3x3"), A("3")],
   "upper")

# The factorizations are loops: one combined compile takes ~20 s, so these rows run
# in float64 only; test_linalg checks every function's float32 value and gradient.
for _case in DIFF[_COMPOSITES:]:
    _case.f32_jit_only = True
    if _case.func.startswith(("numpy.linalg.", "scipy.linalg.")):
        _case.no_f32 = True


# ---- laxops (issue 20 item 6)
# jax.lax's everyday operations (lax_ops.py). LAX_REF gets plain numpy
# definitions written from lax's contracts (integer division truncating, C
# remainder, ties away from zero, (low, high, interior) padding, saturating
# float -> int conversion); jax.lax's same-named function is the jax oracle.
# One D row per differentiable function plus one cheap row; composites of
# functions with their own rows elsewhere run float32 under jit only.

def _np_trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, -1, np.where((a < 0) != (b < 0), -q, q)).astype(a.dtype)


def _np_c_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.fmod(a, b)
    return np.where(b == 0, a, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _np_lax_round(x: np.ndarray, method: int = 0) -> np.ndarray:
    """Ties to even, or away from zero by exact decimal rounding of each float."""
    import decimal
    if method:
        return np.rint(x)
    half_up = [float(decimal.Decimal(v).quantize(0, decimal.ROUND_HALF_UP)) for v in x.ravel().tolist()]
    return np.asarray(half_up, x.dtype).reshape(x.shape)


def _np_lax_pad(x: np.ndarray, value: Any, config: Any) -> np.ndarray:
    for ax, (lo, hi, it) in enumerate(config):
        n = x.shape[ax]
        shape = list(x.shape)
        shape[ax] = n + (n - 1) * it if n else 0
        spread = np.full(shape, value, x.dtype)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(None, None, it + 1)
        spread[tuple(idx)] = x
        parts = [np.full(shape[:ax] + [max(lo, 0)] + shape[ax + 1:], value, x.dtype), spread,
                 np.full(shape[:ax] + [max(hi, 0)] + shape[ax + 1:], value, x.dtype)]
        x = np.concatenate(parts, axis=ax)
        idx[ax] = slice(max(-lo, 0), x.shape[ax] - max(-hi, 0))
        x = x[tuple(idx)]
    return x


def _np_dot_general(a: np.ndarray, b: np.ndarray, dims: Any, **_: Any) -> np.ndarray:
    (lc, rc), (lb, rb) = dims
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [next(letters) for _ in range(a.ndim)]
    ra = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(list(lc) + list(lb), list(rc) + list(rb)):
        ra[j] = la[i]
    out = [la[i] for i in lb] + [la[i] for i in range(a.ndim) if i not in (*lc, *lb)] + \
        [ra[j] for j in range(b.ndim) if j not in (*rc, *rb)]
    return np.einsum(f"{''.join(la)},{''.join(ra)}->{''.join(out)}", a, b)


def _np_bid(x: np.ndarray, shape: Any, dims: Any) -> np.ndarray:
    inter = [1] * len(shape)
    for i, d in enumerate(dims):
        inter[d] = x.shape[i]
    return np.broadcast_to(x.reshape(inter), tuple(shape))


def _np_cet(x: np.ndarray, dt: Any) -> np.ndarray:
    dt = np.dtype(dt)
    if x.dtype.kind == "f" and dt.kind == "i":
        info = np.iinfo(dt)
        x = x.astype(np.float64)  # int32's max is not a float32 (it rounds up to 2**31)
        with np.errstate(invalid="ignore"):
            y = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
        return np.where(y >= info.max, info.max, np.where(y <= info.min, info.min,
                                                          np.trunc(y))).astype(dt)
    return x.astype(dt)


def _np_shift(kind: str) -> Callable[..., np.ndarray]:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = a.dtype.itemsize * 8
        out = []
        for x, s in zip(a.ravel().tolist(), b.ravel().tolist()):
            u = x % (1 << bits)
            if kind == "left":
                r = 0 if not 0 <= s < bits else (u << s) % (1 << bits)
            elif kind == "logical":
                r = 0 if not 0 <= s < bits else u >> s
            else:
                r = (x >> min(max(s, 0), bits - 1)) if 0 <= s < bits else (-1 if x < 0 else 0)
            out.append(r - (1 << bits) if r >= 1 << (bits - 1) else r)
        return np.asarray(out, a.dtype).reshape(a.shape)
    return f


_NP_MONOID = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _np_reduce(x: np.ndarray, init: Any, comp: Any, dims: Any) -> np.ndarray:
    kind = {operator.add: "add", operator.mul: "mul"}[comp]
    return _NP_MONOID[kind](_NP_MONOID[kind].reduce(x, axis=tuple(dims)), np.asarray(init, x.dtype))


def _np_assoc_scan(fn: Callable[..., Any], elems: Any, reverse: bool = False,
                   axis: int = 0) -> Any:
    leaves = list(elems) if isinstance(elems, tuple) else [elems]
    n = leaves[0].shape[axis]
    order = range(n - 1, -1, -1) if reverse else range(n)
    take = lambda v, i: np.take(v, [i], axis=axis)  # noqa: E731
    acc, outs = None, {}
    for i in order:
        cur = [take(v, i) for v in leaves]
        cur_t = tuple(cur) if isinstance(elems, tuple) else cur[0]
        acc = cur_t if acc is None else fn(acc, cur_t)
        outs[i] = list(acc) if isinstance(elems, tuple) else [acc]
    res = [np.concatenate([outs[i][k] for i in range(n)], axis=axis) for k in range(len(leaves))]
    return tuple(res) if isinstance(elems, tuple) else res[0]


def _sp(name: str) -> Callable[..., Any]:
    def f(x: np.ndarray) -> np.ndarray:
        import scipy.special
        return getattr(scipy.special, name)(x).astype(x.dtype)
    return f


def _axes_red(fn: Callable[..., Any], keep: bool = False) -> Callable[..., Any]:
    """numpy's reduction over lax's axes tuple (`keep`: in the operand's dtype, as lax)."""
    return lambda x, axes: fn(x, axis=tuple(axes), **({"dtype": x.dtype} if keep else {}))

LAX_REF.update({
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _np_trunc_div,
    "rem": _np_c_rem, "max": np.maximum, "min": np.minimum, "neg": np.negative,
    "abs": np.abs, "sign": np.sign, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log1p": np.log1p, "expm1": np.expm1, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt, "square": np.square,
    "reciprocal": np.reciprocal, "integer_pow": lambda x, n: x ** n, "pow": np.power,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "erf": _sp("erf"), "erfc": _sp("erfc"),
    "floor": np.floor, "ceil": np.ceil, "round": _np_lax_round, "is_finite": np.isfinite,
    "clamp": lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "bitwise_not": np.invert,
    "shift_left": _np_shift("left"), "shift_right_logical": _np_shift("logical"),
    "shift_right_arithmetic": _np_shift("arithmetic"),
    "reduce_sum": _axes_red(np.sum, True), "reduce_prod": _axes_red(np.prod, True),
    "reduce_max": _axes_red(np.max), "reduce_min": _axes_red(np.min),
    "reduce_and": lambda x, a: (np.all if x.dtype == bool else np.bitwise_and.reduce)(
        x, axis=tuple(a)),
    "reduce_or": lambda x, a: (np.any if x.dtype == bool else np.bitwise_or.reduce)(
        x, axis=tuple(a)),
    "reduce_xor": lambda x, a: np.bitwise_xor.reduce(x, axis=tuple(a)),
    "reduce": _np_reduce,
    "argmax": lambda x, ax, dt: np.argmax(x, ax).astype(dt),
    "argmin": lambda x, ax, dt: np.argmin(x, ax).astype(dt),
    "dot": lambda a, b, **_: np.dot(a, b), "dot_general": _np_dot_general,
    "batch_matmul": np.matmul, "transpose": np.transpose,
    "reshape": lambda x, s, d=None: np.reshape(x if d is None else np.transpose(x, d), s),
    "broadcast": lambda x, s: np.broadcast_to(x, tuple(s) + x.shape),
    "broadcast_in_dim": _np_bid, "squeeze": lambda x, d: np.squeeze(x, tuple(d)),
    "expand_dims": lambda x, d: np.expand_dims(x, tuple(d)),
    "concatenate": np.concatenate, "pad": _np_lax_pad,
    "slice": lambda x, s, e, st=None: x[tuple(
        slice(a, b, c) for a, b, c in zip(s, e, st or [1] * x.ndim))],
    "slice_in_dim": lambda x, s, e, st=1, axis=0: np.take(
        x, range(x.shape[axis])[slice(s, e, st)], axis=axis),
    "index_in_dim": lambda x, i, axis=0, keepdims=True: (
        np.take(x, [i], axis=axis) if keepdims else np.take(x, i, axis=axis)),
    "rev": lambda x, d: np.flip(x, tuple(d)),
    "collapse": lambda x, s, e=None: x.reshape(
        x.shape[:s] + (-1,) + (x.shape[e:] if e is not None else ())),
    "iota": lambda dt, n: np.arange(n, dtype=dt),
    "full": lambda s, v, dt=None: np.full(s, v, dt),
    "full_like": lambda x, v, dt=None, shape=None: np.full(
        x.shape if shape is None else shape, v, x.dtype if dt is None else dt),
    "convert_element_type": _np_cet, "stop_gradient": lambda x: x,
    "associative_scan": _np_assoc_scan,
})

_LO = len(DIFF)
_XI = [7, -7, 7, -7, 0, 5]
_YI = [2, 2, -2, -2, 3, 0]
for _name, _dom in (("exp", "real"), ("exp2", "real"), ("log", "pos"), ("log1p", "unit"),
                    ("expm1", "real"), ("sin", "real"), ("cos", "real"), ("tan", "unit"),
                    ("asin", "unit"), ("acos", "unit"), ("atan", "real"), ("sinh", "real"),
                    ("cosh", "real"), ("tanh", "real"), ("asinh", "real"), ("acosh", "gt1"),
                    ("atanh", "unit"), ("sqrt", "pos"), ("rsqrt", "pos"), ("cbrt", "nonzero"),
                    ("square", "real"), ("reciprocal", "nonzero"), ("logistic", "wide"),
                    ("erf", "real"), ("erfc", "real"), ("neg", "real"), ("abs", "nonzero"),
                    ("sign", "nonzero"), ("floor", "nonint"), ("ceil", "nonint"),
                    ("round", "nonint")):
    _d(f"lax.{_name}", lambda f, x: f(x), [A("5", _dom)], "5")
    _v(f"lax.{_name}", lambda f, x: f(x), [A("", _dom)], "0d")
for _name, _d1, _d2 in (("add", "real", "real"), ("sub", "real", "real"),
                        ("mul", "real", "real"), ("div", "real", "nonzero"),
                        ("rem", "real", "nonzero"), ("max", "real", "real"),
                        ("min", "real", "real"), ("atan2", "real", "nonzero"),
                        ("pow", "pos", "real")):
    _d(f"lax.{_name}", lambda f, x, y: f(x, y), [A("2x3", _d1), A("1x3", _d2)], "bcast_size1")
    _v(f"lax.{_name}", lambda f, x: f(x, 1.5), [A("4", _d1)], "py_scalar")
for _name in ("div", "rem"):   # lax's integer semantics: truncation, the dividend's sign
    _v(f"lax.{_name}", lambda f, x, y: f(x, y), [np.array(_XI), np.array(_YI)], "int_trunc")
    _v(f"lax.{_name}", lambda f, x, y: f(x, y), [np.array(_XI, np.int32), np.array(_YI, np.int32)],
       "int32_trunc")
_d("lax.round", lambda f, x: f(x, 1), [A(value=[0.5, 1.5, 2.5, -0.5, -1.2, 3.7])], "to_even",
   nondiff=True)
_v("lax.round", lambda f, x: f(x), [A(value=[0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994])],
   "ties_away")
_d("lax.integer_pow", lambda f, x: f(x, 3), [A("5")], "cube")
_d("lax.integer_pow", lambda f, x: f(x, -2), [A("5", "nonzero")], "minus2")
_v("lax.integer_pow", lambda f, x: f(x, 5), [np.array([2, -3, 0, 1])], "int")
_d("lax.clamp", lambda f, x: f(-0.5, x, 0.7), [A("6")], "scalar_bounds")
_d("lax.clamp", lambda f, lo, x, hi: f(lo - 3.0, x, hi + 3.0), [A("5"), A("5", "wide"), A("5")],
   "array_bounds")
_d("lax.convert_element_type", lambda f, x: f(x, np.float64), [A("5")], "to_f64")
_v("lax.convert_element_type", lambda f, x: f(x, np.int32),
   [A(value=[1.7, -1.7, 3e10, -3e10, np.nan, 0.0])], "saturate")
_d("lax.stop_gradient", lambda f, x: x * f(x * x), [A("5")], "product", nondiff=True)
_d("lax.stop_gradient", lambda f, x, y: f(x) * y + x, [A("3"), A("3")], "two", nondiff=True)
for _name, _args, _lbl in (("eq", [_F34, _F34[::-1]], "float"), ("ne", [_F34, _F34[::-1]], "float"),
                           ("lt", [_I34, _I34[::-1]], "int"), ("le", [_F34, _F34[::-1]], "float"),
                           ("gt", [_I34, _I34[::-1]], "int"), ("ge", [_F34, _F34[::-1]], "float")):
    _v(f"lax.{_name}", lambda f, x, y: f(x, y), [np.array(a) for a in _args], _lbl)
    _v(f"lax.{_name}", lambda f, x: f(x, 0.5), [np.array(_F4)], "py_scalar")
_v("lax.is_finite", lambda f, x: f(x), [np.array(_FNAN)], "nan_inf")
_v("lax.is_finite", lambda f, x: f(x), [np.array(_FNAN, np.float32)], "f32")
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _v(f"lax.{_name}", lambda f, x, y: f(x, y), [np.array(_I34), np.array(_I34[::-1])], "int")
    _v(f"lax.{_name}", lambda f, x, y: f(x, y), [np.array(_B34), np.array(_B34[::-1])], "bool")
_v("lax.bitwise_not", lambda f, x: f(x), [np.array(_I34, np.int32)], "int")
_v("lax.bitwise_not", lambda f, x: f(x), [np.array(_B34)], "bool")
for _name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
    _v(f"lax.{_name}", lambda f, x, y: f(x, y),
       [np.array([-8, 8, 5, -1, 3], np.int32), np.array([1, 40, 0, 31, -1], np.int32)], "int32")
    _v(f"lax.{_name}", lambda f, x, y: f(x, y),
       [np.array([-8, 1 << 40, 5]), np.array([3, 20, 64])], "int64")
for _name in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min"):
    _d(f"lax.{_name}", lambda f, x: f(x, (0, 2)), [A("2x3x2")], "axes02")
    _v(f"lax.{_name}", lambda f, x: f(x, (1,)), [np.array(_I34, np.int32)], "int32")
for _name in ("reduce_and", "reduce_or", "reduce_xor"):
    _v(f"lax.{_name}", lambda f, x: f(x, (0,)), [np.array(_I34)], "int_axis0")
    _v(f"lax.{_name}", lambda f, x: f(x, (1,)), [np.array(_B34)], "bool_axis1")
_d("lax.reduce", lambda f, x: f(x, 0.0, operator.add, (1,)), [A("3x4")], "add")
_d("lax.reduce", lambda f, x: f(x, 1.5, operator.mul, (0, 1)), [A("2x3")], "mul_init")
_v("lax.reduce", lambda f, x: f(x, 0, operator.add, (0,)), [np.array(_I34)], "int_add")
_v("lax.argmax", lambda f, x: f(x, 1, np.int32), [A(value=[[1.0, 3.0, 3.0], [2.0, -1.0, 0.5]])],
   "ties")
_v("lax.argmax", lambda f, x: f(x, 0, np.int64), [np.array(_I34)], "int")
_v("lax.argmin", lambda f, x: f(x, 1, np.int32), [A(value=[[1.0, -3.0, -3.0], [2.0, -1.0, 0.5]])],
   "ties")
_v("lax.argmin", lambda f, x: f(x, 0, np.int64), [np.array(_I34)], "int")
_d("lax.dot", lambda f, a, b: f(a, b), [A("2x3"), A("3")], "mat_vec")
_v("lax.dot", lambda f, a, b: f(a, b), [A("3"), A("3x2")], "vec_mat")
_d("lax.dot_general", lambda f, a, b: f(a, b, (((2,), (1,)), ((0,), (0,)))),
   [A("2x3x2"), A("2x2x3")], "batched")
_d("lax.dot_general", lambda f, a, b: f(a, b, (((0,), (1,)), ((), ()))), [A("3x2"), A("2x3")],
   "contract_0_1")
_d("lax.batch_matmul", lambda f, a, b: f(a, b), [A("2x2x3"), A("2x3x2")], "3d")
_v("lax.batch_matmul", lambda f, a, b: f(a, b), [np.array([[[1, 2], [3, 4]]]),
                                                   np.array([[[5, 6], [7, 8]]])], "int")
_d("lax.transpose", lambda f, x: f(x, (2, 0, 1)), [A("2x3x2")], "201")
_v("lax.transpose", lambda f, x: f(x, (1, 0)), [np.array(_I34)], "int")
_d("lax.reshape", lambda f, x: f(x, (2, 6)), [A("3x4")], "2x6")
_d("lax.reshape", lambda f, x: f(x, (4, 3), (1, 0)), [A("3x4")], "dimensions")
_d("lax.broadcast", lambda f, x: f(x, (2,)), [A("3")], "lead2")
_v("lax.broadcast", lambda f, x: f(x, (2, 1)), [np.array(_I34)], "int")
_d("lax.broadcast_in_dim", lambda f, x: f(x, (2, 3, 2), (1,)), [A("3")], "middle")
_d("lax.broadcast_in_dim", lambda f, x: f(x, (2, 3), (0, 1)), [A("1x3")], "size1")
_d("lax.squeeze", lambda f, x: f(x, (0, 2)), [A("1x3x1")], "02")
_v("lax.squeeze", lambda f, x: f(x, (1,)), [np.array([[1], [2]])], "int")
_d("lax.expand_dims", lambda f, x: f(x, (0, 2)), [A("3")], "02")
_v("lax.expand_dims", lambda f, x: f(x, (-1,)), [np.array(_I34)], "neg")
_d("lax.concatenate", lambda f, x, y: f([x, y, x], 1), [A("2x2"), A("2x1")], "dim1")
_v("lax.concatenate", lambda f, x, y: f([x, y], 0), [np.array(_I34), np.array(_I34)], "int")
_d("lax.pad", lambda f, x: f(x, 0.5, [(1, -1, 1), (0, 2, 0)]), [A("3x2")], "interior_crop")
_d("lax.pad", lambda f, x, v: f(x, v, [(-1, 2, 2)]), [A("4"), A("")], "traced_value")
_v("lax.pad", lambda f, x: f(x, -1, [(2, 1, 1), (-1, 0, 0)]), [np.array(_I34)], "int")
_d("lax.slice", lambda f, x: f(x, (0, 1), (3, 4), (2, 2)), [A("3x4")], "strided")
_v("lax.slice", lambda f, x: f(x, (1, 0), (2, 3)), [np.array(_I34)], "int")
_d("lax.slice_in_dim", lambda f, x: f(x, 1, -1, 2, 1), [A("2x5")], "neg_limit")
_v("lax.slice_in_dim", lambda f, x: f(x, -2, None), [np.array(_I34)], "int")
_d("lax.index_in_dim", lambda f, x: f(x, -1, 1, False), [A("2x3")], "neg_drop")
_v("lax.index_in_dim", lambda f, x: f(x, 1), [np.array(_I34)], "keep")
_d("lax.rev", lambda f, x: f(x, (0, 1)), [A("2x3")], "both")
_v("lax.rev", lambda f, x: f(x, (1,)), [np.array(_I34)], "int")
_d("lax.collapse", lambda f, x: f(x, 1), [A("2x2x3")], "tail")
_v("lax.collapse", lambda f, x: f(x, 0, 2), [np.ones((2, 3, 2), np.int32)], "head")
_v("lax.iota", lambda f: f(np.int32, 5), [], "int32")
_v("lax.iota", lambda f: f(np.float64, 3), [], "float64")
_d("lax.full", lambda f, v: f((2, 3), v), [A("")], "traced_fill")
_v("lax.full", lambda f: f((2,), 3), [], "int")
_d("lax.full_like", lambda f, x, v: f(x, v) + x, [A("2x3"), A("")], "traced_fill")
_v("lax.full_like", lambda f, x: f(x, 2, np.int32, (3,)), [np.array(_F4)], "dtype_shape")
_d("lax.associative_scan", lambda f, x: f(operator.add, x), [A("5")], "add")
_d("lax.associative_scan", lambda f, a, b: (lambda o: o[0] + o[1])(f(
    lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1]), (a, b), reverse=True, axis=1)),
   [A("2x6", "unit"), A("2x6")], "linear_recurrence_reverse")
for _case in DIFF[_LO:]:
    _case.f32_jit_only = True


CASES: list[Case] = DIFF + VALUE
