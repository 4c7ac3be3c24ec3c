// --mlir-pass-pipeline-crash-reproducer writes, when the pipeline fails, the
// input of the pipeline and the pipeline in mlir-opt's reproducer format;
// `--run-reproducer` (ours and mlir-opt's) replays it to the same error.
//
// RUN: rm -f %t.repro.mlir
// RUN: %not autodiff-opt %s --allow-unregistered-dialect --canonicalize --one-shot-bufferize --mlir-pass-pipeline-crash-reproducer=%t.repro.mlir 2>&1 | filecheck %s
// RUN: filecheck %s --check-prefix=REPRO < %t.repro.mlir
// RUN: %not autodiff-opt %t.repro.mlir --run-reproducer --allow-unregistered-dialect 2>&1 | filecheck %s --check-prefix=REPLAY
// RUN: %not %mlir_opt %t.repro.mlir --run-reproducer --allow-unregistered-dialect 2>&1 | filecheck %s --check-prefix=REPLAY

/// Also for a project pass failing.
// RUN: %not autodiff-opt %s --allow-unregistered-dialect --autodiff-lower-to-cpu --mlir-pass-pipeline-crash-reproducer=%t.cpu.mlir 2>&1 | filecheck %s --check-prefix=OURS
// RUN: filecheck %s --check-prefix=OURS-REPRO < %t.cpu.mlir

/// A run that succeeds writes no reproducer.
// RUN: rm -f %t.none.mlir
// RUN: autodiff-opt %s --allow-unregistered-dialect --canonicalize --mlir-pass-pipeline-crash-reproducer=%t.none.mlir
// RUN: %not ls %t.none.mlir

// CHECK: crash-reproducer.mlir:[[# @LINE + 19]]:8: error: op was not bufferized
// CHECK: error: Failures have been detected while processing an MLIR pass pipeline
// CHECK: note: Pipeline failed{{.*}}: reproducer generated at `{{.*}}repro.mlir`

// REPRO:      "test.opaque"
// REPRO:      {-#
// REPRO-NEXT:   external_resources: {
// REPRO-NEXT:     mlir_reproducer: {
// REPRO-NEXT:       pipeline: "builtin.module(canonicalize, one-shot-bufferize)",
// REPRO-NEXT:       disable_threading: false,
// REPRO-NEXT:       verify_each: true

// REPLAY: repro.mlir:{{[0-9]+}}:{{[0-9]+}}: error: op was not bufferized
// REPLAY-NOT: warning

// OURS: error: Failures have been detected while processing an MLIR pass pipeline
// OURS-REPRO: pipeline: "builtin.module(autodiff-lower-to-cpu)"

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = "test.opaque"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
