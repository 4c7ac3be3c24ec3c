// RUN: autodiff-opt %s --autodiff-jvp --autodiff-vjp --autodiff-vmap | filecheck %s
// RUN: autodiff-opt %s --autodiff-jvp --autodiff-vjp --autodiff-vmap | filecheck %s --check-prefix=CLEAN
// RUN: autodiff-run %s --entry jvp_branch --arg 0.5 --arg 1 | filecheck %s --check-prefix=BRPOS
// RUN: autodiff-run %s --entry vjp_branch --arg -0.5 --arg 1 | filecheck %s --check-prefix=BRNEG
// RUN: autodiff-run %s --entry vjp_loop --arg 2 --arg 0.5 --arg 1 | filecheck %s --check-prefix=LOOP
// RUN: autodiff-run %s --entry jvp_loop --arg 2 --arg 0.5 --arg 1 --arg 0 | filecheck %s --check-prefix=LOOPJ
// RUN: autodiff-run %s --entry vjp_region --arg 0.5 --arg 1 | filecheck %s --check-prefix=REGPOS
// RUN: autodiff-run %s --entry jvp_region --arg -2 --arg 1 | filecheck %s --check-prefix=REGNEG
// RUN: autodiff-run %s --entry vmap_branch --arg '[0.5, -0.5, 2]' | filecheck %s --check-prefix=VMAP

// Functions with unstructured control flow (cf.br, cf.cond_br, several
// blocks, a multi-block scf.execute_region) are lifted to scf by upstream
// lift-cf-to-scf before jvp, vjp and vmap transform them (transforms/lift_cf.py).
// The values are derived by hand; test_lift_cf.py checks the same kinds of
// function against finite differences and jax.

/// Check that the differentiated and batched functions are structured: the
/// branch became an scf.if, the back edge an scf.while, the execute_region
/// an scf.if; no cf op and no second block is left.
// CLEAN-NOT: {{[^s]cf\.}}
// CLEAN-NOT: ^bb1
// CHECK-LABEL: func.func @branch(
// CHECK: scf.if
// CHECK-LABEL: func.func @loop(
// CHECK: scf.while
// CHECK-LABEL: func.func @region(
// CHECK: scf.if
// CHECK-NOT: scf.execute_region
// CHECK-LABEL: func.func private @branch_jvp(
// CHECK: scf.if

/// f(x) = x > 0 ? sin x : x^2. At 0.5: (sin 0.5, cos 0.5); at -0.5: (0.25, -1).
// BRPOS: result[0]: f64 = 0.479425538604
// BRPOS: result[1]: f64 = 0.87758256189
// BRNEG: result[0]: f64 = 0.25
// BRNEG: result[1]: f64 = -1
func.func @branch(%x: f64) -> f64 {
  %c0 = arith.constant 0.0 : f64
  %p = arith.cmpf ogt, %x, %c0 : f64
  cf.cond_br %p, ^pos, ^neg
^pos:
  %s = math.sin %x : f64
  cf.br ^done(%s : f64)
^neg:
  %m = arith.mulf %x, %x : f64
  cf.br ^done(%m : f64)
^done(%r: f64):
  return %r : f64
}
func.func @jvp_branch(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @branch} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @vjp_branch(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @branch} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

/// Lanes take their own branch: [sin 0.5, 0.25, sin 2].
// VMAP: result[0]: tensor<3xf64> = [0.479425538604, 0.25, 0.909297426826]
func.func @vmap_branch(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = "autodiff.vmap"(%x) {fn = @branch, in_axes = array<i64: 0>, out_axes = array<i64: 0>,
                            randomness = "error"} : (tensor<3xf64>) -> tensor<3xf64>
  return %0 : tensor<3xf64>
}

/// A loop written with back edges: three steps of h <- h * w, f = x w^3.
/// At (2, 0.5): f = 0.25, df/dx = w^3 = 0.125, df/dw = 3 x w^2 = 1.5.
// LOOP: result[0]: f64 = 0.25
// LOOP: result[1]: f64 = 0.125
// LOOP: result[2]: f64 = 1.5
// LOOPJ: result[0]: f64 = 0.25
// LOOPJ: result[1]: f64 = 0.125
func.func @loop(%x: f64, %w: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  cf.br ^head(%c0, %x : index, f64)
^head(%i: index, %h: f64):
  %p = arith.cmpi slt, %i, %c3 : index
  cf.cond_br %p, ^body, ^exit
^body:
  %m = arith.mulf %h, %w : f64
  %i2 = arith.addi %i, %c1 : index
  cf.br ^head(%i2, %m : index, f64)
^exit:
  return %h : f64
}
func.func @vjp_loop(%x: f64, %w: f64, %c: f64) -> (f64, f64, f64) {
  %0:3 = "autodiff.vjp"(%x, %w, %c) {fn = @loop} : (f64, f64, f64) -> (f64, f64, f64)
  return %0#0, %0#1, %0#2 : f64, f64, f64
}
func.func @jvp_loop(%x: f64, %w: f64, %tx: f64, %tw: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %w, %tx, %tw) {fn = @loop} : (f64, f64, f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}

/// A multi-block scf.execute_region: g(x) = (x < 0 ? -x : exp x) * x.
/// At 0.5: (0.5 e^0.5, 1.5 e^0.5); at -2: (-4, -2x = 4).
// REGPOS: result[0]: f64 = 0.82436063535
// REGPOS: result[1]: f64 = 2.47308190605
// REGNEG: result[0]: f64 = -4
// REGNEG: result[1]: f64 = 4
func.func @region(%x: f64) -> f64 {
  %c0 = arith.constant 0.0 : f64
  %r = scf.execute_region -> f64 {
    %p = arith.cmpf olt, %x, %c0 : f64
    cf.cond_br %p, ^neg, ^pos
  ^neg:
    %n = arith.negf %x : f64
    scf.yield %n : f64
  ^pos:
    %e = math.exp %x : f64
    scf.yield %e : f64
  }
  %y = arith.mulf %r, %x : f64
  return %y : f64
}
func.func @vjp_region(%x: f64, %c: f64) -> (f64, f64) {
  %0:2 = "autodiff.vjp"(%x, %c) {fn = @region} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
func.func @jvp_region(%x: f64, %t: f64) -> (f64, f64) {
  %0:2 = "autodiff.jvp"(%x, %t) {fn = @region} : (f64, f64) -> (f64, f64)
  return %0#0, %0#1 : f64, f64
}
