// The GPU pipeline up to (and not including) serialisation, so no ptxas is
// needed here; lower-to-gpu-binary.mlir checks the cubins.
//
// RUN: autodiff-opt %s --split-input-file '--autodiff-lower-to-gpu=stage=parallel' \
// RUN:   | filecheck %s --check-prefix=PAR
// RUN: autodiff-opt %s --split-input-file '--autodiff-lower-to-gpu=stage=kernels' \
// RUN:   | filecheck %s --check-prefix=KERNELS
// RUN: autodiff-opt %s --split-input-file \
// RUN:   '--autodiff-lower-to-gpu=chip=sm_90 features=+ptx80 stage=nvvm' \
// RUN:   | filecheck %s --check-prefix=NVVM
//
// Each stage's output is valid upstream IR: stock mlir-opt parses it.
// RUN: autodiff-opt %s --split-input-file '--autodiff-lower-to-gpu=stage=nvvm' \
// RUN:   | %mlir_opt --split-input-file > /dev/null

/// Check that a matmul followed by a chain of 5 elementwise ops (bias, tanh,
/// exp, square, sqrt) becomes a single kernel: the named ops are fused into
/// one generic, and the fill, matmul and generic loops over the same 16x8
/// space are fused into one parallel loop. The matmul's reduction over k is a
/// sequential scf.for inside each thread (no atomics, no races), carrying its
/// output element as a loop value (read once before, written once after).

// PAR-LABEL: func.func @matmul_chain
// PAR-SAME: (%[[A:.*]]: memref<16x32xf32>, %[[B:.*]]: memref<32x8xf32>, %[[C:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<16x8xf32>)
// PAR: scf.parallel (%[[BI:.*]], %[[BJ:.*]]) = ({{.*}}) to ({{.*}}) step (%c16, %c8)
// PAR-NEXT: scf.parallel (%[[TI:.*]], %[[TJ:.*]]) = ({{.*}}) to (%c16, %c8) step (%c1, %c1)
// PAR-NEXT: %[[I:.*]] = arith.addi %[[BI]], %[[TI]] : index
// PAR-NEXT: %[[J:.*]] = arith.addi %[[BJ]], %[[TJ]] : index
// PAR-NEXT: memref.store %{{.*}}, %[[OUT]][%[[I]], %[[J]]]
// PAR-NEXT: %[[INIT:.*]] = memref.load %[[OUT]][%[[I]], %[[J]]]
// PAR-NEXT: %[[SUM:.*]] = scf.for %[[K:.*]] = %c0 to %c32 step %c1 iter_args(%[[ACC:.*]] = %[[INIT]]) -> (f32) {
// PAR-NOT: %[[OUT]]
// PAR: scf.yield
// PAR-NEXT: }
// PAR-NEXT: memref.store %[[SUM]], %[[OUT]][%[[I]], %[[J]]]
// PAR: math.tanh
// PAR-NEXT: math.exp
// PAR-NEXT: arith.mulf
// PAR-NEXT: math.sqrt
// PAR-NEXT: memref.store %{{.*}}, %[[OUT]][%[[I]], %[[J]]]
// PAR-NOT: scf.parallel
// PAR: return

// KERNELS-LABEL: func.func private @matmul_chain_on_device
// KERNELS-COUNT-1: gpu.launch_func async
// KERNELS-SAME: @matmul_chain_kernel::@matmul_chain_kernel blocks in (%c1, %c1, %c1) threads in (%c8, %c16, %c1)
// KERNELS-NOT: gpu.launch_func
// KERNELS: return

/// The public function keeps its host signature: it copies the inputs to
/// device buffers, calls the device function and copies the out-param back.
// KERNELS-LABEL: func.func @matmul_chain
// KERNELS-SAME: (%[[A:.*]]: memref<16x32xf32>, %[[B:.*]]: memref<32x8xf32>, %[[C:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<16x8xf32>)
// KERNELS-SAME: attributes {llvm.emit_c_interface}
// KERNELS: %[[DA:.*]], %{{.*}} = gpu.alloc async
// KERNELS-NEXT: gpu.memcpy async [%{{.*}}] %[[DA]], %[[A]]
// KERNELS: %[[DB:.*]], %{{.*}} = gpu.alloc async
// KERNELS-NEXT: gpu.memcpy async [%{{.*}}] %[[DB]], %[[B]]
// KERNELS: %[[DC:.*]], %{{.*}} = gpu.alloc async
// KERNELS-NEXT: gpu.memcpy async [%{{.*}}] %[[DC]], %[[C]]
// KERNELS: %[[DOUT:.*]], %{{.*}} = gpu.alloc async
// KERNELS-NOT: gpu.memcpy
// KERNELS: call @matmul_chain_on_device(%[[DA]], %[[DB]], %[[DC]], %[[DOUT]])
// KERNELS: gpu.memcpy async [%{{.*}}] %[[OUT]], %[[DOUT]]
// KERNELS-COUNT-4: gpu.dealloc async
// KERNELS: return

/// The kernel: one thread per output element, the contraction loop inside.
// KERNELS: gpu.module @matmul_chain_kernel {
// KERNELS: gpu.func @matmul_chain_kernel
// KERNELS-SAME: kernel attributes {known_block_size = array<i32: 8, 16, 1>, known_grid_size = array<i32: 1, 1, 1>}
// KERNELS: %[[TX:.*]] = gpu.thread_id x
// KERNELS: %[[TY:.*]] = gpu.thread_id y
// KERNELS: scf.for %{{.*}} = %c0 to %c32 step %c1 iter_args(
// KERNELS: math.sqrt
// KERNELS: gpu.return

/// Inside gpu.module the kernel is in the NVVM dialect; thread ids are PTX special registers
/// and math functions call libdevice (linked in at serialisation).
// NVVM-LABEL: gpu.module @matmul_chain_kernel [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">]
// NVVM-DAG: llvm.func @__nv_tanhf(f32) -> f32
// NVVM-DAG: llvm.func @__nv_expf(f32) -> f32
// NVVM-DAG: llvm.func @__nv_sqrtf(f32) -> f32
// NVVM: llvm.func @matmul_chain_kernel
// NVVM-SAME: nvvm.kernel
// NVVM: nvvm.read.ptx.sreg.tid.x range <i32, 0, 8>
// NVVM: nvvm.read.ptx.sreg.tid.y range <i32, 0, 16>
// NVVM: llvm.call @__nv_tanhf
// NVVM: llvm.call @__nv_expf
// NVVM: llvm.call @__nv_sqrtf

func.func @matmul_chain(%a: tensor<16x32xf32>, %b: tensor<32x8xf32>, %c: tensor<8xf32>)
    -> tensor<16x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %m = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x8xf32>)
      outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  %bias = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                           affine_map<(i, j) -> (j)>,
                                           affine_map<(i, j) -> (i, j)>],
                          iterator_types = ["parallel", "parallel"]}
      ins(%m, %c : tensor<16x8xf32>, tensor<8xf32>) outs(%e : tensor<16x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  %t = linalg.tanh ins(%bias : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %x2 = linalg.exp ins(%t : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %sq = linalg.mul ins(%x2, %x2 : tensor<16x8xf32>, tensor<16x8xf32>)
      outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %r = linalg.sqrt ins(%sq : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// -----

/// Check that a row reduction maps rows to threads and keeps the reduced
/// dimension as a per-thread sequential loop.

// PAR-LABEL: func.func @sum_rows
// PAR: scf.parallel (%{{.*}}) = (%c0) to (%c16) step (%c16)
// PAR-NEXT: scf.parallel (%{{.*}}) = (%c0) to (%c16) step (%c1)
// PAR: scf.for %{{.*}} = %c0 to %c40 step %c1

// KERNELS-LABEL: func.func private @sum_rows_on_device
// KERNELS: gpu.launch_func async {{.*}} @sum_rows_kernel::@sum_rows_kernel blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1)
// KERNELS: gpu.func @sum_rows_kernel(%[[OUT:.*]]: memref<16xf32>, %[[X:.*]]: memref<16x40xf32>)
// KERNELS: %[[T:.*]] = gpu.thread_id x
// KERNELS: memref.store %{{.*}}, %[[OUT]][%[[T]]]
// KERNELS: scf.for %[[K:.*]] = %c0 to %c40 step %c1 iter_args(
// KERNELS-NEXT: memref.load %[[X]][%[[T]], %[[K]]]
// KERNELS-NOT: atomic
// KERNELS: gpu.return

// NVVM-LABEL: gpu.module @sum_rows_kernel
// NVVM: nvvm.read.ptx.sreg.tid.x range <i32, 0, 16>

func.func @sum_rows(%x: tensor<16x40xf32>) -> tensor<16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %r = linalg.reduce ins(%x : tensor<16x40xf32>) outs(%f : tensor<16xf32>) dimensions = [1]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<16xf32>
}

// -----

/// Check that a reduction to a scalar result runs as one block of 256 threads
/// (each strides over the 1000 elements, then an scf.reduce combines the
/// threads' partial sums; the fill is folded in as the initial value), and
/// the host reads the scalar back with a gpu.memcpy into a host stack slot.

// PAR-LABEL: func.func @total
// PAR-SAME: -> f32
// PAR: scf.parallel (%{{.*}}) = (%c0) to (%c1) step (%c1) {
// PAR-NEXT: %[[R:.*]] = scf.parallel (%[[T:.*]]) = (%c0) to (%c256) step (%c1) init (%{{.*}}) -> f32 {
// PAR-NEXT: scf.for %{{.*}} = %[[T]] to %c1000 step %c256 iter_args
// PAR: scf.reduce(%{{.*}} : f32) {
// PAR: arith.addf
// PAR-NEXT: scf.reduce.return
// PAR: %[[S:.*]] = arith.addf %[[R]], %{{.*}} : f32
// PAR-NEXT: memref.store %[[S]]
// PAR-NEXT: scf.reduce
// PAR-NEXT: }
// PAR-NEXT: %[[V:.*]] = memref.load %{{.*}}[] : memref<f32>
// PAR: return %[[V]] : f32

// KERNELS-LABEL: func.func private @total_on_device
// KERNELS: %[[SLOT:.*]] = memref.alloca() : memref<f32>
// KERNELS: %[[ACC:.*]], %{{.*}} = gpu.alloc async [%{{.*}}] () : memref<f32>
// KERNELS: gpu.launch_func async {{.*}} @total_kernel::@total_kernel blocks in (%c1, %c1, %c1) threads in (%c256, %c1, %c1) args(%{{.*}} : memref<1000xf32>, %[[ACC]] : memref<f32>
// KERNELS: gpu.memcpy async [%{{.*}}] %[[SLOT]], %[[ACC]] : memref<f32>, memref<f32>
// KERNELS: %[[V:.*]] = memref.load %[[SLOT]][] : memref<f32>
// KERNELS: gpu.dealloc async [%{{.*}}] %[[ACC]]
// KERNELS: return %[[V]] : f32
// KERNELS-LABEL: func.func @total
// KERNELS-SAME: -> f32 attributes {llvm.emit_c_interface}
// KERNELS: %[[R:.*]] = call @total_on_device
// KERNELS: return %[[R]] : f32

func.func @total(%x: tensor<1000xf32>) -> f32 {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%x : tensor<1000xf32>) outs(%f : tensor<f32>) dimensions = [0]
    (%a: f32, %acc: f32) {
      %s = arith.addf %a, %acc : f32
      linalg.yield %s : f32
    }
  %v = tensor.extract %r[] : tensor<f32>
  return %v : f32
}

// -----

/// Check that a long 1-D loop is tiled into 256-thread blocks with the
/// out-of-range threads of the last block masked, and that the grid is
/// computed from the trip count.

// PAR-LABEL: func.func @scale
// PAR: scf.parallel (%[[B:.*]]) = (%c0) to (%c1000) step (%c256) {
// PAR-NEXT: scf.parallel (%[[T:.*]]) = (%c0) to (%c256) step (%c1) {
// PAR-NEXT: %[[I:.*]] = arith.addi %[[B]], %[[T]] : index
// PAR-NEXT: %[[IN:.*]] = arith.cmpi slt, %[[I]], %c1000 : index
// PAR-NEXT: scf.if %[[IN]] {

// KERNELS-LABEL: func.func private @scale_on_device
// KERNELS: gpu.launch_func async {{.*}} blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
// KERNELS: gpu.func @scale_kernel
// KERNELS-SAME: known_block_size = array<i32: 256, 1, 1>, known_grid_size = array<i32: 4, 1, 1>
// KERNELS: gpu.block_id x
// KERNELS: gpu.thread_id x
// KERNELS: scf.if

func.func @scale(%x: tensor<1000xf32>) -> tensor<1000xf32> {
  %e = tensor.empty() : tensor<1000xf32>
  %r = linalg.add ins(%x, %x : tensor<1000xf32>, tensor<1000xf32>)
      outs(%e : tensor<1000xf32>) -> tensor<1000xf32>
  return %r : tensor<1000xf32>
}

// -----

/// Check that a constant operand (a memref.global on the host) is copied to
/// the device before the kernel reads it.

// KERNELS-LABEL: func.func private @add_constant_on_device
// KERNELS: %[[G:.*]] = memref.get_global @{{.*}} : memref<4xf32>
// KERNELS: %[[D:.*]], %{{.*}} = gpu.alloc async
// KERNELS: gpu.memcpy async [%{{.*}}] %[[D]], %[[G]]
// KERNELS: gpu.launch_func {{.*}} args({{.*}}%[[D]] : memref<4xf32>
// KERNELS: gpu.dealloc async [%{{.*}}] %[[D]]

func.func @add_constant(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant dense<[1.0, -2.0, 3.5, 4.0]> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.add ins(%x, %c : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>)
      -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

/// Check that boolean buffers hold one byte per element (numpy's layout).

// PAR-LABEL: func.func @mask
// PAR-SAME: (%{{.*}}: memref<8xf32>, %[[OUT:.*]]: memref<8xi8>)
// PAR: %[[C:.*]] = arith.cmpf ogt
// PAR: %[[B:.*]] = arith.extui %[[C]] : i1 to i8
// PAR: memref.store %[[B]], %[[OUT]]

func.func @mask(%x: tensor<8xf32>) -> tensor<8xi1> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xi1>) {
  ^bb0(%a: f32, %o: i1):
    %c = arith.cmpf ogt, %a, %z : f32
    linalg.yield %c : i1
  } -> tensor<8xi1>
  return %r : tensor<8xi1>
}
