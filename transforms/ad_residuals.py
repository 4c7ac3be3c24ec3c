"""What reverse mode saves: `residual_report` describes each residual of a function's
vjp (a parameter, or an op with its source location), for the front end's
`checkpoint` diagnostics and tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from ..dialects.vocabulary import CHECKPOINT_NAME, string_of, symbol_of
from .ad_driver import ADDriver
from .ad_support import function_type, op_name, walk_ops


@dataclasses.dataclass(frozen=True)
class Residual:
    """One value reverse mode saves: a parameter (`arg` is its index) or the result
    of op `op` at `location` (`file:line:col`, traced through calls to its origin)."""

    type: ir.Type
    arg: int | None
    op: str
    location: str


def residual_report(module: ir.Operation, name: str, wrt: Sequence[int]) -> list[Residual]:
    """What `--autodiff-vjp` saves for @name w.r.t. `wrt`: generates @name's forward
    and backward functions in `module` (as the pass would) and describes each
    residual the backward function receives. Raises ir.MLIRError-like PassFailure
    (with a diagnostic) if @name cannot be differentiated."""
    from .diagnostics import _file_location

    with module.context, module.location:
        d = ADDriver(module, "autodiff-vjp")
        fn = d.lookup(name, module)
        ft = function_type(fn)
        params, results = list(ft.inputs), list(ft.results)
        fwd, _, _, spec = d.vjp_functions(name, list(wrt), fn)
        fwd_fn = d.functions()[fwd]
        ret = list(fwd_fn.regions[0].blocks[0].operations)[-1]

        def origin(v: ir.Value, owner_fn: ir.Operation, depth: int) -> Residual:
            if isinstance(v.owner, ir.Block):
                args = list(owner_fn.regions[0].blocks[0].arguments)
                idx = args.index(v) if v in args and owner_fn == fwd_fn else None
                return Residual(v.type, idx, "a block argument", "")
            op = v.owner.operation
            if op_name(op) == "func.call" and depth < 16:
                callee = d.functions().get(symbol_of(op, "callee"))
                if callee is not None and callee.regions[0].blocks and \
                        CHECKPOINT_NAME not in callee.attributes:
                    cret = list(callee.regions[0].blocks[0].operations)[-1]
                    inner = cret.operands[list(op.results).index(v)]
                    cargs = list(callee.regions[0].blocks[0].arguments)
                    if isinstance(inner.owner, ir.Block) and inner in cargs:
                        r = origin(op.operands[cargs.index(inner)], owner_fn, depth + 1)
                    else:
                        r = origin(inner, callee, depth + 1)
                    return Residual(v.type, r.arg, r.op, r.location)
            file, line, col = _file_location(op.location)
            where = f"{file}:{line}:{col}" if file is not None else ""
            what = op_name(op)
            if what == "linalg.generic":  # name it by what its body computes
                inner = [op_name(o) for o in walk_ops(op)[1:]
                         if op_name(o) not in ("linalg.yield", "arith.constant")]
                if inner:
                    what += "{" + ", ".join(dict.fromkeys(inner)) + "}"
            # The result of a `checkpoint_name` identity, or the value it names.
            for c in [op] + [u.owner for u in v.uses]:
                if op_name(c) == "func.call":
                    callee = d.functions().get(symbol_of(c, "callee"))
                    if callee is not None and CHECKPOINT_NAME in callee.attributes:
                        name = string_of(callee, CHECKPOINT_NAME)
                        what = f"checkpoint_name '{name}'"
                        break
            return Residual(v.type, None, what, where)

        out = []
        for e in spec:
            if e < 0:
                out.append(Residual(params[-1 - e], -1 - e, "", ""))
            else:
                out.append(origin(ret.operands[len(results) + e], fwd_fn, 0))
        return out
