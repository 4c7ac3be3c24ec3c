// RUN: autodiff-run %s --entry mm2 --arg '[[1, 2], [3, 4]]' --arg '[[5, 6], [7, 8]]' | filecheck %s --match-full-lines --check-prefix=MM2
// RUN: autodiff-run %s --entry mm23 --arg '[[1, 2, 3], [4, 5, 6]]' --arg '[[7, 8], [9, 10], [11, 12]]' | filecheck %s --match-full-lines --check-prefix=MM23
// RUN: autodiff-run %s --entry others --arg '[[1, 2], [3, 4]]' --arg '[1, -1]' --arg '[1, 2, 3]' --arg '[4, 5, 6]' | filecheck %s --match-full-lines --check-prefix=OTHERS
// RUN: autodiff-run %s --entry batched --arg '[[[1, 0], [0, 1]], [[2, 0], [0, 2]]]' --arg '[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]' | filecheck %s --match-full-lines --check-prefix=BATCH
// RUN: autodiff-run %s --entry transpose --arg '[[1, 2, 3], [4, 5, 6]]' | filecheck %s --match-full-lines --check-prefix=TRANSPOSE

/// Check a 2x2 linalg.matmul into a zero-filled accumulator.
// MM2: result[0]: tensor<2x2xf32> = {{\[}}[19, 22], [43, 50]]
func.func @mm2(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x2xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>)
                     outs(%acc : tensor<2x2xf32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

/// Check a rectangular (2x3)(3x2) matmul in f64.
// MM23: result[0]: tensor<2x2xf64> = {{\[}}[58, 64], [139, 154]]
func.func @mm23(%a: tensor<2x3xf64>, %b: tensor<3x2xf64>) -> tensor<2x2xf64> {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<2x2xf64>
  %acc = linalg.fill ins(%zero : f64) outs(%e : tensor<2x2xf64>) -> tensor<2x2xf64>
  %r = linalg.matmul ins(%a, %b : tensor<2x3xf64>, tensor<3x2xf64>)
                     outs(%acc : tensor<2x2xf64>) -> tensor<2x2xf64>
  return %r : tensor<2x2xf64>
}

/// Check linalg.matvec and linalg.dot.
// OTHERS:      result[0]: tensor<2xf32> = [-1, -1]
// OTHERS-NEXT: result[1]: tensor<f32> = 32
func.func @others(%a: tensor<2x2xf32>, %x: tensor<2xf32>, %u: tensor<3xf32>, %v: tensor<3xf32>)
    -> (tensor<2xf32>, tensor<f32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %mv = linalg.matvec ins(%a, %x : tensor<2x2xf32>, tensor<2xf32>)
                      outs(%acc : tensor<2xf32>) -> tensor<2xf32>
  %e0 = tensor.empty() : tensor<f32>
  %acc0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %d = linalg.dot ins(%u, %v : tensor<3xf32>, tensor<3xf32>) outs(%acc0 : tensor<f32>) -> tensor<f32>
  return %mv, %d : tensor<2xf32>, tensor<f32>
}

/// Check linalg.batch_matmul: batch 0 multiplies by I, batch 1 by 2I.
// BATCH: result[0]: tensor<2x2x2xf32> = {{\[}}{{\[}}[1, 2], [3, 4]], {{\[}}[10, 12], [14, 16]]]
func.func @batched(%a: tensor<2x2x2xf32>, %b: tensor<2x2x2xf32>) -> tensor<2x2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x2x2xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<2x2x2xf32>, tensor<2x2x2xf32>)
                           outs(%acc : tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  return %r : tensor<2x2x2xf32>
}

/// Check linalg.transpose of a 2x3 matrix.
// TRANSPOSE: result[0]: tensor<3x2xf32> = {{\[}}[1, 4], [2, 5], [3, 6]]
func.func @transpose(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %e = tensor.empty() : tensor<3x2xf32>
  %t = linalg.transpose ins(%a : tensor<2x3xf32>) outs(%e : tensor<3x2xf32>) permutation = [1, 0]
  return %t : tensor<3x2xf32>
}
