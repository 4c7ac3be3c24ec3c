// Command-line mistakes are one-line errors and exit code 1.
//
// RUN: %not autodiff-opt %s %s 2>&1 | filecheck %s --check-prefix=TWO-INPUTS
// RUN: %not autodiff-opt %s -o 2>&1 | filecheck %s --check-prefix=NO-VALUE
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(cse)' --canonicalize 2>&1 \
// RUN:   | filecheck %s --check-prefix=MIXED
// RUN: %not autodiff-opt %s --verify-diagnostics=sometimes 2>&1 | filecheck %s --check-prefix=MODE
// RUN: %not autodiff-opt %s --mlir-print-debuginfo=maybe 2>&1 | filecheck %s --check-prefix=BOOL
// RUN: %not autodiff-opt %t.does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: autodiff-opt --mlir-print-debuginfo=false -- %s | filecheck %s

/// Check each message.

// TWO-INPUTS: {{^}}autodiff-opt: error: too many positional arguments: {{.*}} (expected one input file){{$}}
// TWO-INPUTS-NOT: {{.}}
// NO-VALUE: {{^}}autodiff-opt: error: option '-o' requires a value{{$}}
// NO-VALUE-NOT: {{.}}
// MIXED: {{^}}autodiff-opt: error: '--pass-pipeline' option can't be used with individual pass options (--canonicalize){{$}}
// MIXED-NOT: {{.}}
// MODE: {{^}}autodiff-opt: error: option '--verify-diagnostics=sometimes': expected 'all' or 'only-expected'{{$}}
// MODE-NOT: {{.}}
// BOOL: {{^}}autodiff-opt: error: option '--mlir-print-debuginfo=maybe' expects true or false, got 'maybe'{{$}}
// BOOL-NOT: {{.}}
// MISSING: {{^}}autodiff-opt: error: could not open input file '{{.*}}does-not-exist.mlir': No such file or directory{{$}}
// MISSING-NOT: {{.}}

/// Check that `--` ends the options and a boolean flag takes =false.

// CHECK-LABEL: func.func @f()
// CHECK-NOT:   loc(
func.func @f() {
  return
}
