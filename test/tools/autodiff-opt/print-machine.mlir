// --print-machine prints the CPU the schedules are derived for and the tiles it
// derives; the AUTODIFF_CPU_* variables emulate another machine.
//
// RUN: env AUTODIFF_CPU_VENDOR=amd AUTODIFF_CPU_FAMILY=0x19 AUTODIFF_CPU_MODEL=0x61 \
// RUN:   AUTODIFF_CPU_VECTOR_BITS=512 AUTODIFF_CPU_L1D=32K AUTODIFF_CPU_L2=1M \
// RUN:   AUTODIFF_CPU_L3=32M AUTODIFF_CPU_CORES=8 AUTODIFF_CPU_LOGICAL=16 \
// RUN:   autodiff-opt --print-machine | filecheck %s --check-prefix=ZEN4
// RUN: env AUTODIFF_CPU_VENDOR=intel AUTODIFF_CPU_FAMILY=6 AUTODIFF_CPU_VECTOR_BITS=256 \
// RUN:   AUTODIFF_CPU_L1D=32K AUTODIFF_CPU_L2=256K AUTODIFF_CPU_CORES=4 \
// RUN:   autodiff-opt --print-machine | filecheck %s --check-prefix=AVX2
// RUN: env AUTODIFF_CPU_L2=lots not autodiff-opt --print-machine 2>&1 \
// RUN:   | filecheck %s --check-prefix=BAD

/// Zen 4: AVX-512 double-pumped, K tiles from its 32 KB L1d.
// ZEN4: cpu: znver4 (amd, family 0x19, model 0x61)
// ZEN4-NEXT: vectors: 512 bits, double-pumped, 1 FMA/cycle, 32 f32 flops/cycle/core
// ZEN4: caches: L1d 32 KB, L2 1 MB, L3 32 MB
// ZEN4-NEXT: cores: 8 physical, 16 logical
// ZEN4: matmul register tile: 8 x 32 (rows up to 10)
// ZEN4-NEXT: matmul cache tile (M, N, K): (128, 256, 64)
// ZEN4-NEXT: packed matmul: K tile 512, N tile 128, from 320^3
// ZEN4-NEXT: row tiles: 4 KB per intermediate, rows up to 128 KB

/// An AVX2 laptop with 256 KB of L2.
// AVX2: vectors: 256 bits, 2 FMA/cycle, 32 f32 flops/cycle/core
// AVX2: matmul register tile: 4 x 16 (rows up to 4)
// AVX2-NEXT: matmul cache tile (M, N, K): (64, 128, 128)
// AVX2-NEXT: packed matmul: K tile 1024, N tile 32, from 128^3
// AVX2: reduction partial sums: 32 f32 / 16 f64

/// A malformed override names its variable.
// BAD: autodiff-opt: error: AUTODIFF_CPU_L2: cannot read 'lots' as a size for the CPU's l2
