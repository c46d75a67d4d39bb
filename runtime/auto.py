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

    def times(self, cap: int) -> list:
        """[T(0) .. T(cap)]: measured means, linear between measured k, and beyond them the slope of the two
        nearest (0.1 T per token while fewer than two are measured)."""
        known = sorted((j, m.get()) for j, m in self.target.items())
        if not known:
            return [1.0 + 0.1 * k for k in range(cap + 1)]
        out = []
        for k in range(cap + 1):
            below = [(j, t) for j, t in known if j <= k]
            above = [(j, t) for j, t in known if j >= k]
            if below and above:
                (j0, t0), (j1, t1) = below[-1], above[0]
                out.append(t0 if j1 == j0 else t0 + (t1 - t0) * (k - j0) / (j1 - j0))
                continue
            pair = known[-2:] if below else known[:2]
            if len(pair) == 2 and pair[1][0] > pair[0][0]:
                slope = max((pair[1][1] - pair[0][1]) / (pair[1][0] - pair[0][0]), 0.0)
            else:
                slope = 0.1 * pair[0][1] / (1 + 0.1 * pair[0][0])
            j0, t0 = pair[-1] if below else pair[0]
            out.append(max(t0 + slope * (k - j0), 1e-6))
        return out

    def alpha(self, source: str) -> float:
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        return acc / (acc + rej)

    def cost_per_guess(self, source: str, free: bool, t0: float) -> float:
        mean = self.cost.get(source)
        if mean is not None:
            return max(mean.get(0.0), 0.0)
        return 0.0 if free else PRIOR_C * t0

    def best(self, source: str, gammas, free: bool, times: list) -> tuple[float, int]:
        """(expected tokens per second, gamma) of the best gamma in `gammas` for `source`."""
        host, alpha = self.host.get(0.0), self.alpha(source)
        c = self.cost_per_guess(source, free, times[0])
        return max((expected_tokens(alpha, g) / (times[g] + host + g * c), g) for g in gammas)

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
        self._copied = []

    def start(self, source_ids, stats):
        for source in self.candidates.values():
            source.start(source_ids, stats)

    def choose(self, ws, cap: int) -> tuple[str, int]:
        """(source name or "none", gamma) for this round."""
        est = self.estimates
        est.round += 1
        self._copied = self.lookup.guesses(ws, cap) if self.lookup is not None else []
        copied = len(self._copied)
        times = est.times(cap)
        best, best_rate = ("none", 0), 1.0 / (times[0] + est.host.get(0.0))
        stale = None
        for name, source in self.candidates.items():
            uses_lookup = self.lookup is not None and (source is self.lookup or _below(source) is self.lookup)
            if uses_lookup and not copied:
                continue
            free = source is self.lookup
            top = min(cap, copied) if free else cap
            rate, g = est.best(name, range(1, top + 1) if (self.adaptive or free) else (top,), free, times)
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
        self._mark, self._stats = (name, time.perf_counter(), stats.target_s, stats.encoder_s), stats
        if gamma == 0:
            self.chosen = None
            return Proposal(0, source="none")
        self.chosen = self.candidates[name]
        if self.chosen is self.lookup:               # already looked up by choose()
            ws.write_point_guesses(self._copied[:gamma])
            return Proposal(gamma, True, name)
        proposal = self.chosen.propose(ws, gamma, rows, row, stats)
        return Proposal(proposal.count, proposal.point_mass, name)

    def commit(self, ws, verdict: Verdict):
        """Pass the verdict to the chosen source, and fold the round's outcome and costs into the estimates."""
        if self.chosen is not None and verdict.proposed:
            self.chosen.commit(ws, verdict)
        name, began, target_before, encoder_before = self._mark
        stats = self._stats
        target_s = stats.target_s - target_before
        encoder_s = stats.encoder_s - encoder_before           # a model draft encodes on its first use
        other = time.perf_counter() - began - target_s - encoder_s
        self.estimates.learn(name if verdict.proposed else "none", verdict.proposed, verdict.accepted, target_s,
                             other)


def _below(source):
    return getattr(source, "below", None)
