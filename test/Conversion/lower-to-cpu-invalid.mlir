// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-lower-to-cpu

/// Check that a dynamically shaped result is rejected: the caller allocates
/// results, so their shapes must be known before the call.
// expected-error @+1 {{autodiff-lower-to-cpu: result type tensor<?xf32> has a dynamic shape; results must have static shapes (the caller allocates them)}}
func.func @dynamic_result(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

/// Check that an unranked result is rejected.
// expected-error @+1 {{autodiff-lower-to-cpu: unranked result type tensor<*xf32>}}
func.func @unranked_result(%x: tensor<*xf32>) -> tensor<*xf32> {
  return %x : tensor<*xf32>
}

// -----

/// Check that an autodiff op left in the module is reported at the op: its
/// transform pass must run before the lowering.
func.func private @square(%x: f32) -> f32 {
  %y = arith.mulf %x, %x : f32
  return %y : f32
}

func.func @main(%x: f32, %t: f32) -> (f32, f32) {
  // expected-error @+1 {{autodiff-lower-to-cpu: 'autodiff.jvp' must be removed by its transform pass before lowering}}
  %r:2 = "autodiff.jvp"(%x, %t) {fn = @square} : (f32, f32) -> (f32, f32)
  return %r#0, %r#1 : f32, f32
}
