"""draft="auto" / gamma="auto": each round, pick the source and gamma with the most expected tokens per second.

For a source s proposing gamma guesses, Theorem 3.1 gives E[tokens] = (1 - a_s^(gamma+1)) / (1 - a_s) and the
round costs T(gamma) + h + c_s gamma: T(k) the measured target run over k+1 tokens (so the verify cost per extra
token is measured, not assumed 1), h the host time of a round, c_s what s spends per guess (a draft model's steps,
a chain's runs; ~0 for a lookup). gamma = 0 (target only) scores 1 / (T(0) + h). The choice is the best
score over the sources available this round (a lookup only when it matches, and at most as many guesses as it
copied) and gamma in 1 .. the cap: Theorem 3.8 with measured costs instead of a constant c.

Estimates are running averages learned from every round (a per-guess alpha_s = accepted / (accepted + rejections),
decayed so a change of text is followed), kept across the requests of a decoder (`SpeculativeDecoder.reset_estimates()` forgets them). A
source not chosen for EXPLORE rounds is tried once, so a source that was unlucky early is measured again.
"""

from __future__ import annotations

import time

from .lookup import LookupDraft
from .round import DraftSource, Proposal, Verdict
from .stats import Stats

PREFER_COPY = True    # when the lookup matches, choose among copying sources only (see below)
EXPLORE = 100         # rounds after which an unchosen source is tried once more
DECAY = 0.97          # weight of the past per observation in the running averages
PRIOR_ALPHA = (1.0, 1.0)   # pseudo accepted / rejections of a source never seen: alpha = 0.5
REQUEST_PRIOR = 4.0   # observations the all-request alpha counts for against a request's own
PRIOR_C = 0.15        # a model draft's cost per guess before it is measured, as a fraction of T(0)
PRIOR_SLOPE = 0.1     # T(k) = a (1 + 0.1 k) before the slope is measured
PRIOR_WEIGHT = 0.5    # pseudo-runs that hold the slope to the prior while runs cover one k only
FIT_DECAY = 0.995     # the line fits remember ~200 rounds
REFIT = 16            # rounds between refits of the lines
SOURCE_PRIOR_WEIGHT = 1.0   # pseudo-rounds on the sum-of-parts line in a source's round-cost fit


def expected_tokens(alpha: float, gamma: int) -> float:
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


class _Mean:
    """A decayed running mean."""

    def __init__(self):
        self.total = self.weight = 0.0

    def add(self, value: float) -> None:
        self.total = self.total * DECAY + value
        self.weight = self.weight * DECAY + 1

    def get(self, default=None):
        return self.total / self.weight if self.weight > 0 else default


class _Line:
    """Decayed least squares of y = a + b x, b >= 0, with pseudo-observations on a prior line (they decide while the
    data cannot: no data, or data at one x only)."""

    def __init__(self):
        self.sums = [0.0] * 5       # decayed w, sum x, sum x^2, sum y, sum x y

    def add(self, x: float, y: float) -> None:
        w, sx, sxx, sy, sxy = self.sums
        d = FIT_DECAY
        self.sums = [w * d + 1.0, sx * d + x, sxx * d + x * x, sy * d + y, sxy * d + x * y]

    def fit(self, prior, weight: float, at) -> tuple[float, float]:
        w, sx, sxx, sy, sxy = self.sums
        for x in at:
            y = prior(x)
            w, sx, sxx, sy, sxy = w + weight, sx + weight * x, sxx + weight * x * x, sy + weight * y, sxy + weight * x * y
        det = w * sxx - sx * sx
        b = max((w * sxy - sx * sy) / det, 0.0) if det > 1e-12 else 0.0
        return (sy - b * sx) / w, b


class Estimates:
    """What the choice learns: the target run's time by k, host time per round, and per source its per-guess alpha,
    its cost per guess and the wall time of its rounds by gamma."""

    def __init__(self):
        self.target = _Line()       # target run seconds over k+1 tokens, by k
        self.host = _Mean()         # seconds per round outside target runs, target-only rounds
        self.counts = {}            # source -> [accepted, rejections], decayed, from the prior pseudo-counts
        self.round = 0
        self.cost = {}              # source -> _Mean of seconds per guess beyond the host time
        self.rounds = {}            # source -> _Line of a round's wall seconds by gamma
        self.encoder = {}           # source -> _Mean of the encoder seconds its first use in a request costs
        self.request_tokens = _Mean()   # tokens per request
        self.last_chosen = {}       # source -> round number
        self._fits = None           # (cap, round, T(0..cap), {source: (a, b)}): refitted every REFIT rounds
        self.version = 0            # bumped whenever what a source's rate depends on changes (not by target-only
        #                             rounds: they move T and h a little, and the next refit takes them in)

    def times(self, cap: int) -> list:
        """[T(0) .. T(cap)] from the line T(k) = a + b k fitted to every measured target run (decayed least
        squares: single runs are noisy, and a k rarely chosen would otherwise be judged by one or two samples); the
        slope is pulled towards 0.1 a (PRIOR_SLOPE) while the runs cannot tell it (all at one k)."""
        w, sk, _, st, _ = self.target.sums
        if w <= 0:
            return [1.0 + PRIOR_SLOPE * k for k in range(cap + 1)]
        mean_t, mean_k = st / w, sk / w
        a, b = self.target.fit(lambda k: mean_t * (1 + PRIOR_SLOPE * (k - mean_k)), PRIOR_WEIGHT, (0, 8))
        return [max(a + b * k, 1e-6) for k in range(cap + 1)]

    def round_cost(self, source: str, free: bool, times: list) -> tuple[float, float]:
        """(a, b): a round of `source` with gamma guesses costs a + b gamma seconds, all in (draft runs, the target
        run, host work, and what they do to each other: a target run after a draft model's is slower, its weights
        having left the cache). Fitted to the source's own rounds, starting from the sum of its parts:
        T(gamma) + host + gamma c_s."""
        host, c = self.host.get(0.0), self.cost_per_guess(source, free, times[0])
        cap = len(times) - 1
        prior = lambda g: times[min(int(g), cap)] + host + g * c          # noqa: E731
        line = self.rounds.get(source)
        if line is None:
            b = (prior(cap) - prior(1)) / (cap - 1) if cap > 1 else c + (times[-1] - times[0])
            return prior(1) - b, b
        return line.fit(prior, SOURCE_PRIOR_WEIGHT, (1, cap))

    def alpha(self, source: str, request: dict | None = None) -> float:
        """The source's per-guess acceptance: this request's own counts (`request`: source -> [accepted,
        rejections]) on top of the decayed counts of all requests, which weigh REQUEST_PRIOR observations (the
        same draft can be good on one kind of text and poor on another: a request decides after a few rounds)."""
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        mine = (request or {}).get(source)
        if not mine:
            return acc / (acc + rej)
        weight = REQUEST_PRIOR / (acc + rej)
        return (acc * weight + mine[0]) / (REQUEST_PRIOR + mine[0] + mine[1])

    def cost_per_guess(self, source: str, free: bool, t0: float) -> float:
        mean = self.cost.get(source)
        if mean is not None:
            return max(mean.get(0.0), 0.0)
        return 0.0 if free else PRIOR_C * t0

    def fitted(self, cap: int) -> tuple[list, dict]:
        """T(0..cap) and a cache for round_cost, refitted every REFIT rounds (the fits move slowly; refitting every
        round cost more host time than it was worth)."""
        if self._fits is None or self._fits[0] != cap or self.round - self._fits[1] >= REFIT:
            self._fits = (cap, self.round, self.times(cap), {})
            self.version += 1
        return self._fits[2], self._fits[3]

    def best(self, source: str, gammas, free: bool, times: list, request: dict | None = None,
             remaining: float | None = None) -> tuple[float, int]:
        """(expected tokens per second, gamma) of the best gamma in `gammas` for `source`. `remaining`: the tokens
        this request is expected to have left when the source has not run its encoder in it yet (None when it
        has): the encoder run is then shared by the rounds the source may serve, E tokens each."""
        alpha = self.alpha(source, request)
        costs = self._fits[3] if self._fits is not None and self._fits[2] is times else {}
        if source not in costs:
            costs[source] = self.round_cost(source, free, times)
        a, b = costs[source]
        enc = self.encoder[source].get(0.0) if remaining is not None and source in self.encoder else 0.0
        best, power, e, first = (0.0, gammas[0]), 1.0, 1.0, gammas[0]
        if first > 1:                           # a fixed gamma: no running sum to continue
            power, e = alpha ** (first - 1), expected_tokens(alpha, first - 1)
        for g in gammas:                        # E(alpha, g) = 1 + alpha + ... + alpha^g, summed as g grows
            power *= alpha
            e += power
            share = enc * min(1.0, e / max(remaining, 1.0)) if enc else 0.0
            rate = e / max(a + b * g + share, 1e-6)
            if rate > best[0]:
                best = (rate, g)
        return best

    def learn(self, source: str, proposed: int, accepted: int, target_s: float, other_s: float,
              encoder_s: float = 0.0) -> None:
        self.target.add(proposed, target_s)
        if encoder_s > 0:
            self.encoder.setdefault(source, _Mean()).add(encoder_s)
        if proposed == 0:
            self.host.add(other_s)
            return
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        self.counts[source] = [acc * DECAY + accepted, rej * DECAY + float(accepted < proposed)]
        self.version += 1
        self.cost.setdefault(source, _Mean()).add((other_s - self.host.get(0.0)) / proposed)
        self.rounds.setdefault(source, _Line()).add(proposed, target_s + other_s)


class AutoDraft(DraftSource):
    """Chooses among `candidates` (name -> DraftSource; a LookupDraft among them is probed every round) and gamma
    (every gamma up to the cap when `adaptive`, else exactly the cap for a model source)."""

    name = "auto"

    def __init__(self, candidates: dict, estimates: Estimates, adaptive: bool = True):
        self.candidates, self.estimates, self.adaptive = candidates, estimates, adaptive
        self.lookup = next((s for s in candidates.values() if isinstance(s, LookupDraft)), None)   # probed per round
        self.chosen: DraftSource | None = None
        self._mark = self._stats = None
        self._copied = []
        self.request = None
        self.produced = 0
        self._rates = {}                # (source, gamma cap, encoded?) -> (estimates version, rate, gamma)

    def start(self, source_ids, stats):
        if self.request is not None and self.produced:
            self.estimates.request_tokens.add(self.produced)
        self.request = {}               # source -> [accepted, rejections] of this request
        self.produced = 0
        self._rates = {}
        for source in self.candidates.values():
            source.start(source_ids, stats)

    def choose(self, ws, cap: int) -> tuple[str, int]:
        """(source name or "none", gamma) for this round."""
        est = self.estimates
        est.round += 1
        times, _ = est.fitted(cap)
        best, best_rate = ("none", 0), 1.0 / (times[0] + est.host.get(0.0))
        self._copied = []
        if self.lookup is not None and self._worth_probing(cap, times, best_rate):
            self._copied = self.lookup.guesses(ws, cap)
        copied = len(self._copied)
        stale = None
        for name, source in self.candidates.items():
            uses_lookup = self.lookup is not None and (source is self.lookup or source.below is self.lookup)
            if (uses_lookup and not copied) or (PREFER_COPY and copied and not uses_lookup):
                continue
            free = source is self.lookup
            top = min(cap, copied) if free else cap
            if top < 1:
                continue
            encode = source.needs_encoder
            cached = self._rates.get((name, top, encode))
            if cached is not None and cached[0] == est.version:
                rate, g = cached[1], cached[2]
            else:
                gammas = range(1, top + 1) if (self.adaptive or free) else (top,)
                remaining = max(est.request_tokens.get(64.0) - self.produced, 1.0) if encode else None
                rate, g = est.best(name, gammas, free, times, self.request, remaining)
                self._rates[(name, top, encode)] = (est.version, rate, g)
            if rate > best_rate:
                best, best_rate = (name, g), rate
            if est.round - est.last_chosen.get(name, est.round - EXPLORE) >= EXPLORE:
                stale = (name, top if not self.adaptive or free else max(1, min(top, 2)))
        if stale is not None and stale[0] != best[0]:
            best = stale
        est.last_chosen[best[0]] = est.round
        return best

    def _worth_probing(self, cap: int, times: list, none_rate: float) -> bool:
        """Whether a lookup copying all `cap` guesses could beat target-only decoding (else skip the lookup: at
        temperature 1 on this project's pair it never pays, and the probe is host time on every round). Rechecked
        every EXPLORE rounds regardless, so an estimate that improves is seen."""
        est, name = self.estimates, self.lookup.name
        if est.round % EXPLORE == 0:
            return True
        cached = self._rates.get((name, cap, False))
        if cached is None or cached[0] != est.version:
            rate, g = est.best(name, range(1, cap + 1), True, times, self.request)
            self._rates[(name, cap, False)] = cached = (est.version, rate, g)
        return cached[1] > none_rate

    def propose(self, ws, k, rows, row, stats: Stats):
        name, gamma = self.choose(ws, k)
        self._mark, self._stats = (name, time.perf_counter(), stats.target_s, stats.encoder_s), stats
        if gamma == 0:
            self.chosen = None
            return Proposal(0, source="none")
        self.chosen = self.candidates[name]
        if self.chosen is self.lookup:               # already looked up by choose()
            return Proposal(self.lookup.propose_found(ws, self._copied[:gamma]).count, True, name)
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
                             other, encoder_s)
        self.produced += len(verdict.tokens)
        if verdict.proposed:
            self._rates.clear()         # this request's counts changed
            mine = self.request.setdefault(name, [0, 0])
            mine[0] += verdict.accepted
            mine[1] += int(verdict.accepted < verdict.proposed)

