// --split-input-file processes each chunk between separator lines on its own
// and prints the results separated the same way, exactly like upstream
// mlir-opt.
//
// RUN: autodiff-opt --split-input-file %s | filecheck %s
// RUN: %mlir_opt --split-input-file %s | filecheck %s
// RUN: autodiff-opt --split-input-file %s > %t.ours
// RUN: %mlir_opt --split-input-file %s > %t.upstream
// RUN: diff %t.ours %t.upstream

/// Check that each chunk becomes its own module, in order.

// CHECK:       module {
// CHECK-LABEL:   func.func @first(
// CHECK:           return
// CHECK:       {{^}}// {{-----$}}
// CHECK-NEXT:  module {
// CHECK-LABEL:   func.func @second(
// CHECK:       {{^}}// {{-----$}}
// CHECK-NEXT:  module {
// CHECK-LABEL:   func.func @third(
func.func @first(%x: i32) -> i32 {
  return %x : i32
}

// -----

/// Check that a symbol may be defined again in another chunk.

func.func @second() {
  func.call @first_again() : () -> ()
  return
}
func.func @first_again() {
  return
}

// -----

// CHECK-NOT: @first(
func.func @third() {
  return
}
