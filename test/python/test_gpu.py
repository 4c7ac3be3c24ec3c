"""Tests of `--autodiff-lower-to-gpu` and the GPU runtime (mlir_autodiff.gpu).

No GPU is needed: compilation is real (ptxas produces the cubins that are
checked here), the pre-mapping parallel program is run on the CPU against
numpy, and the runtime's no-device path is exercised. Tests that need a
device skip with the driver's reason.

What the binary checks look at (independently of our pipeline):
- `bin`: the object is an ELF file (`\\x7fELF`), e_machine EM_CUDA (190), and
  the SM in e_flags equals the requested chip; the ptxas command line ptxas
  records inside the cubin (`-arch sm_XX`) agrees.
- `fatbin`: magic 0xBA55ED50, and every ELF entry (SM in its entry header)
  holds a cubin for the requested SM, checked as above.
- `isa`: the PTX text has `.target sm_XX` and a `.entry` per kernel.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest
from gpu_lowering import lowered
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff import gpu as adgpu
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
from mlir_autodiff.transforms.pipeline import PipelineError, run_pipeline

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")

# -- the corpus: function text, argument factory, numpy reference ---------------------------

RNG = np.random.default_rng(0)


def _pos(*shape: int, dtype=np.float32) -> np.ndarray:
    return (RNG.random(shape) + 0.5).astype(dtype)


def _any(*shape: int, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape)).astype(dtype)


_ID2 = "affine_map<(i, j) -> (i, j)>"

CORPUS: dict[str, tuple[str, object, object]] = {}


def case(name: str, text: str, args, ref) -> None:
    CORPUS[name] = (text, args, ref)


case("elementwise_math_f32", """
func.func @elementwise_math_f32(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %r = linalg.generic {indexing_maps = [#ID2, #ID2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    %p = math.exp %t : f32
    %l = math.log %p : f32
    %s = math.sqrt %a : f32
    %y = arith.addf %l, %s : f32
    linalg.yield %y : f32
  } -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}""", lambda: [_pos(8, 16)], lambda x: np.log(np.exp(np.tanh(x))) + np.sqrt(x))

case("elementwise_f64_odd", """
func.func @elementwise_f64_odd(%x: tensor<333xf64>, %y: tensor<333xf64>) -> tensor<333xf64> {
  %e = tensor.empty() : tensor<333xf64>
  %m = linalg.mul ins(%x, %y : tensor<333xf64>, tensor<333xf64>) outs(%e : tensor<333xf64>)
      -> tensor<333xf64>
  %d = linalg.exp ins(%m : tensor<333xf64>) outs(%e : tensor<333xf64>) -> tensor<333xf64>
  %r = linalg.sub ins(%d, %x : tensor<333xf64>, tensor<333xf64>) outs(%e : tensor<333xf64>)
      -> tensor<333xf64>
  return %r : tensor<333xf64>
}""", lambda: [_any(333, dtype=np.float64), _any(333, dtype=np.float64)],
     lambda x, y: np.exp(x * y) - x)

case("broadcast_bias", """
func.func @broadcast_bias(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (j)>, #ID2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %m = arith.mulf %c, %two : f32
    %y = arith.addf %a, %m : f32
    linalg.yield %y : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}""", lambda: [_any(4, 8), _any(8)], lambda x, b: x + 2 * b)

case("matmul_chain", """
func.func @matmul_chain(%a: tensor<16x32xf32>, %b: tensor<32x8xf32>, %c: tensor<8xf32>)
    -> tensor<16x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %m = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x8xf32>)
      outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  %r = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (j)>, #ID2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m, %c : tensor<16x8xf32>, tensor<8xf32>) outs(%e : tensor<16x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %t = math.tanh %s : f32
    %u = math.exp %t : f32
    %v = arith.mulf %u, %u : f32
    %w = math.sqrt %v : f32
    linalg.yield %w : f32
  } -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}""", lambda: [_any(16, 32), _any(32, 8), _any(8)],
     lambda a, b, c: np.sqrt(np.exp(np.tanh(a @ b + c)) ** 2))

case("sum_rows", """
func.func @sum_rows(%x: tensor<16x40xf32>) -> tensor<16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %r = linalg.reduce ins(%x : tensor<16x40xf32>) outs(%f : tensor<16xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<16xf32>
}""", lambda: [_any(16, 40)], lambda x: x.sum(axis=1))

case("max_all_scalar", """
func.func @max_all_scalar(%x: tensor<12x10xf32>) -> f32 {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<12x10xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
    (%a: f32, %acc: f32) {
      %m = arith.maximumf %a, %acc : f32
      linalg.yield %m : f32
    }
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}""", lambda: [_any(12, 10)], lambda x: np.float32(x.max()))

case("softmax_rows", """
func.func @softmax_rows(%x: tensor<6x20xf32>) -> tensor<6x20xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<6xf32>
  %e2 = tensor.empty() : tensor<6x20xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<6xf32>) -> tensor<6xf32>
  %mx = linalg.reduce ins(%x : tensor<6x20xf32>) outs(%mi : tensor<6xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %m = arith.maximumf %a, %acc : f32
      linalg.yield %m : f32
    }
  %ex = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (i)>, #ID2],
                        iterator_types = ["parallel", "parallel"]}
      ins(%x, %mx : tensor<6x20xf32>, tensor<6xf32>) outs(%e2 : tensor<6x20xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %s = arith.subf %a, %m : f32
    %p = math.exp %s : f32
    linalg.yield %p : f32
  } -> tensor<6x20xf32>
  %si = linalg.fill ins(%z : f32) outs(%e1 : tensor<6xf32>) -> tensor<6xf32>
  %sm = linalg.reduce ins(%ex : tensor<6x20xf32>) outs(%si : tensor<6xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %r = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (i)>, #ID2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sm : tensor<6x20xf32>, tensor<6xf32>) outs(%e2 : tensor<6x20xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %d = arith.divf %a, %s : f32
    linalg.yield %d : f32
  } -> tensor<6x20xf32>
  return %r : tensor<6x20xf32>
}""", lambda: [_any(6, 20)],
     lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(
         1, keepdims=True))

case("transpose", """
func.func @transpose(%x: tensor<5x7xf32>) -> tensor<7x5xf32> {
  %e = tensor.empty() : tensor<7x5xf32>
  %r = linalg.transpose ins(%x : tensor<5x7xf32>) outs(%e : tensor<7x5xf32>) permutation = [1, 0]
  return %r : tensor<7x5xf32>
}""", lambda: [_any(5, 7)], lambda x: x.T)

case("fill_scalar_arg", """
func.func @fill_scalar_arg(%v: f32) -> tensor<3x300xf32> {
  %e = tensor.empty() : tensor<3x300xf32>
  %r = linalg.fill ins(%v : f32) outs(%e : tensor<3x300xf32>) -> tensor<3x300xf32>
  return %r : tensor<3x300xf32>
}""", lambda: [np.float32(1.25)], lambda v: np.full((3, 300), v, np.float32))

case("slices", """
func.func @slices(%x: tensor<8x6xf32>) -> tensor<8x6xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x6xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x6xf32>) -> tensor<8x6xf32>
  %s = tensor.extract_slice %x[2, 1] [3, 4] [1, 1] : tensor<8x6xf32> to tensor<3x4xf32>
  %e2 = tensor.empty() : tensor<3x4xf32>
  %n = linalg.negf ins(%s : tensor<3x4xf32>) outs(%e2 : tensor<3x4xf32>) -> tensor<3x4xf32>
  %r = tensor.insert_slice %n into %f[4, 2] [3, 4] [1, 1] : tensor<3x4xf32> into tensor<8x6xf32>
  return %r : tensor<8x6xf32>
}""", lambda: [_any(8, 6)],
     lambda x: np.pad(-x[2:5, 1:5], ((4, 1), (2, 0))).astype(np.float32))

case("scf_for_loop", """
func.func @scf_for_loop(%x: tensor<64xf32>) -> tensor<64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %x) -> (tensor<64xf32>) {
    %e = tensor.empty() : tensor<64xf32>
    %n = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                         iterator_types = ["parallel"]}
        ins(%acc : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%a: f32, %o: f32):
      %h = arith.constant 0.5 : f32
      %one = arith.constant 1.0 : f32
      %m = arith.mulf %a, %h : f32
      %y = arith.addf %m, %one : f32
      linalg.yield %y : f32
    } -> tensor<64xf32>
    scf.yield %n : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}""", lambda: [_any(64)], lambda x: ((x * 0.5 + 1) * 0.5 + 1) * 0.5 + 1)

case("dot_f64_scalar", """
func.func @dot_f64_scalar(%x: tensor<100xf64>, %y: tensor<100xf64>) -> f64 {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %d = linalg.dot ins(%x, %y : tensor<100xf64>, tensor<100xf64>) outs(%f : tensor<f64>)
      -> tensor<f64>
  %v = tensor.extract %d[] : tensor<f64>
  %s = math.sqrt %v : f64
  return %s : f64
}""", lambda: [_pos(100, dtype=np.float64), _pos(100, dtype=np.float64)],
     lambda x, y: np.sqrt(np.dot(x, y)))

case("constant_operand", """
func.func @constant_operand(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant dense<[1.0, -2.0, 3.5, 4.0]> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.add ins(%x, %c : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>)
      -> tensor<4xf32>
  return %r : tensor<4xf32>
}""", lambda: [_any(4)], lambda x: x + np.array([1.0, -2.0, 3.5, 4.0], np.float32))

case("dynamic_sum", """
func.func @dynamic_sum(%x: tensor<?xf32>) -> f32 {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<?xf32>) outs(%f : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}""", lambda: [_any(77)], lambda x: np.float32(x.sum()))

case("two_results_and_scalar_ops", """
func.func @two_results_and_scalar_ops(%x: tensor<10xf32>, %y: tensor<10xf32>, %i: index)
    -> (tensor<10xf32>, tensor<10xf32>) {
  %e = tensor.empty() : tensor<10xf32>
  %s = linalg.add ins(%x, %y : tensor<10xf32>, tensor<10xf32>) outs(%e : tensor<10xf32>)
      -> tensor<10xf32>
  %v = tensor.extract %x[%i] : tensor<10xf32>
  %w = arith.mulf %v, %v : f32
  %p = tensor.insert %w into %s[%i] : tensor<10xf32>
  return %p, %y : tensor<10xf32>, tensor<10xf32>
}""", lambda: [_any(10), _any(10), 3],
     lambda x, y, i: (np.where(np.arange(10) == i, x[i] * x[i], x + y), y))

case("relu_and_mask", """
func.func @relu_and_mask(%x: tensor<9x7xf32>) -> (tensor<9x7xf32>, tensor<9x7xi1>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<9x7xf32>
  %eb = tensor.empty() : tensor<9x7xi1>
  %r:2 = linalg.generic {indexing_maps = [#ID2, #ID2, #ID2],
                         iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<9x7xf32>) outs(%e, %eb : tensor<9x7xf32>, tensor<9x7xi1>) {
  ^bb0(%a: f32, %o: f32, %ob: i1):
    %c = arith.cmpf ogt, %a, %z : f32
    %y = arith.select %c, %a, %z : f32
    linalg.yield %y, %c : f32, i1
  } -> (tensor<9x7xf32>, tensor<9x7xi1>)
  return %r#0, %r#1 : tensor<9x7xf32>, tensor<9x7xi1>
}""", lambda: [_any(9, 7)], lambda x: (np.maximum(x, 0), x > 0))

case("bool_constants", """
func.func @bool_constants(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %m = arith.constant dense<[true, false, false, true]> : tensor<4xi1>
  %t = arith.constant dense<true> : tensor<4xi1>
  %z = arith.constant dense<0.0> : tensor<4xf32>
  %r = arith.select %m, %x, %z : tensor<4xi1>, tensor<4xf32>
  %n = arith.xori %m, %t : tensor<4xi1>
  return %r, %n : tensor<4xf32>, tensor<4xi1>
}""", lambda: [_any(4)],
     lambda x: (np.where([True, False, False, True], x, 0).astype(np.float32),
                np.array([False, True, True, False])))

case("math_zoo", """
func.func @math_zoo(%x: tensor<12xf32>, %n: tensor<12xi32>) -> tensor<12xf32> {
  %e = tensor.empty() : tensor<12xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                        affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%x, %n : tensor<12xf32>, tensor<12xi32>) outs(%e : tensor<12xf32>) {
  ^bb0(%a: f32, %k: i32, %o: f32):
    %p = math.fpowi %a, %k : f32, i32
    %ki = math.ipowi %k, %k : i32
    %kf = arith.sitofp %ki : i32 to f32
    %neg = arith.negf %a : f32
    %c = math.copysign %p, %neg : f32
    %er = math.erf %c : f32
    %at = math.atan2 %er, %a : f32
    %l1 = math.log1p %a : f32
    %em = math.expm1 %at : f32
    %pw = math.powf %a, %l1 : f32
    %fl = math.floor %kf : f32
    %cb = math.cbrt %pw : f32
    %si = math.sin %em : f32
    %s1 = arith.addf %cb, %si : f32
    %s2 = arith.addf %s1, %fl : f32
    linalg.yield %s2 : f32
  } -> tensor<12xf32>
  return %r : tensor<12xf32>
}""", lambda: [_pos(12), np.arange(12, dtype=np.int32) % 4],
     lambda x, n: (np.cbrt(x ** np.log1p(x))
                   + np.sin(np.expm1(np.arctan2(np.vectorize(math.erf)(-(x ** n)), x)))
                   + np.floor((n ** n).astype(np.float32))).astype(np.float32))


# -- long reductions: block-parallel kernels (transforms/gpu/reductions.py) ------------------

case("sum_squares_large", """
func.func @sum_squares_large(%x: tensor<1000003xf32>) -> f32 {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>],
                       iterator_types = ["reduction"]}
      ins(%x : tensor<1000003xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %m = arith.mulf %a, %a : f32
    %s = arith.addf %m, %acc : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}""", lambda: [RNG.integers(-3, 4, 1000003).astype(np.float32)],
     # Small integers: every partial sum is exact in f32, whatever the order.
     lambda x: np.float32((x.astype(np.float64) ** 2).sum()))

case("softmax_long_rows", """
func.func @softmax_long_rows(%x: tensor<37x1000xf32>) -> tensor<37x1000xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<37xf32>
  %e2 = tensor.empty() : tensor<37x1000xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<37xf32>) -> tensor<37xf32>
  %mx = linalg.reduce ins(%x : tensor<37x1000xf32>) outs(%mi : tensor<37xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %m = arith.maximumf %a, %acc : f32
      linalg.yield %m : f32
    }
  %ex = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (i)>, #ID2],
                        iterator_types = ["parallel", "parallel"]}
      ins(%x, %mx : tensor<37x1000xf32>, tensor<37xf32>) outs(%e2 : tensor<37x1000xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %s = arith.subf %a, %m : f32
    %p = math.exp %s : f32
    linalg.yield %p : f32
  } -> tensor<37x1000xf32>
  %si = linalg.fill ins(%z : f32) outs(%e1 : tensor<37xf32>) -> tensor<37xf32>
  %sm = linalg.reduce ins(%ex : tensor<37x1000xf32>) outs(%si : tensor<37xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %r = linalg.generic {indexing_maps = [#ID2, affine_map<(i, j) -> (i)>, #ID2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sm : tensor<37x1000xf32>, tensor<37xf32>) outs(%e2 : tensor<37x1000xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %d = arith.divf %a, %s : f32
    linalg.yield %d : f32
  } -> tensor<37x1000xf32>
  return %r : tensor<37x1000xf32>
}""", lambda: [_any(37, 1000) * 4],
     lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(
         1, keepdims=True))

case("column_sums_f64_into_argument", """
func.func @column_sums_f64_into_argument(%x: tensor<300x70xf64>, %acc: tensor<70xf64>)
    -> tensor<70xf64> {
  %r = linalg.reduce ins(%x : tensor<300x70xf64>) outs(%acc : tensor<70xf64>) dimensions = [0]
    (%a: f64, %c: f64) {
      %s = arith.addf %c, %a : f64
      linalg.yield %s : f64
    }
  return %r : tensor<70xf64>
}""", lambda: [_any(300, 70, dtype=np.float64), _any(70, dtype=np.float64)],
     lambda x, acc: acc + x.sum(axis=0))

case("integer_row_reductions", """
func.func @integer_row_reductions(%x: tensor<50x300xi32>, %y: tensor<9x5000xi64>)
    -> (tensor<50xi32>, tensor<9xi64>) {
  %lo = arith.constant -2147483648 : i32
  %z = arith.constant 0 : i64
  %e1 = tensor.empty() : tensor<50xi32>
  %e2 = tensor.empty() : tensor<9xi64>
  %f1 = linalg.fill ins(%lo : i32) outs(%e1 : tensor<50xi32>) -> tensor<50xi32>
  %f2 = linalg.fill ins(%z : i64) outs(%e2 : tensor<9xi64>) -> tensor<9xi64>
  %m = linalg.reduce ins(%x : tensor<50x300xi32>) outs(%f1 : tensor<50xi32>) dimensions = [1]
    (%a: i32, %c: i32) {
      %r = arith.maxsi %a, %c : i32
      linalg.yield %r : i32
    }
  %s = linalg.reduce ins(%y : tensor<9x5000xi64>) outs(%f2 : tensor<9xi64>) dimensions = [1]
    (%a: i64, %c: i64) {
      %r = arith.addi %a, %c : i64
      linalg.yield %r : i64
    }
  return %m, %s : tensor<50xi32>, tensor<9xi64>
}""", lambda: [RNG.integers(-10**9, 10**9, (50, 300)).astype(np.int32),
               RNG.integers(-10**12, 10**12, (9, 5000)).astype(np.int64)],
     lambda x, y: (x.max(axis=1), y.sum(axis=1)))

case("reduce_outer_and_inner_dims", """
func.func @reduce_outer_and_inner_dims(%x: tensor<40x6x50xf32>) -> tensor<6xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6xf32>) -> tensor<6xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>,
                                        affine_map<(i, j, k) -> (j)>],
                       iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : tensor<40x6x50xf32>) outs(%f : tensor<6xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %i = linalg.index 0 : index
    %k = linalg.index 2 : index
    %ik = arith.muli %i, %k : index
    %n = arith.index_cast %ik : index to i32
    %w = arith.sitofp %n : i32 to f32
    %p = arith.mulf %a, %w : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<6xf32>
  return %r : tensor<6xf32>
}""", lambda: [_any(40, 6, 50)],
     lambda x: np.einsum("ijk,ik->j", x.astype(np.float64),
                         np.outer(np.arange(40), np.arange(50)).astype(np.float64)
                         ).astype(np.float32))

case("scalar_loss_tail", """
func.func @scalar_loss_tail(%x: tensor<5000xf32>, %y: tensor<70x40xf32>) -> f32 {
  %z = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %a = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>],
                       iterator_types = ["reduction"]}
      ins(%x : tensor<5000xf32>) outs(%f : tensor<f32>) {
  ^bb0(%v: f32, %acc: f32):
    %m = arith.mulf %v, %v : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  %b = linalg.reduce ins(%y : tensor<70x40xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
    (%v: f32, %acc: f32) {
      %s = arith.addf %v, %acc : f32
      linalg.yield %s : f32
    }
  %t = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>,
                                        affine_map<() -> ()>], iterator_types = []}
      ins(%a, %b : tensor<f32>, tensor<f32>) outs(%e : tensor<f32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %h = arith.mulf %p, %half : f32
    %r = arith.subf %h, %q : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %v = tensor.extract %t[] : tensor<f32>
  return %v : f32
}""", lambda: [_any(5000), _any(70, 40)],
     lambda x, y: np.float32(0.5 * (x.astype(np.float64) ** 2).sum() - y.astype(np.float64).sum()))

#: The cases above whose reductions are long enough for block-parallel kernels.
BLOCK_REDUCTION_CASES = ("sum_squares_large", "softmax_long_rows", "column_sums_f64_into_argument",
                         "integer_row_reductions", "reduce_outer_and_inner_dims",
                         "scalar_loss_tail")


def module_text(*names: str) -> str:
    return "\n".join(CORPUS[n][0] for n in names).replace("#ID2", _ID2)


def _check_cubin(elf: bytes, sm: int) -> None:
    assert elf[:4] == b"\x7fELF"
    assert adgpu.cubin_arch(elf) == sm
    # ptxas records its command line in the cubin: an independent check of the arch.
    assert f"-arch sm_{sm}".encode() in elf


# -- compilation to real device code ----------------------------------------------------------


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_reaches_fatbin(name: str, chip: str) -> None:
    module = lowered(module_text(name), chip=chip, format="fatbin")
    objects = adgpu.gpu_objects(module)
    assert objects, "no gpu.binary produced"
    sm = int(chip[3:])
    for obj in objects:
        assert obj.chip == chip and obj.format == "fatbin"
        assert int.from_bytes(obj.data[:4], "little") == adgpu.FATBIN_MAGIC
        cubins = adgpu.fatbin_cubins(obj.data)
        assert [s for s, _ in cubins] == [sm]
        for _, elf in cubins:
            _check_cubin(elf, sm)
    text = str(module)
    # Host code is in the LLVM dialect; kernels are only referenced by launches.
    assert "gpu.launch_func" in text and "func.func" not in text
    assert text.count("gpu.binary") == len(objects)


@needs_ptxas
def test_corpus_bin_format_is_a_bare_cubin() -> None:
    module = lowered(module_text(*sorted(CORPUS)), chip="sm_80", format="bin")
    objects = adgpu.gpu_objects(module)
    assert len(objects) >= len(CORPUS)
    for obj in objects:
        assert obj.format == "bin"
        _check_cubin(obj.data, 80)
        assert adgpu.binary_archs(obj) == [80]


@needs_ptxas
def test_isa_format_is_ptx_for_the_chip() -> None:
    module = lowered(module_text("matmul_chain", "softmax_rows"), chip="sm_90",
                     features="+ptx80", format="isa")
    objects = adgpu.gpu_objects(module)
    assert objects
    for obj in objects:
        ptx = obj.data.decode()
        assert re.search(r"^\.target sm_90\b", ptx, re.M), ptx[:300]
        assert re.search(r"^\.version 8\.0$", ptx, re.M)
        assert ".visible .entry " in ptx
        # libdevice is linked in: no math function is left as an external call.
        assert ".extern .func" not in ptx and "__nv_" not in ptx


@needs_ptxas
def test_host_code_translates_to_llvm_ir() -> None:
    """The ExecutionEngine's input: everything translates, kernels are embedded."""
    module = lowered(module_text("matmul_chain", "max_all_scalar"), chip="sm_80")
    translate = shutil.which("mlir-translate") or str(
        __import__("pathlib").Path(ir.__file__).parent / "bin" / "mlir-translate")
    out = subprocess.run([translate, "--mlir-to-llvmir"], input=str(module), text=True,
                         capture_output=True, check=True, timeout=60).stdout
    for symbol in ("mgpuModuleLoad", "mgpuModuleGetFunction", "mgpuLaunchKernel",
                   "mgpuMemAlloc", "mgpuMemcpy", "mgpuMemFree", "_mlir_ciface_matmul_chain"):
        assert symbol in out, symbol


_JIT_PROBE = """
import sys
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir_autodiff import dialects
from mlir_autodiff.gpu import lower_to_gpu
from mlir_autodiff.runtime import shared_libs
ctx = ir.Context()
dialects.load(ctx)
with ctx, ir.Location.unknown():
    m = ir.Module.parse(sys.stdin.read())
    lower_to_gpu(m, chip="sm_80")
    engine = ExecutionEngine(m, opt_level=2, shared_libs=shared_libs())
    print("lookup", engine.raw_lookup("_mlir_ciface_matmul_chain") != 0)
"""


@needs_ptxas
def test_host_module_jits_and_needs_only_the_cuda_runtime() -> None:
    """Without libmlir_cuda_runtime.so (it needs libcuda), the ExecutionEngine still
    translates and compiles the host module; the only missing symbols are mgpu*."""
    import sys

    proc = subprocess.run([sys.executable, "-c", _JIT_PROBE], input=module_text("matmul_chain"),
                          text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lookup False" in proc.stdout
    missing = re.search(r"Symbols not found: \[ (.*) \]", proc.stderr)
    assert missing, proc.stderr
    symbols = [s.strip() for s in missing.group(1).split(",")]
    assert "mgpuLaunchKernel" in symbols and "mgpuModuleLoad" in symbols
    assert all(s.startswith("mgpu") for s in symbols), symbols


# -- structure: fusion, race-free reductions, the host/device split ---------------------------


def test_matmul_and_elementwise_chain_fuse_into_at_most_two_kernels() -> None:
    module = lowered(module_text("matmul_chain"), stage="kernels")
    text = str(module)
    launches = re.findall(r"gpu\.launch_func", text)
    assert 1 <= len(launches) <= 2, text


def test_reduction_dims_are_sequential_loops_inside_parallel_dims() -> None:
    """sum_rows: one thread per row, the 40-long reduction is a per-thread scf.for."""
    module = lowered(module_text("sum_rows"), stage="kernels")
    kernels = [op for op in module.body.operations if op.operation.name == "gpu.module"]
    assert len(kernels) == 1
    body = str(kernels[0])
    assert "scf.for" in body
    assert "atomic" not in body and "gpu.all_reduce" not in body
    assert "known_block_size = array<i32: 16, 1, 1>" in body  # 16 rows -> 16 threads


def _launch_shapes(module: ir.Module) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], str]]:
    """Per kernel (at stage=kernels): its grid and block sizes, which
    `gpu-kernel-outlining` records on the `gpu.func`, and its text."""
    out = {}
    for op in module.body.operations:
        if op.operation.name != "gpu.module":
            continue
        for fn in op.regions[0].blocks[0].operations:
            if fn.operation.name != "gpu.func":
                continue
            attrs = fn.operation.attributes
            grid = tuple(ir.DenseI32ArrayAttr(attrs["known_grid_size"]))
            block = tuple(ir.DenseI32ArrayAttr(attrs["known_block_size"]))
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            out[name] = (grid, block, str(fn))
    return out


def _ptx_of(module: ir.Module) -> str:
    return "\n".join(obj.data.decode() for obj in adgpu.gpu_objects(module))


def _assert_block_reduction_ptx(ptx: str) -> None:
    """A block reduction: warp shuffles, shared memory across warps with barriers,
    and no atomics (the partials combine in a fixed order)."""
    assert "shfl.sync.bfly" in ptx
    assert "bar.sync" in ptx and "st.shared" in ptx and "ld.shared" in ptx
    assert not re.search(r"^\s*(atom|red)\.", ptx, re.M)


def test_whole_array_sum_is_two_block_parallel_passes() -> None:
    """1M elements: a grid of blocks (256 threads each) reduces chunks into partials,
    then one block of threads combines them; no kernel is a single thread."""
    module = lowered(module_text("sum_squares_large"), stage="kernels")
    shapes = _launch_shapes(module)
    reducing = {k: v for k, v in shapes.items() if "gpu.all_reduce" in v[2]}
    assert len(reducing) == 2, shapes
    grids = sorted(v[0] for v in reducing.values())
    assert grids[0] == (1, 1, 1) and grids[1][0] > 100, grids
    for grid, block, _ in reducing.values():
        assert block[0] >= 64
    assert all((g, b) != ((1, 1, 1), (1, 1, 1)) for g, b, _ in shapes.values()), shapes


@needs_ptxas
def test_whole_array_sum_ptx_has_shuffles_and_shared_memory() -> None:
    module = lowered(module_text("sum_squares_large"), chip="sm_90", format="isa")
    _assert_block_reduction_ptx(_ptx_of(module))


def test_long_rows_get_one_block_each() -> None:
    """Row softmax (37 rows of 1000): one row kernel (transforms/gpu/row_kernels.py;
    a kernel per max, exp, sum and division before) with a block per row, all its
    threads reducing the max and the sum, and striding over the row in each phase."""
    module = lowered(module_text("softmax_long_rows"), stage="kernels")
    shapes = _launch_shapes(module)
    reducing = [v for v in shapes.values() if "gpu.all_reduce" in v[2]]
    assert len(reducing) == 1 == len(shapes), shapes
    for grid, block, text in reducing:
        assert grid == (37, 1, 1) and block == (256, 1, 1)
        assert text.count("gpu.all_reduce") == 2
        assert "scf.for" in text  # each thread strides over its share of the row


@needs_ptxas
def test_long_rows_ptx_has_shuffles_and_shared_memory() -> None:
    module = lowered(module_text("softmax_long_rows"), chip="sm_80", format="isa")
    _assert_block_reduction_ptx(_ptx_of(module))


def test_consumers_of_a_block_reduction_are_not_fused_into_its_kernel() -> None:
    """Every thread of a block runs the block loop's body: a consumer loop fused
    there would run once per thread (and race if it updated a buffer in place).
    The consumer over the same 300 rows is a thread phase of the row kernel
    (transforms/gpu/row_kernels.py; a kernel of its own before): one thread of the
    row's block stores it, after a barrier, besides thread 0's store of the sum."""
    text = """
func.func @f(%x: tensor<300x1000xf32>, %a: tensor<300xf32>) -> tensor<300xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<300xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<300xf32>) -> tensor<300xf32>
  %s = linalg.reduce ins(%x : tensor<300x1000xf32>) outs(%f : tensor<300xf32>) dimensions = [1]
    (%v: f32, %acc: f32) {
      %r = arith.addf %v, %acc : f32
      linalg.yield %r : f32
    }
  %t = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%s : tensor<300xf32>) outs(%a : tensor<300xf32>) {
  ^bb0(%p: f32, %o: f32):
    %m = arith.mulf %p, %o : f32
    %r = arith.addf %m, %o : f32
    linalg.yield %r : f32
  } -> tensor<300xf32>
  return %t : tensor<300xf32>
}"""
    shapes = _launch_shapes(lowered(text, stage="kernels"))
    (reducing,) = [v for v in shapes.values() if "gpu.all_reduce" in v[2]]
    assert len(shapes) == 1 and reducing[0] == (300, 1, 1)
    assert reducing[2].count("memref.store") == 2 and "gpu.barrier" in reducing[2]
    x, a = _any(300, 1000), _any(300)
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["f"](x, a)
    want = x.astype(np.float64).sum(axis=1) * a + a
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_short_rows_and_many_outputs_stay_one_thread_per_output() -> None:
    """A matmul's 4096 outputs over 33-long rows: one thread per output, no all_reduce."""
    text = """
func.func @mm(%a: tensor<64x33xf32>, %b: tensor<33x64xf32>) -> tensor<64x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x33xf32>, tensor<33x64xf32>)
      outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}"""
    shapes = _launch_shapes(lowered(text, stage="kernels"))
    assert shapes and all("gpu.all_reduce" not in v[2] for v in shapes.values())


def _mlp_module_text(step: bool) -> tuple[str, tuple, object]:
    """The MLP loss of the benchmarks (784-512-512-10, batch 128), or its SGD
    training step (value_and_grad), as traced by ad.lower; with numpy's value."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import grad_cases

    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp
    from mlir_autodiff import nn

    inputs = grad_cases._mlp_inputs(128, (784, 512, 512, 10))(np.random.default_rng(0))
    params, x, onehot = tuple(inputs[:-2]), inputs[-2], inputs[-1]

    def loss(params, x, onehot):
        return grad_cases._mlp_loss(anp, lambda z: nn.log_softmax(z, axis=-1), params, x, onehot)

    def train_step(params, x, onehot):
        value, grads = ad.value_and_grad(loss)(params, x, onehot)
        return value, tuple(p - grad_cases.LR * g for p, g in zip(params, grads))

    text = ad.lower(train_step if step else loss, params, x, onehot).as_text("autodiff")
    return text, inputs, grad_cases._numpy_mlp_step if step else grad_cases._numpy_mlp_loss


@pytest.mark.parametrize("step", [False, True], ids=["loss", "train_step"])
def test_mlp_has_no_single_thread_kernel(step: bool) -> None:
    """The weight-decay sums (over 401408, 262144 and 5120 weights) and the mean
    cross-entropy are block reductions; the scalar tail (nll + wd * decay, the
    gradient's seeds) runs in the last reduction's kernel: no launch is one
    block of one thread."""
    text, _, _ = _mlp_module_text(step)
    shapes = _launch_shapes(lowered(text, stage="kernels"))
    single = [k for k, (g, b, _) in shapes.items() if g == (1, 1, 1) and b == (1, 1, 1)]
    assert not single, {k: shapes[k][2] for k in single}
    grids = [g[0] * g[1] * g[2] for g, _, t in shapes.values() if "gpu.all_reduce" in t]
    assert max(grids) >= 64  # the 401408-element sum is split over many blocks


@pytest.mark.parametrize("step", [False, True], ids=["loss", "train_step"])
def test_mlp_parallel_stage_matches_numpy(step: bool) -> None:
    text, inputs, numpy_fn = _mlp_module_text(step)
    module = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())
    got = module["main"](*inputs)  # ad.lower names the traced function main
    flat = np.concatenate([np.ravel(g) for g in (got if isinstance(got, tuple) else (got,))])
    np.testing.assert_allclose(flat, np.ravel(numpy_fn(*inputs)), rtol=1e-3, atol=1e-5)


def _stores_outside_thread_zero(kernel: ir.Operation) -> int:
    """memref.store ops of `kernel` not inside an scf.if on `thread_id x == 0`."""
    bad = 0

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal bad
        if op.name == "memref.store":
            parent = op.parent
            while parent.name not in ("scf.if", "gpu.func"):
                parent = parent.parent
            cond = parent.operands[0].owner if parent.name == "scf.if" else None
            if cond is None or "gpu.thread_id  x" not in str(cond.operands[0].owner) or \
                    "eq" not in str(cond):
                bad += 1
        return ir.WalkResult.ADVANCE

    kernel.walk(visit)
    return bad


def test_block_reduction_results_are_stored_by_thread_zero() -> None:
    """After the all-reduce every thread holds the result; thread 0 alone stores it
    and runs the scalar tail (0.5 * sum(x^2) - sum(y)), so no thread writes what
    another still reads and the tail runs once. (The two one-block sums and the
    tail are one row kernel, transforms/gpu/row_kernels.py: two kernels before.)"""
    module = lowered(module_text("scalar_loss_tail"), stage="kernels")
    shapes = _launch_shapes(module)
    reducing = [k for k, v in shapes.items() if "gpu.all_reduce" in v[2]]
    assert len(reducing) == 1 and len(shapes) == 1, shapes
    for op in module.body.operations:
        if op.operation.name == "gpu.module":
            assert _stores_outside_thread_zero(op.operation) == 0, str(op)
    assert "arith.subf" in "".join(shapes[k][2] for k in reducing)  # the tail joined


def test_parallel_stage_is_tiled_into_blocks_and_threads() -> None:
    module = lowered(module_text("elementwise_f64_odd"), stage="parallel", block_size=128)
    text = str(module)
    # 333 elements: an outer loop stepping by 128 over an inner 128-thread loop,
    # with the 384 - 333 out-of-range threads masked.
    assert re.search(r"scf\.parallel \(%\w+\) = \(%\w+\) to \(%\w+\) step \(%c128\w*\)", text)
    assert "arith.cmpi slt" in text and "scf.if" in text


def test_public_functions_take_host_memory() -> None:
    module = lowered(module_text("broadcast_bias"), stage="kernels")
    text = str(module)
    wrapper = text[text.index("func.func @broadcast_bias("):]
    wrapper = wrapper[: wrapper.index("\n  }\n")]
    assert "llvm.emit_c_interface" in wrapper
    assert wrapper.count("gpu.alloc async") == 3  # x, b and the out-parameter
    assert wrapper.count("gpu.memcpy async") == 3  # two in, one out
    assert wrapper.count("gpu.dealloc async") == 3
    assert "call @broadcast_bias_on_device" in wrapper
    assert "func.func private @broadcast_bias_on_device" in text


def test_nvvm_stage_has_nvvm_ops_in_gpu_modules() -> None:
    module = lowered(module_text("transpose"), stage="nvvm", chip="sm_90")
    gpu_modules = [str(op) for op in module.body.operations
                   if op.operation.name == "gpu.module"]
    assert gpu_modules
    for text in gpu_modules:
        assert '#nvvm.target<O = 3, chip = "sm_90">' in text
        assert "nvvm.kernel" in text and "nvvm.read.ptx.sreg.tid.x" in text


# -- semantics without a device: the pre-mapping program on the CPU ---------------------------


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_parallel_stage_matches_numpy_and_cpu_pipeline(name: str) -> None:
    global RNG
    text, make_args, ref = CORPUS[name]
    full = module_text(name)
    # Inputs of this case alone (not of the cases that ran before it in this worker):
    # the same numbers whatever the test order.
    RNG = np.random.default_rng(zlib.crc32(name.encode()))
    args = make_args()
    want = ref(*args)
    par = CompiledModule(full, pipeline=parallel_stage_on_cpu_pipeline())[name](*args)
    wants = want if isinstance(want, tuple) else (want,)
    pars = par if isinstance(par, tuple) else (par,)
    assert len(pars) == len(wants)
    for got, w in zip(pars, wants):
        _assert_close(got, w)
    if name in CPU_PIPELINE_GAPS:
        if CPU_PIPELINE_GAPS[name] == "error":
            with pytest.raises(ir.MLIRError):  # fails when the gap is fixed: drop the entry
                CompiledModule(full)
        if CPU_PIPELINE_GAPS[name] == "wrong":
            cpu = CompiledModule(full)[name](*args)
            with pytest.raises(AssertionError):  # fails when the gap is fixed: drop the entry
                _assert_close(cpu, want)
        return
    cpu = CompiledModule(full)[name](*args)
    cpus = cpu if isinstance(cpu, tuple) else (cpu,)
    for got, c in zip(pars, cpus):
        _assert_close(got, c)


#: Corpus functions `--autodiff-lower-to-cpu` does not compile yet ("error": a
#: diagnostic is expected; "abort": the CPU side is skipped) or gets wrong
#: ("wrong": its values differ from numpy's).
CPU_PIPELINE_GAPS: dict[str, str] = {}


def _assert_close(got, want) -> None:
    want = np.asarray(want)
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    tol = 1e-12 if want.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_parallel_stage_matches_numpy_on_a_larger_tiled_matmul() -> None:
    """Several blocks per dimension and partial edge tiles (70 x 45 outputs, 8x32 threads)."""
    text = """
func.func @mm(%a: tensor<70x33xf32>, %b: tensor<33x45xf32>) -> tensor<70x45xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<70x45xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<70x45xf32>) -> tensor<70x45xf32>
  %m = linalg.matmul ins(%a, %b : tensor<70x33xf32>, tensor<33x45xf32>)
      outs(%f : tensor<70x45xf32>) -> tensor<70x45xf32>
  return %m : tensor<70x45xf32>
}"""
    a, b = _any(70, 33), _any(33, 45)
    pipeline = parallel_stage_on_cpu_pipeline(block_size=64)
    got = CompiledModule(text, pipeline=pipeline)["mm"](a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)



# -- generated code: what the autodiff passes produce ------------------------------------------
#
# Each entry: MLIR with autodiff ops, the transform that removes them, the entry
# point, an argument factory and a reference (hand-derived numpy math; None when
# the only check is GPU parallel form == CPU pipeline, for bit-exact RNG code).
# The modules are parsed without the IRDL dialect (as test/python/ad_check.py
# does): MLIR 22's IRDL unifies the types of a variadic operand.

GENERATED: dict[str, tuple[str, str, str, object, object]] = {}

_MLP = r"""
#id2 = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (j)>
func.func @loss(%w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x4xf32>,
                %x: tensor<8x16xf32>, %y: tensor<8x4xf32>) -> f32 {
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x32xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>)
      outs(%f1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.generic {indexing_maps = [#id2, #row, #id2],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m1, %b1 : tensor<8x32xf32>, tensor<32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x4xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<8x4xf32>) -> tensor<8x4xf32>
  %o = linalg.matmul ins(%h, %w2 : tensor<8x32xf32>, tensor<32x4xf32>)
      outs(%f2 : tensor<8x4xf32>) -> tensor<8x4xf32>
  %sq = linalg.generic {indexing_maps = [#id2, #id2, #id2],
                        iterator_types = ["parallel", "parallel"]}
      ins(%o, %y : tensor<8x4xf32>, tensor<8x4xf32>) outs(%e2 : tensor<8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %d = arith.subf %a, %b : f32
    %q = arith.mulf %d, %d : f32
    linalg.yield %q : f32
  } -> tensor<8x4xf32>
  %e0 = tensor.empty() : tensor<f32>
  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s = linalg.reduce ins(%sq : tensor<8x4xf32>) outs(%f0 : tensor<f32>) dimensions = [0, 1]
    (%a: f32, %acc: f32) {
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }
  %l = tensor.extract %s[] : tensor<f32>
  return %l : f32
}
func.func @train_step(%w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x4xf32>,
                      %x: tensor<8x16xf32>, %y: tensor<8x4xf32>)
    -> (f32, tensor<16x32xf32>, tensor<32xf32>, tensor<32x4xf32>) {
  %one = arith.constant 1.0 : f32
  %l, %g1, %gb, %g2 = "autodiff.vjp"(%w1, %b1, %w2, %x, %y, %one)
      {fn = @loss, wrt = array<i64: 0, 1, 2>}
      : (tensor<16x32xf32>, tensor<32xf32>, tensor<32x4xf32>, tensor<8x16xf32>,
         tensor<8x4xf32>, f32)
      -> (f32, tensor<16x32xf32>, tensor<32xf32>, tensor<32x4xf32>)
  %lr = arith.constant 0.1 : f32
  %n1 = linalg.generic {indexing_maps = [#id2, #id2, #id2],
                        iterator_types = ["parallel", "parallel"]}
      ins(%w1, %g1 : tensor<16x32xf32>, tensor<16x32xf32>) outs(%w1 : tensor<16x32xf32>) {
  ^bb0(%a: f32, %g: f32, %o: f32):
    %u = arith.mulf %lr, %g : f32
    %v = arith.subf %a, %u : f32
    linalg.yield %v : f32
  } -> tensor<16x32xf32>
  %nb = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                         affine_map<(i) -> (i)>],
                        iterator_types = ["parallel"]}
      ins(%b1, %gb : tensor<32xf32>, tensor<32xf32>) outs(%b1 : tensor<32xf32>) {
  ^bb0(%a: f32, %g: f32, %o: f32):
    %u = arith.mulf %lr, %g : f32
    %v = arith.subf %a, %u : f32
    linalg.yield %v : f32
  } -> tensor<32xf32>
  %n2 = linalg.generic {indexing_maps = [#id2, #id2, #id2],
                        iterator_types = ["parallel", "parallel"]}
      ins(%w2, %g2 : tensor<32x4xf32>, tensor<32x4xf32>) outs(%w2 : tensor<32x4xf32>) {
  ^bb0(%a: f32, %g: f32, %o: f32):
    %u = arith.mulf %lr, %g : f32
    %v = arith.subf %a, %u : f32
    linalg.yield %v : f32
  } -> tensor<32x4xf32>
  return %l, %n1, %nb, %n2 : f32, tensor<16x32xf32>, tensor<32xf32>, tensor<32x4xf32>
}
"""


def _mlp_args():
    r = np.random.default_rng(1)
    return [(r.standard_normal(s) * sc).astype(np.float32)
            for s, sc in (((16, 32), .3), ((32,), .3), ((32, 4), .3), ((8, 16), 1), ((8, 4), 1))]


def _mlp_ref(w1, b1, w2, x, y):
    h = np.tanh(x @ w1 + b1)
    o = h @ w2
    d_o = 2 * (o - y)
    d_pre = (d_o @ w2.T) * (1 - h * h)
    return (np.float32(((o - y) ** 2).sum()), w1 - .1 * (x.T @ d_pre), b1 - .1 * d_pre.sum(0),
            w2 - .1 * (h.T @ d_o))


GENERATED["mlp_train_step"] = (_MLP, "autodiff-vjp", "train_step", _mlp_args, _mlp_ref)

_GMM = r"""
#x3 = affine_map<(n, k, d) -> (n, d)>
#mu3 = affine_map<(n, k, d) -> (k, d)>
#nk3 = affine_map<(n, k, d) -> (n, k)>
#nk = affine_map<(n, k) -> (n, k)>
#k2 = affine_map<(n, k) -> (k)>
#n2 = affine_map<(n, k) -> (n)>
func.func @gmm_nll(%mu: tensor<3x2xf64>, %logw: tensor<3xf64>, %x: tensor<10x2xf64>) -> f64 {
  %z = arith.constant 0.0 : f64
  %ninf = arith.constant 0xFFF0000000000000 : f64
  %half = arith.constant -0.5 : f64
  %enk = tensor.empty() : tensor<10x3xf64>
  %fnk = linalg.fill ins(%z : f64) outs(%enk : tensor<10x3xf64>) -> tensor<10x3xf64>
  %d2 = linalg.generic {indexing_maps = [#x3, #mu3, #nk3],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %mu : tensor<10x2xf64>, tensor<3x2xf64>) outs(%fnk : tensor<10x3xf64>) {
  ^bb0(%a: f64, %m: f64, %acc: f64):
    %df = arith.subf %a, %m : f64
    %sq = arith.mulf %df, %df : f64
    %s = arith.addf %acc, %sq : f64
    linalg.yield %s : f64
  } -> tensor<10x3xf64>
  %a = linalg.generic {indexing_maps = [#nk, #k2, #nk], iterator_types = ["parallel", "parallel"]}
      ins(%d2, %logw : tensor<10x3xf64>, tensor<3xf64>) outs(%enk : tensor<10x3xf64>) {
  ^bb0(%d: f64, %w: f64, %o: f64):
    %h = arith.mulf %d, %half : f64
    %r = arith.addf %h, %w : f64
    linalg.yield %r : f64
  } -> tensor<10x3xf64>
  %en = tensor.empty() : tensor<10xf64>
  %fm = linalg.fill ins(%ninf : f64) outs(%en : tensor<10xf64>) -> tensor<10xf64>
  %mx = linalg.reduce ins(%a : tensor<10x3xf64>) outs(%fm : tensor<10xf64>) dimensions = [1]
    (%v: f64, %acc: f64) {
      %m = arith.maximumf %v, %acc : f64
      linalg.yield %m : f64
    }
  %fs = linalg.fill ins(%z : f64) outs(%en : tensor<10xf64>) -> tensor<10xf64>
  %se = linalg.generic {indexing_maps = [#nk, #n2, #n2], iterator_types = ["parallel", "reduction"]}
      ins(%a, %mx : tensor<10x3xf64>, tensor<10xf64>) outs(%fs : tensor<10xf64>) {
  ^bb0(%v: f64, %m: f64, %acc: f64):
    %s = arith.subf %v, %m : f64
    %e = math.exp %s : f64
    %r = arith.addf %acc, %e : f64
    linalg.yield %r : f64
  } -> tensor<10xf64>
  %e0 = tensor.empty() : tensor<f64>
  %f0 = linalg.fill ins(%z : f64) outs(%e0 : tensor<f64>) -> tensor<f64>
  %ll = linalg.generic {indexing_maps = [affine_map<(n) -> (n)>, affine_map<(n) -> (n)>,
                                         affine_map<(n) -> ()>],
                        iterator_types = ["reduction"]}
      ins(%mx, %se : tensor<10xf64>, tensor<10xf64>) outs(%f0 : tensor<f64>) {
  ^bb0(%m: f64, %s: f64, %acc: f64):
    %l = math.log %s : f64
    %t = arith.addf %m, %l : f64
    %r = arith.addf %t, %acc : f64
    linalg.yield %r : f64
  } -> tensor<f64>
  %v = tensor.extract %ll[] : tensor<f64>
  %nv = arith.negf %v : f64
  return %nv : f64
}
func.func @gmm_grad(%mu: tensor<3x2xf64>, %logw: tensor<3xf64>, %x: tensor<10x2xf64>)
    -> (f64, tensor<3x2xf64>, tensor<3xf64>) {
  %one = arith.constant 1.0 : f64
  %l, %gmu, %gw = "autodiff.vjp"(%mu, %logw, %x, %one) {fn = @gmm_nll, wrt = array<i64: 0, 1>}
      : (tensor<3x2xf64>, tensor<3xf64>, tensor<10x2xf64>, f64)
      -> (f64, tensor<3x2xf64>, tensor<3xf64>)
  return %l, %gmu, %gw : f64, tensor<3x2xf64>, tensor<3xf64>
}
"""


def _gmm_args():
    r = np.random.default_rng(2)
    return [r.standard_normal((3, 2)), r.standard_normal(3), r.standard_normal((10, 2))]


def _gmm_ref(mu, logw, x):
    """-sum_n logsumexp_k(logw_k - |x_n - mu_k|^2 / 2) and its gradient (p: responsibilities)."""
    a = logw[None, :] - 0.5 * ((x[:, None, :] - mu[None]) ** 2).sum(-1)
    m = a.max(1, keepdims=True)
    lse = (m + np.log(np.exp(a - m).sum(1, keepdims=True)))[:, 0]
    p = np.exp(a - lse[:, None])
    return -lse.sum(), -(p[:, :, None] * (x[:, None, :] - mu[None])).sum(0), -p.sum(0)


GENERATED["gmm_gradient"] = (_GMM, "autodiff-vjp", "gmm_grad", _gmm_args, _gmm_ref)

_JVP = r"""
func.func @f(%x: tensor<8x4xf32>, %w: tensor<4x3xf32>) -> tensor<8x3xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x3xf32>) -> tensor<8x3xf32>
  %m = linalg.matmul ins(%x, %w : tensor<8x4xf32>, tensor<4x3xf32>)
      outs(%f : tensor<8x3xf32>) -> tensor<8x3xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i,j)->(i,j)>, affine_map<(i,j)->(i,j)>],
                       iterator_types = ["parallel","parallel"]}
      ins(%m : tensor<8x3xf32>) outs(%e : tensor<8x3xf32>) {
  ^bb0(%a: f32, %o: f32):
    %y = math.tanh %a : f32
    linalg.yield %y : f32
  } -> tensor<8x3xf32>
  return %t : tensor<8x3xf32>
}
func.func @df(%x: tensor<8x4xf32>, %w: tensor<4x3xf32>, %dx: tensor<8x4xf32>,
              %dw: tensor<4x3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>) {
  %y, %dy = "autodiff.jvp"(%x, %w, %dx, %dw) {fn = @f}
      : (tensor<8x4xf32>, tensor<4x3xf32>, tensor<8x4xf32>, tensor<4x3xf32>)
      -> (tensor<8x3xf32>, tensor<8x3xf32>)
  return %y, %dy : tensor<8x3xf32>, tensor<8x3xf32>
}
"""


def _jvp_args():
    r = np.random.default_rng(3)
    return [r.standard_normal(s).astype(np.float32) for s in ((8, 4), (4, 3), (8, 4), (4, 3))]


def _jvp_ref(x, w, dx, dw):
    y = np.tanh(x @ w)
    return y, (1 - y * y) * (dx @ w + x @ dw)


GENERATED["jvp_layer"] = (_JVP, "autodiff-jvp", "df", _jvp_args, _jvp_ref)

_RNG = r"""
func.func @noise(%seed: i64, %offset: i64, %x: tensor<37x5xf32>) -> tensor<37x5xf32> {
  %u = "autodiff.philox"(%seed, %offset) {distribution = "normal"} : (i64, i64) -> tensor<37x5xf32>
  %e = tensor.empty() : tensor<37x5xf32>
  %r = linalg.add ins(%x, %u : tensor<37x5xf32>, tensor<37x5xf32>)
      outs(%e : tensor<37x5xf32>) -> tensor<37x5xf32>
  return %r : tensor<37x5xf32>
}
"""

GENERATED["philox_noise"] = (_RNG, "autodiff-lower-rng", "noise",
                             lambda: [7, 3, _any(37, 5)], None)


def generated_text(name: str) -> str:
    """The module after its autodiff transform: plain upstream MLIR."""
    text, transform, *_ = GENERATED[name]
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, transform)
        return str(module)


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_code_reaches_fatbin(name: str, chip: str) -> None:
    module = lowered(generated_text(name), chip=chip, format="fatbin")
    objects = adgpu.gpu_objects(module)
    assert objects
    for obj in objects:
        assert [s for s, _ in adgpu.fatbin_cubins(obj.data)] == [int(chip[3:])]
        _check_cubin(adgpu.fatbin_cubins(obj.data)[0][1], int(chip[3:]))


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_code_parallel_stage_matches_reference(name: str) -> None:
    _, _, entry, make_args, ref = GENERATED[name]
    text = generated_text(name)
    args = make_args()
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())[entry](*args)
    gots = got if isinstance(got, tuple) else (got,)
    if ref is None:  # bit-exact against the CPU pipeline
        cpu = CompiledModule(text)[entry](*args)
        cpus = cpu if isinstance(cpu, tuple) else (cpu,)
        for g, c in zip(gots, cpus):
            np.testing.assert_array_equal(g, c)
        return
    wants = ref(*args)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        _assert_close(g, w)


def _kernels_per_call(module: ir.Module, entry: str) -> int:
    """Static gpu.launch_func count of `entry`'s device function and its callees."""
    bodies = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            text = str(op)
            bodies[ir.StringAttr(op.attributes["sym_name"]).value] = (
                text.count("gpu.launch_func"), re.findall(r"call @(\w+)\(", text))

    def count(name: str, seen: frozenset) -> int:
        n, calls = bodies[name]
        return n + sum(count(c, seen | {name}) for c in calls if c in bodies and c not in seen)

    return count(entry + "_on_device", frozenset())


# Before transforms/gpu/fusion.py: 12, 10 (max reductions count their tied maxima in
# reverse mode, jax's tie convention), 3 and 1.
@pytest.mark.parametrize("name, limit", [("mlp_train_step", 6), ("gmm_gradient", 5),
                                         ("jvp_layer", 1), ("philox_noise", 1)])
def test_generated_code_kernel_counts(name: str, limit: int) -> None:
    """Regression guard on fusion (counts as of this pipeline; see transforms/gpu/pipeline.py)."""
    module = lowered(generated_text(name), stage="kernels")
    assert 1 <= _kernels_per_call(module, GENERATED[name][2]) <= limit


def _gmm_row_text() -> tuple[str, tuple]:
    """The ADBench GMM gradient row of the benchmarks (d10 K25 n1000, f64), as traced."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import adbench_cases

    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    problem = adbench_cases._Gmm("gmm/1k/gmm_d10_K25.txt")
    inputs = problem.inputs(np.random.default_rng(0))
    grad = ad.grad(problem.objective(anp), argnums=(0, 1, 2))
    return ad.lower(grad, *inputs).as_text("autodiff"), inputs


# Launches per call of the benchmark rows (issue 22's target: 6 and 5). Before
# transforms/gpu/fusion.py: 36 and 39 (each allocation split the loops upstream fusion
# sees; every shape, and each row reduction's neighbours, was its own kernel). The MLP's
# four 64 x 64-tiled matmuls (transforms/gpu/contractions.py) take their fill and
# elementwise epilogue into their kernels but fuse with no neighbour: 22 and 23 before
# transforms/gpu/reduction_fusion.py (each block reduction its own kernel), 13 and 20
# before transforms/gpu/row_kernels.py (a row's dependent loops each a kernel), 10 and
# 10 until row fusion and row kernels bounded each thread's sequential work (fusion.py's
# ROW_WORK, row_kernels.py's PHASE_WORK): the logits' 512-step contraction no longer
# runs inside the softmax rows' threads, one more launch (on an H200 the step's kernels
# took 0.295 ms before, 0.289 after; the transformer's 33.6 ms, 5.3 after).
ROW_LAUNCHES = {"mlp_train_step_784_512_512_10": 11, "gmm_d10_K25_gradient": 10}


@pytest.mark.parametrize("row", sorted(ROW_LAUNCHES))
def test_benchmark_row_launch_counts(row: str) -> None:
    """Static gpu.launch_func count of the MLP training step (b128 784-512-512-10) and
    the ADBench GMM gradient, the rows whose launch counts issue 22 bounds; the GMM
    row's parallel stage also runs on the CPU against the CPU pipeline (the MLP's is
    test_mlp_parallel_stage_matches_numpy)."""
    if row.startswith("mlp"):
        text = _mlp_module_text(True)[0]
    else:
        text, inputs = _gmm_row_text()
    module = lowered(text, stage="kernels")
    assert 1 <= _kernels_per_call(module, "main") == ROW_LAUNCHES[row]
    if row.startswith("gmm"):
        got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(),
                             opt_level=0)["main"](*inputs)
        want = CompiledModule(text, opt_level=0)["main"](*inputs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


# -- elementwise fusion stays correct when a producer reads its init ---------------------------


def test_fusing_an_accumulating_producer_into_a_reduction_is_correct() -> None:
    """`d = acc + c` reads its init (how derivative code accumulates into a fill).
    `linalg-fuse-elementwise-ops` fuses it into the contraction consuming it and
    keeps the init as an extra output of the fused op, updated once per row of
    the contraction: without ElementwiseInitsToInputs, `d` grows with every row."""
    text = """
#id = affine_map<(i, j) -> (i, j)>
func.func @f(%c: tensor<8x6xf32>, %x: tensor<8x5xf32>) -> tensor<5x6xf32> {
  %one = arith.constant dense<1.0> : tensor<8x6xf32>
  %d = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : tensor<8x6xf32>) outs(%one : tensor<8x6xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  } -> tensor<8x6xf32>
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<5x6xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<5x6xf32>) -> tensor<5x6xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (k, i)>,
                                        affine_map<(i, j, k) -> (k, j)>,
                                        affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %d : tensor<8x5xf32>, tensor<8x6xf32>) outs(%f : tensor<5x6xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<5x6xf32>
  return %m : tensor<5x6xf32>
}"""
    c, x = _any(8, 6), _any(8, 5)
    m = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["f"](c, x)
    np.testing.assert_allclose(m, x.T @ (c + 1), rtol=1e-5, atol=1e-5)


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ("chip=foo", "unknown chip 'foo'"),
    ("chip=gfx90a", "unknown chip 'gfx90a'"),
    ("format=cubin", "option 'format' must be one of isa, bin, fatbin, llvm"),
    ("features=ptx80", "unknown features 'ptx80'"),
    ("opt-level=4", "opt-level must be between 0 and 3"),
    ("block-size=100", "block-size must be a power of two"),
    ("stage=ptx", "option 'stage' must be one of"),
])
def test_invalid_options_are_pipeline_errors(options: str, message: str) -> None:
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(module_text("transpose"))
        with pytest.raises(PipelineError, match=re.escape(message)):
            run_pipeline(module, f"autodiff-lower-to-gpu{{{options}}}")


def test_default_options_and_pipeline_text() -> None:
    p = LowerToGpu()
    assert (p.chip, p.features, p.format, p.opt_level, p.stage) == ("sm_80", "", "fatbin", 3,
                                                                    "binary")
    text = LowerToGpu(chip="sm_90", features="+ptx80", opt_level=2).pipeline_text()
    assert text == "autodiff-lower-to-gpu{chip=sm_90 features=+ptx80 opt-level=2}"


def test_autodiff_ops_are_rejected_with_a_diagnostic() -> None:
    text = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> { return %x : tensor<4xf32> }
func.func @g(%x: tensor<4xf32>, %t: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %y, %dy = "autodiff.jvp"(%x, %t) {fn = @f}
      : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %dy : tensor<4xf32>, tensor<4xf32>
}"""
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        with pytest.raises(ir.MLIRError) as info:
            run_pipeline(module, [LowerToGpu()])
    assert "'autodiff.jvp' must be removed by its transform pass" in str(info.value)


# -- runtime -----------------------------------------------------------------------------------


def test_missing_driver_raises_no_cuda_device() -> None:
    with pytest.raises(adgpu.NoCudaDevice, match=r"^no CUDA device: cannot load the CUDA driver "
                       r"libcuda-missing\.so\.0"):
        adgpu.CompiledGpuModule(module_text("transpose"), driver="libcuda-missing.so.0")
    assert issubclass(adgpu.NoCudaDevice, RuntimeError)


def test_not_a_driver_raises_no_cuda_device() -> None:
    libc = "libc.so.6"
    with pytest.raises(adgpu.NoCudaDevice, match=r"^no CUDA device: libc\.so\.6 is not a CUDA"):
        adgpu.cuda_device(libc)


def _device_or_skip() -> adgpu.CudaDevice:
    try:
        return adgpu.cuda_device()
    except adgpu.NoCudaDevice as err:
        pytest.skip(str(err))


def test_default_driver_reports_device_or_clear_error() -> None:
    """Here (no GPU) the default path must be the clean error, never a crash."""
    try:
        device = adgpu.cuda_device()
    except adgpu.NoCudaDevice as err:
        assert str(err).startswith("no CUDA device: ")
        with pytest.raises(adgpu.NoCudaDevice):
            adgpu.CompiledGpuModule(module_text("transpose"))
    else:
        assert device.count >= 1 and re.fullmatch(r"sm_\d+", device.chip)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_gpu_execution_matches_numpy(name: str) -> None:
    _device_or_skip()
    text, make_args, ref = CORPUS[name]
    cm = adgpu.CompiledGpuModule(module_text(name))
    args = make_args()
    want = ref(*args)
    got = cm[name](*args)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants):
        _assert_close(g, w)


# -- fusion across shapes (transforms/gpu/fusion.py) -------------------------------------------


def test_row_fusion_keeps_a_loop_reading_another_row_apart() -> None:
    """`z[i] = y[7 - i, 0]` reads rows that other iterations of the loop over `y`
    write: row fusion must not put the two loops in one loop over rows (each
    thread would read a row another thread has not written yet). The row softmax
    beside it (bias, max, shifted exp, sum over 4 columns) does fuse into one."""
    text = """
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
#col = affine_map<(i, j) -> (j)>
func.func @f(%x: tensor<8x4xf32>, %b: tensor<4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8x4xf32>
  %y = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<8x4xf32>, tensor<4xf32>) outs(%e : tensor<8x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  %e8 = tensor.empty() : tensor<8xf32>
  %z = linalg.generic {indexing_maps = [affine_map<(i) -> (7 - i, 0)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%y : tensor<8x4xf32>) outs(%e8 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %one = arith.constant 1.0 : f32
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %fm = linalg.fill ins(%ninf : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.reduce ins(%y : tensor<8x4xf32>) outs(%fm : tensor<8xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %r = arith.maximumf %a, %acc : f32
      linalg.yield %r : f32
    }
  %zero = arith.constant 0.0 : f32
  %fs = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %se = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%y, %m : tensor<8x4xf32>, tensor<8xf32>) outs(%fs : tensor<8xf32>) {
  ^bb0(%a: f32, %mm: f32, %acc: f32):
    %d = arith.subf %a, %mm : f32
    %ex = math.exp %d : f32
    %r = arith.addf %acc, %ex : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %z, %se : tensor<8xf32>, tensor<8xf32>
}"""
    x, b = _any(8, 4), _any(4)
    z, se = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())["f"](x, b)
    y = x + b
    np.testing.assert_allclose(z, y[::-1, 0] + 1, rtol=1e-6)
    np.testing.assert_allclose(se, np.exp(y - y.max(1, keepdims=True)).sum(1), rtol=1e-5)
    # y, max and exp-sum in one loop over rows; z, reading other rows, apart from
    # it: a second phase of one one-block row kernel (transforms/gpu/row_kernels.py),
    # after a barrier (two kernels before).
    module = lowered(text, stage="kernels")
    assert _kernels_per_call(module, "f") == 1 and "gpu.barrier" in str(module)
