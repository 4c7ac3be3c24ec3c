// The transform ops take operand and result lists of different types (a
// tensor primal next to a scalar one). Our driver accepts them; stock
// mlir-opt cannot, because MLIR 22's IRDL gives a variadic operand group a
// single type variable (see dialects/verify.py) -- the second RUN line
// documents that limitation and fails loudly once upstream lifts it.
//
// RUN: autodiff-opt %s | autodiff-opt | filecheck %s
// RUN: %not %mlir_opt --irdl-file=%irdl %s 2>&1 | filecheck %s --check-prefix=UPSTREAM

/// Check that jvp, vjp, vmap and checkpoint keep mixed operand and result types.

// CHECK-LABEL: func.func @mixed(
// CHECK-SAME:      %[[X:.*]]: tensor<4xf32>, %[[S:.*]]: f32, %[[B:.*]]: tensor<3x4xf32>)
// CHECK:         "autodiff.jvp"(%[[X]], %[[S]], %[[X]], %[[S]]) {fn = @f} : (tensor<4xf32>, f32, tensor<4xf32>, f32) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         "autodiff.vjp"(%[[X]], %[[S]], %[[X]]) {fn = @f, wrt = array<i64: 1>} : (tensor<4xf32>, f32, tensor<4xf32>) -> (tensor<4xf32>, f32)
// CHECK:         "autodiff.vmap"(%[[B]], %[[S]]) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, f32) -> tensor<3x4xf32>
// CHECK:         "autodiff.checkpoint"(%[[X]], %[[S]]) {fn = @f} : (tensor<4xf32>, f32) -> tensor<4xf32>

// UPSTREAM: error: expected 'tensor<4xf32>' but got 'f32'
func.func @f(%x: tensor<4xf32>, %s: f32) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %b = linalg.fill ins(%s : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %y = arith.mulf %x, %b : tensor<4xf32>
  return %y : tensor<4xf32>
}

func.func @mixed(%x: tensor<4xf32>, %s: f32, %b: tensor<3x4xf32>)
    -> (tensor<4xf32>, f32, tensor<3x4xf32>, tensor<4xf32>) {
  %y, %t = "autodiff.jvp"(%x, %s, %x, %s) {fn = @f}
      : (tensor<4xf32>, f32, tensor<4xf32>, f32) -> (tensor<4xf32>, tensor<4xf32>)
  %o, %ds = "autodiff.vjp"(%x, %s, %x) {fn = @f, wrt = array<i64: 1>}
      : (tensor<4xf32>, f32, tensor<4xf32>) -> (tensor<4xf32>, f32)
  %v = "autodiff.vmap"(%b, %s)
      {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"}
      : (tensor<3x4xf32>, f32) -> tensor<3x4xf32>
  %c = "autodiff.checkpoint"(%x, %s) {fn = @f} : (tensor<4xf32>, f32) -> tensor<4xf32>
  return %t, %ds, %v, %c : tensor<4xf32>, f32, tensor<3x4xf32>, tensor<4xf32>
}
