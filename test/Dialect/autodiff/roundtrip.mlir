// Every autodiff op parses, verifies, prints and parses again, in our driver
// and in stock upstream mlir-opt (which loads the dialect from its IRDL file),
// and both print exactly the same text.
//
// RUN: autodiff-opt %s | autodiff-opt | filecheck %s
// RUN: %mlir_opt --irdl-file=%irdl %s | filecheck %s
// RUN: autodiff-opt %s > %t.ours
// RUN: %mlir_opt --irdl-file=%irdl %s > %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: autodiff-opt --mlir-print-op-generic %s | filecheck %s --check-prefix=GENERIC
// RUN: autodiff-opt --mlir-print-op-generic %s | autodiff-opt | filecheck %s
// RUN: autodiff-opt --mlir-print-op-generic %s | %mlir_opt --irdl-file=%irdl | filecheck %s

/// Check that the transform ops (jvp, vjp, vmap, checkpoint) keep their
/// symbol, their optional `wrt`, their axes and every randomness mode.

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = math.sin %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

func.func @g(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %y = arith.mulf %x, %w : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @transforms(
// CHECK-SAME:      %[[X:.*]]: tensor<4xf32>, %[[DX:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<3x4xf32>)
// CHECK:         %[[JVP:.*]]:2 = "autodiff.jvp"(%[[X]], %[[DX]]) {fn = @f} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         %[[VJP:.*]]:3 = "autodiff.vjp"(%[[X]], %[[X]], %[[DX]]) {fn = @g} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK:         %[[WRT:.*]]:2 = "autodiff.vjp"(%[[X]], %[[X]], %[[DX]]) {fn = @g, wrt = array<i64: 1>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         %[[V0:.*]] = "autodiff.vmap"(%[[B]]) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK:         %[[V1:.*]] = "autodiff.vmap"(%[[B]], %[[B]]) {fn = @g, in_axes = array<i64: 0, 0>, out_axes = array<i64: 1>, randomness = "different"} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<4x3xf32>
// CHECK:         %[[V2:.*]] = "autodiff.vmap"(%[[B]]) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "same"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK:         %[[C:.*]] = "autodiff.checkpoint"(%[[X]]) {fn = @f} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK:         return %[[JVP]]#1, %[[VJP]]#2, %[[WRT]]#1, %[[C]]

// GENERIC-LABEL: "func.func"() <{function_type = (tensor<4xf32>, tensor<4xf32>, tensor<3x4xf32>)
// GENERIC-SAME:      sym_name = "transforms"
// GENERIC:         "autodiff.jvp"(%{{.*}}, %{{.*}}) {fn = @f}
// GENERIC:         "func.return"
func.func @transforms(%x: tensor<4xf32>, %dx: tensor<4xf32>, %b: tensor<3x4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %y, %dy = "autodiff.jvp"(%x, %dx) {fn = @f}
      : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %o, %ct0, %ct1 = "autodiff.vjp"(%x, %x, %dx) {fn = @g}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %o2, %ctw = "autodiff.vjp"(%x, %x, %dx) {fn = @g, wrt = array<i64: 1>}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %v0 = "autodiff.vmap"(%b)
      {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"}
      : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %v1 = "autodiff.vmap"(%b, %b)
      {fn = @g, in_axes = array<i64: 0, 0>, out_axes = array<i64: 1>, randomness = "different"}
      : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<4x3xf32>
  %v2 = "autodiff.vmap"(%b)
      {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "same"}
      : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %c = "autodiff.checkpoint"(%x) {fn = @f} : (tensor<4xf32>) -> tensor<4xf32>
  return %dy, %ct1, %ctw, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

/// Check that stop_gradient accepts tensors and scalars alike.

// CHECK-LABEL: func.func @stop_gradient(
// CHECK-SAME:      %[[X:.*]]: tensor<4xf32>, %[[S:.*]]: f64)
// CHECK:         %[[T:.*]] = "autodiff.stop_gradient"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK:         %[[U:.*]] = "autodiff.stop_gradient"(%[[S]]) : (f64) -> f64
// CHECK:         return %[[T]], %[[U]]
func.func @stop_gradient(%x: tensor<4xf32>, %s: f64) -> (tensor<4xf32>, f64) {
  %t = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %u = "autodiff.stop_gradient"(%s) : (f64) -> f64
  return %t, %u : tensor<4xf32>, f64
}

/// Check that random and philox keep every distribution and their optional
/// parameters.

// CHECK-LABEL: func.func @rng(
// CHECK-SAME:      %[[SEED:.*]]: i64, %[[OFF:.*]]: i64)
// CHECK:         "autodiff.random"() {distribution = "uniform", high = 2.000000e+00 : f64, low = -1.000000e+00 : f64} : () -> tensor<8xf32>
// CHECK:         "autodiff.random"() {distribution = "normal", mean = 0.000000e+00 : f64, std = 1.000000e+00 : f64} : () -> tensor<2x3xf64>
// CHECK:         "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
// CHECK:         "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "uniform"} : (i64, i64) -> tensor<16xf32>
// CHECK:         "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "normal"} : (i64, i64) -> tensor<4x4xf32>
// CHECK:         "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
func.func @rng(%seed: i64, %off: i64)
    -> (tensor<8xf32>, tensor<2x3xf64>, tensor<4xi32>, tensor<16xf32>, tensor<4x4xf32>, tensor<4xi32>) {
  %0 = "autodiff.random"() {distribution = "uniform", low = -1.0 : f64, high = 2.0 : f64}
      : () -> tensor<8xf32>
  %1 = "autodiff.random"() {distribution = "normal", mean = 0.0 : f64, std = 1.0 : f64}
      : () -> tensor<2x3xf64>
  %2 = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
  %3 = "autodiff.philox"(%seed, %off) {distribution = "uniform"} : (i64, i64) -> tensor<16xf32>
  %4 = "autodiff.philox"(%seed, %off) {distribution = "normal"} : (i64, i64) -> tensor<4x4xf32>
  %5 = "autodiff.philox"(%seed, %off) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
  return %0, %1, %2, %3, %4, %5
      : tensor<8xf32>, tensor<2x3xf64>, tensor<4xi32>, tensor<16xf32>, tensor<4x4xf32>, tensor<4xi32>
}

/// Check that the custom-rule attributes on a primal function survive.

// CHECK-LABEL: func.func @custom(
// CHECK-SAME:      attributes {autodiff.custom_jvp = @custom_jvp, autodiff.custom_vjp = {bwd = @custom, fwd = @custom}, autodiff.custom_vmap = @custom}
func.func @custom(%x: tensor<4xf32>) -> tensor<4xf32> attributes {
    autodiff.custom_vjp = {fwd = @custom, bwd = @custom},
    autodiff.custom_jvp = @custom_jvp,
    autodiff.custom_vmap = @custom} {
  return %x : tensor<4xf32>
}

func.func @custom_jvp(%x: tensor<4xf32>, %dx: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  return %x, %dx : tensor<4xf32>, tensor<4xf32>
}
