"""`ad.jit(..., donate_argnums=...)` falls back to fresh outputs only when
MLIR says the donation cannot be honoured (an `ir.MLIRError` with the
diagnostic); a crash of one of our passes while compiling the donating
version is a bug and reaches the caller, never a silent non-donating build.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mlir_autodiff as ad
from mlir_autodiff.transforms.cpu import donation
from mlir_autodiff.transforms.diagnostics import fail
from mlir_autodiff.transforms.pipeline import InternalError


def _sgd(w, g):
    return w - 0.5 * g


def _fail_when_donating(monkeypatch, error):
    """Make the CPU pipeline's donation bookkeeping raise `error(func)` on donating
    modules only (a donation-specific code path: the non-donating build is unaffected)."""
    note = donation.NoteDonatedArguments
    original = note.run

    def run(self, module):
        original(self, module)
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name == "func.func" and donation.DONATED_ARGS in op.attributes:
                raise error(op)

    monkeypatch.setattr(note, "run", run)


def test_an_internal_error_while_compiling_the_donating_version_propagates(monkeypatch):
    _fail_when_donating(monkeypatch, lambda op: RuntimeError("injected crash in the donation path"))
    w, g = np.arange(8.0), np.ones(8)
    # Without donation the same function compiles and runs through the patched pass.
    np.testing.assert_array_equal(ad.jit(_sgd)(w, g), w - 0.5)
    donating = ad.jit(_sgd, donate_argnums=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old fallback warned "not usable" instead
        with pytest.raises(InternalError, match=r"internal error in pass "
                           r"'autodiff-note-donated-arguments'.*injected crash"):
            donating(w.copy(), g)


def test_a_diagnosed_donation_failure_still_falls_back(monkeypatch):
    """The fallback itself stays: an MLIR failure in the donating compile (here a
    pass failure reported as a diagnostic) yields the non-donating build and its
    warning, with the right values."""
    _fail_when_donating(monkeypatch, lambda op: fail(op, "donation refused for the test"))
    w, g = np.arange(8.0), np.ones(8)
    with pytest.warns(UserWarning, match="Some donated buffers were not usable"):
        out = ad.jit(_sgd, donate_argnums=0)(w, g)
    np.testing.assert_array_equal(out, np.arange(8.0) - 0.5)
    np.testing.assert_array_equal(w, np.arange(8.0))  # not donated: left as it was
