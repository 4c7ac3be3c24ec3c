// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-lower-rng

/// Check that a philox draw needs a static shape.

func.func @dynamic(%s: i64, %o: i64) -> tensor<?xf32> {
  // expected-error@+1 {{autodiff-lower-rng: 'autodiff.philox' has a non-static result shape tensor<?xf32>}}
  %r = "autodiff.philox"(%s, %o) {distribution = "uniform"} : (i64, i64) -> tensor<?xf32>
  return %r : tensor<?xf32>
}

// -----

/// Check that the element type must fit the distribution.

func.func @normal_ints(%s: i64, %o: i64) -> tensor<4xi32> {
  // expected-error@+1 {{autodiff-lower-rng: 'normal' draws need a float element type (f16, bf16, f32, f64), got i32}}
  %r = "autodiff.philox"(%s, %o) {distribution = "normal"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

func.func @bits_index(%s: i64, %o: i64) -> tensor<4xindex> {
  // expected-error@+1 {{autodiff-lower-rng: 'bits' draws need an integer element type, got index}}
  %r = "autodiff.philox"(%s, %o) {distribution = "bits"} : (i64, i64) -> tensor<4xindex>
  return %r : tensor<4xindex>
}

// -----

/// Check that distribution parameters are validated.

func.func @negative_std(%s: i64, %o: i64) -> tensor<4xf32> {
  // expected-error@+1 {{autodiff-lower-rng: normal draw needs a finite mean and std >= 0, got mean=0.0, std=-1.0}}
  %r = "autodiff.philox"(%s, %o) {distribution = "normal", std = -1.0} : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @bad_stream(%s: i64, %o: i64) -> tensor<4xi32> {
  // expected-error@+1 {{autodiff-lower-rng: attribute 'stream' must be an integer, got "x"}}
  %r = "autodiff.philox"(%s, %o) {distribution = "bits", stream = "x"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

/// Check that a non-float distribution parameter is rejected when the IR is read.
func.func @bad_low(%s: i64, %o: i64) -> tensor<4xf32> {
  // expected-error@+1 {{'autodiff.philox' op attribute 'low': expected base attribute 'builtin.float' but got 'builtin.string'}}
  %r = "autodiff.philox"(%s, %o) {distribution = "uniform", low = "zero"} : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
