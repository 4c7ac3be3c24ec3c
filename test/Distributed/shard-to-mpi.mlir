// --autodiff-shard-to-mpi on the collectives MLIR 22's convert-shard-to-mpi
// does not lower (all_gather, reduce_scatter, shift) and on an all_reduce of
// a 2-D tensor (its mpi-to-LLVM lowering counts only the first dimension).

// RUN: autodiff-opt %s --split-input-file --autodiff-shard-to-mpi | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-shard-to-mpi --inline | filecheck %s --check-prefix=INL
// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu-mpi | filecheck %s --check-prefix=LLVM

shard.grid @g(shape = 2)
func.func @psum2d(%x: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %r = shard.all_reduce %x on @g grid_axes = [0] reduction = max : tensor<2x3xf64> -> tensor<2x3xf64>
  return %r : tensor<2x3xf64>
}
// CHECK-LABEL: func.func @psum2d
// CHECK: call @__autodiff_mpi_all_reduce_max_g_2x3xf64
// CHECK: func.func private @__autodiff_mpi_all_reduce_max_g_2x3xf64
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1]] : tensor<2x3xf64> into tensor<6xf64>
// CHECK: mpi.allreduce(%[[B:.*]], %[[B]], MPI_MAX, %{{.*}}) : memref<6xf64>, memref<6xf64>
// CHECK: tensor.expand_shape
// LLVM-LABEL: llvm.func @psum2d
// LLVM-NOT: mpi.
// Count: 6 elements.
// LLVM: llvm.mlir.constant(6 : index)

// -----

// all_gather: each process's block ORed into zeros (as bits), then all_reduce.
shard.grid @g(shape = 2)
func.func @gather(%x: tensor<2x3xf32>) -> tensor<2x6xf32> {
  %r = shard.all_gather %x on @g grid_axes = [0] gather_axis = 1 : tensor<2x3xf32> -> tensor<2x6xf32>
  return %r : tensor<2x6xf32>
}
// INL-LABEL: func.func @gather
// INL: %[[W:.*]] = mpi.comm_world
// INL: %{{.*}}, %[[RANK:.*]] = mpi.comm_rank(%[[W]])
// INL: arith.bitcast %arg0 : tensor<2x3xf32> to tensor<2x3xi32>
// INL: tensor.insert_slice %{{.*}} into %{{.*}}[0, %{{.*}}] [2, 3] [1, 1] : tensor<2x3xi32> into tensor<2x6xi32>
// INL: mpi.allreduce(%{{.*}}, %{{.*}}, MPI_BOR, %{{.*}}) : memref<12xi32>, memref<12xi32>
// INL: arith.bitcast %{{.*}} : tensor<2x6xi32> to tensor<2x6xf32>

// -----

// reduce_scatter: all_reduce, then this process's block.
shard.grid @g(shape = 2)
func.func @scatter(%x: tensor<4xf64>) -> tensor<2xf64> {
  %r = shard.reduce_scatter %x on @g grid_axes = [0] scatter_axis = 0 : tensor<4xf64> -> tensor<2xf64>
  return %r : tensor<2xf64>
}
// INL-LABEL: func.func @scatter
// INL: mpi.allreduce(%{{.*}}, %{{.*}}, MPI_SUM, %{{.*}}) : memref<4xf64>, memref<4xf64>
// INL: tensor.extract_slice %{{.*}}[%{{.*}}] [2] [1] : tensor<4xf64> to tensor<2xf64>

// -----

// shift (rotate by 1 over 3 processes): process 0 sends first, 1 and 2 receive first.
shard.grid @g(shape = 3)
func.func @shift(%x: tensor<2xf64>) -> tensor<2xf64> {
  %r = shard.shift %x on @g grid_axes = [0] shift_axis = 0 offset = 1 rotate : tensor<2xf64> -> tensor<2xf64>
  return %r : tensor<2xf64>
}
// INL-LABEL: func.func @shift
// INL: scf.index_switch
// INL: case 0 {
// INL-NEXT: mpi.send
// INL-NEXT: mpi.recv
// INL: case 1 {
// INL-NEXT: mpi.recv
// INL-NEXT: mpi.send
// INL: case 2 {
// INL-NEXT: mpi.recv
// INL-NEXT: mpi.send
// LLVM-LABEL: llvm.func @shift
// LLVM: llvm.call @MPI_Send
// LLVM: llvm.call @MPI_Recv
