// --irdl-file loads extra IRDL dialects, as in mlir-opt. Our own dialect is
// always loaded; passing its IRDL file again is harmless (loading is
// idempotent, where loading twice would otherwise abort).
//
// RUN: autodiff-opt --irdl-file=%irdl --irdl-file=%S/Inputs/extra.irdl.mlir %s | filecheck %s
// RUN: autodiff-opt --irdl-file %irdl --irdl-file=%irdl --irdl-file=%S/Inputs/extra.irdl.mlir %s \
// RUN:   | filecheck %s
// RUN: autodiff-opt --irdl-file=%S/Inputs/extra.irdl.mlir %s | filecheck %s
// RUN: autodiff-opt --irdl-file=%S/Inputs/extra.irdl.mlir --irdl-file=%S/Inputs/extra.irdl.mlir %s \
// RUN:   | filecheck %s
// RUN: %not autodiff-opt %s 2>&1 | filecheck %s --check-prefix=UNLOADED
// RUN: %not autodiff-opt --irdl-file=%t.does-not-exist %s 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: %not autodiff-opt --irdl-file=%S/Inputs/broken.irdl.mlir %s 2>&1 | filecheck %s --check-prefix=INVALID

/// Check that the extra dialect's op parses and prints (autodiff ops keep
/// working next to it).

// CHECK-LABEL: func.func @f(
// CHECK-SAME:      %[[A:.*]]: i32
// CHECK:         %[[P:.*]] = "extra.pair"(%[[A]], %[[A]]) : (i32, i32) -> i32
// CHECK:         "autodiff.stop_gradient"(%[[P]])

/// Check the errors: dialect not loaded, IRDL file missing or invalid.

// UNLOADED: irdl-file.mlir:[[# @LINE + 9]]:8: error: operation 'extra.pair' is from the unregistered dialect 'extra'
// MISSING: {{^}}autodiff-opt: error: could not load IRDL file '{{.*}}does-not-exist': No such file or directory
// MISSING-NOT: {{.}}
// INVALID: {{^}}{{.*}}broken.irdl.mlir:4:18: error: expected operation name in quotes{{$}}
// INVALID-NEXT: {{^}}autodiff-opt: error: could not load IRDL file '{{.*}}broken.irdl.mlir': not a valid IRDL file{{$}}
// INVALID-NOT: {{.}}
func.func @f(%a: i32) -> i32 {
  // The extra dialect's op, with the operand types its IRDL definition
  // unifies (it would be rejected with two different types).
  %p = "extra.pair"(%a, %a) : (i32, i32) -> i32
  %s = "autodiff.stop_gradient"(%p) : (i32) -> i32
  return %s : i32
}
