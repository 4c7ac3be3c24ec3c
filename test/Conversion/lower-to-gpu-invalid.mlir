// Bad options and input the GPU pipeline cannot lower get a diagnostic and
// exit code 1, never a crash.
//
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=chip=foo 2>&1 \
// RUN:   | filecheck %s --check-prefix=CHIP
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=chip=gfx90a 2>&1 \
// RUN:   | filecheck %s --check-prefix=AMD
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=format=cubin 2>&1 \
// RUN:   | filecheck %s --check-prefix=FORMAT
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=features=ptx80 2>&1 \
// RUN:   | filecheck %s --check-prefix=FEATURES
// RUN: %not autodiff-opt %s --split-input-file '--pass-pipeline=builtin.module(autodiff-lower-to-gpu{opt-level=4})' 2>&1 \
// RUN:   | filecheck %s --check-prefix=OPT
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=block-size=96 2>&1 \
// RUN:   | filecheck %s --check-prefix=BLOCK
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=stage=ptx 2>&1 \
// RUN:   | filecheck %s --check-prefix=STAGE
// RUN: %not autodiff-opt %s --split-input-file --autodiff-lower-to-gpu=chip 2>&1 \
// RUN:   | filecheck %s --check-prefix=EMPTY
//
// RUN: autodiff-opt %s --split-input-file --verify-diagnostics '--autodiff-lower-to-gpu=stage=kernels'

// CHIP: error: pass 'autodiff-lower-to-gpu': unknown chip 'foo': expected an NVIDIA SM architecture such as sm_80 or sm_90a
// AMD: error: pass 'autodiff-lower-to-gpu': unknown chip 'gfx90a'
// FORMAT: error: pass 'autodiff-lower-to-gpu': option 'format' must be one of isa, bin, fatbin, llvm; got 'cubin'
// FEATURES: error: pass 'autodiff-lower-to-gpu': unknown features 'ptx80': expected a PTX ISA version such as +ptx80
// OPT: error: pass 'autodiff-lower-to-gpu': opt-level must be between 0 and 3, got 4
// BLOCK: error: pass 'autodiff-lower-to-gpu': block-size must be a power of two between 1 and 1024, got 96
// STAGE: error: pass 'autodiff-lower-to-gpu': option 'stage' must be one of parallel, kernels, nvvm, binary; got 'ptx'
// EMPTY: error: pass 'autodiff-lower-to-gpu': unknown chip ''

/// Check that autodiff ops must be transformed away before lowering.

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

func.func @g(%x: tensor<4xf32>, %t: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{autodiff-lower-to-gpu: 'autodiff.jvp' must be removed by its transform pass before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)}}
  %y, %dy = "autodiff.jvp"(%x, %t) {fn = @f}
      : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %y, %dy : tensor<4xf32>, tensor<4xf32>
}

// -----

/// Check that results must have static shapes: the caller allocates them.

// expected-error @+1 {{autodiff-lower-to-gpu: result type tensor<?xf32> has a dynamic shape; results must have static shapes (the caller allocates them)}}
func.func @dynamic_result(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

/// Check that the input must not already contain GPU code.

func.func @launches(%n: index) {
  // expected-error @+1 {{autodiff-lower-to-gpu: input already contains 'gpu.launch'; the pipeline expects tensor programs}}
  gpu.launch blocks(%bx, %by, %bz) in (%x = %n, %y = %n, %z = %n)
             threads(%tx, %ty, %tz) in (%a = %n, %b = %n, %c = %n) {
    gpu.terminator
  }
  return
}
