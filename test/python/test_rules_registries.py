"""The rule registries agree with each other: every op with a derivative rule batches.

`transforms/rules/<dialect>.py` registers each op's jvp, vjp and batching
rules side by side. These tests read the registries themselves: an op with a
jvp or vjp rule must have a batching rule, or be one of the ops listed here
that `--autodiff-vmap` never sends to a rule; an op without rules is refused
with a diagnostic naming the op. There is no default batching rule: an op without one (even
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

#: Ops without any rule: vmap refuses them ("no batching rule for '<op>'"), each
#: with a function using it (batched argument %x : tensor<4xf64>). (No op with a
#: derivative rule lacks a batching rule today.)
REFUSED = {
    "linalg.softmax": """
  %e = tensor.empty() : tensor<4xf64>
  %r = linalg.softmax dimension(0) ins(%x : tensor<4xf64>) outs(%e : tensor<4xf64>)
    -> tensor<4xf64>""",
}


def _registries() -> tuple[dict, dict, dict]:
    registry.load_all()
    return registry.JVP_RULES, registry.VJP_RULES, batching.BATCH_RULES


def test_every_differentiable_op_batches() -> None:
    jvp, vjp, batch = _registries()
    missing = sorted(n for n in set(jvp) | set(vjp)
                     if n not in batch and n not in NEVER_BATCHED)
    assert not missing, f"ops with a derivative rule but no batching rule: {missing}"
    # the lists above stay exact: an entry that gains a rule leaves them
    assert not NEVER_BATCHED & set(batch)
    assert NEVER_BATCHED <= set(jvp) | set(vjp)
    assert not set(REFUSED) & (set(batch) | set(jvp) | set(vjp))


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
    # at the op's line
    line = next(k for k, ln in enumerate(text.splitlines(), 1) if name in ln)
    assert any(re.search(rf":{line}:\d+", loc) for loc, m in msgs if name in m), msgs


# ----------------------------------------------------------------------------
# Rules written with the op's result (`uses_result=True`, registry.USES_RESULT)
# ----------------------------------------------------------------------------

#: Rules that read the op's result only to find which operand equals it (ties
#: of max/min): they do not declare `uses_result` (see registry.USES_RESULT).
TIE_TESTS = {"arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
             "math.clampf"}


def test_rules_reading_the_result_declare_it(monkeypatch) -> None:
    """Every elementwise rule that reads `b.ans` declares `uses_result`, and only those.

    The jvp and vjp rules of every op of rule_cases.py's elementwise table run
    (tensor form) while `Builder.ans` records which op's rule read it.
    """
    from ad_check import Fn, wrappers
    from rule_cases import CASES

    from mlir_autodiff.transforms import ad_support

    readers: set[str] = set()
    ans = ad_support.Builder.ans

    def recording_ans(self):
        readers.add(self.op.operation.name)
        return ans.fget(self)

    monkeypatch.setattr(ad_support.Builder, "ans", property(recording_ans))
    cases = [c for c in CASES if c.family == "tensor"]
    text = "\n".join(c.text() + "\n" + wrappers(Fn(c.id, c.text(), c.params, c.results,
                                                   order2=False))
                     for c in cases)
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        run_pipeline(ir.Module.parse(text), "autodiff-jvp,autodiff-vjp")
    readers = {n for n in readers if n.startswith(("arith.", "math."))}
    registry.load_all()
    assert readers - TIE_TESTS == registry.USES_RESULT, (
        f"read b.ans without declaring it: {sorted(readers - TIE_TESTS - registry.USES_RESULT)}"
        f"; declared but never read: {sorted(registry.USES_RESULT - readers)}")
    assert TIE_TESTS <= readers


T3 = "tensor<3xf64>"


def _generic(body: str) -> str:
    """@g(%a, %b) = a parallel linalg.generic yielding `body` of its elements %x, %y."""
    ids = ", ".join(["affine_map<(i) -> (i)>"] * 3)
    return (f"func.func @g(%a: {T3}, %b: {T3}) -> {T3} {{\n"
            f"  %e = tensor.empty() : {T3}\n"
            f"  %r = linalg.generic {{indexing_maps = [{ids}], iterator_types = [\"parallel\"]}}\n"
            f"      ins(%a, %b : {T3}, {T3}) outs(%e : {T3}) {{\n"
            f"  ^bb0(%x: f64, %y: f64, %o: f64):\n    %v = {body}\n    linalg.yield %v : f64\n"
            f"  }} -> {T3}\n  return %r : {T3}\n}}\n")


def _body(name: str) -> str:
    binary = name in ("arith.divf", "math.powf")
    return f"{name} %x, %y : f64" if binary else f"{name} %x : f64"


def _fn(name: str):
    from ad_check import Fn

    domain = (0.5, 2.0)  # inside every op's domain (log, sqrt, powf's base)
    return Fn("g", _generic(_body(name)), [T3, T3], [T3], domain, order2=False)


def _declared() -> list[str]:
    registry.load_all()
    return sorted(registry.USES_RESULT)


@pytest.mark.parametrize("name", _declared())
def test_reverse_mode_reads_the_result_back(name: str) -> None:
    """Reverse mode of a generic yielding the op reads the forward result back
    (the backward function takes @g_fwd's result) instead of recomputing the op.

    math.powf and arith.divf were missing from the hand-kept list this replaced:
    their backward code recomputed x^y and x / y from x and y.
    """
    from ad_check import wrappers

    f = _fn(name)
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(f.text + wrappers(f))
        run_pipeline(module, "autodiff-vjp")
        vjp = next(o for o in module.body.operations
                   if ir.StringAttr(o.attributes["sym_name"]).value == "vjp_g")
        calls = {ir.FlatSymbolRefAttr(o.attributes["callee"]).value: o
                 for o in vjp.regions[0].blocks[0].operations if o.name == "func.call"}
        fwd, bwd = calls["g_fwd"], calls["g_bwd"]
        assert any(v == r for v in bwd.operands for r in fwd.results), str(vjp)


@pytest.mark.parametrize("name", ["arith.divf", "math.powf"])
def test_reverse_mode_reading_the_result_back_is_right(name: str) -> None:
    """The derivatives of the generics above: jvp vs central differences, vjp by the
    transpose identity and against central differences (ad_check)."""
    import numpy as np
    from ad_check import check_first_order, compile_fns

    f = _fn(name)
    check_first_order(compile_fns([f]), f, np.random.default_rng(19))
