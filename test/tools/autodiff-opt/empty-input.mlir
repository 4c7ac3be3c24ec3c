// An empty input, or one with nothing but comments, is an empty module, from
// a file or stdin, with or without --split-input-file, like mlir-opt.
//
// RUN: autodiff-opt %S/Inputs/empty.mlir | filecheck %s
// RUN: autodiff-opt < %S/Inputs/empty.mlir | filecheck %s
// RUN: autodiff-opt %S/Inputs/comments-only.mlir | filecheck %s
// RUN: autodiff-opt --split-input-file %S/Inputs/empty.mlir | filecheck %s
// RUN: autodiff-opt --verify-diagnostics %S/Inputs/comments-only.mlir | filecheck %s
// RUN: autodiff-opt %S/Inputs/empty.mlir > %t.ours
// RUN: %mlir_opt %S/Inputs/empty.mlir > %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: autodiff-opt %S/Inputs/empty.mlir --mlir-print-debuginfo | filecheck %s --check-prefix=LOC

/// Check the empty module, and its location (the file, line 0).

// CHECK: {{^}}module {{{$}}
// CHECK-NEXT: {{^}}}{{$}}
// LOC: } loc(#loc)
// LOC: #loc = loc("{{.*}}empty.mlir":0:0)
