"""The `autodiff` dialect: loading (from IRDL) and Python op builders.

The dialect is defined in `autodiff.irdl.mlir` beside this file, which stock
upstream tools load with `--irdl-file`. Our own contexts accept autodiff ops
as unregistered ops (`load(ctx)`) and check them with `verify(op)`, which
applies the IRDL file's constraints per operand (see `verify.py`: MLIR 22's
IRDL cannot express heterogeneous variadic operand lists).

Builders follow the upstream binding idiom: an op class whose constructor
builds the op, and a snake_case function returning the op's value(s), both
with keyword-only `loc=` and `ip=`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlir import ir
from mlir.dialects import irdl
from mlir.dialects._ods_common import _cext

from .verify import DISTRIBUTIONS, RANDOMNESS, SPECS
from .vocabulary import CHECKPOINT, JVP, PHILOX, RANDOM, STOP_GRADIENT, VJP, VMAP

IRDL_FILE = Path(__file__).with_name("autodiff.irdl.mlir")

#: Every op the dialect defines, by full name.
OP_NAMES = (
    JVP,
    VJP,
    VMAP,
    STOP_GRADIENT,
    CHECKPOINT,
    RANDOM,
    PHILOX,
)


_irdl_text: str | None = None


def irdl_source() -> str:
    """The dialect's IRDL definition as text (read once per process)."""
    global _irdl_text
    if _irdl_text is None:
        _irdl_text = IRDL_FILE.read_text()
    return _irdl_text


def is_loaded(context: ir.Context | None = None) -> bool:
    ctx = context or ir.Context.current
    return ctx.allow_unregistered_dialects


def load(context: ir.Context | None = None) -> None:
    """Make `context` accept autodiff ops (default: the current context).

    Autodiff ops live in the context as ops of an unregistered dialect and are
    checked by `verify` (see `verify.py` for why the IRDL definition is not
    registered in our own contexts). Safe to call any number of times.
    """
    ctx = context or ir.Context.current
    ctx.allow_unregistered_dialects = True


def verify(root: ir.Operation | ir.OpView | ir.Module, *, allow_unregistered: bool = False) -> bool:
    """Check every autodiff op under `root`, emitting an error at each bad one."""
    from .verify import verify as _verify

    op = root.operation
    return _verify(op, allow_unregistered=allow_unregistered)


def load_irdl_file(path: str, context: ir.Context | None = None) -> None:
    """Load an extra IRDL file (the `--irdl-file` of autodiff-opt).

    Dialects already registered in the context are skipped rather than
    re-registered, which MLIR would abort on.
    """
    ctx = context or ir.Context.current
    with ctx, ir.Location.file(path, 0, 0):
        defs = ir.Module.parse(Path(path).read_text())
        fresh = []
        for op in defs.body.operations:
            if op.operation.name != "irdl.dialect":
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            ops = [
                f"{name}.{ir.StringAttr(inner.attributes['sym_name']).value}"
                for inner in op.regions[0].blocks[0].operations
                if inner.operation.name == "irdl.operation"
            ]
            if name == "autodiff":
                continue  # the project's own dialect: checked by `verify`, see verify.py
            if ops and all(ctx.is_registered_operation(o) for o in ops):
                continue
            fresh.append(op)
        if not fresh:
            return
        for op in list(defs.body.operations):
            if op not in fresh:
                op.operation.erase()
        irdl.load_dialects(defs)


# ----------------------------------------------------------------------------
# Op builders
# ----------------------------------------------------------------------------


@_cext.register_dialect
class _Dialect(ir.Dialect):
    DIALECT_NAMESPACE = "autodiff"


def _values(xs: Sequence[ir.Value | ir.OpView | ir.Operation]) -> list[ir.Value]:
    out = []
    for x in xs:
        if isinstance(x, ir.Value):
            out.append(x)
        else:
            out.extend(x.results)
    return out


def _i64_array(xs: Sequence[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(list(xs))


def _symbol(fn: str | ir.Attribute) -> ir.Attribute:
    if isinstance(fn, ir.Attribute):
        return fn
    return ir.FlatSymbolRefAttr.get(fn.lstrip("@"))


def _single_or_tuple(op: ir.OpView):
    results = list(op.results)
    if len(results) == 1:
        return results[0]
    return tuple(results)


class _AutodiffOp(ir.OpView):
    OPERATION_NAME = ""
    _ODS_REGIONS = (0, True)

    def _init(self, results, operands, attributes, loc, ip):
        op = ir.Operation.create(
            self.OPERATION_NAME,
            results=list(results),
            operands=_values(operands),
            attributes=attributes,
            loc=loc,
            ip=ip,
        )
        super().__init__(op)


@_cext.register_operation(_Dialect)
class JvpOp(_AutodiffOp):
    """`autodiff.jvp {fn}`: (primals..., tangents...) -> (outputs..., output tangents...)."""

    OPERATION_NAME = JVP

    def __init__(self, result_types, primals, tangents, fn, *, loc=None, ip=None):
        self._init(result_types, [*primals, *tangents], {"fn": _symbol(fn)}, loc, ip)


def jvp(result_types, primals, tangents, fn, *, loc=None, ip=None):
    return _single_or_tuple(JvpOp(result_types, primals, tangents, fn, loc=loc, ip=ip))


@_cext.register_operation(_Dialect)
class VjpOp(_AutodiffOp):
    """`autodiff.vjp {fn, wrt?}`: (primals..., cotangents...) -> (outputs..., input cotangents...)."""

    OPERATION_NAME = VJP

    def __init__(self, result_types, primals, cotangents, fn, wrt=None, *, loc=None, ip=None):
        attrs = {"fn": _symbol(fn)}
        if wrt is not None:
            attrs["wrt"] = _i64_array(wrt)
        self._init(result_types, [*primals, *cotangents], attrs, loc, ip)


def vjp(result_types, primals, cotangents, fn, wrt=None, *, loc=None, ip=None):
    return _single_or_tuple(
        VjpOp(result_types, primals, cotangents, fn, wrt, loc=loc, ip=ip)
    )


@_cext.register_operation(_Dialect)
class VmapOp(_AutodiffOp):
    """`autodiff.vmap {fn, in_axes, out_axes, randomness}`: args... -> results..."""

    OPERATION_NAME = VMAP

    def __init__(
        self, result_types, args, fn, in_axes, out_axes, randomness="error", *, loc=None, ip=None
    ):
        if randomness not in RANDOMNESS:
            raise ValueError(f"randomness must be one of {RANDOMNESS}, got {randomness!r}")
        attrs = {
            "fn": _symbol(fn),
            "in_axes": _i64_array(in_axes),
            "out_axes": _i64_array(out_axes),
            "randomness": ir.StringAttr.get(randomness),
        }
        self._init(result_types, args, attrs, loc, ip)


def vmap(result_types, args, fn, in_axes, out_axes, randomness="error", *, loc=None, ip=None):
    return _single_or_tuple(
        VmapOp(result_types, args, fn, in_axes, out_axes, randomness, loc=loc, ip=ip)
    )


@_cext.register_operation(_Dialect)
class StopGradientOp(_AutodiffOp):
    """`autodiff.stop_gradient`: identity with a zero derivative."""

    OPERATION_NAME = STOP_GRADIENT

    def __init__(self, x, *, loc=None, ip=None):
        (value,) = _values([x])
        self._init([value.type], [value], {}, loc, ip)


def stop_gradient(x, *, loc=None, ip=None) -> ir.Value:
    return StopGradientOp(x, loc=loc, ip=ip).result


@_cext.register_operation(_Dialect)
class CheckpointOp(_AutodiffOp):
    """`autodiff.checkpoint {fn}`: a call recomputed, not saved, in the backward pass."""

    OPERATION_NAME = CHECKPOINT

    def __init__(self, result_types, args, fn, *, loc=None, ip=None):
        self._init(result_types, args, {"fn": _symbol(fn)}, loc, ip)


def checkpoint(result_types, args, fn, *, loc=None, ip=None):
    return _single_or_tuple(CheckpointOp(result_types, args, fn, loc=loc, ip=ip))


def _distribution_attrs(distribution: str, params: dict[str, float]) -> dict[str, ir.Attribute]:
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    attrs: dict[str, ir.Attribute] = {"distribution": ir.StringAttr.get(distribution)}
    f64 = ir.F64Type.get()
    for key, value in params.items():
        attrs[key] = ir.FloatAttr.get(f64, float(value))
    return attrs


@_cext.register_operation(_Dialect)
class RandomOp(_AutodiffOp):
    """`autodiff.random {distribution, low/high | mean/std}`: a draw from the implicit generator."""

    OPERATION_NAME = RANDOM

    def __init__(self, result_type, distribution="uniform", *, loc=None, ip=None, **params):
        self._init([result_type], [], _distribution_attrs(distribution, params), loc, ip)


def random(result_type, distribution="uniform", *, loc=None, ip=None, **params) -> ir.Value:
    return RandomOp(result_type, distribution, loc=loc, ip=ip, **params).result


@_cext.register_operation(_Dialect)
class PhiloxOp(_AutodiffOp):
    """`autodiff.philox {distribution}`: (seed: i64, offset: i64) -> tensor, Philox4x32-10."""

    OPERATION_NAME = PHILOX

    def __init__(self, result_type, seed, offset, distribution="uniform", *, loc=None, ip=None,
                 **params):
        self._init(
            [result_type], [seed, offset], _distribution_attrs(distribution, params), loc, ip
        )


def philox(result_type, seed, offset, distribution="uniform", *, loc=None, ip=None,
           **params) -> ir.Value:
    return PhiloxOp(result_type, seed, offset, distribution, loc=loc, ip=ip, **params).result


__all__ = [
    "IRDL_FILE", "OP_NAMES", "SPECS", "load", "is_loaded", "verify", "load_irdl_file", "irdl_source",
    "JvpOp", "jvp", "VjpOp", "vjp", "VmapOp", "vmap", "StopGradientOp", "stop_gradient",
    "CheckpointOp", "checkpoint", "RandomOp", "random", "PhiloxOp", "philox",
]
