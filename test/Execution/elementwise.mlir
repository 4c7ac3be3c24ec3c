// RUN: autodiff-run %s --entry fma --arg '[1, 2, 3, 4]' --arg '[0.5, -1, 2, 10]' --arg '[1, 1, 1, 1]' | filecheck %s --match-full-lines --check-prefix=FMA
// RUN: autodiff-run %s --entry named --arg '[[1, -2], [3, 4]]' --arg '[[4, 4], [-1, 0.5]]' | filecheck %s --match-full-lines --check-prefix=NAMED
// RUN: autodiff-run %s --entry int_ops --arg '[7, -7, 9, 0]' --arg '[2, 2, -4, 5]' | filecheck %s --match-full-lines --check-prefix=INT
// RUN: autodiff-run %s --entry unary --arg '[-2.5, -1.5, 0, 1.5]' | filecheck %s --match-full-lines --check-prefix=UNARY

// Elementwise code on tensors written as linalg (generic, map and named
// ops), the form the transform passes emit. Expected values are hand-computed.

/// Check that a linalg.generic computing x * y + z runs elementwise.
// FMA: result[0]: tensor<4xf32> = [1.5, -1, 7, 41]
#id = affine_map<(i) -> (i)>
func.func @fma(%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y, %z : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %c : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

/// Check that the named elementwise linalg ops compute add, sub, mul, div and max.
// NAMED:      result[0]: tensor<2x2xf32> = {{\[}}[5, 2], [2, 4.5]]
// NAMED-NEXT: result[1]: tensor<2x2xf32> = {{\[}}[-3, -6], [4, 3.5]]
// NAMED-NEXT: result[2]: tensor<2x2xf32> = {{\[}}[4, -8], [-3, 2]]
// NAMED-NEXT: result[3]: tensor<2x2xf32> = {{\[}}[0.25, -0.5], [-3, 8]]
// NAMED-NEXT: result[4]: tensor<2x2xf32> = {{\[}}[4, 4], [3, 4]]
func.func @named(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>)
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
  %e = tensor.empty() : tensor<2x2xf32>
  %add = linalg.add ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %sub = linalg.sub ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %mul = linalg.mul ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %div = linalg.div ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %max = linalg.max ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  return %add, %sub, %mul, %div, %max
      : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

/// Check signed integer division (truncating and flooring), remainder and max on i32.
// INT:      result[0]: tensor<4xi32> = [3, -3, -2, 0]
// INT-NEXT: result[1]: tensor<4xi32> = [1, -1, 1, 0]
// INT-NEXT: result[2]: tensor<4xi32> = [3, -4, -3, 0]
// INT-NEXT: result[3]: tensor<4xi32> = [7, 2, 9, 5]
func.func @int_ops(%x: tensor<4xi32>, %y: tensor<4xi32>)
    -> (tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>) {
  %e = tensor.empty() : tensor<4xi32>
  %r:4 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id, #id],
                         iterator_types = ["parallel"]}
      ins(%x, %y : tensor<4xi32>, tensor<4xi32>)
      outs(%e, %e, %e, %e : tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>) {
  ^bb0(%a: i32, %b: i32, %o0: i32, %o1: i32, %o2: i32, %o3: i32):
    %q = arith.divsi %a, %b : i32
    %r = arith.remsi %a, %b : i32
    %f = arith.floordivsi %a, %b : i32
    %m = arith.maxsi %a, %b : i32
    linalg.yield %q, %r, %f, %m : i32, i32, i32, i32
  } -> (tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>)
  return %r#0, %r#1, %r#2, %r#3 : tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>
}

/// Check linalg.map with negf, absf, floor and ceil.
// UNARY:      result[0]: tensor<4xf32> = [2.5, 1.5, -0, -1.5]
// UNARY-NEXT: result[1]: tensor<4xf32> = [2.5, 1.5, 0, 1.5]
// UNARY-NEXT: result[2]: tensor<4xf32> = [-3, -2, 0, 1]
// UNARY-NEXT: result[3]: tensor<4xf32> = [-2, -1, 0, 2]
func.func @unary(%x: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %e = tensor.empty() : tensor<4xf32>
  %neg = linalg.map { arith.negf } ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
  %abs = linalg.map { math.absf } ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
  %floor = linalg.map { math.floor } ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
  %ceil = linalg.map { math.ceil } ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
  return %neg, %abs, %floor, %ceil : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
