// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-jvp
// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-vjp
// RUN: autodiff-opt %s --split-input-file --verify-diagnostics --autodiff-vmap

// Unstructured control flow the transforms cannot take is diagnosed at the
// branch: a loop with no way out would be dropped by lift-cf-to-scf (it
// assumes loops end), so it is reported instead. Each transform reports it.

/// Check the diagnostic at the back edge of an endless loop.
func.func @spin(%x: f64) -> f64 {
  %c0 = arith.constant 0.0 : f64
  %p = arith.cmpf ogt, %x, %c0 : f64
  cf.cond_br %p, ^loop(%x : f64), ^out
^loop(%a: f64):
  %b = math.sin %a : f64
  // expected-error-re @+1 {{autodiff-{{(jvp|vjp|vmap)}}: cannot {{(differentiate|batch)}} @spin: this branch loops forever (no path from it reaches a return)}}
  cf.br ^loop(%b : f64)
^out:
  return %x : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @spin} : (f64, f64) -> (f64, f64)
  %1:2 = "autodiff.vjp"(%x, %t) {fn = @spin} : (f64, f64) -> (f64, f64)
  %v = "autodiff.vmap"(%x) {fn = @spin, in_axes = array<i64: -1>, out_axes = array<i64: -1>,
                            randomness = "error", axis_size = 2 : i64} : (f64) -> f64
  return %0#1, %1#1 : f64, f64
}

// -----

/// Check the same inside a multi-block scf.execute_region.
func.func @spin_region(%x: f64) -> f64 {
  %r = scf.execute_region -> f64 {
    cf.br ^loop(%x : f64)
  ^loop(%a: f64):
    %b = math.sin %a : f64
    // expected-error-re @+1 {{cannot {{(differentiate|batch)}} @spin_region: this branch loops forever (no path from it reaches the end of 'scf.execute_region')}}
    cf.br ^loop(%b : f64)
  }
  return %r : f64
}
func.func @caller(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @spin_region} : (f64, f64) -> (f64, f64)
  %1:2 = "autodiff.vjp"(%x, %t) {fn = @spin_region} : (f64, f64) -> (f64, f64)
  %v = "autodiff.vmap"(%x) {fn = @spin_region, in_axes = array<i64: -1>, out_axes = array<i64: -1>,
                            randomness = "error", axis_size = 2 : i64} : (f64) -> f64
  return %0#1, %1#1 : f64, f64
}
