// RUN: autodiff-run %s --entry tenth_sums --precision 17 | filecheck %s --match-full-lines --check-prefix=SUM
// RUN: autodiff-run %s --entry small_steps --arg 1e-10 --arg 1e-10 | filecheck %s --match-full-lines --check-prefix=SMALL

/// Check that f64 arithmetic stays in double precision: ten additions of 0.1
/// give 0.99999999999999989 in f64 and 1.0000001192092896 in f32 (the f32
/// value printed with 17 digits), the classic rounding results.
// SUM:      result[0]: f64 = 0.99999999999999989
// SUM-NEXT: result[1]: f32 = 1.0000001192092896
func.func @tenth_sums() -> (f64, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %d = arith.constant 0.1 : f64
  %f = arith.constant 0.1 : f32
  %dz = arith.constant 0.0 : f64
  %fz = arith.constant 0.0 : f32
  %r:2 = scf.for %i = %c0 to %c10 step %c1 iter_args(%a = %dz, %b = %fz) -> (f64, f32) {
    %a2 = arith.addf %a, %d : f64
    %b2 = arith.addf %b, %f : f32
    scf.yield %a2, %b2 : f64, f32
  }
  return %r#0, %r#1 : f64, f32
}

/// Check that 1 + 1e-10 keeps its last digit in f64 (12 significant digits
/// printed) and rounds to 1 in f32; 1/3 to each type's printed precision.
// SMALL:      result[0]: f64 = 1.0000000001
// SMALL-NEXT: result[1]: f32 = 1
// SMALL-NEXT: result[2]: f64 = 0.333333333333
// SMALL-NEXT: result[3]: f32 = 0.333333
func.func @small_steps(%eps: f64, %epsf: f32) -> (f64, f32, f64, f32) {
  %one = arith.constant 1.0 : f64
  %onef = arith.constant 1.0 : f32
  %three = arith.constant 3.0 : f64
  %threef = arith.constant 3.0 : f32
  %a = arith.addf %one, %eps : f64
  %b = arith.addf %onef, %epsf : f32
  %c = arith.divf %one, %three : f64
  %d = arith.divf %onef, %threef : f32
  return %a, %b, %c, %d : f64, f32, f64, f32
}
