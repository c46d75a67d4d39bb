"""Draft sources: anything that proposes up to k guesses with their distributions q, then learns the verdict.

The contract (runtime/round.py): `propose` writes x_1 .. x_k and q_1 .. q_k into the workspace and returns a
Proposal (k may be smaller than asked, 0 on a miss); `commit` gets the target's Verdict. A new kind of draft
(n-gram lookup, a chain of models) is a new class here, not a new decoding loop."""

from __future__ import annotations

import numpy as np

from .model import CachedSeq2Seq
from .round import Proposal, Verdict
from .stats import Stats
from .workspace import Workspace


class DraftSource:
    name = "draft"

    def start(self, source_ids: np.ndarray, stats: Stats) -> None:
        """A new request: prepare for the prompt (the target's decoder sequence starts empty)."""
        raise NotImplementedError

    def propose(self, ws: Workspace, k: int, stats: Stats) -> Proposal:
        """Write up to k guesses x_i and their q_i into the workspace."""
        raise NotImplementedError

    def commit(self, ws: Workspace, verdict: Verdict) -> None:
        """The target kept verdict.accepted of the proposed guesses."""
        raise NotImplementedError


class ModelDraft(DraftSource):
    """A small T5 export: k autoregressive steps, each one run (decoder + sampling head) that writes x_{i+1}
    straight into the target's verify input and q_{i+1} into the q rows."""

    name = "model"

    def __init__(self, model: CachedSeq2Seq):
        self.model = model
        self.behind = 0       # 1 when the last round kept every guess: x_k is in `carry`, not yet in our cache

    def start(self, source_ids, stats):
        self.model.encode(source_ids, stats)
        self.behind = 0

    def propose(self, ws, k, stats):
        for i in range(k):
            stats.draft_s += self.model.run(*ws.draft_step(i, self.behind if i == 0 else 0))
        stats.draft_calls += k
        stats.ort_runs += k
        return Proposal(k)

    def commit(self, ws, verdict):
        k, n = verdict.proposed, verdict.accepted
        assert k >= 1, "a model draft always proposes"
        # our cache holds the round's first token and x_1 .. x_{k-1}; the sequence now has it and x_1 .. x_n
        self.model.rollback(self.model.length - k + n + 1 if n < k else self.model.length)
        self.behind = int(n == k)
        if n == k:            # x_k was never fed to the draft: it goes in first next round
            ws.carry(verdict.tokens[k - 1])
