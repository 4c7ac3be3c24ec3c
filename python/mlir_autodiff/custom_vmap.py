"""Custom batching rules: `Function.vmap` (torch.func's batching rule) becomes an
`autodiff.custom_vmap` rule function, traced for the innermost enclosing vmap
level (`batching.VmapLevel`) and checked against the primal's outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from mlir import ir

from . import pytree
from .batching import _prefix_leaves, peeled
from .custom_core import Primal, RngPin, Wrapper, index_of, leaf_like, rule_site
from .dialects.vocabulary import IN_AXES, OUT_AXES
from .tracing import ShapedArray, TracedFunction, Tracer, as_tracer, trace_function
from .transforms.vmap import batched_outputs


@dataclasses.dataclass(frozen=True)
class VmapInfo:
    """torch.func's `info` of a `Function.vmap` rule: the size of the vmapped
    dimension and the enclosing vmap's `randomness`."""

    batch_size: int
    randomness: str


@dataclasses.dataclass
class VmapSpec:
    """The batching rule a custom function emits for one vmap level.

    `call(diff_args, diff_in_dims)` runs the user's rule and returns its
    `(outputs, out_dims)`; `flags` says, per flat argument leaf, whether the
    rule receives it batched (at axis 0)."""

    level: Any  # batching.VmapLevel
    flags: list[bool]
    call: Callable[[tuple[Any, ...], tuple[Any, ...]], Any]
    #: the user's rule (for error messages)
    rule: Callable[..., Any] | None = None


def _out_dims_leaves(out_dims: Any, tree: pytree.TreeDef, who: str, site: str
                     ) -> list[int | None]:
    """`out_dims` (an int or None per output, a prefix of the outputs' structure)
    broadcast to the output leaves; anything else is an error naming the rule."""

    ok = all(d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool))
             for d in pytree.tree_leaves(out_dims))
    try:
        if ok:
            return _prefix_leaves(out_dims, tree, "out_dims", out_dims)
    except ValueError:
        pass
    raise ValueError(f"{who}: out_dims {out_dims!r} is not a tree prefix of the outputs "
                     f"(structure {tree}) with an int or None per output{site}")


def trace_vmap_rule(p: Primal, spec: VmapSpec, name: str
                    ) -> tuple[TracedFunction, list[int]]:
    """Trace the user's batching rule on batched arguments into a function
    (leaves, batched where `spec.flags` says, batch at axis 0) -> output leaves,
    each with its batch axis (-1: unbatched), checked against the primal's outputs:
    the structure, each output's shape and dtype with its out_dims, and no output
    computed from a batched argument declared unbatched (out_dims None). Errors
    name the rule and where it is defined."""
    who, site = f"{name}.vmap", rule_site(spec.rule)
    size = spec.level.size
    avals = [ShapedArray((size, *a.shape), a.dtype) if f else a.strong()
             for a, f in zip(p.avals, spec.flags)]
    axes: list[int] = []

    def vmap_flat(*diff: Any) -> Any:
        dims = pytree.tree_unflatten(p.in_tree, [0 if f else None for f in spec.flags])
        with peeled(spec.level):
            r = spec.call(tuple(diff), tuple(dims))
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TypeError(f"{who}: the vmap staticmethod must return a pair "
                            f"(outputs, out_dims), got {type(r).__name__}{site}")
        out, out_dims = r
        leaves, tree = pytree.tree_flatten(out)
        if tree != p.fn.out_tree:
            raise TypeError(f"{who}: the vmap staticmethod returned outputs of structure "
                            f"{tree}, but forward returns {p.fn.out_tree}{site}")
        dims_flat = _out_dims_leaves(out_dims, tree, who, site)
        outs = []
        for j, (x, d, a) in enumerate(zip(leaves, dims_flat, p.fn.out_avals)):
            t = as_tracer(x)
            if d is not None:
                d = int(d)
                d0 = d + a.ndim + 1 if d < 0 else d
                if not 0 <= d0 <= a.ndim:
                    raise ValueError(f"{who}: out_dims {d} is out of range for output {j} "
                                     f"(forward's output has rank {a.ndim}, so its batched "
                                     f"value has rank {a.ndim + 1}){site}")
                d = d0
            want = a.shape if d is None else (*a.shape[:d], size, *a.shape[d:])
            if t.shape != want:
                where = "unbatched" if d is None else f"the batch size {size} at dim {d}"
                raise ValueError(f"{who}: output {j} has shape {t.shape} with out_dims "
                                 f"{'None' if d is None else d}, expected {want} "
                                 f"(forward's output shape {a.shape}, {where}){site}")
            try:
                outs.append(leaf_like(t, ShapedArray(want, a.dtype), who, f"output {j}"))
            except TypeError as e:
                raise TypeError(f"{e}{site}") from None
            axes.append(-1 if d is None else d)
        return outs

    fn = trace_function(vmap_flat, avals, p.in_tree, name=f"{name}_vmap_rule")
    depends = batched_outputs(fn.func_op.operation,
                              list(spec.flags) + [False] * len(fn.captures))
    for j, (a, dep) in enumerate(zip(axes, depends)):
        if a < 0 and dep:
            raise ValueError(f"{who}: output {j} depends on the batched arguments but its "
                             "out_dims is None (an unbatched output must be the same for "
                             f"every element of the batch){site}")
    return fn, axes


def vmap_rule_function(p: Primal, name: str, spec: VmapSpec, vmap_fn: TracedFunction,
                       out_axes: list[int], caps: list[Tracer], rng: RngPin | None = None
                       ) -> Callable[[], ir.Attribute]:
    """@name_vmap (leaves, caps) -> outputs, marked with `autodiff.in_axes` /
    `autodiff.out_axes` (-1: unbatched); values the rules close over are unbatched
    arguments (an error here if the enclosing vmap batches one)."""
    if True in spec.level.batched_leaves(caps):
        raise ValueError(f"{name}: its forward or rules close over a value that the enclosing "
                         "vmap batches; pass that value as an argument of apply()")
    x_types = [a.mlir_type() for a in vmap_fn.in_avals]
    c_types = [c.value.type for c in caps]
    w = Wrapper(p.trace, f"{name}_vmap", x_types + c_types,
                [a.mlir_type() for a in vmap_fn.out_avals], p.loc)
    nx = len(x_types)
    w.ret(w.call(vmap_fn, w.args[:nx] + [w.args[nx + index_of(caps, c)]
                                         for c in vmap_fn.captures]))
    in_axes = [0 if f else -1 for f in spec.flags] + [-1] * len(caps)
    w.op.attributes[IN_AXES] = ir.DenseI64ArrayAttr.get(in_axes)
    w.op.attributes[OUT_AXES] = ir.DenseI64ArrayAttr.get(out_axes)
    if rng is not None:
        rng.mark(w, nx + index_of(caps, rng.key))
    return lambda: ir.FlatSymbolRefAttr.get(w.name)
