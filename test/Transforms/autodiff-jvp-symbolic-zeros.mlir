// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// A tangent passed as a zero constant (how the front end writes the tangent
/// of a closed-over weight) is a symbolic zero: the generated function keeps
/// its signature but spends no work on it, so d(x @ w) = tx @ w only.

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %e = tensor.empty() : tensor<4x3xf32>
  %c = arith.constant 0.0 : f32
  %z = linalg.fill ins(%c : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %y = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x3xf32>) outs(%z : tensor<4x3xf32>) -> tensor<4x3xf32>
  %t = math.tanh %y : tensor<4x3xf32>
  return %t : tensor<4x3xf32>
}
func.func @jvp_x(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %tx: tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %zw = arith.constant dense<0.0> : tensor<8x3xf32>
  %r:2 = "autodiff.jvp"(%x, %w, %tx, %zw) {fn = @f} : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<4x8xf32>, tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<4x3xf32>, tensor<4x3xf32>
}
/// The same function with both tangents live gets its own jvp function.
func.func @jvp_both(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %tx: tensor<4x8xf32>, %tw: tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %r:2 = "autodiff.jvp"(%x, %w, %tx, %tw) {fn = @f} : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<4x8xf32>, tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<4x3xf32>, tensor<4x3xf32>
}

// CHECK-LABEL: func.func @jvp_x(
// CHECK:         call @f_jvp(
// CHECK-LABEL: func.func @jvp_both(
// CHECK:         call @f_jvp_1(
// CHECK-LABEL: func.func private @f_jvp(
// CHECK-SAME:      %[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x3xf32>, %[[TX:.*]]: tensor<4x8xf32>, %[[TW:.*]]: tensor<8x3xf32>)
// CHECK:         linalg.matmul ins(%[[X]], %[[W]] :
// CHECK:         linalg.matmul ins(%[[TX]], %[[W]] :
// CHECK-NOT:     linalg.matmul
// CHECK-NOT:     %[[TW]]
// CHECK:         return
// CHECK-LABEL: func.func private @f_jvp_1(
// CHECK-COUNT-3: linalg.matmul
// CHECK:         return

// -----

/// Calls inside the differentiated function pass inactive operands on as
/// symbolic zeros: @g's jvp has no tangent matmul for the constant weight.

func.func @g(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %e = tensor.empty() : tensor<4x3xf32>
  %c = arith.constant 0.0 : f32
  %z = linalg.fill ins(%c : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %y = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x3xf32>) outs(%z : tensor<4x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
func.func @h(%x: tensor<4x8xf32>) -> tensor<4x3xf32> {
  %w = arith.constant dense<0.5> : tensor<8x3xf32>
  %y = func.call @g(%x, %w) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
func.func @jvp_h(%x: tensor<4x8xf32>, %tx: tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %r:2 = "autodiff.jvp"(%x, %tx) {fn = @h} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<4x3xf32>, tensor<4x3xf32>
}

// CHECK-LABEL: func.func private @g_jvp(
// CHECK-COUNT-2: linalg.matmul
// CHECK-NOT:     linalg.matmul
// CHECK:         return
