// --mlir-print-debuginfo prints locations with the real file name, line and
// column; the implicit module is at line 0 like mlir-opt's; printed
// locations survive a re-parse.
//
// RUN: autodiff-opt %s --mlir-print-debuginfo | filecheck %s
// RUN: autodiff-opt %s --mlir-print-debuginfo | autodiff-opt --mlir-print-debuginfo | filecheck %s
// RUN: autodiff-opt %s --mlir-print-debuginfo > %t.ours
// RUN: %mlir_opt --irdl-file=%irdl %s --mlir-print-debuginfo > %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: autodiff-opt %s --mlir-pretty-debuginfo --mlir-print-debuginfo | filecheck %s --check-prefix=PRETTY

/// Check the locations of the functions, the ops, the block argument and the
/// implicit module.

// CHECK-DAG: #[[M:loc[0-9]*]] = loc("{{.*}}print-debuginfo.mlir":0:0)
// CHECK-DAG: loc("{{.*}}print-debuginfo.mlir":[[# @LINE + 5]]:1)
// CHECK-DAG: loc("{{.*}}print-debuginfo.mlir":[[# @LINE + 4]]:18)
// CHECK-DAG: loc("{{.*}}print-debuginfo.mlir":[[# @LINE + 4]]:8)
// CHECK-DAG: loc("{{.*}}print-debuginfo.mlir":[[# @LINE + 4]]:3)
// CHECK-DAG: loc("{{.*}}print-debuginfo.mlir":[[# @LINE + 6]]:1)
func.func @first(%seed: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed, %seed) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

func.func @second() {
  return
}

/// Check that pretty locations drop the loc("...") syntax.

// PRETTY: #loc{{[0-9]*}} = {{.*}}print-debuginfo.mlir:[[# @LINE - 5]]:3{{$}}
