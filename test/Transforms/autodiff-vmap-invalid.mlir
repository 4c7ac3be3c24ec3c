// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --autodiff-vmap

/// Check that a vmap of an unknown function is diagnosed at the op.
func.func @caller(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{autodiff-vmap: 'autodiff.vmap' refers to an unknown function @nope}}
  %0 = "autodiff.vmap"(%x) {fn = @nope, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that in_axes needs one entry per operand.
func.func @f(%x: f32) -> f32 {
  return %x : f32
}
func.func @caller(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{autodiff-vmap: in_axes has 2 entries for 1 operands}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that out_axes needs one entry per result.
func.func @f(%x: f32) -> f32 {
  return %x : f32
}
func.func @caller(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{autodiff-vmap: out_axes has 0 entries for 1 results}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that batched operands must agree on the batch size.
func.func @f(%x: f32, %y: f32) -> f32 {
  %0 = arith.addf %x, %y : f32
  return %0 : f32
}
func.func @caller(%x: tensor<8xf32>, %y: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{autodiff-vmap: inconsistent batch sizes: operand 1 has 4 at axis 0, an earlier operand has 8}}
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>, tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that an in_axes entry past the operand's rank is diagnosed.
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}
func.func @caller(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  // expected-error @+1 {{autodiff-vmap: in_axes[0] = 2 is out of range for operand 0 of type tensor<8x3xf32>}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 2>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that a vmap needs at least one batched operand (the batch size comes from it).
func.func @f(%x: f32) -> f32 {
  return %x : f32
}
func.func @caller(%x: f32) -> f32 {
  // expected-error @+1 {{autodiff-vmap: 'autodiff.vmap' needs at least one batched operand (every in_axes entry is -1)}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: -1>, out_axes = array<i64: -1>, randomness = "error"} : (f32) -> f32
  return %0 : f32
}

// -----

/// Check that out_axes -1 on a result that depends on a batched operand is an error (JAX:
/// "vmap has mapped output but out_axes is None").
func.func @f(%x: f32) -> f32 {
  %0 = math.exp %x : f32
  return %0 : f32
}
func.func @caller(%x: tensor<8xf32>) -> f32 {
  // expected-error @+1 {{autodiff-vmap: out_axes[0] = -1 (not batched), but result 0 of @f depends on a batched operand}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: -1>, randomness = "error"} : (tensor<8xf32>) -> f32
  return %0 : f32
}

// -----

/// Check that a random op under vmap with randomness = "error" is diagnosed at the random op.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{autodiff-vmap: random op 'autodiff.random' under vmap with randomness = "error" is not supported}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @caller(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that randomness = "different" on a stateful draw asks for RNG functionalization first.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{autodiff-vmap: random op 'autodiff.random' under vmap with randomness = "different" is not supported yet (run --autodiff-functionalize-rng before --autodiff-vmap)}}
  %r = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @caller(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "different"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that scf.for with a batched trip count is diagnosed at the loop.
func.func @f(%n: index, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{autodiff-vmap: cannot batch 'scf.for' with batched bounds or step (use scf.while)}}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x) -> (f32) {
    %b = math.sin %a : f32
    scf.yield %b : f32
  }
  return %r : f32
}
func.func @caller(%n: tensor<8xindex>, %x: f32) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%n, %x) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xindex>, f32) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that the op's result types must be the callee's with the batch dimension inserted.
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}
func.func @caller(%x: tensor<8x3xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{autodiff-vmap: result 0 has type tensor<3x8xf32>, expected tensor<8x3xf32>}}
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

/// Check that a function that is only a declaration cannot be batched.
func.func private @ext(%x: f32) -> f32
func.func @caller(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{autodiff-vmap: cannot batch @ext: it is only a declaration}}
  %0 = "autodiff.vmap"(%x) {fn = @ext, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that a recursive function is diagnosed at the recursive call instead of looping.
func.func @f(%x: f32) -> f32 {
  // expected-error @+1 {{autodiff-vmap: cannot batch the recursive function @f}}
  %0 = func.call @f(%x) : (f32) -> f32
  return %0 : f32
}
func.func @caller(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that an op without a batching rule is named in the error.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{autodiff-vmap: no batching rule for 'test.unknown'}}
  %0 = "test.unknown"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @caller(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that insert_slice at a batched size (each lane's slice of another shape) is refused at
/// the op; batched offsets alone are batched (a loop over the lanes).
func.func @f(%s: tensor<?xf32>, %d: tensor<4xf32>, %n: index) -> tensor<4xf32> {
  // expected-error @+1 {{autodiff-vmap: cannot batch 'tensor.insert_slice' with batched sizes or strides}}
  %0 = tensor.insert_slice %s into %d[0] [%n] [1] : tensor<?xf32> into tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @caller(%s: tensor<?xf32>, %d: tensor<4xf32>, %n: tensor<8xindex>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%s, %d, %n) {fn = @f, in_axes = array<i64: -1, -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<?xf32>, tensor<4xf32>, tensor<8xindex>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
