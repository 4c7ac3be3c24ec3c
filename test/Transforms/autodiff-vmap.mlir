// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | %not grep '"autodiff\.vmap'
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap --allow-unregistered-dialect | %mlir_opt --split-input-file --allow-unregistered-dialect --verify-each -o /dev/null

/// Check that vmap of an elementwise function with every operand batched keeps the ops on the
/// batched tensors and calls @f_batched once.
// CHECK-LABEL: func.func @all_batched(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<8x4xf32>)
// CHECK: %[[R:.*]] = call @f_batched_8_bb(%[[X]], %[[Y]]) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: return %[[R]]
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}}ins(%{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8x4xf32>)
// CHECK: arith.mulf
// CHECK: math.exp
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.mulf %x, %y : tensor<4xf32>
  %1 = math.exp %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @all_batched(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that an unbatched operand of an elementwise op is read through a map without the batch
/// dimension: no linalg.broadcast is materialized.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @unbatched_operand(
// CHECK: call @f_batched_8_bu(
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<4xf32>) -> tensor<8x4xf32>
// CHECK-NOT: linalg.broadcast
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]} ins(%[[X]], %[[Y]] : tensor<8x4xf32>, tensor<4xf32>)
// CHECK: arith.addf
// CHECK-NOT: linalg.broadcast
// CHECK: return
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %x, %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @unbatched_operand(%x: tensor<8x4xf32>, %y: tensor<4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that scalar code becomes code on tensor<B x T>: a batched f64 is a tensor<8xf64>.
// CHECK-LABEL: func.func @scalars(
// CHECK: call @f_batched_8_bb(%{{.*}}, %{{.*}}) : (tensor<8xf64>, tensor<8xf64>) -> tensor<8xf64>
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-SAME: tensor<8xf64>, %{{.*}}: tensor<8xf64>) -> tensor<8xf64>
// CHECK: linalg.generic
// CHECK: arith.mulf {{.*}} : f64
// CHECK: linalg.generic
// CHECK: math.sin {{.*}} : f64
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @scalars(%x: tensor<8xf64>, %y: tensor<8xf64>) -> tensor<8xf64> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf64>, tensor<8xf64>) -> tensor<8xf64>
  return %0 : tensor<8xf64>
}

// -----

/// Check that a batched scalar combined with an unbatched scalar uses the unbatched scalar directly
/// as a linalg.generic input.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0) -> (d0)>
// CHECK-DAG: #[[SCALAR:.*]] = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8xf64>, %[[Y:.*]]: f64) -> tensor<8xf64>
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8xf64>
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[SCALAR]], #[[ID]]], iterator_types = ["parallel"]} ins(%[[X]], %[[Y]] : tensor<8xf64>, f64) outs(%[[E]] : tensor<8xf64>)
// CHECK: arith.mulf
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  return %0 : f64
}
func.func @scalar_mixed(%x: tensor<8xf64>, %y: f64) -> tensor<8xf64> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf64>, f64) -> tensor<8xf64>
  return %0 : tensor<8xf64>
}

// -----

/// Check that an in_axes entry other than 0 moves the batch axis to the front with a
/// linalg.transpose before the call.
// CHECK-LABEL: func.func @in_axis_1(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8x4xf32>
// CHECK: %[[T:.*]] = linalg.transpose ins(%[[X]] : tensor<4x8xf32>) outs(%[[E]] : tensor<8x4xf32>) permutation = [1, 0]
// CHECK: %[[R:.*]] = call @f_batched_8_b(%[[T]]) : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: return %[[R]]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.tanh %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @in_axis_1(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that an out_axes entry other than 0 moves the batch axis from the front to its position
/// after the call.
// CHECK-LABEL: func.func @out_axis_2(
// CHECK: %[[R:.*]] = call @f_batched_8_b(%{{.*}}) : (tensor<8x3x4xf32>) -> tensor<8x3x4xf32>
// CHECK: %[[E:.*]] = tensor.empty() : tensor<3x4x8xf32>
// CHECK: %[[T:.*]] = linalg.transpose ins(%[[R]] : tensor<8x3x4xf32>) outs(%[[E]] : tensor<3x4x8xf32>) permutation = [1, 2, 0]
// CHECK: return %[[T]]
func.func @f(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = math.exp %x : tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
func.func @out_axis_2(%x: tensor<8x3x4xf32>) -> tensor<3x4x8xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 2>, randomness = "error"} : (tensor<8x3x4xf32>) -> tensor<3x4x8xf32>
  return %0 : tensor<3x4x8xf32>
}

// -----

/// Check that a result that does not depend on a batched operand stays unbatched in @f_batched and
/// is broadcast at its out_axes position by the caller.
// CHECK-LABEL: func.func @unbatched_result(
// CHECK: %[[R:.*]]:2 = call @f_batched_8_bu(%{{.*}}, %{{.*}}) : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK: %[[B:.*]] = linalg.broadcast ins(%[[R]]#1 : tensor<4xf32>) outs(%[[E]] : tensor<4x8xf32>) dimensions = [1]
// CHECK: return %[[R]]#0, %[[B]]
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: -> (tensor<8x4xf32>, tensor<4xf32>)
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = math.exp %x : tensor<4xf32>
  %1 = math.exp %y : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
func.func @unbatched_result(%x: tensor<8x4xf32>, %y: tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4x8xf32>) {
  %0:2 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0, 1>, randomness = "error"} : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4x8xf32>)
  return %0#0, %0#1 : tensor<8x4xf32>, tensor<4x8xf32>
}

// -----

/// Check that out_axes -1 returns an unbatched result as it is.
// CHECK-LABEL: func.func @unbatched_out_axis(
// CHECK: %[[R:.*]]:2 = call @f_batched_8_bu(
// CHECK-NOT: linalg.broadcast
// CHECK: return %[[R]]#0, %[[R]]#1 : tensor<8x4xf32>, tensor<4xf32>
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = math.exp %x : tensor<4xf32>
  %1 = math.exp %y : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
func.func @unbatched_out_axis(%x: tensor<8x4xf32>, %y: tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>) {
  %0:2 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0, -1>, randomness = "error"} : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<8x4xf32>, tensor<4xf32>
}

// -----

/// Check that two vmap ops with the same batching signature share one batched function, and another
/// signature gets its own.
// CHECK-LABEL: func.func @shared(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<8x4xf32>, %[[Z:.*]]: tensor<4xf32>)
// CHECK: call @f_batched_8_bb(%[[X]], %[[Y]])
// CHECK: call @f_batched_8_bb(%[[Y]], %[[X]])
// CHECK: call @f_batched_8_bu(%[[X]], %[[Z]])
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-NOT: func.func private @f_batched
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.subf %x, %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @shared(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>, %z: tensor<4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = "autodiff.vmap"(%y, %x) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = "autodiff.vmap"(%x, %z) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  return %0, %1, %2 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

/// Check that func.call batches its callee once per signature, and a call with only unbatched
/// operands is kept as it is.
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK: call @g_batched_8_b(%[[X]]) : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: call @g(%[[Y]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-LABEL: func.func private @g_batched_8_b(
// CHECK: math.sqrt
func.func private @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.sqrt %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @g(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @g(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = arith.addf %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
func.func @calls(%x: tensor<8x4xf32>, %y: tensor<4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that vmap of vmap lowers the inner vmap first: the outer batched function calls a batched
/// function of the inner batched function.
// CHECK-LABEL: func.func @inner(
// CHECK: call @f_batched_3_b(
// CHECK-LABEL: func.func @vmap_of_vmap(
// CHECK: call @inner_batched_2_b(%{{.*}}) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-LABEL: func.func private @inner_batched_2_b(
// CHECK: call @f_batched_3_b_batched_2_b(%{{.*}}) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-LABEL: func.func private @f_batched_3_b_batched_2_b(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]
// CHECK: math.exp
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.exp %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @inner(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
func.func @vmap_of_vmap(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @inner, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

/// Check that vmap of a function holding an autodiff.jvp lowers the jvp first, then batches the
/// generated @f_jvp (vmap of jvp).
// CHECK-LABEL: func.func @df(
// CHECK: call @f_jvp(
// CHECK-LABEL: func.func @vmap_of_jvp(
// CHECK: call @df_batched_8_bb(
// CHECK-LABEL: func.func private @df_batched_8_bb(
// CHECK: %[[R:.*]]:2 = call @f_jvp_batched_8_bb(%{{.*}}, %{{.*}}) : (tensor<8xf64>, tensor<8xf64>) -> (tensor<8xf64>, tensor<8xf64>)
// CHECK: return %[[R]]#1
// CHECK-LABEL: func.func private @f_jvp_batched_8_bb(
// CHECK-DAG: math.sin
// CHECK-DAG: math.cos
func.func @f(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @df(%x: f64, %t: f64) -> f64 {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (f64, f64) -> (f64, f64)
  return %0#1 : f64
}
func.func @vmap_of_jvp(%x: tensor<8xf64>, %t: tensor<8xf64>) -> tensor<8xf64> {
  %0 = "autodiff.vmap"(%x, %t) {fn = @df, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf64>, tensor<8xf64>) -> tensor<8xf64>
  return %0 : tensor<8xf64>
}

// -----

/// Check that vmap of a function holding an autodiff.vjp batches the generated forward and backward
/// functions (per-example gradients).
// CHECK-LABEL: func.func @per_example_grad(
// CHECK: call @g_batched_16_b(
// CHECK-LABEL: func.func private @g_batched_16_b(
// CHECK-SAME: %[[X:.*]]: tensor<16x3xf64>)
// CHECK: call @f_fwd_batched_16_b(%[[X]]) : (tensor<16x3xf64>) -> tensor<16xf64>
// CHECK: call @f_bwd_batched_16_bu(%[[X]], %{{.*}}) : (tensor<16x3xf64>, tensor<f64>) -> tensor<16x3xf64>
// CHECK-LABEL: func.func private @f_fwd_batched_16_b(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
func.func @f(%x: tensor<3xf64>) -> tensor<f64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %a = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %s = linalg.reduce ins(%x : tensor<3xf64>) outs(%a : tensor<f64>) dimensions = [0]
    (%v: f64, %acc: f64) {
      %m = arith.mulf %v, %v : f64
      %r = arith.addf %m, %acc : f64
      linalg.yield %r : f64
    }
  return %s : tensor<f64>
}
func.func @g(%x: tensor<3xf64>) -> tensor<3xf64> {
  %one = arith.constant dense<1.0> : tensor<f64>
  %0:2 = "autodiff.vjp"(%x, %one) {fn = @f} : (tensor<3xf64>, tensor<f64>) -> (tensor<f64>, tensor<3xf64>)
  return %0#1 : tensor<3xf64>
}
func.func @per_example_grad(%x: tensor<16x3xf64>) -> tensor<16x3xf64> {
  %0 = "autodiff.vmap"(%x) {fn = @g, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<16x3xf64>) -> tensor<16x3xf64>
  return %0 : tensor<16x3xf64>
}

// -----

/// Check that stop_gradient and randomness = "same" with an unbatched draw are batched: the draw is
/// made once and shared by the lanes.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: %[[R:.*]] = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
// CHECK-NOT: autodiff.stop_gradient
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[R]] : tensor<8x4xf32>, tensor<4xf32>)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %s = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %0 = arith.addf %s, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @same_randomness(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "same"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that an autodiff.checkpoint batches into a checkpoint of the batched callee,
/// which becomes a plain call once no jvp/vjp op is left to recompute it
/// (`lower_checkpoints` keeps it while one remains).
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>)
// CHECK: call @g_batched_8_b(%[[X]]) : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-LABEL: func.func private @g_batched_8_b(
// CHECK: math.tanh
func.func private @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.tanh %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "autodiff.checkpoint"(%x) {fn = @g} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @checkpoint(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that a jacrev-style vmap of a vjp over the rows of the identity is one batched call:
/// the forward function runs once, unbatched, the backward once on all rows (no per-row calls),
/// and sin's derivative (unbatched) is computed once, not per row.
// CHECK-LABEL: func.func @jacrev(
// CHECK: %[[J:.*]] = call @row_batched_2_ub(%{{.*}}, %{{.*}}) : (tensor<3xf64>, tensor<2x2xf64>) -> tensor<2x3xf64>
// CHECK-NEXT: return %[[J]]
// CHECK-LABEL: func.func private @row_batched_2_ub(
// CHECK-SAME: %[[X:.*]]: tensor<3xf64>, %[[E:.*]]: tensor<2x2xf64>)
// CHECK: call @f_fwd(%[[X]]) : (tensor<3xf64>) -> tensor<2xf64>
// CHECK: %[[R:.*]] = call @f_bwd_batched_2_ub(%[[X]], %[[E]]) : (tensor<3xf64>, tensor<2x2xf64>) -> tensor<2x3xf64>
// CHECK-NOT: call
// CHECK: return %[[R]]
// CHECK-LABEL: func.func private @f_bwd_batched_2_ub(
// CHECK-SAME: %[[X:.*]]: tensor<3xf64>, %[[E:.*]]: tensor<2x2xf64>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]{{.*}} ins(%[[E]], %{{.*}} : tensor<2x2xf64>, tensor<2x3xf64>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]{{.*}} ins(%[[X]] : tensor<3xf64>)
// CHECK: math.cos
// CHECK-NOT: call
func.func @f(%x: tensor<3xf64>) -> tensor<2xf64> {
  %w = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf64>
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<2xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<2xf64>) -> tensor<2xf64>
  %s = math.sin %x : tensor<3xf64>
  %y = linalg.matvec ins(%w, %s : tensor<2x3xf64>, tensor<3xf64>) outs(%f : tensor<2xf64>) -> tensor<2xf64>
  return %y : tensor<2xf64>
}
func.func @row(%x: tensor<3xf64>, %ct: tensor<2xf64>) -> tensor<3xf64> {
  %0:2 = "autodiff.vjp"(%x, %ct) {fn = @f} : (tensor<3xf64>, tensor<2xf64>) -> (tensor<2xf64>, tensor<3xf64>)
  return %0#1 : tensor<3xf64>
}
func.func @jacrev(%x: tensor<3xf64>) -> tensor<2x3xf64> {
  %eye = arith.constant dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf64>
  %0 = "autodiff.vmap"(%x, %eye) {fn = @row, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3xf64>, tensor<2x2xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
