// RUN: autodiff-opt %s --autodiff-unshare-empty-tensors | filecheck %s

// The flag --list-passes shows is usable on its own (transforms/bufferize.py):
// two loops whose inits are one (CSE'd) tensor.empty get one empty each, so
// bufferization cannot place both loops' values in one buffer.

// CHECK-LABEL: func.func @two_loops(
// CHECK:         %[[E0:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT:    %[[E1:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT:    tensor.empty() : tensor<4xf32>
// CHECK:         scf.for {{.*}} iter_args(%{{.*}} = %[[E1]]) -> (tensor<4xf32>)
// CHECK:         scf.for {{.*}} iter_args(%{{.*}} = %[[E0]]) -> (tensor<4xf32>)
func.func @two_loops(%n: index) -> (tensor<4xf32>, tensor<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %e = tensor.empty() : tensor<4xf32>
  %a = scf.for %i = %c0 to %n step %c1 iter_args(%x = %e) -> tensor<4xf32> {
    scf.yield %x : tensor<4xf32>
  }
  %b = scf.for %i = %c0 to %n step %c1 iter_args(%y = %e) -> tensor<4xf32> {
    scf.yield %y : tensor<4xf32>
  }
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
