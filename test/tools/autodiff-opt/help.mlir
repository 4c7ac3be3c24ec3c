// --help prints the usage (exit 0) and --version the version.
//
// RUN: autodiff-opt --help | filecheck %s
// RUN: autodiff-opt -h | filecheck %s
// RUN: autodiff-opt --version | filecheck %s --check-prefix=VERSION

/// Check the usage line and a few options an mlir-opt user looks for.

// CHECK: USAGE: autodiff-opt [options] [<input file> | -]
// CHECK: -o <file>
// CHECK: --pass-pipeline=<pipeline>
// CHECK: --split-input-file
// CHECK: --verify-diagnostics
// CHECK: --mlir-print-ir-after-all
// VERSION: autodiff-opt (mlir-autodiff {{[0-9]+\.[0-9]+}}
