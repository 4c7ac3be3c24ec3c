// --list-passes lists our passes with their summaries and says that every
// upstream pass is accepted too.
//
// RUN: autodiff-opt --list-passes | filecheck %s

/// Check the CPU lowering entry and the note about upstream passes.

// CHECK: --autodiff-lower-to-cpu
// CHECK-NEXT: Bufferize
// CHECK: Every upstream MLIR pass and pass pipeline is accepted
