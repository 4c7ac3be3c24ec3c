// RUN: autodiff-run %s --entry logic --arg '[true, false, true, false]' --arg '[true, true, false, false]' | filecheck %s --match-full-lines --check-prefix=LOGIC
// RUN: autodiff-run %s --entry mask --arg '[-1, 2, 0, 3.5]' | filecheck %s --match-full-lines --check-prefix=MASK

// i1 tensors are one byte per element in memory (numpy bool), in and out.

/// Check and, or, xor and not on i1 tensors passed from the command line.
// LOGIC:      result[0]: tensor<4xi1> = [true, false, false, false]
// LOGIC-NEXT: result[1]: tensor<4xi1> = [true, true, true, false]
// LOGIC-NEXT: result[2]: tensor<4xi1> = [false, true, true, false]
// LOGIC-NEXT: result[3]: tensor<4xi1> = [false, true, false, true]
#id = affine_map<(i) -> (i)>
func.func @logic(%a: tensor<4xi1>, %b: tensor<4xi1>)
    -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>) {
  %e = tensor.empty() : tensor<4xi1>
  %r:4 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id, #id],
                         iterator_types = ["parallel"]}
      ins(%a, %b : tensor<4xi1>, tensor<4xi1>)
      outs(%e, %e, %e, %e : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>) {
  ^bb0(%x: i1, %y: i1, %o0: i1, %o1: i1, %o2: i1, %o3: i1):
    %and = arith.andi %x, %y : i1
    %or = arith.ori %x, %y : i1
    %xor = arith.xori %x, %y : i1
    %true = arith.constant true
    %not = arith.xori %x, %true : i1
    linalg.yield %and, %or, %xor, %not : i1, i1, i1, i1
  } -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>)
  return %r#0, %r#1, %r#2, %r#3 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>
}

/// Check a comparison producing a mask and a select through it (x > 0 ? x : 0).
// MASK:      result[0]: tensor<4xi1> = [false, true, false, true]
// MASK-NEXT: result[1]: tensor<4xf32> = [0, 2, 0, 3.5]
func.func @mask(%x: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xf32>) {
  %zero = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<4xi1>
  %m = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%eb : tensor<4xi1>) {
  ^bb0(%a: f32, %o: i1):
    %c = arith.cmpf ogt, %a, %zero : f32
    linalg.yield %c : i1
  } -> tensor<4xi1>
  %ef = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%m, %x : tensor<4xi1>, tensor<4xf32>) outs(%ef : tensor<4xf32>) {
  ^bb0(%c: i1, %a: f32, %o: f32):
    %v = arith.select %c, %a, %zero : f32
    linalg.yield %v : f32
  } -> tensor<4xf32>
  return %m, %s : tensor<4xi1>, tensor<4xf32>
}
