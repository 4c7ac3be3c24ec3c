// float16 and bfloat16 through autodiff-run: arguments with the :f16 / :bf16
// suffix, math computed in f32 and rounded per op, a bfloat16 sum accumulated
// exactly here (small integers), and the gradient of a bf16 function.

// RUN: autodiff-run %s --entry half --arg '[0.5, 1, 2, -1]:f16' --arg '[0.5, 1, 2, 3]:bf16' | filecheck %s --check-prefix=HALF
// RUN: autodiff-run %s --entry grad --arg '[0.5, 1, 2, 3]:bf16' | filecheck %s --check-prefix=GRAD

// tanh(x) * x in f16: tanh(0.5) * 0.5 = 0.2311, tanh(1) = 0.7617, 2 tanh(2) = 1.928
// exp(y) + y in bf16, each op rounded (numpy with ml_dtypes: bf16(bf16(exp(y)) + y)
// = 2.15625, 3.71875, 9.375, 23.125), printed with 3 significant digits
// HALF: result[0]: tensor<4xf16> = [0.2311, 0.7617, 1.928, 0.7617]
// HALF: result[1]: tensor<4xbf16> = [2.16, 3.72, 9.38, 23.1]
#map = affine_map<(d0) -> (d0)>
func.func @half(%a: tensor<4xf16>, %b: tensor<4xbf16>) -> (tensor<4xf16>, tensor<4xbf16>) {
  %e = tensor.empty() : tensor<4xf16>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf16>) outs(%e : tensor<4xf16>) {
  ^bb0(%x: f16, %o: f16):
    %t = math.tanh %x : f16
    %m = arith.mulf %t, %x : f16
    linalg.yield %m : f16
  } -> tensor<4xf16>
  %e2 = tensor.empty() : tensor<4xbf16>
  %r2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%b : tensor<4xbf16>) outs(%e2 : tensor<4xbf16>) {
  ^bb0(%x: bf16, %o: bf16):
    %t = math.exp %x : bf16
    %m = arith.addf %t, %x : bf16
    linalg.yield %m : bf16
  } -> tensor<4xbf16>
  return %r, %r2 : tensor<4xf16>, tensor<4xbf16>
}

// d/dx sum(x * x) = 2x, exact in bf16
// GRAD: result[0]: tensor<4xbf16> = [1, 2, 4, 6]
func.func private @sumsq(%x: tensor<4xbf16>) -> tensor<bf16> {
  %e = tensor.empty() : tensor<4xbf16>
  %sq = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%x : tensor<4xbf16>) outs(%e : tensor<4xbf16>) {
  ^bb0(%v: bf16, %o: bf16):
    %m = arith.mulf %v, %v : bf16
    linalg.yield %m : bf16
  } -> tensor<4xbf16>
  %z = arith.constant 0.0 : bf16
  %i = tensor.empty() : tensor<bf16>
  %f = linalg.fill ins(%z : bf16) outs(%i : tensor<bf16>) -> tensor<bf16>
  %s = linalg.reduce ins(%sq : tensor<4xbf16>) outs(%f : tensor<bf16>) dimensions = [0]
    (%in: bf16, %acc: bf16) {
      %t = arith.addf %in, %acc : bf16
      linalg.yield %t : bf16
    }
  return %s : tensor<bf16>
}

func.func @grad(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %one = arith.constant dense<1.0> : tensor<bf16>
  %r:2 = "autodiff.vjp"(%x, %one) {fn = @sumsq, wrt = array<i64: 0>}
      : (tensor<4xbf16>, tensor<bf16>) -> (tensor<bf16>, tensor<4xbf16>)
  return %r#1 : tensor<4xbf16>
}
