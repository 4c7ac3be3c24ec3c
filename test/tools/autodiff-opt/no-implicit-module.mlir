// --no-implicit-module: the input's one top-level op is the root, whatever
// it is; several top-level ops are an error (as in mlir-opt).
//
// RUN: autodiff-opt %s --no-implicit-module --split-input-file > %t.ours
// RUN: %mlir_opt %s --no-implicit-module --split-input-file > %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s < %t.ours
// RUN: %not autodiff-opt %S/Inputs/two-functions.mlir --no-implicit-module 2>&1 | filecheck %s --check-prefix=TWO
// RUN: %not %mlir_opt %S/Inputs/two-functions.mlir --no-implicit-module 2>&1 | filecheck %s --check-prefix=TWO
// RUN: %not autodiff-opt %s --no-implicit-module --split-input-file --pass-pipeline='builtin.module(canonicalize)' 2>&1 | filecheck %s --check-prefix=ANCHOR
// RUN: %not %mlir_opt %s --no-implicit-module --split-input-file --pass-pipeline='builtin.module(canonicalize)' 2>&1 | filecheck %s --check-prefix=ANCHOR

// CHECK-NOT: module
// CHECK:     func.func @f()
// CHECK:     module @named

// TWO: two-functions.mlir:0:0: error: source must contain a single top-level operation, found: 2
// ANCHOR: no-implicit-module.mlir:[[# @LINE + 4]]:1: error: can't run 'builtin.module' pass manager on 'func.func' op
// ANCHOR-NEXT: {{^}}func.func @f() {{[{]}}{{$}}
// ANCHOR-NEXT: {{^}}^{{$}}

func.func @f() {
  return
}

// -----

module @named {
}
