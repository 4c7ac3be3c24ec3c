"""A last dimension that no vector piece divides (a prime width, e.g. the 43-character
vocabulary of examples/char_transformer.py) still runs vector code.

The CPU schedules pick register tiles and reduction steps among divisors of
the vector dimension, so a prime width had only 1: the read-out matmul
(512x64 @ 64x43) ran one scalar column at a time (8x1 register tiles) and
the log-softmax's row max and sum one scalar add per element, each ~5x
slower than at width 48. Now a matmul splits the width into whole registers
and a rest (43 = 32 + 11 in f32 on AVX-512), as it did for non-prime widths,
and a row reduction of up to four registers is one vector of its full
length, as elementwise rows are. Checked in the scheduled IR and against
numpy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_cases import (
    matmul_text,
    randn,
    reduce_text,
    scheduled_ir,
    strict_schedules,  # noqa: F401  (autouse)
)

from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu import parameters


@pytest.mark.parametrize("n", [43, 47])
@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_matmul_with_a_prime_width_gets_vector_register_tiles(n, dt, np_dt) -> None:
    text = matmul_text(64, n, 32, dt)
    widths = {int(w) for w in re.findall(rf"into vector<\d+x(\d+)x{dt}>", scheduled_ir(text))}
    lanes = parameters.host_vector_bits() // (32 if dt == "f32" else 64)
    assert 1 not in widths, widths                  # no scalar columns
    assert n % lanes in widths, (widths, lanes)     # the rest after the whole registers
    a, b = randn(64, 32, dtype=np_dt), randn(32, n, dtype=np_dt)
    rtol = 1e-5 if dt == "f32" else 1e-13
    np.testing.assert_allclose(CompiledModule(text)["f"](a, b), a.astype(np.float64) @ b,
                               rtol=rtol, atol=rtol * 10)


@pytest.mark.parametrize("dt,np_dt", [("f32", np.float32), ("f64", np.float64)])
def test_row_reduction_with_a_prime_width_is_one_vector(dt, np_dt) -> None:
    n = 43 if dt == "f32" else 23   # more than one register, at most four
    lanes = parameters.ELEMENTWISE.lanes[32 if dt == "f32" else 64]
    assert lanes < n <= parameters.ELEMENTWISE_WHOLE_ROW_VECTORS * lanes
    rows = 256  # enough elements to be scheduled (REDUCTION.min_elements)
    assert rows * n >= parameters.REDUCTION.min_elements
    text = reduce_text((rows, n), [1], dt, "arith.maximumf",
                       "0xFF800000" if dt == "f32" else "0xFFF0000000000000")
    assert f"vector<{n}x{dt}>" in scheduled_ir(text)  # the whole row, not scalars
    x = randn(rows, n, dtype=np_dt)
    np.testing.assert_array_equal(CompiledModule(text)["f"](x), x.max(axis=1))
    fs = CompiledModule(reduce_text((rows, n), [1], dt, "arith.addf", "0.0"))["f"]
    rtol = 1e-5 if dt == "f32" else 1e-13
    np.testing.assert_allclose(fs(x), x.astype(np.float64).sum(axis=1), rtol=rtol,
                               atol=rtol * 10)
