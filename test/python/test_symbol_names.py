"""Any valid symbol name is safe for a user's function, whatever the lowering calls.

The lowered code calls library routines by their C names (`sinh`, `log1p`,
`malloc`, `memrefCopy`, `__kmpc_fork_call`, ...). A module that defines a
function of such a name used to capture those calls: `@sinh` recursed
forever, `@log1p` returned garbage. Here one module defines a function named
after every routine the CPU lowering and LLVM's code generator can call for
the ops it holds, each computing with the op that calls that routine; every
result is checked against numpy. The module runs in a child process (a
captured call hangs or crashes). The set of library routines the lowered
module declares is checked to be covered by the names tested, so a routine
the lowering starts to call is tested as a name too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlir_autodiff.transforms.reserved_symbols import LIBRARY_FUNCTIONS, is_reserved

X = np.array([0.25, 0.5, 0.75, 0.125, 0.625])  # in every function's domain
Y = np.array([1.5, 2.0, 0.5, 3.0, 1.25])

#: math op -> (C routine of its double form, numpy reference, first argument)
UNARY = {
    "sin": ("sin", np.sin), "cos": ("cos", np.cos), "tan": ("tan", np.tan),
    "asin": ("asin", np.arcsin), "acos": ("acos", np.arccos), "atan": ("atan", np.arctan),
    "sinh": ("sinh", np.sinh), "cosh": ("cosh", np.cosh), "tanh": ("tanh", np.tanh),
    "asinh": ("asinh", np.arcsinh), "acosh": ("acosh", lambda y: np.arccosh(y)),
    "atanh": ("atanh", np.arctanh),
    "exp": ("exp", np.exp), "exp2": ("exp2", np.exp2), "expm1": ("expm1", np.expm1),
    "log": ("log", np.log), "log10": ("log10", np.log10), "log1p": ("log1p", np.log1p),
    "log2": ("log2", np.log2),
    "erf": ("erf", np.vectorize(math.erf)), "erfc": ("erfc", np.vectorize(math.erfc)),
    "cbrt": ("cbrt", np.cbrt), "sqrt": ("sqrt", np.sqrt), "absf": ("fabs", np.abs),
    "ceil": ("ceil", np.ceil), "floor": ("floor", np.floor), "round": ("round", np.round),
    "roundeven": ("roundeven", np.round), "trunc": ("trunc", np.trunc),
}
#: binary op -> (C routine, numpy reference)
BINARY = {
    "math.atan2": ("atan2", np.arctan2), "math.powf": ("pow", np.power),
    "math.copysign": ("copysign", np.copysign), "arith.remf": ("fmod", np.fmod),
    "arith.maxnumf": ("fmax", np.fmax), "arith.minnumf": ("fmin", np.fmin),
    "arith.maximumf": ("fmaximum", np.maximum), "arith.minimumf": ("fminimum", np.minimum),
}
_F = {"f64": "", "f32": "f"}
_NP = {"f64": np.float64, "f32": np.float32}


def _argument(op: str) -> np.ndarray:
    # acosh needs x >= 1; rounding wants halves and fractions.
    return Y + 1 if op == "acosh" else X * 3 if op in ("ceil", "floor", "round", "roundeven",
                                                   "trunc") else X


def _tensor(dt: str, n: int = 5) -> str:
    return f"tensor<{n}x{dt}>"


def _map(body: str, dt: str, n_in: int, out_dt: str | None = None) -> str:
    """A 1-d elementwise linalg.generic over `n_in` inputs computing `body` on %a, %b."""
    t, o = _tensor(dt), _tensor(out_dt or dt)
    ins = ", ".join(f"%x{i}" for i in range(n_in))
    maps = ", ".join(["affine_map<(i) -> (i)>"] * (n_in + 1))
    args = ", ".join(f"%{c}: {dt}" for c in "ab"[:n_in])
    return f"""
  %e = tensor.empty() : {o}
  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = ["parallel"]}}
      ins({ins} : {", ".join([t] * n_in)}) outs(%e : {o}) {{
  ^bb0({args}, %out: {out_dt or dt}):
{textwrap.indent(body, "    ")}
  }} -> {o}
  return %r : {o}"""


def cases() -> list[tuple[str, str, list[np.ndarray], np.ndarray]]:
    """(function name, its MLIR text, arguments, expected result) for every name."""
    out = []
    for dt in ("f64", "f32"):
        t, npt = _tensor(dt), _NP[dt]
        for op, (routine, ref) in UNARY.items():
            x = _argument(op).astype(npt)
            name = routine + _F[dt]
            body = f"%y = math.{op} %a : {dt}\nlinalg.yield %y : {dt}"
            out.append((name, f"func.func @{name}(%x0: {t}) -> {t} {{{_map(body, dt, 1)}\n}}",
                        [x], ref(x.astype(np.float64)).astype(npt)))
        for op, (routine, ref) in BINARY.items():
            x, y = X.astype(npt), (Y - 1.1).astype(npt)
            name = routine + _F[dt]
            body = f"%y = {op} %a, %b : {dt}\nlinalg.yield %y : {dt}"
            out.append((name, f"func.func @{name}(%x0: {t}, %x1: {t}) -> {t} {{"
                              f"{_map(body, dt, 2)}\n}}", [x, y], ref(x, y)))
        name = "fma" + _F[dt]
        body = f"%y = math.fma %a, %b, %b : {dt}\nlinalg.yield %y : {dt}"
        x, y = X.astype(npt), Y.astype(npt)
        out.append((name, f"func.func @{name}(%x0: {t}, %x1: {t}) -> {t} {{"
                          f"{_map(body, dt, 2)}\n}}", [x, y], x * y + y))
        # math.fpowi: outlined by convert-math-to-funcs (`__mlir_math_fpowi_*`),
        # and LLVM's powi intrinsic calls the compiler runtime's __powi?f2.
        routine = {"f64": "__powidf2", "f32": "__powisf2"}[dt]
        for name in (routine, f"__mlir_math_fpowi_{dt}_i32"):
            body = (f"%c3 = arith.constant 3 : i32\n%y = math.fpowi %a, %c3 : {dt}, i32\n"
                    f"linalg.yield %y : {dt}")
            out.append((name, f"func.func @{name}(%x0: {t}) -> {t} {{{_map(body, dt, 1)}\n}}",
                        [Y.astype(npt)], Y.astype(npt) ** 3))
    # Integer powers: an outlined function per type.
    body = "%y = math.ipowi %a, %a : i32\nlinalg.yield %y : i32"
    k = np.array([1, 2, 3, 4, 5], np.int32)
    out.append(("__mlir_math_ipowi_i32",
                f"func.func @__mlir_math_ipowi_i32(%x0: {_tensor('i32')}) -> {_tensor('i32')} "
                f"{{{_map(body, 'i32', 1)}\n}}", [k], k ** k))
    # f16 arithmetic: the code generator widens through __extendhfsf2 / __truncsfhf2.
    h = X.astype(np.float16)
    for name in ("__extendhfsf2", "__truncsfhf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee"):
        body = "%y = arith.mulf %a, %a : f16\nlinalg.yield %y : f16"
        out.append((name, f"func.func @{name}(%x0: {_tensor('f16')}) -> {_tensor('f16')} "
                          f"{{{_map(body, 'f16', 1)}\n}}", [h], h * h))
    # Memory: a dynamically sized temporary is malloc'd and freed; a strided
    # slice copied out goes through memrefCopy; fills may become memset,
    # copies memcpy/memmove.
    sink = """
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x0, %c0 : tensor<?xf64>
  %e = tensor.empty(%n) : tensor<?xf64>
  %ex = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
      iterator_types = ["parallel"]} ins(%x0 : tensor<?xf64>) outs(%e : tensor<?xf64>) {
  ^bb0(%a: f64, %o: f64):
    %y = math.exp %a : f64
    linalg.yield %y : f64
  } -> tensor<?xf64>
  %z = arith.constant 0.0 : f64
  %s0 = tensor.empty() : tensor<f64>
  %s1 = linalg.fill ins(%z : f64) outs(%s0 : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%ex : tensor<?xf64>) outs(%s1 : tensor<f64>) dimensions = [0]
    (%a: f64, %acc: f64) {
      %y = arith.addf %a, %acc : f64
      linalg.yield %y : f64
    }
  %v = tensor.extract %s[] : tensor<f64>
  return %v : f64"""
    x = np.linspace(0.0, 1.0, 300)
    for name in ("malloc", "free", "calloc", "realloc", "aligned_alloc", "posix_memalign",
                 "memalign", "memset", "bzero", "abort", "puts", "printf", "exit"):
        out.append((name, f"func.func @{name}(%x0: tensor<?xf64>) -> f64 {{{sink}\n}}",
                    [x], np.float64(np.exp(x).sum())))
    m = np.arange(48.0).reshape(6, 8)
    for name in ("memrefCopy", "memcpy", "memmove"):
        out.append((name, f"""func.func @{name}(%x0: tensor<6x8xf64>) -> tensor<3x4xf64> {{
  %s = tensor.extract_slice %x0[1, 0] [3, 4] [2, 2] : tensor<6x8xf64> to tensor<3x4xf64>
  return %s : tensor<3x4xf64>
}}""", [m], m[1::2, 0:8:2]))
    # The runtime's own namespace: the C wrapper and packed wrapper of @twice
    # are `_mlir_ciface_twice` and `_mlir_twice`; user functions of those names.
    twice = "%y = arith.addf %a, %a : f64\nlinalg.yield %y : f64"
    for name in ("twice", "_mlir_ciface_twice", "_mlir_twice", "_mlir__mlir_twice",
                 "printMemrefF64", "printF64", "printNewline", "llvm.sin.f64"):
        out.append((name, f'func.func @"{name}"(%x0: {_tensor("f64")}) -> '
                          f'{_tensor("f64")} {{{_map(twice, "f64", 1)}\n}}', [X], 2 * X))
    # OpenMP (threads > 1): the parallel regions call the OpenMP runtime.
    big = np.linspace(-2.0, 2.0, 512 * 256, dtype=np.float32).reshape(512, 256)
    for name in ("__kmpc_fork_call", "__kmpc_global_thread_num", "__kmpc_for_static_init_8u",
                 "__kmpc_for_static_fini", "__kmpc_barrier", "omp_get_thread_num",
                 "omp_get_num_threads"):
        t = "tensor<512x256xf32>"
        out.append((name, f"func.func @{name}(%x0: {t}) -> {t} {{\n"
                          f"  %r = math.tanh %x0 : {t}\n  return %r : {t}\n}}",
                    [big], np.tanh(big)))
    return out


def mismatches(results: dict[str, np.ndarray]) -> dict[str, str]:
    """Function name -> what is wrong with its result, for every wrong one."""
    wrong = {}
    for name, _, _, expected in cases():
        expected = np.asarray(expected)
        got = np.asarray(results[name], np.float64)
        tol = 2e-3 if expected.dtype in (np.float16, np.float32) else 1e-12
        if got.shape != expected.shape or not np.allclose(
                got, expected.astype(np.float64), rtol=tol, atol=tol):
            wrong[name] = f"{got.ravel()[:6]} != {expected.ravel()[:6]}"
    return wrong


_CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
from test_symbol_names import cases
from mlir_autodiff.runtime import CompiledModule
table = cases()
cm = CompiledModule("\\n".join(text for _, text, _, _ in table), pipeline={pipeline!r})
declared = sorted(set(re.findall(r"^  llvm.func @([^(]+)\\(", cm.lowered_text, re.M)) -
                  set(re.findall(r"^  llvm.func @([^(]+)\\(.*\\{{$", cm.lowered_text, re.M)))
from test_symbol_names import mismatches
wrong = mismatches({{name: cm[name](*args) for name, _, args, _ in table}})
print(json.dumps({{"declared": declared, "wrong": wrong,
                  "openmp": "omp.parallel" in cm.lowered_text}}))
""".replace("import json, sys", "import json, re, sys")


def _run_child(pipeline: str) -> dict:
    code = _CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), pipeline=pipeline)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_library_names_as_user_functions() -> None:
    """Each function named after a routine the lowered code calls computes its own value."""
    report = _run_child("autodiff-lower-to-cpu")
    assert not report["wrong"], report["wrong"]
    # Every routine the lowered module declares was tested as a user's name.
    names = {name for name, _, _, _ in cases()}
    assert set(report["declared"]) <= names, set(report["declared"]) - names


@pytest.mark.parametrize("threads", [4])
def test_library_names_with_openmp(threads: int) -> None:
    """The same with threads: OpenMP's entry points (`__kmpc_*`, `omp_*`) as names too."""
    from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

    if openmp_runtime_library() is None:
        pytest.skip("no OpenMP runtime")
    report = _run_child(f"autodiff-lower-to-cpu{{threads={threads}}}")
    assert not report["wrong"], report["wrong"]
    # The large kernels ran in OpenMP parallel regions (calls into __kmpc_*).
    assert report["openmp"]


def test_reserved_names_cover_the_library_routines() -> None:
    """Every tested routine, and every name in the documented list, is reserved;
    ordinary names are not."""
    for name, _, _, _ in cases():
        if name != "twice":
            assert is_reserved(name), name
    assert all(is_reserved(n) for n in LIBRARY_FUNCTIONS)
    for name in ("main", "f", "loss", "add", "matmul", "user$sinh", "sinh_grad"):
        assert not is_reserved(name), name


def test_library_names_through_jit() -> None:
    """Python functions named like library routines, traced as functions of their own
    (checkpoint, custom_jvp), inside jit and under grad."""
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    ops = {"sinh": anp.sinh, "cosh": anp.cosh, "tan": anp.tan, "log10": anp.log10,
           "cbrt": anp.cbrt, "atan": anp.arctan, "log2": anp.log2, "exp2": anp.exp2,
           "log1p": anp.log1p, "expm1": anp.expm1, "malloc": anp.exp, "free": anp.exp,
           "memrefCopy": anp.sqrt, "__kmpc_fork_call": anp.tanh, "_mlir_ciface_main": anp.sin}
    refs = {"sinh": np.sinh, "cosh": np.cosh, "tan": np.tan, "log10": np.log10,
            "cbrt": np.cbrt, "atan": np.arctan, "log2": np.log2, "exp2": np.exp2,
            "log1p": np.log1p, "expm1": np.expm1, "malloc": np.exp, "free": np.exp,
            "memrefCopy": np.sqrt, "__kmpc_fork_call": np.tanh, "_mlir_ciface_main": np.sin}
    wrapped = []
    for name, op in ops.items():
        def fn(x, op=op):
            return op(x) * 1.0
        fn.__name__ = fn.__qualname__ = name
        wrapped.append(ad.checkpoint(fn))

    def total(x):
        return sum(anp.sum(w(x)) for w in wrapped)

    x = X.copy()
    want = sum(refs[n](x).sum() for n in ops)
    assert np.isclose(ad.jit(total)(x), want, rtol=1e-12)
    h = 1e-6
    fd = np.array([(sum(refs[n](x + h * e).sum() for n in ops)
                    - sum(refs[n](x - h * e).sum() for n in ops)) / (2 * h)
                   for e in np.eye(len(x))])
    np.testing.assert_allclose(ad.jit(ad.grad(total))(x), fd, rtol=1e-6)


def test_runtime_functions_list_the_runtime_library() -> None:
    """`RUNTIME_FUNCTIONS` is every C-named function MLIR's runtime library exports
    (read from the pinned library's dynamic symbols), so none can capture a call."""
    from mlir import ir as _ir

    from mlir_autodiff.native_build import _llvm_tool
    from mlir_autodiff.transforms.reserved_symbols import RUNTIME_FUNCTIONS

    lib = os.path.join(os.path.dirname(_ir.__file__), "lib", "libmlir_c_runner_utils.so")
    out = subprocess.run([_llvm_tool("llvm-nm"), "-D", "--defined-only", lib],
                         capture_output=True, text=True, check=True).stdout
    exported = {parts[2] for parts in (line.split() for line in out.splitlines())
                if len(parts) == 3 and parts[1] in "TDBRWV"}
    c_named = {n for n in exported if not n.startswith("_")}
    assert c_named == RUNTIME_FUNCTIONS
    assert all(is_reserved(n) for n in exported)


def test_runtime_library_loaded_only_for_calls_into_it() -> None:
    """A lowered module calling only malloc/free and libm runs without MLIR's runtime
    library; one that calls into it (its clock) gets it."""
    from mlir_autodiff.runtime import CompiledModule, shared_libs

    plain = CompiledModule("""
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = math.sinh %x : tensor<4xf32>
  return %y : tensor<4xf32>
}""")
    assert shared_libs(plain.module) == []
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(plain["f"](x), np.sinh(x), rtol=1e-6)
    clock = CompiledModule("""
func.func private @rtclock() -> f64
func.func @g(%x: tensor<1xf64>) -> tensor<1xf64> {
  %t = func.call @rtclock() : () -> f64
  %c0 = arith.constant 0 : index
  %y = tensor.insert %t into %x[%c0] : tensor<1xf64>
  return %y : tensor<1xf64>
}""")
    assert shared_libs(clock.module) != []
