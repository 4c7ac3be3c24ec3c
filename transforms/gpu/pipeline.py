"""`--autodiff-lower-to-gpu`: lower tensor programs to NVIDIA GPUs (NVVM, PTX, cubin).

Usage::

    autodiff-opt model.mlir --autodiff-vjp \\
        '--autodiff-lower-to-gpu=chip=sm_90 features=+ptx80 format=fatbin opt-level=3'

Options
-------
`chip` (default `sm_80`)
    The SM architecture ptxas compiles for: `sm_<digits>` with an optional
    `a`/`f` suffix (`sm_90a`). A cubin runs on devices of the same major
    version and an equal or higher minor version (sm_80 code runs on sm_86,
    not on sm_90); the binary holds no PTX, so it is not JIT-compiled for
    newer GPUs. The CUDA 13 ptxas on PATH accepts sm_75 and newer.
`features` (default: empty, the lowest PTX ISA the chip allows)
    PTX ISA version as an NVPTX feature, e.g. `+ptx80`.
`format` (default `fatbin`)
    What `gpu-module-to-binary` produces in each `gpu.binary`: `fatbin`
    (a CUDA fat binary around the cubin, what the runtime loads), `bin` (a
    bare cubin ELF), `isa` (PTX text: how to read the generated code) or
    `llvm` (LLVM bitcode for offloading, not loadable by the CUDA runtime).
`opt-level` (default 3)
    LLVM/ptxas optimisation level, 0 to 3.
`block-size` (default 256)
    Threads per block for the parallel loops (a power of two, at most 1024);
    block-parallel reductions use at most as many (at least 64; with a
    block size under 64 there are none). Tiled contractions have their own
    (128 threads for tensor-core tiles, 256 for f32 register tiles).
`wgmma` (default false; needs `chip=sm_90a`)
    Experimental: the large f16/bf16 contraction tiles (any operand layout,
    batched or not) become TMA + warpgroup-MMA kernels (warpgroup_tiles.py)
    instead of mma.sync tiles. Their host side is tested against a fake
    driver and the kernels in an interpreter of their IR; they have not yet
    run on a GPU.
`stage` (default `binary`)
    Stop early to look at (or test) an intermediate form: `parallel` (the
    bufferized, fused and tiled `scf.parallel` program the GPU mapping starts
    from; it still runs on the CPU), `kernels` (`gpu.launch_func` on the
    host, `gpu.func` kernels in `gpu.module`s), `nvvm` (kernels lowered to
    the LLVM/NVVM dialects, target attached, before serialisation) or
    `binary` (everything: host code in the LLVM dialect, `gpu.binary`).

Inspect the PTX with `format=isa`: each `gpu.binary` then holds the PTX text
(`.version`, `.target sm_80`, the kernels' `.visible .entry` points) in its
`#gpu.object`, e.g.::

    autodiff-opt f.mlir '--autodiff-lower-to-gpu=chip=sm_90 format=isa' \\
        | grep -o 'assembly = "[^"]*"' | sed 's/\\\\0A/\\n/g; s/\\\\09/\\t/g'

`stage=kernels` shows the kernels and launches before any of that.

What runs where
---------------
1. Tensors. Calls are inlined (fusion then sees across the forward and
   backward functions the autodiff passes generate). Splat constants become
   `linalg.fill`s next to each use; elementwise ops that read their init
   (`acc + contribution`) get it as an input instead (see
   ElementwiseInitsToInputs: upstream fusion miscompiles them otherwise);
   named ops are generalized and elementwise producers fused into their
   consumers (`linalg-fuse-elementwise-ops`); reduction dimensions are
   moved innermost. One-shot bufferization, identity layouts at function
   boundaries.
2. Long reductions (at least 64 elements per output, at most 16384 outputs:
   a softmax row, a bias gradient, a sum to a scalar) become block-parallel
   loops (reductions.py): a block per output, its threads striding over the
   reduced elements, combined with an `scf.reduce` that becomes
   `gpu.all_reduce` (warp shuffles, shared memory across warps). A long
   reduction to few outputs is split over many blocks into partials that a
   second kernel combines in a fixed order (deterministic, no atomics). The
   fill or copy that initialises the output is folded in, and a scalar tail
   (`nll + wd * decay`) runs in the last reduction's kernel, on its thread 0
   (`SingleThreadTails`, after the mapping in step 6).
   Every other linalg op becomes an `scf.parallel` over its parallel
   dimensions; reduction dimensions stay sequential `scf.for` loops inside
   it: each GPU thread reduces its own output element (race-free, no
   atomics, no shared memory). Adjacent parallel loops over the same
   iteration space are fused (`scf-parallel-loop-fusion`, static allocations
   hoisted first so that they do not separate the loops): a fill, a matmul
   and its bias/activation chain become one kernel. Then (fusion.py) loops
   sharing their leading row dimensions fuse into one loop over rows, the
   rest of each running sequentially per row (at most 64 elements: a
   softmax's bias, max, exp and log-sum over 10 classes), and adjacent
   independent loops of any shapes (the SGD update of every parameter)
   become one 1-D loop dispatching each iteration to its own body. Block
   reductions then share grids (reduction_fusion.py): a run of reductions and
   parallel loops is rescheduled in dependency levels, and the independent
   reductions of one level (same combiner) with the level's elementwise loops
   become one block loop, each taking its own range of blocks, around one
   reducing thread loop (the upstream mapping allows one per block loop); a
   reduction that reads an elementwise loop's output recomputes it instead,
   so that the two share the grid (a bias gradient beside its activation
   gradient). The partial passes of the weight-decay sums share one kernel,
   their combining passes another. Before that, dependent loops over the same
   rows (or small enough for one block, host code that touches memory
   included: it is wrapped as in step 4 first) become row kernels
   (row_kernels.py): one block loop whose thread loops run as phases (a
   softmax's max, exp, sum and division; an activation gradient and its column
   sums; a loss's mean beside its gradient rows), lowered to a `gpu.launch`
   with barriers and `gpu.all_reduce`s by `PhasedKernels` before the upstream
   mapping (step 6), which maps one thread loop per block loop. Which loops
   merge is chosen per run of loops by the kernel count it gives with the
   grids of FuseBlockReductions, which orders its levels around row kernels.
   Row fusion and row kernels keep a minimum parallelism: no merge into a
   kernel of fewer blocks than an H100/H200 has SMs (132) whose threads run
   long loops (over 256 iterations), where the loops apart had more blocks.
   Contractions whose output is a multiple of 64 x 64 and whose reduced
   extent is a multiple of 16 (matmuls, batch matmuls, the transposed
   contractions of their derivatives) are tiled instead (contractions.py):
   a block per 64 x 64 output tile, the fill that initialises the output
   folded into the accumulators. f16 and bf16 operands (f32 accumulators,
   f16 also f16; sm_80 and newer): 4 warps each computing 2 x 4 tensor-core
   fragments (16 x 8, 16 deep), warp-level vector ops here. f32 operands:
   16 x 16 threads each accumulating a 4 x 4 register tile in f32 (no tf32).
   Other shapes keep the loops above.
3. Tensor results become caller-owned out-parameters
   (`buffer-results-to-out-params`, as in `--autodiff-lower-to-cpu`);
   temporaries are freed by `buffer-deallocation-pipeline`; i1 buffers hold
   one byte per element (numpy's bool layout).
4. Each parallel loop is tiled into blocks x threads (`block-size` threads,
   the innermost, contiguous dimension on `threadIdx.x`, out-of-range threads
   masked by an `scf.if`); block-parallel reductions already are blocks of
   threads. Host code that touches memory (a rank-0 fill, a short reduction
   to a scalar, `tensor.insert`) is wrapped into a one-iteration
   `scf.parallel`: a single-thread kernel. This is `stage=parallel`, the
   program tests also run on the CPU.
5. Memory: every buffer the kernels touch lives in device memory.
   Allocations become `gpu.alloc`/`gpu.dealloc`; constants (`memref.global`)
   are copied to the device where they are used; a scalar the host needs (a
   loss value, a loop bound) comes back with `gpu.memcpy`. Each public
   function `@f` becomes a host wrapper with the same signature (host
   memrefs: numpy owns inputs and outputs) that allocates device buffers,
   copies the inputs in, calls `@f_on_device`, copies the out-parameters back
   and frees the device buffers. `gpu-async-region` chains everything with
   async tokens; the host waits only where it reads memory or returns.
6. `gpu-map-parallel-loops` + `convert-parallel-loops-to-gpu` +
   `gpu-kernel-outlining` give `gpu.launch_func` and `gpu.module`s
   (`stage=kernels`). Tiled contractions first get 32 threads per warp, and in
   their kernels each step of the reduction copies the block's A and B tiles
   into shared memory (f16: `nvgpu.device_async_copy`, i.e. `cp.async`),
   between barriers; `convert-vector-to-gpu{use-nvgpu}` turns the f16/bf16
   warp tiles into `nvgpu.ldmatrix` and `nvgpu.mma.sync` (bf16: retyped in
   NVVM, see contractions.py); `nvvm-attach-target` and `convert-gpu-to-nvvm` lower the
   kernels to NVVM, math functions calling libdevice (`stage=nvvm`);
   `gpu-to-llvm` lowers the host side to calls of the MLIR CUDA runtime
   (`libmlir_cuda_runtime.so`: mgpuMemAlloc, mgpuMemcpy, mgpuLaunchKernel,
   streams and events), and `gpu-module-to-binary` runs ptxas (and
   fatbinary), embedding real device code in each `gpu.binary`.

The host module is then ready for the ExecutionEngine with
`libmlir_cuda_runtime.so` (see `mlir_autodiff.gpu.CompiledGpuModule`, which
first checks for a CUDA driver and device and raises `NoCudaDevice`).

Limits (what bounds the kernel count and speed)
-----------------------------------------------
- Fusion merges adjacent loops only (same space, same rows, or independent);
  block reductions share a kernel only with independent neighbours (or
  producers they can recompute), or with dependent loops over the same rows
  as a row kernel (row_kernels.py; a row kernel fuses with nothing else, and
  which merges to make is chosen per run of loops by an estimate of the
  resulting kernel count). A producer updated in place (tanh's derivative on a reused buffer)
  is not recomputed. Each loop that reads another's output at other indices
  (a matmul reading an activation) is its own kernel. The benchmarks' MLP
  training step (b128 784-512-512-10) is 10 launches, the ADBench GMM
  gradient (d10 K25) 10.
- Contractions that are not multiples of the 64 x 64 x 16 tile, and short
  reductions, are one thread per output element, accumulating in registers
  from global memory. A short reduction to a scalar (under 64 elements) is
  still a single-thread kernel.
- Tiled contractions fuse an elementwise consumer of their result alone (a
  conversion, an activation), not one that reads other tensors (a bias).
  `wgmma`/TMA tiles (sm_90a) are behind the `wgmma` option until they have
  run on a GPU; tf32 is never used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from .. import llvm_options
from ..bufferize import (
    BUFFERIZE,
    BoolBuffersToBytes,
    ElementwiseInitsToInputs,
    UnshareEmptyTensors,
    entry_prologue,
)
from ..cpu.to_llvm import LOWER_VECTORS, TO_LLVM, ExpandFloatClassTests
from ..passes import Pass, PipelineElement, register
from .accumulators import ScalarAccumulators
from .calling_convention import (
    CheckGpuLowerable,
    DistinctReturnBuffers,
    HostLoopAllocaScopes,
    HostWrappers,
)
from .contractions import (
    Bf16MmaOperands,
    WarpsToLanes,
    WarpTileContractions,
    WarpTilesToMmaSync,
)
from .device_memory import DeviceMemory
from .fusion import HoistAllocations, HorizontalFusion, RowFusion
from .parallel_loops import CopiesToLinalg, SerialKernels, TileParallelLoops
from .reduction_fusion import FuseBlockReductions
from .reductions import BlockReductions, InlineBlockReductions, SingleThreadTails
from .row_kernels import PhasedKernels, RowKernels
from .scatter_loops import ParallelScatterLoops
from .tensors import ReductionsInnermost, SplatsToFills
from .warpgroup_tiles import TensorMapArguments, WarpgroupTiles, supported_chip

#: The CPU pipeline's bufferization, also accepting loops that yield new buffers
#: (an scf.for over tensors whose body computes a fresh tensor each iteration).
GPU_BUFFERIZE = BUFFERIZE if "allow-return-allocs-from-loops" in BUFFERIZE else (
    BUFFERIZE[:-1] + " allow-return-allocs-from-loops}"
)

FORMATS = ("isa", "bin", "fatbin", "llvm")
STAGES = ("parallel", "kernels", "nvvm", "binary")
_CHIP_RE = re.compile(r"sm_\d+[af]?")
_FEATURES_RE = re.compile(r"(\+ptx\d+)?")


@register
@dataclasses.dataclass(frozen=True)
class LowerToGpu(Pass):
    name = "autodiff-lower-to-gpu"
    summary = "Lower to GPU kernels (NVVM) with real cubins from ptxas; host calls the CUDA runtime"

    chip: str = dataclasses.field(default="sm_80", metadata={"help": "SM architecture"})
    features: str = dataclasses.field(default="", metadata={"help": "PTX ISA, e.g. +ptx80"})
    format: str = dataclasses.field(
        default="fatbin", metadata={"help": "gpu.binary format", "choices": FORMATS}
    )
    opt_level: int = dataclasses.field(default=3, metadata={"help": "optimisation level 0-3"})
    block_size: int = dataclasses.field(default=256, metadata={"help": "threads per block"})
    stage: str = dataclasses.field(
        default="binary", metadata={"help": "stop after this stage", "choices": STAGES}
    )
    wgmma: bool = dataclasses.field(
        default=False,
        metadata={"help": "sm_90a: large f16/bf16 tiles through TMA and wgmma (experimental)"},
    )

    def __post_init__(self) -> None:
        if not _CHIP_RE.fullmatch(self.chip):
            raise ValueError(
                f"unknown chip '{self.chip}': expected an NVIDIA SM architecture such as "
                "sm_80 or sm_90a"
            )
        if not _FEATURES_RE.fullmatch(self.features):
            raise ValueError(
                f"unknown features '{self.features}': expected a PTX ISA version such as +ptx80"
            )
        if self.format not in FORMATS:
            raise ValueError(
                f"unknown format '{self.format}': expected one of {', '.join(FORMATS)}"
            )
        if self.wgmma and not supported_chip(self.chip):
            raise ValueError(
                f"wgmma needs chip=sm_90a (warpgroup MMA is Hopper's arch-specific "
                f"feature), got chip={self.chip}"
            )
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage '{self.stage}': expected one of {', '.join(STAGES)}")
        if not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt-level must be between 0 and 3, got {self.opt_level}")
        if self.block_size < 1 or self.block_size > 1024 or \
                self.block_size & (self.block_size - 1):
            raise ValueError(
                f"block-size must be a power of two between 1 and 1024, got {self.block_size}"
            )

    def expand(self) -> Sequence[PipelineElement]:
        # kernels are compiled by this process's LLVM: keep its defaults (llvm_options.py)
        llvm_options.note_gpu_codegen()
        stages: dict[str, Callable[[], list[PipelineElement]]] = {
            "parallel": self._parallel_stage,
            "kernels": self._kernel_stage,
            "nvvm": self._nvvm_stage,
            "binary": self._binary_stage,
        }
        out: list[PipelineElement] = []
        for stage in STAGES:
            out += stages[stage]()
            if stage == self.stage:
                break
        return out

    def _parallel_stage(self) -> list[PipelineElement]:
        return [
            *entry_prologue(CheckGpuLowerable()),
            SplatsToFills(),
            ElementwiseInitsToInputs(),
            # Named elementwise ops (linalg.exp, linalg.add...) fuse only as generics.
            "func.func(linalg-generalize-named-ops)",
            "func.func(linalg-fuse-elementwise-ops)",
            ReductionsInnermost(),
            UnshareEmptyTensors(),
            "eliminate-empty-tensors",
            GPU_BUFFERIZE,
            "canonicalize",
            # Contractions: tiles of blocks, tensor cores or register tiles
            # (contractions.py), before long reductions take them.
            WarpTileContractions(chip=self.chip),
            # Long reductions: a block of threads per output (reductions.py).
            BlockReductions(block_size=self.block_size),
            # Parallel loops before out-params: fusion needs the results to be
            # fresh allocations, which cannot alias the function's arguments.
            "func.func(convert-linalg-to-parallel-loops)",
            "canonicalize",
            HoistAllocations(),
            "func.func(scf-parallel-loop-fusion)",
            # Hoisting (no copy kernel per result) is safe here: calls are
            # inlined first, and the upstream crash seen on the CPU path
            # (cpu/pipeline.py) needs private functions returning buffers.
            DistinctReturnBuffers(),
            "buffer-results-to-out-params{hoist-static-allocs modify-public-functions}",
            "canonicalize",
            "buffer-deallocation-pipeline",
            "convert-bufferization-to-memref",
            # Integer powers have no NVVM (or LLVM) lowering: small outlined
            # functions (with unstructured control flow, hence after buffer
            # deallocation), which kernel outlining copies into each gpu.module.
            "convert-math-to-funcs",
            CopiesToLinalg(),
            "func.func(convert-linalg-to-parallel-loops)",
            "canonicalize",
            HoistAllocations(),
            "func.func(scf-parallel-loop-fusion)",
            # Loads and stores through reshapes address the buffer itself, so
            # that row fusion sees which row each access touches.
            "fold-memref-alias-ops",
            "canonicalize",
            "cse",
            BoolBuffersToBytes(),
            RowFusion(),
            "func.func(scf-parallel-loop-fusion)",
            HorizontalFusion(),
            # No canonicalize from here on until the loops are mapped: it would
            # merge the block and thread loops back into one.
            InlineBlockReductions(),
            ParallelScatterLoops(),
            SerialKernels(),
            RowKernels(block_size=self.block_size),
            FuseBlockReductions(),
            TileParallelLoops(block_size=self.block_size),
            SerialKernels(),
            ScalarAccumulators(),
            "cse",
        ]

    def _kernel_stage(self) -> list[PipelineElement]:
        return [
            WarpsToLanes(),
            DeviceMemory(),
            # sm_90a (`wgmma`): the large tiles as TMA + warpgroup-MMA kernels
            WarpgroupTiles(chip=self.chip, enabled=self.wgmma),
            PhasedKernels(),
            "func.func(gpu-map-parallel-loops{mapping-policy=innermost-first})",
            "func.func(convert-parallel-loops-to-gpu)",
            SingleThreadTails(),
            "canonicalize",
            # Constants and index arithmetic move into the kernels (constant trip
            # counts for ptxas) instead of becoming kernel arguments.
            "gpu-launch-sink-index-computations",
            "gpu-kernel-outlining",
            TensorMapArguments(),
            # Tiled contractions' tiles through shared memory; warp tiles to
            # nvgpu.mma.sync, kernel by kernel, while their index math is
            # affine.apply (contractions.py).
            WarpTilesToMmaSync(),
            "lower-affine",
            "canonicalize",
            "cse",
            HostWrappers(),
            "func.func(gpu-async-region)",
        ]

    def _nvvm_stage(self) -> list[PipelineElement]:
        target = f"nvvm-attach-target{{chip={self.chip} O={self.opt_level}"
        if self.features:
            target += f" features={self.features}"
        return [
            # No NVVM lowering for these (as on the CPU): clampf by upstream's
            # expansion, isinf/isnormal as comparisons of |x|.
            "math-expand-ops{ops=clampf}",
            ExpandFloatClassTests(),
            target + "}",
            "gpu.module(convert-nvgpu-to-nvvm,convert-vector-to-llvm,convert-scf-to-cf,"
            "convert-gpu-to-nvvm,canonicalize,cse,"
            "reconcile-unrealized-casts)",
            Bf16MmaOperands(),
        ]

    def _binary_stage(self) -> list[PipelineElement]:
        return [
            HostLoopAllocaScopes(),
            # the host's nvgpu ops: tensor maps (warpgroup_tiles.py) become runtime calls
            "convert-nvgpu-to-nvvm",
            "convert-scf-to-cf",
            "expand-strided-metadata",
            "lower-affine",
            "func.func(math-expand-ops)",
            "convert-math-to-llvm",
            "convert-math-to-libm",
            "arith-expand",
            "convert-arith-to-llvm",
            "convert-index-to-llvm",
            "finalize-memref-to-llvm",
            "convert-func-to-llvm",
            "gpu-to-llvm",
            "convert-cf-to-llvm",
            "convert-ub-to-llvm",
            "reconcile-unrealized-casts",
            f"gpu-module-to-binary{{format={self.format}}}",
        ]


def parallel_stage_on_cpu_pipeline(**options: object) -> list[PipelineElement]:
    """A pipeline that runs the pre-mapping (`stage=parallel`) program on the CPU.

    For `runtime.CompiledModule(..., pipeline=...)`: the same bufferized, fused
    and tiled `scf.parallel` program the GPU mapping starts from, lowered with
    the CPU pipeline's LLVM steps, so tests compare it against numpy.
    `options` are further LowerToGpu options (e.g. block_size=64).
    """
    # The warp tiles of f16 contractions are vector ops: the CPU's vector lowering.
    return [LowerToGpu(stage="parallel", **options),  # type: ignore[arg-type]
            *LOWER_VECTORS, *TO_LLVM]
