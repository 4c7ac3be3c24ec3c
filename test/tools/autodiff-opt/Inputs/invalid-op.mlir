// An input with one invalid op (philox without its offset) on line 4.
// Used by tests that need a failing input; not a test itself.
func.func @invalid(%seed: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
