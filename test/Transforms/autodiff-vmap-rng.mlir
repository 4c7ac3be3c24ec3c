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

// -----

/// Check that a `keyed` draw (from an explicit key) with an unbatched key is
/// shared by the lanes even with randomness = "error": it is a pure function
/// of the key, not a draw from the implicit generator.
// CHECK-LABEL: func.func private @f_batched_3_bu(
// CHECK-SAME: %{{.*}}: tensor<3x4xf32>, %[[K:.*]]: tensor<2xi64>)
// CHECK: %[[S:.*]] = tensor.extract %[[K]]
// CHECK: %[[O:.*]] = tensor.extract %[[K]]
// CHECK: %[[D:.*]] = "autodiff.philox"(%[[S]], %[[O]]) {distribution = "uniform", keyed} : (i64, i64) -> tensor<4xf32>
// CHECK-NOT: scf.for
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[D]] : tensor<3x4xf32>, tensor<4xf32>)
func.func private @f(%x: tensor<4xf32>, %k: tensor<2xi64>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tensor.extract %k[%c0] : tensor<2xi64>
  %o = tensor.extract %k[%c1] : tensor<2xi64>
  %r = "autodiff.philox"(%s, %o) {distribution = "uniform", keyed} : (i64, i64) -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%x: tensor<3x4xf32>, %k: tensor<2xi64>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x, %k) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

/// Check that a batch of keys gives each lane the draw of its own key: the
/// key words are batched, so the draw runs once per lane into its row.
// CHECK-LABEL: func.func private @f_batched_5_b(
// CHECK-SAME: %[[K:.*]]: tensor<5x2xi64>) -> tensor<5x3xf32>
// CHECK: scf.for %[[L:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<5x3xf32>)
// CHECK: %[[SL:.*]] = tensor.extract %{{.*}}[%[[L]]] : tensor<5xi64>
// CHECK: %[[OL:.*]] = tensor.extract %{{.*}}[%[[L]]] : tensor<5xi64>
// CHECK: %[[D:.*]] = "autodiff.philox"(%[[SL]], %[[OL]]) {distribution = "uniform", keyed} : (i64, i64) -> tensor<3xf32>
// CHECK: tensor.insert_slice %[[D]] into %[[ACC]][%[[L]], 0] [1, 3] [1, 1] : tensor<3xf32> into tensor<5x3xf32>
func.func private @f(%k: tensor<2xi64>) -> tensor<3xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tensor.extract %k[%c0] : tensor<2xi64>
  %o = tensor.extract %k[%c1] : tensor<2xi64>
  %r = "autodiff.philox"(%s, %o) {distribution = "uniform", keyed} : (i64, i64) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
func.func @main(%k: tensor<5x2xi64>) -> tensor<5x3xf32> {
  %0 = "autodiff.vmap"(%k) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<5x2xi64>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}
