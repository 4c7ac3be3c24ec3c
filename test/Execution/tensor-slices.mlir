// RUN: autodiff-run %s --entry extract --arg '[[1, 2, 3], [4, 5, 6], [7, 8, 9]]' | filecheck %s --match-full-lines --check-prefix=EXTRACT
// RUN: autodiff-run %s --entry insert --arg '[[1, 2, 3], [4, 5, 6], [7, 8, 9]]' --arg '[[10, 20]]' | filecheck %s --match-full-lines --check-prefix=INSERT
// RUN: autodiff-run %s --entry element --arg '[[1, 2, 3], [4, 5, 6], [7, 8, 9]]' --arg 2 --arg 1 | filecheck %s --match-full-lines --check-prefix=ELEMENT

/// Check tensor.extract_slice: a 2x2 block, a strided 2x2 corner and a rank-reducing row.
// EXTRACT:      result[0]: tensor<2x2xf32> = {{\[}}[4, 5], [7, 8]]
// EXTRACT-NEXT: result[1]: tensor<2x2xf32> = {{\[}}[1, 3], [7, 9]]
// EXTRACT-NEXT: result[2]: tensor<3xf32> = [4, 5, 6]
func.func @extract(%a: tensor<3x3xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<3xf32>) {
  %block = tensor.extract_slice %a[1, 0] [2, 2] [1, 1] : tensor<3x3xf32> to tensor<2x2xf32>
  %corners = tensor.extract_slice %a[0, 0] [2, 2] [2, 2] : tensor<3x3xf32> to tensor<2x2xf32>
  %row = tensor.extract_slice %a[1, 0] [1, 3] [1, 1] : tensor<3x3xf32> to tensor<3xf32>
  return %block, %corners, %row : tensor<2x2xf32>, tensor<2x2xf32>, tensor<3xf32>
}

/// Check tensor.insert_slice into an argument and into a zero tensor. The
/// argument is read-only for the caller, so the first insert works on a copy.
// INSERT:      result[0]: tensor<3x3xf32> = {{\[}}[1, 2, 3], [4, 10, 20], [7, 8, 9]]
// INSERT-NEXT: result[1]: tensor<3x3xf32> = {{\[}}[0, 0, 0], [0, 0, 0], [10, 20, 0]]
// INSERT-NEXT: result[2]: tensor<3x3xf32> = {{\[}}[1, 2, 3], [4, 5, 6], [7, 8, 9]]
func.func @insert(%a: tensor<3x3xf32>, %p: tensor<1x2xf32>)
    -> (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>) {
  %r = tensor.insert_slice %p into %a[1, 1] [1, 2] [1, 1] : tensor<1x2xf32> into tensor<3x3xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<3x3xf32>) -> tensor<3x3xf32>
  %r2 = tensor.insert_slice %p into %z[2, 0] [1, 2] [1, 1] : tensor<1x2xf32> into tensor<3x3xf32>
  return %r, %r2, %a : tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>
}

/// Check tensor.extract and tensor.insert at indices passed as `index` arguments.
// ELEMENT:      result[0]: f32 = 8
// ELEMENT-NEXT: result[1]: tensor<3x3xf32> = {{\[}}[1, 2, 3], [4, 5, 6], [7, -1, 9]]
func.func @element(%a: tensor<3x3xf32>, %i: index, %j: index) -> (f32, tensor<3x3xf32>) {
  %v = tensor.extract %a[%i, %j] : tensor<3x3xf32>
  %m = arith.constant -1.0 : f32
  %r = tensor.insert %m into %a[%i, %j] : tensor<3x3xf32>
  return %v, %r : f32, tensor<3x3xf32>
}
