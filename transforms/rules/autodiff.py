"""Derivative rules of the `autodiff` dialect's own ops."""

from __future__ import annotations

from .registry import defzero

# Identity with a zero derivative.
defzero("autodiff.stop_gradient")
