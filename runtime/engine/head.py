"""The speculative head's graph inputs and outputs (core/graph_io.py: HEAD_INPUTS, HEAD_OUTPUTS), bound the same
way by every runner: the single-row round (workspace.py), batches (batch_model.py) and beam search (beam_model.py).

The head fused into every decoder graph samples or verifies inside the run (export/head.py). It reads

    draft_probs   q rows [G, V] (a batch: [B, G, V]); zero rows when there are no guesses
    uniforms      r ~ U(0,1) [G+1] (a batch: [B, G+1])
    temperature, top_k, top_p, lenience   the request's sampling parameters (SAMPLING): one value for every row,
                  or one per batch row
    logit_mask    0 / -inf per token for the run's rows [rows, V]; zero rows: no mask

and writes `probs` (the standardized rows), `accepted` (the kept count) and `next_token`. The sampling parameters
live in device buffers owned here, one element per row, written once per request (or per batch row); everything
else is a view of a buffer the runner owns, so a round's verdict lands in the runner's token buffer and only the
kept count and the next token come back to the host.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.graph_io import (ACCEPTED, DRAFT_PROBS, LENIENCE, LOGIT_MASK, NEXT_TOKEN, PROBS, SAMPLING, TEMPERATURE,
                             TOP_K, TOP_P, UNIFORMS)
from .device import Buffer

# greedy and unfiltered: what a row that holds no request (a batch's idle row) and beam search sample with, so that
# the head never takes its sampling or filtering branch for them
IDLE = {TEMPERATURE: 0.0, TOP_K: 0, TOP_P: 1.0, LENIENCE: 1.0}


class View(NamedTuple):
    """What a graph input or output is bound to: `shape` elements of `buffer` from element `offset` on (the binder
    checks that it lies inside the buffer: device.Binder)."""
    buffer: Buffer
    shape: tuple
    offset: int = 0


class Head:
    """The head's bindings for up to `rows` rows: the sampling parameters (one device element per row, idle until a
    request's are written) and the views of one run's inputs and outputs, by their graph names."""

    def __init__(self, rows: int, vocab: int, device: str):
        self.rows, self.vocab = rows, vocab
        self.sampling = {name: Buffer((rows,), dtype, device, host_only=True) for name, dtype in SAMPLING.items()}
        # zeros: zero-row q and mask views, a greedy uniform
        self.none = Buffer((1, vocab), np.float32, device, host_only=True)
        for name, buf in self.sampling.items():
            buf.write(np.full(rows, IDLE[name]))

    def set(self, params=None, row: int = 0) -> None:
        """Row `row` samples with `params` (core/params.Params, whose fields are named like the inputs), or idles
        (None)."""
        for name, buf in self.sampling.items():
            buf.write([IDLE[name] if params is None else getattr(params, name)], row)

    def reorder(self, rows: list, count: int) -> None:
        """Row i takes the parameters of row rows[i]; rows len(rows) .. count-1 idle (a batch laid out anew)."""
        for name, buf in self.sampling.items():
            values = np.full(count, IDLE[name], buf.dtype)
            values[:len(rows)] = buf.flat()[rows]
            buf.write(values)

    def inputs(self, q: View | None = None, uniforms: View | None = None, mask: View | None = None,
               rows: int = 1) -> dict:
        """The head's inputs: q rows (None: no guesses), uniforms (None: one zero, a greedy run's), the logits mask
        (None: none) and the sampling parameters of rows 0 .. rows-1 (1: row 0's for every row)."""
        none = View(self.none, (0, self.vocab))
        return {DRAFT_PROBS: none if q is None else q,
                UNIFORMS: View(self.none, (1,)) if uniforms is None else uniforms,
                **{name: View(buf, (rows,)) for name, buf in self.sampling.items()},
                LOGIT_MASK: none if mask is None else mask}

    @staticmethod
    def outputs(probs: View, accepted: View, next_token: View) -> dict:
        """The head's outputs: the standardized rows, the kept count(s), the next token(s)."""
        return {PROBS: probs, ACCEPTED: accepted, NEXT_TOKEN: next_token}
