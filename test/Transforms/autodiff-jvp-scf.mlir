// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that forward mode of scf.for carries the tangent as an extra iter_arg.
// CHECK-LABEL: func.func private @loop_jvp(
// CHECK-SAME: %[[X:[^:]*]]: f64, %[[W:[^:]*]]: f64, %[[TX:[^:]*]]: f64, %[[TW:[^:]*]]: f64)
// CHECK: %[[R:.*]]:2 = scf.for {{.*}} iter_args(%{{.*}} = %[[X]], %{{.*}} = %[[TX]]) -> (f64, f64)
// CHECK: math.tanh
// CHECK: scf.yield %{{.*}}, %{{.*}} : f64, f64
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @loop(%x: f64, %w: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 10 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (f64) {
    %m = arith.mulf %h, %w : f64
    %s = math.tanh %m : f64
    scf.yield %s : f64
  }
  return %r : f64
}
func.func @jvp_loop(%x: f64, %w: f64, %tx: f64, %tw: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %w, %tx, %tw) {fn = @loop} : (f64, f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that forward mode of scf.if yields a tangent from each branch.
// CHECK-LABEL: func.func private @cond_jvp(
// CHECK: %[[R:.*]]:2 = scf.if %{{.*}} -> (f64, f64)
// CHECK: math.cos
// CHECK: scf.yield %{{.*}}, %{{.*}} : f64, f64
// CHECK: } else {
// CHECK: math.exp
// CHECK: scf.yield %{{.*}}, %{{.*}} : f64, f64
// CHECK: return %[[R]]#0, %[[R]]#1
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
func.func @jvp_cond(%x: f64, %y: f64, %tx: f64, %ty: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %y, %tx, %ty) {fn = @cond} : (f64, f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a loop carrying a tensor through a linalg.generic gets the
/// tangent generic inside the loop body.
// CHECK-LABEL: func.func private @tloop_jvp(
// CHECK: scf.for {{.*}} -> (tensor<4xf64>, tensor<4xf64>)
// CHECK: linalg.generic
// CHECK: math.cos
// CHECK: scf.yield
func.func @tloop(%x: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 3 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (tensor<4xf64>) {
    %e = tensor.empty() : tensor<4xf64>
    %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]}
        ins(%h : tensor<4xf64>) outs(%e : tensor<4xf64>) {
    ^bb0(%a: f64, %o: f64):
      %s = math.sin %a : f64
      linalg.yield %s : f64
    } -> tensor<4xf64>
    scf.yield %g : tensor<4xf64>
  }
  return %r : tensor<4xf64>
}
func.func @jvp_tloop(%x: tensor<4xf64>, %t: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @tloop} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that forward mode of scf.while carries tangents through both
/// regions: the condition forwards them, the body yields them.
// CHECK-LABEL: func.func private @wh_jvp(
// CHECK: %[[W:.*]]:3 = scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (f64, i32, f64) -> (f64, i32, f64)
// CHECK: scf.condition(%{{.*}}) %{{.*}}, %{{.*}}, %{{.*}} : f64, i32, f64
// CHECK: math.cos
// CHECK: scf.yield %{{.*}}, %{{.*}}, %{{.*}} : f64, i32, f64
// CHECK: return %[[W]]#0, %[[W]]#2
func.func @wh(%x: f64) -> f64 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %r:2 = scf.while (%h = %x, %i = %c0) : (f64, i32) -> (f64, i32) {
    %go = arith.cmpi slt, %i, %c4 : i32
    scf.condition(%go) %h, %i : f64, i32
  } do {
  ^bb0(%h2: f64, %i2: i32):
    %s = math.sin %h2 : f64
    %n = arith.addi %i2, %c1 : i32
    scf.yield %s, %n : f64, i32
  }
  return %r#0 : f64
}
func.func @jvp_wh(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @wh} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that scf.execute_region is inlined and differentiated.
// CHECK-LABEL: func.func private @er_jvp(
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
func.func @jvp_er(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @er} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
