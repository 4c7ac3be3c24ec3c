// An @unknown expectation that is never produced fails the run and is named
// at the position of its `expected-` (upstream mlir-opt 22 aborts on this
// input instead, so only our driver is checked).
//
// RUN: %not autodiff-opt --verify-diagnostics %S/Inputs/wrong-unknown.mlir 2>&1 | filecheck %s

/// Check that the unmatched @unknown expectation is reported and nothing else.

// CHECK: wrong-unknown.mlir:4:6: error: expected error "never emitted" was not produced
// CHECK-NOT: error:
