"""`--autodiff-shard-to-mpi`: the `shard` dialect's collectives to `mpi` ops (CPU, MPICH ABI).

Upstream MLIR 22's `--convert-shard-to-mpi` lowers `shard.all_reduce` and
`shard.process_linear_index` (and the halo/sharding bookkeeping ops), but
not `shard.all_gather`, `shard.reduce_scatter` or `shard.shift`: it reports
that it failed to legalize them, leaves them in place and still succeeds.
The `mpi` dialect of this build has no allgather/reduce-scatter op either,
and `mpi.comm_size`/`mpi.barrier` have no LLVM lowering. So this pass
rewrites, before upstream's conversion, each collective in terms of what
does lower:

- `shard.all_gather`: every process writes its block into a zero tensor of
  the result's shape (bit patterns: floats are bitcast to integers), and a
  `shard.all_reduce` with `bitwise_or` combines them -- exact, -0.0 and NaN
  payloads included;
- `shard.reduce_scatter`: `shard.all_reduce`, then the process's block;
- `shard.shift` (rotate; the front end's `ppermute` is traced as such shifts,
  which the derivative rules of transforms/rules/shard.py transpose): blocking
  `mpi.send`/`mpi.recv` pairs, ordered along each cycle of the permutation so
  that no two processes wait on each other (`permutation_helper` takes any
  permutation);
- `shard.all_reduce` of a tensor of rank != 1 is done on its flattened
  tensor: MLIR 22's mpi-to-LLVM lowering passes the size of a memref's
  first dimension as the element count (a 2x3 all_reduce reduced 2 numbers).

Each rewritten collective becomes a call of a private helper function (MLIR
text below, parsed by MLIR), which the CPU pipeline inlines.

After upstream's conversion, the communicator each collective splits off
`MPI_COMM_WORLD` (`mpi.comm_split`: one split per call, and MPICH runs out of
communicators after 2,048) is made once per process: a split with color 0
(the group is the whole grid) is the world communicator itself, exact only
when the grid spans every process (the runtime checks that the number of
MPI processes equals the grid's size before the first call); a split for a
collective over part of a grid's axes is made on first use and kept in a
module global, one per process group (`cache_communicators`). Collectives
over part of the grid (several-axis meshes) have their helpers too: the
process's index in its group is row-major over the op's `grid_axes` in
their order, and a shift along one grid axis is a permutation of world ranks.

The module gets the `dlti.map<"MPI:Implementation" = "MPICH">` attribute
upstream's mpi-to-LLVM conversion reads (without it, MLIR 22 reports "target
op of failed DLTI query" errors); the `mpich` wheel's `libmpi.so.12` has the
MPICH ABI those constants belong to.

`--autodiff-lower-to-cpu-mpi` is this pass followed by `--autodiff-lower-to-cpu`,
with the `mpi` ops hidden from `buffer-deallocation-pipeline` (it rejects ops
without memory effects, which the `mpi` ops of MLIR 22 do not declare).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, builtin, func, memref, scf

from ..dialects.vocabulary import HIDDEN_MPI_OP, MPI_GROUP, MPI_PROCESSES
from .ad_support import post_order_ops
from .diagnostics import fail
from .passes import Pass, PipelineElement, register

MPI_DLTI = '#dlti.map<"MPI:Implementation" = "MPICH">'

#: Prefix of the helper functions this pass adds (inlined by the CPU pipeline).
HELPER_PREFIX = "__autodiff_mpi_"



#: Element types with an MPI datatype in the mpi dialect's lowering (signless
#: integers are MPI's signed ones).
MPI_ELEMENT_TYPES = {"f32", "f64", "i8", "i16", "i32", "i64"}

_INT_OF_FLOAT = {"f16": "i16", "bf16": "i16", "f32": "i32", "f64": "i64"}


def ensure_mpich_dlti(module: ir.Operation) -> None:
    """Give `module` the DLTI entry naming the MPI implementation (MPICH), unless set."""
    if "dlti.map" not in module.attributes:
        module.attributes["dlti.map"] = ir.Attribute.parse(MPI_DLTI, module.context)


def _grid_shape(op: ir.Operation) -> tuple[str, list[int]]:
    """The grid symbol name and static shape of collective `op`."""
    name = ir.FlatSymbolRefAttr(op.attributes["grid"]).value
    module = op
    while module.name != "builtin.module":
        module = module.parent
    for g in module.regions[0].blocks[0].operations:
        g = g.operation
        if g.name == "shard.grid" and ir.StringAttr(g.attributes["sym_name"]).value == name:
            shape = list(ir.DenseI64ArrayAttr(g.attributes["shape"]))
            if any(s < 0 for s in shape):
                raise fail(op, f"autodiff-shard-to-mpi: grid @{name} must have a static shape")
            return name, shape
    raise fail(op, f"autodiff-shard-to-mpi: no grid @{name}")


def _group(op: ir.Operation) -> tuple[str, list[int], list[int], int]:
    """Grid name, grid shape, grid axes (in the op's order) and group size of `op`."""
    name, shape = _grid_shape(op)
    axes = list(ir.DenseI16ArrayAttr(op.attributes["grid_axes"])) \
        if "grid_axes" in op.attributes else []
    if len(set(axes)) != len(axes) or any(not 0 <= a < len(shape) for a in axes):
        raise fail(op, f"autodiff-shard-to-mpi: '{op.name}' over grid axes {axes} of grid "
                       f"@{name} (shape {shape}): the axes must be distinct axes of the grid")
    return name, shape, axes, _numel([shape[a] for a in axes])


def _group_index(grid: str, shape: Sequence[int], axes: Sequence[int], out: str
                 ) -> tuple[str, str]:
    """(lines, SSA name) computing this process's index in its group (the processes
    that differ only along grid `axes`), row-major over `axes` in their order (the
    order jax's all_gather/psum_scatter over a tuple of axes use)."""
    if list(axes) == list(range(len(shape))):
        return f"    {out} = shard.process_linear_index on @{grid} : index\n", out
    if not axes:
        return f"    {out} = arith.constant 0 : index\n", out
    names = ", ".join(f"{out}_m{j}" for j in range(len(axes)))
    lines = (f"    {names} = shard.process_multi_index on @{grid} axes = "
             f"[{', '.join(str(a) for a in axes)}] : "
             + ", ".join("index" for _ in axes) + "\n")
    acc = f"{out}_m0"
    for j in range(1, len(axes)):
        lines += (f"    {out}_s{j} = arith.constant {shape[axes[j]]} : index\n"
                  f"    {out}_p{j} = arith.muli {acc}, {out}_s{j} : index\n"
                  f"    {out}_a{j} = arith.addi {out}_p{j}, {out}_m{j} : index\n")
        acc = f"{out}_a{j}"
    return lines, acc


def _tensor(op_value: ir.Value, op: ir.Operation) -> ir.RankedTensorType:
    t = op_value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        raise fail(op, f"autodiff-shard-to-mpi: '{op.name}' needs a statically shaped "
                       f"tensor, got {t}")
    return t


def _ttype(shape: Sequence[int], elem: str) -> str:
    return "tensor<" + "".join(f"{s}x" for s in shape) + elem + ">"


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _flatten(value: str, shape: Sequence[int], elem: str, out: str) -> str:
    """Lines collapsing `value` (any rank) to a 1-D tensor named `out`."""
    if len(shape) == 1:
        return f"    {out} = tensor.cast {value} : {_ttype(shape, elem)} to {_ttype(shape, elem)}\n"
    groups = "[" + ", ".join(str(i) for i in range(len(shape))) + "]" if shape else ""
    if not shape:
        return (f"    {out} = tensor.expand_shape {value} [] output_shape [1] : "
                f"{_ttype(shape, elem)} into {_ttype([1], elem)}\n")
    return (f"    {out} = tensor.collapse_shape {value} [{groups}] : {_ttype(shape, elem)} "
            f"into {_ttype([_numel(shape)], elem)}\n")


def _unflatten(value: str, shape: Sequence[int], elem: str, out: str) -> str:
    """Lines giving 1-D tensor `value` the shape `shape` as `out`."""
    flat = _ttype([_numel(shape)], elem)
    if len(shape) == 1:
        return f"    {out} = tensor.cast {value} : {flat} to {flat}\n"
    if not shape:
        return f"    {out} = tensor.collapse_shape {value} [] : {flat} into {_ttype(shape, elem)}\n"
    groups = "[" + ", ".join(str(i) for i in range(len(shape))) + "]"
    dims = ", ".join(str(s) for s in shape)
    return (f"    {out} = tensor.expand_shape {value} [{groups}] output_shape [{dims}] : "
            f"{flat} into {_ttype(shape, elem)}\n")


def _all_reduce_helper(fname: str, grid: str, axes: list[int], reduction: str,
                       shape: list[int], elem: str) -> str:
    t = _ttype(shape, elem)
    flat = _ttype([_numel(shape)], elem)
    return (
        f"  func.func private @{fname}(%x: {t}) -> {t} {{\n"
        + _flatten("%x", shape, elem, "%f")
        + f"    %r = shard.all_reduce %f on @{grid} grid_axes = {axes} reduction = {reduction}"
          f" : {flat} -> {flat}\n"
        + _unflatten("%r", shape, elem, "%y")
        + f"    return %y : {t}\n  }}\n")


def _all_gather_helper(fname: str, grid: str, grid_shape: list[int], axes: list[int],
                       axis: int, in_shape: list[int], out_shape: list[int], elem: str) -> str:
    bits = _INT_OF_FLOAT.get(elem, elem)
    tin, tout = _ttype(in_shape, elem), _ttype(out_shape, elem)
    iin, iout = _ttype(in_shape, bits), _ttype(out_shape, bits)
    flat = _ttype([_numel(out_shape)], bits)
    offsets = ", ".join("%off" if d == axis else "0" for d in range(len(in_shape)))
    sizes = ", ".join(str(s) for s in in_shape)
    strides = ", ".join("1" for _ in in_shape)
    cast_in = (f"    %xi = arith.bitcast %x : {tin} to {iin}\n" if bits != elem
               else f"    %xi = tensor.cast %x : {tin} to {iin}\n")
    cast_out = (f"    %y = arith.bitcast %u : {iout} to {tout}\n" if bits != elem
                else f"    %y = tensor.cast %u : {iout} to {tout}\n")
    index, i = _group_index(grid, grid_shape, axes, "%i")
    return (
        f"  func.func private @{fname}(%x: {tin}) -> {tout} {{\n"
        + index +
        f"    %k = arith.constant {in_shape[axis]} : index\n"
        f"    %off = arith.muli {i}, %k : index\n"
        + cast_in +
        f"    %zero = arith.constant 0 : {bits}\n"
        f"    %e = tensor.empty() : {iout}\n"
        f"    %z = linalg.fill ins(%zero : {bits}) outs(%e : {iout}) -> {iout}\n"
        f"    %p = tensor.insert_slice %xi into %z[{offsets}] [{sizes}] [{strides}] : "
        f"{iin} into {iout}\n"
        + _flatten("%p", out_shape, bits, "%f")
        + f"    %r = shard.all_reduce %f on @{grid} grid_axes = {axes} reduction = bitwise_or"
          f" : {flat} -> {flat}\n"
        + _unflatten("%r", out_shape, bits, "%u")
        + cast_out
        + f"    return %y : {tout}\n  }}\n")


def _reduce_scatter_helper(fname: str, grid: str, grid_shape: list[int], axes: list[int],
                           reduction: str, axis: int, in_shape: list[int],
                           out_shape: list[int], elem: str) -> str:
    tin, tout = _ttype(in_shape, elem), _ttype(out_shape, elem)
    flat = _ttype([_numel(in_shape)], elem)
    offsets = ", ".join("%off" if d == axis else "0" for d in range(len(in_shape)))
    sizes = ", ".join(str(s) for s in out_shape)
    strides = ", ".join("1" for _ in in_shape)
    index, i = _group_index(grid, grid_shape, axes, "%i")
    return (
        f"  func.func private @{fname}(%x: {tin}) -> {tout} {{\n"
        + _flatten("%x", in_shape, elem, "%f")
        + f"    %r = shard.all_reduce %f on @{grid} grid_axes = {axes} reduction = {reduction}"
          f" : {flat} -> {flat}\n"
        + _unflatten("%r", in_shape, elem, "%s")
        + index +
        f"    %k = arith.constant {out_shape[axis]} : index\n"
        f"    %off = arith.muli {i}, %k : index\n"
        f"    %y = tensor.extract_slice %s[{offsets}] [{sizes}] [{strides}] : {tin} to {tout}\n"
        f"    return %y : {tout}\n  }}\n")


def permutation_helper(fname: str, grid: str, perm: Sequence[tuple[int, int]],
                       shape: list[int], elem: str) -> str:
    """A helper sending each process's tensor to its image under `perm` (pairs
    (source, destination) of linear process indices; a process no pair sends
    to gets zeros), with blocking `mpi.send`/`mpi.recv`: along each chain or
    cycle of the permutation the first process sends before it receives and
    every other one receives first, so the messages flow without deadlock."""
    dest = dict(perm)
    src = {d: s for s, d in perm}
    t = _ttype(shape, elem)
    n = _numel(shape)
    flat = _ttype([n], elem)
    mflat = f"memref<{n}x{elem}>"
    # The process that sends first in each cycle/chain: a chain's head (no
    # source), a cycle's smallest member.
    first = set()
    for p in sorted(set(dest) | set(src)):
        if p not in src:
            first.add(p)
    seen: set[int] = set()
    for p in sorted(dest):
        if p in seen or p in first:
            continue
        cycle, q = [], p
        while q in dest and q not in cycle:
            cycle.append(q)
            q = dest[q]
        seen.update(cycle)
        if q == p:
            first.add(min(cycle))
    zero = "0.0" if elem.startswith(("f", "bf")) else "0"
    cases = []
    for p in sorted(set(dest) | set(src)):
        body = []
        send = f"        mpi.send(%sb, %tag, %c{dest[p]}, %w) : {mflat}, i32, i32\n" \
            if p in dest and dest[p] != p else ""
        recv = f"        mpi.recv(%rb, %tag, %c{src[p]}, %w) : {mflat}, i32, i32\n" \
            if p in src and src[p] != p else ""
        if p in dest and dest[p] == p:  # a fixed point keeps its own value
            body.append(f"        memref.copy %sb, %rb : {mflat} to {mflat}\n")
        body.append(send + recv if p in first else recv + send)
        cases.append(f"      case {p} {{\n" + "".join(body) + "        scf.yield\n      }\n")
    ranks = sorted(set(dest) | set(src))
    consts = "".join(f"    %c{r} = arith.constant {r} : i32\n"
                     for r in sorted(set(dest.values()) | set(src.values())))
    return (
        f"  func.func private @{fname}(%x: {t}) -> {t} {{\n"
        + _flatten("%x", shape, elem, "%f")
        + f"    %sb = bufferization.to_buffer %f read_only : {flat} to {mflat}\n"
        f"    %rb = memref.alloc() : {mflat}\n"
        f"    %zero = arith.constant {zero} : {elem}\n"
        f"    linalg.fill ins(%zero : {elem}) outs(%rb : {mflat})\n"
        f"    %w = mpi.comm_world : !mpi.comm\n"
        f"    %tag = arith.constant 0 : i32\n"
        + consts +
        f"    %i = shard.process_linear_index on @{grid} : index\n"
        + ("    scf.index_switch %i\n" + "".join(cases) + "      default {\n      }\n"
           if ranks else "")
        + f"    %r = bufferization.to_tensor %rb restrict : {mflat} to {flat}\n"
        + _unflatten("%r", shape, elem, "%y")
        + f"    return %y : {t}\n  }}\n")


def _reduction(op: ir.Operation) -> str:
    if "reduction" not in op.attributes:
        return "sum"
    # e.g. `#shard<partial max>`: the printed attribute names the kind last.
    text = str(op.attributes["reduction"])
    return text.rstrip(">").split()[-1]


#: Attribute of a helper function naming the process group (grid and axes) of its
#: collective: its communicator is cached under that name (see cache_communicators).
GROUP_ATTR = MPI_GROUP


def _helper_for(op: ir.Operation) -> tuple[str, str] | None:
    """(name, MLIR text) of the helper function replacing collective `op`, or None."""
    if op.name not in ("shard.all_reduce", "shard.all_gather", "shard.reduce_scatter",
                       "shard.shift"):
        return None
    grid, grid_shape, axes, size = _group(op)
    whole = sorted(axes) == list(range(len(grid_shape)))
    # helpers over part of the grid (or its axes in another order) name the axes
    where = grid if axes == list(range(len(grid_shape))) else \
        f"{grid}_axes_{'_'.join(str(a) for a in axes)}"
    tin = _tensor(op.operands[0], op)
    tout = _tensor(op.results[0], op)
    elem = str(tin.element_type)
    # MPI datatypes upstream's mpi-to-LLVM lowering knows (others hit an assertion
    # there); all_gather moves bits, so it also takes 16-bit floats.
    known = MPI_ELEMENT_TYPES | (set(_INT_OF_FLOAT) if op.name == "shard.all_gather" else set())
    if elem not in known:
        raise fail(op, f"autodiff-shard-to-mpi: '{op.name}' of {elem} elements is not "
                       f"supported (element types: {', '.join(sorted(known))})")
    shape, out_shape = list(tin.shape), list(tout.shape)
    sig = "x".join(str(s) for s in shape) + "x" + elem
    if op.name == "shard.all_reduce":
        if len(shape) == 1 and whole:
            return None  # upstream's lowering is right for 1-D tensors
        red = _reduction(op)
        fname = f"{HELPER_PREFIX}all_reduce_{red}_{where}_{sig}"
        return fname, _all_reduce_helper(fname, grid, axes, red, shape, elem)
    if op.name == "shard.all_gather":
        axis = ir.IntegerAttr(op.attributes["gather_axis"]).value
        if out_shape[axis] != shape[axis] * size:
            raise fail(op, f"autodiff-shard-to-mpi: all_gather over {size} processes of "
                           f"{tin} must give size {shape[axis] * size} along axis {axis}")
        fname = f"{HELPER_PREFIX}all_gather_{axis}_{where}_{sig}"
        return fname, _all_gather_helper(fname, grid, grid_shape, axes, axis, shape,
                                          out_shape, elem)
    if op.name == "shard.reduce_scatter":
        axis = ir.IntegerAttr(op.attributes["scatter_axis"]).value
        if shape[axis] != out_shape[axis] * size:
            raise fail(op, f"autodiff-shard-to-mpi: reduce_scatter over {size} processes of "
                           f"{tin} must give size {shape[axis] // size} along axis {axis}")
        red = _reduction(op)
        fname = f"{HELPER_PREFIX}reduce_scatter_{red}_{axis}_{where}_{sig}"
        return fname, _reduce_scatter_helper(fname, grid, grid_shape, axes, red, axis, shape,
                                             out_shape, elem)
    # shard.shift: along grid axis `shift_axis`, a permutation of the world's ranks
    if "rotate" not in op.attributes:
        raise fail(op, "autodiff-shard-to-mpi: only rotating shard.shift is supported")
    along = ir.IntegerAttr(op.attributes["shift_axis"]).value
    if along not in axes:
        raise fail(op, f"autodiff-shard-to-mpi: shard.shift along grid axis {along}, which "
                       f"is not one of its grid_axes {axes}")
    offset = ir.IntegerAttr(op.attributes["offset"]).value
    n = grid_shape[along]
    perm = []
    for p in range(_numel(grid_shape)):
        index = list(np.unravel_index(p, grid_shape))
        index[along] = (index[along] + offset) % n
        perm.append((p, int(np.ravel_multi_index(index, grid_shape))))
    fname = f"{HELPER_PREFIX}shift_{offset % n}_{grid}_axis_{along}_{sig}" \
        if len(grid_shape) > 1 else f"{HELPER_PREFIX}shift_{offset % n}_{grid}_{sig}"
    return fname, permutation_helper(fname, grid, perm, shape, elem)


def add_helper(module: ir.Operation, name: str, text: str) -> None:
    """Add private helper function `name` (MLIR `text`) to `module` unless it has it."""
    body = module.regions[0].blocks[0]
    for op in body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return
    # Parsed beside the module's grids: the helper's shard ops name one.
    grids = "".join(str(op) + "\n" for op in body.operations
                    if op.operation.name == "shard.grid")
    holder = ir.Module.parse(grids + text, module.context)
    for op in holder.body.operations:
        if op.operation.name == "func.func":
            body.append(op.operation.detach_from_parent())
            return


@register
@dataclasses.dataclass(frozen=True)
class ShardToMpi(Pass):
    name = "autodiff-shard-to-mpi"
    summary = "Lower shard collectives to mpi ops (upstream's conversion plus the missing ones)"

    def run(self, module: ir.Operation) -> None:
        ensure_mpich_dlti(module)
        for op in post_order_ops(module):
            helper = _helper_for(op)
            if helper is None:
                continue
            name, text = helper
            add_helper(module, name, text)
            grid, _, axes, _ = _group(op)
            _mark_group(module, name, f"{grid}_axes_{'_'.join(str(a) for a in axes)}")
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(name),
                                   [op.operands[0]])
            op.results[0].replace_all_uses_with(call.results[0])
            op.erase()
        from .pipeline import run_pipeline

        run_pipeline(module, ["convert-shard-to-mpi"])
        cache_communicators(module)
        drop_grids(module)


def drop_grids(module: ir.Operation) -> None:
    """Erase the `shard.grid` ops once no shard op is left (they have no LLVM
    lowering), recording their common number of processes in `MPI_PROCESSES`."""
    grids, sizes = [], set()
    for op in post_order_ops(module):
        if op.name == "shard.grid":
            grids.append(op)
            sizes.add(_numel(list(ir.DenseI64ArrayAttr(op.attributes["shape"]))))
        elif op.name.startswith("shard."):
            raise fail(op, f"autodiff-shard-to-mpi: '{op.name}' has no lowering to mpi ops")
    if len(sizes) > 1:
        raise fail(grids[1], "autodiff-shard-to-mpi: every grid of a module must have as many "
                             f"processes as the MPI world; these have {sorted(sizes)}")
    for g in grids:
        g.erase()
    if sizes:
        module.attributes[MPI_PROCESSES] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64, module.context), sizes.pop())


def _defining_op_name(value: ir.Value) -> str | None:
    owner = value.owner
    return owner.name if isinstance(owner, (ir.Operation, ir.OpView)) else None


def _mark_group(module: ir.Operation, fname: str, group: str) -> None:
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == fname:
            op.attributes[GROUP_ATTR] = ir.StringAttr.get(group, module.context)
            return


def _enclosing_function(op: ir.Operation) -> ir.Operation | None:
    while op is not None and op.name != "func.func":
        op = op.parent
    return op


def cache_communicators(module: ir.Operation) -> None:
    """Make each communicator upstream's conversion splits off `MPI_COMM_WORLD` once
    per process, not once per collective call (MPICH runs out after 2,048).

    A split with color 0 (the group is the whole grid) becomes the world
    communicator itself. Any other `mpi.comm_split(%world, %color, %key)` is
    done on first use only: its communicator (an MPICH handle, an integer) is
    kept in a private `memref.global` of the module, one per process group
    (the helper function's `GROUP_ATTR`: grid and axes) or, for a split
    outside a helper, one per split op; later calls load it. The color and
    key depend only on the process and the group, so the cached communicator
    is the one every later split would have made."""
    body = module.regions[0].blocks[0]
    globals_made: set[str] = set()
    count = 0
    for op in post_order_ops(module):
        if op.name != "mpi.comm_split":
            continue
        world, color, key = op.operands[0], op.operands[1], op.operands[2]
        if _defining_op_name(world) == "mpi.comm_world" \
                and _defining_op_name(color) == "arith.constant" \
                and ir.IntegerAttr(color.owner.attributes["value"]).value == 0:
            op.results[0].replace_all_uses_with(world)
            op.erase()
            continue
        fn = _enclosing_function(op)
        group = ir.StringAttr(fn.attributes[GROUP_ATTR]).value \
            if fn is not None and GROUP_ATTR in fn.attributes else f"split_{count}"
        count += 1
        name = f"{HELPER_PREFIX}comm_{group}"
        with module.context, op.location:
            i64 = ir.IntegerType.get_signless(64)
            cell = ir.MemRefType.get([], i64)
            if name not in globals_made:
                globals_made.add(name)
                with ir.InsertionPoint.at_block_begin(body):
                    memref.GlobalOp(name, ir.TypeAttr.get(cell), sym_visibility="private",
                                    initial_value=ir.DenseElementsAttr.get_splat(
                                        ir.RankedTensorType.get([], i64),
                                        ir.IntegerAttr.get(i64, 0)))
            with ir.InsertionPoint(op):
                ref = memref.GetGlobalOp(cell, name).result
                held = memref.LoadOp(ref, []).result
                zero = arith.ConstantOp(i64, 0).result
                unset = arith.CmpIOp(arith.CmpIPredicate.eq, held, zero).result
                branch = scf.IfOp(unset, [i64], has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    made = ir.Operation.create("mpi.comm_split", results=[op.results[0].type],
                                               operands=[world, color, key])
                    # (the mpi-to-LLVM conversion makes !mpi.comm an i64 for MPICH;
                    # reconcile-unrealized-casts folds these casts away)
                    as_int = builtin.UnrealizedConversionCastOp([i64], made.results).result
                    memref.StoreOp(as_int, ref, [])
                    scf.YieldOp([as_int])
                with ir.InsertionPoint(branch.else_block):
                    scf.YieldOp([held])
                comm = builtin.UnrealizedConversionCastOp([op.results[0].type],
                                                          [branch.results[0]]).result
            op.results[0].replace_all_uses_with(comm)
            op.erase()


@dataclasses.dataclass(frozen=True)
class HideMpiOps(Pass):
    """Before `buffer-deallocation-pipeline`: each `mpi` op on memrefs becomes a call
    of a private declaration carrying the op's name and attributes."""

    name = "autodiff-hide-mpi-ops"
    summary = "Hide mpi ops on memrefs from buffer deallocation"

    def run(self, module: ir.Operation) -> None:
        body = module.regions[0].blocks[0]
        count = 0
        for op in post_order_ops(module):
            if not op.name.startswith("mpi.") or op.results:
                continue
            if not any(isinstance(v.type, ir.MemRefType) for v in op.operands):
                continue
            name = f"{HELPER_PREFIX}hidden_{count}"
            count += 1
            types = [v.type for v in op.operands]
            with ir.InsertionPoint.at_block_begin(body), op.location:
                decl = func.FuncOp(name, ir.FunctionType.get(types, []), visibility="private")
            attrs = {op.attributes[i].name: op.attributes[i].attr
                     for i in range(len(op.attributes))}
            decl.attributes[HIDDEN_MPI_OP] = ir.DictAttr.get(
                {"name": ir.StringAttr.get(op.name), "attributes": ir.DictAttr.get(attrs)})
            with ir.InsertionPoint(op), op.location:
                func.CallOp([], ir.FlatSymbolRefAttr.get(name), list(op.operands))
            op.erase()


@dataclasses.dataclass(frozen=True)
class RestoreMpiOps(Pass):
    """After `buffer-deallocation-pipeline`: the calls HideMpiOps made become the ops again."""

    name = "autodiff-restore-mpi-ops"
    summary = "Restore the mpi ops HideMpiOps hid"

    def run(self, module: ir.Operation) -> None:
        decls = {}
        for op in list(module.regions[0].blocks[0].operations):
            op = op.operation
            if op.name == "func.func" and HIDDEN_MPI_OP in op.attributes:
                decls[ir.StringAttr(op.attributes["sym_name"]).value] = op
        if not decls:
            return
        for op in post_order_ops(module):
            if op.name != "func.call":
                continue
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee not in decls:
                continue
            info = ir.DictAttr(decls[callee].attributes[HIDDEN_MPI_OP])
            attrs = ir.DictAttr(info["attributes"])
            named = {attrs[i].name: attrs[i].attr for i in range(len(attrs))}
            with ir.InsertionPoint(op), op.location:
                ir.Operation.create(ir.StringAttr(info["name"]).value, results=[],
                                    operands=list(op.operands), attributes=named)
            op.erase()
        for decl in decls.values():
            decl.erase()


@register
@dataclasses.dataclass(frozen=True)
class LowerToCpuMpi(Pass):
    name = "autodiff-lower-to-cpu-mpi"
    summary = ("Lower shard collectives to mpi ops, then bufferize and lower to LLVM "
               "(calls into an MPICH-ABI libmpi)")

    threads: int = dataclasses.field(default=1, metadata={
        "help": "threads for large kernels (as --autodiff-lower-to-cpu)"})

    def expand(self) -> Sequence[PipelineElement]:
        from .cpu.pipeline import LowerToCpu

        steps: list[PipelineElement] = [ShardToMpi()]
        for step in LowerToCpu(threads=self.threads).expand():
            if step == "buffer-deallocation-pipeline":
                steps += [HideMpiOps(), step, RestoreMpiOps()]
            elif step == "convert-func-to-llvm":
                # mpi ops to MPI calls (upstream's ConvertToLLVM interface of the mpi dialect)
                steps += ["convert-to-llvm{filter-dialects=mpi}", step]
            else:
                steps.append(step)
        return steps
