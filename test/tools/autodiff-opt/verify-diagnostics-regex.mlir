// A malformed expected-error-re is itself an error, reported where the
// expectation is written, by our driver and by upstream mlir-opt alike; the
// diagnostic it was meant to match is then unexpected.
//
// RUN: %not autodiff-opt --verify-diagnostics %S/Inputs/bad-regex.mlir 2>&1 | filecheck %s
// RUN: %not %mlir_opt --irdl-file=%irdl --verify-diagnostics %S/Inputs/bad-regex.mlir 2>&1 \
// RUN:   | filecheck %s

/// Check the order and the locations of both errors.

// CHECK: bad-regex.mlir:3:6: error: found start of regex with no end '}}'
// CHECK: bad-regex.mlir:4:8: error: unexpected error: op expects exactly 2 operands, but got 1
