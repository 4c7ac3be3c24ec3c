// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-vjp

/// Check that a vjp of an unknown function is diagnosed at the op.
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-vjp: 'autodiff.vjp' refers to an unknown function @nope}}
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @nope} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a wrt index out of range is diagnosed.
func.func @f(%x: f64) -> f64 {
  return %x : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-vjp: wrt index 3 is out of range: @f has 1 parameters}}
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f, wrt = array<i64: 3>} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that the cotangents must have the callee's result types.
func.func @f(%x: tensor<2xf64>) -> tensor<2xf64> {
  return %x : tensor<2xf64>
}
func.func @caller(%x: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<2xf64>, tensor<2xf64>) {
  // expected-error @+1 {{autodiff-vjp: operands (primals and output cotangents of @f) #0 has type tensor<3xf64>, expected tensor<2xf64>}}
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<2xf64>, tensor<2xf64>)
  return %0#0, %0#1 : tensor<2xf64>, tensor<2xf64>
}

// -----

/// Check that the result count is outputs plus one cotangent per wrt input.
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @caller(%x: f64, %y: f64, %c: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-vjp: expected 3 results (outputs and cotangents of @f), got 2}}
  %0:2 = "autodiff.vjp"(%x, %y, %c) {fn = @f} : (f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that an op without a reverse rule (linalg.softmax has none yet) fails
/// with a diagnostic at the op.
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  %e = tensor.empty() : tensor<3xf64>
  // expected-error @+1 {{autodiff-vjp: no reverse rule for 'linalg.softmax'}}
  %0 = linalg.softmax dimension(0) ins(%x : tensor<3xf64>) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @caller(%x: tensor<3xf64>, %t: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %t) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that an indexing expression mixing two loop dims (a convolution's
/// i + j, not yet supported in reverse mode) is rejected with a diagnostic
/// naming it instead of a wrong gradient.
func.func @conv(%x: tensor<5xf64>, %k: tensor<3xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  // expected-error @+1 {{autodiff-vjp: reverse mode of 'linalg.generic' does not support the indexing expression 'd0 + d1'}}
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i + j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x, %k : tensor<5xf64>, tensor<3xf64>) outs(%f : tensor<3xf64>) {
  ^bb0(%a: f64, %w: f64, %acc: f64):
    %m = arith.mulf %a, %w : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  } -> tensor<3xf64>
  return %r : tensor<3xf64>
}
func.func @caller(%x: tensor<5xf64>, %k: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<3xf64>, tensor<5xf64>) {
  %0:2 = "autodiff.vjp"(%x, %k, %c) {fn = @conv, wrt = array<i64: 0>} : (tensor<5xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<5xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<5xf64>
}

// -----

/// Check that reverse mode of scf.while carrying a dynamically shaped tensor
/// (its tape rows would have no static size) is diagnosed.
func.func @wh(%x: tensor<?xf64>) -> tensor<?xf64> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  // expected-error @+1 {{autodiff-vjp: reverse mode of 'scf.while' needs statically shaped carried tensors}}
  %r:2 = scf.while (%h = %x, %i = %c0) : (tensor<?xf64>, i32) -> (tensor<?xf64>, i32) {
    %go = arith.cmpi slt, %i, %c4 : i32
    scf.condition(%go) %h, %i : tensor<?xf64>, i32
  } do {
  ^bb0(%h2: tensor<?xf64>, %i2: i32):
    %s = math.sin %h2 : tensor<?xf64>
    %n = arith.addi %i2, %c1 : i32
    scf.yield %s, %n : tensor<?xf64>, i32
  }
  return %r#0 : tensor<?xf64>
}
func.func @caller(%x: tensor<?xf64>, %c: tensor<?xf64>) -> (tensor<?xf64>, tensor<?xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @wh} : (tensor<?xf64>, tensor<?xf64>) -> (tensor<?xf64>, tensor<?xf64>)
  return %0#0, %0#1 : tensor<?xf64>, tensor<?xf64>
}

// -----

/// Check that a reduction body reading its accumulator twice is rejected
/// by reverse mode with a diagnostic, not differentiated wrongly.
func.func @racc(%x: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  // expected-error @+1 {{autodiff-vjp: unsupported reduction in 'linalg.generic'}}
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<3x3xf64>) outs(%f : tensor<3xf64>) {
  ^bb0(%a: f64, %acc: f64):
    %m = arith.mulf %a, %acc : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  } -> tensor<3xf64>
  %e2 = tensor.empty() : tensor<3x3xf64>
  %b = linalg.broadcast ins(%r : tensor<3xf64>) outs(%e2 : tensor<3x3xf64>) dimensions = [1]
  return %b : tensor<3x3xf64>
}
func.func @caller(%x: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @racc} : (tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that wrt may not name a non-float parameter.
func.func @f(%x: f64, %n: i32) -> f64 {
  return %x : f64
}
func.func @caller(%x: f64, %n: i32, %c: f64) -> (f64, i32) {
  // expected-error @+1 {{autodiff-vjp: wrt index 1 refers to a parameter of non-float type i32}}
  %0:2 = "autodiff.vjp"(%x, %n, %c) {fn = @f, wrt = array<i64: 1>} : (f64, i32, f64) -> (f64, i32)
  return %0#0, %0#1 : f64, i32
}
