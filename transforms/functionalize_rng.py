"""`--autodiff-functionalize-rng`: thread an explicit Philox (seed, offset) state.

Stateful draws (`autodiff.random`, like `torch.rand` inside a model) become
functional ones (`autodiff.philox(%seed, %offset)`), the way PyTorch's
AOTAutograd functionalizes CUDA randomness into philox seed/offset pairs.

The contract
------------
* Every function that draws, directly or through the functions it uses
  (`func.call`, `autodiff.checkpoint`/`jvp`/`vjp`/`vmap`; transitively),
  gets two trailing arguments
  `%seed: i64, %offset: i64` and one trailing `i64` result: the offset just
  past every counter block it used. It is marked with the unit attribute
  `autodiff.rng_state`. Public functions are treated like private ones, so
  an entry point takes the state from its caller: the Python runtime passes
  its generator's `(seed, offset)` and stores the returned offset, so the
  next call draws fresh numbers and resetting the seed replays a run.
* `offset` counts 128-bit Philox counter blocks (see `lower_rng`, whose
  `blocks_consumed(type, distribution)` says how many a draw uses). Draws
  get disjoint block ranges: the k-th draw of a function body sits at
  `%offset + (blocks of the draws before it)`, so no two draws in one
  program overlap and every offset is `%offset + constant` wherever that is
  static.
* Calls pass the caller's current offset (and the seed) and continue after
  the callee's consumption. A callee whose consumption is a compile-time
  constant C is continued statically (`offset + C`, its returned offset is
  then redundant); otherwise the caller continues from the returned offset.
  Such functions are also marked `autodiff.rng_blocks = C : i64`.
* Uses of a drawing function by `autodiff.checkpoint`, `autodiff.jvp`,
  `autodiff.vjp` and `autodiff.vmap` are threaded too (see `_thread_use` for
  the exact operand layouts): seed and offset are extra trailing primal
  arguments with zero tangents / cotangents, and unbatched (axis -1) under
  vmap. A vmap consumes what one call does, or B times that with
  randomness = "different" (B lanes, consecutive ranges), so the state after
  it is static when the callee's consumption is. So the transforms, run after
  this pass, see functional code whose recomputation (checkpointing, the backward pass)
  replays exactly the forward's numbers.
* `scf.for`: iteration k (k = (iv - lb) / step) draws at
  `start + k * B`, B the blocks one iteration consumes; after the loop the
  state is `start + trips * B` (a constant when the bounds are). A body
  whose consumption is not static (an inner loop with dynamic bounds) carries
  the offset through an extra `i64` iter_arg instead.
* `scf.if` / `scf.execute_region`: every branch starts from the same offset;
  with static branch consumptions the state after the op is advanced by the
  largest one (offsets stay static per program point, the shorter branch
  leaves a gap); otherwise the op yields its branch's offset as an extra
  `i64` result.
* The seed is passed through unchanged.
* Key-rooted functions: a function marked `autodiff.rng_key = N : i64` takes
  its state from its argument N, a `tensor<2xi64>` key `[seed, offset]` (the
  layout of `mlir_autodiff.random` keys). It keeps its signature: its body
  (and the functions it uses) are threaded from `tensor.extract`s of the key
  at entry, and to its callers it is an ordinary function of its arguments,
  so its uses are not threaded and it does not make them draw. Every use of
  it with the same key therefore replays the same numbers: this is how a
  primal call and its separately emitted `autodiff.vjp` (Python's `vjp`
  inside a trace) agree on their draws. Its own draws become philox ops
  marked `keyed` (pure functions of the key; see `lower_rng`).
* Pinning a key-rooted function to the stream: an `autodiff.random` draw of
  a `tensor<2xi64>` with the attribute `autodiff.rng_pins = @g` (`g` key-rooted;
  or an array of such symbols) does not draw. It becomes the key
  `[seed, offset]` of the current state, and the state advances by the blocks
  one call of `@g` consumes (the most of any in the array), so `@g` called
  with that key draws exactly the numbers a stateful call at this point would
  have drawn (keyed and stateful draws at the same (seed, offset) agree bit
  for bit). Python's `vjp` inside a trace pins its function this way (see
  `mlir_autodiff.random.pin_draws`): the primal call and every pullback replay
  the draws of an ordinary call of the function. If `@g`'s consumption is not
  static, the op stays an ordinary `bits` draw (a fresh key: the same
  distribution, other numbers). Custom functions pin their primal and rule
  functions to one key this way (`mlir_autodiff.custom_core`).

Errors (at the op, naming the pass): a draw with a non-static shape or bad
attributes; a draw reached through recursion (its offsets would not be
static); a draw inside an op whose trip count the pass cannot bound
(`scf.while`, `scf.parallel`, `scf.forall`, linalg bodies...) or in a
function with several blocks; any other symbol use of a function that
draws (e.g. a custom-rule attribute), which would miss its new signature; and
an `autodiff.rng_key` that does not name a `tensor<2xi64>` argument.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, tensor

from ..dialects.vocabulary import (
    AD_OPS,
    CHECKPOINT,
    JVP,
    PHILOX,
    RANDOM,
    RNG_BLOCKS,
    RNG_KEY,
    RNG_PINS,
    RNG_STATE,
    VJP,
    VMAP,
)
from .ad_support import int_constant, symbol_refs, walk_ops
from .diagnostics import PassFailure, emit_error
from .lower_rng import DrawSpec, draw_spec
from .passes import Pass, register

PASS = "autodiff-functionalize-rng"
#: Ops that use a function by symbol: calls, and the transforms that run it.
_CALLS = {
    "func.call": "callee",
    CHECKPOINT: "fn",
    JVP: "fn",
    VJP: "fn",
    VMAP: "fn",
}
#: Region ops whose regions the pass threads state through.
_STRUCTURED = ("scf.if", "scf.for", "scf.execute_region")


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _const(t: ir.Type, value: int) -> ir.Value:
    return arith.constant(t, ir.IntegerAttr.get(t, value))


def _callee(op: ir.Operation) -> str | None:
    key = _CALLS.get(op.name)
    if key is None or key not in op.attributes:
        return None
    return ir.FlatSymbolRefAttr(op.attributes[key]).value



def _static_trips(for_op: ir.Operation) -> int | None:
    lb, ub, step = (int_constant(v) for v in list(for_op.operands)[:3])
    if lb is None or ub is None or step is None or step <= 0:
        return None
    if "unsignedCmp" in for_op.attributes:
        return None
    return max(0, -(-(ub - lb) // step))


def _enclosing_func(op: ir.Operation, module: ir.Operation) -> ir.Operation | None:
    """The func.func directly in `module` that holds `op`, if any."""
    cur = op
    while True:
        parent = cur.parent
        if parent is None:
            return None
        parent = parent.operation
        if parent == module:
            return cur if cur.name == "func.func" else None
        cur = parent


@dataclasses.dataclass
class _State:
    """The RNG offset at a program point: `base + delta` (delta static)."""

    base: ir.Value
    delta: int = 0

    def value(self, ip: ir.InsertionPoint) -> ir.Value:
        if self.delta == 0:
            return self.base
        with ip:
            return arith.addi(self.base, _const(_i64(), self.delta))

    def advanced(self, blocks: int) -> _State:
        return _State(self.base, self.delta + blocks)


class _Functionalizer:
    def __init__(self, module: ir.Operation):
        self.module = module
        self.funcs: dict[str, ir.Operation] = {}
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name == "func.func" and len(op.regions[0].blocks) > 0:
                self.funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
        #: Each function's (inputs, results) before the pass.
        self.signatures: dict[str, tuple[list[ir.Type], list[ir.Type]]] = {
            name: (list(fn.attributes["function_type"].value.inputs),
                   list(fn.attributes["function_type"].value.results))
            for name, fn in self.funcs.items()
        }
        self.specs: dict[ir.Operation, DrawSpec] = {}
        #: Functions that take the state from their callers (gain seed/offset arguments).
        self.drawing: set[str] = set()
        #: Key-rooted functions (`autodiff.rng_key`): name -> the key argument's index.
        self.keyed: dict[str, int] = {}
        #: Key-rooted functions that draw (their bodies are threaded from the key).
        self.keyed_drawing: set[str] = set()
        self.consumption: dict[str, int | None] = {}
        self.errors = 0
        self.seed: ir.Value | None = None
        #: Whether the function being rewritten is key-rooted (its draws are `keyed`).
        self.in_keyed = False

    def error(self, op: ir.Operation, message: str) -> None:
        emit_error(op, f"{PASS}: {message}")
        self.errors += 1

    # -- analysis ----------------------------------------------------------------

    def analyze(self) -> None:
        self.keyed = self._key_arguments()
        direct: dict[str, bool] = {name: False for name in self.funcs}
        edges: dict[str, set[str]] = {name: set() for name in self.funcs}
        all_ops = walk_ops(self.module)
        for op in all_ops:
            if op.name != RANDOM:
                continue
            fn = _enclosing_func(op, self.module)
            if fn is None:
                self.error(op, f"'{RANDOM}' outside a function at the top level of the module")
                continue
            try:
                self.specs[op] = draw_spec(op, PASS)
            except PassFailure:
                self.errors += 1
                continue
            direct[ir.StringAttr(fn.attributes["sym_name"]).value] = True
        for name, fn in self.funcs.items():
            for op in walk_ops(fn):
                callee = _callee(op)
                if callee in self.funcs:
                    edges[name].add(callee)
                # the pinned functions' consumption is needed first
                edges[name].update(self._pinned(op))
        # Key-rooted functions are boundaries: they draw, but not from their callers' state.
        self.drawing = {n for n, d in direct.items() if d and n not in self.keyed}
        changed = True
        while changed:
            changed = False
            for name in self.funcs:
                if name not in self.drawing and name not in self.keyed \
                        and edges[name] & self.drawing:
                    self.drawing.add(name)
                    changed = True
        self.keyed_drawing = {n for n in self.keyed if direct[n] or edges[n] & self.drawing}
        if self.errors:
            return
        self._check_recursion(edges)
        self._check_sites()
        self._check_symbol_uses(all_ops)
        if self.errors:
            return
        for name in self._callee_first_order(edges):
            self.consumption[name] = self._region_consumption(self.funcs[name].regions[0])

    def _pinned(self, op: ir.Operation) -> list[str]:
        """The key-rooted functions an `autodiff.random` pins (`RNG_PINS`), if any."""
        if op.name != RANDOM or RNG_PINS not in op.attributes:
            return []
        attr = op.attributes[RNG_PINS]
        key_type = ir.RankedTensorType.get([2], _i64())
        refs = list(attr) if isinstance(attr, ir.ArrayAttr) else [attr]
        names = [ir.FlatSymbolRefAttr(r).value if isinstance(r, ir.FlatSymbolRefAttr) else None
                 for r in refs]
        if not names or any(n not in self.keyed for n in names) \
                or op.results[0].type != key_type:
            self.error(op, f"'{RNG_PINS}' must be on a {key_type} draw and name functions "
                           f"marked '{RNG_KEY}', got {attr}")
            return []
        return names

    def _pin_blocks(self, op: ir.Operation) -> int | None:
        """For a pinning draw: the most blocks one call of a pinned function consumes
        (None: not static)."""
        attr = op.attributes[RNG_PINS]
        refs = list(attr) if isinstance(attr, ir.ArrayAttr) else [attr]
        used = [self.consumption.get(ir.FlatSymbolRefAttr(r).value, 0) for r in refs]
        return None if None in used else max(used)

    def _key_arguments(self) -> dict[str, int]:
        """The key-rooted functions and their key argument's index (diagnosed if invalid)."""
        key_type = ir.RankedTensorType.get([2], _i64())
        keyed: dict[str, int] = {}
        for name, fn in self.funcs.items():
            if RNG_KEY not in fn.attributes:
                continue
            attr = fn.attributes[RNG_KEY]
            args = fn.regions[0].blocks[0].arguments
            index = ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else -1
            if not 0 <= index < len(args) or args[index].type != key_type:
                self.error(fn, f"'{RNG_KEY}' of '@{name}' must be the index of a "
                               f"{key_type} argument (the key [seed, offset]), got {attr}")
                continue
            keyed[name] = index
        return keyed

    def _draw_sites(self, fn: ir.Operation) -> list[ir.Operation]:
        return [
            op for op in walk_ops(fn)
            if op.name == RANDOM or _callee(op) in self.drawing
        ]

    def _check_recursion(self, edges: dict[str, set[str]]) -> None:
        for name in sorted(self.drawing):
            seen: set[str] = set()
            stack = list(edges[name] & self.drawing)
            while stack:
                cur = stack.pop()
                if cur in seen:
                    continue
                seen.add(cur)
                stack.extend(edges[cur] & self.drawing)
            if name in seen:
                site = self._draw_sites(self.funcs[name])[0]
                self.error(
                    site,
                    f"random draw reached through recursion ('@{name}' calls itself): "
                    "the counter blocks it consumes are not statically known",
                )

    def _check_sites(self) -> None:
        for name in sorted(self.drawing | self.keyed_drawing):
            fn = self.funcs[name]
            for site in self._draw_sites(fn):
                if len(fn.regions[0].blocks) != 1:
                    self.error(
                        site,
                        f"random draw in '@{name}', a function with several blocks "
                        "(unstructured control flow) is not supported",
                    )
                    break
                cur = site.parent.operation
                while cur != fn:
                    if cur.name not in _STRUCTURED:
                        self.error(
                            site,
                            f"random draw inside '{cur.name}' is not supported "
                            f"(the pass threads the RNG state through {', '.join(_STRUCTURED)})",
                        )
                        break
                    if cur.name == "scf.execute_region" and len(cur.regions[0].blocks) != 1:
                        self.error(site, "random draw in a multi-block 'scf.execute_region'")
                        break
                    cur = cur.parent.operation

    def _check_symbol_uses(self, all_ops: list[ir.Operation]) -> None:
        for op in all_ops:
            own = _CALLS.get(op.name)
            for attr_name in op.attributes:
                if attr_name == own:
                    continue
                if op.name == "func.func" and attr_name == "sym_name":
                    continue
                for ref in symbol_refs(op.attributes[attr_name]):
                    if ref not in self.drawing:
                        continue
                    self.error(
                        op,
                        f"'@{ref}' draws random numbers and gains RNG state arguments, but "
                        f"'{op.name}' refers to it (attribute '{attr_name}') other than by "
                        "a call",
                    )

    def _callee_first_order(self, edges: dict[str, set[str]]) -> list[str]:
        order: list[str] = []
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for callee in sorted(edges[name]):
                visit(callee)
            if name in self.drawing or name in self.keyed_drawing:
                order.append(name)

        for name in self.funcs:
            visit(name)
        return order

    def _draws(self, op: ir.Operation) -> bool:
        return any(o.name == RANDOM or _callee(o) in self.drawing for o in walk_ops(op))

    def _region_consumption(self, region: ir.Region) -> int | None:
        total = 0
        for block in region.blocks:
            for op in block.operations:
                c = self._op_consumption(op.operation)
                if c is None:
                    return None
                total += c
        return total

    def _op_consumption(self, op: ir.Operation) -> int | None:
        if op.name == RANDOM:
            if RNG_PINS in op.attributes and self._pin_blocks(op) is not None:
                return self._pin_blocks(op)
            return self.specs[op].blocks
        callee = _callee(op)
        if callee in self.drawing:
            return self._use_consumption(op, callee)
        if not op.regions or not self._draws(op):
            return 0
        if op.name in ("scf.if", "scf.execute_region"):
            parts = [self._region_consumption(r) for r in op.regions]
            return None if None in parts else max(parts, default=0)
        if op.name == "scf.for":
            body = self._region_consumption(op.regions[0])
            trips = _static_trips(op)
            if body == 0:
                return 0
            return None if body is None or trips is None else trips * body
        raise AssertionError(f"unexpected drawing op {op.name}")  # rejected by _check_sites

    # -- rewriting ---------------------------------------------------------------

    def rewrite(self) -> None:
        i64 = _i64()
        for name in self.consumption:
            fn = self.funcs[name]
            block = fn.regions[0].blocks[0]
            loc = fn.location
            self.in_keyed = name in self.keyed
            if self.in_keyed:
                self.seed, offset = _key_words(block, self.keyed[name], loc)
                self._thread_block(block, _State(offset))  # the end offset is not needed
                continue
            self.seed = block.add_argument(i64, loc)
            offset = block.add_argument(i64, loc)
            ftype = fn.attributes["function_type"].value
            fn.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get([*ftype.inputs, i64, i64], [*ftype.results, i64])
            )
            _extend_dict_array(fn, "arg_attrs", 2)
            _extend_dict_array(fn, "res_attrs", 1)
            fn.attributes[RNG_STATE] = ir.UnitAttr.get()
            if self.consumption[name] is not None:
                fn.attributes[RNG_BLOCKS] = ir.IntegerAttr.get(i64, self.consumption[name])
            end = self._thread_block(block, _State(offset))
            _append_to_terminator(block, end)

    def _thread_block(self, block: ir.Block, state: _State) -> _State:
        ops = [op.operation for op in block.operations]
        for op in ops[:-1] if ops and _is_terminator(ops[-1]) else ops:
            if self._draws(op):
                with op.location:
                    state = self._thread_op(op, state)
        return state

    def _thread_op(self, op: ir.Operation, state: _State) -> _State:
        ip = ir.InsertionPoint(op)
        if op.name == RANDOM:
            spec = self.specs[op]
            offset = state.value(ip)
            if RNG_PINS in op.attributes:
                blocks = self._pin_blocks(op)
                if blocks is not None:
                    with ip:
                        key = tensor.from_elements(op.results[0].type, [self.seed, offset])
                    op.results[0].replace_all_uses_with(key)
                    op.erase()
                    return state.advanced(blocks)
            attrs = {k: op.attributes[k] for k in op.attributes if k != RNG_PINS}
            if self.in_keyed:
                attrs["keyed"] = ir.UnitAttr.get()
            new = ir.Operation.create(
                PHILOX, results=[spec.result_type], operands=[self.seed, offset],
                attributes=attrs, loc=op.location, ip=ip,
            )
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
            return state.advanced(spec.blocks)
        callee = _callee(op)
        if callee is not None:
            return self._thread_use(op, callee, state)
        used = self._op_consumption(op)
        if op.name == "scf.for":
            return self._thread_for(op, state, used)
        # scf.if / scf.execute_region
        if used is not None:
            for region in op.regions:
                if len(region.blocks):
                    self._thread_block(region.blocks[0], state)
            return state.advanced(used)
        start = state.value(ip)
        new = _recreate_with_offset(op, [], fill_else=True)
        for region in new.regions:
            block = region.blocks[0]
            _append_to_terminator(block, self._thread_block(block, _State(start)))
        return _State(new.results[-1])

    def _thread_use(self, op: ir.Operation, callee: str, state: _State) -> _State:
        """Thread the state through a call-like use of a drawing function.

        The callee gains (seed, offset) after its parameters and the advanced
        offset after its results; each op's operand and result layout follows:
          func.call, autodiff.checkpoint: (args..., seed, offset) -> (results..., offset')
          autodiff.jvp: (primals..., seed, offset, tangents..., 0, 0)
                        -> (outputs..., offset', output tangents..., offset' tangent)
          autodiff.vjp: (primals..., seed, offset, cotangents..., 0)
                        -> (outputs..., offset', cotangents of wrt...)
                        (`wrt` indices are unchanged: the new parameters come last)
          autodiff.vmap: (args..., seed, offset) -> (results..., offset'), with
                        in_axes += [-1, -1] and out_axes += [-1] (unbatched).
        """
        i64 = _i64()
        ip = ir.InsertionPoint(op)
        offset = state.value(ip)
        attrs = {k: op.attributes[k] for k in op.attributes}
        operands, types = list(op.operands), [r.type for r in op.results]
        n_in, n_out = len(self.signatures[callee][0]), len(self.signatures[callee][1])
        if op.name == JVP:
            with ip:
                zero = _const(i64, 0)
            new_operands = [*operands[:n_in], self.seed, offset, *operands[n_in:], zero, zero]
            new_types = [*types[:n_out], i64, *types[n_out:], i64]
            keep = [*range(n_out), *range(n_out + 1, 2 * n_out + 1)]
        elif op.name == VJP:
            with ip:
                zero = _const(i64, 0)
            new_operands = [*operands[:n_in], self.seed, offset, *operands[n_in:], zero]
            new_types = [*types[:n_out], i64, *types[n_out:]]
            keep = [*range(n_out), *range(n_out + 1, len(new_types))]
        else:
            new_operands = [*operands, self.seed, offset]
            new_types = [*types, i64]
            keep = list(range(len(types)))
        if op.name == VMAP:
            for key, extra in (("in_axes", 2), ("out_axes", 1)):
                attrs[key] = ir.DenseI64ArrayAttr.get(
                    [*ir.DenseI64ArrayAttr(attrs[key]), *([-1] * extra)]
                )
        for key, extra in (("arg_attrs", 2), ("res_attrs", 1)):
            if key in attrs:
                attrs[key] = ir.ArrayAttr.get([*attrs[key], *([ir.DictAttr.get({})] * extra)])
        new = ir.Operation.create(
            op.name, results=new_types, operands=new_operands,
            attributes=attrs, loc=op.location, ip=ip,
        )
        for old, i in zip(op.results, keep):
            old.replace_all_uses_with(new.results[i])
        op.erase()
        used = self._use_consumption(new, callee)
        if used is not None:
            return state.advanced(used)
        return _State(new.results[n_out if new.name in AD_OPS else len(new_types) - 1])

    def _use_consumption(self, op: ir.Operation, callee: str) -> int | None:
        """The blocks one use of a drawing function consumes (None: not static).

        A vmap with randomness = "different" draws once per lane (B consecutive
        ranges, see `--autodiff-vmap`); any other mode draws once for the batch.
        """
        once = self.consumption[callee]
        if op.name != VMAP or once is None:
            return once
        mode = "error"
        if "randomness" in op.attributes:
            mode = ir.StringAttr(op.attributes["randomness"]).value
        if mode != "different":
            return once
        axes = list(ir.DenseI64ArrayAttr(op.attributes["in_axes"]))
        for v, a in zip(op.operands, axes):
            if a >= 0 and isinstance(v.type, ir.RankedTensorType) and a < v.type.rank \
                    and not ir.ShapedType.is_dynamic_size(v.type.shape[a]):
                return v.type.shape[a] * once
        return None

    def _thread_for(self, op: ir.Operation, state: _State, used: int | None) -> _State:
        i64 = _i64()
        ip = ir.InsertionPoint(op)
        body = op.regions[0].blocks[0]
        per_iter = self._region_consumption(op.regions[0])
        if per_iter is not None and "unsignedCmp" not in op.attributes:
            start = state.value(ip)
            lb, ub, step = list(op.operands)[:3]
            with ir.InsertionPoint.at_block_begin(body):
                k = arith.divui(arith.subi(body.arguments[0], lb), step)
                iter_offset = arith.addi(start, arith.muli(_to_i64(k), _const(i64, per_iter)))
            self._thread_block(body, _State(iter_offset))
            if used is not None:
                return state.advanced(used)
            with ip:
                # Trip count of `for iv = lb to ub step s`: ceil((ub - lb) / s), at least 0.
                diff = arith.subi(ub, lb)
                one = _const(diff.type, 1)
                zero = _const(diff.type, 0)
                trips = arith.divsi(arith.addi(diff, arith.subi(step, one)), step)
                positive = arith.cmpi(arith.CmpIPredicate.sgt, diff, zero)
                trips = arith.select(positive, trips, zero)
                end = arith.addi(start, arith.muli(_to_i64(trips), _const(i64, per_iter)))
            return _State(end)
        new = _recreate_with_offset(op, [state.value(ip)])
        block = new.regions[0].blocks[0]
        _append_to_terminator(block, self._thread_block(block, _State(block.arguments[-1])))
        return _State(new.results[-1])


def _key_words(block: ir.Block, index: int, loc: ir.Location) -> tuple[ir.Value, ir.Value]:
    """(seed, offset): the two i64 words of the key argument `index`, read at entry."""
    key = block.arguments[index]
    with loc, ir.InsertionPoint.at_block_begin(block):
        words = [tensor.extract(key, [_const(ir.IndexType.get(), i)]) for i in (0, 1)]
    return words[0], words[1]


def _is_terminator(op: ir.Operation) -> bool:
    return op.name in ("func.return", "scf.yield")


def _to_i64(v: ir.Value) -> ir.Value:
    i64 = _i64()
    if isinstance(v.type, ir.IndexType):
        return arith.index_cast(i64, v)
    if v.type.width < 64:
        return arith.extsi(i64, v)
    return v


def _replace_results(old: ir.Operation, new: ir.Operation) -> None:
    for a, b in zip(old.results, new.results):
        a.replace_all_uses_with(b)


def _extend_dict_array(fn: ir.Operation, key: str, extra: int) -> None:
    if key in fn.attributes:
        fn.attributes[key] = ir.ArrayAttr.get(
            [*fn.attributes[key], *([ir.DictAttr.get({})] * extra)]
        )


def _append_to_terminator(block: ir.Block, state: _State) -> None:
    """Replace the block's terminator by one that also yields/returns the offset."""
    term = list(block.operations)[-1].operation
    with term.location:
        value = state.value(ir.InsertionPoint(term))
        ir.Operation.create(
            term.name, operands=[*term.operands, value],
            attributes={k: term.attributes[k] for k in term.attributes},
            ip=ir.InsertionPoint(term),
        )
    term.erase()


def _recreate_with_offset(
    op: ir.Operation, extra_operands: list[ir.Value], *, fill_else: bool = False
) -> ir.Operation:
    """A copy of `op` with one more i64 result (and `extra_operands`, e.g. an iter_arg init);
    its regions' blocks are moved over, gaining one i64 block argument when an operand
    was added (scf.for). Terminators are left as they were: the caller extends them."""
    i64 = _i64()
    new = ir.Operation.create(
        op.name,
        results=[*(r.type for r in op.results), i64],
        operands=[*op.operands, *extra_operands],
        attributes={k: op.attributes[k] for k in op.attributes},
        regions=len(op.regions),
        loc=op.location,
        ip=ir.InsertionPoint(op),
    )
    for old_region, region in zip(op.regions, new.regions):
        if len(old_region.blocks) == 0:
            if fill_else:
                block = region.blocks.append()
                with op.location:
                    ir.Operation.create("scf.yield", ip=ir.InsertionPoint(block))
            continue
        old_block = old_region.blocks[0]
        types = [a.type for a in old_block.arguments]
        if extra_operands:
            types.append(i64)
        block = region.blocks.append(*types)
        for a, b in zip(old_block.arguments, block.arguments):
            a.replace_all_uses_with(b)
        for inner in list(old_block.operations):
            block.append(inner.operation)
    _replace_results(op, new)
    op.erase()
    return new


@register
@dataclasses.dataclass(frozen=True)
class FunctionalizeRng(Pass):
    name = PASS
    summary = "Thread an explicit Philox (seed, offset) state through every function that draws"

    def run(self, module: ir.Operation) -> None:
        with module.context, module.location:
            f = _Functionalizer(module)
            f.analyze()
            if f.errors:
                raise PassFailure(f"{PASS}: {f.errors} error(s)")
            f.rewrite()
