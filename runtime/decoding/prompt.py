"""A decoder prompt longer than the start token: the tokens a request's decoder starts from, the tokens its
generation suppresses, a language slot the target fills when the request names none (one target run over the
first token, the language token with the largest logit: transformers' detect_language), and the prompt run into
the target's cache before the first round. Neither step samples, so the request's uniforms are those it would use
with the language given. A model family makes the prompt (families/); the strategies run it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.params import Params
from ..core.stats import Stats
from ..engine.model import CachedSeq2Seq
from ..engine.workspace import Workspace


@dataclass(frozen=True)
class DecoderPrompt:
    """What a request's decoder starts from when its family makes more than the start token: `tokens` (slot 1 None
    when it is to be detected among `languages`), and the tokens generation suppresses."""
    tokens: tuple
    languages: tuple = ()            # language token ids, to detect the language from (slot 1 of tokens is None)
    suppress: tuple = ()
    begin_suppress: tuple = ()
    timestamps: tuple = ()           # with timestamps: Processors.timestamps



def prompt_tokens(ws: Workspace, target: CachedSeq2Seq, prompt: DecoderPrompt, params: Params, stats: Stats) -> list:
    """The request's prompt tokens, its language detected when it has none (after target.encode)."""
    tokens = list(prompt.tokens)
    if prompt.languages and tokens[1] is None:
        ws.reset(tokens[:1], params)
        _count(target.run(*ws.catch_up(0, 0)), stats)
        tokens[1] = most_likely(np.asarray(target.logits.flat()[:target.vocab]), prompt.languages)
        target.rollback(0)
    return tokens


def most_likely(logits: np.ndarray, languages: tuple) -> int:
    """The language token with the largest logit after the prompt's first token (transformers' detect_language)."""
    ids = np.asarray(languages, np.int64)
    return int(ids[int(np.argmax(logits[ids]))])


def prefill(ws: Workspace, target: CachedSeq2Seq, count: int, stats: Stats) -> None:
    """Run the prompt's first `count` tokens (after ws.reset with the prompt) into the target's cache, as many a
    run as its logits rows hold."""
    width = target.logits.shape[0]
    while target.length < count:
        first = target.length
        _count(target.run(*ws.catch_up(first, min(first + width, count) - 1)), stats)


def _count(seconds: float, stats: Stats) -> None:
    stats.target_s += seconds
    stats.target_calls += 1
