// IR printing covers the project's passes by their flag names, with the
// header mlir-opt prints: a pass that runs Python code appears as itself
// (autodiff-vjp-core), a pass that is a pipeline (autodiff-vjp) is printed
// before its first and after its last pass.
//
// RUN: autodiff-opt %s --autodiff-vjp --mlir-print-ir-before=autodiff-vjp --mlir-print-ir-after=autodiff-vjp 2>&1 >/dev/null | filecheck %s --check-prefix=PIPE
// RUN: autodiff-opt %s --autodiff-vjp --mlir-print-ir-after=autodiff-vjp-core,autodiff-dedupe-private-results 2>&1 >/dev/null | filecheck %s --check-prefix=LEAF
// RUN: autodiff-opt %s --autodiff-vjp --cse --mlir-print-ir-before-all 2>&1 >/dev/null | filecheck %s --check-prefix=ALL
// RUN: autodiff-opt %s --autodiff-vjp --cse --mlir-print-ir-before=cse --mlir-print-ir-module-scope --mlir-disable-threading 2>&1 >/dev/null | filecheck %s --check-prefix=SCOPE

// PIPE:      // -----// IR Dump Before Vjp (autodiff-vjp) //----- //
// PIPE-NEXT: module {
// PIPE:        "autodiff.vjp"
// PIPE:      // -----// IR Dump After Vjp (autodiff-vjp) //----- //
// PIPE-NEXT: module {
// PIPE-NOT:    "autodiff.vjp"
// PIPE-NOT:  IR Dump

// LEAF:      // -----// IR Dump After VjpCore (autodiff-vjp-core) //----- //
// LEAF-NEXT: module {
// LEAF:      // -----// IR Dump After DedupeResults (autodiff-dedupe-private-results) //----- //
// LEAF-NOT:  IR Dump

// ALL: IR Dump Before VjpCore (autodiff-vjp-core)
// ALL: IR Dump Before Canonicalizer (canonicalize)
// ALL: IR Dump Before DedupeResults (autodiff-dedupe-private-results)
// ALL: IR Dump Before CSE (cse)

/// One cse runs in autodiff-vjp's clean-up, one is given on the command line.
// SCOPE-COUNT-2: IR Dump Before CSE (cse) ('builtin.module' operation)
// SCOPE-NOT: IR Dump

func.func @square(%x: f32) -> f32 {
  %y = arith.mulf %x, %x : f32
  return %y : f32
}
func.func @grad(%x: f32, %ct: f32) -> (f32, f32) {
  %y, %g = "autodiff.vjp"(%x, %ct) {fn = @square} : (f32, f32) -> (f32, f32)
  return %y, %g : f32, f32
}
