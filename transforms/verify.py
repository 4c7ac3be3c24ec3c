"""`--autodiff-verify`: check every autodiff op against the dialect's constraints.

The drivers run this check right after parsing (see dialects/verify.py for
why autodiff ops are verified in Python); as a pass it can also be placed
in a pipeline, e.g. after a hand-written transform.
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from ..dialects import verify
from .diagnostics import PassFailure
from .passes import Pass, register


@register
@dataclasses.dataclass(frozen=True)
class VerifyAutodiff(Pass):
    name = "autodiff-verify"
    summary = "Verify autodiff ops (attributes, arities, types) as the IRDL definition states"

    allow_unregistered: bool = dataclasses.field(
        default=True, metadata={"help": "accept ops of other unregistered dialects"}
    )

    def run(self, module: ir.Operation) -> None:
        if not verify(module, allow_unregistered=self.allow_unregistered):
            raise PassFailure("autodiff-verify")
