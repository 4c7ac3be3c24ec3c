"""The implicit random generator's state and how compiled code uses it.

`mlir_autodiff.random` draws from one process-wide generator (torch's
default generator): a Philox key `seed` and the next free counter block
`offset`. A module that draws is compiled (`--autodiff-functionalize-rng`)
into a function that takes the state `(seed, offset)` as two trailing i64
arguments and returns the advanced offset as a trailing i64 result;
`call_with_state` is that calling convention on the runtime side, used by
`api` for every compiled call that draws.

This module is the bottom of the RNG: `api` imports it, and `random`
re-exports its public names (`manual_seed`, `seed`, `get_state`,
`set_state`, `call_with_state`, `DEFAULT_SEED`), so `api` does not import
`random`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: torch's default seed, so an unseeded program is still reproducible.
DEFAULT_SEED = 67280421310721
_MASK64 = (1 << 64) - 1


class _Generator:
    """The implicit generator: a Philox key and the next free counter block.

    Process-wide, like torch's default generator; `lock` makes a compiled call's
    read-draw-advance of the offset atomic, so threads never share counter blocks.
    """

    def __init__(self) -> None:
        self.seed = DEFAULT_SEED
        self.offset = 0
        self.lock = threading.RLock()


_GEN = _Generator()


def manual_seed(seed: int) -> None:
    """Seed the implicit generator and rewind it (torch.manual_seed).

    `seed` is any Python int; it is taken modulo 2**64.
    """
    if isinstance(seed, (bool, float)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    with _GEN.lock:
        _GEN.seed = int(seed) & _MASK64
        _GEN.offset = 0


def seed(seed: int) -> None:
    """Alias of `manual_seed` (numpy's and torch's spelling)."""
    manual_seed(seed)


def get_state() -> tuple[int, int]:
    """The generator state `(seed, offset)`; pass it to `set_state` to replay from here."""
    with _GEN.lock:
        return _GEN.seed, _GEN.offset


def set_state(state: tuple[int, int]) -> None:
    """Restore a state returned by `get_state`."""
    s, o = state
    with _GEN.lock:
        _GEN.seed = int(s) & _MASK64
        _GEN.offset = int(o) & _MASK64


def call_with_state(call: Callable[[list[Any]], list[Any]], args: list[Any]) -> list[Any]:
    """Run a compiled function whose RNG state was functionalized.

    `call(args + [seed, offset])` must return the function's results with the
    advanced offset last (`--autodiff-functionalize-rng`'s contract); that offset
    is stored, so the next call draws after this one's numbers. Returns the
    other results.
    """
    with _GEN.lock:
        state = [np.array(v, dtype=np.uint64).view(np.int64) for v in (_GEN.seed, _GEN.offset)]
        outs = call(list(args) + state)
        # i64 on the MLIR side, an unsigned block counter here (it wraps mod 2**64).
        _GEN.offset = int(np.asarray(outs[-1], dtype=np.int64).view(np.uint64))
    return outs[:-1]


__all__ = ["DEFAULT_SEED", "call_with_state", "get_state", "manual_seed", "seed", "set_state"]
