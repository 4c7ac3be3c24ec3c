// autodiff-run has --version and a help screen in autodiff-opt's style.
//
// RUN: autodiff-run --help | filecheck %s
// RUN: autodiff-run -h | filecheck %s
// RUN: autodiff-run --version | filecheck %s --check-prefix=VERSION
// RUN: autodiff-opt --help | filecheck %s --check-prefix=OPT

// CHECK: OVERVIEW: autodiff-run:
// CHECK: USAGE: autodiff-run [options] [<input file> | -]
// CHECK: OPTIONS:
// CHECK: --entry=<name>
// CHECK: --arg=<value>
// CHECK: --version
// CHECK: -h, --help

// VERSION: autodiff-run (mlir-autodiff {{[0-9]+\.[0-9]+}}

// OPT: OVERVIEW: autodiff-opt:
// OPT: USAGE: autodiff-opt [options] [<input file> | -]
// OPT: OPTIONS:
