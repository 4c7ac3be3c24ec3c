// RUN: autodiff-run %s --entry grad_clip --arg 0.5 --arg 5.0 | filecheck %s --check-prefix=CLIP
// RUN: autodiff-run %s --entry grad_k --arg 1.0 --arg 3.0 | filecheck %s --check-prefix=K
// RUN: autodiff-run %s --entry jvp_h --arg 0.5 --arg 2.0 | filecheck %s --check-prefix=H
// RUN: autodiff-run %s --entry second --arg 2.0 --arg 1.0 | filecheck %s --check-prefix=SECOND

/// Check that the custom VJP's clipped cotangent is what reverse mode returns:
/// the true derivative of sin at 0.5 times 5 would be 4.39, the rule gives 1.
// CLIP: result[0]: f64 = 0.479425538604
// CLIP: result[1]: f64 = 1
func.func @clip(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @clip_fwd, bwd = @clip_bwd}} {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @clip_fwd(%x: f64) -> (f64, f64) {
  %0 = math.sin %x : f64
  return %0, %x : f64, f64
}
func.func @clip_bwd(%x: f64, %c: f64) -> f64 {
  %lo = arith.constant -1.0 : f64
  %hi = arith.constant 1.0 : f64
  %0 = arith.maximumf %c, %lo : f64
  %1 = arith.minimumf %0, %hi : f64
  return %1 : f64
}
func.func @grad_clip(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @clip} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

/// Check that reverse mode of a custom_jvp-only function transposes the rule:
/// the rule says d exp = 0.5 t (deliberately wrong), so the cotangent is 0.5 * 3.
// K: result[0]: f64 = 2.71828182846
// K: result[1]: f64 = 1.5
func.func @k(%x: f64) -> f64 attributes {autodiff.custom_jvp = @k_rule} {
  %0 = math.exp %x : f64
  return %0 : f64
}
func.func @k_rule(%x: f64, %t: f64) -> (f64, f64) {
  %h = arith.constant 0.5 : f64
  %0 = math.exp %x : f64
  %1 = arith.mulf %t, %h : f64
  return %0, %1 : f64, f64
}
func.func @grad_k(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @k} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

/// Check that forward mode of a custom_vjp-only function is the primal body's:
/// cos(0.5) * 2 (the bwd rule, which returns the cotangent unchanged, is unused).
// H: result[1]: f64 = 1.75516512378
func.func @h(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @h_fwd, bwd = @h_bwd}} {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @h_fwd(%x: f64) -> (f64, f64) {
  %0 = math.sin %x : f64
  return %0, %x : f64, f64
}
func.func @h_bwd(%x: f64, %c: f64) -> f64 {
  return %c : f64
}
func.func @jvp_h(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @h} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

/// Check that second order differentiates the rule: the bwd rule says
/// d(x^2) = 3 x (deliberately wrong), so the second derivative is 3, not 2;
/// the first result is the first derivative by the rule, 3 * 2 = 6.
// SECOND: result[0]: f64 = 6
// SECOND: result[1]: f64 = 3
func.func @p(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @p_fwd, bwd = @p_bwd}} {
  %0 = arith.mulf %x, %x : f64
  return %0 : f64
}
func.func @p_fwd(%x: f64) -> (f64, f64) {
  %0 = arith.mulf %x, %x : f64
  return %0, %x : f64, f64
}
func.func @p_bwd(%x: f64, %c: f64) -> f64 {
  %three = arith.constant 3.0 : f64
  %0 = arith.mulf %c, %x : f64
  %1 = arith.mulf %0, %three : f64
  return %1 : f64
}
func.func @dp(%x: f64) -> f64 {
  %one = arith.constant 1.0 : f64
  %0:2 = "autodiff.vjp"(%x, %one) {fn = @p} : (f64, f64) -> (f64, f64)
  return %0#1 : f64
}
func.func @second(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @dp} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
