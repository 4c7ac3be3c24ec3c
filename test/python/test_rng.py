"""Philox4x32-10 random numbers: --autodiff-lower-rng and --autodiff-functionalize-rng.

The oracle is an independent pure-numpy Philox4x32-10 written here from the
algorithm's definition (Salmon et al., SC'11 / Random123), checked against
Random123's known-answer vectors, plus the stream layout documented in
transforms/lower_rng.py. Compiled draws must match it bit for bit (bits,
uniform) or to rounding (normal, whose reference uses numpy's f64 log/sin/cos).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mlir import ir
from mlir.dialects import func
from scipy import stats

from mlir_autodiff import dialects
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms import lower_rng
from mlir_autodiff.transforms.pipeline import run_pipeline

LOWER = "autodiff-lower-rng,autodiff-lower-to-cpu"
FUNCTIONALIZE = "autodiff-functionalize-rng,autodiff-lower-rng"
# Elementwise arith on tensors (`arith.addf %x, %r`) becomes linalg before the CPU lowering.
TO_CPU = "func.func(convert-elementwise-to-linalg),autodiff-lower-to-cpu"

# ----------------------------------------------------------------------------
# Reference Philox4x32-10 (numpy, uint64 arithmetic on 32-bit words)
# ----------------------------------------------------------------------------

MASK32 = np.uint64(0xFFFFFFFF)

#: Random123 kat_vectors for philox4x32_10: (counter, key, expected output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def ref_philox(ctr: list[np.ndarray], key: tuple[int, int]) -> list[np.ndarray]:
    """Philox4x32-10 on arrays of counters: four uint64 arrays of 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in ctr)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for _ in range(10):
        # The products of two 32-bit numbers fit in uint64.
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
    return [c0, c1, c2, c3]


def ref_words(seed: int, offset: int, nwords: int, stream: int = 0) -> np.ndarray:
    """Words [0, nwords) of the stream: word w is lane w % 4 of block offset + w // 4."""
    nblocks = max(1, -(-nwords // 4))
    seed &= (1 << 64) - 1
    start = np.array([offset & ((1 << 64) - 1)], np.uint64)
    with np.errstate(over="ignore"):
        ctr = start + np.arange(nblocks, dtype=np.uint64)  # wraps mod 2^64
    stream &= (1 << 64) - 1
    words = ref_philox(
        [
            ctr & MASK32,
            ctr >> np.uint64(32),
            np.full(nblocks, stream & 0xFFFFFFFF, np.uint64),
            np.full(nblocks, stream >> 32, np.uint64),
        ],
        (seed & 0xFFFFFFFF, seed >> 32),
    )
    return np.stack(words, axis=1).reshape(-1)[:nwords].astype(np.uint32)


def _pairs64(words: np.ndarray) -> np.ndarray:
    w = words.astype(np.uint64)
    return w[0::2] | (w[1::2] << np.uint64(32))


def _prev(t: type, x: float) -> np.floating:
    return np.nextafter(t(x), t(-np.inf))


def ref_blocks(shape: tuple[int, ...], dtype: type, distribution: str) -> int:
    n = math.prod(shape)
    wpe = 2 if np.dtype(dtype).itemsize == 8 else 1
    words = 2 * -(-n // 2) * wpe if distribution == "normal" else n * wpe
    return -(-words // 4)


def ref_draw(seed, offset, shape, dtype, distribution, *, stream=0, low=None, high=None,
             mean=None, std=None) -> np.ndarray:
    """The documented stream layout, computed with numpy."""
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    wide = dtype.itemsize == 8
    if distribution == "bits":
        if wide:
            return _pairs64(ref_words(seed, offset, 2 * n, stream)).view(np.int64).reshape(shape)
        w = ref_words(seed, offset, n, stream)
        return w.astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[dtype.itemsize]).view(
            dtype).reshape(shape)
    if distribution == "uniform":
        t = dtype.type
        if wide:
            u = (_pairs64(ref_words(seed, offset, 2 * n, stream)) >> np.uint64(11)) * 2.0**-53
        else:
            p = {2: 11, 4: 24}[dtype.itemsize]
            m = ref_words(seed, offset, n, stream) >> np.uint32(32 - p)
            u = m.astype(t) * t(2.0**-p)
        u = u.astype(t)
        if low is not None or high is not None:
            lo, hi = low or 0.0, 1.0 if high is None else high
            u = t(lo) + t(hi - lo) * u
            u = np.minimum(u, _prev(t, t(hi)))
        return u.reshape(shape)
    # normal: pair j uses uniforms 2j, 2j + 1 (each one word, or two for f64)
    pairs = -(-n // 2)
    if wide:
        v = _pairs64(ref_words(seed, offset, 4 * pairs, stream)) >> np.uint64(11)
        u = v.astype(np.float64) * 2.0**-53
    else:
        v = ref_words(seed, offset, 2 * pairs, stream) >> np.uint32(8)
        u = v.astype(np.float64) * 2.0**-24
    u1, u2 = u[0::2], u[1::2]
    r = np.sqrt(-2.0 * np.log(1.0 - u1))
    z = np.empty(2 * pairs)
    z[0::2] = r * np.cos(2 * np.pi * u2)
    z[1::2] = r * np.sin(2 * np.pi * u2)
    z = z[:n]
    if std is not None:
        z = z * std
    if mean is not None:
        z = z + mean
    return z.reshape(shape)


def test_reference_matches_known_answers():
    for ctr, key, expected in KAT:
        out = ref_philox([np.array([c], np.uint64) for c in ctr], key)
        assert tuple(int(w[0]) for w in out) == expected


def test_reference_stream_layout_on_kat():
    # Block 0 of seed 0 at offset 0 is the first KAT vector.
    assert tuple(ref_words(0, 0, 4)) == KAT[0][2]
    # The third vector as (seed, offset, stream).
    (c0, c1, c2, c3), (k0, k1), expected = KAT[2]
    got = ref_words(k0 | k1 << 32, c0 | c1 << 32, 4, stream=c2 | c3 << 32)
    assert tuple(got) == expected


# ----------------------------------------------------------------------------
# The Philox block emitted by lower_rng: known-answer vectors
# ----------------------------------------------------------------------------


def _signed32(v: int) -> np.int32:
    return np.array(v, np.uint32).view(np.int32)[()]


@pytest.fixture(scope="module")
def kat_module() -> CompiledModule:
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.create()
        i32 = ir.IntegerType.get_signless(32)
        with ir.InsertionPoint(module.body):

            @func.FuncOp.from_py_func(*[i32] * 6)
            def philox_block(c0, c1, c2, c3, k0, k1):
                return tuple(lower_rng.philox4x32_10([c0, c1, c2, c3], [k0, k1]))

        text = str(module)
    return CompiledModule(text)


@pytest.mark.parametrize("ctr, key, expected", KAT)
def test_philox_block_known_answers(kat_module, ctr, key, expected):
    out = kat_module["philox_block"](*(_signed32(v) for v in (*ctr, *key)))
    got = tuple(int(np.array(w, np.int32).view(np.uint32)) for w in out)
    assert got == expected, [hex(g) for g in got]


# ----------------------------------------------------------------------------
# Draws lowered by --autodiff-lower-rng against the reference
# ----------------------------------------------------------------------------

#: name -> (shape, mlir element type, numpy dtype, distribution, attrs text, params)
DRAWS = {
    "bits_i32": ((3, 5), "i32", np.int32, "bits", "", {}),
    "bits_i64": ((7,), "i64", np.int64, "bits", "", {}),
    "bits_i8": ((2, 3), "i8", np.int8, "bits", "", {}),
    "uniform_f32": ((2, 3, 5), "f32", np.float32, "uniform", "", {}),
    "uniform_f64": ((9,), "f64", np.float64, "uniform", "", {}),
    "uniform_f16": ((11,), "f16", np.float16, "uniform", "", {}),
    "scaled_f32": ((13,), "f32", np.float32, "uniform", ", low = -2.5, high = 4.0",
                   {"low": -2.5, "high": 4.0}),
    "scaled_f64": ((6,), "f64", np.float64, "uniform", ", low = 1.0, high = 1.5",
                   {"low": 1.0, "high": 1.5}),
    "normal_f32": ((7,), "f32", np.float32, "normal", "", {}),
    "normal_f64": ((4, 3), "f64", np.float64, "normal", "", {}),
    "normal_f16": ((5,), "f16", np.float16, "normal", "", {}),
    "shifted_f64": ((5,), "f64", np.float64, "normal", ", mean = -3.0, std = 0.25",
                    {"mean": -3.0, "std": 0.25}),
    "scalar_f32": ((), "f32", np.float32, "uniform", "", {}),
    "streamed_i32": ((6,), "i32", np.int32, "bits", ", stream = -77 : i64", {"stream": -77}),
}


def _tensor(shape: tuple[int, ...], elt: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elt + ">"


def _philox_func(name: str, shape, elt: str, dist: str, attrs: str) -> str:
    t = _tensor(shape, elt)
    return f"""
func.func @{name}(%seed: i64, %offset: i64) -> {t} {{
  %r = "autodiff.philox"(%seed, %offset) {{distribution = "{dist}"{attrs}}} : (i64, i64) -> {t}
  return %r : {t}
}}"""


@pytest.fixture(scope="module")
def draws_module() -> CompiledModule:
    text = "\n".join(
        _philox_func(name, shape, elt, dist, attrs)
        for name, (shape, elt, _, dist, attrs, _) in DRAWS.items()
    )
    return CompiledModule(text, pipeline=LOWER)


SEEDS = [(0, 0), (1, 0), (0, 1), (-1, -1), (2**63 - 1, 2**62), (-(2**63), -5),
         (123456789, 987654321)]
SEEDS += [(int(s), int(o)) for s, o in np.random.default_rng(0).integers(
    -(2**63), 2**63 - 1, size=(8, 2), dtype=np.int64)]


@pytest.mark.parametrize("name", list(DRAWS))
def test_draw_matches_reference(draws_module, name):
    shape, _, dtype, dist, _, params = DRAWS[name]
    for seed, offset in SEEDS:
        got = draws_module[name](np.int64(seed), np.int64(offset))
        want = ref_draw(seed, offset, shape, dtype, dist, **params)
        assert got.dtype == np.dtype(dtype) and got.shape == shape
        if dist == "normal":
            tol = {np.float64: 1e-12, np.float32: 5e-6, np.float16: 4e-3}[dtype]
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol,
                                       err_msg=f"seed={seed} offset={offset}")
        else:
            # Bit for bit.
            np.testing.assert_array_equal(got.view(f"u{got.itemsize}"),
                                          want.view(f"u{want.itemsize}"),
                                          err_msg=f"seed={seed} offset={offset}")


def test_blocks_consumed_matches_reference():
    with ir.Context(), ir.Location.unknown():
        for shape, elt, dtype, dist, _, _ in DRAWS.values():
            t = ir.RankedTensorType.get(list(shape), ir.Type.parse(elt))
            assert lower_rng.blocks_consumed(t, dist) == ref_blocks(shape, dtype, dist)
        t = ir.RankedTensorType.get([0, 4], ir.F32Type.get())
        assert lower_rng.blocks_consumed(t, "normal") == 0


def test_draws_use_exactly_their_blocks(draws_module):
    """A draw at offset o equals the tail of a draw at o - k covering it: the
    element -> block map is a plain concatenation of blocks."""
    a = draws_module["bits_i32"](np.int64(9), np.int64(100)).view(np.uint32).ravel()
    b = draws_module["bits_i32"](np.int64(9), np.int64(101)).view(np.uint32).ravel()
    np.testing.assert_array_equal(a[4:], b[: len(a) - 4])


# ----------------------------------------------------------------------------
# Statistics at n = 10^6
# ----------------------------------------------------------------------------

N = 1_000_000


@pytest.fixture(scope="module")
def big_module() -> CompiledModule:
    parts = [
        _philox_func("u32", (N,), "f32", "uniform", ""),
        _philox_func("u64", (N,), "f64", "uniform", ""),
        _philox_func("n32", (N,), "f32", "normal", ""),
        _philox_func("n64", (N,), "f64", "normal", ""),
        _philox_func("scaled", (N,), "f32", "uniform", ", low = -3.0, high = 5.0"),
        _philox_func("shifted", (N,), "f64", "normal", ", mean = 10.0, std = 3.0"),
        _philox_func("bits", (N,), "i32", "bits", ""),
    ]
    return CompiledModule("\n".join(parts), pipeline=LOWER)


@pytest.mark.parametrize("name", ["u32", "u64"])
def test_uniform_statistics(big_module, name):
    u = big_module[name](np.int64(2024), np.int64(7)).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 2e-3  # sd of the mean: 0.29 / 1000
    assert abs(u.var() - 1 / 12) < 1e-3
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # Neighbouring elements (same block and across blocks) are uncorrelated.
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5e-3
    assert abs(np.corrcoef(u[:-4], u[4:])[0, 1]) < 5e-3


@pytest.mark.parametrize("name", ["n32", "n64"])
def test_normal_statistics(big_module, name):
    z = big_module[name](np.int64(99), np.int64(0)).astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 5e-3
    assert abs(z.std() - 1.0) < 5e-3
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # The two outputs of one Box-Muller pair, and neighbouring pairs.
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 5e-3
    assert abs(np.corrcoef(z[:-2], z[2:])[0, 1]) < 5e-3
    assert abs(stats.skew(z)) < 0.01 and abs(stats.kurtosis(z)) < 0.02


def test_scaled_statistics(big_module):
    u = big_module["scaled"](np.int64(5), np.int64(0)).astype(np.float64)
    assert u.min() >= -3.0 and u.max() < 5.0
    assert abs(u.mean() - 1.0) < 0.02
    assert stats.kstest(u, "uniform", args=(-3.0, 8.0)).pvalue > 1e-3
    z = big_module["shifted"](np.int64(5), np.int64(0))
    assert abs(z.mean() - 10.0) < 0.015 and abs(z.std() - 3.0) < 0.015
    assert stats.kstest(z, "norm", args=(10.0, 3.0)).pvalue > 1e-3


def test_bits_statistics(big_module):
    w = big_module["bits"](np.int64(31337), np.int64(0)).view(np.uint32)
    freq = np.array([((w >> np.uint32(k)) & np.uint32(1)).mean() for k in range(32)])
    assert np.all(np.abs(freq - 0.5) < 3e-3), freq  # sd 0.0005 per bit


def test_streams_are_independent(big_module):
    """Different seeds, and adjacent offsets, give uncorrelated streams."""
    a = big_module["u64"](np.int64(1), np.int64(0))
    b = big_module["u64"](np.int64(2), np.int64(0))
    c = big_module["u64"](np.int64(1), np.int64(N // 2))  # disjoint blocks of seed 1
    assert abs(np.corrcoef(a, b)[0, 1]) < 5e-3
    assert abs(np.corrcoef(a, c)[0, 1]) < 5e-3


def test_same_seed_same_numbers_across_compilations(big_module):
    again = CompiledModule(_philox_func("n32", (N,), "f32", "normal", ""), pipeline=LOWER)
    a = big_module["n32"](np.int64(8), np.int64(3))
    b = again["n32"](np.int64(8), np.int64(3))
    c = big_module["n32"](np.int64(8), np.int64(3))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    np.testing.assert_array_equal(a.view(np.uint32), c.view(np.uint32))


# ----------------------------------------------------------------------------
# --autodiff-functionalize-rng, end to end
# ----------------------------------------------------------------------------

STATEFUL = """
func.func private @noise(%x: tensor<6xf32>) -> tensor<6xf32> {
  %r = "autodiff.random"() {distribution = "normal"} : () -> tensor<6xf32>
  %y = arith.addf %x, %r : tensor<6xf32>
  return %y : tensor<6xf32>
}

// Two draws of 8 x f32 (2 blocks each), then a call to @noise (6 normals: 2 blocks).
func.func @two_draws(%x: tensor<6xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<6xf32>) {
  %a = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %b = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %n = func.call @noise(%x) : (tensor<6xf32>) -> tensor<6xf32>
  return %a, %b, %n : tensor<8xf32>, tensor<8xf32>, tensor<6xf32>
}

// Five iterations of a 3 x f64 draw (6 words: 2 blocks each), stacked.
func.func @loop() -> tensor<5x3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %init = tensor.empty() : tensor<5x3xf64>
  %out = scf.for %i = %c0 to %c5 step %c1 iter_args(%acc = %init) -> tensor<5x3xf64> {
    %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<3xf64>
    %s = tensor.insert_slice %r into %acc[%i, 0] [1, 3] [1, 1] : tensor<3xf64> into tensor<5x3xf64>
    scf.yield %s : tensor<5x3xf64>
  }
  return %out : tensor<5x3xf64>
}

// A dynamic trip count: n iterations of 4 x i32 bits (1 block each), summed;
// then one more draw after the loop.
func.func @dynamic(%n: index) -> (tensor<4xi32>, tensor<4xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant dense<0> : tensor<4xi32>
  %out = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> tensor<4xi32> {
    %r = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
    // acc ^= r, in place (outs = the loop-carried tensor).
    %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]}
        ins(%r : tensor<4xi32>) outs(%acc : tensor<4xi32>) {
    ^bb0(%a: i32, %b: i32):
      %x = arith.xori %a, %b : i32
      linalg.yield %x : i32
    } -> tensor<4xi32>
    scf.yield %s : tensor<4xi32>
  }
  %after = "autodiff.random"() {distribution = "bits"} : () -> tensor<4xi32>
  return %out, %after : tensor<4xi32>, tensor<4xi32>
}

// A draw in one branch only: both paths return the same advanced offset.
func.func @branch(%c: i1) -> (tensor<4xf32>, tensor<4xf32>) {
  %y = scf.if %c -> tensor<4xf32> {
    %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<12xf32>
    %s = tensor.extract_slice %r[0] [4] [1] : tensor<12xf32> to tensor<4xf32>
    scf.yield %s : tensor<4xf32>
  } else {
    %z = arith.constant dense<0.0> : tensor<4xf32>
    scf.yield %z : tensor<4xf32>
  }
  %after = "autodiff.random"() {distribution = "uniform"} : () -> tensor<4xf32>
  return %y, %after : tensor<4xf32>, tensor<4xf32>
}
"""


def transformed(text: str, pipeline: str) -> str:
    """`text` after `pipeline`: CompiledModule reads the signatures before its own
    pipeline runs, so the signature-changing passes run first."""
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, pipeline)
        return str(module)


@pytest.fixture(scope="module")
def stateful() -> CompiledModule:
    return CompiledModule(transformed(STATEFUL, FUNCTIONALIZE), pipeline=TO_CPU)


def test_functionalized_signature(stateful):
    params, results = stateful.signatures["two_draws"]
    assert [p.mlir_type for p in params] == ["tensor<6xf32>", "i64", "i64"]
    assert [r.mlir_type for r in results][-1] == "i64"


def test_two_draws_are_different_and_reproducible(stateful):
    x = np.arange(6, dtype=np.float32)
    seed, offset = 42, 1000
    a, b, n, end = stateful["two_draws"](x, np.int64(seed), np.int64(offset))
    # The returned offset is past all blocks used: 2 + 2 + 2.
    assert end == offset + 6
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, ref_draw(seed, offset, (8,), np.float32, "uniform"))
    np.testing.assert_array_equal(b, ref_draw(seed, offset + 2, (8,), np.float32, "uniform"))
    np.testing.assert_allclose(n - x, ref_draw(seed, offset + 4, (6,), np.float32, "normal"),
                               atol=1e-5)
    again = stateful["two_draws"](x, np.int64(seed), np.int64(offset))
    for u, v in zip((a, b, n, end), again):
        np.testing.assert_array_equal(u, v)
    # A host-side generator advancing by the returned offset draws fresh numbers.
    a2, _, _, end2 = stateful["two_draws"](x, np.int64(seed), end)
    assert end2 == end + 6
    assert not np.array_equal(a2, a) and not np.array_equal(a2, b)
    np.testing.assert_array_equal(a2, ref_draw(seed, offset + 6, (8,), np.float32, "uniform"))


def test_loop_draws_fresh_numbers_each_iteration(stateful):
    seed, offset = 7, 50
    out, end = stateful["loop"](np.int64(seed), np.int64(offset))
    assert end == offset + 5 * 2
    for k in range(5):
        np.testing.assert_array_equal(
            out[k], ref_draw(seed, offset + 2 * k, (3,), np.float64, "uniform"))
    assert len({tuple(row) for row in out}) == 5


@pytest.mark.parametrize("n", [0, 1, 3])
def test_dynamic_trip_count(stateful, n):
    seed, offset = -3, 11
    acc, after, end = stateful["dynamic"](np.int64(n), np.int64(seed), np.int64(offset))
    want = np.zeros(4, np.int32)
    for k in range(n):
        want ^= ref_draw(seed, offset + k, (4,), np.int32, "bits")
    np.testing.assert_array_equal(acc, want)
    np.testing.assert_array_equal(after, ref_draw(seed, offset + n, (4,), np.int32, "bits"))
    assert end == offset + n + 1


@pytest.mark.parametrize("taken", [True, False])
def test_branch_advances_by_the_larger_branch(stateful, taken):
    seed, offset = 5, 0
    y, after, end = stateful["branch"](np.bool_(taken), np.int64(seed), np.int64(offset))
    # 12 x f32 = 3 blocks in the taken branch; the draw after sits at offset + 3 either way.
    assert end == offset + 3 + 1
    np.testing.assert_array_equal(after, ref_draw(seed, offset + 3, (4,), np.float32, "uniform"))
    want = ref_draw(seed, offset, (12,), np.float32, "uniform")[:4] if taken else np.zeros(4)
    np.testing.assert_array_equal(y, want.astype(np.float32))


def test_functionalize_reports_errors_at_the_op():
    text = """module {
func.func @f() -> tensor<?xf32> {
  %r = "autodiff.random"() {distribution = "uniform"} : () -> tensor<?xf32>
  return %r : tensor<?xf32>
}
}"""
    with ir.Context() as ctx:
        dialects.load(ctx)
        module = ir.Operation.parse(text, source_name="bad.mlir")
        with pytest.raises(ir.MLIRError) as info:
            run_pipeline(module, "autodiff-functionalize-rng")
    messages = [str(d.message) for d in info.value.error_diagnostics]
    assert any("autodiff-functionalize-rng" in m and "non-static result shape" in m
               for m in messages), messages
    locs = [str(d.location) for d in info.value.error_diagnostics]
    assert any("bad.mlir" in loc and ":3:" in loc for loc in locs), locs


# ----------------------------------------------------------------------------
# With the differentiation passes: the backward pass sees the forward's numbers
# ----------------------------------------------------------------------------

DROPOUT = """
// Inverted dropout with p = 0.25 on 8 elements: keep where u >= p, scale 1 / (1 - p).
func.func private @dropout(%x: tensor<8xf32>) -> tensor<8xf32> {
  %u = "autodiff.random"() {distribution = "uniform"} : () -> tensor<8xf32>
  %p = arith.constant dense<0.25> : tensor<8xf32>
  %keep = arith.cmpf oge, %u, %p : tensor<8xf32>
  %scale = arith.constant dense<1.33333333> : tensor<8xf32>
  %zero = arith.constant dense<0.0> : tensor<8xf32>
  %m = arith.select %keep, %scale, %zero : tensor<8xi1>, tensor<8xf32>
  %y = arith.mulf %x, %m : tensor<8xf32>
  return %y : tensor<8xf32>
}

func.func @grad(%x: tensor<8xf32>, %ct: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %y, %g = "autodiff.vjp"(%x, %ct) {fn = @dropout}
      : (tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return %y, %g : tensor<8xf32>, tensor<8xf32>
}

func.func @tangent(%x: tensor<8xf32>, %t: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %y, %ty = "autodiff.jvp"(%x, %t) {fn = @dropout}
      : (tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return %y, %ty : tensor<8xf32>, tensor<8xf32>
}
"""


def test_transform_ops_are_threaded():
    """jvp/vjp of a drawing function get (seed, offset) as trailing primals."""
    with ir.Context() as ctx, ir.Location.unknown():
        dialects.load(ctx)
        module = ir.Module.parse(DROPOUT)
        run_pipeline(module, "autodiff-functionalize-rng")
        ops = {}

        def visit(op):
            ops.setdefault(op.name, []).append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        (vjp,) = ops["autodiff.vjp"]
        assert [str(v.type) for v in vjp.operands] == [
            "tensor<8xf32>", "i64", "i64", "tensor<8xf32>", "i64"]
        assert [str(r.type) for r in vjp.results] == ["tensor<8xf32>", "i64", "tensor<8xf32>"]
        (jvp,) = ops["autodiff.jvp"]
        assert [str(v.type) for v in jvp.operands] == [
            "tensor<8xf32>", "i64", "i64", "tensor<8xf32>", "i64", "i64"]
        assert [str(r.type) for r in jvp.results] == [
            "tensor<8xf32>", "i64", "tensor<8xf32>", "i64"]


@pytest.fixture(scope="module")
def dropout_module() -> CompiledModule:
    text = transformed(
        DROPOUT, "autodiff-functionalize-rng,autodiff-vjp,autodiff-jvp,autodiff-lower-rng")
    return CompiledModule(text, pipeline=TO_CPU)


@pytest.mark.parametrize("seed, offset", [(0, 0), (3, 10), (-7, 2**40)])
def test_dropout_gradient_uses_the_forward_mask(dropout_module, seed, offset):
    x = np.linspace(1.0, 8.0, 8, dtype=np.float32)
    ct = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    u = ref_draw(seed, offset, (8,), np.float32, "uniform")
    mask = np.where(u >= np.float32(0.25), np.float32(1.33333333), np.float32(0.0))
    y, g, end = dropout_module["grad"](x, ct, np.int64(seed), np.int64(offset))
    np.testing.assert_array_equal(y, x * mask)
    np.testing.assert_array_equal(g, ct * mask)  # d(sum(y * ct))/dx = mask * ct
    assert end == offset + 2
    y2, ty, end2 = dropout_module["tangent"](x, ct, np.int64(seed), np.int64(offset))
    np.testing.assert_array_equal(y2, x * mask)
    np.testing.assert_array_equal(ty, ct * mask)
    assert end2 == offset + 2
