// The stages of a distributed program, for a column sum of rows split over 2
// processes: sharding annotations (the input split along dim 0, the result
// replicated), upstream sharding propagation, upstream partitioning into the
// per-process (SPMD) function, --autodiff-shard-to-mpi (mpi ops), and the
// calls into the MPI library (MPICH ABI) after --autodiff-lower-to-cpu-mpi.

// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation))' | filecheck %s --check-prefix=PROP
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition))' | filecheck %s --check-prefix=PART
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition),autodiff-shard-to-mpi)' | filecheck %s --check-prefix=MPI
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition),autodiff-lower-to-cpu-mpi)' | filecheck %s --check-prefix=LLVM

shard.grid @mesh(shape = 2)
func.func @sum_rows(%x: tensor<8x3xf64>) -> tensor<3xf64> {
  %s = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<8x3xf64>
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %init = linalg.fill ins(%zero : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%xs : tensor<8x3xf64>) outs(%init : tensor<3xf64>) dimensions = [0]
    (%a: f64, %b: f64) {
      %t = arith.addf %a, %b : f64
      linalg.yield %t : f64
    }
  %rep = shard.sharding @mesh split_axes = [[]] : !shard.sharding
  %rs = shard.shard %r to %rep : tensor<3xf64>
  return %rs : tensor<3xf64>
}

// PROP-LABEL: func.func @sum_rows(%arg0: tensor<8x3xf64>)
// PROP: shard.sharding @mesh split_axes = {{\[\[}}0]]
// PROP: linalg.reduce
// PROP: shard.sharding @mesh split_axes = {{\[\[}}]]

// The partitioned function takes this process's 4 rows and sums the partial sums.
// PART-LABEL: func.func @sum_rows(%arg0: tensor<4x3xf64>) -> tensor<3xf64>
// PART: linalg.reduce ins(%arg0 : tensor<4x3xf64>)
// PART: shard.all_reduce %{{.*}} on @mesh grid_axes = [0] : tensor<3xf64> -> tensor<3xf64>
// PART-NOT: shard.shard

// MPI: module attributes {autodiff.mpi_processes = 2 : i64, dlti.map = #dlti.map<"MPI:Implementation" = "MPICH">}
// MPI-NOT: shard.
// MPI-LABEL: func.func @sum_rows(%arg0: tensor<4x3xf64>)
// The all_reduce over the whole grid uses MPI_COMM_WORLD (no communicator split per call).
// MPI-NOT: mpi.comm_split
// MPI: linalg.copy
// MPI: mpi.comm_rank
// MPI: %[[WORLD:.*]] = mpi.comm_world : !mpi.comm
// MPI-NEXT: mpi.allreduce(%[[BUF:.*]], %[[BUF]], MPI_SUM, %[[WORLD]]) : memref<3xf64>, memref<3xf64>

// LLVM: llvm.func @MPI_Allreduce(!llvm.ptr, !llvm.ptr, i32, i32, i32, i32) -> i32
// LLVM-NOT: mpi.
// LLVM-NOT: shard.
// MPI_COMM_WORLD of MPICH:
// LLVM: llvm.mlir.constant(1140850688 : i64)
// LLVM: llvm.call @MPI_Allreduce
