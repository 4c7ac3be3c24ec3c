// RUN: autodiff-run %s --entry grad_sin --arg 0.5 --arg 2.0 --arg 1.0 | filecheck %s --check-prefix=SIN
// RUN: autodiff-run %s --entry grad_mm --arg '[[1, 2], [3, 4]]' --arg '[[5, 6], [7, 8]]' --arg '[[1, 1], [1, 1]]' | filecheck %s --check-prefix=MM
// RUN: autodiff-run %s --entry grad_loop --arg 2.0 --arg 0.5 --arg 1.0 | filecheck %s --check-prefix=LOOP
// RUN: autodiff-run %s --entry grad_max --arg '[[1, 5, 2], [7, 3, 0], [4, 4.5, 9]]' --arg '[[1, 1, 1], [1, 1, 1], [1, 1, 1]]' | filecheck %s --check-prefix=MAX
// RUN: autodiff-run %s --entry hvp_cube --arg 2.0 --arg 1.0 --arg 1.0 --arg 0.0 | filecheck %s --check-prefix=HVP
// RUN: autodiff-run %s --entry jvp_cube --arg 2.0 --arg 0.5 | filecheck %s --check-prefix=JVP

/// Check the gradient of sin(x*y) at (0.5, 2): (y cos(xy), x cos(xy)) =
/// (2 cos 1, 0.5 cos 1), derived by hand (printed to 12 significant digits).
// SIN: result[0]: f64 = 0.841470984808
// SIN: result[1]: f64 = 1.08060461174
// SIN: result[2]: f64 = 0.270151152934
func.func @sin_mul(%x: f64, %y: f64) -> f64 {
  %0 = arith.mulf %x, %y : f64
  %1 = math.sin %0 : f64
  return %1 : f64
}
func.func @grad_sin(%x: f64, %y: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %y, %c) {fn = @sin_mul} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

/// Check matmul's VJP with a ones cotangent: dA = 1 B^T (row sums of B),
/// dB = A^T 1 (column sums of A).
// MM: result[1]: tensor<2x2xf64> = {{\[}}[11, 15], [11, 15]]
// MM: result[2]: tensor<2x2xf64> = {{\[}}[4, 4], [6, 6]]
func.func @mm(%a: tensor<2x2xf64>, %b: tensor<2x2xf64>) -> tensor<2x2xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<2x2xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<2x2xf64>) -> tensor<2x2xf64>
  %0 = linalg.matmul ins(%a, %b : tensor<2x2xf64>, tensor<2x2xf64>) outs(%f : tensor<2x2xf64>) -> tensor<2x2xf64>
  return %0 : tensor<2x2xf64>
}
func.func @grad_mm(%a: tensor<2x2xf64>, %b: tensor<2x2xf64>, %c: tensor<2x2xf64>) -> (tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>) {
  %0:3 = "autodiff.vjp"(%a, %b, %c) {fn = @mm} : (tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>) -> (tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>)
  return %0#0, %0#1, %0#2 : tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>
}

/// Check reverse mode through a 3-step loop h <- h * w: f = x w^3, so
/// df/dx = w^3 = 0.125 and df/dw = 3 x w^2 = 1.5 at (2, 0.5).
// LOOP: result[0]: f64 = 0.25
// LOOP: result[1]: f64 = 0.125
// LOOP: result[2]: f64 = 1.5
func.func @loop(%x: f64, %w: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%h = %x) -> (f64) {
    %m = arith.mulf %h, %w : f64
    scf.yield %m : f64
  }
  return %r : f64
}
func.func @grad_loop(%x: f64, %w: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @loop} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}

/// Check a row-max reduction (broadcast back): each row's cotangent sum (3)
/// goes to that row's argmax.
// MAX: result[1]: tensor<3x3xf64> = {{\[}}[0, 3, 0], [3, 0, 0], [0, 0, 3]]
func.func @rmax(%x: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %lo = arith.constant -1.0e30 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%lo : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x3xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%a: f64, %acc: f64) {
      %m = arith.maximumf %acc, %a : f64
      linalg.yield %m : f64
    }
  %e2 = tensor.empty() : tensor<3x3xf64>
  %b = linalg.broadcast ins(%r : tensor<3xf64>) outs(%e2 : tensor<3x3xf64>) dimensions = [1]
  return %b : tensor<3x3xf64>
}
func.func @grad_max(%x: tensor<3x3xf64>, %c: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @rmax} : (tensor<3x3xf64>, tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3x3xf64>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3x3xf64>
}

/// Check a Hessian-vector product (jvp of vjp) of x^3 at x = 2 along t = 1:
/// f' = 3x^2 = 12, f'' t = 6x = 12.
// HVP: result[0]: f64 = 8
// HVP: result[1]: f64 = 12
// HVP: result[3]: f64 = 12
func.func @cube(%x: f64) -> f64 {
  %0 = arith.mulf %x, %x : f64
  %1 = arith.mulf %0, %x : f64
  return %1 : f64
}
func.func @grad_cube(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @cube} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @hvp_cube(%x: f64, %c: f64, %t: f64, %u: f64) -> (f64, f64, f64, f64) {
  %0:4 = "autodiff.jvp"(%x, %c, %t, %u) {fn = @grad_cube} : (f64, f64, f64, f64) -> (f64, f64, f64, f64)
  return %0#0, %0#1, %0#2, %0#3 : f64, f64, f64, f64
}

/// Check forward mode of x^3 at x = 2 along t = 0.5: 3 x^2 t = 6.
// JVP: result[0]: f64 = 8
// JVP: result[1]: f64 = 6
func.func @jvp_cube(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @cube} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
