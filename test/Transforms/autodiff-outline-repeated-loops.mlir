// RUN: autodiff-opt %s --split-input-file --autodiff-outline-repeated-loops="min-ops=1 min-nest-ops=1" | filecheck %s
// RUN: autodiff-opt %s --split-input-file --autodiff-outline-repeated-loops | filecheck %s --check-prefix=SMALL

// Loop nests identical up to the buffers they use (transforms/cpu/repeats.py) become
// one private no-inline function, called on each nest's own buffers in its place;
// the constants they use are cloned into it. A nest that differs in a constant (the
// scale 3.0), or uses one buffer where the others use two, stays where it is.

// CHECK-LABEL: func.func private @f_repeat
// CHECK-SAME:      (%[[A:.*]]: memref<4xf32>, %[[B:.*]]: memref<4xf32>)
// CHECK-SAME:      llvm.linkage = #llvm.linkage<internal>
// CHECK-SAME:      passthrough = ["noinline"]
// CHECK-DAG:     %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-DAG:     %[[C4:.*]] = arith.constant 4 : index
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %[[C4]]
// CHECK:           %[[V:.*]] = memref.load %[[A]][%[[I]]]
// CHECK:           %[[M:.*]] = arith.mulf %[[V]], %[[TWO]]
// CHECK:           memref.store %[[M]], %[[B]][%[[I]]]
// CHECK:         return

// CHECK-LABEL: func.func @f(
// CHECK-SAME:      %[[X:.*]]: memref<4xf32>, %[[Y:.*]]: memref<4xf32>, %[[Z:.*]]: memref<4xf32>)
// CHECK:         call @f_repeat{{.*}}(%[[X]], %[[Y]])
// CHECK-NEXT:    call @f_repeat{{.*}}(%[[Y]], %[[Z]])
// CHECK-NEXT:    scf.for
// CHECK:           arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:         scf.for
// CHECK:           memref.load %[[Z]]
// CHECK:           memref.store %{{.*}}, %[[Z]]
// CHECK:         call @f_repeat{{.*}}(%[[Z]], %[[X]])
// CHECK-NEXT:    return

// Under the default sizes nothing changes.
// SMALL-NOT: call
// SMALL-NOT: _repeat
func.func @f(%x: memref<4xf32>, %y: memref<4xf32>, %z: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    %m = arith.mulf %v, %two : f32
    memref.store %m, %y[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %y[%i] : memref<4xf32>
    %m = arith.mulf %v, %two : f32
    memref.store %m, %z[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %z[%i] : memref<4xf32>
    %m = arith.mulf %v, %three : f32
    memref.store %m, %x[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %z[%i] : memref<4xf32>
    %m = arith.mulf %v, %two : f32
    memref.store %m, %z[%i] : memref<4xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %z[%i] : memref<4xf32>
    %m = arith.mulf %v, %two : f32
    memref.store %m, %x[%i] : memref<4xf32>
  }
  return
}
