// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap --autodiff-jvp --autodiff-vjp | filecheck %s --check-prefix=AD
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap --autodiff-jvp --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap --autodiff-jvp --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that vmap of a function with a custom_vjp (a straight-through
/// estimator: round, with an identity gradient) gives the batched function a
/// custom_vjp of batched fwd and bwd rules (generate_vmap_rule), and that grad
/// of vmap calls them rather than differentiating the batched body.
// CHECK-LABEL: func.func private @ste_batched_4_b(
// CHECK-SAME: %{{.*}}: tensor<4x3xf64>) -> tensor<4x3xf64>
// CHECK-SAME: attributes {autodiff.custom_vjp = {bwd = @ste_batched_4_b_bwd, fwd = @ste_batched_4_b_fwd}}
// CHECK: math.roundeven
// CHECK-LABEL: func.func private @ste_batched_4_b_fwd(
// CHECK-SAME: %[[X:.*]]: tensor<4x3xf64>) -> tensor<4x3xf64>
// CHECK: %[[Y:.*]] = call @ste_fwd_batched_4_b(%[[X]])
// CHECK: return %[[Y]]
// CHECK-LABEL: func.func private @ste_batched_4_b_bwd(
// CHECK-SAME: %[[C:.*]]: tensor<4x3xf64>) -> tensor<4x3xf64>
// CHECK: %[[G:.*]] = call @ste_bwd_batched_4_b(%[[C]])
// CHECK: return %[[G]]
// AD-LABEL: func.func @grad_of_vmap(
// AD: call @g_fwd(
// AD: call @g_bwd(
// AD-LABEL: func.func private @g_bwd(
// AD: call @ste_batched_4_b_bwd(
// AD-NOT: math.roundeven
// AD: return
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
func.func @g(%xs: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @ste, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
func.func @grad_of_vmap(%xs: tensor<4x3xf64>, %ct: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0:2 = "autodiff.vjp"(%xs, %ct) {fn = @g} : (tensor<4x3xf64>, tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<4x3xf64>)
  return %0#1 : tensor<4x3xf64>
}

// -----

/// Check the batched custom_vjp with an unbatched argument %w and a result that
/// does not depend on a batched argument: the residuals fwd returns batched are
/// batched bwd arguments, the cotangent of the unbatched result is shared by
/// the 4 lanes (scaled by 1/4), and the cotangent bwd gives per lane for %w is
/// summed over the lanes.
// CHECK-LABEL: func.func private @f_batched_4_bu(
// CHECK-SAME: attributes {autodiff.custom_vjp = {bwd = @f_batched_4_bu_bwd, fwd = @f_batched_4_bu_fwd}}
// CHECK-LABEL: func.func private @f_batched_4_bu_fwd(
// CHECK-SAME: -> (tensor<4x3xf64>, f64, tensor<4x3xf64>, f64)
// CHECK: call @f_fwd_batched_4_bu(
// CHECK-LABEL: func.func private @f_bwd_batched_4_bubu(
// CHECK-SAME: -> (tensor<4x3xf64>, tensor<4xf64>)
// CHECK-LABEL: func.func private @f_batched_4_bu_bwd(
// CHECK-SAME: %[[X:.*]]: tensor<4x3xf64>, %[[W:.*]]: f64, %[[C:.*]]: tensor<4x3xf64>, %[[CW:.*]]: f64) -> (tensor<4x3xf64>, f64)
// CHECK-DAG: %[[QUARTER:.*]] = arith.constant 2.500000e-01 : f64
// CHECK: %[[S:.*]] = arith.mulf %[[CW]], %[[QUARTER]] : f64
// CHECK: %[[G:.*]]:2 = call @f_bwd_batched_4_bubu(%[[X]], %[[W]], %[[C]], %[[S]])
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[G]]#1 : tensor<4xf64>)
// CHECK: %[[E:.*]] = tensor.extract %[[SUM]][]
// CHECK: return %[[G]]#0, %[[E]]
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
func.func @g(%xs: tensor<4x3xf64>, %w: f64) -> (tensor<4x3xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vmap"(%xs, %w) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0, 0>, randomness = "error"} : (tensor<4x3xf64>, f64) -> (tensor<4x3xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4x3xf64>, tensor<4xf64>
}

// -----

/// Check that vmap of a function with a custom_jvp gives the batched function a
/// custom_jvp: the rule batched with primals and tangents batched like the
/// arguments; forward mode of the vmap calls it.
// CHECK-LABEL: func.func private @h_batched_4_b(
// CHECK-SAME: attributes {autodiff.custom_jvp = @h_batched_4_b_jvp}
// CHECK-LABEL: func.func private @h_batched_4_b_jvp(
// CHECK-SAME: %{{.*}}: tensor<4xf64>, %{{.*}}: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
// CHECK: call @h_jvp_batched_4_bb(
// AD-LABEL: func.func @jvp_of_vmap(
// AD: call @k_jvp(
// AD-LABEL: func.func private @k_jvp(
// AD: call @h_batched_4_b_jvp(
func.func @h(%x: f64) -> f64 attributes {autodiff.custom_jvp = @h_jvp} {
  %0 = math.exp %x : f64
  %1 = math.log1p %0 : f64
  return %1 : f64
}
func.func @h_jvp(%x: f64, %t: f64) -> (f64, f64) {
  %0 = call @h(%x) : (f64) -> f64
  %n = arith.negf %x : f64
  %e = math.exp %n : f64
  %one = arith.constant 1.0 : f64
  %d = arith.addf %one, %e : f64
  %s = arith.divf %t, %d : f64
  return %0, %s : f64, f64
}
func.func @k(%xs: tensor<4xf64>) -> tensor<4xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @h, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @jvp_of_vmap(%xs: tensor<4xf64>, %t: tensor<4xf64>) -> tensor<4xf64> {
  %0:2 = "autodiff.jvp"(%xs, %t) {fn = @k} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#1 : tensor<4xf64>
}

// -----

/// Check custom_vmap rule selection: an exact match of the batched arguments
/// wins over an earlier rule (@dot_bu batches %x along axis 1: the argument is
/// transposed into place); a call with an unbatched argument that only an
/// all-batched rule takes broadcasts it; a batch size no rule has batches the
/// body.
// CHECK-LABEL: func.func @exact(
// CHECK: call @dot_batched_4_bu(
// CHECK-LABEL: func.func @bcast(
// CHECK: call @dot_batched_4_ub(
// CHECK-LABEL: func.func @other_size(
// CHECK: call @dot_batched_2_bu(
// CHECK-LABEL: func.func private @dot_batched_4_bu(
// CHECK-SAME: %[[X:.*]]: tensor<4x3xf64>, %[[W:.*]]: tensor<3xf64>) -> tensor<4xf64>
// CHECK: %[[T:.*]] = linalg.transpose ins(%[[X]] : tensor<4x3xf64>) {{.*}} permutation = [1, 0]
// CHECK: %[[R:.*]] = call @dot_bu(%[[T]], %[[W]]) : (tensor<3x4xf64>, tensor<3xf64>) -> tensor<4xf64>
// CHECK: return %[[R]]
// CHECK-LABEL: func.func private @dot_batched_4_ub(
// CHECK-SAME: %[[X:.*]]: tensor<3xf64>, %[[W:.*]]: tensor<4x3xf64>) -> tensor<4xf64>
// CHECK: %[[B:.*]] = linalg.broadcast ins(%[[X]] : tensor<3xf64>) {{.*}} dimensions = [0]
// CHECK: %[[R:.*]] = call @dot_bb(%[[B]], %[[W]])
// CHECK: return %[[R]]
// CHECK-LABEL: func.func private @dot_batched_2_bu(
// CHECK-NOT: call
// CHECK: linalg.generic
// CHECK: return
func.func @dot(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<f64> attributes {autodiff.custom_vmap = [@dot_bb, @dot_bu]} {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %a = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %0 = linalg.dot ins(%x, %w : tensor<3xf64>, tensor<3xf64>) outs(%a : tensor<f64>) -> tensor<f64>
  return %0 : tensor<f64>
}
func.func @dot_bu(%xs: tensor<3x4xf64>, %w: tensor<3xf64>) -> tensor<4xf64> attributes {autodiff.in_axes = array<i64: 1, -1>, autodiff.out_axes = array<i64: 0>} {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4xf64>
  %a = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %0 = linalg.vecmat ins(%w, %xs : tensor<3xf64>, tensor<3x4xf64>) outs(%a : tensor<4xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @dot_bb(%xs: tensor<4x3xf64>, %ws: tensor<4x3xf64>) -> tensor<4xf64> attributes {autodiff.in_axes = array<i64: 0, 0>, autodiff.out_axes = array<i64: 0>} {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4xf64>
  %a = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %p = arith.mulf %xs, %ws : tensor<4x3xf64>
  %0 = linalg.reduce ins(%p : tensor<4x3xf64>) outs(%a : tensor<4xf64>) dimensions = [1]
    (%v: f64, %acc: f64) {
      %r = arith.addf %v, %acc : f64
      linalg.yield %r : f64
    }
  return %0 : tensor<4xf64>
}
func.func @exact(%xs: tensor<4x3xf64>, %w: tensor<3xf64>) -> tensor<4xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @dot, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @bcast(%x: tensor<3xf64>, %ws: tensor<4x3xf64>) -> tensor<4xf64> {
  %0 = "autodiff.vmap"(%x, %ws) {fn = @dot, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3xf64>, tensor<4x3xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @other_size(%xs: tensor<2x3xf64>, %w: tensor<3xf64>) -> tensor<2xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @dot, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2xf64>
  return %0 : tensor<2xf64>
}

// -----

/// Check a custom_vmap rule with its result batched along axis 1 (moved to
/// axis 0, the pass's convention) on a function that also has a custom_vjp:
/// the batched function calls the rule and keeps a batched custom_vjp, so
/// grad of vmap uses the custom derivative.
// CHECK-LABEL: func.func private @sq_batched_2_b(
// CHECK-SAME: attributes {autodiff.custom_vjp = {bwd = @sq_batched_2_b_bwd, fwd = @sq_batched_2_b_fwd}}
// CHECK: %[[R:.*]] = call @sq_vmap(%{{.*}}) : (tensor<2x3xf64>) -> tensor<3x2xf64>
// CHECK: %[[T:.*]] = linalg.transpose ins(%[[R]] : tensor<3x2xf64>) {{.*}} permutation = [1, 0]
// CHECK: return %[[T]]
// AD-LABEL: func.func @grad_sq(
// AD: call @sq_batched_2_b_fwd(
// AD: call @sq_batched_2_b_bwd(
func.func @sq(%x: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vjp = {fwd = @sq_fwd, bwd = @sq_bwd}, autodiff.custom_vmap = @sq_vmap} {
  %0 = arith.mulf %x, %x : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @sq_vmap(%xs: tensor<2x3xf64>) -> tensor<3x2xf64> attributes {autodiff.in_axes = array<i64: 0>, autodiff.out_axes = array<i64: 1>} {
  %0 = arith.mulf %xs, %xs : tensor<2x3xf64>
  %e = tensor.empty() : tensor<3x2xf64>
  %t = linalg.transpose ins(%0 : tensor<2x3xf64>) outs(%e : tensor<3x2xf64>) permutation = [1, 0]
  return %t : tensor<3x2xf64>
}
func.func @sq_fwd(%x: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0 = arith.mulf %x, %x : tensor<3xf64>
  return %0, %x : tensor<3xf64>, tensor<3xf64>
}
func.func @sq_bwd(%x: tensor<3xf64>, %c: tensor<3xf64>) -> tensor<3xf64> {
  %0 = arith.mulf %x, %c : tensor<3xf64>
  %1 = arith.addf %0, %0 : tensor<3xf64>
  return %1 : tensor<3xf64>
}
func.func @sqs(%xs: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %0 = "autodiff.vmap"(%xs) {fn = @sq, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x3xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
func.func @grad_sq(%xs: tensor<2x3xf64>, %ct: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %0:2 = "autodiff.vjp"(%xs, %ct) {fn = @sqs} : (tensor<2x3xf64>, tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
  return %0#1 : tensor<2x3xf64>
}

// -----

/// Check nested vmaps: the custom_vmap rule (written for batch size 4) batches
/// the inner level; the outer level (size 2) batches the inner batched
/// function, and so the rule's own code, generically.
// CHECK-LABEL: func.func private @m_batched_4_bu(
// CHECK: call @m_vmap(
// CHECK-LABEL: func.func private @inner_batched_2_bu(
// CHECK: call @m_batched_4_bu_batched_2_bu(
// CHECK-LABEL: func.func private @m_batched_4_bu_batched_2_bu(
// CHECK-SAME: tensor<2x4x3xf64>, %{{.*}}: tensor<3xf64>) -> tensor<2x4x3xf64>
// CHECK: call @m_vmap_batched_2_bu(
// CHECK-LABEL: func.func private @m_vmap_batched_2_bu(
// CHECK: linalg.generic
func.func @m(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vmap = @m_vmap} {
  %0 = arith.mulf %x, %w : tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @m_vmap(%xs: tensor<4x3xf64>, %w: tensor<3xf64>) -> tensor<4x3xf64> attributes {autodiff.in_axes = array<i64: 0, -1>, autodiff.out_axes = array<i64: 0>} {
  %e = tensor.empty() : tensor<4x3xf64>
  %b = linalg.broadcast ins(%w : tensor<3xf64>) outs(%e : tensor<4x3xf64>) dimensions = [0]
  %0 = arith.mulf %xs, %b : tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
func.func @inner(%xs: tensor<4x3xf64>, %w: tensor<3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @m, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
func.func @outer(%xss: tensor<2x4x3xf64>, %w: tensor<3xf64>) -> tensor<2x4x3xf64> {
  %0 = "autodiff.vmap"(%xss, %w) {fn = @inner, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x4x3xf64>, tensor<3xf64>) -> tensor<2x4x3xf64>
  return %0 : tensor<2x4x3xf64>
}

// -----

/// Check the adaptation of rule results to the batched function's signature:
/// the body of @p does not read the batched %x, so @p_batched_4_bu returns its
/// result unbatched, while fwd (which reads %x) makes it per lane: the fwd
/// wrapper takes lane 0 (rule and body compute the same function). The
/// cotangent bwd gives per lane for the unbatched %w is summed, and the one it
/// gives unbatched for the batched %x is broadcast to every lane. The cotangent
/// of the unbatched result is shared by the 4 lanes (scaled by 1/4).
// CHECK-LABEL: func.func private @p_batched_4_bu(
// CHECK-SAME: -> tensor<3xf64> attributes {autodiff.custom_vjp = {bwd = @p_batched_4_bu_bwd, fwd = @p_batched_4_bu_fwd}}
// CHECK-LABEL: func.func private @p_batched_4_bu_fwd(
// CHECK: %[[F:.*]]:2 = call @p_fwd_batched_4_bu(
// CHECK: %[[L:.*]] = tensor.extract_slice %[[F]]#0[0, 0] [1, 3] [1, 1] : tensor<4x3xf64> to tensor<3xf64>
// CHECK: return %[[L]], %[[F]]#1
// CHECK-LABEL: func.func private @p_batched_4_bu_bwd(
// CHECK: %[[Q:.*]] = arith.constant dense<2.500000e-01> : tensor<3xf64>
// CHECK: %[[S:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[Q]] : tensor<3xf64>, tensor<3xf64>)
// CHECK: %[[G:.*]]:2 = call @p_bwd_batched_4_bu(%{{.*}}, %[[S]])
// CHECK: %[[X:.*]] = linalg.broadcast ins(%[[G]]#0 : tensor<3xf64>)
// CHECK: %[[W:.*]] = linalg.generic {{.*}} ins(%[[G]]#1 : tensor<4x3xf64>)
// CHECK: return %[[X]], %[[W]]
func.func @p(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> attributes {autodiff.custom_vjp = {fwd = @p_fwd, bwd = @p_bwd}} {
  return %w : tensor<3xf64>
}
func.func @p_fwd(%x: tensor<3xf64>, %w: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %z = arith.subf %x, %x : tensor<3xf64>
  %0 = arith.addf %w, %z : tensor<3xf64>
  return %0, %x : tensor<3xf64>, tensor<3xf64>
}
func.func @p_bwd(%x: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0 = arith.mulf %c, %x : tensor<3xf64>
  return %c, %0 : tensor<3xf64>, tensor<3xf64>
}
func.func @ps(%xs: tensor<4x3xf64>, %w: tensor<3xf64>) -> tensor<4x3xf64> {
  %0 = "autodiff.vmap"(%xs, %w) {fn = @p, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
