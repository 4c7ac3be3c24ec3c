"""Every op of the derivative and batching rule registries, executed and checked numerically.

The op names come from the registries themselves (`JVP_RULES`, `VJP_RULES`,
`FORWARD_AUGMENT`, `BATCH_RULES`): a registered op without a case in
`rule_cases.py` that runs the transform fails `test_every_registered_op_has_a_case`,
and the coverage is read from the cases' parsed IR, not from a list.

Each case `@f` is wrapped with `autodiff.jvp`, `autodiff.vjp`, their second
order compositions (ad_check.wrappers) and `autodiff.vmap` over several
in_axes, run through autodiff-run's default transforms and compiled for the
CPU, one module per family (elementwise on tensors, elementwise in generic
bodies, linalg, tensor, scf, func/autodiff). A family that does not compile
is bisected so that one failing case fails only its own cells. Oracles:
central finite differences in f64 (jvp, vjp, second order), the transpose
identity <c, jvp(t)> = <vjp(c), t>, and for vmap a loop of the unbatched
function over the batch. A sample of each family also runs through the
command-line drivers, `autodiff-opt ... | autodiff-run`.

Known defects in rule files other sessions are fixing are the cells of
KNOWN_DEFECTS, strict xfails: the day one is fixed the cell fails until its
entry is removed.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from ad_check import (
    Fn,
    _shape,
    assert_close,
    central_diff,
    check_second_order,
    random_args,
    random_like,
    vdot,
    wrappers,
)
from mlir import ir
from rule_cases import CASES, Case

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.pipeline import InternalError, run_pipeline
from mlir_autodiff.transforms.rules import batching, registry

#: autodiff-run's default transforms (tools/autodiff_run.py DEFAULT_TRANSFORMS).
PIPELINE = ("autodiff-functionalize-rng,autodiff-jvp,autodiff-vjp,autodiff-vmap,"
            "autodiff-lower-rng")
#: The vmap checks run --autodiff-vmap alone (as `autodiff-opt --autodiff-vmap`
#: would): after the differentiation passes' cleanups, elementwise tensor ops are
#: linalg.generic and stop_gradient/checkpoint are gone, so their batching rules
#: would never run.
VMAP_PIPELINE = "autodiff-functionalize-rng,autodiff-vmap,autodiff-lower-rng"
B = 3  # vmap batch size
CHECKS = ("jvp", "vjp", "order2", "vmap")
#: Checks compiled together, and the pipeline that transforms them.
KINDS = {"ad": (("jvp", "vjp", "order2"), PIPELINE), "vmap": (("vmap",), VMAP_PIPELINE)}

#: (case id, check) -> symptom of a wrong value or an internal error: strict xfails
#: (a fixed cell XPASSes and fails until its entry goes).
KNOWN_DEFECTS: dict[tuple[str, str], str] = {}

#: (case id, check) -> the clear diagnostic of what is not supported yet (rows of
#: the README's "Not supported yet" table); the cell asserts it.
UNSUPPORTED: dict[tuple[str, str], str] = {}

CASE_BY_ID = {c.id: c for c in CASES}
assert len(CASE_BY_ID) == len(CASES), "duplicate case ids"


def _fn(c: Case) -> Fn:
    return Fn(c.id, c.text(), c.params, c.results, c.domain, None, c.order2, c.reverse)


def _batched(t: str, axis: int) -> str:
    if axis < 0:
        return t
    if not t.startswith("tensor<"):
        return f"tensor<{B}x{t}>"
    return f"tensor<{B}x{t[len('tensor<'):]}"


def in_axes_variants(c: Case) -> list[list[int]]:
    n = len(c.params)
    out = [[0] * n]
    if n >= 2:
        out += [[0] + [-1] * (n - 1), [-1] + [0] * (n - 1)]
    return out


def vmap_wrappers(c: Case) -> str:
    out = []
    for k, axes in enumerate(in_axes_variants(c)):
        bt = [_batched(t, a) for t, a in zip(c.params, axes)]
        rt = [_batched(t, 0) for t in c.results]
        xs = [f"%x{i}" for i in range(len(bt))]
        params = ", ".join(f"{x}: {t}" for x, t in zip(xs, bt))
        m = len(rt)
        res = "%r" if m == 1 else f"%r:{m}"
        rets = ["%r"] if m == 1 else [f"%r#{j}" for j in range(m)]
        out.append(
            f"func.func @vmap{k}_{c.id}({params}) -> ({', '.join(rt)}) {{\n"
            f"  {res} = \"autodiff.vmap\"({', '.join(xs)}) {{fn = @{c.id}, "
            f"in_axes = array<i64: {', '.join(map(str, axes))}>, "
            f"out_axes = array<i64: {', '.join(['0'] * m)}>, randomness = \"error\"}} : "
            f"({', '.join(bt)}) -> ({', '.join(rt)})\n"
            f"  return {', '.join(rets)} : {', '.join(rt)}\n}}")
    return "\n".join(out)


def module_text(parts: list[tuple[Case, tuple[str, ...]]]) -> str:
    """Each case with the wrappers its checks need (vjp and order2 also use jvp_)."""
    out = []
    for c, checks in parts:
        out.append(c.text())
        if any(k in checks for k in ("jvp", "vjp", "order2")):
            f = _fn(c)
            f.reverse = c.reverse and ("vjp" in checks or "order2" in checks)
            f.order2 = c.order2 and f.reverse and "order2" in checks
            out.append(wrappers(f))
        if "vmap" in checks and c.vmap:
            out.append(vmap_wrappers(c))
    return "\n".join(out)


def transform(text: str, pipeline: str = PIPELINE) -> str:
    """The module after the transforms (raises their diagnostics)."""
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, pipeline)
        out = str(module)
    assert '"autodiff.' not in out.replace('"autodiff.boundary', ""), "autodiff op left"
    return out


def _registries() -> dict[str, dict]:
    registry.load_all()
    return {"jvp": registry.JVP_RULES, "vjp": registry.VJP_RULES,
            "forward_augment": registry.FORWARD_AUGMENT, "batching": batching.BATCH_RULES}


#: (registry, op name) of every rule a successful compile of this module invoked.
FIRED: set[tuple[str, str]] = set()


@contextlib.contextmanager
def recording():
    """Wrap every registered rule so that calling it records (registry, op name)."""
    fired: set[tuple[str, str]] = set()
    saved = {}
    for reg_name, reg in _registries().items():
        saved[reg_name] = dict(reg)
        for op, rule in saved[reg_name].items():
            def wrapped(*args, _rule=rule, _key=(reg_name, op), **kwargs):
                fired.add(_key)
                return _rule(*args, **kwargs)
            reg[op] = wrapped
    try:
        yield fired
    finally:
        for reg_name, reg in _registries().items():
            reg.clear()
            reg.update(saved[reg_name])


def compile_text(text: str, pipeline: str = PIPELINE) -> CompiledModule:
    with recording() as fired:
        # LLVM -O0: the cells check the rules, not LLVM's optimizer (faster to compile)
        cm = CompiledModule(transform(text, pipeline), opt_level=0)
    FIRED.update(fired)  # only once the module compiled
    return cm


def _describe(err: BaseException) -> str:
    msg = " | ".join(line.strip() for line in str(err).splitlines() if line.strip())
    if isinstance(err, InternalError):
        return f"internal error: {msg}"
    return f"{type(err).__name__}: {msg}"


#: The wrappers a check needs (vjp checks the transpose identity against jvp_).
NEEDS = {"jvp": ("jvp",), "vjp": ("jvp", "vjp"), "order2": ("jvp", "vjp", "order2"),
         "vmap": ("vmap",)}


@functools.cache
def family(name: str) -> dict:
    """{case id: {check: CompiledModule | Exception}} for one family.

    One compile per kind (differentiation, batching) for the whole family. If
    it fails, the transforms run on each case alone (and on each check of a
    failing case) to find what fails, and the rest compiles as one module again.
    """
    cases = [c for c in CASES if c.family == name]
    result: dict = {c.id: {} for c in cases}
    for kind_checks, pipeline in KINDS.values():
        _compile_kind(cases, kind_checks, pipeline, result)
    return result


def _compile_kind(cases: list[Case], kind_checks: tuple[str, ...], pipeline: str,
                  result: dict) -> None:
    cases = [c for c in cases if any(applies(c, k) for k in kind_checks)]
    try:
        cm = compile_text(module_text([(c, kind_checks) for c in cases]), pipeline)
        for c in cases:
            result[c.id].update(dict.fromkeys(kind_checks, cm))
        return
    except Exception:  # noqa: BLE001 - found per case below
        pass
    parts = []
    for c in cases:
        try:
            transform(module_text([(c, kind_checks)]), pipeline)
            parts.append((c, kind_checks))
            continue
        except Exception:  # noqa: BLE001
            pass
        good: set[str] = set()
        for check in kind_checks:
            try:
                transform(module_text([(c, NEEDS[check])]), pipeline)
                good.add(check)
            except Exception as err:  # noqa: BLE001 - raised in the cell
                result[c.id][check] = err
        if good:
            parts.append((c, tuple(k for k in kind_checks if k in good)))
    try:
        cm = compile_text(module_text(parts), pipeline)
        compiled_parts = {c.id: cm for c, _ in parts}
    except Exception:  # noqa: BLE001 - lowering failed: compile each case alone
        compiled_parts = {}
        for c, checks in parts:
            try:
                compiled_parts[c.id] = compile_text(module_text([(c, checks)]), pipeline)
            except Exception as err:  # noqa: BLE001
                compiled_parts[c.id] = err
    for c, checks in parts:
        for check in checks:
            result[c.id][check] = compiled_parts[c.id]


def compiled(case_id: str, check: str) -> CompiledModule:
    v = family(CASE_BY_ID[case_id].family)[case_id][check]
    if isinstance(v, BaseException):
        pytest.fail(f"{case_id}: does not compile for {check}: {_describe(v)}", pytrace=False)
    return v


def _as_list(v) -> list:
    return list(v) if isinstance(v, tuple) else [v]


def _rng(case_id: str, salt: int) -> np.random.Generator:
    return np.random.default_rng(salt + zlib.crc32(case_id.encode()))


# ----------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------


def _fd(cm: CompiledModule, c: Case, xs, ts) -> list[np.ndarray]:
    fn = c.frozen(xs) if c.frozen is not None else cm[c.id]
    return central_diff(fn, xs, ts, c.eps)


def check_jvp(cm: CompiledModule, c: Case) -> None:
    f = _fn(c)
    rng = _rng(c.id, 0)
    xs, ts = random_args(f, rng), random_like(c.params, rng)
    m = len(c.results)
    ys = _as_list(cm[c.id](*xs))
    jv = _as_list(cm[f"jvp_{c.id}"](*xs, *ts))
    assert_close(jv[:m], ys, 1e-12, 1e-12, "jvp primal outputs")
    assert_close(jv[m:], _fd(cm, c, xs, ts), c.rtol, 1e-8, "jvp vs central differences")


def check_vjp(cm: CompiledModule, c: Case) -> None:
    f = _fn(c)
    rng = _rng(c.id, 1)
    xs, ts, cs = random_args(f, rng), random_like(c.params, rng), random_like(c.results, rng)
    m = len(c.results)
    ys = _as_list(cm[c.id](*xs))
    vj = _as_list(cm[f"vjp_{c.id}"](*xs, *cs))
    assert_close(vj[:m], ys, 1e-12, 1e-12, "vjp primal outputs")
    for g, x in zip(vj[m:], xs):
        assert np.shape(g) == np.shape(x), "cotangent shape differs from its primal's"
    fd = _fd(cm, c, xs, ts)
    np.testing.assert_allclose(vdot(vj[m:], ts), vdot(cs, fd), rtol=10 * c.rtol, atol=1e-7,
                               err_msg="<vjp(c), t> vs <c, central differences(t)>")
    jv = _as_list(cm[f"jvp_{c.id}"](*xs, *ts))[m:]
    np.testing.assert_allclose(vdot(vj[m:], ts), vdot(cs, jv), rtol=c.linear_rtol, atol=1e-9,
                               err_msg="transpose identity <vjp(c), t> == <c, jvp(t)>")


def check_order2(cm: CompiledModule, c: Case) -> None:
    check_second_order(cm, _fn(c), _rng(c.id, 2))


def _loop(fn, args, in_axes) -> list[np.ndarray]:
    per = []
    for k in range(B):
        sl = [np.array(np.take(a, k, axis=0)) if ax >= 0 else a
              for a, ax in zip(args, in_axes)]
        per.append(_as_list(fn(*sl)))
    return [np.stack([np.asarray(p[j]) for p in per]) for j in range(len(per[0]))]


def check_vmap(cm: CompiledModule, c: Case) -> None:
    rng = _rng(c.id, 3)
    lo, hi = c.domain
    for k, axes in enumerate(in_axes_variants(c)):
        args = [rng.uniform(lo, hi, ((B,) if a >= 0 else ()) + _shape(t))
                for t, a in zip(c.params, axes)]
        got = _as_list(cm[f"vmap{k}_{c.id}"](*args))
        want = _loop(cm[c.id], args, axes)
        assert_close(got, want, 1e-13, 1e-13, f"vmap in_axes={axes} vs a loop")


RUN = {"jvp": check_jvp, "vjp": check_vjp, "order2": check_order2, "vmap": check_vmap}


def applies(c: Case, check: str) -> bool:
    return {"jvp": True, "vjp": c.reverse, "order2": c.reverse and c.order2,
            "vmap": c.vmap}[check]


def _cells():
    for c in CASES:
        for check in CHECKS:
            if not applies(c, check):
                continue
            marks = []
            reason = KNOWN_DEFECTS.get((c.id, check))
            if reason is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            yield pytest.param(c.id, check, id=f"{c.id}-{check}", marks=marks)


@pytest.mark.parametrize("case_id,check", list(_cells()))
def test_cell(case_id: str, check: str) -> None:
    c = CASE_BY_ID[case_id]
    message = UNSUPPORTED.get((case_id, check))
    if message is None:
        RUN[check](compiled(case_id, check), c)
        return
    with pytest.raises((Exception, pytest.fail.Exception)) as info:  # compiled() fails
        RUN[check](compiled(case_id, check), c)
    assert re.search(message, str(info.value)), str(info.value)


def test_known_defects_name_real_cells() -> None:
    cells = {(c.id, k) for c in CASES for k in CHECKS if applies(c, k)}
    assert set(KNOWN_DEFECTS) | set(UNSUPPORTED) <= cells, \
        sorted(set(KNOWN_DEFECTS) | set(UNSUPPORTED) - cells)


# ----------------------------------------------------------------------------
# Coverage: every registered op, read from the registries
# ----------------------------------------------------------------------------


#: A stateful draw under vmap, executed by `test_stateful_draw_under_vmap`.
RANDOM_VMAP = """
func.func @f(%a: tensor<4xf64>) -> tensor<4xf64> {
  %u = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf64>
  %r = arith.mulf %a, %u : tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @same(%a: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %r = "autodiff.vmap"(%a) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "same"} : (tensor<3x4xf64>) -> tensor<3x4xf64>
  return %r : tensor<3x4xf64>
}
func.func @different(%a: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %r = "autodiff.vmap"(%a) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "different"} : (tensor<3x4xf64>) -> tensor<3x4xf64>
  return %r : tensor<3x4xf64>
}"""



@functools.cache
def random_module() -> CompiledModule:
    return compile_text(RANDOM_VMAP)


#: Modules the in-process CPU back end cannot run (8-bit float types have no LLVM
#: lowering here; shard collectives need several MPI processes): they are only transformed, and their check reads the IR the
#: batching rules produced (name -> module, pipeline, regexes the output must match).
TRANSFORM_ONLY = {
    "scaling_conversions": ("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.constant dense<2.0> : tensor<4xf8E8M0FNU>
  %t = arith.scaling_truncf %a, %s : tensor<4xf32>, tensor<4xf8E8M0FNU> to tensor<4xf8E4M3FN>
  %r = arith.scaling_extf %t, %s : tensor<4xf8E4M3FN>, tensor<4xf8E8M0FNU> to tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func @main(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %r = "autodiff.vmap"(%a) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}""", "autodiff-vmap", (
        # one generic per conversion over the batched tensors, reading the
        # unbatched scale without a batch dimension (no broadcast)
        r"ins\(%\w+, %\w+ : tensor<3x4xf32>, tensor<4xf8E8M0FNU>\) "
        r"outs\(%\w+ : tensor<3x4xf8E4M3FN>\)[^\n]*\n[^\n]*\n *%\w+ = arith\.scaling_truncf",
        r"ins\(%\w+, %\w+ : tensor<3x4xf8E4M3FN>, tensor<4xf8E8M0FNU>\) "
        r"outs\(%\w+ : tensor<3x4xf32>\)[^\n]*\n[^\n]*\n *%\w+ = arith\.scaling_extf")),
    # The shard dialect's collectives run only across MPI processes
    # (test_distributed.py checks their derivatives and batching numerically under
    # mpiexec); here their rules transform one function of each of them.
    "shard_collectives": ("""
shard.grid @g(shape = 2)
func.func private @f(%x: tensor<4xf64>) -> tensor<4xf64> {
  %s = shard.all_reduce %x on @g grid_axes = [0] reduction = sum : tensor<4xf64> -> tensor<4xf64>
  %m = shard.all_reduce %s on @g grid_axes = [0] reduction = max : tensor<4xf64> -> tensor<4xf64>
  %a = shard.all_gather %m on @g grid_axes = [0] gather_axis = 0 : tensor<4xf64> -> tensor<8xf64>
  %r = shard.reduce_scatter %a on @g grid_axes = [0] reduction = sum scatter_axis = 0
      : tensor<8xf64> -> tensor<4xf64>
  %h = shard.shift %r on @g grid_axes = [0] shift_axis = 0 offset = 1 rotate
      : tensor<4xf64> -> tensor<4xf64>
  return %h : tensor<4xf64>
}
func.func @jvp(%x: tensor<4xf64>, %t: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<4xf64>, tensor<4xf64>)
      -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}
func.func @vjp(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (tensor<4xf64>, tensor<4xf64>)
      -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}
func.func @main(%x: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %r = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "error"} : (tensor<3x4xf64>) -> tensor<3x4xf64>
  return %r : tensor<3x4xf64>
}""", "autodiff-jvp,autodiff-vjp,autodiff-vmap", (
        r"shard\.all_gather %\w+ on @g grid_axes = \[0\] gather_axis = 1 : "
        r"tensor<3x4xf64> -> tensor<3x8xf64>",
        r"shard\.reduce_scatter %\w+ on @g grid_axes = \[0\] scatter_axis = 1 : "
        r"tensor<3x8xf64> -> tensor<3x4xf64>",
        r"shard\.shift %\w+ on @g grid_axes = \[0\] shift_axis = 0 offset = 1 rotate : "
        r"tensor<3x4xf64>")),
}


@functools.cache
def transformed_only(key: str) -> str:
    text, pipeline, _ = TRANSFORM_ONLY[key]
    with recording() as fired:
        out = transform(text, pipeline)
    FIRED.update(fired)
    return out


@pytest.mark.parametrize("key", list(TRANSFORM_ONLY))
def test_transform_only_batching(key: str) -> None:
    out = transformed_only(key)
    out = out[out.index("func.func private @f_batched"):]
    for pattern in TRANSFORM_ONLY[key][2]:
        assert re.search(pattern, out), f"{pattern!r} not in:\n{out}"


def _fire_everything() -> None:
    """Compile every family and the extra modules (cached), recording the rules invoked."""
    for fam in sorted({c.family for c in CASES}):
        family(fam)
    random_module()
    for key in DIAGNOSTICS:
        diagnostic(key)
    for key in TRANSFORM_ONLY:
        transformed_only(key)


def _inert_ops(text: str) -> set[str]:
    """Ops of `text` the differentiation drivers skip by type: no float result or no
    float operand (comparisons, casts from or to integers, constants)."""
    names: set[str] = set()
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)

        def is_float(t: ir.Type) -> bool:
            if isinstance(t, ir.ShapedType):
                t = t.element_type
            return isinstance(t, ir.FloatType)

        def walk(op):
            o = op.operation
            if (not any(is_float(r.type) for r in o.results)
                    or not any(is_float(v.type) for v in o.operands)):
                names.add(o.name)
            for region in o.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        walk(inner)

        walk(module.operation)
    return names


#: Rules the drivers never call, by design (with where that is decided).
DRIVER_HANDLED = {
    # ad_modes.py: reverse mode's activity analysis gives its result no
    # cotangent, so the op never reaches its vjp rule.
    ("vjp", "autodiff.stop_gradient"),
}


@pytest.mark.parametrize("name", ["jvp", "vjp", "forward_augment", "batching"])
def test_every_registered_op_has_a_case(name: str) -> None:
    """A registered rule that no successfully compiled case invokes fails here.

    The names come from the registries; each rule is wrapped while the case
    modules are transformed, so an op whose rule never runs (folded away
    first, or in a case that does not compile) is not counted.
    """
    _fire_everything()
    covered = {op for reg, op in FIRED if reg == name}
    covered |= {op for reg, op in DRIVER_HANDLED if reg == name}
    if name in ("jvp", "vjp"):
        # ops skipped by type count once a case holding them compiled and ran
        for c in CASES:
            if isinstance(family(c.family)[c.id].get(name), CompiledModule):
                covered |= _inert_ops(c.text())
    missing = sorted(set(_registries()[name]) - covered)
    assert not missing, f"{name} rules never invoked by an executed case: {missing}"


def test_every_registry_key_is_an_op() -> None:
    """A rule keyed by a name no dialect defines can never fire (a misspelt registration)."""
    with ir.Context() as ctx:
        dialects.load(ctx)
        bad = sorted(n for reg in _registries().values() for n in reg
                     if not (ctx.is_registered_operation(n) or n in dialects.OP_NAMES))
    assert not bad, f"registered rules for ops no dialect defines: {bad}"


def test_coverage_count(capsys) -> None:
    """Report how many registered rules the table invokes (and that it has a cell each)."""
    regs = _registries()
    _fire_everything()
    names = set().union(*regs.values())
    fired = {op for _, op in FIRED}
    cells = sum(1 for _ in _cells())
    with capsys.disabled():
        print(f"\n[rule registry] {len(CASES)} cases, {cells} cells; rules invoked: "
              + ", ".join(f"{k} {len({op for r, op in FIRED if r == k} & set(v))}/{len(v)}"
                          for k, v in regs.items())
              + f"; {len(names & fired)}/{len(names)} registered op names")
    assert cells >= len(names)


# ----------------------------------------------------------------------------
# Diagnostics of rules that only refuse
# ----------------------------------------------------------------------------


#: Modules whose rules can only refuse (batching rules; the block-scaled
#: conversions' jvp/vjp rules): (module, pipeline, words the
#: diagnostic must contain). --autodiff-vmap alone: the differentiation passes'
#: cleanups would fold the tensor.empty away, and functionalizing the draw would
#: make it a (supported) philox.
DIAGNOSTICS = {
    "scaling_extf_jvp": ("""
func.func @f(%a: f32) -> f32 {
  %t = arith.truncf %a : f32 to f8E5M2
  %s = arith.constant 1.0 : f8E8M0FNU
  %r = arith.scaling_extf %t, %s : f8E5M2, f8E8M0FNU to f32
  return %r : f32
}
func.func @main(%a: f32) -> (f32, f32) {
  %y, %d = "autodiff.jvp"(%a, %a) {fn = @f} : (f32, f32) -> (f32, f32)
  return %y, %d : f32, f32
}""", "autodiff-jvp", ("arith.scaling_extf", "is not differentiable")),
    "scaling_extf_vjp": ("""
func.func @f(%a: f32) -> f32 {
  %t = arith.truncf %a : f32 to f8E5M2
  %s = arith.constant 1.0 : f8E8M0FNU
  %r = arith.scaling_extf %t, %s : f8E5M2, f8E8M0FNU to f32
  return %r : f32
}
func.func @main(%a: f32) -> (f32, f32) {
  %y, %d = "autodiff.vjp"(%a, %a) {fn = @f, wrt = array<i64: 0>} : (f32, f32) -> (f32, f32)
  return %y, %d : f32, f32
}""", "autodiff-vjp", ("arith.scaling_extf", "is not differentiable")),
    "scaling_truncf_jvp": ("""
func.func @f(%a: f32) -> f32 {
  %s = arith.constant 1.0 : f8E8M0FNU
  %t = arith.scaling_truncf %a, %s : f32, f8E8M0FNU to f8E5M2
  %r = arith.extf %t : f8E5M2 to f32
  return %r : f32
}
func.func @main(%a: f32) -> (f32, f32) {
  %y, %d = "autodiff.jvp"(%a, %a) {fn = @f} : (f32, f32) -> (f32, f32)
  return %y, %d : f32, f32
}""", "autodiff-jvp", ("arith.scaling_truncf", "is not differentiable")),
    "scaling_truncf_vjp": ("""
func.func @f(%a: f32) -> f32 {
  %s = arith.constant 1.0 : f8E8M0FNU
  %t = arith.scaling_truncf %a, %s : f32, f8E8M0FNU to f8E5M2
  %r = arith.extf %t : f8E5M2 to f32
  return %r : f32
}
func.func @main(%a: f32) -> (f32, f32) {
  %y, %d = "autodiff.vjp"(%a, %a) {fn = @f, wrt = array<i64: 0>} : (f32, f32) -> (f32, f32)
  return %y, %d : f32, f32
}""", "autodiff-vjp", ("arith.scaling_truncf", "is not differentiable")),
    "tensor_empty_per_lane_size": ("""
func.func @f(%a: f64) -> f64 {
  %k = arith.fptosi %a : f64 to i64
  %n = arith.index_cast %k : i64 to index
  %e = tensor.empty(%n) : tensor<?xf64>
  %c0 = arith.constant 0 : index
  %d = tensor.dim %e, %c0 : tensor<?xf64>
  %i = arith.index_cast %d : index to i64
  %r = arith.sitofp %i : i64 to f64
  return %r : f64
}
func.func @main(%a: tensor<3xf64>) -> tensor<3xf64> {
  %r = "autodiff.vmap"(%a) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "error"} : (tensor<3xf64>) -> tensor<3xf64>
  return %r : tensor<3xf64>
}""", "autodiff-vmap", ("tensor.empty", "batching needs one shape")),
    "stateful_draw_randomness_error": ("""
func.func @f(%a: tensor<4xf64>) -> tensor<4xf64> {
  %u = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf64>
  %r = arith.addf %a, %u : tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @main(%a: tensor<3x4xf64>) -> tensor<3x4xf64> {
  %r = "autodiff.vmap"(%a) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "error"} : (tensor<3x4xf64>) -> tensor<3x4xf64>
  return %r : tensor<3x4xf64>
}""", "autodiff-vmap", ("autodiff.random", "randomness = \"error\" is not supported")),
}


@functools.cache
def diagnostic(key: str) -> tuple[BaseException | None, str]:
    """(the error the pipeline raised or None, its message); rules invoked are recorded."""
    text, pipeline, _ = DIAGNOSTICS[key]
    with recording() as fired:
        try:
            transform(text, pipeline)
        except Exception as err:  # noqa: BLE001 - the expected diagnostic
            FIRED.update(fired)
            return err, str(err)
    return None, ""


@pytest.mark.parametrize("key", list(DIAGNOSTICS))
def test_refusing_batching_rules_give_diagnostics(key: str) -> None:
    err, msg = diagnostic(key)
    assert err is not None, "the pipeline accepted the module"
    assert not isinstance(err, InternalError), msg
    for word in DIAGNOSTICS[key][2]:
        assert word in msg, msg


def test_stateful_draw_under_vmap() -> None:
    """After --autodiff-functionalize-rng `@f(a, seed, offset) -> (y, offset')` is pure:
    "same" gives every lane the draw of one call, "different" the draws of B calls
    made one after the other."""
    cm = random_module()
    rng = np.random.default_rng(5)
    a = rng.uniform(0.5, 1.5, (B, 4))
    seed, off = 1234, 7
    got, end = cm["same"](a, seed, off)
    for lane in range(B):
        want, end1 = cm["f"](a[lane], seed, off)
        np.testing.assert_array_equal(got[lane], want)
    assert end == end1
    got, end = cm["different"](a, seed, off)
    o = off
    for lane in range(B):
        want, o = cm["f"](a[lane], seed, o)
        np.testing.assert_array_equal(got[lane], want)
    assert end == o
    assert not np.allclose(got[0] / a[0], got[1] / a[1]), "lanes drew the same numbers"


# ----------------------------------------------------------------------------
# The command-line drivers: autodiff-opt | autodiff-run on a sample per family
# ----------------------------------------------------------------------------

#: One case per family (first-order jvp, vjp and vmap through the real tools).
CLI_SAMPLE = ["t_tanh", "g_atan2", "l_matmul", "x_concat", "c_for_tensor", "f_call"]


def _tool(name: str) -> list[str]:
    exe = Path(sys.executable).with_name(name)
    if exe.exists():
        return [str(exe)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return [found]


def _literal(a: np.ndarray) -> str:
    return repr(np.asarray(a).tolist()).replace(" ", "") + ":f64"


_RESULT = re.compile(r"^result\[(\d+)\]: (\S+) = (.*)$")


def _parse_results(out: str) -> list[np.ndarray]:
    vals = []
    for line in out.splitlines():
        m = _RESULT.match(line)
        assert m, f"unexpected autodiff-run output: {line!r}"
        vals.append(np.asarray(eval(m.group(3), {"inf": np.inf, "nan": np.nan})))  # noqa: S307
    return vals


@pytest.mark.parametrize("case_id", CLI_SAMPLE)
def test_command_line_drivers(case_id: str, tmp_path: Path) -> None:
    """@cli_main returns jvp tangents, vjp cotangents and vmap results of one case, computed
    by `autodiff-opt --autodiff-jvp --autodiff-vjp --autodiff-vmap | autodiff-run`; the
    expected values are finite differences and a loop of the primal compiled in process."""
    c = CASE_BY_ID[case_id]
    f = _fn(c)
    f.order2 = False
    n, m = len(c.params), len(c.results)
    rt = [_batched(t, 0) for t in c.results]
    bt = [_batched(t, 0) for t in c.params]
    x = [f"%x{i}" for i in range(n)]
    t = [f"%t{i}" for i in range(n)]
    ct = [f"%c{i}" for i in range(m)]
    xb = [f"%b{i}" for i in range(n)]
    params = ([f"{v}: {ty}" for v, ty in zip(x + t, c.params * 2)]
              + [f"{v}: {ty}" for v, ty in zip(ct, c.results)]
              + [f"{v}: {ty}" for v, ty in zip(xb, bt)])
    outs = c.results + c.params + rt
    rets = ([f"%j#{m + i}" for i in range(m)] + [f"%v#{m + i}" for i in range(n)]
            + [f"%w#{i}" for i in range(m)])
    text = (module_text([(c, ("jvp", "vjp", "vmap"))]) + "\n"
            f"func.func @cli_main({', '.join(params)}) -> ({', '.join(outs)}) {{\n"
            f"  %j:{2 * m} = func.call @jvp_{c.id}({', '.join(x + t)}) : "
            f"({', '.join(c.params * 2)}) -> ({', '.join(c.results * 2)})\n"
            f"  %v:{m + n} = func.call @vjp_{c.id}({', '.join(x + ct)}) : "
            f"({', '.join(c.params + c.results)}) -> ({', '.join(c.results + c.params)})\n"
            f"  %w:{m} = func.call @vmap0_{c.id}({', '.join(xb)}) : "
            f"({', '.join(bt)}) -> ({', '.join(rt)})\n"
            f"  return {', '.join(rets)} : {', '.join(outs)}\n}}\n")
    src = tmp_path / f"{case_id}.mlir"
    src.write_text(text)
    rng = _rng(case_id, 4)
    xs, ts, cs = random_args(f, rng), random_like(c.params, rng), random_like(c.results, rng)
    lo, hi = c.domain
    xbs = [rng.uniform(lo, hi, (B,) + _shape(ty)) for ty in c.params]
    opt = subprocess.run(_tool("autodiff-opt") + [str(src), "--autodiff-jvp", "--autodiff-vjp",
                                                  "--autodiff-vmap"],
                         capture_output=True, text=True, timeout=120)
    assert opt.returncode == 0, opt.stderr
    args = []
    for a in [*xs, *ts, *cs, *xbs]:
        args += ["--arg", _literal(a)]
    run = subprocess.run(_tool("autodiff-run") + ["-", "--entry", "cli_main", "--precision",
                                                  "17", *args],
                         input=opt.stdout, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = _parse_results(run.stdout)
    assert len(got) == len(outs)
    cm = compiled(case_id, "jvp")  # the primal, compiled in process
    fd = central_diff(cm[c.id], xs, ts, c.eps)
    assert_close(got[:m], fd, c.rtol, 1e-8, "autodiff-run jvp vs central differences")
    np.testing.assert_allclose(vdot(got[m:m + n], ts), vdot(cs, fd), rtol=10 * c.rtol,
                               atol=1e-7, err_msg="autodiff-run vjp vs central differences")
    assert_close(got[m + n:], _loop(cm[c.id], xbs, [0] * n), 1e-13, 1e-13,
                 "autodiff-run vmap vs a loop")

