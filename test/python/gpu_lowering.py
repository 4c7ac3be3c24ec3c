"""Test helper: MLIR text lowered by `--autodiff-lower-to-gpu` (no GPU needed)."""

from __future__ import annotations

from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff.gpu import lower_to_gpu


def lowered(text: str, **options: object) -> ir.Module:
    """`text` parsed in a fresh context and lowered with `LowerToGpu(**options)`."""
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        lower_to_gpu(module, **options)
    return module
