// A flag that is neither a driver option nor a pass (ours or upstream), or an
// unknown pass inside --pass-pipeline, is a one-line error and exit code 1.
//
// RUN: %not autodiff-opt %s --no-such-pass 2>&1 | filecheck %s --check-prefix=FLAG
// RUN: %not autodiff-opt %s -no-such-pass=1 2>&1 | filecheck %s --check-prefix=FLAG1
// RUN: %not autodiff-opt %s --autodiff-no-such-pass 2>&1 | filecheck %s --check-prefix=OURS
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(cse,no-such-pass)' 2>&1 \
// RUN:   | filecheck %s --check-prefix=PIPELINE

/// Check the message names the flag and the pass, on one line, with no traceback.

// FLAG: {{^}}autodiff-opt: error: unknown option '--no-such-pass': 'no-such-pass' does not refer to a registered pass or pass pipeline{{.*}}
// FLAG-NOT: {{.}}
// FLAG1: {{^}}autodiff-opt: error: unknown option '-no-such-pass=1': 'no-such-pass' does not refer to a registered pass{{.*}}
// FLAG1-NOT: {{.}}
// OURS: {{^}}autodiff-opt: error: unknown option '--autodiff-no-such-pass': 'autodiff-no-such-pass' does not refer to a registered pass{{.*}}
// OURS-NOT: {{.}}
// PIPELINE: {{^}}autodiff-opt: error: 'no-such-pass' does not refer to a registered pass or pass pipeline{{.*}}
// PIPELINE-NOT: {{.}}
func.func @f() {
  return
}
