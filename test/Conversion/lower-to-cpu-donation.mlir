// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s

// Donation: a tensor argument marked `bufferization.writable = true` may be
// overwritten. A result that bufferization places in its buffer leaves the
// native signature (no out-parameter); `autodiff.result_args` tells the
// runtime which argument each result is (-1: an out-parameter).

/// Check that an elementwise update materialized into a donated argument is
/// computed in its buffer: the C interface takes `%w` and `%g` only.
// CHECK-LABEL: llvm.func @sgd(
// CHECK-SAME:    autodiff.donated_args = array<i64: 0>
// CHECK-SAME:    autodiff.result_args = array<i64: 0>
// CHECK-NOT:     llvm.call @malloc
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_sgd(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-SAME:    attributes
func.func @sgd(%w: tensor<64xf32> {bufferization.writable = true},
               %g: tensor<64xf32> {bufferization.writable = false}) -> tensor<64xf32> {
  %lr = arith.constant dense<0.1> : tensor<64xf32>
  %step = arith.mulf %lr, %g : tensor<64xf32>
  %new = arith.subf %w, %step : tensor<64xf32>
  %r = bufferization.materialize_in_destination %new in %w
      : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// -----

/// Check that a large update, tiled and vectorized before bufferization, is
/// still computed in the donated buffer (no temporary, no out-parameter).
// CHECK-LABEL: llvm.func @sgd_tiled(
// CHECK-SAME:    autodiff.result_args = array<i64: 0>
// CHECK-NOT:     llvm.call @malloc
// CHECK:         llvm.fmul %{{.*}} : vector<
// CHECK-NOT:     llvm.call @malloc
// CHECK:         llvm.return
func.func @sgd_tiled(%w: tensor<256x256xf32> {bufferization.writable = true},
                     %g: tensor<256x256xf32> {bufferization.writable = false})
    -> tensor<256x256xf32> {
  %lr = arith.constant dense<0.1> : tensor<256x256xf32>
  %step = arith.mulf %lr, %g : tensor<256x256xf32>
  %new = arith.subf %w, %step : tensor<256x256xf32>
  %r = bufferization.materialize_in_destination %new in %w
      : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  return %r : tensor<256x256xf32>
}

// -----

/// Check that a matmul still reading the donated argument is computed in a
/// temporary (malloc) and then stored into the argument, whose buffer the
/// result still is; the second result stays an out-parameter.
// CHECK-LABEL: llvm.func @square(
// CHECK-SAME:    autodiff.result_args = array<i64: 0, -1>
// CHECK:         llvm.call @malloc
// CHECK-LABEL: llvm.func @_mlir_ciface_square(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @square(%w: tensor<3x3xf64> {bufferization.writable = true})
    -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3x3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3x3xf64>) -> tensor<3x3xf64>
  %p = linalg.matmul ins(%w, %w : tensor<3x3xf64>, tensor<3x3xf64>)
                     outs(%f : tensor<3x3xf64>) -> tensor<3x3xf64>
  %twice = arith.addf %p, %p : tensor<3x3xf64>
  %r = bufferization.materialize_in_destination %p in %w
      : (tensor<3x3xf64>, tensor<3x3xf64>) -> tensor<3x3xf64>
  return %r, %twice : tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that without donation nothing changes: the result is an out-parameter.
// CHECK-LABEL: llvm.func @plain(
// CHECK-NOT:     autodiff.result_args
// CHECK-LABEL: llvm.func @_mlir_ciface_plain(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @plain(%w: tensor<64xf32> {bufferization.writable = false},
                 %g: tensor<64xf32> {bufferization.writable = false}) -> tensor<64xf32> {
  %new = arith.subf %w, %g : tensor<64xf32>
  return %new : tensor<64xf32>
}
