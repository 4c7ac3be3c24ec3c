// RUN: autodiff-run %s --entry sum --arg '[1, 2, 3, 4, 5]' | filecheck %s --match-full-lines --check-prefix=FIVE
// RUN: autodiff-run %s --entry sum --arg '[2.5]' | filecheck %s --match-full-lines --check-prefix=ONE
// RUN: autodiff-run %s --entry sum --arg '[]' | filecheck %s --match-full-lines --check-prefix=EMPTY
// RUN: autodiff-run %s --entry col_sums --arg '[[1, 2, 3], [4, 5, 6]]' | filecheck %s --match-full-lines --check-prefix=COLS

// Dynamic dimensions in arguments accept any size; results stay static.

/// Check a sum and tensor.dim over a tensor<?xf32> of 5, 1 and 0 elements.
// FIVE:       result[0]: f32 = 15
// FIVE-NEXT:  result[1]: index = 5
// ONE:        result[0]: f32 = 2.5
// ONE-NEXT:   result[1]: index = 1
// EMPTY:      result[0]: f32 = 0
// EMPTY-NEXT: result[1]: index = 0
func.func @sum(%x: tensor<?xf32>) -> (f32, index) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<?xf32>) outs(%init : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %v = tensor.extract %r[] : tensor<f32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  return %v, %n : f32, index
}

/// Check a reduction over the dynamic dimension of a tensor<?x3xf32> into a static result.
// COLS: result[0]: tensor<3xf32> = [5, 7, 9]
func.func @col_sums(%x: tensor<?x3xf32>) -> tensor<3xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  %r = linalg.reduce ins(%x : tensor<?x3xf32>) outs(%init : tensor<3xf32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<3xf32>
}
