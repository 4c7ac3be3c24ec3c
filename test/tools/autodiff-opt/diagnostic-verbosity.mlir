// --mlir-diagnostic-verbosity-level drops diagnostics below a severity, as in
// mlir-opt (here a remark from the transform interpreter).
//
// RUN: autodiff-opt %s --transform-interpreter 2> %t.ours > /dev/null
// RUN: %mlir_opt %s --transform-interpreter 2> %t.upstream > /dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=REMARK < %t.ours
// RUN: autodiff-opt %s --transform-interpreter --mlir-diagnostic-verbosity-level=remarks 2>&1 >/dev/null | filecheck %s --check-prefix=REMARK
// RUN: autodiff-opt %s --transform-interpreter --mlir-diagnostic-verbosity-level=warnings 2>&1 >/dev/null | filecheck %s --check-prefix=NONE --allow-empty
// RUN: autodiff-opt %s --transform-interpreter --mlir-diagnostic-verbosity-level=errors 2>&1 >/dev/null | filecheck %s --check-prefix=NONE --allow-empty
// RUN: %mlir_opt %s --transform-interpreter --mlir-diagnostic-verbosity-level=errors 2>&1 >/dev/null | filecheck %s --check-prefix=NONE --allow-empty
// RUN: %not autodiff-opt %s --mlir-diagnostic-verbosity-level=all 2>&1 | filecheck %s --check-prefix=BAD
// RUN: %not %mlir_opt %s --mlir-diagnostic-verbosity-level=all 2>&1 | filecheck %s --check-prefix=BAD

// REMARK:      diagnostic-verbosity.mlir:[[# @LINE + 8]]:8: remark: found a constant
// REMARK-NEXT: {{^}}  %c = arith.constant 1 : i32{{$}}
// REMARK-NEXT: {{^}}       ^{{$}}
// REMARK-NEXT: diagnostic-verbosity.mlir:[[# @LINE + 5]]:8: note: see current operation: %c1_i32 = arith.constant 1 : i32
// NONE-NOT: {{.}}
// BAD: for the --mlir-diagnostic-verbosity-level option: Cannot find option named 'all'!

func.func @f() -> i32 {
  %c = arith.constant 1 : i32
  return %c : i32
}
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %c = transform.structured.match ops{["arith.constant"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.debug.emit_remark_at %c, "found a constant" : !transform.any_op
    transform.yield
  }
}
