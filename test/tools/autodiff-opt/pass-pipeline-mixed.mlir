// One pipeline mixes our passes and upstream ones, nested or not, as flags in
// command-line order or as a --pass-pipeline.
//
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(func.func(canonicalize),autodiff-lower-to-cpu,cse)' \
// RUN:   | filecheck %s
// RUN: autodiff-opt %s --canonicalize --autodiff-lower-to-cpu --cse | filecheck %s
// RUN: autodiff-opt %s --pass-pipeline='builtin.module(canonicalize,autodiff-lower-to-cpu)' \
// RUN:   --mlir-print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=ORDER

/// Check that the tensor function ends up in the LLVM dialect, its result
/// written through a caller-owned out-parameter.

// CHECK-LABEL: llvm.func @double(
// CHECK-NOT:     tensor<
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_double(

/// Check that the upstream pass runs before ours and that ours expands into
/// upstream passes that run in the same pass manager.

// ORDER: IR Dump After Canonicalizer (canonicalize)
// ORDER: IR Dump After CheckCpuLowerable (autodiff-check-cpu-lowerable)
// ORDER: IR Dump After {{.*}}(one-shot-bufferize)
// ORDER: IR Dump After {{.*}}(reconcile-unrealized-casts)
func.func @double(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.add ins(%x, %x : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
