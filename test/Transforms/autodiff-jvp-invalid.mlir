// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-jvp

/// Check that a jvp of an unknown function is diagnosed at the op.
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-jvp: 'autodiff.jvp' refers to an unknown function @nope}}
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @nope} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that the operand count must be twice the callee's parameter count.
func.func @f(%x: f64) -> f64 {
  return %x : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-jvp: expected 2 operands (primals and tangents of @f), got 3}}
  %0:2 = "autodiff.jvp"(%x, %t, %t) {fn = @f} : (f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that primal and tangent types must match the callee's parameters.
func.func @f(%x: f64) -> f64 {
  return %x : f64
}
func.func @caller(%x: f32, %t: f32) -> (f64, f64) {
  // expected-error @+1 {{autodiff-jvp: operands (primals and tangents of @f) #0 has type f32, expected f64}}
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f32, f32) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that the result types must be the callee's results, twice.
func.func @f(%x: f64) -> f64 {
  return %x : f64
}
func.func @caller(%x: f64, %t: f64) -> f64 {
  // expected-error @+1 {{autodiff-jvp: expected 2 results (outputs and output tangents of @f), got 1}}
  %0 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f64) -> f64
  return %0 : f64
}

// -----

/// Check that an op without a forward rule (linalg.softmax has none yet) fails
/// with a diagnostic at the op.
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  %e = tensor.empty() : tensor<3xf64>
  // expected-error @+1 {{autodiff-jvp: no forward rule for 'linalg.softmax'}}
  %0 = linalg.softmax dimension(0) ins(%x : tensor<3xf64>) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @caller(%x: tensor<3xf64>, %t: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that a function without a body cannot be differentiated.
func.func private @decl(f64) -> f64
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  // expected-error @+1 {{autodiff-jvp: cannot differentiate @decl: it is only a declaration}}
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @decl} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that tangent types must equal the primal types.
func.func @f(%x: f64) -> f64 {
  return %x : f64
}
func.func @caller(%x: f64, %t: f32) -> (f64, f64) {
  // expected-error @+1 {{autodiff-jvp: operands (primals and tangents of @f) #1 has type f32, expected f64}}
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f32) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
