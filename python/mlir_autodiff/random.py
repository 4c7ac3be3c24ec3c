"""`mlir_autodiff.random`: stateful random draws, as `torch.rand` inside a model.

    import mlir_autodiff as ad

    ad.random.manual_seed(0)

    @ad.jit
    def noisy(x):
        return x + ad.random.normal(x.shape, x.dtype, std=0.1)

Inside a trace each draw emits one `autodiff.random` op (a draw from the
implicit generator); nothing random happens in Python. When `jit` compiles a
module with draws it runs `--autodiff-functionalize-rng` before the
transforms, so `grad`, `checkpoint` and `vmap` replay exactly the forward's
numbers, and `--autodiff-lower-rng` after them (Philox4x32-10). The compiled
function then takes the generator state `(seed, offset)` and returns the
advanced offset: the runtime passes the process-wide state in and stores the
offset it gets back, so consecutive calls draw fresh numbers and `manual_seed`
replays a run bit for bit, even across separately compiled programs (the
numbers depend only on seed, offset and the draw's shape). The state and that
calling convention live in `rng_state` (which `jit` uses); `manual_seed`,
`seed`, `get_state`, `set_state` and `call_with_state` are re-exported here.

Outside a trace the functions run eagerly: they compile (once per shape,
dtype and parameters) and draw from the same generator.

Explicit keys, as in JAX: `key(seed)` is the int64 array `[seed, 0]`, plain
data that passes through `jit`, `grad` and `vmap`; `split` and `fold_in`
derive new keys from Philox words of a key. `uniform`, `normal`,
`bernoulli` and `randint` take a key as their first argument for a pure
draw (JAX's argument order after it); without one they draw from the
generator (torch's order). Keyed draws emit `autodiff.philox` directly, at the
key's (seed, offset), marked `keyed`.

Under `shard_map` (several processes, `mlir_autodiff.distributed`): a keyed
draw in the body gives the same numbers on every process, as in jax (the key
is the same everywhere; so does the implicit generator when the processes
seeded it alike). `fold_in(key, ad.lax.axis_index("x"))` gives each process
a stream of its own. `out_sharding=PartitionSpec(...)` (uniform, normal,
bernoulli, randint; jax.random's keyword) makes `shape` the *global* shape
and returns this process's block of that global draw: the same numbers as
those elements of the single-process draw with the same key, for any number
of processes, drawn without the rest (Philox is counter-based; see
`random_sharding`). Dropout masks of a data-parallel batch are drawn so.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor

from . import dialects
from . import numpy as anp
from .api import JitFunction
from .dialects.vocabulary import RANDOM
from .dialects.vocabulary import RNG_KEY as KEY_ATTR
from .dialects.vocabulary import RNG_PINS as PIN_ATTR
from .errors import UnsupportedError
from .random_sharding import block_draw, is_split
from .rng_state import (  # the generator's state lives a layer down, where `api` uses it
    _MASK64,
    DEFAULT_SEED,
    call_with_state,
    get_state,
    manual_seed,
    seed,
    set_state,
)
from .tracing import (
    ShapedArray,
    TracedFunction,
    Tracer,
    canonical_dtype,
    current_trace,
    is_float_dtype,
)
from .transforms.ad_support import sym_name, symbol_refs, walk_ops

ShapeLike = int | Sequence[int]


# --------------------------------------------------------------------------- helpers

def _shape(shape: ShapeLike, who: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{who}: shape must be an int or a sequence of ints, got "
                        f"{shape!r}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"{who}: negative dimensions are not allowed, got {out}")
    return out


def _float_dtype(dtype: Any, who: str) -> np.dtype:
    dt = canonical_dtype(dtype)
    if not is_float_dtype(dt):
        raise TypeError(f"{who}: dtype must be a float type (float16, bfloat16, float32, "
                        f"float64), got {dt}")
    return dt


def _is_static_scalar(x: Any) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, bool))


def _eager(fname: str, dynamic: Sequence[Any], static: dict[str, Any]) -> Any:
    """Run `fname(*dynamic, **static)` compiled, outside any trace."""
    return _EAGER(fname, tuple(sorted(static.items())), *dynamic)


def _eager_body(fname: str, static: tuple[tuple[str, Any], ...], *dynamic: Any) -> Any:
    return globals()[fname](*dynamic, **dict(static))


class _LazyEager:
    """The jitted eager entry point, built on first use (so the jit thread setting is
    read then, as for any `jit`, not when this module is imported)."""

    _fn: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._fn is None:
            self._fn = JitFunction(_eager_body, static_argnums=(0, 1))
        return self._fn(*args)


_EAGER = _LazyEager()


def _draw(shape: tuple[int, ...], dtype: np.dtype, distribution: str,
          **params: float) -> Tracer:
    """Emit `autodiff.random` in the active trace."""
    trace = current_trace()
    assert trace is not None
    aval = ShapedArray(shape, dtype)
    with trace.emitting():
        value = dialects.random(aval.mlir_type(), distribution, **params)
    return trace.wrap(value, aval)


# --------------------------------------------------------------------------- keys

#: A key is an int64 array of this shape: [seed, offset], see `key`.
KEY_SHAPE = (2,)
KEY_DTYPE = np.dtype(np.int64)
#: Philox `stream` words (the counter's high 64 bits) of key derivation. Draws use
#: stream 0, so no derived key is a number some draw returned.
_DIGEST_STREAM = 0x6B657964  # "keyd"
_SPLIT_STREAM = 0x73706C74  # "splt"
_FOLD_STREAM = 0x666F6C64  # "fold"


def _as_i64(value: int) -> int:
    """A Python int taken mod 2**64, as the two's complement int64 holding it."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


def key(seed: Any) -> Any:
    """A key for the keyed draws (JAX's `jax.random.key`): the int64 array [seed, 0].

    A key is plain data, an int64 array of shape (2,): the Philox key (`seed`,
    taken mod 2**64) and the first counter block its draws use. Draws with a
    key are pure functions of it (the same key gives the same numbers, the
    generator of `manual_seed` is not touched); `split` and `fold_in` derive
    new keys. `uniform(key(s), shape)` is the first draw after `manual_seed(s)`:
    both read the Philox stream of `s` from block 0. Keys pass through `jit`,
    `grad` and `vmap` (a batch of keys is an int64 array of shape (n, 2)).
    """
    if isinstance(seed, Tracer):
        if np.issubdtype(seed.dtype, np.floating) or seed.dtype == np.bool_ or seed.shape:
            raise TypeError(f"random.key: seed must be an integer scalar, got {seed.aval}")
        return anp.stack([anp.astype(seed, KEY_DTYPE), anp.zeros((), KEY_DTYPE)])
    if isinstance(seed, (bool, float, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"random.key: seed must be an int, got {type(seed).__name__}")
    return np.array([_as_i64(int(seed)), 0], dtype=KEY_DTYPE)


def _is_key_like(x: Any) -> bool:
    """Whether a first argument selects the keyed form: keys are integer arrays; shapes
    are ints or tuples, and bernoulli's `p` is a float."""
    return isinstance(x, (Tracer, np.ndarray)) and np.issubdtype(x.dtype, np.integer)


def _check_key(k: Any, who: str) -> Any:
    """`k` if it is one key; a TypeError saying what a key is otherwise."""
    if not isinstance(k, (Tracer, np.ndarray)):
        raise TypeError(f"{who}: a key must be an int64 array of shape (2,) (from random.key, "
                        f"split or fold_in), got {type(k).__name__}")
    dtype, shape = np.dtype(k.dtype), tuple(k.shape)
    if dtype != KEY_DTYPE or shape != KEY_SHAPE:
        hint = "; map over a batch of keys with ad.vmap" if shape[-1:] == KEY_SHAPE else ""
        raise TypeError(
            f"{who}: a key must be an int64 array of shape (2,) (from random.key, split or "
            f"fold_in), got {dtype}{list(shape)}{hint}; shapes are ints or tuples of ints"
        )
    return k


def _index(i: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), i)


def _key_words(k: Tracer) -> tuple[ir.Value, ir.Value]:
    """(seed, offset) of a key, as the i64 scalars `autodiff.philox` takes."""
    return tensor.extract(k.value, [_index(0)]), tensor.extract(k.value, [_index(1)])


def _philox(aval: ShapedArray, seed: ir.Value, offset: ir.Value, distribution: str,
            stream: int = 0, **params: float) -> ir.Value:
    """Emit `autodiff.philox` at the current insertion point, marked `keyed`: a pure
    function of the key, which `vmap` shares among lanes when the key is unbatched."""
    value = dialects.philox(aval.mlir_type(), seed, offset, distribution, **params)
    value.owner.attributes["keyed"] = ir.UnitAttr.get()
    if stream:
        i64 = ir.IntegerType.get_signless(64)
        value.owner.attributes["stream"] = ir.IntegerAttr.get(i64, _as_i64(stream))
    return value


def _keyed_draw(k: Any, shape: tuple[int, ...], dtype: np.dtype, distribution: str,
                **params: float) -> Tracer:
    """Emit the draw of key `k` in the active trace: philox at (k[0], k[1])."""
    trace = current_trace()
    assert trace is not None
    k = trace.lift(anp.asarray(k))  # a key captured from an enclosing trace becomes an argument
    aval = ShapedArray(shape, dtype)
    with trace.emitting():
        seed, offset = _key_words(k)
        value = _philox(aval, seed, offset, distribution, **params)
    return trace.wrap(value, aval)


def _derived_keys(k: Any, data: Any, shape: tuple[int, ...], stream: int) -> Tracer:
    """int64 words of keys derived from `k`, in the active trace.

    Two Philox evaluations: a digest h of both key words (one block of
    `_DIGEST_STREAM` at (k[0], k[1])), then the words of counter `data` under
    key h in `stream`. Mixing both words first means keys that share a seed
    but not an offset have unrelated children.
    """
    trace = current_trace()
    assert trace is not None
    k = trace.lift(anp.asarray(k))  # captured from an enclosing trace: an argument
    data_t = None if isinstance(data, int) else trace.lift(anp.astype(data, KEY_DTYPE))
    aval = ShapedArray(shape, KEY_DTYPE)
    with trace.emitting():
        i64 = ir.IntegerType.get_signless(64)
        seed, offset = _key_words(k)
        digest = _philox(ShapedArray((1,), KEY_DTYPE), seed, offset, "bits", _DIGEST_STREAM)
        h = tensor.extract(digest, [_index(0)])
        counter = (arith.constant(i64, _as_i64(data)) if data_t is None
                   else tensor.extract(data_t.value, []))
        value = _philox(aval, h, counter, "bits", stream)
    return trace.wrap(value, aval)


def split(key: Any, num: int = 2) -> Any:
    """`num` new keys from `key` (jax.random.split): an int64 array of shape (num, 2).

    Child i is block i of the Philox stream `_SPLIT_STREAM` under a digest of
    `key` (see `_derived_keys`): a fresh 64-bit seed and offset, so the
    children's streams and the parent's are independent. Deterministic: the
    same key always splits the same way.
    """
    who = "random.split"
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 0:
        raise TypeError(f"{who}: num must be a non-negative int, got {num!r}")
    _check_key(key, who)
    if current_trace() is None:
        return _eager("split", [key], {"num": int(num)})
    return _derived_keys(key, 0, (int(num),) + KEY_SHAPE, _SPLIT_STREAM)


def fold_in(key: Any, data: Any) -> Any:
    """A new key from `key` and an integer `data` (jax.random.fold_in).

    `data` (a Python int taken mod 2**64, or a traced integer scalar) picks
    the counter block of `_FOLD_STREAM` under a digest of `key`: distinct data
    give independent keys; `fold_in(key, i)` under `vmap` over i gives one key
    per lane.
    """
    who = "random.fold_in"
    _check_key(key, who)
    if isinstance(data, (bool, float, np.bool_)):
        raise TypeError(f"{who}: data must be an integer, got {type(data).__name__}")
    if isinstance(data, (int, np.integer)):
        data = _as_i64(int(data))
    else:
        aval = data.aval if isinstance(data, Tracer) else np.asarray(data)
        if aval.shape != () or not np.issubdtype(aval.dtype, np.integer):
            raise TypeError(f"{who}: data must be an integer scalar, got {data!r}")
    if current_trace() is None:
        return _eager("fold_in", [key, np.asarray(data, KEY_DTYPE)], {})
    return _derived_keys(key, data, KEY_SHAPE, _FOLD_STREAM)


# --------------------------------------------------------------------------- dispatch

def _bind(who: str, signature: Callable[..., Any], args: Sequence[Any],
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """Bind a call's arguments to `signature`'s parameters (defaults applied)."""
    try:
        bound = inspect.signature(signature).bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"{who}: {err}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _split_key(who: str, args: Sequence[Any],
               kwargs: dict[str, Any]) -> tuple[Any, Sequence[Any], dict[str, Any]]:
    """(key or None, the other arguments): a draw's keyed form has a key first."""
    if "key" in kwargs:
        kwargs = dict(kwargs)
        return _check_key(kwargs.pop("key"), who), args, kwargs
    if args and _is_key_like(args[0]):
        return _check_key(args[0], who), args[1:], kwargs
    return None, args, kwargs


def _out_sharding(who: str, k: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the keyed draw's `out_sharding`, or None when it splits nothing; the other
    keyword arguments). See `random_sharding`: inside a shard_map body the draw is
    this process's block of the global draw."""
    if "out_sharding" not in kwargs:
        return None, kwargs
    kwargs = dict(kwargs)
    spec = kwargs.pop("out_sharding")
    if spec is None:
        return None, kwargs
    if k is None:
        raise TypeError(f"{who}: out_sharding needs the keyed form ({who}(key, shape, ...)): "
                        "the implicit generator's draws are not split over processes")
    if not is_split(spec, who):
        return None, kwargs
    if current_trace() is None:
        raise NameError(f"{who}: out_sharding {spec!r} names mesh axes: draw inside a "
                        "shard_map body over a mesh with those axes")
    return spec, kwargs


def _source(k: Any, out_sharding: Any = None, who: str = "random") -> Callable[..., Tracer]:
    """The emitter of a draw: from the implicit generator, or from key `k` (with
    `out_sharding`, this process's block of the global draw: `random_sharding`)."""
    if k is None:
        return _draw
    if out_sharding is not None:
        return lambda shape, dtype, dist, **p: block_draw(k, _keyed_draw, shape, dtype, dist,
                                                          out_sharding, who, **p)
    return lambda *a, **p: _keyed_draw(k, *a, **p)


def _aliased(who: str, b: dict[str, Any], names: tuple[str, str], default: Any) -> Any:
    """JAX's and torch's names for one parameter (minval / low): at most one given."""
    given = [b[n] for n in names if b[n] is not None]
    if len(given) > 1:
        raise TypeError(f"{who}: pass only one of {names[0]} and {names[1]}")
    return given[0] if given else default


# Signatures of the two forms, bound by `_bind` (their bodies never run).

def _uniform_stateful(shape: ShapeLike = (), dtype: Any = np.float32, low: Any = 0.0,
                      high: Any = 1.0) -> None:
    """uniform(shape, dtype, low, high)."""


def _uniform_keyed(shape: ShapeLike = (), dtype: Any = np.float32, minval: Any = None,
                   maxval: Any = None, *, low: Any = None, high: Any = None) -> None:
    """uniform(key, shape, dtype, minval, maxval); key removed."""


def _normal_args(shape: ShapeLike = (), dtype: Any = np.float32, mean: Any = 0.0,
                 std: Any = 1.0) -> None:
    """normal([key,] shape, dtype, mean, std)."""


def _bernoulli_args(p: Any = 0.5, shape: ShapeLike | None = None) -> None:
    """bernoulli([key,] p, shape)."""


def _randint_stateful(low: Any, high: Any = None, shape: ShapeLike = (),
                      dtype: Any = np.int32) -> None:
    """randint(low, high, shape, dtype) or randint(high, shape)."""


def _randint_keyed(shape: ShapeLike, minval: Any, maxval: Any, dtype: Any = np.int32) -> None:
    """randint(key, shape, minval, maxval, dtype); key removed."""


# --------------------------------------------------------------------------- draws

def uniform(*args: Any, **kwargs: Any) -> Any:
    """Samples from U[low, high). Two forms, told apart by the first argument:

    * `uniform(shape=(), dtype=np.float32, low=0.0, high=1.0)` draws from the
      implicit generator (torch.rand / torch.empty(...).uniform_(low, high));
    * `uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0)`
      (jax.random.uniform; `low`/`high` are accepted too) is a pure function of
      the key (see `key`).

    `low`/`high` may be traced values (broadcast against `shape`): the draw is
    then `low + (high - low) * U[0, 1)`, differentiable in both.
    """
    who = "random.uniform"
    k, args, kwargs = _split_key(who, args, kwargs)
    spec, kwargs = _out_sharding(who, k, kwargs)
    if k is None:
        b = _bind(who, _uniform_stateful, args, kwargs)
        low, high = b["low"], b["high"]
    else:
        b = _bind(who, _uniform_keyed, args, kwargs)
        low = _aliased(who, b, ("minval", "low"), 0.0)
        high = _aliased(who, b, ("maxval", "high"), 1.0)
    return _uniform(k, low, high, shape=b["shape"], dtype=b["dtype"], out_sharding=spec)


def _uniform(k: Any, low: Any, high: Any, shape: ShapeLike, dtype: Any,
             out_sharding: Any = None) -> Any:
    who = "random.uniform"
    shape = _shape(shape, who)
    dt = _float_dtype(dtype, who)
    static = _is_static_scalar(low) and _is_static_scalar(high)
    if current_trace() is None:
        if static:
            return _eager("_uniform", [k], {"shape": shape, "dtype": dt.name, "low": float(low),
                                                "high": float(high)})
        return _eager("_uniform", [k, low, high], {"shape": shape, "dtype": dt.name})
    draw = _source(k, out_sharding, who)
    if static:
        if not float(low) <= float(high):
            raise ValueError(f"{who}: expected low <= high, got low={low}, high={high}")
        return draw(shape, dt, "uniform", low=float(low), high=float(high))
    u = draw(shape, dt, "uniform")
    low, high = anp.asarray(low), anp.asarray(high)
    out = low + (high - low) * u
    return anp.astype(out, dt) if out.dtype != dt else out


def rand(*shape: int, dtype: Any = np.float32) -> Any:
    """torch.rand: U[0, 1) of the given shape."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return uniform(shape, dtype)


def normal(*args: Any, **kwargs: Any) -> Any:
    """Samples from N(mean, std**2). Two forms, told apart by the first argument:

    * `normal(shape=(), dtype=np.float32, mean=0.0, std=1.0)` draws from the
      implicit generator (torch.randn * std + mean);
    * `normal(key, shape=(), dtype=np.float32, mean=0.0, std=1.0)`
      (jax.random.normal) is a pure function of the key (see `key`).

    `mean`/`std` may be traced values: the draw is then `mean + std * z` with
    z ~ N(0, 1) (the reparameterization), differentiable in both.
    """
    who = "random.normal"
    k, args, kwargs = _split_key(who, args, kwargs)
    spec, kwargs = _out_sharding(who, k, kwargs)
    b = _bind(who, _normal_args, args, kwargs)
    return _normal(k, b["mean"], b["std"], shape=b["shape"], dtype=b["dtype"], out_sharding=spec)


def _normal(k: Any, mean: Any, std: Any, shape: ShapeLike, dtype: Any,
            out_sharding: Any = None) -> Any:
    who = "random.normal"
    shape = _shape(shape, who)
    dt = _float_dtype(dtype, who)
    static = _is_static_scalar(mean) and _is_static_scalar(std)
    if current_trace() is None:
        if static:
            return _eager("_normal", [k], {"shape": shape, "dtype": dt.name, "mean": float(mean),
                                               "std": float(std)})
        return _eager("_normal", [k, mean, std], {"shape": shape, "dtype": dt.name})
    draw = _source(k, out_sharding, who)
    if static:
        if float(std) < 0:
            raise ValueError(f"{who}: std must be >= 0, got {std}")
        return draw(shape, dt, "normal", mean=float(mean), std=float(std))
    z = draw(shape, dt, "normal")
    out = anp.asarray(mean) + anp.asarray(std) * z
    return anp.astype(out, dt) if out.dtype != dt else out


def randn(*shape: int, dtype: Any = np.float32) -> Any:
    """torch.randn: N(0, 1) of the given shape."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return normal(shape, dtype)


def bernoulli(*args: Any, **kwargs: Any) -> Any:
    """Boolean samples, True with probability `p`: `bernoulli(p=0.5, shape=None)` from the
    implicit generator, or `bernoulli(key, p=0.5, shape=None)` (jax.random.bernoulli).

    `shape` defaults to the shape of `p`; `p` broadcasts against it. The
    draw is `U[0, 1) < p`, so p = 0 never and p = 1 always gives True.
    """
    who = "random.bernoulli"
    k, args, kwargs = _split_key(who, args, kwargs)
    spec, kwargs = _out_sharding(who, k, kwargs)
    b = _bind(who, _bernoulli_args, args, kwargs)
    return _bernoulli(k, b["p"], shape=b["shape"], out_sharding=spec)


def _bernoulli(k: Any, p: Any, shape: ShapeLike | None, out_sharding: Any = None) -> Any:
    who = "random.bernoulli"
    static = _is_static_scalar(p)
    if static and not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{who}: p must be in [0, 1], got {p}")
    if shape is None:
        shape = () if static else np.shape(p) if not isinstance(p, Tracer) else p.shape
    shape = _shape(shape, who)
    if current_trace() is None:
        if static:
            return _eager("_bernoulli", [k], {"p": float(p), "shape": shape})
        return _eager("_bernoulli", [k, p], {"shape": shape})
    dt = np.float32
    if not static:
        p = anp.asarray(p)
        dt = p.dtype if np.issubdtype(p.dtype, np.floating) else np.float32
    return _source(k, out_sharding, who)(shape, np.dtype(dt), "uniform") < p


def randint(*args: Any, **kwargs: Any) -> Any:
    """Integers uniform in [low, high). Two forms, told apart by the first argument:

    * `randint(low, high, shape=(), dtype=np.int32)` draws from the implicit
      generator (torch.randint; `randint(high, shape)` means low = 0);
    * `randint(key, shape, minval, maxval, dtype=np.int32)` (jax.random.randint)
      is a pure function of the key.

    The bounds are Python ints with low < high, within `dtype`. Each element
    is `low + (w mod (high - low))` for a 64-bit Philox word w (floor mod, so
    in range), whose bias is below (high - low) / 2**64.
    """
    who = "random.randint"
    k, args, kwargs = _split_key(who, args, kwargs)
    spec, kwargs = _out_sharding(who, k, kwargs)
    if k is None:
        b = _bind(who, _randint_stateful, args, kwargs)
        low, high, shape = b["low"], b["high"], b["shape"]
        if isinstance(high, (tuple, list)) and "shape" not in kwargs and len(args) == 2:
            low, high, shape = 0, low, high  # torch.randint(high, size)
        elif high is None:
            low, high = 0, low
    else:
        b = _bind(who, _randint_keyed, args, kwargs)
        low, high, shape = b["minval"], b["maxval"], b["shape"]
    return _randint(k, low=low, high=high, shape=shape, dtype=b["dtype"], out_sharding=spec)


def _randint(k: Any, low: Any, high: Any, shape: ShapeLike, dtype: Any,
             out_sharding: Any = None) -> Any:
    who = "random.randint"
    shape = _shape(shape, who)
    dt = canonical_dtype(dtype)
    if not np.issubdtype(dt, np.integer):
        raise TypeError(f"{who}: dtype must be an integer type, got {dt}")
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{who}: {name} must be a Python int, got {v!r}")
    low, high = int(low), int(high)
    info = np.iinfo(dt)
    if not info.min <= low < high <= info.max + 1:
        raise ValueError(f"{who}: expected {info.min} <= low < high <= {info.max + 1} for "
                         f"{dt}, got low={low}, high={high}")
    if high - low > np.iinfo(np.int64).max:
        raise ValueError(f"{who}: the range high - low = {high - low} exceeds 2**63 - 1")
    if current_trace() is None:
        return _eager("_randint", [k], {"low": low, "high": high, "shape": shape, "dtype": dt.name})
    words = _source(k, out_sharding, who)(shape, KEY_DTYPE, "bits")
    out = anp.remainder(words, np.int64(high - low)) + np.int64(low)
    return anp.astype(out, dt)


def dropout(x: Any, p: float = 0.5, training: bool = True) -> Any:
    """Zero each element of `x` with probability `p`, scale the rest by 1/(1-p).

    torch.nn.functional.dropout's semantics: with `training=False` (or p = 0)
    it is the identity; p = 1 gives zeros. The mask is one `autodiff.random`
    draw, so its gradient (mask / (1 - p)) is the forward's exact mask: the
    backward pass reuses the saved mask or, under `checkpoint`, recomputes it
    from the same seed and offset.
    """
    who = "dropout"
    if not _is_static_scalar(p):
        raise TypeError(f"{who}: p must be a Python float, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{who}: dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if current_trace() is None:
        return _eager("dropout", [x], {"p": p, "training": True})
    x = anp.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{who}: x must be a float array, got {x.dtype}")
    if p == 1.0:
        return anp.zeros_like(x)
    keep = _draw(tuple(x.shape), x.dtype, "uniform") >= p  # P(u >= p) = 1 - p for u ~ U[0, 1)
    return anp.where(keep, x * (1.0 / (1.0 - p)), 0.0)


# --------------------------------------------------------------------------- distributions
# jax.random's keyed distributions, composed from one keyed draw each (uniform,
# normal or Philox words) and numpy ops, so every transform applies: jit, vmap
# over keys, and reverse/forward mode where the sample is a differentiable
# function of its parameters (truncated_normal's bounds, multivariate_normal's
# mean and cov). Outside a trace each compiles once per shape and parameters
# (`_eager`).

#: jax.random.PRNGKey: the same key as `key(seed)`.
PRNGKey = key


def _is_array(x: Any) -> bool:
    return isinstance(x, (Tracer, np.ndarray))


def _dist_dtype(dtype: Any, who: str, *params: Any) -> np.dtype:
    """`dtype` if given, else the float type of the typed (array) parameters, else
    float32 (this module's default)."""
    if dtype is not None:
        return _float_dtype(dtype, who)
    typed = [np.dtype(p.dtype) for p in params
             if _is_array(p) and np.issubdtype(p.dtype, np.floating)]
    return np.dtype(np.result_type(*typed)) if typed else np.dtype(np.float32)


def _arr(x: Any) -> Any:
    """Arrays as they are; lists and scalars as numpy arrays (eager calls take arrays)."""
    return x if _is_array(x) else np.asarray(x)


def _param_shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if _is_array(x) else np.shape(x)


def _result_shape(who: str, shape: Any, *param_shapes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` (checked to hold the parameters' broadcast shape), or that shape."""
    try:
        base = np.broadcast_shapes(*param_shapes)
    except ValueError:
        raise ValueError(f"{who}: parameter shapes {list(param_shapes)} do not "
                         "broadcast") from None
    if shape is None:
        return tuple(base)
    out = _shape(shape, who)
    try:
        ok = np.broadcast_shapes(out, base) == out
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{who}: shape {out} must be broadcast-compatible with the "
                         f"parameters' shape {tuple(base)} (their broadcast is a suffix)")
    return out


def _static_int(x: Any) -> int | None:
    """A Python int for ints and integer 0-d numpy arrays, else None."""
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, np.ndarray) and x.shape == () and np.issubdtype(x.dtype, np.integer):
        return int(x)
    return None


def _bits(k: Any, shape: tuple[int, ...]) -> Tracer:
    """int64 Philox words of key `k` (uniform over all int64 values)."""
    return _keyed_draw(k, shape, KEY_DTYPE, "bits")


def _open_uniform(k: Any, shape: tuple[int, ...], dt: np.dtype, low: float) -> Tracer:
    """Uniform on [low, 1): `low` > 0 keeps logs of it finite."""
    return _keyed_draw(k, shape, dt, "uniform", low=float(low), high=1.0)


def exponential(key: Any, shape: ShapeLike = (), dtype: Any = None) -> Any:
    """Exponential(1) samples (jax.random.exponential): -log1p(-U), U ~ U[0, 1)."""
    who = "random.exponential"
    _check_key(key, who)
    shape = _shape(shape, who)
    dt = _dist_dtype(dtype, who)
    if current_trace() is None:
        return _eager("exponential", [key], {"shape": shape, "dtype": dt.str})
    return -anp.log1p(-_keyed_draw(key, shape, dt, "uniform"))


def gumbel(key: Any, shape: ShapeLike = (), dtype: Any = None, mode: str | None = None) -> Any:
    """Standard Gumbel samples (jax.random.gumbel): -log(-log(U)), U ~ U[tiny, 1)
    (finite: tiny keeps log(U) > -inf, and -log(U) >= ulp(1)/2 > 0)."""
    who = "random.gumbel"
    _check_key(key, who)
    if mode not in (None, "low", "high"):
        raise ValueError(f"{who}: mode must be None, 'low' or 'high', got {mode!r}")
    shape = _shape(shape, who)
    dt = _dist_dtype(dtype, who)
    if current_trace() is None:
        return _eager("gumbel", [key], {"shape": shape, "dtype": dt.str})
    return -anp.log(-anp.log(_open_uniform(key, shape, dt, np.finfo(dt).tiny)))


def laplace(key: Any, shape: ShapeLike = (), dtype: Any = None) -> Any:
    """Standard Laplace samples (jax.random.laplace), density exp(-|x|)/2: with
    V ~ U[-1 + eps, 1), -sign(V) log1p(-|V|)."""
    who = "random.laplace"
    _check_key(key, who)
    shape = _shape(shape, who)
    dt = _dist_dtype(dtype, who)
    if current_trace() is None:
        return _eager("laplace", [key], {"shape": shape, "dtype": dt.str})
    v = _keyed_draw(key, shape, dt, "uniform", low=-1.0 + float(np.finfo(dt).eps), high=1.0)
    return -anp.sign(v) * anp.log1p(-anp.abs(v))


def categorical(key: Any, logits: Any, axis: int = -1, shape: ShapeLike | None = None,
                replace: bool = True, mode: str | None = None) -> Any:
    """Category indices drawn with probabilities softmax(logits) along `axis`
    (jax.random.categorical), by the Gumbel-max trick: argmax(logits + G).

    `shape` (default: logits' shape without `axis`) must end in that batch
    shape; leading extra dims are independent samples. `replace=False` draws
    distinct categories per batch element (Gumbel top-k): the leading dims of
    `shape` then hold at most as many samples as there are categories. int64.
    """
    who = "random.categorical"
    _check_key(key, who)
    if mode not in (None, "low", "high"):
        raise ValueError(f"{who}: mode must be None, 'low' or 'high', got {mode!r}")
    lshape = _param_shape(logits)
    if not lshape:
        raise ValueError(f"{who}: logits must have at least one dimension, got a scalar")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -len(lshape) <= axis < len(lshape):
        raise ValueError(f"{who}: axis {axis!r} is out of range for logits of shape {lshape}")
    axis = int(axis) % len(lshape)
    batch = lshape[:axis] + lshape[axis + 1:]
    n = lshape[axis]
    out_shape = _result_shape(who, shape, batch)
    prefix = out_shape[:len(out_shape) - len(batch)]
    if not replace and math.prod(prefix) > n:
        raise ValueError(f"{who}: cannot take {math.prod(prefix)} samples without "
                         f"replacement from {n} categories")
    if current_trace() is None:
        return _eager("categorical", [key, _arr(logits)], {"axis": axis, "shape": out_shape,
                                                     "replace": bool(replace)})
    if math.prod(out_shape) == 0 or n == 0:
        if n == 0 and math.prod(out_shape):
            raise ValueError(f"{who}: logits have no categories along axis {axis}")
        return anp.zeros(out_shape, KEY_DTYPE)
    logits = anp.asarray(logits)
    dt = logits.dtype if np.issubdtype(logits.dtype, np.floating) else np.dtype(np.float32)
    last = anp.moveaxis(anp.astype(logits, dt), axis, -1)
    if replace:
        return anp.argmax(last + gumbel(key, out_shape + (n,), dt), axis=-1)
    m = math.prod(prefix)
    scores = last + gumbel(key, batch + (n,), dt)
    top = anp.argsort(scores, axis=-1, descending=True)[..., :m]  # batch + (m,)
    return anp.reshape(anp.moveaxis(top, -1, 0), out_shape)


def permutation(key: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
    """A uniformly random permutation (jax.random.permutation).

    `x` an int: the integers 0..x-1 shuffled (int64). `x` an array: its
    slices along `axis` shuffled; with `independent=True` each 1-D slice
    along `axis` is shuffled on its own. The order is the argsort of one
    64-bit Philox word per element (ties have probability below n**2 / 2**65).
    """
    who = "random.permutation"
    _check_key(key, who)
    n_int = _static_int(x)
    if n_int is not None:
        if n_int < 0:
            raise ValueError(f"{who}: x must be non-negative, got {n_int}")
        if current_trace() is None:
            return _eager("permutation", [key], {"x": n_int})
        return anp.argsort(_bits(key, (n_int,)))
    xshape = _param_shape(x)
    if not xshape:
        raise TypeError(f"{who}: x must be an integer or an array of at least one "
                        f"dimension, got a scalar {x!r}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -len(xshape) <= axis < len(xshape):
        raise ValueError(f"{who}: axis {axis!r} is out of range for an array of shape "
                         f"{xshape}")
    axis = int(axis) % len(xshape)
    if current_trace() is None:
        return _eager("permutation", [key, _arr(x)], {"axis": axis,
                                                "independent": bool(independent)})
    x = anp.asarray(x)
    if independent:
        order = anp.argsort(_bits(key, xshape), axis=axis)
        return anp.take_along_axis(x, order, axis=axis)
    return anp.take(x, anp.argsort(_bits(key, (xshape[axis],))), axis=axis)


def shuffle(key: Any, x: Any, axis: int = 0) -> Any:
    """Deprecated, as in jax: each 1-D slice of `x` along `axis` shuffled
    independently; use `permutation(key, x, axis, independent=True)`."""
    import warnings

    warnings.warn("random.shuffle is deprecated; use random.permutation with "
                  "independent=True", FutureWarning, stacklevel=2)
    return permutation(key, x, axis=axis, independent=True)


def choice(key: Any, a: Any, shape: ShapeLike = (), replace: bool = True, p: Any = None,
           axis: int = 0, mode: str | None = None) -> Any:
    """Random elements of `a` (jax.random.choice): an int n means arange(n), an
    array means its slices along `axis`.

    With replacement and no `p`: uniform indices; with `p` (probabilities of
    the n entries, traced or not): categorical draws of log(p). Without
    replacement: the first prod(shape) entries of a random permutation, or of
    the Gumbel top-k order of log(p) (so zero-probability entries come last).
    The result has `a`'s shape with `axis` replaced by `shape`.
    """
    who = "random.choice"
    _check_key(key, who)
    if mode not in (None, "low", "high"):
        raise ValueError(f"{who}: mode must be None, 'low' or 'high', got {mode!r}")
    shape = _shape(shape, who)
    n_int = _static_int(a)
    if n_int is not None:
        n, ashape = n_int, None
        if n < 0:
            raise ValueError(f"{who}: a must be non-negative, got {n}")
    else:
        ashape = _param_shape(a)
        if not ashape:
            raise ValueError(f"{who}: a must be an int or an array of at least one "
                             f"dimension, got {a!r}")
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
                or not -len(ashape) <= axis < len(ashape):
            raise ValueError(f"{who}: axis {axis!r} is out of range for a of shape {ashape}")
        axis = int(axis) % len(ashape)
        n = ashape[axis]
    m = math.prod(shape)
    if n == 0 and m > 0:
        raise ValueError(f"{who}: a must have at least one entry unless no samples are taken")
    if not replace and m > n:
        raise ValueError(f"{who}: cannot take a larger sample ({m}) than the population "
                         f"({n}) when replace=False")
    if p is not None and _param_shape(p) != (n,):
        raise ValueError(f"{who}: p must have shape ({n},) (one probability per entry of a "
                         f"along axis), got {_param_shape(p)}")
    if current_trace() is None:
        dyn = [key, None if n_int is not None else _arr(a), None if p is None else _arr(p)]
        return _eager("_choice_eager", dyn, {"a_static": n_int, "shape": shape,
                                      "replace": bool(replace), "axis": axis})
    return _choice(key, a, shape, replace, p, axis, n, m)


def _choice(k: Any, a: Any, shape: tuple[int, ...], replace: bool, p: Any, axis: int,
            n: int, m: int) -> Any:
    if m == 0:
        idx = anp.zeros(shape, KEY_DTYPE)
    elif p is None:
        if replace:
            words = _bits(k, shape)
            idx = anp.remainder(words, np.int64(n))
        else:
            idx = anp.reshape(anp.argsort(_bits(k, (n,)))[:m], shape)
    else:
        p = anp.asarray(p)
        dt = p.dtype if np.issubdtype(p.dtype, np.floating) else np.dtype(np.float32)
        logp = anp.log(anp.astype(p, dt))
        if replace:
            idx = anp.argmax(logp + gumbel(k, shape + (n,), dt), axis=-1)
        else:
            order = anp.argsort(logp + gumbel(k, (n,), dt), descending=True)
            idx = anp.reshape(order[:m], shape)
    if a is None or _static_int(a) is not None:
        return idx
    return anp.take(anp.asarray(a), idx, axis=axis)


def _choice_eager(key: Any, a: Any, p: Any, a_static: int | None, shape: tuple[int, ...],
                  replace: bool, axis: int) -> Any:
    return choice(key, a_static if a is None else a, shape, replace, p, axis)


def _stop_gradient(t: Tracer) -> Tracer:
    """`t` with a zero derivative, in the active trace."""
    trace = current_trace()
    assert trace is not None
    t = trace.lift(t)
    with trace.emitting():
        value = dialects.stop_gradient(t.value)
    return trace.wrap(value, t.aval)


def _erfinv(y: Any) -> Any:
    """The inverse error function, to the working precision of erf (private: for
    truncated_normal). A closed-form estimate (relative error < 2e-3, no
    derivative: a stop_gradient) then three Newton steps on erf(x) = y, in
    float64 whatever y's type; the derivative comes from the last step,
    1/erf'(x) = sqrt(pi)/2 exp(x**2). |y| = 1 gives +-inf and |y| > 1 NaN, as
    constants (the estimate runs on a stand-in there, so gradients stay finite).
    """
    dt = y.dtype
    y = anp.astype(y, np.float64)
    ay = anp.abs(y)
    inside = ay < 1.0
    ys = anp.where(inside, y, 0.5)
    w = -anp.log1p(-ys * ys)  # -log(1 - y**2) >= 0
    a = 0.147
    t = 2.0 / (math.pi * a) - 0.5 * w
    x = _stop_gradient(anp.sign(ys) * anp.sqrt(anp.sqrt(t * t + w / a) - t))
    scale = 0.5 * math.sqrt(math.pi)
    for _ in range(3):
        step = (anp._erf(x) - ys) * scale * anp.exp(x * x)
        x = x - anp.clip(step, -0.05, 0.05)  # the estimate is within 0.03: tails stay sane
    edge = anp.where(ay == 1.0, anp.where(y > 0, np.inf, -np.inf), np.nan)
    return anp.astype(anp.where(inside, x, edge), dt)


def truncated_normal(key: Any, lower: Any, upper: Any, shape: ShapeLike | None = None,
                     dtype: Any = None) -> Any:
    """Standard normal samples conditioned on lower < x < upper
    (jax.random.truncated_normal), by the inverse CDF: with a = erf(lower/sqrt2),
    b = erf(upper/sqrt2) and U ~ U[a, b), sqrt2 * erfinv(U), clipped into the
    bounds. Bounds broadcast against `shape`; may be +-inf; traced bounds are
    differentiable (the sample moves with them, key fixed). Far in one tail
    (both bounds beyond ~5 standard deviations) the erf values round together,
    as in jax.
    """
    who = "random.truncated_normal"
    _check_key(key, who)
    dt = _dist_dtype(dtype, who, lower, upper)
    out_shape = _result_shape(who, shape, _param_shape(lower), _param_shape(upper))
    static = _is_static_scalar(lower) and _is_static_scalar(upper)
    if static and not float(lower) < float(upper):
        raise ValueError(f"{who}: expected lower < upper, got lower={lower}, upper={upper}")
    if current_trace() is None:
        if static:
            return _eager("truncated_normal", [key], {"lower": float(lower),
                                                      "upper": float(upper),
                                                      "shape": out_shape, "dtype": dt.str})
        return _eager("truncated_normal", [key, _arr(lower), _arr(upper)], {"shape": out_shape,
                                                                "dtype": dt.str})
    sqrt2 = math.sqrt(2.0)
    if static:
        lo, hi = float(lower), float(upper)
        a, b = math.erf(lo / sqrt2), math.erf(hi / sqrt2)
        u = _keyed_draw(key, out_shape, dt, "uniform", low=a, high=b)
        bottom = np.nextafter(dt.type(lo), dt.type(np.inf))
        top = np.nextafter(dt.type(hi), dt.type(-np.inf))
        return anp.clip(sqrt2 * _erfinv(u), bottom, top)
    lower = anp.astype(anp.asarray(lower), dt)
    upper = anp.astype(anp.asarray(upper), dt)
    a, b = anp._erf(lower / sqrt2), anp._erf(upper / sqrt2)
    u = a + (b - a) * _keyed_draw(key, out_shape, dt, "uniform")
    return anp.clip(sqrt2 * _erfinv(u), lower, upper)


def _cholesky(a: Any) -> Any:
    """Lower Cholesky factor of the symmetric part of `a` (..., n, n), column by
    column (n steps of broadcast ops; private: for multivariate_normal). Not
    positive definite gives NaN, as jax."""
    n = a.shape[-1]
    a = 0.5 * (a + anp.swapaxes(a, -1, -2))
    cols: list[Any] = []
    for j in range(n):
        c = a[..., :, j]
        if cols:
            prev = anp.stack(cols, axis=-1)  # (..., n, j)
            c = c - anp.sum(prev * prev[..., j:j + 1, :], axis=-1)
        d = anp.sqrt(c[..., j:j + 1])
        cols.append(anp.where(np.arange(n) >= j, c / d, 0.0))
    return anp.stack(cols, axis=-1)


def multivariate_normal(key: Any, mean: Any, cov: Any, shape: ShapeLike | None = None,
                        dtype: Any = None, method: str = "cholesky") -> Any:
    """Samples of N(mean, cov) (jax.random.multivariate_normal): mean + L z with
    cov = L L^T (Cholesky of cov's symmetric part) and z ~ N(0, I).

    `mean` is (..., n), `cov` (..., n, n); `shape` (default: their broadcast
    batch shape) is the batch shape of the result (..., n). Differentiable
    in mean and cov (the reparameterization). method: "cholesky" only.
    """
    who = "random.multivariate_normal"
    _check_key(key, who)
    if method != "cholesky":
        if method in ("eigh", "svd"):
            raise UnsupportedError(f"{who}: method={method!r} is not supported yet; use "
                                   "method='cholesky'")
        raise ValueError(f"{who}: method must be one of 'cholesky', 'eigh', 'svd', got "
                         f"{method!r}")
    mshape, cshape = _param_shape(mean), _param_shape(cov)
    if len(mshape) < 1 or len(cshape) < 2 or cshape[-2:] != (mshape[-1],) * 2:
        raise ValueError(f"{who}: mean must be (..., n) and cov (..., n, n), got mean "
                         f"{mshape} and cov {cshape}")
    mean_t = mean if _is_array(mean) else np.asarray(mean)
    cov_t = cov if _is_array(cov) else np.asarray(cov)
    dt = _dist_dtype(dtype, who, mean_t, cov_t)
    batch = _result_shape(who, shape, mshape[:-1], cshape[:-2])
    if current_trace() is None:
        return _eager("multivariate_normal", [key, mean_t, cov_t],
                      {"shape": batch, "dtype": dt.str})
    n = mshape[-1]
    mean_t = anp.astype(anp.asarray(mean_t), dt)
    cov_t = anp.astype(anp.asarray(cov_t), dt)
    factor = _cholesky(cov_t)
    z = _keyed_draw(key, batch + (n,), dt, "normal")
    return mean_t + anp.sum(factor * z[..., None, :], axis=-1)


# --------------------------------------------------------------------------- pinned draws

def draws_statefully(func_op: ir.Operation) -> bool:
    """Whether a function draws from the implicit generator, itself or through the
    functions it names (key-rooted functions excepted: they draw from their key)."""
    module = func_op.parent
    funcs = {sym_name(op): op.operation for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func"}
    seen: set[str] = set()
    stack = [func_op]
    while stack:
        fn = stack.pop()
        if KEY_ATTR in fn.attributes and fn != func_op:
            continue
        ops = walk_ops(fn)
        if any(op.name == RANDOM for op in ops):
            return True
        for op in ops:
            for name in op.attributes:
                for ref in symbol_refs(op.attributes[name]):
                    if ref in funcs and ref not in seen:
                        seen.add(ref)
                        stack.append(funcs[ref])
    return False


def state_key() -> Tracer:
    """A key draw in the active trace, to become the generator's state `[seed, offset]`
    once `pin_key_to` names the key-rooted function it pins (see `pin_draws`)."""
    return _draw(KEY_SHAPE, KEY_DTYPE, "bits")


def pin_key_to(k: Tracer, symbols: str | Sequence[str]) -> None:
    """Mark the key draw `k` (from `state_key`) as pinning the key-rooted function(s)
    `symbols`: `--autodiff-functionalize-rng` makes it the state at the draw and
    advances the state past the most that one call of any of them draws."""
    op = k.value.owner
    names = [symbols] if isinstance(symbols, str) else list(symbols)
    with op.context:
        refs = [ir.FlatSymbolRefAttr.get(n) for n in names]
        op.attributes[PIN_ATTR] = refs[0] if len(refs) == 1 else ir.ArrayAttr.get(refs)


def pin_draws(fn: TracedFunction) -> None:
    """Make `fn`'s draws from the implicit generator a function of one key drawn now.

    A traced function used twice (a primal call, then `autodiff.vjp` ops of
    it for pullbacks emitted later) would draw fresh numbers at each use, as
    any two uses of a drawing function do. If `fn` draws, this adds a key as
    a trailing parameter passed like a capture and marks the function
    `autodiff.rng_key`: `--autodiff-functionalize-rng` then threads its draws
    from that key, so every use replays the same numbers. The key is emitted
    here, in the active trace (the trace `fn` was traced from), as a draw
    marked `autodiff.rng_pins = @fn`: the pass makes it the generator's state
    `[seed, offset]` at this point and advances the state past what one call of
    `fn` draws, so the replayed numbers are the ones a plain call of `fn` here
    would draw (`vjp(f, x)[0]` inside `jit` equals `f(x)`, draw for draw).
    Does nothing if `fn` does not draw.
    """
    func_op = fn.func_op.operation
    if not draws_statefully(func_op):
        return
    k = state_key()
    pin_key_to(k, ir.StringAttr(func_op.attributes["sym_name"]).value)
    block = func_op.regions[0].blocks[0]
    with func_op.context, func_op.location:
        block.add_argument(k.value.type, func_op.location)
        ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
        inputs = [*ftype.inputs, k.value.type]
        func_op.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(inputs, list(ftype.results)))
        func_op.attributes[KEY_ATTR] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), len(inputs) - 1)
    fn.captures.append(k)


__all__ = [
    "DEFAULT_SEED",
    "KEY_DTYPE",
    "KEY_SHAPE",
    "PRNGKey",
    "bernoulli",
    "call_with_state",
    "categorical",
    "choice",
    "dropout",
    "exponential",
    "fold_in",
    "get_state",
    "gumbel",
    "key",
    "laplace",
    "manual_seed",
    "multivariate_normal",
    "normal",
    "permutation",
    "pin_draws",
    "rand",
    "randint",
    "randn",
    "seed",
    "set_state",
    "shuffle",
    "split",
    "truncated_normal",
    "uniform",
]
