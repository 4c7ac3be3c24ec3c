// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that reverse mode of an scf.for carrying a tensor records tapes
/// (tensor<100x3xf64>, written with insert_slice in the forward loop) of the
/// carried value h and of the body value the reverse code needs, m = h*w (as
/// JAX's scan saves residuals), and reads them back in reverse in a backward
/// loop that recomputes none of the body: only cos(m) is computed there (sin
/// itself is dead, the multiply is not redone).
// CHECK-LABEL: func.func private @loop_fwd(
// CHECK: %[[T0:.*]] = tensor.empty() : tensor<100x3xf64>
// CHECK: %[[L:.*]]:3 = scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[T0]], %{{.*}} = %[[T0]]) -> (tensor<3xf64>, tensor<100x3xf64>, tensor<100x3xf64>)
// CHECK: tensor.insert_slice {{.*}} : tensor<3xf64> into tensor<100x3xf64>
// CHECK: %[[M:.*]] = linalg.generic
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.mulf
// CHECK: math.sin
// CHECK: tensor.insert_slice %[[M]] into {{.*}} : tensor<3xf64> into tensor<100x3xf64>
// CHECK: return %[[L]]#0, %[[L]]#1, %[[L]]#2
// CHECK-LABEL: func.func private @loop_bwd(
// CHECK-SAME: %[[W:[^:]*]]: tensor<3xf64>, %[[TH:[^:]*]]: tensor<100x3xf64>, %[[TM:[^:]*]]: tensor<100x3xf64>
// CHECK: %[[C99:.*]] = arith.constant 99 : index
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[I:.*]] = arith.subi %[[C99]], %[[K]] : index
// CHECK-NEXT: %[[H:.*]] = tensor.extract_slice %[[TH]][%[[I]], 0] [1, 3] [1, 1] : tensor<100x3xf64> to tensor<3xf64>
// CHECK-NEXT: %[[MI:.*]] = tensor.extract_slice %[[TM]][%[[I]], 0] [1, 3] [1, 1] : tensor<100x3xf64> to tensor<3xf64>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[MI]] : tensor<3xf64>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.cos
// CHECK-NOT: math.sin
// CHECK: scf.yield
func.func @loop(%x: tensor<3xf64>, %w: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 100 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (tensor<3xf64>) {
    %m = arith.mulf %h, %w : tensor<3xf64>
    %s = math.sin %m : tensor<3xf64>
    %a = arith.addf %h, %s : tensor<3xf64>
    scf.yield %a : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
func.func @vjp_loop(%x: tensor<3xf64>, %w: tensor<3xf64>, %c: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @loop} : (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1, %0#2 : tensor<3xf64>, tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that a value captured by the loop body from above (w) gets its
/// cotangent accumulated in an extra iter_arg of the backward loop.
// CHECK-LABEL: func.func private @sloop_bwd(
// CHECK: %[[R:.*]]:2 = scf.for {{.*}} -> (f64, f64)
// CHECK: scf.yield %{{.*}}, %{{.*}} : f64, f64
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @sloop(%x: f64, %w: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 7 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (f64) {
    %m = arith.mulf %h, %w : f64
    %s = math.tanh %m : f64
    scf.yield %s : f64
  }
  return %r : f64
}
func.func @vjp_sloop(%x: f64, %w: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @sloop} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that a loop with a dynamic trip count keeps a dynamically sized tape.
// CHECK-LABEL: func.func private @dyn_fwd(
// CHECK: arith.cmpi sle
// CHECK: tensor.empty(%{{.*}}) : tensor<?xf64>
// CHECK: tensor.insert
// CHECK-LABEL: func.func private @dyn_bwd(
// CHECK: tensor.extract
func.func @dyn(%x: f64, %y: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %yi = arith.fptosi %y : f64 to i64
  %n = arith.index_cast %yi : i64 to index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (f64) {
    %s = math.sin %h : f64
    scf.yield %s : f64
  }
  return %r : f64
}
func.func @vjp_dyn(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @dyn} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that reverse mode of scf.if re-runs the branch under the saved
/// predicate: the backward function has an scf.if on the forward's i1.
// CHECK-LABEL: func.func private @cond_fwd(
// CHECK: %[[P:.*]] = arith.cmpf olt
// CHECK: scf.if %[[P]]
// CHECK: return {{.*}}%[[P]]
// CHECK-LABEL: func.func private @cond_bwd(
// CHECK-SAME: i1
// CHECK: scf.if
// CHECK: math.cos
// CHECK: } else {
// CHECK: math.exp
func.func @cond(%x: f64, %y: f64) -> f64 {
  %c = arith.cmpf olt, %x, %y : f64
  %r = scf.if %c -> (f64) {
    %s = math.sin %x : f64
    scf.yield %s : f64
  } else {
    %e = math.exp %y : f64
    scf.yield %e : f64
  }
  return %r : f64
}
func.func @vjp_cond(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @cond} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

// -----

/// Check that a loop that never touches an active value is left alone: the
/// backward function has no loop.
// CHECK-LABEL: func.func private @inact_bwd(
// CHECK-NOT: scf.for
// CHECK: return
func.func @inact(%x: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 4 : index
  %z = arith.constant 1.0 : f64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %z) -> (f64) {
    %s = arith.addf %h, %h : f64
    scf.yield %s : f64
  }
  %o = arith.mulf %r, %x : f64
  return %o : f64
}
func.func @vjp_inact(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @inact} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that scf.execute_region is inlined before the backward sweep.
// CHECK-LABEL: func.func private @er_bwd(
// CHECK-NOT: scf.execute_region
// CHECK: math.sin
// CHECK: return
func.func @er(%x: f64) -> f64 {
  %r = scf.execute_region -> f64 {
    %c = math.cos %x : f64
    scf.yield %c : f64
  }
  return %r : f64
}
func.func @vjp_er(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @er} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that reverse mode of scf.if follows a yielded value whose op the
/// forward augmentation replaces: the branch's linalg.reduce becomes a
/// linalg.generic before the sweep, and the cotangent seeds the new op
/// (reading the replaced value crashed).
// CHECK-LABEL: func.func private @cond_reduce_bwd(
// CHECK: %[[Z:.*]] = arith.constant dense<0.000000e+00> : tensor<4xf64>
// CHECK: scf.if %{{.*}} -> (tensor<4xf64>)
// CHECK: linalg.generic
// CHECK: arith.mulf
// CHECK: } else {
// CHECK: scf.yield %[[Z]] : tensor<4xf64>
func.func @cond_reduce(%x: tensor<4xf64>, %p: i1) -> tensor<f64> {
  %r = scf.if %p -> (tensor<f64>) {
    %z = arith.constant 0.0 : f64
    %e = tensor.empty() : tensor<f64>
    %i = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
    %s = linalg.reduce ins(%x : tensor<4xf64>) outs(%i : tensor<f64>) dimensions = [0]
      (%in: f64, %acc: f64) {
        %m = arith.mulf %in, %in : f64
        %a = arith.addf %m, %acc : f64
        linalg.yield %a : f64
      }
    scf.yield %s : tensor<f64>
  } else {
    %z = arith.constant 0.0 : f64
    %e = tensor.empty() : tensor<f64>
    %i = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
    scf.yield %i : tensor<f64>
  }
  return %r : tensor<f64>
}
func.func @vjp_cond_reduce(%x: tensor<4xf64>, %p: i1, %c: tensor<f64>) -> (tensor<f64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %p, %c) {fn = @cond_reduce, wrt = array<i64: 0>} : (tensor<4xf64>, i1, tensor<f64>) -> (tensor<f64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<f64>, tensor<4xf64>
}
