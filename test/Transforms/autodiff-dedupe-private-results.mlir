// Private functions return each value once; their calls reuse the result.
// Rewriting one function can give another duplicates (@chain returns both
// results of a call of @twice): it is deduped too, in the same run. Public
// functions, and modules where nothing returns a value twice, are untouched.
//
// (The pass ends --autodiff-jvp/vjp/vmap; with no autodiff op, --autodiff-vjp
// is its clean-up: canonicalize, cse, then the dedupe.)
//
// RUN: autodiff-opt %s --autodiff-vjp | filecheck %s

// CHECK-LABEL: func.func private @twice(%arg0: f32) -> f32
// CHECK-NEXT:    %[[M:.*]] = arith.mulf %arg0, %arg0 : f32
// CHECK-NEXT:    return %[[M]] : f32
func.func private @twice(%x: f32) -> (f32, f32) {
  %m = arith.mulf %x, %x : f32
  return %m, %m : f32, f32
}

// CHECK-LABEL: func.func private @chain(%arg0: f32) -> f32
// CHECK-NEXT:    %[[C:.*]] = call @twice(%arg0) : (f32) -> f32
// CHECK-NEXT:    return %[[C]] : f32
func.func private @chain(%x: f32) -> (f32, f32) {
  %a, %b = call @twice(%x) : (f32) -> (f32, f32)
  return %a, %b : f32, f32
}

// CHECK-LABEL: func.func @main(%arg0: f32) -> (f32, f32)
// CHECK-NEXT:    %[[R:.*]] = call @chain(%arg0) : (f32) -> f32
// CHECK-NEXT:    %[[S:.*]] = arith.addf %[[R]], %[[R]] : f32
// CHECK-NEXT:    return %[[S]], %[[S]] : f32, f32
func.func @main(%x: f32) -> (f32, f32) {
  %a, %b = call @chain(%x) : (f32) -> (f32, f32)
  %s = arith.addf %a, %b : f32
  return %s, %s : f32, f32
}

// CHECK-LABEL: func.func private @pair(%arg0: f32, %arg1: f32) -> (f32, f32)
// CHECK-NEXT:    return %arg0, %arg1 : f32, f32
func.func private @pair(%x: f32, %y: f32) -> (f32, f32) {
  return %x, %y : f32, f32
}
