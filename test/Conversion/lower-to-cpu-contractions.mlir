// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s

// Contractions written as linalg.generic (what vmap and reverse mode emit:
// unit dims, batch dims, transposed or swapped operands) get the matmul
// schedule of transforms/cpu/schedules.py: a register tile of vector FMAs,
// each k step one broadcast scalar times a row of the operand whose
// innermost dim is C's. Lanes follow the host (16 f32 on AVX2, 32 on
// AVX-512; f64 half). Numerical results: test/python/test_cpu_contraction.py.

/// Check that a batched vector-matrix product with a unit dim (vmap of
/// `x @ w` over rows of x) is computed as a matmul without the unit dim:
/// vector FMAs, and the result written straight into the caller's buffer.
// CHECK-LABEL: llvm.func @vmap_matvec(
// CHECK-NOT:     llvm.call @malloc
// CHECK:         llvm.intr.fmuladd({{.*}}) : (vector<[[N:16|32]]xf32>, vector<[[N]]xf32>, vector<[[N]]xf32>) -> vector<[[N]]xf32>
// CHECK-NOT:     llvm.call @malloc
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_vmap_matvec(
#a = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @vmap_matvec(%x: tensor<64x1x256xf32>, %w: tensor<256x128xf32>) -> tensor<64x1x128xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x1x128xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<64x1x128xf32>) -> tensor<64x1x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<64x1x256xf32>, tensor<256x128xf32>) outs(%z : tensor<64x1x128xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x1x128xf32>
  return %r : tensor<64x1x128xf32>
}

// -----

/// Check that `x^T @ g` written as a generic (the weight gradient of
/// reverse mode, lhs read transposed) is vectorized into FMAs.
// CHECK-LABEL: llvm.func @xt_g(
// CHECK:         llvm.intr.fmuladd({{.*}}) : (vector<[[N:16|32]]xf32>, vector<[[N]]xf32>, vector<[[N]]xf32>) -> vector<[[N]]xf32>
// CHECK-LABEL: llvm.func @_mlir_ciface_xt_g(
#at = affine_map<(d0, d1, d2) -> (d2, d0)>
#bt = affine_map<(d0, d1, d2) -> (d2, d1)>
#ct = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @xt_g(%x: tensor<128x256xf32>, %g: tensor<128x64xf32>) -> tensor<256x64xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x64xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<256x64xf32>) -> tensor<256x64xf32>
  %r = linalg.generic {indexing_maps = [#at, #bt, #ct],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %g : tensor<128x256xf32>, tensor<128x64xf32>) outs(%z : tensor<256x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<256x64xf32>
  return %r : tensor<256x64xf32>
}

// -----

/// Check that GMM's batched `Q[k] @ xc[k, n]^T` in f64 (C's innermost dim
/// strided in Q) transposes Q first and then runs f64 vector FMAs, with
/// register rows no wider than whole registers (10 columns: 5-wide vectors
/// on AVX-512, 2-wide on AVX2).
// CHECK-LABEL: llvm.func @gmm_q_xc(
// CHECK:         llvm.intr.fmuladd({{.*}}) : (vector<[[N:2|5|10]]xf64>, vector<[[N]]xf64>, vector<[[N]]xf64>) -> vector<[[N]]xf64>
// CHECK-LABEL: llvm.func @_mlir_ciface_gmm_q_xc(
#q = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#xc = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @gmm_q_xc(%qm: tensor<25x10x10xf64>, %x: tensor<25x1000x10xf64>) -> tensor<25x1000x10xf64> {
  %cst = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<25x1000x10xf64>
  %z = linalg.fill ins(%cst : f64) outs(%e : tensor<25x1000x10xf64>) -> tensor<25x1000x10xf64>
  %r = linalg.generic {indexing_maps = [#q, #xc, #o],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%qm, %x : tensor<25x10x10xf64>, tensor<25x1000x10xf64>) outs(%z : tensor<25x1000x10xf64>) {
  ^bb0(%p: f64, %v: f64, %acc: f64):
    %m = arith.mulf %p, %v : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  } -> tensor<25x1000x10xf64>
  return %r : tensor<25x1000x10xf64>
}

// -----

/// Check that an outer product (a batch_matmul with K = 1: per-sample
/// weight gradients) fuses with its consumer into one elementwise loop
/// nest: no temporary for the product, no second pass over the result.
// CHECK-LABEL: llvm.func @outer_product_plus(
// CHECK-NOT:     llvm.call @malloc
// CHECK-NOT:     memcpy
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_outer_product_plus(
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#w = affine_map<(d0, d1, d2) -> (d1, d2)>
func.func @outer_product_plus(%a: tensor<64x256x1xf32>, %b: tensor<64x1x128xf32>,
                              %w: tensor<256x128xf32>) -> tensor<64x256x128xf32> {
  %z = arith.constant dense<0.0> : tensor<64x256x128xf32>
  %p = linalg.batch_matmul ins(%a, %b : tensor<64x256x1xf32>, tensor<64x1x128xf32>)
                           outs(%z : tensor<64x256x128xf32>) -> tensor<64x256x128xf32>
  %e = tensor.empty() : tensor<64x256x128xf32>
  %r = linalg.generic {indexing_maps = [#id, #w, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p, %w : tensor<64x256x128xf32>, tensor<256x128xf32>) outs(%e : tensor<64x256x128xf32>) {
  ^bb0(%u: f32, %v: f32, %o: f32):
    %s = arith.addf %u, %v : f32
    linalg.yield %s : f32
  } -> tensor<64x256x128xf32>
  return %r : tensor<64x256x128xf32>
}
