// Upstream passes run the same way through --pass-pipeline, as individual
// flags (one or two dashes, like mlir-opt), and in upstream mlir-opt itself.
//
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(canonicalize,cse)' | filecheck %s
// RUN: autodiff-opt %s --pass-pipeline 'builtin.module(canonicalize, cse)' | filecheck %s
// RUN: autodiff-opt %s --pass-pipeline='canonicalize,cse' | filecheck %s
// RUN: autodiff-opt %s --canonicalize --cse | filecheck %s
// RUN: autodiff-opt %s -canonicalize -cse | filecheck %s
// RUN: %mlir_opt %s --pass-pipeline='builtin.module(canonicalize,cse)' | filecheck %s

/// Check that canonicalize folds the constant arithmetic and cse merges the
/// two identical additions.

// CHECK-LABEL: func.func @fold_and_merge(
// CHECK-SAME:      %[[X:.*]]: f32)
// CHECK:         %[[C:.*]] = arith.constant 5.000000e+00 : f32
// CHECK:         %[[A:.*]] = arith.addf %[[X]], %[[C]] : f32
// CHECK-NOT:     arith.addf
// CHECK:         %[[M:.*]] = arith.mulf %[[A]], %[[A]] : f32
// CHECK:         return %[[M]] : f32
func.func @fold_and_merge(%x: f32) -> f32 {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %five = arith.addf %two, %three : f32
  %a = arith.addf %x, %five : f32
  %b = arith.addf %x, %five : f32
  %m = arith.mulf %a, %b : f32
  return %m : f32
}
