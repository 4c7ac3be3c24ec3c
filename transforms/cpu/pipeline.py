"""`--autodiff-lower-to-cpu`: the CPU pipeline (fuse, schedule, bufferize, lower to LLVM).

Calling convention (destination passing): every tensor result of a public
function becomes a trailing out-parameter memref that the caller allocates
(numpy owns it), via upstream `buffer-results-to-out-params`; scalar results
stay results. Every public function gets a C interface wrapper for the
ExecutionEngine. Internal temporaries are freed by
`buffer-deallocation-pipeline`. Donated arguments: see donation.py.

Performance: before bufferization, large static linalg ops (matmul,
batch_matmul, elementwise, reductions, transposes) are tiled and vectorized
by a transform-dialect schedule chosen by shape and host vector width
(schedule_linalg.py), with f32 exp/log/tanh replaced by polynomial code of
documented accuracy; small ops keep the plain loops (compile time). Before
that, elementwise fusion is steered (fusion.py), reductions rewritten
(reductions.py) and softmax-like chains fused over row tiles
(row_groups.py). Results are computed directly in the caller's buffers where
possible. `threads=N` (off by default) distributes large kernels over N
OpenMP threads; the JIT must then load LLVM's OpenMP runtime (openmp.py).

Environment (read here, nowhere else in the package):
`AUTODIFF_CPU_THREADS` (`THREADS_ENV`) is `jit`'s default number of threads
(`cpu_threads`); `AUTODIFF_STRICT_SCHEDULES=1` (`STRICT_ENV`) turns on the
`strict` option: a transform script that fails to apply raises instead of
leaving the ops on the plain loops (the test suite sets it).

Tuning switches are options of `LowerToCpu` (and of the pass each one
controls), all on by default: `unshare-broadcasts`, `unshare-recomputed`,
`sum-before-contracting`, `merge-sibling-reductions`,
`outer-reduction-threads`, `hoist-loop-buffers`, `prefetch-tiles-ahead=N`,
e.g. `--autodiff-lower-to-cpu="merge-sibling-reductions=false"`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from mlir import ir

from ...dialects.vocabulary import PREFIX
from ..bufferize import (
    BUFFERIZE,
    BoolBuffersToBytes,
    ElementwiseInitsToInputs,
    UnshareEmptyTensors,
    check_result_types,
    entry_prologue,
    post_order_ops,
    public_functions,
)
from ..diagnostics import fail
from ..passes import Pass, PipelineElement, register
from . import repeats, split
from .contraction import OuterProductsToElementwise, ReadBroadcastsInContractions
from .copies import StridedCopiesToLoops
from .divisions import ReciprocalOfBroadcastDivisors
from .donation import (
    HideDonatingFunctions,
    NoteDonatedArguments,
    RestoreDonatingFunctions,
    UpdateDonatedInPlace,
    WriteResultsInPlace,
)
from .fusion import (
    PinRecomputedProducers,
    UnpinProducers,
    UnshareBroadcastProducers,
    UnshareRecomputedProducers,
)
from .openmp import openmp_lowering
from .reductions import GeneralizeReductions, MergeSiblingReductions, SumBeforeContracting
from .row_groups import FuseRowGroups, PrefetchRowTiles
from .schedule_linalg import ScheduleLinalgForCpu
from .to_llvm import LOWER_VECTORS, TO_LLVM


@dataclasses.dataclass(frozen=True)
class CheckCpuLowerable(Pass):
    """Reject what the CPU calling convention cannot express, with a diagnostic."""

    name = "autodiff-check-cpu-lowerable"
    summary = "Check that public functions have a CPU-callable signature"

    def run(self, module: ir.Operation) -> None:
        for fn in public_functions(module):
            check_result_types(fn, "autodiff-lower-to-cpu")
        for op in post_order_ops(module):
            if op.name.startswith(PREFIX):
                raise fail(
                    op,
                    f"autodiff-lower-to-cpu: '{op.name}' must be removed by its transform pass "
                    "before lowering (e.g. --autodiff-jvp/--autodiff-vjp/--autodiff-vmap)",
                )


#: Environment variable: "1" makes every CPU schedule that fails to apply an
#: error (the test suite sets it) instead of leaving those ops on the plain
#: loops. Read by `LowerToCpu` (its `strict` option), nowhere else.
STRICT_ENV = "AUTODIFF_STRICT_SCHEDULES"


def strict_schedules() -> bool:
    """Whether the environment asks for strict schedules (`STRICT_ENV` is "1")."""
    return os.environ.get(STRICT_ENV) == "1"


@register
@dataclasses.dataclass(frozen=True)
class LowerToCpu(Pass):
    name = "autodiff-lower-to-cpu"
    summary = "Bufferize (results into caller-owned buffers) and lower to the LLVM dialect"

    threads: int = dataclasses.field(default=1, metadata={
        "help": "threads for large kernels (OpenMP; the JIT must load "
                "openmp.openmp_runtime_library())"})
    # Tuning switches (each turns one optimization off for comparison; the
    # measurements behind the defaults: benchmarks/notes/cpu-schedules.md).
    unshare_broadcasts: bool = dataclasses.field(default=True, metadata={
        "help": "clone cheap broadcast producers per consumer (UnshareBroadcastProducers)"})
    unshare_recomputed: bool = dataclasses.field(default=True, metadata={
        "help": "clone cheap fused producers per consumer (UnshareRecomputedProducers)"})
    sum_before_contracting: bool = dataclasses.field(default=True, metadata={
        "help": "sum a contraction's operand instead of its result (SumBeforeContracting)"})
    merge_sibling_reductions: bool = dataclasses.field(default=True, metadata={
        "help": "merge outer reductions over one operand (MergeSiblingReductions)"})
    outer_reduction_threads: bool = dataclasses.field(default=True, metadata={
        "help": "split outer reductions over the threads (ScheduleLinalgForCpu)"})
    hoist_loop_buffers: bool = dataclasses.field(default=True, metadata={
        "help": "allocate loop-body buffers once, outside the loop (buffer-loop-hoisting)"})
    prefetch_tiles_ahead: int = dataclasses.field(default=1, metadata={
        "help": "row tiles a row group's loop prefetches ahead, 0: off (PrefetchRowTiles)"})
    strict: bool = dataclasses.field(default=False, metadata={
        "help": "a transform script that fails raises instead of leaving the ops "
                f"unscheduled (also on with the environment's {STRICT_ENV}=1)"})

    def expand(self) -> Sequence[PipelineElement]:
        strict = self.strict or strict_schedules()
        return [
            *entry_prologue(CheckCpuLowerable()),
            # Unit dims (keepdims reductions: [512, 1] rows read as [512, 1, 256])
            # out of the loops: the shapes then line up for elementwise fusion
            # and row groups, without expand/collapse_shape between the ops.
            "func.func(linalg-fold-unit-extent-dims)",
            "canonicalize",
            # K = 1 contractions (per-sample weight gradients) fuse as elementwise ops.
            OuterProductsToElementwise(),
            # x[b, m, k] @ w[k, n]: w read in place, not copied b times.
            ReadBroadcastsInContractions(),
            # Reductions as generics: their elementwise producers fuse into them.
            GeneralizeReductions(strict=strict),
            # Before fusion: upstream fusion miscompiles producers that read their init.
            ElementwiseInitsToInputs(),
            UnshareBroadcastProducers(enabled=self.unshare_broadcasts),
            PinRecomputedProducers(),
            "func.func(linalg-fuse-elementwise-ops)",
            UnpinProducers(),
            "cse",  # copies of a broadcast producer that did not fuse
            UnshareRecomputedProducers(enabled=self.unshare_recomputed),
            PinRecomputedProducers(),
            "func.func(linalg-fuse-elementwise-ops)",
            UnpinProducers(),
            "cse",
            SumBeforeContracting(enabled=self.sum_before_contracting),
            MergeSiblingReductions(enabled=self.merge_sibling_reductions),
            UpdateDonatedInPlace(),
            ReciprocalOfBroadcastDivisors(),
            # Softmax-like chains through row reductions: one loop over row tiles.
            FuseRowGroups(threads=self.threads, strict=strict),
            # Tile + vectorize large ops (schedule_linalg.py).
            ScheduleLinalgForCpu(threads=self.threads, strict=strict,
                                 outer_reduction_threads=self.outer_reduction_threads),
            NoteDonatedArguments(),
            UnshareEmptyTensors(),
            "eliminate-empty-tensors",
            BUFFERIZE,
            # Each tile's in-place tensor.insert_slice bufferizes to a memref.copy
            # between two equal subviews: CSE makes them one value and
            # canonicalization drops the self-copy (a 64-byte memcpy per vector
            # tile of tanh(x*y+z) otherwise).
            "cse",
            # Donated arguments: results that are their buffers leave the signature
            # (canonicalize first: a loop updating a buffer in place returns its init).
            "canonicalize",
            HideDonatingFunctions(),
            "drop-equivalent-buffer-results",
            RestoreDonatingFunctions(),
            # Without hoist-static-allocs: hoisting crashes (updateReturnOps) on
            # some generated modules in MLIR 22 (the ADBench GMM gradient); the
            # cost is one copy per result at function boundaries.
            "buffer-results-to-out-params{modify-public-functions}",
            "canonicalize",
            WriteResultsInPlace(),
            *(("func.func(buffer-loop-hoisting)",) if self.hoist_loop_buffers else ()),
            "buffer-deallocation-pipeline",
            PrefetchRowTiles(tiles_ahead=self.prefetch_tiles_ahead),
            *openmp_lowering(self.threads)[0],
            *LOWER_VECTORS,
            StridedCopiesToLoops(),  # (lowered by the next step's linalg to loops)
            *TO_LLVM[:2],  # c wrappers, linalg to loops
            # After the C wrappers (the outlined parts need none): LLVM's cost grows
            # faster than linearly in one function's size (split.py).
            # Loop nests the function repeats (a model's layers): one function each.
            repeats.OutlineRepeatedLoops(min_ops=repeats.REPEAT_MIN_FUNCTION_OPS),
            split.SplitLargeFunctions(min_ops=split.SPLIT_MIN_OPS,
                                      chunk_ops=split.CHUNK_OPS),
            BoolBuffersToBytes(),  # i1 loads/stores abort the LLVM lowering in this build
            *TO_LLVM[2:],
            *openmp_lowering(self.threads)[1],
        ]


#: Environment variable giving `jit`'s default number of CPU threads.
THREADS_ENV = "AUTODIFF_CPU_THREADS"


def cpu_threads(threads: int | None) -> int:
    """The number of threads for `--autodiff-lower-to-cpu`: `threads`, else the
    environment's `AUTODIFF_CPU_THREADS`, else 1. Raises ValueError unless >= 1."""
    source = "threads"
    if threads is None:
        raw = os.environ.get(THREADS_ENV, "1").strip() or "1"
        source = THREADS_ENV
        try:
            threads = int(raw)
        except ValueError:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}") from None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{source} must be a positive integer, got {threads!r}")
    return threads


def cpu_pipeline(threads: int = 1) -> str:
    """The `--autodiff-lower-to-cpu` pipeline text for `threads` threads."""
    return "autodiff-lower-to-cpu" if threads == 1 else f"autodiff-lower-to-cpu{{threads={threads}}}"
