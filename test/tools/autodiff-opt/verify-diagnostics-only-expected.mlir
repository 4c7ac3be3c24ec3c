// --verify-diagnostics=only-expected checks that the expected diagnostics are
// produced and ignores the others, like upstream mlir-opt.
//
// RUN: autodiff-opt --split-input-file --verify-diagnostics=only-expected %s
// RUN: %mlir_opt --irdl-file=%irdl --split-input-file --verify-diagnostics=only-expected %s
// RUN: %not autodiff-opt --split-input-file --verify-diagnostics %s 2>&1 | filecheck %s

/// Check that an unexpected error does not fail the run in only-expected mode
/// (and does in the default mode).

// CHECK: verify-diagnostics-only-expected.mlir:[[# @LINE + 2]]:8: error: unexpected error: op expects exactly 2 operands, but got 1
func.func @unexpected(%seed: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that an expected error still has to be produced.

func.func @expected(%x: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+1 {{expected 'tensor<4xf32>' but got 'tensor<4xf64>'}}
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}
