"""draft="auto" / gamma="auto": each round, pick the source and gamma with the most expected tokens per second.

For a source s proposing gamma guesses, Theorem 3.1 gives E[tokens] = (1 - a_s^(gamma+1)) / (1 - a_s) and the
round costs T(gamma) + h + c_s gamma: T(k) the measured target run over k+1 tokens (so the verify cost per extra
token is measured, not assumed 1), h the host time of a round, c_s what s spends per guess (a draft model's steps,
a chain's runs; ~0 for a lookup). gamma = 0 (target only) scores 1 / (T(0) + h). The choice is the best
score over the sources available this round (a lookup only when it matches, and at most as many guesses as it
copied) and gamma in 1 .. the cap: Theorem 3.8 with measured costs instead of a constant c.

Estimates are running averages learned from every round (a per-guess alpha_s = accepted / (accepted + rejections),
decayed so a change of text is followed), kept across the requests of a decoder (`reset()` forgets them). A
source not chosen for EXPLORE rounds is tried once, so a source that was unlucky early is measured again.
"""

from __future__ import annotations

import time

from .draft import DraftSource
from .lookup import LookupDraft
from .round import Proposal, Verdict
from .stats import Stats

EXPLORE = 48          # rounds after which an unchosen source is tried once more
DECAY = 0.97          # weight of the past per observation in the running averages
PRIOR_ALPHA = (1.0, 1.0)   # pseudo accepted / rejections of a source never seen: alpha = 0.5
PRIOR_C = 0.15        # a model draft's cost per guess before it is measured, as a fraction of T(0)


def expected_tokens(alpha: float, gamma: int) -> float:
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


class _Mean:
    """A decayed running mean that starts from a prior weight."""

    def __init__(self, value: float | None = None, weight: float = 0.0):
        self.total, self.weight = (value or 0.0) * weight, weight

    def add(self, value: float) -> None:
        self.total = self.total * DECAY + value
        self.weight = self.weight * DECAY + 1

    def get(self, default=None):
        return self.total / self.weight if self.weight > 0 else default


class Estimates:
    """What the choice learns: target run time per k, host time per round, and per source alpha and cost/guess."""

    def __init__(self):
        self.target = {}            # k -> _Mean of the target run's seconds over k+1 tokens
        self.host = _Mean()         # seconds per round outside target runs, target-only rounds
        self.counts = {}            # source -> [accepted, rejections], decayed, from the prior pseudo-counts
        self.round = 0
        self.cost = {}              # source -> _Mean of seconds per guess beyond the host time
        self.last_chosen = {}       # source -> round number

    def t(self, k: int) -> float:
        """T(k), interpolated linearly between measured k (the slope of the two nearest ends outside them)."""
        known = sorted((j, m.get()) for j, m in self.target.items())
        if not known:
            return 1.0 + 0.1 * k
        for (j0, t0), (j1, t1) in zip(known, known[1:]):
            if j0 <= k <= j1:
                return t0 + (t1 - t0) * (k - j0) / (j1 - j0)
        if len(known) == 1:
            j0, t0 = known[0]
            return t0 * (1 + 0.1 * (k - j0)) if k >= j0 else t0 / (1 + 0.1 * (j0 - k))
        (j0, t0), (j1, t1) = (known[:2] if k < known[0][0] else known[-2:])
        slope = max((t1 - t0) / (j1 - j0), 0.0)
        return max(t0 + slope * (k - j0), 1e-6)

    def alpha(self, source: str) -> float:
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        return acc / (acc + rej)

    def cost_per_guess(self, source: str, free: bool) -> float:
        mean = self.cost.get(source)
        if mean is not None:
            return max(mean.get(0.0), 0.0)
        return 0.0 if free else PRIOR_C * self.t(0)

    def rate(self, source: str, gamma: int, free: bool) -> float:
        host = self.host.get(0.0)
        if gamma == 0:
            return 1.0 / (self.t(0) + host)
        cost = self.t(gamma) + host + gamma * self.cost_per_guess(source, free)
        return expected_tokens(self.alpha(source), gamma) / cost

    def learn(self, source: str, proposed: int, accepted: int, target_s: float, other_s: float) -> None:
        self.target.setdefault(proposed, _Mean()).add(target_s)
        if proposed == 0:
            self.host.add(other_s)
            return
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        self.counts[source] = [acc * DECAY + accepted, rej * DECAY + float(accepted < proposed)]
        self.cost.setdefault(source, _Mean()).add((other_s - self.host.get(0.0)) / proposed)


class AutoDraft(DraftSource):
    """Chooses among `candidates` (name -> DraftSource; a LookupDraft among them is probed every round) and gamma
    (every gamma up to the cap when `adaptive`, else exactly the cap for a model source)."""

    name = "auto"

    def __init__(self, candidates: dict, estimates: Estimates, adaptive: bool = True):
        self.candidates, self.estimates, self.adaptive = candidates, estimates, adaptive
        self.lookup = next((s for s in candidates.values() if isinstance(s, LookupDraft)), None)
        self.chosen: DraftSource | None = None
        self._mark = self._stats = None

    def start(self, source_ids, stats):
        for source in self.candidates.values():
            source.start(source_ids, stats)

    def choose(self, ws, cap: int) -> tuple[str, int]:
        """(source name or "none", gamma) for this round."""
        est = self.estimates
        est.round += 1
        copied = len(self.lookup.guesses(ws, cap)) if self.lookup is not None else 0
        best, best_rate = ("none", 0), est.rate("none", 0, True)
        stale = None
        for name, source in self.candidates.items():
            uses_lookup = self.lookup is not None and (source is self.lookup or _below(source) is self.lookup)
            if uses_lookup and not copied:
                continue
            free = source is self.lookup
            top = min(cap, copied) if free else cap
            gammas = range(1, top + 1) if (self.adaptive or free) else (top,)
            for g in gammas:
                rate = est.rate(name, g, free)
                if rate > best_rate:
                    best, best_rate = (name, g), rate
            if est.round - est.last_chosen.get(name, est.round - EXPLORE) >= EXPLORE and top >= 1:
                stale = (name, top if not self.adaptive or free else max(1, min(top, 2)))
        if stale is not None and stale[0] != best[0]:
            best = stale
        est.last_chosen[best[0]] = est.round
        return best

    def propose(self, ws, k, rows, row, stats: Stats):
        name, gamma = self.choose(ws, k)
        self._mark, self._stats = (name, time.perf_counter(), stats.target_s), stats
        if gamma == 0:
            self.chosen = None
            return Proposal(0, source="none")
        self.chosen = self.candidates[name]
        proposal = self.chosen.propose(ws, gamma, rows, row, stats)
        return Proposal(proposal.count, proposal.point_mass, name)

    def commit(self, ws, verdict: Verdict):
        """Pass the verdict to the chosen source, and fold the round's outcome and costs into the estimates."""
        if self.chosen is not None and verdict.proposed:
            self.chosen.commit(ws, verdict)
        name, began, target_before = self._mark
        target_s = self._stats.target_s - target_before
        other = time.perf_counter() - began - target_s
        self.estimates.learn(name if verdict.proposed else "none", verdict.proposed, verdict.accepted, target_s,
                             other)


def _below(source):
    return getattr(source, "below", None)
