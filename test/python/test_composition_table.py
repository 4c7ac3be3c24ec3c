"""The composition table: every ordered pair of transforms, plus reverse-over-reverse
chains through each loop kind (cases in composition_cases.py).

Each cell outer∘inner(base) is compiled with one `ad.jit` and checked twice:

- `value`: the cell's output at X0 against the same composition written with
  jax in float64 (jax.grad, jax.vmap, jax.checkpoint, ...; custom rules that
  are the true derivative mean the function itself; loops are unrolled).
- `deriv`: forward and reverse mode of the whole cell (jvp along T, vjp of C)
  against jax's jvp / vjp of the reference, the jvp against central finite
  differences of the reference, and the transpose identity
  <C, jvp(T)> = <vjp(C), T> on our own two results.

Cells that are known to be wrong today are in KNOWN_DEFECTS (strict xfail: a
fix makes the test fail until its entry is removed); combinations that are not
supported raise a user-facing error listed in UNSUPPORTED, which the test
asserts.
"""

from __future__ import annotations

import re

import composition_cases as cc
import numpy as np
import pytest

import mlir_autodiff as ad

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

# The table checks the transforms' compositions, not LLVM's optimizer: its cells are
# compiled at LLVM -O0 (conftest's llvm_o0; the MLIR pipeline is the same at every level)
pytestmark = pytest.mark.usefixtures("llvm_o0")

CHECKS = ("value", "deriv")

#: (cell id, check) -> why it is wrong today. Every entry is a strict xfail.
KNOWN_DEFECTS: dict[tuple[str, str], str] = {}

#: (cell id, check) -> (exception type, regex its message must match).
UNSUPPORTED: dict[tuple[str, str], tuple[type[BaseException], str]] = {
    (("while_loop-dropout", check)): (
        ad.CompilationError,
        r"composition_cases\.py:\d+:\d+: error: autodiff-functionalize-rng: "
        r"random draw inside 'scf\.while' is not supported")
    for check in CHECKS
}


def _close(got, want, what, rtol=1e-9):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def _seeded(draws, fn, *args):
    if draws:
        ad.random.manual_seed(cc.SEED)
    return fn(*args)


class _Cell:
    def __init__(self, cell):
        self.cell = cell
        self.draws = cc.draws(cell)
        cc.STATE.masks = cc.reference_masks(cell) if self.draws else None
        self.ref, self.m = cc.build(cell, "ref")
        self.masks = cc.STATE.masks

    def ours(self):
        return cc.build(self.cell, "ours")[0]


def _check_value(cell: _Cell) -> None:
    f = cell.ours()
    got = _seeded(cell.draws, ad.jit(f), cc.X0)
    want = jax.jit(cell.ref)(cc.X0)
    _close(got, want, f"{cc.cell_id(cell.cell)} value")


def _check_deriv(cell: _Cell) -> None:
    f = cell.ours()
    t, ct = cc.T(cc.N), cc.C(cell.m)

    def jvp_of(x, t):
        return ad.jvp(f, (x,), (t,))[1]

    def vjp_of(x, ct):
        return ad.vjp(f, x)[1](ct)[0]

    if cell.draws:  # each trace of f draws: one program per mode, each from the seed
        tan = _seeded(True, ad.jit(jvp_of), cc.X0, t)
        cot = _seeded(True, ad.jit(vjp_of), cc.X0, ct)
    else:
        both = ad.jit(lambda x, t, ct: (jvp_of(x, t), vjp_of(x, ct)))
        tan, cot = both(cc.X0, t, ct)
    name = cc.cell_id(cell.cell)
    h = 1e-6

    def oracles(x, t, ct, x_plus, x_minus):
        """jax's jvp and vjp of the reference, and the reference at the two points of
        the central difference: one XLA compilation."""
        return (jax.jvp(cell.ref, (x,), (t,))[1], jax.vjp(cell.ref, x)[1](ct)[0],
                cell.ref(x_plus), cell.ref(x_minus))

    want_tan, want_cot, f_plus, f_minus = jax.jit(oracles)(cc.X0, t, ct, cc.X0 + h * t,
                                                           cc.X0 - h * t)
    _close(tan, want_tan, f"{name} jvp vs jax")
    _close(cot, want_cot, f"{name} vjp vs jax")
    fd = (np.asarray(f_plus) - np.asarray(f_minus)) / (2 * h)
    _close(tan, fd, f"{name} jvp vs finite differences", rtol=1e-6)
    lhs, rhs = float(np.dot(ct, np.ravel(tan))), float(np.dot(np.ravel(cot), t))
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), \
        f"{name} transpose identity: <ct, jvp t> = {lhs} != <vjp ct, t> = {rhs}"


def _checks(cell):
    """`value` for every cell; `deriv` where it adds at most a second order
    (cells of derivative order <= 1), which keeps the table within minutes."""
    return CHECKS if cc.order(cell) <= 1 else ("value",)


def _params():
    out = []
    for cell in cc.cells():
        for check in _checks(cell):
            key = (cc.cell_id(cell), check)
            marks = []
            if key in KNOWN_DEFECTS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[key]))
            out.append(pytest.param(cell, check, id=f"{key[0]}:{check}", marks=marks))
    return out


@pytest.mark.parametrize("cell,check", _params())
def test_cell(cell, check):
    key = (cc.cell_id(cell), check)
    c = _Cell(cell)
    run = _check_value if check == "value" else _check_deriv
    if key in UNSUPPORTED:
        exc, pattern = UNSUPPORTED[key]
        with pytest.raises(exc, match=pattern):
            run(c)
        return
    run(c)


def test_table_size():
    """The table covers every ordered pair and at least 300 cells."""
    cells = cc.cells()
    pairs = {c for c in cells if len(c) == 2}
    assert len(cc.ELEMENTS) == 17
    assert pairs == {(a, b) for a in cc.ELEMENTS for b in cc.ELEMENTS}
    assert len(cells) >= 300
    for key in list(KNOWN_DEFECTS) + list(UNSUPPORTED):
        assert any(cc.cell_id(c) == key[0] and key[1] in _checks(c) for c in cells), key
    assert not set(KNOWN_DEFECTS) & set(UNSUPPORTED)


def test_unsupported_messages_name_the_user_line():
    for pattern in (p for _, p in UNSUPPORTED.values()):
        re.compile(pattern)
