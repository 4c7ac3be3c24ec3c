// RUN: autodiff-run %s --entry wrap --arg 127 --arg 1 --arg 300 | filecheck %s --match-full-lines --check-prefix=WRAP
// RUN: autodiff-run %s --entry unsigned --arg -1 --arg 300 --arg -16 | filecheck %s --match-full-lines --check-prefix=UNSIGNED
// RUN: autodiff-run %s --entry compare --arg 3 --arg 5 --arg -1 | filecheck %s --match-full-lines --check-prefix=COMPARE

/// Check two's-complement wrap-around: i8 127 + 1 = -128, i16 300 * 300 =
/// 90000 - 65536 = 24464, and i64 1 << 40 = 1099511627776.
// WRAP:      result[0]: i8 = -128
// WRAP-NEXT: result[1]: i16 = 24464
// WRAP-NEXT: result[2]: i64 = 1099511627776
func.func @wrap(%a: i8, %b: i8, %c: i16) -> (i8, i16, i64) {
  %s = arith.addi %a, %b : i8
  %p = arith.muli %c, %c : i16
  %one = arith.constant 1 : i64
  %forty = arith.constant 40 : i64
  %sh = arith.shli %one, %forty : i64
  return %s, %p, %sh : i8, i16, i64
}

/// Check unsigned ops and casts: i8 -1 is 255 unsigned, so 255 / 2 = 127;
/// extui gives 255, extsi -1; trunci 300 to i8 gives 44; -16 >> 2 = -4
/// (arithmetic), 0xFFFFFFF0 >> 28 = 15 (logical).
// UNSIGNED:      result[0]: i8 = 127
// UNSIGNED-NEXT: result[1]: i32 = 255
// UNSIGNED-NEXT: result[2]: i32 = -1
// UNSIGNED-NEXT: result[3]: i8 = 44
// UNSIGNED-NEXT: result[4]: i32 = -4
// UNSIGNED-NEXT: result[5]: i32 = 15
func.func @unsigned(%a: i8, %b: i32, %c: i32) -> (i8, i32, i32, i8, i32, i32) {
  %two = arith.constant 2 : i8
  %q = arith.divui %a, %two : i8
  %zu = arith.extui %a : i8 to i32
  %zs = arith.extsi %a : i8 to i32
  %t = arith.trunci %b : i32 to i8
  %c2 = arith.constant 2 : i32
  %c28 = arith.constant 28 : i32
  %sa = arith.shrsi %c, %c2 : i32
  %sl = arith.shrui %c, %c28 : i32
  return %q, %zu, %zs, %t, %sa, %sl : i8, i32, i32, i8, i32, i32
}

/// Check i1 results of signed and unsigned comparisons, scalar and in a tensor:
/// 3 < 5; -1 <u 1 is false (all ones is the largest unsigned value).
// COMPARE:      result[0]: i1 = true
// COMPARE-NEXT: result[1]: i1 = false
// COMPARE-NEXT: result[2]: tensor<3xi1> = [true, false, true]
func.func @compare(%a: i32, %b: i32, %m: i32) -> (i1, i1, tensor<3xi1>) {
  %lt = arith.cmpi slt, %a, %b : i32
  %one = arith.constant 1 : i32
  %ult = arith.cmpi ult, %m, %one : i32
  %false = arith.constant false
  %t = tensor.from_elements %lt, %ult, %lt : tensor<3xi1>
  %x = tensor.from_elements %false, %false, %false : tensor<3xi1>
  %e = tensor.empty() : tensor<3xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                        affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%t, %x : tensor<3xi1>, tensor<3xi1>) outs(%e : tensor<3xi1>) {
  ^bb0(%p: i1, %q: i1, %o: i1):
    %v = arith.ori %p, %q : i1
    linalg.yield %v : i1
  } -> tensor<3xi1>
  return %lt, %ult, %r : i1, i1, tensor<3xi1>
}
