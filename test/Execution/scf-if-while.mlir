// RUN: autodiff-run %s --entry relu --arg -2.5 | filecheck %s --match-full-lines --check-prefix=RELU-NEG
// RUN: autodiff-run %s --entry relu --arg 3.25 | filecheck %s --match-full-lines --check-prefix=RELU-POS
// RUN: autodiff-run %s --entry pick --arg true --arg '[1, 2]' --arg '[3, 4]' | filecheck %s --match-full-lines --check-prefix=PICK-TRUE
// RUN: autodiff-run %s --entry pick --arg false --arg '[1, 2]' --arg '[3, 4]' | filecheck %s --match-full-lines --check-prefix=PICK-FALSE
// RUN: autodiff-run %s --entry gcd --arg 1071 --arg 462 | filecheck %s --match-full-lines --check-prefix=GCD
// RUN: autodiff-run %s --entry collatz --arg 27 | filecheck %s --match-full-lines --check-prefix=COLLATZ

/// Check scf.if yielding a scalar, and arith.select.
// RELU-NEG:      result[0]: f32 = 0
// RELU-NEG-NEXT: result[1]: f32 = 0
// RELU-POS:      result[0]: f32 = 3.25
// RELU-POS-NEXT: result[1]: f32 = 3.25
func.func @relu(%x: f32) -> (f32, f32) {
  %zero = arith.constant 0.0 : f32
  %pos = arith.cmpf ogt, %x, %zero : f32
  %r = scf.if %pos -> (f32) {
    scf.yield %x : f32
  } else {
    scf.yield %zero : f32
  }
  %s = arith.select %pos, %x, %zero : f32
  return %r, %s : f32, f32
}

/// Check scf.if yielding one of two tensor arguments.
// PICK-TRUE:  result[0]: tensor<2xf32> = [1, 2]
// PICK-FALSE: result[0]: tensor<2xf32> = [3, 4]
func.func @pick(%c: i1, %a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %r = scf.if %c -> (tensor<2xf32>) {
    scf.yield %a : tensor<2xf32>
  } else {
    scf.yield %b : tensor<2xf32>
  }
  return %r : tensor<2xf32>
}

/// Check scf.while with Euclid's algorithm: gcd(1071, 462) = 21.
// GCD: result[0]: i32 = 21
func.func @gcd(%a: i32, %b: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %r:2 = scf.while (%x = %a, %y = %b) : (i32, i32) -> (i32, i32) {
    %nz = arith.cmpi ne, %y, %zero : i32
    scf.condition(%nz) %x, %y : i32, i32
  } do {
  ^bb0(%x: i32, %y: i32):
    %m = arith.remui %x, %y : i32
    scf.yield %y, %m : i32, i32
  }
  return %r#0 : i32
}

/// Check scf.while with an scf.if inside: the Collatz sequence of 27 takes 111 steps to 1.
// COLLATZ: result[0]: i64 = 111
func.func @collatz(%n: i64) -> i64 {
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %two = arith.constant 2 : i64
  %three = arith.constant 3 : i64
  %r:2 = scf.while (%x = %n, %steps = %zero) : (i64, i64) -> (i64, i64) {
    %more = arith.cmpi ne, %x, %one : i64
    scf.condition(%more) %x, %steps : i64, i64
  } do {
  ^bb0(%x: i64, %steps: i64):
    %rem = arith.remui %x, %two : i64
    %even = arith.cmpi eq, %rem, %zero : i64
    %next = scf.if %even -> (i64) {
      %h = arith.divui %x, %two : i64
      scf.yield %h : i64
    } else {
      %t = arith.muli %x, %three : i64
      %t1 = arith.addi %t, %one : i64
      scf.yield %t1 : i64
    }
    %s1 = arith.addi %steps, %one : i64
    scf.yield %next, %s1 : i64, i64
  }
  return %r#1 : i64
}
