// A pass that fails reports at the op at fault; --verify-diagnostics checks
// pass errors like any other, and without it the run exits 1 and prints no
// module.
//
// RUN: autodiff-opt --autodiff-lower-to-cpu --split-input-file --verify-diagnostics %s
// RUN: %not autodiff-opt --autodiff-lower-to-cpu --split-input-file %s 2>&1 | filecheck %s
// RUN: %not autodiff-opt --one-shot-bufferize --split-input-file %s 2>&1 | filecheck %s --check-prefix=UPSTREAM

/// Check that our pass rejects a result it cannot hand to the caller.

// CHECK: pass-failure.mlir:[[# @LINE + 2]]:1: error: autodiff-lower-to-cpu: result type tensor<?xf32> has a dynamic shape
// expected-error @+1 {{autodiff-lower-to-cpu: result type tensor<?xf32> has a dynamic shape}}
func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

/// Check that an autodiff op left for lowering is named.

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @not_transformed(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: pass-failure.mlir:[[# @LINE + 2]]:12: error: autodiff-lower-to-cpu: 'autodiff.jvp' must be removed
  // expected-error @+1 {{'autodiff.jvp' must be removed by its transform pass before lowering}}
  %y, %t = "autodiff.jvp"(%x, %x) {fn = @f} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %t : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that an upstream pass failure (here inside our lowering, and in
/// one-shot-bufferize on its own) is reported the same way, at the op.

func.func @not_bufferizable(%x: tensor<4xf32>) -> tensor<4xf32> {
  // UPSTREAM: pass-failure.mlir:[[# @LINE + 2]]:8: error: op was not bufferized
  // expected-error @+1 {{'autodiff.stop_gradient' must be removed by its transform pass}}
  %y = "autodiff.stop_gradient"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

/// A project pass's error at an op carries the op, as an upstream pass's
/// does ("see current operation", generic form); --mlir-print-op-on-diagnostic=false drops it.
// RUN: %not autodiff-opt --autodiff-lower-to-cpu %s --split-input-file 2>&1 | filecheck %s --check-prefix=OP-NOTE
// RUN: %not autodiff-opt --autodiff-lower-to-cpu %s --split-input-file --mlir-print-op-on-diagnostic=false 2>&1 | filecheck %s --check-prefix=NO-OP-NOTE

// OP-NOTE:      pass-failure.mlir:[[# @LINE + 9]]:8: error: autodiff-lower-to-cpu: 'autodiff.stop_gradient' must be removed
// OP-NOTE-NEXT: {{^}}  %y = "autodiff.stop_gradient"(%x) : (tensor<3xf32>) -> tensor<3xf32>{{$}}
// OP-NOTE-NEXT: {{^}}       ^{{$}}
// OP-NOTE-NEXT: pass-failure.mlir:[[# @LINE + 6]]:8: note: see current operation: %0 = "autodiff.stop_gradient"(%arg0) : (tensor<3xf32>) -> tensor<3xf32>{{$}}
// NO-OP-NOTE:   pass-failure.mlir:[[# @LINE + 5]]:8: error: autodiff-lower-to-cpu: 'autodiff.stop_gradient' must be removed
// NO-OP-NOTE-NOT: see current operation

func.func @stop(%x: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{'autodiff.stop_gradient' must be removed by its transform pass}}
  %y = "autodiff.stop_gradient"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
