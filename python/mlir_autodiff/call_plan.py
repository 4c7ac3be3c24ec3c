"""From a compiled `@main`'s results to the jitted function's outputs.

A jitted function's outputs are a pytree whose leaves are results of the
compiled `@main` (after CSE, one result may stand for several leaves:
`remap`), arguments returned unchanged, or constants. `CallPlan` is that
recipe and the calling convention around `@main`: bool arrays travel as
int8, a function that draws takes the generator state and returns the
advanced offset (`rng_state.call_with_state`), and no two output leaves
alias each other or an array the caller did not donate.

`jit` (api.py) and exported artifacts (aot.py) both call through it, so an
artifact loaded without MLIR returns exactly what `jit` returns. Only numpy
and the standard library here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mlir_autodiff import pytree
from mlir_autodiff.eager import Array
from mlir_autodiff.native_call import NativeFunction
from mlir_autodiff.rng_state import call_with_state

_BOOL = np.dtype(np.bool_)
_I8 = np.dtype(np.int8)


@dataclasses.dataclass
class CallPlan:
    """How one compiled version of a jitted function is called; see the module doc."""

    out_tree: pytree.TreeDef
    #: per output leaf: ("result", i) | ("arg", leaf index) | ("const", ndarray)
    plan: list[tuple[str, Any]]
    in_dtypes: list[np.dtype]
    out_dtypes: list[np.dtype]
    #: output leaf's result index -> index among @main's (deduplicated) results
    remap: list[int]
    #: donated leaves returned as outputs unchanged (handed back, not copied)
    returned_donated: Sequence[int] = ()
    #: @main takes trailing (seed, offset) and returns the advanced offset last
    uses_rng: bool = False

    def __post_init__(self) -> None:
        self._bool_in = any(d == _BOOL for d in self.in_dtypes)
        self._bool_out = any(d == _BOOL for d in self.out_dtypes)
        self.returned_donated = frozenset(self.returned_donated)

    def __call__(self, main: NativeFunction | None, values: list[Any]) -> Any:
        """Call `main` (None: nothing to compute) with the argument leaves `values`
        (already arrays of the traced dtypes); the output pytree."""
        outs: list[Any] = []
        if main is not None:
            args = values
            if self._bool_in:
                # bool arrays travel as int8: reinterpret, no copy
                args = [v.view(_I8) if d == _BOOL else v for v, d in zip(values, self.in_dtypes)]

            def call(a: list[Any]) -> list[Any]:
                unique = main.call(a)
                return [unique[j] for j in self.remap]

            outs = call_with_state(call, args) if self.uses_rng else call(args)
            if self._bool_out:
                outs = [o.view(_BOOL) if d == _BOOL else o for o, d in zip(outs, self.out_dtypes)]
        return pytree.tree_unflatten(self.out_tree, self.output_leaves(values, outs))

    def output_leaves(self, values: list[Any], outs: list[Any]) -> list[Any]:
        """Output leaves that never alias each other or a caller's array not donated.

        Each output is a fresh array, returned as an `eager.Array` (an ndarray
        with `.at`, as eager results), except a donated array, which is handed
        back (as the result computed in its buffer, or returned unchanged) as
        the plain ndarray that the call received.
        """
        used: set[int] = set()
        inputs = {id(v) for v in values}
        leaves = []
        for kind, what in self.plan:
            if kind == "const":
                out = np.array(what)
            elif kind == "arg":
                out = values[what] if what in self.returned_donated else np.array(values[what])
            else:
                out = outs[what]
            if id(out) in used:  # one array returned twice: give independent copies
                out = np.array(out)
            used.add(id(out))
            if type(out) is np.ndarray and id(out) not in inputs:
                out = out.view(Array)
            leaves.append(out)
        return leaves

