"""`mlir_autodiff.example_libraries.stax`: neural-network layers as
`(init_fun, apply_fun)` pairs, with jax.example_libraries.stax's conventions.

`init_fun(rng, input_shape) -> (output_shape, params)` takes a key from
`mlir_autodiff.random` and a shape whose batch dimension may be -1;
`apply_fun(params, inputs, **kwargs)` runs the layer (`rng=` for `Dropout`).
Combinators (`serial`, `parallel`, `FanOut`, `FanInSum`, `FanInConcat`,
`shape_dependent`) build networks from layers. Parameter-free layers have `()`
as their parameters. Default initializers: Glorot-normal weights and
normal(1e-6) biases (`Dense`: normal(1e-2)), as in jax; the draws are this
project's, not jax's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import lax, nn, random
from .. import numpy as anp
from ..nn import initializers as _init

__all__ = [
    "AvgPool", "BatchNorm", "Conv", "Conv1DTranspose", "ConvTranspose", "Dense", "Dropout",
    "Elu", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gelu", "GeneralConv",
    "GeneralConvTranspose", "Identity", "LeakyRelu", "LogSoftmax", "MaxPool", "Relu", "Selu", "Sigmoid", "Softmax",
    "Softplus", "SumPool", "Tanh", "elementwise", "elu", "gelu", "leaky_relu",
    "logsoftmax", "parallel", "relu", "selu", "serial", "shape_dependent", "sigmoid",
    "softmax", "softplus",
]

Layer = tuple[Callable[..., Any], Callable[..., Any]]

# the activations, under the names stax exports
relu = nn.relu
selu = nn.selu
elu = nn.elu
gelu = nn.gelu
sigmoid = nn.sigmoid
softplus = nn.softplus
leaky_relu = nn.leaky_relu
logsoftmax = nn.log_softmax
softmax = nn.softmax


def _float_dtype() -> Any:
    return anp.zeros(()).dtype


def _glorot_normal(in_axis: int = -2, out_axis: int = -1) -> Callable[..., Any]:
    return _init.glorot_normal(in_axis, out_axis, dtype=_float_dtype())


def _normal(stddev: float) -> Callable[..., Any]:
    return _init.normal(stddev, dtype=_float_dtype())


# --------------------------------------------------------------------------- layers

def Dense(out_dim: int, W_init: Callable[..., Any] | None = None,
          b_init: Callable[..., Any] | None = None) -> Layer:
    """A fully connected layer `inputs @ W + b`."""
    W_init = W_init or _glorot_normal()
    b_init = b_init or _normal(1e-2)

    def init_fun(rng, input_shape):
        k1, k2 = random.split(rng)
        W = W_init(k1, (input_shape[-1], out_dim))
        b = b_init(k2, (out_dim,))
        return tuple(input_shape[:-1]) + (out_dim,), (W, b)

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return anp.dot(inputs, W) + b
    return init_fun, apply_fun


def _out_size(size: int, k: int, stride: int, padding: Any, dilation: int = 1) -> int:
    if size < 0:
        return size
    span = (k - 1) * dilation + 1
    if padding == "SAME":
        return -(-size // stride)
    if padding == "VALID":
        return max(0, (size - span) // stride + 1)
    lo, hi = padding
    return max(0, (size + lo + hi - span) // stride + 1)


def _paddings(padding: Any, n: int) -> list[Any]:
    if isinstance(padding, str):
        p = padding.upper()
        if p not in ("SAME", "VALID"):
            raise ValueError(f"stax: padding must be 'SAME', 'VALID' or pairs, got {padding!r}")
        return [p] * n
    pads = [tuple(int(v) for v in pair) for pair in padding]
    if len(pads) != n:
        raise ValueError(f"stax: {n} spatial dimensions but {len(pads)} padding pairs")
    return pads


def GeneralConv(dimension_numbers: Sequence[str], out_chan: int, filter_shape: Sequence[int],
                strides: Sequence[int] | None = None, padding: Any = "VALID",
                W_init: Callable[..., Any] | None = None,
                b_init: Callable[..., Any] | None = None) -> Layer:
    """A convolution with the layouts `dimension_numbers = (lhs, rhs, out)`, e.g.
    ('NHWC', 'HWIO', 'NHWC'), as `lax.conv_general_dilated` takes them."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = tuple(strides or one)
    W_init = W_init or _glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))
    b_init = b_init or _normal(1e-6)

    def init_fun(rng, input_shape):
        spatial = iter(filter_shape)
        in_chan = input_shape[lhs_spec.index("C")]
        kernel_shape = [out_chan if c == "O" else in_chan if c == "I" else next(spatial)
                        for c in rhs_spec]
        lhs_spatial = [input_shape[i] for i, c in enumerate(lhs_spec) if c not in "NC"]
        out_spatial = iter(_out_size(s, k, st, p) for s, k, st, p in zip(
            lhs_spatial, filter_shape, strides, _paddings(padding, len(filter_shape))))
        output_shape = tuple(input_shape[lhs_spec.index("N")] if c == "N" else
                             out_chan if c == "C" else next(out_spatial) for c in out_spec)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, tuple(kernel_shape)), b_init(k2, tuple(bias_shape)))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                        dimension_numbers=dimension_numbers) + b
    return init_fun, apply_fun


def Conv(out_chan: int, filter_shape: Sequence[int], strides: Sequence[int] | None = None,
         padding: Any = "VALID", W_init: Callable[..., Any] | None = None,
         b_init: Callable[..., Any] | None = None) -> Layer:
    """A 2-d convolution on NHWC inputs with an HWIO kernel."""
    return GeneralConv(("NHWC", "HWIO", "NHWC"), out_chan, filter_shape, strides, padding,
                       W_init, b_init)


def ConvTranspose(*args: Any, **kwargs: Any) -> Layer:
    raise NotImplementedError("stax.ConvTranspose: transposed convolutions are not provided "
                              "(lax.conv_transpose is missing)")


Conv1DTranspose = ConvTranspose
GeneralConvTranspose = ConvTranspose


def BatchNorm(axis: int | Sequence[int] = (0, 1, 2), epsilon: float = 1e-5,
              center: bool = True, scale: bool = True,
              beta_init: Callable[..., Any] = _init.zeros,
              gamma_init: Callable[..., Any] = _init.ones) -> Layer:
    """Normalization by the statistics of the batch over `axis`, then `gamma * z + beta`."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)

    def init_fun(rng, input_shape):
        n = len(input_shape)
        norm_axes = {a % n for a in axes}
        shape = tuple(d for i, d in enumerate(input_shape) if i not in norm_axes)
        k1, k2 = random.split(rng)
        beta = beta_init(k1, shape, _float_dtype()) if center else ()
        gamma = gamma_init(k2, shape, _float_dtype()) if scale else ()
        return tuple(input_shape), (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        norm_axes = tuple(sorted(a % x.ndim for a in axes))
        mean = anp.mean(x, axis=norm_axes, keepdims=True)
        var = anp.mean(anp.square(x - mean), axis=norm_axes, keepdims=True)
        z = (x - mean) / anp.sqrt(var + epsilon)
        kept = tuple(slice(None) if i not in norm_axes else None for i in range(x.ndim))
        if center and scale:
            return gamma[kept] * z + beta[kept]
        if center:
            return z + beta[kept]
        if scale:
            return gamma[kept] * z
        return z
    return init_fun, apply_fun


def elementwise(fun: Callable[..., Any], **fun_kwargs: Any) -> Layer:
    """A parameter-free layer applying `fun(inputs, **fun_kwargs)`."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)
    return init_fun, apply_fun


Tanh = elementwise(anp.tanh)
Relu = elementwise(relu)
Exp = elementwise(anp.exp)
LogSoftmax = elementwise(logsoftmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _pooling_layer(reducer: Callable[..., Any], init_val: float, rescale: bool) -> Callable[..., Layer]:
    def PoolingLayer(window_shape: Sequence[int], strides: Sequence[int] | None = None,
                     padding: Any = "VALID", spec: str | None = None) -> Layer:
        window_shape = tuple(window_shape)
        strides = tuple(strides or (1,) * len(window_shape))
        non_spatial = (spec.index("N"), spec.index("C")) if spec else None

        def full(shape: tuple[int, ...], fill: int, ndim: int) -> tuple[int, ...]:
            if non_spatial is None:   # NHWC-like: the window covers the middle axes
                return (fill,) + shape + (fill,) * (ndim - 1 - len(shape))
            it = iter(shape)
            return tuple(fill if i in non_spatial else next(it) for i in range(ndim))

        def init_fun(rng, input_shape):
            n = len(input_shape)
            dims, st = full(window_shape, 1, n), full(strides, 1, n)
            pads = _paddings(padding, len(window_shape))
            pads = full(tuple(pads), "VALID", n) if isinstance(pads[0], str) else \
                full(tuple(pads), (0, 0), n)
            out = tuple(_out_size(s, k, t, p) for s, k, t, p in zip(input_shape, dims, st, pads))
            return out, ()

        def apply_fun(params, inputs, **kwargs):
            n = inputs.ndim
            dims, st = full(window_shape, 1, n), full(strides, 1, n)
            pad = padding if isinstance(padding, str) else full(
                tuple(tuple(p) for p in padding), (0, 0), n)
            out = lax.reduce_window(inputs, init_val, reducer, dims, st, pad)
            if not rescale:
                return out
            if isinstance(pad, str) and pad.upper() == "VALID":
                return out / math.prod(window_shape)
            # SAME or explicit padding: divide by the number of in-bounds elements
            counts = lax.reduce_window(anp.ones(inputs.shape, inputs.dtype), 0.0, "add",
                                       dims, st, pad)
            return out / counts
        return init_fun, apply_fun
    return PoolingLayer


MaxPool = _pooling_layer("max", -np.inf, False)
SumPool = _pooling_layer("add", 0.0, False)
AvgPool = _pooling_layer("add", 0.0, True)


def _flatten_init(rng, input_shape):
    return (input_shape[0], math.prod(input_shape[1:])), ()


def _flatten_apply(params, inputs, **kwargs):
    return anp.reshape(inputs, (inputs.shape[0], -1))


Flatten = (_flatten_init, _flatten_apply)


def _identity_init(rng, input_shape):
    return input_shape, ()


def _identity_apply(params, inputs, **kwargs):
    return inputs


Identity = (_identity_init, _identity_apply)


def FanOut(num: int) -> Layer:
    """`num` copies of the input, for `parallel`."""
    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num
    return init_fun, apply_fun


def _fan_in_sum_init(rng, input_shape):
    return input_shape[0], ()


def _fan_in_sum_apply(params, inputs, **kwargs):
    return sum(inputs[1:], inputs[0])


FanInSum = (_fan_in_sum_init, _fan_in_sum_apply)


def FanInConcat(axis: int = -1) -> Layer:
    """The inputs concatenated along `axis`."""
    def init_fun(rng, input_shape):
        ax = axis % len(input_shape[0])
        concat = sum(shape[ax] for shape in input_shape)
        return tuple(input_shape[0][:ax]) + (concat,) + tuple(input_shape[0][ax + 1:]), ()

    def apply_fun(params, inputs, **kwargs):
        return anp.concatenate(inputs, axis)
    return init_fun, apply_fun


def Dropout(rate: float, mode: str = "train") -> Layer:
    """Keep each input with probability `rate` (scaled by 1/rate) when `mode == 'train'`;
    `apply_fun` needs `rng=` in either mode."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng")
        if rng is None:   # required in either mode, as in jax
            raise ValueError("stax.Dropout: apply_fun needs a key, apply_fun(params, inputs, "
                             "rng=key) (from mlir_autodiff.random.key)")
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return anp.where(keep, inputs / rate, 0)
    return init_fun, apply_fun


# --------------------------------------------------------------------------- combinators

def serial(*layers: Layer) -> Layer:
    """The layers applied one after another; the parameters are a list, one per layer."""
    nlayers = len(layers)
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, param = init(layer_rng, input_shape)
            params.append(param)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        for fun, param, r in zip(apply_funs, params, rngs):
            inputs = fun(param, inputs, rng=r, **kwargs)
        return inputs
    return init_fun, apply_fun


def parallel(*layers: Layer) -> Layer:
    """Each layer applied to its own input of a sequence (use with `FanOut`)."""
    nlayers = len(layers)
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        rngs = random.split(rng, nlayers)
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)])

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs)]
    return init_fun, apply_fun


def shape_dependent(make_layer: Callable[[Any], Layer]) -> Layer:
    """A layer built from the input shape by `make_layer(shape)`."""
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)
    return init_fun, apply_fun
