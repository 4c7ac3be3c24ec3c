"""ADBench's LSTM objective (Srajer, Kukelova, Fitzgibbon 2018).

File layout (`benchmarks/data/adbench/lstm/lstm_l{l}_c{c}.txt`): `l c b`, then
2l lines of 4b main parameters (weight, bias per layer), 3 lines of b extra
parameters (input scale, output scale, output bias), 2l lines of b state
values (hidden, cell per layer), c lines of b sequence values; blank lines
between the blocks.

Objective: an l-layer LSTM runs over the sequence; at step t the input
`sequence[t]` is scaled by `extra[0]`, passed through every layer (layer k
reads the previous layer's new hidden state), and the top hidden state gives
the prediction `y = h * extra[1] + extra[2]`. Each layer updates, with
gates from its 4b weights/biases in the order (forget, input, output, change):

    f = sigmoid(x * w_f + b_f)      i = sigmoid(h * w_i + b_i)
    o = sigmoid(x * w_o + b_o)      g = tanh(h * w_g + b_g)
    cell = cell * f + i * g         h = o * tanh(cell)

(ADBench's model: elementwise weights, no matrix products.) The loss is the
negative mean log-likelihood of the next element under
`ynorm = y - log(2 + sum(exp(y)))` (ADBench's "+2"), averaged over the
(c - 1) * b predicted values. The gradient is taken with respect to the main
and extra parameters; state and sequence are data.

The time loop is written against `scan` (jax.lax.scan's contract), chosen
per namespace by `xp.scan_for`: `mlir_autodiff.lax.scan` for our tracer and
`jax.lax.scan` for JAX (one loop op, the step traced once), a Python loop
for numpy and torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .xp import python_scan, scan_for

__all__ = ["LstmInput", "load", "objective", "python_scan", "reference", "truncated"]


@dataclasses.dataclass
class LstmInput:
    layers: int  # l
    steps: int  # c, the sequence length
    width: int  # b
    main: np.ndarray  # (2l, 4b): rows 2k (weights) and 2k+1 (biases) of layer k
    extra: np.ndarray  # (3, b)
    state: np.ndarray  # (2l, b): rows 2k (hidden) and 2k+1 (cell) of layer k
    sequence: np.ndarray  # (c, b)


def load(path: str | Path) -> LstmInput:
    """Parse an ADBench LSTM file (whitespace separated; blank lines ignored)."""
    tokens = Path(path).read_text().split()
    layers, steps, width = (int(t) for t in tokens[:3])
    values = np.array([float(t) for t in tokens[3:]], dtype=np.float64)
    sizes = [2 * layers * 4 * width, 3 * width, 2 * layers * width, steps * width]
    if len(values) != sum(sizes):
        raise ValueError(f"{path}: expected {sum(sizes)} numbers after the header "
                         f"'{layers} {steps} {width}', found {len(values)}")
    main, extra, state, sequence = np.split(values, np.cumsum(sizes)[:-1])
    return LstmInput(layers, steps, width, main.reshape(2 * layers, 4 * width),
                     extra.reshape(3, width), state.reshape(2 * layers, width),
                     sequence.reshape(steps, width))


def truncated(inp: LstmInput, steps: int) -> LstmInput:
    """The same problem on the first `steps` elements of the sequence (for tests)."""
    return dataclasses.replace(inp, steps=steps, sequence=inp.sequence[:steps].copy())


def _sigmoid(xp: Any, x: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-x))


def _cell(xp: Any, weight: Any, bias: Any, hidden: Any, cell: Any, x: Any,
          b: int) -> tuple[Any, Any]:
    """One layer's step; returns the new (hidden, cell)."""
    # (x, h, x, h) against the four gate blocks, as one 4b-wide product.
    gates = xp.concatenate([x, hidden, x, hidden]) * weight + bias
    sig = _sigmoid(xp, gates[:3 * b])
    change = xp.tanh(gates[3 * b:])
    cell = cell * sig[:b] + sig[b:2 * b] * change
    hidden = sig[2 * b:3 * b] * xp.tanh(cell)
    return hidden, cell


def objective(xp: Any, main: Any, extra: Any, state: Any, sequence: Any,
              scan: Callable[..., tuple[Any, Any]] | None = None) -> Any:
    """The loss for main (2l, 4b), extra (3, b), state (2l, b), sequence (c, b).

    Uses only indexing of leading axes, slicing, concatenate, exp, log, tanh
    and sum, so numpy, mlir_autodiff.numpy, jax.numpy and a thin torch
    adapter all run it. `scan` runs the time loop; by default the one of
    `xp` (`scan_for`): a loop op for our tracer and JAX, a Python loop for
    numpy and torch. Pass `python_scan` to unroll a traced loop.
    """
    if scan is None:
        scan = scan_for(xp)
    layers = main.shape[0] // 2
    b = sequence.shape[1]
    steps = sequence.shape[0]
    scale_in, scale_out, shift_out = extra[0], extra[1], extra[2]

    def step(carry: Any, xs: tuple[Any, Any]) -> tuple[Any, None]:
        hidden, cells, total = carry
        current, following = xs
        x = current * scale_in
        new_hidden, new_cells = [], []
        for k in range(layers):
            h, c = _cell(xp, main[2 * k], main[2 * k + 1], hidden[k], cells[k], x, b)
            new_hidden.append(h)
            new_cells.append(c)
            x = h
        y = x * scale_out + shift_out
        ynorm = y - xp.log(2.0 + xp.sum(xp.exp(y)))
        return (new_hidden, new_cells, total + xp.sum(following * ynorm)), None

    hidden = [state[2 * k] for k in range(layers)]
    cells = [state[2 * k + 1] for k in range(layers)]
    zero = xp.sum(sequence[0] * 0.0)  # a 0-d array of the data's type (scan carries it)
    (_, _, total), _ = scan(step, (hidden, cells, zero), (sequence[:-1], sequence[1:]))
    return -total / ((steps - 1) * b)


def reference(inp: LstmInput) -> float:
    """The loss in float64 with explicit scalar loops (an independent form)."""
    b = inp.width
    hidden = [list(inp.state[2 * k]) for k in range(inp.layers)]
    cells = [list(inp.state[2 * k + 1]) for k in range(inp.layers)]
    total = 0.0
    for t in range(inp.steps - 1):
        x = [inp.sequence[t, i] * inp.extra[0, i] for i in range(b)]
        for k in range(inp.layers):
            w, bias = inp.main[2 * k], inp.main[2 * k + 1]
            for i in range(b):
                forget = 1 / (1 + math.exp(-(x[i] * w[i] + bias[i])))
                ingate = 1 / (1 + math.exp(-(hidden[k][i] * w[b + i] + bias[b + i])))
                outgate = 1 / (1 + math.exp(-(x[i] * w[2 * b + i] + bias[2 * b + i])))
                change = math.tanh(hidden[k][i] * w[3 * b + i] + bias[3 * b + i])
                cells[k][i] = cells[k][i] * forget + ingate * change
                hidden[k][i] = outgate * math.tanh(cells[k][i])
            x = hidden[k]
        y = [x[i] * inp.extra[1, i] + inp.extra[2, i] for i in range(b)]
        lse = math.log(2 + sum(math.exp(v) for v in y))
        total += sum(inp.sequence[t + 1, i] * (y[i] - lse) for i in range(b))
    return -total / ((inp.steps - 1) * b)
