"""Gathers and scatters in the front end (issue 20, item 1).

Integer-array and traced indices (`x[idx]`, `x[:, obs]`, `x[i]`, mixed
basic/advanced indexing), `take`, `take_along_axis`, `x.at[idx].<op>` with
array indices and duplicates, `lax.dynamic_slice` & co., in every transform.

Oracles, never our own output: jax (x64) for values and derivatives, central
finite differences of jax's (or numpy's) primal in float64, the transpose
identity <ct, jvp(t)> = <vjp(ct), t>, and vmap against a Python loop of the
unbatched function.

Documented differences from jax, each tested here:
* the derivative of a gather at an out-of-range (clamped) index is that of
  the clamped read, as finite differences see it; jax's `x[idx]` drops the
  cotangent of an out-of-range index (its transpose scatter drops it);
* `x.at[idx].set(v)` with duplicate indices: the last duplicate in row-major
  order wins (jax leaves the winner unspecified), and only it receives a
  cotangent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import lax as alax
from mlir_autodiff import numpy as anp
from mlir_autodiff.errors import ShapeError, UnsupportedError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

RNG = np.random.default_rng(20)
X = RNG.standard_normal((5, 4))
U = RNG.standard_normal((5, 4))
I = np.array([3, -1, 0, 3, 1])                 # in range, negative, duplicates
IB = np.stack([I, np.array([1, 3, -2, 0, 0])])  # a batch of index vectors (in range)


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable[..., Any]          # fn(numpy module, lax module, *floats, idx)
    floats: list[np.ndarray]


CASES = [
    Case("rows", lambda m, L, x, i: x[i], [X]),
    Case("cols", lambda m, L, x, i: x[:, i[:3]], [X]),
    Case("pair_broadcast", lambda m, L, x, i: x[i[:, None], i[None, :3] % 4], [X]),
    Case("traced_scalar", lambda m, L, x, i: x[i[1]], [X]),
    Case("traced_scalar_col", lambda m, L, x, i: x[..., i[0]], [X]),
    Case("int_and_array", lambda m, L, x, i: x[2, i % 4], [X]),
    Case("separated_arrays_first", lambda m, L, x, i: x.reshape(5, 2, 2)[i, :, i % 2], [X]),
    Case("newaxis_slice", lambda m, L, x, i: x[None, 1:4, i[:2] % 4], [X]),
    Case("at_get", lambda m, L, x, i: x.at[i].get(), [X]),
    Case("take_axis1", lambda m, L, x, i: m.take(x, i % 4, axis=1), [X]),
    Case("take_flat", lambda m, L, x, i: m.take(x, i * 3), [X]),
    Case("take_clip", lambda m, L, x, i: m.take(x, i, axis=1, mode="clip"), [X]),
    Case("take_wrap", lambda m, L, x, i: m.take(x, i * 3, axis=0, mode="wrap"), [X]),
    Case("take_along_axis", lambda m, L, x, i: m.take_along_axis(
        x, m.reshape(i % 4, (5, 1)) * m.ones((1, 3), np.int64), axis=1), [X]),
    Case("at_add_dups", lambda m, L, x, u, i: x.at[i].add(u), [X, U]),
    Case("at_subtract", lambda m, L, x, u, i: x.at[:, i[:2] % 4].subtract(u[:, :2]), [X, U]),
    Case("at_set_unique", lambda m, L, x, u, i: x.at[i[:3]].set(u[:3]), [X, U]),
    Case("at_set_scalar", lambda m, L, x, u, i: x.at[i[1], i[0]].set(u[0, 0]), [X, U]),
    Case("at_min_dups", lambda m, L, x, u, i: x.at[i].min(u), [X, U]),
    Case("at_max_dups", lambda m, L, x, u, i: x.at[i].max(u), [X, U]),
    Case("dynamic_slice", lambda m, L, x, i: L.dynamic_slice(x, (i[0], i[1]), (2, 3)), [X]),
    Case("dynamic_slice_in_dim", lambda m, L, x, i: L.dynamic_slice_in_dim(x, i[4], 2, 1),
         [X]),
    Case("dynamic_index_in_dim", lambda m, L, x, i:
         L.dynamic_index_in_dim(x, i[1], 1, keepdims=False), [X]),
    Case("dynamic_update_slice", lambda m, L, x, u, i:
         L.dynamic_update_slice(x, u[:2, :3], (i[0], i[1])), [X, U]),
    Case("dynamic_update_index_in_dim", lambda m, L, x, u, i:
         L.dynamic_update_index_in_dim(x, u[0], i[3], 0), [X, U]),
]


def ours(case: Case) -> Callable[..., Any]:
    return lambda *a: case.fn(anp, alax, *[anp.asarray(v) for v in a])


def theirs(case: Case) -> Callable[..., Any]:
    return lambda *a: case.fn(jnp, jax.lax, *[jnp.asarray(v) for v in a])


def _close(a: Any, b: Any, tol: float = 1e-10) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _fd_grad(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_values_and_derivatives(case: Case) -> None:
    f, jf = ours(case), theirs(case)
    n = len(case.floats)
    argn = tuple(range(n))
    want = np.asarray(jf(*case.floats, I))
    _close(ad.jit(f)(*case.floats, I), want)
    C = RNG.standard_normal(want.shape)
    loss = lambda *a: (f(*a) * C).sum()  # noqa: E731
    jloss = lambda *a: (jf(*a) * C).sum()  # noqa: E731
    g = ad.grad(loss, argnums=argn)(*case.floats, I)
    jg = jax.grad(jloss, argnums=argn)(*case.floats, I)
    for a, b in zip(g, jg):
        _close(a, b)
    # finite differences of jax's primal (float64), argument by argument
    for k in range(n):
        def part(v: np.ndarray, k: int = k) -> float:
            args = list(case.floats)
            args[k] = v
            return float(jloss(*args, I))
        _close(g[k], _fd_grad(part, case.floats[k]), 1e-6)
    # forward mode and the transpose identity
    T = tuple(RNG.standard_normal(a.shape) for a in case.floats)
    _, t = ad.jvp(lambda *a: f(*a, I), tuple(case.floats), T)
    _, jt = jax.jvp(lambda *a: jf(*a, I), tuple(case.floats), T)
    _close(t, jt)
    _, pullback = ad.vjp(lambda *a: f(*a, I), *case.floats)
    cts = pullback(C)
    lhs = float(np.sum(C * np.asarray(t)))
    rhs = sum(float(np.sum(np.asarray(c) * tt)) for c, tt in zip(cts, T))
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vmap_against_a_loop(case: Case) -> None:
    f = ours(case)
    n = len(case.floats)
    B = [np.stack([a, 2 * a - 1]) for a in case.floats]
    loop = lambda fn, cols: np.stack([np.asarray(fn(*c)) for c in cols])  # noqa: E731
    # batched operand, batched indices, both
    got = ad.vmap(lambda *a: f(*a, I))(*B)
    _close(got, loop(ad.jit(f), [[*(b[k] for b in B), I] for k in range(2)]))
    got = ad.vmap(lambda i: f(*case.floats, i))(IB)
    _close(got, loop(ad.jit(f), [[*case.floats, IB[k]] for k in range(2)]))
    got = ad.vmap(f)(*B, IB)
    want = loop(ad.jit(f), [[*(b[k] for b in B), IB[k]] for k in range(2)])
    _close(got, want)
    _close(want, jax.vmap(theirs(case))(*B, IB))
    # per-example gradients (vmap of grad) against jax
    C = RNG.standard_normal(want.shape[1:])
    g = ad.vmap(ad.grad(lambda *a: (f(*a) * C).sum(), argnums=tuple(range(n))))(*B, IB)
    jg = jax.vmap(jax.grad(lambda *a: (theirs(case)(*a) * C).sum(),
                           argnums=tuple(range(n))))(*B, IB)
    for a, b in zip(g, jg):
        _close(a, b)


@pytest.mark.parametrize("name", ["rows", "at_add_dups", "dynamic_slice"])
def test_grad_of_vmap_and_hessian(name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    f, jf = ours(case), theirs(case)
    B = [np.stack([a, 2 * a - 1]) for a in case.floats]
    loss = lambda *a: (ad.vmap(f)(*a, IB) ** 2).sum()  # noqa: E731
    jloss = lambda *a: (jax.vmap(jf)(*a, IB) ** 2).sum()  # noqa: E731
    _close(ad.grad(loss)(*B), jax.grad(jloss)(*B))
    cube = lambda x: (f(x, *case.floats[1:], I) ** 3).sum()  # noqa: E731
    jcube = lambda x: (jf(x, *case.floats[1:], I) ** 3).sum()  # noqa: E731
    _close(ad.hessian(cube)(case.floats[0]), jax.hessian(jcube)(case.floats[0]))


# --------------------------------------------------------------------------- duplicates


def test_add_duplicates_accumulate() -> None:
    x = np.zeros(4)
    i = np.array([1, 1, 3, 1])
    v = np.array([1.0, 2.0, 4.0, 8.0])
    got = ad.jit(lambda x, v, i: x.at[i].add(v))(x, v, i)
    _close(got, [0.0, 11.0, 0.0, 4.0])
    _close(got, jnp.asarray(x).at[i].add(v))


def test_set_duplicates_last_wins_and_only_it_gets_a_cotangent() -> None:
    x = np.arange(4.0)
    i = np.array([1, 2, 1])
    v = np.array([5.0, 6.0, 7.0])
    f = lambda x, v: (x.at[i].set(v) ** 2).sum()  # noqa: E731
    _close(ad.jit(lambda x, v: x.at[i].set(v))(x, v), [0.0, 7.0, 6.0, 3.0])
    gx, gv = ad.grad(f, argnums=(0, 1))(x, v)
    _close(gx, [0.0, 0.0, 0.0, 6.0])   # overwritten positions are masked
    _close(gv, [0.0, 12.0, 14.0])      # the overwritten duplicate gets nothing
    jf = lambda x, v: (jnp.asarray(x).at[i].set(v) ** 2).sum()  # noqa: E731
    _close(gv, _fd_grad(lambda w: float(jf(x, w)), v), 1e-6)


def test_multiply_duplicates_against_finite_differences() -> None:
    # jax does not differentiate a multiply-scatter with duplicate indices
    x = RNG.standard_normal(4)
    v = RNG.standard_normal(3)
    i = np.array([2, 0, 2])
    f = lambda x, v: (x.at[i].multiply(v) * np.arange(1.0, 5.0)).sum()  # noqa: E731
    ref = lambda x, v: (jnp.asarray(x).at[i].multiply(v) * np.arange(1.0, 5.0)).sum()  # noqa: E731
    _close(ad.jit(f)(x, v), ref(x, v))
    gx, gv = ad.grad(f, argnums=(0, 1))(x, v)
    _close(gx, _fd_grad(lambda w: float(ref(w, v)), x), 1e-6)
    _close(gv, _fd_grad(lambda w: float(ref(x, w)), v), 1e-6)


# --------------------------------------------------------------------------- out of range


OOB = np.array([-1, -6, 5, 7, 2])


def test_gather_clamps_like_jax() -> None:
    x = np.arange(5.0) * 1.5
    for fn in (lambda m, x, i: x[i], lambda m, x, i: x.at[i].get(),
               lambda m, x, i: m.take(x, i, mode="clip"),
               lambda m, x, i: m.take(x, i, mode="wrap"),
               lambda m, x, i: m.take(x, i),                      # "fill": NaN
               lambda m, x, i: m.take_along_axis(x, i, axis=0)):
        _close(ad.jit(lambda x, i: fn(anp, x, i))(x, OOB), fn(jnp, jnp.asarray(x), OOB))
    for s in (-1, 4, 9, -9):
        _close(ad.jit(lambda x, s: alax.dynamic_slice(x, (s,), (3,)))(x, np.int64(s)),
               jax.lax.dynamic_slice(x, (s,), (3,)))


def test_gather_derivative_at_clamped_indices_matches_finite_differences() -> None:
    x = RNG.standard_normal(5)
    c = RNG.standard_normal(5)
    f = lambda x: (x[OOB] * c).sum()  # noqa: E731
    ref = lambda x: float((jnp.asarray(x)[OOB] * c).sum())  # noqa: E731
    g = ad.grad(f)(x)
    _close(g, _fd_grad(ref, x), 1e-6)
    _close(g, [c[1], 0.0, c[4], 0.0, c[0] + c[2] + c[3]])  # -6 -> -1 -> 0; 5, 7 -> 4


def test_scatter_drops_out_of_range_updates_like_jax() -> None:
    x = np.arange(5.0)
    v = np.arange(10.0, 15.0)
    for kind in ("set", "add", "multiply", "min", "max"):
        got = ad.jit(lambda x, v, i, k=kind: getattr(x.at[i], k)(v))(x, v, OOB)
        _close(got, getattr(jnp.asarray(x).at[OOB], kind)(v))
    g = ad.grad(lambda v: (anp.asarray(x).at[OOB].add(v) ** 2).sum())(v)
    _close(g, jax.grad(lambda v: (jnp.asarray(x).at[OOB].add(v) ** 2).sum())(v))
    u = np.ones((2, 2))
    for s in ((4, 4), (-1, 0), (1, -7)):
        _close(ad.jit(lambda x, u, s: alax.dynamic_update_slice(x, u, s))(
            X, u, np.array(s)), jax.lax.dynamic_update_slice(X, u, s))


# --------------------------------------------------------------------------- use cases


def test_embedding_lookup_gradient_accumulates_duplicates() -> None:
    E = RNG.standard_normal((7, 3))
    W = RNG.standard_normal((3,))
    tokens = np.array([[1, 4, 1], [6, 1, 0]])

    def loss(m: Any, E: Any, tokens: Any) -> Any:
        h = m.tanh(E[tokens] @ W)
        return (h ** 2).sum()

    g = ad.jit(ad.grad(lambda E, t: loss(anp, E, t)))(E, tokens)
    _close(g, jax.grad(lambda E: loss(jnp, E, tokens))(E))
    assert np.count_nonzero(np.abs(np.asarray(g)).sum(axis=1)) == 4
    per_seq = ad.vmap(ad.grad(lambda E, t: loss(anp, E, t)), in_axes=(None, 0))(E, tokens)
    _close(per_seq, jax.vmap(jax.grad(lambda E, t: loss(jnp, E, t)), in_axes=(None, 0))(
        E, tokens))


def _cross_entropy(m: Any, z: Any, labels: Any) -> Any:
    logp = z - m.log(m.sum(m.exp(z - z.max(axis=1, keepdims=True)), axis=1,
                            keepdims=True)) - z.max(axis=1, keepdims=True)
    return -logp[m.arange(z.shape[0]), labels].mean()


def test_cross_entropy_with_integer_labels() -> None:
    z = RNG.standard_normal((6, 5))
    labels = np.array([4, 0, 0, 2, 1, 4])
    ours_ = lambda z, y: _cross_entropy(anp, z, y)  # noqa: E731
    jf = lambda z, y: _cross_entropy(jnp, z, y)  # noqa: E731
    _close(ad.jit(ours_)(z, labels), jf(z, labels))
    _close(ad.jit(ad.grad(ours_))(z, labels), jax.grad(jf)(z, labels))
    zb = np.stack([z, -z])
    lb = np.stack([labels, labels[::-1]])
    _close(ad.vmap(ours_)(zb, lb), jax.vmap(jf)(zb, lb))
    _close(ad.vmap(ad.grad(ours_))(zb, lb), jax.vmap(jax.grad(jf))(zb, lb))


def test_column_gather_inside_scan() -> None:
    x = RNG.standard_normal((3, 6))
    obs = np.array([[0, 5], [2, 2], [4, 1], [-1, 3]])

    def run(m: Any, L: Any, x: Any, obs: Any) -> Any:
        x = m.asarray(x)
        def step(c: Any, o: Any) -> Any:
            c = m.tanh(c + x[:, o].sum(axis=1))
            return c, c.sum()
        c, ys = L.scan(step, m.zeros(3), obs)
        return (c ** 2).sum() + ys.sum()

    f = lambda x, o: run(anp, alax, x, o)  # noqa: E731
    jf = lambda x, o: run(jnp, jax.lax, x, o)  # noqa: E731
    _close(ad.jit(f)(x, obs), jf(x, obs))
    _close(ad.grad(f)(x, obs), jax.grad(jf)(x, obs))
    xb = np.stack([x, 0.5 * x])
    _close(ad.vmap(ad.grad(f), in_axes=(0, None))(xb, obs),
           jax.vmap(jax.grad(jf), in_axes=(0, None))(xb, obs))


def test_scatter_add_gradient_wrt_operand_and_updates() -> None:
    x = RNG.standard_normal((4, 3))
    v = RNG.standard_normal((5, 3))
    idx = np.array([0, 3, 0, 0, 2])
    f = lambda x, v: (anp.sin(x.at[idx].add(v)) * x).sum()  # noqa: E731
    jf = lambda x, v: (jnp.sin(jnp.asarray(x).at[idx].add(v)) * x).sum()  # noqa: E731
    gx, gv = ad.grad(f, argnums=(0, 1))(x, v)
    jgx, jgv = jax.grad(jf, argnums=(0, 1))(x, v)
    _close(gx, jgx)
    _close(gv, jgv)
    _close(gv, _fd_grad(lambda w: float(jf(x, w)), v), 1e-6)


def test_lax_dynamic_slices_run_outside_a_trace() -> None:
    _close(alax.dynamic_slice(X, (4, -1), (2, 2)), jax.lax.dynamic_slice(X, (4, -1), (2, 2)))
    u = np.ones((2, 2))
    _close(alax.dynamic_update_slice(X, u, (9, 1)), jax.lax.dynamic_update_slice(X, u, (9, 1)))


# --------------------------------------------------------------------------- errors


def _site(excinfo: Any) -> None:
    assert "test_gather_scatter.py:" in str(excinfo.value), str(excinfo.value)


def test_float_indices_are_a_type_error_naming_the_line() -> None:
    with pytest.raises(TypeError, match="integers") as e:
        ad.jit(lambda x, i: x[i])(X, np.array([0.0, 1.0]))
    _site(e)
    with pytest.raises(TypeError, match="integers") as e:
        ad.jit(lambda x: x[np.array([0.5])])(X)
    _site(e)
    with pytest.raises(TypeError, match="integers") as e:
        ad.jit(lambda x, i: anp.take(x, i))(X, np.array([1.0]))
    _site(e)


def test_bad_ranks_and_shapes_name_the_line() -> None:
    with pytest.raises(ShapeError, match="same number of dimensions") as e:
        ad.jit(lambda x, i: anp.take_along_axis(x, i, axis=1))(X, np.array([0, 1]))
    _site(e)
    with pytest.raises(ShapeError, match="could not be broadcast") as e:
        ad.jit(lambda x, i, j: x[i, j])(X, np.array([0, 1]), np.array([0, 1, 2]))
    _site(e)
    with pytest.raises(IndexError, match="too many indices") as e:
        ad.jit(lambda x, i: x[i, i, i])(X, I)
    _site(e)
    with pytest.raises(ShapeError, match="start indices") as e:
        ad.jit(lambda x, i: alax.dynamic_slice(x, (i,), (2,)))(X, np.int64(1))
    _site(e)
    with pytest.raises(ShapeError, match="broadcast") as e:
        ad.jit(lambda x, i: x.at[i].set(np.ones(3)))(X, I)
    _site(e)


def test_boolean_masks_are_refused_naming_the_line() -> None:
    with pytest.raises(UnsupportedError, match="boolean") as e:
        ad.jit(lambda x: x[x > 0])(X)
    _site(e)


# --------------------------------------------------------------------------- GPU pipeline


def _gpu_program(E: Any, t: Any, v: Any, i: Any) -> Any:
    def loss(E: Any, v: Any) -> Any:
        return ((anp.tanh(E[t]) ** 2).sum() + (E.at[i].add(v) ** 2).sum()
                + alax.dynamic_slice(E, (t[0, 0], 1), (2, 2)).sum())
    return ad.grad(loss, argnums=(0, 1))(E, v)


def test_gpu_pipeline_parallel_stage_and_device_code() -> None:
    """The GPU pipeline takes the gathers (tensor.extract inside generics) and
    scatter loops: its parallel stage, run on the CPU, matches jax, and the
    module reaches device code when ptxas is present (no device needed)."""
    import re
    import shutil

    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
    from mlir_autodiff.transforms.pipeline import run_pipeline

    E = RNG.standard_normal((6, 3))
    t = np.array([[1, 4], [1, 0]])
    v = RNG.standard_normal((3, 3))
    i = np.array([5, 5, -1])
    text = ad.lower(_gpu_program, E, t, v, i).as_text("autodiff")
    entry = re.search(r"func.func @(\w+)", text).group(1)
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline())[entry](E, t, v, i)

    def jloss(E: Any, v: Any) -> Any:
        return ((jnp.tanh(E[t]) ** 2).sum() + (E.at[i].add(v) ** 2).sum()
                + jax.lax.dynamic_slice(E, (t[0, 0], 1), (2, 2)).sum())
    for a, b in zip(got, jax.grad(jloss, argnums=(0, 1))(E, v)):
        _close(a, b)
    if shutil.which("ptxas") is None:
        return
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip="sm_80", format="fatbin")])
        assert "gpu.binary" in str(module)


def test_jax_options_of_at_methods_and_tuple_items() -> None:
    i = np.array([2, 0])
    f = lambda x, u: (x.at[i].multiply(u, unique_indices=True, indices_are_sorted=False)  # noqa: E731
                      + x.at[i].get(mode="clip")[0, 0] + x[(1, 3), :][0])
    jf = lambda x, u: (jnp.asarray(x).at[i].multiply(u, unique_indices=True)  # noqa: E731
                       + jnp.asarray(x)[i][0, 0] + jnp.asarray(x)[np.array([1, 3]), :][0])
    _close(ad.jit(f)(X, U[:2]), jf(X, U[:2]))
    _close(ad.grad(lambda x: f(x, U[:2]).sum())(X), jax.grad(lambda x: jf(x, U[:2]).sum())(X))
    with pytest.raises(UnsupportedError, match="mode='clip'") as e:
        ad.jit(lambda x: x.at[i].add(1.0, mode="clip"))(X)
    _site(e)


@pytest.mark.parametrize("kind", ["add", "max", "multiply", "set"])
def test_scatter_gradient_tapes_elements_not_the_array(kind: str) -> None:
    """Reverse mode of a scatter loop saves the elements it reads, never the
    whole array per update (which cost trip x size memory and time)."""
    n = 300
    x, v, i = np.ones(n), np.ones(n), np.arange(n)[::-1].copy()
    f = lambda x, v: (getattr(x.at[i], kind)(v) ** 2).sum()  # noqa: E731
    text = ad.lower(ad.grad(f, argnums=(0, 1)), x, v).as_text("autodiff")
    assert f"tensor<{n}x{n}xf64>" not in text


def test_scatter_multiply_second_order() -> None:
    x = RNG.standard_normal(5)
    v = RNG.standard_normal(3)
    i = np.array([4, 0, 2])
    f = lambda x: (x.at[i].multiply(v * x[:3]) ** 2).sum()  # noqa: E731
    jf = lambda x: (jnp.asarray(x).at[i].multiply(v * x[:3], unique_indices=True) ** 2).sum()  # noqa: E731
    _close(ad.hessian(f)(x), jax.hessian(jf)(x))


def test_traced_loop_index_reads_and_writes_in_fori_loop() -> None:
    def run(m: Any, L: Any, x: Any) -> Any:
        def body(i: Any, c: Any) -> Any:
            return c.at[i].set(c[i - 1] * 0.5 + m.sin(c[i]))
        return (L.fori_loop(1, x.shape[0], body, x) ** 2).sum()

    x = RNG.standard_normal(6)
    f = lambda x: run(anp, alax, anp.asarray(x))  # noqa: E731
    jf = lambda x: run(jnp, jax.lax, jnp.asarray(x))  # noqa: E731
    _close(ad.jit(f)(x), jf(x))
    _close(ad.grad(f)(x), jax.grad(jf)(x))
    xb = np.stack([x, -x])
    _close(ad.vmap(ad.grad(f))(xb), jax.vmap(jax.grad(jf))(xb))
