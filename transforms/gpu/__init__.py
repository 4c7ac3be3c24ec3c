"""The GPU back end: `--autodiff-lower-to-gpu` (NVVM kernels, PTX and cubins from ptxas).

Modules, in pipeline order (each pass is a small class in the module that
owns its subject; `pipeline.py` lists them in the order they run and its
docstring explains what runs where):

- `pipeline.py`: the `autodiff-lower-to-gpu` pass (its options, the stages
  `parallel`, `kernels`, `nvvm`, `binary`) and
  `parallel_stage_on_cpu_pipeline`, which runs the pre-mapping program on
  the CPU for tests.
- `calling_convention.py`: what a public function may take and return,
  its out-parameters (`CheckGpuLowerable`, `DistinctReturnBuffers`) and the
  host wrapper around each public function (`HostWrappers`).
- `tensors.py`: rewrites on tensors before bufferization (splat constants
  as fills, reduction dimensions innermost).
- `fusion.py`: fewer kernels: allocations hoisted for upstream loop fusion,
  row fusion and horizontal fusion of parallel loops.
- `reduction_fusion.py`: block reductions sharing a grid with independent
  reductions and elementwise loops (and recomputing elementwise producers).
- `row_kernels.py`: dependent loops over the same rows as phases of one
  kernel (`RowKernels`, `PhasedKernels`).
- `scatter_loops.py`: scatter loops in parallel over the index digits that
  keep their writes apart.
- `accumulators.py`: reduction loops carry their output element as a loop
  value (a register) instead of a load and a store per step.
- `parallel_loops.py`: the program as parallel loops shaped for the GPU
  (copies as loops, blocks x threads tiling, single-thread kernels for host
  code that touches memory).
- `device_memory.py`: device allocations, constants copied to the device,
  host scalars staged back.
- `support.py`: the IR helpers these share.

Bufferization steps shared with the CPU pipeline are in `transforms/bufferize.py`;
the final LLVM lowering of host code reuses `transforms/cpu/to_llvm.py`'s steps.
"""
