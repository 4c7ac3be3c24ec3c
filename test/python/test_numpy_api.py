"""Table test: numpy-API functions, jitted, agree with numpy itself on random inputs.

Each entry is (name, fn, input shapes, input domain): `fn(m, *xs)` is written
once against a numpy-like module `m`, called with `m = mlir_autodiff.numpy`
under `jit` and with `m = numpy` for the reference. Every entry runs for
float32 and float64 inputs and checks the result's dtype (numpy's promotion)
and values (tolerances by dtype).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff import numpy as anp


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    domain: str = "real"  # real | pos | unit | nonzero | gt1
    exact: bool = False  # bool/int results compare exactly


def _inputs(case: Case, dtype: Any, rng: np.random.Generator) -> list[np.ndarray]:
    xs = []
    for shape in case.shapes:
        x = rng.standard_normal(shape)
        if case.domain == "pos":
            x = np.abs(x) + 0.1
        elif case.domain == "unit":
            x = np.tanh(x) * 0.9
        elif case.domain == "nonzero":
            x = np.sign(x) * (np.abs(x) + 0.5)
        elif case.domain == "gt1":
            x = np.abs(x) + 1.1
        xs.append(x.astype(dtype))
    return xs


S = (3, 4)
TABLE = [
    # elementwise arithmetic with broadcasting
    Case("add", lambda m, x, y: m.add(x, y), (S, (4,))),
    Case("subtract_op", lambda m, x, y: x - y, ((2, 3, 4), (3, 1))),
    Case("multiply_op", lambda m, x, y: x * y, (S, S)),
    Case("divide_op", lambda m, x, y: x / y, (S, (1, 4)), "nonzero"),
    Case("true_divide", lambda m, x, y: m.true_divide(x, y), ((4,), S), "nonzero"),
    Case("power", lambda m, x, y: m.power(x, y), (S, S), "pos"),
    Case("pow_int_op", lambda m, x: x ** 3 - 2 * x, (S,)),
    Case("negative_op", lambda m, x: -x + m.negative(x) * 0.5, (S,)),
    Case("floor_divide", lambda m, x, y: x // y, (S, S), "nonzero"),
    Case("remainder", lambda m, x, y: x % y, (S, S), "nonzero"),
    Case("fmod", lambda m, x, y: m.fmod(x, y), (S, S), "nonzero"),
    Case("maximum", lambda m, x, y: m.maximum(x, y), (S, (3, 1))),
    Case("minimum", lambda m, x, y: m.minimum(x, y), ((4,), S)),
    Case("square", lambda m, x: m.square(x), (S,)),
    Case("reciprocal", lambda m, x: m.reciprocal(x), (S,), "nonzero"),
    Case("logaddexp", lambda m, x, y: m.logaddexp(x, y), (S, S)),
    Case("arctan2", lambda m, x, y: m.arctan2(x, y), (S, S)),
    # unary math
    Case("exp", lambda m, x: m.exp(x), (S,)),
    Case("exp2", lambda m, x: m.exp2(x), (S,)),
    Case("log", lambda m, x: m.log(x), (S,), "pos"),
    Case("log2", lambda m, x: m.log2(x), (S,), "pos"),
    Case("log10", lambda m, x: m.log10(x), (S,), "pos"),
    Case("log1p", lambda m, x: m.log1p(x), (S,), "pos"),
    Case("expm1", lambda m, x: m.expm1(x), (S,)),
    Case("sqrt", lambda m, x: m.sqrt(x), (S,), "pos"),
    Case("tanh", lambda m, x: m.tanh(x), (S,)),
    Case("sin", lambda m, x: m.sin(x), (S,)),
    Case("cos", lambda m, x: m.cos(x), (S,)),
    Case("tan", lambda m, x: m.tan(x), (S,), "unit"),
    Case("arcsin", lambda m, x: m.arcsin(x), (S,), "unit"),
    Case("arccos", lambda m, x: m.arccos(x), (S,), "unit"),
    Case("arctan", lambda m, x: m.arctan(x), (S,)),
    Case("sinh", lambda m, x: m.sinh(x), (S,)),
    Case("cosh", lambda m, x: m.cosh(x), (S,)),
    Case("arctanh", lambda m, x: m.arctanh(x), (S,), "unit"),
    Case("arccosh", lambda m, x: m.arccosh(x), (S,), "gt1"),
    Case("abs", lambda m, x: m.abs(x) + abs(x), (S,)),
    Case("sign", lambda m, x: m.sign(x), (S,)),
    Case("floor", lambda m, x: m.floor(3 * x), (S,)),
    Case("rint_trunc_round", lambda m, x: m.rint(3 * x) + m.trunc(3 * x) + m.round(x, 2), (S,)),
    Case("cbrt_arcsinh", lambda m, x: m.cbrt(x) + m.arcsinh(x), (S,)),
    Case("ceil", lambda m, x: m.ceil(3 * x), (S,)),
    Case("where", lambda m, x, y: m.where(x > 0, x, y), (S, (4,))),
    Case("clip", lambda m, x: m.clip(x, -0.5, 0.7), (S,)),
    Case("less", lambda m, x, y: x < y, (S, (4,)), exact=True),
    Case("greater_equal", lambda m, x, y: m.greater_equal(x, y), (S, S), exact=True),
    Case("isfinite", lambda m, x: m.isfinite(m.log(x)), (S,), exact=True),
    # contractions
    Case("matmul_2d", lambda m, x, y: x @ y, ((3, 4), (4, 5))),
    Case("matmul_batched_broadcast", lambda m, x, y: m.matmul(x, y), ((2, 1, 3, 4), (5, 4, 2))),
    Case("matmul_vec_mat", lambda m, x, y: x @ y, ((4,), (4, 3))),
    Case("matmul_mat_vec", lambda m, x, y: x @ y, ((3, 4), (4,))),
    Case("matmul_vec_vec", lambda m, x, y: m.matmul(x, y), ((4,), (4,))),
    Case("dot_nd", lambda m, x, y: m.dot(x, y), ((2, 3, 4), (5, 4, 2))),
    Case("einsum_matmul", lambda m, x, y: m.einsum("ij,jk->ik", x, y), ((3, 4), (4, 2))),
    Case("einsum_batch", lambda m, x, y: m.einsum("bij,bkj->bik", x, y), ((2, 3, 4), (2, 5, 4))),
    Case("einsum_trace_diag", lambda m, x: m.einsum("ii->i", x) + m.einsum("ii", x), ((4, 4),)),
    Case("einsum_three", lambda m, x, y, z: m.einsum("ij,jk,k->i", x, y, z),
         ((3, 4), (4, 5), (5,))),
    Case("outer", lambda m, x, y: m.outer(x, y), ((3,), (4,))),
    Case("tensordot", lambda m, x, y: m.tensordot(x, y, axes=([1, 2], [0, 1])),
         ((2, 3, 4), (3, 4, 5))),
    Case("trace", lambda m, x: m.trace(x), ((4, 4),)),
    # reductions
    Case("sum_all", lambda m, x: m.sum(x), ((3, 4, 5),)),
    Case("sum_axis_keepdims", lambda m, x: x.sum(axis=1, keepdims=True), ((3, 4, 5),)),
    Case("mean_tuple", lambda m, x: m.mean(x, axis=(0, 2)), ((3, 4, 5),)),
    Case("max_neg_axis", lambda m, x: m.max(x, axis=-1), ((3, 4, 5),)),
    Case("min_keepdims", lambda m, x: x.min(axis=(0, 1), keepdims=True), ((3, 4, 5),)),
    Case("prod", lambda m, x: m.prod(x, axis=0), ((3, 4),)),
    Case("var_std", lambda m, x: m.var(x, axis=0) + m.std(x, axis=1, keepdims=True), ((3, 4),)),
    Case("argmax", lambda m, x: m.argmax(x, axis=1), ((3, 4),), exact=True),
    Case("argmin_flat", lambda m, x: m.argmin(x), ((3, 4),), exact=True),
    Case("all_any", lambda m, x: m.stack([m.all(x > -1, axis=0), m.any(x > 1, axis=0)]),
         ((3, 4),), exact=True),
    # shapes
    Case("reshape", lambda m, x: m.reshape(x, (4, -1)) * 2, ((2, 3, 4),)),
    Case("reshape_method", lambda m, x: x.reshape(6, 4).T, ((2, 3, 4),)),
    Case("transpose_axes", lambda m, x: m.transpose(x, (2, 0, 1)), ((2, 3, 4),)),
    Case("swapaxes", lambda m, x: m.swapaxes(x, 0, 2), ((2, 3, 4),)),
    Case("moveaxis", lambda m, x: m.moveaxis(x, 0, -1), ((2, 3, 4),)),
    Case("expand_squeeze", lambda m, x: m.squeeze(m.expand_dims(x, (0, 2)), 0), ((3, 4),)),
    Case("broadcast_to", lambda m, x: m.broadcast_to(x, (2, 3, 4)), ((3, 1),)),
    Case("concatenate", lambda m, x, y: m.concatenate([x, y, x], axis=1), ((3, 2), (3, 4))),
    Case("stack", lambda m, x, y: m.stack([x, y], axis=1), ((3, 4), (3, 4))),
    Case("flip", lambda m, x: m.flip(x, axis=1), ((3, 4),)),
    Case("roll", lambda m, x: m.roll(x, 2, axis=1), ((3, 5),)),
    Case("tril_triu", lambda m, x: m.tril(x) - m.triu(x, 1), ((4, 4),)),
    Case("diff", lambda m, x: m.diff(x, axis=0), ((4, 3),)),
    # indexing
    Case("slice_negative_step", lambda m, x: x[1:, ::-2], ((4, 5),)),
    Case("index_mixed", lambda m, x: x[-1, None, 1:3, ...], ((3, 4, 5),)),
    Case("index_ellipsis_int", lambda m, x: x[..., 2] + x[0], ((4, 4),)),
    # creation mixed with inputs
    Case("arange_eye", lambda m, x: x @ m.eye(4) + m.arange(4), ((3, 4),)),
    Case("ones_zeros_like", lambda m, x: m.ones_like(x) + m.zeros_like(x) + m.full((4,), 2.0),
         ((3, 4),)),
]

_TOL = {np.float32: {"rtol": 2e-5, "atol": 2e-6}, np.float64: {"rtol": 1e-12, "atol": 1e-13}}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", TABLE, ids=[c.name for c in TABLE])
def test_agrees_with_numpy(case: Case, dtype: Any) -> None:
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    xs = _inputs(case, dtype, rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.asarray(case.fn(np, *xs))
    got = ad.jit(lambda *a: case.fn(anp, *a))(*xs)
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, f"{case.name}: dtype {got.dtype}, numpy gives {want.dtype}"
    if case.exact:
        np.testing.assert_array_equal(got, want)
    else:
        tol = _TOL[dtype]
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)


def test_table_is_large_enough() -> None:
    """The acceptance bar: >= 30 numpy functions, >= 40 table entries."""
    assert len(TABLE) >= 40
