"""The CPU back end: `--autodiff-lower-to-cpu` and the schedules that make it fast.

Modules, in pipeline order (each pass is a small class in the module that
owns its subject; `pipeline.py` lists them in the order they run):

- `pipeline.py`: the `autodiff-lower-to-cpu` pass (the pipeline, its options,
  the calling convention), `cpu_threads` / `cpu_pipeline` for `jit`, and
  the environment variable `AUTODIFF_CPU_THREADS`.
- `fusion.py`: what upstream elementwise fusion may recompute, and which
  cheap producers get a copy per consumer.
- `reductions.py`: `linalg.reduce` generalized, sums moved in front of
  contractions, sibling sums over one operand merged into one pass.
- `divisions.py`: divisions by a broadcast value as multiplications by its
  reciprocal.
- `row_groups.py`: softmax-like chains through row reductions fused into
  one loop over row tiles (`--autodiff-fuse-row-groups`), and the
  prefetching of the next tile.
- `schedule_linalg.py`: the pass that tiles and vectorizes large linalg ops,
  built from `classify.py` (which op is which kind of candidate),
  `contraction.py` (contractions in canonical form), `schedules.py` (one
  transform-script builder per kind), `script.py` (transform-script text
  and its application), `approximations.py` (f32 exp/log/tanh) and
  `parameters.py` (the tile sizes and thresholds, derived from `machine.py`'s
  description of the CPU: vector width, caches, cores).
- `donation.py`: results in the caller's buffers (donated arguments,
  out-parameters).
- `openmp.py`: the OpenMP lowering for threads > 1 and its runtime library.
- `to_llvm.py`: vector lowering and the final conversion to the LLVM dialect.

Bufferization steps shared with the GPU pipeline are in `transforms/bufferize.py`.
The measurements behind the parameters and switches are in
benchmarks/notes/cpu-schedules.md.
"""
