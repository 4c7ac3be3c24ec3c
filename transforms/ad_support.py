"""Shared helpers of the differentiation passes: types and an IR builder for rules.

`Builder` emits ops at one insertion point with one location (the primal
op's), on scalars and on tensors alike: elementwise `arith`/`math` ops are
emitted directly on tensor operands (they are ElementwiseMappable) and the
passes' clean-up turns them into `linalg.generic` with upstream
`convert-elementwise-to-linalg`. So a rule written for `f64` also serves
`tensor<4x3xf64>`, and the same rule serves scalar code inside
`linalg.generic` bodies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Any

from mlir import ir

# arith.cmpf predicates (mlir/Dialect/Arith/IR/ArithBase.td).
CMPF = {"oeq": 1, "ogt": 2, "oge": 3, "olt": 4, "ole": 5, "one": 6, "ord": 7, "une": 13, "uno": 14}


def element_type(t: ir.Type) -> ir.Type:
    return t.element_type if isinstance(t, ir.ShapedType) else t


def is_float(t: ir.Type) -> bool:
    """True for float scalars and tensors of floats: the only differentiable types."""
    return isinstance(element_type(t), ir.FloatType)


def is_tensor(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)


def float_value(v: ir.Value | None) -> bool:
    return v is not None and is_float(v.type)


def op_name(op: ir.Operation | ir.OpView) -> str:
    return op.operation.name


def walk_ops(root: ir.Operation | ir.OpView) -> list[ir.Operation]:
    """Every op nested in `root` (root included), in pre-order."""
    out: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        out.append(o)
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def first_op(root: ir.Operation | ir.OpView, names: Container[str]) -> ir.Operation | None:
    """The first op under `root` (pre-order, root included) named in `names`."""
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name in names:
            found.append(o)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found[0] if found else None


def lower_each(root: ir.Operation | ir.OpView, names: Container[str],
               lower: Callable[[ir.Operation], None]) -> None:
    """`lower` every op named in `names` under `root`, one at a time: a lowering
    changes the IR, so the next op is looked up again after each. A module's
    top-level ops are swept one by one (a lookup walks one function, not the
    module), then the module once more for ops that the lowerings added."""
    if root.operation.name != "builtin.module":
        # (the lookup that ends the loop walked all of `root`: nothing to look at again)
        while (op := first_op(root, names)) is not None:
            lower(op)
        return
    while True:
        for scope in list(root.operation.regions[0].blocks[0].operations):
            while (op := first_op(scope, names)) is not None:
                lower(op)
        if first_op(root, names) is None:
            return


def clone_remapped(op: ir.Operation | ir.OpView, ip: ir.InsertionPoint,
                   vmap: dict[ir.Value, ir.Value]) -> ir.Operation:
    """Clone `op` at `ip`, its operands (also inside nested regions) remapped by
    `vmap`; the clone's results are added to `vmap` as the images of `op`'s."""
    c = op.operation.clone(ip=ip)
    for inner in walk_ops(c):
        for k, v in enumerate(list(inner.operands)):
            if v in vmap:
                inner.operands[k] = vmap[v]
    for r_old, r_new in zip(op.results, c.results):
        vmap[r_old] = r_new
    return c


def post_order_ops(module: ir.Operation) -> list[ir.Operation]:
    """Every op nested in `module` (itself included), in post-order: the order
    the CPU passes visit ops in, and upstream's default walk order."""
    ops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        ops.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return ops


def is_inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    """True if `op` is `ancestor` or nested in one of its regions."""
    cur: Any = op
    while cur is not None:
        if cur == ancestor:
            return True
        try:
            cur = cur.parent
        except Exception:
            return False
        if cur is not None and op_name(cur) == "builtin.module":
            return ancestor == cur
    return False


def defining_op(v: ir.Value) -> ir.Operation | None:
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation


def int_constant(v: ir.Value) -> int | None:
    """The value of `v` if an `arith.constant` of integer (or index) type makes it."""
    op = defining_op(v)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return attr.value if isinstance(attr, ir.IntegerAttr) else None


def append_tangents(ad: Any, term: ir.Operation, positions: Sequence[int],
                    rebuild: Callable[[list[ir.Value], ir.Location, ir.InsertionPoint], Any],
                    skip: int = 0) -> None:
    """Forward mode of a region: replace terminator `term` (after its block was
    differentiated by `ad`) by `rebuild(values + tangents of values[positions])`.
    `skip` leading operands (scf.condition's predicate) are not values."""
    vals = list(term.operands)[skip:]
    b = Builder(ir.InsertionPoint(term), term.location, ad)
    tangents = [b.materialize(ad.tangent(vals[k]), vals[k]) for k in positions]
    rebuild(vals + tangents, term.location, ir.InsertionPoint(term))
    term.erase()


def tangent_results(ad: Any, op: ir.Operation, new_results: Sequence[ir.Value], n: int,
                    positions: Sequence[int]) -> list[ir.Value | None]:
    """Route `op`'s n results to the first n of `new_results` (an op rebuilt with
    tangent results appended for `positions`); the tangents per result, None where
    a result has none."""
    res = list(new_results)
    ad.replace_op(op, res[:n])
    out: list[ir.Value | None] = [None] * n
    for pos, k in enumerate(positions):
        out[k] = res[n + pos]
    return out


def is_known_zero(v: ir.Value) -> bool:
    """`v` is float zeros by construction: a zero constant, or a fill, broadcast,
    transpose or reshape of one (how the front end writes a zero tangent)."""
    while isinstance(v, ir.OpResult):
        op = v.owner
        name = op_name(op)
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                return attr.value == 0.0
            return (isinstance(attr, ir.DenseFPElementsAttr) and attr.is_splat
                    and ir.FloatAttr(attr.get_splat_value()).value == 0.0)
        if name not in ("linalg.fill", "linalg.broadcast", "linalg.transpose",
                        "tensor.collapse_shape", "tensor.expand_shape", "tensor.splat"):
            return False
        v = op.operands[0]
    return False


def captured_values(op: ir.Operation) -> list[ir.Value]:
    """Values used inside `op`'s regions but defined outside `op` (in order, unique)."""
    nested = walk_ops(op)  # op itself, then what its regions hold
    inner = set()
    for o in nested[1:]:
        inner.update(o.results)
    for o in nested:
        for region in o.regions:
            for block in region.blocks:
                inner.update(block.arguments)
    seen: list[ir.Value] = []
    seen_set = set()
    for o in nested[1:]:
        for v in o.operands:
            if v not in inner and v not in seen_set:
                seen_set.add(v)
                seen.append(v)
    return seen


def residual_operands(spec: Sequence[int], primals: Sequence[ir.Value],
                      returned: Sequence[ir.Value]) -> list[ir.Value]:
    """The residual operands of a bwd call: spec entry k >= 0 is fwd's k-th
    returned residual, -1 - i is the call's own primal operand i."""
    return [returned[k] if k >= 0 else primals[-1 - k] for k in spec]


class Builder:
    """Emits ops before `ip` at location `loc`; works on scalars and tensors.

    `ad` is the driver (forward or reverse), which region rules use to
    differentiate nested blocks; scalar rules never need it.
    """

    def __init__(self, ip: ir.InsertionPoint, loc: ir.Location, ad: Any = None,
                 op: ir.Operation | None = None):
        self.ip = ip
        self.loc = loc
        self.ad = ad
        self.op = op

    @property
    def ans(self) -> ir.Value:
        """The (first) result of the primal op being differentiated."""
        return self.op.results[0]

    # -- generic construction ---------------------------------------------------

    def create(self, name: str, operands: Sequence[ir.Value], result_types: Sequence[ir.Type],
               attributes: dict[str, ir.Attribute] | None = None) -> ir.Operation:
        return ir.Operation.create(name, results=list(result_types), operands=list(operands),
                                   attributes=attributes or {}, loc=self.loc, ip=self.ip)

    def unary(self, name: str, x: ir.Value) -> ir.Value:
        return self.create(name, [x], [x.type]).result

    def binary(self, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.create(name, [x, y], [x.type]).result

    # -- constants ----------------------------------------------------------------

    def constant(self, like: ir.Value | ir.Type, value: float) -> ir.Value:
        """A float constant of `like`'s type (splat for tensors)."""
        t = like if isinstance(like, ir.Type) else like.type
        et = element_type(t)
        fattr = ir.FloatAttr.get(et, float(value))
        if isinstance(t, ir.RankedTensorType):
            if t.has_static_shape:
                attr = ir.DenseElementsAttr.get_splat(t, fattr)
                return self.create("arith.constant", [], [t], {"value": attr}).result
            if isinstance(like, ir.Type):
                raise ValueError(f"cannot build a constant of dynamic type {t} without a value")
            return self.fill(self.empty_like(like), self.constant(et, value))
        return self.create("arith.constant", [], [t], {"value": fattr}).result

    def zeros_like(self, v: ir.Value) -> ir.Value:
        return self.constant(v, 0.0)

    def ones_like(self, v: ir.Value) -> ir.Value:
        return self.constant(v, 1.0)

    def index(self, n: int) -> ir.Value:
        t = ir.IndexType.get()
        return self.create("arith.constant", [], [t], {"value": ir.IntegerAttr.get(t, n)}).result

    def dims(self, v: ir.Value) -> list[ir.Value]:
        """The dynamic sizes of tensor `v` (tensor.dim for each dynamic dimension)."""
        t = v.type
        out = []
        for i in range(t.rank):
            if t.is_dynamic_dim(i):
                out.append(self.create("tensor.dim", [v, self.index(i)],
                                       [ir.IndexType.get()]).result)
        return out

    def empty(self, t: ir.RankedTensorType, dyn: Sequence[ir.Value] = ()) -> ir.Value:
        return self.create("tensor.empty", list(dyn), [t]).result

    def empty_like(self, v: ir.Value) -> ir.Value:
        return self.empty(v.type, self.dims(v))

    def fill(self, init: ir.Value, scalar: ir.Value) -> ir.Value:
        from mlir.dialects import linalg

        with self.loc, self.ip:
            r = linalg.fill(scalar, outs=[init])
        return r if isinstance(r, ir.Value) else r.result

    # -- float arithmetic (scalars or tensors) ------------------------------------

    def addf(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.binary("arith.addf", x, y)

    def subf(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.binary("arith.subf", x, y)

    def mulf(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.binary("arith.mulf", x, y)

    def divf(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.binary("arith.divf", x, y)

    def negf(self, x: ir.Value) -> ir.Value:
        return self.unary("arith.negf", x)

    def scale(self, x: ir.Value, c: float) -> ir.Value:
        return self.mulf(x, self.constant(x, c))

    def cmpf(self, pred: str, x: ir.Value, y: ir.Value) -> ir.Value:
        i1 = ir.IntegerType.get_signless(1)
        t = ir.RankedTensorType.get(x.type.shape, i1) if is_tensor(x.type) else i1
        attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), CMPF[pred])
        return self.create("arith.cmpf", [x, y], [t], {"predicate": attr}).result

    def select(self, c: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.create("arith.select", [c, x, y], [x.type]).result

    def math(self, name: str, *xs: ir.Value) -> ir.Value:
        return self.create(f"math.{name}", list(xs), [xs[0].type]).result

    def cast(self, name: str, x: ir.Value, to: ir.Type) -> ir.Value:
        """arith.extf/truncf/sitofp...: `to` is the element type or full type."""
        if is_tensor(x.type) and not is_tensor(to):
            to = ir.RankedTensorType.get(x.type.shape, to)
        return self.create(name, [x], [to]).result

    def recip(self, x: ir.Value) -> ir.Value:
        return self.divf(self.ones_like(x), x)

    def square(self, x: ir.Value) -> ir.Value:
        return self.mulf(x, x)

    # -- None-aware helpers (None is a symbolic zero) ------------------------------

    def add_any(self, x: ir.Value | None, y: ir.Value | None) -> ir.Value | None:
        if x is None:
            return y
        if y is None:
            return x
        return self.addf(x, y)

    def accumulate(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """x + y for cotangents. Where one of them is a slice or an element
        inserted into zeros (the reverse of tensor.extract_slice / extract),
        only that slice of the other is added to, in place: row k of a
        parameter read inside a loop costs a row per iteration, not a zero
        tensor, a copy and a whole-tensor add."""
        for full, sparse in ((x, y), (y, x)):
            if not isinstance(sparse, ir.OpResult):
                continue
            op = sparse.owner
            name = op_name(op)
            if name not in ("tensor.insert_slice", "tensor.insert") \
                    or not is_known_zero(op.operands[1]):
                continue
            src, _, *rest = list(op.operands)
            if name == "tensor.insert":
                old = self.create("tensor.extract", [full, *rest], [src.type]).result
                return self.create("tensor.insert", [self.addf(old, src), full, *rest],
                                   [full.type]).result
            attrs = {k: op.attributes[k] for k in op.attributes}
            seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
            attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1] + seg[2:])
            old = self.create("tensor.extract_slice", [full, *rest], [src.type], attrs).result
            attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(seg)
            return self.create("tensor.insert_slice", [self.addf(old, src), full, *rest],
                               [full.type], attrs).result
        return self.addf(x, y)

    def materialize(self, t: ir.Value | None, like: ir.Value) -> ir.Value:
        """`t`, or a zero of `like`'s type (integer zeros for integer values)."""
        if t is not None:
            return t
        if is_float(like.type):
            return self.zeros_like(like)
        ty = like.type
        attr = ir.IntegerAttr.get(element_type(ty), 0)
        if isinstance(ty, ir.RankedTensorType) and not ty.has_static_shape:
            # (an integer tape of dynamic length returned by a generated function)
            zero = self.create("arith.constant", [], [element_type(ty)], {"value": attr})
            return self.fill(self.empty_like(like), zero.result)
        if isinstance(ty, ir.RankedTensorType):
            attr = ir.DenseElementsAttr.get_splat(ty, attr)
        return self.create("arith.constant", [], [ty], {"value": attr}).result


LN2 = math.log(2.0)
LN10 = math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def unique_name(taken: Container[str], base: str) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first symbol name not in `taken`."""
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


# -- symbols ---------------------------------------------------------------------


class FunctionTable:
    """The `func.func` ops of a module by name, through MLIR's SymbolTable.

    Built anew for each use (the passes add functions as they go): the table
    is made in C++ (~50 us for a thousand functions), where walking the
    module's body from Python took milliseconds, once per lookup."""

    def __init__(self, module: ir.Operation | ir.OpView) -> None:
        self.symbols = ir.SymbolTable(module.operation)

    def get(self, name: str, default: ir.Operation | None = None) -> ir.Operation | None:
        try:
            op = self.symbols[name].operation
        except KeyError:
            return default
        return op if op.name == "func.func" else default

    def __getitem__(self, name: str) -> ir.Operation:
        op = self.get(name)
        if op is None:
            raise KeyError(name)
        return op

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


def sym_name(op: ir.Operation | ir.OpView) -> str:
    """The `sym_name` of a symbol op (a function)."""
    return ir.StringAttr(op.operation.attributes["sym_name"]).value


def function_type(fn: ir.Operation | ir.OpView) -> ir.FunctionType:
    """The type of a `func.func`."""
    return fn.operation.attributes["function_type"].value


def symbol_refs(attr: ir.Attribute) -> Iterator[str]:
    """The symbol names referenced anywhere inside `attr` (a callee, an `fn`, the
    dictionaries and arrays of custom rules); of a nested reference, its root."""
    if isinstance(attr, ir.FlatSymbolRefAttr):
        yield attr.value
    elif isinstance(attr, ir.SymbolRefAttr):
        yield str(attr).lstrip("@").split("::")[0].strip('"')
    elif isinstance(attr, ir.ArrayAttr):
        for a in attr:
            yield from symbol_refs(a)
    elif isinstance(attr, ir.DictAttr):
        for i in range(len(attr)):
            yield from symbol_refs(attr[i].attr)


def unique_symbol(module: ir.Operation | ir.OpView | ir.Module, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ...: a name no symbol at the top of `module` has."""
    body = module.body if isinstance(module, ir.Module) else module.operation.regions[0].blocks[0]
    return unique_name({sym_name(op) for op in body.operations
                        if "sym_name" in op.operation.attributes}, base)


# -- polynomials -----------------------------------------------------------------


def horner(x: ir.Value, coeffs: Sequence[float], *, fused: bool = False,
           highest_first: bool = False) -> ir.Value:
    """coeffs[0] + x * (coeffs[1] + x * (...)) in x's float type (`highest_first`:
    the coefficients are given from the highest degree down); `fused`: each step is
    one `math.fma` (one rounding) instead of `arith.mulf` then `arith.addf`."""
    from mlir.dialects import arith
    from mlir.dialects import math as math_d

    t = x.type
    if highest_first:
        coeffs = list(reversed(coeffs))

    def const(c: float) -> ir.Value:
        return arith.constant(t, ir.FloatAttr.get(t, c))

    acc = const(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        if fused:
            acc = math_d.fma(acc, x, const(c))
        else:
            acc = arith.addf(arith.mulf(acc, x), const(c))
    return acc
