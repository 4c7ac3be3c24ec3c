// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | %not grep '"autodiff\.'

/// Check that reverse mode of a function holding an autodiff.vmap lowers the vmap first (grad of
/// vmap): --autodiff-vjp alone differentiates the batched function.
// CHECK-LABEL: func.func @grad_of_vmap(
// CHECK: call @g_fwd(
// CHECK: call @g_bwd(
// CHECK-NOT: autodiff.vmap
// CHECK-LABEL: func.func private @f_batched_4_b(
// CHECK-SAME: %{{.*}}: tensor<4x3xf64>) -> tensor<4xf64>
func.func @f(%x: tensor<3xf64>) -> tensor<f64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %a = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%x : tensor<3xf64>) outs(%a : tensor<f64>) dimensions = [0]
    (%v: f64, %acc: f64) {
      %m = arith.mulf %v, %v : f64
      %r = arith.addf %m, %acc : f64
      linalg.yield %r : f64
    }
  return %s : tensor<f64>
}
func.func @g(%xs: tensor<4x3xf64>) -> tensor<4xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @grad_of_vmap(%xs: tensor<4x3xf64>, %ct: tensor<4xf64>) -> tensor<4x3xf64> {
  %0:2 = "autodiff.vjp"(%xs, %ct) {fn = @g} : (tensor<4x3xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4x3xf64>)
  return %0#1 : tensor<4x3xf64>
}

// -----

/// Check that forward mode of a function holding an autodiff.vmap lowers the vmap first (jvp of
/// vmap) and differentiates the batched function.
// CHECK-LABEL: func.func @jvp_of_vmap(
// CHECK: call @g_jvp(
// CHECK-LABEL: func.func private @g_jvp(
// CHECK: call @f_batched_4_b_jvp(
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = math.sin %x : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @g(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
func.func @jvp_of_vmap(%xs: tensor<4x3xf64>, %t: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0:2 = "autodiff.jvp"(%xs, %t) {fn = @g} : (tensor<4x3xf64>, tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<4x3xf64>)
  return %0#1 : tensor<4x3xf64>
}
