// RUN: autodiff-opt %s --split-input-file --autodiff-fuse-row-groups | filecheck %s

// Row groups (FuseRowGroups in transforms/cpu/row_groups.py): an elementwise
// op over rows and the ops computing its operands row by row through inner
// reductions run as one loop over tiles of rows. Numerical results are
// checked in test/python/test_cpu_row_groups.py.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

/// Check that a row softmax (max, exp, sum, divide) becomes one loop over
/// tiles of 4 rows (4 rows of 1 KB fill ROW_TILE_BYTES = 4 KB)
/// computing all four ops on the tile, with tile-sized intermediates.
// CHECK-LABEL: func.func @softmax(
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK:           tensor.extract_slice %{{.*}}[%[[I]], 0] [4, 256] [1, 1] : tensor<512x256xf32> to tensor<4x256xf32>
// CHECK:           linalg.reduce ins(%{{.*}} : tensor<4x256xf32>) outs(%{{.*}} : tensor<4xf32>)
// CHECK:             arith.maximumf
// CHECK:           linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x256xf32>, tensor<4xf32>)
// CHECK:             math.exp
// CHECK:           linalg.reduce ins(%{{.*}} : tensor<4x256xf32>) outs(%{{.*}} : tensor<4xf32>)
// CHECK:             arith.addf
// CHECK:           linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x256xf32>, tensor<4xf32>)
// CHECK:             arith.divf
// CHECK:           tensor.insert_slice %{{.*}} into %{{.*}}[%[[I]], 0] [4, 256] [1, 1]
// CHECK:           scf.yield
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @softmax(%x: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<512xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<512xf32>) -> tensor<512xf32>
  %mx = linalg.reduce ins(%x : tensor<512x256xf32>) outs(%mi : tensor<512xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %r = arith.maximumf %a, %acc : f32
      linalg.yield %r : f32
    }
  %e2 = tensor.empty() : tensor<512x256xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %mx : tensor<512x256xf32>, tensor<512xf32>) outs(%e2 : tensor<512x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      %v = math.exp %d : f32
      linalg.yield %v : f32
  } -> tensor<512x256xf32>
  %si = linalg.fill ins(%zero : f32) outs(%e1 : tensor<512xf32>) -> tensor<512xf32>
  %sm = linalg.reduce ins(%ex : tensor<512x256xf32>) outs(%si : tensor<512xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }
  %res = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sm : tensor<512x256xf32>, tensor<512xf32>) outs(%e2 : tensor<512x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %res : tensor<512x256xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

/// Check that a producer with a user outside the group stays outside the
/// loop (fusing it would compute it twice): here the exp is also returned,
/// so only the sum and the division are fused.
// CHECK-LABEL: func.func @exp_returned(
// CHECK:         %[[EX:.*]] = linalg.generic
// CHECK:           math.exp
// CHECK:         scf.for
// CHECK-NOT:       math.exp
// CHECK:           linalg.reduce
// CHECK:             arith.addf
// CHECK:           linalg.generic
// CHECK:             arith.divf
// CHECK:         return
func.func @exp_returned(%x: tensor<512x256xf32>) -> (tensor<512x256xf32>, tensor<512x256xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<512xf32>
  %e2 = tensor.empty() : tensor<512x256xf32>
  %ex = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<512x256xf32>) outs(%e2 : tensor<512x256xf32>) {
    ^bb0(%a: f32, %o: f32):
      %v = math.exp %a : f32
      linalg.yield %v : f32
  } -> tensor<512x256xf32>
  %si = linalg.fill ins(%zero : f32) outs(%e1 : tensor<512xf32>) -> tensor<512xf32>
  %sm = linalg.reduce ins(%ex : tensor<512x256xf32>) outs(%si : tensor<512xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }
  %res = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sm : tensor<512x256xf32>, tensor<512xf32>) outs(%e2 : tensor<512x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %res, %ex : tensor<512x256xf32>, tensor<512x256xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

/// Check that a reduction over the rows (column sums) is not a row group:
/// no tile of rows computes its result.
// CHECK-LABEL: func.func @column_normalize(
// CHECK-NOT:     scf.for
// CHECK:         return
func.func @column_normalize(%x: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<256xf32>
  %e2 = tensor.empty() : tensor<512x256xf32>
  %si = linalg.fill ins(%zero : f32) outs(%e1 : tensor<256xf32>) -> tensor<256xf32>
  %sm = linalg.reduce ins(%x : tensor<512x256xf32>) outs(%si : tensor<256xf32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }
  %res = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sm : tensor<512x256xf32>, tensor<256xf32>) outs(%e2 : tensor<512x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
  } -> tensor<512x256xf32>
  return %res : tensor<512x256xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

/// Check that small groups are left alone (fewer elements than
/// ROW_GROUP_MIN_ELEMENTS: the intermediates stay in cache anyway).
// CHECK-LABEL: func.func @small(
// CHECK-NOT:     scf.for
// CHECK:         return
func.func @small(%x: tensor<32x256xf32>) -> tensor<32x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<32xf32>
  %e2 = tensor.empty() : tensor<32x256xf32>
  %si = linalg.fill ins(%zero : f32) outs(%e1 : tensor<32xf32>) -> tensor<32xf32>
  %sm = linalg.reduce ins(%x : tensor<32x256xf32>) outs(%si : tensor<32xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %r = arith.addf %a, %acc : f32
      linalg.yield %r : f32
    }
  %res = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %sm : tensor<32x256xf32>, tensor<32xf32>) outs(%e2 : tensor<32x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
  } -> tensor<32x256xf32>
  return %res : tensor<32x256xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

/// Check that elementwise ops that elementwise fusion leaves apart (a value
/// with two consumers, as forward-over-reverse writes them) form a group of
/// their own: three ops, one loop, no full-size intermediate.
// CHECK-LABEL: func.func @shared_values(
// CHECK:         scf.for
// CHECK:           math.exp
// CHECK:           arith.mulf
// CHECK:           arith.addf
// CHECK:           scf.yield
// CHECK-NOT:     linalg.
// CHECK:         return
func.func @shared_values(%x: tensor<128x256xf32>, %y: tensor<128x256xf32>) -> tensor<128x256xf32> {
  %e = tensor.empty() : tensor<128x256xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<128x256xf32>) outs(%e : tensor<128x256xf32>) {
    ^bb0(%p: f32, %o: f32):
      %v = math.exp %p : f32
      linalg.yield %v : f32
  } -> tensor<128x256xf32>
  %b = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %y : tensor<128x256xf32>, tensor<128x256xf32>) outs(%e : tensor<128x256xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %v = arith.mulf %p, %q : f32
      linalg.yield %v : f32
  } -> tensor<128x256xf32>
  %c = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<128x256xf32>, tensor<128x256xf32>) outs(%e : tensor<128x256xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %v = arith.addf %p, %q : f32
      linalg.yield %v : f32
  } -> tensor<128x256xf32>
  return %c : tensor<128x256xf32>
}
