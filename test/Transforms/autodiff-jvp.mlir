// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-jvp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that forward mode of a scalar function generates @f_jvp (primals,
/// tangents) -> (outputs, output tangents) and calls it: d(sin(x*y)).
// CHECK-LABEL: func.func @jvp_sin_mul(
// CHECK: %[[R:.*]]:2 = call @f_jvp(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (f64, f64, f64, f64) -> (f64, f64)
// CHECK: return %[[R]]#0, %[[R]]#1
// CHECK-LABEL: func.func private @f_jvp(
// CHECK-SAME: %[[X:.*]]: f64, %[[Y:.*]]: f64, %[[TX:.*]]: f64, %[[TY:.*]]: f64) -> (f64, f64)
// CHECK-DAG: %[[P:.*]] = arith.mulf %[[X]], %[[Y]]
// CHECK-DAG: %[[A:.*]] = arith.mulf %[[TX]], %[[Y]]
// CHECK-DAG: %[[B:.*]] = arith.mulf %[[TY]], %[[X]]
// CHECK-DAG: %[[T:.*]] = arith.addf %[[A]], %[[B]]
// CHECK-DAG: %[[S:.*]] = math.sin %[[P]]
// CHECK-DAG: %[[C:.*]] = math.cos %[[P]]
// CHECK-DAG: %[[D:.*]] = arith.mulf %[[T]], %[[C]]
// CHECK: return %[[S]], %[[D]] : f64, f64
func.func @f(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @jvp_sin_mul(%x: f64, %y: f64, %tx: f64, %ty: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %y, %tx, %ty) {fn = @f} : (f64, f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that two jvp ops of the same function share one generated function.
// CHECK-LABEL: func.func @twice(
// CHECK: call @g_jvp(
// CHECK: call @g_jvp(
// CHECK-LABEL: func.func private @g_jvp(
// CHECK-NOT: func.func private @g_jvp_1
func.func @g(%x: f64) -> f64 {
  %0 = math.exp %x : f64
  return %0 : f64
}
func.func @twice(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @g} : (f64, f64) -> (f64, f64)
  %1:2 = "autodiff.jvp"(%0#0, %0#1) {fn = @g} : (f64, f64) -> (f64, f64)
  return %1#0, %1#1 : f64, f64
}

// -----

/// Check that the JVP of exp reuses the primal result (d exp(x) = t * exp(x)).
// CHECK-LABEL: func.func private @g_jvp(
// CHECK-SAME: %[[X:.*]]: f64, %[[T:.*]]: f64)
// CHECK: %[[E:.*]] = math.exp %[[X]]
// CHECK: %[[D:.*]] = arith.mulf %[[T]], %[[E]]
// CHECK: return %[[E]], %[[D]]
func.func @g(%x: f64) -> f64 {
  %0 = math.exp %x : f64
  return %0 : f64
}
func.func @jvp_g(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @g} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that integer and index computations get no tangent code: only the
/// float multiply is differentiated.
// CHECK-LABEL: func.func private @h_jvp(
// CHECK-SAME: %[[X:.*]]: f64, %[[T:.*]]: f64)
// CHECK: arith.fptosi
// CHECK: arith.sitofp
// CHECK: %[[D:.*]] = arith.mulf %[[T]], %{{.*}}
// CHECK: return %{{.*}}, %[[D]]
func.func @h(%x: f64) -> f64 {
  %i = arith.fptosi %x : f64 to i32
  %c = arith.constant 2 : i32
  %j = arith.muli %i, %c : i32
  %f = arith.sitofp %j : i32 to f64
  %r = arith.mulf %f, %x : f64
  return %r : f64
}
func.func @jvp_h(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @h} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that autodiff.stop_gradient has a zero derivative: the tangent of
/// stop_gradient(x) * x is t * x (only the second factor contributes).
// CHECK-LABEL: func.func private @sg_jvp(
// CHECK-SAME: %[[X:.*]]: f64, %[[T:.*]]: f64)
// CHECK: %[[D:.*]] = arith.mulf %[[T]], %[[X]]
// CHECK: return %{{.*}}, %[[D]]
func.func @sg(%x: f64) -> f64 {
  %s = "autodiff.stop_gradient"(%x) : (f64) -> f64
  %r = arith.mulf %s, %x : f64
  return %r : f64
}
func.func @jvp_sg(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @sg} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that a call is differentiated by differentiating the callee once:
/// @outer_jvp calls @inner_jvp.
// CHECK-LABEL: func.func private @outer_jvp(
// CHECK: call @inner_jvp(
// CHECK-LABEL: func.func private @inner_jvp(
// CHECK: math.cos
func.func @inner(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @outer(%x: f64) -> f64 {
  %0 = call @inner(%x) : (f64) -> f64
  %1 = call @inner(%0) : (f64) -> f64
  return %1 : f64
}
func.func @jvp_outer(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @outer} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

// -----

/// Check that the JVP of a linalg.generic is one linalg.generic with the
/// tangent inputs and a tangent output appended, whose body holds the scalar
/// derivative.
// CHECK-LABEL: func.func private @gen_jvp(
// CHECK: %[[G:.*]]:2 = linalg.generic
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<4xf64>, tensor<4xf64>) outs(%{{.*}}, %{{.*}} : tensor<4xf64>, tensor<4xf64>)
// CHECK: math.tanh
// CHECK: arith.subf
// CHECK: linalg.yield %{{.*}}, %{{.*}} : f64, f64
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @gen(%x: tensor<4xf64>) -> tensor<4xf64> {
  %e = tensor.empty() : tensor<4xf64>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<4xf64>) outs(%e : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %t = math.tanh %a : f64
    linalg.yield %t : f64
  } -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
func.func @jvp_gen(%x: tensor<4xf64>, %t: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @gen} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that a sum reduction in a generic differentiates into a reduction
/// generic that accumulates the tangent too.
// CHECK-LABEL: func.func private @rsum_jvp(
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK-SAME: outs(%{{.*}}, %{{.*}} : tensor<3xf64>, tensor<3xf64>)
// CHECK: linalg.yield
func.func @rsum(%x: tensor<3x4xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %0 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<3x4xf64>) outs(%f : tensor<3xf64>) {
  ^bb0(%a: f64, %acc: f64):
    %m = arith.mulf %a, %a : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  } -> tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @jvp_rsum(%x: tensor<3x4xf64>, %t: tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @rsum} : (tensor<3x4xf64>, tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check that matmul's JVP is two matmuls accumulated through the init
/// (dA B + A dB), not a loop nest.
// CHECK-LABEL: func.func private @mm_jvp(
// CHECK-SAME: %[[A:[^:]*]]: tensor<3x3xf64>, %[[B:[^:]*]]: tensor<3x3xf64>, %[[TA:[^:]*]]: tensor<3x3xf64>, %[[TB:[^:]*]]: tensor<3x3xf64>)
// CHECK-NOT: scf.for
// CHECK: %[[P:.*]] = linalg.matmul ins(%[[A]], %[[B]] :
// CHECK: %[[T1:.*]] = linalg.matmul ins(%[[TA]], %[[B]] :
// CHECK: %[[T2:.*]] = linalg.matmul ins(%[[A]], %[[TB]] : {{.*}} outs(%[[T1]] :
// CHECK: return %[[P]], %[[T2]]
func.func @mm(%a: tensor<3x3xf64>, %b: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3x3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3x3xf64>) -> tensor<3x3xf64>
  %0 = linalg.matmul ins(%a, %b : tensor<3x3xf64>, tensor<3x3xf64>) outs(%f : tensor<3x3xf64>) -> tensor<3x3xf64>
  return %0 : tensor<3x3xf64>
}
func.func @jvp_mm(%a: tensor<3x3xf64>, %b: tensor<3x3xf64>, %ta: tensor<3x3xf64>, %tb: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:2 = "autodiff.jvp"(%a, %b, %ta, %tb) {fn = @mm} : (tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3x3xf64>
}

// -----

/// Check that elementwise math on whole tensors is differentiated and
/// lowered to linalg (no arith op on tensors is left).
// CHECK-LABEL: func.func private @ew_jvp(
// CHECK-NOT: arith.mulf {{.*}} : tensor
// CHECK: linalg.generic
// CHECK: math.cos
// CHECK: return
func.func @ew(%x: tensor<5xf64>) -> tensor<5xf64> {
  %0 = math.sin %x : tensor<5xf64>
  return %0 : tensor<5xf64>
}
func.func @jvp_ew(%x: tensor<5xf64>, %t: tensor<5xf64>) -> (tensor<5xf64>, tensor<5xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @ew} : (tensor<5xf64>, tensor<5xf64>) -> (tensor<5xf64>, tensor<5xf64>)
  return %0#0, %0#1 : tensor<5xf64>, tensor<5xf64>
}

// -----

/// Check that forward mode of transpose and broadcast moves the tangent with
/// the same op.
// CHECK-LABEL: func.func private @tb_jvp(
// CHECK: linalg.transpose
// CHECK: linalg.transpose
// CHECK: linalg.broadcast
// CHECK: linalg.broadcast
func.func @tb(%x: tensor<2x3xf64>) -> tensor<4x3x2xf64> {
  %e = tensor.empty() : tensor<3x2xf64>
  %t = linalg.transpose ins(%x : tensor<2x3xf64>) outs(%e : tensor<3x2xf64>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<4x3x2xf64>
  %b = linalg.broadcast ins(%t : tensor<3x2xf64>) outs(%e2 : tensor<4x3x2xf64>) dimensions = [0]
  return %b : tensor<4x3x2xf64>
}
func.func @jvp_tb(%x: tensor<2x3xf64>, %t: tensor<2x3xf64>) -> (tensor<4x3x2xf64>, tensor<4x3x2xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @tb} : (tensor<2x3xf64>, tensor<2x3xf64>) -> (tensor<4x3x2xf64>, tensor<4x3x2xf64>)
  return %0#0, %0#1 : tensor<4x3x2xf64>, tensor<4x3x2xf64>
}

// -----

/// Check that tensor slicing ops carry tangents: extract_slice of the tangent.
// CHECK-LABEL: func.func private @sl_jvp(
// CHECK-SAME: %[[X:[^:]*]]: tensor<6xf64>, %[[T:[^:]*]]: tensor<6xf64>)
// CHECK: tensor.extract_slice %[[X]][1] [3] [2]
// CHECK: tensor.extract_slice %[[T]][1] [3] [2]
func.func @sl(%x: tensor<6xf64>) -> tensor<3xf64> {
  %0 = tensor.extract_slice %x[1] [3] [2] : tensor<6xf64> to tensor<3xf64>
  return %0 : tensor<3xf64>
}
func.func @jvp_sl(%x: tensor<6xf64>, %t: tensor<6xf64>) -> (tensor<3xf64>, tensor<3xf64>) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @sl} : (tensor<6xf64>, tensor<6xf64>) -> (tensor<3xf64>, tensor<3xf64>)
  return %0#0, %0#1 : tensor<3xf64>, tensor<3xf64>
}

// -----

/// Check forward mode of forward mode (second derivative): the inner jvp op
/// inside the differentiated function is lowered first.
// CHECK-LABEL: func.func @second(
// CHECK: call @d_jvp(
// CHECK-LABEL: func.func private @d_jvp(
// CHECK: call @c_jvp_jvp(
func.func @c(%x: f64) -> f64 {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @d(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @c} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @second(%x: f64, %t: f64, %u: f64, %v: f64) -> (f64, f64, f64, f64) {
  %0:4 = "autodiff.jvp"(%x, %t, %u, %v) {fn = @d} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3 : f64, f64, f64, f64
}

// -----

/// Check that a custom JVP (autodiff.custom_jvp = @rule) is called instead
/// of differentiating the body, also when the function is reached by a call.
// CHECK-LABEL: func.func @use_custom(
// CHECK: call @outer_jvp(
// CHECK-LABEL: func.func private @outer_jvp(
// CHECK: call @my_jvp(
func.func @f(%x: f64) -> f64 attributes {autodiff.custom_jvp = @my_jvp} {
  %0 = math.sin %x : f64
  return %0 : f64
}
func.func @my_jvp(%x: f64, %t: f64) -> (f64, f64) {
  %0 = math.sin %x : f64
  return %0, %t : f64, f64
}
func.func @outer(%x: f64) -> f64 {
  %0 = call @f(%x) : (f64) -> f64
  return %0 : f64
}
func.func @use_custom(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @outer} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
