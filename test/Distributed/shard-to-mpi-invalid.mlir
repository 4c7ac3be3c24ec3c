// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-shard-to-mpi

shard.grid @g(shape = 2)
func.func @no_rotate(%x: tensor<2xf64>) -> tensor<2xf64> {
  // expected-error @+1 {{only rotating shard.shift is supported}}
  %r = shard.shift %x on @g grid_axes = [0] shift_axis = 0 offset = 1 : tensor<2xf64> -> tensor<2xf64>
  return %r : tensor<2xf64>
}

// -----

shard.grid @g(shape = 2)
func.func @f16_sum(%x: tensor<4xf16>) -> tensor<4xf16> {
  // expected-error @+1 {{'shard.all_reduce' of f16 elements is not supported (element types: f32, f64, i16, i32, i64, i8)}}
  %r = shard.all_reduce %x on @g grid_axes = [0] : tensor<4xf16> -> tensor<4xf16>
  return %r : tensor<4xf16>
}

// -----

shard.grid @g(shape = 2)
func.func @all_to_all(%x: tensor<4xf64>) -> tensor<4xf64> {
  // expected-error @+2 {{failed to legalize operation 'shard.all_to_all'}}
  // expected-error @+1 {{autodiff-shard-to-mpi: 'shard.all_to_all' has no lowering to mpi ops}}
  %r = shard.all_to_all %x on @g grid_axes = [0] split_axis = 0 concat_axis = 0 : tensor<4xf64> -> tensor<4xf64>
  return %r : tensor<4xf64>
}
