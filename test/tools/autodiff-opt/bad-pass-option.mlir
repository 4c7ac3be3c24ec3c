// A bad option of an upstream pass or of ours is a one-line error naming the
// pass and the option, exit code 1; the input is not processed.
//
// RUN: %not autodiff-opt %s --canonicalize=foo=1 2>&1 | filecheck %s --check-prefix=UPSTREAM
// RUN: %not autodiff-opt %s '--canonicalize{foo=1}' 2>&1 | filecheck %s --check-prefix=UPSTREAM
// RUN: %not autodiff-opt %s --canonicalize=max-iterations=abc 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: %not autodiff-opt %s --autodiff-lower-to-cpu=bogus=1 2>&1 | filecheck %s --check-prefix=OURS
// RUN: %not autodiff-opt %s '--autodiff-lower-to-cpu{bogus=1}' 2>&1 | filecheck %s --check-prefix=OURS
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(autodiff-lower-to-cpu{bogus=1})' 2>&1 \
// RUN:   | filecheck %s --check-prefix=OURS
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(canonicalize{foo=1})' 2>&1 \
// RUN:   | filecheck %s --check-prefix=PIPELINE
// RUN: %not autodiff-opt %s '--cse{' 2>&1 | filecheck %s --check-prefix=BRACE
// RUN: %not autodiff-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | filecheck %s --check-prefix=PAREN

/// Check each message (and that it is the only output).

// UPSTREAM: {{^}}autodiff-opt: error: invalid option for pass 'canonicalize': no such option foo{{.*}}
// UPSTREAM-NOT: {{.}}
// VALUE: {{^}}autodiff-opt: error: invalid option for pass 'canonicalize': for the --max-iterations option: 'abc' value invalid{{.*}}
// VALUE-NOT: {{.}}
// OURS: {{^}}autodiff-opt: error: pass 'autodiff-lower-to-cpu' has no option 'bogus'{{.*}}
// OURS-NOT: {{.}}
// PIPELINE: {{^}}autodiff-opt: error: invalid options for pass 'canonicalize{foo=1}': no such option foo{{.*}}
// PIPELINE-NOT: {{.}}
// BRACE: {{^}}autodiff-opt: error: missing closing '}' in pass options of '--cse{'{{.*}}
// BRACE-NOT: {{.}}
// PAREN: {{^}}autodiff-opt: error: unbalanced '(' or '{' in pass pipeline 'builtin.module(cse'{{.*}}
// PAREN-NOT: {{.}}
func.func @f() {
  return
}
