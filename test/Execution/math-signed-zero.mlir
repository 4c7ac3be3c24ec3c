// RUN: autodiff-run %s --arg '[-0.5, -0.25, 0.5, -1.5]' | filecheck %s --match-full-lines

// IEEE 754 (and C's ceil, numpy.ceil) give ceil(-0.5) = -0. Upstream
// `math-expand-ops` computes ceil as trunc(x) + (x > trunc(x) ? 1 : 0),
// which returns +0 for -1 < x < 0; the CPU lowering must not use it for ceil.

/// Check that ceil keeps the sign of a zero result.
// CHECK: result[0]: tensor<4xf32> = [-0, -0, 1, -1]
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.map { math.ceil } ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
  return %r : tensor<4xf32>
}
