"""Functions with unstructured control flow (`cf.br`, `cf.cond_br`, `cf.switch`,
multi-block `scf.execute_region`) under jvp, vjp and vmap.

The transform passes lift such functions to `scf` first (transforms/lift_cf.py).
Oracles: central finite differences and the dot-product identity
(ad_check.py), second order (jvp of vjp, vjp of jvp, vjp of vjp) against
finite differences of the first-order functions, jax on the same math, and
for vmap a loop over the batch calling the unbatched function.
"""

from __future__ import annotations

import numpy as np
import pytest
from ad_check import (
    Fn,
    check_against_jax,
    check_first_order,
    check_second_order,
    compile_fns,
    random_args,
)

from mlir_autodiff.runtime import CompiledModule

T4 = "tensor<4xf64>"

#: cond_br on a predicate computed from the data: sum(x) > y.
BRANCH = Fn("branch", f"""
func.func @branch(%x: {T4}, %y: f64) -> {T4} {{
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%x : {T4}) outs(%f : tensor<f64>) dimensions = [0]
    (%a: f64, %acc: f64) {{
      %t = arith.addf %a, %acc : f64
      linalg.yield %t : f64
    }}
  %sv = tensor.extract %s[] : tensor<f64>
  %p = arith.cmpf ogt, %sv, %y : f64
  cf.cond_br %p, ^big, ^small
^big:
  %sx = math.sin %x : {T4}
  %yb = tensor.splat %y : {T4}
  %r1 = arith.mulf %sx, %yb : {T4}
  cf.br ^done(%r1 : {T4})
^small:
  %ey = math.exp %y : f64
  %eb = tensor.splat %ey : {T4}
  %r2 = arith.mulf %x, %eb : {T4}
  cf.br ^done(%r2 : {T4})
^done(%r: {T4}):
  return %r : {T4}
}}""", [T4, "f64"], [T4], domain=(-1.5, 1.5))


def _branch_jax(x, y):
    import jax.numpy as jnp

    return jnp.where(jnp.sum(x) > y, jnp.sin(x) * y, x * jnp.exp(y))


BRANCH.jax_fn = _branch_jax

#: A loop written with back edges: 3 steps of acc <- sin(acc) * w + x.
LOOP = Fn("loop", """
func.func @loop(%x: f64, %w: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  cf.br ^head(%c0, %x : index, f64)
^head(%i: index, %acc: f64):
  %p = arith.cmpi slt, %i, %c3 : index
  cf.cond_br %p, ^body, ^exit
^body:
  %s = math.sin %acc : f64
  %m = arith.mulf %s, %w : f64
  %a2 = arith.addf %m, %x : f64
  %i2 = arith.addi %i, %c1 : index
  cf.br ^head(%i2, %a2 : index, f64)
^exit:
  %r = arith.mulf %acc, %acc : f64
  return %r : f64
}""", ["f64", "f64"], ["f64"])


def _loop_jax(x, w):
    import jax.numpy as jnp

    acc = x
    for _ in range(3):
        acc = jnp.sin(acc) * w + x
    return acc * acc


LOOP.jax_fn = _loop_jax

#: A multi-block scf.execute_region: |x|-like branches inside one function block.
REGION = Fn("region", """
func.func @region(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0.0 : f64
  %r = scf.execute_region -> f64 {
    %p = arith.cmpf olt, %x, %c0 : f64
    cf.cond_br %p, ^neg, ^pos
  ^neg:
    %n = arith.negf %x : f64
    %ny = arith.mulf %n, %y : f64
    scf.yield %ny : f64
  ^pos:
    %e = math.exp %x : f64
    %ey = arith.addf %e, %y : f64
    cf.br ^join(%ey : f64)
  ^join(%v: f64):
    %v2 = arith.mulf %v, %v : f64
    scf.yield %v2 : f64
  }
  %out = arith.mulf %r, %y : f64
  return %out : f64
}""", ["f64", "f64"], ["f64"])


def _region_jax(x, y):
    import jax.numpy as jnp

    return jnp.where(x < 0, -x * y, (jnp.exp(x) + y) ** 2) * y


REGION.jax_fn = _region_jax

#: cf.switch on an index computed from the data, calling a multi-block function.
SWITCH = Fn("switch", """
func.func private @clamp_sq(%v: f64) -> f64 {
  %one = arith.constant 1.0 : f64
  %p = arith.cmpf ogt, %v, %one : f64
  cf.cond_br %p, ^hi, ^lo
^hi:
  return %one : f64
^lo:
  %s = arith.mulf %v, %v : f64
  return %s : f64
}
func.func @switch(%x: f64, %y: f64) -> f64 {
  %c2 = arith.constant 2.0 : f64
  %t = arith.addf %x, %c2 : f64
  %fl = math.floor %t : f64
  %k = arith.fptosi %fl : f64 to i32
  cf.switch %k : i32, [
    default: ^other,
    1: ^one,
    2: ^two
  ]
^one:
  %a = math.sin %y : f64
  %a2 = arith.mulf %a, %x : f64
  cf.br ^done(%a2 : f64)
^two:
  %b = func.call @clamp_sq(%x) : (f64) -> f64
  %b2 = arith.mulf %b, %y : f64
  cf.br ^done(%b2 : f64)
^other:
  %c = arith.mulf %x, %y : f64
  cf.br ^done(%c : f64)
^done(%r: f64):
  return %r : f64
}""", ["f64", "f64"], ["f64"])


def _switch_jax(x, y):
    import jax.numpy as jnp

    k = jnp.floor(x + 2.0)
    clamp = jnp.where(x > 1.0, 1.0, x * x)
    return jnp.where(k == 1, jnp.sin(y) * x, jnp.where(k == 2, clamp * y, x * y))


SWITCH.jax_fn = _switch_jax

#: A loop with two exits (a `break`): square until the value exceeds 3, at
#: most 6 times. Lifting passes placeholders (`ub.poison`) on the exits.
BREAK = Fn("brk", """
func.func @brk(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %lim = arith.constant 3.0 : f64
  cf.br ^head(%c0, %x : index, f64)
^head(%i: index, %acc: f64):
  %p = arith.cmpi slt, %i, %c6 : index
  cf.cond_br %p, ^body, ^exit(%acc : f64)
^body:
  %sq = arith.mulf %acc, %acc : f64
  %a2 = arith.addf %sq, %y : f64
  %big = arith.cmpf ogt, %a2, %lim : f64
  %i2 = arith.addi %i, %c1 : index
  cf.cond_br %big, ^exit(%a2 : f64), ^head(%i2, %a2 : index, f64)
^exit(%r: f64):
  %out = math.sin %r : f64
  return %out : f64
}""", ["f64", "f64"], ["f64"], domain=(-1.0, 1.0))


def _break_jax(x, y):
    import jax.numpy as jnp

    acc, stop = x, False
    for _ in range(6):
        nxt = acc * acc + y
        acc = jnp.where(stop, acc, nxt)
        stop = stop | (nxt > 3.0)
    return jnp.sin(acc)


BREAK.jax_fn = _break_jax

FNS = [BRANCH, LOOP, REGION, SWITCH, BREAK]


@pytest.fixture(scope="module")
def cm() -> CompiledModule:
    return compile_fns(FNS)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("f", FNS, ids=lambda f: f.name)
def test_first_and_second_order(cm, f, seed):
    rng = np.random.default_rng(seed)
    check_first_order(cm, f, rng)
    check_second_order(cm, f, rng)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("f", FNS, ids=lambda f: f.name)
def test_against_jax(cm, f, seed):
    pytest.importorskip("jax")
    check_against_jax(cm, f, np.random.default_rng(seed))


def test_every_branch_is_taken(cm):
    """The seeds above reach each branch (else a wrong rule could hide)."""
    firsts = [random_args(f, np.random.default_rng(seed)) for seed in range(6)
              for f in [BRANCH]]
    assert {bool(np.sum(x) > y) for x, y in firsts} == {True, False}
    for f, key in ((REGION, lambda x, y: x < 0), (SWITCH, lambda x, y: np.floor(x + 2))):
        taken = {float(key(*random_args(f, np.random.default_rng(seed)))) for seed in range(6)}
        assert len(taken) >= 2, (f.name, taken)

    def breaks(x, y):
        acc = x
        for _ in range(6):
            acc = acc * acc + y
            if acc > 3.0:
                return True
        return False

    exits = {breaks(*random_args(BREAK, np.random.default_rng(seed))) for seed in range(6)}
    assert exits == {True, False}
    np.testing.assert_allclose(cm["switch"](-0.5, 0.3), np.sin(0.3) * -0.5)
    np.testing.assert_allclose(cm["switch"](0.5, 0.3), 0.25 * 0.3)
    np.testing.assert_allclose(cm["switch"](-1.5, 0.3), -1.5 * 0.3)
    np.testing.assert_allclose(cm["region"](-0.5, 2.0), 0.5 * 2.0 * 2.0)
    np.testing.assert_allclose(cm["region"](0.5, 2.0), (np.exp(0.5) + 2.0) ** 2 * 2.0)


def _vmap_module(f: Fn, batch: int) -> str:
    def batched(t: str) -> str:
        return f"tensor<{batch}x{t[7:]}" if t.startswith("tensor<") else f"tensor<{batch}x{t}>"

    bp, br = [batched(t) for t in f.params], [batched(t) for t in f.results]
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(bp))
    names = ", ".join(f"%a{i}" for i in range(len(bp)))
    zeros = ", ".join("0" for _ in bp)
    return f.text + f"""
func.func @main({args}) -> ({", ".join(br)}) {{
  %r = "autodiff.vmap"({names}) {{fn = @{f.name}, in_axes = array<i64: {zeros}>,
      out_axes = array<i64: 0>, randomness = "error"}} : ({", ".join(bp)}) -> ({", ".join(br)})
  return %r : {", ".join(br)}
}}"""


@pytest.mark.parametrize("f", FNS, ids=lambda f: f.name)
def test_vmap_matches_a_loop(f):
    """Each lane takes its own branch: the batched function equals the loop."""
    rng = np.random.default_rng(1)
    b = 8
    cm = CompiledModule(_vmap_module(f, b), pipeline="autodiff-vmap,autodiff-lower-to-cpu")
    args = []
    for t in f.params:
        shape = (b, 4) if t == T4 else (b,)
        args.append(rng.uniform(-1.8, 1.8, shape))
    got = cm["main"](*args)
    want = np.stack([cm[f.name](*[a[k] for a in args]) for k in range(b)])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
