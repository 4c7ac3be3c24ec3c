// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that with the default policy (nothing_saveable) the residuals of a
/// checkpointed call are only its inputs: @f_fwd returns its output and the
/// checkpoint's result (read by sin's VJP), none of @block's internals, and
/// @f_bwd recomputes them with @block_remat before calling @block_bwd.
// CHECK-LABEL: func.func @grad_f(
// CHECK: call @f_fwd(%{{.*}}, %{{.*}}) : (tensor<4xf64>, tensor<4x4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
// CHECK-LABEL: func.func private @f_fwd(
// CHECK: call @block(
// CHECK-LABEL: func.func private @block_remat(
// CHECK-SAME: %{{.*}}: tensor<4xf64>, %{{.*}}: tensor<4x4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
// CHECK: linalg.vecmat
// CHECK-LABEL: func.func private @f_bwd(
// CHECK: %[[R:.*]]:2 = call @block_remat(
// CHECK: call @block_bwd(%{{.*}}, %{{.*}}, %[[R]]#0, %[[R]]#1,
func.func @block(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %z = arith.constant dense<0.0> : tensor<4xf64>
  %m = linalg.vecmat ins(%x, %w : tensor<4xf64>, tensor<4x4xf64>) outs(%z : tensor<4xf64>) -> tensor<4xf64>
  %s = math.sin %m : tensor<4xf64>
  %t = math.sin %s : tensor<4xf64>
  return %t : tensor<4xf64>
}
func.func @f(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %0 = "autodiff.checkpoint"(%x, %w) {fn = @block} : (tensor<4xf64>, tensor<4x4xf64>) -> tensor<4xf64>
  %1 = math.sin %0 : tensor<4xf64>
  return %1 : tensor<4xf64>
}
func.func @grad_f(%x: tensor<4xf64>, %w: tensor<4x4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @f} : (tensor<4xf64>, tensor<4x4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>)
  return %0#0, %0#1, %0#2 : tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>
}

// -----

/// Check that everything_saveable saves what an ordinary call saves: @f_fwd
/// returns @block's two internal residuals too, and nothing is recomputed.
// CHECK-LABEL: func.func @grad_f(
// CHECK: call @f_fwd(%{{.*}}, %{{.*}}) : (tensor<4xf64>, tensor<4x4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>)
// CHECK-NOT: @block_remat
func.func @block(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %z = arith.constant dense<0.0> : tensor<4xf64>
  %m = linalg.vecmat ins(%x, %w : tensor<4xf64>, tensor<4x4xf64>) outs(%z : tensor<4xf64>) -> tensor<4xf64>
  %s = math.sin %m : tensor<4xf64>
  %t = math.sin %s : tensor<4xf64>
  return %t : tensor<4xf64>
}
func.func @f(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %0 = "autodiff.checkpoint"(%x, %w) {fn = @block, policy = "everything_saveable"} : (tensor<4xf64>, tensor<4x4xf64>) -> tensor<4xf64>
  %1 = math.sin %0 : tensor<4xf64>
  return %1 : tensor<4xf64>
}
func.func @grad_f(%x: tensor<4xf64>, %w: tensor<4x4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @f} : (tensor<4xf64>, tensor<4x4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>)
  return %0#0, %0#1, %0#2 : tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>
}

// -----

/// Check that dots_saveable saves the contraction's output (one residual more
/// than nothing_saveable) and recomputes only the sin: @block_remat takes the
/// saved vecmat result as an argument and contains no contraction.
// CHECK-LABEL: func.func @grad_f(
// CHECK: call @f_fwd(%{{.*}}, %{{.*}}) : (tensor<4xf64>, tensor<4x4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>)
// CHECK-LABEL: func.func private @block_ckpt_fwd(
// CHECK: %[[M:.*]] = linalg.vecmat
// CHECK: return %{{.*}}, %[[M]] : tensor<4xf64>, tensor<4xf64>
// CHECK-LABEL: func.func private @block_remat(
// CHECK-SAME: %{{.*}}: tensor<4xf64>, %{{.*}}: tensor<4x4xf64>, %[[S:.*]]: tensor<4xf64>)
// CHECK-NOT: linalg.vecmat
// CHECK: %[[SIN:.*]] = linalg.generic {{.*}} ins(%[[S]] : tensor<4xf64>)
// CHECK: math.sin
// CHECK: return %[[S]], %[[SIN]]
func.func @block(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %z = arith.constant dense<0.0> : tensor<4xf64>
  %m = linalg.vecmat ins(%x, %w : tensor<4xf64>, tensor<4x4xf64>) outs(%z : tensor<4xf64>) -> tensor<4xf64>
  %s = math.sin %m : tensor<4xf64>
  %t = math.sin %s : tensor<4xf64>
  return %t : tensor<4xf64>
}
func.func @f(%x: tensor<4xf64>, %w: tensor<4x4xf64>) -> tensor<4xf64> {
  %0 = "autodiff.checkpoint"(%x, %w) {fn = @block, policy = "dots_saveable"} : (tensor<4xf64>, tensor<4x4xf64>) -> tensor<4xf64>
  %1 = math.sin %0 : tensor<4xf64>
  return %1 : tensor<4xf64>
}
func.func @grad_f(%x: tensor<4xf64>, %w: tensor<4x4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @f} : (tensor<4xf64>, tensor<4x4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>)
  return %0#0, %0#1, %0#2 : tensor<4xf64>, tensor<4xf64>, tensor<4x4xf64>
}

// -----

/// Check that save_only_these_names saves the value named "h" (the result of
/// a call to an identity marked autodiff.checkpoint_name = "h") and nothing
/// else, and that the marker calls are gone once nothing is left to
/// differentiate. exp's reverse rule reads exp's result, the value named "h"
/// before its name was given: it counts as saved too, so the remat function
/// recomputes neither (it receives x and the saved value, once per reader).
// CHECK-LABEL: func.func @inner(
// CHECK-NOT: call @name_h
// CHECK-LABEL: func.func @g(
// CHECK-LABEL: func.func @grad_g(
// CHECK: call @g_fwd(%{{.*}}) : (tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>
// CHECK-LABEL: func.func private @inner_remat(
// CHECK-SAME: %[[X:.*]]: tensor<4xf64>, %[[H:.*]]: tensor<4xf64>
// CHECK-NOT: math.exp
// CHECK: return
func.func private @name_h(%x: tensor<4xf64>) -> tensor<4xf64> attributes {autodiff.checkpoint_name = "h"} {
  return %x : tensor<4xf64>
}
func.func @inner(%x: tensor<4xf64>) -> tensor<4xf64> {
  %e = math.exp %x : tensor<4xf64>
  %h = call @name_h(%e) : (tensor<4xf64>) -> tensor<4xf64>
  %s = math.sin %h : tensor<4xf64>
  %t = math.sin %s : tensor<4xf64>
  return %t : tensor<4xf64>
}
func.func @g(%x: tensor<4xf64>) -> tensor<4xf64> {
  %0 = "autodiff.checkpoint"(%x) {fn = @inner, policy = "save_only_these_names", names = ["h"]} : (tensor<4xf64>) -> tensor<4xf64>
  %1 = math.sin %0 : tensor<4xf64>
  return %1 : tensor<4xf64>
}
func.func @grad_g(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @g} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that forward mode keeps a checkpoint a checkpoint (of the generated
/// @block_jvp, same policy) while a reverse pass is still to come, and that
/// the reverse pass then recomputes it: the jvp of a checkpoint under vjp.
// CHECK-LABEL: func.func @grad_jvp(
// CHECK-LABEL: func.func private @outer_jvp_fwd(
// CHECK: call @block_jvp(
// CHECK-LABEL: func.func private @block_jvp_remat(
// CHECK-LABEL: func.func private @outer_jvp_bwd(
// CHECK: call @block_jvp_remat(
// CHECK: call @block_jvp_bwd(
func.func @block(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @outer(%x: f64) -> f64 {
  %0 = "autodiff.checkpoint"(%x) {fn = @block, policy = "nothing_saveable"} : (f64) -> f64
  return %0 : f64
}
func.func @tangent(%x: f64) -> f64 {
  %one = arith.constant 1.0 : f64
  %0:2 = "autodiff.jvp"(%x, %one) {fn = @outer} : (f64, f64) -> (f64, f64)
  return %0#1 : f64
}
func.func @grad_jvp(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @tangent} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a checkpoint that is never differentiated becomes a plain call.
// CHECK-LABEL: func.func @plain(
// CHECK: %[[R:.*]] = call @id(%{{.*}}) : (f64) -> f64
// CHECK: return %[[R]]
func.func @id(%x: f64) -> f64 {
  return %x : f64
}
func.func @plain(%x: f64) -> f64 {
  %0 = "autodiff.checkpoint"(%x) {fn = @id} : (f64) -> f64
  return %0 : f64
}
