// Garbage input (random bytes, NUL bytes, text that is not MLIR) is a
// one-line error with a location and exit code 1, never a crash.
//
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'wb').write(bytes(range(256)) * 4)" %t.bytes
// RUN: %not autodiff-opt %t.bytes 2>&1 | filecheck %s --check-prefix=BYTES
// RUN: %not autodiff-opt < %t.bytes 2>&1 | filecheck %s --check-prefix=STDIN
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'wb').write(b'func.func @f() {' + bytes(1) + b'}')" %t.nul
// RUN: %not autodiff-opt %t.nul 2>&1 | filecheck %s --check-prefix=NUL
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w', encoding='utf-8').write(''.join(map(chr, range(0x2600, 0x2640))))" %t.symbols
// RUN: %not autodiff-opt %t.symbols 2>&1 | filecheck %s --check-prefix=SYMBOLS
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w').write('module { } } ) ] >')" %t.brackets
// RUN: %not autodiff-opt %t.brackets 2>&1 | filecheck %s --check-prefix=BRACKETS
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'w').write('123 abc ! @ = : -> ,')" %t.tokens
// RUN: %not autodiff-opt --split-input-file %t.tokens 2>&1 | filecheck %s --check-prefix=TOKENS

/// Check each message: one line, located, nothing else.

// BYTES: {{^}}{{.*}}.bytes:1:1: error: input is not valid UTF-8 text (byte 128){{$}}
// BYTES-NOT: {{.}}
// STDIN: {{^}}<stdin>:1:1: error: input is not valid UTF-8 text (byte 128){{$}}
// STDIN-NOT: {{.}}
// NUL: {{^}}{{.*}}.nul:1:1: error: input contains a NUL byte; expected MLIR text{{$}}
// NUL-NOT: {{.}}
// SYMBOLS: {{^}}{{.*}}.symbols:1:1: error: {{.+}}
// SYMBOLS-NEXT: {{^}}{{.+}}{{$}}
// SYMBOLS-NOT: {{.}}
// BRACKETS: {{^}}{{.*}}.brackets:1:{{[0-9]+}}: error: {{.+}}
// BRACKETS-NEXT: {{^}}{{.*}}{{$}}
// BRACKETS-NEXT: {{^}}{{ *}}^{{$}}
// BRACKETS-NOT: {{.}}
// TOKENS: {{^}}{{.*}}.tokens:1:1: error: {{.+}}
// TOKENS-NEXT: {{^}}{{.*}}{{$}}
// TOKENS-NEXT: {{^}}{{ *}}^{{$}}
// TOKENS-NOT: {{.}}
