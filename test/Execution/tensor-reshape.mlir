// RUN: autodiff-run %s --entry expand --arg '[0, 1, 2, 3, 4, 5]' | filecheck %s --match-full-lines --check-prefix=EXPAND
// RUN: autodiff-run %s --entry collapse --arg '[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]' | filecheck %s --match-full-lines --check-prefix=COLLAPSE
// RUN: autodiff-run %s --entry build --arg 3 --arg 4 | filecheck %s --match-full-lines --check-prefix=BUILD

/// Check tensor.expand_shape to 2x3 and to 3x1x2.
// EXPAND:      result[0]: tensor<2x3xf32> = {{\[}}[0, 1, 2], [3, 4, 5]]
// EXPAND-NEXT: result[1]: tensor<3x1x2xf32> = {{\[}}{{\[}}[0, 1]], {{\[}}[2, 3]], {{\[}}[4, 5]]]
func.func @expand(%a: tensor<6xf32>) -> (tensor<2x3xf32>, tensor<3x1x2xf32>) {
  %r = tensor.expand_shape %a [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  %s = tensor.expand_shape %a [[0, 1, 2]] output_shape [3, 1, 2]
      : tensor<6xf32> into tensor<3x1x2xf32>
  return %r, %s : tensor<2x3xf32>, tensor<3x1x2xf32>
}

/// Check tensor.collapse_shape of a 2x2x2 tensor, to 8 and to 4x2.
// COLLAPSE:      result[0]: tensor<8xi32> = [1, 2, 3, 4, 5, 6, 7, 8]
// COLLAPSE-NEXT: result[1]: tensor<4x2xi32> = {{\[}}[1, 2], [3, 4], [5, 6], [7, 8]]
func.func @collapse(%a: tensor<2x2x2xi32>) -> (tensor<8xi32>, tensor<4x2xi32>) {
  %r = tensor.collapse_shape %a [[0, 1, 2]] : tensor<2x2x2xi32> into tensor<8xi32>
  %s = tensor.collapse_shape %a [[0, 1], [2]] : tensor<2x2x2xi32> into tensor<4x2xi32>
  return %r, %s : tensor<8xi32>, tensor<4x2xi32>
}

/// Check tensor.from_elements, tensor.splat and tensor.generate (t[i][j] = 10 i + j).
// BUILD:      result[0]: tensor<3xf32> = [3, 4, 7]
// BUILD-NEXT: result[1]: tensor<2x2xf32> = {{\[}}[3, 3], [3, 3]]
// BUILD-NEXT: result[2]: tensor<2x3xindex> = {{\[}}[0, 1, 2], [10, 11, 12]]
func.func @build(%x: f32, %y: f32) -> (tensor<3xf32>, tensor<2x2xf32>, tensor<2x3xindex>) {
  %s = arith.addf %x, %y : f32
  %v = tensor.from_elements %x, %y, %s : tensor<3xf32>
  %sp = tensor.splat %x : tensor<2x2xf32>
  %g = tensor.generate {
  ^bb0(%i: index, %j: index):
    %c10 = arith.constant 10 : index
    %t = arith.muli %i, %c10 : index
    %e = arith.addi %t, %j : index
    tensor.yield %e : index
  } : tensor<2x3xindex>
  return %v, %sp, %g : tensor<3xf32>, tensor<2x2xf32>, tensor<2x3xindex>
}
