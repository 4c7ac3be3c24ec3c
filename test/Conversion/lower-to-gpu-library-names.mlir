// REQUIRES: ptxas
// RUN: autodiff-opt %s '--autodiff-lower-to-gpu=format=isa' | filecheck %s

// The GPU lowering renames user functions named like the routines its
// host code calls (`malloc`, `free`, the CUDA runtime wrappers `mgpu*`, the
// math library), as the CPU lowering does; kernels outlined from them keep
// valid PTX names (`$` is one), and the runtime finds them through
// `autodiff.renamed_symbols`.

// CHECK: module attributes {autodiff.renamed_symbols = {free = "user$free", malloc = "user$malloc", mgpuMemAlloc = "user$mgpuMemAlloc", sinh = "user$sinh"}
// CHECK-LABEL: llvm.func @user$sinh_on_device(
// CHECK:         gpu.launch_func <%{{.*}} : !llvm.ptr> @user$sinh_kernel::@user$sinh_kernel
// CHECK-LABEL: llvm.func @user$sinh(
// CHECK:         llvm.call @mgpuMemAlloc(
// CHECK:         llvm.call @user$sinh_on_device(
// CHECK-LABEL: llvm.func @_mlir_ciface_user$sinh(
// CHECK:       gpu.binary @user$sinh_kernel {{.*}}.entry user$sinh_kernel
func.func @sinh(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = math.sinh %x : tensor<64xf32>
  %z = math.log1p %y : tensor<64xf32>
  return %z : tensor<64xf32>
}

// CHECK-LABEL: llvm.func @user$malloc(
// CHECK:         llvm.call @mgpuMemAlloc(
// CHECK-LABEL: llvm.func @user$free(
// CHECK-LABEL: llvm.func @user$mgpuMemAlloc(
func.func @malloc(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = math.exp %x : tensor<64xf32>
  return %y : tensor<64xf32>
}

func.func @free(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = math.tanh %x : tensor<64xf32>
  return %y : tensor<64xf32>
}

func.func @mgpuMemAlloc(%x: tensor<64xf32>) -> tensor<64xf32> {
  %y = math.cbrt %x : tensor<64xf32>
  return %y : tensor<64xf32>
}

/// Check that the runtime wrappers are declared under their own names.
// CHECK-DAG: llvm.func @mgpuMemAlloc(i64, !llvm.ptr, i8) -> !llvm.ptr
// CHECK-DAG: llvm.func @mgpuMemFree(
