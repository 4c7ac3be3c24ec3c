// Wrapping top-level ops in the implicit module moves no line and no column:
// diagnostics and locations point into the file as written, even when the
// first op starts on line 1 (Inputs/first-op-on-line-1.mlir), exactly where
// upstream mlir-opt points.
//
// RUN: %not autodiff-opt %S/Inputs/first-op-on-line-1.mlir 2>&1 | filecheck %s --check-prefix=LINE1
// RUN: %not %mlir_opt --irdl-file=%irdl %S/Inputs/first-op-on-line-1.mlir 2>&1 \
// RUN:   | filecheck %s --check-prefix=LINE1
// RUN: %not autodiff-opt --split-input-file %s 2>&1 | filecheck %s --check-prefix=ERR
// RUN: %not %mlir_opt --irdl-file=%irdl --split-input-file %s 2>&1 | filecheck %s --check-prefix=ERR

/// Check the column of an error on line 1, where `module {` had to go.

// LINE1: first-op-on-line-1.mlir:1:47: error: op expects exactly 2 operands, but got 1

/// Check a verifier error in the second of several top-level functions.

func.func @fine() {
  return
}
func.func @broken(%x: tensor<4xf32>) -> tensor<4xf64> {
  // ERR: implicit-module-locations.mlir:[[# @LINE + 1]]:8: error: expected 'tensor<4xf32>' but got 'tensor<4xf64>'
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}

// -----

/// Check a parse error after an alias definition and a function.

#id = affine_map<(d0) -> (d0)>
func.func @fine_again() {
  return
}
func.func @bad_type() {
  // ERR: implicit-module-locations.mlir:[[# @LINE + 1]]:27: error: invalid type identifier
  %c = arith.constant 1 : !!!
  return
}

// -----

/// Check a symbol error reported by the verification of the whole module
/// after the parse, with the note pointing at the first definition.

func.func @twice() {
  return
}
// ERR: implicit-module-locations.mlir:[[# @LINE + 1]]:1: error: redefinition of symbol named 'twice'
func.func @twice() {
  // ERR: implicit-module-locations.mlir:[[# @LINE - 5]]:1: note: see existing symbol definition here
  return
}
