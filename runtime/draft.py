"""Draft sources: anything that proposes gamma guesses with their distributions, then learns how many were kept.

A new kind of draft (n-gram lookup, a hierarchical draft) is a new class here, not a new decoding loop."""

from __future__ import annotations

import numpy as np

from .model import CachedSeq2Seq
from .sampler import Samplers
from .stats import Stats
from .workspace import Workspace


class DraftSource:
    def start(self, source_ids: np.ndarray, stats: Stats) -> None:
        """A new request: prepare for the prompt."""
        raise NotImplementedError

    def propose(self, ws: Workspace, gamma: int, sequence_length: int, stats: Stats) -> None:
        """Write guesses into ws.tokens[2 : 2+gamma] and their distributions q_i into ws.probs[:gamma]."""
        raise NotImplementedError

    def accepted(self, ws: Workspace, n: int, gamma: int, sequence_length: int, host_tokens: np.ndarray) -> None:
        """The target kept n guesses; the sequence (without the next token) is now `sequence_length` long."""
        raise NotImplementedError


class ModelDraft(DraftSource):
    """The small T5: gamma autoregressive one-token steps, each sampled on the device with the draft sampler."""

    def __init__(self, model: CachedSeq2Seq, samplers: Samplers):
        self.model, self.samplers = model, samplers

    def start(self, source_ids, stats):
        self.model.encode(source_ids, stats)

    def propose(self, ws, gamma, sequence_length, stats):
        behind = sequence_length - self.model.length        # 1 when the last round kept every guess
        assert behind in (0, 1), "draft cache out of step with the target"
        for i in range(gamma):
            offset, count = (ws.CURRENT - behind, 1 + behind) if i == 0 else (ws.CURRENT + i, 1)
            stats.draft_s += self.model.decode(ws.tokens, offset, count)
            stats.sampling_s += self.samplers.sample(self.model.logits, count - 1, ws.uniforms, i, ws.probs, i,
                                                     ws.tokens, ws.FIRST_GUESS + i)
        stats.draft_calls += gamma
        stats.ort_runs += 2 * gamma

    def accepted(self, ws, n, gamma, sequence_length, host_tokens):
        self.model.rollback(sequence_length)
        if n == gamma:   # x_gamma was never fed to the draft: it goes in first next round
            ws.tokens.write([host_tokens[ws.FIRST_GUESS + gamma - 1]], ws.CARRY)
