// RUN: autodiff-run %s --entry rank0 --arg 3.5 | filecheck %s --match-full-lines --check-prefix=RANK0
// RUN: autodiff-run %s --entry rank4 --arg '[[[[0, 1, 2], [3, 4, 5]]], [[[6, 7, 8], [9, 10, 11]]]]' | filecheck %s --match-full-lines --check-prefix=RANK4

/// Check a rank-0 tensor argument and result: 2 * 3.5 + 1 = 8.
// RANK0: result[0]: tensor<f32> = 8
func.func @rank0(%x: tensor<f32>) -> tensor<f32> {
  %e = tensor.empty() : tensor<f32>
  %r = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>],
                       iterator_types = []}
      ins(%x : tensor<f32>) outs(%e : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %one = arith.constant 1.0 : f32
    %m = arith.mulf %a, %two : f32
    %s = arith.addf %m, %one : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}

/// Check rank 4 in and out (x + 1), a reduction over dims 1 and 3 down to
/// rank 2, and an expand_shape to rank 5.
// RANK4:      result[0]: tensor<2x1x2x3xf32> = {{\[\[\[\[}}1, 2, 3], [4, 5, 6]]], {{\[\[\[}}7, 8, 9], [10, 11, 12]]]]
// RANK4-NEXT: result[1]: tensor<2x2xf32> = {{\[}}[3, 12], [21, 30]]
// RANK4-NEXT: result[2]: tensor<2x1x2x3x1xf32> = {{\[\[\[\[\[}}0], [1], [2]], {{\[\[}}3], [4], [5]]]], {{\[\[\[\[}}6], [7], [8]], {{\[\[}}9], [10], [11]]]]]
func.func @rank4(%x: tensor<2x1x2x3xf32>)
    -> (tensor<2x1x2x3xf32>, tensor<2x2xf32>, tensor<2x1x2x3x1xf32>) {
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x1x2x3xf32>
  %inc = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>,
                                          affine_map<(a, b, c, d) -> (a, b, c, d)>],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x1x2x3xf32>) outs(%e : tensor<2x1x2x3xf32>) {
  ^bb0(%v: f32, %o: f32):
    %s = arith.addf %v, %one : f32
    linalg.yield %s : f32
  } -> tensor<2x1x2x3xf32>
  %e2 = tensor.empty() : tensor<2x2xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %sum = linalg.reduce ins(%x : tensor<2x1x2x3xf32>) outs(%init : tensor<2x2xf32>)
      dimensions = [1, 3]
    (%v: f32, %acc: f32) {
      %s = arith.addf %v, %acc : f32
      linalg.yield %s : f32
    }
  %r5 = tensor.expand_shape %x [[0], [1], [2], [3, 4]] output_shape [2, 1, 2, 3, 1]
      : tensor<2x1x2x3xf32> into tensor<2x1x2x3x1xf32>
  return %inc, %sum, %r5 : tensor<2x1x2x3xf32>, tensor<2x2xf32>, tensor<2x1x2x3x1xf32>
}
