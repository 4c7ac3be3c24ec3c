// Deliberately WRONG expectations: every case must make --verify-diagnostics
// fail and name what did not match. Checked by ../verify-diagnostics-wrong.mlir.
// Excluded from lit discovery (directory name `Inputs`).

// Wrong text: the error is produced, but not with this message.
func.func @wrong_text(%s: i64) -> tensor<4xf32> {
  // expected-error @+1 {{this is not the message}}
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// @+2 points one line below the op at fault.
func.func @plus_off_by_one(%s: i64) -> tensor<4xf32> {
  // expected-error @+2 {{op expects exactly 2 operands}}
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// @-2 points one line above the op at fault.
func.func @minus_off_by_one(%s: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  // expected-error @-2 {{op expects exactly 2 operands}}
  return %r : tensor<4xf32>
}

// -----

// @above skips designator lines, so it lands on the `return`, not the op.
func.func @above_wrong_line(%s: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
  // expected-error @above {{op expects exactly 2 operands}}
}

// -----

// @below skips designator lines, so it lands on the `func.func` line.
// expected-error @below {{op expects exactly 2 operands}}
func.func @below_wrong_line(%s: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// An expectation on valid IR is never produced.
func.func @valid(%s: i64) -> tensor<4xf32> {
  // expected-error @+1 {{op expects exactly 2 operands}}
  %r = "autodiff.philox"(%s, %s) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Right line and text, wrong severity: a near miss.
func.func @wrong_severity(%s: i64) -> tensor<4xf32> {
  // expected-warning @+1 {{op expects exactly 2 operands}}
  %r = "autodiff.philox"(%s) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A diagnostic with no expectation at all.
func.func @unexpected(%x: tensor<4xf32>) -> tensor<4xf64> {
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}
