"""Table-driven numerical checks of every derivative rule (forward and reverse, orders 1-2).

Each rule gets a tiny MLIR function, in two forms: on scalars (function
level) and inside a `linalg.generic` body over `tensor<3xT>`. All functions of
one family go into ONE module (one compile), but every rule keeps its own test
id. Expected values come from central finite differences, the dot-product
identity, and jax (float64) -- never from our own output.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from ad_check import (
    Fn,
    check_against_jax,
    check_first_order,
    check_second_order,
    compile_fns,
)

from mlir_autodiff import dialects

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


@dataclasses.dataclass
class Rule:
    """One op under test: `body` computes %r from %a (%b, %c) in type {T}."""

    id: str
    body: str
    nargs: int
    jax_fn: object
    domain: tuple[float, float] = (-1.5, 1.5)
    order2: bool = True
    eps: float = 1e-6
    rtol: float = 1e-6


def _floor_times(fn):
    return lambda a: fn(a) * a


RULES = [
    # arith
    Rule("addf", "%r = arith.addf %a, %b : {T}", 2, lambda a, b: a + b),
    Rule("subf", "%r = arith.subf %a, %b : {T}", 2, lambda a, b: a - b),
    Rule("mulf", "%r = arith.mulf %a, %b : {T}", 2, lambda a, b: a * b),
    Rule("divf", "%r = arith.divf %a, %b : {T}", 2, lambda a, b: a / b, (0.5, 2.0)),
    Rule("negf", "%s = arith.negf %a : {T}\n%r = arith.mulf %s, %a : {T}", 1,
         lambda a: -a * a),
    Rule("maximumf", "%r = arith.maximumf %a, %b : {T}", 2, jnp.maximum),
    Rule("minimumf", "%r = arith.minimumf %a, %b : {T}", 2, jnp.minimum),
    Rule("cmpf_select",
         "%c = arith.cmpf olt, %a, %b : {T}\n%s = arith.mulf %a, %a : {T}\n"
         "%r = arith.select %c, %s, %b : {T}", 2,
         lambda a, b: jnp.where(a < b, a * a, b)),
    Rule("remf", "%r = arith.remf %a, %b : {T}", 2, jnp.fmod, (0.6, 2.0)),
    Rule("fptosi_sitofp",
         "%i = arith.fptosi %a : {T} to i32\n%f = arith.sitofp %i : i32 to {T}\n"
         "%r = arith.mulf %f, %a : {T}", 1, lambda a: jnp.trunc(a) * a, (1.1, 2.9)),
    Rule("uitofp",
         "%i = arith.fptoui %a : {T} to i32\n%f = arith.uitofp %i : i32 to {T}\n"
         "%r = arith.mulf %f, %b : {T}", 2, lambda a, b: jnp.trunc(a) * b, (1.1, 2.9)),
    Rule("constant", "%k = arith.constant 2.5 : {T}\n%r = arith.mulf %a, %k : {T}", 1,
         lambda a: a * 2.5),
    # math
    Rule("exp", "%r = math.exp %a : {T}", 1, jnp.exp),
    Rule("exp2", "%r = math.exp2 %a : {T}", 1, jnp.exp2),
    Rule("expm1", "%r = math.expm1 %a : {T}", 1, jnp.expm1),
    Rule("log", "%r = math.log %a : {T}", 1, jnp.log, (0.2, 3.0)),
    Rule("log1p", "%r = math.log1p %a : {T}", 1, jnp.log1p, (-0.5, 2.0)),
    Rule("log2", "%r = math.log2 %a : {T}", 1, jnp.log2, (0.2, 3.0)),
    Rule("log10", "%r = math.log10 %a : {T}", 1, jnp.log10, (0.2, 3.0)),
    Rule("tanh", "%r = math.tanh %a : {T}", 1, jnp.tanh),
    Rule("sin", "%r = math.sin %a : {T}", 1, jnp.sin),
    Rule("cos", "%r = math.cos %a : {T}", 1, jnp.cos),
    Rule("tan", "%r = math.tan %a : {T}", 1, jnp.tan, (-1.0, 1.0)),
    Rule("atan", "%r = math.atan %a : {T}", 1, jnp.arctan),
    Rule("atan2", "%r = math.atan2 %a, %b : {T}", 2, jnp.arctan2, (0.3, 2.0)),
    Rule("sinh", "%r = math.sinh %a : {T}", 1, jnp.sinh),
    Rule("cosh", "%r = math.cosh %a : {T}", 1, jnp.cosh),
    Rule("sqrt", "%r = math.sqrt %a : {T}", 1, jnp.sqrt, (0.2, 3.0)),
    Rule("rsqrt", "%r = math.rsqrt %a : {T}", 1, jax.lax.rsqrt, (0.2, 3.0)),
    Rule("cbrt", "%r = math.cbrt %a : {T}", 1, jnp.cbrt, (0.2, 3.0)),
    Rule("powf", "%r = math.powf %a, %b : {T}", 2, jnp.power, (0.5, 2.0)),
    Rule("fpowi", "%n = arith.constant 3 : i32\n%r = math.fpowi %a, %n : {T}, i32", 1,
         lambda a: a ** 3),
    Rule("absf", "%r = math.absf %a : {T}", 1, jnp.abs),
    Rule("erf", "%r = math.erf %a : {T}", 1, jax.scipy.special.erf),
    Rule("fma", "%r = math.fma %a, %b, %a : {T}", 2, lambda a, b: a * b + a),
    Rule("copysign", "%r = math.copysign %a, %b : {T}", 2, jnp.copysign),
    Rule("floor", "%f = math.floor %a : {T}\n%r = arith.mulf %f, %a : {T}", 1,
         _floor_times(jnp.floor), (0.1, 2.9)),
    Rule("ceil", "%f = math.ceil %a : {T}\n%r = arith.mulf %f, %a : {T}", 1,
         _floor_times(jnp.ceil), (0.1, 2.9)),
    Rule("round", "%f = math.round %a : {T}\n%r = arith.mulf %f, %a : {T}", 1,
         _floor_times(jnp.round), (0.1, 0.45)),
    Rule("trunc", "%f = math.trunc %a : {T}\n%r = arith.mulf %f, %a : {T}", 1,
         _floor_times(jnp.trunc), (0.1, 2.9)),
    Rule("truncf_extf",
         "%x = arith.truncf %a : {T} to f32\n%y = arith.extf %x : f32 to {T}\n"
         "%r = arith.mulf %y, %b : {T}", 2, None, order2=False),
]
RULE_IDS = [r.id for r in RULES]
ARGS = ["%a", "%b", "%c"]


def scalar_fn(rule: Rule, T: str) -> Fn:
    params = ", ".join(f"{ARGS[i]}: {T}" for i in range(rule.nargs))
    body = rule.body.replace("{T}", T)
    text = f"func.func @s_{rule.id}({params}) -> {T} {{\n{body}\nreturn %r : {T}\n}}"
    return Fn(f"s_{rule.id}", text, [T] * rule.nargs, [T], rule.domain, rule.jax_fn,
              rule.order2)


def generic_fn(rule: Rule, T: str) -> Fn:
    tt = f"tensor<3x{T}>"
    ids = ", ".join(["affine_map<(d0) -> (d0)>"] * (rule.nargs + 1))
    caps = [f"%A{i}" for i in range(rule.nargs)]
    params = ", ".join(f"{c}: {tt}" for c in caps)
    bargs = ", ".join(f"{ARGS[i]}: {T}" for i in range(rule.nargs))
    body = rule.body.replace("{T}", T)
    text = f"""func.func @g_{rule.id}({params}) -> {tt} {{
  %e = tensor.empty() : {tt}
  %R = linalg.generic {{indexing_maps = [{ids}], iterator_types = ["parallel"]}}
      ins({", ".join(caps)} : {", ".join([tt] * rule.nargs)}) outs(%e : {tt}) {{
  ^bb0({bargs}, %o: {T}):
    {body}
    linalg.yield %r : {T}
  }} -> {tt}
  return %R : {tt}
}}"""
    return Fn(f"g_{rule.id}", text, [tt] * rule.nargs, [tt], rule.domain, rule.jax_fn,
              rule.order2)


_CACHE: dict[str, tuple] = {}


def family(kind: str):
    """Compile each family's module once per session: (compiled, {rule id: Fn})."""
    if kind not in _CACHE:
        make, T = {"scalar": (scalar_fn, "f64"), "generic": (generic_fn, "f64"),
                   "generic-f32": (generic_fn, "f32"), "scalar-f32": (scalar_fn, "f32")}[kind]
        fns = {r.id: make(r, T) for r in RULES if T == "f64" or r.id != "truncf_extf"}
        if T == "f32" or kind == "generic":
            # Second order inside generic bodies uses the same scalar rules as
            # the scalar family; the linalg family covers generic-of-generic.
            for f in fns.values():
                f.order2 = False
        _CACHE[kind] = (compile_fns(list(fns.values())), fns)
    return _CACHE[kind]


RULE_BY_ID = {r.id: r for r in RULES}


@pytest.mark.parametrize("kind", ["scalar", "generic"])
@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_first_order(rule_id: str, kind: str) -> None:
    cm, fns = family(kind)
    rule = RULE_BY_ID[rule_id]
    rng = np.random.default_rng(zlib.crc32(rule_id.encode()))
    eps, rtol = rule.eps, rule.rtol
    if rule_id == "truncf_extf":  # f32 rounding inside: FD needs a bigger step
        eps, rtol = 1e-3, 1e-3
    check_first_order(cm, fns[rule_id], rng, eps=eps, rtol=rtol)


@pytest.mark.parametrize("kind", ["scalar"])
@pytest.mark.parametrize("rule_id", [r.id for r in RULES if r.order2])
def test_second_order(rule_id: str, kind: str) -> None:
    cm, fns = family(kind)
    rng = np.random.default_rng(1 + zlib.crc32(rule_id.encode()))
    check_second_order(cm, fns[rule_id], rng)


@pytest.mark.parametrize("kind", ["scalar", "generic"])
@pytest.mark.parametrize("rule_id", [r.id for r in RULES if r.jax_fn is not None])
def test_against_jax(rule_id: str, kind: str) -> None:
    cm, fns = family(kind)
    rng = np.random.default_rng(2 + zlib.crc32(rule_id.encode()))
    check_against_jax(cm, fns[rule_id], rng)


@pytest.mark.parametrize("rule_id", [r.id for r in RULES if r.jax_fn is not None])
def test_f32_against_jax_f64(rule_id: str) -> None:
    """f32 derivatives agree with jax's float64 ones to f32 accuracy."""
    cm, fns = family("generic-f32")
    f = fns[rule_id]
    rng = np.random.default_rng(3 + zlib.crc32(rule_id.encode()))
    lo, hi = f.domain
    xs = [rng.uniform(lo, hi, 3).astype(np.float32) for _ in f.params]
    ts = [rng.standard_normal(3).astype(np.float32) for _ in f.params]
    ct = rng.standard_normal(3).astype(np.float32)
    x64 = [jnp.asarray(x, jnp.float64) for x in xs]
    _, jt = jax.jvp(f.jax_fn, tuple(x64), tuple(jnp.asarray(t, jnp.float64) for t in ts))
    _, pullback = jax.vjp(f.jax_fn, *x64)
    want = pullback(jnp.asarray(ct, jnp.float64))
    got_t = cm[f"jvp_{f.name}"](*xs, *ts)[1]
    got_g = cm[f"vjp_{f.name}"](*xs, ct)[1:]
    np.testing.assert_allclose(got_t, np.asarray(jt), rtol=2e-4, atol=2e-5)
    for g, w in zip(got_g, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-4, atol=2e-5)


# ----------------------------------------------------------------------------
# linalg: named ops, structured generics (reductions, transposed and broadcast
# maps), contractions. Each entry: (id, MLIR text of @l_<id>, params, results,
# jax function, domain).
# ----------------------------------------------------------------------------

M43, M32, M42, V3, V4 = ("tensor<4x3xf64>", "tensor<3x2xf64>", "tensor<4x2xf64>",
                         "tensor<3xf64>", "tensor<4xf64>")
S0 = "tensor<f64>"


def _lfn(id_, params, results, body, jax_fn, domain=(-1.5, 1.5)):
    args = ", ".join(f"%p{i}: {t}" for i, t in enumerate(params))
    text = (f"func.func @l_{id_}({args}) -> ({', '.join(results)}) {{\n{body}\n"
            f"return %ret : {', '.join(results)}\n}}")
    return Fn(f"l_{id_}", text, list(params), list(results), domain, jax_fn)


_ZERO42 = ("%z = arith.constant 0.0 : f64\n%e = tensor.empty() : tensor<4x2xf64>\n"
           "%f = linalg.fill ins(%z : f64) outs(%e : tensor<4x2xf64>) -> tensor<4x2xf64>\n")

LINALG = [
    _lfn("matmul", [M43, M32], [M42], _ZERO42 +
         "%m = linalg.matmul ins(%p0, %p1 : tensor<4x3xf64>, tensor<3x2xf64>) "
         "outs(%f : tensor<4x2xf64>) -> tensor<4x2xf64>\n"
         "%ret = math.tanh %m : tensor<4x2xf64>", lambda a, b: jnp.tanh(a @ b)),
    _lfn("matmul_acc", [M43, M32, M42], [M42],
         "%ret = linalg.matmul ins(%p0, %p1 : tensor<4x3xf64>, tensor<3x2xf64>) "
         "outs(%p2 : tensor<4x2xf64>) -> tensor<4x2xf64>", lambda a, b, c: c + a @ b),
    _lfn("batch_matmul", ["tensor<2x4x3xf64>", "tensor<2x3x2xf64>", "tensor<2x4x2xf64>"],
         ["tensor<2x4x2xf64>"],
         "%ret = linalg.batch_matmul ins(%p0, %p1 : tensor<2x4x3xf64>, tensor<2x3x2xf64>) "
         "outs(%p2 : tensor<2x4x2xf64>) -> tensor<2x4x2xf64>",
         lambda a, b, c: c + jnp.einsum("bij,bjk->bik", a, b)),
    _lfn("matvec", [M43, V3, V4], [V4],
         "%ret = linalg.matvec ins(%p0, %p1 : tensor<4x3xf64>, tensor<3xf64>) "
         "outs(%p2 : tensor<4xf64>) -> tensor<4xf64>", lambda a, x, y: y + a @ x),
    _lfn("vecmat", [V4, M43, V3], [V3],
         "%ret = linalg.vecmat ins(%p0, %p1 : tensor<4xf64>, tensor<4x3xf64>) "
         "outs(%p2 : tensor<3xf64>) -> tensor<3xf64>", lambda x, a, y: y + x @ a),
    _lfn("dot", [V3, V3, S0], [S0],
         "%ret = linalg.dot ins(%p0, %p1 : tensor<3xf64>, tensor<3xf64>) "
         "outs(%p2 : tensor<f64>) -> tensor<f64>", lambda x, y, s: s + x @ y),
    _lfn("transpose", [M43], ["tensor<3x4xf64>"],
         "%e = tensor.empty() : tensor<3x4xf64>\n"
         "%t = linalg.transpose ins(%p0 : tensor<4x3xf64>) outs(%e : tensor<3x4xf64>) "
         "permutation = [1, 0]\n%ret = math.sin %t : tensor<3x4xf64>",
         lambda a: jnp.sin(a.T)),
    _lfn("broadcast", [V3], [M43],
         "%e = tensor.empty() : tensor<4x3xf64>\n"
         "%b = linalg.broadcast ins(%p0 : tensor<3xf64>) outs(%e : tensor<4x3xf64>) "
         "dimensions = [0]\n%ret = arith.mulf %b, %b : tensor<4x3xf64>",
         lambda x: jnp.broadcast_to(x, (4, 3)) ** 2),
    _lfn("fill", ["f64"], [V3],
         "%e = tensor.empty() : tensor<3xf64>\n"
         "%f = linalg.fill ins(%p0 : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>\n"
         "%ret = math.exp %f : tensor<3xf64>", lambda s: jnp.exp(jnp.full((3,), s))),
    _lfn("copy", [V3], [V3],
         "%e = tensor.empty() : tensor<3xf64>\n"
         "%c = linalg.copy ins(%p0 : tensor<3xf64>) outs(%e : tensor<3xf64>) -> tensor<3xf64>\n"
         "%ret = arith.mulf %c, %p0 : tensor<3xf64>", lambda x: x * x),
    _lfn("map", [V3, V3], [V3],
         "%e = tensor.empty() : tensor<3xf64>\n"
         "%ret = linalg.map ins(%p0, %p1 : tensor<3xf64>, tensor<3xf64>) "
         "outs(%e : tensor<3xf64>) (%a: f64, %b: f64, %o: f64) {\n"
         "  %s = math.sin %a : f64\n  %m = arith.mulf %s, %b : f64\n"
         "  linalg.yield %m : f64\n}", lambda x, y: jnp.sin(x) * y),
    _lfn("reduce_sum", [M43], [V4],
         "%z = arith.constant 0.0 : f64\n%e = tensor.empty() : tensor<4xf64>\n"
         "%f = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>\n"
         "%ret = linalg.reduce ins(%p0 : tensor<4x3xf64>) outs(%f : tensor<4xf64>) "
         "dimensions = [1] (%a: f64, %acc: f64) {\n  %q = arith.mulf %a, %a : f64\n"
         "  %s = arith.addf %q, %acc : f64\n  linalg.yield %s : f64\n}",
         lambda a: jnp.sum(a * a, axis=1)),
    _lfn("reduce_max", [M43], [V4],
         "%z = arith.constant -1.0e30 : f64\n%e = tensor.empty() : tensor<4xf64>\n"
         "%f = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>\n"
         "%ret = linalg.reduce ins(%p0 : tensor<4x3xf64>) outs(%f : tensor<4xf64>) "
         "dimensions = [1] (%a: f64, %acc: f64) {\n  %s = arith.maximumf %acc, %a : f64\n"
         "  linalg.yield %s : f64\n}", lambda a: jnp.max(a, axis=1)),
    _lfn("elementwise_named", [V3, V3], [V3],
         "%e = tensor.empty() : tensor<3xf64>\n"
         "%m = linalg.mul ins(%p0, %p1 : tensor<3xf64>, tensor<3xf64>) "
         "outs(%e : tensor<3xf64>) -> tensor<3xf64>\n"
         "%ret = linalg.exp ins(%m : tensor<3xf64>) outs(%e : tensor<3xf64>) -> tensor<3xf64>",
         lambda x, y: jnp.exp(x * y)),
    # generic with transposed and broadcast input maps and a reduction:
    # out[i] = sum_j a[j, i] * v[j] + w[i]
    _lfn("generic_maps", [M43, V4, V3], [V3],
         "%z = arith.constant 0.0 : f64\n%e = tensor.empty() : tensor<3xf64>\n"
         "%f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>\n"
         "%r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>, "
         "affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (i)>], "
         "iterator_types = [\"parallel\", \"reduction\"]} ins(%p0, %p1, %p2 : tensor<4x3xf64>, "
         "tensor<4xf64>, tensor<3xf64>) outs(%f : tensor<3xf64>) {\n"
         "^bb0(%a: f64, %v: f64, %w: f64, %acc: f64):\n  %m = arith.mulf %a, %v : f64\n"
         "  %c = math.cos %w : f64\n  %n = arith.mulf %m, %c : f64\n"
         "  %s = arith.addf %acc, %n : f64\n  linalg.yield %s : f64\n} -> tensor<3xf64>\n"
         "%ret = math.tanh %r : tensor<3xf64>",
         lambda a, v, w: jnp.tanh((a.T @ v) * jnp.cos(w))),
    # a captured (active) scalar used inside a generic body
    _lfn("generic_capture", [V3, "f64"], [V3],
         "%e = tensor.empty() : tensor<3xf64>\n"
         "%ret = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, "
         "affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]} ins(%p0 : tensor<3xf64>) "
         "outs(%e : tensor<3xf64>) {\n^bb0(%a: f64, %o: f64):\n"
         "  %m = arith.mulf %a, %p1 : f64\n  %s = math.sin %m : f64\n"
         "  linalg.yield %s : f64\n} -> tensor<3xf64>", lambda x, s: jnp.sin(x * s)),
]
# Not yet: reverse mode of the forward-mode derivative of a max reduction
# (its tangent body reads the accumulator twice); first order is checked.
LINALG[[f.name for f in LINALG].index("l_reduce_max")].order2 = False
LINALG_BY_ID = {f.name[2:]: f for f in LINALG}


def linalg_family():
    if "linalg" not in _CACHE:
        _CACHE["linalg"] = (compile_fns(LINALG), LINALG_BY_ID)
    return _CACHE["linalg"]


@pytest.mark.parametrize("op_id", list(LINALG_BY_ID))
def test_linalg_first_order(op_id: str) -> None:
    cm, fns = linalg_family()
    check_first_order(cm, fns[op_id], np.random.default_rng(zlib.crc32(op_id.encode())))


@pytest.mark.parametrize("op_id", [k for k, f in LINALG_BY_ID.items() if f.order2])
def test_linalg_second_order(op_id: str) -> None:
    cm, fns = linalg_family()
    check_second_order(cm, fns[op_id], np.random.default_rng(5 + zlib.crc32(op_id.encode())))


@pytest.mark.parametrize("op_id", list(LINALG_BY_ID))
def test_linalg_against_jax(op_id: str) -> None:
    cm, fns = linalg_family()
    check_against_jax(cm, fns[op_id], np.random.default_rng(7 + zlib.crc32(op_id.encode())))


# ----------------------------------------------------------------------------
# scf: loops (reverse mode keeps a tape) and conditionals
# ----------------------------------------------------------------------------

LOOP100 = """func.func @c_loop100(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 100 : index
  %k = arith.constant 0.05 : f64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (tensor<3xf64>) {
    %m = arith.mulf %h, %w : tensor<3xf64>
    %s = math.sin %m : tensor<3xf64>
    %e = tensor.empty() : tensor<3xf64>
    %kk = linalg.fill ins(%k : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
    %d = arith.mulf %s, %kk : tensor<3xf64>
    %a = arith.addf %h, %d : tensor<3xf64>
    scf.yield %a : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}"""


def _loop100_jax(x, w):
    h = x
    for _ in range(100):
        h = h + 0.05 * jnp.sin(h * w)
    return h


SCALAR_LOOP = """func.func @c_sloop(%x: f64, %y: f64) -> f64 {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = arith.constant 9 : index
  %r:2 = scf.for %i = %c1 to %n step %c2 iter_args(%a = %x, %b = %y) -> (f64, f64) {
    %p = arith.mulf %a, %b : f64
    %s = math.tanh %p : f64
    %q = arith.addf %s, %b : f64
    scf.yield %q, %a : f64, f64
  }
  %o = arith.mulf %r#0, %r#1 : f64
  return %o : f64
}"""


def _sloop_jax(x, y):
    a, b = x, y
    for _ in range(4):  # i = 1, 3, 5, 7
        a, b = jnp.tanh(a * b) + b, a
    return a * b


IF_FN = """func.func @c_if(%x: f64, %y: f64) -> f64 {
  %c = arith.cmpf olt, %x, %y : f64
  %r = scf.if %c -> (f64) {
    %s = math.sin %x : f64
    %m = arith.mulf %s, %y : f64
    scf.yield %m : f64
  } else {
    %e = math.exp %y : f64
    scf.yield %e : f64
  }
  %o = arith.mulf %r, %x : f64
  return %o : f64
}"""

WHILE_FN = """func.func @c_while(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c5 = arith.constant 5 : i32
  %r:2 = scf.while (%h = %x, %i = %c0) : (f64, i32) -> (f64, i32) {
    %go = arith.cmpi slt, %i, %c5 : i32
    scf.condition(%go) %h, %i : f64, i32
  } do {
  ^bb0(%h2: f64, %i2: i32):
    %m = arith.mulf %h2, %y : f64
    %s = math.sin %m : f64
    %a = arith.addf %s, %h2 : f64
    %n = arith.addi %i2, %c1 : i32
    scf.yield %a, %n : f64, i32
  }
  return %r#0 : f64
}"""


def _while_jax(x, y):
    h = x
    for _ in range(5):
        h = jnp.sin(h * y) + h
    return h


EXEC_REGION = """func.func @c_exec(%x: f64, %y: f64) -> f64 {
  %r = scf.execute_region -> f64 {
    %m = arith.mulf %x, %y : f64
    %s = math.cos %m : f64
    scf.yield %s : f64
  }
  %o = arith.addf %r, %x : f64
  return %o : f64
}"""

# A loop nest whose inner loop starts from the outer loop's carried value and
# reads x only from inside the nest (reverse mode once dropped the whole
# nest: the inner loop's augmentation replaced the value its cotangent was
# attached to).
NESTED_FOR = """func.func @c_nestfor(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %z = arith.constant 0.0 : f64
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%a = %z) -> (f64) {
    %q = scf.for %j = %c0 to %c2 step %c1 iter_args(%b = %a) -> (f64) {
      %s = math.sin %x : f64
      %t = arith.mulf %s, %b : f64
      %u = arith.addf %t, %y : f64
      scf.yield %u : f64
    }
    scf.yield %q : f64
  }
  %o = arith.mulf %r, %x : f64
  return %o : f64
}"""


def _nestfor_jax(x, y):
    a = 0.0
    for _ in range(3):
        for _ in range(2):
            a = jnp.sin(x) * a + y
    return a * x


CONTROL = [
    Fn("c_nestfor", NESTED_FOR, ["f64", "f64"], ["f64"], (-1.0, 1.0), _nestfor_jax),
    Fn("c_while", WHILE_FN, ["f64", "f64"], ["f64"], (-1.0, 1.0), _while_jax),
    Fn("c_exec", EXEC_REGION, ["f64", "f64"], ["f64"], (-1.0, 1.0),
       lambda x, y: jnp.cos(x * y) + x),
    Fn("c_loop100", LOOP100, ["tensor<3xf64>"] * 2, ["tensor<3xf64>"], (-1.0, 1.0),
       _loop100_jax),
    Fn("c_sloop", SCALAR_LOOP, ["f64", "f64"], ["f64"], (0.2, 0.9), _sloop_jax),
    Fn("c_if", IF_FN, ["f64", "f64"], ["f64"], (-1.0, 1.0),
       lambda x, y: jnp.where(x < y, jnp.sin(x) * y, jnp.exp(y)) * x),
]
CONTROL_BY_ID = {f.name[2:]: f for f in CONTROL}

# Each control-flow function compiles alone, so one failure does not hide the others.


def control_family(fn_id: str):
    key = f"control-{fn_id}"
    if key not in _CACHE:
        _CACHE[key] = (compile_fns([CONTROL_BY_ID[fn_id]]), CONTROL_BY_ID)
    return _CACHE[key]


def _control_ids(order2: bool = False):
    return [k for k, f in CONTROL_BY_ID.items() if f.order2 or not order2]


@pytest.mark.parametrize("fn_id", _control_ids())
def test_control_first_order(fn_id: str) -> None:
    """Includes the acceptance case: a 100-step scf.for carrying a tensor, in reverse mode."""
    cm, fns = control_family(fn_id)
    check_first_order(cm, fns[fn_id], np.random.default_rng(zlib.crc32(fn_id.encode())),
                      rtol=1e-5)


@pytest.mark.parametrize("fn_id", _control_ids(order2=True))
def test_control_second_order(fn_id: str) -> None:
    cm, fns = control_family(fn_id)
    check_second_order(cm, fns[fn_id], np.random.default_rng(9 + zlib.crc32(fn_id.encode())))


@pytest.mark.parametrize("fn_id", _control_ids())
def test_control_against_jax(fn_id: str) -> None:
    cm, fns = control_family(fn_id)
    check_against_jax(cm, fns[fn_id], np.random.default_rng(11 + zlib.crc32(fn_id.encode())),
                      rtol=1e-9)


# ----------------------------------------------------------------------------
# tensor: data movement (each result multiplied by sin of itself so the
# derivative is not just a 0/1 pattern)
# ----------------------------------------------------------------------------


def _tfn(id_, params, result, body, jax_fn):
    args = ", ".join(f"%p{i}: {t}" for i, t in enumerate(params))
    text = (f"func.func @t_{id_}({args}) -> {result} {{\n{body}\n"
            f"%sn = math.sin %v : {result}\n%ret = arith.mulf %sn, %v : {result}\n"
            f"return %ret : {result}\n}}")
    return Fn(f"t_{id_}", text, list(params), [result], (-1.5, 1.5),
              lambda *a: jnp.sin(jax_fn(*a)) * jax_fn(*a))


V6 = "tensor<6xf64>"
TENSOR = [
    _tfn("extract", [V6], "f64",
         "%i = arith.constant 4 : index\n%v = tensor.extract %p0[%i] : tensor<6xf64>",
         lambda x: x[4]),
    _tfn("insert", [V6, "f64"], V6,
         "%i = arith.constant 2 : index\n%v = tensor.insert %p1 into %p0[%i] : tensor<6xf64>",
         lambda x, s: x.at[2].set(s)),
    _tfn("extract_slice_strided", [V6], "tensor<3xf64>",
         "%v = tensor.extract_slice %p0[1] [3] [2] : tensor<6xf64> to tensor<3xf64>",
         lambda x: x[1:6:2]),
    _tfn("insert_slice_strided", ["tensor<3xf64>", V6], V6,
         "%v = tensor.insert_slice %p0 into %p1[0] [3] [2] : tensor<3xf64> into tensor<6xf64>",
         lambda a, x: x.at[0:6:2].set(a)),
    _tfn("expand_shape", [V6], "tensor<2x3xf64>",
         "%v = tensor.expand_shape %p0 [[0, 1]] output_shape [2, 3] : tensor<6xf64> into "
         "tensor<2x3xf64>", lambda x: x.reshape(2, 3)),
    _tfn("collapse_shape", ["tensor<2x3xf64>"], V6,
         "%v = tensor.collapse_shape %p0 [[0, 1]] : tensor<2x3xf64> into tensor<6xf64>",
         lambda x: x.reshape(6)),
    _tfn("reshape", [V6], "tensor<3x2xf64>",
         "%s = arith.constant dense<[3, 2]> : tensor<2xi64>\n"
         "%v = tensor.reshape %p0(%s) : (tensor<6xf64>, tensor<2xi64>) -> tensor<3x2xf64>",
         lambda x: x.reshape(3, 2)),
    _tfn("concat", ["tensor<2xf64>", "tensor<4xf64>"], V6,
         "%v = tensor.concat dim(0) %p0, %p1 : (tensor<2xf64>, tensor<4xf64>) -> tensor<6xf64>",
         lambda a, b: jnp.concatenate([a, b])),
    _tfn("pad", ["tensor<3xf64>"], V6,
         "%z = arith.constant 0.5 : f64\n%v = tensor.pad %p0 low[1] high[2] {\n"
         "^bb0(%i: index):\n  tensor.yield %z : f64\n} : tensor<3xf64> to tensor<6xf64>",
         lambda a: jnp.pad(a, (1, 2), constant_values=0.5)),
    _tfn("cast", ["tensor<3xf64>"], "tensor<3xf64>",
         "%d = tensor.cast %p0 : tensor<3xf64> to tensor<?xf64>\n"
         "%v = tensor.cast %d : tensor<?xf64> to tensor<3xf64>", lambda a: a),
    _tfn("splat", ["f64"], "tensor<3xf64>",
         "%v = tensor.splat %p0 : tensor<3xf64>", lambda s: jnp.full((3,), s)),
    _tfn("from_elements", ["f64", "f64"], "tensor<2x2xf64>",
         "%q = arith.mulf %p0, %p1 : f64\n"
         "%v = tensor.from_elements %p0, %p1, %q, %p0 : tensor<2x2xf64>",
         lambda a, b: jnp.array([[a, b], [a * b, a]])),
]
_GEN = _tfn("generate", ["f64"], "tensor<4xf64>",
            "%v = tensor.generate {\n^bb0(%i: index):\n"
            "  %ii = arith.index_cast %i : index to i64\n  %f = arith.sitofp %ii : i64 to f64\n"
            "  %m = arith.mulf %p0, %f : f64\n  %e = math.exp %m : f64\n"
            "  tensor.yield %e : f64\n} : tensor<4xf64>",
            lambda s: jnp.exp(s * jnp.arange(4.0)))
TENSOR.append(_GEN)
TENSOR_BY_ID = {f.name[2:]: f for f in TENSOR}


def tensor_family():
    if "tensor" not in _CACHE:
        _CACHE["tensor"] = (compile_fns(TENSOR), TENSOR_BY_ID)
    return _CACHE["tensor"]


@pytest.mark.parametrize("op_id", list(TENSOR_BY_ID))
def test_tensor_first_order(op_id: str) -> None:
    cm, fns = tensor_family()
    check_first_order(cm, fns[op_id], np.random.default_rng(zlib.crc32(op_id.encode())))


@pytest.mark.parametrize("op_id", [k for k, f in TENSOR_BY_ID.items() if f.order2])
def test_tensor_second_order(op_id: str) -> None:
    cm, fns = tensor_family()
    check_second_order(cm, fns[op_id], np.random.default_rng(13 + zlib.crc32(op_id.encode())))


@pytest.mark.parametrize("op_id", list(TENSOR_BY_ID))
def test_tensor_against_jax(op_id: str) -> None:
    cm, fns = tensor_family()
    check_against_jax(cm, fns[op_id], np.random.default_rng(17 + zlib.crc32(op_id.encode())))


# ----------------------------------------------------------------------------
# Third order, and every composition of the two modes at second order, on a
# smooth scalar function: f(x) = sin(exp(x)) * x.
# ----------------------------------------------------------------------------

THIRD = """func.func @f3(%x: f64) -> f64 {
  %e = math.exp %x : f64
  %s = math.sin %e : f64
  %r = arith.mulf %s, %x : f64
  return %r : f64
}
func.func @d1(%x: f64, %t: f64) -> (f64, f64) {
  %r:2 = "autodiff.jvp"(%x, %t) {fn = @f3} : (f64, f64) -> (f64, f64)
  return %r#0, %r#1 : f64, f64
}
func.func @g1(%x: f64, %c: f64) -> (f64, f64) {
  %r:2 = "autodiff.vjp"(%x, %c) {fn = @f3} : (f64, f64) -> (f64, f64)
  return %r#0, %r#1 : f64, f64
}
// second order, four ways: jvp(jvp), jvp(vjp), vjp(jvp), vjp(vjp)
func.func @jj(%x: f64, %t: f64, %u: f64, %v: f64) -> (f64, f64, f64, f64) {
  %r:4 = "autodiff.jvp"(%x, %t, %u, %v) {fn = @d1} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3 : f64, f64, f64, f64
}
func.func @jv(%x: f64, %c: f64, %u: f64, %v: f64) -> (f64, f64, f64, f64) {
  %r:4 = "autodiff.jvp"(%x, %c, %u, %v) {fn = @g1} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3 : f64, f64, f64, f64
}
func.func @vj(%x: f64, %t: f64, %a: f64, %b: f64) -> (f64, f64, f64, f64) {
  %r:4 = "autodiff.vjp"(%x, %t, %a, %b) {fn = @d1} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3 : f64, f64, f64, f64
}
func.func @vv(%x: f64, %c: f64, %a: f64, %b: f64) -> (f64, f64, f64, f64) {
  %r:4 = "autodiff.vjp"(%x, %c, %a, %b) {fn = @g1} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3 : f64, f64, f64, f64
}
// third order: jvp of (jvp of vjp) and vjp of (jvp of vjp)
func.func @jjv(%x: f64, %c: f64, %u: f64, %v: f64, %p: f64, %q: f64, %r2: f64, %s: f64)
    -> (f64, f64, f64, f64, f64, f64, f64, f64) {
  %r:8 = "autodiff.jvp"(%x, %c, %u, %v, %p, %q, %r2, %s) {fn = @jv}
      : (f64, f64, f64, f64, f64, f64, f64, f64) -> (f64, f64, f64, f64, f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7 : f64, f64, f64, f64, f64, f64, f64, f64
}
func.func @vjv(%x: f64, %c: f64, %u: f64, %v: f64, %a: f64, %b: f64, %d: f64, %e: f64)
    -> (f64, f64, f64, f64, f64, f64, f64, f64) {
  %r:8 = "autodiff.vjp"(%x, %c, %u, %v, %a, %b, %d, %e) {fn = @jv}
      : (f64, f64, f64, f64, f64, f64, f64, f64) -> (f64, f64, f64, f64, f64, f64, f64, f64)
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7 : f64, f64, f64, f64, f64, f64, f64, f64
}
"""


def _derivs(x: float) -> tuple[float, float, float]:
    """f', f'', f''' of f(x) = x sin(e^x), derived by hand.

    With g = sin(e^x): g' = e^x cos(e^x), g'' = e^x cos(e^x) - e^{2x} sin(e^x),
    g''' = e^x cos - 3 e^{2x} sin - e^{3x} cos (all of e^x); f = x g so
    f' = g + x g', f'' = 2 g' + x g'', f''' = 3 g'' + x g'''.
    """
    import math

    e = math.exp(x)
    s, c = math.sin(e), math.cos(e)
    g = s
    g1 = e * c
    g2 = e * c - e * e * s
    g3 = e * c - 3 * e * e * s - e ** 3 * c
    return g + x * g1, 2 * g1 + x * g2, 3 * g2 + x * g3


def test_higher_order_scalar() -> None:
    from mlir_autodiff.runtime import CompiledModule

    cm = CompiledModule(_third_module())
    x = 0.37
    d1, d2, d3 = _derivs(x)
    np.testing.assert_allclose(cm["d1"](x, 1.0)[1], d1, rtol=1e-12)
    np.testing.assert_allclose(cm["g1"](x, 1.0)[1], d1, rtol=1e-12)
    # second order, four ways (the second-order part is the last output)
    np.testing.assert_allclose(cm["jj"](x, 1.0, 1.0, 0.0)[3], d2, rtol=1e-12)
    np.testing.assert_allclose(cm["jv"](x, 1.0, 1.0, 0.0)[3], d2, rtol=1e-12)
    np.testing.assert_allclose(cm["vj"](x, 1.0, 0.0, 1.0)[2], d2, rtol=1e-12)
    np.testing.assert_allclose(cm["vv"](x, 1.0, 0.0, 1.0)[2], d2, rtol=1e-12)
    # third order: d/dx of (the tangent of the gradient along u = 1)
    out = cm["jjv"](x, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    np.testing.assert_allclose(out[7], d3, rtol=1e-11)
    out = cm["vjv"](x, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    np.testing.assert_allclose(out[4], d3, rtol=1e-11)


def _third_module() -> str:
    from mlir import ir

    from mlir_autodiff.transforms.pipeline import run_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        m = ir.Module.parse(THIRD)
        run_pipeline(m, "autodiff-vjp,autodiff-jvp")
        return str(m)


CUSTOM = """func.func @f(%x: f64) -> f64 attributes {
    autodiff.custom_vjp = {fwd = @f_fwd_rule, bwd = @f_bwd_rule},
    autodiff.custom_jvp = @f_jvp_rule} {
  %0 = math.sin %x : f64
  return %0 : f64
}
// Deliberately not the true derivative (cos x): a clipped one, 0.5 * t, so the
// test can tell the rule was used.
func.func @f_jvp_rule(%x: f64, %t: f64) -> (f64, f64) {
  %0 = math.sin %x : f64
  %h = arith.constant 0.5 : f64
  %1 = arith.mulf %t, %h : f64
  return %0, %1 : f64, f64
}
func.func @f_fwd_rule(%x: f64) -> (f64, f64) {
  %0 = math.sin %x : f64
  return %0, %x : f64, f64
}
func.func @f_bwd_rule(%x: f64, %c: f64) -> f64 {
  %h = arith.constant 0.25 : f64
  %0 = arith.mulf %c, %h : f64
  return %0 : f64
}
func.func @g(%x: f64) -> f64 {
  %0 = call @f(%x) : (f64) -> f64
  %1 = arith.mulf %0, %x : f64
  return %1 : f64
}
func.func @jvp_g(%x: f64, %t: f64) -> (f64, f64) {
  %r:2 = "autodiff.jvp"(%x, %t) {fn = @g} : (f64, f64) -> (f64, f64)
  return %r#0, %r#1 : f64, f64
}
func.func @vjp_g(%x: f64, %c: f64) -> (f64, f64) {
  %r:2 = "autodiff.vjp"(%x, %c) {fn = @g} : (f64, f64) -> (f64, f64)
  return %r#0, %r#1 : f64, f64
}
"""


def test_custom_rules_are_used() -> None:
    """g(x) = f(x) x with f's custom rules: d g = f'_custom x + f(x), hand-derived."""
    from mlir import ir

    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.pipeline import run_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        m = ir.Module.parse(CUSTOM)
        run_pipeline(m, "autodiff-jvp,autodiff-vjp")
        cm = CompiledModule(str(m))
    x = 0.8
    y, t = cm["jvp_g"](x, 1.0)
    np.testing.assert_allclose(t, 0.5 * x + np.sin(x), rtol=1e-14)
    y, g = cm["vjp_g"](x, 1.0)
    np.testing.assert_allclose(g, 0.25 * x + np.sin(x), rtol=1e-14)
