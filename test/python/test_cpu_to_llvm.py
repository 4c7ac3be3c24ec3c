"""The LLVM end of the CPU pipeline (transforms/cpu/to_llvm.py): float powers, and every
vectorizable op lowered on n-d vectors.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import strict_schedules  # noqa: F401  (autouse)

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp

RNG = np.random.default_rng(7)

@pytest.mark.parametrize("n", [2, 3, -1, 0.5])
def test_float_powers_become_multiplies(n: float) -> None:
    """x ** n for n in (2, 3, -1, 0.5) traces to mulf/divf/sqrt, not math.powf (a scalar
    libm call that kept the whole fused op off the vector path); values and gradients
    against jax."""
    import jax

    # tanh'(x) = 1 - tanh(x)^2 cancels in f32 for large x: keep x where it is well conditioned.
    x = RNG.uniform(0.2, 1.5, (128, 256)).astype(np.float32)
    assert "powf" not in ad.lower(lambda x: x ** n, x).as_text("capture")
    np.testing.assert_allclose(ad.jit(lambda x: x ** n)(x), x.astype(np.float64) ** n,
                               rtol=1e-6)
    g = ad.jit(ad.grad(lambda x: anp.sum(anp.tanh(x) ** n)))(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: (jax.numpy.tanh(x) ** n).sum())(x),
                               rtol=1e-5, atol=1e-6)


# -- n-d vectors --------------------------------------------------------------------------------

_I, _F, _B = "vector<2x1x8xi32>", "vector<2x1x8xf32>", "vector<2x1x8xi1>"
#: Every op a CPU schedule may vectorize (every arith op, the math ops of
#: `VECTORIZABLE_BODY_OPS`) on an n-d vector (what vectorizing a rank >= 2
#: tile gives), written with %i, %j (ints), %x, %y (floats), %c (bools).
ND_VECTOR_OPS = {
    **{f"arith.{o}": f"arith.{o} %i, %j : {_I}" for o in (
        "addi subi muli divsi divui ceildivsi ceildivui floordivsi remsi remui andi ori xori "
        "shli shrsi shrui maxsi maxui minsi minui").split()},
    **{f"arith.{o}": f"arith.{o} %x, %y : {_F}" for o in (
        "addf subf mulf divf remf maximumf minimumf maxnumf minnumf").split()},
    "arith.negf": f"arith.negf %x : {_F}",
    "arith.mului_extended": f"arith.mului_extended %i, %j : {_I}",
    "arith.mulsi_extended": f"arith.mulsi_extended %i, %j : {_I}",
    "arith.addui_extended": f"arith.addui_extended %i, %j : {_I}, {_B}",
    "arith.extui": f"arith.extui %i : {_I} to vector<2x1x8xi64>",
    "arith.extsi": f"arith.extsi %i : {_I} to vector<2x1x8xi64>",
    "arith.trunci": f"arith.trunci %i : {_I} to vector<2x1x8xi8>",
    "arith.extf": f"arith.extf %x : {_F} to vector<2x1x8xf64>",
    "arith.truncf": f"arith.truncf %x : {_F} to vector<2x1x8xf16>",
    "arith.uitofp": f"arith.uitofp %i : {_I} to {_F}",
    "arith.sitofp": f"arith.sitofp %i : {_I} to {_F}",
    "arith.fptoui": f"arith.fptoui %x : {_F} to {_I}",
    "arith.fptosi": f"arith.fptosi %x : {_F} to {_I}",
    "arith.bitcast": f"arith.bitcast %x : {_F} to {_I}",
    "arith.index_cast": f"arith.index_cast %i : {_I} to vector<2x1x8xindex>",
    "arith.index_castui": f"arith.index_castui %i : {_I} to vector<2x1x8xindex>",
    "arith.cmpi": f"arith.cmpi slt, %i, %j : {_I}",
    "arith.cmpf": f"arith.cmpf olt, %x, %y : {_F}",
    "arith.select": f"arith.select %c, %i, %j : {_B}, {_I}",
    **{f"math.{o}": f"math.{o} %x : {_F}" for o in (
        "exp log tanh sqrt rsqrt absf floor ceil").split()},
    "math.fma": f"math.fma %x, %y, %x : {_F}",
    "math.copysign": f"math.copysign %x, %y : {_F}",
}
#: Arith ops that compute nothing elementwise (constants) or need types (f8
#: scales) the CPU lowering does not take.
ND_VECTOR_EXEMPT = {"arith.constant", "arith.scaling_extf", "arith.scaling_truncf"}


def test_nd_vector_op_table_covers_the_vectorizable_ops() -> None:
    """A new arith op, or a math op made vectorizable, gets a row (or an exemption)."""
    from mlir.dialects import arith

    from mlir_autodiff.transforms.cpu.parameters import VECTORIZABLE_BODY_OPS

    ops = {getattr(arith, n).OPERATION_NAME for n in dir(arith)
           if hasattr(getattr(arith, n), "OPERATION_NAME")}
    ops |= {o for o in VECTORIZABLE_BODY_OPS if o.startswith("math.")}
    assert ops - ND_VECTOR_EXEMPT == set(ND_VECTOR_OPS), ops ^ set(ND_VECTOR_OPS)


def test_every_elementwise_op_lowers_on_nd_vectors() -> None:
    """convert-*-to-llvm lower some ops only on scalars and 1-d vectors (a
    vectorized Philox on a 512 x 32 tile: vector<1x16xi32> `mului_extended`);
    the CPU lowering computes those on 1-d vectors (FlattenNdVectorOps)."""
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine

    from mlir_autodiff import dialects
    from mlir_autodiff.transforms.cpu.to_llvm import LOWER_VECTORS, TO_LLVM
    from mlir_autodiff.transforms.pipeline import run_pipeline

    failed = {}
    args = f"%i: {_I}, %j: {_I}, %x: {_F}, %y: {_F}, %c: {_B}"
    for name, op in ND_VECTOR_OPS.items():
        n = 2 if "extended" in name else 1
        with ir.Context() as ctx, ir.Location.unknown():
            dialects.load(ctx)
            # The op's result types, then a function returning its results.
            probe = ir.Module.parse(f"func.func @f({args}) {{\n  %r:{n} = {op}\n  return\n}}")
            found = probe.body.operations[0].regions[0].blocks[0].operations[0]
            types = ", ".join(str(r.type) for r in found.results)
            rets = ", ".join(f"%r#{k}" for k in range(n))
            module = ir.Module.parse(f"func.func @f({args}) -> ({types}) {{\n  %r:{n} = {op}\n"
                                     f"  return {rets} : {types}\n}}")
            try:
                run_pipeline(module, [*LOWER_VECTORS, *TO_LLVM])
                ExecutionEngine(module, opt_level=0)
            except (ir.MLIRError, RuntimeError) as err:
                failed[name] = str(err).splitlines()[-1][:200]
    assert not failed, " ".join(sorted(failed))
