"""Copies between strided buffers as loops the compiler vectorizes, not a runtime call.

After bufferization, a result that is a slice of a larger buffer (`split` of
a fused `x @ w_qkv` into q, k and v, each reshaped into heads) is copied into
its out-parameter with `memref.copy`. Between contiguous buffers that lowers
to a memcpy; between strided ones to a call of the runtime's generic
`memrefCopy`, which walks the elements one index computation at a time
(three such copies of 32768 f32 took longer than the matmul producing
them). `StridedCopiesToLoops` rewrites those copies as `linalg.copy`,
which `convert-linalg-to-loops` turns into loops over the static shape
whose contiguous innermost run LLVM vectorizes.
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from ..ad_support import post_order_ops
from ..passes import Pass


def _contiguous(t: ir.MemRefType) -> bool:
    """`t`'s elements are one dense row-major block (a memcpy can copy it)."""
    strides, _ = t.get_strides_and_offset()
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _strided_static_copy(op: ir.Operation) -> bool:
    if op.name != "memref.copy":
        return False
    types = [v.type for v in op.operands]
    if not all(isinstance(t, ir.MemRefType) for t in types):
        return False
    types = [ir.MemRefType(t) for t in types]
    if not all(t.has_static_shape for t in types):
        return False
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if any(dynamic in t.get_strides_and_offset()[0] for t in types):
        return False  # contiguous or not: known at run time only
    return not all(_contiguous(t) for t in types)


@dataclasses.dataclass(frozen=True)
class StridedCopiesToLoops(Pass):
    """`memref.copy` between static buffers that are not both contiguous becomes
    `linalg.copy` (lowered to loops), instead of the runtime's element-wise
    `memrefCopy` (see the module docstring)."""

    name = "autodiff-strided-copies-to-loops"
    summary = "Copy between strided static buffers with loops instead of the runtime's memrefCopy"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import linalg

        copies = [op for op in post_order_ops(module) if _strided_static_copy(op)]
        for op in copies:
            src, dst = op.operands
            with op.context, op.location, ir.InsertionPoint(op):
                linalg.copy(src, outs=[dst])
            op.erase()
