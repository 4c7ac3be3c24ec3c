// RUN: autodiff-run %s --entry sinh --arg 0.5 | filecheck %s --match-full-lines --check-prefix=SINH
// RUN: autodiff-run %s --entry cosh --arg 0.5 | filecheck %s --match-full-lines --check-prefix=COSH
// RUN: autodiff-run %s --entry tan --arg 0.5 | filecheck %s --match-full-lines --check-prefix=TAN
// RUN: autodiff-run %s --entry log10 --arg 0.5 | filecheck %s --match-full-lines --check-prefix=LOG10
// RUN: autodiff-run %s --entry cbrt --arg 0.5 | filecheck %s --match-full-lines --check-prefix=CBRT
// RUN: autodiff-run %s --entry erf --arg 0.5 | filecheck %s --match-full-lines --check-prefix=ERF
// RUN: autodiff-run %s --entry atan --arg 0.5 | filecheck %s --match-full-lines --check-prefix=ATAN
// RUN: autodiff-run %s --entry log2 --arg 0.5 | filecheck %s --match-full-lines --check-prefix=LOG2
// RUN: autodiff-run %s --entry exp2 --arg 0.5 | filecheck %s --match-full-lines --check-prefix=EXP2
// RUN: autodiff-run %s --entry log1p --arg 0.5 | filecheck %s --match-full-lines --check-prefix=LOG1P
// RUN: autodiff-run %s --entry log1pf --arg '[0.5, 1e-9]' | filecheck %s --match-full-lines --check-prefix=LOG1PF
// RUN: autodiff-opt %s --autodiff-lower-to-cpu | filecheck %s --check-prefix=LOWERED

// A function may have the name of a C math-library routine that the lowered
// code calls: the lowering renames the user's function (`user$sinh`) and the
// runtime finds it under the name it was given. Before, each lowered
// `math.sinh` called the user's @sinh (itself: an endless recursion) and
// @log1p's `math.log1p` called @log1p.

/// Check that each function computes its routine at 0.5 (values from tables).
// SINH: result[0]: f64 = 0.521095305494
func.func @sinh(%x: f64) -> f64 {
  %y = math.sinh %x : f64
  return %y : f64
}

// COSH: result[0]: f64 = 1.12762596521
func.func @cosh(%x: f64) -> f64 {
  %y = math.cosh %x : f64
  return %y : f64
}

// TAN: result[0]: f64 = 0.546302489844
func.func @tan(%x: f64) -> f64 {
  %y = math.tan %x : f64
  return %y : f64
}

// LOG10: result[0]: f64 = -0.301029995664
func.func @log10(%x: f64) -> f64 {
  %y = math.log10 %x : f64
  return %y : f64
}

// CBRT: result[0]: f64 = 0.793700525984
func.func @cbrt(%x: f64) -> f64 {
  %y = math.cbrt %x : f64
  return %y : f64
}

// ERF: result[0]: f64 = 0.520499877813
func.func @erf(%x: f64) -> f64 {
  %y = math.erf %x : f64
  return %y : f64
}

// ATAN: result[0]: f64 = 0.463647609001
func.func @atan(%x: f64) -> f64 {
  %y = math.atan %x : f64
  return %y : f64
}

// LOG2: result[0]: f64 = -1
func.func @log2(%x: f64) -> f64 {
  %y = math.log2 %x : f64
  return %y : f64
}

// EXP2: result[0]: f64 = 1.41421356237
func.func @exp2(%x: f64) -> f64 {
  %y = math.exp2 %x : f64
  return %y : f64
}

// LOG1P: result[0]: f64 = 0.405465108108
func.func @log1p(%x: f64) -> f64 {
  %y = math.log1p %x : f64
  return %y : f64
}

/// Check the f32 routine's name too, on a tensor (log1p keeps 1e-9 exactly).
// LOG1PF: result[0]: tensor<2xf32> = [0.405465, 1e-09]
func.func @log1pf(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = math.log1p %x : tensor<2xf32>
  return %y : tensor<2xf32>
}

/// Check that the lowered module records the renames, defines the renamed
/// functions with their C wrappers, and declares the library routines under
/// their own names.
// LOWERED: module attributes {autodiff.renamed_symbols = {
// LOWERED-SAME: log1p = "user$log1p"
// LOWERED-SAME: sinh = "user$sinh"
// LOWERED-DAG: llvm.func @log1p(f64) -> f64
// LOWERED-DAG: llvm.func @user$log1p(%{{.*}}: f64) -> f64
// LOWERED-DAG: llvm.func @_mlir_ciface_user$log1p(
// LOWERED-DAG: llvm.call @log1p(
// LOWERED-DAG: llvm.func @user$sinh(
