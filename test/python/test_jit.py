"""jit: signature caching, pytrees in and out, static arguments, outputs, lower() stages,
and the sub-function tracing API that transforms build on."""

from __future__ import annotations

import collections
import gc
import weakref
from typing import Any

import numpy as np
import pytest
from mlir import ir

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp
from mlir_autodiff import tracing
from mlir_autodiff.tracing import ShapedArray

RNG = np.random.default_rng(2)


def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------- caching

def test_traces_once_per_signature() -> None:
    count = [0]

    @ad.jit
    def f(x: Any, y: Any) -> Any:
        count[0] += 1
        return anp.sin(x) * y

    x, y = randn(3), randn(3)
    np.testing.assert_allclose(f(x, y), np.sin(x) * y, rtol=1e-6)
    f(randn(3), randn(3))  # same signature, new values
    assert count[0] == 1
    f(randn(4), randn(4))  # new shape
    assert count[0] == 2
    f(x.astype(np.float64), y.astype(np.float64))  # new dtype
    assert count[0] == 3
    f(x, 2.0)  # Python float instead of an array
    f(x, 3.0)  # same signature: the scalar is an argument, not a constant
    assert count[0] == 4
    f(x, np.float32(2.0))  # numpy scalar: a strong 0-d float32, another signature
    assert count[0] == 5
    f(x, y)
    assert count[0] == 5 and f._cache_size() == 5


def test_python_scalar_values_are_runtime_arguments() -> None:
    f = ad.jit(lambda x, s: x * s)
    x = randn(3)
    np.testing.assert_allclose(f(x, 2.0), x * 2, rtol=1e-6)
    np.testing.assert_allclose(f(x, -3.0), x * -3, rtol=1e-6)
    assert f(x, 2.0).dtype == np.float32  # weak scalar keeps float32
    assert f._cache_size() == 1


def test_recreated_functions_share_a_context_and_contexts_rotate(monkeypatch) -> None:
    # building a context costs 3-6 ms: jitted functions take the shared one; after
    # SHARED_CONTEXT_USES traces of new modules a fresh one starts, and the old one
    # dies with the last function that held it
    from mlir_autodiff import api
    # start a fresh context: functions of earlier tests in this process hold the current one
    monkeypatch.setattr(api, "_SHARED_CONTEXT", [None, 0])
    monkeypatch.setattr(api, "SHARED_CONTEXT_USES", 3)
    x = randn(3)
    jf = ad.jit(lambda v: v * 2.0)
    jf(x)
    first = jf.context
    # distinct modules (another constant each): each one counts
    fns = [ad.jit(lambda v, c=c: v * c) for c in (3.0, 4.0)]
    for f in fns:
        f(x)
    assert all(f.context is first for f in fns)
    assert api._SHARED_CONTEXT[1] == 3
    later = ad.jit(lambda v: v - 1.0)
    np.testing.assert_allclose(later(x), x - 1.0)
    assert later.context is not first
    old = weakref.ref(first)
    del jf, fns, f, first
    ad.clear_caches()  # compiled modules kept for reuse by identical traces hold it too
    gc.collect()
    assert old() is None


def test_recreated_grad_in_a_loop_makes_no_new_context(monkeypatch) -> None:
    # jit(grad(h)) built anew each iteration traces the same module: it reuses the
    # compiled one and must not count towards replacing the shared context (a new
    # context cost ~5 ms every SHARED_CONTEXT_USES-th iteration, issue 21); a
    # re-trace of a known module adds nothing the context does not hold already
    from mlir_autodiff import api
    monkeypatch.setattr(api, "_SHARED_CONTEXT", [None, 0])
    monkeypatch.setattr(api, "SHARED_CONTEXT_USES", 2)

    def h(v):
        return anp.sum(anp.tanh(v) ** 2 + 0.5 * v)

    x = np.linspace(-1.0, 1.0, 8)
    fns = [ad.jit(ad.grad(h)) for _ in range(6)]
    grads = [f(x) for f in fns]
    assert all(f.context is fns[0].context for f in fns)
    assert api._SHARED_CONTEXT[1] == 1
    expected = 2 * np.tanh(x) * (1 - np.tanh(x) ** 2) + 0.5
    for g in grads:
        np.testing.assert_allclose(g, expected, rtol=1e-12)


def test_a_jitted_function_keeps_its_context_and_no_context_leaks() -> None:
    f = ad.jit(lambda x: x + 1)
    f(randn(2))
    ctx = f.context
    gc.collect()
    live = ir.Context._get_live_count()
    for n in range(2, 6):
        f(randn(n))
        f(randn(n))
    assert f.context is ctx
    gc.collect()
    # no new context per signature (fewer is fine: compiled modules of earlier tests'
    # functions, kept for reuse by identical traces, may have aged out meanwhile)
    assert ir.Context._get_live_count() <= live


def test_pytree_tree_structure_change_retraces() -> None:
    count = [0]

    def f(p: Any) -> Any:
        count[0] += 1
        return sum(p) if isinstance(p, (list, tuple)) else p["a"]

    jf = ad.jit(f)
    a, b = randn(2), randn(2)
    jf([a, b])
    jf([b, a])
    jf((a, b))
    jf({"a": a})
    assert count[0] == 3


# --------------------------------------------------------------------------- pytrees

def test_pytree_inputs_and_outputs() -> None:
    params = {"w": randn(3, 2), "b": randn(2), "extra": [randn(2), (randn(2), None)]}
    x = randn(4, 3)

    @ad.jit
    def f(params: Any, x: Any) -> Any:
        h = x @ params["w"] + params["b"]
        e0, (e1, nothing) = params["extra"]
        assert nothing is None
        return {"h": h, "stats": (h.sum(), [h.max(), e0 * e1]), "none": None}

    out = f(params, x)
    h = x @ params["w"] + params["b"]
    assert set(out) == {"h", "stats", "none"} and out["none"] is None
    np.testing.assert_allclose(out["h"], h, rtol=1e-5)
    s, (m, prod) = out["stats"]
    assert isinstance(out["stats"], tuple) and isinstance(out["stats"][1], list)
    np.testing.assert_allclose(s, h.sum(), rtol=1e-5)
    np.testing.assert_allclose(m, h.max(), rtol=1e-6)
    np.testing.assert_allclose(prod, params["extra"][0] * params["extra"][1][0], rtol=1e-6)


def test_namedtuple_and_kwargs() -> None:
    Point = collections.namedtuple("Point", ["x", "y"])

    @ad.jit
    def f(p: Any, *, scale: Any) -> Any:
        return Point(p.y * scale, p.x + scale)

    p = Point(randn(2), randn(2))
    out = f(p, scale=2.0)
    assert isinstance(out, Point)
    np.testing.assert_allclose(out.x, p.y * 2, rtol=1e-6)
    np.testing.assert_allclose(out.y, p.x + 2, rtol=1e-6)


def test_outputs_constants_passthrough_and_duplicates() -> None:
    @ad.jit
    def f(x: Any, y: Any) -> Any:
        z = x * 2
        return x, 3.0, np.arange(3), z, z, y + 0 * x, anp.zeros(2), (x | x) if False else z

    x, y = randn(3), randn(3)
    a, c, r, z1, z2, w, zeros, z3 = f(x, y)
    np.testing.assert_array_equal(a, x)
    assert a is not x  # a copy, not the caller's buffer
    np.testing.assert_array_equal(c, np.asarray(3.0))
    np.testing.assert_array_equal(r, np.arange(3))
    np.testing.assert_allclose(z1, x * 2)
    np.testing.assert_allclose(z2, x * 2)
    np.testing.assert_allclose(z3, x * 2)
    assert not np.shares_memory(z1, z2)
    np.testing.assert_allclose(w, y)
    np.testing.assert_array_equal(zeros, np.zeros(2))


def test_results_merged_by_cse_are_returned_separately() -> None:
    # `a + b` twice gives two tracers that CSE merges into one MLIR value.
    f = ad.jit(lambda a, b: (a + b, a + b, a * b))
    a, b = randn(3), randn(3)
    s1, s2, p = f(a, b)
    np.testing.assert_allclose(s1, a + b)
    np.testing.assert_allclose(s2, a + b)
    np.testing.assert_allclose(p, a * b)
    assert not np.shares_memory(s1, s2)


def test_only_constant_outputs_need_no_compilation() -> None:
    f = ad.jit(lambda x: (1.0, np.ones(2)))
    one, ones = f(randn(2))
    assert float(one) == 1.0 and ones.tolist() == [1.0, 1.0]


def test_bool_inputs_and_outputs() -> None:
    m = np.array([True, False, True])
    x = randn(3)
    got = ad.jit(lambda m, x: (m, ~m, anp.where(m, x, 0.0), x > 0, True))(m, x)
    np.testing.assert_array_equal(got[0], m)
    np.testing.assert_array_equal(got[1], ~m)
    np.testing.assert_array_equal(got[2], np.where(m, x, 0.0).astype(np.float32))
    np.testing.assert_array_equal(got[3], x > 0)
    assert got[3].dtype == np.bool_


# --------------------------------------------------------------------------- static arguments

def test_static_argnums() -> None:
    count = [0]

    def f(x: Any, n: int, mode: str) -> Any:
        count[0] += 1
        for _ in range(n):
            x = anp.tanh(x) if mode == "tanh" else x * 2
        return x

    jf = ad.jit(f, static_argnums=(1, 2))
    x = randn(3)
    np.testing.assert_allclose(jf(x, 2, "tanh"), np.tanh(np.tanh(x)), rtol=1e-6)
    np.testing.assert_allclose(jf(x, 3, "double"), x * 8, rtol=1e-6)
    jf(randn(3), 2, "tanh")
    assert count[0] == 2


def test_static_argnums_decorator_form_and_negative_index() -> None:
    @ad.jit(static_argnums=-1)
    def f(x: Any, axis: int) -> Any:
        return x.sum(axis=axis)

    x = randn(2, 3)
    np.testing.assert_allclose(f(x, 0), x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(f(x, 1), x.sum(1), rtol=1e-6)


def test_argnums_must_be_ints() -> None:
    with pytest.raises(TypeError, match="static_argnums must be an int or a sequence of ints"):
        ad.jit(lambda x: x, static_argnums=(1.5,))
    with pytest.raises(TypeError, match="donate_argnums must be an int or a sequence of ints"):
        ad.jit(lambda x: x, donate_argnums=[True])


def test_donate_argnums_decorator_form() -> None:
    # Details (soundness, pytrees, grad, errors) are in test_runtime_wrappers.py.
    @ad.jit(donate_argnums=(0,), static_argnames="scale")
    def f(w: Any, g: Any, *, scale: float) -> Any:
        return w + scale * g

    w, g = randn(3), randn(3)
    want = w + 2 * g
    out = f(w, g, scale=2)
    assert np.shares_memory(out, w)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_unhashable_static_argument_is_a_type_error() -> None:
    f = ad.jit(lambda x, cfg: x, static_argnums=1)
    with pytest.raises(TypeError, match="hashable"):
        f(randn(2), [1, 2])


def test_invalid_argument_types() -> None:
    f = ad.jit(lambda x: x)
    with pytest.raises(TypeError, match="not a valid jit argument"):
        f("hello")
    with pytest.raises(TypeError, match="not supported"):
        f(np.zeros(2, np.complex64))


# --------------------------------------------------------------------------- nesting

def test_jit_inside_jit_is_inlined() -> None:
    inner_count = [0]

    @ad.jit
    def inner(x: Any) -> Any:
        inner_count[0] += 1
        return x * 3

    @ad.jit
    def outer(x: Any) -> Any:
        return inner(x) + inner(x + 1)

    x = randn(3)
    np.testing.assert_allclose(outer(x), x * 3 + (x + 1) * 3, rtol=1e-6)
    assert inner._cache_size() == 0 and inner_count[0] == 2


# --------------------------------------------------------------------------- lower()

def test_lower_stages() -> None:
    def f(x: Any, w: Any) -> Any:
        return anp.tanh(x @ w).sum(axis=0)

    x, w = randn(4, 3), randn(3, 2)
    lowered = ad.lower(f, x, w)
    capture = str(lowered)
    assert capture == lowered.as_text("capture")
    assert "func.func @main" in capture and "linalg.matmul" in capture
    assert "linalg.generic" in capture and "math.tanh" in capture and "linalg.reduce" in capture
    assert "linalg" in lowered.as_text("autodiff")
    llvm = lowered.as_text("llvm")
    assert "llvm.func" in llvm and "linalg." not in llvm
    with pytest.raises(ValueError, match="unknown stage"):
        lowered.as_text("nope")


def test_lower_to_llvm_of_a_gradient_with_contractions() -> None:
    """Python passes build IR in the module's context: `as_text("llvm")` runs the CPU
    pipeline with no context active (a matmul gradient's OuterProductsToElementwise
    used to fail with "requires a Context")."""
    def loss(w: Any, x: Any) -> Any:
        return anp.sum(anp.tanh(x @ w) ** 2)

    w, x = randn(64, 32), randn(16, 64)
    llvm = ad.lower(ad.grad(loss), w, x).as_text("llvm")
    assert "llvm.func" in llvm and "linalg." not in llvm


def test_lower_of_jitted_function_uses_its_static_argnums() -> None:
    jf = ad.jit(lambda x, k: x * k, static_argnums=1)
    text = str(jf.lower(randn(2), 5))
    assert "tensor<2xf32>" in text and "5.0" in text.replace("5.000000e+00", "5.0")


def test_locations_point_at_user_code() -> None:
    def f(x: Any) -> Any:
        y = anp.exp(x)  # the line to find
        return y

    line = f.__code__.co_firstlineno + 1
    text = ad.lower(f, randn(2)).as_text(debug_info=True)
    exp_line = next(ln for ln in text.splitlines() if "math.exp" in ln)
    assert "loc(" in exp_line
    assert f"test_jit.py\":{line}:" in text
    assert f"test_jit.py\":{f.__code__.co_firstlineno}:" in text  # func.func @main


# --------------------------------------------------------------------------- transform API

def test_trace_function_and_emit_call_with_captures() -> None:
    seen = {}

    @ad.jit
    def f(x: Any, y: Any) -> Any:
        def inner(a: Any) -> Any:
            return anp.sin(a) * y, 2.0  # closes over `y`, returns a constant

        fn = tracing.trace_function(inner, [ShapedArray(x.shape, x.dtype)])
        seen["name"] = fn.sym_name
        seen["captures"] = len(fn.captures)
        seen["out"] = [str(a) for a in fn.out_avals]
        seen["visibility"] = str(fn.func_op.attributes["sym_visibility"])
        r, two = tracing.emit_call(fn, [x])
        return r + two

    x, y = randn(3), randn(3)
    np.testing.assert_allclose(f(x, y), np.sin(x) * y + 2.0, rtol=1e-6)
    assert seen["name"] == "inner" and seen["captures"] == 1
    assert seen["out"] == ["f32[3]", "f64[]{weak}"]
    assert seen["visibility"] == '"private"'


def test_trace_function_nested_capture_from_grandparent() -> None:
    @ad.jit
    def f(x: Any, y: Any) -> Any:
        def middle(a: Any) -> Any:
            def inner(b: Any) -> Any:
                return b * y  # y belongs to @main, two levels up

            fn = tracing.trace_function(inner, [ShapedArray(a.shape, a.dtype)])
            return tracing.emit_call(fn, [a])[0] + 1

        fn = tracing.trace_function(middle, [ShapedArray(x.shape, x.dtype)])
        assert len(fn.captures) == 1
        return tracing.emit_call(fn, [x])[0]

    x, y = randn(2), randn(2)
    np.testing.assert_allclose(f(x, y), x * y + 1, rtol=1e-6)
    text = str(ad.lower(f, x, y))
    assert text.count("func.func") == 3 and text.count("call @") == 2


def test_invalid_ir_is_a_compilation_error_at_the_user_line() -> None:
    from mlir.dialects import tensor

    def f(x: Any) -> Any:
        trace = tracing.current_trace()
        with trace.emitting():  # BAD-OP
            bad = tensor.CastOp(ir.RankedTensorType.get([5], ir.F32Type.get()), x.value)
        return trace.wrap(bad.result)

    line = f.__code__.co_firstlineno + 2
    with pytest.raises(ad.CompilationError) as info:
        ad.jit(f)(randn(3))
    msg = str(info.value)
    assert f"test_jit.py:{line}:" in msg and "cast incompatible" in msg
    assert any("error:" in d for d in info.value.diagnostics)


def test_repeat_calls_with_other_arrays_are_still_checked() -> None:
    """Calls after the first (the fast path keyed by structure, shapes and dtypes) still
    copy strided and read-only arrays correctly and still reject wrong ones."""
    count = [0]

    def f(x: Any, p: Any) -> Any:
        count[0] += 1
        return x * p[0] + p[1]

    jf = ad.jit(f)
    x, p = randn(4, 3), (randn(3), randn(3))
    np.testing.assert_allclose(jf(x, p), x * p[0] + p[1], rtol=1e-6)
    strided = randn(4, 6)[:, ::2]  # same shape and dtype, not contiguous
    np.testing.assert_allclose(jf(strided, p), strided * p[0] + p[1], rtol=1e-6)
    frozen = randn(4, 3)
    frozen.flags.writeable = False
    np.testing.assert_allclose(jf(frozen, p), frozen * p[0] + p[1], rtol=1e-6)
    assert count[0] == 1
    jf(x, list(p))  # a list is another structure
    assert count[0] == 2
    with pytest.raises(ValueError):
        jf(randn(4, 3), (randn(3), randn(2)))  # traces, then fails to broadcast
    assert jf(randn(0, 3), p).shape == (0, 3)
