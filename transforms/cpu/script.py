"""Transform-dialect scripts as text: the attributes that name ops, the accumulator, applying.

The schedules tag the ops they transform with a discardable integer
attribute (`SCHEDULE_TAG`, `ROW_TAG`), build one script that matches them by
it (`Script`), and apply it with `apply_quietly`: a script that fails part
way leaves valid, less optimized IR.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir

from ...dialects.vocabulary import CPU_SCHEDULE as SCHEDULE_TAG


class Script:
    """Accumulates transform-dialect text for one module."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.vectorize: list[str] = []
        self.vectorize_contract: list[str] = []
        self.vectorize_late: list[str] = []  # vectorized after the contraction patterns
        self.hoist: list[str] = []  # loop handles whose accumulators go to registers
        self.unroll: list[str] = []  # hoisted matmul k loops, unrolled by MATMUL_K_UNROLL
        self.n = 0
        self.threads = 1
        #: outer reductions split their first parallel loop over the threads
        self.outer_reduction_threads = True

    def forall(self, h: str, sizes: Sequence[int]) -> str:
        """Distribute `h` over threads: one `scf.forall` iteration per chunk of `sizes`."""
        t, loop = self.fresh("p"), self.fresh("forall")
        self.lines.append(
            f"{t}, {loop} = transform.structured.tile_using_forall {h} tile_sizes {list(sizes)} "
            ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)"
        )
        return t

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def match(self, tag: int, generalize: bool = False, attr: str = SCHEDULE_TAG) -> str:
        """The op whose attribute `attr` is `tag` (optionally generalized)."""
        h = self.fresh("op")
        self.lines.append(
            f"{h} = transform.structured.match attributes {{{attr} = {tag} : i64}} in %root "
            ": (!transform.any_op) -> !transform.any_op"
        )
        if generalize:
            g = self.fresh("gen")
            self.lines.append(
                f"{g} = transform.structured.generalize {h} "
                ": (!transform.any_op) -> !transform.any_op"
            )
            h = g
        return h

    def specialize(self, h: str) -> str:
        """Turn generic `h` back into the named op it matches (e.g. linalg.batch_matmul)."""
        g = self.fresh("sp")
        self.lines.append(
            f"{g} = transform.structured.specialize {h} "
            ": (!transform.any_op) -> !transform.any_op"
        )
        return g

    def interchange(self, h: str, order: Sequence[int]) -> str:
        """Permute the loops of generic `h`: new loop i is old loop order[i]."""
        g = self.fresh("ic")
        self.lines.append(
            f"{g} = transform.structured.interchange {h} iterator_interchange = {list(order)} "
            ": (!transform.any_op) -> !transform.any_op"
        )
        return g

    def split(self, h: str, dim: int, chunk: int) -> tuple[str, str]:
        """Split `h` along loop `dim` into iterations [0, chunk) and [chunk, end)."""
        parts, lo, hi = self.fresh("split"), self.fresh("lo"), self.fresh("hi")
        self.lines.append(f"{parts} = transform.structured.split {h} after {chunk} "
                          f"{{dimension = {dim}}} : !transform.any_op")
        self.lines.append(f"{lo}, {hi} = transform.split_handle {parts} "
                          ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
        return lo, hi

    def tile(self, h: str, sizes: Sequence[int], hoist_innermost: bool = False,
             unroll_innermost: bool = False) -> str:
        """Tile `h`; with `hoist_innermost`, hoist the accumulator out of the innermost loop
        (and with `unroll_innermost`, unroll that loop by `MATMUL_K_UNROLL` afterwards)."""
        nloops = sum(1 for s in sizes if s)
        if nloops == 0:
            return h
        t = self.fresh("t")
        loops = self.fresh("l")
        innermost = f"{loops}#{nloops - 1}" if nloops > 1 else loops
        if hoist_innermost:
            self.hoist.append(innermost)
        if unroll_innermost:
            self.unroll.append(innermost)
        anys = ", ".join(["!transform.any_op"] * (nloops + 1))
        self.lines.append(
            f"{t}, {loops}:{nloops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
            if nloops > 1 else
            f"{t}, {loops} = transform.structured.tile_using_for {h} "
            f"tile_sizes {list(sizes)} : (!transform.any_op) -> ({anys})"
        )
        return t


def named_sequence(lines: Sequence[str]) -> str:
    text = "\n    ".join(lines)
    return (
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main("
        "%root: !transform.any_op {transform.readonly}) {\n"
        f"    {text}\n"
        "    transform.yield\n"
        "  }\n"
        "}\n"
    )


def apply_quietly(module: ir.Operation, text: str, strict: bool = False) -> None:
    """Apply a transform script; a failure leaves valid (less optimized) IR.

    Every transform step leaves valid IR, so a partly applied script still
    lowers correctly. Diagnostics are kept from the pass manager; with
    `strict` (the passes' `strict` option; `--autodiff-lower-to-cpu` sets it
    from the environment, see pipeline.py) a failure raises them.
    """
    from mlir.dialects.transform import interpreter

    script = ir.Module.parse(text)
    messages: list[str] = []

    def swallow(diag: ir.Diagnostic) -> bool:
        messages.append(f"{diag.location}: {diag.message}")
        return True

    handler = module.context.attach_diagnostic_handler(swallow)
    try:
        interpreter.apply_named_sequence(module, script.body.operations[0], script)
    except (ValueError, RuntimeError, ir.MLIRError) as err:
        if strict:
            raise RuntimeError(f"CPU schedule failed: {err}: {messages}") from None
    finally:
        handler.detach()
