// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng --autodiff-vmap --autodiff-lower-rng | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that randomness = "different" gives lane l the Philox offset `offset + l * C` (C = 2
/// blocks per call), draws each lane's numbers into its row, and returns `offset + B * C`.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:.*]]: tensor<3x4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<3x4xf32>, i64)
// CHECK-DAG: %[[C6:.*]] = arith.constant 6 : i64
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[LANES:.*]] = linalg.generic {{.*}} ins(%[[OFF]] : i64) outs(%{{.*}} : tensor<3xi64>)
// CHECK: linalg.index 0
// CHECK: arith.muli %{{.*}}, %[[C2]] : i64
// CHECK: %[[R:.*]]:2 = call @f_batched_3_bub(%[[X]], %[[SEED]], %[[LANES]]) : (tensor<3x4xf32>, i64, tensor<3xi64>) -> (tensor<3x4xf32>, tensor<3xi64>)
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C6]] : i64
// CHECK: return %[[R]]#0, %[[END]]
// CHECK-LABEL: func.func private @f_batched_3_bub(
// CHECK-SAME: %{{.*}}: tensor<3x4xf32>, %[[S:.*]]: i64, %[[O:.*]]: tensor<3xi64>)
// CHECK: scf.for %[[L:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<3x4xf32>)
// CHECK: %[[OL:.*]] = tensor.extract %[[O]][%[[L]]] : tensor<3xi64>
// CHECK: %[[D:.*]] = "autodiff.philox"(%[[S]], %[[OL]]) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
// CHECK: tensor.insert_slice %[[D]] into %[[ACC]][%[[L]], 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<3x4xf32>
// CHECK: "autodiff.philox"(%[[S]], %{{.*}}) {distribution = "normal"}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %q = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  %1 = arith.addf %0, %q : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "different"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

/// Check that randomness = "same" draws once, unbatched, and every lane reads the same numbers.
// CHECK-LABEL: func.func private @f_batched_3_buu(
// CHECK-SAME: %{{.*}}: tensor<3x4xf32>, %[[S:.*]]: i64, %[[O:.*]]: i64)
// CHECK: %[[D:.*]] = "autodiff.philox"(%[[S]], %[[O]]) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
// CHECK-NOT: scf.for
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[D]] : tensor<3x4xf32>, tensor<4xf32>)
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "same"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
