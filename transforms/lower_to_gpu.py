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
    Threads per block for the parallel loops (a power of two, at most 1024).
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
2. Every linalg op becomes an `scf.parallel` over its parallel dimensions;
   reduction dimensions stay sequential `scf.for` loops inside it: each GPU
   thread reduces its own output element (race-free, no atomics, no shared
   memory). Adjacent parallel loops over the same iteration space are fused
   (`scf-parallel-loop-fusion`): a fill, a matmul and its bias/activation
   chain become one kernel.
3. Tensor results become caller-owned out-parameters
   (`buffer-results-to-out-params`, as in `--autodiff-lower-to-cpu`);
   temporaries are freed by `buffer-deallocation-pipeline`; i1 buffers hold
   one byte per element (numpy's bool layout).
4. Each parallel loop is tiled into blocks x threads (`block-size` threads,
   the innermost, contiguous dimension on `threadIdx.x`, out-of-range threads
   masked by an `scf.if`). Host code that touches memory (a rank-0 fill, a
   full reduction to a scalar, `tensor.insert`) is wrapped into a
   one-iteration `scf.parallel`: a single-thread kernel. This is
   `stage=parallel`, the program tests also run on the CPU.
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
   (`stage=kernels`); `nvvm-attach-target` and `convert-gpu-to-nvvm` lower the
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
- Fusion merges only adjacent loops over identical iteration spaces, so each
  distinct shape (each matmul and its transposes in a backward pass, each
  parameter's update) is its own kernel: an MLP training step (2 layers,
  vjp + SGD) is 12 kernels, a GMM negative log-likelihood gradient 9.
- A reduction to a scalar (a loss) is a single-thread kernel; there is no
  tree or `gpu.all_reduce` reduction, and no shared-memory tiling of
  contractions: each thread accumulates one output element in global memory.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence

from mlir import ir
from mlir.dialects import arith, gpu, linalg, scf
from mlir.dialects import func as func_d
from mlir.dialects import memref as memref_d
from mlir.dialects import tensor as tensor_d

from ..dialects.vocabulary import GPU_NUM_OUTPUTS as NUM_OUTPUTS_ATTR
from ..dialects.vocabulary import PREFIX
from .ad_support import int_constant
from .bufferize import (
    BUFFERIZE,
    BoolBuffersToBytes,
    ElementwiseInitsToInputs,
    UnshareEmptyTensors,
)
from .bufferize import ContextPass as _Step
from .cpu.to_llvm import TO_LLVM, ExpandFloatClassTests
from .diagnostics import fail
from .passes import Pass, PipelineElement, register

#: The CPU pipeline's bufferization, also accepting loops that yield new buffers
#: (an scf.for over tensors whose body computes a fresh tensor each iteration).
GPU_BUFFERIZE = BUFFERIZE if "allow-return-allocs-from-loops" in BUFFERIZE else (
    BUFFERIZE[:-1] + " allow-return-allocs-from-loops}"
)

#: The public wrapper `@f` calls the original body renamed `@f` + this suffix.
DEVICE_SUFFIX = "_on_device"

FORMATS = ("isa", "bin", "fatbin", "llvm")
STAGES = ("parallel", "kernels", "nvvm", "binary")
_CHIP_RE = re.compile(r"sm_\d+[af]?")
_FEATURES_RE = re.compile(r"(\+ptx\d+)?")


# -- IR helpers ----------------------------------------------------------------


def _walk(op: ir.Operation) -> Iterator[ir.Operation]:
    """All ops nested in `op` (including `op`), pre-order."""
    ops: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        ops.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return iter(ops)


def _functions(module: ir.Operation) -> list[ir.Operation]:
    return [
        op.operation
        for op in module.regions[0].blocks[0].operations
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) > 0
    ]


def _inside(op: ir.Operation, names: tuple[str, ...]) -> bool:
    """Whether an ancestor of `op` (below its function) is one of `names`."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name in names:
            return True
        parent = parent.parent
    return False


def _on_host(op: ir.Operation) -> bool:
    return not _inside(op, ("scf.parallel", "gpu.launch", "gpu.func", "gpu.module"))


def _ops_of(block: ir.Block) -> list[ir.Operation]:
    return [o.operation for o in block.operations]


def _identity_layout(t: ir.MemRefType) -> bool:
    layout = t.layout
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    return layout.value == ir.AffineMap.get_identity(t.rank)


def _index_const(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _parallel_bounds(loop: ir.Operation) -> tuple[list, list, list]:
    view = loop.opview
    return list(view.lowerBound), list(view.upperBound), list(view.step)


def _new_parallel(lbs: Sequence[ir.Value], ubs: Sequence[ir.Value],
                  steps: Sequence[ir.Value]) -> tuple[ir.Operation, ir.Block, ir.Operation]:
    """Create `scf.parallel` at the current insertion point: (op, body, terminator)."""
    loop = scf.ParallelOp([], list(lbs), list(ubs), list(steps), [])
    body = ir.Block.create_at_start(loop.regions[0], [ir.IndexType.get()] * len(lbs))
    with ir.InsertionPoint(body):
        term = scf.ReduceOp([], 0)
    return loop.operation, body, term.operation


@dataclasses.dataclass(frozen=True)
class DistinctReturnBuffers(_Step):
    """Give every returned buffer of a function its own allocation.

    Why: upstream buffer-results-to-out-params{hoist-static-allocs} segfaults
    (updateReturnOps) when a function returns one buffer twice, which the
    derivative code does (both cotangents of `x + y` are the output's). A
    later duplicate becomes a fresh allocation holding a copy.
    """

    name = "autodiff-distinct-return-buffers"
    summary = "Copy buffers a function returns more than once into fresh allocations"

    def apply(self, module: ir.Operation) -> None:
        from mlir.dialects import func as func_d
        from mlir.dialects import memref

        for fn in module.regions[0].blocks[0].operations:
            if fn.operation.name != "func.func" or not fn.regions[0].blocks:
                continue
            for block in fn.regions[0].blocks:
                ret = list(block.operations)[-1]
                if ret.operation.name != "func.return":
                    continue
                values = list(ret.operands)
                seen: set = set()
                changed = False
                for i, v in enumerate(values):
                    if not isinstance(v.type, ir.MemRefType):
                        continue
                    if v in seen and v.type.has_static_shape:
                        with ir.InsertionPoint(ret), ret.location:
                            fresh = memref.alloc(v.type, [], [])
                            memref.copy(v, fresh)
                        values[i] = fresh
                        changed = True
                    seen.add(v)
                if changed:
                    with ir.InsertionPoint(ret), ret.location:
                        func_d.ReturnOp(values)
                    ret.operation.erase()


# -- step 0: what the GPU calling convention cannot express --------------------


@dataclasses.dataclass(frozen=True)
class CheckGpuLowerable(_Step):
    """Reject what the pipeline cannot lower; record each function's out-parameters."""

    name = "autodiff-check-gpu-lowerable"
    summary = "Check public function signatures and record how many results become out-params"

    def apply(self, module: ir.Operation) -> None:
        for op in _walk(module):
            if op.name.startswith(PREFIX):
                raise fail(
                    op,
                    f"autodiff-lower-to-gpu: '{op.name}' must be removed by its transform pass "
                    "before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)",
                )
            if op.name.startswith("gpu."):
                raise fail(op, f"autodiff-lower-to-gpu: input already contains '{op.name}'; "
                               "the pipeline expects tensor programs")
        for fn in _functions(module):
            vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
            if vis is not None and ir.StringAttr(vis).value == "private":
                continue  # inlined into its callers by the parallel stage
            ftype = fn.attributes["function_type"].value
            outputs = 0
            for t in ftype.results:
                if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                    raise fail(
                        fn,
                        f"autodiff-lower-to-gpu: result type {t} has a dynamic shape; "
                        "results must have static shapes (the caller allocates them)",
                    )
                if isinstance(t, (ir.UnrankedTensorType, ir.UnrankedMemRefType)):
                    raise fail(fn, f"autodiff-lower-to-gpu: unranked result type {t}")
                if isinstance(t, ir.MemRefType):
                    raise fail(fn, f"autodiff-lower-to-gpu: memref result type {t}; "
                                   "functions take and return tensors")
                if isinstance(t, ir.RankedTensorType):
                    outputs += 1
            fn.attributes[NUM_OUTPUTS_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), outputs
            )


# -- step 0b: splat constants are fills -----------------------------------------


@dataclasses.dataclass(frozen=True)
class SplatsToFills(_Step):
    """`arith.constant dense<c> : tensor<...>` becomes `linalg.fill` of a `tensor.empty`.

    Bufferized, a splat constant is a host `memref.global` the device needs a
    copy of (and a second copy when it is an accumulator written in place, as
    the zero-initialised outputs derivative code is full of); a fill is a
    parallel loop that fuses into its consumer's kernel.
    """

    name = "autodiff-gpu-splats-to-fills"
    summary = "Rewrite splat tensor constants into linalg.fill"

    def apply(self, module: ir.Operation) -> None:
        for op in list(_walk(module)):
            if op.name != "arith.constant" or not _on_host(op):
                continue
            attr = op.attributes["value"]
            t = op.results[0].type
            if not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat
                    and isinstance(t, ir.RankedTensorType) and t.has_static_shape):
                continue
            # One fill per use, right before it: after bufferization the fill's
            # loop is adjacent to its consumer's and fuses with it.
            for use in list(op.results[0].uses):
                owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
                with ir.InsertionPoint(owner), op.location:
                    scalar = arith.ConstantOp(t.element_type, attr.get_splat_value()).result
                    empty = tensor_d.EmptyOp(t.shape, t.element_type).result
                    fill = linalg.fill(scalar, outs=[empty])
                owner.operands[use.operand_number] = fill
            op.erase()


# -- step 0c: reduction dimensions innermost --------------------------------------


@dataclasses.dataclass(frozen=True)
class ReductionsInnermost(_Step):
    """Permute each linalg.generic's iteration space: parallel dims first.

    `convert-linalg-to-parallel-loops` nests loops in iterator order, so a
    reduction over the leading dimension (a bias gradient summing over the
    batch) would become a host loop launching one kernel per step. With the
    reduction dimensions innermost it is one kernel whose threads each run a
    sequential loop. The order of each reduction's own steps is unchanged.
    """

    name = "autodiff-gpu-reductions-innermost"
    summary = "Interchange linalg.generic loops so reduction dims are innermost"

    def apply(self, module: ir.Operation) -> None:
        for op in list(_walk(module)):
            if op.name != "linalg.generic":
                continue
            iters = list(op.attributes["iterator_types"])
            parallel = ["parallel" in str(a) for a in iters]
            n = len(iters)
            order = [k for k in range(n) if parallel[k]] + [k for k in range(n) if not parallel[k]]
            if order == list(range(n)):
                continue
            new_pos = {old: new for new, old in enumerate(order)}
            perm = ir.AffineMap.get(n, 0, [ir.AffineExpr.get_dim(new_pos[k]) for k in range(n)])
            maps = []
            for attr in op.attributes["indexing_maps"]:
                m = ir.AffineMapAttr(attr).value
                maps.append(ir.AffineMapAttr.get(
                    ir.AffineMap.get(n, m.n_symbols, [e.compose(perm) for e in m.results])))
            op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
            op.attributes["iterator_types"] = ir.ArrayAttr.get([iters[k] for k in order])
            for inner in list(_walk(op))[1:]:
                if inner.name == "linalg.index":
                    old = ir.IntegerAttr(inner.attributes["dim"]).value
                    inner.attributes["dim"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), new_pos[old])


# -- step 1: copies become parallel loops --------------------------------------


@dataclasses.dataclass(frozen=True)
class CopiesToLinalg(_Step):
    """`memref.copy` on the host becomes `linalg.copy`, hence a parallel loop (a kernel)."""

    name = "autodiff-gpu-copies-to-linalg"
    summary = "Rewrite host-level memref.copy into linalg.copy"

    def apply(self, module: ir.Operation) -> None:
        for op in list(_walk(module)):
            if op.name != "memref.copy" or not _on_host(op):
                continue
            src, dst = op.operands[0], op.operands[1]
            with ir.InsertionPoint(op), op.location:
                linalg.copy(src, outs=[dst])
            op.erase()


# -- step 2: tiling parallel loops into blocks x threads -----------------------


def _tile_sizes(extents: Sequence[int | None], block_size: int) -> list[int]:
    """Threads per dimension: the innermost (contiguous) dimension first, at most
    3 dimensions (the GPU's x, y, z), `block_size` threads in all."""
    tiles = [1] * len(extents)
    budget = block_size
    for k in reversed(range(len(extents))):
        if len(extents) - k > 3 or budget <= 1:
            break
        ext = extents[k]
        want = budget if ext is None else 1 << max(0, (ext - 1).bit_length())
        tiles[k] = min(want, budget)
        budget //= tiles[k]
    return tiles


def _tile_parallel_loop(loop: ir.Operation, block_size: int) -> None:
    lbs, ubs, steps = _parallel_bounds(loop)
    extents: list[int | None] = []
    for lb, ub, st in zip(lbs, ubs, steps):
        lo, hi, s = int_constant(lb), int_constant(ub), int_constant(st)
        extents.append(None if None in (lo, hi, s) else max(0, -(-(hi - lo) // s)))
    tiles = _tile_sizes(extents, block_size)
    if all(t == 1 for t in tiles):
        return
    old_body = loop.regions[0].blocks[0]
    with ir.InsertionPoint(loop), loop.location:
        new_steps = []
        for st, t in zip(steps, tiles):
            s = int_constant(st)
            if t == 1:
                new_steps.append(st)
            elif s is not None:
                new_steps.append(_index_const(s * t))
            else:
                new_steps.append(arith.muli(st, _index_const(t)))
        tiled = [k for k, t in enumerate(tiles) if t > 1]
        zero, one = _index_const(0), _index_const(1)
        sizes = [_index_const(tiles[k]) for k in tiled]
        _, outer_body, outer_term = _new_parallel(lbs, ubs, new_steps)
        with ir.InsertionPoint(outer_term):
            _, inner_body, inner_term = _new_parallel(
                [zero] * len(tiled), sizes, [one] * len(tiled)
            )
        with ir.InsertionPoint(inner_term):
            ivs: list[ir.Value] = list(outer_body.arguments)
            guards: list[ir.Value] = []
            for j, k in enumerate(tiled):
                s = int_constant(steps[k])
                offset = inner_body.arguments[j]
                if s != 1:
                    offset = arith.muli(offset, steps[k])
                ivs[k] = arith.addi(outer_body.arguments[k], offset)
                if extents[k] is None or extents[k] % tiles[k] != 0:
                    guards.append(arith.cmpi(arith.CmpIPredicate.slt, ivs[k], ubs[k]))
            dest_term = inner_term
            if guards:
                cond = guards[0]
                for g in guards[1:]:
                    cond = arith.andi(cond, g)
                guard = scf.IfOp(cond)
                with ir.InsertionPoint(guard.then_block):
                    dest_term = scf.YieldOp([]).operation
    for old, new in zip(old_body.arguments, ivs):
        old.replace_all_uses_with(new)
    for op in _ops_of(old_body)[:-1]:
        op.move_before(dest_term)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class TileParallelLoops(_Step):
    """Split each outermost `scf.parallel` into a grid loop over a block loop."""

    name = "autodiff-gpu-tile-parallel-loops"
    summary = "Tile outermost scf.parallel loops into blocks x threads"

    block_size: int = 256

    def apply(self, module: ir.Operation) -> None:
        loops = [
            op for op in _walk(module)
            if op.name == "scf.parallel" and _on_host(op) and len(op.results) == 0
        ]
        for loop in loops:
            _tile_parallel_loop(loop, self.block_size)


# -- step 3: host code that touches memory becomes single-thread kernels -------

_PURE_PREFIXES = ("arith.", "math.", "index.", "ub.")
_PURE_OPS = {
    "affine.apply", "affine.min", "affine.max", "memref.dim", "memref.rank", "memref.subview",
    "memref.cast", "memref.expand_shape", "memref.collapse_shape", "memref.reinterpret_cast",
    "memref.extract_strided_metadata", "memref.view",
}
_MEMORY_OPS = {"memref.load", "memref.store"}
_REGION_OPS = {"scf.for", "scf.if", "scf.while", "scf.execute_region", "scf.index_switch"}
_TERMINATORS = {"scf.yield", "scf.condition", "scf.reduce", "func.return"}


def _pure(op: ir.Operation) -> bool:
    return op.name in _PURE_OPS or (op.name.startswith(_PURE_PREFIXES) and not op.regions)


def _classify(op: ir.Operation) -> str:
    """'memory' (can run in a kernel, touches memory), 'pure' or 'barrier'."""
    if op.name in _MEMORY_OPS:
        return "memory"
    if _pure(op):
        return "pure"
    if op.name in _REGION_OPS:
        touches = False
        for inner in list(_walk(op))[1:]:
            if inner.name in _MEMORY_OPS:
                touches = True
            elif not (_pure(inner) or inner.name in _REGION_OPS or inner.name in _TERMINATORS):
                return "barrier"
        return "memory" if touches else "pure"
    return "barrier"


def _ancestor_in(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """The ancestor of `op` (or `op`) that sits directly in `block`, if any."""
    while op is not None and op.name != "func.func":
        if op.block == block:
            return op
        op = op.parent
    return None


def _wrap_serial(run: list[ir.Operation]) -> None:
    """Move `run` (ops of one block, in order) into a one-iteration scf.parallel."""
    last = run[-1]
    with ir.InsertionPoint(last), last.location:
        zero, one = _index_const(0), _index_const(1)
        _, _, term = _new_parallel([zero], [one], [one])
    for op in run:
        op.move_before(term)


def _serialize_block(block: ir.Block) -> None:
    run: list[ir.Operation] = []  # in reverse block order

    def flush() -> None:
        if any(_classify(o) == "memory" for o in run):
            _wrap_serial(list(reversed(run)))
        run.clear()

    for op in reversed(_ops_of(block)):
        kind = _classify(op)
        if kind == "barrier":
            flush()
            if op.name in _REGION_OPS or op.name == "func.func":
                for region in op.regions:
                    for inner in region.blocks:
                        _serialize_block(inner)
            continue
        used_only_in_run = all(
            _ancestor_in(use.owner.operation if isinstance(use.owner, ir.OpView)
                         else use.owner, block) in run
            for res in op.results for use in res.uses
        )
        if kind == "memory" and not op.results:
            run.append(op)
        elif op.results and run and used_only_in_run:
            run.append(op)
        elif kind == "memory":
            flush()  # e.g. a load whose value the host needs: keep memory order
    flush()


@dataclasses.dataclass(frozen=True)
class SerialKernels(_Step):
    """Host code that reads and writes buffers (outside any parallel loop) runs as a
    single-thread kernel, so that every buffer access happens on the device."""

    name = "autodiff-gpu-serial-kernels"
    summary = "Wrap host-level memory code into one-iteration scf.parallel loops"

    def apply(self, module: ir.Operation) -> None:
        for fn in _functions(module):
            _serialize_block(fn.regions[0].blocks[0])


# -- step 4: device memory -------------------------------------------------------


def _dynamic_sizes(memref: ir.Value) -> list[ir.Value]:
    t = memref.type
    return [memref_d.dim(memref, _index_const(i)) for i in range(t.rank) if t.is_dynamic_dim(i)]


def _device_alloc(t: ir.MemRefType, sizes: Sequence[ir.Value]) -> ir.Value:
    return gpu.AllocOp(t, None, [], list(sizes), []).memref


def _entry_alloca(fn: ir.Operation, t: ir.MemRefType, loc: ir.Location) -> ir.Value:
    """A host stack slot at the function's entry (not in a loop: the stack would grow)."""
    with ir.InsertionPoint.at_block_begin(fn.regions[0].blocks[0]), loc:
        return memref_d.alloca(t, [], [])


def _block_terminator(block: ir.Block) -> ir.Operation:
    return _ops_of(block)[-1]


@dataclasses.dataclass(frozen=True)
class DeviceMemory(_Step):
    """Put every buffer the kernels touch in device memory (see the module docstring)."""

    name = "autodiff-gpu-device-memory"
    summary = "Use gpu.alloc for buffers, copy globals to the device, stage host scalars"

    def apply(self, module: ir.Operation) -> None:
        for fn in _functions(module):
            for op in list(_walk(fn)):
                if not _on_host(op):
                    continue
                if op.name in ("memref.alloc", "memref.alloca"):
                    t = op.results[0].type
                    if not _identity_layout(t):
                        raise fail(op, f"autodiff-lower-to-gpu: cannot allocate {t} on the device")
                    with ir.InsertionPoint(op), op.location:
                        dev = _device_alloc(t, list(op.operands))
                    op.results[0].replace_all_uses_with(dev)
                    if op.name == "memref.alloca":
                        with ir.InsertionPoint(_block_terminator(op.block)), op.location:
                            gpu.DeallocOp(None, [], dev)
                    op.erase()
                elif op.name == "memref.dealloc":
                    with ir.InsertionPoint(op), op.location:
                        gpu.DeallocOp(None, [], op.operands[0])
                    op.erase()
                elif op.name == "memref.get_global":
                    host = op.results[0]
                    with ir.InsertionPoint.after(op), op.location:
                        dev = _device_alloc(host.type, [])
                        copy = gpu.MemcpyOp(None, [], dev, host)
                    host.replace_all_uses_except(dev, copy.operation)
                    with ir.InsertionPoint(_block_terminator(op.block)), op.location:
                        gpu.DeallocOp(None, [], dev)
                elif op.name == "memref.store":
                    # Left on the host by the serial-kernel step (e.g. inside a loop
                    # with results): a one-thread kernel receives the value.
                    _wrap_serial([op])
                elif op.name == "memref.load":
                    buf = op.operands[0]
                    t = op.results[0].type
                    scalar = ir.MemRefType.get([], t)
                    if buf.type == scalar:
                        # A rank-0 buffer (a reduction's result): copy it straight back.
                        host = _entry_alloca(fn, scalar, op.location)
                        with ir.InsertionPoint(op), op.location:
                            gpu.MemcpyOp(None, [], host, buf)
                            new = memref_d.load(host, [])
                        op.results[0].replace_all_uses_with(new)
                        op.erase()
                        continue
                    with ir.InsertionPoint(op), op.location:
                        dev = _device_alloc(scalar, [])
                        zero, one = _index_const(0), _index_const(1)
                        _, _, term = _new_parallel([zero], [one], [one])
                        with ir.InsertionPoint(term):
                            val = memref_d.load(buf, list(op.operands[1:]))
                            memref_d.store(val, dev, [])
                        host = _entry_alloca(fn, scalar, op.location)
                        gpu.MemcpyOp(None, [], host, dev)
                        gpu.DeallocOp(None, [], dev)
                        new = memref_d.load(host, [])
                    op.results[0].replace_all_uses_with(new)
                    op.erase()


# -- step 5: public functions take host memory ---------------------------------


def _unique_symbol(module: ir.Operation, base: str) -> str:
    taken = {
        ir.StringAttr(op.attributes["sym_name"]).value
        for op in module.regions[0].blocks[0].operations
        if "sym_name" in op.attributes
    }
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


@dataclasses.dataclass(frozen=True)
class HostWrappers(_Step):
    """Each public `@f` becomes a wrapper over host memrefs around `@f_on_device`."""

    name = "autodiff-gpu-host-wrappers"
    summary = "Copy arguments to the device and out-parameters back around each public function"

    def apply(self, module: ir.Operation) -> None:
        for fn in _functions(module):
            vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
            if vis is not None and ir.StringAttr(vis).value != "public":
                continue
            name = ir.StringAttr(fn.attributes["sym_name"]).value
            ftype = fn.attributes["function_type"].value
            n_out = 0
            if NUM_OUTPUTS_ATTR in fn.attributes:
                n_out = ir.IntegerAttr(fn.attributes[NUM_OUTPUTS_ATTR]).value
            inputs = list(ftype.inputs)
            for t in inputs:
                if isinstance(t, ir.MemRefType) and not _identity_layout(t):
                    raise fail(fn, f"autodiff-lower-to-gpu: argument type {t} of @{name} "
                                   "has a non-identity layout")
            device_name = _unique_symbol(module, name + DEVICE_SUFFIX)
            ir.SymbolTable.replace_all_symbol_uses(name, device_name, module)
            fn.attributes["sym_name"] = ir.StringAttr.get(device_name)
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            out_start = len(inputs) - n_out
            with ir.InsertionPoint(fn), fn.location:
                wrapper = func_d.FuncOp(name, ftype)
                wrapper.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
                body = wrapper.add_entry_block()
                with ir.InsertionPoint(body):
                    args, devs = [], []
                    for i, (arg, t) in enumerate(zip(body.arguments, inputs)):
                        if not isinstance(t, ir.MemRefType):
                            args.append(arg)
                            continue
                        dev = _device_alloc(t, _dynamic_sizes(arg))
                        if i < out_start:
                            gpu.MemcpyOp(None, [], dev, arg)
                        args.append(dev)
                        devs.append((i, arg, dev))
                    call = func_d.CallOp(list(ftype.results), device_name, args)
                    for i, arg, dev in devs:
                        if i >= out_start:
                            gpu.MemcpyOp(None, [], arg, dev)
                    for _, _, dev in devs:
                        gpu.DeallocOp(None, [], dev)
                    func_d.ReturnOp(list(call.results))
            # Keep the module order readable: wrapper after the device function.
            wrapper.operation.move_after(fn)


# -- the pipeline ----------------------------------------------------------------


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
        from .reserved_symbols import RenameReservedSymbols

        return [
            CheckGpuLowerable(),
            # User functions named like the runtime or library routines the
            # host code calls (`@malloc`, `@sinh`) would capture those calls.
            RenameReservedSymbols(),
            # One function body per entry point: fusion sees across the forward
            # and backward functions the autodiff passes generate, and residuals
            # stop being copied into out-parameters.
            "inline",
            "symbol-dce",
            "canonicalize",
            "cse",
            # arith/math ops applied to whole tensors (as the front end writes them).
            "func.func(convert-elementwise-to-linalg)",
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
            # Parallel loops before out-params: fusion needs the results to be
            # fresh allocations, which cannot alias the function's arguments.
            "func.func(convert-linalg-to-parallel-loops)",
            "canonicalize",
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
            "func.func(scf-parallel-loop-fusion)",
            "cse",
            BoolBuffersToBytes(),
            # No canonicalize from here on until the loops are mapped: it would
            # merge the block and thread loops back into one.
            TileParallelLoops(block_size=self.block_size),
            SerialKernels(),
            "cse",
        ]

    def _kernel_stage(self) -> list[PipelineElement]:
        return [
            DeviceMemory(),
            "func.func(gpu-map-parallel-loops{mapping-policy=innermost-first})",
            "func.func(convert-parallel-loops-to-gpu)",
            "canonicalize",
            # Constants and index arithmetic move into the kernels (constant trip
            # counts for ptxas) instead of becoming kernel arguments.
            "gpu-launch-sink-index-computations",
            "gpu-kernel-outlining",
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
            "gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm,canonicalize,cse,"
            "reconcile-unrealized-casts)",
        ]

    def _binary_stage(self) -> list[PipelineElement]:
        return [
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
    return [LowerToGpu(stage="parallel", **options), *TO_LLVM]  # type: ignore[arg-type]
