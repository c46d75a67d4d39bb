"""Beam search over the exported models: target-only, and exact speculative beam search.

Target-only: one target run over the W running beams' last tokens per step, then BeamSearch.step
(runtime/decoding/strategies/beam_book.py) on their processed log-probabilities, then the cache follows the surviving
beams (BeamModel.gather).

Speculative (one round, gamma = g):
 1. propose: the draft runs transformers' running-beam selection on its own log-probabilities for g steps, from
    the target's running beams and scores: at each step the W best candidates that do not stop. Every beam it
    holds at any step is a path (root beam, t_1 .. t_s); the leaves of that tree, padded to g tokens, are the rows.
 2. score: one target run over R rows x (g + 1) tokens ([root's last token, t_1 .. t_g]): the target's
    log-probabilities of every prefix of every row.
 3. replay: the target's own BeamSearch.step, step after step, as long as each of its running beams is a prefix
    that some row scored; the first step always is (every root has a row). The beams, scores and finished
    hypotheses are the ones target-only beam search computes, because every step reads the target's log-probs of
    exactly the beam's sequence; only where the logits come from differs (a batch of R x (g+1) instead of W x 1,
    equal within float round-off).
 4. the target cache keeps the rows the new beams came from, cut to their length; the draft's cache follows the
    roots and reads the tokens it has not seen at the next round's first step.
The draft only decides how many steps one target run covers, never which beams win.

`BeamSearching` is the strategy (a request's `run`): every beam may still lose until the search ends, so it yields
once, the best sequence, and sets `request.sequences` and `request.scores`.
"""

from __future__ import annotations

import time

import numpy as np

from ...core.stats import Stats
from ...engine.beam_model import BeamModel
from .beam_book import BeamSearch, candidates, log_softmax
from ..sources.auto import expected_tokens
from ..adaptive.controller import GammaController
from ..adaptive.estimators import Beta, Mean
from ..processors import Processors
from ..request import Request
from ..prompt import most_likely


def processed(logits: np.ndarray, seqs, processors: Processors) -> np.ndarray:
    """log_softmax of logits [W, V], then -inf at the tokens each sequence's processors ban (seqs: with start)."""
    out = log_softmax(logits)
    if processors.active:
        for i, seq in enumerate(seqs):
            banned = processors.banned(seq)
            if banned:
                out[i, banned] = -np.inf
    return out


class BeamRun:
    """One request's beam search. `search` is the BeamSearch; `prompt` the decoder tokens before the first generated
    one (the start token, or the decoder prompt its family made: decoding/prompt.py)."""

    spread = 1          # the draft keeps spread x W running beams: more rows per target run, more of them scored

    def __init__(self, target: BeamModel, draft: BeamModel | None, search: BeamSearch, processors: Processors,
                 prompt: list, max_length: int, stats: Stats):
        self.target, self.draft, self.search = target, draft, search
        self.proc, self.prompt, self.max_length, self.stats = processors, list(prompt), max_length, stats
        self.draft_len = 0            # positions of each root's sequence in the draft's cache

    def seqs(self) -> list:
        return [self.prompt + b for b in self.search.beams]

    def begin(self, ids: np.ndarray, gamma_max: int = 0) -> None:
        """Encode the source (the draft's waits for its first round); the target's buffers take runs of up to
        gamma_max + 1 tokens, and grow to the rows the rounds score."""
        width = self.search.width
        self.target.encode(ids, width, self.stats, width, gamma_max + 1)
        self.ids, self.draft_ready = ids, False       # the draft encodes on its first round (auto may use none)

    def detect_language(self, languages: tuple) -> None:
        """A prompt whose language slot is None: the language the target finds most likely after the prompt's first
        token (decoding/prompt.py), read from one target run; the cache is then empty again."""
        logits = self.target.run(np.array([self.prompt[:1]] * self.search.width, np.int64))[0, -1]
        self._count_target()
        self.prompt[1] = most_likely(logits, languages)
        self.target.length = 0

    # -- target only ---------------------------------------------------------------------------------------
    def target_step(self) -> int:
        """One target run over the running beams' last tokens (the first: the whole prompt), one beam step. Returns
        steps made (1)."""
        seqs = self.seqs()
        unseen = np.array([s[self.target.length:] for s in seqs], np.int64)
        logits = self.target.run(unseen)[:, -1]
        self._count_target()
        parents, _ = self.search.step(processed(logits, seqs, self.proc))
        self.target.gather(parents)
        if self.draft is not None and self.draft_len:      # its cache no longer follows the beams: read them anew
            self.draft_len = self.draft.length = 0
        self.stats.source("none").add(0, 0, 1)
        return 1

    def _count_target(self) -> None:
        self.stats.target_calls += 1
        self.stats.target_s += self.target.elapsed

    # -- speculative ---------------------------------------------------------------------------------------
    def speculative_step(self, gamma: int) -> int:
        """One round: the draft's g-step proposal, one target run over its paths, the replay. Returns the beam
        steps made (1 .. g + 1)."""
        search, width = self.search, self.search.width
        gamma = min(gamma, search.max_new - search.generated - 1, self.max_length - self.target.length - 2)
        if gamma < 1 or self.target.length + 1 < len(self.prompt):     # the prompt goes in with a plain step
            return self.target_step()
        if not self.draft_ready:
            self.draft.encode(self.ids, width, self.stats)
            self.draft_len, self.draft_ready = 0, True
        roots = self.seqs()
        rows = self._propose(roots, gamma)                          # [(root, tokens of length gamma)]
        # score every row: the root's cache, then [root's last token, t_1 .. t_g]
        base = self.target.length
        self.target.gather([r for r, _ in rows])
        feed = np.array([[roots[r][-1], *path] for r, path in rows], np.int64)
        logits = self.target.run(feed)                              # [R, g+1, V]
        self._count_target()
        scored = {}                                                 # (root, prefix) -> row whose logits hold it
        for i, (r, path) in enumerate(rows):
            for s in range(gamma + 1):
                scored.setdefault((r, tuple(path[:s])), i)
        # replay the target's beam search for as long as every running beam is a scored prefix
        where = [(j, ()) for j in range(width)]                     # each running beam as (root, prefix)
        steps = 0
        while steps <= gamma and not search.done:
            found = self._rows_of(scored, where)
            if found is None:
                break
            parents, tokens = search.step(processed(logits[found, steps], self.seqs(), self.proc))
            used = found[parents]
            where = [(where[p][0], where[p][1] + (int(t),)) for p, t in zip(parents, tokens)]
            steps += 1
        # the target's cache: the rows the new beams came from, up to the new beams' last token
        self.target.gather(used, base + steps)
        # the draft's cache follows the roots (its positions are all before the round's new tokens)
        self.draft.gather([w[0] for w in where], self.draft_len, from_pinned=True)
        self.stats.proposed += gamma
        self.stats.accepted += steps - 1
        self.stats.source("draft").add(gamma, steps - 1, steps)
        return steps

    @staticmethod
    def _rows_of(scored: dict, where: list):
        """The row that scored each running beam (root, prefix), or None when one was not scored."""
        found = [scored.get(w) for w in where]
        return None if None in found else np.array(found)

    def _propose(self, roots: list, gamma: int) -> list:
        """The draft's g steps of running-beam selection from the target's beams; the rows to score."""
        draft, search, width = self.draft, self.search, self.search.width
        keep = self.spread * width                                  # the draft's running beams
        feed = np.array([s[self.draft_len:] for s in roots], np.int64)     # what the draft has not seen yet
        scores = search.scores.copy()
        paths = [(j, ()) for j in range(width)]                     # the draft's running beams as (root, tokens)
        seqs = [list(s) for s in roots]
        tree = set(paths)
        t = time.perf_counter()
        for s in range(gamma):
            logits = draft.run(feed)[:, -1]
            self.stats.draft_calls += 1
            if s == 0:
                self.draft_len = draft.length                       # every root's sequence is in its cache: keep it
                draft.pin()
            cand_scores, parent, token, hits = candidates(processed(logits, seqs, self.proc), scores, 2 * keep,
                                                          search.eos, search.generated + s + 1, search.max_new)
            live = np.flatnonzero(~hits)[:keep]                      # the search's running beams: best that go on
            if live.size < keep:
                break
            parent, token, scores = parent[live], token[live], cand_scores[live]
            paths = [(paths[p][0], paths[p][1] + (int(x),)) for p, x in zip(parent, token)]
            seqs = [seqs[p] + [int(x)] for p, x in zip(parent, token)]
            tree.update(paths)
            if s + 1 < gamma:
                draft.gather(parent)
                feed = token.reshape(-1, 1)
        self.stats.draft_s += time.perf_counter() - t
        # rows: the leaves of the tree (each root is in it), padded to gamma tokens
        longest = {}
        for root, path in sorted(tree, key=lambda p: -len(p[1])):
            if not any(q[:len(path)] == path for q in longest.get(root, ())):
                longest.setdefault(root, []).append(path)
        return [(r, list(path) + [search.eos] * (gamma - len(path))) for r in sorted(longest) for path in longest[r]]


class BeamEstimates(GammaController):
    """What gamma="auto" learned for beam search, per beam width: per gamma (0 = a target-only step) the seconds a
    round takes, and, shared by every gamma, the chance that a draft step is replayed by the target's search (the
    next beam step is one of the rows scored: `kept`, Beta counts). A round of gamma makes E(beta, gamma) = 1 + beta
    + ... + beta^gamma beam steps on the geometric model of Theorem 3.1 and costs its measured seconds; target-only
    makes one step. Each gamma is tried once first (its cost measured); then every round draws beta from its
    posterior and takes the gamma with the most beam steps per second under the draw (Thompson sampling): a
    speculative round runs in proportion to the chance that it is the fastest, so where even beta = 1 cannot pay
    for a round's measured cost ((gamma + 1) / seconds below a target step's 1 / seconds) it never runs again, and
    where the chance is real the counts it adds settle it within tens of rounds. As a floor, after FLOOR rounds
    without a speculative one, the speculative gamma that ran longest ago is tried once (at most one round in
    FLOOR: a change of the draft's agreement or of a cost is still seen). A GammaController
    (runtime/decoding/adaptive/controller.py): `choose(cap, width)`, `learn(gamma, steps, seconds, width)`."""

    DECAY, FLOOR = 0.98, 512
    KEPT_DECAY = 0.9        # the replay counts remember ~10 speculative rounds: they run rarely where they lose
    GAMMAS = (1, 2, 3, 4)

    def __init__(self):
        self.cost = {}              # (width, gamma) -> Mean of a round's seconds (a draft encoder run left out)
        self.kept = {}              # width -> Beta of a draft step replayed by the target's search
        self.seen = {}              # gamma -> rounds run
        self.rng = np.random.default_rng(0)
        self.rounds = self.explored = 0
        self.speculated = 0         # the round of the last speculative round
        self.last = {}              # gamma -> the round it last ran
        self.width = 0              # the width of the last round (rates() reports it)

    def _rate(self, width: int, gamma: int, beta: float) -> float:
        return expected_tokens(beta, gamma) / max(self.cost[width, gamma].get(), 1e-9)

    def choose(self, cap: int, width: int = 0) -> int:
        """The gamma of the next round of a search of `width` beams, at most `cap` (0: a target-only step)."""
        self.width = width
        options = [0] + [g for g in self.GAMMAS if g <= cap]
        self.rounds += 1
        for g in options:
            if (width, g) not in self.cost:
                return g
        kept = self.kept.get(width) or Beta()
        draw, mean = kept.draw(self.rng), kept.mean()
        pick = max(options, key=lambda g: self._rate(width, g, draw))
        best = max(options, key=lambda g: self._rate(width, g, mean))
        if pick == 0 and best == 0 and len(options) > 1 and self.rounds - self.speculated >= self.FLOOR:
            pick = min(options[1:], key=lambda g: self.last.get(g, 0))
        self._chose(pick, best)
        if pick:
            self.speculated = self.rounds
        self.last[pick] = self.rounds
        return pick

    def learn(self, gamma: int, steps: int, seconds: float, width: int = 0) -> None:
        """A round of `gamma` made `steps` beam steps in `seconds` (a draft encoder run not included)."""
        self.cost.setdefault((width, gamma), Mean(self.DECAY)).add(seconds)
        self.seen[gamma] = self.seen.get(gamma, 0) + 1
        if gamma:
            replayed = steps - 1
            self.kept.setdefault(width, Beta(decay=self.KEPT_DECAY)).add(replayed, float(replayed < gamma))

    def rates(self) -> dict:
        """gamma -> beam steps per second expected now (the posterior mean), for the last width searched."""
        kept = self.kept.get(self.width) or Beta()
        return {g: self._rate(self.width, g, kept.mean()) for w, g in sorted(self.cost) if w == self.width}


class BeamSearching:
    """Beam search over the batched sessions: target-only (`draft` None), or speculative with a draft model at a
    fixed gamma or the one `estimates` chooses each step."""

    def __init__(self, target, draft, estimates: BeamEstimates, eos_id: int, start_id: int, max_length: int):
        self.target, self.draft, self.estimates = target, draft, estimates
        self.eos_id, self.start_id, self.max_length = eos_id, start_id, max_length

    def run(self, request: Request):
        params, plan, draft, made = request.params, request.plan, self.draft, request.prompt
        prompt = [self.start_id] if made is None else list(made.tokens)
        # the decoder's positions hold the prompt and every generated token but the last
        search = BeamSearch(plan.num_beams, min(params.max_new_tokens, self.max_length + 1 - len(prompt)),
                            self.eos_id, params.length_penalty, params.early_stopping)
        suppressed = () if made is None else (made.suppress, made.begin_suppress, made.timestamps)
        processors = Processors(self.eos_id, params.min_new_tokens, params.no_repeat_ngram_size, len(prompt),
                                *suppressed)
        run = BeamRun(self.target, draft, search, processors, prompt, self.max_length, request.stats)
        run.begin(request.ids, 0 if draft is None else BeamEstimates.GAMMAS[-1] if plan.adaptive else plan.gamma)
        if None in prompt:
            run.detect_language(made.languages)
        try:
            while not search.done:
                if draft is None:
                    run.target_step()
                elif plan.adaptive:
                    gamma = self.estimates.choose(min(plan.gamma, self.max_length), search.width)
                    t, encoder = time.perf_counter(), request.stats.encoder_s
                    steps = run.speculative_step(gamma) if gamma else run.target_step()
                    seconds = time.perf_counter() - t - (request.stats.encoder_s - encoder)  # a draft's encoder
                    self.estimates.learn(gamma, steps, seconds, search.width)                 # run is no round's cost
                else:
                    run.speculative_step(plan.gamma)
        finally:                 # the buffers' pages go back to the system between searches (BeamModel.release)
            for model in (self.target, draft):
                if model is not None:
                    model.release()
        found = search.results(params.num_return_sequences)
        request.sequences = [tokens for tokens, _ in found]
        request.scores = [score for _, score in found]
        best = request.sequences[0]
        request.stats.new_tokens = len(best)
        request.stop(best, self.eos_id, True)
        yield best
