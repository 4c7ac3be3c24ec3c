"""MLIR-level vmap cases: a per-example function, its argument types and in_axes.

Each case's `@f` is batched by `--autodiff-vmap` and compared with a loop
over the batch that calls the unbatched `@f` on every slice (np.stack).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Case:
    id: str
    args: list[str]           # per-example MLIR types, with sampler: "tensor<3xf64>" | "i:4 index"
    body: str                 # func body using %a, %b, %c ...; ends with `return`
    results: list[str]        # per-example result types
    in_axes: list[int]
    out_axes: list[int] | None = None


T3 = "tensor<3xf64>"
T34 = "tensor<3x4xf64>"
T43 = "tensor<4x3xf64>"

CASES = [
    # -- arith / math at function level and on tensors
    Case("addf_scalar", ["f64", "f64"], "%r = arith.addf %a, %b : f64\nreturn %r : f64",
         ["f64"], [0, 0]),
    Case("mulf_scalar_mixed", ["f64", "f64"],
         "%r = arith.mulf %a, %b : f64\n%s = math.sin %r : f64\nreturn %s : f64",
         ["f64"], [0, -1]),
    Case("exp_tensor_axis1", [T3], "%r = math.exp %a : {T3}\nreturn %r : {T3}", [T3], [1]),
    Case("cmpf_select_mixed", [T3, T3],
         "%c = arith.cmpf olt, %a, %b : {T3}\n%r = arith.select %c, %a, %b : tensor<3xi1>, {T3}"
         "\nreturn %r : {T3}", [T3], [0, -1]),
    Case("select_scalar_pred", ["f64", T3, T3],
         "%z = arith.constant 0.0 : f64\n%p = arith.cmpf olt, %a, %z : f64\n"
         "%r = arith.select %p, %b, %c : {T3}\nreturn %r : {T3}",
         [T3], [0, -1, -1]),
    # -- linalg.generic
    Case("generic_unbatched_operand", [T34, "tensor<4xf64>"], """
%e = tensor.empty() : {T34}
%r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
    affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
    ins(%a, %b : {T34}, tensor<4xf64>) outs(%e : {T34}) {
^bb0(%x: f64, %y: f64, %o: f64):
  %m = arith.mulf %x, %y : f64
  linalg.yield %m : f64
} -> {T34}
return %r : {T34}""", [T34], [0, -1]),
    Case("generic_reduction_axis1", [T34], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<3xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
%r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
    iterator_types = ["parallel", "reduction"]} ins(%a : {T34}) outs(%f : tensor<3xf64>) {
^bb0(%x: f64, %o: f64):
  %s = arith.addf %x, %o : f64
  linalg.yield %s : f64
} -> tensor<3xf64>
return %r : tensor<3xf64>""", [T3], [1]),
    Case("generic_index_and_capture", [T3, "f64"], """
%e = tensor.empty() : {T3}
%r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
    iterator_types = ["parallel"]} ins(%a : {T3}) outs(%e : {T3}) {
^bb0(%x: f64, %o: f64):
  %i = linalg.index 0 : index
  %ii = arith.index_cast %i : index to i64
  %fi = arith.sitofp %ii : i64 to f64
  %m = arith.mulf %x, %fi : f64
  %n = arith.addf %m, %b : f64
  linalg.yield %n : f64
} -> {T3}
return %r : {T3}""", [T3], [-1, 0]),
    # -- linalg named ops
    Case("matmul_both", [T34, "tensor<4x2xf64>"], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<3x2xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<3x2xf64>) -> tensor<3x2xf64>
%r = linalg.matmul ins(%a, %b : {T34}, tensor<4x2xf64>) outs(%f : tensor<3x2xf64>)
    -> tensor<3x2xf64>
return %r : tensor<3x2xf64>""", ["tensor<3x2xf64>"], [0, 2]),
    Case("matmul_lhs", [T34, "tensor<4x2xf64>"], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<3x2xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<3x2xf64>) -> tensor<3x2xf64>
%r = linalg.matmul ins(%a, %b : {T34}, tensor<4x2xf64>) outs(%f : tensor<3x2xf64>)
    -> tensor<3x2xf64>
return %r : tensor<3x2xf64>""", ["tensor<3x2xf64>"], [0, -1], [1]),
    Case("matmul_rhs", [T34, "tensor<4x2xf64>"], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<3x2xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<3x2xf64>) -> tensor<3x2xf64>
%r = linalg.matmul ins(%a, %b : {T34}, tensor<4x2xf64>) outs(%f : tensor<3x2xf64>)
    -> tensor<3x2xf64>
return %r : tensor<3x2xf64>""", ["tensor<3x2xf64>"], [-1, 1]),
    Case("batch_matmul", ["tensor<2x3x4xf64>", "tensor<2x4x2xf64>"], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<2x3x2xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<2x3x2xf64>) -> tensor<2x3x2xf64>
%r = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf64>, tensor<2x4x2xf64>)
    outs(%f : tensor<2x3x2xf64>) -> tensor<2x3x2xf64>
return %r : tensor<2x3x2xf64>""", ["tensor<2x3x2xf64>"], [0, 0]),
    Case("matvec_vecmat_dot", [T34, "tensor<4xf64>", T3], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<3xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
%mv = linalg.matvec ins(%a, %b : {T34}, tensor<4xf64>) outs(%f : tensor<3xf64>) -> tensor<3xf64>
%e4 = tensor.empty() : tensor<4xf64>
%f4 = linalg.fill ins(%z : f64) outs(%e4 : tensor<4xf64>) -> tensor<4xf64>
%vm = linalg.vecmat ins(%c, %a : tensor<3xf64>, {T34}) outs(%f4 : tensor<4xf64>) -> tensor<4xf64>
%e0 = tensor.empty() : tensor<f64>
%f0 = linalg.fill ins(%z : f64) outs(%e0 : tensor<f64>) -> tensor<f64>
%d = linalg.dot ins(%mv, %c : tensor<3xf64>, tensor<3xf64>) outs(%f0 : tensor<f64>) -> tensor<f64>
return %vm, %d : tensor<4xf64>, tensor<f64>""", ["tensor<4xf64>", "tensor<f64>"], [-1, 0, 1]),
    Case("fill_copy_transpose_broadcast", ["f64", T34], """
%e = tensor.empty() : tensor<2x3xf64>
%f = linalg.fill ins(%a : f64) outs(%e : tensor<2x3xf64>) -> tensor<2x3xf64>
%e2 = tensor.empty() : {T43}
%t = linalg.transpose ins(%b : {T34}) outs(%e2 : {T43}) permutation = [1, 0]
%e3 = tensor.empty() : {T34}
%c = linalg.copy ins(%b : {T34}) outs(%e3 : {T34}) -> {T34}
%e4 = tensor.empty() : tensor<3x2x4xf64>
%bc = linalg.broadcast ins(%c : {T34}) outs(%e4 : tensor<3x2x4xf64>) dimensions = [1]
return %f, %t, %bc : tensor<2x3xf64>, {T43}, tensor<3x2x4xf64>""",
         ["tensor<2x3xf64>", T43, "tensor<3x2x4xf64>"], [0, 1]),
    Case("reduce_map", [T34, "tensor<4xf64>"], """
%z = arith.constant 0.0 : f64
%e = tensor.empty() : tensor<4xf64>
%f = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
%s = linalg.reduce ins(%a : {T34}) outs(%f : tensor<4xf64>) dimensions = [0]
  (%x: f64, %acc: f64) {
    %y = arith.addf %x, %acc : f64
    linalg.yield %y : f64
  }
%e2 = tensor.empty() : tensor<4xf64>
%m = linalg.map ins(%s, %b : tensor<4xf64>, tensor<4xf64>) outs(%e2 : tensor<4xf64>)
  (%x: f64, %y: f64, %o: f64) {
    %p = arith.mulf %x, %y : f64
    linalg.yield %p : f64
  }
return %m : tensor<4xf64>""", ["tensor<4xf64>"], [0, -1]),
    # -- tensor
    Case("extract_static_index", [T34, "i:3 index", "i:4 index"],
         "%r = tensor.extract %a[%b, %c] : {T34}\nreturn %r : f64", ["f64"], [0, -1, -1]),
    Case("extract_gather", [T34, "i:3 index", "i:4 index"],
         "%r = tensor.extract %a[%b, %c] : {T34}\nreturn %r : f64", ["f64"], [-1, 0, -1]),
    Case("extract_gather_both", [T34, "i:3 index", "i:4 index"],
         "%r = tensor.extract %a[%b, %c] : {T34}\nreturn %r : f64", ["f64"], [1, 0, 0]),
    Case("insert_static_index", ["f64", T3, "i:3 index"],
         "%r = tensor.insert %a into %b[%c] : {T3}\nreturn %r : {T3}", [T3], [0, -1, -1]),
    Case("insert_scatter", ["f64", T3, "i:3 index"],
         "%r = tensor.insert %a into %b[%c] : {T3}\nreturn %r : {T3}", [T3], [-1, 0, 0]),
    Case("slices", [T34, "tensor<2x2xf64>"], """
%s = tensor.extract_slice %a[1, 1] [2, 2] [1, 1] : {T34} to tensor<2x2xf64>
%m = arith.mulf %s, %b : tensor<2x2xf64>
%r = tensor.insert_slice %m into %a[0, 2] [2, 2] [1, 1] : tensor<2x2xf64> into {T34}
%v = tensor.extract_slice %a[0, 1] [1, 3] [1, 1] : {T34} to tensor<3xf64>
return %r, %v : {T34}, tensor<3xf64>""", [T34, T3], [1, -1]),
    Case("insert_slice_unbatched_src", [T34, "tensor<2x2xf64>"], """
%r = tensor.insert_slice %b into %a[1, 1] [2, 2] [1, 1] : tensor<2x2xf64> into {T34}
return %r : {T34}""", [T34], [0, -1]),
    Case("reshapes", [T34], """
%c = tensor.collapse_shape %a [[0, 1]] : {T34} into tensor<12xf64>
%e = tensor.expand_shape %c [[0, 1, 2]] output_shape [2, 3, 2]
    : tensor<12xf64> into tensor<2x3x2xf64>
%s = arith.constant dense<[6, 2]> : tensor<2xi64>
%r = tensor.reshape %e(%s) : (tensor<2x3x2xf64>, tensor<2xi64>) -> tensor<6x2xf64>
return %e, %r : tensor<2x3x2xf64>, tensor<6x2xf64>""", ["tensor<2x3x2xf64>", "tensor<6x2xf64>"],
         [0]),
    Case("concat_pad_cast", [T34, "tensor<2x4xf64>"], """
%c = tensor.concat dim(0) %a, %b : ({T34}, tensor<2x4xf64>) -> tensor<5x4xf64>
%z = arith.constant 0.5 : f64
%p = tensor.pad %c low[1, 0] high[0, 2] {
^bb0(%i: index, %j: index):
  tensor.yield %z : f64
} : tensor<5x4xf64> to tensor<6x6xf64>
%d = tensor.cast %p : tensor<6x6xf64> to tensor<?x6xf64>
%s = tensor.cast %d : tensor<?x6xf64> to tensor<6x6xf64>
return %s : tensor<6x6xf64>""", ["tensor<6x6xf64>"], [0, -1]),
    Case("from_elements_splat_generate", ["f64", "f64"], """
%t = tensor.from_elements %a, %b, %a, %a : tensor<2x2xf64>
%s = tensor.splat %a : tensor<3xf64>
%g = tensor.generate {
^bb0(%i: index):
  %ii = arith.index_cast %i : index to i64
  %fi = arith.sitofp %ii : i64 to f64
  %v = arith.mulf %fi, %a : f64
  tensor.yield %v : f64
} : tensor<4xf64>
return %t, %s, %g : tensor<2x2xf64>, tensor<3xf64>, tensor<4xf64>""",
         ["tensor<2x2xf64>", T3, "tensor<4xf64>"], [0, -1]),
    # -- scf
    Case("scf_for", [T3, T3], """
%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c4 = arith.constant 4 : index
%r:2 = scf.for %i = %c0 to %c4 step %c1 iter_args(%x = %a, %y = %b) -> ({T3}, {T3}) {
  %m = arith.mulf %x, %y : {T3}
  %n = math.sin %m : {T3}
  %w = arith.addf %y, %y : {T3}
  scf.yield %n, %w : {T3}, {T3}
}
return %r#0, %r#1 : {T3}, {T3}""", [T3, T3], [0, -1]),
    Case("scf_if_unbatched_pred", ["i:2 index", T3], """
%c0 = arith.constant 0 : index
%p = arith.cmpi eq, %a, %c0 : index
%r = scf.if %p -> ({T3}) {
  %e = math.exp %b : {T3}
  scf.yield %e : {T3}
} else {
  %n = arith.negf %b : {T3}
  scf.yield %n : {T3}
}
return %r : {T3}""", [T3], [-1, 0]),
    Case("scf_if_batched_pred", ["f64", T3], """
%z = arith.constant 0.0 : f64
%p = arith.cmpf olt, %a, %z : f64
%r = scf.if %p -> ({T3}) {
  %e = math.exp %b : {T3}
  scf.yield %e : {T3}
} else {
  %n = arith.negf %b : {T3}
  scf.yield %n : {T3}
}
return %r : {T3}""", [T3], [0, -1]),
    Case("scf_while_batched_cond", ["p f64"], """
%one = arith.constant 1.0 : f64
%lim = arith.constant 10.0 : f64
%c0 = arith.constant 0 : i64
%r:2 = scf.while (%x = %a, %n = %c0) : (f64, i64) -> (f64, i64) {
  %c = arith.cmpf olt, %x, %lim : f64
  scf.condition(%c) %x, %n : f64, i64
} do {
^bb0(%x: f64, %n: i64):
  %two = arith.constant 2.0 : f64
  %y = arith.mulf %x, %two : f64
  %y1 = arith.addf %y, %one : f64
  %k = arith.constant 1 : i64
  %n1 = arith.addi %n, %k : i64
  scf.yield %y1, %n1 : f64, i64
}
return %r#0, %r#1 : f64, i64""", ["f64", "i64"], [0]),
    # -- calls and axes
    Case("call_and_out_axes", [T34, "tensor<4xf64>"], """
%r = func.call @helper_{ID}(%a, %b) : ({T34}, tensor<4xf64>) -> {T34}
%u = func.call @helper2_{ID}(%b) : (tensor<4xf64>) -> tensor<4xf64>
return %r, %u : {T34}, tensor<4xf64>
}
func.func private @helper2_{ID}(%b: tensor<4xf64>) -> tensor<4xf64> {
%x = math.tanh %b : tensor<4xf64>
return %x : tensor<4xf64>
}
func.func private @helper_{ID}(%a: {T34}, %b: tensor<4xf64>) -> {T34} {
%e = tensor.empty() : {T34}
%bb = linalg.broadcast ins(%b : tensor<4xf64>) outs(%e : {T34}) dimensions = [0]
%m = arith.mulf %a, %bb : {T34}
return %m : {T34}""", [T34, "tensor<4xf64>"], [2, -1], [1, 1]),
    # -- more paths: captured tensors in bodies, 0-d reshapes, nesting, checkpoint
    Case("generic_reads_captured_tensor", [T3, T34, "i:4 index"], """
%e = tensor.empty() : {T3}
%r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
    iterator_types = ["parallel"]} ins(%a : {T3}) outs(%e : {T3}) {
^bb0(%x: f64, %o: f64):
  %i = linalg.index 0 : index
  %v = tensor.extract %b[%i, %c] : {T34}
  %m = arith.mulf %x, %v : f64
  linalg.yield %m : f64
} -> {T3}
return %r : {T3}""", [T3], [-1, 0, -1]),
    Case("collapse_to_0d_and_dim", ["tensor<1x1xf64>", T3], """
%c = tensor.collapse_shape %a [] : tensor<1x1xf64> into tensor<f64>
%e = tensor.expand_shape %c [] output_shape [1] : tensor<f64> into tensor<1xf64>
%i0 = arith.constant 0 : index
%s = tensor.extract %e[%i0] : tensor<1xf64>
%d = tensor.dim %b, %i0 : {T3}
%di = arith.index_cast %d : index to i64
%df = arith.sitofp %di : i64 to f64
%r = arith.mulf %s, %df : f64
return %r : f64""", ["f64"], [0, 0]),
    Case("for_with_batched_if", ["f64", T3], """
%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c3 = arith.constant 3 : index
%z = arith.constant 0.0 : f64
%r = scf.for %i = %c0 to %c3 step %c1 iter_args(%x = %b) -> ({T3}) {
  %p = arith.cmpf olt, %a, %z : f64
  %y = scf.if %p -> ({T3}) {
    %e = math.cos %x : {T3}
    scf.yield %e : {T3}
  } else {
    %e = math.sin %x : {T3}
    scf.yield %e : {T3}
  }
  scf.yield %y : {T3}
}
return %r : {T3}""", [T3], [0, -1]),
    Case("extract_slice_gather", [T34, "i:2 index", "i:3 index"], """
%s = tensor.extract_slice %a[%b, %c] [2, 1] [1, 1] : {T34} to tensor<2xf64>
%t = tensor.extract_slice %a[1, %c] [2, 2] [1, 1] : {T34} to tensor<2x2xf64>
return %s, %t : tensor<2xf64>, tensor<2x2xf64>""", ["tensor<2xf64>", "tensor<2x2xf64>"],
         [-1, 0, 0]),
    Case("scf_while_before_computes", ["p f64", T3], """
%lim = arith.constant 20.0 : f64
%r:2 = scf.while (%x = %a, %v = %b) : (f64, {T3}) -> (f64, {T3}) {
  %two = arith.constant 2.0 : f64
  %y = arith.mulf %x, %two : f64
  %c = arith.cmpf olt, %y, %lim : f64
  %w = math.sin %v : {T3}
  scf.condition(%c) %y, %w : f64, {T3}
} do {
^bb0(%y: f64, %w: {T3}):
  %one = arith.constant 1.0 : f64
  %y1 = arith.addf %y, %one : f64
  scf.yield %y1, %w : f64, {T3}
}
return %r#0, %r#1 : f64, {T3}""", ["f64", T3], [0, -1]),
    # -- rank-reducing slices at per-lane offsets, a while forwarding fewer values than it carries
    Case("slice_gather_keeps_unit_dim", [T34, "i:3 index", "i:4 index"], """
%s = tensor.extract_slice %a[%b, %c] [1, 1] [1, 1] : {T34} to tensor<1xf64>
return %s : tensor<1xf64>""", ["tensor<1xf64>"], [-1, 0, 0]),
    Case("insert_slice_scatter", [T34, "tensor<2xf64>", "i:3 index", "i:3 index"], """
%r = tensor.insert_slice %b into %a[%c, %d] [1, 2] [1, 1] : tensor<2xf64> into {T34}
return %r : {T34}""", [T34], [-1, -1, 0, -1]),
    Case("scf_while_forwards_fewer", [T3], """
%one = arith.constant 1.0 : f64
%two = arith.constant 2.0 : f64
%r = scf.while (%x = %a, %m = %two) : ({T3}, f64) -> {T3} {
  %c = arith.cmpf ogt, %m, %one : f64
  scf.condition(%c) %x : {T3}
} do {
^bb0(%x: {T3}):
  %half = arith.constant dense<0.5> : {T3}
  %h = arith.mulf %x, %half : {T3}
  %z = arith.constant dense<0.0> : tensor<f64>
  %s = linalg.reduce ins(%x : {T3}) outs(%z : tensor<f64>) dimensions = [0]
    (%in: f64, %acc: f64) {
      %t = arith.addf %in, %acc : f64
      linalg.yield %t : f64
    }
  %m2 = tensor.extract %s[] : tensor<f64>
  scf.yield %h, %m2 : {T3}, f64
}
return %r : {T3}""", [T3], [0]),
    # -- a batched padding value (read at the lane), an execute_region capturing batched values
    Case("pad_batched_value", [T3, "f64"], """
%v = tensor.pad %a low[2] high[1] {
^bb0(%i: index):
  %w = math.sin %b : f64
  tensor.yield %w : f64
} : {T3} to tensor<6xf64>
return %v : tensor<6xf64>""", ["tensor<6xf64>"], [-1, 0]),
    Case("execute_region", [T3, "f64"], """
%r = scf.execute_region -> {T3} {
  %e = tensor.empty() : {T3}
  %f = linalg.fill ins(%b : f64) outs(%e : {T3}) -> {T3}
  %m = arith.mulf %a, %f : {T3}
  scf.yield %m : {T3}
}
return %r : {T3}""", [T3], [-1, 0]),
    # -- a reshape whose (static) result type fixes the shape operand, batched or not
    Case("reshape_batched_shape", [T34, "i:1 index"], """
%c2 = arith.constant 2 : index
%c6 = arith.constant 6 : index
%n = arith.addi %c6, %b : index
%s = tensor.from_elements %c2, %n : tensor<2xindex>
%r = tensor.reshape %a(%s) : ({T34}, tensor<2xindex>) -> tensor<2x6xf64>
return %r : tensor<2x6xf64>""", ["tensor<2x6xf64>"], [-1, 0]),
    Case("scf_while_forwards_reordered", ["p f64", T3], """
%lim = arith.constant 6.0 : f64
%c0 = arith.constant 0 : i64
%c1 = arith.constant 1 : i64
%r:3 = scf.while (%x = %a, %v = %b, %n = %c0) : (f64, {T3}, i64) -> (i64, {T3}, f64) {
  %c = arith.cmpf olt, %x, %lim : f64
  scf.condition(%c) %n, %v, %x : i64, {T3}, f64
} do {
^bb0(%n: i64, %v: {T3}, %x: f64):
  %two = arith.constant 2.0 : f64
  %y = arith.mulf %x, %two : f64
  %w = math.sin %v : {T3}
  %n1 = arith.addi %n, %c1 : i64
  scf.yield %y, %w, %n1 : f64, {T3}, i64
}
return %r#0, %r#1, %r#2 : i64, {T3}, f64""", ["i64", T3, "f64"], [0, -1]),
    # linalg.conv_2d_nhwc_hwcf (transforms/rules/linalg_conv.py): only the init
    # batched here; the variants batch all operands (one convolution per lane)
    # and batch at the last axis. Images-only and kernels-only batching are in
    # test_conv.py.
    Case("conv2d_init_only", ["tensor<1x5x5x2xf64>", "tensor<2x2x2x3xf64>",
                              "tensor<1x2x3x3xf64>"], """
%r = linalg.conv_2d_nhwc_hwcf {strides = dense<[2, 1]> : tensor<2xi64>,
                               dilations = dense<[1, 2]> : tensor<2xi64>}
     ins(%a, %b : tensor<1x5x5x2xf64>, tensor<2x2x2x3xf64>)
     outs(%c : tensor<1x2x3x3xf64>) -> tensor<1x2x3x3xf64>
return %r : tensor<1x2x3x3xf64>""", ["tensor<1x2x3x3xf64>"], [-1, -1, 0]),
]
