// RUN: autodiff-opt %s --split-input-file --autodiff-split-large-functions="min-ops=1 chunk-ops=5" | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-split-large-functions | filecheck %s --check-prefix=SMALL

// A large function's top-level ops are outlined in runs into private no-inline
// functions called in order (transforms/cpu/split.py): the buffer both runs use
// stays in @main and is passed, constants are cloned into each run, a scalar
// a later op uses is returned; the dealloc stays after its last use.

// CHECK-LABEL: func.func private @f_part0(
// CHECK-SAME:      %[[X:.*]]: memref<4xf32>, %[[B0:.*]]: memref<4xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         scf.for
// CHECK:           memref.load %[[X]]
// CHECK:           memref.store %{{.*}}, %[[B0]]
// CHECK:         return
// CHECK-NEXT:  }

// CHECK-LABEL: func.func private @f_part1(
// CHECK-SAME:      %[[B:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<4xf32>) -> f32
// CHECK-SAME:      llvm.linkage = #llvm.linkage<internal>
// CHECK-SAME:      passthrough = ["noinline"]
// CHECK:         %[[C0:.*]] = arith.constant 0 : index
// CHECK:         %[[S:.*]] = memref.load %[[B]][%[[C0]]]
// CHECK:         scf.for
// CHECK:           arith.addf %{{.*}}, %[[S]]
// CHECK:           memref.store %{{.*}}, %[[OUT]]
// CHECK:         memref.dealloc %[[B]]
// CHECK-NEXT:    return %[[S]] : f32

// CHECK-LABEL: func.func @f(
// CHECK-SAME:      %[[AX:.*]]: memref<4xf32>, %[[AOUT:.*]]: memref<4xf32>) -> f32
// CHECK:         %[[BUF:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT:    call @f_part0(%[[AX]], %[[BUF]])
// CHECK-NEXT:    %[[R:.*]] = call @f_part1(%[[BUF]], %[[AOUT]])
// CHECK-NEXT:    return %[[R]] : f32

// Under the default size nothing changes.
// SMALL-NOT: call
// SMALL-NOT: _part
func.func @f(%x: memref<4xf32>, %out: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %buf = memref.alloc() : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %buf[%i] : memref<4xf32>
  }
  %s = memref.load %buf[%c0] : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %buf[%i] : memref<4xf32>
    %w = arith.addf %v, %s : f32
    memref.store %w, %out[%i] : memref<4xf32>
  }
  memref.dealloc %buf : memref<4xf32>
  return %s : f32
}

// -----

// A stack buffer a later run uses stays in @main like a heap one; one with a
// dynamic size cannot move there, and the function is left whole rather than
// a run returning its stack memory.

// CHECK-LABEL: func.func private @g_part1(
// CHECK-SAME:      %{{.*}}: memref<4xf32>
// CHECK-LABEL: func.func @g(
// CHECK:         memref.alloca() : memref<4xf32>
// CHECK-NEXT:    call @g_part0
// CHECK-NEXT:    call @g_part1
func.func @g(%x: memref<4xf32>, %out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %buf = memref.alloca() : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    memref.store %v, %buf[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %buf[%i] : memref<4xf32>
    memref.store %v, %out[%i] : memref<4xf32>
  }
  return
}

// -----

// CHECK-LABEL: func.func @h(
// CHECK-NOT:     call
// CHECK:         memref.alloca(%{{.*}}) : memref<?xf32>
// CHECK-NOT:     call
func.func @h(%x: memref<4xf32>, %out: memref<4xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %buf = memref.alloca(%n) : memref<?xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    memref.store %v, %buf[%i] : memref<?xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %buf[%i] : memref<?xf32>
    memref.store %v, %out[%i] : memref<4xf32>
  }
  return
}

// -----

// Each run's buffers are allocated where they were: between the calls.

// CHECK-LABEL: func.func @k(
// CHECK:         %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT:    call @k_part0(%{{.*}}, %[[A]])
// CHECK-NEXT:    %[[B:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT:    call @k_part1(%[[A]], %[[B]])
// CHECK-NEXT:    call @k_part2({{.*}}%[[B]], %{{.*}})
func.func @k(%x: memref<4xf32>, %out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %a = memref.alloc() : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    memref.store %v, %a[%i] : memref<4xf32>
  }
  %b = memref.alloc() : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %a[%i] : memref<4xf32>
    memref.store %v, %b[%i] : memref<4xf32>
  }
  memref.dealloc %a : memref<4xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %b[%i] : memref<4xf32>
    memref.store %v, %out[%i] : memref<4xf32>
  }
  memref.dealloc %b : memref<4xf32>
  return
}
