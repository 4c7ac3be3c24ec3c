// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng --autodiff-lower-rng \
// RUN:   | filecheck %s --check-prefix=LOWERED
// RUN: autodiff-opt %s --split-input-file --autodiff-functionalize-rng --autodiff-lower-rng \
// RUN:   | %mlir_opt --split-input-file > /dev/null

// After both passes no autodiff op is left, and stock mlir-opt accepts the result.
// LOWERED-NOT: "autodiff.

// Offsets count 128-bit Philox counter blocks: a draw of n 32-bit elements
// uses ceil(n / 4) blocks, of n 64-bit elements ceil(2n / 4), and a normal
// draw rounds n up to even (Box-Muller pairs) first.

/// Check that a function that draws gains trailing (seed, offset) arguments
/// and an i64 result, and that its draw becomes a philox at the entry offset.
/// The blocks one call consumes are recorded when static.

// CHECK-LABEL: func.func @one_draw
// CHECK-SAME: (%[[X:.*]]: tensor<8xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<8xf32>, i64)
// CHECK-SAME: attributes {autodiff.rng_blocks = 2 : i64, autodiff.rng_state}
// CHECK: %[[R:.*]] = "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "uniform"} : (i64, i64) -> tensor<8xf32>
// CHECK: %[[Y:.*]] = arith.addf %[[X]], %[[R]]
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C2]] : i64
// CHECK: return %[[Y]], %[[END]] : tensor<8xf32>, i64
func.func @one_draw(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %y = arith.addf %x, %r : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

/// Check that successive draws get disjoint block ranges: each sits at the
/// entry offset plus the blocks of the draws before it.

// CHECK-LABEL: func.func @successive
// CHECK-SAME: (%[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<5xf32>, tensor<3xf64>, tensor<2x2xi32>, tensor<3xi64>, i64)
// CHECK-SAME: autodiff.rng_blocks = 7 : i64
// 5 x f32 normal: 6 words -> 2 blocks.
// CHECK: %[[A:.*]] = "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "normal", mean = 1.000000e+00 : f64, std = 2.000000e+00 : f64}
// CHECK-SAME: -> tensor<5xf32>
// 3 x f64 uniform: 6 words -> 2 blocks.
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[O2:.*]] = arith.addi %[[OFF]], %[[C2]] : i64
// CHECK: %[[B:.*]] = "autodiff.philox"(%[[SEED]], %[[O2]]) {distribution = "uniform", high = 5.000000e+00 : f64, low = 3.000000e+00 : f64}
// CHECK-SAME: -> tensor<3xf64>
// 2x2 x i32 bits: 4 words -> 1 block.
// CHECK: %[[C4:.*]] = arith.constant 4 : i64
// CHECK: %[[O4:.*]] = arith.addi %[[OFF]], %[[C4]] : i64
// CHECK: %[[C:.*]] = "autodiff.philox"(%[[SEED]], %[[O4]]) {distribution = "bits"} : (i64, i64) -> tensor<2x2xi32>
// 3 x i64 bits: 6 words -> 2 blocks.
// CHECK: %[[C5:.*]] = arith.constant 5 : i64
// CHECK: %[[O5:.*]] = arith.addi %[[OFF]], %[[C5]] : i64
// CHECK: %[[D:.*]] = "autodiff.philox"(%[[SEED]], %[[O5]]) {distribution = "bits"} : (i64, i64) -> tensor<3xi64>
// CHECK: %[[C7:.*]] = arith.constant 7 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C7]] : i64
// CHECK: return %[[A]], %[[B]], %[[C]], %[[D]], %[[END]]
func.func @successive() -> (tensor<5xf32>, tensor<3xf64>, tensor<2x2xi32>, tensor<3xi64>) {
  %a = "autodiff.random"() {distribution = "normal", mean = 1.0, std = 2.0} : () -> tensor<5xf32>
  %b = "autodiff.random"() {distribution = "uniform", low = 3.0, high = 5.0} : () -> tensor<3xf64>
  %c = "autodiff.random"() {distribution = "bits"} : () -> tensor<2x2xi32>
  %d = "autodiff.random"() {distribution = "bits"} : () -> tensor<3xi64>
  return %a, %b, %c, %d : tensor<5xf32>, tensor<3xf64>, tensor<2x2xi32>, tensor<3xi64>
}

// -----

/// Check that a caller threads the state: it passes its seed and current
/// offset to a drawing callee and continues after the callee's blocks; a
/// function that does not draw keeps its signature.

// CHECK-LABEL: func.func private @leaf
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, i64)
// CHECK: "autodiff.philox"(%[[SEED]], %[[OFF]])
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %{{.*}} : i64
// CHECK: return %{{.*}}, %[[END]]
func.func private @leaf(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = arith.mulf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func private @pure
// CHECK-SAME: (%{{.*}}: tensor<4xf32>) -> tensor<4xf32> {
func.func private @pure(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @caller
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, i64)
// CHECK: %[[A:.*]]:2 = call @leaf(%[[X]], %[[SEED]], %[[OFF]]) : (tensor<4xf32>, i64, i64) -> (tensor<4xf32>, i64)
// CHECK: %[[P:.*]] = call @pure(%[[A]]#0) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[C1:.*]] = arith.constant 1 : i64
// CHECK: %[[O1:.*]] = arith.addi %[[OFF]], %[[C1]] : i64
// CHECK: %[[B:.*]]:2 = call @leaf(%[[P]], %[[SEED]], %[[O1]])
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C2]] : i64
// CHECK: return %[[B]]#0, %[[END]] : tensor<4xf32>, i64
func.func @caller(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = func.call @leaf(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %p = func.call @pure(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %b = func.call @leaf(%p) : (tensor<4xf32>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

/// Check that the state is threaded through functions that only draw
/// through their callees, transitively, and that their consumption adds up.

// CHECK-LABEL: func.func private @inner
// CHECK-SAME: (%{{.*}}: i64, %{{.*}}: i64) -> (tensor<16xf32>, i64)
func.func private @inner() -> tensor<16xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<16xf32>
  return %r : tensor<16xf32>
}

// CHECK-LABEL: func.func private @middle
// CHECK-SAME: (%[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<16xf32>, i64)
// CHECK-SAME: attributes {autodiff.rng_blocks = 8 : i64, autodiff.rng_state}
// CHECK: %[[A:.*]]:2 = call @inner(%[[SEED]], %[[OFF]])
// CHECK: %[[C4:.*]] = arith.constant 4 : i64
// CHECK: %[[O4:.*]] = arith.addi %[[OFF]], %[[C4]] : i64
// CHECK: %[[B:.*]]:2 = call @inner(%[[SEED]], %[[O4]])
// CHECK: %[[C8:.*]] = arith.constant 8 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C8]] : i64
// CHECK: return %{{.*}}, %[[END]]
func.func private @middle() -> tensor<16xf32> {
  %a = func.call @inner() : () -> tensor<16xf32>
  %b = func.call @inner() : () -> tensor<16xf32>
  %s = arith.addf %a, %b : tensor<16xf32>
  return %s : tensor<16xf32>
}

// CHECK-LABEL: func.func @outer
// CHECK-SAME: (%[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<16xf32>, i64)
// CHECK-SAME: autodiff.rng_blocks = 12 : i64
// CHECK: %[[A:.*]]:2 = call @middle(%[[SEED]], %[[OFF]])
// CHECK: %[[C8:.*]] = arith.constant 8 : i64
// CHECK: %[[O8:.*]] = arith.addi %[[OFF]], %[[C8]] : i64
// CHECK: %[[B:.*]] = "autodiff.philox"(%[[SEED]], %[[O8]]) {distribution = "normal"} : (i64, i64) -> tensor<16xf32>
// CHECK: %[[C12:.*]] = arith.constant 12 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C12]] : i64
// CHECK: return %{{.*}}, %[[END]]
func.func @outer() -> tensor<16xf32> {
  %a = func.call @middle() : () -> tensor<16xf32>
  %b = "autodiff.random"() {distribution = "normal"} : () -> tensor<16xf32>
  %s = arith.addf %a, %b : tensor<16xf32>
  return %s : tensor<16xf32>
}

// -----

/// Check that iteration k of an scf.for with constant bounds draws at
/// start + k * (blocks per iteration), and the state after the loop is
/// start + trips * (blocks per iteration).

// CHECK-LABEL: func.func @static_loop
// CHECK-SAME: (%[[X:.*]]: tensor<8xf32>, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<8xf32>, i64)
// CHECK-SAME: autodiff.rng_blocks = 6 : i64
// CHECK-DAG: %[[LB:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[UB:.*]] = arith.constant 9 : index
// CHECK-DAG: %[[STEP:.*]] = arith.constant 3 : index
// CHECK: scf.for %[[IV:.*]] = %[[LB]] to %[[UB]] step %[[STEP]] iter_args(%[[ACC:.*]] = %[[X]]) -> (tensor<8xf32>)
// CHECK: %[[D:.*]] = arith.subi %[[IV]], %[[LB]] : index
// CHECK: %[[K:.*]] = arith.divui %[[D]], %[[STEP]] : index
// CHECK: %[[K64:.*]] = arith.index_cast %[[K]] : index to i64
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[KB:.*]] = arith.muli %[[K64]], %[[C2]] : i64
// CHECK: %[[IO:.*]] = arith.addi %[[OFF]], %[[KB]] : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[IO]]) {distribution = "uniform"} : (i64, i64) -> tensor<8xf32>
// CHECK: scf.yield
// 3 iterations (2, 5, 8) of 2 blocks.
// CHECK: %[[C6:.*]] = arith.constant 6 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C6]] : i64
// CHECK: return %{{.*}}, %[[END]]
func.func @static_loop(%x: tensor<8xf32>) -> tensor<8xf32> {
  %lb = arith.constant 2 : index
  %ub = arith.constant 9 : index
  %step = arith.constant 3 : index
  %y = scf.for %i = %lb to %ub step %step iter_args(%acc = %x) -> tensor<8xf32> {
    %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
    %s = arith.addf %acc, %r : tensor<8xf32>
    scf.yield %s : tensor<8xf32>
  }
  return %y : tensor<8xf32>
}

// -----

/// Check that a loop with dynamic bounds still draws at start + k * blocks,
/// and advances the state by max(0, ceil((ub - lb) / step)) * blocks; the
/// function's consumption is not static (no autodiff.rng_blocks).

// CHECK-LABEL: func.func @dynamic_loop
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[N:.*]]: index, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64)
// CHECK-SAME: -> (tensor<4xf32>, i64) attributes {autodiff.rng_state} {
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[DIFF:.*]] = arith.subi %[[N]], %[[C0]] : index
// CHECK: %[[ONE:.*]] = arith.constant 1 : index
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK: %[[SM1:.*]] = arith.subi %[[C1]], %[[ONE]] : index
// CHECK: %[[NUM:.*]] = arith.addi %[[DIFF]], %[[SM1]] : index
// CHECK: %[[Q:.*]] = arith.divsi %[[NUM]], %[[C1]] : index
// CHECK: %[[POS:.*]] = arith.cmpi sgt, %[[DIFF]], %[[ZERO]] : index
// CHECK: %[[TRIPS:.*]] = arith.select %[[POS]], %[[Q]], %[[ZERO]] : index
// CHECK: %[[T64:.*]] = arith.index_cast %[[TRIPS]] : index to i64
// CHECK: %[[B:.*]] = arith.constant 1 : i64
// CHECK: %[[USED:.*]] = arith.muli %[[T64]], %[[B]] : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[USED]] : i64
// CHECK: scf.for %[[IV:.*]] = %[[C0]] to %[[N]] step %[[C1]]
// CHECK: %[[IO:.*]] = arith.addi %[[OFF]], %{{.*}} : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[IO]])
// CHECK: return %{{.*}}, %[[END]]
func.func @dynamic_loop(%x: tensor<4xf32>, %n: index) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %y = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> tensor<4xf32> {
    %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
    %s = arith.addf %acc, %r : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

/// Check that a loop whose body consumption is not static (an inner loop
/// with dynamic bounds) carries the offset through an extra i64 iter_arg.

// CHECK-LABEL: func.func @carried
// CHECK-SAME: (%[[N:.*]]: index, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> i64
// CHECK: %[[RES:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[CUR:.*]] = %[[OFF]]) -> (i64)
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[N]]
// CHECK: %[[IO:.*]] = arith.addi %[[CUR]], %{{.*}} : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[IO]]) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
// CHECK: }
// CHECK: scf.yield %{{.*}} : i64
// CHECK: return %[[RES]] : i64
func.func @carried(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  scf.for %i = %c0 to %c3 step %c1 {
    scf.for %j = %c0 to %n step %c1 {
      %r = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
    }
  }
  return
}

// -----

/// Check that both branches of an scf.if start at the same offset and the
/// state after it is advanced by the larger branch (offsets stay static).

// CHECK-LABEL: func.func @branches
// CHECK-SAME: (%[[C:.*]]: i1, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, tensor<4xf32>, i64)
// CHECK-SAME: autodiff.rng_blocks = 11 : i64
// CHECK: scf.if %[[C]] -> (tensor<4xf32>)
// CHECK: "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
// CHECK: %[[T1:.*]] = arith.constant 1 : i64
// CHECK: %[[TO:.*]] = arith.addi %[[OFF]], %[[T1]] : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[TO]]) {distribution = "normal"} : (i64, i64) -> tensor<4xf32>
// CHECK: } else {
// CHECK: "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "uniform"} : (i64, i64) -> tensor<40xf32>
// CHECK: }
// CHECK: %[[C10:.*]] = arith.constant 10 : i64
// CHECK: %[[O10:.*]] = arith.addi %[[OFF]], %[[C10]] : i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[O10]]) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
// CHECK: %[[C11:.*]] = arith.constant 11 : i64
// CHECK: %[[END:.*]] = arith.addi %[[OFF]], %[[C11]] : i64
// CHECK: return %{{.*}}, %{{.*}}, %[[END]]
func.func @branches(%c: i1) -> (tensor<4xf32>, tensor<4xf32>) {
  %y = scf.if %c -> tensor<4xf32> {
    %a = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
    %b = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
    %s = arith.addf %a, %b : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  } else {
    %a = "autodiff.random"() {distribution = "uniform"} : () -> tensor<40xf32>
    %e = tensor.extract_slice %a[0] [4] [1] : tensor<40xf32> to tensor<4xf32>
    scf.yield %e : tensor<4xf32>
  }
  %z = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %y, %z : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that an scf.if with a draw in its only branch and a non-static
/// consumption gains an i64 result (and an else branch yielding the offset).

// CHECK-LABEL: func.func @branch_dynamic
// CHECK-SAME: (%[[C:.*]]: i1, %[[N:.*]]: index, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> i64
// CHECK: %[[R:.*]] = scf.if %[[C]] -> (i64) {
// CHECK: scf.for
// CHECK: "autodiff.philox"(%[[SEED]], %{{.*}})
// CHECK: scf.yield %{{.*}} : i64
// CHECK: } else {
// CHECK: scf.yield %[[OFF]] : i64
// CHECK: }
// CHECK: return %[[R]] : i64
func.func @branch_dynamic(%c: i1, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.if %c {
    scf.for %j = %c0 to %n step %c1 {
      %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
    }
  }
  return
}

// -----

/// Check that a call after a callee with non-static consumption continues
/// from the offset the callee returns.

// CHECK-LABEL: func.func private @varying
// CHECK-SAME: (%{{.*}}: index, %{{.*}}: i64, %{{.*}}: i64) -> i64
func.func private @varying(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %j = %c0 to %n step %c1 {
    %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  }
  return
}

// CHECK-LABEL: func.func @after_varying
// CHECK-SAME: (%[[N:.*]]: index, %[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> (tensor<4xf32>, i64)
// CHECK: %[[RET:.*]] = call @varying(%[[N]], %[[SEED]], %[[OFF]]) : (index, i64, i64) -> i64
// CHECK: "autodiff.philox"(%[[SEED]], %[[RET]])
// CHECK: %[[C1:.*]] = arith.constant 1 : i64
// CHECK: %[[END:.*]] = arith.addi %[[RET]], %[[C1]] : i64
// CHECK: return %{{.*}}, %[[END]]
func.func @after_varying(%n: index) -> tensor<4xf32> {
  func.call @varying(%n) : (index) -> ()
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that functions without draws, declarations and existing
/// autodiff.philox ops are left alone.

// CHECK-LABEL: func.func private @external(tensor<4xf32>) -> tensor<4xf32>
func.func private @external(tensor<4xf32>) -> tensor<4xf32>

// CHECK-LABEL: func.func @functional
// CHECK-SAME: (%[[S:.*]]: i64, %[[O:.*]]: i64, %[[X:.*]]: tensor<4xf32>) -> tensor<4xf32> {
// CHECK: "autodiff.philox"(%[[S]], %[[O]]) {distribution = "uniform"}
// CHECK: call @external
// CHECK-NEXT: return %{{.*}} : tensor<4xf32>
func.func @functional(%s: i64, %o: i64, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.philox"(%s, %o) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
  %y = arith.addf %x, %r : tensor<4xf32>
  %z = func.call @external(%y) : (tensor<4xf32>) -> tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

/// Check that extra attributes of a draw (the stream) and existing argument
/// attributes survive, the latter extended for the new arguments.

// CHECK-LABEL: func.func @keeps_attrs
// CHECK-SAME: (%{{.*}}: tensor<4xf32> {test.arg}, %{{.*}}: i64, %{{.*}}: i64) -> (tensor<4xf32> {test.res}, i64)
// CHECK: "autodiff.philox"(%{{.*}}, %{{.*}}) {distribution = "bits", stream = 3 : i64} : (i64, i64) -> tensor<4xi32>
func.func @keeps_attrs(%x: tensor<4xf32> {test.arg}) -> (tensor<4xf32> {test.res}) {
  %r = "autodiff.random"() {distribution = "bits", stream = 3 : i64} : () -> tensor<4xi32>
  return %x : tensor<4xf32>
}

// -----

/// Check that a zero-size draw consumes no blocks.

// CHECK-LABEL: func.func @empty_draw
// CHECK: %[[A:.*]] = "autodiff.philox"(%[[SEED:.*]], %[[OFF:.*]]) {distribution = "uniform"} : (i64, i64) -> tensor<0x3xf32>
// CHECK: "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "uniform"} : (i64, i64) -> tensor<1xf32>
// CHECK: %[[C1:.*]] = arith.constant 1 : i64
// CHECK: arith.addi %[[OFF]], %[[C1]] : i64
func.func @empty_draw() -> (tensor<0x3xf32>, tensor<1xf32>) {
  %a = "autodiff.random"() {distribution = "uniform"} : () -> tensor<0x3xf32>
  %b = "autodiff.random"() {distribution = "uniform"} : () -> tensor<1xf32>
  return %a, %b : tensor<0x3xf32>, tensor<1xf32>
}

// -----

/// Check that a key-rooted function (`autodiff.rng_key = N`) keeps its
/// signature and threads its draws, and those of the stateful functions it
/// calls, from the words of its key argument N; its draws are marked `keyed`.
/// Its uses are not threaded: a caller that only calls it does not draw,
/// and two calls with one key replay the same numbers.

// CHECK-LABEL: func.func private @leaf_of_keyed
// CHECK-SAME: (%{{.*}}: tensor<4xf32>, %{{.*}}: i64, %{{.*}}: i64) -> (tensor<4xf32>, i64)
// CHECK-SAME: autodiff.rng_state
// CHECK-LABEL: func.func private @keyed
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[K:.*]]: tensor<2xi64>) -> tensor<4xf32>
// CHECK-SAME: attributes {autodiff.rng_key = 1 : i64}
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[SEED:.*]] = tensor.extract %[[K]][%[[C0]]] : tensor<2xi64>
// CHECK-DAG: %[[OFF:.*]] = tensor.extract %[[K]][%[[C1]]] : tensor<2xi64>
// CHECK: "autodiff.philox"(%[[SEED]], %[[OFF]]) {distribution = "normal", keyed} : (i64, i64) -> tensor<4xf32>
// CHECK: %[[NEXT:.*]] = arith.addi %[[OFF]], %{{.*}} : i64
// CHECK: call @leaf_of_keyed(%[[X]], %[[SEED]], %[[NEXT]]) : (tensor<4xf32>, i64, i64) -> (tensor<4xf32>, i64)
// CHECK: return %{{.*}} : tensor<4xf32>
// CHECK-LABEL: func.func @pure_caller
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[K:.*]]: tensor<2xi64>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK: call @keyed(%[[X]], %[[K]])
// CHECK: call @keyed(%[[X]], %[[K]])
// CHECK-LABEL: func.func @stateful_caller
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[S:.*]]: i64, %[[O:.*]]: i64) -> (tensor<4xf32>, i64)
// CHECK: %[[KEY:.*]] = "autodiff.philox"(%[[S]], %[[O]]) {distribution = "bits"} : (i64, i64) -> tensor<2xi64>
// CHECK: call @keyed(%[[X]], %[[KEY]]) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
// CHECK: %[[END:.*]] = arith.addi %[[O]], %{{.*}} : i64
// CHECK: return %{{.*}}, %[[END]]
func.func private @leaf_of_keyed(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %y = arith.mulf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func private @keyed(%x: tensor<4xf32>, %k: tensor<2xi64>) -> tensor<4xf32>
    attributes {autodiff.rng_key = 1 : i64} {
  %r = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %y = func.call @leaf_of_keyed(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %z = arith.addf %y, %r : tensor<4xf32>
  return %z : tensor<4xf32>
}
func.func @pure_caller(%x: tensor<4xf32>, %k: tensor<2xi64>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = func.call @keyed(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  %b = func.call @keyed(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
func.func @stateful_caller(%x: tensor<4xf32>) -> tensor<4xf32> {
  %k = "autodiff.random"() {distribution = "bits"} : () -> tensor<2xi64>
  %a = func.call @keyed(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

/// Check that a key draw marked `autodiff.rng_pins = @g` becomes the state
/// [seed, offset] at its position, and the state then skips the blocks one
/// call of @g consumes (4 normal f32 = 1 block, 8 uniform f32 = 2 blocks):
/// @g called with that key draws what a stateful call there would draw, and
/// the draw after it starts where a stateful call would have left the state.

// CHECK-LABEL: func.func private @pinned
// CHECK-SAME: attributes {autodiff.rng_key = 1 : i64}
// CHECK-LABEL: func.func @pins
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[S:.*]]: i64, %[[O:.*]]: i64) -> (tensor<4xf32>, tensor<4xf32>, i64)
// CHECK: %[[KEY:.*]] = tensor.from_elements %[[S]], %[[O]] : tensor<2xi64>
// CHECK: call @pinned(%[[X]], %[[KEY]])
// CHECK: call @pinned(%[[X]], %[[KEY]])
// CHECK: %[[C3:.*]] = arith.constant 3 : i64
// CHECK: %[[AFTER:.*]] = arith.addi %[[O]], %[[C3]] : i64
// CHECK: "autodiff.philox"(%[[S]], %[[AFTER]]) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
// CHECK: %[[C4:.*]] = arith.constant 4 : i64
// CHECK: %[[END:.*]] = arith.addi %[[O]], %[[C4]] : i64
// CHECK: return %{{.*}}, %{{.*}}, %[[END]]
func.func private @pinned(%x: tensor<4xf32>, %k: tensor<2xi64>) -> tensor<4xf32>
    attributes {autodiff.rng_key = 1 : i64} {
  %r = "autodiff.random"() {distribution = "normal"} : () -> tensor<4xf32>
  %u = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %y = arith.addf %x, %r : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @pins(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %k = "autodiff.random"() {distribution = "bits", autodiff.rng_pins = @pinned} : () -> tensor<2xi64>
  %a = func.call @pinned(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  %b = func.call @pinned(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  %n = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  %c = arith.addf %b, %n : tensor<4xf32>
  return %a, %c : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that a pinned function whose consumption is not static (a draw in a
/// loop of dynamic trip count) keeps the key an ordinary bits draw.

// CHECK-LABEL: func.func @pins_dynamic
// CHECK: %[[KEY:.*]] = "autodiff.philox"(%{{.*}}, %{{.*}}) {distribution = "bits"} : (i64, i64) -> tensor<2xi64>
// CHECK: call @pinned_dynamic(%{{.*}}, %{{.*}}, %[[KEY]])
func.func private @pinned_dynamic(%x: tensor<4xf32>, %n: index, %k: tensor<2xi64>) -> tensor<4xf32>
    attributes {autodiff.rng_key = 2 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf32>) {
    %u = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
    %s = arith.addf %acc, %u : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
func.func @pins_dynamic(%x: tensor<4xf32>, %n: index) -> tensor<4xf32> {
  %k = "autodiff.random"() {distribution = "bits", autodiff.rng_pins = @pinned_dynamic} : () -> tensor<2xi64>
  %a = func.call @pinned_dynamic(%x, %n, %k) : (tensor<4xf32>, index, tensor<2xi64>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

/// Check that a key pinned to several key-rooted functions (a custom
/// function's primal and rules) skips the most one call of any of them draws:
/// @small draws 1 block, @large 2 (then the next draw is at offset + 2).

// CHECK-LABEL: func.func @pins_several
// CHECK: %[[KEY:.*]] = tensor.from_elements %{{.*}}, %[[O:.*]] : tensor<2xi64>
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[NEXT:.*]] = arith.addi %[[O]], %[[C2]] : i64
// CHECK: "autodiff.philox"(%{{.*}}, %[[NEXT]]) {distribution = "uniform"}
func.func private @small(%x: tensor<4xf32>, %k: tensor<2xi64>) -> tensor<4xf32>
    attributes {autodiff.rng_key = 1 : i64} {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @large(%x: tensor<4xf32>, %k: tensor<2xi64>) -> tensor<4xf32>
    attributes {autodiff.rng_key = 1 : i64} {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %s = tensor.extract_slice %r[0] [4] [1] : tensor<8xf32> to tensor<4xf32>
  return %s : tensor<4xf32>
}
func.func @pins_several(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %k = "autodiff.random"() {distribution = "bits", autodiff.rng_pins = [@small, @large]} : () -> tensor<2xi64>
  %a = func.call @small(%x, %k) : (tensor<4xf32>, tensor<2xi64>) -> tensor<4xf32>
  %n = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %a, %n : tensor<4xf32>, tensor<4xf32>
}
