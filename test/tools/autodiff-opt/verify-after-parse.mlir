// After parsing, the whole module is verified, as in mlir-opt: a single
// function's call to an undefined symbol is only caught once the function
// sits in its (implicit) module.
//
// RUN: autodiff-opt --split-input-file --verify-diagnostics %s
// RUN: %mlir_opt --irdl-file=%irdl --split-input-file --verify-diagnostics %s

/// Check a lone function calling a function that does not exist.

func.func @lone() {
  // expected-error @+1 {{'func.call' op 'missing' does not reference a valid function}}
  func.call @missing() : () -> ()
  return
}

// -----

/// Check a call with the wrong type in a multi-function input.

func.func @callee(%x: i32) {
  return
}
func.func @caller(%x: i64) {
  // expected-error @+1 {{operand type mismatch: expected operand type 'i32', but provided 'i64' for operand number 0}}
  func.call @callee(%x) : (i64) -> ()
  return
}
