"""Every `autodiff.*` name the project spells: the dialect's ops and the attributes.

The front end emits these names, the passes match on them, the back ends tag IR
with them; each is spelled here once and imported everywhere else
(`test/python/test_vocabulary.py` fails on an `"autodiff.…"` literal outside
this module). Ops are those of `autodiff.irdl.mlir`; `ATTRIBUTES` says what
each attribute means and who writes it. The function attributes a user may
write by hand are the README's table (`USER_ATTRIBUTES`).
"""

from __future__ import annotations

from typing import Any

from mlir import ir

#: The dialect's namespace: an op is ours when its name starts with it.
PREFIX = "autodiff."

# -- ops (dialects/autodiff.irdl.mlir) ----------------------------------------

JVP = "autodiff.jvp"
VJP = "autodiff.vjp"
VMAP = "autodiff.vmap"
STOP_GRADIENT = "autodiff.stop_gradient"
CHECKPOINT = "autodiff.checkpoint"
RANDOM = "autodiff.random"
PHILOX = "autodiff.philox"

#: Every op of the dialect.
OPS = (JVP, VJP, VMAP, STOP_GRADIENT, CHECKPOINT, RANDOM, PHILOX)
#: The differentiation ops (`--autodiff-jvp`, `--autodiff-vjp`).
AD_OPS = (JVP, VJP)
#: The draws: from the generator state (`random`) and from a key (`philox`).
DRAW_OPS = (RANDOM, PHILOX)

# -- attributes ------------------------------------------------------------------

# Custom rules and checkpoint names (function attributes, written by the front end
# or by hand).
CUSTOM_VJP = "autodiff.custom_vjp"
CUSTOM_JVP = "autodiff.custom_jvp"
CUSTOM_VMAP = "autodiff.custom_vmap"
IN_AXES = "autodiff.in_axes"
OUT_AXES = "autodiff.out_axes"
CHECKPOINT_NAME = "autodiff.checkpoint_name"
#: The custom rule attributes of a primal function.
CUSTOM_RULES = (CUSTOM_VJP, CUSTOM_JVP, CUSTOM_VMAP)

# Random numbers (--autodiff-functionalize-rng, the front end's pinned draws).
RNG_KEY = "autodiff.rng_key"
RNG_STATE = "autodiff.rng_state"
RNG_BLOCKS = "autodiff.rng_blocks"
RNG_PINS = "autodiff.rng_pins"

# Bookkeeping of the differentiation passes.
TAPED = "autodiff.taped"
TAPE = "autodiff.tape"
RECOMPUTED = "autodiff.recomputed"
BOUNDARY = "autodiff.boundary"
#: What reverse mode's loop rules put on the ops they create (a taped loop, the
#: tape writes and counters that are not part of the primal): they mean something
#: only during the differentiation that made them (stripped at its end).
BOOKKEEPING = (TAPED, TAPE, RECOMPUTED)

# Symbols and back ends.
RENAMED_SYMBOLS = "autodiff.renamed_symbols"
DONATED_ARGS = "autodiff.donated_args"
RESULT_ARGS = "autodiff.result_args"
PINNED_RESULTS = "autodiff.pinned_results"
CPU_SCHEDULE = "autodiff.cpu_schedule"
CPU_ROW_GROUP = "autodiff.cpu_row_group"
CPU_ZERO_INIT = "autodiff.cpu_zero_init"
ROW_TILES = "autodiff.row_tiles"
GPU_NUM_OUTPUTS = "autodiff.gpu.num_outputs"
#: On the `scf.execute_region` that `BlockReductions` wraps a block-parallel
#: reduction in (transforms/gpu/reductions.py): "grid" (a whole reduction) or
#: "row" (one block's work).
GPU_BLOCK_REDUCTION = "autodiff.gpu.block_reduction"
#: Tiled contractions of the GPU lowering (transforms/gpu/contractions.py): the warp
#: loop of a tensor-core tile, the reduction loops of tensor-core and f32 register
#: tiles, the operand reads they stage, and a gpu.module of bf16 mma.sync ops.
#: A row kernel of the GPU lowering (transforms/gpu/row_kernels.py): on its block
#: loop (i64, its threads per block) and on the gpu.launch made from it.
GPU_PHASES = "autodiff.gpu.phases"
#: A loop over rows made by the GPU lowering's row fusion (transforms/gpu/fusion.py):
#: the most blocks of the loops it was made of (i64), what later merges are measured
#: against (minimum parallelism).
GPU_ROW_FUSED = "autodiff.gpu.row_fused"
GPU_WARP_LOOP = "autodiff.gpu.warp_loop"
GPU_MMA_TILE = "autodiff.gpu.mma_tile"
GPU_SIMT_TILE = "autodiff.gpu.simt_tile"
GPU_TILE_READ = "autodiff.gpu.mma_read"
GPU_BF16_MMA = "autodiff.gpu.bf16_mma"
GPU_TILE_EPILOGUE = "autodiff.gpu.tile_epilogue"
GPU_DYNAMIC_SHARED = "autodiff.gpu.dynamic_shared_bytes"
#: Warpgroup (TMA + wgmma) tiles (transforms/gpu/warpgroup_tiles.py), while one is built:
#: a batched operand's 2-D host view, and the epilogue's read of 4 accumulators.
GPU_WGMMA_FLAT = "autodiff.gpu.wgmma_flat"
GPU_WGMMA_OUT = "autodiff.gpu.wgmma_out"
#: transforms/shard_to_mpi.py: the MPI process count a lowered module was made for,
#: and the mpi op a private declaration stands for while buffers are deallocated.
MPI_PROCESSES = "autodiff.mpi_processes"
HIDDEN_MPI_OP = "autodiff.hidden_mpi_op"
#: transforms/shard_to_mpi.py: the process group (grid and axes) of a collective's helper
#: function; its communicator is cached under that name.
MPI_GROUP = "autodiff.mpi_group"

#: attribute -> (where it sits, what it means).
ATTRIBUTES: dict[str, str] = {
    CUSTOM_VJP: "on @f: {fwd, bwd}, reverse mode calls these instead of differentiating @f",
    CUSTOM_JVP: "on @f: @r, forward mode calls it instead of differentiating @f",
    CUSTOM_VMAP: "on @f: @r or [@r1, ...], batching rules of @f",
    IN_AXES: "on a custom_vmap rule: each argument's batch axis, -1 = unbatched",
    OUT_AXES: "on a custom_vmap rule: each result's batch axis, -1 = unbatched",
    CHECKPOINT_NAME: "on a private identity function: the name a checkpoint policy saves by",
    RNG_KEY: "on @f: the index of the [seed, offset] argument its draws are keyed by",
    RNG_STATE: "on a function that draws: its last two args / last result are the RNG state",
    RNG_BLOCKS: "on a function that draws (i64): the counter blocks one call consumes",
    RNG_PINS: "on the key draw of `pin_draws`: the key-rooted function it pins to the stream",
    TAPED: "on a loop while reverse mode runs: the loop whose values are taped",
    TAPE: "on an op while reverse mode runs: it builds a tape, not part of the primal",
    RECOMPUTED: "on an op while reverse mode runs: the backward loop recomputes it",
    BOUNDARY: "on the marker constant that splits a combined function into fwd and bwd",
    RENAMED_SYMBOLS: "on the module (dictionary of strings): source symbol -> lowered name",
    DONATED_ARGS: "on a public function (array<i64>): the arguments marked writable (donated)",
    RESULT_ARGS: "on a public function (array<i64>): per result, the argument whose buffer "
                 "it is, or -1 (an out-parameter)",
    PINNED_RESULTS: "on a function (i64): trailing results PinRecomputedProducers added",
    CPU_SCHEDULE: "on a scheduled op: names it in the CPU transform script",
    CPU_ROW_GROUP: "on each member of a CPU row group (FuseRowGroups)",
    CPU_ZERO_INIT: "on a zero linalg.fill read only by a contraction without an outer k loop",
    ROW_TILES: "on the loop over a CPU row group's row tiles (PrefetchRowTiles)",
    GPU_NUM_OUTPUTS: "on a GPU function: how many trailing memref arguments are out-parameters",
    GPU_BLOCK_REDUCTION: "on an scf.execute_region of the GPU lowering: \"grid\" (a whole "
                         "block-parallel reduction) or \"row\" (one block's work)",
    GPU_PHASES: "on the block loop of a GPU row kernel (i64: threads per block), whose "
                "thread loops run one after another, and on the gpu.launch made from it",
    GPU_ROW_FUSED: "on an scf.parallel over rows made by GPU row fusion (i64): the most "
                   "blocks of the loops it was made of",
    GPU_WARP_LOOP: "on the scf.parallel over a tensor-core tile's warps (one iteration "
                   "per warp until the kernel stage gives each 32 threads)",
    GPU_MMA_TILE: "on the reduction loop of a tensor-core tile (its A/B tiles are staged)",
    GPU_SIMT_TILE: "on the outer reduction loop of an f32 register tile (its A/B tiles "
                   "are staged)",
    GPU_TILE_READ: "on a read of a tiled contraction's operand (array<i32>: operand, "
                   "fragment or element, transposed)",
    GPU_BF16_MMA: "on a gpu.module whose f16-typed mma.sync ops compute on bf16 values",
    GPU_DYNAMIC_SHARED: "on a gpu.func whose tiles take dynamic shared memory (i32: bytes), "
                        "until its launches name the size",
    GPU_TILE_EPILOGUE: "on the write of a tensor-core tile's fragment through an elementwise "
                       "epilogue (applied to each lane's accumulators after the mma lowering)",
    GPU_WGMMA_FLAT: "on the memref.collapse_shape giving a batched operand of a warpgroup "
                    "tile its 2-D view of stacked matrices, until the tile is built",
    GPU_WGMMA_OUT: "on the vector.load of 4 accumulators in a warpgroup tile's epilogue, "
                   "until the epilogue's ops are placed after it",
    MPI_PROCESSES: "on the module (i64): the number of MPI processes its grids span",
    HIDDEN_MPI_OP: "on a private declaration while buffers are deallocated: {name, "
                   "attributes} of the mpi op its calls stand for",
    MPI_GROUP: "on a collective's helper function (string): its process group, the key "
               "of its cached communicator",
}

#: The function attributes a user writes (the README's table).
USER_ATTRIBUTES = (CUSTOM_VJP, CUSTOM_JVP, CUSTOM_VMAP, IN_AXES, OUT_AXES, RNG_KEY)


# -- accessors -------------------------------------------------------------------


def is_autodiff(name: str) -> bool:
    """Whether an op name is of the autodiff dialect."""
    return name.startswith(PREFIX)


def symbol_of(op: Any, attr: str) -> str:
    """The flat symbol name `op`'s attribute `attr` refers to."""
    return ir.FlatSymbolRefAttr(op.operation.attributes[attr]).value


def string_of(op: Any, attr: str) -> str:
    """The value of `op`'s string attribute `attr`."""
    return ir.StringAttr(op.operation.attributes[attr]).value


def i64s_of(op: Any, attr: str) -> list[int]:
    """The values of `op`'s `array<i64>` attribute `attr`."""
    return list(ir.DenseI64ArrayAttr(op.operation.attributes[attr]))
