// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vmap | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that scf.for with a batched carry stays one loop: the batched carry gets the batch
/// dimension and the carry that depends on nothing batched stays unbatched.
// CHECK-LABEL: func.func private @f_batched_8_bu(
// CHECK-SAME: %[[X:.*]]: tensor<8x3xf32>, %[[Y:.*]]: tensor<3xf32>)
// CHECK: %[[R:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[X]], %{{.*}} = %[[Y]]) -> (tensor<8x3xf32>, tensor<3xf32>)
// CHECK-NOT: scf.for
// CHECK: return %[[R]]#0, %[[R]]#1 : tensor<8x3xf32>, tensor<3xf32>
func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r:2 = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %x, %b = %y) -> (tensor<3xf32>, tensor<3xf32>) {
    %m = arith.mulf %a, %b : tensor<3xf32>
    %n = arith.addf %b, %b : tensor<3xf32>
    scf.yield %m, %n : tensor<3xf32>, tensor<3xf32>
  }
  return %r#0, %r#1 : tensor<3xf32>, tensor<3xf32>
}
func.func @for_carries(%x: tensor<8x3xf32>, %y: tensor<3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>) {
  %0:2 = "autodiff.vmap"(%x, %y) {fn = @f, in_axes = array<i64: 0, -1>, out_axes = array<i64: 0, 0>, randomness = "error"} : (tensor<8x3xf32>, tensor<3xf32>) -> (tensor<8x3xf32>, tensor<8x3xf32>)
  return %0#0, %0#1 : tensor<8x3xf32>, tensor<8x3xf32>
}

// -----

/// Check that an unbatched carry that becomes batched inside the loop (it accumulates a batched
/// value) is batched from the start: its initial value is re-created batched, not broadcast.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x3xf32>)
// CHECK: %[[Z:.*]] = arith.constant dense<0.000000e+00> : tensor<8x3xf32>
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (tensor<8x3xf32>)
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %z = arith.constant dense<0.0> : tensor<3xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %z) -> (tensor<3xf32>) {
    %n = arith.addf %acc, %x : tensor<3xf32>
    scf.yield %n : tensor<3xf32>
  }
  return %r : tensor<3xf32>
}
func.func @for_accumulate(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that scf.if with an unbatched predicate stays an if whose results are batched.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK-SAME: %[[P:.*]]: i1, %[[X:.*]]: tensor<8x3xf32>)
// CHECK: scf.if %[[P]] -> (tensor<8x3xf32>)
// CHECK: math.exp
// CHECK: } else {
// CHECK: arith.negf
func.func @f(%p: i1, %x: tensor<3xf32>) -> tensor<3xf32> {
  %r = scf.if %p -> (tensor<3xf32>) {
    %e = math.exp %x : tensor<3xf32>
    scf.yield %e : tensor<3xf32>
  } else {
    %n = arith.negf %x : tensor<3xf32>
    scf.yield %n : tensor<3xf32>
  }
  return %r : tensor<3xf32>
}
func.func @if_unbatched_pred(%p: i1, %x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%p, %x) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (i1, tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that scf.if with a batched predicate evaluates both branches and selects per lane.
// CHECK-LABEL: func.func private @f_batched_8_bb(
// CHECK-SAME: %[[P:.*]]: tensor<8xi1>, %[[X:.*]]: tensor<8x3xf32>)
// CHECK-NOT: scf.if
// CHECK: %[[E:.*]] = linalg.generic
// CHECK: math.exp
// CHECK: %[[N:.*]] = linalg.generic
// CHECK: arith.negf
// CHECK: linalg.generic {{.*}} ins(%[[P]], %[[E]], %[[N]] : tensor<8xi1>, tensor<8x3xf32>, tensor<8x3xf32>)
// CHECK: arith.select
func.func @f(%p: i1, %x: tensor<3xf32>) -> tensor<3xf32> {
  %r = scf.if %p -> (tensor<3xf32>) {
    %e = math.exp %x : tensor<3xf32>
    scf.yield %e : tensor<3xf32>
  } else {
    %n = arith.negf %x : tensor<3xf32>
    scf.yield %n : tensor<3xf32>
  }
  return %r : tensor<3xf32>
}
func.func @if_batched_pred(%p: tensor<8xi1>, %x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%p, %x) {fn = @f, in_axes = array<i64: 0, 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xi1>, tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that scf.while with a batched condition runs while any lane runs (an OR reduction of the
/// lane conditions) and keeps finished lanes' values with a select on the lane condition.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: scf.while (%{{.*}} = %{{.*}}) : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi1>)
// CHECK: %[[C:.*]] = linalg.generic
// CHECK: arith.cmpf olt
// CHECK: } -> tensor<8xi1>
// CHECK: %[[ANY:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]} ins(%[[C]] : tensor<8xi1>)
// CHECK: arith.ori
// CHECK: %[[B:.*]] = tensor.extract %[[ANY]][] : tensor<i1>
// CHECK: scf.condition(%[[B]]) %{{.*}}, %[[C]] : tensor<8xf32>, tensor<8xi1>
// CHECK: } do {
// CHECK: ^bb0(%[[X:.*]]: tensor<8xf32>, %[[M:.*]]: tensor<8xi1>):
// CHECK: %[[NEW:.*]] = linalg.generic
// CHECK: arith.mulf
// CHECK: linalg.generic {{.*}} ins(%[[M]], %[[NEW]], %[[X]] : tensor<8xi1>, tensor<8xf32>, tensor<8xf32>)
// CHECK: arith.select
func.func @f(%x: f32) -> f32 {
  %lim = arith.constant 10.0 : f32
  %r = scf.while (%a = %x) : (f32) -> f32 {
    %c = arith.cmpf olt, %a, %lim : f32
    scf.condition(%c) %a : f32
  } do {
  ^bb0(%a: f32):
    %two = arith.constant 2.0 : f32
    %n = arith.mulf %a, %two : f32
    scf.yield %n : f32
  }
  return %r : f32
}
func.func @while_batched_cond(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that scf.while whose condition does not depend on the batch stays an ordinary while
/// with batched carries and no mask.
// CHECK-LABEL: func.func private @f_batched_8_ub(
// CHECK: scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (index, tensor<8xf32>) -> (index, tensor<8xf32>)
// CHECK-NOT: tensor<8xi1>
// CHECK: return
func.func @f(%n: index, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r:2 = scf.while (%i = %c0, %a = %x) : (index, f32) -> (index, f32) {
    %c = arith.cmpi slt, %i, %n : index
    scf.condition(%c) %i, %a : index, f32
  } do {
  ^bb0(%i: index, %a: f32):
    %j = arith.addi %i, %c1 : index
    %b = math.sin %a : f32
    scf.yield %j, %b : index, f32
  }
  return %r#1 : f32
}
func.func @while_unbatched_cond(%n: index, %x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%n, %x) {fn = @f, in_axes = array<i64: -1, 0>, out_axes = array<i64: 0>, randomness = "error"} : (index, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

/// Check that scf.while with a batched condition and a before region that computes its forwarded
/// values passes the lanes' arguments along, so finished lanes keep (and recompute) them.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: scf.while (%[[A:.*]] = %{{.*}}) : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xi1>)
// CHECK: %[[E:.*]] = linalg.generic
// CHECK: math.exp
// CHECK: %[[C:.*]] = linalg.generic
// CHECK: arith.cmpf olt
// CHECK: scf.condition(%{{.*}}) %[[E]], %[[A]], %[[C]] : tensor<8xf32>, tensor<8xf32>, tensor<8xi1>
// CHECK: } do {
// CHECK: ^bb0(%[[V:.*]]: tensor<8xf32>, %[[P:.*]]: tensor<8xf32>, %[[M:.*]]: tensor<8xi1>):
// CHECK: linalg.generic {{.*}} ins(%[[M]], %[[V]], %[[P]] : tensor<8xi1>, tensor<8xf32>, tensor<8xf32>)
// CHECK: arith.select
func.func @f(%x: f32) -> f32 {
  %lim = arith.constant 10.0 : f32
  %r = scf.while (%a = %x) : (f32) -> f32 {
    %b = math.exp %a : f32
    %c = arith.cmpf olt, %b, %lim : f32
    scf.condition(%c) %b : f32
  } do {
  ^bb0(%a: f32):
    scf.yield %a : f32
  }
  return %r : f32
}
func.func @while_before_computes(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}


// -----

/// Check that scf.while whose before region forwards fewer values than it carries (the canonical
/// form once a result is unused) batches every carry: the unforwarded carry %m becomes batched in
/// the after region (a sum over the batched %a), so the condition is batched, the loop masked, and
/// the carried values travel beside the forwarded one to the after region (the clean-up merges
/// the forwarded %a with the carried one).
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8x3xf32>)
// CHECK: scf.while (%{{.*}} = %[[X]], %{{.*}} = %{{.*}}) : (tensor<8x3xf32>, tensor<8xf32>) -> (tensor<8x3xf32>, tensor<8xf32>, tensor<8xi1>)
// CHECK: arith.cmpf ogt
// CHECK: } do {
// CHECK: ^bb0(%{{.*}}: tensor<8x3xf32>, %{{.*}}: tensor<8xf32>, %{{.*}}: tensor<8xi1>):
// CHECK: arith.select
// CHECK: arith.select
// CHECK: scf.yield %{{.*}}, %{{.*}} : tensor<8x3xf32>, tensor<8xf32>
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %r = scf.while (%a = %x, %m = %two) : (tensor<3xf32>, f32) -> tensor<3xf32> {
    %c = arith.cmpf ogt, %m, %one : f32
    scf.condition(%c) %a : tensor<3xf32>
  } do {
  ^bb0(%a: tensor<3xf32>):
    %half = arith.constant dense<0.5> : tensor<3xf32>
    %h = arith.mulf %a, %half : tensor<3xf32>
    %z = arith.constant dense<0.0> : tensor<f32>
    %s = linalg.reduce ins(%a : tensor<3xf32>) outs(%z : tensor<f32>) dimensions = [0]
      (%in: f32, %acc: f32) {
        %t = arith.addf %in, %acc : f32
        linalg.yield %t : f32
      }
    %m2 = tensor.extract %s[] : tensor<f32>
    scf.yield %h, %m2 : tensor<3xf32>, f32
  }
  return %r : tensor<3xf32>
}
func.func @while_forwards_fewer(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that scf.while whose before region forwards its carries in another order batches the
/// carries by what the after region yields for each: the counter %k stays an unbatched i64 (the
/// batched %a is forwarded at its position), the condition unbatched, the loop unmasked.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK: scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (tensor<8x3xf32>, i64) -> ({{.*}})
// CHECK-NOT: tensor<8xi
// CHECK: return
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %c3 = arith.constant 3 : i64
  %r:2 = scf.while (%a = %x, %k = %c0) : (tensor<3xf32>, i64) -> (i64, tensor<3xf32>) {
    %c = arith.cmpi slt, %k, %c3 : i64
    scf.condition(%c) %k, %a : i64, tensor<3xf32>
  } do {
  ^bb0(%k: i64, %a: tensor<3xf32>):
    %s = math.sin %a : tensor<3xf32>
    %k1 = arith.addi %k, %c1 : i64
    scf.yield %s, %k1 : tensor<3xf32>, i64
  }
  return %r#1 : tensor<3xf32>
}
func.func @while_forwards_reordered(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

/// Check that scf.execute_region capturing a batched value is inlined, its ops batched.
// CHECK-LABEL: func.func private @f_batched_8_b(
// CHECK-SAME: %[[X:.*]]: tensor<8xf32>)
// CHECK-NOT: scf.execute_region
// CHECK: linalg.generic {{.*}} ins(%[[X]] : tensor<8xf32>)
// CHECK: math.cos
func.func @f(%x: f32) -> f32 {
  %r = scf.execute_region -> f32 {
    %c = math.cos %x : f32
    scf.yield %c : f32
  }
  return %r : f32
}
func.func @execute_region(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "autodiff.vmap"(%x) {fn = @f, in_axes = array<i64: 0>, out_axes = array<i64: 0>, randomness = "error"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
