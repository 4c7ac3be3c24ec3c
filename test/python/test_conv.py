"""Convolution and pooling (issue 20, item 5): `lax.conv_general_dilated`,
`lax.conv`, `lax.conv_with_general_padding`, `lax.reduce_window`,
`nn.max_pool`, `nn.avg_pool`.

Every transform of every option (strides, padding, dilations, groups,
layouts) is in the differential table (differential_cases.py, section
"conv"). Here: what the table cannot say — diagnostics at the user's line,
eager parity, jax's ConvDimensionNumbers, the transposed-convolution identity
of reverse mode, max pooling's tie rule over overlapping padded windows,
vmap over per-example kernels, and a small CNN's loss, gradient and
Hessian-vector product against jax. Oracles: jax (x64), the numpy reference
conv of the table, central finite differences; never our own output.
"""

from __future__ import annotations

import math

import differential_cases as dc
import numpy as np
import pytest
from ad_check import Fn, check_against_jax, check_first_order, check_second_order, compile_fns

import mlir_autodiff as ad
from mlir_autodiff import lax, nn
from mlir_autodiff import numpy as anp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

RNG = np.random.default_rng(205)
NHWC = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("call, message", [
    (lambda x, w: lax.conv_general_dilated(x, w[:, :, :1], (1, 1), "VALID",
                                           dimension_numbers=NHWC),
     "lhs has 2 input features but rhs expects 1 per group x 1 group"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                           dimension_numbers=("NHWC", "HWIO", "NHW")),
     "layout 'NHW' must name N, C and 2 spatial"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", lhs_dilation=(2, 1),
                                           dimension_numbers=NHWC),
     "string padding 'SAME' is not defined with lhs_dilation"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "FULL", dimension_numbers=NHWC),
     "padding must be 'SAME', 'SAME_LOWER', 'VALID'"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", rhs_dilation=(4, 1),
                                           dimension_numbers=NHWC),
     "the window (size 2, dilation 4) is larger than the padded input (4)"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=NHWC,
                                           feature_group_count=3),
     "feature_group_count=3 must divide"),
    (lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", dimension_numbers=NHWC),
     "window_strides must have 2 entries"),
    (lambda x, w: lax.reduce_window(x, 0.0, "add", (1, 2), (1, 1), "VALID"),
     "window_dimensions must have 4 entries"),
    (lambda x, w: nn.max_pool(x, (2, 2), padding=[(1, 1)]),
     "padding must have 2 (low, high) pairs"),
], ids=["features", "layout", "same_lhs_dilation", "padding_name", "window_too_big",
        "groups", "strides_rank", "window_rank", "pool_pairs"])
def test_diagnostics_name_function_and_line(call, message, jit) -> None:
    x = RNG.standard_normal((1, 4, 5, 2))
    w = RNG.standard_normal((2, 2, 2, 4))
    with pytest.raises(ValueError) as err:
        (ad.jit(call) if jit else call)(x, w)
    text = str(err.value)
    assert message in text
    assert "test_conv.py" in text  # the user's line, traced or eager


def test_eager_matches_jit_and_jax() -> None:
    """Outside a trace the same functions run on numpy arrays."""
    x = RNG.standard_normal((2, 5, 6, 4))
    w = RNG.standard_normal((3, 2, 2, 6))

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (2, 1), [(1, 1), (0, 1)], rhs_dilation=(1, 2),
                                     dimension_numbers=NHWC, feature_group_count=2)
        return nn.max_pool(y, (2, 2), padding="SAME"), nn.avg_pool(y, (2, 1), (1, 2))

    eager = f(x, w)
    assert all(isinstance(e, np.ndarray) for e in eager)
    jitted = ad.jit(f)(x, w)
    y = jax.lax.conv_general_dilated(x, w, (2, 1), [(1, 1), (0, 1)], rhs_dilation=(1, 2),
                                     dimension_numbers=NHWC, feature_group_count=2)
    ref = (jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 1, 1, 1),
                                 "SAME"),
           jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 2, 1, 1), (1, 1, 2, 1),
                                 "VALID") / 2)
    for e, j, r in zip(eager, jitted, ref):
        np.testing.assert_allclose(e, r, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(j, r, rtol=1e-12, atol=1e-12)


def test_jax_dimension_numbers_object_and_permutations() -> None:
    x = RNG.standard_normal((3, 2, 5, 4))          # layout "CNWH"
    w = RNG.standard_normal((2, 3, 3, 4))          # layout "WHIO"
    specs = ("CNWH", "WHIO", "HNCW")
    dn = jax.lax.conv_dimension_numbers(x.shape, w.shape, specs)
    expected = jax.lax.conv_general_dilated(x, w, (1, 2), "SAME", dimension_numbers=dn)
    f = ad.jit(lambda x, w: (
        lax.conv_general_dilated(x, w, (1, 2), "SAME", dimension_numbers=dn),
        lax.conv_general_dilated(x, w, (1, 2), "SAME",
                                 dimension_numbers=(dn.lhs_spec, dn.rhs_spec, dn.out_spec)),
        lax.conv_general_dilated(x, w, (1, 2), "SAME", dimension_numbers=specs)))
    for out in f(x, w):
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dc._np_conv(x, w, (1, 2), "SAME", dimension_numbers=specs),
                               expected, rtol=1e-12, atol=1e-12)


def test_reverse_mode_is_the_transposed_convolution() -> None:
    """grad w.r.t. lhs = conv of the cotangent, lhs-dilated by the strides, with
    the flipped kernel (in/out features swapped, per group); grad w.r.t. rhs =
    conv of lhs with the cotangent. Written with our own conv, checked against
    our grad and jax's."""
    n, h, c, k, s, g, o = 2, 9, 4, 3, 2, 2, 6
    x = RNG.standard_normal((n, h, c))            # NWC
    w = RNG.standard_normal((k, c // g, o))       # WIO
    out = (h - k) // s + 1
    ct = RNG.standard_normal((n, out, o))
    dn = ("NWC", "WIO", "NWC")

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (s,), "VALID", dimension_numbers=dn,
                                        feature_group_count=g)

    def transposed(ct, w):
        # kernel (k, I=c/g, O=o) -> flipped, per group (k, I'=o/g, O'=c)
        wf = anp.flip(w, 0).reshape(k, c // g, g, o // g)
        wf = anp.transpose(wf, (0, 3, 2, 1)).reshape(k, o // g, c)
        hi = k - 1 + h - ((out - 1) * s + k)
        gx = lax.conv_general_dilated(ct, wf, (1,), [(k - 1, hi)], lhs_dilation=(s,),
                                      dimension_numbers=dn, feature_group_count=g)
        # rhs: per group, correlate lhs features with the cotangent over N and W
        # (h - (out - 1) * s == k here)
        xs = anp.transpose(x.reshape(n, h, g, c // g), (3, 1, 2, 0)).reshape(c // g, h, g * n)
        # (lhs features group-major: index gi * n + example)
        cs = anp.transpose(ct, (1, 0, 2))                          # (out, n, o): W I O
        gw = lax.conv_general_dilated(xs, cs, (1,), "VALID", rhs_dilation=(s,),
                                      dimension_numbers=dn,
                                      feature_group_count=g)   # (c/g, k, o)
        return gx, anp.transpose(gw, (1, 0, 2))

    ours = ad.jit(lambda x, w, ct: (ad.vjp(conv, x, w)[1](ct), transposed(ct, w)))(x, w, ct)
    jg = jax.vjp(lambda x, w: jax.lax.conv_general_dilated(
        x, w, (s,), "VALID", dimension_numbers=dn, feature_group_count=g), x, w)[1](ct)
    for a, b, r in zip(ours[0], ours[1], jg):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("named", [False, True])
def test_max_pool_ties_route_to_first_maximum_like_jax(named, monkeypatch) -> None:
    """Integer-valued inputs tie everywhere; overlapping windows and -inf padding
    (SAME). jax's reverse mode (select_and_scatter_add) gives each window's
    cotangent to its first maximal element in row-major window order; ours
    does that in reverse and forward mode alike (jax's forward mode,
    select_and_gather_add, may pick another tied element, so the forward
    oracle is jax's reverse-mode Jacobian), and the two are transposes; as
    the select chain and as `linalg.pooling_nhwc_max` (`NAMED_MAX_POOL`)."""
    from mlir_autodiff import convolution

    monkeypatch.setattr(convolution, "NAMED_MAX_POOL", named)
    x = np.floor(RNG.uniform(0, 3, (2, 5, 6, 2)))
    t = RNG.standard_normal(x.shape)
    ct = RNG.standard_normal((2, 5, 3, 2))

    def pool(x):
        return nn.max_pool(x, (3, 2), (1, 2), padding="SAME")

    def jpool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 2, 1), (1, 1, 2, 1),
                                     "SAME")

    y, ty, gx = ad.jit(lambda x, t, ct: (*ad.jvp(pool, (x,), (t,)), ad.vjp(pool, x)[1](ct)[0]))(
        x, t, ct)
    jac = np.asarray(jax.jacrev(jpool)(x))
    np.testing.assert_array_equal(y, jpool(x))
    np.testing.assert_allclose(ty, np.tensordot(jac, t, axes=4), rtol=0, atol=1e-14)
    np.testing.assert_allclose(gx, jax.vjp(jpool, x)[1](ct)[0], rtol=0, atol=1e-14)
    assert math.isclose(float(np.sum(ct * ty)), float(np.sum(gx * t)), rel_tol=1e-12)
    assert np.count_nonzero(jac.sum(axis=(0, 1, 2, 3)) > 1) > 0   # overlapping windows


def _cnn(conv, pool, relu, logsm):
    def loss(params, x, labels):
        w1, b1, w2, b2, w3 = params
        h = relu(conv(x, w1, (1, 1), "SAME", dimension_numbers=NHWC) + b1)
        h = pool(h)
        h = relu(conv(h, w2, (2, 2), "VALID", dimension_numbers=NHWC,
                      feature_group_count=2) + b2)
        logits = h.reshape(h.shape[0], -1) @ w3
        return -(logsm(logits) * labels).sum() / x.shape[0]
    return loss


def test_small_cnn_loss_grad_hvp_and_per_example_grads_match_jax() -> None:
    x = RNG.standard_normal((3, 8, 8, 1))
    labels = np.eye(4)[RNG.integers(0, 4, 3)]
    params = [RNG.standard_normal((3, 3, 1, 4)) * 0.5, RNG.standard_normal(4) * 0.1,
              RNG.standard_normal((2, 2, 2, 6)) * 0.5, RNG.standard_normal(6) * 0.1,
              RNG.standard_normal((6 * 4, 4)) * 0.3]
    v = [RNG.standard_normal(p.shape) for p in params]
    ours = _cnn(lax.conv_general_dilated, lambda h: nn.max_pool(h, (2, 2), (2, 2)),
                nn.relu, lambda z: nn.log_softmax(z, axis=-1))
    theirs = _cnn(jax.lax.conv_general_dilated, lambda h: jax.lax.reduce_window(
        h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), jax.nn.relu,
        lambda z: jax.nn.log_softmax(z, axis=-1))

    def all_of(loss, grad, jvp, vmap):
        def run(params, x, labels, v):
            value, g = grad(loss)(params, x, labels)
            hvp = jvp(lambda p: grad(loss)(p, x, labels)[1], (params,), (v,))[1]
            per_ex = vmap(lambda xi, li: grad(loss)(params, xi[None], li[None])[1])(x, labels)
            return value, g, hvp, per_ex
        return run

    got = ad.jit(all_of(ours, ad.value_and_grad, ad.jvp, ad.vmap))(params, x, labels, v)
    want = jax.jit(all_of(theirs, jax.value_and_grad, jax.jvp, jax.vmap))(params, x, labels, v)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # and the gradient by central differences (one weight of each tensor)
    eps = 1e-6
    for i, p in enumerate(params):
        d = np.zeros_like(p)
        d.flat[1 % p.size] = eps
        plus = [q + d if j == i else q for j, q in enumerate(params)]
        minus = [q - d if j == i else q for j, q in enumerate(params)]
        fd = (ours(plus, x, labels) - ours(minus, x, labels)) / (2 * eps)
        assert math.isclose(float(got[1][i].flat[1 % p.size]), float(fd), rel_tol=1e-6,
                            abs_tol=1e-8)


def test_vmap_over_per_example_kernels() -> None:
    """Both operands batched (a kernel per example): vmap against jax's vmap."""
    x = RNG.standard_normal((3, 1, 4, 6, 2))
    w = RNG.standard_normal((3, 2, 3, 2, 4))

    def f(conv):
        return lambda x, w: conv(x, w, (2, 1), "SAME", rhs_dilation=(1, 2),
                                 dimension_numbers=NHWC)

    got = ad.jit(ad.vmap(f(lax.conv_general_dilated)))(x, w)
    want = jax.vmap(f(jax.lax.conv_general_dilated))(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_max_and_min_windows_propagate_nan_like_jax() -> None:
    """A NaN in a window is the window's max and min (jax's reduce_window max/min),
    traced and eager alike; windows without one are unaffected."""
    x = np.array([[np.nan, 1.0, 3.0, np.nan, 2.0, -1.0]])   # NaN first and second
    want_max = np.asarray(jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2), (1, 2),
                                                "VALID"))
    want_min = np.asarray(jax.lax.reduce_window(x, jnp.inf, jax.lax.min, (1, 2), (1, 2),
                                                "VALID"))

    def f(x):
        return (lax.reduce_window(x, -np.inf, "max", (1, 2), (1, 2), "VALID"),
                lax.reduce_window(x, np.inf, anp.minimum, (1, 2), (1, 2), "VALID"))

    for got in (f(x), ad.jit(f)(x)):
        np.testing.assert_array_equal(got[0], want_max)
        np.testing.assert_array_equal(got[1], want_min)
    assert np.isnan(want_max[0, :2]).all() and np.isnan(want_min[0, :2]).all()


def test_eager_dilations_and_negative_padding_match_jax() -> None:
    """The eager path pads by concatenating (no trace): lhs/base dilation and
    negative padding against jax."""
    x = RNG.standard_normal((1, 2, 4, 5))
    w = RNG.standard_normal((3, 2, 2, 2))
    kw = dict(window_strides=(1, 2), padding=[(1, -1), (-1, 2)], lhs_dilation=(2, 3),
              rhs_dilation=(1, 2))
    np.testing.assert_allclose(lax.conv_general_dilated(x, w, **kw),
                               jax.lax.conv_general_dilated(x, w, **kw), rtol=1e-12,
                               atol=1e-12)
    rw = dict(window_dimensions=(1, 1, 2, 3), window_strides=(1, 1, 2, 1),
              padding=[(0, 0), (0, 0), (2, -1), (1, 1)], base_dilation=(1, 1, 2, 2))
    np.testing.assert_allclose(lax.reduce_window(x, 0.0, anp.add, **rw),
                               jax.lax.reduce_window(x, 0.0, jax.lax.add, **rw), rtol=1e-12,
                               atol=1e-12)


def test_small_cnn_trains_on_the_digits_to_98_percent() -> None:
    # issue 20's acceptance line: conv-pool-conv-pool-dense on the bundled digits
    # (examples/cnn_digits.py, `./dev demo cnn`), test accuracy >= 98%
    pytest.importorskip("sklearn", reason="the digits data set ships with scikit-learn")
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "cnn_digits.py"
    spec = importlib.util.spec_from_file_location("cnn_digits", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.train(epochs=30, verbose=False) >= 0.98


# -- the named convolution: linalg.conv_2d_nhwc_hwcf and its rules ---------------------------

_CONV_MLIR = """func.func @conv(%x: tensor<2x7x7x3xf64>, %w: tensor<2x3x3x4xf64>,
                 %acc: tensor<2x3x3x4xf64>) -> tensor<2x3x3x4xf64> {
  %y = linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 2]> : tensor<2xi64>,
                                 strides = dense<[2, 1]> : tensor<2xi64>}
       ins(%x, %w : tensor<2x7x7x3xf64>, tensor<2x3x3x4xf64>)
       outs(%acc : tensor<2x3x3x4xf64>) -> tensor<2x3x3x4xf64>
  %r = math.tanh %y : tensor<2x3x3x4xf64>
  return %r : tensor<2x3x3x4xf64>
}"""


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_named_conv_rules_match_finite_differences_and_jax() -> None:
    """The rules of `linalg.conv_2d_nhwc_hwcf` (strides, dilations, an input row
    no window reaches, an accumulating init) at the MLIR level: jvp and vjp
    against central differences, the transpose identity and jax; second
    order (jvp of vjp, vjp of jvp, vjp of vjp) against differences."""
    def want(x, w, acc):
        return jnp.tanh(acc + jax.lax.conv_general_dilated(
            x, w, (2, 1), "VALID", rhs_dilation=(1, 2), dimension_numbers=NHWC))

    t3 = "tensor<2x3x3x4xf64>"
    f = Fn("conv", _CONV_MLIR, ["tensor<2x7x7x3xf64>", "tensor<2x3x3x4xf64>", t3],
           [t3], jax_fn=want)
    cm = compile_fns([f])
    rng = np.random.default_rng(206)
    check_first_order(cm, f, rng)
    check_second_order(cm, f, rng)
    check_against_jax(cm, f, rng)


def _ops(text: str) -> set[str]:
    import re
    return set(re.findall(r"\b(?:linalg|scf)\.[a-z_0-9]+", text))


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_conv_is_the_named_op_in_every_transform() -> None:
    """2-D and 1-D convolutions trace to `linalg.conv_2d_nhwc_hwcf` (no im2col
    matmul), and stay it through reverse mode and every batching of the
    operands: images batched (folded into N), kernels batched (folded into
    the features), both (one convolution per lane); a few feature groups are
    one convolution per group. Values against jax."""
    x = RNG.standard_normal((3, 2, 6, 7, 3))
    w = RNG.standard_normal((3, 3, 2, 3, 4)) * 0.5
    x1 = RNG.standard_normal((2, 2, 9))
    w3 = RNG.standard_normal((3, 2, 1, 6))      # 3 feature groups of x's 3 features

    def program(lax_, grad, vmap):
        def conv(x, w):
            return lax_.conv_general_dilated(x, w, (2, 1), "SAME", rhs_dilation=(1, 2),
                                             dimension_numbers=NHWC)

        def loss(x, w):
            return (conv(x, w) ** 2).sum()

        def grouped(x, w3):
            return (lax_.conv_general_dilated(x, w3, (1, 2), "VALID", dimension_numbers=NHWC,
                                              feature_group_count=3) ** 2).sum()

        def run(x, w, x1, w3):
            return (vmap(conv, in_axes=(0, None))(x, w[0]),
                    vmap(conv, in_axes=(None, 0))(x[0], w),
                    vmap(grad(loss, argnums=(0, 1)))(x, w),          # both batched
                    grad(lambda x, w: vmap(loss)(x, w).sum(), argnums=(0, 1))(x, w),
                    lax_.conv(x1, w[0, 0, :, :2].transpose(2, 1, 0), (2,), "SAME"),
                    grad(grouped, argnums=(0, 1))(x[0], w3))
        return run

    got = ad.jit(program(lax, ad.grad, ad.vmap))(x, w, x1, w3)
    want = jax.jit(program(jax.lax, jax.grad, jax.vmap))(x, w, x1, w3)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    ops = _ops(ad.jit(program(lax, ad.grad, ad.vmap)).lower(x, w, x1, w3).as_text("autodiff"))
    assert "linalg.conv_2d_nhwc_hwcf" in ops and "scf.for" in ops
    assert not ops & {"linalg.matmul", "linalg.batch_matmul"}, ops


@pytest.mark.parametrize("kernel, features", [((3, 3), 16), ((8, 8), 128)])
def test_cpu_schedule_vectorizes_named_convolutions(kernel, features) -> None:
    """The schedule (tile, decompose to 1-D, vectorize) applies in strict mode
    to the forward layer shape and to the wide-kernel convolution that a
    filter cotangent is: no `linalg.conv_*` is left, the work is on vectors."""
    from cpu_cases import scheduled_ir

    kh, kw = kernel
    xt = f"tensor<4x{kh + 5}x{kw + 5}x{features}xf32>"
    wt = f"tensor<{kh}x{kw}x{features}x32xf32>"
    yt = "tensor<4x6x6x32xf32>"
    text = f"""func.func @f(%x: {xt}, %w: {wt}) -> {yt} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {yt}
  %i = linalg.fill ins(%z : f32) outs(%e : {yt}) -> {yt}
  %y = linalg.conv_2d_nhwc_hwcf ins(%x, %w : {xt}, {wt}) outs(%i : {yt}) -> {yt}
  return %y : {yt}
}}"""
    ir_text = scheduled_ir(text)
    assert "linalg.conv" not in ir_text and "vector.contract" in ir_text


# -- the named sum pooling: linalg.pooling_nhwc_sum and its rules -----------------------------

_POOL_MLIR = """func.func @pool(%x: tensor<2x7x6x3xf64>, %acc: tensor<2x3x2x3xf64>)
    -> tensor<2x3x2x3xf64> {
  %k = tensor.empty() : tensor<2x3xf64>
  %y = linalg.pooling_nhwc_sum {dilations = dense<[2, 1]> : tensor<2xi64>,
                                strides = dense<[2, 2]> : tensor<2xi64>}
       ins(%x, %k : tensor<2x7x6x3xf64>, tensor<2x3xf64>)
       outs(%acc : tensor<2x3x2x3xf64>) -> tensor<2x3x2x3xf64>
  %r = math.tanh %y : tensor<2x3x2x3xf64>
  return %r : tensor<2x3x2x3xf64>
}"""


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_named_sum_pool_rules_match_finite_differences_and_jax() -> None:
    """The rules of `linalg.pooling_nhwc_sum` (strides, dilations, an input
    column no window reaches, an accumulating init) at the MLIR level: jvp
    and vjp against central differences, the transpose identity and jax;
    second order against differences."""
    def want(x, acc):
        return jnp.tanh(acc + jax.lax.reduce_window(
            x, 0.0, jax.lax.add, (1, 2, 3, 1), (1, 2, 2, 1), "VALID",
            window_dilation=(1, 2, 1, 1)))

    t = "tensor<2x3x2x3xf64>"
    f = Fn("pool", _POOL_MLIR, ["tensor<2x7x6x3xf64>", t], [t], jax_fn=want)
    cm = compile_fns([f])
    rng = np.random.default_rng(207)
    check_first_order(cm, f, rng)
    check_second_order(cm, f, rng)
    check_against_jax(cm, f, rng)


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_sum_and_avg_pooling_are_the_named_op_in_every_transform() -> None:
    """Sum windows over one or two axes trace to `linalg.pooling_nhwc_sum`
    (NHWC as is, NCHW through a transpose, 1-D at height 1), and reverse
    mode, the Hessian-vector product and vmap stay on it. avg_pool with
    padding not counted, base and window dilations; values against jax."""
    x = RNG.standard_normal((2, 5, 6, 3))
    xs = RNG.standard_normal((2, 3, 7))
    SCALES = np.array([1.0, -0.5]).reshape(2, 1, 1, 1, 1)  # noqa: N806

    def program(lax_, grad, jvp, vmap, avg):
        def pools(x, xs):
            a = avg(x, (2, 3), (2, 1), "SAME")
            b = lax_.reduce_window(x.transpose(0, 3, 1, 2), 0.0, lax_.add, (1, 1, 3, 2),
                                   (1, 1, 1, 2), [(1, 0), (0, 0), (0, 1), (1, 1)],
                                   base_dilation=(1, 1, 2, 1), window_dilation=(1, 1, 1, 2))
            c = lax_.reduce_window(xs, 0.0, lax_.add, (1, 1, 3), (1, 1, 2), "VALID")
            return a, b, c

        def loss(x, xs):
            a, b, c = pools(x, xs)
            return (jnp_or(lax_).sin(a) ** 2).sum() + (b ** 3).sum() + (c * c.sum()).sum()

        def run(x, xs):
            g = grad(loss, argnums=(0, 1))
            hvp = jvp(lambda x: g(x, xs)[0], (x,), (jnp_or(lax_).cos(x),))[1]
            return pools(x, xs), g(x, xs), hvp, vmap(lambda x: g(x, xs)[0])(x[None] * SCALES)
        return run

    def jnp_or(lax_):
        return jnp if lax_ is jax.lax else anp

    def jax_avg(x, window, strides, padding):
        w, s = (1, *window, 1), (1, *strides, 1)
        ones = jnp.ones_like(x)
        return (jax.lax.reduce_window(x, 0.0, jax.lax.add, w, s, padding)
                / jax.lax.reduce_window(ones, 0.0, jax.lax.add, w, s, padding))

    def our_avg(x, window, strides, padding):
        return nn.avg_pool(x, window, strides, padding, count_include_pad=False)

    fn = program(lax, ad.grad, ad.jvp, ad.vmap, our_avg)
    got = ad.jit(fn)(x, xs)
    want = jax.jit(program(jax.lax, jax.grad, jax.jvp, jax.vmap, jax_avg))(x, xs)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    text = ad.jit(fn).lower(x, xs).as_text("autodiff")
    assert text.count("linalg.pooling_nhwc_sum") >= 6, _ops(text)


_MAXPOOL_MLIR = """func.func @maxpool(%x: tensor<2x7x6x3xf64>, %acc: tensor<2x3x2x3xf64>)
    -> tensor<2x3x2x3xf64> {
  %k = tensor.empty() : tensor<2x3xf64>
  %y = linalg.pooling_nhwc_max {dilations = dense<[2, 1]> : tensor<2xi64>,
                                strides = dense<[2, 2]> : tensor<2xi64>}
       ins(%x, %k : tensor<2x7x6x3xf64>, tensor<2x3xf64>)
       outs(%acc : tensor<2x3x2x3xf64>) -> tensor<2x3x2x3xf64>
  %r = math.tanh %y : tensor<2x3x2x3xf64>
  return %r : tensor<2x3x2x3xf64>
}"""


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_named_max_pool_rules_match_finite_differences_and_jax() -> None:
    """The rules of `linalg.pooling_nhwc_max` (strides, dilations, an init that
    wins some windows) at the MLIR level, on inputs without ties: jvp and
    vjp against central differences, the transpose identity and jax; second
    order against differences."""
    def want(x, acc):   # jax has no reverse mode of dilated max windows: the slices
        windows = [x[:, 2 * p:2 * p + 5:2, q:q + 3:2] for p in range(2) for q in range(3)]
        return jnp.tanh(jnp.maximum(acc, jnp.max(jnp.stack(windows), axis=0)))

    t = "tensor<2x3x2x3xf64>"
    f = Fn("maxpool", _MAXPOOL_MLIR, ["tensor<2x7x6x3xf64>", t], [t], jax_fn=want)
    cm = compile_fns([f])
    rng = np.random.default_rng(208)
    check_first_order(cm, f, rng)
    check_second_order(cm, f, rng)
    check_against_jax(cm, f, rng)


@pytest.mark.parametrize("named", [False, True])
def test_max_window_derivative_goes_to_the_first_nan_or_first_tied_maximum(
        named, monkeypatch) -> None:
    """Max windows, as the select chain and (`NAMED_MAX_POOL`) as
    `linalg.pooling_nhwc_max` through jvp, vjp and vmap, have one rule: a
    window's derivative goes to its first NaN if it has one (the NaN is its
    value), else to its first maximum (the tie [2, 2]). Hand-derived oracle
    (jax's select-and-scatter moves past a NaN, so it is no oracle here)."""
    from mlir_autodiff import convolution

    monkeypatch.setattr(convolution, "NAMED_MAX_POOL", named)
    x = np.array([[np.nan, 1.0, 3.0, np.nan, 2.0, 2.0, np.nan, np.nan]])
    t = np.arange(1.0, 9.0)[None]

    def pool(x):
        return lax.reduce_window(x, -np.inf, "max", (1, 2), (1, 2), "VALID")

    def run(x, t):
        y, ty = ad.jvp(pool, (x,), (t,))
        gx = ad.grad(lambda x: (pool(x) * np.array([1.0, 10.0, 100.0, 1000.0])).sum())(x)
        return y, ty, gx, ad.vmap(ad.grad(lambda x: pool(x).sum()))(x[None] * 1.0)
    y, ty, gx, gv = ad.jit(run)(x, t)
    np.testing.assert_array_equal(y, [[np.nan, np.nan, 2.0, np.nan]])
    np.testing.assert_array_equal(ty, [[1.0, 4.0, 5.0, 7.0]])
    np.testing.assert_array_equal(gx, [[1.0, 0, 0, 10.0, 100.0, 0, 1000.0, 0]])
    np.testing.assert_array_equal(gv, [[[1.0, 0, 0, 1.0, 1.0, 0, 1.0, 0]]])
    text = ad.jit(run).lower(x, t).as_text("autodiff")
    assert ("linalg.pooling_nhwc_max" in text) == named, _ops(text)


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_tiling_max_pool_is_the_named_op_with_every_order_like_jax() -> None:
    """2x2 windows at stride 2 (the usual pool) over a 7x9 input (a row and a
    column past the last window) are `linalg.pooling_nhwc_max` by default and
    its tiling vjp (window maximum, then the cotangent written at it): the
    gradient, both Hessian-vector products and the per-example gradients
    equal jax's."""
    x = RNG.standard_normal((3, 7, 9, 2))
    v = RNG.standard_normal(x.shape)

    def f(x):
        return (nn.max_pool(x, (2, 2), (2, 2), padding="VALID") ** 3).sum()

    def jf(x):
        return (jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                      "VALID") ** 3).sum()

    def run(x, v):
        return (ad.grad(f)(x), ad.jvp(ad.grad(f), (x,), (v,))[1],
                ad.grad(lambda x: (ad.grad(f)(x) * v).sum())(x), ad.vmap(ad.grad(f))(x[:, None]))

    g, hv, vh, per = ad.jit(run)(x, v)
    assert "linalg.pooling_nhwc_max" in ad.jit(run).lower(x, v).as_text("autodiff")
    jhv = jax.jvp(jax.grad(jf), (x,), (v,))[1]
    np.testing.assert_allclose(g, jax.grad(jf)(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(hv, jhv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vh, jhv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(per, jax.vmap(jax.grad(jf))(x[:, None]), rtol=1e-13, atol=1e-13)
    assert np.count_nonzero(g) == 3 * 3 * 4 * 2       # one element per window


@pytest.mark.usefixtures("llvm_o0")  # values and MLIR ops: LLVM -O0 (conftest)
def test_depthwise_conv_is_the_named_op_in_every_transform() -> None:
    """`feature_group_count` = input features = output features (depthwise;
    2-D with strides and kernel dilation, 1-D SAME) is one
    `linalg.depthwise_conv_2d_nhwc_hwc` (no im2col matmul) through the
    gradient, a Hessian-vector product and vmap over the images, the
    filters and both: values against jax."""
    x = RNG.standard_normal((2, 9, 8, 4))
    w = RNG.standard_normal((3, 2, 1, 4))
    x1 = RNG.standard_normal((2, 11, 5))
    w1 = RNG.standard_normal((3, 1, 5))
    vx, vw = RNG.standard_normal(x.shape), RNG.standard_normal(w.shape)

    def program(lax_, grad, vmap, jvp):
        def f(x, w):
            return (lax_.conv_general_dilated(x, w, (2, 2), "VALID", rhs_dilation=(1, 2),
                                              dimension_numbers=NHWC,
                                              feature_group_count=4) ** 2).sum()

        def f1(x, w):
            return (lax_.conv_general_dilated(x, w, (2,), "SAME", rhs_dilation=(2,),
                                              dimension_numbers=("NWC", "WIO", "NWC"),
                                              feature_group_count=5) ** 3).sum()

        g = grad(f, argnums=(0, 1))

        def run(x, w, vx, vw, x1, w1):
            ws = w[None] * np.array([1.0, 2.0])[:, None, None, None, None]
            return (g(x, w), jvp(g, (x, w), (vx, vw))[1], grad(f1, argnums=(0, 1))(x1, w1),
                    vmap(g, in_axes=(0, None))(x[:, None], w),
                    vmap(g, in_axes=(None, 0))(x, ws),
                    vmap(g)(x[None] * np.ones((2, 1, 1, 1, 1)), ws))
        return run

    args = (x, w, vx, vw, x1, w1)
    got = ad.jit(program(lax, ad.grad, ad.vmap, ad.jvp))(*args)
    want = jax.jit(program(jax.lax, jax.grad, jax.vmap, jax.jvp))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    ops = _ops(ad.jit(program(lax, ad.grad, ad.vmap, ad.jvp)).lower(*args).as_text("autodiff"))
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in ops
    assert not ops & {"linalg.matmul", "linalg.batch_matmul"}, ops


@pytest.mark.parametrize("kernel, out", [((3, 3), 8), ((10, 10), 3)])
def test_cpu_schedule_vectorizes_depthwise_convolutions(kernel, out) -> None:
    """The depthwise schedule (tile, decompose to 1-D, vectorize) applies in
    strict mode to a layer's shape and to the wide-window one a filter
    cotangent is; left alone, the window loops are innermost and the channels
    a stride apart."""
    from cpu_cases import scheduled_ir

    kh, kw = kernel
    xt = f"tensor<4x{out + kh - 1}x{out + kw - 1}x64xf32>"
    wt = f"tensor<{kh}x{kw}x64xf32>"
    yt = f"tensor<4x{out}x{out}x64xf32>"
    text = f"""func.func @f(%x: {xt}, %w: {wt}) -> {yt} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {yt}
  %i = linalg.fill ins(%z : f32) outs(%e : {yt}) -> {yt}
  %y = linalg.depthwise_conv_2d_nhwc_hwc ins(%x, %w : {xt}, {wt}) outs(%i : {yt}) -> {yt}
  return %y : {yt}
}}"""
    ir_text = scheduled_ir(text)
    assert "linalg.depthwise" not in ir_text and "vector.fma" in ir_text
