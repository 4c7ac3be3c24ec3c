// --mlir-print-ir-after-failure prints the IR after the pass that failed
// only (also with --mlir-print-ir-after-all), as mlir-opt does.
//
// RUN: %not autodiff-opt %s --canonicalize --allow-unregistered-dialect --one-shot-bufferize --mlir-print-ir-after-failure 2> %t.ours >/dev/null
// RUN: %not %mlir_opt %s --canonicalize --allow-unregistered-dialect --one-shot-bufferize --mlir-print-ir-after-failure 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s < %t.ours
// RUN: %not autodiff-opt %s --canonicalize --allow-unregistered-dialect --one-shot-bufferize --mlir-print-ir-after-all --mlir-print-ir-after-failure 2> %t.ours >/dev/null
// RUN: %not %mlir_opt %s --canonicalize --allow-unregistered-dialect --one-shot-bufferize --mlir-print-ir-after-all --mlir-print-ir-after-failure 2> %t.upstream >/dev/null
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s < %t.ours

// CHECK-NOT:  IR Dump After Canonicalizer
// CHECK:      error: op was not bufferized
// CHECK:      // -----// IR Dump After OneShotBufferizePass Failed (one-shot-bufferize) //----- //
// CHECK-NEXT: module {

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = "test.opaque"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
