// RUN: autodiff-run %s --entry fib --arg 20 | filecheck %s --match-full-lines --check-prefix=FIB
// RUN: autodiff-run %s --entry main --arg '[1, -2, 3]' | filecheck %s --match-full-lines --check-prefix=MAIN

/// Check a recursive func.call: fib(20) = 6765.
// FIB: result[0]: i64 = 6765
func.func @fib(%n: i64) -> i64 {
  %two = arith.constant 2 : i64
  %one = arith.constant 1 : i64
  %small = arith.cmpi slt, %n, %two : i64
  %r = scf.if %small -> (i64) {
    scf.yield %n : i64
  } else {
    %a = arith.subi %n, %one : i64
    %b = arith.subi %n, %two : i64
    %fa = func.call @fib(%a) : (i64) -> i64
    %fb = func.call @fib(%b) : (i64) -> i64
    %s = arith.addi %fa, %fb : i64
    scf.yield %s : i64
  }
  return %r : i64
}

// A private helper taking and returning tensors, and one with several results.
func.func private @double(%x: tensor<3xf32>) -> tensor<3xf32> {
  %e = tensor.empty() : tensor<3xf32>
  %r = linalg.add ins(%x, %x : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

func.func private @sum_and_first(%x: tensor<3xf32>) -> (f32, f32) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<3xf32>) outs(%init : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %sum = tensor.extract %r[] : tensor<f32>
  %c0 = arith.constant 0 : index
  %first = tensor.extract %x[%c0] : tensor<3xf32>
  return %sum, %first : f32, f32
}

/// Check calls to private helpers with tensor arguments and results: double
/// twice gives 4x; the public @fib is also callable from here.
// MAIN:      result[0]: tensor<3xf32> = [4, -8, 12]
// MAIN-NEXT: result[1]: f32 = 8
// MAIN-NEXT: result[2]: f32 = 4
// MAIN-NEXT: result[3]: i64 = 55
func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, f32, f32, i64) {
  %a = func.call @double(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %b = func.call @double(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %s:2 = func.call @sum_and_first(%b) : (tensor<3xf32>) -> (f32, f32)
  %ten = arith.constant 10 : i64
  %f = func.call @fib(%ten) : (i64) -> i64
  return %b, %s#0, %s#1, %f : tensor<3xf32>, f32, f32, i64
}
