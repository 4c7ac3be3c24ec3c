// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-functionalize-rng

/// Check that a draw with a non-static shape is rejected: its block count
/// must be known to place the draws after it.

func.func @dynamic_shape() -> tensor<?xf32> {
  // expected-error@+1 {{autodiff-functionalize-rng: 'autodiff.random' has a non-static result shape tensor<?xf32>}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<?xf32>
  return %r : tensor<?xf32>
}

// -----

/// Check that a draw in a recursive function is rejected.

func.func @self_recursive(%n: i1) -> tensor<4xf32> {
  // expected-error@+1 {{autodiff-functionalize-rng: random draw reached through recursion ('@self_recursive' calls itself)}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = scf.if %n -> tensor<4xf32> {
    %c = arith.constant false
    %z = func.call @self_recursive(%c) : (i1) -> tensor<4xf32>
    scf.yield %z : tensor<4xf32>
  } else {
    scf.yield %r : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

/// Check that mutual recursion is caught in every function of the cycle, at
/// the first op that draws (a draw or a call to a function that draws).

func.func @ping() -> tensor<4xf32> {
  // expected-error@+1 {{random draw reached through recursion ('@ping' calls itself)}}
  %r = func.call @pong() : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

func.func @pong() -> tensor<4xf32> {
  // expected-error@+1 {{random draw reached through recursion ('@pong' calls itself)}}
  %r = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %s = func.call @ping() : () -> tensor<4xf32>
  %t = arith.addf %r, %s : tensor<4xf32>
  return %t : tensor<4xf32>
}

// -----

/// Check that a draw inside scf.while (no static trip structure) is rejected.

func.func @in_while(%x: i32) {
  %r = scf.while (%i = %x) : (i32) -> i32 {
    %c10 = arith.constant 10 : i32
    %go = arith.cmpi slt, %i, %c10 : i32
    scf.condition(%go) %i : i32
  } do {
  ^bb0(%i: i32):
    // expected-error@+1 {{autodiff-functionalize-rng: random draw inside 'scf.while' is not supported}}
    %d = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
    %c1 = arith.constant 1 : i32
    %n = arith.addi %i, %c1 : i32
    scf.yield %n : i32
  }
  return
}

// -----

/// Check that a call to a drawing function inside scf.parallel is rejected.

func.func private @draw() -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

func.func @in_parallel(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    // expected-error@+1 {{random draw inside 'scf.parallel' is not supported}}
    %r = func.call @draw() : () -> tensor<4xf32>
    scf.reduce
  }
  return
}

// -----

/// Check that a draw in a function with unstructured control flow is rejected.

func.func @multi_block(%c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^a, ^b
^a:
  // expected-error@+1 {{random draw in '@multi_block', a function with several blocks (unstructured control flow) is not supported}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
^b:
  %z = arith.constant dense<0.0> : tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

/// Check that the distribution and the element type must agree.

func.func @bits_of_floats() -> tensor<4xf32> {
  // expected-error@+1 {{autodiff-functionalize-rng: 'bits' draws need an integer element type, got f32}}
  %r = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @uniform_ints() -> tensor<4xi32> {
  // expected-error@+1 {{autodiff-functionalize-rng: 'uniform' draws need a float element type (f16, bf16, f32, f64), got i32}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

/// Check that distribution parameters are validated.

func.func @empty_interval() -> tensor<4xf32> {
  // expected-error@+1 {{uniform draw needs finite low < high, got [2.0, 1.0)}}
  %r = "autodiff.random"() {distribution = "uniform", low = 2.0, high = 1.0} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @wrong_param() -> tensor<4xf32> {
  // expected-error@+1 {{attribute 'mean' does not apply to 'uniform' draws}}
  %r = "autodiff.random"() {distribution = "uniform", mean = 2.0} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that other symbol uses of a drawing function (here a custom rule
/// attribute) are rejected: the function's signature is about to change.

func.func private @noisy_fwd(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %x, %r : tensor<4xf32>, tensor<4xf32>
}

func.func private @noisy_bwd(%r: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  return %ct : tensor<4xf32>
}

// expected-error@+1 {{'@noisy_fwd' draws random numbers and gains RNG state arguments, but 'func.func' refers to it (attribute 'autodiff.custom_vjp') other than by a call}}
func.func @custom(%x: tensor<4xf32>) -> tensor<4xf32>
    attributes {autodiff.custom_vjp = {fwd = @noisy_fwd, bwd = @noisy_bwd}} {
  return %x : tensor<4xf32>
}

// -----

/// Check that `autodiff.rng_key` must name a tensor<2xi64> argument.

// expected-error@+1 {{autodiff-functionalize-rng: 'autodiff.rng_key' of '@bad_key_type' must be the index of a tensor<2xi64> argument (the key [seed, offset]), got 0 : i64}}
func.func @bad_key_type(%k: tensor<2xi32>) -> tensor<4xf32> attributes {autodiff.rng_key = 0 : i64} {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// expected-error@+1 {{'autodiff.rng_key' of '@bad_key_index' must be the index of a tensor<2xi64> argument (the key [seed, offset]), got 1 : i64}}
func.func @bad_key_index(%k: tensor<2xi64>) -> tensor<4xf32> attributes {autodiff.rng_key = 1 : i64} {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that `autodiff.rng_pins` must name a key-rooted function.

func.func private @not_keyed(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @bad_pin(%x: tensor<4xf32>) -> tensor<2xi64> {
  // expected-error@+1 {{autodiff-functionalize-rng: 'autodiff.rng_pins' must be on a tensor<2xi64> draw and name functions marked 'autodiff.rng_key', got @not_keyed}}
  %k = "autodiff.random"() {distribution = "bits", autodiff.rng_pins = @not_keyed} : () -> tensor<2xi64>
  return %k : tensor<2xi64>
}
