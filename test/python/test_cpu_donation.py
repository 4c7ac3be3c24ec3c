"""Results in the caller's buffers (transforms/cpu/donation.py).
"""

from __future__ import annotations

from cpu_cases import (
    strict_schedules,  # noqa: F401  (autouse)
    unary_text,
)

from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.cpu.parameters import ELEMENTWISE


def test_large_result_written_in_place() -> None:
    """The result is computed in the caller's buffer: no temporary + copy per call."""
    cm = CompiledModule(unary_text("math.exp", ELEMENTWISE.min_elements * 4))
    assert "@malloc" not in cm.lowered_text
    assert "memcpy" not in cm.lowered_text
