// With --split-input-file, an error in one chunk does not stop the others;
// the run fails, the other chunks are printed, and the diagnostic gives the
// line and column in the ORIGINAL file.
//
// RUN: %not autodiff-opt --split-input-file %s 2> %t.err | filecheck %s
// RUN: filecheck %s --check-prefix=ERR < %t.err
// RUN: %not %mlir_opt --irdl-file=%irdl --split-input-file %s 2> %t.upstream.err
// RUN: filecheck %s --check-prefix=ERR < %t.upstream.err

/// Check that the chunks around the failing one are still printed.

// CHECK-LABEL: func.func @before(
// CHECK:       {{^}}// {{-----$}}
// CHECK-NEXT:  {{^}}// {{-----$}}
// CHECK-NEXT:  module {
// CHECK-LABEL: func.func @after(
func.func @before() {
  return
}

// -----

/// Check that the error in the second chunk points at its line in this file.

func.func @broken(%seed: i64) -> tensor<4xf32> {
  // ERR: split-input-file-errors.mlir:[[# @LINE + 1]]:8: error: op expects exactly 2 operands, but got 1
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that a parse error in the fourth chunk is located the same way.

func.func @after() {
  return
}

// -----

func.func @bad_syntax() {
  // ERR: split-input-file-errors.mlir:[[# @LINE + 1]]:18: error: expected SSA operand
  %x = arith.addi , : i32
  return
}
