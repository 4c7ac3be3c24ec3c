// The printing flags an mlir-opt user knows: --mlir-elide-elementsattrs-if-larger,
// --mlir-print-local-scope, --mlir-timing (a report on stderr),
// --mlir-disable-threading; none changes what the passes compute.
//
// RUN: autodiff-opt %s --mlir-elide-elementsattrs-if-larger=2 | filecheck %s --check-prefix=ELIDE
// RUN: autodiff-opt %s --mlir-print-local-scope | filecheck %s --check-prefix=LOCAL
// RUN: autodiff-opt %s --canonicalize --mlir-timing 2>&1 >/dev/null | filecheck %s --check-prefix=TIMING
// RUN: autodiff-opt %s --canonicalize --mlir-disable-threading | filecheck %s --check-prefix=THREADS

/// Check each flag's effect.

// ELIDE: dense_resource<__elided__> : tensor<4xf32>
// LOCAL-LABEL: func.func @f(
// LOCAL:         affine.apply affine_map<(d0) -> (d0 + 1)>
// TIMING: Execution time report
// TIMING: Canonicalizer
// THREADS-LABEL: func.func @f(
// THREADS:         affine.apply
#plus_one = affine_map<(d0) -> (d0 + 1)>
func.func @f(%i: index) -> (tensor<4xf32>, index) {
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %j = affine.apply #plus_one(%i)
  return %c, %j : tensor<4xf32>, index
}
