// A malformed expected-error-re: the regex block never closes.
func.func @f(%seed: i64) -> tensor<4xf32> {
  // expected-error-re @+1 {{op expects {{[0-9]+ operands}}
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
