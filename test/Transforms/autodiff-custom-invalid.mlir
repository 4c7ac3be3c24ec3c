// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-jvp --autodiff-vjp

/// Check that a custom_jvp rule of the wrong type is diagnosed at the primal
/// function (the rule must map (primals, tangents) to (results, tangents)).
// expected-error @+1 {{autodiff-jvp: autodiff.custom_jvp of @f: @f_rule has type (f64, f64) -> f64, expected (f64, f64) -> (f64, f64) (primals, tangents) -> (results, tangents)}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_jvp = @f_rule} {
  return %x : f64
}
func.func @f_rule(%x: f64, %t: f64) -> f64 {
  return %t : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a custom_jvp naming an unknown function is diagnosed.
// expected-error @+1 {{autodiff-jvp: autodiff.custom_jvp of @f refers to an unknown function @nope}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_jvp = @nope} {
  return %x : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a custom_jvp that is not a symbol reference is diagnosed.
// expected-error @+1 {{autodiff-jvp: autodiff.custom_jvp of @f must name a function (@rule), got "f_rule"}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_jvp = "f_rule"} {
  return %x : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a custom_vjp without bwd is diagnosed at the primal function.
// expected-error @+1 {{autodiff-vjp: autodiff.custom_vjp of @f must be {fwd = @..., bwd = @...}}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @f}} {
  return %x : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a fwd rule whose leading results are not the function's
/// results is diagnosed.
// expected-error @+1 {{autodiff-vjp: autodiff.custom_vjp of @f: @f_fwd has type (f64) -> f32, expected (f64) -> (f64) followed by residuals}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}} {
  return %x : f64
}
func.func @f_fwd(%x: f64) -> f32 {
  %0 = arith.truncf %x : f64 to f32
  return %0 : f32
}
func.func @f_bwd(%c: f64) -> f64 {
  return %c : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a bwd rule that does not return one cotangent per parameter is
/// diagnosed, also when @f is only reached through a call.
// expected-error @+1 {{autodiff-vjp: autodiff.custom_vjp of @f: @f_bwd has type (f64, f64) -> f64, expected (f64, f64) -> (f64, f64) (residuals, result cotangents) -> one cotangent per parameter}}
func.func @f(%x: f64, %y: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}} {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @f_fwd(%x: f64, %y: f64) -> (f64, f64) {
  %0 = arith.mulf %x, %y : f64
  return %0, %x : f64, f64
}
func.func @f_bwd(%x: f64, %c: f64) -> f64 {
  return %c : f64
}
func.func @g(%x: f64) -> f64 {
  %0 = call @f(%x, %x) : (f64, f64) -> f64
  return %0 : f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @g} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a rule that is only a declaration is diagnosed.
// expected-error @+1 {{autodiff-vjp: autodiff.custom_vjp of @f: @f_bwd must have a body of one block}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}} {
  return %x : f64
}
func.func @f_fwd(%x: f64) -> f64 {
  return %x : f64
}
func.func private @f_bwd(%c: f64) -> f64
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that reverse mode through a custom_jvp rule of the wrong type is
/// diagnosed by the vjp pass too.
// expected-error @+1 {{autodiff-vjp: autodiff.custom_jvp of @f: @f_rule has type (f64) -> (f64, f64), expected (f64, f64) -> (f64, f64) (primals, tangents) -> (results, tangents)}}
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_jvp = @f_rule} {
  return %x : f64
}
func.func @f_rule(%x: f64) -> (f64, f64) {
  return %x, %x : f64, f64
}
func.func @caller(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
