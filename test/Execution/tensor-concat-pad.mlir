// RUN: autodiff-run %s --entry concat --arg '[[1, 2], [3, 4]]' --arg '[[5], [6]]' --arg '[[7, 8]]' | filecheck %s --match-full-lines --check-prefix=CONCAT
// RUN: autodiff-run %s --entry pad --arg '[[1, 2], [3, 4]]' --arg '[1, 2, 3]' | filecheck %s --match-full-lines --check-prefix=PAD

/// Check tensor.concat along dimension 1 and along dimension 0.
// CONCAT:      result[0]: tensor<2x3xf32> = {{\[}}[1, 2, 5], [3, 4, 6]]
// CONCAT-NEXT: result[1]: tensor<3x2xf32> = {{\[}}[1, 2], [3, 4], [7, 8]]
func.func @concat(%a: tensor<2x2xf32>, %b: tensor<2x1xf32>, %c: tensor<1x2xf32>)
    -> (tensor<2x3xf32>, tensor<3x2xf32>) {
  %r = tensor.concat dim(1) %a, %b : (tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %s = tensor.concat dim(0) %a, %c : (tensor<2x2xf32>, tensor<1x2xf32>) -> tensor<3x2xf32>
  return %r, %s : tensor<2x3xf32>, tensor<3x2xf32>
}

/// Check tensor.pad with a constant: low [1, 0] high [0, 1] in 2-d, low 2 high 1 in 1-d.
// PAD:      result[0]: tensor<3x3xf32> = {{\[}}[0, 0, 0], [1, 2, 0], [3, 4, 0]]
// PAD-NEXT: result[1]: tensor<6xf32> = [-1, -1, 1, 2, 3, -1]
func.func @pad(%a: tensor<2x2xf32>, %v: tensor<3xf32>) -> (tensor<3x3xf32>, tensor<6xf32>) {
  %zero = arith.constant 0.0 : f32
  %m1 = arith.constant -1.0 : f32
  %r = tensor.pad %a low[1, 0] high[0, 1] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<2x2xf32> to tensor<3x3xf32>
  %s = tensor.pad %v low[2] high[1] {
  ^bb0(%i: index):
    tensor.yield %m1 : f32
  } : tensor<3xf32> to tensor<6xf32>
  return %r, %s : tensor<3x3xf32>, tensor<6xf32>
}
