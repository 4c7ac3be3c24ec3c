// --mlir-print-ir-after-all prints the module after every pass to stderr,
// with the same headers as mlir-opt; stdout keeps the final result only.
//
// RUN: autodiff-opt %s --canonicalize --cse --mlir-print-ir-after-all 2> %t.err | filecheck %s
// RUN: filecheck %s --check-prefix=DUMP < %t.err
// RUN: %mlir_opt %s --canonicalize --cse --mlir-print-ir-after-all 2>&1 >/dev/null \
// RUN:   | filecheck %s --check-prefix=DUMP

/// Check that stdout has the module once, without dump headers.

// CHECK-NOT:   IR Dump
// CHECK-LABEL: func.func @f(
// CHECK-NOT:   IR Dump

/// Check one dump per pass, each with the whole module.

// DUMP:      IR Dump After Canonicalizer (canonicalize)
// DUMP-NEXT: module {
// DUMP:        arith.constant 3 : i32
// DUMP:      IR Dump After CSE (cse)
// DUMP-NEXT: module {
func.func @f() -> i32 {
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %three = arith.addi %one, %two : i32
  return %three : i32
}
