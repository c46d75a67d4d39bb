"""Beam search's bookkeeping with transformers' semantics (GenerationMixin._beam_search, transformers 5.x), on the
host: which beams run on, which hypotheses are finished, when to stop. No model here: `step` takes the processed
log-probabilities of the running beams' next tokens, wherever they came from (a target step, or a speculative pass
that scored the beams' continuations in advance: runtime/decoding/strategies/beam_search.py).

One step, for W beams over a vocabulary of V (float32 throughout, as transformers computes it):
    scores = running_scores[:, None] + log_probs                     [W, V]
    the K = 2W best of the W*V candidates (ties: lower beam, then lower token first)
    hits   = the candidate is EOS, or the sequence reaches max_length (1 + max_new_tokens)
    running beams: the W best candidates after hits get -1e9
    finished: among the first W candidates that hit, each scored score / generated_length ** length_penalty, merged
              with the finished ones so far, the best W kept (none added once early_stopping=True has W, or once the
              stop heuristic says no running beam can beat the worst finished)
    stop heuristic (early_stopping False or "never"): stop improving when the best running score / L ** lp cannot
              beat the worst of W finished ones, L = generated length (max_new_tokens for "never" with lp > 0)
The first step starts from one beam: the others have running score -1e9.
"""

from __future__ import annotations

import numpy as np

NEG = np.float32(-1.0e9)


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, best first; equal values in index order."""
    k = min(k, scores.size)
    if k < scores.size:
        part = np.argpartition(-scores, k - 1)[:k]
        # argpartition may cut among values tied with the k-th: take every index tied with it, lowest first
        kth = scores[part].min()
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)[:k - above.size]
        part = np.concatenate([above, tied])
    else:
        part = np.arange(scores.size)
    order = np.lexsort((part, -scores[part]))
    return part[order]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32."""
    z = logits.astype(np.float32, copy=False)
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def candidates(log_probs: np.ndarray, scores: np.ndarray, count: int, eos: int, length: int, max_new: int):
    """The `count` best one-token continuations of beams with cumulative `scores` under `log_probs` [B, V], best
    first: (their cumulative scores, parent beam, token, whether each stops there: EOS, or `length` generated
    tokens reaching `max_new`). Beam search keeps 2W of them; a draft proposing beams does the same."""
    vocab = log_probs.shape[1]
    total = (log_probs.astype(np.float32, copy=False) + scores[:, None]).reshape(-1)
    cand = top(total, count)
    parent, token = cand // vocab, cand % vocab
    return total[cand], parent, token, (token == eos) | (length >= max_new)


class BeamSearch:
    """State of one request's beam search. `beams[i]` is running beam i's generated tokens (no start token),
    `scores[i]` its cumulative log-probability; `finished` the best W (tokens, score) so far, best first."""

    def __init__(self, width: int, max_new_tokens: int, eos_id: int, length_penalty: float = 1.0,
                 early_stopping: bool | str = False):
        self.width, self.max_new, self.eos = width, max_new_tokens, eos_id
        self.lp, self.early = float(length_penalty), early_stopping
        self.beams = [[] for _ in range(width)]
        self.scores = np.full(width, NEG, np.float32)
        self.scores[0] = 0.0
        self.fin_tokens = [[] for _ in range(width)]
        self.fin_scores = np.full(width, NEG, np.float32)
        self.fin_done = np.zeros(width, bool)
        self.improvable = True
        self.done = False
        self.steps = 0

    @property
    def generated(self) -> int:
        """Tokens each running beam holds."""
        return self.steps

    def step(self, log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log_probs [W, V] (processed) of the running beams -> (parent beam, token) of the new running beams, which
        replace the old ones. Sets `done` when beam search stops."""
        width = self.width
        length = self.steps + 1                                   # generated tokens with the new one
        cand_scores, parent, token, hits = candidates(log_probs, self.scores, 2 * width, self.eos, length,
                                                      self.max_new)
        # running beams: the best W candidates that did not stop
        running_scores = cand_scores + hits.astype(np.float32) * NEG
        keep = top(running_scores, width)
        # finished hypotheses
        finished = cand_scores / np.float32(length ** self.lp)
        if self.fin_done.all() and self.early is True:
            finished = finished + NEG
        if not self.improvable:
            finished = finished + NEG
        just_done = hits & (np.arange(cand_scores.size) < width)
        finished = finished + (~just_done).astype(np.float32) * NEG
        merged = np.concatenate([self.fin_scores, finished])
        best = top(merged, width)
        tokens = self.fin_tokens + [self.beams[p] + [int(t)] for p, t in zip(parent, token)]
        done_flags = np.concatenate([self.fin_done, just_done])
        self.fin_tokens = [tokens[i] for i in best]
        self.fin_scores, self.fin_done = merged[best], done_flags[best]
        # the new running beams
        self.beams = [self.beams[parent[i]] + [int(token[i])] for i in keep]
        self.scores = running_scores[keep]
        self.steps = length
        # stop?
        if self.early == "never" and self.lp > 0.0:
            best_length = self.max_new
        else:
            best_length = length
        best_possible = self.scores[0] / np.float32(best_length ** self.lp)
        worst = np.where(self.fin_done, self.fin_scores.min(), NEG)
        self.improvable = self.improvable and bool(np.any(best_possible > worst))
        open_beam = not (self.fin_done.all() and self.early is True)
        self.done = not (self.improvable and open_beam and not hits.all())
        return parent[keep], token[keep]

    def results(self, count: int) -> list:
        """The best `count` finished hypotheses as (tokens, score), best first."""
        return [(list(self.fin_tokens[i]), float(self.fin_scores[i])) for i in range(count)]
