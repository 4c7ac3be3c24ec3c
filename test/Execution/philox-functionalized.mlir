// RUN: autodiff-opt %s --autodiff-functionalize-rng | autodiff-run - --arg 0:i64 --arg 0:i64 | filecheck %s --check-prefix=AT0
// RUN: autodiff-opt %s --autodiff-functionalize-rng | autodiff-run - --arg 0:i64 --arg -1:i64 | filecheck %s --check-prefix=BEFORE
// RUN: autodiff-opt %s --autodiff-functionalize-rng | autodiff-run - --arg 0:i64 --arg 3:i64 | filecheck %s --check-prefix=NEXT

// Stateful draws, functionalized: @main gains (seed, offset) and returns the
// advanced offset. Draw 1 (4 x i32) takes block offset, draw 2 (8 x i32)
// blocks offset + 1 and offset + 2. Block 0 of seed 0 is Random123's first
// known-answer vector: 0x6627e8d5 0xe169c58d 0xbc57ac4c 0x9b00dbd8, printed
// as signed i32.

// AT0: result[0]: tensor<4xi32> = [1713891541, -513161843, -1135104948, -1694442536]
// AT0-NOT: tensor<8xi32> = [{{.*}}1713891541
// AT0: result[2]: i64 = 3

// Starting one block earlier moves block 0 to the front of draw 2.
// BEFORE-NOT: tensor<4xi32> = [{{.*}}1713891541
// BEFORE: result[1]: tensor<8xi32> = [1713891541, -513161843, -1135104948, -1694442536,
// BEFORE: result[2]: i64 = 2

// The offset returned by one call starts the next: fresh numbers.
// NEXT-NOT: 1713891541
// NEXT: result[2]: i64 = 6
func.func @main() -> (tensor<4xi32>, tensor<8xi32>) {
  %a = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
  %b = "autodiff.random"() {distribution = "bits"} : () -> tensor<8xi32>
  return %a, %b : tensor<4xi32>, tensor<8xi32>
}
