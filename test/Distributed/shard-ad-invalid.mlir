// Collectives without a derivative rule are diagnostics naming the op.

// RUN: autodiff-opt %s --split-input-file --autodiff-jvp --verify-diagnostics

shard.grid @g(shape = 2)
func.func private @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  // expected-error @+1 {{'shard.all_reduce' with reduction product has no derivative rule (sum, max and min have)}}
  %r = shard.all_reduce %x on @g grid_axes = [0] reduction = product : tensor<3xf64> -> tensor<3xf64>
  return %r : tensor<3xf64>
}
func.func @jvp(%x: tensor<3xf64>, %t: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

shard.grid @g(shape = 2)
func.func private @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  // expected-error @+1 {{'shard.shift' without rotate has no derivative rule (the rotating shift has)}}
  %r = shard.shift %x on @g grid_axes = [0] shift_axis = 0 offset = 1 : tensor<3xf64> -> tensor<3xf64>
  return %r : tensor<3xf64>
}
func.func @jvp(%x: tensor<3xf64>, %t: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}
