"""Runtime wrappers around compiled functions: buffer donation (`donate_argnums`),
the same array passed as several arguments, outputs that alias inputs, static
arguments (issue 6, section 4).

Expected values come from numpy on copies made before the call, from central
finite differences, or from jax; never from our own output.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp
from mlir_autodiff.runtime import CompiledModule

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
except ImportError:  # pragma: no cover - jax is an optional oracle
    jax = None

RNG = np.random.default_rng(6)
NOT_USABLE = "Some donated buffers were not usable"


def randn(*shape: int, dtype: Any = np.float64) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@contextmanager
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def central_fd(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d f / d x by central differences, one coordinate at a time (f64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# --------------------------------------------------------------------------- donation

@pytest.mark.parametrize("n", [5, 256])  # 256x256: the tiled, vectorized schedule
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_update_is_written_into_the_donated_array(n: int, dtype: Any) -> None:
    sgd = ad.jit(lambda w, g, lr: w - lr * g, donate_argnums=0)
    w, g = randn(n, n, dtype=dtype), randn(n, n, dtype=dtype)
    expected = w - dtype(0.1) * g
    with no_warnings():
        out = sgd(w, g, 0.1)
    assert out.dtype == dtype and np.shares_memory(out, w)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_training_loop_reuses_one_buffer() -> None:
    sgd = ad.jit(lambda w, g: w - 0.5 * g, donate_argnums=(0,))
    w0, g = randn(64), randn(64)
    w = w0.copy()
    buffer = w
    for _ in range(4):
        w = sgd(w, g)
        assert np.shares_memory(w, buffer)
    np.testing.assert_allclose(w, w0 - 4 * 0.5 * g, rtol=1e-12)
    assert sgd._cache_size() == 1


@pytest.mark.parametrize("n", [4, 128])
@pytest.mark.parametrize("name,f,expected", [
    ("w@w.T", lambda w: w @ w.T, lambda w: w @ w.T),
    ("w.T", lambda w: w.T * 1.0, lambda w: w.T),
    ("w[::-1]+w", lambda w: w[::-1] + w, lambda w: w[::-1] + w),
    ("w.T+w", lambda w: w.T + w, lambda w: w.T + w),
    ("cumulative", lambda w: w - w.sum(axis=0), lambda w: w - w.sum(axis=0)),
])
def test_unsafe_in_place_reads_still_give_correct_results(
        n: int, name: str, f: Callable[..., Any], expected: Callable[..., Any]) -> None:
    """Results that read the donated array in another order than they write it."""
    w = randn(n, n, dtype=np.float32)
    want = expected(w.astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # in place or not is bufferization's call
        out = ad.jit(f, donate_argnums=0)(w)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_matmul_into_donated_operand() -> None:
    w, x = randn(6, 6), randn(6, 6)
    want = w @ x
    out = ad.jit(lambda w, x: w @ x, donate_argnums=0)(w, x)
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_two_donated_arguments_swapping_roles() -> None:
    a, b = randn(8), randn(8)
    want = (b * 2, a * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = ad.jit(lambda a, b: (b * 2, a * 3), donate_argnums=(0, 1))(a, b)
    np.testing.assert_allclose(out[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(out[1], want[1], rtol=1e-12)
    assert not np.shares_memory(out[0], out[1])


def test_donated_array_passed_twice_is_copied_first() -> None:
    sgd = ad.jit(lambda w, g: w - 0.25 * g, donate_argnums=0)
    w = randn(16)
    before = w.copy()
    out = sgd(w, w)
    np.testing.assert_allclose(out, before * 0.75, rtol=1e-12)
    np.testing.assert_array_equal(w, before)  # overlapping: the runtime donated a copy
    sgd(randn(16), randn(16))  # same compiled version
    assert sgd._cache_size() == 1


def test_read_only_and_strided_donations_are_copied() -> None:
    sgd = ad.jit(lambda w, g: w - g, donate_argnums=0)
    w, g = randn(8), randn(8)
    before = w.copy()
    w.setflags(write=False)
    out = sgd(w, g)
    np.testing.assert_allclose(out, before - g, rtol=1e-12)
    np.testing.assert_array_equal(w, before)
    big = randn(16)
    out = sgd(big[::2], g)
    np.testing.assert_allclose(out, big[::2] - g, rtol=1e-12)


def test_donation_without_a_matching_output_warns_and_leaves_the_array() -> None:
    f = ad.jit(lambda w: anp.tanh(w).sum(axis=0), donate_argnums=0)
    w = randn(3, 4)
    before = w.copy()
    with pytest.warns(UserWarning, match=NOT_USABLE):
        out = f(w)
    np.testing.assert_allclose(out, np.tanh(before).sum(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(w, before)


def test_donated_dtype_must_match_exactly() -> None:
    f = ad.jit(lambda w: w.astype(np.float32) * 2, donate_argnums=0)
    w = randn(4)
    with pytest.warns(UserWarning, match=NOT_USABLE):
        out = f(w)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, (w * 2).astype(np.float32), rtol=1e-6)


def test_donated_integer_and_bool_arrays() -> None:
    count = np.arange(5, dtype=np.int32)
    out = ad.jit(lambda c: c + 1, donate_argnums=0)(count)
    assert np.shares_memory(out, count) and out.tolist() == [1, 2, 3, 4, 5]
    m = np.array([True, False, True])
    out = ad.jit(lambda m: ~m, donate_argnums=0)(m)
    assert out.dtype == np.bool_ and out.tolist() == [False, True, False]


def test_returning_a_donated_input() -> None:
    w = randn(5)
    before = w.copy()
    with no_warnings():
        same = ad.jit(lambda w: w, donate_argnums=0)(w)
    np.testing.assert_array_equal(same, before)
    with no_warnings():
        a, b = ad.jit(lambda w: (w, w * 2), donate_argnums=0)(w)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_allclose(b, before * 2, rtol=1e-12)
    assert not np.shares_memory(a, b)
    with no_warnings():
        a, b = ad.jit(lambda w: (w, w), donate_argnums=0)(w)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_array_equal(b, before)
    assert not np.shares_memory(a, b)


def test_donation_errors() -> None:
    x = randn(3)
    with pytest.raises(TypeError, match="both static_argnums and donate_argnums"):
        ad.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=1)(x, 2)
    with pytest.raises(TypeError, match=r"donate_argnums 1: argument 1 \(float\) holds no "
                                        "numpy array"):
        ad.jit(lambda x, s: x * s, donate_argnums=1)(x, 2.0)
    with pytest.raises(TypeError, match="holds no numpy array"):
        ad.jit(lambda x, s: x * s, donate_argnums=1)(x, np.float64(2.0))
    with pytest.raises(TypeError, match="donate_argnums 2 is out of range for 2 positional"):
        ad.jit(lambda x, y: x * y, donate_argnums=2)(x, x)
    with pytest.raises(TypeError, match="donate_argnums -3 is out of range"):
        ad.jit(lambda x, y: x * y, donate_argnums=-3)(x, x)
    with pytest.raises(TypeError, match="donate_argnums must be an int or a sequence of ints"):
        ad.jit(lambda x: x, donate_argnums="w")


def test_negative_donate_argnums() -> None:
    w, g = randn(4), randn(4)
    want = g - w
    out = ad.jit(lambda g, w: g - w, donate_argnums=-1)(g, w)
    assert np.shares_memory(out, w)
    np.testing.assert_allclose(out, want, rtol=1e-12)


def _mlp_loss(p: dict[str, Any], x: Any, y: Any, np_: Any = anp) -> Any:
    h = np_.tanh(x @ p["w1"] + p["b1"])
    return np_.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def _mlp_params() -> dict[str, np.ndarray]:
    return {"w1": randn(3, 8), "b1": randn(8), "w2": randn(8, 2), "b2": randn(2)}


@pytest.mark.skipif(jax is None, reason="jax is the oracle")
def test_donated_train_step_with_value_and_grad_and_pytree_params() -> None:
    lr = 0.1

    @ad.jit
    def step_impl(p: Any, x: Any, y: Any) -> Any:
        loss, g = ad.value_and_grad(_mlp_loss)(p, x, y)
        return {k: p[k] - lr * g[k] for k in p}, loss

    step = ad.jit(step_impl, donate_argnums=0)
    params, x, y = _mlp_params(), randn(5, 3), randn(5, 2)
    ref = {k: jnp.asarray(v) for k, v in params.items()}
    buffers = dict(params)
    for _ in range(3):
        jloss, jgrad = jax.value_and_grad(lambda p: _mlp_loss(p, x, y, jnp))(ref)
        ref = {k: ref[k] - lr * jgrad[k] for k in ref}
        with no_warnings():
            params, loss = step(params, x, y)
        np.testing.assert_allclose(loss, jloss, rtol=1e-12)
        for k in params:
            assert np.shares_memory(params[k], buffers[k])
            np.testing.assert_allclose(params[k], ref[k], rtol=1e-12, atol=1e-14)


@pytest.mark.skipif(jax is None, reason="jax is the oracle")
def test_donated_params_receive_their_gradients() -> None:
    """jit(value_and_grad(loss)) with donated params: each gradient has its param's shape."""
    vg = ad.jit(ad.value_and_grad(_mlp_loss), donate_argnums=0)
    params, x, y = _mlp_params(), randn(5, 3), randn(5, 2)
    jloss, jgrad = jax.value_and_grad(lambda p: _mlp_loss(p, x, y, jnp))(
        {k: jnp.asarray(v) for k, v in params.items()})
    with no_warnings():
        loss, grads = vg(params, x, y)
    np.testing.assert_allclose(loss, jloss, rtol=1e-12)
    for k in params:
        assert np.shares_memory(grads[k], params[k])
        np.testing.assert_allclose(grads[k], jgrad[k], rtol=1e-10, atol=1e-14)


def test_donation_with_random_draws_keeps_the_rng_state_argument() -> None:
    def noisy(w: Any) -> Any:
        return w + ad.random.normal((6,), dtype=np.float64)

    w = randn(6)
    ad.random.manual_seed(3)
    want = ad.jit(noisy)(w.copy())
    ad.random.manual_seed(3)
    with no_warnings():
        out = ad.jit(noisy, donate_argnums=0)(w)
    assert np.shares_memory(out, w)
    np.testing.assert_array_equal(out, want)


def test_runtime_donation_from_mlir_text() -> None:
    """The CPU runtime convention itself: `bufferization.writable = true` donates."""
    text = """
    func.func @update(%w: tensor<4xf64> {bufferization.writable = true}, %g: tensor<4xf64>)
        -> (tensor<4xf64>, tensor<4xf64>) {
      %d = arith.subf %w, %g : tensor<4xf64>
      %u = bufferization.materialize_in_destination %d in %w
          : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
      return %u, %g : tensor<4xf64>, tensor<4xf64>
    }
    func.func @square(%w: tensor<3x3xf64> {bufferization.writable = true}) -> tensor<3x3xf64> {
      %z = arith.constant 0.0 : f64
      %e = tensor.empty() : tensor<3x3xf64>
      %f = linalg.fill ins(%z : f64) outs(%e : tensor<3x3xf64>) -> tensor<3x3xf64>
      %p = linalg.matmul ins(%w, %w : tensor<3x3xf64>, tensor<3x3xf64>)
                         outs(%f : tensor<3x3xf64>) -> tensor<3x3xf64>
      %u = bufferization.materialize_in_destination %p in %w
          : (tensor<3x3xf64>, tensor<3x3xf64>) -> tensor<3x3xf64>
      return %u : tensor<3x3xf64>
    }
    """
    cm = CompiledModule(text)
    assert "autodiff.result_args = array<i64: 0, 1>" in cm.lowered_text
    w, g = randn(4), randn(4)
    want = w - g
    u, g_out = cm["update"](w, g)
    assert u is w
    np.testing.assert_allclose(u, want, rtol=1e-12)
    # @g is not donated: the result that is its buffer comes back as a copy.
    assert not np.shares_memory(g_out, g)
    np.testing.assert_array_equal(g_out, g)
    m = randn(3, 3)
    want = m @ m
    out = cm["square"](m)
    assert out is m
    np.testing.assert_allclose(out, want, rtol=1e-12)


# --------------------------------------------------------------------------- duplicate arguments

def _fd_check(f: Callable[[np.ndarray], float], g: np.ndarray, x: np.ndarray) -> None:
    np.testing.assert_allclose(g, central_fd(f, x), rtol=1e-6, atol=1e-8)


def test_same_array_for_two_differentiated_arguments() -> None:
    x = randn(5)
    ga, gb = ad.grad(lambda a, b: anp.sum(a * b), argnums=(0, 1))(x, x)
    _fd_check(lambda a: np.sum(a * x), ga, x)
    _fd_check(lambda b: np.sum(x * b), gb, x)
    assert not np.shares_memory(ga, gb) and not np.shares_memory(ga, x)

    def h(a: Any, b: Any) -> Any:
        return anp.sum(anp.sin(a) * b ** 2)

    ga, gb = ad.grad(h, argnums=(0, 1))(x, x)
    _fd_check(lambda a: np.sum(np.sin(a) * x ** 2), ga, x)
    _fd_check(lambda b: np.sum(np.sin(x) * b ** 2), gb, x)


def test_inner_jit_called_with_one_value_twice_accumulates() -> None:
    inner = ad.jit(lambda a, b: anp.sum(anp.sin(a) * b ** 2))

    def f(x: Any) -> Any:
        return inner(x, x)

    x = randn(6)
    g = ad.grad(f)(x)
    _fd_check(lambda x: np.sum(np.sin(x) * x ** 2), g, x)
    g2 = ad.jit(ad.grad(f))(x)
    np.testing.assert_array_equal(g2, g)


def test_jit_with_the_same_array_twice() -> None:
    x = randn(4)
    f = ad.jit(lambda a, b: (a * b, a - b))
    p, d = f(x, x)
    np.testing.assert_allclose(p, x * x, rtol=1e-12)
    np.testing.assert_array_equal(d, np.zeros(4))


# --------------------------------------------------------------------------- aliasing outputs

def test_outputs_that_alias_inputs_are_fresh_arrays() -> None:
    ident = ad.jit(lambda x: x)
    twice = ad.jit(lambda x: (x, x))
    mixed = ad.jit(lambda x, y: (x, x * y, y))
    x, y = randn(3), randn(3)
    x0 = x.copy()
    a = ident(x)
    b1, b2 = twice(x)
    c = mixed(x, y)
    for out in (a, b1, b2, c[0]):
        assert not np.shares_memory(out, x)
    assert not np.shares_memory(b1, b2)
    assert not np.shares_memory(c[2], y)
    x[:] = 0  # the caller changes its array: earlier outputs do not change
    for out in (a, b1, b2, c[0]):
        np.testing.assert_array_equal(out, x0)


def test_earlier_results_survive_later_calls() -> None:
    fns = {
        "compute": ad.jit(lambda x: anp.tanh(x) * 2),
        "ident": ad.jit(lambda x: x),
        "pair": ad.jit(lambda x: (x * 2, x * 2)),
    }
    for name, f in fns.items():
        x1, x2 = randn(64), randn(64)
        first = f(x1)
        snapshot = [np.array(o) for o in (first if isinstance(first, tuple) else (first,))]
        f(x2)
        f(x2 + 1)
        now = first if isinstance(first, tuple) else (first,)
        for s, o in zip(snapshot, now):
            np.testing.assert_array_equal(o, s, err_msg=name)


def test_donated_results_survive_later_calls() -> None:
    sgd = ad.jit(lambda w, g: w - g, donate_argnums=0)
    w1, w2, g = randn(32), randn(32), randn(32)
    want1 = w1 - g
    r1 = sgd(w1, g)
    sgd(w2, g)
    np.testing.assert_allclose(r1, want1, rtol=1e-12)


# --------------------------------------------------------------------------- static arguments

@dataclasses.dataclass(frozen=True)
class Config:
    depth: int
    act: str


class Opts(NamedTuple):
    scale: float
    bias: bool


def _layers(x: Any, cfg: Config) -> Any:
    for _ in range(cfg.depth):
        x = anp.tanh(x) if cfg.act == "tanh" else anp.sin(x)
    return x


def _np_layers(x: np.ndarray, cfg: Config) -> np.ndarray:
    for _ in range(cfg.depth):
        x = np.tanh(x) if cfg.act == "tanh" else np.sin(x)
    return x


def test_hashable_static_configs_and_recompilation() -> None:
    traces = [0]

    def f(x: Any, cfg: Config, opts: Opts) -> Any:
        traces[0] += 1
        y = _layers(x, cfg) * opts.scale
        return y + 1 if opts.bias else y

    jf = ad.jit(f, static_argnums=(1, 2))
    x = randn(4)
    cases = [(Config(2, "tanh"), Opts(2.0, True)), (Config(3, "sin"), Opts(0.5, False))]
    for i, (cfg, opts) in enumerate(cases):
        want = _np_layers(x, cfg) * opts.scale + (1 if opts.bias else 0)
        np.testing.assert_allclose(jf(x, cfg, opts), want, rtol=1e-12)
        assert jf._cache_size() == i + 1 and traces[0] == i + 1
    # Equal (not identical) configs hit the cache.
    jf(randn(4), Config(2, "tanh"), Opts(2.0, True))
    assert jf._cache_size() == 2 and traces[0] == 2


def test_static_values_of_different_types_compile_separately() -> None:
    def f(x: Any, k: Any) -> Any:
        return x * 2 if isinstance(k, bool) else x * 3 if isinstance(k, int) else x * 5

    jf = ad.jit(f, static_argnums=1)
    x = randn(3)
    # 1 == 1.0 == True (and they hash alike), but they are different configurations.
    np.testing.assert_allclose(jf(x, 1), x * 3, rtol=1e-12)
    np.testing.assert_allclose(jf(x, 1.0), x * 5, rtol=1e-12)
    np.testing.assert_allclose(jf(x, True), x * 2, rtol=1e-12)
    assert jf._cache_size() == 3


def test_static_argnames_keyword_arguments() -> None:
    traces = [0]

    def f(x: Any, *, act: str = "tanh", scale: Any = 1.0) -> Any:
        traces[0] += 1
        return (anp.tanh(x) if act == "tanh" else anp.sin(x)) * scale

    jf = ad.jit(f, static_argnames="act")
    x = randn(5)
    np.testing.assert_allclose(jf(x, act="tanh", scale=2.0), np.tanh(x) * 2, rtol=1e-12)
    np.testing.assert_allclose(jf(x, act="tanh", scale=3.0), np.tanh(x) * 3, rtol=1e-12)
    assert traces[0] == 1  # `scale` is traced: a new value does not retrace
    np.testing.assert_allclose(jf(x, act="sin", scale=2.0), np.sin(x) * 2, rtol=1e-12)
    assert traces[0] == 2 and jf._cache_size() == 2
    with pytest.raises(TypeError, match="hashable"):
        jf(x, act=["tanh"])


def test_static_argument_steers_a_gradient() -> None:
    def poly(x: Any, n: int) -> Any:
        return anp.sum(x ** n)

    g = ad.jit(lambda x, n: ad.grad(poly)(x, n), static_argnums=1)
    x = randn(4)
    for n in (2, 3):
        _fd_check(lambda x, n=n: np.sum(x ** n), g(x, n), x)
    assert g._cache_size() == 2


def test_static_and_donated_together() -> None:
    step = ad.jit(lambda w, g, lr: w - lr * g, static_argnums=2, donate_argnums=0)
    w, g = randn(8), randn(8)
    want = w - 0.5 * g
    out = step(w, g, 0.5)
    assert np.shares_memory(out, w)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    w2 = randn(8)
    want2 = w2 - 0.25 * g
    np.testing.assert_allclose(step(w2, g, 0.25), want2, rtol=1e-12)
    assert step._cache_size() == 2
