// The full GPU pipeline: ptxas really compiles each kernel module and the
// gpu.binary holds the result for the requested target.
// REQUIRES: ptxas
//
// RUN: autodiff-opt %s --autodiff-lower-to-gpu | filecheck %s --check-prefix=FATBIN
// RUN: autodiff-opt %s '--autodiff-lower-to-gpu=chip=sm_90 format=bin' \
// RUN:   | filecheck %s --check-prefix=BIN
// RUN: autodiff-opt %s '--autodiff-lower-to-gpu=chip=sm_90 features=+ptx80 format=isa' \
// RUN:   | filecheck %s --check-prefix=ISA
// RUN: autodiff-opt %s '--pass-pipeline=builtin.module(autodiff-lower-to-gpu{chip=sm_90 opt-level=0})' \
// RUN:   | filecheck %s --check-prefix=O0

/// Check that the host code is in the LLVM dialect and calls the MLIR CUDA
/// runtime, and that the kernel became a fat binary (magic 0xBA55ED50,
/// printed little-endian as "P\EDU\BA") for the default target sm_80.

// FATBIN-LABEL: llvm.func @bias_tanh_on_device
// FATBIN: gpu.launch_func <%{{.*}} : !llvm.ptr> @bias_tanh_kernel::@bias_tanh_kernel
// FATBIN-LABEL: llvm.func @bias_tanh(
// FATBIN: llvm.call @mgpuMemAlloc
// FATBIN: llvm.call @mgpuMemcpy
// FATBIN: llvm.call @bias_tanh_on_device
// FATBIN: llvm.call @mgpuMemFree
// FATBIN-LABEL: llvm.func @_mlir_ciface_bias_tanh
// FATBIN: gpu.binary @bias_tanh_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_80">, properties = {{{.*}}}, "P\EDU\BA
// FATBIN-NOT: gpu.module

/// With format=bin the object is a bare cubin: an ELF file.
// BIN: gpu.binary @bias_tanh_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90">, properties = {{{.*}}}, bin = "\7FELF

/// With format=isa it is PTX text for the requested chip and ISA version,
/// with libdevice's tanh inlined rather than called.
// ISA: gpu.binary @bias_tanh_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// ISA-SAME: assembly = "{{.*}}.version 8.0\0A.target sm_90\0A
// ISA-SAME: .visible .entry bias_tanh_kernel(
// ISA-NOT: __nv_tanhf

/// opt-level reaches both the NVVM target and ptxas.
// O0: gpu.binary @bias_tanh_kernel [#gpu.object<#nvvm.target<O = 0, chip = "sm_90">

func.func @bias_tanh(%x: tensor<64x48xf32>, %b: tensor<48xf32>) -> tensor<64x48xf32> {
  %e = tensor.empty() : tensor<64x48xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                        affine_map<(i, j) -> (j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<64x48xf32>, tensor<48xf32>) outs(%e : tensor<64x48xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<64x48xf32>
  return %r : tensor<64x48xf32>
}
