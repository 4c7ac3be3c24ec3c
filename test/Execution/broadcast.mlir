// RUN: autodiff-run %s --entry add_row --arg '[[1, 2, 3], [4, 5, 6]]' --arg '[10, 20, 30]' | filecheck %s --match-full-lines --check-prefix=ROW
// RUN: autodiff-run %s --entry scale_cols --arg '[[1, 2, 3], [4, 5, 6]]' --arg '[2, -1]' | filecheck %s --match-full-lines --check-prefix=COL
// RUN: autodiff-run %s --entry outer --arg '[1, 2]' --arg '[3, 4, 5]' | filecheck %s --match-full-lines --check-prefix=OUTER
// RUN: autodiff-run %s --entry named_broadcast --arg '[10, 20, 30]' --arg 7 | filecheck %s --match-full-lines --check-prefix=NAMED

/// Check numpy-style broadcasting of a row vector over a matrix with linalg.generic.
// ROW: result[0]: tensor<2x3xf32> = {{\[}}[11, 22, 33], [14, 25, 36]]
func.func @add_row(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %e = tensor.empty() : tensor<2x3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<2x3xf32>, tensor<3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}

/// Check broadcasting a column vector (one factor per row).
// COL: result[0]: tensor<2x3xf32> = {{\[}}[2, 4, 6], [-4, -5, -6]]
func.func @scale_cols(%a: tensor<2x3xf32>, %c: tensor<2xf32>) -> tensor<2x3xf32> {
  %e = tensor.empty() : tensor<2x3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a, %c : tensor<2x3xf32>, tensor<2xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.mulf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}

/// Check an outer product: both operands broadcast.
// OUTER: result[0]: tensor<2x3xf64> = {{\[}}[3, 4, 5], [6, 8, 10]]
func.func @outer(%u: tensor<2xf64>, %v: tensor<3xf64>) -> tensor<2x3xf64> {
  %e = tensor.empty() : tensor<2x3xf64>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%u, %v : tensor<2xf64>, tensor<3xf64>) outs(%e : tensor<2x3xf64>) {
  ^bb0(%x: f64, %y: f64, %o: f64):
    %s = arith.mulf %x, %y : f64
    linalg.yield %s : f64
  } -> tensor<2x3xf64>
  return %r : tensor<2x3xf64>
}

/// Check linalg.broadcast and linalg.fill of a scalar argument.
// NAMED:      result[0]: tensor<2x3xi32> = {{\[}}[10, 20, 30], [10, 20, 30]]
// NAMED-NEXT: result[1]: tensor<2x2xi32> = {{\[}}[7, 7], [7, 7]]
func.func @named_broadcast(%v: tensor<3xi32>, %s: i32) -> (tensor<2x3xi32>, tensor<2x2xi32>) {
  %e = tensor.empty() : tensor<2x3xi32>
  %b = linalg.broadcast ins(%v : tensor<3xi32>) outs(%e : tensor<2x3xi32>) dimensions = [0]
  %e2 = tensor.empty() : tensor<2x2xi32>
  %f = linalg.fill ins(%s : i32) outs(%e2 : tensor<2x2xi32>) -> tensor<2x2xi32>
  return %b, %f : tensor<2x3xi32>, tensor<2x2xi32>
}
