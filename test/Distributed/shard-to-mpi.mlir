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

// -----

// Collectives over part of a 2x2 grid (the front end's meshes of several axes):
// upstream's conversion splits a communicator off MPI_COMM_WORLD for each call;
// the split is made on first use only and kept in a module global, one per
// process group (grid and axes), shared by every helper over that group.
shard.grid @g(shape = 2x2)
func.func @sub_axes(%x: tensor<4xf64>, %y: tensor<2x3xf64>) -> (tensor<4xf64>, tensor<2x6xf64>, tensor<2x12xf64>, tensor<4xf64>) {
  %r = shard.all_reduce %x on @g grid_axes = [1] : tensor<4xf64> -> tensor<4xf64>
  %a = shard.all_gather %y on @g grid_axes = [1] gather_axis = 1 : tensor<2x3xf64> -> tensor<2x6xf64>
  %b = shard.all_gather %y on @g grid_axes = [1, 0] gather_axis = 1 : tensor<2x3xf64> -> tensor<2x12xf64>
  %s = shard.shift %x on @g grid_axes = [0] shift_axis = 0 offset = 1 rotate : tensor<4xf64> -> tensor<4xf64>
  return %r, %a, %b, %s : tensor<4xf64>, tensor<2x6xf64>, tensor<2x12xf64>, tensor<4xf64>
}
// CHECK: memref.global "private" @__autodiff_mpi_comm_g_axes_1 : memref<i64> = dense<0>
// CHECK-LABEL: func.func @sub_axes
// CHECK: call @__autodiff_mpi_all_reduce_sum_g_axes_1_4xf64
// CHECK: call @__autodiff_mpi_all_gather_1_g_axes_1_2x3xf64
// CHECK: call @__autodiff_mpi_all_gather_1_g_axes_1_0_2x3xf64
// CHECK: call @__autodiff_mpi_shift_1_g_axis_0_4xf64
// CHECK: func.func private @__autodiff_mpi_all_reduce_sum_g_axes_1_4xf64({{.*}} attributes {autodiff.mpi_group = "g_axes_1"}
// CHECK: %[[CELL:.*]] = memref.get_global @__autodiff_mpi_comm_g_axes_1 : memref<i64>
// CHECK: %[[HELD:.*]] = memref.load %[[CELL]][]
// CHECK: %[[UNSET:.*]] = arith.cmpi eq, %[[HELD]]
// CHECK: %[[C:.*]] = scf.if %[[UNSET]] -> (i64) {
// CHECK-NEXT: %[[NEW:.*]] = mpi.comm_split
// CHECK-NEXT: %[[I:.*]] = builtin.unrealized_conversion_cast %[[NEW]] : !mpi.comm to i64
// CHECK-NEXT: memref.store %[[I]], %[[CELL]][]
// CHECK: } else {
// CHECK-NEXT: scf.yield %[[HELD]] : i64
// CHECK: %[[COMM:.*]] = builtin.unrealized_conversion_cast %[[C]] : i64 to !mpi.comm
// CHECK-NEXT: mpi.allreduce(%{{.*}}, %{{.*}}, MPI_SUM, %[[COMM]])
// CHECK: func.func private @__autodiff_mpi_all_gather_1_g_axes_1_2x3xf64
// CHECK: memref.get_global @__autodiff_mpi_comm_g_axes_1
// Over the whole grid, its axes in the other order (the gather's block order):
// the world communicator, and the group index row-major over axes [1, 0].
// CHECK: func.func private @__autodiff_mpi_all_gather_1_g_axes_1_0_2x3xf64
// CHECK-NOT: mpi.comm_split
// CHECK: mpi.allreduce(%{{.*}}, %{{.*}}, MPI_BOR, %{{.*}}) : memref<24xi64>
// The shift along grid axis 0 of the 2x2 grid: rank 0 <-> 2, 1 <-> 3.
// CHECK: func.func private @__autodiff_mpi_shift_1_g_axis_0_4xf64
// CHECK: case 0 {
// CHECK-NEXT: mpi.send(%{{.*}}, %{{.*}}, %c2_i32,
// CHECK: case 1 {
// CHECK-NEXT: mpi.send(%{{.*}}, %{{.*}}, %c3_i32,
// LLVM: llvm.mlir.global private @{{.*}}__autodiff_mpi_comm_g_axes_1(0 : i64)
// LLVM-LABEL: llvm.func @sub_axes
// LLVM: llvm.call @MPI_Comm_split
