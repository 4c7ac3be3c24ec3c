// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that reverse mode of a function with autodiff.custom_vjp calls its
/// fwd and bwd rules (here a clipped gradient: bwd ignores the primal body),
/// and that nothing of the primal body is differentiated.
// CHECK-LABEL: func.func @grad_clip(
// CHECK: %[[F:.*]]:2 = call @clip_fwd(%[[X:.*]]) : (f64) -> (f64, f64)
// CHECK: %[[B:.*]] = call @clip_bwd(%[[F]]#1, %{{.*}}) : (f64, f64) -> f64
// CHECK: return %[[F]]#0, %[[B]]
// CHECK-NOT: @clip_jvp
// CHECK-NOT: func.func private @clip_fwd_1
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

// -----

/// Check that the custom VJP is used when the function is reached through a
/// call inside the differentiated function (the caller's fwd calls the rule's
/// fwd, the caller's bwd the rule's bwd).
// CHECK-LABEL: func.func private @outer_fwd(
// CHECK: call @g_fwd(
// CHECK-LABEL: func.func private @outer_bwd(
// CHECK: call @g_bwd(
func.func @g(%x: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @g_fwd, bwd = @g_bwd}} {
  %0 = math.exp %x : f64
  return %0 : f64
}
func.func @g_fwd(%x: f64) -> (f64, f64) {
  %0 = math.exp %x : f64
  return %0, %0 : f64, f64
}
func.func @g_bwd(%y: f64, %c: f64) -> f64 {
  %0 = arith.mulf %c, %y : f64
  return %0 : f64
}
func.func @outer(%x: f64) -> f64 {
  %0 = arith.mulf %x, %x : f64
  %1 = call @g(%0) : (f64) -> f64
  return %1 : f64
}
func.func @grad_outer(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @outer} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that forward mode of a function with only a custom_vjp
/// differentiates the primal body (a generated @h_jvp with cos), not the rule.
// CHECK-LABEL: func.func @jvp_h(
// CHECK: call @h_jvp(
// CHECK-LABEL: func.func private @h_jvp(
// CHECK: math.cos
// CHECK-NOT: call @h_bwd
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

// -----

/// Check that reverse mode of a function with only a custom_jvp transposes
/// the rule: the rule's reverse mode with respect to its tangent argument,
/// called at a zero tangent (the rule's t * 0.5 becomes ct * 0.5).
// CHECK-LABEL: func.func @grad_k(
// CHECK: %[[F:.*]] = call @k_fwd(%[[X:.*]]) : (f64) -> f64
// CHECK: %[[B:.*]] = call @k_bwd(%{{.*}}) : (f64) -> f64
// CHECK: return %[[F]], %[[B]]
// CHECK-LABEL: func.func private @k_rule_bwd(
// CHECK-SAME: %{{.*}}: f64, %[[C:.*]]: f64) -> f64
// CHECK: %[[H:.*]] = arith.constant 5.000000e-01 : f64
// CHECK: %[[R:.*]] = arith.mulf %[[C]], %[[H]] : f64
// CHECK: return %[[R]]
// CHECK-LABEL: func.func private @k_fwd(
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f64
// CHECK: call @k_rule_fwd(%{{.*}}, %[[Z]])
// CHECK-LABEL: func.func private @k_bwd(
// CHECK: call @k_rule_bwd(
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

// -----

/// Check that a function with both rules uses custom_jvp in forward mode and
/// custom_vjp in reverse mode.
// CHECK-LABEL: func.func @both(
// CHECK: call @m_rule(
// CHECK: call @m_fwd(
// CHECK: call @m_bwd(
func.func @m(%x: f64) -> f64 attributes {autodiff.custom_jvp = @m_rule, autodiff.custom_vjp = {fwd = @m_fwd, bwd = @m_bwd}} {
  return %x : f64
}
func.func @m_rule(%x: f64, %t: f64) -> (f64, f64) {
  return %x, %t : f64, f64
}
func.func @m_fwd(%x: f64) -> (f64) {
  return %x : f64
}
func.func @m_bwd(%c: f64) -> f64 {
  return %c : f64
}
func.func @both(%x: f64, %t: f64, %c: f64) -> (f64, f64, f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @m} : (f64, f64) -> (f64, f64)
  %1:2 = "autodiff.vjp"(%x, %c) {fn = @m} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1, %1#0, %1#1 : f64, f64, f64, f64
}

// -----

/// Check that second order differentiates through the rule functions: the
/// VJP of a function whose body is already the custom VJP of @p calls the
/// generated fwd/bwd of the user's rule functions @p_fwd and @p_bwd.
// CHECK-LABEL: func.func @second(
// CHECK-DAG: func.func private @p_bwd_fwd(
// CHECK-DAG: func.func private @p_fwd_fwd(
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
