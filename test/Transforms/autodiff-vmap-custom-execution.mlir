// RUN: autodiff-run %s --entry grad_ste --arg '[[0.4, 1.6, -2.2], [3.5, 0.1, -0.7]]' --arg '[[1, 2, 3], [4, 5, 6]]' | filecheck %s --check-prefix=STE
// RUN: autodiff-run %s --entry grad_w --arg '[[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]' --arg 1.5 | filecheck %s --check-prefix=SHARED
// RUN: autodiff-run %s --entry outer --arg '[[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]' --arg '[1, 10, 100]' | filecheck %s --check-prefix=NESTED

/// Check that grad of vmap of a straight-through estimator (round, identity
/// gradient) returns the cotangent itself: the body's derivative would be 0.
// STE: result[0]: tensor<2x3xf64> = {{\[\[}}0, 2, -2], [4, 0, -1]]
// STE: result[1]: tensor<2x3xf64> = {{\[\[}}1, 2, 3], [4, 5, 6]]
func.func @ste(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vjp = {fwd = @ste_fwd, bwd = @ste_bwd}} {
  %0 = math.roundeven %x : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @ste_fwd(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = math.roundeven %x : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @ste_bwd(%c: tensor<3xf64>) -> tensor<3xf64> {
  return %c : tensor<3xf64>
}
func.func @g(%xs: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @ste, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x3xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
func.func @grad_ste(%xs: tensor<2x3xf64>, %ct: tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>) {
  %0:2 = "autodiff.vjp"(%xs, %ct) {fn = @g} : (tensor<2x3xf64>, tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
  return %0#0, %0#1 : tensor<2x3xf64>, tensor<2x3xf64>
}

/// Check the cotangent of a result that does not depend on the batched
/// argument (w * w, broadcast by the vmap): with loss = sum(x * w) + sum over
/// the 4 lanes of w * w, d/dw = sum(x) + 2 * 4 * w = 66 + 12 = 78 (the lanes
/// share the cotangent; handing each lane the whole total would give 114).
// SHARED: result[0]: f64 = 78
func.func @f(%x: tensor<3xf64>, %w: f64) -> (tensor<3xf64>, f64) attributes {autodiff.custom_vjp = {fwd = @f_fwd, bwd = @f_bwd}} {
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%w : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %0 = arith.mulf %x, %f : tensor<3xf64>
  %w2 = arith.mulf %w, %w : f64
  return %0, %w2 : tensor<3xf64>, f64
}
func.func @f_fwd(%x: tensor<3xf64>, %w: f64) -> (tensor<3xf64>, f64, tensor<3xf64>, f64) {
  %0:2 = call @f(%x, %w) : (tensor<3xf64>, f64) -> (tensor<3xf64>, f64)
  return %0#0, %0#1, %x, %w : tensor<3xf64>, f64, tensor<3xf64>, f64
}
func.func @f_bwd(%x: tensor<3xf64>, %w: f64, %c: tensor<3xf64>, %cw: f64) -> (tensor<3xf64>, f64) {
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%w : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %gx = arith.mulf %c, %f : tensor<3xf64>
  %0 = arith.mulf %c, %x : tensor<3xf64>
  %z = arith.constant 0.0 : f64
  %ez = tensor.empty() : tensor<f64>
  %a = linalg.fill ins(%z : f64) outs(%ez : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%0 : tensor<3xf64>) outs(%a : tensor<f64>) dimensions = [0]
    (%v: f64, %acc: f64) {
      %r = arith.addf %v, %acc : f64
      linalg.yield %r : f64
    }
  %sv = tensor.extract %s[] : tensor<f64>
  %two = arith.constant 2.0 : f64
  %t = arith.mulf %two, %w : f64
  %tw = arith.mulf %t, %cw : f64
  %gw = arith.addf %sv, %tw : f64
  return %gx, %gw : tensor<3xf64>, f64
}
func.func @gw(%xs: tensor<4x3xf64>, %w: f64) -> (tensor<4x3xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vmap"(%xs, %w) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0, 0>, randomness = "error"} : (tensor<4x3xf64>, f64) -> (tensor<4x3xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4x3xf64>, tensor<4xf64>
}
func.func @loss(%xs: tensor<4x3xf64>, %w: f64) -> f64 {
  %0:2 = call @gw(%xs, %w) : (tensor<4x3xf64>, f64) -> (tensor<4x3xf64>, tensor<4xf64>)
  %z = arith.constant 0.0 : f64
  %ez = tensor.empty() : tensor<f64>
  %a = linalg.fill ins(%z : f64) outs(%ez : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%0#0 : tensor<4x3xf64>) outs(%a : tensor<f64>) dimensions = [0, 1]
    (%v: f64, %acc: f64) {
      %r = arith.addf %v, %acc : f64
      linalg.yield %r : f64
    }
  %t = linalg.reduce ins(%0#1 : tensor<4xf64>) outs(%s : tensor<f64>) dimensions = [0]
    (%v: f64, %acc: f64) {
      %r = arith.addf %v, %acc : f64
      linalg.yield %r : f64
    }
  %v = tensor.extract %t[] : tensor<f64>
  return %v : f64
}
func.func @grad_w(%xs: tensor<4x3xf64>, %w: f64) -> f64 {
  %one = arith.constant 1.0 : f64
  %0:3 = "autodiff.vjp"(%xs, %w, %one) {fn = @loss} : (tensor<4x3xf64>, f64, f64) -> (f64, tensor<4x3xf64>, f64)
  return %0#2 : f64
}

/// Check nested vmaps with a custom_vmap rule written for batch size 2: the
/// inner level calls the rule, the outer level batches the rule's code.
// NESTED: result[0]: tensor<2x2x3xf64> = {{\[\[\[}}1, 20, 300], [4, 50, 600]], {{\[\[}}7, 80, 900], [10, 110, 1200]]]
func.func @m(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @m_vmap} {
  %0 = arith.mulf %x, %w : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @m_vmap(%xs: tensor<3x2xf64>, %w: tensor<3xf64>) -> tensor<2x3xf64> attributes {autodiff.in_axes = array<i64: 1, -1>, autodiff.out_axes = array<i64: 0>} {
  %e = tensor.empty() : tensor<2x3xf64>
  %t = linalg.transpose ins(%xs : tensor<3x2xf64>) outs(%e : tensor<2x3xf64>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<2x3xf64>
  %b = linalg.broadcast ins(%w : tensor<3xf64>) outs(%e2 : tensor<2x3xf64>) dimensions = [0]
  %0 = arith.mulf %t, %b : tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
func.func @inner(%xs: tensor<2x3xf64>, %w: tensor<3xf64>) -> tensor<2x3xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @m, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
func.func @outer(%xss: tensor<2x2x3xf64>, %w: tensor<3xf64>) -> tensor<2x2x3xf64> {
  %0 = "autodiff.vmap"(%xss, %w) {fn = @inner, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x2x3xf64>, tensor<3xf64>) -> tensor<2x2x3xf64>
  return %0 : tensor<2x2x3xf64>
}
