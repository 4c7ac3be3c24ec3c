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

/// Pass flags run on the root op, whatever it is (the pass manager is anchored
/// there, as in mlir-opt); a project pass needs a module.
// RUN: autodiff-opt %S/Inputs/function-root.mlir --no-implicit-module --cse --canonicalize --dump-pass-pipeline --mlir-print-ir-after=cse > %t.ours 2>&1
// RUN: %mlir_opt %S/Inputs/function-root.mlir --no-implicit-module --cse --canonicalize --dump-pass-pipeline --mlir-print-ir-after=cse > %t.upstream 2>&1
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=ROOT < %t.ours
// RUN: %not autodiff-opt %S/Inputs/function-root.mlir --no-implicit-module --autodiff-vjp 2>&1 | filecheck %s --check-prefix=OURS

// ROOT:      Pass Manager with 2 passes:
// ROOT-NEXT: func.func(
// ROOT:      IR Dump After CSE (cse)
// ROOT-NEXT: func.func @root() -> i32 {
// ROOT:      %c2_i32 = arith.constant 2 : i32
// OURS: error: pass 'autodiff-vjp' runs on a 'builtin.module'; the input's root is a 'func.func'

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
