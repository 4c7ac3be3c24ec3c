// --verify-diagnostics must FAIL on wrong expectations and name each one, in
// both directions (an expectation never produced, a diagnostic nobody
// expected) and for every kind of line designator. Upstream mlir-opt reports
// the very same lines, in the same order, on the same input.
//
// RUN: %not autodiff-opt --split-input-file --verify-diagnostics %S/Inputs/wrong-expectation.mlir 2>&1 \
// RUN:   | filecheck %s
// RUN: %not %mlir_opt --irdl-file=%irdl --split-input-file --verify-diagnostics \
// RUN:   %S/Inputs/wrong-expectation.mlir 2>&1 | filecheck %s

/// Check that a diagnostic without a matching expectation is an error, at the
/// diagnostic's own location (message text, @+2, @-2, @above and @below
/// expectations all miss the op on their line).

// CHECK: wrong-expectation.mlir:8:8: error: unexpected error: op expects exactly 2 operands, but got 1
// CHECK: wrong-expectation.mlir:17:8: error: unexpected error: op expects exactly 2 operands, but got 1
// CHECK: wrong-expectation.mlir:25:8: error: unexpected error: op expects exactly 2 operands, but got 1
// CHECK: wrong-expectation.mlir:34:8: error: unexpected error: op expects exactly 2 operands, but got 1
// CHECK: wrong-expectation.mlir:44:8: error: unexpected error: op expects exactly 2 operands, but got 1

/// Check that the right text on the right line with the wrong severity is a
/// near miss, reported at the expectation.

// CHECK: wrong-expectation.mlir:61:6: error: 'error' diagnostic emitted when expecting a 'warning'

/// Check that a diagnostic in a chunk without any expectation is unexpected.

// CHECK: wrong-expectation.mlir:70:8: error: unexpected error: expected 'tensor<4xf32>' but got 'tensor<4xf64>'

/// Check that every expectation that was not produced is named, at the
/// column where its `expected-` starts: wrong text, @+2, @-2, @above, @below,
/// valid IR, wrong severity.

// CHECK: wrong-expectation.mlir:7:6: error: expected error "this is not the message" was not produced
// CHECK: wrong-expectation.mlir:16:6: error: expected error "op expects exactly 2 operands" was not produced
// CHECK: wrong-expectation.mlir:26:6: error: expected error "op expects exactly 2 operands" was not produced
// CHECK: wrong-expectation.mlir:36:6: error: expected error "op expects exactly 2 operands" was not produced
// CHECK: wrong-expectation.mlir:42:4: error: expected error "op expects exactly 2 operands" was not produced
// CHECK: wrong-expectation.mlir:52:6: error: expected error "op expects exactly 2 operands" was not produced
// CHECK: wrong-expectation.mlir:61:6: error: expected warning "op expects exactly 2 operands" was not produced
// CHECK-NOT: error:
