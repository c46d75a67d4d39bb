"""Per-decoder device buffers shared by the draft, the target and the samplers (allocated once at load)."""

from __future__ import annotations

import numpy as np

from .device import Buffer


class Workspace:
    """tokens: [carry, current, x_1 .. x_gamma_max]. `current` is the last emitted token (not yet in any cache);
    the draft writes its guesses after it, so tokens[1 : gamma+2] is exactly the target's verify input, and the
    verify graph writes the next token back into tokens[1]. `carry` holds x_gamma when every guess was kept and
    the draft still has to see it."""

    CARRY, CURRENT, FIRST_GUESS = 0, 1, 2

    def __init__(self, gamma_max: int, vocab: int, device: str):
        self.tokens = Buffer((gamma_max + 2,), np.int64, device)
        self.uniforms = Buffer((2 * gamma_max + 1,), np.float32, device)   # gamma for drafting, gamma+1 to verify
        self.probs = Buffer((gamma_max, vocab), np.float32, device)        # q_1 .. q_gamma, never leave the device
        self.accepted = Buffer((1,), np.int64, device)
        self.rng = np.random.default_rng(0)

    def reset(self, start_token: int, seed: int) -> None:
        self.tokens.write([start_token, start_token])
        self.rng = np.random.default_rng(seed)

    def draw_uniforms(self, count: int) -> None:
        self.uniforms.write(self.rng.random(count, dtype=np.float32))
