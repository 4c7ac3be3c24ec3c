// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp --autodiff-jvp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp --autodiff-jvp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that reverse mode splits into @f_fwd (outputs + residuals) and
/// @f_bwd (residuals + cotangents -> input cotangents), called in order.
// CHECK-LABEL: func.func @vjp_f(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[Y:[^:]*]]: f64, %[[C:[^:]*]]: f64)
// CHECK: %[[F:.*]]:{{[0-9]+}} = call @f_fwd(%[[X]], %[[Y]])
// CHECK: %[[B:.*]]:2 = call @f_bwd({{.*}}%[[C]])
// CHECK: return %[[F]]#0, %[[B]]#0, %[[B]]#1
// CHECK-LABEL: func.func private @f_fwd(
// CHECK: math.sin
// CHECK-NOT: math.cos
// CHECK: return
// CHECK-LABEL: func.func private @f_bwd(
// CHECK: math.cos
// CHECK: return
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @vjp_f(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @f} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that the forward function returns the residual the backward needs
/// (the product x*y feeds cos in the backward function), while residuals that
/// are primal arguments are passed by the caller, not returned by @f_fwd.
// CHECK-LABEL: func.func @vjp_f(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[Y:[^:]*]]: f64, %[[C:[^:]*]]: f64)
// CHECK: %[[F:.*]]:2 = call @f_fwd(%[[X]], %[[Y]]) : (f64, f64) -> (f64, f64)
// CHECK: call @f_bwd(%[[X]], %[[Y]], %[[F]]#1, %[[C]])
// CHECK-LABEL: func.func private @f_fwd(
// CHECK: %[[P:.*]] = arith.mulf
// CHECK: %[[S:.*]] = math.sin %[[P]]
// CHECK: return %[[S]], %[[P]] : f64, f64
// CHECK-LABEL: func.func private @f_bwd(
// CHECK: math.cos %arg
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @vjp_f(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @f} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that generated functions are cached per (function, wrt): two ops
/// with the same wrt share @g_fwd/@g_bwd; another wrt gets its own pair.
// CHECK-LABEL: func.func @uses(
// CHECK: call @g_fwd(
// CHECK: call @g_bwd(
// CHECK: call @g_fwd(
// CHECK: call @g_bwd(
// CHECK: call @g_fwd_1(
// CHECK: call @g_bwd_1(
// CHECK-LABEL: func.func private @g_fwd(
// CHECK-LABEL: func.func private @g_bwd(
// CHECK-SAME: -> (f64, f64)
// CHECK-LABEL: func.func private @g_fwd_1(
// CHECK-LABEL: func.func private @g_bwd_1(
// CHECK-SAME: -> f64
func.func @g(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @uses(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @g} : (f64, f64, f64) -> (f64, f64, f64)
  %1:3 = "autodiff.vjp"(%0#1, %0#2, %c) {fn = @g} : (f64, f64, f64) -> (f64, f64, f64)
  %2:2 = "autodiff.vjp"(%1#1, %1#2, %c) {fn = @g, wrt = array<i64: 1>} : (f64, f64, f64) -> (f64, f64)
  return %2#0, %2#1, %1#0 : f64, f64, f64
}

// -----

/// Check that wrt selects the differentiated inputs: only y's cotangent
/// (c * x) is computed.
// CHECK-LABEL: func.func private @g_bwd(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[C:[^:]*]]: f64) -> f64
// CHECK: %[[G:.*]] = arith.mulf %[[C]], %[[X]]
// CHECK: return %[[G]] : f64
func.func @g(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @vjp_y(%x: f64, %y: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %y, %c) {fn = @g, wrt = array<i64: 1>} : (f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a cotangent reaching a value twice is accumulated: d(x*x) = 2 c x.
// CHECK-LABEL: func.func private @sq_bwd(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[C:[^:]*]]: f64) -> f64
// CHECK: %[[A:.*]] = arith.mulf %[[C]], %[[X]]
// CHECK: %[[S:.*]] = arith.addf %[[A]], %[[A]]
// CHECK: return %[[S]]
func.func @sq(%x: f64) -> f64 {
  %0 = arith.mulf %x, %x : f64
  return %0 : f64
}
func.func @vjp_sq(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @sq} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that stop_gradient blocks the cotangent: d(stop(x) * x) = c * x.
// CHECK-LABEL: func.func private @sg_bwd(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[C:[^:]*]]: f64) -> f64
// CHECK: %[[G:.*]] = arith.mulf %[[C]], %[[X]]
// CHECK-NOT: arith.addf
// CHECK: return %[[G]]
func.func @sg(%x: f64) -> f64 {
  %s = "autodiff.stop_gradient"(%x) : (f64) -> f64
  %r = arith.mulf %s, %x : f64
  return %r : f64
}
func.func @vjp_sg(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @sg} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a call is differentiated recursively: the caller's forward
/// calls the callee's forward, the caller's backward the callee's backward.
// CHECK-LABEL: func.func private @outer_fwd(
// CHECK: call @inner_fwd(
// CHECK: call @inner_fwd(
// CHECK-LABEL: func.func private @inner_fwd(
// CHECK-LABEL: func.func private @inner_bwd(
// CHECK: math.cos
// CHECK-LABEL: func.func private @outer_bwd(
// CHECK: call @inner_bwd(
// CHECK: call @inner_bwd(
func.func @inner(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @outer(%x: f64) -> f64 {
  %0 = call @inner(%x) : (f64) -> f64
  %1 = call @inner(%0) : (f64) -> f64
  return %1 : f64
}
func.func @vjp_outer(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @outer} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that inactive code gets no derivative: the cotangent of y does not
/// depend on the integer path, and an unused input gets a zero cotangent.
// CHECK-LABEL: func.func private @h_bwd(
// CHECK-NOT: arith.muli
// CHECK-NOT: math.exp
// CHECK: arith.constant 0.000000e+00
// CHECK: return
func.func @h(%x: f64, %y: f64) -> f64 {
  %i = arith.fptosi %x : f64 to i32
  %j = arith.muli %i, %i : i32
  %f = arith.sitofp %j : i32 to f64
  %e = math.exp %f : f64
  %r = arith.mulf %e, %y : f64
  return %r : f64
}
func.func @vjp_h(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @h} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check the Hessian-vector product (jvp of vjp): the forward-mode pass,
/// meeting a vjp op inside the function it differentiates, lowers it first.
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | filecheck %s --check-prefix=HVP
// HVP-LABEL: func.func @hvp(
// HVP: call @grad_jvp(
// HVP-LABEL: func.func private @grad_jvp(
// HVP: call @f_fwd_jvp(
// HVP: call @f_bwd_jvp(
// CHECK-LABEL: func.func @hvp(
func.func @f(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  %1 = arith.mulf %0, %x : f64
  return %1 : f64
}
func.func @grad(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @hvp(%x: f64, %c: f64, %t: f64, %u: f64) -> (f64, f64, f64, f64) {
  %0:4 = "autodiff.jvp"(%x, %c, %t, %u) {fn = @grad} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3 : f64, f64, f64, f64
}

// -----

/// Check reverse over reverse (vjp of vjp): the inner vjp becomes calls that
/// are then differentiated; no autodiff op is left.
// CHECK-LABEL: func.func @gg(
// CHECK: call @grad_fwd(
// CHECK: call @grad_bwd(
// CHECK-LABEL: func.func private @grad_fwd(
// CHECK: call @f_fwd_fwd(
// CHECK: call @f_bwd_fwd(
func.func @f(%x: f64) -> f64 {
  %0 = math.tanh %x : f64
  return %0 : f64
}
func.func @grad(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @gg(%x: f64, %c: f64, %d: f64, %e: f64) -> (f64, f64, f64, f64) {
  %0:4 = "autodiff.vjp"(%x, %c, %d, %e) {fn = @grad} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3 : f64, f64, f64, f64
}

// -----

/// Check a third-order derivative (vjp of jvp of vjp) lowers completely.
// CHECK-LABEL: func.func @third(
// CHECK: call @hvp_fwd(
// CHECK: call @hvp_bwd(
func.func @f(%x: f64) -> f64 {
  %0 = math.exp %x : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @grad(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @hvp(%x: f64, %c: f64, %t: f64, %u: f64) -> (f64, f64, f64, f64) {
  %0:4 = "autodiff.jvp"(%x, %c, %t, %u) {fn = @grad} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3 : f64, f64, f64, f64
}
func.func @third(%x: f64, %c: f64, %t: f64, %u: f64, %a: f64, %b: f64, %d: f64, %e: f64) -> (f64, f64, f64, f64, f64, f64, f64, f64) {
  %0:8 = "autodiff.vjp"(%x, %c, %t, %u, %a, %b, %d, %e) {fn = @hvp} : (f64, f64, f64, f64, f64, f64, f64, f64) -> (f64, f64, f64, f64, f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3, %0#4, %0#5, %0#6, %0#7 : f64, f64, f64, f64, f64, f64, f64, f64
}

// -----

/// Check that a custom VJP (autodiff.custom_vjp = {fwd, bwd} on the primal)
/// is used instead of differentiating the body, and that a wrt subset gets a
/// wrapper selecting the requested cotangents.
// CHECK-LABEL: func.func @use_custom(
// CHECK: call @my_fwd(
// CHECK: call @my_bwd_wrt(
// CHECK-LABEL: func.func private @my_bwd_wrt(
// CHECK: %[[A:.*]]:2 = call @my_bwd(
// CHECK: return %[[A]]#1
func.func @f(%x: f64, %y: f64) -> f64 attributes {autodiff.custom_vjp = {fwd = @my_fwd, bwd = @my_bwd}} {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @my_fwd(%x: f64, %y: f64) -> (f64, f64, f64) {
  %0 = arith.mulf %x, %y : f64
  return %0, %x, %y : f64, f64, f64
}
func.func @my_bwd(%x: f64, %y: f64, %c: f64) -> (f64, f64) {
  %0 = arith.mulf %c, %y : f64
  %1 = arith.mulf %c, %x : f64
  return %0, %1 : f64, f64
}
func.func @use_custom(%x: f64, %y: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %y, %c) {fn = @f, wrt = array<i64: 1>} : (f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
