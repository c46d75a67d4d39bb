"""One request on its way through a decoder, and the two strategies that decode it.

A `Request` holds what every strategy shares: the prompt's ids, the checked Params, the Stats, the clock and the
stop reason. A strategy's `run(request)` yields the tokens each iteration adds and sets `request.stop_reason` on
the last; the decoder's one request path (SpeculativeDecoder._serve) times every iteration the same way and makes
a stream's pieces or a generate's Result from it.

    Sampling       speculative sampling (greedy included): Algorithm 1 rounds with a draft source, or target-only
                   steps; yields each round's tokens as soon as they are accepted
    BeamSearching  beam search (transformers' semantics), speculative with a draft model or target-only; every beam
                   may still lose until the search ends, so it yields once, the best sequence, and sets
                   `request.sequences` and `request.scores`
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..core.params import Params
from ..core.stats import Stats
from .beam import BeamSearch
from .beam_decode import BeamEstimates, BeamRun
from .lookup import proposing_lookup
from .plan import Plan
from .processors import Processors
from .round import DraftSource
from .speculative import speculative_step, target_step
from .speech import SpeechPrompt, prefill, prompt_tokens


@dataclass
class Request:
    ids: np.ndarray                  # the prompt's token ids (checked: inside the vocabulary and max_length), or a
    #                                  Whisper request's PCM (float32, checked)
    params: Params                   # checked
    plan: Plan                       # what it runs (decoding/plan.py): the only reading of its gamma and draft
    speech: SpeechPrompt | None = None     # a Whisper request's decoder prompt and suppressed tokens
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = ""            # "eos", "max_new_tokens" or "max_length" once it has ended
    sequences: list = field(default_factory=list)    # beam search: the num_return_sequences best, best first
    scores: list = field(default_factory=list)
    began: float = field(default_factory=time.perf_counter)
    cancelled: bool = False          # set by another thread: a batch drops the request at its next round

    def tick(self) -> None:
        """Time so far: the whole request, and the host's share (what no ONNX Runtime run took)."""
        s = self.stats
        s.total_s = time.perf_counter() - self.began
        s.host_s = s.total_s - (s.encoder_s + s.draft_s + s.target_s)

    def stop(self, tokens: list, eos_id: int, at_max_length: bool) -> str:
        """The stop reason after `tokens` were produced ("" while the request goes on), recorded on the request."""
        self.stop_reason = ("eos" if tokens and tokens[-1] == eos_id
                            else "max_new_tokens" if len(tokens) >= self.params.max_new_tokens
                            else "max_length" if at_max_length else "")
        return self.stop_reason


class Sampling:
    """Speculative sampling on the decoder's workspace: a round with `source` where k >= 1 guesses fit, a
    target-only step otherwise (or always, without a source)."""

    def __init__(self, workspace, target, source: DraftSource | None, eos_id: int, start_id: int, max_length: int):
        self.ws, self.target, self.source = workspace, target, source
        self.eos_id, self.start_id, self.max_length = eos_id, start_id, max_length

    def run(self, request: Request):
        ws, target, source, params, stats = self.ws, self.target, self.source, request.params, request.stats
        target.encode(request.ids, stats)
        speech = request.speech
        prompt = [self.start_id] if speech is None else prompt_tokens(ws, target, speech, params, stats)
        suppressed = () if speech is None else (speech.suppress, speech.begin_suppress, speech.timestamps)
        ws.reset(prompt, params, Processors(self.eos_id, params.min_new_tokens, params.no_repeat_ngram_size,
                                            len(prompt), *suppressed))
        prefill(ws, target, len(prompt) - 1, stats)
        if source is not None:
            source.start(request.ids, stats)
            lookup = proposing_lookup(source)
            if lookup is not None:        # a tree of candidates is exact only with lenience 1, no processors
                lookup.width = params.candidates if params.lenience == 1 and ws.processors is None else None
        out, limit = [], params.max_new_tokens
        cap = request.plan.gamma
        while True:
            # room for k guesses: the verify run appends k+1 tokens and must stay inside max_length
            g = min(cap, limit - len(out) - 1, self.max_length - target.length - 1)
            plain = source is None or source.plain(len(out))
            new = speculative_step(ws, target, source, g, stats) if g >= 1 and not plain \
                else target_step(ws, target, stats)
            new = new[:limit - len(out)]
            if self.eos_id in new:
                new = new[:new.index(self.eos_id) + 1]
            out += new
            stats.new_tokens = len(out)
            done = request.stop(out, self.eos_id, target.length >= self.max_length)
            yield new
            if done:
                return


class BeamSearching:
    """Beam search over the batched sessions: target-only (`draft` None), or speculative with a draft model at a
    fixed gamma or the one `estimates` chooses each step."""

    def __init__(self, target, draft, estimates: BeamEstimates, eos_id: int, start_id: int, max_length: int):
        self.target, self.draft, self.estimates = target, draft, estimates
        self.eos_id, self.start_id, self.max_length = eos_id, start_id, max_length

    def run(self, request: Request):
        params, plan, draft, speech = request.params, request.plan, self.draft, request.speech
        prompt = [self.start_id] if speech is None else list(speech.tokens)
        # the decoder's positions hold the prompt and every generated token but the last
        search = BeamSearch(plan.num_beams, min(params.max_new_tokens, self.max_length + 1 - len(prompt)),
                            self.eos_id, params.length_penalty, params.early_stopping)
        suppressed = () if speech is None else (speech.suppress, speech.begin_suppress, speech.timestamps)
        processors = Processors(self.eos_id, params.min_new_tokens, params.no_repeat_ngram_size, len(prompt),
                                *suppressed)
        run = BeamRun(self.target, draft, search, processors, prompt, self.max_length, request.stats)
        run.begin(request.ids, 0 if draft is None else BeamEstimates.GAMMAS[-1] if plan.adaptive else plan.gamma)
        if None in prompt:
            run.detect_language(speech.languages)
        while not search.done:
            if draft is None:
                run.target_step()
            elif plan.adaptive:
                gamma = self.estimates.choose(min(plan.gamma, self.max_length), search.width)
                t, encoder = time.perf_counter(), request.stats.encoder_s
                steps = run.speculative_step(gamma) if gamma else run.target_step()
                seconds = time.perf_counter() - t - (request.stats.encoder_s - encoder)    # a draft's encoder run
                self.estimates.learn(gamma, steps, seconds, search.width)                   # is no round's cost
            else:
                run.speculative_step(plan.gamma)
        found = search.results(params.num_return_sequences)
        request.sequences = [tokens for tokens, _ in found]
        request.scores = [score for _, score in found]
        best = request.sequences[0]
        request.stats.new_tokens = len(best)
        request.stop(best, self.eos_id, True)
        yield best
