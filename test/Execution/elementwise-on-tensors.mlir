// RUN: autodiff-run %s --entry fused --arg '[0, 1, 2, -1]' --arg '[1, 0.5, 0.25, 2]' --arg '[0, 0, -0.5, 2]' | filecheck %s --match-full-lines --check-prefix=FUSED
// RUN: autodiff-run %s --entry ints --arg '[[1, 2], [3, 4]]' --arg '[[10, 20], [30, 40]]' | filecheck %s --match-full-lines --check-prefix=INTS

// arith and math ops applied directly to tensors (ElementwiseMappable), as
// the Python front end and the transform passes write them.

/// Check tanh(x * y + z) on a tensor: x * y + z = [0, 0.5, 0, 0] and tanh(0.5) = 0.462117...
// FUSED:      result[0]: tensor<4xf32> = [0, 0.462117, 0, 0]
// FUSED-NEXT: result[1]: tensor<4xf32> = [0, 0.5, 0, 0]
func.func @fused(%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>) {
  %m = arith.mulf %x, %y : tensor<4xf32>
  %s = arith.addf %m, %z : tensor<4xf32>
  %t = math.tanh %s : tensor<4xf32>
  return %t, %s : tensor<4xf32>, tensor<4xf32>
}

/// Check integer tensor arithmetic and a comparison producing an i1 tensor.
// INTS:      result[0]: tensor<2x2xi32> = {{\[}}[11, 22], [33, 44]]
// INTS-NEXT: result[1]: tensor<2x2xi32> = {{\[}}[10, 40], [90, 160]]
// INTS-NEXT: result[2]: tensor<2x2xi1> = {{\[}}[false, true], [true, true]]
func.func @ints(%a: tensor<2x2xi32>, %b: tensor<2x2xi32>)
    -> (tensor<2x2xi32>, tensor<2x2xi32>, tensor<2x2xi1>) {
  %s = arith.addi %a, %b : tensor<2x2xi32>
  %p = arith.muli %a, %b : tensor<2x2xi32>
  %c = arith.constant dense<25> : tensor<2x2xi32>
  %gt = arith.cmpi sgt, %p, %c : tensor<2x2xi32>
  return %s, %p, %gt : tensor<2x2xi32>, tensor<2x2xi32>, tensor<2x2xi1>
}
