"""draft="auto" / gamma="auto": each round, pick the source and gamma with the most expected tokens per second.

For a source s proposing gamma guesses, Theorem 3.1 gives E[tokens] = (1 - a_s^(gamma+1)) / (1 - a_s) and the
round costs T(gamma) + h + c_s gamma: T(k) the measured target run over k+1 tokens (so the verify cost per extra
token is measured, not assumed 1), h the host time of a round, c_s what s spends per guess (a draft model's steps,
a chain's runs; ~0 for a lookup). gamma = 0 (target only) scores 1 / (T(0) + h). The choice is the best
score over the sources available this round (a lookup only when it matches, and at most as many guesses as it
copied) and gamma in 1 .. the cap: Theorem 3.8 with measured costs instead of a constant c.

Estimates are learned from every round: a per-guess alpha_s from kept guesses and rejections (accepted / (accepted +
rejections), decayed so a change of text is followed), kept per kind of sampling (temperature, top-k, top-p: a
draft's alpha at T = 1 is not its alpha at T = 0), and costs, kept across the requests of a decoder
(`SpeculativeDecoder.reset_estimates()` forgets them). They are turned into a plan every REFIT rounds and at each
request's start (AutoDraft), so a round's choice costs a lookup probe, when a copy can pay, and a comparison.

Exploration is Thompson sampling: each refit draws every source's alpha from its posterior, Beta(accepted,
rejections) with the decayed counts, and plans with the draws. A source is so chosen in proportion to the chance
that it is the best, which falls as its counts grow: a source whose early rounds were unlucky (an estimate of 0.3
where it keeps 0.5) is drawn above the others often enough to be measured again within tens of rounds, and one that
is surely worse is almost never tried. A plan holds REFIT rounds, so one exploration costs a few rounds; the
draws come from the estimates' own generator, never from the sampling's random numbers. As a floor, a source no
plan chose for its wait (EXPLORE rounds, doubled after each try that does not make it chosen, up to MAX_WAIT) is
tried once, so one whose counts are old is measured again.

A kind of sampling starts young (Estimates.young): before the plan decides, each source runs SETTLE rounds in turn
(each lookup origin on its copies, each draft model at gamma 2), and the switch below neither measures nor judges
those rounds, for at most YOUNG_MOST rounds. Without it a fresh decoder's first unlucky rounds made the switch give
plain steps the lead, and the few auto rounds left could not correct the estimate that caused it.

Two guards keep the choice from losing to target-only decoding. A source's expected tokens are calibrated by what
its chosen rounds delivered (kappa_s = tokens made / tokens expected from the posterior mean at the choice,
decayed): the geometric model of Theorem 3.1 is an approximation (alpha falls with the guess's depth at T = 1), and
kappa measures its error. And a source must be expected to beat target-only rounds by MARGIN, measured costs and
calibrated tokens included, before it is chosen. Over both, a Switch (switch.py) measures the wall time per token
of auto's rounds against plain target steps, and runs each in proportion to the chance that it is the faster.
"""

from __future__ import annotations

import time

import numpy as np

from ...core.stats import Stats
from .contract import DraftSource, Proposal, Verdict
from ..adaptive.controller import GammaController
from ..adaptive.estimators import Line, Mean, Waits, draw_beta
from ..adaptive.switch import Switch
from .tree import matched

EXPLORE = 400         # rounds after which an unchosen source is tried once more (its first wait; Thompson
#                       sampling explores before that wherever the chance that a source is the best is real)
MAX_WAIT = 3200       # the longest wait: each try after which a source is still not chosen doubles its wait
DECAY = 0.97          # weight of the past per observation in the running averages
ALPHA_DECAY = 0.99    # ... in a source's alpha counts over all requests (~100 rounds: a request's own counts
#                       follow its text, so these estimate the mean over requests)
PRIOR_ALPHA = (1.0, 1.0)   # pseudo accepted / rejections of a source never seen: alpha = 0.5
REQUEST_PRIOR = 4.0   # observations the all-request alpha counts for against a request's own
PRIOR_C = 0.15        # a model draft's cost per guess before it is measured, as a fraction of T(0)
PRIOR_SLOPE = 0.1     # T(k) = a (1 + 0.1 k) before the slope is measured
PRIOR_WEIGHT = 0.5    # pseudo-runs that hold the slope to the prior while runs cover one k only
FIT_DECAY = 0.995     # the line fits remember ~200 rounds
REFIT = 4             # rounds between refits of the plan (_Plan), each with new Thompson draws (0.05 ms a refit)
SOURCE_PRIOR_WEIGHT = 1.0   # pseudo-rounds on the sum-of-parts line in a source's round-cost fit
MARGIN = 0.05         # a source is chosen only when expected to beat target-only rounds by this fraction
CALIBRATION_PRIOR = 8.0     # pseudo-tokens (as predicted) in a source's calibration before it has rounds
SETTLE = 12           # rounds each source runs, in turn, before auto's rounds are judged (a young kind of sampling)
YOUNG_MOST = 200      # ... unless the kind of sampling has had this many rounds (a lookup that rarely matches)


def sampling_kind(params) -> tuple:
    """What alphas are kept apart by: greedy, or the temperature (to 0.1) with its top-k / top-p filter; and the
    lenience (below 1 keeps more guesses)."""
    t, lenience = float(params.temperature), round(float(params.lenience), 2)
    if t <= 0:
        return 0.0, 0, 1.0, lenience
    return round(t, 1), int(params.top_k), round(float(params.top_p), 2), lenience


def expected_tokens(alpha: float, gamma: int) -> float:
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


class Estimates:
    """What the choice learns: the target run's time by k, host time per round, and per source its per-guess alpha,
    its cost per guess and the wall time of its rounds by gamma."""

    def __init__(self):
        self.target = Line(FIT_DECAY)       # target run seconds over k+1 tokens, by k
        self.host = Mean(DECAY)         # seconds per round outside target runs, target-only rounds
        self.kinds = {}             # kind of sampling -> (counts, calibration, tries) below
        self.counts = {}            # source -> [accepted, rejections], decayed, from the prior pseudo-counts
        self.tries = {}             # source -> its rounds ("none": target-only rounds), not decayed
        self.round = 0
        self.rng = np.random.default_rng(0)     # Thompson draws (never the sampling's generator)
        self.cost = {}              # source -> Mean of seconds per guess beyond the host time
        self.rounds = {}            # source -> Line of a round's wall seconds by gamma
        self.encoder = {}           # source -> Mean of the encoder seconds its first use in a request costs
        self.lag = {}               # source -> Mean of the tokens a model source caught up per round (lag below)
        self.catchup = {}           # source -> Mean of the seconds per token caught up
        self.request_tokens = Mean(DECAY)   # tokens per request
        self.waits = Waits(EXPLORE, MAX_WAIT)   # source -> rounds it may go unchosen before it is tried once
        self.use(None)

    def use(self, kind) -> None:
        """Learn and decide alphas (and their calibration) for this kind of sampling from now on: a key such as
        (temperature, top_k, top_p); costs are shared by every kind."""
        self.counts, self.calibration, self.tries = self.kinds.setdefault(kind, ({}, {}, {}))

    def young(self, keys) -> bool:
        """True while this kind of sampling is young: one of `keys` has run fewer than SETTLE rounds, and the kind has
        had fewer than YOUNG_MOST rounds in all."""
        return sum(self.tries.values()) < YOUNG_MOST and any(self.tries.get(key, 0) < SETTLE for key in keys)

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
            a = prior(1) - b
        else:
            a, b = line.fit(prior, SOURCE_PRIOR_WEIGHT, (1, cap))
        return a + self.catchup_cost(source), b

    def catchup_cost(self, source: str) -> float:
        """The seconds a round of `source` is expected to spend catching up: a model that was not used in the rounds
        before feeds the tokens they made before it can guess (in the same run), a cost of switching to it, not of
        its guesses. Its mean lag per chosen round times its measured seconds per token caught up."""
        lag, per_token = self.lag.get(source), self.catchup.get(source)
        if lag is None or per_token is None:
            return 0.0
        return lag.get(0.0) * max(per_token.get(0.0), 0.0)

    def alpha(self, source: str, request: dict | None = None, draw: bool = False) -> float:
        """The source's per-guess acceptance: this request's own counts (`request`: source -> [accepted,
        rejections]) on top of the alpha of all requests, which weighs REQUEST_PRIOR observations (the same draft
        can be good on one kind of text and poor on another: a request decides after a few rounds). The alpha of all
        requests is the mean of Beta(accepted, rejections) over their decayed counts, or with `draw` a draw from it
        (Thompson sampling: the uncertainty is that of what all requests measured)."""
        acc, rej = self.counts.get(source, PRIOR_ALPHA)
        common = draw_beta(self.rng, acc, rej) if draw else acc / (acc + rej)
        mine = (request or {}).get(source)
        if not mine:
            return common
        return (common * REQUEST_PRIOR + mine[0]) / (REQUEST_PRIOR + mine[0] + mine[1])

    def cost_per_guess(self, source: str, free: bool, t0: float) -> float:
        mean = self.cost.get(source)
        if mean is not None:
            return max(mean.get(0.0), 0.0)
        return 0.0 if free else PRIOR_C * t0

    def rates(self, source: str, gammas, free: bool, times: list, request: dict | None = None,
              remaining: float | None = None, alpha: float | None = None, key: str | None = None) -> list:
        """Expected tokens per second of `source` at each gamma in `gammas` (ascending). `remaining`: the tokens
        this request is expected to have left when the source has not run its encoder in it yet (None when it
        has): the encoder run is then shared by the rounds the source may serve, E tokens each. `alpha`: the alpha
        to plan with (a Thompson draw), else the estimate's; `key`: the name its alpha and calibration are kept
        under, when not `source`."""
        key = key or source
        alpha = self.alpha(key, request) if alpha is None else alpha
        kappa = self.kappa(key)
        a, b = self.round_cost(source, free, times)
        enc = self.encoder[source].get(0.0) if remaining is not None and source in self.encoder else 0.0
        out, power, e = [], 1.0, 1.0
        first = gammas[0]
        if first > 1:                           # a fixed gamma: no running sum to continue
            power, e = alpha ** (first - 1), expected_tokens(alpha, first - 1)
        for g in gammas:                        # E(alpha, g) = 1 + alpha + ... + alpha^g, summed as g grows
            power *= alpha
            e += power
            share = enc * min(1.0, e / max(remaining, 1.0)) if enc else 0.0
            out.append(kappa * e / max(a + b * g + share, 1e-6))
        return out

    def kappa(self, source: str) -> float:
        """Tokens a source's rounds made over the tokens expected when they were chosen (1 before any round)."""
        made, expected = self.calibration.get(source, (0.0, 0.0))
        return (made + CALIBRATION_PRIOR) / (expected + CALIBRATION_PRIOR)

    def learn(self, source: str, proposed: int, accepted: int, target_s: float, other_s: float,
              encoder_s: float = 0.0, expected: float | None = None, run_tokens: int | None = None,
              key: str | None = None, lag: int = 0) -> None:
        """One round: `proposed` guesses of `source` ("none", 0 for a target-only round), `accepted` kept, the
        target run's seconds, the rest of the round's (host, draft runs) and the encoder's; `expected`: the tokens
        the chooser expected of the round from the alpha it decided with (None: not recorded); `run_tokens`: the
        guesses the target run verified when they were not `proposed` (a tree's nodes): then only the source's
        alpha learns (from the first candidate, `proposed` and `accepted`), not T(k), the source's costs or its
        calibration, which are those of single-candidate rounds (the tree's costs are width.py's). `key`: the name
        the alpha and calibration are kept under when not `source` (a chain's model's). `lag`: the tokens a model
        source caught up before its guesses (beyond the one a round leaves it behind): such a round's time beyond
        its guesses' cost is the catch-up's (catchup_cost), and only rounds without one measure the cost per guess
        and the round line, which would otherwise charge a switch to every guess."""
        key = key or source
        self.tries[key] = self.tries.get(key, 0) + 1
        if run_tokens is not None and run_tokens != proposed:
            self._count(key, proposed, accepted)
            return
        self.target.add(proposed, target_s)
        if encoder_s > 0:
            self.encoder.setdefault(source, Mean(DECAY)).add(encoder_s)
        if proposed == 0:
            self.host.add(other_s)
            return
        self._count(key, proposed, accepted)
        self.lag.setdefault(source, Mean(DECAY)).add(lag)
        beyond_host = other_s - self.host.get(0.0)
        if lag > 0:
            per_guess = self.cost_per_guess(source, False, self.times(0)[0])
            self.catchup.setdefault(source, Mean(DECAY)).add((beyond_host - per_guess * proposed) / lag)
        else:
            self.cost.setdefault(source, Mean(DECAY)).add(beyond_host / proposed)
            self.rounds.setdefault(source, Line(FIT_DECAY)).add(proposed, target_s + other_s)
        if expected is not None:
            made, exp = self.calibration.get(key, (0.0, 0.0))
            self.calibration[key] = (made * DECAY + accepted + 1, exp * DECAY + expected)

    def _count(self, key: str, proposed: int, accepted: int) -> None:
        """Fold one round's kept guesses and rejection (at most one) into `key`'s decayed alpha counts."""
        acc, rej = self.counts.get(key, PRIOR_ALPHA)
        self.counts[key] = [acc * ALPHA_DECAY + accepted, rej * ALPHA_DECAY + float(accepted < proposed)]


class _Plan:
    """What a refit decided for the next REFIT rounds, so a round's choice is a lookup and a comparison, not
    arithmetic: the best (source, gamma) when the lookup copies nothing (`plain`) and when it copies c guesses
    (`copy[origin][c]`: by where the lookup copied from, with the expected rate), ("none", 0) wherever target-only
    decoding is expected to be fastest; whether a copy can pay at all (`copy_pays`: else the lookup is not probed)
    and a datastore copy (`store_pays`: else the datastore is not searched); and at most one source whose wait is
    over, to be tried once (`stale`: name, gamma, whether it needs a copy). `plain` and `copy` come from a Thompson
    draw of the alphas; `mean_plain` and `mean_copy` are what the posterior means choose (a round that differs
    explores), `alpha` the means by name (what a round is expected to make, for the calibration)."""

    __slots__ = ("cap", "until", "encodes", "plain", "copy", "copy_pays", "store_pays", "stale", "alpha",
                 "mean_plain", "mean_copy")


class AutoDraft(DraftSource, GammaController):
    """Chooses among `candidates` (name -> DraftSource; a source that is `probed`, the lookup, is probed for guesses
    when that can pay) and gamma (every gamma up to the cap when `adaptive`, else exactly the cap for a model source).

    A refit, every REFIT rounds and at each request's start, turns the estimates into a _Plan; a round reads it.
    When nothing is expected to beat target-only decoding, a round is a target-only step plus a counter and two
    comparisons (no lookup probe). Exploration is bounded: a source that goes unchosen for its wait (EXPLORE rounds
    at first) is tried once, and each try after which it still is not chosen doubles its wait, up to MAX_WAIT.

    A GammaController (runtime/decoding/adaptive/controller.py) that also chooses the source: `choose(ws, cap)` ->
    (source name or "none", gamma), with the workspace first (the lookup is probed in it), and `learn(verdict)` folds
    the round into the estimates; over it, its own Switch is another."""

    name = "auto"

    def __init__(self, candidates: dict, estimates: Estimates, adaptive: bool = True):
        self.candidates, self.estimates, self.adaptive = candidates, estimates, adaptive
        self.lookup = next((s for s in candidates.values() if s.probed), None)
        self.chosen: DraftSource | None = None
        self._mark = self._stats = None
        self._copied = []
        self._tree, self._gamma, self._lag = None, 0, 0
        self.request = None
        self.produced = 0
        self.explored = 0               # rounds whose choice explored (not what the estimates' means choose)
        self._plan: _Plan | None = None
        self._models = [s for s in candidates.values() if not s.probed]     # what may need an encoder run
        # a chain over the lookup whose top level is a candidate's own model proposes exactly as that model does
        # (a chain level's tokens are distributed as its own q): one alpha for both
        self.alpha_key = {}
        for key, source in candidates.items():
            model = source.model
            if model is not None and source.below is not None and source.below is self.lookup:
                alone = next((k for k, s in candidates.items() if s.below is None and s.model is model), None)
                if alone is not None:
                    self.alpha_key[key] = alone
        self.switch = Switch()          # auto's rounds, or plain target steps where those are faster
        self._unstarted = None          # (source ids, stats) until a round of this request uses the sources
        # the names the lookup's proposals go by, each with its own estimates: where they were copied from
        # (runtime/decoding/sources/lookup.py origins, its own name first), or just its key when it declares none or is
        # keyed otherwise
        key = next((k for k, s in candidates.items() if s is self.lookup), None)
        origins = tuple(self.lookup.origins) if self.lookup is not None else ()
        self.copy_origins = origins if origins[:1] == (key,) else (key,) if key is not None else ()
        # what a young kind of sampling runs SETTLE rounds of: each model source (its alpha key, its name) and each
        # of the lookup's origins (on their copies)
        self._settle_models = [(self._key(k), k) for k, s in candidates.items() if not self._uses_lookup(s)]
        self._settling = list(dict.fromkeys([k for k, _ in self._settle_models] + list(self.copy_origins)))

    def levels(self) -> list:
        """This choice and every source its candidates are made of."""
        out = [self]
        for source in self.candidates.values():
            out += [level for level in source.levels() if level not in out]
        return out

    def start(self, source_ids, stats):
        if self.request is not None and self.produced:
            self.estimates.request_tokens.add(self.produced)
        self.request = {}               # source -> [accepted, rejections] of this request
        self.produced = 0
        self._plan = None               # this request's own alphas start empty: refit at its first round
        self._unstarted = (source_ids, stats)   # the sources start at the first round that is not plain
        self.switch.start()

    def plain(self, produced: int) -> bool:
        return self.switch.plain(produced, hold=self.estimates.young(self._settling))

    def _young(self, copied: list, origin, copying: list, cap: int) -> tuple | None:
        """In a young kind of sampling (Estimates.young), the round a source with fewer than SETTLE rounds runs
        instead of the plan's choice: the copy's origin on its copies (`copying`: the origins still settling), else
        the model with the fewest rounds, at gamma 2 (or its fixed gamma); None when no such source can run."""
        if copied and origin in copying:
            return origin, len(copied)
        tries, name = min(((self.estimates.tries.get(key, 0), name) for key, name in self._settle_models),
                          default=(SETTLE, None))
        if tries >= SETTLE:
            return None
        return name, min(2, cap) if self.adaptive else cap

    def _start_sources(self) -> None:
        """The request's first round that is not plain starts the candidates (a lookup indexes the source)."""
        if self._unstarted is not None:
            for source in self.candidates.values():
                source.start(*self._unstarted)
            self._unstarted = None

    def _uses_lookup(self, source: DraftSource) -> bool:
        return self.lookup is not None and (source is self.lookup or source.below is self.lookup)

    def _key(self, name: str) -> str:
        """The name `name`'s alpha and calibration are kept under: for a chain topped by a candidate's own model,
        that model's (alpha_key); else its own. A model's alpha is one estimate whether or not the lookup matched
        in its rounds: measured apart on the widened pair, the two agreed (0.50-0.51 and 0.46-0.48 over 40-120 rounds
        each, T = 0 and 1), and split they halved the rounds behind each estimate."""
        return self.alpha_key.get(name, name)

    def _names(self):
        """(key, source, name, free) of every name a plan rates: a lookup under each of its origins."""
        for key, source in self.candidates.items():
            free = source is self.lookup
            for name in (self.copy_origins if free else (key,)):
                yield key, source, name, free

    def _tables(self, cap: int, times: list, alphas: dict) -> tuple:
        """(plain, per_copy) planned with `alphas` (name -> alpha): the best (name, gamma, rate) when the lookup
        copies nothing, and per origin and copy length c the best after such a copy."""
        est = self.estimates
        none = ("none", 0, (1.0 + MARGIN) / (times[0] + est.host.get(0.0)))     # what a source must beat
        plain = none                      # per_copy[origin][c]: the best when c guesses were copied from origin
        per_copy = {origin: [none] * (cap + 1) for origin in self.copy_origins}
        for _, source, name, free in self._names():
            gammas = list(range(1, cap + 1)) if (self.adaptive or free) else [cap]
            remaining = max(est.request_tokens.get(64.0) - self.produced, 1.0) if source.needs_encoder else None
            key = self._key(name)
            rates = est.rates(name, gammas, free, times, self.request, remaining, alphas[key], key)
            if not self._uses_lookup(source):
                g, rate = max(zip(gammas, rates), key=lambda x: x[1])
                if rate > plain[2]:
                    plain = (name, g, rate)
                if self.copy_origins:              # after a copy too: a model competes with the copies
                    best = (name, g, rate)
                    for table in per_copy.values():
                        table[1:] = [best if best[2] > c[2] else c for c in table[1:]]
                continue
            overall = max(zip(gammas, rates), key=lambda x: x[1])
            for origin, table in per_copy.items():
                if free and name != origin:
                    continue
                best = (name, gammas[0], rates[0])
                for c in range(1, cap + 1):   # a lookup proposes at most what it copied; a chain above it not
                    if not free:
                        best = (name, *overall)
                    elif rates[c - 1] > best[2]:  # the lookup's gammas are 1..cap: the best of gamma <= c
                        best = (name, c, rates[c - 1])
                    if best[2] > table[c][2]:
                        table[c] = best
        return plain, per_copy

    def _refit(self, cap: int) -> _Plan:
        """The plan of the next REFIT rounds, from one Thompson draw of every alpha (and what the posterior means
        would choose, to count the rounds that explore)."""
        est = self.estimates
        times = est.times(cap)
        names = list(self._names())
        keys = list(dict.fromkeys(self._key(name) for _, _, name, _ in names))   # in order: the draws' order
        means = {key: est.alpha(key, self.request) for key in keys}
        draws = {key: est.alpha(key, self.request, draw=True) for key in keys}
        plain, per_copy = self._tables(cap, times, draws)
        mean_plain, mean_copy = self._tables(cap, times, means)
        plan = _Plan()
        plan.cap, plan.alpha = cap, means
        plan.encodes = any(s.needs_encoder for s in self._models)     # an encoder run's cost is shared in the rates
        plan.plain, plan.mean_plain = plain[:2], mean_plain[:2]
        plan.copy = {origin: [c[:3] for c in table] for origin, table in per_copy.items()}    # (name, gamma, rate)
        plan.mean_copy = {origin: [c[:2] for c in table] for origin, table in mean_copy.items()}
        plan.until = est.round + REFIT
        plan.copy_pays = any(c[:2] != plan.plain for t in per_copy.values() for c in t[1:])
        plan.store_pays = "datastore" in per_copy and any(c[:2] != plan.plain for c in per_copy["datastore"][1:])
        chosen_somewhere = {plain[0]} | {c[0] for t in per_copy.values() for c in t[1:]}
        plan.stale = None
        for key, source, name, free in names:
            if name in chosen_somewhere:
                est.waits.reset(name)
            elif est.waits.due(name, est.round) and plan.stale is None:
                g = cap if not self.adaptive and not free else max(1, min(cap, 2))
                plan.stale = (name, g, self._uses_lookup(source))
        return plan

    def choose(self, ws, cap: int) -> tuple[str, int]:
        """(source name or "none", gamma) for this round."""
        if self._unstarted is not None:           # the request's first round: its kind of sampling's alphas
            params = getattr(ws, "params", None)
            self.estimates.use(None if params is None else sampling_kind(params))     # (start() dropped the plan)
        self._start_sources()
        est = self.estimates
        est.round += 1
        plan = self._plan
        if plan is None or est.round >= plan.until or plan.cap != cap:
            plan = self._plan = self._refit(cap)
        best, mean, stale = plan.plain, plan.mean_plain, plan.stale
        young = est.young(self._settling)
        copying = [o for o in self.copy_origins if est.tries.get(o, 0) < SETTLE] if young else []     # origins settling
        probe = plan.copy_pays or (stale is not None and stale[2]) or bool(copying)
        if "datastore" in self.copy_origins:   # the datastore is searched only where its copies may pay (or are tried)
            self.lookup.search_store = plan.store_pays or (stale is not None and stale[0] == "datastore") or \
                "datastore" in copying
        copied = self._copied = self.lookup.guesses(ws, cap) if probe else []
        origin = None
        if copied:
            origin = getattr(self.lookup, "origin", None)
            origin = origin if origin in plan.copy else self.copy_origins[0]
            best, mean = plan.copy[origin][len(copied)], plan.mean_copy[origin][len(copied)]
            fallback = getattr(self.lookup, "fallback", None)
            if fallback:                  # the datastore matched longer; the output's or the source's shorter copy
                other = plan.copy[self.copy_origins[0]][len(fallback)]           # is expected to make more per second?
                if other[2] > best[2]:
                    copied = self._copied = fallback
                    origin = self.lookup.origin = self.copy_origins[0]
                    best, mean = other, plan.mean_copy[origin][len(fallback)]
        if stale is not None and stale[0] != best[0] and (copied or not stale[2]) and \
                (stale[0] not in self.copy_origins or stale[0] == origin):       # a copy origin is tried on its copies
            best = stale[:2]
            plan.stale = None                            # tried once; its wait doubles unless a refit chooses it
            est.waits.double(stale[0])
        settling = self._young(copied, origin, copying, cap) if young else None    # each source its rounds
        if settling is not None:
            best = settling
        self._chose(tuple(best[:2]), tuple(mean[:2]))
        est.waits.ran(best[0], est.round)
        return best[:2]

    def propose(self, ws, k, rows, row, stats: Stats):
        name, gamma = self.choose(ws, k)       # (which starts the request's sources on its first call)
        self._tree, self._gamma, self._lag = None, gamma, 0
        self._mark, self._stats = (name, time.perf_counter(), stats.target_s, stats.encoder_s), stats
        if gamma == 0:
            self.chosen = None
            return Proposal(0, source="none")
        self.chosen = self.lookup if name in self.copy_origins else self.candidates[name]
        if self.chosen is self.lookup:               # already looked up by choose(); may widen into a tree
            found = self.lookup.propose_found(ws, self._copied[:gamma], room=k)
            self._tree = found.tree
            return Proposal(found.count, True, name, tree=found.tree)
        model = self.chosen.model       # a model source behind the output: it catches up first
        self._lag = 0 if model is None else max(ws.end - max(model.length, 0) - 1, 0)
        proposal = self.chosen.propose(ws, gamma, rows, row, stats)
        if self._plan.encodes:                # a model's first use in the request may have run its encoder: the
            self._plan.until = 0              # plan shared that run's cost over the rounds left; refit next round
        return Proposal(proposal.count, proposal.point_mass, name)

    def commit(self, ws, verdict: Verdict):
        """Pass the verdict to the chosen source, and fold the round's outcome and costs into the estimates."""
        if self.chosen is not None and verdict.proposed:
            self.chosen.commit(ws, verdict)
        self.learn(verdict)

    def learn(self, verdict: Verdict) -> None:
        """Fold the round's outcome and costs (timed from its proposal to now) into the estimates."""
        name, began, target_before, encoder_before = self._mark
        stats = self._stats
        target_s = stats.target_s - target_before
        encoder_s = stats.encoder_s - encoder_before           # a model draft encodes on its first use
        other = time.perf_counter() - began - target_s - encoder_s
        key = self._key(name)
        alpha = self._plan.alpha.get(key) if verdict.proposed else None
        proposed, accepted = verdict.proposed, verdict.accepted
        if self._tree is not None:    # a tree round: alpha learns from the first candidate, T(k) from the nodes
            first = self._copied[:self._gamma]
            proposed, accepted = len(first), min(matched(first, verdict.tokens), len(first))
        self.estimates.learn(name if proposed else "none", proposed, accepted, target_s, other, encoder_s,
                             None if alpha is None else expected_tokens(alpha, proposed), run_tokens=verdict.proposed,
                             key=key if proposed else None, lag=self._lag)
        self.produced += len(verdict.tokens)
        if proposed:
            mine = self.request.setdefault(key, [0, 0])
            mine[0] += accepted
            mine[1] += int(accepted < proposed)
