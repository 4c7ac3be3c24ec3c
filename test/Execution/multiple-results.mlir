// RUN: autodiff-run %s --entry mixed --arg '[1.5, -2]' --arg 4 | filecheck %s --match-full-lines --check-prefix=MIXED
// RUN: autodiff-run %s --entry nothing --arg '[1, 2]' --print-ir | filecheck %s --check-prefix=NOTHING

/// Check interleaved tensor and scalar results, an argument returned as is
/// (copied into its own result buffer) and the same value returned twice.
// MIXED:      result[0]: tensor<2xf32> = [1.5, -2]
// MIXED-NEXT: result[1]: f32 = -0.5
// MIXED-NEXT: result[2]: i1 = true
// MIXED-NEXT: result[3]: tensor<i32> = 4
// MIXED-NEXT: result[4]: f64 = 8
// MIXED-NEXT: result[5]: tensor<2xf32> = [1.5, -2]
func.func @mixed(%x: tensor<2xf32>, %n: i32)
    -> (tensor<2xf32>, f32, i1, tensor<i32>, f64, tensor<2xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<2xf32>) outs(%init : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %sum = tensor.extract %r[] : tensor<f32>
  %neg = arith.cmpf olt, %sum, %zero : f32
  %t = tensor.from_elements %n : tensor<i32>
  %nf = arith.sitofp %n : i32 to f64
  %d = arith.addf %nf, %nf : f64
  return %x, %sum, %neg, %t, %d, %x : tensor<2xf32>, f32, i1, tensor<i32>, f64, tensor<2xf32>
}

/// Check a function without results: nothing is printed after the IR. The C
/// wrapper takes one memref descriptor pointer and returns nothing.
// NOTHING:     llvm.func @_mlir_ciface_nothing(%{{.*}}: !llvm.ptr) attributes
// NOTHING-NOT: result[
func.func @nothing(%x: tensor<2xf32>) {
  return
}
