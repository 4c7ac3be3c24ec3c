"""`--autodiff-jvp`: forward mode. Lowers every `autodiff.jvp` op to a call of `@f_jvp`.

`@f_jvp` (primals..., tangents...) -> (outputs..., output tangents...) is
generated once per function from the per-op JVP rules in `rules/`, or is the
function's `autodiff.custom_jvp` rule (see ad_driver for custom rules
and checkpoints). The clean-up (elementwise ops on tensors to linalg, canonicalize, cse) runs on the
module afterwards, as upstream pipelines do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from ..dialects.vocabulary import JVP
from .ad_cleanup import dedupe_private_results
from .ad_driver import run_pass
from .passes import Pass, PipelineElement, register

CLEANUP: tuple[str, ...] = (
    "func.func(convert-elementwise-to-linalg)",
    "canonicalize",
    "cse",
)


@dataclasses.dataclass(frozen=True)
class JvpCore(Pass):
    name = "autodiff-jvp-core"
    summary = "Lower autodiff.jvp ops (without clean-up)"

    def run(self, module: ir.Operation) -> None:
        run_pass(module, "autodiff-jvp", JVP)


@dataclasses.dataclass(frozen=True)
class DedupeResults(Pass):
    name = "autodiff-dedupe-private-results"
    summary = "Private functions return each value once (works around an upstream crash)"

    def run(self, module: ir.Operation) -> None:
        with module.location:
            dedupe_private_results(module)


@register
@dataclasses.dataclass(frozen=True)
class Jvp(Pass):
    name = "autodiff-jvp"
    summary = "Forward-mode differentiation: lower autodiff.jvp to calls of generated functions"

    def expand(self) -> Sequence[PipelineElement]:
        return [JvpCore(), *CLEANUP, DedupeResults()]
