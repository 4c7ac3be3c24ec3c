// REQUIRES: ptxas
// RUN: autodiff-opt %s --autodiff-lower-rng '--autodiff-lower-to-gpu=format=isa' | filecheck %s
// RUN: autodiff-opt %s --autodiff-lower-rng '--autodiff-lower-to-gpu=format=isa' \
// RUN:   | filecheck %s --check-prefix=EXACT
// RUN: autodiff-opt %s --autodiff-lower-rng --autodiff-lower-to-gpu | filecheck %s --check-prefix=BIN

/// Check that the Philox expansion compiles through the GPU pipeline (the
/// three independent draws share one kernel: horizontal fusion) using only exactly rounded PTX arithmetic: `.rn` float
/// operations, no fused multiply-adds, no approximate instructions and no
/// libdevice calls, so a seed gives the CPU's numbers bit for bit.

// CHECK: gpu.binary @draws_kernel
// CHECK-SAME: .target sm_80
// CHECK-SAME: mul.rn.f32
// CHECK-SAME: div.rn.f32
// CHECK-SAME: mul.rn.f64
// CHECK-SAME: div.rn.f64
// CHECK-NOT: gpu.binary

// EXACT-NOT: approx
// EXACT-NOT: fma.
// EXACT-NOT: mad.f
// EXACT-NOT: __nv_

// By default each kernel is a real fat binary (ptxas ran; magic 0xBA55ED50).
// BIN-COUNT-1: gpu.binary @draws_kernel{{.*}}#nvvm.target<O = 3, chip = "sm_80">, properties = {ISAToBinaryTimeInMs{{.*}}"P\ED
func.func @draws(%seed: i64, %offset: i64) -> (tensor<1024xf32>, tensor<256xf64>, tensor<64xf32>) {
  %a = "autodiff.philox"(%seed, %offset) {distribution = "normal", mean = 1.0, std = 2.0}
      : (i64, i64) -> tensor<1024xf32>
  %b = "autodiff.philox"(%seed, %offset) {distribution = "normal"} : (i64, i64) -> tensor<256xf64>
  %c = "autodiff.philox"(%seed, %offset) {distribution = "uniform", low = -1.0, high = 1.0}
      : (i64, i64) -> tensor<64xf32>
  return %a, %b, %c : tensor<1024xf32>, tensor<256xf64>, tensor<64xf32>
}
