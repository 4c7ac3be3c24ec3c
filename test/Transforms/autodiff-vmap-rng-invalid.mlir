// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-functionalize-rng --autodiff-vmap

/// Check that randomness = "error" still rejects a functionalized draw, naming it.
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{autodiff-vmap: random op 'autodiff.philox' (a random draw, e.g. ad.random.uniform) under vmap with randomness = "error" is not supported; pass randomness="same" or "different" to vmap}}
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %0 = arith.addf %x, %r : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
