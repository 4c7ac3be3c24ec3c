// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-vjp

/// Check that an unknown checkpoint policy is diagnosed at the checkpoint.
func.func @g(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @f(%x: f64) -> f64 {
  // expected-error @+1 {{autodiff-vjp: unknown checkpoint policy 'save_some' (expected one of nothing_saveable, everything_saveable, dots_saveable, save_only_these_names)}}
  %0 = "autodiff.checkpoint"(%x) {fn = @g, policy = "save_some"} : (f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that save_only_these_names without the names is diagnosed.
func.func @g(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @f(%x: f64) -> f64 {
  // expected-error @+1 {{autodiff-vjp: checkpoint policy 'save_only_these_names' needs a 'names' attribute (an array of strings)}}
  %0 = "autodiff.checkpoint"(%x) {fn = @g, policy = "save_only_these_names"} : (f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that names that are not strings are diagnosed.
func.func @g(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @f(%x: f64) -> f64 {
  // expected-error @+1 {{autodiff-vjp: checkpoint 'names' must be an array of strings}}
  %0 = "autodiff.checkpoint"(%x) {fn = @g, policy = "save_only_these_names", names = [1]} : (f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a checkpoint of an unknown function is diagnosed at the checkpoint.
func.func @f(%x: f64) -> f64 {
  // expected-error @+1 {{autodiff-vjp: 'autodiff.checkpoint' refers to an unknown function @nope}}
  %0 = "autodiff.checkpoint"(%x) {fn = @nope} : (f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a checkpoint whose operands do not match the callee is diagnosed.
func.func @g(%x: f32) -> f32 {
  return %x : f32
}
func.func @f(%x: f64) -> f64 {
  // expected-error @+1 {{autodiff-vjp: operands (arguments of @g) #0 has type f64, expected f32}}
  %0 = "autodiff.checkpoint"(%x) {fn = @g} : (f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
