// Top-level ops are wrapped in an implicit module, unless the input is a
// single builtin.module, exactly as upstream mlir-opt does.
//
// RUN: autodiff-opt --split-input-file %s | filecheck %s
// RUN: autodiff-opt --split-input-file %s > %t.ours
// RUN: %mlir_opt --irdl-file=%irdl --split-input-file %s > %t.upstream
// RUN: diff %t.ours %t.upstream

/// Check that several functions share one implicit module.

// CHECK:       module {
// CHECK-NEXT:    func.func @one()
// CHECK:         func.func @two()
// CHECK:       }
// CHECK-NOT:   module
func.func @one() {
  return
}
func.func @two() {
  return
}

// -----

/// Check that an explicit module is kept, name and attributes included, and
/// not wrapped again.

// CHECK-LABEL: module @named attributes {test.flag} {
// CHECK-NEXT:    func.func @inside()
module @named attributes {test.flag} {
  func.func @inside() {
    return
  }
}

// -----

/// Check that two modules are wrapped together in an implicit module.

// CHECK:       module {
// CHECK-NEXT:    module @a {
// CHECK:         module @b {
module @a {
}
module @b {
}

// -----

/// Check that attribute aliases before the ops stay at the top level.

// CHECK:       #[[MAP:.*]] = affine_map<(d0) -> (d0)>
// CHECK:       module {
// CHECK-LABEL:   func.func @uses_alias(
// CHECK:           linalg.generic {indexing_maps = [#[[MAP]], #[[MAP]]]
#map = affine_map<(d0) -> (d0)>
!t = tensor<4xf32>
func.func @uses_alias(%x: !t) -> !t {
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%x : !t) outs(%x : !t) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  } -> !t
  return %0 : !t
}
func.func @second(%x: !t) -> !t {
  return %x : !t
}

// -----

/// Check that a single op that is not a module is wrapped too.

// CHECK:       module {
// CHECK-NEXT:    "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
// CHECK-NEXT:  }
%bits = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
