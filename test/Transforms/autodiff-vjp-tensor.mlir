// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %not grep '"autodiff\.'
// RUN: autodiff-opt %s --split-input-file --autodiff-vjp | %mlir_opt --split-input-file --verify-each -o /dev/null

/// Check that extract_slice's VJP inserts the cotangent into zeros at the
/// same (strided) position, and insert_slice's VJP extracts it back.
// CHECK-LABEL: func.func private @sl_bwd(
// CHECK-DAG: tensor.extract_slice %{{.*}}[0] [3] [2] : tensor<6xf64> to tensor<3xf64>
// CHECK-DAG: tensor.insert_slice %{{.*}} into %{{.*}}[1] [3] [2] : tensor<3xf64> into tensor<6xf64>
func.func @sl(%x: tensor<6xf64>) -> tensor<6xf64> {
  %s = tensor.extract_slice %x[1] [3] [2] : tensor<6xf64> to tensor<3xf64>
  %m = arith.mulf %s, %s : tensor<3xf64>
  %r = tensor.insert_slice %m into %x[0] [3] [2] : tensor<3xf64> into tensor<6xf64>
  return %r : tensor<6xf64>
}
func.func @vjp_sl(%x: tensor<6xf64>, %c: tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @sl} : (tensor<6xf64>, tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>)
  return %0#0, %0#1 : tensor<6xf64>, tensor<6xf64>
}

// -----

/// Check that expand_shape and collapse_shape are each other's adjoints.
// CHECK-LABEL: func.func private @rs_bwd(
// CHECK-DAG: tensor.expand_shape %{{.*}} {{\[\[}}0, 1]] output_shape [2, 3] : tensor<6xf64> into tensor<2x3xf64>
// CHECK-DAG: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1]] : tensor<2x3xf64> into tensor<6xf64>
func.func @rs(%x: tensor<6xf64>) -> tensor<6xf64> {
  %e = tensor.expand_shape %x [[0, 1]] output_shape [2, 3] : tensor<6xf64> into tensor<2x3xf64>
  %s = math.sin %e : tensor<2x3xf64>
  %c = tensor.collapse_shape %s [[0, 1]] : tensor<2x3xf64> into tensor<6xf64>
  return %c : tensor<6xf64>
}
func.func @vjp_rs(%x: tensor<6xf64>, %c: tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @rs} : (tensor<6xf64>, tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>)
  return %0#0, %0#1 : tensor<6xf64>, tensor<6xf64>
}

// -----

/// Check that concat's VJP slices the cotangent at each operand's offset.
// CHECK-LABEL: func.func private @cc_bwd(
// CHECK-DAG: tensor.extract_slice %{{.*}}[0] [3] [1] : tensor<6xf64> to tensor<3xf64>
// CHECK-DAG: tensor.extract_slice %{{.*}}[3] [3] [1] : tensor<6xf64> to tensor<3xf64>
func.func @cc(%x: tensor<6xf64>) -> tensor<6xf64> {
  %a = tensor.extract_slice %x[0] [3] [1] : tensor<6xf64> to tensor<3xf64>
  %b = math.exp %a : tensor<3xf64>
  %r = tensor.concat dim(0) %b, %a : (tensor<3xf64>, tensor<3xf64>) -> tensor<6xf64>
  return %r : tensor<6xf64>
}
func.func @vjp_cc(%x: tensor<6xf64>, %c: tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @cc} : (tensor<6xf64>, tensor<6xf64>) -> (tensor<6xf64>, tensor<6xf64>)
  return %0#0, %0#1 : tensor<6xf64>, tensor<6xf64>
}

// -----

/// Check that pad's VJP is the slice of the cotangent at the low padding.
// CHECK-LABEL: func.func private @pd_bwd(
// CHECK: tensor.extract_slice %{{.*}}[2] [4] [1] : tensor<8xf64> to tensor<4xf64>
func.func @pd(%x: tensor<8xf64>) -> tensor<8xf64> {
  %z = arith.constant 0.0 : f64
  %a = tensor.extract_slice %x[0] [4] [1] : tensor<8xf64> to tensor<4xf64>
  %p = tensor.pad %a low[2] high[2] {
  ^bb0(%i: index):
    tensor.yield %z : f64
  } : tensor<4xf64> to tensor<8xf64>
  return %p : tensor<8xf64>
}
func.func @vjp_pd(%x: tensor<8xf64>, %c: tensor<8xf64>) -> (tensor<8xf64>, tensor<8xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @pd} : (tensor<8xf64>, tensor<8xf64>) -> (tensor<8xf64>, tensor<8xf64>)
  return %0#0, %0#1 : tensor<8xf64>, tensor<8xf64>
}

// -----

/// Check that extract's VJP inserts the scalar cotangent into zeros, and
/// insert's VJP extracts the inserted element's cotangent.
// CHECK-LABEL: func.func private @ei_bwd(
// CHECK: tensor.extract %{{.*}}[%{{.*}}] : tensor<4xf64>
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%{{.*}}] : tensor<4xf64>
func.func @ei(%x: tensor<4xf64>) -> tensor<4xf64> {
  %i = arith.constant 1 : index
  %j = arith.constant 3 : index
  %s = tensor.extract %x[%i] : tensor<4xf64>
  %q = math.sin %s : f64
  %r = tensor.insert %q into %x[%j] : tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @vjp_ei(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @ei} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}

// -----

/// Check that tensor.dim and other index computations need no rule.
// CHECK-LABEL: func.func private @dm_bwd(
// CHECK-NOT: tensor.dim
// CHECK: return
func.func @dm(%x: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<4xf64>
  %i = arith.index_cast %d : index to i64
  %f = arith.sitofp %i : i64 to f64
  %e = tensor.splat %f : tensor<4xf64>
  %r = arith.mulf %e, %x : tensor<4xf64>
  return %r : tensor<4xf64>
}
func.func @vjp_dm(%x: tensor<4xf64>, %c: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @dm} : (tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<4xf64>, tensor<4xf64>
}
