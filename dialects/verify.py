"""Verification of autodiff ops, with the constraints of `autodiff.irdl.mlir`.

Why this exists: IRDL as implemented in MLIR 22 binds one constraint
variable per op verification, and a `variadic` operand group shares one
variable across all its elements, so `irdl.operands(args: variadic %any)`
accepts only operand lists whose types are all equal. The transform ops
(`jvp`, `vjp`, `vmap`, `checkpoint`) take heterogeneous lists — primals of
several shapes, a 0-d cotangent — so registering the IRDL dialect would
reject nearly every real program. Our tools therefore treat `autodiff.*` as
ops of an unregistered dialect and check them here, with the constraints
the IRDL file states and the messages IRDL would print. Stock `mlir-opt
--irdl-file=dialects/autodiff.irdl.mlir` still verifies the fixed-arity ops
and transform ops whose operand types agree. `test_dialect.py` keeps this
table and the IRDL file in step.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from mlir import ir

from .vocabulary import CHECKPOINT, JVP, PHILOX, RANDOM, STOP_GRADIENT, VJP, VMAP, is_autodiff

DISTRIBUTIONS = ("uniform", "normal", "bits")
RANDOMNESS = ("error", "different", "same")

AttrCheck = Callable[[ir.Attribute], str | None]


def _attr_kind(a: ir.Attribute) -> str:
    for cls, name in (
        (ir.FlatSymbolRefAttr, "builtin.symbol_ref"),
        (ir.SymbolRefAttr, "builtin.symbol_ref"),
        (ir.DenseI64ArrayAttr, "builtin.dense_array"),
        (ir.DenseI32ArrayAttr, "builtin.dense_array"),
        (ir.DenseBoolArrayAttr, "builtin.dense_array"),
        (ir.ArrayAttr, "builtin.array"),
        (ir.StringAttr, "builtin.string"),
        (ir.IntegerAttr, "builtin.integer"),
        (ir.FloatAttr, "builtin.float"),
        (ir.UnitAttr, "builtin.unit"),
        (ir.DictAttr, "builtin.dictionary"),
        (ir.TypeAttr, "builtin.type"),
        (ir.DenseElementsAttr, "builtin.dense_int_or_fp_elements"),
    ):
        if isinstance(a, cls):
            return name
    return str(a)


def _base(kind: str, cls: type) -> AttrCheck:
    def check(a: ir.Attribute) -> str | None:
        if isinstance(a, cls):
            return None
        return f"expected base attribute '{kind}' but got '{_attr_kind(a)}'"

    return check


def _one_of(values: tuple[str, ...]) -> AttrCheck:
    def check(a: ir.Attribute) -> str | None:
        if isinstance(a, ir.StringAttr) and a.value in values:
            return None
        return f"'{a}' does not satisfy the constraint"

    return check


def _i64_array(a: ir.Attribute) -> str | None:
    if isinstance(a, ir.DenseI64ArrayAttr):
        return None
    if _is_dense_array(a):  # of another element type: the passes read i64s
        return f"expected an array<i64: ...> but got '{a}'"
    return f"expected base attribute 'builtin.dense_array' but got '{_attr_kind(a)}'"


def _is_dense_array(a: ir.Attribute) -> bool:
    return str(a).startswith("array<")


class _Unreadable:
    """An attribute the bindings cannot hand to Python (e.g. `array<i0: 0>`)."""

    def __init__(self, error: Exception):
        self.error = error


def attribute(op: ir.Operation, name: str) -> ir.Attribute | _Unreadable | None:
    """`op`'s attribute `name`; None if absent; _Unreadable if the bindings cannot cast it."""
    if name not in op.attributes:
        return None
    try:
        return op.attributes[name]
    except (TypeError, ValueError) as err:  # an element type the bindings have no class for
        return _Unreadable(err)


_SYMBOL = _base("builtin.symbol_ref", ir.FlatSymbolRefAttr)
_I64_ARRAY = _i64_array
_FLOAT = _base("builtin.float", ir.FloatAttr)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    attrs: dict[str, AttrCheck]
    optional_attrs: dict[str, AttrCheck] = dataclasses.field(default_factory=dict)
    #: None: any number (variadic); else the exact count.
    num_operands: int | None = None
    num_results: int | None = None
    extra: Callable[[ir.Operation], str | None] | None = None


def _stop_gradient(op: ir.Operation) -> str | None:
    a, r = op.operands[0].type, op.results[0].type
    return None if a == r else f"expected '{a}' but got '{r}'"


# IRDL names a type by its definition, not its spelling (i64 is builtin.integer).
_TYPE_KINDS = (
    (ir.IntegerType, "builtin.integer"),
    (ir.IndexType, "builtin.index"),
    (ir.VectorType, "builtin.vector"),
    (ir.RankedTensorType, "builtin.tensor"),
    (ir.UnrankedTensorType, "builtin.unranked_tensor"),
    (ir.MemRefType, "builtin.memref"),
    (ir.UnrankedMemRefType, "builtin.unranked_memref"),
    (ir.ComplexType, "builtin.complex"),
    (ir.TupleType, "builtin.tuple"),
    (ir.FunctionType, "builtin.function"),
    (ir.NoneType, "builtin.none"),
)


def _type_kind(t: ir.Type) -> str:
    for cls, kind in _TYPE_KINDS:
        if isinstance(t, cls):
            return kind
    return f"builtin.{t}"  # float types: builtin.f32, builtin.bf16, ...


def _tensor_result(op: ir.Operation) -> str | None:
    t = op.results[0].type
    if isinstance(t, ir.RankedTensorType):
        return None
    return f"expected base type 'builtin.tensor' but got '{_type_kind(t)}'"


def _philox(op: ir.Operation) -> str | None:
    i64 = ir.IntegerType.get_signless(64, op.context)
    for v in op.operands:
        if v.type != i64:
            return f"expected 'i64' but got '{v.type}'"
    return _tensor_result(op)


_DIST_PARAMS = {"low": _FLOAT, "high": _FLOAT, "mean": _FLOAT, "std": _FLOAT}

SPECS: dict[str, OpSpec] = {
    JVP: OpSpec({"fn": _SYMBOL}),
    VJP: OpSpec({"fn": _SYMBOL}, {"wrt": _I64_ARRAY}),
    VMAP: OpSpec({
        "fn": _SYMBOL,
        "in_axes": _I64_ARRAY,
        "out_axes": _I64_ARRAY,
        "randomness": _one_of(RANDOMNESS),
    }),
    STOP_GRADIENT: OpSpec({}, num_operands=1, num_results=1, extra=_stop_gradient),
    CHECKPOINT: OpSpec({"fn": _SYMBOL}, {"policy": _base("builtin.string",
                                                                     ir.StringAttr)}),
    RANDOM: OpSpec({"distribution": _one_of(DISTRIBUTIONS)}, _DIST_PARAMS,
                              num_operands=0, num_results=1, extra=_tensor_result),
    PHILOX: OpSpec({"distribution": _one_of(DISTRIBUTIONS)}, _DIST_PARAMS,
                              num_operands=2, num_results=1, extra=_philox),
}


def _check(check: AttrCheck, value: ir.Attribute | _Unreadable) -> str | None:
    if isinstance(value, _Unreadable):
        m = re.search(r"Attribute\((.*)\)\)?$", str(value.error))
        shown = f"'{m.group(1).rstrip(')')}'" if m else "a value the bindings cannot read"
        return f"unsupported attribute value {shown}"
    return check(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}s"  # IRDL's wording, even for one: "expects exactly 1 operands"


def check_op(op: ir.Operation) -> str | None:
    """The first constraint `op` (an autodiff op) violates, as IRDL words it; None if valid."""
    name = op.name
    spec = SPECS.get(name)
    if spec is None:
        return f"unregistered operation '{name}' found in dialect ('autodiff')"
    if spec.num_operands is not None and len(op.operands) != spec.num_operands:
        return (f"op expects exactly {_plural(spec.num_operands, 'operand')}, "
                f"but got {len(op.operands)}")
    if spec.num_results is not None and len(op.results) != spec.num_results:
        return (f"op expects exactly {_plural(spec.num_results, 'result')}, "
                f"but got {len(op.results)}")
    if op.regions and len(op.regions) != 0:
        return f"'{name}' op unexpected number of regions: expected 0 but got {len(op.regions)}"
    for attr, check in spec.attrs.items():
        value = attribute(op, attr)
        if value is None:
            return f"'{name}' op attribute \"{attr}\" is expected but not provided"
        problem = _check(check, value)
        if problem:
            return f"'{name}' op attribute '{attr}': {problem}"
    for attr, check in spec.optional_attrs.items():
        value = attribute(op, attr)
        if value is not None:
            problem = _check(check, value)
            if problem:
                return f"'{name}' op attribute '{attr}': {problem}"
    if spec.extra is not None:
        return spec.extra(op)
    return None


def verify(root: ir.Operation, *, allow_unregistered: bool = False) -> bool:
    """Check every autodiff op under `root`; emit an error at each bad op. True if all valid.

    Also rejects ops of other unregistered dialects (our contexts allow
    unregistered ops only so that autodiff ops parse) unless
    `allow_unregistered` is set, as mlir-opt's --allow-unregistered-dialect.
    """
    ok = True
    ctx = root.context

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal ok
        name = op.name
        if is_autodiff(name):
            problem = check_op(op)
        elif allow_unregistered or ctx.is_registered_operation(name):
            problem = None
        else:
            dialect = name.split(".", 1)[0]
            problem = (f"operation '{name}' is from the unregistered dialect '{dialect}' "
                       "(use --allow-unregistered-dialect to accept it)")
        if problem is not None:
            ok = False
            op.location.emit_error(problem)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return ok
