// Pathologically deep nesting is refused with a located error before MLIR's
// recursive parser could overflow the stack; deep but reasonable nesting works.
//
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w').write('module {' * 100000 + '}' * 100000)" %t.deep.mlir
// RUN: %not autodiff-opt %t.deep.mlir 2>&1 | filecheck %s --check-prefix=DEEP
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w').write('func.func @f() -> ' + '(' * 50000 + 'i32' + ')' * 50000)" %t.parens.mlir
// RUN: %not autodiff-opt %t.parens.mlir 2>&1 | filecheck %s --check-prefix=PARENS
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w').write('module {\n' * 500 + '}\n' * 500)" %t.ok.mlir
// RUN: autodiff-opt %t.ok.mlir --canonicalize | filecheck %s --check-prefix=OK

/// Check the one-line errors and the deep-but-fine module.

// DEEP: {{^}}{{.*}}.deep.mlir:1:16008: error: input nested deeper than 2000 levels{{$}}
// DEEP-NEXT: {{^}}module {{.*}}{{$}}
// DEEP-NEXT: {{^}}{{ *}}^{{$}}
// DEEP-NOT: {{.}}
// PARENS: {{^}}{{.*}}.parens.mlir:1:2019: error: input nested deeper than 2000 levels{{$}}
// PARENS-NEXT: {{^}}{{.*}}{{$}}
// PARENS-NEXT: {{^}}{{ *}}^{{$}}
// PARENS-NOT: {{.}}
// OK: module {
// OK-NEXT: module {
