// A pass restricted to an op type (func.func here) given as a flag runs on
// those ops inside the module, like mlir-opt's implicit nesting; in
// --pass-pipeline the nesting is written out.
//
// RUN: autodiff-opt %s --llvm-request-c-wrappers | filecheck %s
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(llvm-request-c-wrappers))' | filecheck %s
// RUN: %mlir_opt %s --llvm-request-c-wrappers | filecheck %s
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(llvm-request-c-wrappers)' 2>&1 \
// RUN:   | filecheck %s --check-prefix=UNNESTED

/// Check that every function got the attribute.

// CHECK-LABEL: func.func @a() attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @b() attributes {llvm.emit_c_interface}

/// Check that the explicit pipeline must nest, with upstream's message.

// UNNESTED: autodiff-opt: error: {{.*}}restricted to 'func.func'{{.*}}
func.func @a() {
  return
}
func.func @b() {
  return
}
