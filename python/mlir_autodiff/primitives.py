"""The ops the tracer emits: a small, fixed vocabulary of upstream MLIR on tensors.

`mlir_autodiff.numpy` is written entirely on these primitives, so the IR that
transforms and passes see uses only:

- `arith.constant` (dense tensor constants), `tensor.empty`, `linalg.fill`;
- `linalg.generic` for elementwise ops, with broadcasting expressed in the
  indexing maps (every input map is a projected permutation: size-1 dims that
  broadcast are first dropped with `tensor.collapse_shape`), and for
  contractions (einsum) with reduction iterators;
- `linalg.reduce`, `linalg.transpose`, `linalg.broadcast`, `linalg.matmul`,
  `linalg.batch_matmul`;
- `tensor.collapse_shape` / `tensor.expand_shape` (reshape),
  `tensor.extract_slice` / `tensor.insert_slice` (indexing, updates, concatenate).

Each function takes Tracers (captured into the active trace if they come from an
enclosing one), emits at the user's source location and returns a Tracer.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from .errors import ShapeError, UnsupportedError
from .tracing import (
    FunctionTrace,
    ShapedArray,
    Tracer,
    canonical_dtype,
    compute_type,
    element_type,
    format_site,
    is_float_dtype,
    require_trace,
    set_lift_ops,
    storage_dtype,
)

Body = Callable[[list[ir.Value]], ir.Value]


def _fmt_shape(shape: Sequence[int]) -> str:
    # numpy's spelling in broadcast errors: (2,3) and (4,)
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ",".join(str(d) for d in shape) + ")"


def broadcast_shapes(opname: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's broadcast of `shapes`; a ShapeError naming `opname` and the user's line."""
    n = max((len(s) for s in shapes), default=0)
    out = [1] * n
    for s in shapes:
        for i, d in enumerate(s):
            j = n - len(s) + i
            if d == out[j] or d == 1:
                continue
            if out[j] == 1:
                out[j] = d
                continue
            raise ShapeError(
                f"{opname}: operands could not be broadcast together with shapes "
                f"{' '.join(_fmt_shape(t) for t in shapes)} at {format_site()}"
            )
    return tuple(out)


def _iterators(kinds: Sequence[str]) -> ir.ArrayAttr:
    """`["parallel", "reduction", ...]` as linalg's iterator_types attribute."""
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def _maps(maps: Sequence[ir.AffineMap]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])


def _tensor_type(shape: Sequence[int], dtype: np.dtype) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type(dtype))


def _is_float(dtype: np.dtype) -> bool:
    return is_float_dtype(dtype)


def _is_bool(dtype: np.dtype) -> bool:
    return dtype == np.dtype(np.bool_)


def scalar_attr(dtype: np.dtype, value: Any, *, storage: bool = True) -> ir.Attribute:
    """`value` as an attribute of dtype's storage type (or compute type: i1 for bool)."""
    elt = element_type(dtype) if storage else compute_type(dtype)
    if _is_float(dtype):
        return ir.FloatAttr.get(elt, float(value))
    return ir.IntegerAttr.get(elt, int(bool(value)) if _is_bool(dtype) else int(value))


def scalar_constant(dtype: np.dtype, value: Any) -> ir.Value:
    """An `arith.constant` scalar to compute with inside a generic body (bool: i1)."""
    return arith.ConstantOp(compute_type(dtype),
                            scalar_attr(dtype, value, storage=False)).result


def _storage_constant(dtype: np.dtype, value: Any) -> ir.Value:
    return arith.ConstantOp(element_type(dtype), scalar_attr(dtype, value)).result


def _load(dtype: np.dtype, v: ir.Value) -> ir.Value:
    """A stored element as a compute value (i8 -> i1 for bools)."""
    if _is_bool(dtype) and v.type != compute_type(dtype):
        return arith.trunci(compute_type(dtype), v)
    return v


def _store(dtype: np.dtype, v: ir.Value) -> ir.Value:
    """A compute value as a stored element (i1 -> i8 for bools)."""
    if _is_bool(dtype) and v.type != element_type(dtype):
        return arith.extui(element_type(dtype), v)
    return v


# --------------------------------------------------------------------------- constants

def constant(value: Any, dtype: Any = None, weak_type: bool = False) -> Tracer:
    """A dense tensor constant (splat when all elements are equal)."""
    trace = require_trace("constant")
    arr = np.asarray(value)
    dt = canonical_dtype(dtype if dtype is not None else arr.dtype)
    arr = np.array(arr, dtype=dt, order="C")  # (ascontiguousarray would make 0-d 1-d)
    with trace.emitting():
        ttype = _tensor_type(arr.shape, dt)
        first = arr.reshape(-1)[0] if arr.size else None
        if arr.size and np.all(arr == first):
            attr = ir.DenseElementsAttr.get_splat(ttype, scalar_attr(dt, first))
        else:
            data = arr.astype(storage_dtype(dt)) if _is_bool(dt) else arr
            attr = ir.DenseElementsAttr.get(data, type=ttype)
        v = arith.ConstantOp(ttype, attr).result
    return Tracer(v, ShapedArray(arr.shape, dt, weak_type), trace)


def python_scalar_dtype(x: Any) -> np.dtype | None:
    """The default dtype of a Python scalar (bool, int, float), else None."""
    if isinstance(x, np.generic):  # np.float64 subclasses float but is strongly typed
        return None
    if isinstance(x, bool):
        return np.dtype(np.bool_)
    if isinstance(x, int):
        return np.dtype(np.int64)
    if isinstance(x, float):
        return np.dtype(np.float64)
    return None


def constant_like(x: Any, dtype: Any = None) -> Tracer:
    """`x` (Python scalar: weakly typed; numpy array/scalar, list: strong) as a constant."""
    if isinstance(x, complex) or np.iscomplexobj(x):
        raise UnsupportedError(f"complex values are not supported (at {format_site()})")
    default = python_scalar_dtype(x)
    if default is not None:
        return constant(x, dtype if dtype is not None else default, weak_type=True)
    arr = np.asarray(x)
    if arr.dtype == object:
        raise UnsupportedError(
            f"cannot use a value of type {type(x).__name__} as an array at {format_site()}"
        )
    if dtype is None and arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        dtype = np.float64  # long double: the widest float the compiler has
    return constant(arr, dtype)


# --------------------------------------------------------------------------- helpers on values

def _empty(shape: Sequence[int], dtype: np.dtype) -> ir.Value:
    return tensor.empty(list(shape), element_type(dtype))


def _filled(shape: Sequence[int], dtype: np.dtype, value: Any) -> ir.Value:
    return linalg.fill(_storage_constant(dtype, value), outs=[_empty(shape, dtype)])


def _group(big: Sequence[int], small: Sequence[int]) -> list[list[int]] | None:
    """Group consecutive dims of `big` so each group's product is a dim of `small`."""
    if not small:
        return [] if all(d == 1 for d in big) else None
    groups: list[list[int]] = []
    j = 0
    for i, want in enumerate(small):
        if j >= len(big):
            return None
        group = [j]
        prod = big[j]
        j += 1
        while prod != want and j < len(big) and (prod < want or want == 0):
            prod *= big[j]
            group.append(j)
            j += 1
        if prod != want:
            return None
        if i == len(small) - 1:
            while j < len(big):  # trailing unit dims join the last group
                if big[j] != 1:
                    return None
                group.append(j)
                j += 1
        groups.append(group)
    return groups if j == len(big) else None


def reshape_value(v: ir.Value, src: Sequence[int], dst: Sequence[int],
                  dtype: np.dtype) -> ir.Value:
    """Reshape with collapse_shape/expand_shape (through 1-D when no direct grouping exists)."""
    src, dst = list(src), list(dst)
    if src == dst:
        return v
    if len(dst) <= len(src):
        groups = _group(src, dst)
        if groups is not None:
            return tensor.collapse_shape(_tensor_type(dst, dtype), v, groups)
    if len(dst) >= len(src):
        groups = _group(dst, src)
        if groups is not None:
            return tensor.expand_shape(_tensor_type(dst, dtype), v, groups, [], dst)
    # No direct grouping (e.g. (2,3) -> (3,2)): collapse everything, then expand.
    n = pymath.prod(src)
    if len(src) > 1:
        v = tensor.collapse_shape(_tensor_type([n], dtype), v, [list(range(len(src)))])
    if len(dst) > 1:
        v = tensor.expand_shape(_tensor_type(dst, dtype), v, [list(range(len(dst)))], [], dst)
    return v


def _squeeze_broadcast_dims(v: ir.Value, shape: Sequence[int], out_shape: Sequence[int],
                            dtype: np.dtype) -> tuple[ir.Value, list[int]]:
    """Drop the size-1 dims of `shape` that broadcast against `out_shape`.

    Returns the new value and, for each kept dim, its dim in `out_shape`.
    """
    offset = len(out_shape) - len(shape)
    keep = [i for i in range(len(shape)) if not (shape[i] == 1 and out_shape[offset + i] != 1)]
    if len(keep) != len(shape):
        v = reshape_value(v, shape, [shape[i] for i in keep], dtype)
    return v, [offset + i for i in keep]


def _lift_all(trace: FunctionTrace, xs: Sequence[Tracer]) -> list[Tracer]:
    return [trace.lift(x) for x in xs]


# --------------------------------------------------------------------------- elementwise

def elementwise(opname: str, operands: Sequence[Tracer], out_dtype: Any, body: Body,
                weak_type: bool = False) -> Tracer:
    """A broadcasting `linalg.generic`; `body(scalars) -> scalar` builds its payload."""
    trace = require_trace(opname)
    ops = _lift_all(trace, operands)
    shape = broadcast_shapes(opname, *[o.shape for o in ops])
    out_dtype = canonical_dtype(out_dtype)
    n = len(shape)
    with trace.emitting():
        ins: list[ir.Value] = []
        maps: list[ir.AffineMap] = []
        for o in ops:
            v, dims = _squeeze_broadcast_dims(o.value, o.shape, shape, o.dtype)
            ins.append(v)
            maps.append(ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in dims]))
        maps.append(ir.AffineMap.get_identity(n))
        init = _empty(shape, out_dtype)
        op = linalg.GenericOp([init.type], ins, [init], _maps(maps), _iterators(["parallel"] * n))
        block = op.regions[0].blocks.append(*[element_type(o.dtype) for o in ops],
                                            element_type(out_dtype))
        with ir.InsertionPoint(block):
            args = [_load(o.dtype, a) for o, a in zip(ops, list(block.arguments))]
            linalg.YieldOp([_store(out_dtype, body(args))])
    return Tracer(op.result, ShapedArray(shape, out_dtype, weak_type), trace)


def convert(x: Tracer, dtype: Any, weak_type: bool | None = None) -> Tracer:
    """Elementwise dtype conversion with numpy's casting semantics (C-like truncation)."""
    dt = canonical_dtype(dtype)
    weak = x.weak_type if weak_type is None else weak_type
    src = x.dtype
    if src == dt:
        if weak == x.weak_type:
            return x
        return Tracer(x.value, ShapedArray(x.shape, dt, weak), x.trace)
    def body(a: list[ir.Value]) -> ir.Value:
        v = a[0]
        to = compute_type(dt)
        if _is_bool(dt):  # nonzero -> True (NaN is nonzero, as in numpy)
            if _is_float(src):
                return arith.cmpf(arith.CmpFPredicate.UNE, v, scalar_constant(src, 0.0))
            return arith.cmpi(arith.CmpIPredicate.ne, v, scalar_constant(src, 0))
        if _is_float(src) and _is_float(dt):
            if np.dtype(dt).itemsize == np.dtype(src).itemsize:  # float16 <-> bfloat16
                return arith.truncf(to, arith.extf(ir.F32Type.get(), v))
            wider = np.dtype(dt).itemsize > np.dtype(src).itemsize
            return arith.extf(to, v) if wider else arith.truncf(to, v)
        if _is_float(dt):
            return arith.uitofp(to, v) if _is_bool(src) else arith.sitofp(to, v)
        if _is_float(src):
            return arith.fptosi(to, v)
        if _is_bool(src):
            return arith.extui(to, v)
        wider = np.dtype(dt).itemsize > np.dtype(src).itemsize
        return arith.extsi(to, v) if wider else arith.trunci(to, v)

    return elementwise("astype", [x], dt, body, weak_type=weak)


# --------------------------------------------------------------------------- reductions

_REDUCE_KINDS = ("sum", "prod", "max", "min")


def _reduce_identity(kind: str, dtype: np.dtype) -> Any:
    if _is_bool(dtype):
        return {"sum": False, "prod": True, "max": False, "min": True}[kind]
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if _is_float(dtype):
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if kind == "max" else info.max


def combiner(kind: str, dtype: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    """The scalar op of a reduction `kind` (max/min propagate NaN, as numpy does)."""
    if _is_bool(dtype):
        return arith.ori(a, b) if kind in ("sum", "max") else arith.andi(a, b)
    if _is_float(dtype):
        fn = {"sum": arith.addf, "prod": arith.mulf, "max": arith.maximumf,
              "min": arith.minimumf}[kind]
    else:
        fn = {"sum": arith.addi, "prod": arith.muli, "max": arith.maxsi, "min": arith.minsi}[kind]
    return fn(a, b)


_F32 = np.dtype(np.float32)


def _half(dtype: np.dtype) -> bool:
    """float16 / bfloat16: sums and products of these accumulate in float32 (as jax
    does on every backend), rounded once at the end."""
    return _is_float(dtype) and np.dtype(dtype).itemsize == 2


def reduce(x: Tracer, axes: Sequence[int], kind: str) -> Tracer:
    """`linalg.reduce` of `x` over `axes` (normalized, any order) with `kind`."""
    assert kind in _REDUCE_KINDS, kind
    trace = require_trace(kind)
    x = trace.lift(x)
    axes = sorted(set(axes))
    if not axes:
        return x
    if _half(x.dtype) and kind in ("sum", "prod"):
        return convert(reduce(convert(x, _F32), axes, kind), x.dtype, x.weak_type)
    out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    dt = x.dtype
    with trace.emitting():
        init = _filled(out_shape, dt, _reduce_identity(kind, dt))
        op = linalg.ReduceOp([init.type], [x.value], [init], axes)
        elt = element_type(dt)
        block = op.regions[0].blocks.append(elt, elt)
        with ir.InsertionPoint(block):
            linalg.YieldOp([combiner(kind, dt, block.arguments[0], block.arguments[1])])
    return Tracer(op.result, ShapedArray(out_shape, dt, x.weak_type), trace)


def arg_reduce(x: Tracer, axis: int, kind: str) -> Tracer:
    """Index (int64) of the first max/min along `axis` (NaN wins, as in numpy)."""
    trace = require_trace("arg" + kind)
    x = trace.lift(x)
    dt = x.dtype
    n = x.ndim
    out_shape = [d for i, d in enumerate(x.shape) if i != axis]
    i64 = np.dtype(np.int64)
    with trace.emitting():
        vals = _filled(out_shape, dt, _reduce_identity(kind, dt))
        idxs = _filled(out_shape, i64, 0)
        out_exprs = [ir.AffineDimExpr.get(d) for d in range(n) if d != axis]
        maps = [ir.AffineMap.get_identity(n), ir.AffineMap.get(n, 0, out_exprs),
                ir.AffineMap.get(n, 0, out_exprs)]
        iters = _iterators(["reduction" if d == axis else "parallel" for d in range(n)])
        op = linalg.GenericOp([vals.type, idxs.type], [x.value], [vals, idxs], _maps(maps),
                              iters)
        elt = element_type(dt)
        block = op.regions[0].blocks.append(elt, elt, element_type(i64))
        with ir.InsertionPoint(block):
            v, best, best_i = block.arguments
            cur = arith.index_cast(element_type(i64), linalg.IndexOp(axis).result)
            if _is_float(dt):
                pred = arith.CmpFPredicate.OGT if kind == "max" else arith.CmpFPredicate.OLT
                better = arith.cmpf(pred, v, best)
                # NaN wins (first one): v is NaN and best is not.
                v_nan = arith.cmpf(arith.CmpFPredicate.UNO, v, v)
                best_nan = arith.cmpf(arith.CmpFPredicate.UNO, best, best)
                not_best_nan = arith.xori(best_nan, arith.ConstantOp(best_nan.type, 1).result)
                better = arith.ori(arith.andi(better, not_best_nan),
                                   arith.andi(v_nan, not_best_nan))
            elif _is_bool(dt):
                pred = arith.CmpIPredicate.ugt if kind == "max" else arith.CmpIPredicate.ult
                better = arith.cmpi(pred, v, best)
            else:
                pred = arith.CmpIPredicate.sgt if kind == "max" else arith.CmpIPredicate.slt
                better = arith.cmpi(pred, v, best)
            # The very first element always wins (handles all -inf / all-equal inputs).
            first = arith.cmpi(arith.CmpIPredicate.eq, cur,
                               arith.ConstantOp(element_type(i64), 0).result)
            take = arith.ori(better, first)
            linalg.YieldOp([arith.select(take, v, best), arith.select(take, cur, best_i)])
    return Tracer(op.results[1], ShapedArray(out_shape, i64), trace)


# --------------------------------------------------------------------------- shapes

def reshape(x: Tracer, shape: Sequence[int]) -> Tracer:
    trace = require_trace("reshape")
    x = trace.lift(x)
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    with trace.emitting():
        v = reshape_value(x.value, x.shape, shape, x.dtype)
    return Tracer(v, ShapedArray(shape, x.dtype, x.weak_type), trace)


def transpose(x: Tracer, perm: Sequence[int]) -> Tracer:
    trace = require_trace("transpose")
    x = trace.lift(x)
    perm = [int(p) for p in perm]
    if perm == list(range(x.ndim)):
        return x
    out_shape = [x.shape[p] for p in perm]
    with trace.emitting():
        op = linalg.transpose(x.value, outs=[_empty(out_shape, x.dtype)], permutation=perm)
    return Tracer(op.results[0], ShapedArray(out_shape, x.dtype, x.weak_type), trace)


def broadcast_to(x: Tracer, shape: Sequence[int], opname: str = "broadcast_to") -> Tracer:
    """numpy.broadcast_to as (collapse of broadcast unit dims +) `linalg.broadcast`."""
    trace = require_trace(opname)
    x = trace.lift(x)
    shape = tuple(int(d) for d in shape)
    if x.shape == shape:
        return x
    offset = len(shape) - x.ndim
    if offset < 0 or any(d != 1 and d != shape[offset + i] for i, d in enumerate(x.shape)):
        raise ShapeError(
            f"{opname}: cannot broadcast a value of shape {_fmt_shape(x.shape)} to shape "
            f"{_fmt_shape(shape)} at {format_site()}"
        )
    with trace.emitting():
        v, kept = _squeeze_broadcast_dims(x.value, x.shape, shape, x.dtype)
        added = [d for d in range(len(shape)) if d not in kept]
        if added:
            op = linalg.broadcast(v, outs=[_empty(shape, x.dtype)], dimensions=added)
            v = op.results[0]
        else:  # only unit dims were dropped; restore them
            v = reshape_value(v, [shape[d] for d in kept], shape, x.dtype)
    return Tracer(v, ShapedArray(shape, x.dtype, x.weak_type), trace)


def reverse(x: Tracer, axes: Sequence[int]) -> Tracer:
    """Flip `x` along `axes`: a generic whose input map reads index (n-1-i)."""
    trace = require_trace("flip")
    x = trace.lift(x)
    axes = sorted({a for a in axes if x.shape[a] > 1})
    if not axes:
        return x
    n = x.ndim
    with trace.emitting():
        exprs = []
        for d in range(n):
            e = ir.AffineDimExpr.get(d)
            if d in axes:
                e = ir.AffineConstantExpr.get(x.shape[d] - 1) - e
            exprs.append(e)
        maps = [ir.AffineMap.get(n, 0, exprs), ir.AffineMap.get_identity(n)]
        init = _empty(x.shape, x.dtype)
        op = linalg.GenericOp([init.type], [x.value], [init], _maps(maps), _iterators(["parallel"] * n))
        elt = element_type(x.dtype)
        block = op.regions[0].blocks.append(elt, elt)
        with ir.InsertionPoint(block):
            linalg.YieldOp([block.arguments[0]])
    return Tracer(op.result, x.aval, trace)


def diagonal(x: Tracer, offset: int, axis1: int, axis2: int) -> Tracer:
    """numpy.diagonal: a generic whose input map reads (k, k + offset) on
    (axis1, axis2); the diagonal is the result's last dim."""
    trace = require_trace("diagonal")
    x = trace.lift(x)
    rest = [d for d in range(x.ndim) if d not in (axis1, axis2)]
    lo1, lo2 = max(-offset, 0), max(offset, 0)
    n = max(0, min(x.shape[axis1] - lo1, x.shape[axis2] - lo2))
    out_shape = [x.shape[d] for d in rest] + [n]
    if n == 0:
        return constant(np.zeros(out_shape, x.dtype), x.dtype, x.weak_type)
    r = len(out_shape)
    # The n x n block the diagonal runs through first (every loop size then
    # agrees with each operand's dims).
    offs = [0] * x.ndim
    sizes = list(x.shape)
    offs[axis1], offs[axis2] = lo1, lo2
    sizes[axis1] = sizes[axis2] = n
    x = extract_slice(x, offs, sizes, [1] * x.ndim)
    with trace.emitting():
        k = ir.AffineDimExpr.get(r - 1)
        exprs = [k if d in (axis1, axis2) else ir.AffineDimExpr.get(rest.index(d))
                 for d in range(x.ndim)]
        maps = [ir.AffineMap.get(r, 0, exprs), ir.AffineMap.get_identity(r)]
        init = _empty(out_shape, x.dtype)
        op = linalg.GenericOp([init.type], [x.value], [init], _maps(maps),
                              _iterators(["parallel"] * r))
        elt = element_type(x.dtype)
        block = op.regions[0].blocks.append(elt, elt)
        with ir.InsertionPoint(block):
            linalg.YieldOp([block.arguments[0]])
    return Tracer(op.result, ShapedArray(out_shape, x.dtype, x.weak_type), trace)


def extract_slice(x: Tracer, offsets: Sequence[int], sizes: Sequence[int],
                  strides: Sequence[int], drop: Sequence[int] = ()) -> Tracer:
    """`tensor.extract_slice` (positive strides); dims in `drop` (size 1) are removed."""
    trace = require_trace("getitem")
    x = trace.lift(x)
    out_shape = [s for i, s in enumerate(sizes) if i not in drop]
    if (list(offsets) == [0] * x.ndim and list(sizes) == list(x.shape)
            and list(strides) == [1] * x.ndim and not drop):
        return x
    with trace.emitting():
        v = tensor.extract_slice(_tensor_type(out_shape, x.dtype), x.value, [], [], [],
                                 list(offsets), list(sizes), list(strides))
    return Tracer(v, ShapedArray(out_shape, x.dtype, x.weak_type), trace)


def insert_slice(dest: Tracer, src: Tracer, offsets: Sequence[int], sizes: Sequence[int],
                 strides: Sequence[int]) -> Tracer:
    """`tensor.insert_slice` of `src` (shape: `sizes` minus unit dims it lacks) into `dest`."""
    trace = require_trace("at[].set")
    dest, src = trace.lift(dest), trace.lift(src)
    with trace.emitting():
        v = tensor.insert_slice(src.value, dest.value, [], [], [], list(offsets), list(sizes),
                                list(strides))
    return Tracer(v, dest.aval, trace)


def concatenate(xs: Sequence[Tracer], axis: int) -> Tracer:
    """Insert each operand into a `tensor.empty` of the joined shape."""
    trace = require_trace("concatenate")
    xs = _lift_all(trace, xs)
    first = xs[0]
    out_shape = list(first.shape)
    out_shape[axis] = sum(x.shape[axis] for x in xs)
    dt = first.dtype
    with trace.emitting():
        acc = _empty(out_shape, dt)
        offset = 0
        for x in xs:
            offs = [0] * len(out_shape)
            offs[axis] = offset
            acc = tensor.insert_slice(x.value, acc, [], [], [], offs, list(x.shape),
                                      [1] * len(out_shape))
            offset += x.shape[axis]
    weak = all(x.weak_type for x in xs)
    return Tracer(acc, ShapedArray(out_shape, dt, weak), trace)


# --------------------------------------------------------------------------- gather / scatter
#
# An indexed read or write with computed indices. `spec[d]` says where dim d
# of the operand is indexed: an int k (loop dim k of the result/update shape:
# the whole dim is walked) or a pair (t, dims): the integer tensor `t`, whose
# dims are the loop dims `dims`, holds the index (negative values wrap once, as
# numpy's; gathers then clamp into range, scatters drop what is out of range).

IndexSpec = Sequence[Any]


def _index_value(iv: ir.Value, dtype: np.dtype, n: int, clamp: bool) -> tuple[ir.Value, ir.Value]:
    """An integer index element as (index, in_bounds): wrapped, then clamped to [0, n-1]."""
    i64 = ir.IntegerType.get_signless(64)
    if np.dtype(dtype).itemsize < 8:
        iv = arith.extui(i64, iv) if np.dtype(dtype).kind == "u" else arith.extsi(i64, iv)
    c0 = arith.ConstantOp(i64, 0).result
    cn = arith.ConstantOp(i64, n).result
    neg = arith.cmpi(arith.CmpIPredicate.slt, iv, c0)
    iv = arith.select(neg, arith.addi(iv, cn), iv)
    ge = arith.cmpi(arith.CmpIPredicate.sge, iv, c0)
    lt = arith.cmpi(arith.CmpIPredicate.slt, iv, cn)
    inb = arith.andi(ge, lt)
    if clamp:
        iv = arith.maxsi(arith.minsi(iv, arith.ConstantOp(i64, max(n - 1, 0)).result), c0)
    return arith.index_cast(ir.IndexType.get(), iv), inb


def gather(x: Tracer, spec: IndexSpec, out_shape: Sequence[int]) -> Tracer:
    """`out[p] = x[idx(p)]`: a `linalg.generic` over the result whose body reads
    the index tensors (inputs) and `tensor.extract`s `x` (captured) at the
    clamped index (out-of-range indices clamp, as jax's gathers do)."""
    trace = require_trace("gather")
    x = trace.lift(x)
    out_shape = [int(d) for d in out_shape]
    n = len(out_shape)
    arrays = [trace.lift(s[0]) for s in spec if not isinstance(s, int)]
    with trace.emitting():
        maps = [ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in s[1]])
                for s in spec if not isinstance(s, int)]
        maps.append(ir.AffineMap.get_identity(n))
        init = _empty(out_shape, x.dtype)
        op = linalg.GenericOp([init.type], [a.value for a in arrays], [init], _maps(maps),
                              _iterators(["parallel"] * n))
        block = op.regions[0].blocks.append(*[element_type(a.dtype) for a in arrays],
                                            element_type(x.dtype))
        with ir.InsertionPoint(block):
            args = iter(block.arguments)
            idx = []
            for d, s in enumerate(spec):
                if isinstance(s, int):
                    idx.append(linalg.IndexOp(s).result)
                else:
                    idx.append(_index_value(next(args), s[0].dtype, x.shape[d], True)[0])
            linalg.YieldOp([tensor.extract(x.value, idx)])
    return Tracer(op.result, ShapedArray(out_shape, x.dtype, x.weak_type), trace)


def scatter(x: Tracer, spec: IndexSpec, updates: Tracer, kind: str) -> Tracer:
    """`x` with `updates` (shaped like the gather of `spec`) combined in at the
    indices: one `scf.for` over the update elements in row-major order, each
    step a `tensor.extract` / `tensor.insert` of the carried array. `kind`:
    "set" (a later duplicate overwrites an earlier one), "add", "mul", "min",
    "max" (duplicates combine). Out-of-range updates are dropped, as jax's."""
    from mlir.dialects import scf

    trace = require_trace("scatter")
    x, updates = trace.lift(x), trace.lift(updates)
    arrays = [trace.lift(s[0]) for s in spec if not isinstance(s, int)]
    shape = list(updates.shape)
    total = pymath.prod(shape)
    dt = x.dtype
    if total == 0:
        return x
    with trace.emitting():
        idx_t = ir.IndexType.get()
        lb = arith.ConstantOp(idx_t, 0).result
        ub = arith.ConstantOp(idx_t, total).result
        one = arith.ConstantOp(idx_t, 1).result
        loop = scf.ForOp(lb, ub, one, [x.value])
        with ir.InsertionPoint(loop.body):
            acc = loop.inner_iter_args[0]
            # the update's multi-index, row-major
            rem = loop.induction_variable
            pos: list[ir.Value] = [None] * len(shape)  # type: ignore[list-item]
            for k in reversed(range(len(shape))):
                size = arith.ConstantOp(idx_t, shape[k]).result
                pos[k] = arith.remui(rem, size) if k else rem
                if k:
                    rem = arith.divui(rem, size)
            arr_it = iter(arrays)
            idx: list[ir.Value] = []
            inb = None
            for d, s in enumerate(spec):
                if isinstance(s, int):
                    idx.append(pos[s])
                    continue
                a = next(arr_it)
                raw = tensor.extract(a.value, [pos[k] for k in s[1]])
                i, ok = _index_value(raw, a.dtype, x.shape[d], True)
                idx.append(i)
                inb = ok if inb is None else arith.andi(inb, ok)
            u = tensor.extract(updates.value, pos)
            old = tensor.extract(acc, idx)
            if kind == "set":
                new = u
            else:
                ck = {"add": "sum", "mul": "prod", "min": "min", "max": "max"}[kind]
                new = _store(dt, combiner(ck, dt, _load(dt, old), _load(dt, u)))
            if inb is not None:
                new = arith.select(inb, new, old)
            scf.YieldOp([tensor.insert(new, acc, idx)])
    return Tracer(loop.results[0], x.aval, trace)


# --------------------------------------------------------------------------- contractions

def matmul2d(a: Tracer, b: Tracer) -> Tracer:
    """`linalg.matmul` (2-D) or `linalg.batch_matmul` (3-D, equal batch sizes)."""
    trace = require_trace("matmul")
    a, b = trace.lift(a), trace.lift(b)
    dt = a.dtype
    if _half(dt):  # accumulate in float32
        return convert(matmul2d(convert(a, _F32), convert(b, _F32)), dt)
    if a.ndim == 2:
        out_shape = [a.shape[0], b.shape[1]]
        fn = linalg.matmul
    else:
        out_shape = [a.shape[0], a.shape[1], b.shape[2]]
        fn = linalg.batch_matmul
    with trace.emitting():
        init = _filled(out_shape, dt, 0)
        v = fn(a.value, b.value, outs=[init])
    return Tracer(v, ShapedArray(out_shape, dt), trace)


def contract(operands: Sequence[Tracer], in_letters: Sequence[str], out_letters: str,
             sizes: dict[str, int]) -> Tracer:
    """A sum of products over the letters not in `out_letters` (einsum) as one generic."""
    trace = require_trace("einsum")
    ops = _lift_all(trace, operands)
    dt = ops[0].dtype
    if _half(dt):  # accumulate in float32
        return convert(contract([convert(o, _F32) for o in ops], in_letters, out_letters,
                                sizes), dt)
    order = list(out_letters)
    for letters in in_letters:
        for ch in letters:
            if ch not in order:
                order.append(ch)
    n = len(order)
    pos = {ch: i for i, ch in enumerate(order)}
    out_shape = [sizes[ch] for ch in out_letters]
    with trace.emitting():
        maps = [ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(pos[ch]) for ch in letters])
                for letters in in_letters]
        maps.append(ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(pos[ch])
                                            for ch in out_letters]))
        iters = _iterators(["parallel" if ch in out_letters else "reduction" for ch in order])
        init = _filled(out_shape, dt, 0)
        op = linalg.GenericOp([init.type], [o.value for o in ops], [init], _maps(maps), iters)
        elt = element_type(dt)
        block = op.regions[0].blocks.append(*([elt] * (len(ops) + 1)))
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            prod = args[0]
            for a in args[1: len(ops)]:
                prod = combiner("prod", dt, prod, a)
            linalg.YieldOp([combiner("sum", dt, args[-1], prod)])
    return Tracer(op.result, ShapedArray(out_shape, dt), trace)


# --------------------------------------------------------------------------- sorting

def _total_less(dtype: np.dtype, a: ir.Value, b: ir.Value) -> ir.Value:
    """a < b in the order sorting uses: NaN above everything, -0.0 == 0.0 (as numpy/jax)."""
    if not _is_float(dtype):
        return arith.cmpi(arith.CmpIPredicate.slt, a, b)
    lt = arith.cmpf(arith.CmpFPredicate.OLT, a, b)
    a_num = arith.cmpf(arith.CmpFPredicate.ORD, a, a)
    b_nan = arith.cmpf(arith.CmpFPredicate.UNO, b, b)
    return arith.ori(lt, arith.andi(a_num, b_nan))


def _not(v: ir.Value) -> ir.Value:
    return arith.xori(v, arith.ConstantOp(v.type, ir.IntegerAttr.get(v.type, 1)).result)


def _comes_first(dtypes: Sequence[np.dtype], a: Sequence[ir.Value], b: Sequence[ir.Value],
                 ia: ir.Value, ib: ir.Value) -> ir.Value:
    """(a..., ia) strictly before (b..., ib): lexicographically by the keys in the total
    order, ties by position."""
    first = arith.cmpi(arith.CmpIPredicate.slt, ia, ib)
    for dtype, x, y in reversed(list(zip(dtypes, a, b))):
        lt, gt = _total_less(dtype, x, y), _total_less(dtype, y, x)
        first = arith.ori(lt, arith.andi(arith.andi(_not(lt), _not(gt)), first))
    return first


def bitonic_sort(keys: Sequence[Tracer], pos: Tracer, payloads: Sequence[Tracer]
                 ) -> tuple[list[Tracer], Tracer, list[Tracer]]:
    """Sort (R, N) arrays along the last axis (N a power of two) by (keys..., pos), with
    Stone's bitonic sort on the perfect shuffle: one `scf.for` over m * m steps (N = 2**m),
    each one `linalg.generic` over all rows.

    A step perfectly shuffles the positions (the carried arrays read as [2, N/2] through
    the index map (p, s) -> (s, p)), then compare-exchanges the pairs (2p, 2p + 1): slot s
    takes the element or its partner (1 - s, p) by one select. The shuffle rotates the
    address bits, so after the s-th shuffle of phase k (k = 1..m) a pair holds the logical
    indices a and a + 2**(m-1-s), a = rotr(2p, s + 1); the step is the bitonic merge's
    comparison over that bit when m - 1 - s < k, ascending where bit k of a is 0, and a
    no-op otherwise; m shuffles per phase bring every element home. The body computes
    this from the step number and p (no table). `pos` (distinct positions) breaks ties,
    so the order is the stable one. Payloads move alike; float keys and payloads are
    differentiated through the selects (the loop's tape holds each step's inputs), so
    the derivative is the permutation. The IR has one size for every N: O(N log^2 N)
    work in log^2 N steps.
    """
    trace = require_trace("sort")
    keys, pos = _lift_all(trace, keys), trace.lift(pos)
    payloads = _lift_all(trace, payloads)
    operands = [*keys, pos, *payloads]
    nk = len(keys)
    rows, n = pos.shape
    m = n.bit_length() - 1
    assert n == 1 << m and m >= 1
    half = n // 2
    with trace.emitting():
        idx = ir.IndexType.get()
        lb, ub, one = (arith.constant(idx, v) for v in (0, m * m, 1))
        loop = scf.ForOp(lb, ub, one, [o.value for o in operands])
        with ir.InsertionPoint(loop.body):
            shape3 = [rows, 2, half]
            vals = [reshape_value(a, [rows, n], shape3, o.dtype)
                    for a, o in zip(loop.inner_iter_args, operands)]
            d = [ir.AffineDimExpr.get(k) for k in range(3)]
            mine = ir.AffineMap.get(3, 0, [d[0], d[2], d[1]])
            partner = ir.AffineMap.get(3, 0, [d[0], ir.AffineConstantExpr.get(1) - d[2], d[1]])
            ins = [v for v in vals for _ in range(2)]
            out_shape = [rows, half, 2]
            inits = [_empty(out_shape, o.dtype) for o in operands]
            maps = [mine, partner] * len(operands) + \
                [ir.AffineMap.get_identity(3)] * len(operands)
            op = linalg.GenericOp([i.type for i in inits], ins, inits, _maps(maps),
                                  _iterators(["parallel"] * 3))
            elts = [element_type(o.dtype) for o in operands]
            block = op.regions[0].blocks.append(*[e for e in elts for _ in range(2)], *elts)
            with ir.InsertionPoint(block):
                args = list(block.arguments)
                first = _comes_first([k.dtype for k in keys], args[0:2 * nk:2],
                                     args[1:2 * nk:2], args[2 * nk], args[2 * nk + 1])
                i64 = ir.IntegerType.get_signless(64)
                c = lambda v: arith.constant(i64, v)  # noqa: E731
                cmp = lambda pred, a, b: arith.cmpi(getattr(arith.CmpIPredicate, pred), a, b)  # noqa: E731
                step = arith.index_cast(i64, loop.induction_variable)
                s_ = arith.remsi(step, c(m))
                k = arith.addi(arith.divsi(step, c(m)), c(1))
                r = arith.addi(s_, c(1))
                q = arith.muli(arith.index_cast(i64, linalg.IndexOp(1).result), c(2))
                a = arith.andi(arith.ori(arith.shrui(q, r), arith.shli(q, arith.subi(c(m), r))),
                               c(n - 1))
                active = cmp("slt", arith.subi(c(m - 1), s_), k)
                ascending = cmp("eq", arith.andi(arith.shrui(a, k), c(1)), c(0))
                slot0 = cmp("eq", linalg.IndexOp(2).result, arith.constant(idx, 0))
                want_first = arith.cmpi(arith.CmpIPredicate.eq, slot0, ascending)
                keep = arith.ori(_not(active), arith.cmpi(arith.CmpIPredicate.eq, want_first,
                                                          first))
                linalg.YieldOp([arith.select(keep, args[2 * k], args[2 * k + 1])
                                for k in range(len(operands))])
            outs = [reshape_value(r, out_shape, [rows, n], o.dtype)
                    for r, o in zip(op.results, operands)]
            scf.YieldOp(outs)
    res = [Tracer(v, o.aval, trace) for v, o in zip(loop.results, operands)]
    return res[:nk], res[nk], res[nk + 1:]


def search_sorted(a: Tracer, v: Tracer, right: bool, sorter: Tracer | None) -> Tracer:
    """numpy.searchsorted of every element of `v` in the sorted 1-D `a` (int64 result).

    One `linalg.generic` over `v` whose body is an unrolled binary search
    (ceil(log2(len(a))) + 1 `tensor.extract`s from `a`, through `sorter` when
    given): O(len(v) log len(a)). The result is an integer, so no derivative
    flows through it, and the extracts batch into gathers under vmap.
    """
    trace = require_trace("searchsorted")
    a, v = trace.lift(a), trace.lift(v)
    if sorter is not None:
        sorter = trace.lift(sorter)
    n = a.shape[0]
    i64 = np.dtype(np.int64)
    shape = list(v.shape)
    r = len(shape)
    with trace.emitting():
        idx_t = ir.IndexType.get()
        init = _empty(shape, i64)
        maps = [ir.AffineMap.get_identity(r)] * 2
        op = linalg.GenericOp([init.type], [v.value], [init], _maps(maps),
                              _iterators(["parallel"] * r))
        block = op.regions[0].blocks.append(element_type(v.dtype), element_type(i64))
        with ir.InsertionPoint(block):
            x = block.arguments[0]
            e64 = element_type(i64)
            c = lambda k: arith.constant(e64, k)  # noqa: E731
            count = c(0)
            step = 1 << max(n.bit_length() - 1, 0)
            while n and step >= 1:
                cand = arith.addi(count, c(step))
                fits = arith.cmpi(arith.CmpIPredicate.sle, cand, c(n))
                probe = arith.subi(arith.minsi(cand, c(n)), c(1))
                probe = arith.index_cast(idx_t, probe)
                if sorter is not None:
                    probe = arith.index_cast(idx_t, tensor.extract(sorter.value, [probe]))
                av = tensor.extract(a.value, [probe])
                # left: a[probe] < x;  right: a[probe] <= x, i.e. not x < a[probe]
                go = (_not(_total_less(v.dtype, x, av)) if right
                      else _total_less(v.dtype, av, x))
                count = arith.select(arith.andi(fits, go), cand, count)
                step //= 2
            linalg.YieldOp([count])
    return Tracer(op.result, ShapedArray(shape, i64), trace)


# `tracing.as_tracer` makes constants and converts dtypes with these ops.
set_lift_ops(constant_like, convert)


__all__ = [
    "arg_reduce",
    "broadcast_shapes",
    "broadcast_to",
    "combiner",
    "bitonic_sort",
    "concatenate",
    "constant",
    "constant_like",
    "contract",
    "convert",
    "diagonal",
    "elementwise",
    "extract_slice",
    "gather",
    "insert_slice",
    "matmul2d",
    "python_scalar_dtype",
    "reduce",
    "reshape",
    "reshape_value",
    "reverse",
    "scalar_constant",
    "search_sorted",
    "scatter",
    "transpose",
]
