// -o writes the result to a file (and nothing to stdout); a failed run
// leaves no output file behind, like mlir-opt.
//
// RUN: autodiff-opt %s -o %t.mlir > %t.stdout
// RUN: filecheck %s < %t.mlir
// RUN: %PYTHON -c "import sys; sys.exit(1 if open(sys.argv[1]).read() else 0)" %t.stdout
// RUN: autodiff-opt %s -o=%t.eq.mlir
// RUN: filecheck %s < %t.eq.mlir
// RUN: autodiff-opt %s -o - | filecheck %s
// RUN: rm -f %t.failed.mlir
// RUN: %not autodiff-opt %S/Inputs/invalid-op.mlir -o %t.failed.mlir 2>&1 | filecheck %s --check-prefix=ERR
// RUN: %PYTHON -c "import os, sys; sys.exit(os.path.exists(sys.argv[1]))" %t.failed.mlir
// RUN: %not autodiff-opt %s -o %t.no/such/dir/out.mlir 2>&1 | filecheck %s --check-prefix=OPEN

/// Check the written module.

// CHECK: module {
// CHECK-LABEL: func.func @written(
// CHECK: return

/// Check the diagnostics of the failing runs.

// ERR: invalid-op.mlir:4:8: error: op expects exactly 2 operands, but got 1
// OPEN: autodiff-opt: error: could not open output file '{{.*}}out.mlir': No such file or directory
func.func @written(%x: i32) -> i32 {
  return %x : i32
}
