// --mlir-print-op-generic prints every op in generic form, which our driver
// and upstream mlir-opt both parse back.
//
// RUN: autodiff-opt %s --mlir-print-op-generic | filecheck %s
// RUN: autodiff-opt %s --mlir-print-op-generic | autodiff-opt | filecheck %s --check-prefix=CUSTOM
// RUN: autodiff-opt %s --mlir-print-op-generic | %mlir_opt --irdl-file=%irdl | filecheck %s --check-prefix=CUSTOM

/// Check the generic module, function and return.

// CHECK: "builtin.module"() ({
// CHECK:   "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "f"}> ({
// CHECK:   ^bb0(%[[X:.*]]: tensor<4xf32>):
// CHECK:     %[[Y:.*]] = "autodiff.stop_gradient"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK:     "func.return"(%[[Y]]) : (tensor<4xf32>) -> ()

/// Check that the custom form comes back after a re-parse.

// CUSTOM-LABEL: func.func @f(
// CUSTOM:         return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
