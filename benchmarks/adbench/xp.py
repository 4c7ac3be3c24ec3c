"""Helpers for the objectives written against `xp`: numpy-style names on torch tensors,
and the `scan` that runs a time loop in each namespace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def python_scan(body: Callable[[Any, Any], tuple[Any, Any]], carry: Any,
                xs: tuple[Any, ...]) -> tuple[Any, None]:
    """`jax.lax.scan`'s contract (ys dropped) as a Python loop: numpy and torch eager."""
    for t in range(xs[0].shape[0]):
        carry, _ = body(carry, tuple(x[t] for x in xs))
    return carry, None


def scan_for(xp: Any) -> Callable[..., tuple[Any, Any]]:
    """The scan a namespace's programs loop with: one traced loop where the framework
    has it (`jax.lax.scan`, `mlir_autodiff.lax.scan`), else a Python loop."""
    name = getattr(xp, "__name__", "")
    if name == "jax.numpy":
        import jax

        return jax.lax.scan
    if name == "mlir_autodiff.numpy":
        from mlir_autodiff import lax

        return lax.scan
    return python_scan


def torch_namespace() -> Any:
    """A namespace whose functions take numpy's argument names and act on torch tensors."""
    import torch

    class TorchXP:
        exp, log, tanh, einsum = torch.exp, torch.log, torch.tanh, torch.einsum

        @staticmethod
        def sum(a: Any, axis: Any = None) -> Any:
            return torch.sum(a) if axis is None else torch.sum(a, dim=axis)

        @staticmethod
        def max(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
            return torch.amax(a) if axis is None else torch.amax(a, dim=axis, keepdim=keepdims)

        @staticmethod
        def expand_dims(a: Any, axis: int) -> Any:
            return torch.unsqueeze(a, axis)

        @staticmethod
        def squeeze(a: Any, axis: int) -> Any:
            return torch.squeeze(a, axis)

        @staticmethod
        def concatenate(arrays: Any, axis: int = 0) -> Any:
            return torch.cat(list(arrays), dim=axis)

    return TorchXP
