// An @unknown expectation that nothing produces (upstream mlir-opt 22 aborts
// on this one; autodiff-opt reports it like any other).
func.func @f() {
  // expected-error @unknown {{never emitted}}
  return
}
