// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that linalg.map becomes a generic whose JVP carries the tangent.
// CHECK-LABEL: func.func private @mp_jvp(
// CHECK: linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<4xf64>, tensor<4xf64>)
// CHECK: math.exp
// CHECK: linalg.yield %{{.*}}, %{{.*}} : f64, f64
func.func @mp(%x: tensor<4xf64>, %y: tensor<4xf64>) -> tensor<4xf64> {
  %e = tensor.empty() : tensor<4xf64>
  %r = linalg.map ins(%x, %y : tensor<4xf64>, tensor<4xf64>) outs(%e : tensor<4xf64>)
    (%a: f64, %b: f64, %o: f64) {
      %m = arith.mulf %a, %b : f64
      %s = math.exp %m : f64
      linalg.yield %s : f64
    }
  return %r : tensor<4xf64>
}
func.func @jvp_mp(%x: tensor<4xf64>, %y: tensor<4xf64>, %tx: tensor<4xf64>, %ty: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %y, %tx, %ty) {fn = @mp} : (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that linalg.reduce's JVP is a reduction generic accumulating the
/// tangent alongside the value.
// CHECK-LABEL: func.func private @rd_jvp(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} outs(%{{.*}}, %{{.*}} : tensor<3xf64>, tensor<3xf64>)
func.func @rd(%x: tensor<3x4xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x4xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%a: f64, %acc: f64) {
      %s = arith.addf %a, %acc : f64
      linalg.yield %s : f64
    }
  return %r : tensor<3xf64>
}
func.func @jvp_rd(%x: tensor<3x4xf64>, %t: tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @rd} : (tensor<3x4xf64>, tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that the JVP of a max reduction is the mean of the tied tangents
/// (JAX's convention): a generic counts the elements equal to the max, then
/// a sum reduction weights each tangent by tie / count.
// CHECK-LABEL: func.func private @mx_jvp(
// CHECK: arith.maximumf
// CHECK: linalg.generic
// CHECK: arith.cmpf oeq
// CHECK: arith.select
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK: linalg.generic
// CHECK: arith.cmpf oeq
// CHECK: arith.select
// CHECK: arith.mulf
// CHECK: arith.addf
func.func @mx(%x: tensor<3x4xf64>) -> tensor<3xf64> {
  %lo = arith.constant -1.0e30 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%lo : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x4xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%a: f64, %acc: f64) {
      %s = arith.maximumf %a, %acc : f64
      linalg.yield %s : f64
    }
  return %r : tensor<3xf64>
}
func.func @jvp_mx(%x: tensor<3x4xf64>, %t: tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @mx} : (tensor<3x4xf64>, tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that fill's JVP fills with the scalar tangent.
// CHECK-LABEL: func.func private @fl_jvp(
// CHECK-SAME: %[[S:[^:]*]]: f64, %[[T:[^:]*]]: f64)
// CHECK: linalg.fill ins(%[[S]] : f64)
// CHECK: linalg.fill ins(%[[T]] : f64)
func.func @fl(%s: f64) -> tensor<3xf64> {
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%s : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  return %f : tensor<3xf64>
}
func.func @jvp_fl(%s: f64, %t: f64) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%s, %t) {fn = @fl} : (f64, f64) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that dot's JVP is two dots accumulated through the init.
// CHECK-LABEL: func.func private @dt_jvp(
// CHECK: linalg.dot
// CHECK: %[[D1:.*]] = linalg.dot
// CHECK: linalg.dot {{.*}} outs(%[[D1]] : tensor<f64>)
func.func @dt(%x: tensor<3xf64>, %y: tensor<3xf64>) -> tensor<f64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %d = linalg.dot ins(%x, %y : tensor<3xf64>, tensor<3xf64>) outs(%f : tensor<f64>) -> tensor<f64>
  return %d : tensor<f64>
}
func.func @jvp_dt(%x: tensor<3xf64>, %y: tensor<3xf64>, %tx: tensor<3xf64>, %ty: tensor<3xf64>) -> (tensor<f64>, tensor<f64>) {
  %0:2 = "autodiff.jvp"(%x, %y, %tx, %ty) {fn = @dt} : (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<f64>, tensor<f64>)
  return %0#0, %0#1 : tensor<f64>, tensor<f64>
}

// -----

/// Check that named elementwise ops (linalg.mul, linalg.exp) are
/// differentiated through their generic form.
// CHECK-LABEL: func.func private @nm_jvp(
// CHECK-NOT: linalg.mul
// CHECK: linalg.generic
// CHECK: math.exp
func.func @nm(%x: tensor<4xf64>) -> tensor<4xf64> {
  %e = tensor.empty() : tensor<4xf64>
  %m = linalg.mul ins(%x, %x : tensor<4xf64>, tensor<4xf64>) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %r = linalg.exp ins(%m : tensor<4xf64>) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @jvp_nm(%x: tensor<4xf64>, %t: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @nm} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that concat's JVP concatenates the tangents.
// CHECK-LABEL: func.func private @cc_jvp(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2xf64>, %[[T:[^:]*]]: tensor<2xf64>)
// CHECK: tensor.concat dim(0) %[[X]], %[[X]]
// CHECK: tensor.concat dim(0) %[[T]], %[[T]]
func.func @cc(%x: tensor<2xf64>) -> tensor<4xf64> {
  %r = tensor.concat dim(0) %x, %x : (tensor<2xf64>, tensor<2xf64>) -> tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @jvp_cc(%x: tensor<2xf64>, %t: tensor<2xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @cc} : (tensor<2xf64>, tensor<2xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that pad's JVP pads the tangent with zeros, whatever the primal
/// padding value.
// CHECK-LABEL: func.func private @pd_jvp(
// CHECK-DAG: %[[Z:.*]] = arith.constant 0.000000e+00 : f64
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f64
// CHECK: tensor.pad %arg0
// CHECK: tensor.yield %[[ONE]] : f64
// CHECK: tensor.pad %arg1
// CHECK: tensor.yield %[[Z]] : f64
func.func @pd(%x: tensor<2xf64>) -> tensor<5xf64> {
  %one = arith.constant 1.0 : f64
  %p = tensor.pad %x low[1] high[2] {
  ^bb0(%i: index):
    tensor.yield %one : f64
  } : tensor<2xf64> to tensor<5xf64>
  return %p : tensor<5xf64>
}
func.func @jvp_pd(%x: tensor<2xf64>, %t: tensor<2xf64>) -> (tensor<5xf64>, tensor<5xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @pd} : (tensor<2xf64>, tensor<2xf64>) -> (tensor<5xf64>, tensor<5xf64>)
  return %0#0, %0#1 : tensor<5xf64>, tensor<5xf64>
}

// -----

/// Check that from_elements builds the tangent tensor from the element
/// tangents, and splat splats the tangent.
// CHECK-LABEL: func.func private @fe_jvp(
// CHECK-SAME: %[[A:[^:]*]]: f64, %[[B:[^:]*]]: f64, %[[TA:[^:]*]]: f64, %[[TB:[^:]*]]: f64)
// CHECK: tensor.from_elements %[[TA]], %[[TB]] : tensor<2xf64>
func.func @fe(%a: f64, %b: f64) -> tensor<2xf64> {
  %r = tensor.from_elements %a, %b : tensor<2xf64>
  return %r : tensor<2xf64>
}
func.func @jvp_fe(%a: f64, %b: f64, %ta: f64, %tb: f64) -> (tensor<2xf64>, tensor<2xf64>) {
  %0:2 = "autodiff.jvp"(%a, %b, %ta, %tb) {fn = @fe} : (f64, f64, f64, f64) -> (tensor<2xf64>, tensor<2xf64>)
  return %0#0, %0#1 : tensor<2xf64>, tensor<2xf64>
}

// -----

/// Check that an inactive tensor.extract index path gets no rule and the
/// extract of the tangent follows the extract of the value.
// CHECK-LABEL: func.func private @ex_jvp(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4xf64>, %[[T:[^:]*]]: tensor<4xf64>)
// CHECK: tensor.extract %[[X]][%{{.*}}]
// CHECK: tensor.extract %[[T]][%{{.*}}]
func.func @ex(%x: tensor<4xf64>) -> f64 {
  %i = arith.constant 2 : index
  %s = tensor.extract %x[%i] : tensor<4xf64>
  return %s : f64
}
func.func @jvp_ex(%x: tensor<4xf64>, %t: tensor<4xf64>) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @ex} : (tensor<4xf64>, tensor<4xf64>) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that tensor.generate's JVP is a second generate yielding the body's
/// tangent (here d(s * i) = t * i for the captured scalar s).
// CHECK-LABEL: func.func private @gen_jvp(
// CHECK-SAME: %[[S:[^:]*]]: f64, %[[T:[^:]*]]: f64)
// CHECK: tensor.generate
// CHECK: arith.mulf %[[S]]
// CHECK: tensor.generate
// CHECK: arith.mulf %[[T]]
func.func @gen(%s: f64) -> tensor<4xf64> {
  %r = tensor.generate {
  ^bb0(%i: index):
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %m = arith.mulf %s, %f : f64
    tensor.yield %m : f64
  } : tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @jvp_gen(%s: f64, %t: f64) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%s, %t) {fn = @gen} : (f64, f64) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}
