// RUN: autodiff-run %s --entry zero | filecheck %s --check-prefix=ZERO
// RUN: autodiff-run %s --entry ones | filecheck %s --check-prefix=ONES
// RUN: autodiff-run %s --entry pi | filecheck %s --check-prefix=PI
// RUN: autodiff-run %s --entry args --arg 0:i64 --arg 0:i64 | filecheck %s --check-prefix=ZERO

// Random123's known-answer vectors for Philox4x32-10 (kat_vectors), through
// `autodiff.philox` + `--autodiff-lower-rng`. A `bits` draw of four i32 is
// one counter block: key = (seed lo32, seed hi32), counter = (offset lo32,
// offset hi32, stream lo32, stream hi32). The expected words are the KAT
// table's hex values printed as signed 32-bit decimals.

// counter (0, 0, 0, 0), key (0, 0) -> 0x6627e8d5 0xe169c58d 0xbc57ac4c 0x9b00dbd8
// ZERO: result[0]: tensor<4xi32> = [1713891541, -513161843, -1135104948, -1694442536]
func.func @zero() -> tensor<4xi32> {
  %seed = arith.constant 0 : i64
  %offset = arith.constant 0 : i64
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// The same block from run-time seed and offset arguments.
func.func @args(%seed: i64, %offset: i64) -> tensor<4xi32> {
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits"} : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// counter all 0xffffffff, key (0xffffffff, 0xffffffff)
//   -> 0x408f276d 0x41c83b0e 0xa20bc7c6 0x6d5451fd
// ONES: result[0]: tensor<4xi32> = [1083123565, 1103641358, -1576286266, 1834242557]
func.func @ones() -> tensor<4xi32> {
  %seed = arith.constant -1 : i64
  %offset = arith.constant -1 : i64
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits", stream = -1 : i64}
      : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}

// counter (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), key (0xa4093822, 0x299f31d0)
//   -> 0xd16cfe09 0x94fdcceb 0x5001e420 0x24126ea1
// seed = 0x299f31d0a4093822, offset = 0x85a308d3243f6a88, stream = 0x0370734413198a2e.
// PI: result[0]: tensor<4xi32> = [-781386231, -1795306261, 1342301216, 605187745]
func.func @pi() -> tensor<4xi32> {
  %seed = arith.constant 2999170649027065890 : i64
  %offset = arith.constant -8817193942522041720 : i64
  %r = "autodiff.philox"(%seed, %offset) {distribution = "bits", stream = 247824715720788526 : i64}
      : (i64, i64) -> tensor<4xi32>
  return %r : tensor<4xi32>
}
