// RUN: autodiff-run %s --entry sum_to --arg 100 | filecheck %s --match-full-lines --check-prefix=SUM
// RUN: autodiff-run %s --entry factorial --arg 10 | filecheck %s --match-full-lines --check-prefix=FACT10
// RUN: autodiff-run %s --entry factorial --arg 20 | filecheck %s --match-full-lines --check-prefix=FACT20
// RUN: autodiff-run %s --entry squares | filecheck %s --match-full-lines --check-prefix=SQUARES
// RUN: autodiff-run %s --entry nested | filecheck %s --match-full-lines --check-prefix=NESTED

/// Check scf.for with iter_args: 1 + 2 + ... + 100 = 5050 in i32 and in f64.
// SUM:      result[0]: i32 = 5050
// SUM-NEXT: result[1]: f64 = 5050
func.func @sum_to(%n: i32) -> (i32, f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %fzero = arith.constant 0.0 : f64
  %ni = arith.index_cast %n : i32 to index
  %ub = arith.addi %ni, %c1 : index
  %r:2 = scf.for %i = %c1 to %ub step %c1 iter_args(%acc = %zero, %facc = %fzero) -> (i32, f64) {
    %ii = arith.index_cast %i : index to i32
    %next = arith.addi %acc, %ii : i32
    %fi = arith.sitofp %ii : i32 to f64
    %fnext = arith.addf %facc, %fi : f64
    scf.yield %next, %fnext : i32, f64
  }
  return %r#0, %r#1 : i32, f64
}

/// Check an i64 product loop: 10! = 3628800 and 20! = 2432902008176640000.
// FACT10: result[0]: i64 = 3628800
// FACT20: result[0]: i64 = 2432902008176640000
func.func @factorial(%n: i64) -> i64 {
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i64
  %ni = arith.index_cast %n : i64 to index
  %ub = arith.addi %ni, %c1 : index
  %r = scf.for %i = %c1 to %ub step %c1 iter_args(%acc = %one) -> (i64) {
    %ii = arith.index_cast %i : index to i64
    %next = arith.muli %acc, %ii : i64
    scf.yield %next : i64
  }
  return %r : i64
}

/// Check a loop that carries a tensor and fills it with tensor.insert: t[i] = i*i.
// SQUARES: result[0]: tensor<5xi32> = [0, 1, 4, 9, 16]
func.func @squares() -> tensor<5xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %init = tensor.empty() : tensor<5xi32>
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%t = %init) -> (tensor<5xi32>) {
    %ii = arith.index_cast %i : index to i32
    %sq = arith.muli %ii, %ii : i32
    %t2 = tensor.insert %sq into %t[%i] : tensor<5xi32>
    scf.yield %t2 : tensor<5xi32>
  }
  return %r : tensor<5xi32>
}

/// Check nested loops: sum over i < 4, j < 3 of i*j = (0+1+2+3)(0+1+2) = 18.
// NESTED: result[0]: index = 18
func.func @nested() -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %c0) -> (index) {
    %s = scf.for %j = %c0 to %c3 step %c1 iter_args(%b = %a) -> (index) {
      %p = arith.muli %i, %j : index
      %n = arith.addi %b, %p : index
      scf.yield %n : index
    }
    scf.yield %s : index
  }
  return %r : index
}
