"""`SplitLargeFunctions`: outline a huge function body into several functions.

A large train step (the transformer's, ~770 loops) lowers to ONE function,
and LLVM's loop passes (IndVarSimplify, loop vectorization, unrolling) and
code generation cost more than linearly in a function's size. This pass cuts
the body of every function of at least `SPLIT_MIN_OPS` operations into
contiguous runs of its top-level operations of about `CHUNK_OPS` operations
each, moves each run into a private function and calls them in order. Each
part has internal linkage (the ExecutionEngine then builds no packed-argument
wrapper for it, whose hundreds of stores made LLVM's codegen quadratic) and
LLVM's `noinline` (LLVM would otherwise inline a function called once right
back).

It runs on the bufferized, deallocated form just before the LLVM lowering,
where the top-level operations are loops, allocations, deallocations and
constants. Buffers that several runs use (and their views) stay allocated in
the caller, just before the call of the run that allocated them, and are
passed; constants are cloned into each run that uses them; other values a
later run or the terminator uses are returned. Deallocations move with their
run, nothing is copied, and the order of every operation with side effects is
kept, so nothing computed changes. A function where a run would return stack
memory is left whole.
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from ..passes import Pass, register

#: Functions with at least this many operations (nested ones included) at
#: this point of the pipeline are split; smaller ones are left as they are.
#: Was 6,000; on a 2-vCPU AMD EPYC (Zen 4) the MLP train step's @main has 6.4k
#: ops there, and splitting it made its first call slower (2.34-2.38 s against
#: 1.93-2.20 s unsplit, three alternations, steady state alike), while the CNN
#: train step (~10k) still gains (1.99-2.16 s split, 2.19-2.60 unsplit).
SPLIT_MIN_OPS = 8_000

#: About this many operations per outlined function.
CHUNK_OPS = 2_000

#: Operations (without regions) cloned into each run that uses their result
#: instead of being passed, when their operands are such results too: constants
#: and the casts of constants the LLVM lowering of vectors left behind.
_CLONED = frozenset({
    "arith.constant", "ub.poison", "memref.get_global", "llvm.mlir.constant",
    "llvm.mlir.poison", "llvm.mlir.undef", "llvm.mlir.zero", "llvm.mlir.addressof",
    "builtin.unrealized_conversion_cast",
})


#: View operations of one buffer operand that stay in @main with the buffer.
_VIEWS = frozenset({"memref.collapse_shape", "memref.expand_shape", "memref.subview",
                    "memref.cast", "memref.reinterpret_cast"})


@dataclasses.dataclass
class _Top:
    """One top-level operation: its size and the values it uses from outside it."""

    op: ir.Operation
    position: int  # among the function's top-level ops
    size: int
    # (user, operand index, value) for each operand defined outside `op`
    outside: list[tuple[ir.Operation, int, ir.Value]]


def _scan(top: ir.Operation, position: int) -> _Top:
    defined: set[ir.Value] = set()
    outside: list[tuple[ir.Operation, int, ir.Value]] = []
    size = 0

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal size
        size += 1
        for i, v in enumerate(op.operands):
            if v not in defined:
                outside.append((op, i, v))
        for region in op.regions:
            for block in region.blocks:
                defined.update(block.arguments)
        defined.update(op.results)
        return ir.WalkResult.ADVANCE

    top.walk(visit, ir.WalkOrder.PRE_ORDER)
    return _Top(top, position, size, outside)


def _chunks(tops: list[_Top], chunk_ops: int) -> list[list[_Top]]:
    chunks: list[list[_Top]] = [[]]
    size = 0
    for top in tops:
        if size >= chunk_ops:
            chunks.append([])
            size = 0
        chunks[-1].append(top)
        size += top.size
    if len(chunks) > 1 and size < chunk_ops // 2:
        chunks[-2].extend(chunks.pop())
    return chunks


def _on_stack(v: ir.Value, position: dict[ir.Value, int]) -> bool:
    """Whether top-level value `v` is (a view of) a stack allocation."""
    while True:
        op = v.owner.operation
        if op.name in ("memref.alloca", "llvm.alloca"):
            return True
        if op.name not in _VIEWS or not op.operands or op.operands[0] not in position:
            return False
        v = op.operands[0]


def _has_ops(op: ir.Operation, n: int) -> bool:
    """Whether `op` holds at least `n` operations (itself included)."""
    count = 0

    def visit(_: ir.Operation) -> ir.WalkResult:
        nonlocal count
        count += 1
        return ir.WalkResult.INTERRUPT if count >= n else ir.WalkResult.ADVANCE

    op.walk(visit)
    return count >= n


def symbol_names(module: ir.Operation) -> set[str]:
    """The symbol names of `module`'s top-level operations."""
    return {ir.StringAttr(op.attributes["sym_name"]).value
            for op in module.regions[0].blocks[0].operations
            if "sym_name" in op.operation.attributes}


def single_block_functions(module: ir.Operation) -> list[ir.Operation]:
    """`module`'s func.func operations with a body of one block (a snapshot: functions
    added while the caller goes through them are not in it)."""
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) == 1]


def unique_name(name: str, names: set[str]) -> str:
    """`name`, with "_" appended until it is not in `names`; added to `names`."""
    while name in names:
        name += "_"
    names.add(name)
    return name


def outlined_function(name: str, args: list[ir.Value], result_types: list[ir.Type],
                      before: ir.Operation, loc: ir.Location) -> tuple[ir.OpView, ir.Block]:
    """A private function `name` taking `args`' types, inserted before `before`, with
    LLVM's `noinline` and internal linkage; it and its (empty) entry block."""
    from mlir.dialects import func

    with ir.InsertionPoint(before), loc:
        fn = func.FuncOp(name, ([v.type for v in args], result_types))
    fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
    # (kept by func-to-llvm as the llvm.func's `passthrough`, unlike `no_inline`)
    fn.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
    # internal: the ExecutionEngine makes no packed-argument wrapper for it
    fn.attributes["llvm.linkage"] = ir.Attribute.parse("#llvm.linkage<internal>")
    with loc:
        entry = fn.add_entry_block()
    return fn, entry


@register
@dataclasses.dataclass(frozen=True)
class SplitLargeFunctions(Pass):
    name = "autodiff-split-large-functions"
    summary = "Outline runs of a large function's top-level ops into no-inline functions"

    min_ops: int = dataclasses.field(default=SPLIT_MIN_OPS, metadata={
        "help": "split functions of at least this many operations"})
    chunk_ops: int = dataclasses.field(default=CHUNK_OPS, metadata={
        "help": "about this many operations per outlined function"})

    def run(self, module: ir.Operation) -> None:
        names = symbol_names(module)
        for fn in single_block_functions(module):
            self._split(fn, names)

    def _split(self, fn: ir.Operation, names: set[str]) -> None:
        from mlir.dialects import func

        block = fn.regions[0].blocks[0]
        ops = list(block.operations)
        if len(ops) < 3:
            return
        if not _has_ops(fn, self.min_ops + 1):
            return
        term = ops[-1].operation
        tops = [_scan(op.operation, i) for i, op in enumerate(ops[:-1])]
        chunks = _chunks(tops, self.chunk_ops)
        if len(chunks) < 2:
            return

        owner: dict[ir.Value, int] = {}  # top-level result -> its chunk
        cloned: dict[ir.Value, int] = {}  # cloned constant's result -> its op's position
        position: dict[ir.Value, int] = {}  # top-level result -> its op's position
        for c, chunk in enumerate(chunks):
            for t in chunk:
                op = t.op
                clone = (op.name in _CLONED and not op.regions
                         and all(v in cloned for v in op.operands))
                for r in op.results:
                    owner[r] = c
                    position[r] = t.position
                    if clone:
                        cloned[r] = t.position
        live_in, live_out = self._live(chunks, owner, cloned, term)
        # Buffers (and views of them) that outlive their run stay in @main, where
        # they were: passed to the runs that use them instead of returned.
        kept: set[int] = set()  # positions of the ops that stay
        for outs in live_out:
            for v in outs:
                chain = [v]
                while (chain[-1].owner.operation.name in _VIEWS
                       and len(chain[-1].owner.operation.operands) == 1
                       and chain[-1].owner.operation.operands[0] in owner):
                    chain.append(chain[-1].owner.operation.operands[0])
                op = chain[-1].owner.operation
                if op.name in ("memref.alloc", "memref.alloca") and not op.operands:
                    kept.update(position[u] for u in chain)
        if kept:
            for v in [v for v in owner if position[v] in kept]:
                del owner[v]
            live_in, live_out = self._live(chunks, owner, cloned, term)
        if any(_on_stack(v, position) for outs in live_out for v in outs):
            return  # a run would return its stack memory: leave the function whole

        base = ir.StringAttr(fn.attributes["sym_name"]).value
        anchor = term
        before = fn  # the parts precede the function, in order
        for c in reversed(range(len(chunks))):
            chunk = chunks[c]
            if all(t.position in kept or (t.op.results and t.op.results[0] in cloned)
                   for t in chunk):
                anchor = chunk[0].op  # nothing but buffers and constants: left in @main
                continue
            args = [v for v in live_in[c] if v not in cloned]
            outs = list(live_out[c])
            name = unique_name(f"{base}_part{c}", names)
            loc = chunk[0].op.location
            part, entry = outlined_function(name, args, [v.type for v in outs], before, loc)
            mapping: dict[ir.Value, ir.Value] = dict(zip(args, entry.arguments))
            self._clone_constants([v for v in live_in[c] if v in cloned], cloned, mapping,
                                  entry)
            with ir.InsertionPoint(entry), loc:
                ret = func.ReturnOp(outs)
            for t in chunk:
                if t.position not in kept:
                    t.op.move_before(ret)
            for t in chunk:
                if t.position in kept:
                    continue
                for user, i, v in t.outside:
                    new = mapping.get(v)
                    if new is not None:
                        user.operands[i] = new
            with ir.InsertionPoint(anchor), loc:
                call = func.CallOp([v.type for v in outs], ir.FlatSymbolRefAttr.get(name), args)
            for k, v in enumerate(outs):
                for use in list(v.uses):
                    user = use.owner.operation
                    if user.parent == fn:  # a later part's call or the terminator
                        user.operands[use.operand_number] = call.results[k]
            # the next call goes before this run's buffers, which stay where they were
            anchor = next((t.op for t in chunk if t.position in kept), call.operation)
            before = part.operation

    @staticmethod
    def _live(chunks: list[list[_Top]], owner: dict[ir.Value, int],
              cloned: dict[ir.Value, int], term: ir.Operation
              ) -> tuple[list[dict[ir.Value, None]], list[dict[ir.Value, None]]]:
        """Per run, the values it uses from outside it (arguments or clones) and the
        values it defines that later runs or the terminator use (its results)."""
        live_in: list[dict[ir.Value, None]] = []
        live_out: list[dict[ir.Value, None]] = [{} for _ in chunks]
        for c, chunk in enumerate(chunks):
            ins: dict[ir.Value, None] = {}
            for t in chunk:
                for _, _, v in t.outside:
                    if owner.get(v, -1) == c:
                        continue
                    ins[v] = None
                    if v in owner and v not in cloned:
                        live_out[owner[v]][v] = None
            live_in.append(ins)
        for v in term.operands:
            if v in owner:
                live_out[owner[v]][v] = None
        return live_in, live_out

    @staticmethod
    def _clone_constants(values: list[ir.Value], cloned: dict[ir.Value, int],
                         mapping: dict[ir.Value, ir.Value], entry: ir.Block) -> None:
        """Clone the ops of `values` and of the constants they are computed from into
        `entry`, in their original order, mapping each result to its clone's."""
        ops: dict[int, ir.Operation] = {}
        stack = list(values)
        while stack:
            v = stack.pop()
            if cloned[v] in ops:
                continue
            op = v.owner.operation
            ops[cloned[v]] = op
            stack.extend(op.operands)
        ip = ir.InsertionPoint(entry)
        for _, op in sorted(ops.items(), key=lambda item: item[0]):
            copy = op.clone(ip=ip)
            for i, v in enumerate(copy.operands):
                copy.operands[i] = mapping[v]
            for old, new in zip(op.results, copy.results):
                mapping[old] = new
