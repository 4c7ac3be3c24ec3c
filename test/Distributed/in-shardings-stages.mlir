// The stages of jit(f, in_shardings=...) for sum(tanh(x @ w)) and its gradient in w,
// x split over 2 processes by rows, w replicated (Inputs/in_shardings.py):
// the traced (and differentiated) function with sharding annotations on its
// arguments and result, upstream's propagation and partitioning into the
// per-process function, then our lowering to mpi ops.

// RUN: %PYTHON %S/Inputs/in_shardings.py all | filecheck %s --check-prefixes=ANN,PART,GRAD
// RUN: %PYTHON %S/Inputs/in_shardings.py grad | autodiff-opt --autodiff-shard-to-mpi | filecheck %s --check-prefix=MPI

// Each argument annotated for its users, the result replicated; every
// tensor.empty has one user (propagation aborts on one annotated twice).
// ANN-LABEL: // ---- annotated
// ANN: shard.grid @mesh_2(shape = 2)
// ANN-LABEL: func.func @main(%arg0: tensor<3x4xf64>, %arg1: tensor<8x3xf64>) -> tensor<f64>
// ANN: %[[REP:.*]] = shard.sharding @mesh_2 split_axes = {{\[\[}}]]
// ANN: %[[W:.*]] = shard.shard %arg0 to %[[REP]] annotate_for_users : tensor<3x4xf64>
// ANN: %[[ROWS:.*]] = shard.sharding @mesh_2 split_axes = {{\[\[}}0]]
// ANN: %[[X:.*]] = shard.shard %arg1 to %[[ROWS]] annotate_for_users : tensor<8x3xf64>
// ANN: linalg.matmul ins(%[[X]], %[[W]] :
// ANN: %[[R:.*]] = shard.shard %{{.*}} to %{{.*}} : tensor<f64>
// ANN-NEXT: return %[[R]]

// The process's 4 rows; tanh and the partial sum on them; one all_reduce.
// PART-LABEL: // ---- partitioned
// PART: func.func @main(%arg0: tensor<3x4xf64>, %arg1: tensor<4x3xf64>) -> tensor<f64>
// PART-NOT: shard.all_gather
// PART: linalg.matmul ins(%arg1, %arg0 : tensor<4x3xf64>, tensor<3x4xf64>)
// PART: math.tanh
// PART: linalg.reduce ins(%{{.*}} : tensor<4x4xf64>)
// PART: shard.all_reduce %{{.*}} on @mesh_2 grid_axes = [0] : tensor<f64> -> tensor<f64>
// PART-NOT: shard.shard

// Differentiated first, then partitioned: the gradient of w is the all_reduce of
// each process's x_block^T (1 - tanh^2).
// GRAD-LABEL: // ---- grad partitioned
// GRAD: func.func @main(%arg0: tensor<3x4xf64>, %arg1: tensor<4x3xf64>) -> tensor<3x4xf64>
// GRAD-NOT: shard.all_gather
// GRAD: shard.all_reduce %{{.*}} on @mesh_2 grid_axes = [0] : tensor<3x4xf64> -> tensor<3x4xf64>
// GRAD-NOT: shard.all

// MPI: module attributes {autodiff.mpi_processes = 2 : i64
// MPI-NOT: shard.
// MPI: mpi.allreduce(%{{.*}}, %{{.*}}, MPI_SUM, %{{.*}}) : memref<12xf64>, memref<12xf64>
