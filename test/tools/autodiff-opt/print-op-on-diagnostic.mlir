// Verifier errors carry a "see current operation" note (as in mlir-opt);
// --mlir-print-op-on-diagnostic=false drops it, and --verify-diagnostics
// never expects it.
//
// RUN: %not autodiff-opt %s 2>&1 | filecheck %s
// RUN: %not %mlir_opt %s 2>&1 | filecheck %s
// RUN: %not autodiff-opt %s --mlir-print-op-on-diagnostic=false 2>&1 | filecheck %s --check-prefix=NO-OP
// RUN: autodiff-opt %s --verify-diagnostics

/// Check the error and its note, then the error alone.

// CHECK: print-op-on-diagnostic.mlir:[[# @LINE + 8]]:3: error: 'func.return' op has 0 operands, but enclosing function (@f) returns 1
// CHECK: print-op-on-diagnostic.mlir:[[# @LINE + 7]]:3: note: see current operation: "func.return"() : () -> ()
// NO-OP: {{^}}{{.*}}print-op-on-diagnostic.mlir:[[# @LINE + 6]]:3: error: 'func.return' op has 0 operands, but enclosing function (@f) returns 1{{$}}
// NO-OP-NEXT: {{^}}  return{{$}}
// NO-OP-NEXT: {{^}}  ^{{$}}
// NO-OP-NOT: {{.}}
func.func @f(%x: i32) -> i32 {
  // expected-error @+1 {{'func.return' op has 0 operands, but enclosing function (@f) returns 1}}
  return
}
