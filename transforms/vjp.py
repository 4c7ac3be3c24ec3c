"""`--autodiff-vjp`: reverse mode. Lowers every `autodiff.vjp` op to calls.

For `@f` and a `wrt` set, `@f_fwd` (primals...) -> (outputs..., residuals...)
and `@f_bwd` (residuals..., output cotangents...) -> (cotangents of wrt...)
are generated once from the per-op VJP rules in `rules/` (or taken from
`autodiff.custom_vjp`); the op becomes a call of each. `autodiff.checkpoint`
calls save only their policy's residuals and recompute the rest in @f_bwd. Clean-up (elementwise to linalg, canonicalize, cse) follows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from ..dialects.vocabulary import VJP
from .ad_driver import run_pass
from .jvp import CLEANUP, DedupeResults
from .passes import Pass, PipelineElement, register


@dataclasses.dataclass(frozen=True)
class VjpCore(Pass):
    name = "autodiff-vjp-core"
    summary = "Lower autodiff.vjp ops (without clean-up)"

    def run(self, module: ir.Operation) -> None:
        run_pass(module, "autodiff-vjp", VJP)


@register
@dataclasses.dataclass(frozen=True)
class Vjp(Pass):
    name = "autodiff-vjp"
    summary = "Reverse-mode differentiation: lower autodiff.vjp to calls of fwd/bwd functions"

    def expand(self) -> Sequence[PipelineElement]:
        return [VjpCore(), *CLEANUP, DedupeResults()]
