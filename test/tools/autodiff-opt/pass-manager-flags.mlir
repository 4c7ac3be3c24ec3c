// Pass manager flags of mlir-opt: same output and exit code on the same
// pipeline.
//
// RUN: autodiff-opt %s --canonicalize --cse --dump-pass-pipeline 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --canonicalize --cse --dump-pass-pipeline 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=DUMP < %t.ours
// RUN: autodiff-opt %s --dump-pass-pipeline 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --dump-pass-pipeline 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
//
// RUN: autodiff-opt %s --cse --canonicalize --mlir-pass-statistics 2> %t.ours >/dev/null
// RUN: %mlir_opt %s --cse --canonicalize --mlir-pass-statistics 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s --check-prefix=STATS < %t.ours
//
// RUN: autodiff-opt %s --canonicalize --verify-each=false > %t.ours
// RUN: %mlir_opt %s --canonicalize --verify-each=false > %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: autodiff-opt %s --canonicalize --verify-each > %t.ours
// RUN: diff %t.ours %t.upstream
//
// RUN: autodiff-opt %s --canonicalize --emit-bytecode -o %t.mlirbc
// RUN: %mlir_opt %t.mlirbc > %t.ours
// RUN: diff %t.ours %t.upstream
// RUN: autodiff-opt %s --canonicalize --emit-bytecode | autodiff-opt > %t.ours
// RUN: diff %t.ours %t.upstream
//
// RUN: autodiff-opt --show-dialects > %t.ours
// RUN: filecheck %s --check-prefix=DIALECTS < %t.ours
// RUN: %mlir_opt --show-dialects > %t.upstream
// RUN: sed -e 's/autodiff,//' %t.ours | diff - %t.upstream
// RUN: autodiff-opt --help-hidden | filecheck %s --check-prefix=HIDDEN

// DUMP:      Pass Manager with 2 passes:
// DUMP-NEXT: builtin.module(
// DUMP-NEXT:   canonicalize{
// DUMP-NEXT:   cse
// DUMP-NEXT: )

// STATS: Pass statistics report
// STATS: CSE
// STATS: (S) {{[0-9]+}} num-cse'd

/// Every upstream dialect mlir-opt lists, and ours.
// DIALECTS: Available Dialects: {{.*}},arith,{{.*}},autodiff,bufferization,{{.*}},func,{{.*}},linalg,{{.*}},tensor,

// HIDDEN: USAGE: autodiff-opt
// HIDDEN: --mlir-print-ir-before=
// HIDDEN: HIDDEN OPTIONS:
// HIDDEN: --mlir-pass-statistics-display

func.func @f() -> i32 {
  %one = arith.constant 1 : i32
  %two = arith.constant 1 : i32
  %three = arith.addi %one, %two : i32
  return %three : i32
}
