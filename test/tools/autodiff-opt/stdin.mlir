// The input comes from stdin when there is no file argument or it is '-';
// diagnostics then name the buffer <stdin>, like mlir-opt.
//
// RUN: autodiff-opt < %s | filecheck %s
// RUN: autodiff-opt - < %s | filecheck %s
// RUN: cat %s | autodiff-opt --canonicalize | filecheck %s
// RUN: %not autodiff-opt < %S/Inputs/invalid-op.mlir 2>&1 | filecheck %s --check-prefix=ERR
// RUN: %not %mlir_opt --irdl-file=%irdl < %S/Inputs/invalid-op.mlir 2>&1 | filecheck %s --check-prefix=ERR

/// Check that the module read from stdin is printed.

// CHECK-LABEL: func.func @from_stdin(
// CHECK:         return

/// Check the buffer name in diagnostics.

// ERR: <stdin>:4:8: error: op expects exactly 2 operands, but got 1
func.func @from_stdin() {
  return
}
