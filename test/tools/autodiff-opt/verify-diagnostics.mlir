// --verify-diagnostics passes when every diagnostic is expected and every
// expectation is produced; chunks that succeed are still printed. The same
// file passes upstream mlir-opt, so the two verifiers agree.
//
// RUN: autodiff-opt --split-input-file --verify-diagnostics %s | filecheck %s
// RUN: %mlir_opt --irdl-file=%irdl --split-input-file --verify-diagnostics %s | filecheck %s

/// Check that @+N points N lines down.

func.func @plus(%seed: i64) -> tensor<4xf32> {
  // expected-error @+2 {{op expects exactly 2 operands, but got 1}}
  // An op spanning several lines is located where it starts.
  %r = "autodiff.philox"(%seed)
      {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that @-N points N lines up.

func.func @minus(%seed: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
  // expected-error @-2 {{op expects exactly 2 operands, but got 1}}
}

// -----

/// Check that an expectation without designator is about its own line.

func.func @same_line(%seed: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32> // expected-error {{expects exactly 2}}
  return %r : tensor<4xf32>
}

// -----

/// Check that @above skips lines holding expectations.

func.func @above(%x: tensor<4xf32>) -> tensor<4xf64> {
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf64>
  // expected-error @above {{expected 'tensor<4xf32>' but got 'tensor<4xf64>'}}
  return %y : tensor<4xf64>
}

// -----

func.func @twice() {
  return
}
func.func @twice() {
  // expected-note @-4 {{see existing symbol definition here}}
  // expected-error @above {{redefinition of symbol named 'twice'}}
  return
}

// -----

/// Check that @below skips lines holding expectations, and that notes are
/// matched at their own location.

// expected-note @below {{see existing symbol definition here}}
// expected-error @+4 {{redefinition of symbol named 'again'}}
func.func @again() {
  return
}
func.func @again() {
  return
}

// -----

func.func @below() -> f32 {
  // expected-error @below {{expected base type 'builtin.tensor' but got 'builtin.f32'}}
  %r = "autodiff.random"() {distribution = "normal"} : () -> f32
  return %r : f32
}

// -----

/// Check that expected-error-re treats {{...}} blocks as regular expressions.

func.func @regex(%seed: i64) -> tensor<4xf32> {
  // expected-error-re @+1 {{op expects exactly {{[0-9]+}} operands, but got {{[0-9]}}}}
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that @unknown matches a diagnostic without a file location.

func.func @unknown_location(%seed: i64) -> tensor<4xf32> {
  // expected-error @unknown {{op expects exactly 2 operands, but got 1}}
  %r = "autodiff.philox"(%seed) {distribution = "uniform"} : (i64) -> tensor<4xf32> loc(unknown)
  return %r : tensor<4xf32>
}

// -----

/// Check that chunks without diagnostics are printed, separated like the input.

// CHECK-LABEL: func.func @clean(
// CHECK-SAME:      %[[SEED:.*]]: i64)
// CHECK:         %[[R:.*]] = "autodiff.philox"(%[[SEED]], %[[SEED]]) {distribution = "bits"}
// CHECK:         return %[[R]]
// CHECK:       // -----
// CHECK-LABEL: func.func @also_clean(
func.func @clean(%seed: i64) -> tensor<4xi32> {
  %r = "autodiff.philox"(%seed, %seed) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

func.func @also_clean() {
  return
}
