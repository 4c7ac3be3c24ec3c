"""Programs over several processes: MPI, through upstream MLIR's `shard` and `mpi` dialects.

    # run as: mpiexec -n 2 python train.py   (mpiexec from the `mpich` wheel: the
    # `mlir-autodiff[mpi]` extra installs it; no system MPI is needed)
    import mlir_autodiff as ad

    ad.distributed.initialize()
    mesh = ad.Mesh((ad.distributed.process_count(),), ("x",))

    def f(x):                                   # x: this process's block
        return ad.lax.psum(x.sum(), "x")

    total = ad.shard_map(f, mesh, in_specs=(ad.PartitionSpec("x"),),
                         out_specs=ad.PartitionSpec())(x)

One process per mesh position (the process with MPI rank r runs position r
of the mesh, row-major). `shard_map` has jax's contract: it is called with
the *global* arrays, every process with the same values (the single-program
view); each process runs `f` on its block (the arguments split along the
mesh axes their `PartitionSpec` names) and the outputs are assembled
according to `out_specs` (an axis named there: the blocks are gathered along
it; `PartitionSpec()`: the output is replicated, every process returns its
own). Inside `f`, the collectives of `ad.lax` (`psum`, `pmean`, `pmax`,
`pmin`, `all_gather`, `psum_scatter`, `ppermute`, `axis_index`) refer to
mesh axes by name.

How it compiles: the traced function holds a `shard.grid` for the mesh and
`shard` collectives (`shard.all_reduce`, `shard.all_gather`,
`shard.reduce_scatter`, `shard.shift`, `shard.process_linear_index`); a
permutation is rotating shifts (lowered to `mpi.send`/`mpi.recv` ops).
`--autodiff-lower-to-cpu-mpi` (see transforms/shard_to_mpi.py) turns them
into `mpi` ops and those into calls of the MPI library (MPICH ABI), which the JIT resolves in the `libmpi` that
`initialize` loaded.

Inside `jit` (or any trace), `shard_map` emits its body into the enclosing
function, and `jit` compiles modules holding a `shard.grid` with that
pipeline. Called on arrays, it compiles per argument signature and checks,
on every call, that all processes pass the same shapes and dtypes.

Derivatives and batching go through the collectives (the rules are in
transforms/rules/shard.py, the semantics in docs/distributed.md): `grad` of a
function calling `shard_map` is the gradient of the global function (the
replicated arguments, and the values the body closes over, average their
cotangents over the processes, see `_replicated` and `_BodyTrace`); `grad`
inside the body is each process's derivative, with psum transposing to psum
(as with pmap).

Meshes may have several axes: a PartitionSpec entry or a collective may name one
axis or a tuple of them (row-major over the axes named, as jax).

`ad.jit(f, in_shardings=..., out_shardings=...)` with `NamedSharding`s
partitions automatically: the traced (and differentiated) function is
annotated with `shard.sharding`/`shard.shard` and partitioned by upstream's
`--sharding-propagation` and `--shard-partition` (see `_PartitionedJit` and
docs/distributed.md for what those passes handle).
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, func, tensor

from . import api, dialects, primitives, pytree
from . import numpy as anp
from .api import _draws_random, _transform_passes
from .rng_state import call_with_state
from .runtime import COMPILE_LOCK, CompiledModule
from .tracing import (
    FunctionTrace,
    RegionTrace,
    ShapedArray,
    Tracer,
    abstractify,
    current_trace,
    format_site,
    require_trace,
)
from .transforms.ad_support import post_order_ops
from .transforms.pipeline import run_pipeline
from .transforms.shard_to_mpi import (
    HELPER_PREFIX,
    MPI_ELEMENT_TYPES,
    add_helper,
)

# -------------------------------------------------------------------- the MPI library

#: MPICH ABI constants (mpi.h of MPICH; also what upstream's mpi-to-LLVM lowering uses).
_MPI_COMM_WORLD = 0x44000000
_MPI_INT64_T = 0x4c00083a
_MPI_MAX = 0x58000001
_MPI_IN_PLACE = ctypes.c_void_p(-1)

#: Environment variable naming the MPI library to load instead of the `mpich` wheel's.
LIBRARY_ENV = "AUTODIFF_MPI_LIBRARY"


class MpiUnavailableError(RuntimeError):
    """No MPI library was found (install the `mlir-autodiff[mpi]` extra)."""


def _wheel_file(name: str) -> str | None:
    """Path of file `name` (e.g. libmpi.so.12) installed by the `mpich` wheel."""
    from importlib import metadata

    try:
        dist = metadata.distribution("mpich")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == name:
            path = os.path.realpath(str(dist.locate_file(f)))
            if os.path.exists(path):
                return path
    return None


def mpi_library() -> str | None:
    """The MPI library (MPICH ABI) the compiled code calls: `$AUTODIFF_MPI_LIBRARY`,
    else the `mpich` wheel's `libmpi.so.12`; None if there is none."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return env
    return _wheel_file("libmpi.so.12")


def mpiexec() -> str | None:
    """The `mpiexec` launcher of the `mpich` wheel, or None."""
    return _wheel_file("mpiexec")


def is_available() -> bool:
    """Whether an MPI library is installed (the `mlir-autodiff[mpi]` extra)."""
    return mpi_library() is not None


_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        path = mpi_library()
        if path is None:
            raise MpiUnavailableError(
                "no MPI library: install the mpi extra (pip install 'mlir-autodiff[mpi]', "
                f"which brings the mpich wheel) or set {LIBRARY_ENV}")
        # RTLD_GLOBAL: the JIT-compiled code resolves MPI_* in this very library.
        _LIB = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return _LIB


def _flag(fn_name: str) -> bool:
    flag = ctypes.c_int(0)
    getattr(_library(), fn_name)(ctypes.byref(flag))
    return bool(flag.value)


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} failed with MPI error code {code}")


def _finalize() -> None:
    if _LIB is not None and _flag("MPI_Initialized") and not _flag("MPI_Finalized"):
        _LIB.MPI_Finalize()


def _abort_on_uncaught(previous: Callable[..., Any]) -> Callable[..., Any]:
    """An excepthook that prints the error as usual, then aborts every process
    (MPI_Abort): the other ranks would otherwise wait in a collective forever."""

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(kind, value, tb)
        if process_count() > 1:
            sys.stderr.write(f"[process {process_index()}] aborting all "
                             f"{process_count()} processes after the error above\n")
            sys.stderr.flush()
            # mpiexec forwards the output asynchronously; an immediate abort tore the
            # job down before the message arrived (seen on a loaded machine, where
            # the test read only a half-printed traceback of another process)
            time.sleep(0.5)
            _library().MPI_Abort(_MPI_COMM_WORLD, 1)

    return hook


def initialize() -> None:
    """Start MPI in this process (idempotent; also fine if MPI is already running,
    e.g. started by mpi4py). Run under `mpiexec -n N` for N processes; a plain
    `python` run is one process. MPI is finalized at exit, and an uncaught
    exception in any process aborts all of them."""
    with _LOCK:
        lib = _library()
        if not _flag("MPI_Initialized"):
            _check(lib.MPI_Init(None, None), "MPI_Init")
            atexit.register(_finalize)
            sys.excepthook = _abort_on_uncaught(sys.excepthook)


def _world_query(fn_name: str) -> int:
    if _LIB is None or not _flag("MPI_Initialized"):
        raise RuntimeError("mlir_autodiff.distributed.initialize() has not been called")
    out = ctypes.c_int(0)
    _check(getattr(_LIB, fn_name)(_MPI_COMM_WORLD, ctypes.byref(out)), fn_name)
    return out.value


def process_index() -> int:
    """This process's MPI rank in the world communicator (jax.process_index)."""
    return _world_query("MPI_Comm_rank")


def process_count() -> int:
    """The number of MPI processes (jax.process_count)."""
    return _world_query("MPI_Comm_size")


def _same_on_every_process(text: str) -> bool:
    """Whether every process passes the same `text` (an allreduce of its checksum)."""
    h = zlib.crc32(text.encode())
    buf = (ctypes.c_int64 * 2)(h, -h)
    _check(_library().MPI_Allreduce(_MPI_IN_PLACE, buf, 2, _MPI_INT64_T, _MPI_MAX,
                                    _MPI_COMM_WORLD), "MPI_Allreduce")
    return buf[0] == -buf[1] == h


# -------------------------------------------------------------------- meshes and specs

@dataclasses.dataclass(frozen=True)
class Mesh:
    """A grid of processes with named axes (jax.sharding.Mesh): `Mesh((4,), ("x",))`."""

    shape: tuple[int, ...]
    axis_names: tuple[str, ...]

    def __init__(self, shape: int | Sequence[int], axis_names: str | Sequence[str]):
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        if len(shape) != len(names):
            raise ValueError(f"Mesh: {len(shape)} axis sizes but {len(names)} axis names")
        if len(set(names)) != len(names):
            raise ValueError(f"Mesh: axis names must be distinct, got {names}")
        if any(s < 1 for s in shape):
            raise ValueError(f"Mesh: axis sizes must be positive, got {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "axis_names", names)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def axis_size(self, name: str) -> int:
        return self.shape[self.axis_names.index(name)]


class PartitionSpec(tuple):
    """Per array dimension, the mesh axis it is split over, a tuple of mesh axes
    (split over all of them, the first one major), or None (jax's PartitionSpec).
    Trailing dimensions not listed are not split; `PartitionSpec()` is replicated."""

    def __new__(cls, *parts: str | tuple[str, ...] | None) -> PartitionSpec:
        out = []
        for p in parts:
            if isinstance(p, list):
                p = tuple(p)
            if isinstance(p, tuple) and all(isinstance(q, str) for q in p):
                p = p[0] if len(p) == 1 else (p or None)
            elif p is not None and not isinstance(p, str):
                raise TypeError(f"PartitionSpec: each entry is a mesh axis name, a tuple of "
                                f"them or None, got {p!r}")
            out.append(p)
        return super().__new__(cls, out)

    def __repr__(self) -> str:
        return "PartitionSpec(" + ", ".join(repr(p) for p in self) + ")"


# -------------------------------------------------------------------- the mesh being traced

@dataclasses.dataclass
class _MeshContext:
    mesh: Mesh
    grid: str
    trace: FunctionTrace


_ACTIVE = threading.local()


def _axis_names(who: str, axis_name: Any) -> tuple[str, ...]:
    """`axis_name` (a mesh axis name or a tuple of them) as a tuple of names."""
    if isinstance(axis_name, str):
        return (axis_name,)
    if isinstance(axis_name, (tuple, list)) and axis_name and \
            all(isinstance(a, str) for a in axis_name):
        if len(set(axis_name)) != len(axis_name):
            raise ValueError(f"{who}: axis names must be distinct, got {tuple(axis_name)} "
                             f"(at {format_site()})")
        return tuple(axis_name)
    raise TypeError(f"{who}: axis_name must be a mesh axis name or a non-empty tuple of "
                    f"them, got {axis_name!r} (at {format_site()})")


def _mesh_for(who: str, axis_name: Any) -> tuple[_MeshContext, list[int]]:
    """The mesh being traced and the indices of `axis_name`'s axes in it, in the order
    named (NameError if unbound)."""
    names = _axis_names(who, axis_name)
    stack = getattr(_ACTIVE, "stack", [])
    for ctx in reversed(stack):
        if names[0] in ctx.mesh.axis_names:
            for name in names:
                if name not in ctx.mesh.axis_names:
                    raise NameError(f"{who}: axis name {name!r} is not an axis of the mesh "
                                    f"{ctx.mesh.axis_names} (at {format_site()})")
            return ctx, [ctx.mesh.axis_names.index(name) for name in names]
    raise NameError(f"{who}: unbound axis name {names[0]!r}: collectives are used inside "
                    f"shard_map over a mesh with that axis (at {format_site()})")


def _group_size(ctx: _MeshContext, axes: Sequence[int]) -> int:
    return int(np.prod([ctx.mesh.shape[a] for a in axes]))


def _tensor_type(shape: Sequence[int], elem: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), elem)


def _emit(who: str, x: Any, axis_name: Any,
          build: Callable[[_MeshContext, Tracer, list[int], int], Tracer]) -> Tracer:
    """`build(ctx, x, axes, n)` for the collective `who` over `axis_name` (its mesh
    axes `axes`, `n` processes in each group)."""
    ctx, axes = _mesh_for(who, axis_name)
    trace = require_trace(who)
    t = trace.lift(x) if isinstance(x, Tracer) else primitives.constant_like(x)
    if np.dtype(t.aval.dtype) == np.bool_:
        raise TypeError(f"{who}: boolean arrays are not supported (at {format_site()})")
    with trace.context:
        return build(ctx, t, axes, _group_size(ctx, axes))


def _shard_op(name: str, ctx: _MeshContext, x: Tracer, axes: Sequence[int],
              out_shape: Sequence[int], **attrs: ir.Attribute) -> Tracer:
    trace = require_trace(name)
    with trace.emitting():
        attributes = {"grid": ir.FlatSymbolRefAttr.get(ctx.grid),
                      "grid_axes": ir.DenseI16ArrayAttr.get(list(axes)), **attrs}
        op = ir.Operation.create(name, results=[_tensor_type(out_shape,
                                                              x.value.type.element_type)],
                                 operands=[x.value], attributes=attributes)
    return trace.wrap(op.results[0], ShapedArray(tuple(out_shape), x.aval.dtype))


def _all_reduce(who: str, x: Any, axis_name: Any, kind: str) -> Tracer:
    def build(ctx: _MeshContext, t: Tracer, axes: list[int], n: int) -> Tracer:
        red = ir.Attribute.parse(f"#shard<partial {kind}>")
        return _shard_op("shard.all_reduce", ctx, t, axes, t.shape, reduction=red)

    return _emit(who, x, axis_name, build)


def psum(x: Any, axis_name: str | tuple[str, ...]) -> Any:
    """Sum of `x` over the processes along mesh axis `axis_name` (jax.lax.psum)."""
    return pytree.tree_map(lambda v: _all_reduce("psum", v, axis_name, "sum"), x)


def pmax(x: Any, axis_name: str | tuple[str, ...]) -> Any:
    """Elementwise maximum over the processes along `axis_name` (jax.lax.pmax)."""
    return pytree.tree_map(lambda v: _all_reduce("pmax", v, axis_name, "max"), x)


def pmin(x: Any, axis_name: str | tuple[str, ...]) -> Any:
    """Elementwise minimum over the processes along `axis_name` (jax.lax.pmin)."""
    return pytree.tree_map(lambda v: _all_reduce("pmin", v, axis_name, "min"), x)


def pmean(x: Any, axis_name: str | tuple[str, ...]) -> Any:
    """Mean over the processes along `axis_name` (jax.lax.pmean): psum / axis size."""
    ctx, axes = _mesh_for("pmean", axis_name)
    n = _group_size(ctx, axes)
    return pytree.tree_map(lambda v: psum(v, axis_name) / n, x)


def all_gather(x: Any, axis_name: str | tuple[str, ...], *, axis: int = 0, tiled: bool = False) -> Any:
    """Every process's `x` along `axis_name`, stacked on a new dimension `axis`
    (or, `tiled=True`, concatenated along dimension `axis`) (jax.lax.all_gather)."""
    def one(v: Any) -> Tracer:
        def build(ctx: _MeshContext, t: Tracer, gaxes: list[int], n: int) -> Tracer:
            d = axis + (t.ndim + (0 if tiled else 1) if axis < 0 else 0)
            if not 0 <= d < t.ndim + (0 if tiled else 1):
                raise ValueError(f"all_gather: axis {axis} is out of range for an array "
                                 f"of rank {t.ndim} (at {format_site()})")
            if not tiled:
                t = anp.expand_dims(t, d)
            out = list(t.shape)
            out[d] *= n
            return _shard_op("shard.all_gather", ctx, t, gaxes, out,
                             gather_axis=ir.IntegerAttr.get(ir.IndexType.get(), d))

        return _emit("all_gather", v, axis_name, build)

    return pytree.tree_map(one, x)


def psum_scatter(x: Any, axis_name: str | tuple[str, ...], *, scatter_dimension: int = 0,
                 tiled: bool = False) -> Any:
    """The sum over `axis_name`, of which each process keeps its block along
    `scatter_dimension` (jax.lax.psum_scatter): without `tiled` that dimension's
    size is the axis size and disappears; with it, it is divided by the axis size."""
    def one(v: Any) -> Tracer:
        def build(ctx: _MeshContext, t: Tracer, gaxes: list[int], n: int) -> Tracer:
            d = scatter_dimension + (t.ndim if scatter_dimension < 0 else 0)
            if not 0 <= d < t.ndim:
                raise ValueError(f"psum_scatter: scatter_dimension {scatter_dimension} is out "
                                 f"of range for an array of rank {t.ndim} (at {format_site()})")
            size = t.shape[d]
            if (not tiled and size != n) or (tiled and size % n):
                want = f"equal to the axis size {n}" if not tiled else f"a multiple of {n}"
                raise ValueError(f"psum_scatter: dimension {d} of {t.aval.str_short()} must be "
                                 f"{want} (at {format_site()})")
            out = list(t.shape)
            out[d] //= n
            red = ir.Attribute.parse("#shard<partial sum>")
            r = _shard_op("shard.reduce_scatter", ctx, t, gaxes, out, reduction=red,
                          scatter_axis=ir.IntegerAttr.get(ir.IndexType.get(), d))
            return r if tiled else anp.squeeze(r, d)

        return _emit("psum_scatter", v, axis_name, build)

    return pytree.tree_map(one, x)


def ppermute(x: Any, axis_name: str | tuple[str, ...], perm: Sequence[tuple[int, int]]
             ) -> Any:
    """Send each process's `x` to another along `axis_name` (jax.lax.ppermute):
    `perm` lists (source, destination) index pairs, each source and each
    destination at most once; a process no pair sends to gets zeros.

    In the IR it is one rotating `shard.shift` per distinct distance
    (destination - source mod the axis size), each process keeping the shifted
    value whose distance its own source is at: a ring shift is one shift, and
    the derivative rules transpose each shift to the opposite one (the inverse
    permutation). Over a tuple of axes (indices row-major over them, as jax),
    it is an all_gather over them of which each process keeps its source's
    block (all_gather's transpose, psum_scatter, makes the inverse)."""
    def one(v: Any) -> Tracer:
        def build(ctx: _MeshContext, t: Tracer, gaxes: list[int], n: int) -> Tracer:
            pairs = [(int(s), int(d)) for s, d in perm]
            srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
            if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts) or \
                    any(not 0 <= i < n for i in srcs + dsts):
                raise ValueError(f"ppermute: perm must pair distinct sources with distinct "
                                 f"destinations in range({n}), got {list(perm)} "
                                 f"(at {format_site()})")
            elem = str(t.value.type.element_type)
            if elem not in MPI_ELEMENT_TYPES:
                raise TypeError(f"ppermute: {t.aval.str_short()} is not supported (element "
                                f"types: {', '.join(sorted(MPI_ELEMENT_TYPES))}) "
                                f"(at {format_site()})")
            if len(gaxes) > 1:
                return _permute_by_gathering(ctx, t, axis_name, gaxes, pairs, n)
            gaxis = gaxes[0]
            by_distance: dict[int, list[int]] = {}
            for s, d in pairs:
                by_distance.setdefault((d - s) % n, []).append(d)
            out: Any = None
            me = None
            for k, dests in sorted(by_distance.items()):
                moved = t if k == 0 else _shard_op(
                    "shard.shift", ctx, t, [gaxis], t.shape,
                    shift_axis=ir.IntegerAttr.get(ir.IndexType.get(), gaxis),
                    offset=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k),
                    rotate=ir.UnitAttr.get())
                if len(dests) == n:
                    out = moved
                    continue
                if me is None:
                    me = _axis_position(ctx, gaxes)
                receives = np.zeros(n, bool)
                receives[dests] = True
                keep = anp.asarray(receives)[me]
                out = anp.where(keep, moved, anp.zeros_like(t) if out is None else out)
            return require_trace("ppermute").lift(
                anp.zeros_like(t) if out is None else out)

        return _emit("ppermute", v, axis_name, build)

    return pytree.tree_map(one, x)


def _permute_by_gathering(ctx: _MeshContext, t: Tracer, axis_name: Any, axes: list[int],
                          pairs: list[tuple[int, int]], n: int) -> Tracer:
    """ppermute over several mesh axes: every block gathered, each process keeping
    its source's (zeros where it has none)."""
    gathered = all_gather(t, axis_name)
    source = np.zeros(n, np.int32)
    has_source = np.zeros(n, bool)
    for s, d in pairs:
        source[d], has_source[d] = s, True
    me = _axis_position(ctx, axes)
    picked = gathered[anp.asarray(source)[me]]
    return require_trace("ppermute").lift(
        anp.where(anp.asarray(has_source)[me], picked, anp.zeros_like(t)))


def axis_index(axis_name: str | tuple[str, ...]) -> Tracer:
    """This process's index along mesh axis `axis_name` (or, for a tuple of axes, its
    index row-major over them), an int32 scalar (jax.lax.axis_index)."""
    ctx, axes = _mesh_for("axis_index", axis_name)
    return _axis_position(ctx, axes)


def _group_index(ctx: _MeshContext, axes: Sequence[int] | None) -> ir.Value:
    """An index value: this process's position along mesh `axes` (row-major over them;
    None: all of the mesh's axes). Emitted at the trace's insertion point."""
    grid = ir.FlatSymbolRefAttr.get(ctx.grid)
    index = ir.IndexType.get()
    if axes is None or list(axes) == list(range(len(ctx.mesh.shape))):
        return ir.Operation.create("shard.process_linear_index", results=[index],
                                   attributes={"grid": grid}).results[0]
    multi = ir.Operation.create("shard.process_multi_index", results=[index] * len(axes),
                                attributes={"grid": grid,
                                            "axes": ir.DenseI16ArrayAttr.get(list(axes))})
    acc = multi.results[0]
    for j in range(1, len(axes)):
        size = arith.ConstantOp(index, ctx.mesh.shape[axes[j]]).result
        acc = arith.AddIOp(arith.MulIOp(acc, size).result, multi.results[j]).result
    return acc


def _axis_position(ctx: _MeshContext, axes: Sequence[int] | None = None) -> Tracer:
    trace = require_trace("axis_index")
    with trace.emitting():
        i = _group_index(ctx, axes)
        i32 = arith.IndexCastOp(ir.IntegerType.get_signless(32), i)
        t = tensor.FromElementsOp(_tensor_type([], i32.result.type), [i32.result])
    return trace.wrap(t.result, ShapedArray((), np.int32))


# -------------------------------------------------------------------- shard_map

def _replicated(ctx: _MeshContext, x: Tracer) -> Tracer:
    """`x`, a global argument every process holds a copy of, as the body's input:
    the identity, whose reverse mode averages the cotangent over the processes.

    The passes differentiate each process's program with the collectives'
    transposes (psum's is psum): seeded with the same output cotangent on every
    process, the copies' cotangents sum to the axis size times the global
    gradient, so each process takes their mean, the global gradient itself.
    Emitted as a private identity function with a custom VJP (`@..._bwd` is a
    `shard.all_reduce` divided by the number of processes, in f32 for 16-bit
    floats), so forward mode and batching see the identity."""
    t = x.value.type
    elem = str(t.element_type)
    # 16-bit floats are averaged in f32 (MPI has no datatype for them here)
    wide = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64"}.get(elem)
    every_axis = list(range(len(ctx.mesh.shape)))
    if wide is None or ctx.mesh.size == 1:
        return x
    shape = list(x.shape)
    sig = "x".join(str(s) for s in shape) + "x" + elem
    name = f"{HELPER_PREFIX}replicated_{ctx.grid}_{sig}"
    ty = str(t)
    wty = "tensor<" + "".join(f"{s}x" for s in shape) + wide + ">"
    module = x.trace.module.operation
    scale = f"{1.0 / ctx.mesh.size:.17e}"
    widen = (f"    %w = arith.extf %ct : {ty} to {wty}\n" if wide != elem
             else f"    %w = tensor.cast %ct : {ty} to {wty}\n")
    narrow = (f"    %r = arith.truncf %m : {wty} to {ty}\n" if wide != elem
              else f"    %r = tensor.cast %m : {wty} to {ty}\n")
    add_helper(module, f"{name}_bwd", (
        f"  func.func private @{name}_bwd(%ct: {ty}) -> {ty} {{\n"
        + widen +
        f"    %s = shard.all_reduce %w on @{ctx.grid} grid_axes = {every_axis} reduction = sum"
        f" : {wty} -> {wty}\n"
        f"    %k = arith.constant dense<{scale}> : {wty}\n"
        f"    %m = arith.mulf %s, %k : {wty}\n"
        + narrow +
        f"    return %r : {ty}\n  }}\n"))
    add_helper(module, f"{name}_fwd", (
        f"  func.func private @{name}_fwd(%x: {ty}) -> {ty} {{\n"
        f"    return %x : {ty}\n  }}\n"))
    add_helper(module, name, (
        f"  func.func private @{name}(%x: {ty}) -> {ty} attributes {{"
        f"autodiff.custom_vjp = {{fwd = @{name}_fwd, bwd = @{name}_bwd}}}} {{\n"
        f"    return %x : {ty}\n  }}\n"))
    trace = x.trace
    with trace.emitting():
        call = func.CallOp([t], ir.FlatSymbolRefAttr.get(name), [x.value])
    return trace.wrap(call.results[0], x.aval)



class _BodyTrace(RegionTrace):
    """The shard_map body's values: ops go to the enclosing trace's block, as if
    inlined, but every value the body closes over passes `lift`, which treats a
    floating-point one as the replicated global argument it is (`_replicated`):
    without that its cotangent would be the sum of the processes' copies, each
    n times its share (psum transposes to psum), not the global gradient."""

    def __init__(self, parent: FunctionTrace, ctx: _MeshContext, replicate: bool) -> None:
        super().__init__(parent, parent.block, [], "shard_map body")
        self.ctx, self.replicate = ctx, replicate
        ops = self.block.operations
        #: the last op before the body's: a captured value's boundary goes after it
        #: (a use inside a loop region of the body comes after the loop op itself)
        self._mark = ops[len(ops) - 1] if len(ops) else None

    def own(self, t: Tracer) -> Tracer:
        """A value of the enclosing trace made by shard_map for the body (its block)."""
        return Tracer(t.value, t.aval, self)

    def lift(self, t: Tracer) -> Tracer:
        if t.trace is self:
            return t
        outer = self.parent.lift(t)
        inner = self._captured.get(id(outer))
        if inner is None:
            value = _replicated(self.ctx, outer) if self.replicate else outer
            if value is not outer:
                op = value.value.owner
                if self._mark is not None:
                    op.move_after(self._mark)
                elif self.block.operations[0] != op:
                    op.move_before(self.block.operations[0])
            inner = Tracer(value.value, value.aval, self)
            self._captured[id(outer)] = inner
            self._outer.append(outer)
        return inner


def _split_dims(spec: Any, ndim: int, mesh: Mesh, who: str) -> dict[int, tuple[str, ...]]:
    """Dimension -> the mesh axis names it is split over (the first one major) of
    PartitionSpec `spec` (None: replicated)."""
    if spec is None:
        return {}
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"{who}: expected a PartitionSpec or None, got {spec!r}")
    if len(spec) > ndim:
        raise ValueError(f"{who}: {spec!r} has more entries than the array's rank {ndim}")
    out: dict[int, tuple[str, ...]] = {}
    used: set[str] = set()
    for d, entry in enumerate(spec):
        if entry is None:
            continue
        names = (entry,) if isinstance(entry, str) else tuple(entry)
        for name in names:
            if name not in mesh.axis_names:
                raise ValueError(f"{who}: {spec!r} names axis {name!r}, which the mesh "
                                 f"{mesh.axis_names} does not have")
            if name in used:
                raise ValueError(f"{who}: {spec!r} names axis {name!r} twice")
            used.add(name)
        out[d] = names
    return out


def _local_block(ctx: _MeshContext, x: Tracer, dims: dict[int, tuple[str, ...]]) -> Tracer:
    """This process's block of global `x` (split along `dims`)."""
    if not dims:
        return x
    sizes = list(x.shape)
    trace = require_trace("shard_map")
    dyn = ir.ShapedType.get_dynamic_size()
    with trace.emitting():
        offsets, static_offsets = [], [0] * x.ndim
        for d, names in sorted(dims.items()):
            axes = [ctx.mesh.axis_names.index(name) for name in names]
            sizes[d] //= _group_size(ctx, axes)
            k = arith.ConstantOp(ir.IndexType.get(), sizes[d])
            offsets.append(arith.MulIOp(_group_index(ctx, axes), k.result).result)
            static_offsets[d] = dyn
        out_type = _tensor_type(sizes, x.value.type.element_type)
        op = tensor.ExtractSliceOp(out_type, x.value, offsets, [], [],
                                   static_offsets, sizes, [1] * x.ndim)
    return trace.wrap(op.result, ShapedArray(tuple(sizes), x.aval.dtype))


def _leaf_specs(spec: Any, value: Any, who: str) -> list[Any]:
    """One PartitionSpec (or None) per leaf of `value`: `spec` is a pytree prefix of
    `value` whose leaves are PartitionSpecs (jax's in_specs/out_specs)."""
    if spec is None or isinstance(spec, PartitionSpec):
        return [spec] * len(pytree.tree_leaves(value))
    if isinstance(spec, dict):
        if not isinstance(value, dict) or set(spec) != set(value):
            raise ValueError(f"shard_map: {who} {spec!r} does not match the structure of "
                             f"{pytree.tree_structure(value)}")
        return [s for k in pytree._sorted_keys(value)
                for s in _leaf_specs(spec[k], value[k], who)]
    if isinstance(spec, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(spec) != len(value):
            raise ValueError(f"shard_map: {who} {spec!r} does not match the structure of "
                             f"{pytree.tree_structure(value)}")
        return [s for sp, v in zip(spec, value) for s in _leaf_specs(sp, v, who)]
    raise TypeError(f"shard_map: {who} must be PartitionSpecs (in a pytree prefix of the "
                    f"values), got {spec!r}")


class _ShardMapped:
    def __init__(self, f: Callable[..., Any], mesh: Mesh, in_specs: Any, out_specs: Any):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"shard_map: mesh must be an ad.Mesh, got {mesh!r}")
        self.f, self.mesh, self.in_specs, self.out_specs = f, mesh, in_specs, out_specs
        self._cache: dict[Any, tuple[CompiledModule, pytree.TreeDef, bool]] = {}
        self.__name__ = getattr(f, "__name__", "shard_map")

    def lowered_text(self, *args: Any) -> str:
        """The traced module (shard ops, before lowering) for these arguments."""
        module, _ = self._trace(args)
        return str(module)

    def _leaf_in_specs(self, args: tuple[Any, ...]) -> list[Any]:
        in_specs = self.in_specs
        if isinstance(in_specs, PartitionSpec) or in_specs is None:
            in_specs = (in_specs,) * len(args)
        return _leaf_specs(tuple(in_specs) if isinstance(in_specs, list) else in_specs,
                           args, "in_specs")

    def _trace(self, args: tuple[Any, ...]) -> tuple[ir.Module, pytree.TreeDef]:
        """A module whose @main takes the global arguments and runs the body."""
        leaves, tree = pytree.tree_flatten(args)
        leaf_specs = self._leaf_in_specs(args)
        context = ir.Context()
        dialects.load(context)
        with context, ir.Location.unknown(context):
            module = ir.Module.create()
        grid = _grid_symbol(module, self.mesh)
        avals = [ShapedArray(abstractify(x).shape, abstractify(x).dtype) for x in leaves]
        trace = FunctionTrace(module, "main", avals, fun=self.f)
        with trace.active():
            outs, out_tree = self._body(trace, grid, trace.args, tree, leaf_specs)
            trace.finish(outs)
        return module, out_tree

    def _body(self, trace: FunctionTrace, grid: str, leaves: Sequence[Tracer],
              tree: pytree.TreeDef, leaf_specs: list[Any], inline: bool = False
              ) -> tuple[list[Tracer], Any]:
        """Emit into `trace`: the blocks of the global `leaves`, the body on them, and the
        outputs assembled per out_specs. Returns the output leaves and their tree."""
        mesh = self.mesh
        ctx = _MeshContext(mesh, grid, trace)
        stack = _ACTIVE.__dict__.setdefault("stack", [])
        stack.append(ctx)
        try:
            # the body's values live in a trace of their own (emitting into the same
            # block), so the values it closes over pass its boundary (see _BodyTrace)
            body = _BodyTrace(trace, ctx, replicate=inline)
            local = []
            for x, s in zip(leaves, leaf_specs):
                dims = _split_dims(s, x.ndim, mesh, "shard_map in_specs")
                for d, names in dims.items():
                    size = int(np.prod([mesh.axis_size(name) for name in names]))
                    if x.shape[d] % size:
                        what = f"mesh axis {names[0]!r}" if len(names) == 1 else \
                            f"mesh axes {names}"
                        raise ValueError(
                            f"shard_map: dimension {d} of argument {x.aval.str_short()} is "
                            f"split over {what} of size {size}, which does not divide it")
                if inline:  # (differentiable from outside: see _replicated)
                    x = _replicated(ctx, x)
                local.append(body.own(_local_block(ctx, x, dims)))
            with body.active():
                out = self.f(*pytree.tree_unflatten(tree, local))
                out_leaves, out_tree = pytree.tree_flatten(out)
                out_specs = _leaf_specs(self.out_specs, out, "out_specs")
                results = []
                for o, s in zip(out_leaves, out_specs):
                    t = body.lift(o) if isinstance(o, Tracer) else primitives.constant_like(o)
                    for d, names in _split_dims(s, t.ndim, mesh, "shard_map out_specs").items():
                        t = all_gather(t, names, axis=d, tiled=True)
                    results.append(t)
            body.finish(results)
        finally:
            stack.pop()
        return [Tracer(t.value, t.aval, trace) for t in results], out_tree

    def _inline(self, args: tuple[Any, ...]) -> Any:
        """Inside jit (or another trace): emit the body into the enclosing function."""
        _require_processes(self.mesh, f"shard_map({self.__name__})")
        trace = require_trace("shard_map")
        leaves, tree = pytree.tree_flatten(args)
        leaf_specs = self._leaf_in_specs(args)
        grid = _grid_symbol(trace.module, self.mesh)
        tracers = [trace.lift(x) if isinstance(x, Tracer) else primitives.constant_like(x)
                   for x in leaves]
        outs, out_tree = self._body(trace, grid, tracers, tree, leaf_specs, inline=True)
        return pytree.tree_unflatten(out_tree, outs)

    def __call__(self, *args: Any) -> Any:
        if current_trace() is not None:
            return self._inline(args)
        n = _require_processes(self.mesh, "shard_map")
        leaves, _ = pytree.tree_flatten(args)
        key = (pytree.tree_structure(args),
               tuple((np.shape(x), abstractify(x).dtype) for x in leaves))
        # Every process must run the same program: mismatched arguments would make
        # the collectives disagree (an MPI error, or a wait that never ends).
        signature = f"{self.__name__}{key}"
        if n > 1 and not _same_on_every_process(signature):
            raise ValueError(f"shard_map({self.__name__}): the processes were called with "
                             f"different argument shapes or dtypes; process "
                             f"{process_index()} has {_describe(args)}")
        entry = self._cache.get(key)
        if entry is None:
            with COMPILE_LOCK:
                module, out_tree = self._trace(args)
                # a draw of the implicit generator: @main takes and returns its state
                uses_rng = _draws_random(module)
                # grad/jvp/vmap inside the body: the autodiff passes, as jit runs them.
                run_pipeline(module, ",".join(_transform_passes(module)
                                              + ["canonicalize", "cse", "symbol-dce"]))
                cm = CompiledModule(module, pipeline="autodiff-lower-to-cpu-mpi",
                                    context=module.context)
            entry = self._cache[key] = (cm, out_tree, uses_rng)
        cm, out_tree, uses_rng = entry
        arrays = [np.asarray(x) for x in leaves]
        if uses_rng:
            outs = tuple(call_with_state(lambda a: _as_tuple(cm["main"](*a)), arrays))
        else:
            outs = _as_tuple(cm["main"](*arrays))
        return pytree.tree_unflatten(out_tree, list(outs))


def _as_tuple(outs: Any) -> tuple[Any, ...]:
    return outs if isinstance(outs, tuple) else (outs,)


def _require_processes(mesh: Mesh, who: str) -> int:
    """Start MPI; the number of processes, which must be the mesh's size."""
    initialize()
    n = process_count()
    if n != mesh.size:
        raise ValueError(f"{who}: the mesh has {mesh.size} positions but {n} MPI processes "
                         f"run (start with mpiexec -n {mesh.size})")
    return n


def _grid_symbol(module: ir.Module, mesh: Mesh) -> str:
    """The `shard.grid` of `mesh` in `module` (added at its start if missing)."""
    name = "mesh_" + "x".join(str(s) for s in mesh.shape)
    body = module.body
    for op in body.operations:
        if op.operation.name == "shard.grid" and \
                ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return name
    with module.context, ir.Location.unknown(module.context):
        ip = ir.InsertionPoint.at_block_begin(body)
        ir.Operation.create("shard.grid", attributes={
            "sym_name": ir.StringAttr.get(name),
            "shape": ir.DenseI64ArrayAttr.get(list(mesh.shape))}, ip=ip)
    return name


def _describe(args: tuple[Any, ...]) -> str:
    leaves = pytree.tree_leaves(args)
    return ", ".join(abstractify(x).str_short() for x in leaves) or "no arguments"


def shard_map(f: Callable[..., Any], mesh: Mesh, in_specs: Any, out_specs: Any
              ) -> Callable[..., Any]:
    """`f` run on each process's block of the arguments (jax.shard_map); see the module doc."""
    return _ShardMapped(f, mesh, in_specs, out_specs)


# -------------------------------------------------------------------- jit(in_shardings=...)

@dataclasses.dataclass(frozen=True)
class NamedSharding:
    """How an array is laid out over a mesh (jax.sharding.NamedSharding): `spec` names,
    per dimension, the mesh axes (or tuple of axes) it is split over."""

    mesh: Mesh
    spec: PartitionSpec = PartitionSpec()

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, Mesh):
            raise TypeError(f"NamedSharding: mesh must be an ad.Mesh, got {self.mesh!r}")
        if not isinstance(self.spec, PartitionSpec):
            raise TypeError(f"NamedSharding: spec must be an ad.PartitionSpec, got "
                            f"{self.spec!r}")


#: Ops the traced function may hold for upstream's sharding propagation and
#: partitioning (the ones with its ShardingInterface in MLIR 22, and the function's
#: own structure); anything else is reported before those passes run (some abort
#: the process on ops they do not know).
_PARTITIONABLE_DIALECTS = ("linalg.",)
_PARTITIONABLE_OPS = {"tensor.empty", "func.return", "arith.constant", "shard.sharding",
                      "shard.shard"}


def _on_one_axis(shardings: list[Any], who: str) -> list[Any]:
    """The shardings on a 1-D mesh of the same processes: upstream's `--shard-partition`
    (MLIR 22) reshards on 1-D grids only (an assertion otherwise), so a mesh of several
    axes is accepted where every split names all of its axes of size > 1, in the
    mesh's order (the block order is then the process order), or only axes of size 1."""
    out = []
    for sh in shardings:
        if sh is None or len(sh.mesh.shape) == 1:
            out.append(sh)
            continue
        mesh = sh.mesh
        big = tuple(a for a, n in zip(mesh.axis_names, mesh.shape) if n > 1)
        flat = Mesh((mesh.size,), ("processes",))
        entries = []
        for entry in sh.spec:
            names = () if entry is None else (entry,) if isinstance(entry, str) else entry
            names = tuple(a for a in names if a in mesh.axis_names and mesh.axis_size(a) > 1)
            if names and names != big:
                raise NotImplementedError(
                    f"jit({who}): {sh.spec!r} over the mesh {mesh.axis_names} of shape "
                    f"{mesh.shape} splits over part of it; upstream's --shard-partition "
                    f"(MLIR 22) reshards on 1-D grids only, so a split must name all of "
                    f"{big} in this order (or use shard_map)")
            entries.append("processes" if names else None)
        out.append(NamedSharding(flat, PartitionSpec(*entries)))
    return out


def _leaf_shardings(shardings: Any, value: Any, who: str) -> list[Any]:
    """One NamedSharding (or None) per leaf of `value`; `shardings` is a pytree
    prefix of `value` whose leaves are NamedShardings (or None)."""
    if shardings is None or isinstance(shardings, NamedSharding):
        return [shardings] * len(pytree.tree_leaves(value))
    if isinstance(shardings, dict) and isinstance(value, dict) and set(shardings) == set(value):
        return [s for k in pytree._sorted_keys(value)
                for s in _leaf_shardings(shardings[k], value[k], who)]
    if isinstance(shardings, (tuple, list)) and isinstance(value, (tuple, list)) and \
            len(shardings) == len(value):
        return [s for sh, v in zip(shardings, value) for s in _leaf_shardings(sh, v, who)]
    raise ValueError(f"jit: {who} {shardings!r} must be NamedShardings (or None) in a pytree "
                     f"prefix of {pytree.tree_structure(value)}")


def _split_axes_attr(mesh: Mesh, spec: PartitionSpec | None, ndim: int, who: str
                     ) -> ir.Attribute:
    dims = _split_dims(spec, ndim, mesh, who)
    groups = []
    for d in range(max(dims, default=-1) + 1):
        axes = [mesh.axis_names.index(n) for n in dims.get(d, ())]
        groups.append("[" + ", ".join(str(a) for a in axes) + "]")
    return ir.Attribute.parse("#shard<axisarray[" + ", ".join(groups or ["[]"]) + "]>")


def _sharding_value(grid: str, mesh: Mesh, spec: PartitionSpec | None, ndim: int,
                    who: str) -> ir.Value:
    return ir.Operation.create("shard.sharding", results=[ir.Type.parse("!shard.sharding")],
                               attributes={
        "grid": ir.FlatSymbolRefAttr.get(grid),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0]),
        "split_axes": _split_axes_attr(mesh, spec, ndim, who),
        "static_halo_sizes": ir.DenseI64ArrayAttr.get([]),
        "static_sharded_dims_offsets": ir.DenseI64ArrayAttr.get([])}).results[0]


def _shard(value: ir.Value, sharding: ir.Value, for_users: bool) -> ir.Value:
    attrs = {"annotate_for_users": ir.UnitAttr.get()} if for_users else {}
    return ir.Operation.create("shard.shard", results=[value.type],
                               operands=[value, sharding], attributes=attrs).results[0]


def _unshare_constants(fn: ir.Operation) -> None:
    """Give every user of a `tensor.empty` / `linalg.fill` / tensor `arith.constant` its
    own copy: CSE merges equal ones, and upstream's sharding propagation aborts when
    one value is annotated with two shardings (its users want different ones)."""
    for kind in ("linalg.fill", "arith.constant", "tensor.empty"):
        for op in list(post_order_ops(fn)):
            if op.name != kind or len(op.results) != 1 or \
                    not isinstance(op.results[0].type, ir.RankedTensorType):
                continue
            uses = list(op.results[0].uses)
            for use in uses[1:]:
                with ir.InsertionPoint(op):
                    copy = op.clone()
                use.owner.operands[use.operand_number] = copy.results[0]


def _check_partitionable(fn: ir.Operation, who: str) -> None:
    """NotImplementedError naming the first op (and the user's line that made it)
    upstream's sharding propagation/partitioning has no rule for."""
    for op in post_order_ops(fn):
        if op.operation == fn.operation or op.name in _PARTITIONABLE_OPS or \
                op.name.startswith(_PARTITIONABLE_DIALECTS):
            continue
        parent = op.parent
        while parent is not None and parent.name != "func.func":
            if parent.name.startswith(_PARTITIONABLE_DIALECTS):
                break  # (the body of a linalg op: scalar ops)
            parent = parent.parent
        if parent is not None and parent.name != "func.func":
            continue
        where = str(op.location)
        where = where[4:-1] if where.startswith("loc(") else where
        raise NotImplementedError(
            f"{where}: jit({who}, in_shardings=...): '{op.name}' has no sharding rule in "
            "upstream's sharding propagation/partitioning (MLIR 22); the partitioned "
            "program may hold linalg ops, tensor.empty and arith.constant only (use "
            "shard_map for this function)")


class _PartitionedJit:
    """jit(f, in_shardings=..., out_shardings=...): `f` traced on the global arrays,
    differentiated and inlined, its arguments and results annotated with `shard`
    shardings, then partitioned by upstream's `--sharding-propagation` and
    `--shard-partition` and lowered like shard_map (see docs/distributed.md)."""

    def __init__(self, f: Callable[..., Any], in_shardings: Any, out_shardings: Any):
        self.f, self.in_shardings, self.out_shardings = f, in_shardings, out_shardings
        self.__name__ = getattr(f, "__name__", "jit")
        self._cache: dict[Any, tuple[CompiledModule, pytree.TreeDef, list[Any]]] = {}

    def _mesh(self, shardings: list[Any]) -> Mesh:
        meshes = {s.mesh for s in shardings if s is not None}
        if len(meshes) != 1:
            raise ValueError(f"jit({self.__name__}): in_shardings/out_shardings must name one "
                             f"mesh, got {len(meshes)}")
        return meshes.pop()

    def _in_leaf_shardings(self, args: tuple[Any, ...]) -> list[Any]:
        shardings = self.in_shardings
        if isinstance(shardings, list):
            shardings = tuple(shardings)
        if isinstance(shardings, tuple) and len(args) == 1 and len(shardings) != 1:
            shardings = (shardings,)
        return _leaf_shardings(shardings, args, "in_shardings")

    def lowered_text(self, *args: Any, stage: str = "partitioned") -> str:
        """The module at `stage`: "annotated" (differentiated, inlined, with the
        sharding annotations) or "partitioned" (after upstream's passes)."""
        module, _, _ = self._trace(args, stop=stage)
        return str(module)

    def _trace(self, args: tuple[Any, ...], stop: str = "partitioned"
               ) -> tuple[ir.Module, pytree.TreeDef, list[Any]]:
        leaves, tree = pytree.tree_flatten(args)
        in_sh = self._in_leaf_shardings(args)
        context = ir.Context()
        dialects.load(context)
        with context, ir.Location.unknown(context):
            module = ir.Module.create()
        avals = [ShapedArray(abstractify(x).shape, abstractify(x).dtype) for x in leaves]
        trace = FunctionTrace(module, "main", avals, fun=self.f)
        with trace.active():
            out = self.f(*pytree.tree_unflatten(tree, trace.args))
            out_leaves, out_tree = pytree.tree_flatten(out)
            outs = [trace.lift(o) if isinstance(o, Tracer) else primitives.constant_like(o)
                    for o in out_leaves]
            trace.finish(outs)
        out_sh = _leaf_shardings(self.out_shardings, out, "out_shardings")
        self._mesh(in_sh + out_sh)  # (one mesh)
        in_sh = _on_one_axis(in_sh, self.__name__)
        out_sh = _on_one_axis(out_sh, self.__name__)
        mesh = self._partition_mesh = self._mesh(in_sh + out_sh)
        run_pipeline(module, ",".join(_transform_passes(module) + [
            "inline", "canonicalize", "cse", "symbol-dce"]))
        grid = _grid_symbol(module, mesh)
        main = next(op.operation for op in module.body.operations
                    if op.operation.name == "func.func"
                    and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
        _unshare_constants(main)
        _check_partitionable(main, self.__name__)
        block = main.regions[0].blocks[0]
        with context, ir.Location.unknown(context):
            ret = block.operations[len(block.operations) - 1]
            with ir.InsertionPoint.at_block_begin(block):
                for arg, sh, aval in zip(block.arguments, in_sh, avals):
                    uses = list(arg.uses)
                    spec = None if sh is None else sh.spec
                    value = _shard(arg, _sharding_value(grid, mesh, spec, len(aval.shape),
                                                        "in_shardings"), True)
                    for use in uses:
                        use.owner.operands[use.operand_number] = value
            with ir.InsertionPoint(ret):
                for i, sh in enumerate(out_sh):
                    v = ret.operands[i]
                    ndim = len(v.type.shape)
                    placed = _shard(v, _sharding_value(grid, mesh, None if sh is None
                                                       else sh.spec, ndim, "out_shardings"),
                                    False)
                    # the call returns the global array on every process
                    if sh is not None and any(p is not None for p in sh.spec):
                        placed = _shard(placed, _sharding_value(grid, mesh, None, ndim,
                                                                "out_shardings"), True)
                        placed = _shard(placed, _sharding_value(grid, mesh, None, ndim,
                                                                "out_shardings"), False)
                    ret.operands[i] = placed
        if stop == "annotated":
            return module, out_tree, in_sh
        run_pipeline(module, "func.func(sharding-propagation{traversal=forward-backward},"
                     "shard-partition),canonicalize,cse")
        return module, out_tree, in_sh

    def __call__(self, *args: Any) -> Any:
        if current_trace() is not None:
            raise NotImplementedError(f"jit({self.__name__}, in_shardings=...) inside another "
                                      "trace: call it on arrays")
        leaves, _ = pytree.tree_flatten(args)
        key = (pytree.tree_structure(args),
               tuple((np.shape(x), abstractify(x).dtype) for x in leaves))
        entry = self._cache.get(key)
        if entry is None:
            with COMPILE_LOCK:
                module, out_tree, in_sh = self._trace(args)
                _require_processes(self._partition_mesh, f"jit({self.__name__})")
                cm = CompiledModule(module, pipeline="autodiff-lower-to-cpu-mpi",
                                    context=module.context)
            entry = self._cache[key] = (cm, out_tree, in_sh)
        cm, out_tree, in_sh = entry
        n = process_count()
        signature = f"{self.__name__}{key}"
        if n > 1 and not _same_on_every_process(signature):
            raise ValueError(f"jit({self.__name__}): the processes were called with "
                             f"different argument shapes or dtypes; process "
                             f"{process_index()} has {_describe(args)}")
        me = process_index()
        blocks = [_block_of(np.asarray(x), sh, me) for x, sh in zip(leaves, in_sh)]
        outs = cm["main"](*blocks)
        if not isinstance(outs, tuple):
            outs = (outs,)
        return pytree.tree_unflatten(out_tree, list(outs))


def _block_of(x: np.ndarray, sharding: NamedSharding | None, rank: int) -> np.ndarray:
    """Process `rank`'s block of global `x` under `sharding`."""
    if sharding is None:
        return x
    mesh = sharding.mesh
    where = np.unravel_index(rank, mesh.shape)
    index = []
    for d, names in sorted(_split_dims(sharding.spec, x.ndim, mesh, "in_shardings").items()):
        axes = [mesh.axis_names.index(n) for n in names]
        g = int(np.ravel_multi_index([where[a] for a in axes], [mesh.shape[a] for a in axes]))
        size = x.shape[d] // _group_size_of(mesh, axes)
        index.append((d, slice(g * size, (g + 1) * size)))
    sl = [slice(None)] * x.ndim
    for d, s in index:
        sl[d] = s
    return np.ascontiguousarray(x[tuple(sl)])


def _group_size_of(mesh: Mesh, axes: Sequence[int]) -> int:
    return int(np.prod([mesh.shape[a] for a in axes]))


def partitioned_jit(f: Callable[..., Any], in_shardings: Any, out_shardings: Any
                    ) -> _PartitionedJit:
    """`jit(f, in_shardings=..., out_shardings=...)` (see _PartitionedJit)."""
    return _PartitionedJit(f, in_shardings, out_shardings)


__all__ = [
    "Mesh", "MpiUnavailableError", "NamedSharding", "PartitionSpec", "all_gather", "axis_index",
    "initialize", "is_available", "mpi_library", "mpiexec", "pmax", "pmean", "pmin",
    "ppermute", "process_count", "process_index", "psum", "psum_scatter", "shard_map",
]


api.PARTITIONED_JIT = partitioned_jit
