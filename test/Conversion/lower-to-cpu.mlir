// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-lower-to-cpu | filecheck %s --check-prefix=CLEAN

// After --autodiff-lower-to-cpu only the LLVM dialect is left: no tensors,
// no bufferization, no memref/linalg/scf/func/arith ops.
// CLEAN-NOT: tensor<
// CLEAN-NOT: bufferization.
// CLEAN-NOT: memref
// CLEAN-NOT: linalg.
// CLEAN-NOT: scf.
// CLEAN-NOT: func.func
// CLEAN-NOT: arith.
// CLEAN: llvm.func

/// Check that a tensor result becomes a trailing out-parameter: @add takes
/// three memref descriptors (5 fields each for rank 1) and returns nothing;
/// its C wrapper takes three descriptor pointers.
// CHECK-LABEL: llvm.func @add(
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64,
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64,
// CHECK-SAME:    %[[OUT_ALLOC:[a-z0-9]+]]: !llvm.ptr, %[[OUT:[a-z0-9]+]]: !llvm.ptr, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64)
// CHECK-SAME:    attributes {llvm.emit_c_interface} {
// CHECK:         llvm.fadd
// CHECK:         llvm.store
// CHECK:         llvm.return{{$}}
// CHECK-LABEL: llvm.func @_mlir_ciface_add(
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr) attributes {llvm.emit_c_interface} {
func.func @add(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.add ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that a scalar result stays a return value while the tensor result
/// is an out-parameter, and that returning an argument copies it into the
/// out-parameter (the result never aliases the input).
// CHECK-LABEL: llvm.func @scalar_and_tensor(
// CHECK-SAME:    %{{[a-z0-9]+}}: f32, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64,
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64) -> f32
// CHECK:         "llvm.intr.memcpy"
// CHECK:         llvm.return %{{.*}} : f32
// CHECK-LABEL: llvm.func @_mlir_ciface_scalar_and_tensor(
// CHECK-SAME:    %{{[a-z0-9]+}}: f32, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr) -> f32
func.func @scalar_and_tensor(%x: f32, %t: tensor<2xf32>) -> (f32, tensor<2xf32>) {
  return %x, %t : f32, tensor<2xf32>
}

// -----

/// Check that several scalar results come back as a struct, which the C
/// wrapper stores through its first (result) pointer.
// CHECK-LABEL: llvm.func @two_scalars(
// CHECK-SAME:    %{{[a-z0-9]+}}: f32, %{{[a-z0-9]+}}: i64) -> !llvm.struct<(f32, i64)>
// CHECK-LABEL: llvm.func @_mlir_ciface_two_scalars(
// CHECK-SAME:    %[[RES:[a-z0-9]+]]: !llvm.ptr, %{{[a-z0-9]+}}: f32, %{{[a-z0-9]+}}: i64) attributes
// CHECK:         llvm.store %{{.*}}, %[[RES]] : !llvm.struct<(f32, i64)>, !llvm.ptr
func.func @two_scalars(%x: f32, %n: i64) -> (f32, i64) {
  return %x, %n : f32, i64
}

// -----

/// Check that an intermediate tensor is a heap temporary that is freed
/// before returning (the result itself belongs to the caller).
// CHECK-LABEL: llvm.func @matmul_chain(
// CHECK:         %[[TMP:[0-9]+]] = llvm.call @malloc(
// CHECK:         llvm.call @free(%[[TMP]])
// CHECK:         llvm.return{{$}}
func.func @matmul_chain(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
                     outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m2 = linalg.matmul ins(%m, %b : tensor<4x4xf32>, tensor<4x4xf32>)
                      outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m2 : tensor<4x4xf32>
}

// -----

/// Check that a dynamically shaped argument is accepted: its sizes are read
/// from the descriptor, and the static result is still an out-parameter.
// CHECK-LABEL: llvm.func @dynamic_sum(
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64, %[[N:[a-z0-9]+]]: i64, %{{[a-z0-9]+}}: i64,
// CHECK-SAME:    %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: i64)
// CHECK:         llvm.insertvalue %[[N]], %{{[0-9]+}}[3, 0]
// CHECK:         %[[SIZE:[0-9]+]] = llvm.extractvalue %{{[0-9]+}}[3, 0]
// CHECK:         llvm.icmp "slt" %{{[0-9]+}}, %[[SIZE]] : i64
func.func @dynamic_sum(%x: tensor<?xf32>) -> tensor<f32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<?xf32>) outs(%init : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<f32>
}
