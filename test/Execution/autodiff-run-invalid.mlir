// Bad input to autodiff-run: every case exits 1 with one MLIR-style
// diagnostic line and nothing else: `{{\A}}` anchors the diagnostic at the
// start of the output and `-NOT: {{.}}` forbids anything after it, which
// rules out a Python traceback.

// RUN: %not autodiff-run %s --entry missing 2>&1 | filecheck %s --check-prefix=ENTRY
// RUN: %not autodiff-run %s --entry helper 2>&1 | filecheck %s --check-prefix=PRIVATE
// RUN: %not autodiff-run %s --arg '[1, 2]' 2>&1 | filecheck %s --check-prefix=COUNT
// RUN: %not autodiff-run %s --arg '[1, 2, 3]' --arg 1 2>&1 | filecheck %s --check-prefix=SHAPE
// RUN: %not autodiff-run %s --arg '[[1, 2]]' --arg 1 2>&1 | filecheck %s --check-prefix=RANK
// RUN: %not autodiff-run %s --arg '[1, 2]:f64' --arg 1 2>&1 | filecheck %s --check-prefix=DTYPE
// RUN: %not autodiff-run %s --arg '[1, 2]' --arg 1.5 2>&1 | filecheck %s --check-prefix=FLOAT-FOR-INT
// RUN: %not autodiff-run %s --arg '[1, 2]' --arg 300 2>&1 | filecheck %s --check-prefix=RANGE
// RUN: %not autodiff-run %s --arg '[1, 2' --arg 1 2>&1 | filecheck %s --check-prefix=MALFORMED
// RUN: %not autodiff-run %s --arg '[1, 2]:f31' --arg 1 2>&1 | filecheck %s --check-prefix=SUFFIX
// RUN: %not autodiff-run %s --arg '[1, [2]]' --arg 1 2>&1 | filecheck %s --check-prefix=RAGGED
// RUN: %not autodiff-run %s --arg 'one' --arg 1 2>&1 | filecheck %s --check-prefix=WORD
// RUN: %not autodiff-run %s --frobnicate 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: %not autodiff-run %s --pass-pipeline='no-such-pass' 2>&1 | filecheck %s --check-prefix=PIPELINE
// RUN: %not autodiff-run %t.does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=NOFILE
// RUN: %PYTHON -c "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)" > %t.bin
// RUN: %not autodiff-run %t.bin 2>&1 | filecheck %s --check-prefix=BYTES
// RUN: %PYTHON -c "import sys; sys.stdout.write('%%%% (((( garbage }}}}')" > %t.garbage.mlir
// RUN: %not autodiff-run %t.garbage.mlir 2>&1 | filecheck %s --check-prefix=GARBAGE
// RUN: %PYTHON -c "import sys; t = open(sys.argv[1]).read(); sys.stdout.write(t[:t.rindex('func.call @helper')])" %s > %t.truncated.mlir
// RUN: %not autodiff-run %t.truncated.mlir 2>&1 | filecheck %s --check-prefix=TRUNCATED
// RUN: %PYTHON -c "import sys; open(sys.argv[1], 'wb').write(b'definitely not numpy')" %t.bad.npy
// RUN: %not autodiff-run %s --arg @%t.bad.npy --arg 1 2>&1 | filecheck %s --check-prefix=NPY
// RUN: %PYTHON -c "import sys, numpy; numpy.save(sys.argv[1], numpy.ones(2))" %t.f64.npy
// RUN: %not autodiff-run %s --arg @%t.f64.npy --arg 1 2>&1 | filecheck %s --check-prefix=NPY-DTYPE
// RUN: %not autodiff-run %S/Inputs/dynamic-result.mlir --arg '[1]' 2>&1 | filecheck %s --check-prefix=DYNAMIC
// RUN: %not autodiff-run %S/Inputs/leftover-jvp.mlir --pass-pipeline= --arg 1 --arg 1 2>&1 | filecheck %s --check-prefix=LEFTOVER

func.func private @helper(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// The truncated copy of this file ends before the call below.
func.func @main(%x: tensor<2xf32>, %n: i8) -> tensor<2xf32> {
  %r = func.call @helper(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}

/// Check an unknown entry function: the message lists the functions there are.
// ENTRY: {{\A}}autodiff-run: error: no function '@missing' in '{{.*}}autodiff-run-invalid.mlir' (functions: @helper, @main)
// ENTRY-NOT: {{.}}

/// Check a private entry function: reported at the function.
// PRIVATE: {{\A.*}}autodiff-run-invalid.mlir:{{[0-9]+}}:1: error: '@helper' is private; only public functions can be run
// PRIVATE-NOT: {{.}}

/// Check a wrong number of --arg values.
// COUNT: {{\A}}autodiff-run: error: @main takes 2 arguments (tensor<2xf32>, i8), got 1
// COUNT-NOT: {{.}}

/// Check a wrong shape and a wrong rank.
// SHAPE: {{\A}}autodiff-run: error: @main: argument 0 (tensor<2xf32>): expected shape (2,), got (3,)
// SHAPE-NOT: {{.}}
// RANK: {{\A}}autodiff-run: error: @main: argument 0 (tensor<2xf32>): expected rank 1 with shape (2,), got rank 2 with shape (1, 2)
// RANK-NOT: {{.}}

/// Check a dtype suffix that does not match the parameter, a float for an
/// integer parameter and an integer out of the parameter's range.
// DTYPE: {{\A}}autodiff-run: error: @main: argument 0 (tensor<2xf32>): expected dtype float32, got float64
// DTYPE-NOT: {{.}}
// FLOAT-FOR-INT: {{\A}}autodiff-run: error: @main: argument 1 (i8): expected int8 values, got float64
// FLOAT-FOR-INT-NOT: {{.}}
// RANGE: {{\A}}autodiff-run: error: @main: argument 1 (i8): value out of range for int8
// RANGE-NOT: {{.}}

/// Check malformed --arg values: unbalanced brackets, an unknown element type,
/// ragged nested lists and a word that is not a number.
// MALFORMED: {{\A}}autodiff-run: error: --arg 0: malformed value '[1, 2': missing ']'
// MALFORMED-NOT: {{.}}
// SUFFIX: {{\A}}autodiff-run: error: --arg 0: unknown element type 'f31' in '[1, 2]:f31'{{.*}}
// SUFFIX-NOT: {{.}}
// RAGGED: {{\A}}autodiff-run: error: @main: argument 0 (tensor<2xf32>): nested lists of different lengths do not form an array
// RAGGED-NOT: {{.}}
// WORD: {{\A}}autodiff-run: error: --arg 0: malformed value 'one': 'one' is not a number
// WORD-NOT: {{.}}

/// Check an unknown command-line option and an unknown pass.
// OPTION: {{\A}}autodiff-run: error: unrecognized arguments: --frobnicate
// OPTION-NOT: {{.}}
// PIPELINE: {{\A}}autodiff-run: error: invalid pass pipeline 'no-such-pass': 'no-such-pass' does not refer to a registered pass{{.*}}
// PIPELINE-NOT: {{.}}

/// Check input files that are missing, binary, garbage and truncated.
// NOFILE: {{\A}}autodiff-run: error: could not open input file '{{.*}}.does-not-exist.mlir': No such file or directory
// NOFILE-NOT: {{.}}
// BYTES: {{\A.*}}.bin:1:1: error: input is not valid UTF-8 text (byte 128)
// BYTES-NOT: {{.}}
// GARBAGE: {{\A.*}}.garbage.mlir:1:1: error: {{.+}}
// GARBAGE-NOT: {{.}}
// TRUNCATED: {{\A.*}}.truncated.mlir:{{[0-9]+}}:{{[0-9]+}}: error: {{.+}}
// TRUNCATED-NOT: {{.}}

/// Check .npy arguments that are not numpy files or have the wrong dtype.
// NPY: {{\A}}autodiff-run: error: --arg 0: '{{.*}}.bad.npy' is not a .npy file; save one array with numpy.save
// NPY-NOT: {{.}}
// NPY-DTYPE: {{\A}}autodiff-run: error: @main: argument 0 (tensor<2xf32>): expected dtype float32, got float64
// NPY-DTYPE-NOT: {{.}}

/// Check a dynamically shaped result: rejected by the CPU lowering at the function.
// DYNAMIC: {{\A.*}}/Inputs/dynamic-result.mlir:3:1: error: autodiff-lower-to-cpu: result type tensor<?xf32> has a dynamic shape{{.*}}
// DYNAMIC-NOT: {{.}}

/// Check an autodiff op left for the lowering (no transform passes run).
// LEFTOVER: {{\A.*}}/Inputs/leftover-jvp.mlir:8:10: error: autodiff-lower-to-cpu: 'autodiff.jvp' must be removed by its transform pass{{.*}}
// LEFTOVER-NOT: {{.}}
