// jvp, vjp and vmap through the shard dialect's collectives
// (transforms/rules/shard.py): sum is linear, max picks the winning process's
// tangent (the lowest index among ties, an all_reduce min of the candidates),
// all_gather and reduce_scatter transpose to each other, a rotating shift to
// the opposite shift; batching moves the gather/scatter axis past the batch
// dimension. The numbers are checked under mpiexec by test_distributed.py.

// RUN: autodiff-opt %s --autodiff-jvp --autodiff-vjp --autodiff-vmap | filecheck %s

shard.grid @g(shape = 2)
func.func private @f(%x: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %s = shard.all_reduce %x on @g grid_axes = [0] reduction = sum : tensor<2x3xf64> -> tensor<2x3xf64>
  %m = shard.all_reduce %s on @g grid_axes = [0] reduction = max : tensor<2x3xf64> -> tensor<2x3xf64>
  %a = shard.all_gather %m on @g grid_axes = [0] gather_axis = 1 : tensor<2x3xf64> -> tensor<2x6xf64>
  %r = shard.reduce_scatter %a on @g grid_axes = [0] reduction = sum scatter_axis = 1 : tensor<2x6xf64> -> tensor<2x3xf64>
  %h = shard.shift %r on @g grid_axes = [0] shift_axis = 0 offset = 1 rotate : tensor<2x3xf64> -> tensor<2x3xf64>
  return %h : tensor<2x3xf64>
}
func.func @jvp(%x: tensor<2x3xf64>, %t: tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @f} : (tensor<2x3xf64>, tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
  return %0#0, %0#1 : tensor<2x3xf64>, tensor<2x3xf64>
}
func.func @vjp(%x: tensor<2x3xf64>, %c: tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @f} : (tensor<2x3xf64>, tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
  return %0#0, %0#1 : tensor<2x3xf64>, tensor<2x3xf64>
}
func.func @vmap(%x: tensor<5x2x3xf64>) -> tensor<5x2x3xf64> {
  %r = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<5x2x3xf64>) -> tensor<5x2x3xf64>
  return %r : tensor<5x2x3xf64>
}

// CHECK-LABEL: func.func private @f_jvp
// CHECK: %[[TS:.*]] = shard.all_reduce %arg1 on @g grid_axes = [0] :
// CHECK: %[[M:.*]] = shard.all_reduce %{{.*}} reduction =  max
// CHECK: shard.process_linear_index on @g
// CHECK: shard.all_reduce %{{.*}} on @g grid_axes = [0] reduction =  min
// CHECK: arith.cmpf oeq
// CHECK: %[[PICK:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[TS]], %{{.*}} :
// CHECK: shard.all_reduce %[[PICK]] on @g grid_axes = [0] :
// CHECK: shard.all_gather {{.*}} gather_axis = 1
// CHECK: shard.reduce_scatter {{.*}} scatter_axis = 1
// CHECK: shard.shift {{.*}} offset = 1 rotate

// CHECK-LABEL: func.func private @f_bwd
// CHECK: %[[S:.*]] = shard.shift %arg2 on @g grid_axes = [0] shift_axis = 0 offset = -1 rotate
// CHECK: %[[G:.*]] = shard.all_gather %[[S]] on @g grid_axes = [0] gather_axis = 1 : tensor<2x3xf64> -> tensor<2x6xf64>
// CHECK: %[[R:.*]] = shard.reduce_scatter %[[G]] on @g grid_axes = [0] scatter_axis = 1 : tensor<2x6xf64> -> tensor<2x3xf64>
// CHECK: shard.all_reduce %[[R]] on @g grid_axes = [0] :
// CHECK: shard.all_reduce %{{.*}} reduction =  min
// CHECK: return

// CHECK-LABEL: func.func private @f_batched_5_b
// CHECK: shard.all_reduce %arg0 on @g grid_axes = [0] : tensor<5x2x3xf64> -> tensor<5x2x3xf64>
// CHECK: reduction =  max : tensor<5x2x3xf64> -> tensor<5x2x3xf64>
// CHECK: shard.all_gather {{.*}} gather_axis = 2 : tensor<5x2x3xf64> -> tensor<5x2x6xf64>
// CHECK: shard.reduce_scatter {{.*}} scatter_axis = 2 : tensor<5x2x6xf64> -> tensor<5x2x3xf64>
// CHECK: shard.shift {{.*}} shift_axis = 0 offset = 1 rotate : tensor<5x2x3xf64> -> tensor<5x2x3xf64>
