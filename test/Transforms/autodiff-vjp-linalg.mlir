// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that matmul's VJP is matmuls with transposes (dA = C B^T,
/// dB = A^T C), not a scalar loop nest.
// CHECK-LABEL: func.func private @mm_bwd(
// CHECK-SAME: %[[A:[^:]*]]: tensor<3x3xf64>, %[[B:[^:]*]]: tensor<3x3xf64>, %[[C:[^:]*]]: tensor<3x3xf64>)
// CHECK-NOT: scf.for
// CHECK: %[[BT:.*]] = linalg.transpose ins(%[[B]] : tensor<3x3xf64>) {{.*}} permutation = [1, 0]
// CHECK: %[[GA:.*]] = linalg.matmul ins(%[[C]], %[[BT]] :
// CHECK: %[[AT:.*]] = linalg.transpose ins(%[[A]] : tensor<3x3xf64>) {{.*}} permutation = [1, 0]
// CHECK: %[[GB:.*]] = linalg.matmul ins(%[[AT]], %[[C]] :
// CHECK: return %[[GA]], %[[GB]]
func.func @mm(%a: tensor<3x3xf64>, %b: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3x3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3x3xf64>) -> tensor<3x3xf64>
  %0 = linalg.matmul ins(%a, %b : tensor<3x3xf64>, tensor<3x3xf64>) outs(%f : tensor<3x3xf64>) -> tensor<3x3xf64>
  return %0 : tensor<3x3xf64>
}
func.func @vjp_mm(%a: tensor<3x3xf64>, %b: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:3 = "autodiff.vjp"(%a, %b, %c) {fn = @mm} : (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1, %0#2 : tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that batch_matmul's VJP is batch_matmuls with batched transposes.
// CHECK-LABEL: func.func private @bmm_bwd(
// CHECK-NOT: scf.for
// CHECK: linalg.transpose {{.*}} permutation = [0, 2, 1]
// CHECK: linalg.batch_matmul
// CHECK: linalg.transpose {{.*}} permutation = [0, 2, 1]
// CHECK: linalg.batch_matmul
func.func @bmm(%a: tensor<2x3x3xf64>, %b: tensor<2x3x3xf64>) -> tensor<2x3x3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<2x3x3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<2x3x3xf64>) -> tensor<2x3x3xf64>
  %0 = linalg.batch_matmul ins(%a, %b : tensor<2x3x3xf64>, tensor<2x3x3xf64>) outs(%f : tensor<2x3x3xf64>) -> tensor<2x3x3xf64>
  return %0 : tensor<2x3x3xf64>
}
func.func @vjp_bmm(%a: tensor<2x3x3xf64>, %b: tensor<2x3x3xf64>, %c: tensor<2x3x3xf64>) -> (tensor<2x3x3xf64>, tensor<2x3x3xf64>, tensor<2x3x3xf64>) {
  %0:3 = "autodiff.vjp"(%a, %b, %c) {fn = @bmm} : (tensor<2x3x3xf64>, tensor<2x3x3xf64>, tensor<2x3x3xf64>) -> (tensor<2x3x3xf64>, tensor<2x3x3xf64>, tensor<2x3x3xf64>)
  return %0#0, %0#1, %0#2 : tensor<2x3x3xf64>, tensor<2x3x3xf64>, tensor<2x3x3xf64>
}

// -----

/// Check that the VJP of an elementwise generic is a generic over the same
/// iteration space producing the input's cotangent, whose body recomputes
/// the primal and applies the scalar reverse rule (c * cos(x)). Nothing is
/// accumulated yet, so the cotangent is written into an empty init, not
/// added to zeros (no `0 + x` pass).
// CHECK-LABEL: func.func private @ew_bwd(
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4xf64>
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel"]
// CHECK-SAME: outs(%[[E]] : tensor<4xf64>)
// CHECK: math.cos
// CHECK: %[[G:.*]] = arith.mulf
// CHECK-NOT: arith.addf
// CHECK: linalg.yield %[[G]]
func.func @ew(%x: tensor<4xf64>) -> tensor<4xf64> {
  %e = tensor.empty() : tensor<4xf64>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf64>) outs(%e : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %s = math.sin %a : f64
    linalg.yield %s : f64
  } -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @vjp_ew(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @ew} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that the VJP w.r.t. a broadcast input (map (i, j) -> (j)) is a
/// generic whose output has that input's map, with the other dim a reduction
/// (its inputs: m and the cotangent; the row itself is not read).
// CHECK: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func private @bc_bwd(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #[[ROW]]], iterator_types = ["reduction", "parallel"]}
// CHECK: tensor.insert_slice
func.func @bc(%m: tensor<3x3xf64>, %v: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %row = tensor.extract_slice %v[0, 0] [1, 3] [1, 1] : tensor<3x3xf64> to tensor<3xf64>
  %e = tensor.empty() : tensor<3x3xf64>
  %0 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m, %row : tensor<3x3xf64>, tensor<3xf64>) outs(%e : tensor<3x3xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64):
    %p = arith.mulf %a, %b : f64
    linalg.yield %p : f64
  } -> tensor<3x3xf64>
  return %0 : tensor<3x3xf64>
}
func.func @vjp_bc(%m: tensor<3x3xf64>, %v: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:3 = "autodiff.vjp"(%m, %v, %c) {fn = @bc} : (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1, %0#2 : tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that a max reduction sends the cotangent to the elements equal to
/// the result (cmpf oeq + select in the backward generic).
// CHECK-LABEL: func.func private @rmax_bwd(
// CHECK: linalg.generic
// CHECK: arith.cmpf oeq
// CHECK: arith.select
func.func @rmax(%x: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %lo = arith.constant -1.0e30 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%lo : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x3xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%a: f64, %acc: f64) {
      %m = arith.maximumf %acc, %a : f64
      linalg.yield %m : f64
    }
  %e2 = tensor.empty() : tensor<3x3xf64>
  %b = linalg.broadcast ins(%r : tensor<3xf64>) outs(%e2 : tensor<3x3xf64>) dimensions = [1]
  return %b : tensor<3x3xf64>
}
func.func @vjp_rmax(%x: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @rmax} : (tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that a sum reduction's VJP broadcasts the output cotangent back
/// over the reduced dim (a parallel generic reading the cotangent with the
/// output's map), and broadcast's VJP is a sum (a reduction generic).
// CHECK-LABEL: func.func private @rsum_bwd(
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
func.func @rsum(%x: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x3xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%a: f64, %acc: f64) {
      %s = arith.addf %a, %acc : f64
      linalg.yield %s : f64
    }
  %e2 = tensor.empty() : tensor<3x3xf64>
  %b = linalg.broadcast ins(%r : tensor<3xf64>) outs(%e2 : tensor<3x3xf64>) dimensions = [1]
  return %b : tensor<3x3xf64>
}
func.func @vjp_rsum(%x: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @rsum} : (tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that transpose's VJP is the inverse transpose.
// CHECK-LABEL: func.func private @tr_bwd(
// CHECK: linalg.transpose {{.*}} permutation = [2, 0, 1]
func.func @tr(%x: tensor<2x2x2xf64>) -> tensor<2x2x2xf64> {
  %e = tensor.empty() : tensor<2x2x2xf64>
  %t = linalg.transpose ins(%x : tensor<2x2x2xf64>) outs(%e : tensor<2x2x2xf64>) permutation = [1, 2, 0]
  return %t : tensor<2x2x2xf64>
}
func.func @vjp_tr(%x: tensor<2x2x2xf64>, %c: tensor<2x2x2xf64>) -> (tensor<2x2x2xf64>, tensor<2x2x2xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @tr} : (tensor<2x2x2xf64>, tensor<2x2x2xf64>) -> (tensor<2x2x2xf64>, tensor<2x2x2xf64>)
  return %0#0, %0#1 : tensor<2x2x2xf64>, tensor<2x2x2xf64>
}

// -----

/// Check that the VJP of a generic with a captured active scalar reduces
/// the scalar's cotangent over the whole iteration space into a rank-0
/// tensor and extracts it.
// CHECK-LABEL: func.func private @cap_bwd(
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction"]
// CHECK: tensor.extract %{{.*}}[] : tensor<f64>
func.func @cap(%x: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %s = tensor.extract %x[%c0] : tensor<4xf64>
  %e = tensor.empty() : tensor<4xf64>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf64>) outs(%e : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %p = arith.mulf %a, %s : f64
    linalg.yield %p : f64
  } -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @vjp_cap(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @cap} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that linalg.elementwise (here exp) is differentiated through its
/// generic form: the backward generic reads exp's result (a residual of the
/// forward function) instead of recomputing exp, and scales the cotangent;
/// x, which its body no longer reads, is not one of its inputs.
// CHECK-LABEL: func.func private @ew2_fwd(
// CHECK: %[[R:.*]] = linalg.generic
// CHECK: math.exp
// CHECK: return %[[R]] :
// CHECK-LABEL: func.func private @ew2_bwd(
// CHECK-NOT: math.exp
// CHECK: linalg.generic
// CHECK-NEXT: ^bb0(%[[C:.*]]: f64, %[[E:.*]]: f64, %{{.*}}: f64):
// CHECK-NOT: math.exp
// CHECK: arith.mulf %[[C]], %[[E]]
// CHECK: return
func.func @ew2(%x: tensor<4xf64>) -> tensor<4xf64> {
  %e = tensor.empty() : tensor<4xf64>
  %r = linalg.elementwise kind=#linalg.elementwise_kind<exp> ins(%x : tensor<4xf64>) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @vjp_ew2(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @ew2} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check a rectangular matmul (4x3 times 3x2): the cotangents have the
/// operands' shapes, via transposes of the right shapes.
// CHECK-LABEL: func.func private @rect_bwd(
// CHECK: linalg.transpose ins(%{{.*}} : tensor<3x2xf64>) outs(%{{.*}} : tensor<2x3xf64>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x2xf64>, tensor<2x3xf64>) outs(%{{.*}} : tensor<4x3xf64>)
// CHECK: linalg.transpose ins(%{{.*}} : tensor<4x3xf64>) outs(%{{.*}} : tensor<3x4xf64>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<3x4xf64>, tensor<4x2xf64>) outs(%{{.*}} : tensor<3x2xf64>)
func.func @rect(%a: tensor<4x3xf64>, %b: tensor<3x2xf64>) -> tensor<4x2xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4x2xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<4x2xf64>) -> tensor<4x2xf64>
  %0 = linalg.matmul ins(%a, %b : tensor<4x3xf64>, tensor<3x2xf64>) outs(%f : tensor<4x2xf64>) -> tensor<4x2xf64>
  return %0 : tensor<4x2xf64>
}
func.func @vjp_rect(%a: tensor<4x3xf64>, %b: tensor<3x2xf64>, %c: tensor<4x2xf64>) -> (tensor<4x2xf64>, tensor<4x3xf64>, tensor<3x2xf64>) {
  %0:3 = "autodiff.vjp"(%a, %b, %c) {fn = @rect} : (tensor<4x3xf64>, tensor<3x2xf64>, tensor<4x2xf64>) -> (tensor<4x2xf64>, tensor<4x3xf64>, tensor<3x2xf64>)
  return %0#0, %0#1, %0#2 : tensor<4x2xf64>, tensor<4x3xf64>, tensor<3x2xf64>
}
