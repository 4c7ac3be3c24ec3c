"""Derivative rule registries, keyed by upstream op name (JAX style).

A JVP rule is `rule(b, op, tangents) -> result tangents`; a VJP rule is
`rule(b, op, cotangents) -> operand cotangents`. `None` stands for a
symbolic zero in both directions. `b` is an `ad_support.Builder` positioned
where the derivative code goes, `op` the primal op.

Combinators keep most rules to one line:

* `defjvp(name, *partials)`: one function per operand, `partial(b, g, *xs)`
  returning `g * d op / d x_i` (None: the operand has no derivative). For an
  elementwise op such a partial is linear and self-adjoint in `g`, so the same
  functions give the reverse rule (`ct_i = partial_i(b, ct, *xs)`), the way
  JAX transposes `defjvp` rules of elementwise primitives. A partial written
  with the op's value (`b.ans`: exp, tanh, x / y ...) is declared with
  `uses_result=True` (see `USES_RESULT`).
* `deflinear(name, *linear)`: an op linear in the operands `linear` (all by
  default): the op applied to their tangents is its own JVP (data movement:
  casts, slices, reshapes, transposes...). Its reverse rule is the adjoint
  movement, registered with `defvjp`.
* `defzero(name)`: the derivative is zero (floor, sign, comparisons...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from mlir import ir

Value = Optional[ir.Value]
JvpRule = Callable[[Any, ir.Operation, list[Value]], list[Value]]
VjpRule = Callable[[Any, ir.Operation, list[Value]], list[Value]]

JVP_RULES: dict[str, JvpRule] = {}
VJP_RULES: dict[str, VjpRule] = {}
#: Reverse mode, before the sweep: `augment(ad, op)` may rewrite an active op's
#: forward code, e.g. make an scf.for record a tape of its carried values.
FORWARD_AUGMENT: dict[str, Callable[[Any, ir.Operation], None]] = {}
#: Ops whose derivative rule is written with the op's value (`b.ans`) where it
#: would otherwise recompute the op (d exp = g exp(x), d(x / y)/dy = -g (x / y) / y):
#: where reverse mode recomputes the op (a linalg.generic body), it reads the
#: saved result back instead. Filled by `defjvp(..., uses_result=True)`. The
#: max/min and clampf rules also read the result, only to find which operand
#: equals it (ties): they do not declare it, as recomputing a max is one
#: instruction while reading the result back costs one more tensor read beside
#: the operands they need anyway.
USES_RESULT: set[str] = set()


def _operands(op: ir.Operation) -> list[ir.Value]:
    return list(op.operation.operands)


def defjvp(name: str, *partials: Callable[..., Value] | None, vjp: bool = True,
           uses_result: bool = False) -> None:
    """Register an elementwise op by per-operand partials `partial(b, g, *xs)`.

    `uses_result`: some partial reads the op's value `b.ans` (`USES_RESULT`).
    """
    if uses_result:
        USES_RESULT.add(name)

    def jvp(b: Any, op: ir.Operation, tangents: list[Value]) -> list[Value]:
        xs = _operands(op)
        out: Value = None
        for fn, g in zip(partials, tangents):
            if fn is None or g is None:
                continue
            out = b.add_any(out, fn(b, g, *xs))
        return [out]

    JVP_RULES[name] = jvp
    if vjp:

        def vjp_rule(b: Any, op: ir.Operation, cts: list[Value]) -> list[Value]:
            (ct,) = cts
            xs = _operands(op)
            out: list[Value] = []
            for i, fn in enumerate(partials):
                if fn is None or ct is None or not b.ad.is_active(xs[i]):
                    out.append(None)
                else:
                    out.append(fn(b, ct, *xs))
            return out

        VJP_RULES[name] = vjp_rule


def deflinear(name: str, *linear: int) -> None:
    """An op linear in its operands at `linear` (default: all of them).

    Its JVP is the op applied to their tangents, with its other operands
    (indices, sizes, a destination it overwrites) as they are; a symbolic zero
    among the linear operands is materialized only when another one is not zero.
    """

    def jvp(b: Any, op: ir.Operation, tangents: list[Value]) -> list[Value]:
        xs = _operands(op)
        lin = linear or range(len(xs))
        if all(tangents[i] is None for i in lin):
            return [None] * len(op.results)
        operands = list(xs)
        for i in lin:
            operands[i] = b.materialize(tangents[i], xs[i])
        if op.regions:  # (a linalg op: its body comes with the clone)
            new = op.operation.clone(ip=b.ip)
            for i in lin:
                new.operands[i] = operands[i]
        else:
            new = b.create(op.operation.name, operands, [r.type for r in op.results],
                           {k: op.operation.attributes[k] for k in op.operation.attributes})
        return list(new.results)

    JVP_RULES[name] = jvp


def defzero(name: str) -> None:
    """An op whose derivative is zero everywhere it is defined."""
    JVP_RULES[name] = lambda b, op, ts: [None] * len(op.results)
    VJP_RULES[name] = lambda b, op, cts: [None] * len(op.operation.operands)


def defvjp(name: str, rule: VjpRule) -> None:
    VJP_RULES[name] = rule


def defjvp_rule(name: str, rule: JvpRule) -> None:
    JVP_RULES[name] = rule


_LOADED = False


def load_all() -> None:
    """Import every per-dialect rule module (they register on import)."""
    global _LOADED
    if _LOADED:
        return
    from . import (  # noqa: F401
        arith,
        autodiff,
        func,
        linalg,
        linalg_conv,
        linalg_generic,
        linalg_pool,
        math,
        scf,
        scf_while,
        shard,
        tensor,
    )

    _LOADED = True
