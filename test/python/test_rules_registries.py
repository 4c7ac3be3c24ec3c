"""The rule registries agree with each other: every op with a derivative rule batches.

`transforms/rules/<dialect>.py` registers each op's jvp, vjp and batching
rules side by side. These tests read the registries themselves: an op with a
jvp or vjp rule must have a batching rule, or be one of the ops listed here
that `--autodiff-vmap` never sends to a rule or refuses with a diagnostic
naming the op. There is no default batching rule: an op without one (even
in the arith or math namespace) is refused, never guessed to be elementwise.
"""

from __future__ import annotations

import inspect
import re

import pytest
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.transforms.pipeline import run_pipeline
from mlir_autodiff.transforms.rules import batching, registry

#: Ops with derivative rules that vmap never batches: no operands and no
#: regions, so `BatchTrace.batch_op` clones them unbatched without a rule
#: (rule_cases.py's `constant` case runs one under vmap).
NEVER_BATCHED = {"arith.constant"}

#: Ops with derivative rules that vmap refuses ("no batching rule for '<op>'"),
#: each with a function using it (batched argument %x : tensor<4xf64>).
REFUSED = {
    # the differentiation passes inline it; --autodiff-vmap alone does not
    "scf.execute_region": """
  %r = scf.execute_region -> tensor<4xf64> {
    %s = math.sin %x : tensor<4xf64>
    scf.yield %s : tensor<4xf64>
  }""",
}


def _registries() -> tuple[dict, dict, dict]:
    registry.load_all()
    return registry.JVP_RULES, registry.VJP_RULES, batching.BATCH_RULES


def test_every_differentiable_op_batches_or_is_refused() -> None:
    jvp, vjp, batch = _registries()
    missing = sorted(n for n in set(jvp) | set(vjp)
                     if n not in batch and n not in NEVER_BATCHED and n not in REFUSED)
    assert not missing, f"ops with a derivative rule but no batching rule: {missing}"
    # the lists above stay exact: an entry that gains a batching rule leaves them
    assert not (NEVER_BATCHED | set(REFUSED)) & set(batch)
    assert (NEVER_BATCHED | set(REFUSED)) <= set(jvp) | set(vjp)


def test_every_upstream_elementwise_op_is_registered() -> None:
    """Every arith and math op of the bindings (ElementwiseMappable) has its own
    batching rule; arith.constant has no operands (NEVER_BATCHED)."""
    from mlir.dialects import _arith_ops_gen, _math_ops_gen

    names = {c.OPERATION_NAME for m in (_arith_ops_gen, _math_ops_gen)
             for c in vars(m).values() if inspect.isclass(c) and hasattr(c, "OPERATION_NAME")}
    _, _, batch = _registries()
    missing = sorted(names - set(batch) - NEVER_BATCHED)
    assert not missing, f"arith/math ops without a batching rule: {missing}"


def test_no_default_batching_rule() -> None:
    """A name without a registered rule has none, whatever its dialect."""
    for name in ("arith.no_such_op", "math.no_such_op", "test.unknown"):
        assert batching.rule_for(name) is None, name


def _vmap_module(body: str) -> str:
    return (f"func.func @f(%x: tensor<4xf64>) -> tensor<4xf64> {{{body}\n"
            "  return %r : tensor<4xf64>\n}\n"
            "func.func @main(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {\n"
            '  %r = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, '
            'out_axes = array<i64: 0>, randomness = "error"} : '
            "(tensor<3x4xf64>) -> tensor<3x4xf64>\n"
            "  return %r : tensor<3x4xf64>\n}\n")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_op_gives_a_diagnostic_naming_it(name: str) -> None:
    text = _vmap_module(REFUSED[name])
    with ir.Context() as ctx:
        dialects.load(ctx)
        module = ir.Module.parse(text)
        with pytest.raises(ir.MLIRError) as info:
            run_pipeline(module, "autodiff-vmap")
    diags = info.value.error_diagnostics
    msgs = [(str(d.location), d.message) for d in diags]
    assert any(m == f"autodiff-vmap: no batching rule for '{name}'" for _, m in msgs), msgs
    # at the op: @f's body starts on line 2 of the module
    assert any(re.search(r":2:\d+", loc) for loc, m in msgs if name in m), msgs
