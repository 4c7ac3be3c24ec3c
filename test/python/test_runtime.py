"""The CPU runtime: calling JIT-compiled MLIR functions with numpy values.

Expected values come from numpy on the same inputs (exact for these
elementwise ops: IEEE add/mul of the same operands in the same type) or
from hand-derived constants. Compiled modules are built once per module
(fixtures) since each compilation costs a few tenths of a second.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mlir import ir

from mlir_autodiff import runtime
from mlir_autodiff.runtime import CompiledModule, memref_descriptor
from mlir_autodiff.signatures import ArgSpec

DTYPES = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.bool_,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
}
SHAPES = {0: (), 1: (3,), 2: (2, 3), 3: (2, 1, 3), 4: (2, 3, 1, 2)}

# Elementwise op per element-type family: (add, multiply). For i1, numpy's
# `+` and `*` on bools are logical or / and.
_OPS = {"f": ("arith.addf", "arith.mulf"), "i": ("arith.addi", "arith.muli"),
        "b": ("arith.ori", "arith.andi")}


def _tensor(dt: str, shape: tuple[int, ...]) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dt + ">"


def _generic(dt: str, rank: int, op: str, ins: list[str], scalar: str | None) -> str:
    """A linalg.generic applying `op` elementwise to `ins` (and a captured scalar)."""
    dims = ", ".join(f"d{i}" for i in range(rank))
    ident = f"affine_map<({dims}) -> ({dims})>"
    t = _tensor(dt, SHAPES[rank])
    maps = ", ".join([ident] * (len(ins) + 1))
    iters = ", ".join(['"parallel"'] * rank)
    args = ", ".join(f"%a{i}: {dt}" for i in range(len(ins)))
    rhs = scalar if scalar else "%a1"
    return (
        f"  %e = tensor.empty() : {t}\n"
        f"  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iters}]}}\n"
        f"      ins({', '.join(ins)} : {', '.join([t] * len(ins))}) outs(%e : {t}) {{\n"
        f"  ^bb0({args}, %o: {dt}):\n"
        f"    %v = {op} %a0, {rhs} : {dt}\n"
        f"    linalg.yield %v : {dt}\n"
        f"  }} -> {t}\n"
        f"  return %r : {t}\n"
    )


def elementwise_module(dtypes: list[str]) -> str:
    """@id_<dt>_<rank>, @add_<dt>_<rank> and @scale_<dt>_<rank> for every dtype and rank."""
    out = []
    for dt in dtypes:
        add, mul = _OPS[np.dtype(DTYPES[dt]).kind if dt != "i1" else "b"]
        for rank in SHAPES:
            t = _tensor(dt, SHAPES[rank])
            out.append(f"func.func @id_{dt}_{rank}(%x: {t}) -> {t} {{\n"
                       f"  return %x : {t}\n}}\n")
            out.append(f"func.func @add_{dt}_{rank}(%x: {t}, %y: {t}) -> {t} {{\n"
                       + _generic(dt, rank, add, ["%x", "%y"], None) + "}\n")
            out.append(f"func.func @scale_{dt}_{rank}(%x: {t}, %s: {dt}) -> {t} {{\n"
                       + _generic(dt, rank, mul, ["%x"], "%s") + "}\n")
    return "".join(out)


def _random(dt: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(DTYPES[dt])
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        return rng.integers(-20, 21, shape).astype(dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _compiles_without_crash(text: str) -> str | None:
    """Compile `text` in a child process first: None if fine, else why it died.

    Upstream MemRefToLLVM aborts the process on some inputs (i1 loads and
    stores); a crash must fail these tests, not take the whole session down.
    """
    code = ("import sys; from mlir_autodiff.runtime import CompiledModule; "
            "CompiledModule(sys.stdin.read())")
    proc = subprocess.run([sys.executable, "-c", code], input=text, text=True,
                          capture_output=True, timeout=300)
    if proc.returncode < 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[0][:300]
        return f"compiling the module killed the process (signal {-proc.returncode}): {last}"
    return None


@pytest.fixture(scope="module")
def numeric() -> CompiledModule:
    return CompiledModule(elementwise_module(["f16", "f32", "f64", "i8", "i16", "i32", "i64"]))


@pytest.fixture(scope="module")
def boolean() -> CompiledModule | str:
    text = elementwise_module(["i1"])
    crash = _compiles_without_crash(text)
    return crash if crash else CompiledModule(text)


def _module_for(dt: str, numeric: CompiledModule, boolean: CompiledModule | str) -> CompiledModule:
    if dt != "i1":
        return numeric
    if isinstance(boolean, str):
        pytest.fail(boolean)
    return boolean


# -- elementwise functions over dtypes and ranks ----------------------------------------------

RANKS = list(SHAPES)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("dt", list(DTYPES))
def test_identity_returns_a_copy(dt: str, rank: int, numeric, boolean) -> None:
    cm = _module_for(dt, numeric, boolean)
    x = _random(dt, SHAPES[rank], np.random.default_rng(rank))
    before = x.copy()
    y = cm[f"id_{dt}_{rank}"](x)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    # `return %arg0` is copied into a numpy-owned result: no aliasing.
    assert not np.shares_memory(x, y)
    y[...] = 0 if dt != "i1" else False
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("dt", list(DTYPES))
def test_add_matches_numpy(dt: str, rank: int, numeric, boolean) -> None:
    cm = _module_for(dt, numeric, boolean)
    rng = np.random.default_rng(10 + rank)
    x, y = _random(dt, SHAPES[rank], rng), _random(dt, SHAPES[rank], rng)
    expected = np.logical_or(x, y) if dt == "i1" else x + y
    got = cm[f"add_{dt}_{rank}"](x, y)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("dt", list(DTYPES))
def test_scale_by_scalar_matches_numpy(dt: str, rank: int, numeric, boolean) -> None:
    cm = _module_for(dt, numeric, boolean)
    rng = np.random.default_rng(20 + rank)
    x = _random(dt, SHAPES[rank], rng)
    s = DTYPES[dt](True if dt == "i1" else 3)
    expected = np.logical_and(x, s) if dt == "i1" else x * s
    got = cm[f"scale_{dt}_{rank}"](x, s)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


def test_bool_arrays_are_one_byte_per_element(boolean) -> None:
    """i1 memory is numpy's bool layout: one byte per element holding 0 or 1."""
    if isinstance(boolean, str):
        pytest.fail(boolean)
    x = np.array([[True, False, True], [False, False, True]])
    y = np.array([[False, False, True], [True, False, False]])
    got = boolean["add_i1_2"](x, y)
    assert got.itemsize == 1 and got.strides == (3, 1)
    np.testing.assert_array_equal(got.view(np.uint8), [[1, 0, 1], [1, 0, 1]])


# -- scalars, several results, no results ------------------------------------------------------

MISC = r"""
func.func @scalars(%a: f64, %b: i32, %c: i1, %d: f32, %e: i64) -> (f64, i32, i1, f32, i64) {
  %two = arith.constant 2.0 : f64
  %a2 = arith.mulf %a, %two : f64
  %one = arith.constant 1 : i32
  %b1 = arith.addi %b, %one : i32
  %true = arith.constant true
  %nc = arith.xori %c, %true : i1
  %dn = arith.negf %d : f32
  %e2 = arith.muli %e, %e : i64
  return %a2, %b1, %nc, %dn, %e2 : f64, i32, i1, f32, i64
}

func.func @one_scalar(%x: tensor<3xf32>) -> f32 {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<3xf32>) outs(%init : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}

func.func @mixed(%x: tensor<2xf32>, %n: i64) -> (tensor<2xf32>, i64, tensor<2xf32>, f64) {
  %f = arith.constant 0.5 : f64
  return %x, %n, %x, %f : tensor<2xf32>, i64, tensor<2xf32>, f64
}

func.func @nothing(%x: tensor<2xf32>) {
  return
}

func.func @insert_into_arg(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c = arith.constant 9.0 : f32
  %i = arith.constant 1 : index
  %r = tensor.insert %c into %x[%i] : tensor<3xf32>
  return %r : tensor<3xf32>
}

func.func @rank6(%x: tensor<1x2x1x2x1x2xi32>) -> tensor<1x2x1x2x1x2xi32> {
  %e = tensor.empty() : tensor<1x2x1x2x1x2xi32>
  %r = linalg.add ins(%x, %x : tensor<1x2x1x2x1x2xi32>, tensor<1x2x1x2x1x2xi32>)
                  outs(%e : tensor<1x2x1x2x1x2xi32>) -> tensor<1x2x1x2x1x2xi32>
  return %r : tensor<1x2x1x2x1x2xi32>
}

func.func @dyn_sum(%x: tensor<?x3xf32>) -> (tensor<3xf32>, index) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  %r = linalg.reduce ins(%x : tensor<?x3xf32>) outs(%init : tensor<3xf32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x3xf32>
  return %r, %n : tensor<3xf32>, index
}

func.func @two_matmuls(%a: tensor<32x32xf32>, %b: tensor<32x32xf32>)
    -> (tensor<32x32xf32>, f32) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m = linalg.matmul ins(%a, %b : tensor<32x32xf32>, tensor<32x32xf32>)
                     outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %m2 = linalg.matmul ins(%m, %b : tensor<32x32xf32>, tensor<32x32xf32>)
                      outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
  %e0 = tensor.empty() : tensor<f32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s = linalg.reduce ins(%m2 : tensor<32x32xf32>) outs(%i0 : tensor<f32>) dimensions = [0, 1]
    (%x: f32, %acc: f32) {
      %t = arith.addf %x, %acc : f32
      linalg.yield %t : f32
    }
  %v = tensor.extract %s[] : tensor<f32>
  return %m2, %v : tensor<32x32xf32>, f32
}

func.func private @hidden(%x: f32) -> f32 {
  return %x : f32
}

func.func @vector_arg(%v: vector<4xf32>) -> vector<4xf32> {
  return %v : vector<4xf32>
}
"""


@pytest.fixture(scope="module")
def misc() -> CompiledModule:
    return CompiledModule(MISC, source_name="misc.mlir")


def test_scalar_arguments_and_results(misc) -> None:
    a2, b1, nc, dn, e2 = misc["scalars"](1.25, 41, True, 2.5, -3_000_000_000)
    assert (a2, b1, nc, dn, e2) == (2.5, 42, False, -2.5, 9_000_000_000_000_000_000)
    assert type(a2) is np.float64 and type(b1) is np.int32 and type(nc) is np.bool_
    assert type(dn) is np.float32 and type(e2) is np.int64


def test_numpy_scalars_are_accepted_for_scalar_parameters(misc) -> None:
    out = misc["scalars"](np.float64(0.5), np.int32(-1), np.bool_(False), np.float32(0), 0)
    assert out == (1.0, 0, True, -0.0, 0)


def test_one_scalar_result_is_returned_bare(misc) -> None:
    got = misc["one_scalar"](np.array([1.5, 2.0, -0.25], np.float32))
    assert got == np.float32(3.25) and isinstance(got, np.float32)


def test_several_results_in_order_and_never_aliased(misc) -> None:
    x = np.array([1.0, -2.0], np.float32)
    r0, n, r2, f = misc["mixed"](x, 7)
    np.testing.assert_array_equal(r0, x)
    np.testing.assert_array_equal(r2, x)
    assert n == 7 and f == 0.5
    # The same value returned twice lands in two separate buffers.
    assert not np.shares_memory(r0, r2) and not np.shares_memory(r0, x)


def test_function_without_results_returns_none(misc) -> None:
    assert misc["nothing"](np.zeros(2, np.float32)) is None
    assert misc["nothing"].call([np.zeros(2, np.float32)]) == []


def test_inputs_are_never_written(misc) -> None:
    """tensor.insert into an argument updates a copy, not the caller's array."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = misc["insert_into_arg"](x)
    np.testing.assert_array_equal(got, [1.0, 9.0, 3.0])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])


def test_read_only_arrays_are_accepted(misc) -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(misc["insert_into_arg"](x), [1.0, 9.0, 3.0])


def test_rank_six(misc) -> None:
    x = np.arange(8, dtype=np.int32).reshape(1, 2, 1, 2, 1, 2)
    np.testing.assert_array_equal(misc["rank6"](x), 2 * x)


@pytest.mark.parametrize("rows", [0, 1, 4])
def test_dynamic_input_dimension(misc, rows: int) -> None:
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    sums, n = misc["dyn_sum"](x)
    np.testing.assert_array_equal(sums, x.sum(axis=0))
    assert n == rows


def test_dynamic_input_still_checks_static_dimensions(misc) -> None:
    with pytest.raises(ValueError, match=r"argument 0 \(tensor<\?x3xf32>\): expected shape "
                                         r"\(\?, 3\), got \(2, 4\)"):
        misc["dyn_sum"](np.zeros((2, 4), np.float32))


# -- argument conversion ------------------------------------------------------------------------


_BASE = np.arange(12, dtype=np.float32).reshape(2, 6) - 3.5


@pytest.mark.parametrize("x", [
    pytest.param(_BASE[:, ::2], id="strided"),
    pytest.param(np.asfortranarray(_BASE[:, :3]), id="fortran-order"),
    pytest.param(_BASE[::-1, :3], id="negative-stride"),
    pytest.param(np.broadcast_to(_BASE[0, :3], (2, 3)), id="broadcast"),
    pytest.param(np.frombuffer(b"\0" + _BASE[:, :3].tobytes(), np.float32, offset=1)
                 .reshape(2, 3), id="unaligned"),
    pytest.param(_BASE[:, :3].astype(">f4"), id="big-endian"),
])
def test_non_contiguous_inputs_are_copied(x: np.ndarray, numeric) -> None:
    y = np.full((2, 3), 0.25, np.float32)
    np.testing.assert_array_equal(numeric["add_f32_2"](x, y), np.asarray(x, np.float32) + y)


def test_python_lists_and_scalars_are_converted(numeric) -> None:
    got = numeric["scale_f32_2"]([[1, 2, 3], [4, 5, 6]], 2)
    np.testing.assert_array_equal(got, np.array([[2, 4, 6], [8, 10, 12]], np.float32))
    got = numeric["add_i64_1"]([1, 2, 3], (True, 2, -3))
    np.testing.assert_array_equal(got, [2, 4, 0])
    assert numeric["id_f64_0"](2.5) == 2.5


def test_python_float_for_an_integer_parameter_is_refused(numeric) -> None:
    with pytest.raises(TypeError, match=r"@scale_i32_1: argument 1 \(i32\): expected int32 "
                                        r"values, got float64"):
        numeric["scale_i32_1"]([1, 2, 3], 1.5)


def test_out_of_range_python_integer_is_refused(numeric) -> None:
    with pytest.raises(ValueError, match=r"argument 1 \(i8\): value out of range for int8"):
        numeric["scale_i8_1"]([1, 2, 3], 200)
    with pytest.raises(ValueError, match=r"argument 0 \(tensor<3xi8>\): value out of range"):
        numeric["scale_i8_1"]([1, 2, 300], 2)


# -- errors: count, shape, rank, dtype, values ---------------------------------------------------

ADD = "add_f32_2"
GOOD = np.zeros((2, 3), np.float32)


@pytest.mark.parametrize("args, exc, pattern", [
    ((GOOD,), TypeError, r"@add_f32_2 takes 2 arguments \(tensor<2x3xf32>, tensor<2x3xf32>\), "
                         r"got 1"),
    ((GOOD, GOOD, GOOD), TypeError, r"takes 2 arguments .*got 3"),
    ((GOOD, np.zeros((3, 2), np.float32)), ValueError,
     r"@add_f32_2: argument 1 \(tensor<2x3xf32>\): expected shape \(2, 3\), got \(3, 2\)"),
    ((GOOD, np.zeros(6, np.float32)), ValueError,
     r"argument 1 \(tensor<2x3xf32>\): expected rank 2 with shape \(2, 3\), got rank 1"),
    ((GOOD, np.zeros((2, 3))), TypeError,
     r"argument 1 \(tensor<2x3xf32>\): expected dtype float32, got float64"),
    ((np.zeros((2, 3), np.int32), GOOD), TypeError,
     r"argument 0 \(tensor<2x3xf32>\): expected dtype float32, got int32"),
    ((GOOD, [[1, 2, 3], [4, 5]]), ValueError,
     r"argument 1 \(tensor<2x3xf32>\): nested lists of different lengths"),
    ((GOOD, "abc"), TypeError, r"argument 1 \(tensor<2x3xf32>\): expected dtype float32, "
                               r"got strings"),
    ((GOOD, None), TypeError, r"argument 1 \(tensor<2x3xf32>\): expected dtype float32, "
                              r"got Python objects"),
    ((GOOD, 1.0), ValueError, r"argument 1 \(tensor<2x3xf32>\): expected rank 2"),
])
def test_bad_arguments_raise_before_running(numeric, args, exc, pattern) -> None:
    with pytest.raises(exc, match=pattern):
        numeric[ADD](*args)


def test_scalar_parameter_given_an_array(numeric) -> None:
    with pytest.raises(ValueError, match=r"argument 1 \(f32\): expected a scalar, got an array "
                                         r"of shape \(2,\)"):
        numeric["scale_f32_1"](np.zeros(3, np.float32), np.zeros(2, np.float32))


def test_argument_names_appear_in_messages(numeric) -> None:
    with pytest.raises(ValueError, match=r"@add_f32_2: argument 1 'weights' \(tensor<2x3xf32>\)"):
        numeric[ADD].call([GOOD, np.zeros(3, np.float32)], arg_names=["x", "weights"])


def test_unknown_and_uncallable_functions(misc) -> None:
    with pytest.raises(KeyError, match=r"no public function '@missing'"):
        misc["missing"]
    with pytest.raises(KeyError, match=r"@hidden"):
        misc["hidden"]  # private functions are not entry points
    with pytest.raises(TypeError, match=r"@vector_arg cannot be called from numpy: argument 0: "
                                        r"type vector<4xf32> is not supported"):
        misc["vector_arg"]
    assert "mixed" in misc and "hidden" not in misc
    assert "scalars" in misc.function_names


# -- compile-time errors --------------------------------------------------------------------------


def test_dynamic_result_is_a_compile_error_with_a_location() -> None:
    text = ("func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {\n"
            "  return %x : tensor<?xf32>\n}\n")
    with pytest.raises(ir.MLIRError) as info:
        CompiledModule(text, source_name="dyn.mlir")
    diags = info.value.error_diagnostics
    assert any("has a dynamic shape" in d.message for d in diags)
    assert any(str(d.location).startswith('loc("dyn.mlir":1:1') for d in diags)


def test_parse_error_is_an_mlir_error() -> None:
    with pytest.raises(ir.MLIRError, match="expected"):
        CompiledModule("func.func @f( {", source_name="bad.mlir")


def test_ir_module_input_keeps_locations_and_is_not_modified() -> None:
    ctx = ir.Context()
    text = "func.func @f(%x: f32) -> f32 {\n  return %x : f32\n}\n"
    module = ir.Module.parse(text, ctx)
    before = str(module)
    cm = CompiledModule(module)
    assert cm["f"](1.5) == 1.5
    assert str(module) == before  # the caller's IR is untouched


# -- the calling convention ---------------------------------------------------------------------


def test_memref_descriptor_views_the_array() -> None:
    a = np.arange(6, dtype=np.float64).reshape(2, 3)[:, 1:]
    d = memref_descriptor(a)
    assert d.aligned == a.ctypes.data and d.offset == 0
    assert list(d.shape) == [2, 2] and list(d.strides) == [3, 1]
    d0 = memref_descriptor(np.array(1.0, np.float32))
    assert not hasattr(d0, "shape")


def test_argspec_of_mlir_types() -> None:
    with ir.Context():
        spec = ArgSpec.of(ir.Type.parse("tensor<?x4xi1>"))
        assert spec.shape == (None, 4) and spec.dtype == np.bool_ and not spec.is_static
        scalar = ArgSpec.of(ir.Type.parse("index"))
        assert scalar.is_scalar and scalar.dtype == np.int64
        assert ArgSpec.of(ir.Type.parse("tensor<2xbf16>")).dtype.name == "bfloat16"
        with pytest.raises(TypeError, match="f8E4M3FN"):
            ArgSpec.of(ir.Type.parse("tensor<2xf8E4M3FN>"))


def test_calls_do_not_relower(numeric, monkeypatch) -> None:
    """A call only converts arguments and jumps into native code: cheap, no pipeline."""
    calls = []
    monkeypatch.setattr(runtime, "run_pipeline", lambda *a, **k: calls.append(a))
    f = numeric["add_f32_1"]
    x = np.ones(3, np.float32)
    for _ in range(100):
        f(x, x)
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        f(x, x)
    per_call = (time.perf_counter() - start) / n
    assert not calls
    assert per_call < 1e-3, f"{per_call * 1e6:.0f} us per call"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_repeated_calls_do_not_leak(misc) -> None:
    """10,000 calls allocating a 4 KB temporary and two results each keep RSS flat."""
    f = misc["two_matmuls"]
    rng = np.random.default_rng(0)
    a = (rng.random((32, 32)) / 32).astype(np.float32)
    b = (rng.random((32, 32)) / 32).astype(np.float32)
    for _ in range(300):
        out, total = f(a, b)
    gc.collect()
    before = _rss()
    for _ in range(10_000):
        out, total = f(a, b)
    gc.collect()
    growth = _rss() - before
    assert growth < 2 * 2**20, f"RSS grew by {growth / 2**20:.2f} MB"
    expected = (a.astype(np.float64) @ b) @ b
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    np.testing.assert_allclose(total, expected.sum(), rtol=1e-5)


def test_compiled_module_releases_its_context() -> None:
    gc.collect()
    live = ir.Context._get_live_count()
    cm = CompiledModule("func.func @f(%x: f32) -> f32 {\n  return %x : f32\n}\n")
    assert cm["f"](2.0) == 2.0
    del cm
    gc.collect()
    assert ir.Context._get_live_count() == live


def test_concurrent_calls_of_one_function() -> None:
    """Threads calling one compiled function at once (the native call releases the GIL)
    each get their own result: the reused call frame is never shared mid-call."""
    import threading

    n = 1 << 16
    cm = CompiledModule(f"""
func.func @f(%x: tensor<{n}xf32>, %s: f32) -> tensor<{n}xf32> {{
  %e = tensor.empty() : tensor<{n}xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                        iterator_types = ["parallel"]}}
      ins(%x : tensor<{n}xf32>) outs(%e : tensor<{n}xf32>) {{
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %s : f32
    linalg.yield %m : f32
  }} -> tensor<{n}xf32>
  return %r : tensor<{n}xf32>
}}""")
    f = cm["f"]
    wrong: list[int] = []

    def work(k: int) -> None:
        x = np.full(n, k, np.float32)
        for i in range(40):
            if not np.array_equal(f(x, float(i)), x * np.float32(i)):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


# ------------------------------------------------------------- LLVM optimization level

_AXPY = """
func.func @axpy(%x: tensor<8xf64>, %y: tensor<8xf64>) -> tensor<8xf64> {
  %e = tensor.empty() : tensor<8xf64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                        affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf64>, tensor<8xf64>) outs(%e : tensor<8xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %two = arith.constant 2.0 : f64
    %m = arith.mulf %a, %two : f64
    %s = arith.addf %m, %b : f64
    linalg.yield %s : f64
  } -> tensor<8xf64>
  return %r : tensor<8xf64>
}
"""


def test_modules_compile_at_o2_unless_a_level_is_named(monkeypatch) -> None:
    # O3 bought no speed over O2 on any benchmark row (the MLIR schedules tile and
    # vectorize) and cost compile time, so jit's default is O2 at every size;
    # AUTODIFF_OPT_LEVEL and an explicit opt_level still decide
    monkeypatch.delenv(runtime.OPT_LEVEL_ENV, raising=False)
    x, y = np.linspace(-1.0, 1.0, 8), np.linspace(2.0, 3.0, 8)
    default = CompiledModule(_AXPY)
    assert default.opt_level == runtime.DEFAULT_OPT_LEVEL == runtime.default_opt_level() == 2
    np.testing.assert_array_equal(default["axpy"](x, y), 2.0 * x + y)
    named = CompiledModule(_AXPY, opt_level=3)
    assert named.opt_level == 3
    np.testing.assert_array_equal(named["axpy"](x, y), 2.0 * x + y)
    monkeypatch.setenv(runtime.OPT_LEVEL_ENV, "1")
    assert CompiledModule(_AXPY).opt_level == 1


def test_a_consumed_module_is_verified_and_lowered_in_place() -> None:
    # jit hands its own copy over (consume=True): no print and parse of another copy
    from mlir_autodiff import dialects

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx:
        module = ir.Module.parse(_AXPY)
    x, y = np.linspace(-1.0, 1.0, 8), np.linspace(2.0, 3.0, 8)
    copied = CompiledModule(module, context=ctx)
    assert "linalg.generic" in str(module)  # the caller's IR untouched
    consumed = CompiledModule(module, context=ctx, consume=True)
    assert consumed.module is module and "llvm.func @axpy" in str(module)
    np.testing.assert_array_equal(consumed["axpy"](x, y), 2.0 * x + y)
    np.testing.assert_array_equal(copied["axpy"](x, y), 2.0 * x + y)
    with pytest.raises(ValueError, match="consume"):
        CompiledModule(_AXPY, context=ctx, consume=True)  # text: nothing to hand over
    with pytest.raises(ValueError, match="consume"):
        CompiledModule(module, context=ir.Context(), consume=True)  # another context


#: A module whose @axpy signature no longer matches its body, handed over to
#: CompiledModule(consume=True) with the library's default (no verifier between passes).
_BROKEN_CONSUMED = f"""
from mlir import ir
from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule

ctx = ir.Context()
dialects.load(ctx)
with ctx:
    broken = ir.Module.parse({_AXPY!r})
    f32 = ir.F32Type.get()
    broken.body.operations[0].attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([f32], [f32]))
try:
    CompiledModule(broken, context=ctx, consume=True)
except ir.MLIRError as err:
    print("MLIRError:", str(err).splitlines()[1])
"""


def test_invalid_ir_handed_over_is_a_verifier_error_not_an_abort() -> None:
    # what parsing a copy used to check: without it, bufferization asserts (SIGABRT)
    env = dict(os.environ, AUTODIFF_CACHE="0")
    env.pop("AUTODIFF_VERIFY_EACH", None)
    proc = subprocess.run([sys.executable, "-c", _BROKEN_CONSUMED], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MLIRError:" in proc.stdout and "function signature" in proc.stdout, proc.stdout
