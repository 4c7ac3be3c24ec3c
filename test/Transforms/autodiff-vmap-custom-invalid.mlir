// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-vmap

/// Check that a custom_vmap that names no function is diagnosed at the primal.
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f must name a function (@rule) or an array of functions, got "f_vmap"}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = "f_vmap"} {
  return %x : tensor<3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a custom_vmap naming an unknown function is diagnosed.
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f refers to an unknown function @nope}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = [@nope]} {
  return %x : tensor<3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a rule without its axes attributes is diagnosed.
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f: @f_vmap needs the attributes autodiff.in_axes and autodiff.out_axes (array<i64>, -1 for an unbatched value)}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  return %x : tensor<3xf64>
}
func.func @f_vmap(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  return %xs : tensor<4x3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that in_axes needs one entry per argument of the primal.
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f: @f_vmap has autodiff.in_axes = array<i64: 0, 0> with 2 entries for the 1 arguments of the primal function}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  return %x : tensor<3xf64>
}
func.func @f_vmap(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> attributes {autodiff.in_axes = array<i64: 0, 0>, autodiff.out_axes = array<i64: 0>} {
  return %xs : tensor<4x3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a rule that batches no argument is diagnosed (its batch size is unknown).
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f: @f_vmap batches no argument (every autodiff.in_axes entry is -1)}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  return %x : tensor<3xf64>
}
func.func @f_vmap(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.in_axes = array<i64: -1>, autodiff.out_axes = array<i64: -1>} {
  return %x : tensor<3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a rule whose type does not fit its axes is diagnosed with the
/// expected signature (here the result lacks the batch dimension).
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f: @f_vmap has type (tensor<4x3xf64>) -> tensor<3xf64>, expected (tensor<4x3xf64>) -> (tensor<4x3xf64>) for autodiff.in_axes = array<i64: 0> and autodiff.out_axes = array<i64: 0> at batch size 4}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  return %x : tensor<3xf64>
}
func.func @f_vmap(%xs: tensor<4x3xf64>) -> tensor<3xf64> attributes {autodiff.in_axes = array<i64: 0>, autodiff.out_axes = array<i64: 0>} {
  %c = arith.constant dense<0.0> : tensor<3xf64>
  return %c : tensor<3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that an axis out of range is diagnosed.
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vmap of @f: @f_vmap has autodiff.out_axes[0] = 2, out of range for type tensor<3xf64>}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  return %x : tensor<3xf64>
}
func.func @f_vmap(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> attributes {autodiff.in_axes = array<i64: 0>, autodiff.out_axes = array<i64: 2>} {
  return %xs : tensor<4x3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a call whose batched argument no rule of its batch size takes
/// batched is diagnosed, naming the rules and the signature expected.
// expected-error @+1 {{autodiff-vmap: no autodiff.custom_vmap rule of @f takes its arguments batched as (b, b) at batch size 4: @f_vmap has autodiff.in_axes = array<i64: 0, -1>; expected a rule taking (tensor<4x3xf64>, tensor<4x3xf64>) with autodiff.in_axes = array<i64: 0, 0> (a rule may batch an unbatched argument, not the converse)}}
func.func @f(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @f_vmap} {
  %0 = arith.mulf %x, %w : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @f_vmap(%xs: tensor<4x3xf64>, %w: tensor<3xf64>) -> tensor<4x3xf64> attributes {autodiff.in_axes = array<i64: 0, -1>, autodiff.out_axes = array<i64: 0>} {
  return %xs : tensor<4x3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>, %ws: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs, %ws) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>, tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a custom_vjp with a bad rule signature is diagnosed at the primal
/// when vmap batches its rules (bwd must give one cotangent per argument).
// expected-error @+1 {{autodiff-vmap: autodiff.custom_vjp of @f: @f_bwd has type (tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>), expected (tensor<3xf64>) -> (tensor<3xf64>) (residuals, result cotangents) -> one cotangent per parameter}}
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}} {
  return %x : tensor<3xf64>
}
func.func @f_fwd(%x: tensor<3xf64>) -> tensor<3xf64> {
  return %x : tensor<3xf64>
}
func.func @f_bwd(%c: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  return %c, %c : tensor<3xf64>, tensor<3xf64>
}
func.func @caller(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}

// -----

/// Check that a custom_jvp rule giving a per-lane tangent for a result the
/// primal computes from unbatched arguments only is diagnosed (the batched
/// function returns that result once, with one tangent).
// expected-error @+1 {{autodiff-vmap: autodiff.custom_jvp rule @f_jvp of @f gives a per-lane tangent of result 0, which @f computes from unbatched arguments only; cannot batch it}}
func.func @f(%x: f64, %w: f64) -> f64 attributes {autodiff.custom_jvp = @f_jvp} {
  return %w : f64
}
func.func @f_jvp(%x: f64, %w: f64, %tx: f64, %tw: f64) -> (f64, f64) {
  %0 = arith.addf %tx, %tw : f64
  return %w, %0 : f64, f64
}
func.func @caller(%xs: tensor<4xf64>, %w: f64) -> tensor<4xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4xf64>, f64) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
