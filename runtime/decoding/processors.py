"""Logits processors with transformers' semantics: the tokens a sequence may not take next.

    min_new_tokens        EOS is banned while fewer than this many tokens were generated (MinNewTokensLength)
    no_repeat_ngram_size  n: a token that would repeat an n-gram already in the sequence is banned (NoRepeatNGram;
                          the decoder start token counts, as it does in transformers)

Both only remove tokens (their log-probability becomes -inf), so they are the same whether applied to logits, to
log-probabilities or to a standardized distribution: beam search applies them to the target's log-probabilities
(runtime/decoding/beam.py), greedy and sampling add them as a 0 / -inf mask to the logits rows of p and q alike inside the
head (export/head.py), which keeps speculative sampling exact for the processed target distribution.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Processors:
    eos_id: int
    min_new_tokens: int = 0
    no_repeat_ngram_size: int = 0

    @property
    def active(self) -> bool:
        return self.min_new_tokens > 0 or self.no_repeat_ngram_size > 0

    def banned(self, seq) -> list:
        """Tokens banned after `seq` (decoder tokens, the start token first)."""
        out = []
        if len(seq) - 1 < self.min_new_tokens:
            out.append(self.eos_id)
        n = self.no_repeat_ngram_size
        if n > 0 and len(seq) + 1 >= n:
            key = tuple(seq[len(seq) + 1 - n:])
            out.extend(seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i:i + n - 1]) == key)
        return out
