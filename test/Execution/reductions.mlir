// RUN: autodiff-run %s --entry sums --arg '[[1, 2, 3], [4, 5, 6]]' | filecheck %s --match-full-lines --check-prefix=SUMS
// RUN: autodiff-run %s --entry row_max --arg '[[1, 5, 3], [-4, -5, -6]]' | filecheck %s --match-full-lines --check-prefix=MAX
// RUN: autodiff-run %s --entry sum_squares --arg '[[1, 2, 3], [4, 5, 6]]' | filecheck %s --match-full-lines --check-prefix=SQ
// RUN: autodiff-run %s --entry int_min_sum --arg '[3, -2, 7, 12]' | filecheck %s --match-full-lines --check-prefix=INT

/// Check linalg.reduce summing over each dimension of a 2x3 matrix.
// SUMS:      result[0]: tensor<2xf32> = [6, 15]
// SUMS-NEXT: result[1]: tensor<3xf32> = [5, 7, 9]
func.func @sums(%a: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3xf32>) {
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2xf32>) -> tensor<2xf32>
  %rows = linalg.reduce ins(%a : tensor<2x3xf32>) outs(%i2 : tensor<2xf32>) dimensions = [1]
    (%x: f32, %acc: f32) {
      %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32
    }
  %e3 = tensor.empty() : tensor<3xf32>
  %i3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<3xf32>) -> tensor<3xf32>
  %cols = linalg.reduce ins(%a : tensor<2x3xf32>) outs(%i3 : tensor<3xf32>) dimensions = [0]
    (%x: f32, %acc: f32) {
      %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32
    }
  return %rows, %cols : tensor<2xf32>, tensor<3xf32>
}

/// Check a max reduction starting from -inf (all of row 1 is negative).
// MAX: result[0]: tensor<2xf32> = [5, -4]
func.func @row_max(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<2xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %r = linalg.reduce ins(%a : tensor<2x3xf32>) outs(%init : tensor<2xf32>) dimensions = [1]
    (%x: f32, %acc: f32) {
      %m = arith.maximumf %x, %acc : f32
      linalg.yield %m : f32
    }
  return %r : tensor<2xf32>
}

/// Check a full reduction written as linalg.generic with reduction iterators,
/// returned as a scalar via tensor.extract: 1+4+9+16+25+36 = 91.
// SQ: result[0]: f32 = 91
func.func @sum_squares(%a: tensor<2x3xf32>) -> f32 {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
                       iterator_types = ["reduction", "reduction"]}
      ins(%a : tensor<2x3xf32>) outs(%init : tensor<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %sq = arith.mulf %x, %x : f32
    %s = arith.addf %sq, %acc : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}

/// Check integer min and sum reductions on i64 (results as rank-0 tensors).
// INT:      result[0]: tensor<i64> = -2
// INT-NEXT: result[1]: tensor<i64> = 20
func.func @int_min_sum(%a: tensor<4xi64>) -> (tensor<i64>, tensor<i64>) {
  %big = arith.constant 9223372036854775807 : i64
  %zero = arith.constant 0 : i64
  %e = tensor.empty() : tensor<i64>
  %i0 = linalg.fill ins(%big : i64) outs(%e : tensor<i64>) -> tensor<i64>
  %min = linalg.reduce ins(%a : tensor<4xi64>) outs(%i0 : tensor<i64>) dimensions = [0]
    (%x: i64, %acc: i64) {
      %m = arith.minsi %x, %acc : i64
      linalg.yield %m : i64
    }
  %i1 = linalg.fill ins(%zero : i64) outs(%e : tensor<i64>) -> tensor<i64>
  %sum = linalg.reduce ins(%a : tensor<4xi64>) outs(%i1 : tensor<i64>) dimensions = [0]
    (%x: i64, %acc: i64) {
      %s = arith.addi %x, %acc : i64
      linalg.yield %s : i64
    }
  return %min, %sum : tensor<i64>, tensor<i64>
}
