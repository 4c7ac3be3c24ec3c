// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu=threads=2 | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s --check-prefix=ONE

// --autodiff-lower-to-cpu=threads=N distributes large kernels over N OpenMP
// threads: omp.parallel regions that LLVM IR translation outlines into
// calls to LLVM's OpenMP runtime (which the JIT must load). Without the
// option nothing is threaded.
// ONE-NOT: omp.

/// Check that a large elementwise op runs in a two-thread parallel region
/// whose work-shared loop splits the rows in two, with the vectorized loop inside.
// CHECK-LABEL: llvm.func @tanh_rows(
// CHECK:         omp.parallel num_threads(%{{.*}} : i32)
// CHECK:         omp.wsloop
// CHECK:         omp.loop_nest
// CHECK:         vector<16xf32>
// CHECK:         omp.terminator
func.func @tanh_rows(%x: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %r = math.tanh %x : tensor<512x256xf32>
  return %r : tensor<512x256xf32>
}

// -----

/// Check that a small op stays on the calling thread even with threads=2.
// CHECK-LABEL: llvm.func @small(
// CHECK-NOT:     omp.
// CHECK:         llvm.return
func.func @small(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %r = math.tanh %x : tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
