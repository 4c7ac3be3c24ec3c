// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng | filecheck %s

/// Check that autodiff.checkpoint of a drawing function threads the state
/// like a call (so a recomputation replays the same numbers).

// CHECK-LABEL: func.func private @dropout_mask
// CHECK-SAME: (%{{.*}}: tensor<8xf32>, %{{.*}}: i64, %{{.*}}: i64) -> (tensor<8xf32>, i64)
func.func private @dropout_mask(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %y = arith.mulf %x, %r : tensor<8xf32>
  return %y : tensor<8xf32>
}

// CHECK-LABEL: func.func @checkpointed
// CHECK-SAME: (%[[X:.*]]: tensor<8xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<8xf32>, i64)
// CHECK: %[[R:.*]]:2 = "autodiff.checkpoint"(%[[X]], %[[SEED]], %[[OFF]]) {fn = @dropout_mask} : (tensor<8xf32>, i64, i64) -> (tensor<8xf32>, i64)
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C2]] : i64
// CHECK: return %[[R]]#0, %[[END]]
func.func @checkpointed(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = "autodiff.checkpoint"(%x) {fn = @dropout_mask} : (tensor<8xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

/// Check that autodiff.jvp of a drawing function passes (seed, offset) as
/// trailing primals with zero tangents; the advanced offset follows the
/// outputs, its tangent comes last.

func.func private @noisy(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = arith.mulf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @forward_mode
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[T:.*]]: tensor<4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, tensor<4xf32>, i64)
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: %[[R:.*]]:4 = "autodiff.jvp"(%[[X]], %[[SEED]], %[[OFF]], %[[T]], %[[Z]], %[[Z]]) {fn = @noisy}
// CHECK-SAME: : (tensor<4xf32>, i64, i64, tensor<4xf32>, i64, i64) -> (tensor<4xf32>, i64, tensor<4xf32>, i64)
// CHECK: return %[[R]]#0, %[[R]]#2, %{{.*}} : tensor<4xf32>, tensor<4xf32>, i64
func.func @forward_mode(%x: tensor<4xf32>, %t: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %y, %ty = "autodiff.jvp"(%x, %t) {fn = @noisy} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %ty : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that autodiff.vjp of a drawing function passes (seed, offset) as
/// trailing primals and a zero cotangent for the offset result; the advanced
/// offset follows the outputs.

func.func private @noisy(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = arith.mulf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @reverse_mode
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[CT:.*]]: tensor<4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, tensor<4xf32>, i64)
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: %[[R:.*]]:3 = "autodiff.vjp"(%[[X]], %[[SEED]], %[[OFF]], %[[CT]], %[[Z]]) {fn = @noisy}
// CHECK-SAME: : (tensor<4xf32>, i64, i64, tensor<4xf32>, i64) -> (tensor<4xf32>, i64, tensor<4xf32>)
// CHECK: return %[[R]]#0, %[[R]]#2, %{{.*}} : tensor<4xf32>, tensor<4xf32>, i64
func.func @reverse_mode(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %y, %g = "autodiff.vjp"(%x, %ct) {fn = @noisy} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %g : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that autodiff.vmap of a drawing function passes (seed, offset)
/// unbatched and continues past the blocks its lanes consume: one call's (1
/// block) per lane with randomness = "different" (3 lanes), one call's with
/// "same".

func.func private @noisy(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = arith.mulf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @batched
// CHECK-SAME: (%[[B:.*]]: tensor<3x4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>, i64)
// CHECK: %[[R:.*]]:2 = "autodiff.vmap"(%[[B]], %[[SEED]], %[[OFF]]) {fn = @noisy, in_axes = array<i64: 0, -1, -1>, out_axes = array<i64: 0, -1>, randomness = "different"}
// CHECK: %[[C3:.*]] = arith.constant 3 : i64
// CHECK: %[[AFTER:.*]] = arith.addi %[[OFF]], %[[C3]] : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[AFTER]])
// CHECK: "autodiff.vmap"(%[[B]], %[[SEED]], %{{.*}}) {fn = @noisy, in_axes = array<i64: 0, -1, -1>, out_axes = array<i64: 0, -1>, randomness = "same"}
// CHECK: %[[C5:.*]] = arith.constant 5 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C5]] : i64
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[END]]
func.func @batched(%b: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>) {
  %v = "autodiff.vmap"(%b) {fn = @noisy, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "different"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %after = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %w = "autodiff.vmap"(%b) {fn = @noisy, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "same"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %v, %after, %w : tensor<3x4xf32>, tensor<4xf32>, tensor<3x4xf32>
}
