"""candidates=0 (auto): how many continuations a lookup round verifies in one target run (B = 1, 2 or 4).

What B candidates would make is measured without running them: a round's outcome is the longest candidate prefix
that the target's draws follow, plus one token, and the tokens a round made are those draws. So after a round
that looked up B_max candidates, candidate j would have kept matched(c_j, tokens) tokens, and B candidates about
1 + max over j < B of that: exact for the candidates that ran, a lower bound for the others (the round stopped
where they might have gone on), so width is never credited with more than it would make. Every SAMPLE-th lookup
round of a decoder looks up B_max candidates for this (a datastore search, tens of microseconds: off the hot path
in the other rounds) and still runs what was chosen.

The cost side is measured too: the seconds of every lookup round's target run against its tokens (a line, as
auto's T(k), runtime/decoding/sources/auto.py), and the host time of looking up the extra candidates. Every REFIT rounds
the choice is the B with the most expected tokens per second, B > 1 only when it beats B = 1 by MARGIN and after
MIN_SAMPLES measured rounds. On this CPU a wider run costs nearly what its tokens do, so the choice stays 1
(benchmarks/README.md); on a device where a run of 20 tokens costs what one does, it widens.
"""

from __future__ import annotations

from .auto import DECAY, FIT_DECAY, MARGIN, PRIOR_WEIGHT, REFIT
from ..adaptive.estimators import Line, Mean
from .tree import Tree, allocate, matched

WIDTHS = (1, 2, 4)
SAMPLE = 8           # every SAMPLE-th lookup round measures what max(WIDTHS) candidates would make
MIN_SAMPLES = 24     # measured rounds before a width above 1 may be chosen


class Width:
    def __init__(self):
        self.made = {b: Mean(DECAY) for b in WIDTHS}      # tokens a round of b candidates makes
        self.nodes = {b: Mean(DECAY) for b in WIDTHS}     # tree nodes it verifies
        self.extra = {b: Mean(DECAY) for b in WIDTHS}     # host seconds looking up its extra candidates
        self.cost = Line(FIT_DECAY)                           # target run seconds by nodes verified
        self.samples = self.rounds = 0
        self.choice = 1
        self.measuring = False      # this round looked up max(WIDTHS) candidates to learn from

    def wanted(self) -> int:
        """Candidates to look up this round: the choice, or max(WIDTHS) on a measuring round."""
        self.rounds += 1
        if self.rounds % REFIT == 0:
            self._refit()
        self.measuring = self.rounds % SAMPLE == 0 or self.choice == WIDTHS[-1]
        return WIDTHS[-1] if self.measuring else self.choice

    def learn(self, candidates: list, tokens: list, limit: int, seconds: float, nodes: int,
              extra_s: float) -> None:
        """A lookup round: the `candidates` it looked up (best first, max(WIDTHS) of them on a measuring round),
        what it made, its run's `seconds` over `nodes` verified, the host seconds of the extra lookups."""
        self.cost.add(nodes, seconds)
        if not candidates or not self.measuring:
            return
        self.measuring = False
        self.samples += 1
        for b in WIDTHS:
            some = allocate(candidates[:b], limit)
            self.made[b].add(1 + max(matched(c, tokens) for c in some))
            self.nodes[b].add(Tree(some, limit).size)
            self.extra[b].add(extra_s if b > 1 else 0.0)

    def _refit(self) -> None:
        if self.samples < MIN_SAMPLES:
            self.choice = 1
            return
        w, sx, _, sy, _ = self.cost.sums
        mean_t, mean_x = sy / w, sx / w
        a, b = self.cost.fit(lambda x: mean_t * (1 + 0.1 * (x - mean_x)), PRIOR_WEIGHT, (1, 8))
        rates = {k: self.made[k].get(1.0) / max(a + b * self.nodes[k].get(1.0) + self.extra[k].get(0.0), 1e-9)
                 for k in WIDTHS}
        best = max(WIDTHS, key=lambda k: rates[k])
        self.choice = best if rates[best] > rates[1] * (1 + MARGIN) else 1
