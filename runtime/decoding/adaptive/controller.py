"""The one type every adaptive choice of gamma is: `GammaController`.

Three choices learn gamma from what the rounds measure: auto's choice of source and gamma for sampling
(sources/auto.py AutoDraft, over its Estimates), beam search's gamma (strategies/beam_search.py BeamEstimates) and
the switch between measured rounds and plain target steps (adaptive/switch.py Switch: a request's under auto, and a
batch's between lookup rounds and plain rounds). Each is a GammaController: `choose` gives the next round's gamma
(0: a plain target step) at most `cap`, `learn` folds a measured round in, `explored` counts the rounds that ran
another choice than the one the estimates' means make (exploration). What each learns lives in the decoder's one
Learned object (decoding/learned.py), so `reset()` and `learned=` cover all three.

What they share is this interface and its exploration rule (estimators.py: each option runs in proportion to the
chance that it is the best); what they measure and how they decide is each one's own, since each is measured on
other work: auto's choice rates every source and gamma from per-guess acceptance and fitted costs (Theorem 3.1 and
3.8, with Thompson draws), beam search rates each gamma by its measured round seconds and one replay rate, and the
switch compares the wall seconds per token of two modes, interleaved round by round. A controller's `choose` takes
what its strategy knows at the round's start besides the cap (auto: the workspace, which the lookup is probed in;
beam search: the beam width; the switch: the tokens made so far), and `learn` what a round measured.
"""

from __future__ import annotations


class GammaController:
    """An adaptive choice of gamma: `choose(cap, ...)` -> the next round's gamma, 0 (a plain target step) to `cap`
    (auto's choice: with the source that proposes it); `learn(...)` folds a measured round in; `explored`: rounds
    whose choice explored (not what the estimates' means choose)."""

    explored = 0

    def choose(self, cap: int, *context):
        """The next round's gamma, 0 (a plain target step) to `cap`."""
        raise NotImplementedError

    def learn(self, *measured) -> None:
        """Fold a measured round into what the controller knows."""
        raise NotImplementedError

    def _chose(self, pick, best):
        """Count a choice `pick` that differs from `best` (the estimates' means' choice) as exploring; returns pick."""
        if pick != best:
            self.explored += 1
        return pick
