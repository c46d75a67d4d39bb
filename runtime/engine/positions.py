"""The target graph's tree inputs for a run that verifies no tree: N new tokens in a chain.

A target decoder takes `tree_depth` [N] (new token i sits at position past + depth_i), `tree_mask` [N, N]
(token i sees token j iff j is i or an ancestor) and `tree_uniforms` [M] (M > 0: one draw per head row, the `draws`
output; runtime/decoding/sources/tree.py). Every other run (a plain step, a chain's verification, a catch-up run, beam
search) binds the chain's values: depth 0 .. N-1, a lower-triangular mask, no uniforms and an empty `draws`. They
are made once, for every N up to the most a run of this model holds, and grown if a run holds more.
"""

from __future__ import annotations

import numpy as np

from ..core.graph_io import TREE_INPUTS, TREE_OUTPUTS
from .device import Binder, Buffer

DEPTH, MASK, UNIFORMS = TREE_INPUTS       # on the target decoder only
(DRAWS,) = TREE_OUTPUTS


class ChainPositions:
    def __init__(self, device: str, most: int = 1):
        self.device, self.most = device, 0
        self.nothing = Buffer((1,), np.float32, device)      # zero-size views: no tree uniforms
        self.no_draws = Buffer((1,), np.int64, device)
        self._grow(max(most, 1))

    def _grow(self, most: int) -> None:
        self.most = most
        self.depth = Buffer((most,), np.int64, self.device)
        self.depth.write(np.arange(most))
        self.offsets = np.concatenate([[0], np.cumsum(np.arange(1, most + 1) ** 2)])   # the [N, N] masks, N = 1..
        masks = [np.tril(np.ones((n, n), np.bool_)).reshape(-1) for n in range(1, most + 1)]
        self.masks = Buffer((int(self.offsets[-1]),), np.bool_, self.device)
        self.masks.write(np.concatenate(masks))

    def bind(self, binder: Binder, count: int) -> None:
        """Bind the chain's tree inputs for a run of `count` new tokens (a graph without them: nothing)."""
        if DEPTH not in binder.names:
            return
        if count > self.most:
            self._grow(max(count, 2 * self.most))
        binder.input(DEPTH, self.depth, (count,))
        binder.input(MASK, self.masks, (count, count), int(self.offsets[count - 1]))
        binder.input(UNIFORMS, self.nothing, (0,))
        if DRAWS in binder.outputs:
            binder.output(DRAWS, self.no_draws, (0,))
