// RUN: autodiff-opt %s --autodiff-lower-to-cpu | filecheck %s

// i1 elements take one byte in memory, as numpy's bool does. Upstream
// MemRefToLLVM aborts on i1 loads and stores, so the CPU lowering accesses
// i1 elements as bytes: a load reads an i8 and narrows it to i1, a store
// widens the bit to an i8.

/// Check that tensor.extract and tensor.insert on an i1 tensor become i8
/// memory accesses, with no i1 load or store left.
// CHECK-LABEL: llvm.func @extract_insert(
// CHECK-NOT:     llvm.load %{{[0-9]+}} : !llvm.ptr -> i1
// CHECK:         llvm.load %{{[0-9]+}} : !llvm.ptr -> i8
// CHECK-NOT:     llvm.load %{{[0-9]+}} : !llvm.ptr -> i1
// CHECK:         %[[WIDE:[0-9]+]] = llvm.zext %{{[0-9]+}} : i1 to i8
// CHECK:         llvm.store %[[WIDE]], %{{[0-9]+}} : i8, !llvm.ptr
// CHECK-NOT:     : i1, !llvm.ptr
// CHECK:         llvm.return
func.func @extract_insert(%a: tensor<3xi1>, %i: index) -> (i1, tensor<3xi1>) {
  %v = tensor.extract %a[%i] : tensor<3xi1>
  %t = arith.constant true
  %not = arith.xori %v, %t : i1
  %r = tensor.insert %not into %a[%i] : tensor<3xi1>
  return %v, %r : i1, tensor<3xi1>
}
