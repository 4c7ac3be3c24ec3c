"""Pass registry, option parsing and mixed Python/upstream pipelines."""

from __future__ import annotations

import dataclasses

import pytest
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.transforms import diagnostics, passes, pipeline
from mlir_autodiff.transforms.pipeline import PipelineError, parse_options, parse_pipeline

SEEN: list[str] = []


@passes.register
@dataclasses.dataclass(frozen=True)
class _CountOps(passes.Pass):
    """A test pass: records how many func.func ops it saw, fails on request."""

    name = "test-count-funcs"
    summary = "count functions (test only)"
    fail_on: str = dataclasses.field(default="", metadata={"help": "function name to reject"})
    limit: int = 100
    strict: bool = False

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name == "func.func":
                name = ir.StringAttr(op.attributes["sym_name"]).value
                SEEN.append(name)
                if name == self.fail_on:
                    raise diagnostics.fail(op, f"test-count-funcs: rejected '@{name}'")


@passes.register
@dataclasses.dataclass(frozen=True)
class _Crash(passes.Pass):
    name = "test-crash"
    summary = "raise an unexpected exception (test only)"

    def run(self, module: ir.Operation) -> None:
        raise ZeroDivisionError("boom")


SOURCE = """
func.func @a(%x: f32) -> f32 {
  %c = arith.constant 1.0 : f32
  %y = arith.mulf %x, %c : f32
  return %y : f32
}
func.func @b(%x: f32) -> f32 { return %x : f32 }
"""


@pytest.fixture
def module():
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        yield ir.Module.parse(SOURCE)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=1", {"a": "1"}),
        ("a=1 b=two", {"a": "1", "b": "two"}),
        ("flag", {"flag": ""}),
        ('name="x y" k=v', {"name": "x y", "k": "v"}),
        ("list=1,2,3", {"list": "1,2,3"}),
        ("", {}),
    ],
)
def test_parse_options(text, expected):
    assert parse_options(text) == expected


def test_parse_pipeline_mixes_python_and_upstream():
    elems = parse_pipeline(
        "builtin.module(test-count-funcs{fail-on=zz limit=3}, canonicalize, func.func(cse))"
    )
    assert isinstance(elems[0], _CountOps)
    assert elems[0].fail_on == "zz" and elems[0].limit == 3
    assert elems[1:] == ["canonicalize", "func.func(cse)"]
    assert parse_pipeline("canonicalize,test-count-funcs")[1] == _CountOps()


@pytest.mark.parametrize(
    "text, message",
    [
        ("test-count-funcs{bogus=1}", "has no option 'bogus'"),
        ("test-count-funcs{limit=many}", "option 'limit' expects a int"),
        ("test-count-funcs{strict=maybe}", "option 'strict' expects a bool"),
        ("test-count-funcs(cse)", "takes no nested pipeline"),
        ("builtin.module(cse", "unbalanced"),
        ("cse)", "unbalanced"),
    ],
)
def test_bad_pipelines_are_diagnosed(text, message):
    with pytest.raises(PipelineError, match=message):
        parse_pipeline(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("no-such-pass", "'no-such-pass' does not refer to a registered pass"),
        ("canonicalize{no-such-option=1}", "no such option no-such-option"),
    ],
)
def test_bad_upstream_elements_are_diagnosed(module, text, message):
    with pytest.raises(PipelineError, match=message):
        pipeline.run_pipeline(module, text)


def test_python_pass_runs_between_upstream_passes(module):
    SEEN.clear()
    pipeline.run_pipeline(module, [_CountOps(), "canonicalize"])
    assert SEEN == ["a", "b"]
    assert "arith.mulf" not in str(module)  # canonicalize folded x * 1


def test_pass_failure_carries_located_diagnostic(module):
    # The bindings hand a failed run's diagnostics to the raised MLIRError.
    with pytest.raises(ir.MLIRError) as err:
        pipeline.run_pipeline(module, "test-count-funcs{fail-on=b}")
    diags = diagnostics.mlir_error_diags(err.value)
    assert [d.message for d in diags] == ["test-count-funcs: rejected '@b'"]
    assert diags[0].severity == "error"


@passes.register
@dataclasses.dataclass(frozen=True)
class _BreakReturn(passes.Pass):
    name = "test-break-return"
    summary = "give @b a type its return contradicts (test only)"

    def run(self, module: ir.Operation) -> None:
        fn = module.regions[0].blocks[0].operations[1]
        f32 = ir.F32Type.get()
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([f32], []))


@pytest.mark.parametrize("verify_each", [True, False])
def test_invalid_ir_from_a_pass_is_a_verifier_error(module, verify_each):
    # Verified after every pass or (the library's default) once at the end: either
    # way, IR a pass broke is an MLIRError with the verifier's diagnostic.
    with pytest.raises(ir.MLIRError, match="'func.return' op has 1 operands"):
        pipeline.run_pipeline(module, [_BreakReturn()], verify_each=verify_each)


def test_library_pipelines_verify_each_pass_only_when_asked(monkeypatch):
    monkeypatch.setenv(pipeline.VERIFY_EACH_ENV, "1")
    assert pipeline.verify_each_default()
    monkeypatch.setenv(pipeline.VERIFY_EACH_ENV, "0")
    assert not pipeline.verify_each_default()
    monkeypatch.delenv(pipeline.VERIFY_EACH_ENV)
    assert not pipeline.verify_each_default()


def test_crashing_pass_becomes_internal_error(module):
    with pytest.raises(pipeline.InternalError, match="internal error in pass 'test-crash'"):
        pipeline.run_pipeline(module, "test-crash")


def test_pipeline_text_round_trips():
    p = _CountOps(fail_on="f", limit=7)
    assert p.pipeline_text() == "test-count-funcs{fail-on=f limit=7}"
    assert parse_pipeline(p.pipeline_text())[0] == p


def test_registry_lists_project_passes():
    names = passes.all_passes()
    assert "autodiff-lower-to-cpu" in names
    assert all(cls.summary for cls in names.values())
