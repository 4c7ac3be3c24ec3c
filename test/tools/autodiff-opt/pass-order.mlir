// Pass flags apply in command-line order, like mlir-opt.
//
// RUN: autodiff-opt %s --cse --canonicalize --mlir-print-ir-after-all -o %t.1 2>&1 \
// RUN:   | filecheck %s --check-prefix=CSE-FIRST
// RUN: autodiff-opt %s --canonicalize --cse --mlir-print-ir-after-all -o %t.2 2>&1 \
// RUN:   | filecheck %s --check-prefix=CANON-FIRST
// RUN: autodiff-opt %s --one-shot-bufferize=bufferize-function-boundaries --convert-linalg-to-loops \
// RUN:   | filecheck %s --check-prefix=LOOPS
// RUN: autodiff-opt %s --convert-linalg-to-loops --one-shot-bufferize=bufferize-function-boundaries \
// RUN:   | filecheck %s --check-prefix=NO-LOOPS

/// Check the order of the IR dumps.

// CSE-FIRST:   IR Dump After CSE (cse)
// CSE-FIRST:   IR Dump After Canonicalizer (canonicalize)
// CANON-FIRST: IR Dump After Canonicalizer (canonicalize)
// CANON-FIRST: IR Dump After CSE (cse)

/// Check that order changes the result: linalg becomes loops only once it is
/// on buffers, so converting before bufferizing leaves the linalg op.

// LOOPS-LABEL: func.func @add(
// LOOPS:         scf.for
// LOOPS-NOT:     linalg.add
// NO-LOOPS-LABEL: func.func @add(
// NO-LOOPS-NOT:    scf.for
// NO-LOOPS:        linalg.add ins({{.*}} : memref<4xf32{{.*}}>, memref<4xf32{{.*}}>)
func.func @add(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %0 = linalg.add ins(%x, %y : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
