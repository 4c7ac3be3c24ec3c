// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that matmul with both operands batched becomes linalg.batch_matmul.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-SAME: %[[A:.*]]: tensor<8x3x4xf32>, %[[B:.*]]: tensor<8x4x2xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8x3x2xf32>
// CHECK: %[[F:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<8x3x2xf32>)
// CHECK: %[[R:.*]] = linalg.batch_matmul ins(%[[A]], %[[B]] : tensor<8x3x4xf32>, tensor<8x4x2xf32>) outs(%[[F]] : tensor<8x3x2xf32>)
// CHECK: return %[[R]]
func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x2xf32>) -> tensor<3x2xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x2xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3x2xf32>) -> tensor<3x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<4x2xf32>) outs(%f : tensor<3x2xf32>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}
func.func @matmul_both(%a: tensor<8x3x4xf32>, %b: tensor<8x4x2xf32>) -> tensor<8x3x2xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>, tensor<8x4x2xf32>) -> tensor<8x3x2xf32>
  return %0 : tensor<8x3x2xf32>
}

// -----

/// Check that matmul with only the left operand batched folds the batch into its rows (JAX's
/// dot_general rule): one 2-d matmul of (8*3)x4 by 4x2, and the weights are not broadcast.
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[A:.*]]: tensor<8x3x4xf32>, %[[B:.*]]: tensor<4x2xf32>)
// CHECK-NOT: linalg.broadcast
// CHECK-DAG: %[[FA:.*]] = tensor.collapse_shape %[[A]] {{\[}}[0, 1], [2]] : tensor<8x3x4xf32> into tensor<24x4xf32>
// CHECK-DAG: %[[FI:.*]] = linalg.fill {{.*}} -> tensor<24x2xf32>
// CHECK: %[[P:.*]] = linalg.matmul ins(%[[FA]], %[[B]] : tensor<24x4xf32>, tensor<4x2xf32>) outs(%[[FI]] : tensor<24x2xf32>)
// CHECK: %[[R:.*]] = tensor.expand_shape %[[P]] {{\[}}[0, 1], [2]] output_shape [8, 3, 2] : tensor<24x2xf32> into tensor<8x3x2xf32>
// CHECK: return %[[R]]
func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x2xf32>) -> tensor<3x2xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x2xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3x2xf32>) -> tensor<3x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<4x2xf32>) outs(%f : tensor<3x2xf32>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}
func.func @matmul_lhs(%a: tensor<8x3x4xf32>, %b: tensor<4x2xf32>) -> tensor<8x3x2xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>, tensor<4x2xf32>) -> tensor<8x3x2xf32>
  return %0 : tensor<8x3x2xf32>
}

// -----

/// Check that matmul with only the right operand batched (at axis 1) transposes it at the
/// boundary and contracts without broadcasting the left operand.
// CHECK-DAG: #[[LHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
// CHECK-DAG: #[[RHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
// CHECK-LABEL: func.func @matmul_rhs(
// CHECK: linalg.transpose {{.*}} permutation = [1, 0, 2]
// CHECK: call @f_batched_8_ub(
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-NOT: linalg.broadcast
// CHECK: linalg.generic {indexing_maps = [#[[LHS]], #[[RHS]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x2xf32>) -> tensor<3x2xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x2xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3x2xf32>) -> tensor<3x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<4x2xf32>) outs(%f : tensor<3x2xf32>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}
func.func @matmul_rhs(%a: tensor<3x4xf32>, %b: tensor<4x8x2xf32>) -> tensor<8x3x2xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: -1, 1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<4x8x2xf32>) -> tensor<8x3x2xf32>
  return %0 : tensor<8x3x2xf32>
}

// -----

/// Check that batch_matmul with both operands batched becomes a generic contraction with two
/// leading parallel batch loops.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x2x3x4xf32>, tensor<8x2x4x5xf32>) outs(%{{.*}} : tensor<8x2x3x5xf32>)
func.func @f(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3x5xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%f : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  return %r : tensor<2x3x5xf32>
}
func.func @bmm(%a: tensor<8x2x3x4xf32>, %b: tensor<8x2x4x5xf32>) -> tensor<8x2x3x5xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x2x3x4xf32>, tensor<8x2x4x5xf32>) -> tensor<8x2x3x5xf32>
  return %0 : tensor<8x2x3x5xf32>
}

// -----

/// Check that matvec with a batched vector and unbatched matrix is a contraction in which the
/// matrix does not index the batch loop.
// CHECK-DAG: #[[MAT:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[VEC:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK: linalg.generic {indexing_maps = [#[[MAT]], #[[VEC]], #{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]}
func.func @f(%a: tensor<3x4xf32>, %x: tensor<4xf32>) -> tensor<3xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  %r = linalg.matvec ins(%a, %x : tensor<3x4xf32>, tensor<4xf32>) outs(%f : tensor<3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
func.func @matvec(%a: tensor<3x4xf32>, %x: tensor<8x4xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%a, %x) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<8x4xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that dot of two batched vectors reduces per lane: the batch loop is parallel, the dot
/// loop a reduction.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} outs(%{{.*}} : tensor<8xf32>)
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.dot ins(%x, %y : tensor<4xf32>, tensor<4xf32>) outs(%f : tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
func.func @dot(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that a linalg.generic gains one leading parallel loop: batched operands index it,
/// unbatched ones keep their maps, and linalg.index in the body is shifted by one.
// CHECK-DAG: #[[B:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[U:.*]] = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-DAG: #[[R:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8x3x4xf32>, %[[W:.*]]: tensor<4xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[B]], #[[U]], #[[R]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[X]], %[[W]] : tensor<8x3x4xf32>, tensor<4xf32>)
// CHECK: linalg.index 2 : index
func.func @f(%x: tensor<3x4xf32>, %w: tensor<4xf32>) -> tensor<3xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x, %w : tensor<3x4xf32>, tensor<4xf32>) outs(%f : tensor<3xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i32
    %jf = arith.sitofp %ji : i32 to f32
    %m = arith.mulf %a, %b : f32
    %n = arith.mulf %m, %jf : f32
    %s = arith.addf %n, %o : f32
    linalg.yield %s : f32
  } -> tensor<3xf32>
  return %r : tensor<3xf32>
}
func.func @generic(%x: tensor<8x3x4xf32>, %w: tensor<4xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x, %w) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>, tensor<4xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that a batched scalar captured by a linalg.generic body is read per lane with
/// tensor.extract at linalg.index 0.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[X:.*]]: tensor<4xf32>, %[[S:.*]]: tensor<8xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}} ins(%[[X]] : tensor<4xf32>)
// CHECK: %[[L:.*]] = linalg.index 0 : index
// CHECK: %[[V:.*]] = tensor.extract %[[S]][%[[L]]] : tensor<8xf32>
// CHECK: arith.mulf %{{.*}}, %[[V]]
func.func @f(%x: tensor<4xf32>, %s: f32) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %s : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func @capture(%x: tensor<4xf32>, %s: tensor<8xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x, %s) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<4xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that linalg.reduce over a batched input stays a reduce with its dimensions shifted
/// past the batch dimension (the batch dimension stays parallel).
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x3x4xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8x4xf32>
// CHECK: %[[F:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<8x4xf32>)
// CHECK: linalg.reduce ins(%[[X]] : tensor<8x3x4xf32>) outs(%[[F]] : tensor<8x4xf32>) dimensions = [1]
func.func @f(%x: tensor<3x4xf32>) -> tensor<4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.reduce ins(%x : tensor<3x4xf32>) outs(%f : tensor<4xf32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<4xf32>
}
func.func @reduce(%x: tensor<8x3x4xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that transpose and broadcast of batched inputs stay named ops with the permutation and
/// dimensions shifted past the batch dimension.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: linalg.transpose ins(%{{.*}} : tensor<8x3x4xf32>) outs(%{{.*}} : tensor<8x4x3xf32>) permutation = [0, 2, 1]
// CHECK: linalg.broadcast ins(%{{.*}} : tensor<8x4x3xf32>) outs(%{{.*}} : tensor<8x4x5x3xf32>) dimensions = [2]
func.func @f(%x: tensor<3x4xf32>) -> tensor<4x5x3xf32> {
  %e = tensor.empty() : tensor<4x3xf32>
  %t = linalg.transpose ins(%x : tensor<3x4xf32>) outs(%e : tensor<4x3xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<4x5x3xf32>
  %b = linalg.broadcast ins(%t : tensor<4x3xf32>) outs(%e2 : tensor<4x5x3xf32>) dimensions = [1]
  return %b : tensor<4x5x3xf32>
}
func.func @transpose_broadcast(%x: tensor<8x3x4xf32>) -> tensor<8x4x5x3xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>) -> tensor<8x4x5x3xf32>
  return %0 : tensor<8x4x5x3xf32>
}

// -----

/// Check that filling with a batched scalar broadcasts the lane values along the tensor's
/// dimensions, and a copy of a batched tensor stays a copy.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-SAME: %[[S:.*]]: tensor<8xf32>, %[[X:.*]]: tensor<8x3xf32>)
// CHECK: linalg.broadcast ins(%[[S]] : tensor<8xf32>) outs(%{{.*}} : tensor<8x3xf32>) dimensions = [1]
// CHECK: linalg.copy ins(%[[X]] : tensor<8x3xf32>)
func.func @f(%s: f32, %x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %e = tensor.empty() : tensor<3xf32>
  %f = linalg.fill ins(%s : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  %c = linalg.copy ins(%x : tensor<3xf32>) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  return %f, %c : tensor<3xf32>, tensor<3xf32>
}
func.func @fill_copy(%s: tensor<8xf32>, %x: tensor<8x3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>) {
  %0:2 = "autodiff.vmap"(%s, %x) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0, 0>, randomness = "error"} : (tensor<8xf32>, tensor<8x3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>)
  return %0#0, %0#1 : tensor<8x3xf32>, tensor<8x3xf32>
}

// -----

/// Check that linalg.map with a batched and an unbatched input becomes a generic in which the
/// unbatched input does not index the batch loop.
// CHECK-DAG: #[[U:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-NOT: linalg.broadcast
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[U]], #{{.*}}], iterator_types = ["parallel", "parallel"]}
// CHECK: math.atan2
func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %e = tensor.empty() : tensor<3xf32>
  %r = linalg.map ins(%x, %y : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>)
    (%a: f32, %b: f32, %o: f32) {
      %t = math.atan2 %a, %b : f32
      linalg.yield %t : f32
    }
  return %r : tensor<3xf32>
}
func.func @map(%x: tensor<8x3xf32>, %y: tensor<3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>, tensor<3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that a matmul with a transposed right operand (custom indexing_maps) is batched as a
/// generic contraction with those maps, not as a batch_matmul.
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[BT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-NOT: linalg.batch_matmul
// CHECK: linalg.generic {indexing_maps = [#[[A]], #[[BT]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
func.func @f(%a: tensor<3x4xf32>, %b: tensor<2x4xf32>) -> tensor<3x2xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x2xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<3x2xf32>) -> tensor<3x2xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<3x4xf32>, tensor<2x4xf32>) outs(%f : tensor<3x2xf32>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}
func.func @matmul_transposed_b(%a: tensor<8x3x4xf32>, %b: tensor<8x2x4xf32>) -> tensor<8x3x2xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>, tensor<8x2x4xf32>) -> tensor<8x3x2xf32>
  return %0 : tensor<8x3x2xf32>
}
