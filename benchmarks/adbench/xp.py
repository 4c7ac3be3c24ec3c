"""numpy-style names on torch tensors, for the objectives written against `xp`."""

from __future__ import annotations

from typing import Any


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
