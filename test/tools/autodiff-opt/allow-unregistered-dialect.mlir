// Ops of unknown dialects are errors unless --allow-unregistered-dialect, as
// in mlir-opt (the error comes from the check that runs after the parse).
//
// RUN: %not autodiff-opt %s 2>&1 | filecheck %s --check-prefix=ERR
// RUN: autodiff-opt %s --allow-unregistered-dialect | filecheck %s
// RUN: autodiff-opt %s -allow-unregistered-dialect --canonicalize | filecheck %s

/// Check the error, and the op kept as is when allowed.

// ERR: {{^}}{{.*}}allow-unregistered-dialect.mlir:[[# @LINE + 7]]:8: error: operation 'mystery.op' is from the unregistered dialect 'mystery' (use --allow-unregistered-dialect to accept it){{$}}
// ERR-NEXT: {{^}}{{.*}}"mystery.op"{{.*}}{{$}}
// ERR-NEXT: {{^}}{{ *}}^{{$}}
// ERR-NOT: {{.}}
// CHECK-LABEL: func.func @f(
// CHECK:         "mystery.op"(%{{.*}}) {key = 1 : i64} : (i32) -> i32
func.func @f(%x: i32) -> i32 {
  %y = "mystery.op"(%x) {key = 1} : (i32) -> i32
  return %y : i32
}
