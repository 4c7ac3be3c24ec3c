// RUN: autodiff-run %s --entry f64_math --arg 1 --arg 10 --arg 2 --arg 0.5 | filecheck %s --match-full-lines --check-prefix=F64
// RUN: autodiff-run %s --entry f32_math --arg '[1, 2, 0.5]' | filecheck %s --match-full-lines --check-prefix=F32
// RUN: autodiff-run %s --entry powers --arg '[2, 3, 0.5]' --arg '[10, 2, -1]' | filecheck %s --match-full-lines --check-prefix=POW

// Math functions against values from tables (e = 2.718281828459045...,
// ln 10 = 2.302585092994046..., sqrt 2 = 1.4142135623730951..., tanh(1/2)
// = 0.46211715726000974..., sin(1/2) = 0.479425538604203..., atan 1 = pi/4
// = 0.7853981633974483..., erf 1 = 0.8427007929497149...). f64 prints 12
// significant digits, f32 6.

/// Check f64 math functions on scalars.
// F64:      result[0]: f64 = 2.71828182846
// F64-NEXT: result[1]: f64 = 2.30258509299
// F64-NEXT: result[2]: f64 = 1.41421356237
// F64-NEXT: result[3]: f64 = 0.46211715726
// F64-NEXT: result[4]: f64 = 0.479425538604
// F64-NEXT: result[5]: f64 = 0.785398163397
// F64-NEXT: result[6]: f64 = 0.84270079295
// F64-NEXT: result[7]: f64 = 1
func.func @f64_math(%one: f64, %ten: f64, %two: f64, %half: f64)
    -> (f64, f64, f64, f64, f64, f64, f64, f64) {
  %e = math.exp %one : f64
  %ln10 = math.log %ten : f64
  %sqrt2 = math.sqrt %two : f64
  %th = math.tanh %half : f64
  %s = math.sin %half : f64
  %at = math.atan %one : f64
  %erf = math.erf %one : f64
  // cos^2 + sin^2 of the same angle
  %c = math.cos %two : f64
  %s2 = math.sin %two : f64
  %cc = arith.mulf %c, %c : f64
  %ss = arith.mulf %s2, %s2 : f64
  %pyth = arith.addf %cc, %ss : f64
  return %e, %ln10, %sqrt2, %th, %s, %at, %erf, %pyth : f64, f64, f64, f64, f64, f64, f64, f64
}

/// Check f32 exp, tanh, sqrt and log inside a linalg.generic over a tensor.
// F32:      result[0]: tensor<3xf32> = [2.71828, 7.38906, 1.64872]
// F32-NEXT: result[1]: tensor<3xf32> = [0.761594, 0.964028, 0.462117]
// F32-NEXT: result[2]: tensor<3xf32> = [1, 1.41421, 0.707107]
// F32-NEXT: result[3]: tensor<3xf32> = [0, 0.693147, -0.693147]
#id = affine_map<(i) -> (i)>
func.func @f32_math(%x: tensor<3xf32>)
    -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %e = tensor.empty() : tensor<3xf32>
  %r:4 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<3xf32>) outs(%e, %e, %e, %e : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  ^bb0(%a: f32, %o0: f32, %o1: f32, %o2: f32, %o3: f32):
    %exp = math.exp %a : f32
    %tanh = math.tanh %a : f32
    %sqrt = math.sqrt %a : f32
    %log = math.log %a : f32
    linalg.yield %exp, %tanh, %sqrt, %log : f32, f32, f32, f32
  } -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return %r#0, %r#1, %r#2, %r#3 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

/// Check math.powf and math.fpowi: 2^10, 3^2, 0.5^-1.
// POW:      result[0]: tensor<3xf32> = [1024, 9, 2]
// POW-NEXT: result[1]: tensor<3xf32> = [1024, 9, 2]
func.func @powers(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %e = tensor.empty() : tensor<3xf32>
  %r:2 = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<3xf32>, tensor<3xf32>) outs(%e, %e : tensor<3xf32>, tensor<3xf32>) {
  ^bb0(%a: f32, %b: f32, %o0: f32, %o1: f32):
    %p = math.powf %a, %b : f32
    %n = arith.fptosi %b : f32 to i32
    %q = math.fpowi %a, %n : f32, i32
    linalg.yield %p, %q : f32, f32
  } -> (tensor<3xf32>, tensor<3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<3xf32>
}
