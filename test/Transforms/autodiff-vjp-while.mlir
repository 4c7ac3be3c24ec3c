// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that reverse mode of scf.while counts the iterations in the forward
/// function (an extra index result, the only residual the loop adds) and that
/// the backward function records a tape of dynamic length (tensor<?xf64>,
/// tensor.empty of the count) in a recording scf.for, then reads it back in
/// reverse (index n - 1 - k) in a backward scf.for.
// CHECK-LABEL: func.func private @wh_fwd(
// CHECK-SAME: -> (f64, index)
// CHECK: %[[W:.*]]:3 = scf.while ({{.*}}, %{{.*}} = %[[Z:.*]]) : (f64, i32, index) -> (f64, i32, index)
// CHECK: arith.addi %{{.*}}, %{{.*}} : index
// CHECK: return %[[W]]#0, %[[W]]#2 : f64, index
// CHECK-LABEL: func.func private @wh_bwd(
// CHECK-SAME: %[[N:[^:]*]]: index
// CHECK: %[[T0:.*]] = tensor.empty(%[[N]]) : tensor<?xf64>
// CHECK: %[[REC:.*]]:{{[0-9]+}} = scf.for %[[K:[a-z0-9_]+]] = %{{.*}} to %[[N]] step %{{.*}} iter_args(
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%[[K]]] : tensor<?xf64>
// CHECK: math.sin
// CHECK: scf.for %[[KK:[a-z0-9_]+]] = %{{.*}} to %[[N]] step
// CHECK: %[[LAST:.*]] = arith.subi %[[N]], %{{.*}} : index
// CHECK: %[[I:.*]] = arith.subi %[[LAST]], %[[KK]] : index
// CHECK: tensor.extract %[[REC]]#2[%[[I]]] : tensor<?xf64>
// CHECK: math.cos
// CHECK: scf.yield
func.func @wh(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %r:2 = scf.while (%h = %x, %i = %c0) : (f64, i32) -> (f64, i32) {
    %go = arith.cmpi slt, %i, %c4 : i32
    scf.condition(%go) %h, %i : f64, i32
  } do {
  ^bb0(%h2: f64, %i2: i32):
    %m = arith.mulf %h2, %y : f64
    %s = math.sin %m : f64
    %n = arith.addi %i2, %c1 : i32
    scf.yield %s, %n : f64, i32
  }
  return %r#0 : f64
}
func.func @vjp_wh(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @wh} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that a while loop carrying a tensor keeps a tensor<?x3xf64> tape
/// (rows written with insert_slice, read with extract_slice) and that the
/// cotangent of the captured %w accumulates in an iter_arg of the backward loop.
// CHECK-LABEL: func.func private @tw_bwd(
// CHECK: %[[T0:.*]] = tensor.empty(%{{.*}}) : tensor<?x3xf64>
// CHECK: %[[REC:.*]]:2 = scf.for {{.*}} -> (tensor<3xf64>, tensor<?x3xf64>)
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%{{.*}}, 0] [1, 3] [1, 1] : tensor<3xf64> into tensor<?x3xf64>
// CHECK: %[[B:.*]]:2 = scf.for {{.*}} -> (tensor<3xf64>, tensor<3xf64>)
// CHECK: tensor.extract_slice %[[REC]]#1[%{{.*}}, 0] [1, 3] [1, 1] : tensor<?x3xf64> to tensor<3xf64>
// CHECK: math.cos
// CHECK: return %[[B]]#0, %[[B]]#1
func.func @tw(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> {
  %lim = arith.constant 40.0 : f64
  %c0 = arith.constant 0 : index
  %r = scf.while (%h = %x) : (tensor<3xf64>) -> tensor<3xf64> {
    %e = tensor.extract %h[%c0] : tensor<3xf64>
    %go = arith.cmpf olt, %e, %lim : f64
    scf.condition(%go) %h : tensor<3xf64>
  } do {
  ^bb0(%h2: tensor<3xf64>):
    %m = arith.mulf %h2, %w : tensor<3xf64>
    %s = math.sin %m : tensor<3xf64>
    scf.yield %s : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
func.func @vjp_tw(%x: tensor<3xf64>, %w: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @tw} : (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1, %0#2 : tensor<3xf64>, tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that the `before` region is differentiated too: it computes the
/// forwarded value (exp), so the backward function differentiates it once
/// at the exit state (outside the loop) and once per iteration (inside).
// CHECK-LABEL: func.func private @bf_bwd(
// CHECK: scf.for
// CHECK: scf.yield
// CHECK: math.exp
// CHECK: scf.for
// CHECK: tensor.extract
// CHECK: math.exp
// CHECK: scf.yield
func.func @bf(%x: f64, %y: f64) -> f64 {
  %lim = arith.constant 5.0 : f64
  %r = scf.while (%h = %x) : (f64) -> f64 {
    %e = math.exp %h : f64
    %go = arith.cmpf olt, %e, %lim : f64
    scf.condition(%go) %e : f64
  } do {
  ^bb0(%h2: f64):
    %m = arith.mulf %h2, %y : f64
    scf.yield %m : f64
  }
  return %r : f64
}
func.func @vjp_bf(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @bf} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that a while loop inside an scf.for body is recomputed by the for
/// loop's backward sweep and counted there: the backward function has the
/// for's backward loop containing the while (with its counter) and then the
/// while's own recording and backward loops.
// CHECK-LABEL: func.func private @nest_bwd(
// CHECK: scf.for
// CHECK: scf.while ({{.*}}) : (f64, index) -> (f64, index)
// CHECK: tensor.empty(%{{.*}}) : tensor<?xf64>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: math.cos
func.func @nest(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %lim = arith.constant 2.0 : f64
  %r = scf.for %j = %c0 to %c3 step %c1 iter_args(%g = %x) -> (f64) {
    %w = scf.while (%h = %g) : (f64) -> f64 {
      %go = arith.cmpf olt, %h, %lim : f64
      scf.condition(%go) %h : f64
    } do {
    ^bb0(%h2: f64):
      %m = arith.mulf %h2, %y : f64
      %s = math.sin %m : f64
      %a = arith.addf %s, %h2 : f64
      scf.yield %a : f64
    }
    %q = arith.mulf %w, %y : f64
    scf.yield %q : f64
  }
  return %r : f64
}
func.func @vjp_nest(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @nest} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that reverse mode of tensor.generate is a loop nest over the result's
/// indices reading the cotangent element there, and that a captured tensor
/// the body only gathers from (tensor.extract) accumulates its cotangent
/// element-wise (extract + addf + insert at the gathered index), not as a
/// whole tensor per point.
// CHECK-LABEL: func.func private @gen_bwd(
// CHECK-SAME: %[[CT:[^:]*]]: tensor<3x4xf64>) -> (f64, tensor<4xf64>)
// CHECK: %[[R:.*]]:2 = scf.for %[[I:[a-z0-9_]+]] = {{.*}} -> (f64, tensor<4xf64>)
// CHECK: scf.for %[[J:[a-z0-9_]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[ACC:[a-z0-9_]+]] = %{{.*}}) -> (f64, tensor<4xf64>)
// CHECK: tensor.extract %[[CT]][%[[I]], %[[J]]] : tensor<3x4xf64>
// CHECK: math.cos
// CHECK: %[[OLD:.*]] = tensor.extract %[[ACC]][%[[J]]] : tensor<4xf64>
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %{{.*}} : f64
// CHECK: tensor.insert %[[NEW]] into %[[ACC]][%[[J]]] : tensor<4xf64>
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @gen(%s: f64, %x: tensor<4xf64>) -> tensor<3x4xf64> {
  %v = tensor.generate {
  ^bb0(%i: index, %j: index):
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %m = arith.mulf %s, %f : f64
    %xe = tensor.extract %x[%j] : tensor<4xf64>
    %p = arith.mulf %m, %xe : f64
    %e = math.sin %p : f64
    tensor.yield %e : f64
  } : tensor<3x4xf64>
  return %v : tensor<3x4xf64>
}
func.func @vjp_gen(%s: f64, %x: tensor<4xf64>, %c: tensor<3x4xf64>) -> (tensor<3x4xf64>, f64, tensor<4xf64>) {
  %0:3 = "autodiff.vjp"(%s, %x, %c) {fn = @gen} : (f64, tensor<4xf64>, tensor<3x4xf64>) -> (tensor<3x4xf64>, f64, tensor<4xf64>)
  return %0#0, %0#1, %0#2 : tensor<3x4xf64>, f64, tensor<4xf64>
}

// -----

/// Check that reverse mode of a collapse_shape with a dynamic source size takes
/// that size (tensor.dim) in the forward function and passes it as an index
/// residual, so no dynamically shaped tensor is returned by @dcol_fwd; the
/// backward expand_shape uses it as its output_shape.
// CHECK-LABEL: func.func private @dcol_fwd(
// CHECK-SAME: -> (tensor<6xf64>, index)
// CHECK-LABEL: func.func private @dcol_bwd(
// CHECK-SAME: %[[N:[a-z0-9_]+]]: index
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0, 1]] output_shape [%[[N]], 3] : tensor<?xf64> into tensor<?x3xf64>
func.func @dcol(%x: tensor<2x3xf64>) -> tensor<6xf64> {
  %d = tensor.cast %x : tensor<2x3xf64> to tensor<?x3xf64>
  %e = tensor.collapse_shape %d [[0, 1]] : tensor<?x3xf64> into tensor<?xf64>
  %v = tensor.cast %e : tensor<?xf64> to tensor<6xf64>
  return %v : tensor<6xf64>
}
func.func @vjp_dcol(%x: tensor<2x3xf64>, %c: tensor<6xf64>) -> (tensor<6xf64>, tensor<2x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @dcol} : (tensor<2x3xf64>, tensor<6xf64>) -> (tensor<6xf64>, tensor<2x3xf64>)
  return %0#0, %0#1 : tensor<6xf64>, tensor<2x3xf64>
}

// -----

/// Check that an active padding value of tensor.pad gets the sum of the
/// cotangent over the padding: the whole sum minus the interior slice's sum.
// CHECK-LABEL: func.func private @padv_bwd(
// CHECK: %[[IN:.*]] = tensor.extract_slice %{{.*}}[1] [3] [1] : tensor<6xf64> to tensor<3xf64>
// CHECK: %[[ALL:.*]] = tensor.extract %{{.*}}[] : tensor<f64>
// CHECK: %[[INNER:.*]] = tensor.extract %{{.*}}[] : tensor<f64>
// CHECK: %[[G:.*]] = arith.subf %[[ALL]], %[[INNER]] : f64
// CHECK: return %[[IN]], %[[G]] : tensor<3xf64>, f64
func.func @padv(%x: tensor<3xf64>, %s: f64) -> tensor<6xf64> {
  %v = tensor.pad %x low[1] high[2] {
  ^bb0(%i: index):
    tensor.yield %s : f64
  } : tensor<3xf64> to tensor<6xf64>
  return %v : tensor<6xf64>
}
func.func @vjp_padv(%x: tensor<3xf64>, %s: f64, %c: tensor<6xf64>) -> (tensor<6xf64>, tensor<3xf64>, f64) {
  %0:3 = "autodiff.vjp"(%x, %s, %c) {fn = @padv} : (tensor<3xf64>, f64, tensor<6xf64>) -> (tensor<6xf64>, tensor<3xf64>, f64)
  return %0#0, %0#1, %0#2 : tensor<6xf64>, tensor<3xf64>, f64
}
