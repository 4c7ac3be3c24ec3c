"""Transform combinators for the composition table (test_composition_table.py).

Every element of the table is a combinator: it wraps a function f: R^3 -> R^m
into another function R^3 -> R^m' with a fixed mathematical meaning, once
with mlir_autodiff (`ours`) and once as a reference (`ref`) written with jax
in float64. A cell outer∘inner is `outer(inner(base))`:

    jit         x -> jit(f)(x)                               (nested jit)
    grad        x -> grad(z -> sum(f(z) * C))(x)
    jvp         x -> jvp(f, x, T)[1]
    vjp         x -> vjp(f, x)[1](C)
    vmap        x -> vmap(f)(stack([x, 0.8 x + 0.1])).ravel()
    checkpoint  x -> checkpoint(f)(x)                        (identity semantics)
    jacfwd      x -> jacfwd(f)(x).ravel()
    jacrev      x -> jacrev(f)(x).ravel()
    hessian     x -> hessian(z -> sum(f(z) * C))(x).ravel()
    custom_vjp  f with a custom_vjp rule that is f's true vjp (identity semantics)
    custom_jvp  f with a custom_jvp rule that is f's true jvp (identity semantics)
    Function    f as an ad.Function whose backward / jvp are f's true vjp / jvp
                (generate_vmap_rule = True; identity semantics)
    scan        K steps of  h <- 0.9 h + 0.1 tanh(mean(f(h))),  acc <- acc + w_i f(h)
    fori_loop   the same loop with w_i = 1 + 0.5 i, as lax.fori_loop
    while_loop  the same loop as lax.while_loop with the counter in the carry
    where       y = f(x); where(y > 0, y, 0.3 y + 0.2 y^2)   (data-dependent select)
    dropout     nn.dropout(f(x), 0.5) drawn from the seeded generator

C and T are fixed arrays depending only on the size they are used at. The
references of the loops are unrolled Python loops (jax cannot reverse-
differentiate a while_loop; unrolled, every draw of a dropout inside the loop
gets its own mask). The reference of `dropout` multiplies by a mask that is
read from the implementation by running the same sequence of draws (same seed,
same shapes, same order) on a program that only draws: the numbers depend on
the generator's seed, offset and the draw's shape, not on what is around them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff import lax, nn

N = 3                       # every function of the table takes x in R^3
K = 3                       # loop trip count (the reverse-over-reverse bugs need >= 2)
P_DROP = 0.5
SEED = 1234
X0 = np.array([0.31, -0.72, 1.13])
W = np.array([[0.52, -0.31, 0.23],
              [0.14, 0.41, -0.63],
              [-0.27, 0.36, 0.71]])
SCAN_W = np.array([1.0, 0.5, -0.3])


def C(m: int) -> np.ndarray:
    """The fixed cotangent / weight vector of size m."""
    return np.cos(1.3 * np.arange(m) + 0.2)


def T(n: int) -> np.ndarray:
    """The fixed tangent of size n."""
    return np.sin(0.9 * np.arange(n) + 0.5) + 0.3


def base(xp: Any) -> Callable[[Any], Any]:
    """f: R^3 -> R^3, a few nonlinear elementwise ops and a small matmul."""
    def f(x: Any) -> Any:
        return xp.tanh(W @ x) * xp.sin(x) + xp.exp(-0.5 * x * x)
    return f


# --------------------------------------------------------------------------- reference state

class RefState:
    """What the jax references of `dropout` and the loops share while tracing.

    `iter` is the iteration of the enclosing unrolled loop; `masks` maps a
    draw's slot (position in the cell, iteration) to its mask, or is None
    while the draws are being recorded (`record`: slot -> shape)."""

    def __init__(self) -> None:
        self.iter = 0
        self.masks: dict[tuple[int, int], np.ndarray] | None = None
        self.record: dict[tuple[int, int], tuple[int, ...]] = {}


STATE = RefState()


# --------------------------------------------------------------------------- combinators

@dataclasses.dataclass(frozen=True)
class Comb:
    name: str
    ours: Callable[[Callable, int, int], Callable]   # (f, m, position) -> function
    ref: Callable[[Callable, int, int], Callable]
    out: Callable[[int], int]                         # output size from f's output size


def _sum_c(f: Callable, m: int, xp: Any) -> Callable:
    return lambda z: xp.sum(f(z) * C(m))


def _batch(x: Any, xp: Any) -> Any:
    return xp.stack([x, 0.8 * x + 0.1])


# -- jit
def _jit_ours(f, m, pos):
    return ad.jit(f)


def _jit_ref(f, m, pos):
    import jax
    return jax.jit(f)


# -- grad
def _grad_ours(f, m, pos):
    return lambda x: ad.grad(_sum_c(f, m, anp))(x)


def _grad_ref(f, m, pos):
    import jax
    import jax.numpy as jnp
    return lambda x: jax.grad(_sum_c(f, m, jnp))(x)


# -- jvp
def _jvp_ours(f, m, pos):
    return lambda x: ad.jvp(f, (x,), (T(N),))[1]


def _jvp_ref(f, m, pos):
    import jax
    return lambda x: jax.jvp(f, (x,), (T(N),))[1]


# -- vjp
def _vjp_ours(f, m, pos):
    def g(x):
        _, pb = ad.vjp(f, x)
        return pb(C(m))[0]
    return g


def _vjp_ref(f, m, pos):
    import jax

    def g(x):
        _, pb = jax.vjp(f, x)
        return pb(C(m))[0]
    return g


# -- vmap (randomness="same": a dropout inside draws one mask for the batch)
def _vmap_ours(f, m, pos):
    return lambda x: anp.reshape(ad.vmap(f, randomness="same")(_batch(x, anp)), (-1,))


def _vmap_ref(f, m, pos):
    import jax
    import jax.numpy as jnp
    return lambda x: jnp.reshape(jax.vmap(f)(_batch(x, jnp)), (-1,))


# -- checkpoint
def _ckpt_ours(f, m, pos):
    return ad.checkpoint(f)


def _ckpt_ref(f, m, pos):
    import jax
    return jax.checkpoint(f)


# -- jacobians
def _jacfwd_ours(f, m, pos):
    return lambda x: anp.reshape(ad.jacfwd(f)(x), (-1,))


def _jacfwd_ref(f, m, pos):
    import jax
    import jax.numpy as jnp
    return lambda x: jnp.reshape(jax.jacfwd(f)(x), (-1,))


def _jacrev_ours(f, m, pos):
    return lambda x: anp.reshape(ad.jacrev(f)(x), (-1,))


def _jacrev_ref(f, m, pos):
    import jax
    import jax.numpy as jnp
    return lambda x: jnp.reshape(jax.jacrev(f)(x), (-1,))


def _hess_ours(f, m, pos):
    return lambda x: anp.reshape(ad.hessian(_sum_c(f, m, anp))(x), (-1,))


def _hess_ref(f, m, pos):
    import jax
    import jax.numpy as jnp
    return lambda x: jnp.reshape(jax.hessian(_sum_c(f, m, jnp))(x), (-1,))


# -- custom rules: the rule is f's true derivative, so the meaning is f itself
def _identity_ref(f, m, pos):
    return f


def _cvjp_ours(f, m, pos):
    cf = ad.custom_vjp(lambda x: f(x))

    def fwd(x):
        return f(x), x

    def bwd(x, g):
        return (ad.vjp(f, x)[1](g)[0],)

    cf.defvjp(fwd, bwd)
    return cf


def _cjvp_ours(f, m, pos):
    cf = ad.custom_jvp(lambda x: f(x))

    def rule(primals, tangents):
        (x,), (t,) = primals, tangents
        return ad.jvp(f, (x,), (t,))

    cf.defjvp(rule)
    return cf


def _function_ours(f, m, pos):
    class Wrapped(ad.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return f(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return ad.vjp(f, x)[1](g)[0]

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return ad.jvp(f, (x,), (t,))[1]

    return Wrapped.apply


# -- loops: carry (h in R^3, acc in R^m)
def _step(f, h, acc, w, xp):
    y = f(h)
    return 0.9 * h + 0.1 * xp.tanh(xp.mean(y)), acc + w * y


def _scan_ours(f, m, pos):
    def g(x):
        def body(c, w):
            return _step(f, c[0], c[1], w, anp), None
        (h, acc), _ = lax.scan(body, (x, anp.zeros(m)), SCAN_W)
        return acc
    return g


def _fori_ours(f, m, pos):
    def g(x):
        def body(i, c):
            return _step(f, c[0], c[1], 1.0 + 0.5 * i, anp)
        return lax.fori_loop(0, K, body, (x, anp.zeros(m)))[1]
    return g


def _while_ours(f, m, pos):
    def g(x):
        def body(c):
            i, h, acc = c
            h, acc = _step(f, h, acc, 1.0 + 0.5 * i, anp)
            return i + 1, h, acc
        return lax.while_loop(lambda c: c[0] < K, body, (0, x, anp.zeros(m)))[2]
    return g


def _loop_ref(weights):
    def make(f, m, pos):
        import jax.numpy as jnp

        def g(x):
            h, acc = x, jnp.zeros(m)
            for i in range(K):
                STATE.iter = i
                h, acc = _step(f, h, acc, weights[i], jnp)
            STATE.iter = 0
            return acc
        return g
    return make


# -- where
def _select(y, xp):
    return xp.where(y > 0, y, 0.3 * y + 0.2 * y * y)


def _where_ours(f, m, pos):
    return lambda x: _select(f(x), anp)


def _where_ref(f, m, pos):
    import jax.numpy as jnp
    return lambda x: _select(f(x), jnp)


# -- dropout
def _dropout_ours(f, m, pos):
    return lambda x: nn.dropout(f(x), P_DROP)


def _dropout_ref(f, m, pos):
    def g(x):
        slot = (pos, STATE.iter)
        if STATE.masks is None:
            STATE.record[slot] = (m,)
            return f(x)
        return f(x) * STATE.masks[slot]
    return g


def _same(m: int) -> int:
    return m


COMBS: dict[str, Comb] = {c.name: c for c in [
    Comb("jit", _jit_ours, _jit_ref, _same),
    Comb("grad", _grad_ours, _grad_ref, lambda m: N),
    Comb("jvp", _jvp_ours, _jvp_ref, _same),
    Comb("vjp", _vjp_ours, _vjp_ref, lambda m: N),
    Comb("vmap", _vmap_ours, _vmap_ref, lambda m: 2 * m),
    Comb("checkpoint", _ckpt_ours, _ckpt_ref, _same),
    Comb("jacfwd", _jacfwd_ours, _jacfwd_ref, lambda m: N * m),
    Comb("jacrev", _jacrev_ours, _jacrev_ref, lambda m: N * m),
    Comb("hessian", _hess_ours, _hess_ref, lambda m: N * N),
    Comb("custom_vjp", _cvjp_ours, _identity_ref, _same),
    Comb("custom_jvp", _cjvp_ours, _identity_ref, _same),
    Comb("Function", _function_ours, _identity_ref, _same),
    Comb("scan", _scan_ours, _loop_ref(SCAN_W), _same),
    Comb("fori_loop", _fori_ours, _loop_ref([1.0 + 0.5 * i for i in range(K)]), _same),
    Comb("while_loop", _while_ours, _loop_ref([1.0 + 0.5 * i for i in range(K)]), _same),
    Comb("where", _where_ours, _where_ref, _same),
    Comb("dropout", _dropout_ours, _dropout_ref, _same),
]}

ELEMENTS = list(COMBS)
LOOPS = ["scan", "fori_loop", "while_loop"]
#: reverse-over-reverse (and reverse-over-forward-over-reverse) chains through each loop
TRIPLE_PREFIXES = [("grad", "grad"), ("grad", "vjp"), ("jacrev", "grad"),
                   ("jacrev", "jacrev"), ("vjp", "grad")]


def cells() -> list[tuple[str, ...]]:
    """Every composition cell, outermost first: all ordered pairs, then the triples."""
    pairs = [(o, i) for o in ELEMENTS for i in ELEMENTS]
    triples = [(a, b, loop) for (a, b) in TRIPLE_PREFIXES for loop in LOOPS]
    return pairs + triples


def cell_id(cell: tuple[str, ...]) -> str:
    return "-".join(cell)


def build(cell: tuple[str, ...], side: str) -> tuple[Callable, int]:
    """The cell's function (side "ours" or "ref") and its output size.

    Position 0 is the innermost element (it wraps the base function)."""
    import jax.numpy as jnp

    f = base(anp if side == "ours" else jnp)
    m = N
    for pos, name in enumerate(reversed(cell)):
        comb = COMBS[name]
        f = getattr(comb, side)(f, m, pos)
        m = comb.out(m)
    return f, m


#: how many derivative orders each element adds
ORDER = {"grad": 1, "jvp": 1, "vjp": 1, "jacfwd": 1, "jacrev": 1, "hessian": 2}


def order(cell: tuple[str, ...]) -> int:
    return sum(ORDER.get(name, 0) for name in cell)


def draws(cell: tuple[str, ...]) -> bool:
    return "dropout" in cell


def reference_masks(cell: tuple[str, ...]) -> dict[tuple[int, int], np.ndarray]:
    """The dropout masks (already scaled by 1/(1-p)) the cell's draws get.

    The reference is traced once with masks unset to learn which draws the
    cell makes (slot -> shape); a program that only draws those shapes, in the
    implementation's order (innermost element first, then loop iterations),
    from the same seed gives the masks."""
    import jax

    STATE.masks, STATE.record = None, {}
    f, _ = build(cell, "ref")
    jax.eval_shape(f, X0)
    slots = sorted(STATE.record)
    shapes = [STATE.record[s] for s in slots]

    def probe():
        return tuple(nn.dropout(anp.ones(s), P_DROP) for s in shapes)

    ad.random.manual_seed(SEED)
    got = ad.jit(probe)() if shapes else ()
    if len(shapes) == 1 and not isinstance(got, tuple):
        got = (got,)
    return {s: np.asarray(g) for s, g in zip(slots, got)}
