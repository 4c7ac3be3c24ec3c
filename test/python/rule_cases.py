"""One small MLIR function per registered rule, for test_rule_registry_exec.py.

Every op name in the jvp, vjp, forward-augment and batching registries
(`transforms/rules/`) must occur in at least one case that runs the
transform; the test reads the op names from the parsed functions themselves,
so a case covers exactly the ops its IR holds.

A case is a function `@<id>(%a, %b, ... : float params) -> (results)`.
Elementwise ops come in two forms: on `tensor<3xf64>` as the front end
emits them (`tensor` family) and as scalar ops inside a `linalg.generic`
body over `tensor<3xf64>` (`generic` family). Integer and comparison ops,
which have no derivative, appear in value-and-zero-derivative cases: their
integer result feeds back into a float result, which is differentiated
(derivative zero through them, checked against finite differences away from
the jumps) and batched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

T3 = "tensor<3xf64>"
NAMES = ["%a", "%b", "%c", "%d"]


@dataclasses.dataclass
class Case:
    id: str
    family: str             # which compiled module the case lives in
    params: list[str]       # float types only (f64 or tensor<...xf64>)
    results: list[str]
    body: str               # uses %a, %b, ...; ends with `return`
    domain: tuple[float, float] = (-1.5, 1.5)
    order2: bool = True     # twice differentiable: check jvp∘vjp, vjp∘jvp, vjp∘vjp
    reverse: bool = True
    vmap: bool = True
    eps: float = 1e-6
    rtol: float = 1e-6
    #: tolerance of the transpose identity (both sides exact up to rounding)
    linear_rtol: float = 1e-9
    extra: str = ""         # helper functions the body calls
    #: Derivative oracle for ops whose derivative is not that of their value
    #: (stop_gradient): `frozen(xs0)` is a numpy function of xs whose central
    #: differences at xs0 are the expected jvp.
    frozen: Callable | None = None
    names: list[str] | None = None  # parameter names (default %a, %b, ...)

    def text(self) -> str:
        names = self.names or NAMES
        params = ", ".join(f"{names[i]}: {t}" for i, t in enumerate(self.params))
        return (f"func.func @{self.id}({params}) -> ({', '.join(self.results)}) {{\n"
                f"{self.body}\n}}\n{self.extra}")


class Ty:
    """Spelling of types and constants for one form: scalar (in a generic body) or tensor."""

    def __init__(self, tensor: bool):
        self.tensor = tensor

    def __call__(self, elt: str) -> str:
        return f"tensor<3x{elt}>" if self.tensor else elt

    @property
    def T(self) -> str:
        return self("f64")

    def c(self, value: str, elt: str = "f64") -> str:
        """The value and type part of an arith.constant."""
        return f"dense<{value}> : {self(elt)}" if self.tensor else f"{value} : {elt}"


@dataclasses.dataclass
class Elt:
    """An elementwise op: `body(ty)` computes %r from %a (%b, %c) of type ty.T."""

    id: str
    nargs: int
    body: Callable[[Ty], str]
    domain: tuple[float, float] = (-1.5, 1.5)
    order2: bool = True
    eps: float = 1e-6
    rtol: float = 1e-6
    linear_rtol: float = 1e-9


def _un(op: str, dom=(-1.5, 1.5), **kw) -> Elt:
    return Elt(op.split(".")[1], 1, lambda t: f"%r = {op} %a : {t.T}", dom, **kw)


def _bin(op: str, dom=(-1.5, 1.5), **kw) -> Elt:
    return Elt(op.split(".")[1], 2, lambda t: f"%r = {op} %a, %b : {t.T}", dom, **kw)


def _zero(op: str, dom=(-2.4, 2.4)) -> Elt:
    """A piecewise-constant op: its value times %a (derivative: the value)."""
    return Elt(op.split(".")[1], 1, lambda t: (f"%f = {op} %a : {t.T}\n"
                                               f"%r = arith.mulf %f, %a : {t.T}"), dom)


def _int(id_: str, ops: Callable[[Ty], str], dom=(0.15, 2.4)) -> Elt:
    """Integer ops between `%i = fptosi(10 a)`, `%j = fptosi(10 b) + 1` and a float result.

    `ops(t)` computes `%k` (i64 elements) from %i and %j; the result is
    `sitofp(%k) * a + b`, whose derivative is zero through the integer part.
    """
    def body(t: Ty) -> str:
        I = t("i64")  # noqa: E741
        return (f"%ten = arith.constant {t.c('10.0')}\n"
                f"%sa = arith.mulf %a, %ten : {t.T}\n%sb = arith.mulf %b, %ten : {t.T}\n"
                f"%i = arith.fptosi %sa : {t.T} to {I}\n"
                f"%j0 = arith.fptosi %sb : {t.T} to {I}\n"
                f"%one = arith.constant {t.c('1', 'i64')}\n"
                f"%j = arith.addi %j0, %one : {I}\n"
                f"{ops(t)}\n"
                f"%kf = arith.sitofp %k : {I} to {t.T}\n"
                f"%m = arith.mulf %kf, %a : {t.T}\n%r = arith.addf %m, %b : {t.T}")
    return Elt(id_, 2, body, dom)


def _ib(op: str) -> Callable[[Ty], str]:
    return lambda t: f"%k = {op} %i, %j : {t('i64')}"


ELEMENTWISE: list[Elt] = [
    # arith, float
    _bin("arith.addf"), _bin("arith.subf"), _bin("arith.mulf"),
    _bin("arith.divf", (0.5, 2.0)),
    Elt("negf", 1, lambda t: f"%s = arith.negf %a : {t.T}\n%r = arith.mulf %s, %a : {t.T}"),
    _bin("arith.maximumf"), _bin("arith.minimumf"), _bin("arith.maxnumf"),
    _bin("arith.minnumf"), _bin("arith.remf", (0.6, 2.0)),
    Elt("cmpf_select", 2, lambda t: (
        f"%p = arith.cmpf olt, %a, %b : {t.T}\n%s = arith.mulf %a, %a : {t.T}\n"
        f"%r = arith.select %p, %s, %b : {t('i1')}, {t.T}")),
    # a scalar predicate choosing between tensors
    Elt("select_scalar_pred", 2, lambda t: (
        f"%z = arith.constant 0.0 : f64\n%i0 = arith.constant 0 : index\n"
        f"%a0 = tensor.extract %a[%i0] : {t.T}\n%p = arith.cmpf olt, %a0, %z : f64\n"
        f"%s = math.sin %a : {t.T}\n%r = arith.select %p, %b, %s : {t.T}") if t.tensor else
        "%p = arith.cmpf ogt, %a, %b : f64\n%r = arith.select %p, %b, %a : f64"),
    Elt("constant", 1, lambda t: (f"%k = arith.constant {t.c('2.5')}\n"
                                  f"%r = arith.mulf %a, %k : {t.T}")),
    Elt("fptosi_sitofp", 1, lambda t: (
        f"%i = arith.fptosi %a : {t.T} to {t('i32')}\n"
        f"%f = arith.sitofp %i : {t('i32')} to {t.T}\n%r = arith.mulf %f, %a : {t.T}"),
        (-2.9, 2.9)),
    Elt("fptoui_uitofp", 1, lambda t: (
        f"%i = arith.fptoui %a : {t.T} to {t('i32')}\n"
        f"%f = arith.uitofp %i : {t('i32')} to {t.T}\n%r = arith.mulf %f, %a : {t.T}"),
        (0.1, 2.9)),
    # f64 -> f32 -> f64 rounds: finite differences need a step far above f32's ulp.
    Elt("truncf_extf", 2, lambda t: (
        f"%x = arith.truncf %a : {t.T} to {t('f32')}\n"
        f"%y = arith.extf %x : {t('f32')} to {t.T}\n%r = arith.mulf %y, %b : {t.T}"),
        order2=False, eps=1e-3, rtol=1e-3, linear_rtol=1e-6),
    # arith, integer (batched; no derivative)
    _int("addi_subi_muli", lambda t: (
        f"%k0 = arith.addi %i, %j : {t('i64')}\n%k1 = arith.subi %k0, %i : {t('i64')}\n"
        f"%k = arith.muli %k1, %i : {t('i64')}")),
    _int("divsi", _ib("arith.divsi")), _int("divui", _ib("arith.divui")),
    _int("remsi", _ib("arith.remsi")), _int("remui", _ib("arith.remui")),
    _int("andi", _ib("arith.andi")), _int("ori", _ib("arith.ori")),
    _int("xori", _ib("arith.xori")), _int("maxsi", _ib("arith.maxsi")),
    _int("minsi", _ib("arith.minsi")),
    _int("shifts", lambda t: (
        f"%s = arith.constant {t.c('1', 'i64')}\n%k0 = arith.shli %i, %s : {t('i64')}\n"
        f"%k1 = arith.shrsi %k0, %s : {t('i64')}\n%k2 = arith.shrui %j, %s : {t('i64')}\n"
        f"%k = arith.addi %k1, %k2 : {t('i64')}")),
    _int("cmpi_select", lambda t: (
        f"%p = arith.cmpi slt, %i, %j : {t('i64')}\n"
        f"%k = arith.select %p, %i, %j : {t('i1')}, {t('i64')}")),
    _int("ext_trunc", lambda t: (
        f"%n = arith.trunci %i : {t('i64')} to {t('i32')}\n"
        f"%u = arith.extui %n : {t('i32')} to {t('i64')}\n"
        f"%s = arith.extsi %n : {t('i32')} to {t('i64')}\n"
        f"%k = arith.addi %u, %s : {t('i64')}")),
    _int("index_cast", lambda t: (
        f"%n = arith.index_cast %i : {t('i64')} to {t('index')}\n"
        f"%k = arith.index_cast %n : {t('index')} to {t('i64')}")),
    # i64 -> f64 bitcast: a float with integer operands is inactive (the bits
    # of a small positive integer are a positive denormal).
    _int("bitcast", lambda t: (
        f"%f = arith.bitcast %i : {t('i64')} to {t.T}\n%z = arith.constant {t.c('0.0')}\n"
        f"%p = arith.cmpf ogt, %f, %z : {t.T}\n"
        f"%k = arith.select %p, %j, %i : {t('i1')}, {t('i64')}")),
    _int("maxui_minui", lambda t: (
        f"%k0 = arith.maxui %i, %j : {t('i64')}\n%k = arith.minui %k0, %i : {t('i64')}")),
    _int("rounding_divisions", lambda t: (
        f"%k0 = arith.ceildivsi %i, %j : {t('i64')}\n%k1 = arith.ceildivui %i, %j : {t('i64')}\n"
        f"%k2 = arith.floordivsi %i, %j : {t('i64')}\n%k3 = arith.addi %k0, %k1 : {t('i64')}\n"
        f"%k = arith.addi %k3, %k2 : {t('i64')}")),
    _int("index_castui", lambda t: (
        f"%n = arith.index_castui %i : {t('i64')} to {t('index')}\n"
        f"%k = arith.index_castui %n : {t('index')} to {t('i64')}")),
    _int("extended", lambda t: (
        f"%k0, %ov = arith.addui_extended %i, %j : {t('i64')}, {t('i1')}\n"
        f"%k1, %h1 = arith.mulsi_extended %i, %j : {t('i64')}\n"
        f"%k2, %h2 = arith.mului_extended %i, %j : {t('i64')}\n"
        f"%k3 = arith.addi %k0, %k1 : {t('i64')}\n%k4 = arith.addi %k3, %k2 : {t('i64')}\n"
        f"%k = arith.addi %k4, %h2 : {t('i64')}")),
    # math, integer (batched; no derivative)
    _int("math_integer", lambda t: (
        f"%two = arith.constant {t.c('2', 'i64')}\n%n = arith.subi %two, %j : {t('i64')}\n"
        f"%k0 = math.absi %n : {t('i64')}\n%k1 = math.ctlz %i : {t('i64')}\n"
        f"%k2 = math.ctpop %j : {t('i64')}\n%k3 = math.cttz %j : {t('i64')}\n"
        f"%k4 = math.ipowi %i, %two : {t('i64')}\n%s0 = arith.addi %k0, %k1 : {t('i64')}\n"
        f"%s1 = arith.addi %s0, %k2 : {t('i64')}\n%s2 = arith.addi %s1, %k3 : {t('i64')}\n"
        f"%k = arith.addi %s2, %k4 : {t('i64')}")),
    # float classification (i1 results): every value here is finite and normal
    Elt("classify", 2, lambda t: (
        f"%p0 = math.isfinite %a : {t.T}\n%p1 = math.isnormal %b : {t.T}\n"
        f"%p2 = math.isinf %a : {t.T}\n%p3 = math.isnan %b : {t.T}\n"
        f"%q0 = arith.andi %p0, %p1 : {t('i1')}\n%q1 = arith.ori %p2, %p3 : {t('i1')}\n"
        f"%q = arith.xori %q0, %q1 : {t('i1')}\n%s = arith.mulf %a, %a : {t.T}\n"
        f"%r = arith.select %q, %s, %b : {t('i1')}, {t.T}"), (0.2, 1.5)),
    # math
    _un("math.exp"), _un("math.exp2"), _un("math.expm1"),
    _un("math.log", (0.2, 3.0)), _un("math.log1p", (-0.5, 2.0)), _un("math.log2", (0.2, 3.0)),
    _un("math.log10", (0.2, 3.0)), _un("math.sin"), _un("math.cos"),
    _un("math.tan", (-1.0, 1.0)), _un("math.tanh"), _un("math.sinh"), _un("math.cosh"),
    _un("math.atan"), _un("math.asin", (-0.9, 0.9)), _un("math.acos", (-0.9, 0.9)),
    _un("math.asinh"), _un("math.acosh", (1.2, 3.0)), _un("math.atanh", (-0.9, 0.9)),
    _bin("math.atan2", (0.3, 2.0)), _un("math.sqrt", (0.2, 3.0)),
    _un("math.rsqrt", (0.2, 3.0)), _un("math.cbrt", (0.2, 3.0)),
    Elt("cbrt_negative", 1, lambda t: f"%r = math.cbrt %a : {t.T}", (-3.0, -0.2)),
    _bin("math.powf", (0.5, 2.0)),
    Elt("fpowi", 1, lambda t: (f"%n = arith.constant {t.c('3', 'i32')}\n"
                               f"%r = math.fpowi %a, %n : {t.T}, {t('i32')}")),
    Elt("fpowi_negative", 1, lambda t: (f"%n = arith.constant {t.c('-2', 'i32')}\n"
                                        f"%r = math.fpowi %a, %n : {t.T}, {t('i32')}"),
        (0.5, 2.0)),
    _un("math.absf"), _un("math.erf"), _un("math.erfc"),
    Elt("clampf", 3, lambda t: f"%r = math.clampf %a to [%b, %c] : {t.T}"),
    Elt("sincos", 1, lambda t: (f"%s, %c = math.sincos %a : {t.T}\n"
                                f"%r = arith.mulf %s, %c : {t.T}")),
    Elt("fma", 3, lambda t: f"%r = math.fma %a, %b, %c : {t.T}"),
    _bin("math.copysign"),
    _zero("math.floor"), _zero("math.ceil"), _zero("math.round"),
    _zero("math.roundeven"), _zero("math.trunc"),
]


def _tensor_case(e: Elt) -> Case:
    t = Ty(True)
    return Case(f"t_{e.id}", "tensor", [T3] * e.nargs, [T3],
                f"{e.body(t)}\nreturn %r : {T3}", e.domain, e.order2, eps=e.eps, rtol=e.rtol,
                linear_rtol=e.linear_rtol)


def _generic_case(e: Elt) -> Case:
    """The op on scalars inside a `linalg.generic` body (block arguments %a, %b, ...)."""
    t = Ty(False)
    ids = ", ".join(["affine_map<(d0) -> (d0)>"] * (e.nargs + 1))
    names = [f"%p{n}" for n in "abcd"[:e.nargs]]
    bargs = ", ".join(f"%{n}: f64" for n in "abcd"[:e.nargs])
    text = (f"%e = tensor.empty() : {T3}\n"
            f"%R = linalg.generic {{indexing_maps = [{ids}], iterator_types = [\"parallel\"]}}\n"
            f"    ins({', '.join(names)} : {', '.join([T3] * e.nargs)}) outs(%e : {T3}) {{\n"
            f"^bb0({bargs}, %o: f64):\n{e.body(t)}\n  linalg.yield %r : f64\n}} -> {T3}\n"
            f"return %R : {T3}")
    return Case(f"g_{e.id}", "generic", [T3] * e.nargs, [T3], text, e.domain, e.order2,
                eps=e.eps, rtol=e.rtol, linear_rtol=e.linear_rtol, names=names)


# ----------------------------------------------------------------------------
# linalg
# ----------------------------------------------------------------------------

M43, M32, M42, V3, V4, S0 = ("tensor<4x3xf64>", "tensor<3x2xf64>", "tensor<4x2xf64>",
                             "tensor<3xf64>", "tensor<4xf64>", "tensor<f64>")


def _fill(name: str, ty: str, value: str = "0.0") -> str:
    return (f"%{name}z = arith.constant {value} : f64\n%{name}e = tensor.empty() : {ty}\n"
            f"%{name} = linalg.fill ins(%{name}z : f64) outs(%{name}e : {ty}) -> {ty}\n")


def _lcase(id_, params, results, body, domain=(-1.5, 1.5), **kw) -> Case:
    return Case(f"l_{id_}", "linalg", params, results,
                f"{body}\nreturn %ret : {', '.join(results)}", domain, **kw)


def _named_unary(op: str, dom=(-1.5, 1.5)) -> Case:
    return _lcase(op.split(".")[1], [V3], [V3],
                  f"%e = tensor.empty() : {V3}\n"
                  f"%ret = {op} ins(%a : {V3}) outs(%e : {V3}) -> {V3}", dom)


def _named_binary(op: str, dom=(-1.5, 1.5)) -> Case:
    return _lcase(op.split(".")[1], [V3, V3], [V3],
                  f"%e = tensor.empty() : {V3}\n"
                  f"%ret = {op} ins(%a, %b : {V3}, {V3}) outs(%e : {V3}) -> {V3}", dom)


def _named_zero(op: str) -> Case:
    return _lcase(op.split(".")[1], [V3], [V3],
                  f"%e = tensor.empty() : {V3}\n"
                  f"%f = {op} ins(%a : {V3}) outs(%e : {V3}) -> {V3}\n"
                  f"%ret = arith.mulf %f, %a : {V3}", (-2.4, 2.4))


def _reduce_generic(id_: str, acc_init: str, combine: str, **kw) -> Case:
    """out[i] = combine_j a[i, j] (a generic with one reduction dimension)."""
    return _lcase(id_, [M43], [V4], _fill("f", V4, acc_init) +
                  "%ret = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, "
                  "affine_map<(i, j) -> (i)>], iterator_types = [\"parallel\", \"reduction\"]} "
                  f"ins(%a : {M43}) outs(%f : {V4}) {{\n^bb0(%x: f64, %acc: f64):\n"
                  f"  %s = {combine} %acc, %x : f64\n  linalg.yield %s : f64\n}} -> {V4}", **kw)


LINALG: list[Case] = [
    _lcase("matmul", [M43, M32], [M42], _fill("f", M42) +
           f"%m = linalg.matmul ins(%a, %b : {M43}, {M32}) outs(%f : {M42}) -> {M42}\n"
           f"%ret = math.tanh %m : {M42}"),
    _lcase("matmul_acc", [M43, M32, M42], [M42],
           f"%ret = linalg.matmul ins(%a, %b : {M43}, {M32}) outs(%c : {M42}) -> {M42}"),
    _lcase("batch_matmul", ["tensor<2x4x3xf64>", "tensor<2x3x2xf64>", "tensor<2x4x2xf64>"],
           ["tensor<2x4x2xf64>"],
           "%ret = linalg.batch_matmul ins(%a, %b : tensor<2x4x3xf64>, tensor<2x3x2xf64>) "
           "outs(%c : tensor<2x4x2xf64>) -> tensor<2x4x2xf64>"),
    _lcase("conv_2d_nhwc_hwcf", ["tensor<1x5x5x2xf64>", "tensor<2x2x2x3xf64>",
                                 "tensor<1x2x3x3xf64>"], ["tensor<1x2x3x3xf64>"],
           "%y = linalg.conv_2d_nhwc_hwcf {strides = dense<[2, 1]> : tensor<2xi64>, "
           "dilations = dense<[1, 2]> : tensor<2xi64>} "
           "ins(%a, %b : tensor<1x5x5x2xf64>, tensor<2x2x2x3xf64>) "
           "outs(%c : tensor<1x2x3x3xf64>) -> tensor<1x2x3x3xf64>\n"
           "%ret = math.tanh %y : tensor<1x2x3x3xf64>"),
    _lcase("pooling_nhwc_sum", ["tensor<1x5x7x2xf64>", "tensor<1x2x2x2xf64>"],
           ["tensor<1x2x2x2xf64>"],
           "%k = tensor.empty() : tensor<2x3xf64>\n"
           "%y = linalg.pooling_nhwc_sum {strides = dense<[2, 2]> : tensor<2xi64>, "
           "dilations = dense<[1, 2]> : tensor<2xi64>} "
           "ins(%a, %k : tensor<1x5x7x2xf64>, tensor<2x3xf64>) "
           "outs(%b : tensor<1x2x2x2xf64>) -> tensor<1x2x2x2xf64>\n"
           "%ret = math.tanh %y : tensor<1x2x2x2xf64>"),
    _lcase("pooling_nhwc_max", ["tensor<1x5x7x2xf64>", "tensor<1x2x2x2xf64>"],
           ["tensor<1x2x2x2xf64>"],
           "%k = tensor.empty() : tensor<2x3xf64>\n"
           "%y = linalg.pooling_nhwc_max {strides = dense<[2, 2]> : tensor<2xi64>, "
           "dilations = dense<[1, 2]> : tensor<2xi64>} "
           "ins(%a, %k : tensor<1x5x7x2xf64>, tensor<2x3xf64>) "
           "outs(%b : tensor<1x2x2x2xf64>) -> tensor<1x2x2x2xf64>\n"
           "%ret = math.tanh %y : tensor<1x2x2x2xf64>"),
    # windows that tile the input (stride = window): the max pool's two-generic vjp
    _lcase("pooling_nhwc_max_tiles", ["tensor<1x5x7x2xf64>", "tensor<1x2x3x2xf64>"],
           ["tensor<1x2x3x2xf64>"],
           "%k = tensor.empty() : tensor<2x2xf64>\n"
           "%y = linalg.pooling_nhwc_max {strides = dense<[2, 2]> : tensor<2xi64>, "
           "dilations = dense<[1, 1]> : tensor<2xi64>} "
           "ins(%a, %k : tensor<1x5x7x2xf64>, tensor<2x2xf64>) "
           "outs(%b : tensor<1x2x3x2xf64>) -> tensor<1x2x3x2xf64>\n"
           "%ret = math.tanh %y : tensor<1x2x3x2xf64>"),
    _lcase("depthwise_conv_2d_nhwc_hwc", ["tensor<2x5x6x3xf64>", "tensor<2x2x3xf64>",
                                          "tensor<2x2x3x3xf64>"], ["tensor<2x2x3x3xf64>"],
           "%y = linalg.depthwise_conv_2d_nhwc_hwc {strides = dense<[2, 1]> : tensor<2xi64>, "
           "dilations = dense<[1, 2]> : tensor<2xi64>} "
           "ins(%a, %b : tensor<2x5x6x3xf64>, tensor<2x2x3xf64>) "
           "outs(%c : tensor<2x2x3x3xf64>) -> tensor<2x2x3x3xf64>\n"
           "%ret = math.tanh %y : tensor<2x2x3x3xf64>"),
    _lcase("matvec", [M43, V3, V4], [V4],
           f"%ret = linalg.matvec ins(%a, %b : {M43}, {V3}) outs(%c : {V4}) -> {V4}"),
    _lcase("vecmat", [V4, M43, V3], [V3],
           f"%ret = linalg.vecmat ins(%a, %b : {V4}, {M43}) outs(%c : {V3}) -> {V3}"),
    _lcase("dot", [V3, V3, S0], [S0],
           f"%ret = linalg.dot ins(%a, %b : {V3}, {V3}) outs(%c : {S0}) -> {S0}"),
    _lcase("transpose", [M43], ["tensor<3x4xf64>"],
           "%e = tensor.empty() : tensor<3x4xf64>\n"
           f"%t = linalg.transpose ins(%a : {M43}) outs(%e : tensor<3x4xf64>) "
           "permutation = [1, 0]\n%ret = math.sin %t : tensor<3x4xf64>"),
    _lcase("broadcast", [V3], [M43],
           f"%e = tensor.empty() : {M43}\n"
           f"%t = linalg.broadcast ins(%a : {V3}) outs(%e : {M43}) dimensions = [0]\n"
           f"%ret = arith.mulf %t, %t : {M43}"),
    _lcase("fill", ["f64"], [V3],
           f"%e = tensor.empty() : {V3}\n"
           f"%f = linalg.fill ins(%a : f64) outs(%e : {V3}) -> {V3}\n"
           f"%ret = math.exp %f : {V3}"),
    _lcase("copy", [V3], [V3],
           f"%e = tensor.empty() : {V3}\n"
           f"%t = linalg.copy ins(%a : {V3}) outs(%e : {V3}) -> {V3}\n"
           f"%ret = arith.mulf %t, %a : {V3}"),
    _lcase("map", [V3, V3], [V3],
           f"%e = tensor.empty() : {V3}\n"
           f"%ret = linalg.map ins(%a, %b : {V3}, {V3}) outs(%e : {V3}) "
           "(%x: f64, %y: f64, %o: f64) {\n  %s = math.sin %x : f64\n"
           "  %m = arith.mulf %s, %y : f64\n  linalg.yield %m : f64\n}"),
    _lcase("reduce_sum", [M43], [V4], _fill("f", V4) +
           f"%ret = linalg.reduce ins(%a : {M43}) outs(%f : {V4}) dimensions = [1] "
           "(%x: f64, %acc: f64) {\n  %q = arith.mulf %x, %x : f64\n"
           "  %s = arith.addf %q, %acc : f64\n  linalg.yield %s : f64\n}"),
    _lcase("reduce_max", [M43], [V4], _fill("f", V4, "-1.0e30") +
           f"%ret = linalg.reduce ins(%a : {M43}) outs(%f : {V4}) dimensions = [1] "
           "(%x: f64, %acc: f64) {\n  %s = arith.maximumf %acc, %x : f64\n"
           "  linalg.yield %s : f64\n}"),
    _named_binary("linalg.add"), _named_binary("linalg.sub"), _named_binary("linalg.mul"),
    _named_binary("linalg.div", (0.5, 2.0)), _named_binary("linalg.max"),
    _named_binary("linalg.min"), _named_binary("linalg.powf", (0.5, 2.0)),
    _named_unary("linalg.exp"), _named_unary("linalg.log", (0.2, 3.0)),
    _named_unary("linalg.abs"), _named_unary("linalg.negf"),
    _named_unary("linalg.sqrt", (0.2, 3.0)), _named_unary("linalg.rsqrt", (0.2, 3.0)),
    _named_unary("linalg.square"), _named_unary("linalg.tanh"), _named_unary("linalg.erf"),
    _named_unary("linalg.reciprocal", (0.5, 2.0)),
    _named_zero("linalg.ceil"), _named_zero("linalg.floor"),
    _lcase("elementwise", [V3, V3], [V3],
           f"%e = tensor.empty() : {V3}\n"
           "%m = linalg.elementwise kind=#linalg.elementwise_kind<mul> "
           f"ins(%a, %b : {V3}, {V3}) outs(%e : {V3}) -> {V3}\n"
           "%ret = linalg.elementwise kind=#linalg.elementwise_kind<exp> "
           f"ins(%m : {V3}) outs(%e : {V3}) -> {V3}"),
    # out[i] = tanh(sum_j a[j, i] v[j] cos(w[i])): transposed and broadcast maps
    _lcase("generic_maps", [M43, V4, V3], [V3], _fill("f", V3) +
           "%g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>, "
           "affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i)>], "
           "iterator_types = [\"parallel\", \"reduction\"]} "
           f"ins(%a, %b, %c : {M43}, {V4}, {V3}) outs(%f : {V3}) {{\n"
           "^bb0(%x: f64, %v: f64, %w: f64, %acc: f64):\n  %m = arith.mulf %x, %v : f64\n"
           "  %k = math.cos %w : f64\n  %n = arith.mulf %m, %k : f64\n"
           f"  %s = arith.addf %acc, %n : f64\n  linalg.yield %s : f64\n}} -> {V3}\n"
           f"%ret = math.tanh %g : {V3}"),
    # an active scalar captured by the body, and linalg.index
    _lcase("generic_capture_index", [V3, "f64"], [V3],
           f"%e = tensor.empty() : {V3}\n"
           "%ret = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, "
           "affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]} "
           f"ins(%a : {V3}) outs(%e : {V3}) {{\n^bb0(%x: f64, %o: f64):\n"
           "  %i = linalg.index 0 : index\n  %ii = arith.index_cast %i : index to i64\n"
           "  %fi = arith.sitofp %ii : i64 to f64\n  %m = arith.mulf %x, %b : f64\n"
           "  %n = arith.mulf %m, %fi : f64\n  %s = math.sin %n : f64\n"
           f"  linalg.yield %s : f64\n}} -> {V3}"),
    _reduce_generic("generic_sum", "0.0", "arith.addf"),
    _reduce_generic("generic_max", "-1.0e30", "arith.maximumf"),
    _reduce_generic("generic_min", "1.0e30", "arith.minimumf"),
    _reduce_generic("generic_prod", "1.0", "arith.mulf"),
    # a reversed read: not a projected permutation
    _lcase("generic_flip", [V3], [V3],
           f"%e = tensor.empty() : {V3}\n"
           "%ret = linalg.generic {indexing_maps = [affine_map<(i) -> (2 - i)>, "
           "affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]} "
           f"ins(%a : {V3}) outs(%e : {V3}) {{\n^bb0(%x: f64, %o: f64):\n"
           f"  %s = math.sin %x : f64\n  linalg.yield %s : f64\n}} -> {V3}"),
    # the diagonal of a matrix: a repeated dimension, sum_i a[i, i] * a[i, i]
    _lcase("generic_diagonal", ["tensor<3x3xf64>"], [S0], _fill("f", S0) +
           "%ret = linalg.generic {indexing_maps = [affine_map<(i) -> (i, i)>, "
           "affine_map<(i) -> ()>], iterator_types = [\"reduction\"]} "
           f"ins(%a : tensor<3x3xf64>) outs(%f : {S0}) {{\n^bb0(%x: f64, %acc: f64):\n"
           "  %q = arith.mulf %x, %x : f64\n  %s = arith.addf %acc, %q : f64\n"
           f"  linalg.yield %s : f64\n}} -> {S0}"),
]


# ----------------------------------------------------------------------------
# tensor (each result times sin of itself, so the derivative is not a 0/1 pattern)
# ----------------------------------------------------------------------------


def _tcase(id_, params, result, body, **kw) -> Case:
    return Case(f"x_{id_}", "tensor_ops", params, [result],
                f"{body}\n%sn = math.sin %v : {result}\n%ret = arith.mulf %sn, %v : {result}\n"
                f"return %ret : {result}", **kw)


V6 = "tensor<6xf64>"
TENSOR: list[Case] = [
    _tcase("extract", [V6], "f64",
           "%i = arith.constant 4 : index\n%v = tensor.extract %a[%i] : tensor<6xf64>"),
    _tcase("insert", [V6, "f64"], V6,
           "%i = arith.constant 2 : index\n%v = tensor.insert %b into %a[%i] : tensor<6xf64>"),
    _tcase("extract_slice", [V6], "tensor<3xf64>",
           "%v = tensor.extract_slice %a[1] [3] [2] : tensor<6xf64> to tensor<3xf64>"),
    _tcase("insert_slice", ["tensor<3xf64>", V6], V6,
           "%v = tensor.insert_slice %a into %b[0] [3] [2] : tensor<3xf64> into tensor<6xf64>"),
    _tcase("expand_shape", [V6], "tensor<2x3xf64>",
           "%v = tensor.expand_shape %a [[0, 1]] output_shape [2, 3] : tensor<6xf64> into "
           "tensor<2x3xf64>"),
    _tcase("collapse_shape", ["tensor<2x3xf64>"], V6,
           "%v = tensor.collapse_shape %a [[0, 1]] : tensor<2x3xf64> into tensor<6xf64>"),
    _tcase("reshape", [V6], "tensor<3x2xf64>",
           "%s = arith.constant dense<[3, 2]> : tensor<2xi64>\n"
           "%v = tensor.reshape %a(%s) : (tensor<6xf64>, tensor<2xi64>) -> tensor<3x2xf64>"),
    _tcase("concat", ["tensor<2xf64>", "tensor<4xf64>"], V6,
           "%v = tensor.concat dim(0) %a, %b : (tensor<2xf64>, tensor<4xf64>) -> tensor<6xf64>"),
    _tcase("pad", ["tensor<3xf64>"], V6,
           "%z = arith.constant 0.5 : f64\n%v = tensor.pad %a low[1] high[2] {\n"
           "^bb0(%i: index):\n  tensor.yield %z : f64\n} : tensor<3xf64> to tensor<6xf64>"),
    _tcase("pad_active_value", ["tensor<3xf64>", "f64"], V6,
           "%v = tensor.pad %a low[2] high[1] {\n"
           "^bb0(%i: index):\n  tensor.yield %b : f64\n} : tensor<3xf64> to tensor<6xf64>"),
    _tcase("cast", ["tensor<3xf64>"], "tensor<3xf64>",
           "%d = tensor.cast %a : tensor<3xf64> to tensor<?xf64>\n"
           "%v = tensor.cast %d : tensor<?xf64> to tensor<3xf64>"),
    _tcase("splat", ["f64"], "tensor<3xf64>", "%v = tensor.splat %a : tensor<3xf64>"),
    _tcase("from_elements", ["f64", "f64"], "tensor<2x2xf64>",
           "%q = arith.mulf %a, %b : f64\n"
           "%v = tensor.from_elements %a, %b, %q, %a : tensor<2x2xf64>"),
    _tcase("generate", ["f64"], "tensor<4xf64>",
           "%v = tensor.generate {\n^bb0(%i: index):\n"
           "  %ii = arith.index_cast %i : index to i64\n  %f = arith.sitofp %ii : i64 to f64\n"
           "  %m = arith.mulf %a, %f : f64\n  %e = math.exp %m : f64\n"
           "  tensor.yield %e : f64\n} : tensor<4xf64>"),
    # the size of a dynamically shaped view scales the value
    # (4 elements: a batch of 3 must not be mistaken for the size)
    _tcase("dim", ["tensor<4xf64>"], "tensor<4xf64>",
           "%c0 = arith.constant 0 : index\n"
           "%d = tensor.cast %a : tensor<4xf64> to tensor<?xf64>\n"
           "%n = tensor.dim %d, %c0 : tensor<?xf64>\n"
           "%ni = arith.index_cast %n : index to i64\n%nf = arith.sitofp %ni : i64 to f64\n"
           "%s = tensor.splat %nf : tensor<4xf64>\n%v = arith.mulf %a, %s : tensor<4xf64>"),
]


# ----------------------------------------------------------------------------
# scf
# ----------------------------------------------------------------------------

SCF: list[Case] = [
    Case("c_for_tensor", "scf", [V3, V3], [V3], """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%n = arith.constant 4 : index
%r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %a) -> (tensor<3xf64>) {
  %m = arith.mulf %h, %b : tensor<3xf64>
  %s = math.sin %m : tensor<3xf64>
  %q = arith.addf %h, %s : tensor<3xf64>
  scf.yield %q : tensor<3xf64>
}
return %r : tensor<3xf64>""", (-1.0, 1.0)),
    Case("c_for_scalar_swap", "scf", ["f64", "f64"], ["f64"], """%c1 = arith.constant 1 : index
%c2 = arith.constant 2 : index
%n = arith.constant 9 : index
%r:2 = scf.for %i = %c1 to %n step %c2 iter_args(%x = %a, %y = %b) -> (f64, f64) {
  %p = arith.mulf %x, %y : f64
  %s = math.tanh %p : f64
  %q = arith.addf %s, %y : f64
  scf.yield %q, %x : f64, f64
}
%o = arith.mulf %r#0, %r#1 : f64
return %o : f64""", (0.2, 0.9)),
    # c -> c * c, twice (reverse over reverse through a loop of 2+ iterations)
    Case("c_for_square_twice", "scf", ["f64"], ["f64"], """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c2 = arith.constant 2 : index
%r = scf.for %i = %c0 to %c2 step %c1 iter_args(%x = %a) -> (f64) {
  %q = arith.mulf %x, %x : f64
  scf.yield %q : f64
}
return %r : f64""", (0.2, 0.9)),
    Case("c_if", "scf", ["f64", "f64"], ["f64"], """%p = arith.cmpf olt, %a, %b : f64
%r = scf.if %p -> (f64) {
  %s = math.sin %a : f64
  %m = arith.mulf %s, %b : f64
  scf.yield %m : f64
} else {
  %e = math.exp %b : f64
  scf.yield %e : f64
}
%o = arith.mulf %r, %a : f64
return %o : f64""", (-1.0, 1.0)),
    Case("c_if_tensor", "scf", [V3, "f64"], [V3], """%z = arith.constant 0.0 : f64
%p = arith.cmpf olt, %b, %z : f64
%r = scf.if %p -> (tensor<3xf64>) {
  %s = math.sin %a : tensor<3xf64>
  scf.yield %s : tensor<3xf64>
} else {
  %e = math.exp %a : tensor<3xf64>
  %s = tensor.splat %b : tensor<3xf64>
  %m = arith.mulf %e, %s : tensor<3xf64>
  scf.yield %m : tensor<3xf64>
}
return %r : tensor<3xf64>""", (-1.0, 1.0)),
    Case("c_while", "scf", ["f64", "f64"], ["f64"], """%c0 = arith.constant 0 : i32
%c1 = arith.constant 1 : i32
%c5 = arith.constant 5 : i32
%r:2 = scf.while (%h = %a, %i = %c0) : (f64, i32) -> (f64, i32) {
  %go = arith.cmpi slt, %i, %c5 : i32
  scf.condition(%go) %h, %i : f64, i32
} do {
^bb0(%h2: f64, %i2: i32):
  %m = arith.mulf %h2, %b : f64
  %s = math.sin %m : f64
  %q = arith.addf %s, %h2 : f64
  %n = arith.addi %i2, %c1 : i32
  scf.yield %q, %n : f64, i32
}
return %r#0 : f64""", (-1.0, 1.0)),
    # a data-dependent trip count: runs while h < 3 (h grows by at least 0.5)
    Case("c_while_data", "scf", ["f64", "f64"], ["f64"], """%lim = arith.constant 3.0 : f64
%r = scf.while (%h = %a) : (f64) -> (f64) {
  %go = arith.cmpf olt, %h, %lim : f64
  scf.condition(%go) %h : f64
} do {
^bb0(%h2: f64):
  %e = math.exp %b : f64
  %q = arith.addf %h2, %e : f64
  scf.yield %q : f64
}
%o = arith.mulf %r, %b : f64
return %o : f64""", (-0.6, 0.6)),
    Case("c_execute_region", "scf", ["f64", "f64"], ["f64"], """%r = scf.execute_region -> f64 {
  %m = arith.mulf %a, %b : f64
  %s = math.cos %m : f64
  scf.yield %s : f64
}
%o = arith.addf %r, %a : f64
return %o : f64"""),
]


# ----------------------------------------------------------------------------
# func and autodiff
# ----------------------------------------------------------------------------

FUNC: list[Case] = [
    Case("f_call", "func", [V3, "f64"], [V3], f"""%s = tensor.splat %b : {V3}
%r = func.call @f_call_callee(%a, %s) : ({V3}, {V3}) -> {V3}
%q = arith.mulf %r, %a : {V3}
return %q : {V3}""", extra=f"""func.func private @f_call_callee(%x: {V3}, %y: {V3}) -> {V3} {{
  %m = arith.mulf %x, %y : {V3}
  %s = math.sin %m : {V3}
  return %s : {V3}
}}
"""),
    Case("f_checkpoint", "func", [V3, V3], [V3], f"""
%r = "autodiff.checkpoint"(%a, %b) {{fn = @f_checkpoint_callee}} : ({V3}, {V3}) -> {V3}
%q = math.tanh %r : {V3}
return %q : {V3}""", extra=f"""func.func private @f_checkpoint_callee(%x: {V3}, %y: {V3}) -> {V3} {{
  %m = arith.mulf %x, %y : {V3}
  %s = math.sin %m : {V3}
  %e = math.exp %s : {V3}
  return %e : {V3}
}}
"""),
    # sin(stop_gradient(a)) * a: the derivative treats the first factor as a constant
    Case("f_stop_gradient", "func", [V3], [V3], f"""
%g = "autodiff.stop_gradient"(%a) : ({V3}) -> {V3}
%s = math.sin %g : {V3}
%q = arith.mulf %s, %a : {V3}
return %q : {V3}""", order2=False,  # FD of the vjp sees through stop_gradient; AD must not
         frozen=lambda x0: (lambda a: np.sin(x0[0]) * a)),
    # a keyed draw (seed from the first argument): the value, scaled by %b
    Case("f_philox", "func", ["f64", V3], [V3], f"""%k = arith.constant 1000.0 : f64
%s = arith.mulf %a, %k : f64
%seed = arith.fptosi %s : f64 to i64
%off = arith.constant 0 : i64
%u = "autodiff.philox"(%seed, %off) {{distribution = "uniform", keyed}} : (i64, i64) -> {V3}
%q = arith.mulf %u, %b : {V3}
%w = math.sin %q : {V3}
return %w : {V3}""", (1.2, 1.8)),
]


CASES: list[Case] = (
    [_tensor_case(e) for e in ELEMENTWISE]
    + [_generic_case(e) for e in ELEMENTWISE]
    + LINALG + TENSOR + SCF + FUNC
)
