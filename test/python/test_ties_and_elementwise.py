"""Elementwise derivatives at ties and kinks, and a rule for every `math`/`arith` op.

Part 1: every op of the upstream `math` and `arith` dialects, enumerated from
the installed Python bindings (a new upstream op without a row here fails
`test_every_op_has_a_row`). Each row is a tiny MLIR function using the op;
one module holds them all (one compile) with jvp, vjp, second-order and vmap
wrappers, lowered for the CPU. Differentiable ops are checked against
central finite differences, the transpose identity and jax; ops with integer
or i1 results sit between float conversions (a zero derivative through them,
checked the same way); the block-scaled conversions must give a diagnostic
naming the op.

Part 2: the front end at the points where rules built from max/min/select/
abs/sign/where disagree with a naive formula: ties (x == y), zeros, kinks.
Expected values come from jax (x64) at those points (finite differences are
not defined at a kink) and from finite differences away from them.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import zlib

import numpy as np
import pytest
from ad_check import Fn, build_module, check_first_order, check_second_order
from mlir import ir

import mlir_autodiff as ad
from mlir_autodiff import dialects, nn
from mlir_autodiff import numpy as anp
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.pipeline import run_pipeline

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
lax = jax.lax

# ----------------------------------------------------------------------------
# Part 1: the op table
# ----------------------------------------------------------------------------


def _binding_ops(module) -> set[str]:
    return {c.OPERATION_NAME for c in vars(module).values()
            if inspect.isclass(c) and hasattr(c, "OPERATION_NAME")}


def upstream_ops() -> set[str]:
    from mlir.dialects import _arith_ops_gen, _math_ops_gen

    return _binding_ops(_math_ops_gen) | _binding_ops(_arith_ops_gen)


@dataclasses.dataclass
class Row:
    """`body` computes %r : f64 from %a, %b (%c) : f64 using `op`."""

    op: str
    body: str
    nargs: int
    jax_fn: object = None
    domain: tuple[float, float] = (-1.5, 1.5)
    fd: bool = True        # finite differences apply (no integer round trip of the input)
    order2: bool = True
    id: str = ""


def _unary(name, jax_fn, domain=(-1.5, 1.5), order2=True):
    return Row(f"math.{name}", f"%r = math.{name} %a : f64", 1, jax_fn, domain, order2=order2)


def _times_a(op, expr, jax_fn, domain):
    # zero-derivative float op: r = op(a) * a, so its (zero) derivative is visible
    return Row(op, f"%f = {expr} : f64\n%r = arith.mulf %f, %a : f64", 1, jax_fn, domain,
               order2=False)


def _via_int(op, line, jax_fn, nargs=2, domain=(1.1, 5.9), ity="i64"):
    """Integer op between fptosi and sitofp; %i, %j are the integer operands, %k the result."""
    pre = f"%i = arith.fptosi %a : f64 to {ity}\n%j = arith.fptosi %b : f64 to {ity}\n"
    post = f"\n%f = arith.sitofp %k : {ity} to f64\n%r = arith.mulf %f, %a : f64"
    return Row(op, pre + line + post, 2, jax_fn, domain, order2=False)


def _t(x):
    return jnp.trunc(x).astype(jnp.int64)


def _f(k, a):
    return k.astype(jnp.float64) * a


_BITS = {
    "ctlz": lambda a: lax.clz(_t(a)),
    "ctpop": lambda a: lax.population_count(_t(a)),
    "cttz": lambda a: 63 - lax.clz(_t(a) & -_t(a)),
}


ROWS = [
    # -- math: differentiable
    _unary("acos", jnp.arccos, (-0.9, 0.9)),
    _unary("acosh", jnp.arccosh, (1.2, 3.0)),
    _unary("asin", jnp.arcsin, (-0.9, 0.9)),
    _unary("asinh", jnp.arcsinh),
    _unary("atan", jnp.arctan),
    _unary("atanh", jnp.arctanh, (-0.9, 0.9)),
    _unary("cbrt", jnp.cbrt, (0.2, 3.0)),
    _unary("cos", jnp.cos),
    _unary("cosh", jnp.cosh),
    _unary("erf", jax.scipy.special.erf),
    _unary("erfc", jax.scipy.special.erfc),
    _unary("exp", jnp.exp),
    _unary("exp2", jnp.exp2),
    _unary("expm1", jnp.expm1),
    _unary("log", jnp.log, (0.2, 3.0)),
    _unary("log10", jnp.log10, (0.2, 3.0)),
    _unary("log1p", jnp.log1p, (-0.5, 2.0)),
    _unary("log2", jnp.log2, (0.2, 3.0)),
    _unary("rsqrt", lax.rsqrt, (0.2, 3.0)),
    _unary("sin", jnp.sin),
    _unary("sinh", jnp.sinh),
    _unary("sqrt", jnp.sqrt, (0.2, 3.0)),
    _unary("tan", jnp.tan, (-1.0, 1.0)),
    _unary("tanh", jnp.tanh),
    _unary("absf", jnp.abs),
    Row("math.atan2", "%r = math.atan2 %a, %b : f64", 2, jnp.arctan2, (0.3, 2.0)),
    Row("math.copysign", "%r = math.copysign %a, %b : f64", 2, jnp.copysign),
    Row("math.powf", "%r = math.powf %a, %b : f64", 2, jnp.power, (0.5, 2.0)),
    Row("math.fma", "%r = math.fma %a, %b, %c : f64", 3, lambda a, b, c: a * b + c),
    Row("math.clampf", "%r = math.clampf %a to [%b, %c] : f64", 3,
        lambda a, b, c: jnp.maximum(jnp.minimum(a, b), c)),
    Row("math.fpowi", "%n = arith.constant 3 : i32\n%r = math.fpowi %a, %n : f64, i32", 1,
        lambda a: a ** 3),
    Row("math.sincos", "%s, %k = math.sincos %a : f64\n%t = arith.addf %k, %k : f64\n"
        "%r = arith.addf %s, %t : f64", 1, lambda a: jnp.sin(a) + 2 * jnp.cos(a)),
    # -- math: zero derivative (float results)
    _times_a("math.ceil", "math.ceil %a", lambda a: jnp.ceil(a) * a, (0.1, 2.9)),
    _times_a("math.floor", "math.floor %a", lambda a: jnp.floor(a) * a, (0.1, 2.9)),
    _times_a("math.round", "math.round %a", lambda a: jnp.round(a) * a, (0.1, 0.45)),
    _times_a("math.roundeven", "math.roundeven %a", lambda a: jnp.round(a) * a, (0.6, 1.4)),
    _times_a("math.trunc", "math.trunc %a", lambda a: jnp.trunc(a) * a, (0.1, 2.9)),
    # -- math: integer or i1 results (inactive by type)
    Row("math.absi", "%i = arith.fptosi %a : f64 to i64\n%k = math.absi %i : i64\n"
        "%f = arith.sitofp %k : i64 to f64\n%r = arith.mulf %f, %a : f64", 1,
        lambda a: jnp.abs(_t(a)).astype(jnp.float64) * a, (-5.9, -1.1)),
    *[Row(f"math.{n}", f"%i = arith.fptosi %a : f64 to i64\n%k = math.{n} %i : i64\n"
          "%f = arith.sitofp %k : i64 to f64\n%r = arith.mulf %f, %a : f64", 1,
          lambda a, n=n: _f(_BITS[n](a), a), (1.1, 60.9))
      for n in ("ctlz", "ctpop", "cttz")],
    Row("math.ipowi", "%i = arith.fptosi %a : f64 to i64\n%n = arith.constant 3 : i64\n"
        "%k = math.ipowi %i, %n : i64\n%f = arith.sitofp %k : i64 to f64\n"
        "%r = arith.mulf %f, %a : f64", 1, lambda a: _f(_t(a) ** 3, a), (1.1, 5.9)),
    *[Row(f"math.{n}", f"%p = math.{n} %a : f64\n%s = arith.mulf %a, %a : f64\n"
          f"%r = arith.select %p, %s, %b : f64", 2, lambda a, b, n=n: jnp.where(
              {"isfinite": jnp.isfinite, "isinf": jnp.isinf, "isnan": jnp.isnan,
               "isnormal": lambda v: jnp.isfinite(v) & (v != 0)}[n](a), a * a, b))
      for n in ("isfinite", "isinf", "isnan", "isnormal")],
    # -- arith: float
    Row("arith.addf", "%r = arith.addf %a, %b : f64", 2, lambda a, b: a + b),
    Row("arith.subf", "%r = arith.subf %a, %b : f64", 2, lambda a, b: a - b),
    Row("arith.mulf", "%r = arith.mulf %a, %b : f64", 2, lambda a, b: a * b),
    Row("arith.divf", "%r = arith.divf %a, %b : f64", 2, lambda a, b: a / b, (0.5, 2.0)),
    Row("arith.remf", "%r = arith.remf %a, %b : f64", 2, jnp.fmod, (0.6, 2.0)),
    Row("arith.negf", "%s = arith.negf %a : f64\n%r = arith.mulf %s, %a : f64", 1,
        lambda a: -a * a),
    Row("arith.maximumf", "%r = arith.maximumf %a, %b : f64", 2, jnp.maximum),
    Row("arith.minimumf", "%r = arith.minimumf %a, %b : f64", 2, jnp.minimum),
    Row("arith.maxnumf", "%r = arith.maxnumf %a, %b : f64", 2, jnp.fmax),
    Row("arith.minnumf", "%r = arith.minnumf %a, %b : f64", 2, jnp.fmin),
    Row("arith.cmpf", "%p = arith.cmpf olt, %a, %b : f64\n%s = arith.mulf %a, %a : f64\n"
        "%r = arith.select %p, %s, %b : f64", 2, lambda a, b: jnp.where(a < b, a * a, b)),
    Row("arith.select", "%p = arith.cmpf ogt, %a, %b : f64\n%s = arith.mulf %a, %b : f64\n"
        "%r = arith.select %p, %s, %a : f64", 2, lambda a, b: jnp.where(a > b, a * b, a)),
    Row("arith.constant", "%k = arith.constant 2.5 : f64\n%r = arith.mulf %a, %k : f64", 1,
        lambda a: a * 2.5),
    Row("arith.extf", "%x = arith.truncf %a : f64 to f32\n%y = arith.extf %x : f32 to f64\n"
        "%r = arith.mulf %y, %b : f64", 2,
        lambda a, b: a.astype(jnp.float32).astype(jnp.float64) * b, fd=False, order2=False),
    Row("arith.truncf", "%x = arith.truncf %a : f64 to f32\n%y = arith.extf %x : f32 to f64\n"
        "%r = arith.mulf %y, %b : f64", 2,
        lambda a, b: a.astype(jnp.float32).astype(jnp.float64) * b, fd=False, order2=False),
    Row("arith.fptosi", "%i = arith.fptosi %a : f64 to i32\n%f = arith.sitofp %i : i32 to f64\n"
        "%r = arith.mulf %f, %a : f64", 1, lambda a: jnp.trunc(a) * a, (1.1, 2.9)),
    Row("arith.sitofp", "%i = arith.fptosi %a : f64 to i32\n%f = arith.sitofp %i : i32 to f64\n"
        "%r = arith.mulf %f, %a : f64", 1, lambda a: jnp.trunc(a) * a, (1.1, 2.9)),
    Row("arith.fptoui", "%i = arith.fptoui %a : f64 to i32\n%f = arith.uitofp %i : i32 to f64\n"
        "%r = arith.mulf %f, %b : f64", 2, lambda a, b: jnp.trunc(a) * b, (1.1, 2.9)),
    Row("arith.uitofp", "%i = arith.fptoui %a : f64 to i32\n%f = arith.uitofp %i : i32 to f64\n"
        "%r = arith.mulf %f, %b : f64", 2, lambda a, b: jnp.trunc(a) * b, (1.1, 2.9)),
    # bitcast through i64 (flipping the sign bit): the derivative goes nowhere through the
    # integer, as in jax (a round trip with nothing between would fold away)
    Row("arith.bitcast", "%i = arith.bitcast %a : f64 to i64\n"
        "%m = arith.constant -9223372036854775808 : i64\n%k = arith.xori %i, %m : i64\n"
        "%f = arith.bitcast %k : i64 to f64\n%r = arith.mulf %f, %a : f64", 1,
        lambda a: lax.bitcast_convert_type(
            lax.bitcast_convert_type(a, jnp.int64) ^ jnp.int64(-2 ** 63), jnp.float64) * a,
        fd=False),
    # -- arith: integer ops between float conversions
    _via_int("arith.addi", "%k = arith.addi %i, %j : i64", lambda a, b: _f(_t(a) + _t(b), a)),
    _via_int("arith.subi", "%k = arith.subi %i, %j : i64", lambda a, b: _f(_t(a) - _t(b), a)),
    _via_int("arith.muli", "%k = arith.muli %i, %j : i64", lambda a, b: _f(_t(a) * _t(b), a)),
    _via_int("arith.divsi", "%k = arith.divsi %i, %j : i64", lambda a, b: _f(_t(a) // _t(b), a)),
    _via_int("arith.divui", "%k = arith.divui %i, %j : i64", lambda a, b: _f(_t(a) // _t(b), a)),
    _via_int("arith.ceildivsi", "%k = arith.ceildivsi %i, %j : i64",
             lambda a, b: _f(-(-_t(a) // _t(b)), a)),
    _via_int("arith.ceildivui", "%k = arith.ceildivui %i, %j : i64",
             lambda a, b: _f(-(-_t(a) // _t(b)), a)),
    _via_int("arith.floordivsi", "%k = arith.floordivsi %i, %j : i64",
             lambda a, b: _f(_t(a) // _t(b), a)),
    _via_int("arith.remsi", "%k = arith.remsi %i, %j : i64", lambda a, b: _f(_t(a) % _t(b), a)),
    _via_int("arith.remui", "%k = arith.remui %i, %j : i64", lambda a, b: _f(_t(a) % _t(b), a)),
    _via_int("arith.andi", "%k = arith.andi %i, %j : i64", lambda a, b: _f(_t(a) & _t(b), a)),
    _via_int("arith.ori", "%k = arith.ori %i, %j : i64", lambda a, b: _f(_t(a) | _t(b), a)),
    _via_int("arith.xori", "%k = arith.xori %i, %j : i64", lambda a, b: _f(_t(a) ^ _t(b), a)),
    _via_int("arith.shli", "%k = arith.shli %i, %j : i64", lambda a, b: _f(_t(a) << _t(b), a)),
    _via_int("arith.shrsi", "%k = arith.shrsi %i, %j : i64", lambda a, b: _f(_t(a) >> _t(b), a)),
    _via_int("arith.shrui", "%k = arith.shrui %i, %j : i64", lambda a, b: _f(_t(a) >> _t(b), a)),
    _via_int("arith.maxsi", "%k = arith.maxsi %i, %j : i64",
             lambda a, b: _f(jnp.maximum(_t(a), _t(b)), a)),
    _via_int("arith.maxui", "%k = arith.maxui %i, %j : i64",
             lambda a, b: _f(jnp.maximum(_t(a), _t(b)), a)),
    _via_int("arith.minsi", "%k = arith.minsi %i, %j : i64",
             lambda a, b: _f(jnp.minimum(_t(a), _t(b)), a)),
    _via_int("arith.minui", "%k = arith.minui %i, %j : i64",
             lambda a, b: _f(jnp.minimum(_t(a), _t(b)), a)),
    _via_int("arith.cmpi", "%p = arith.cmpi slt, %i, %j : i64\n%k = arith.extui %p : i1 to i64",
             lambda a, b: _f((_t(a) < _t(b)).astype(jnp.int64), a)),
    _via_int("arith.extui", "%p = arith.cmpi slt, %i, %j : i64\n%k = arith.extui %p : i1 to i64",
             lambda a, b: _f((_t(a) < _t(b)).astype(jnp.int64), a)),
    _via_int("arith.extsi", "%n = arith.trunci %i : i64 to i32\n%k = arith.extsi %n : i32 to i64",
             lambda a, b: _f(_t(a), a)),
    _via_int("arith.trunci", "%n = arith.trunci %i : i64 to i32\n%k = arith.extsi %n : i32 to i64",
             lambda a, b: _f(_t(a), a)),
    _via_int("arith.index_cast", "%n = arith.index_cast %i : i64 to index\n"
             "%k = arith.index_cast %n : index to i64", lambda a, b: _f(_t(a), a)),
    _via_int("arith.index_castui", "%n = arith.index_castui %i : i64 to index\n"
             "%k = arith.index_castui %n : index to i64", lambda a, b: _f(_t(a), a)),
    _via_int("arith.addui_extended", "%k, %o = arith.addui_extended %i, %j : i64, i1",
             lambda a, b: _f(_t(a) + _t(b), a)),
    _via_int("arith.mulsi_extended", "%k, %h = arith.mulsi_extended %i, %j : i64",
             lambda a, b: _f(_t(a) * _t(b), a)),
    _via_int("arith.mului_extended", "%k, %h = arith.mului_extended %i, %j : i64",
             lambda a, b: _f(_t(a) * _t(b), a)),
]


#: Ops that are not differentiable: jvp and vjp must stop at them with a diagnostic.
NOT_DIFFERENTIABLE = {
    "arith.scaling_extf": "%s = arith.constant 2.0 : f8E8M0FNU\n"
                          "%x = arith.truncf %a : f64 to f8E4M3FN\n"
                          "%r = arith.scaling_extf %x, %s : f8E4M3FN, f8E8M0FNU to f64",
    "arith.scaling_truncf": "%s = arith.constant 2.0 : f8E8M0FNU\n"
                            "%x = arith.scaling_truncf %a, %s : f64, f8E8M0FNU to f8E4M3FN\n"
                            "%r = arith.extf %x : f8E4M3FN to f64",
}

for _r in ROWS:  # integer results: first order shows the zero derivative; no second order
    if _r.op in ("math.absi", "math.ctlz", "math.ctpop", "math.cttz", "math.ipowi"):
        _r.order2 = False
for i, _r in enumerate(ROWS):
    _r.id = re.sub(r"\W", "_", _r.op) + (f"_{i}" if sum(r.op == _r.op for r in ROWS) > 1 else "")
ROW_BY_ID = {r.id: r for r in ROWS}
ARGS = ["%a", "%b", "%c"]
B = 4


def _fn(r: Row) -> Fn:
    params = ", ".join(f"{ARGS[i]}: f64" for i in range(r.nargs))
    text = f"func.func @s_{r.id}({params}) -> f64 {{\n{r.body}\nreturn %r : f64\n}}"
    # vmap wrapper: every argument batched at axis 0
    bt = f"tensor<{B}xf64>"
    bparams = ", ".join(f"%x{i}: {bt}" for i in range(r.nargs))
    names = ", ".join(f"%x{i}" for i in range(r.nargs))
    text += (f"\nfunc.func @vmap_s_{r.id}({bparams}) -> {bt} {{\n"
             f"  %r = \"autodiff.vmap\"({names}) {{fn = @s_{r.id}, "
             f"in_axes = array<i64: {', '.join(['0'] * r.nargs)}>, out_axes = array<i64: 0>, "
             f"randomness = \"error\"}} : ({', '.join([bt] * r.nargs)}) -> {bt}\n"
             f"  return %r : {bt}\n}}")
    return Fn(f"s_{r.id}", text, ["f64"] * r.nargs, ["f64"], r.domain, r.jax_fn, r.order2)


_CACHE: dict = {}


def table():
    """All rows in one module, compiled once (a failure is also remembered)."""
    if "cm" not in _CACHE:
        fns = {r.id: _fn(r) for r in ROWS}
        try:
            text = build_module(list(fns.values()), "autodiff-vmap,autodiff-jvp,autodiff-vjp")
            _CACHE["cm"] = (CompiledModule(text), fns)
        except Exception as err:  # noqa: BLE001 - reported by every test of the table
            _CACHE["cm"] = err
    if isinstance(_CACHE["cm"], Exception):
        raise _CACHE["cm"]
    return _CACHE["cm"]


def test_every_op_has_a_row() -> None:
    """Every upstream math/arith op is in the table (or explicitly not differentiable)."""
    covered = {r.op for r in ROWS} | set(NOT_DIFFERENTIABLE)
    missing = sorted(upstream_ops() - covered)
    assert not missing, f"math/arith ops without a row in this table: {missing}"


def test_every_float_op_has_rules() -> None:
    """Each op with a float result has a forward and a reverse rule (or a diagnostic)."""
    from mlir_autodiff.transforms.rules.batching import rule_for
    from mlir_autodiff.transforms.rules.registry import JVP_RULES, VJP_RULES, load_all

    load_all()
    float_ops = {r.op for r in ROWS if r.op.startswith("math.") and not r.op.startswith(
        ("math.is", "math.ct", "math.absi", "math.ipowi"))}
    float_ops |= {"arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf",
                  "arith.negf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
                  "arith.minnumf", "arith.select", "arith.constant", "arith.extf",
                  "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.bitcast",
                  *NOT_DIFFERENTIABLE}
    missing = sorted(o for o in float_ops if o not in JVP_RULES or o not in VJP_RULES)
    assert not missing, missing
    # and a batching rule (arith.constant, without operands, is never batched)
    unbatched = sorted(o for o in upstream_ops() - {"arith.constant"} if rule_for(o) is None)
    assert not unbatched, unbatched


@pytest.mark.parametrize("row_id", sorted(ROW_BY_ID))
def test_op_first_order(row_id: str) -> None:
    cm, fns = table()
    r = ROW_BY_ID[row_id]
    rng = np.random.default_rng(zlib.crc32(row_id.encode()))
    f = fns[row_id]
    if r.fd:
        check_first_order(cm, f, rng)
    else:  # transpose identity only; jax below
        from ad_check import random_args, random_like, vdot
        xs, ts, cs = random_args(f, rng), random_like(f.params, rng), random_like(f.results, rng)
        jv = cm[f"jvp_{f.name}"](*xs, *ts)
        vj = cm[f"vjp_{f.name}"](*xs, *cs)
        # (rtol: the extf/truncf rows round their tangents to f32)
        np.testing.assert_allclose(vdot(vj[1:], ts), vdot(cs, [jv[1]]), rtol=1e-6, atol=1e-12)
    if r.jax_fn is not None:
        xs = [np.asarray(rng.uniform(*r.domain)) for _ in range(r.nargs)]
        ts = [np.asarray(rng.standard_normal()) for _ in range(r.nargs)]
        want_y, want_t = jax.jvp(r.jax_fn, tuple(map(jnp.asarray, xs)),
                                 tuple(map(jnp.asarray, ts)))
        y, t = cm[f"jvp_{f.name}"](*xs, *ts)
        np.testing.assert_allclose(y, want_y, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(t, want_t, rtol=1e-10, atol=1e-12)
        grads = jax.grad(r.jax_fn, argnums=tuple(range(r.nargs)))(*map(jnp.asarray, xs))
        got = cm[f"vjp_{f.name}"](*xs, np.asarray(1.0))[1:]
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(grads),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("row_id", sorted(i for i, r in ROW_BY_ID.items() if r.order2 and r.fd))
def test_op_second_order(row_id: str) -> None:
    cm, fns = table()
    check_second_order(cm, fns[row_id], np.random.default_rng(1 + zlib.crc32(row_id.encode())))


@pytest.mark.parametrize("row_id", sorted(ROW_BY_ID))
def test_op_vmap(row_id: str) -> None:
    """The batched function equals the unbatched one called per lane (CPU)."""
    cm, fns = table()
    r = ROW_BY_ID[row_id]
    rng = np.random.default_rng(2 + zlib.crc32(row_id.encode()))
    xs = [rng.uniform(*r.domain, B) for _ in range(r.nargs)]
    got = cm[f"vmap_s_{row_id}"](*xs)
    want = [cm[f"s_{row_id}"](*[x[k] for x in xs]) for k in range(B)]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want, np.float64))


@pytest.mark.parametrize("mode", ["autodiff-jvp", "autodiff-vjp"])
@pytest.mark.parametrize("op", sorted(NOT_DIFFERENTIABLE))
def test_not_differentiable_op_is_a_diagnostic(op: str, mode: str) -> None:
    body = NOT_DIFFERENTIABLE[op]
    f = Fn("s_nd", f"func.func @s_nd(%a: f64) -> f64 {{\n{body}\nreturn %r : f64\n}}",
           ["f64"], ["f64"], order2=False)
    from ad_check import wrappers

    text = f.text + "\n" + wrappers(f)
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        with pytest.raises(Exception, match=rf"{mode}: '{op}' is not differentiable"):
            run_pipeline(module, mode)


# ----------------------------------------------------------------------------
# Part 2: the front end at ties, zeros and kinks, against jax
# ----------------------------------------------------------------------------

ZEROS = np.zeros(3)
TIES = np.array([0.0, -1.5, 2.0])           # maximum(x, TIES) ties everywhere at x = TIES
MIXED = np.array([-1.0, 0.0, 0.0, 2.0, -0.0])


def _close(got, want, what):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-12, atol=1e-14, err_msg=what)


def check_like_jax(f, jf, x, *, hessian=True):
    """grad, jvp, vjp and hessian of sum(f(x)) (jvp of f itself) against jax at x."""
    x = np.asarray(x, np.float64)
    t = np.linspace(-1.0, 2.0, x.size).reshape(x.shape) if x.ndim else np.asarray(0.7)
    _close(ad.jit(f)(x), jf(jnp.asarray(x)), "value")
    _close(ad.grad(lambda v: anp.sum(f(v)))(x), jax.grad(lambda v: jnp.sum(jf(v)))(x), "grad")
    y, ty = ad.jvp(f, (x,), (t,))
    jy, jty = jax.jvp(jf, (jnp.asarray(x),), (jnp.asarray(t),))
    _close(ty, jty, "jvp")
    ct = np.cos(np.arange(np.size(y)) + 1.0).reshape(np.shape(y))
    _, pull = ad.vjp(f, x)
    _, jpull = jax.vjp(jf, jnp.asarray(x))
    _close(pull(ct)[0], jpull(jnp.asarray(ct))[0], "vjp")
    if hessian:
        _close(ad.hessian(lambda v: anp.sum(f(v)))(x),
               jax.hessian(lambda v: jnp.sum(jf(v)))(jnp.asarray(x)), "hessian")


TIE_CASES = {
    # binary max/min family, array and scalar partners, at ties
    "maximum_array": (lambda x: anp.maximum(x, TIES), lambda x: jnp.maximum(x, TIES), TIES),
    "maximum_scalar": (lambda x: anp.maximum(x, 0.0), lambda x: jnp.maximum(x, 0.0), MIXED),
    "maximum_self": (lambda x: anp.maximum(x, x), lambda x: jnp.maximum(x, x), TIES),
    "maximum_scalar_first": (lambda x: anp.maximum(0.0, x), lambda x: jnp.maximum(0.0, x), MIXED),
    "minimum_array": (lambda x: anp.minimum(x, TIES), lambda x: jnp.minimum(x, TIES), TIES),
    "minimum_scalar": (lambda x: anp.minimum(x, 0.0), lambda x: jnp.minimum(x, 0.0), MIXED),
    # fmax/fmin (maxnumf/minnumf) split a tie like maximum/minimum; jnp.fmax is written
    # with a `where` that hands a tie to its second operand, so the reference without
    # NaN is jnp.maximum/minimum.
    "fmax": (lambda x: anp.fmax(x, TIES), lambda x: jnp.maximum(x, TIES), TIES),
    "fmin": (lambda x: anp.fmin(x, 0.0), lambda x: jnp.minimum(x, 0.0), MIXED),
    "maximum_chain": (lambda x: anp.maximum(x * x, x), lambda x: jnp.maximum(x * x, x),
                      np.array([0.0, 1.0, 0.5])),
    "clip": (lambda x: anp.clip(x, -1.5, 2.0), lambda x: jnp.clip(x, -1.5, 2.0), TIES),
    "logaddexp_zero": (lambda x: anp.logaddexp(x, 0.0), lambda x: jnp.logaddexp(x, 0.0),
                       ZEROS),
    "logaddexp_ties": (lambda x: anp.logaddexp(x, TIES), lambda x: jnp.logaddexp(x, TIES), TIES),
    "logaddexp_self": (lambda x: anp.logaddexp(x, x), lambda x: jnp.logaddexp(x, x), TIES),
    "logaddexp_far": (lambda x: anp.logaddexp(x, 0.0), lambda x: jnp.logaddexp(x, 0.0),
                      np.array([-800.0, 800.0, -3.0])),
    "logaddexp2_zero": (lambda x: anp.logaddexp2(x, 0.0), lambda x: jnp.logaddexp2(x, 0.0),
                        ZEROS),
    "abs": (anp.abs, jnp.abs, MIXED),
    "abs_of_negative": (lambda x: anp.abs(-x), lambda x: jnp.abs(-x), MIXED),
    "sign": (lambda x: anp.sign(x) * x, lambda x: jnp.sign(x) * x, MIXED),
    "where": (lambda x: anp.where(x > 0, x * x, -x), lambda x: jnp.where(x > 0, x * x, -x),
              MIXED),
    "remainder_zero": (lambda x: anp.remainder(x, 2.0), lambda x: jnp.remainder(x, 2.0),
                       np.array([2.0, -4.0, 0.0, 1.0])),
    "remainder_negative_divisor": (lambda x: anp.remainder(x, -2.0),
                                   lambda x: jnp.remainder(x, -2.0),
                                   np.array([2.0, -4.0, 0.0, 1.0])),
    "fmod_zero": (lambda x: anp.fmod(x, 2.0), lambda x: jnp.fmod(x, 2.0),
                  np.array([2.0, -4.0, 1.0])),
    "relu": (nn.relu, jax.nn.relu, MIXED),
    "softplus": (nn.softplus, jax.nn.softplus, MIXED),
    "sigmoid": (nn.sigmoid, jax.nn.sigmoid, MIXED),
    "log_sigmoid": (nn.log_sigmoid, jax.nn.log_sigmoid, MIXED),
    "silu": (nn.silu, jax.nn.silu, MIXED),
    "gelu_tanh": (nn.gelu, lambda x: jax.nn.gelu(x, approximate=True), MIXED),
    "gelu_erf": (lambda x: nn.gelu(x, approximate=False),
                 lambda x: jax.nn.gelu(x, approximate=False),
                 np.array([-3.0, -0.5, 0.0, 0.5, 1.0, 4.0])),
    "softmax_ties": (nn.softmax, jax.nn.softmax, np.array([1.0, 2.0, 2.0])),
    "log_softmax_ties": (nn.log_softmax, jax.nn.log_softmax, np.array([1.0, 2.0, 2.0])),
    "logsumexp_ties": (nn.logsumexp, jax.scipy.special.logsumexp, np.array([1.0, 2.0, 2.0])),
    "logsumexp_zeros": (nn.logsumexp, jax.scipy.special.logsumexp, ZEROS),
    "arcsinh": (anp.arcsinh, jnp.arcsinh, np.array([-2.0, 0.0, 0.5])),
    "arccosh": (anp.arccosh, jnp.arccosh, np.array([1.5, 2.0, 7.0])),
    "arctanh": (anp.arctanh, jnp.arctanh, np.array([-0.5, 0.0, 0.9])),
}


@pytest.mark.parametrize("case", sorted(TIE_CASES))
def test_front_end_like_jax(case: str) -> None:
    f, jf, x = TIE_CASES[case]
    check_like_jax(f, jf, x)


def test_fmax_fmin_ignore_nan() -> None:
    x = np.array([np.nan, 1.0, 2.0])
    y = np.array([0.5, np.nan, 2.0])
    np.testing.assert_array_equal(ad.jit(anp.fmax)(x, y), np.fmax(x, y))
    np.testing.assert_array_equal(ad.jit(anp.fmin)(x, y), np.fmin(x, y))
    gx, gy = ad.grad(lambda a, b: anp.sum(anp.fmax(a, b)), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 0.5])
    np.testing.assert_array_equal(gy, [1.0, 0.0, 0.5])


def test_issue_logaddexp_tie_gradient() -> None:
    """The reported case: 0.5 per element, not 1.0."""
    g = ad.grad(lambda a: anp.sum(anp.logaddexp(a, 0.0)))(np.zeros(3))
    np.testing.assert_array_equal(g, [0.5, 0.5, 0.5])


@pytest.mark.parametrize("kind", ["jit", "grad", "jvp"])
def test_binary_max_tie_split_scalar_operands(kind: str) -> None:
    """maximum(x, y) of two traced scalars at x == y: each gets half, jvp is the mean."""
    f = lambda a, b: anp.maximum(a, b) * 3.0  # noqa: E731
    if kind == "jit":
        assert ad.jit(f)(1.5, 1.5) == 4.5
    elif kind == "grad":
        _close(ad.grad(f, argnums=(0, 1))(1.5, 1.5), (1.5, 1.5), "grad")
    else:
        _, t = ad.jvp(f, (1.5, 1.5), (1.0, 3.0))
        _close(t, 6.0, "jvp")


def test_vmap_of_grad_at_ties() -> None:
    f = lambda v: anp.sum(anp.minimum(v, 0.0) + anp.logaddexp(v, 0.0))  # noqa: E731
    jf = lambda v: jnp.sum(jnp.minimum(v, 0.0) + jnp.logaddexp(v, 0.0))  # noqa: E731
    xs = np.array([[0.0, 1.0], [0.0, 0.0], [-1.0, 0.0]])
    _close(ad.vmap(ad.grad(f))(xs), jax.vmap(jax.grad(jf))(xs), "vmap(grad)")


# -- power with a traced exponent -------------------------------------------------

XNEG = np.array([-1.0, 2.0, -0.5])
POWER_CASES = {
    "int_exponent": (lambda x, e: anp.power(x, e), lambda x, e: jnp.power(x, e),
                     np.array([2, 3, 2])),
    "float_exponent": (lambda x, e: anp.power(x, e), lambda x, e: jnp.power(x, e),
                       np.array([2.0, 3.0, 2.0])),
    "floor_exponent": (lambda x, e: anp.power(x, anp.floor(x) + e),
                       lambda x, e: jnp.power(x, jnp.floor(x) + e), np.array([3.0, 0.0, 3.0])),
    "stopped_exponent": (lambda x, e: anp.power(x, ad.stop_gradient(x) * 0.0 + e),
                         lambda x, e: jnp.power(x, lax.stop_gradient(x) * 0.0 + e),
                         np.array([2.0, 3.0, 4.0])),
}


@pytest.mark.parametrize("case", sorted(POWER_CASES))
@pytest.mark.parametrize("mode", ["hessian", "jacfwd_jacrev", "jacrev_jacrev", "grad_grad"])
def test_power_traced_exponent_negative_base(case: str, mode: str) -> None:
    f, jf, e = POWER_CASES[case]
    ours = lambda x, e: anp.sum(f(x, e))  # noqa: E731
    theirs = lambda x, e: jnp.sum(jf(x, e))  # noqa: E731
    if mode == "grad_grad":
        got = ad.grad(lambda x, e: anp.sum(ad.grad(ours)(x, e) ** 2))(XNEG, e)
        want = jax.grad(lambda x, e: jnp.sum(jax.grad(theirs)(x, e) ** 2))(XNEG, e)
    else:
        outer, inner = {"hessian": (ad.hessian, None), "jacfwd_jacrev": (ad.jacfwd, ad.jacrev),
                        "jacrev_jacrev": (ad.jacrev, ad.jacrev)}[mode]
        got = outer(ours)(XNEG, e) if inner is None else outer(inner(ours))(XNEG, e)
        want = jax.hessian(theirs)(XNEG, e)
    assert np.all(np.isfinite(got)), got
    _close(got, want, mode)


def test_power_exponent_derivative_at_zero_base() -> None:
    """d/dy x**y at x == 0 is 0 (jax's convention), not 0 * log(0) = NaN."""
    got = ad.grad(lambda x, y: anp.power(x, y), argnums=(0, 1))(0.0, 2.0)
    want = jax.grad(lambda x, y: jnp.power(x, y), argnums=(0, 1))(0.0, 2.0)
    _close(got, want, "grad at x = 0")


# -- gelu and keywords -------------------------------------------------------------

def test_gelu_exact_is_erf() -> None:
    x = np.linspace(-4.0, 4.0, 17)
    want = np.asarray(jax.nn.gelu(jnp.asarray(x), approximate=False))
    _close(ad.jit(lambda v: nn.gelu(v, approximate=False))(x), want, "jit")
    _close(nn.gelu(x, approximate=False), want, "eager")
    x32 = x.astype(np.float32)
    got = ad.jit(lambda v: nn.gelu(v, approximate=False))(x32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("bad", ["none", "tanh", 2])
def test_gelu_rejects_a_non_bool_approximate(bad) -> None:
    with pytest.raises(TypeError, match="approximate"):
        ad.jit(lambda v: nn.gelu(v, approximate=bad))(np.ones(2))


@pytest.mark.skipif(__import__("shutil").which("ptxas") is None,
                    reason="ptxas (CUDA toolkit) is not on PATH")
def test_op_table_reaches_a_gpu_fatbin() -> None:
    """The whole op table (differentiated and batched) also lowers for the GPU."""
    from mlir_autodiff import gpu as adgpu
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu

    text = build_module([_fn(r) for r in ROWS], "autodiff-vmap,autodiff-jvp,autodiff-vjp")
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_90", format="fatbin")])
        objects = adgpu.gpu_objects(module)
        assert objects
        for obj in objects:
            assert [s for s, _ in adgpu.fatbin_cubins(obj.data)] == [90]


TIE_POINTS = {
    # row id: argument tuples at ties / zeros
    "arith_maximumf": [(1.5, 1.5), (0.0, -0.0), (-2.0, -2.0)],
    "arith_minimumf": [(1.5, 1.5), (0.0, -0.0), (-2.0, -2.0)],
    "arith_maxnumf": [(1.5, 1.5), (-2.0, -2.0)],
    "arith_minnumf": [(1.5, 1.5), (-2.0, -2.0)],
    "math_clampf": [(0.5, 0.5, 0.2), (0.5, 1.0, 1.0), (0.3, 0.3, 0.3), (2.0, 1.0, 1.0)],
    "math_absf": [(0.0,), (-0.0,)],
    "math_copysign": [(0.0, 1.0), (0.0, -1.0), (-0.0, 1.0), (1.0, 0.0)],
    "math_powf": [(0.0, 2.0), (0.0, 0.5)],
}
JAX_AT_TIES = {
    "arith_maxnumf": jnp.maximum,   # jnp.fmax hands a tie to its second operand (a `where`)
    "arith_minnumf": jnp.minimum,
}


@pytest.mark.parametrize("row_id", sorted(TIE_POINTS))
def test_op_rules_at_ties_like_jax(row_id: str) -> None:
    """jvp and vjp of the MLIR rules at ties and zeros = jax's (FD is undefined there)."""
    cm, fns = table()
    r = ROW_BY_ID[row_id]
    jf = JAX_AT_TIES.get(row_id, r.jax_fn)
    f = fns[row_id]
    for xs in TIE_POINTS[row_id]:
        xs = [np.asarray(v) for v in xs]
        ts = [np.asarray(v) for v in (1.0, 3.0, -5.0)[: r.nargs]]
        want_y, want_t = jax.jvp(jf, tuple(map(jnp.asarray, xs)), tuple(map(jnp.asarray, ts)))
        y, t = cm[f"jvp_{f.name}"](*xs, *ts)
        _close(y, want_y, f"value at {xs}")
        _close(t, want_t, f"jvp at {xs}")
        want_g = jax.grad(jf, argnums=tuple(range(r.nargs)))(*map(jnp.asarray, xs))
        _close(cm[f"vjp_{f.name}"](*xs, np.asarray(1.0))[1:], want_g, f"vjp at {xs}")
