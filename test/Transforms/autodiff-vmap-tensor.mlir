// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that tensor.extract from a batched tensor at unbatched indices is one rank-reducing
/// extract_slice over the batch dimension.
// CHECK-LABEL: func.func private @f_batched_8_buu(
// CHECK-SAME: %[[T:.*]]: tensor<8x3x4xf32>, %[[I:.*]]: index, %[[J:.*]]: index)
// CHECK: tensor.extract_slice %[[T]][0, %[[I]], %[[J]]] [8, 1, 1] [1, 1, 1] : tensor<8x3x4xf32> to tensor<8xf32>
func.func @f(%t: tensor<3x4xf32>, %i: index, %j: index) -> f32 {
  %0 = tensor.extract %t[%i, %j] : tensor<3x4xf32>
  return %0 : f32
}
func.func @extract(%t: tensor<8x3x4xf32>, %i: index, %j: index) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%t, %i, %j) {fn = @f, in_axes = array<i64: 0, -1, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>, index, index) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that tensor.extract at batched indices is a gather: a generic over the batch whose body
/// extracts at the lane's index.
// CHECK-LABEL: func.func private @f_batched_8_ubu(
// CHECK-SAME: %[[T:.*]]: tensor<3x4xf32>, %[[I:.*]]: tensor<8xindex>, %[[J:.*]]: index)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[I]] : tensor<8xindex>) outs(%{{.*}} : tensor<8xf32>)
// CHECK: ^bb0(%[[II:.*]]: index, %{{.*}}: f32):
// CHECK: tensor.extract %[[T]][%[[II]], %[[J]]] : tensor<3x4xf32>
func.func @f(%t: tensor<3x4xf32>, %i: index, %j: index) -> f32 {
  %0 = tensor.extract %t[%i, %j] : tensor<3x4xf32>
  return %0 : f32
}
func.func @gather(%t: tensor<3x4xf32>, %i: tensor<8xindex>, %j: index) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%t, %i, %j) {fn = @f, in_axes = array<i64: -1, 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<8xindex>, index) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that a gather from a batched tensor adds the lane index (linalg.index 0) in front.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-SAME: %[[T:.*]]: tensor<8x3xf32>, %[[I:.*]]: tensor<8xindex>)
// CHECK: ^bb0(%[[II:.*]]: index, %{{.*}}: f32):
// CHECK: %[[L:.*]] = linalg.index 0 : index
// CHECK: tensor.extract %[[T]][%[[L]], %[[II]]] : tensor<8x3xf32>
func.func @f(%t: tensor<3xf32>, %i: index) -> f32 {
  %0 = tensor.extract %t[%i] : tensor<3xf32>
  return %0 : f32
}
func.func @gather_batched(%t: tensor<8x3xf32>, %i: tensor<8xindex>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%t, %i) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>, tensor<8xindex>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that tensor.insert of a batched scalar at an unbatched index is an insert_slice of the
/// lane values into the destination, broadcast to the batch once.
// CHECK-LABEL: func.func private @f_batched_8_buu(
// CHECK-SAME: %[[S:.*]]: tensor<8xf32>, %[[T:.*]]: tensor<3xf32>, %[[I:.*]]: index)
// CHECK: %[[B:.*]] = linalg.broadcast ins(%[[T]] : tensor<3xf32>) outs(%{{.*}} : tensor<8x3xf32>) dimensions = [0]
// CHECK: tensor.insert_slice %[[S]] into %[[B]][0, %[[I]]] [8, 1] [1, 1] : tensor<8xf32> into tensor<8x3xf32>
func.func @f(%s: f32, %t: tensor<3xf32>, %i: index) -> tensor<3xf32> {
  %0 = tensor.insert %s into %t[%i] : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @insert(%s: tensor<8xf32>, %t: tensor<3xf32>, %i: index) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%s, %t, %i) {fn = @f, in_axes = array<i64: 0, -1, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>, tensor<3xf32>, index) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that tensor.insert at batched indices is a scatter: a loop over the lanes, each
/// inserting into its own row at its own index (one element write per lane).
// CHECK-LABEL: func.func private @f_batched_8_ubb(
// CHECK-SAME: %[[S:.*]]: f32, %[[T:.*]]: tensor<8x3xf32>, %[[I:.*]]: tensor<8xindex>)
// CHECK: %[[R:.*]] = scf.for %[[L:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[T]]) -> (tensor<8x3xf32>)
// CHECK: %[[II:.*]] = tensor.extract %[[I]][%[[L]]] : tensor<8xindex>
// CHECK: %[[NEW:.*]] = tensor.insert %[[S]] into %[[ACC]][%[[L]], %[[II]]] : tensor<8x3xf32>
// CHECK: scf.yield %[[NEW]] : tensor<8x3xf32>
// CHECK: return %[[R]]
func.func @f(%s: f32, %t: tensor<3xf32>, %i: index) -> tensor<3xf32> {
  %0 = tensor.insert %s into %t[%i] : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @scatter(%s: f32, %t: tensor<8x3xf32>, %i: tensor<8xindex>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%s, %t, %i) {fn = @f, in_axes = array<i64: -1, 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (f32, tensor<8x3xf32>, tensor<8xindex>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that extract_slice and insert_slice with static offsets gain a full leading batch
/// dimension.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x4x4xf32>)
// CHECK: %[[S:.*]] = tensor.extract_slice %[[X]][0, 1, 0] [8, 2, 4] [1, 1, 1] : tensor<8x4x4xf32> to tensor<8x2x4xf32>
// CHECK: tensor.insert_slice %[[S]] into %[[X]][0, 0, 0] [8, 2, 4] [1, 1, 1] : tensor<8x2x4xf32> into tensor<8x4x4xf32>
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %s = tensor.extract_slice %x[1, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x4xf32>
  %r = tensor.insert_slice %s into %x[0, 0] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
func.func @slices(%x: tensor<8x4x4xf32>) -> tensor<8x4x4xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  return %0 : tensor<8x4x4xf32>
}

// -----

/// Check that expand_shape and collapse_shape keep the batch dimension as its own group.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<8x3x4xf32> into tensor<8x12xf32>
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [8, 6, 2] : tensor<8x12xf32> into tensor<8x6x2xf32>
func.func @f(%x: tensor<3x4xf32>) -> tensor<6x2xf32> {
  %c = tensor.collapse_shape %x [[0, 1]] : tensor<3x4xf32> into tensor<12xf32>
  %e = tensor.expand_shape %c [[0, 1]] output_shape [6, 2] : tensor<12xf32> into tensor<6x2xf32>
  return %e : tensor<6x2xf32>
}
func.func @reshapes(%x: tensor<8x3x4xf32>) -> tensor<8x6x2xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>) -> tensor<8x6x2xf32>
  return %0 : tensor<8x6x2xf32>
}

// -----

/// Check that tensor.reshape of a batched tensor (static shapes) is a collapse to one row per
/// lane and an expand to the target shape.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<8x3x4xf32> into tensor<8x12xf32>
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2, 3]] output_shape [8, 2, 3, 2] : tensor<8x12xf32> into tensor<8x2x3x2xf32>
// CHECK-NOT: tensor.reshape
func.func @f(%x: tensor<3x4xf32>) -> tensor<2x3x2xf32> {
  %s = arith.constant dense<[2, 3, 2]> : tensor<3xi64>
  %r = tensor.reshape %x(%s) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<2x3x2xf32>
  return %r : tensor<2x3x2xf32>
}
func.func @reshape(%x: tensor<8x3x4xf32>) -> tensor<8x2x3x2xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3x4xf32>) -> tensor<8x2x3x2xf32>
  return %0 : tensor<8x2x3x2xf32>
}

// -----

/// Check that concat of a batched and an unbatched tensor concatenates along the shifted
/// dimension (the unbatched operand is broadcast: every lane needs its own copy).
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8x2x4xf32>, %[[Y:.*]]: tensor<3x4xf32>)
// CHECK: %[[B:.*]] = linalg.broadcast ins(%[[Y]] : tensor<3x4xf32>) outs(%{{.*}} : tensor<8x3x4xf32>) dimensions = [0]
// CHECK: tensor.concat dim(1) %[[X]], %[[B]] : (tensor<8x2x4xf32>, tensor<8x3x4xf32>) -> tensor<8x5x4xf32>
func.func @f(%x: tensor<2x4xf32>, %y: tensor<3x4xf32>) -> tensor<5x4xf32> {
  %0 = tensor.concat dim(0) %x, %y : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>
  return %0 : tensor<5x4xf32>
}
func.func @concat(%x: tensor<8x2x4xf32>, %y: tensor<3x4xf32>) -> tensor<8x5x4xf32> {
  %0 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x2x4xf32>, tensor<3x4xf32>) -> tensor<8x5x4xf32>
  return %0 : tensor<8x5x4xf32>
}

// -----

/// Check that tensor.pad of a batched tensor pads nothing along the batch dimension.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: tensor.pad %{{.*}} low[0, 1] high[0, 2]
// CHECK: tensor.yield
// CHECK: } : tensor<8x3xf32> to tensor<8x6xf32>
func.func @f(%x: tensor<3xf32>) -> tensor<6xf32> {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[1] high[2] {
  ^bb0(%i: index):
    tensor.yield %z : f32
  } : tensor<3xf32> to tensor<6xf32>
  return %p : tensor<6xf32>
}
func.func @pad(%x: tensor<8x3xf32>) -> tensor<8x6xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}

// -----

/// Check that tensor.generate capturing a batched scalar becomes a generic over the batched
/// tensor whose body reads the lane's scalar.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[S:.*]]: tensor<8xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%{{.*}} : tensor<8x4xf32>)
// CHECK-DAG: %[[L:.*]] = linalg.index 0 : index
// CHECK-DAG: %[[I:.*]] = linalg.index 1 : index
// CHECK-DAG: tensor.extract %[[S]][%[[L]]] : tensor<8xf32>
// CHECK-DAG: arith.index_cast %[[I]]
func.func @f(%s: f32) -> tensor<4xf32> {
  %g = tensor.generate {
  ^bb0(%i: index):
    %ii = arith.index_cast %i : index to i32
    %fi = arith.sitofp %ii : i32 to f32
    %v = arith.mulf %fi, %s : f32
    tensor.yield %v : f32
  } : tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func @generate(%s: tensor<8xf32>) -> tensor<8x4xf32> {
  %0 = "autodiff.vmap"(%s) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

/// Check that tensor.from_elements of batched scalars stacks the lanes into a tensor<8x2xf32>
/// (one column per element).
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK: tensor.concat dim(1) %{{.*}}, %{{.*}} : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x2xf32>
func.func @f(%a: f32, %b: f32) -> tensor<2xf32> {
  %t = tensor.from_elements %a, %b : tensor<2xf32>
  return %t : tensor<2xf32>
}
func.func @from_elements(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8x2xf32> {
  %0 = "autodiff.vmap"(%a, %b) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>
}

// -----

/// Check that tensor.splat of a batched scalar broadcasts the lane values.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[S:.*]]: tensor<8xf32>)
// CHECK: linalg.broadcast ins(%[[S]] : tensor<8xf32>) outs(%{{.*}} : tensor<8x3x2xf32>) dimensions = [1, 2]
func.func @f(%s: f32) -> tensor<3x2xf32> {
  %t = tensor.splat %s : tensor<3x2xf32>
  return %t : tensor<3x2xf32>
}
func.func @splat(%s: tensor<8xf32>) -> tensor<8x3x2xf32> {
  %0 = "autodiff.vmap"(%s) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8x3x2xf32>
  return %0 : tensor<8x3x2xf32>
}

// -----

/// Check that a linalg body reading a batched tensor with tensor.extract gets the lane index
/// (linalg.index 0) in front of the element indices.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[X:.*]]: tensor<3xf32>, %[[T:.*]]: tensor<8x3xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[X]] : tensor<3xf32>)
// CHECK: %[[L:.*]] = linalg.index 0 : index
// CHECK: %[[I:.*]] = linalg.index 1 : index
// CHECK: tensor.extract %[[T]][%[[L]], %[[I]]] : tensor<8x3xf32>
func.func @f(%x: tensor<3xf32>, %t: tensor<3xf32>) -> tensor<3xf32> {
  %e = tensor.empty() : tensor<3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%x : tensor<3xf32>) outs(%e : tensor<3xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %v = tensor.extract %t[%i] : tensor<3xf32>
    %m = arith.mulf %a, %v : f32
    linalg.yield %m : f32
  } -> tensor<3xf32>
  return %r : tensor<3xf32>
}
func.func @body_reads_batched_tensor(%x: tensor<3xf32>, %t: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x, %t) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that collapsing to and expanding from a 0-d tensor puts the unit dimensions in the
/// batch dimension's group (canonicalization then folds the pair into one collapse).
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x1x1xf32>)
// CHECK: %[[C:.*]] = tensor.collapse_shape %[[X]] {{\[}}[0], [1, 2]] : tensor<8x1x1xf32> into tensor<8x1xf32>
// CHECK: return %[[C]]
func.func @f(%x: tensor<1x1xf32>) -> tensor<1xf32> {
  %c = tensor.collapse_shape %x [] : tensor<1x1xf32> into tensor<f32>
  %e = tensor.expand_shape %c [] output_shape [1] : tensor<f32> into tensor<1xf32>
  return %e : tensor<1xf32>
}
func.func @zero_d(%x: tensor<8x1x1xf32>) -> tensor<8x1xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x1x1xf32>) -> tensor<8x1xf32>
  return %0 : tensor<8x1xf32>
}

// -----

/// Check that extract_slice at a batched offset is a gather: a generic over (lane, element) whose
/// body extracts at the lane's offset plus the element index.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[T:.*]]: tensor<3x4xf32>, %[[O:.*]]: tensor<8xindex>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[O]] : tensor<8xindex>) outs(%{{.*}} : tensor<8x2xf32>)
// CHECK: ^bb0(%[[OL:.*]]: index, %{{.*}}: f32):
// CHECK: %[[I:.*]] = linalg.index 1 : index
// CHECK: %[[J:.*]] = arith.addi %[[OL]], %[[I]] : index
// CHECK: tensor.extract %[[T]][%{{.*}}, %[[J]]] : tensor<3x4xf32>
func.func @f(%t: tensor<3x4xf32>, %o: index) -> tensor<2xf32> {
  %s = tensor.extract_slice %t[1, %o] [1, 2] [1, 1] : tensor<3x4xf32> to tensor<2xf32>
  return %s : tensor<2xf32>
}
func.func @slice_gather(%t: tensor<3x4xf32>, %o: tensor<8xindex>) -> tensor<8x2xf32> {
  %0 = "autodiff.vmap"(%t, %o) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<8xindex>) -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>
}

// -----

/// Check that a rank-reducing extract_slice at a batched offset that keeps a unit dimension (its
/// sizes are all 1, its result tensor<1xf32>) is a gather: lane l's one element is t[2, o_l].
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[T:.*]]: tensor<3x4xf32>, %[[O:.*]]: tensor<8xindex>)
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[O]] : tensor<8xindex>) outs(%{{.*}} : tensor<8x1xf32>)
// CHECK: ^bb0(%[[OL:.*]]: index, %{{.*}}: f32):
// CHECK: tensor.extract %[[T]][%[[C2]], %[[OL]]] : tensor<3x4xf32>
func.func @f(%t: tensor<3x4xf32>, %o: index) -> tensor<1xf32> {
  %s = tensor.extract_slice %t[2, %o] [1, 1] [1, 1] : tensor<3x4xf32> to tensor<1xf32>
  return %s : tensor<1xf32>
}
func.func @slice_gather_unit_kept(%t: tensor<3x4xf32>, %o: tensor<8xindex>) -> tensor<8x1xf32> {
  %0 = "autodiff.vmap"(%t, %o) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<8xindex>) -> tensor<8x1xf32>
  return %0 : tensor<8x1xf32>
}

// -----

/// Check that insert_slice at a batched offset is a loop over the lanes: lane l inserts its row of
/// the batched source at its own offset into row l of the (broadcast) destination, with the lane
/// dimension dropped from both.
// CHECK-LABEL: func.func private @f_batched_8_ubb(
// CHECK-SAME: %[[D:.*]]: tensor<3x4xf32>, %[[S:.*]]: tensor<8x2xf32>, %[[O:.*]]: tensor<8xindex>)
// CHECK: %[[DB:.*]] = linalg.broadcast ins(%[[D]] : tensor<3x4xf32>) outs(%{{.*}} : tensor<8x3x4xf32>) dimensions = [0]
// CHECK: %[[R:.*]] = scf.for %[[L:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[DB]]) -> (tensor<8x3x4xf32>)
// CHECK: %[[SL:.*]] = tensor.extract_slice %[[S]][%[[L]], 0] [1, 2] [1, 1] : tensor<8x2xf32> to tensor<2xf32>
// CHECK: %[[OL:.*]] = tensor.extract %[[O]][%[[L]]] : tensor<8xindex>
// CHECK: %[[NEW:.*]] = tensor.insert_slice %[[SL]] into %[[ACC]][%[[L]], 1, %[[OL]]] [1, 1, 2] [1, 1, 1] : tensor<2xf32> into tensor<8x3x4xf32>
// CHECK: scf.yield %[[NEW]] : tensor<8x3x4xf32>
// CHECK: return %[[R]] : tensor<8x3x4xf32>
func.func @f(%d: tensor<3x4xf32>, %s: tensor<2xf32>, %o: index) -> tensor<3x4xf32> {
  %r = tensor.insert_slice %s into %d[1, %o] [1, 2] [1, 1] : tensor<2xf32> into tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}
func.func @slice_scatter(%d: tensor<3x4xf32>, %s: tensor<8x2xf32>, %o: tensor<8xindex>) -> tensor<8x3x4xf32> {
  %0 = "autodiff.vmap"(%d, %s, %o) {fn = @f, in_axes = array<i64: -1, 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3x4xf32>, tensor<8x2xf32>, tensor<8xindex>) -> tensor<8x3x4xf32>
  return %0 : tensor<8x3x4xf32>
}

// -----

/// Check that tensor.pad with a batched padding value pads the broadcast source and reads the
/// padding value at the lane, the region's first index argument.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[A:.*]]: tensor<3xf32>, %[[V:.*]]: tensor<8xf32>)
// CHECK: %[[AB:.*]] = linalg.broadcast ins(%[[A]] : tensor<3xf32>)
// CHECK: tensor.pad %[[AB]] low[0, 2] high[0, 1] {
// CHECK: ^bb0(%[[L:.*]]: index, %{{.*}}: index):
// CHECK: %[[P:.*]] = tensor.extract %[[V]][%[[L]]] : tensor<8xf32>
// CHECK: tensor.yield %[[P]] : f32
// CHECK: } : tensor<8x3xf32> to tensor<8x6xf32>
func.func @f(%a: tensor<3xf32>, %v: f32) -> tensor<6xf32> {
  %r = tensor.pad %a low[2] high[1] {
  ^bb0(%i: index):
    tensor.yield %v : f32
  } : tensor<3xf32> to tensor<6xf32>
  return %r : tensor<6xf32>
}
func.func @pad_batched_value(%a: tensor<3xf32>, %v: tensor<8xf32>) -> tensor<8x6xf32> {
  %0 = "autodiff.vmap"(%a, %v) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<3xf32>, tensor<8xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}
