// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s

// The performance schedules of --autodiff-lower-to-cpu (transforms/cpu/):
// large static linalg ops are tiled and vectorized; small ones keep the
// scalar loops. Numerical results are checked in test/python/test_cpu_schedules.py.

/// Check that a large f32 matmul becomes a register tile of vector FMAs,
/// each k step one broadcast of A times a row of B (rows of 16 f32 on AVX2
/// hosts, 32 on AVX-512 hosts: the JIT targets the host CPU).
// CHECK-LABEL: llvm.func @matmul(
// CHECK:         llvm.intr.fmuladd({{.*}}) : (vector<[[N:16|32]]xf32>, vector<[[N]]xf32>, vector<[[N]]xf32>) -> vector<[[N]]xf32>
// CHECK-LABEL: llvm.func @_mlir_ciface_matmul(
func.func @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %m : tensor<64x64xf32>
}

// -----

/// Check that a large f32 exp is vectorized with the polynomial
/// approximation (no per-element libm call or LLVM exp intrinsic) and that
/// its result is computed in the caller's buffer (no temporary, no copy).
// CHECK-LABEL: llvm.func @exp_f32(
// CHECK-NOT:     llvm.call @malloc
// CHECK-NOT:     llvm.intr.exp
// CHECK:         llvm.intr.fma({{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// CHECK-NOT:     llvm.intr.exp
// CHECK-NOT:     llvm.call @malloc
// CHECK-NOT:     memcpy
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_exp_f32(
func.func @exp_f32(%x: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %r = math.exp %x : tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}

// -----

/// Check that f64 exp is vectorized around LLVM's exp (libm accuracy, no approximation).
// CHECK-LABEL: llvm.func @exp_f64(
// CHECK:         llvm.intr.exp(%{{.*}}) : (vector<8xf64>) -> vector<8xf64>
func.func @exp_f64(%x: tensor<8192xf64>) -> tensor<8192xf64> {
  %r = math.exp %x : tensor<8192xf64>
  return %r : tensor<8192xf64>
}

// -----

/// Check that a small op keeps the scalar loops and libm's exp.
// CHECK-LABEL: llvm.func @small(
// CHECK-NOT:     vector<
// CHECK:         llvm.intr.exp(%{{.*}}) : (f32) -> f32
// CHECK-NOT:     vector<
// CHECK-LABEL: llvm.func @_mlir_ciface_small(
func.func @small(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = math.exp %x : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

/// Check that a row sum keeps 64 partial sums per row in a vector (four
/// AVX-512 registers: four independent add chains) and reduces them once
/// per row (reassociated, as numpy's pairwise sum also is).
// CHECK-LABEL: llvm.func @row_sum(
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} : vector<64xf32>
// CHECK:         "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f32, vector<64xf32>) -> f32
func.func @row_sum(%x: tensor<128x256xf32>) -> tensor<128xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128xf32>) -> tensor<128xf32>
  %r = linalg.reduce ins(%x : tensor<128x256xf32>) outs(%f : tensor<128xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<128xf32>
}
