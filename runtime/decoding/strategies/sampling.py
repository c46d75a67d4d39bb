"""Speculative sampling (greedy included): Algorithm 1 rounds with a draft source, or target-only steps; yields each
round's tokens as soon as they are accepted."""

from __future__ import annotations

from ..processors import Processors
from ..request import Request
from ..sources.contract import DraftSource
from ..speculative import speculative_step, target_step
from ..prompt import prefill, prompt_tokens


class Sampling:
    """Speculative sampling on the decoder's workspace: a round with `source` where k >= 1 guesses fit, a
    target-only step otherwise (or always, without a source)."""

    def __init__(self, workspace, target, source: DraftSource | None, eos_id: int, start_id: int, max_length: int):
        self.ws, self.target, self.source = workspace, target, source
        self.eos_id, self.start_id, self.max_length = eos_id, start_id, max_length

    def run(self, request: Request):
        ws, target, source, params, stats = self.ws, self.target, self.source, request.params, request.stats
        target.encode(request.ids, stats)
        made = request.prompt
        prompt = [self.start_id] if made is None else prompt_tokens(ws, target, made, params, stats)
        suppressed = () if made is None else (made.suppress, made.begin_suppress, made.timestamps)
        ws.reset(prompt, params, Processors(self.eos_id, params.min_new_tokens, params.no_repeat_ngram_size,
                                            len(prompt), *suppressed))
        prefill(ws, target, len(prompt) - 1, stats)
        if source is not None:
            source.start(request.ids, stats)
        out, limit = [], params.max_new_tokens
        cap = request.plan.gamma
        while True:
            # room for k guesses: the verify run appends k+1 tokens and must stay inside max_length
            g = min(cap, limit - len(out) - 1, self.max_length - target.length - 1)
            plain = source is None or source.plain(len(out))
            made = speculative_step(ws, target, source, g, stats) if g >= 1 and not plain \
                else target_step(ws, target, stats)
            new = made.tokens[:limit - len(out)]
            if self.eos_id in new:
                new = new[:new.index(self.eos_id) + 1]
            stats.source(made.source).add(made.proposed, made.accepted, len(new))    # the tokens the request keeps
            out += new
            stats.new_tokens = len(out)
            done = request.stop(out, self.eos_id, target.length >= self.max_length)
            yield new
            if done:
                return
