// The IR printing flags print what mlir-opt prints on the same input and
// pipeline, byte for byte (MLIR's own IR printer does the printing; a pass
// filter keeps the dumps of the passes named).
//
// RUN: autodiff-opt %s --canonicalize --cse --mlir-print-ir-before=cse --mlir-print-ir-after=canonicalize 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --canonicalize --cse --mlir-print-ir-before=cse --mlir-print-ir-after=canonicalize 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=FILTER < %t.ours
//
// RUN: autodiff-opt %s --canonicalize --cse --mlir-print-ir-before-all 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --canonicalize --cse --mlir-print-ir-before-all 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=BEFORE-ALL < %t.ours
//
// RUN: autodiff-opt %s --canonicalize --cse --canonicalize --mlir-print-ir-after-all --mlir-print-ir-after-change 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --canonicalize --cse --canonicalize --mlir-print-ir-after-all --mlir-print-ir-after-change 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=CHANGE < %t.ours
//
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(canonicalize,cse))' --mlir-print-ir-after=cse --mlir-print-ir-module-scope --mlir-disable-threading 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --pass-pipeline='builtin.module(func.func(canonicalize,cse))' --mlir-print-ir-after=cse --mlir-print-ir-module-scope --mlir-disable-threading 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=SCOPE < %t.ours
//
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(canonicalize,cse))' --mlir-print-ir-before=cse --mlir-disable-threading 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --pass-pipeline='builtin.module(func.func(canonicalize,cse))' --mlir-print-ir-before=cse --mlir-disable-threading 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=NESTED < %t.ours

/// Errors: an unknown pass name, module scope on a multi-threaded run (same
/// message and exit code 1 as mlir-opt).

// RUN: %not autodiff-opt %s --cse --mlir-print-ir-before=no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: %not %mlir_opt %s --cse --mlir-print-ir-before=no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: %not autodiff-opt %s --cse --mlir-print-ir-after=cse,nope 2>&1 | filecheck %s --check-prefix=UNKNOWN-AFTER
// RUN: %not %mlir_opt %s --cse --mlir-print-ir-after=cse,nope 2>&1 | filecheck %s --check-prefix=UNKNOWN-AFTER
// RUN: %not autodiff-opt %s --cse --mlir-print-ir-after-all --mlir-print-ir-module-scope 2>&1 | filecheck %s --check-prefix=THREADS
// RUN: %not %mlir_opt %s --cse --mlir-print-ir-after-all --mlir-print-ir-module-scope 2>&1 | filecheck %s --check-prefix=THREADS

// FILTER:      // -----// IR Dump After Canonicalizer (canonicalize) //----- //
// FILTER-NEXT: module {
// FILTER:      // -----// IR Dump Before CSE (cse) //----- //
// FILTER-NOT:  IR Dump

// BEFORE-ALL: IR Dump Before Canonicalizer (canonicalize)
// BEFORE-ALL: arith.addi
// BEFORE-ALL: IR Dump Before CSE (cse)
// BEFORE-ALL-NOT: IR Dump

/// The second canonicalize changes nothing: no dump after it.
// CHANGE:     IR Dump After Canonicalizer (canonicalize)
// CHANGE-NOT: IR Dump After Canonicalizer

// SCOPE:      // -----// IR Dump After CSE (cse) ('func.func' operation: @f) //----- //
// SCOPE-NEXT: module {
// SCOPE:      // -----// IR Dump After CSE (cse) ('func.func' operation: @g) //----- //

// NESTED:      // -----// IR Dump Before CSE (cse) //----- //
// NESTED-NEXT: func.func @f()
// NESTED:      // -----// IR Dump Before CSE (cse) //----- //
// NESTED-NEXT: func.func @g()

// UNKNOWN: for the --mlir-print-ir-before option: Cannot find option named 'no-such-pass'!
// UNKNOWN-AFTER: for the --mlir-print-ir-after option: Cannot find option named 'nope'!
// THREADS: <unknown>:0: error: IR print for module scope can't be setup on a pass-manager without disabling multi-threading first.

func.func @f() -> i32 {
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %three = arith.addi %one, %two : i32
  return %three : i32
}
func.func @g() -> i32 {
  %one = arith.constant 1 : i32
  return %one : i32
}
