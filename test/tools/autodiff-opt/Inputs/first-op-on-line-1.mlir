func.func @a(%s: i64) -> tensor<4xf32> { %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>  return %r : tensor<4xf32> }
func.func @b() {
  return
}
