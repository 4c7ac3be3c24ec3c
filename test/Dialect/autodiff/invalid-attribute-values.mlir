// Attributes of the right kind but the wrong element type: the passes read
// `in_axes`, `out_axes` and `wrt` as i64s, so the verifier (run by the driver
// right after parsing, before any pass) rejects every other dense array,
// naming the op and the attribute. (Stock IRDL only checks the base kind.)
//
// RUN: autodiff-opt --split-input-file --verify-diagnostics %s
// RUN: autodiff-opt --split-input-file --verify-diagnostics --autodiff-vmap %s
// RUN: autodiff-opt --split-input-file --verify-diagnostics --autodiff-lower-rng %s
// RUN: autodiff-opt --split-input-file --verify-diagnostics '--autodiff-lower-to-gpu=stage=parallel' %s
// RUN: autodiff-opt --split-input-file --verify-diagnostics --autodiff-vjp %s

/// Check that in_axes of another integer width is rejected.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @in_i32(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'autodiff.vmap' op attribute 'in_axes': expected an array<i64: ...> but got 'array<i32: 0>'}}
  %y = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i32: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that float out_axes are rejected.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @out_f32(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'autodiff.vmap' op attribute 'out_axes': expected an array<i64: ...> but got 'array<f32: 2.000000e+00>'}}
  %y = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<f32: 2.0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that an array the bindings cannot read (i0 elements) is rejected, not a crash.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @in_i0(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'autodiff.vmap' op attribute 'in_axes': unsupported attribute value 'array<i0: 0>'}}
  %y = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i0: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that vjp's optional wrt of booleans is rejected.
func.func @g(%x: f32) -> f32 {
  return %x : f32
}
func.func @wrt_i1(%x: f32, %ct: f32) -> (f32, f32) {
  // expected-error @+1 {{'autodiff.vjp' op attribute 'wrt': expected an array<i64: ...> but got 'array<i1: true>'}}
  %y:2 = "autodiff.vjp"(%x, %ct) {fn = @g, wrt = array<i1: true>} : (f32, f32) -> (f32, f32)
  return %y#0, %y#1 : f32, f32
}
