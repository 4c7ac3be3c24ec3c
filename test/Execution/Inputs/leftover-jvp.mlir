// An autodiff op that no transform pass has removed.
func.func private @square(%x: f32) -> f32 {
  %y = arith.mulf %x, %x : f32
  return %y : f32
}

func.func @main(%x: f32, %t: f32) -> (f32, f32) {
  %r:2 = "autodiff.jvp"(%x, %t) {fn = @square} : (f32, f32) -> (f32, f32)
  return %r#0, %r#1 : f32, f32
}
