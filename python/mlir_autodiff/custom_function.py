"""`Function`: a differentiable operation with user rules, as `torch.autograd.Function`.

`forward`, `setup_context`, `backward`, `jvp` and `vmap` become the rules of
one `custom_vjp_call` (custom.py): the same function attributes, the same
composition with every transform.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from . import pytree
from .api import JitFunction
from .batching import active_vmap_level
from .custom import custom_vjp_call
from .custom_core import ARRAY_TYPES, eager_jit, rule_site
from .custom_vmap import VmapInfo, VmapSpec
from .tracing import Tracer, current_trace


class FunctionCtx:
    """torch's `ctx`: `save_for_backward(*tensors)` / `saved_tensors`, any other
    attribute (Python values, or traced arrays, which are saved as residuals)."""

    def __init__(self, needs_input_grad: tuple[bool, ...] = ()) -> None:
        self.to_save: tuple[Any, ...] = ()
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        self.to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return tuple(self.to_save)

    def mark_non_differentiable(self, *args: Any) -> None:
        """Accepted for compatibility: such outputs simply get no cotangent from the user."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _ctx_tracers(ctx: FunctionCtx) -> tuple[list[str], list[Any]]:
    """The ctx attributes holding traced values (saved_tensors first)."""
    keys, vals = [], []
    for k, v in vars(ctx).items():
        if k in ("needs_input_grad", "materialize_grads"):
            continue
        if k == "to_save" or any(isinstance(x, Tracer) for x in pytree.tree_leaves(v)):
            keys.append(k)
            vals.append(v)
    return keys, vals


def _static_positions(args: tuple[Any, ...], who: str) -> tuple[int, ...]:
    """Positions of `Function.apply`'s non-array arguments (passed to the rules as
    they are). An array, or a container (pytree) of arrays only, is differentiable;
    a container mixing arrays with other values is an error (its arrays would get
    no gradient)."""
    static = []
    for i, a in enumerate(args):
        leaves = pytree.tree_leaves(a)
        arrays = [isinstance(x, ARRAY_TYPES) for x in leaves]
        if leaves and all(arrays):
            continue
        if any(arrays):
            raise TypeError(f"{who}: argument {i} ({type(a).__name__}) mixes arrays with "
                            "other values; pass the arrays (differentiable inputs) and the "
                            "Python values (passed to forward as they are) as separate "
                            "arguments")
        static.append(i)
    return tuple(static)


#: Function class -> static positions -> the jit that runs `apply` outside a trace
_EAGER_FUNCTIONS: weakref.WeakKeyDictionary[type, dict[tuple[int, ...], JitFunction]] = \
    weakref.WeakKeyDictionary()


def _function_eager(cls: type, args: tuple[Any, ...], static: tuple[int, ...]) -> Any:
    """`cls.apply(*args)` outside a trace: `jit` with the non-array arguments static
    (a new value traces new code, as each value is new code in torch), cached per
    class."""
    return eager_jit(_EAGER_FUNCTIONS.setdefault(cls, {}), lambda *a: cls.apply(*a), args,
                     static)


class Function:
    """A differentiable operation with user rules, as `torch.autograd.Function`.

        class Exp(ad.Function):
            @staticmethod
            def forward(x):
                return anp.exp(x)
            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(output)
            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y
            @staticmethod
            def jvp(ctx, t):               # optional: forward mode
                (y,) = ctx.saved_tensors
                return t * y

        y = Exp.apply(x)

    `forward(ctx, *args)` without `setup_context` works too. `backward` returns
    one gradient per input (a single value for one input; None = zero).
    Inputs that are not arrays (Python ints, floats, bools, strings, None...)
    reach forward, setup_context, jvp and vmap as the Python objects, as in
    torch: backward returns None for them (anything else is an error), `jvp`
    gets None as their tangent and `vmap` None as their in_dim; each value
    traces its own code (like a static argument of `jit`), so a number that
    changes from call to call (or needs a gradient) should be an array
    (`np.float64(v)`, `anp.asarray(v)`).
    Without `jvp`, forward mode differentiates `forward`'s body. The rules may
    call `apply` of their own class or of other Functions.

    Under `vmap` (torch.func semantics) the class needs one of:

    - `generate_vmap_rule = True`: the passes batch `forward`, `backward`
      and `jvp` like any code (the batched function keeps batched versions of
      the derivative rules, so grad of vmap still uses `backward`);
    - a staticmethod `vmap(info, in_dims, *args) -> (outputs, out_dims)`:
      `info.batch_size`, `info.randomness`; `in_dims[i]` is the batch dim of
      argument i (0) or None for an unbatched or non-array argument;
      `out_dims` is an int or None per output (a prefix of the outputs'
      structure), negative dims count from the end. It is traced for the
      innermost enclosing vmap level into an `autodiff.custom_vmap` rule;
      enclosing levels batch the rule's code generically, and grad/jvp of the
      vmapped function use the batched `backward`/`jvp`.

    Without either, `apply` on a batched argument raises torch's RuntimeError
    (see `_vmap_spec` for the cases only the passes can decide).
    """

    #: torch's flag: batch forward/backward/jvp automatically under vmap.
    generate_vmap_rule: bool = False

    @staticmethod
    def forward(*args: Any) -> Any:
        raise NotImplementedError("subclasses of ad.Function must implement forward")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: Any) -> None:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Any) -> Any:
        raise NotImplementedError("subclasses of ad.Function must implement backward")

    @staticmethod
    def vmap(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def _has(cls, name: str) -> bool:
        return getattr(cls, name).__qualname__ != getattr(Function, name).__qualname__ \
            if hasattr(cls, name) and hasattr(Function, name) else hasattr(cls, name)

    @classmethod
    def _run_forward(cls, ctx: FunctionCtx, args: Sequence[Any]) -> Any:
        if cls._has("setup_context"):
            out = cls.forward(*args)
            cls.setup_context(ctx, tuple(args), out)
            return out
        return cls.forward(ctx, *args)

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run the function (differentiable with the class's rules).

        Arrays (traced values, numpy arrays and scalars, or containers holding
        only arrays) are the differentiable inputs; every other argument (a
        Python int, float, bool, string, None, ...) reaches forward,
        setup_context, jvp and vmap as the Python object itself, and its
        gradient in backward's result must be None (torch's semantics)."""
        name = cls.__name__ if cls.__name__.isidentifier() else "fn"
        static = _static_positions(args, f"{name}.apply")
        if current_trace() is None:
            return _function_eager(cls, args, static)
        ctx_box: dict[str, Any] = {}
        n_diff = len(args) - len(static)
        if not n_diff:  # nothing to differentiate or batch: forward, inline
            return cls._run_forward(FunctionCtx((False,) * len(args)), args)

        def fun(*a: Any) -> Any:
            return cls._run_forward(FunctionCtx(), a)

        def fwd(*a: Any) -> Any:
            ctx = FunctionCtx(tuple(i not in static for i in range(len(args))))
            out = cls._run_forward(ctx, a)
            keys, vals = _ctx_tracers(ctx)
            ctx_box["ctx"], ctx_box["keys"] = ctx, keys
            return out, vals

        def bwd(*rest: Any) -> Any:
            res, cts = rest[-2], rest[-1]
            ctx = ctx_box["ctx"]
            for k, v in zip(ctx_box["keys"], res):
                setattr(ctx, k, v)
            grads = cls.backward(ctx, *(cts if isinstance(cts, tuple) else (cts,)))
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != len(args):
                raise TypeError(f"{name}.backward returned {len(grads)} gradient(s), "
                                f"expected {len(args)} (one per input to forward)"
                                f"{rule_site(cls.backward)}")
            for i in static:
                if grads[i] is not None:
                    raise TypeError(
                        f"{name}.backward returned a gradient different than None at "
                        f"position {i}, but the corresponding forward input was not an "
                        f"array ({type(args[i]).__name__}){rule_site(cls.backward)}")
            return tuple(g for i, g in enumerate(grads) if i not in static)

        jvp = None
        if cls._has("jvp"):
            def jvp(*rest: Any) -> Any:
                primals, tangents = rest[-2], rest[-1]
                it, itt = iter(primals), iter(tangents)
                full = [args[i] if i in static else next(it) for i in range(len(args))]
                # one tangent per input of forward, None for a non-array one (torch)
                tfull = [None if i in static else next(itt) for i in range(len(args))]
                ctx = FunctionCtx(tuple(i not in static for i in range(len(args))))
                out = cls._run_forward(ctx, full)
                return out, cls.jvp(ctx, *tfull)

        vmap = cls._vmap_spec(args, static, name)
        return custom_vjp_call(fun, fwd, bwd, args, static, name, jvp, key=cls, vmap=vmap)

    @classmethod
    def _vmap_spec(cls, args: tuple[Any, ...], static: tuple[int, ...], name: str
                   ) -> VmapSpec | None:
        """The batching rule to emit when `apply` runs under vmap (torch.func semantics).

        Nothing is emitted outside vmap, when no argument depends on a batched
        value of the innermost vmap level, or with `generate_vmap_rule = True`
        (the pass then batches forward and the derivative rules themselves).
        Without either, an argument known to be batched is torch's RuntimeError;
        where batching is only known to the passes (below), the function is
        batched like `generate_vmap_rule` (sound here: every rule is traced
        code), so the vmaps inside `jacfwd`/`jacrev`/`hessian` keep working.
        With a `vmap` staticmethod, the rule is traced for that level's batch
        size: arguments known to be unbatched get in_dims None, the others 0;
        an argument whose batching is only known to the passes (inside a
        function nested in the vmapped one, e.g. under grad) is passed batched,
        which is always usable: the pass broadcasts an unbatched value into it.
        Other vmap levels batch the rule's code generically.
        """
        level = active_vmap_level()
        if level is None:
            return None
        diff = [a for i, a in enumerate(args) if i not in static]
        found = level.batched_leaves(pytree.tree_leaves(diff))
        if not any(f is not False for f in found):
            return None
        has_rule, generate = cls._has("vmap"), bool(getattr(cls, "generate_vmap_rule", False))
        if has_rule and generate:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it has both generate_vmap_rule=True and "
                "an overridden vmap staticmethod. Please set generate_vmap_rule=False or "
                "delete the overridden vmap staticmethod to avoid ambiguity.")
        if not has_rule and not generate and True in found:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it does not have vmap support. Please "
                "override and implement the vmap staticmethod or set generate_vmap_rule=True.")
        if not has_rule:
            return None
        info = VmapInfo(level.size, level.randomness)

        def call(diff_args: tuple[Any, ...], diff_dims: tuple[Any, ...]) -> Any:
            it, itd = iter(diff_args), iter(diff_dims)
            full = [args[i] if i in static else next(it) for i in range(len(args))]
            dims = tuple(None if i in static else next(itd) for i in range(len(args)))
            return cls.vmap(info, dims, *full)

        return VmapSpec(level, [f is not False for f in found], call, cls.vmap)


__all__ = ["Function", "FunctionCtx"]
