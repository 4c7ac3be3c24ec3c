// RUN: autodiff-opt %s --split-input-file --autodiff-lower-rng | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-lower-rng | filecheck %s --check-prefix=NONE
// RUN: autodiff-opt %s --split-input-file --autodiff-lower-rng | %mlir_opt --split-input-file > /dev/null

// No autodiff op survives, and stock mlir-opt (without the dialect) accepts the result.
// NONE-NOT: autodiff.

// The expansion is one linalg.generic over the output; the Philox4x32-10
// constants appear as signed i32: 0xD2511F53 = -766435501,
// 0xCD9E8D57 = -845247145 (multipliers), 0x9E3779B9 = -1640531527,
// 0xBB67AE85 = -1150833019 (Weyl key increments).

/// Check that a uniform f32 draw becomes a linalg.generic computing one
/// Philox block per element (counter = offset + i div 4, key = seed) and a
/// 24-bit mantissa in [0, 1).

// CHECK-LABEL: func.func @uniform_f32
// CHECK-SAME: (%[[SEED:.*]]: i64, %[[OFF:.*]]: i64) -> tensor<8xf32>
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<8xf32>
// CHECK: %[[R:.*]] = linalg.generic {indexing_maps = [#{{.*}}], iterator_types = ["parallel"]} outs(%[[EMPTY]] : tensor<8xf32>)
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK: %[[I64:.*]] = arith.index_cast %[[I]] : index to i64
// CHECK: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: %[[BLK:.*]] = arith.shrui %[[I64]], %[[C2]] : i64
// CHECK: %[[CTR:.*]] = arith.addi %[[OFF]], %[[BLK]] : i64
// CHECK: %[[C0:.*]] = arith.trunci %[[CTR]] : i64 to i32
// CHECK: arith.trunci %[[SEED]] : i64 to i32
// CHECK-DAG: %[[M0:.*]] = arith.constant -766435501 : i32
// CHECK-DAG: %[[M1:.*]] = arith.constant -845247145 : i32
// CHECK-DAG: %[[W0:.*]] = arith.constant -1640531527 : i32
// CHECK-DAG: %[[W1:.*]] = arith.constant -1150833019 : i32
// CHECK: arith.mului_extended %[[M0]], %[[C0]] : i32
// CHECK-COUNT-19: arith.mului_extended
// CHECK-NOT: arith.mului_extended
// CHECK: %[[SH:.*]] = arith.constant 8 : i32
// CHECK: %[[MANT:.*]] = arith.shrui %{{.*}}, %[[SH]] : i32
// CHECK: %[[F:.*]] = arith.uitofp %[[MANT]] : i32 to f32
// CHECK: %[[ULP:.*]] = arith.constant 5.96046448E-8 : f32
// CHECK: %[[U:.*]] = arith.mulf %[[F]], %[[ULP]] : f32
// CHECK: linalg.yield %[[U]] : f32
// CHECK: return %[[R]] : tensor<8xf32>
func.func @uniform_f32(%seed: i64, %offset: i64) -> tensor<8xf32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "uniform"} : (i64, i64) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

/// Check that the element index is the row-major linear index over all
/// dimensions.

// CHECK-LABEL: func.func @rank2
// CHECK: linalg.generic {indexing_maps = [#{{.*}}], iterator_types = ["parallel", "parallel"]}
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK: %[[C5:.*]] = arith.constant 5 : index
// CHECK: %[[ROW:.*]] = arith.muli %[[I]], %[[C5]] : index
// CHECK: %[[J:.*]] = linalg.index 1 : index
// CHECK: %[[LIN:.*]] = arith.addi %[[ROW]], %[[J]] : index
// CHECK: arith.index_cast %[[LIN]] : index to i64
func.func @rank2(%seed: i64, %offset: i64) -> tensor<3x5xi32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<3x5xi32>
  return %r : tensor<3x5xi32>
}

// -----

/// Check that a 32-bit bits draw yields the Philox word of lane i mod 4
/// (selected by bits 1 and 0 of the index) itself, with no float arithmetic.

// CHECK-LABEL: func.func @bits_i32
// CHECK: linalg.generic
// CHECK-COUNT-20: arith.mului_extended
// CHECK: %[[BIT1:.*]] = arith.trunci %{{.*}} : i64 to i1
// CHECK: %[[BIT0:.*]] = arith.trunci %{{.*}} : i64 to i1
// CHECK: %[[HI:.*]] = arith.select %[[BIT0]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[LO:.*]] = arith.select %[[BIT0]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[W:.*]] = arith.select %[[BIT1]], %[[HI]], %[[LO]] : i32
// CHECK-NEXT: linalg.yield %[[W]] : i32
// CHECK-NOT: arith.uitofp
func.func @bits_i32(%seed: i64, %offset: i64) -> tensor<4xi32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

/// Check that 64-bit elements use two words (two elements per block), joined
/// low word first: i64 bits, and f64 uniforms from the top 53 bits.

// CHECK-LABEL: func.func @sixty_four
// CHECK: linalg.generic
// CHECK: %[[C1:.*]] = arith.constant 1 : i64
// CHECK: %[[BLK:.*]] = arith.shrui %{{.*}}, %[[C1]] : i64
// CHECK: arith.addi %{{.*}}, %[[BLK]] : i64
// CHECK: %[[LO:.*]] = arith.extui %{{.*}} : i32 to i64
// CHECK: %[[HI:.*]] = arith.extui %{{.*}} : i32 to i64
// CHECK: %[[C32:.*]] = arith.constant 32 : i64
// CHECK: %[[HS:.*]] = arith.shli %[[HI]], %[[C32]] : i64
// CHECK: %[[X:.*]] = arith.ori %[[LO]], %[[HS]] : i64
// CHECK: linalg.yield %[[X]] : i64
// CHECK: linalg.generic
// CHECK: %[[C11:.*]] = arith.constant 11 : i64
// CHECK: %[[M:.*]] = arith.shrui %{{.*}}, %[[C11]] : i64
// CHECK: %[[F:.*]] = arith.uitofp %[[M]] : i64 to f64
// CHECK: %[[ULP:.*]] = arith.constant 1.1102230246251565E-16 : f64
// CHECK: %[[U:.*]] = arith.mulf %[[F]], %[[ULP]] : f64
// CHECK: linalg.yield %[[U]] : f64
func.func @sixty_four(%seed: i64, %offset: i64) -> (tensor<3xi64>, tensor<3xf64>) {
  %a = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<3xi64>
  %b = "autodiff.philox"(%seed, %offset) {distribution = "uniform"} : (i64, i64) -> tensor<3xf64>
  return %a, %b : tensor<3xi64>, tensor<3xf64>
}

// -----

/// Check that narrow integer bits truncate their word.

// CHECK-LABEL: func.func @bits_i8
// CHECK: %[[B:.*]] = arith.trunci %{{.*}} : i32 to i8
// CHECK-NEXT: linalg.yield %[[B]] : i8
func.func @bits_i8(%seed: i64, %offset: i64) -> tensor<16xi8> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<16xi8>
  return %r : tensor<16xi8>
}

// -----

/// Check that low/high scale the uniform as low + (high - low) * u, clamped
/// to the largest float below high (the interval stays half-open).

// CHECK-LABEL: func.func @scaled
// CHECK: %[[U:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: %[[LOW:.*]] = arith.constant -1.000000e+00 : f32
// CHECK: %[[WIDTH:.*]] = arith.constant 4.000000e+00 : f32
// CHECK: %[[S:.*]] = arith.mulf %[[WIDTH]], %[[U]] : f32
// CHECK: %[[Y:.*]] = arith.addf %[[LOW]], %[[S]] : f32
// CHECK: %[[BELOW:.*]] = arith.constant 2.99999976 : f32
// CHECK: %[[C:.*]] = arith.minimumf %[[Y]], %[[BELOW]] : f32
// CHECK: linalg.yield %[[C]] : f32
func.func @scaled(%seed: i64, %offset: i64) -> tensor<4xf32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "uniform", low = -1.0, high = 3.0}
      : (i64, i64) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that normals use Box-Muller computed by arith alone: ln from the
/// float's bits and a polynomial, sqrt by Newton steps from a bit-trick
/// guess (0x1FBD1DF5 = 532487669), no math ops (GPU libdevice calls are not
/// bitwise equal to the CPU's), then std and mean.

// CHECK-LABEL: func.func @normal
// CHECK: linalg.generic
// CHECK-NOT: math.
// CHECK: %[[M2:.*]] = arith.constant -2.000000e+00 : f32
// CHECK: %[[LNBITS:.*]] = arith.bitcast %{{.*}} : f32 to i32
// CHECK: %[[C23:.*]] = arith.constant 23 : i32
// CHECK: arith.shrui %[[LNBITS]], %[[C23]] : i32
// CHECK: %[[X:.*]] = arith.mulf %[[M2]], %{{.*}} : f32
// CHECK: %[[XBITS:.*]] = arith.bitcast %[[X]] : f32 to i32
// CHECK: %[[MAGIC:.*]] = arith.constant 532487669 : i32
// CHECK: %[[G:.*]] = arith.addi %{{.*}}, %[[MAGIC]] : i32
// CHECK: %[[Y0:.*]] = arith.bitcast %[[G]] : i32 to f32
// CHECK-COUNT-4: arith.divf %[[X]], %{{.*}} : f32
// CHECK: %[[POS:.*]] = arith.cmpf ogt, %[[X]], %[[ZERO:.*]] : f32
// CHECK: %[[R:.*]] = arith.select %[[POS]], %{{.*}}, %[[ZERO]] : f32
// CHECK-NOT: math.
// CHECK: %[[Z:.*]] = arith.mulf %[[R]], %{{.*}} : f32
// CHECK: %[[STD:.*]] = arith.constant 5.000000e-01 : f32
// CHECK: %[[ZS:.*]] = arith.mulf %[[Z]], %[[STD]] : f32
// CHECK: %[[MEAN:.*]] = arith.constant 2.000000e+00 : f32
// CHECK: %[[Y:.*]] = arith.addf %[[ZS]], %[[MEAN]] : f32
// CHECK: linalg.yield %[[Y]] : f32
func.func @normal(%seed: i64, %offset: i64) -> tensor<6xf32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "normal", mean = 2.0, std = 0.5}
      : (i64, i64) -> tensor<6xf32>
  return %r : tensor<6xf32>
}

// -----

/// Check that half-precision normals are computed in f32 and rounded once,
/// and f64 normals in f64 (with the f64 sqrt guess 0x1FF7A3BEA91D9B1B).

// CHECK-LABEL: func.func @normal_f16
// CHECK: arith.divf %{{.*}}, %{{.*}} : f32
// CHECK: %[[H:.*]] = arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT: linalg.yield %[[H]] : f16
func.func @normal_f16(%seed: i64, %offset: i64) -> tensor<2x2xf16> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "normal"} : (i64, i64) -> tensor<2x2xf16>
  return %r : tensor<2x2xf16>
}

// CHECK-LABEL: func.func @normal_f64
// CHECK: arith.constant 2303489773699701531 : i64
// CHECK-COUNT-5: arith.divf %{{.*}}, %{{.*}} : f64
// CHECK: linalg.yield %{{.*}} : f64
func.func @normal_f64(%seed: i64, %offset: i64) -> tensor<3xf64> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "normal"} : (i64, i64) -> tensor<3xf64>
  return %r : tensor<3xf64>
}

// -----

/// Check that the stream attribute fills counter words 2 and 3
/// (0x500000007: lo 7, hi 5) and a rank-0 draw uses element index 0.

// CHECK-LABEL: func.func @stream
// CHECK: linalg.generic {indexing_maps = [#{{.*}}], iterator_types = []}
// CHECK: arith.constant 0 : index
// CHECK: %[[C2:.*]] = arith.constant 7 : i32
// CHECK: %[[C3:.*]] = arith.constant 5 : i32
// CHECK: arith.mului_extended %{{.*}}, %[[C2]] : i32
func.func @stream(%seed: i64, %offset: i64) -> tensor<f32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "uniform", stream = 21474836487 : i64}
      : (i64, i64) -> tensor<f32>
  return %r : tensor<f32>
}

// -----

/// Check that every philox op of a module is expanded, in nested regions too,
/// and other code is left alone.

// CHECK-LABEL: func.func @nested
// CHECK: scf.if
// CHECK: linalg.generic
// CHECK: } else {
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @nested(%c: i1, %seed: i64, %offset: i64) -> tensor<4xf32> {
  %r = scf.if %c -> tensor<4xf32> {
    %a = "autodiff.philox"(%seed, %offset) {distribution = "uniform"} : (i64, i64) -> tensor<4xf32>
    scf.yield %a : tensor<4xf32>
  } else {
    %b = "autodiff.philox"(%seed, %offset) {distribution = "normal"} : (i64, i64) -> tensor<4xf32>
    %s = arith.addf %b, %b : tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
