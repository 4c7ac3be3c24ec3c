// Smoke test of --autodiff-lower-to-cpu through the driver: tensors in,
// LLVM dialect out, with C-interface wrappers for the ExecutionEngine.
//
// RUN: autodiff-opt %s --autodiff-lower-to-cpu | filecheck %s
// RUN: autodiff-opt %s --autodiff-lower-to-cpu | %mlir_opt | filecheck %s

/// Check that the function and its wrapper are LLVM functions and no tensor
/// or memref type is left.

// CHECK-NOT:   tensor<
// CHECK-NOT:   memref<
// CHECK-LABEL: llvm.func @scale(
// CHECK:         llvm.fmul
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_scale(
// CHECK:         llvm.call @scale(
func.func @scale(%x: tensor<4xf32>, %s: f32) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %out: f32):
    %m = arith.mulf %a, %s : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
