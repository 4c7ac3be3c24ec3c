// Truncated MLIR (a file cut short anywhere) is a one-line error with a
// location, exit code 1, never a crash or a traceback.
//
// The cuts are made by Python at markers in the function below.
// RUN: %PYTHON -c "import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(s[: s.rindex('@trunc')])" %s %t.1.mlir
// RUN: %not autodiff-opt %t.1.mlir 2>&1 | filecheck %s --check-prefix=SYMBOL
// RUN: %PYTHON -c "import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(s[: s.rindex('tensor<4x')])" %s %t.2.mlir
// RUN: %not autodiff-opt %t.2.mlir 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: %PYTHON -c "import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(s[: s.rindex('uniform')])" %s %t.3.mlir
// RUN: %not autodiff-opt %t.3.mlir 2>&1 | filecheck %s --check-prefix=STRING
// RUN: %PYTHON -c "import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(s[: s.rindex('return') + 6])" %s %t.4.mlir
// RUN: %not autodiff-opt %t.4.mlir 2>&1 | filecheck %s --check-prefix=BODY
// RUN: %PYTHON -c "import sys; s = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(s[: s.rindex('}')])" %s %t.5.mlir
// RUN: %not autodiff-opt %t.5.mlir 2>&1 | filecheck %s --check-prefix=BRACE
// RUN: %not autodiff-opt --split-input-file --verify-diagnostics %t.5.mlir 2>&1 \
// RUN:   | filecheck %s --check-prefix=VERIFY

/// Check each message: one line, `file:line:col: error:`, nothing else.

// SYMBOL: {{^}}{{.*}}.1.mlir:[[# @LINE + 23]]:11: error: custom op 'func.func' expected valid '@'-identifier for symbol name{{$}}
// SYMBOL-NEXT: {{^}}{{.*}}{{$}}
// SYMBOL-NEXT: {{^}}{{ *}}^{{$}}
// SYMBOL-NOT: {{.}}
// TYPE: {{^}}{{.*}}.2.mlir:[[# @LINE + 21]]:14: error: expected non-function type{{$}}
// TYPE-NEXT: {{^}}{{.*}}{{$}}
// TYPE-NEXT: {{^}}{{ *}}^{{$}}
// TYPE-NOT: {{.}}
// STRING: {{^}}{{.*}}.3.mlir:[[# @LINE + 16]]:57: error: expected '"' in string literal{{$}}
// STRING-NEXT: {{^}}{{.*}}{{$}}
// STRING-NEXT: {{^}}{{ *}}^{{$}}
// STRING-NOT: {{.}}
// BODY: {{^}}{{.*}}.4.mlir:[[# @LINE + 13]]:8: error: expected operation name in quotes{{$}}
// BODY-NEXT: {{^}}{{.*}}{{$}}
// BODY-NEXT: {{^}}{{ *}}^{{$}}
// BODY-NOT: {{.}}
// BRACE: {{^}}{{.*}}.5.mlir:[[# @LINE + 9]]:30: error: expected operation name in quotes{{$}}
// BRACE-NEXT: {{^}}{{.*}}{{$}}
// BRACE-NEXT: {{^}}{{ *}}^{{$}}
// BRACE-NOT: {{.}}
// VERIFY: {{^}}{{.*}}.5.mlir:[[# @LINE + 5]]:30: error: unexpected error: expected operation name in quotes{{$}}
// VERIFY-NOT: {{.}}

func.func @trunc(%seed: i64) -> tensor<4x4xf32> {
  %r = "autodiff.philox"(%seed, %seed) {distribution = "uniform"} : (i64, i64) -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
