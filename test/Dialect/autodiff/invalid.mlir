// Malformed autodiff ops are rejected by the verifier the dialect's IRDL
// definition generates, with the same message in our driver and in stock
// upstream mlir-opt (which loads that IRDL file).
//
// RUN: autodiff-opt --split-input-file --verify-diagnostics %s
// RUN: %mlir_opt --irdl-file=%irdl --split-input-file --verify-diagnostics %s
//
// Without the expectations both tools fail on this file.
// RUN: %not autodiff-opt --split-input-file %s > /dev/null 2>&1
// RUN: %not %mlir_opt --irdl-file=%irdl --split-input-file %s > /dev/null 2>&1

/// Check that philox needs both its seed and its offset operand.

func.func @philox_one_operand(%seed: i64) -> tensor<4xf32> {
  // expected-error @+1 {{op expects exactly 2 operands, but got 1}}
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that stop_gradient takes exactly one operand.

func.func @stop_gradient_two_operands(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{op expects exactly 1 operands, but got 2}}
  %y = "autodiff.stop_gradient"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

/// Check that philox must produce its tensor.

func.func @philox_no_result(%seed: i64) {
  // expected-error @+1 {{op expects exactly 1 results, but got 0}}
  "autodiff.philox"(%seed, %seed) {distribution = "uniform"} : (i64, i64) -> ()
  return
}

// -----

/// Check that jvp names the function it differentiates.

func.func @jvp_without_fn(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{'autodiff.jvp' op attribute "fn" is expected but not provided}}
  %y, %dy = "autodiff.jvp"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %dy : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that vjp names its function even when `wrt` is given.

func.func @vjp_without_fn(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'autodiff.vjp' op attribute "fn" is expected but not provided}}
  %y = "autodiff.vjp"(%x, %x) {wrt = array<i64: 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

/// Check that vmap requires its input axes.

func.func @vmap_without_in_axes(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'autodiff.vmap' op attribute "in_axes" is expected but not provided}}
  %y = "autodiff.vmap"(%x)
      {fn = @vmap_without_in_axes, out_axes = array<i64: 0>, randomness = "error"}
      : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that random requires its distribution.

func.func @random_without_distribution() -> tensor<4xf32> {
  // expected-error @+1 {{'autodiff.random' op attribute "distribution" is expected but not provided}}
  %r = "autodiff.random"() : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that vmap's randomness is one of "error", "different", "same".

func.func @vmap_bad_randomness(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'"bad"' does not satisfy the constraint}}
  %y = "autodiff.vmap"(%x)
      {fn = @vmap_bad_randomness, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "bad"}
      : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that random only knows the uniform, normal and bits distributions.

func.func @random_gamma() -> tensor<4xf32> {
  // expected-error @+1 {{'"gamma"' does not satisfy the constraint}}
  %r = "autodiff.random"() {distribution = "gamma"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that philox only knows the uniform, normal and bits distributions.

func.func @philox_gamma(%seed: i64) -> tensor<4xf32> {
  // expected-error @+1 {{'"gamma"' does not satisfy the constraint}}
  %r = "autodiff.philox"(%seed, %seed) {distribution = "gamma"} : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that in_axes is a dense i64 array, not an array attribute.

func.func @vmap_in_axes_array_attr(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{expected base attribute 'builtin.dense_array' but got 'builtin.array'}}
  %y = "autodiff.vmap"(%x)
      {fn = @vmap_in_axes_array_attr, in_axes = [0], out_axes = array<i64: 0>, randomness = "error"}
      : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

/// Check that a transform's fn is a symbol reference, not a string or an integer.

func.func @checkpoint_fn_string(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected base attribute 'builtin.symbol_ref' but got 'builtin.string'}}
  %y = "autodiff.checkpoint"(%x) {fn = "checkpoint_fn_string"} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @jvp_fn_integer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected base attribute 'builtin.symbol_ref' but got 'builtin.integer'}}
  %y = "autodiff.jvp"(%x) {fn = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

/// Check that philox's seed is an i64, not a float.

func.func @philox_f32_seed(%seed: f32, %offset: i64) -> tensor<4xf32> {
  // expected-error @+1 {{expected 'i64' but got 'f32'}}
  %r = "autodiff.philox"(%seed, %offset) {distribution = "uniform"} : (f32, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that philox's offset is an i64 too.

func.func @philox_i32_offset(%seed: i64, %offset: i32) -> tensor<4xf32> {
  // expected-error @+1 {{expected 'i64' but got 'i32'}}
  %r = "autodiff.philox"(%seed, %offset) {distribution = "uniform"} : (i64, i32) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that stop_gradient cannot change the type of its operand.

func.func @stop_gradient_type_change(%x: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+1 {{expected 'tensor<4xf32>' but got 'tensor<4xf64>'}}
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}

// -----

/// Check that random returns a tensor, not a scalar.

func.func @random_scalar() -> f32 {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.f32'}}
  %r = "autodiff.random"() {distribution = "normal"} : () -> f32
  return %r : f32
}

// -----

/// Check that philox returns a tensor, not a memref.

func.func @philox_memref(%seed: i64) -> memref<4xf32> {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %r = "autodiff.philox"(%seed, %seed) {distribution = "uniform"} : (i64, i64) -> memref<4xf32>
  return %r : memref<4xf32>
}

// -----

/// Check that the dialect has no ops beyond the ones it defines.

func.func @unknown_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unregistered operation 'autodiff.grad' found in dialect ('autodiff')}}
  %y = "autodiff.grad"(%x) {fn = @unknown_op} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
