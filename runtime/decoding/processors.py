"""Logits processors with transformers' semantics: the tokens a sequence may not take next.

    min_new_tokens        EOS is banned while fewer than this many tokens were generated (MinNewTokensLength)
    no_repeat_ngram_size  n: a token that would repeat an n-gram already in the sequence is banned (NoRepeatNGram;
                          the decoder prompt counts, as it does in transformers)
    suppress              the model's suppress_tokens, banned everywhere (SuppressTokensLogitsProcessor)
    begin_suppress        the model's begin_suppress_tokens, banned as the first generated token
                          (SuppressTokensAtBeginLogitsProcessor)
    timestamps            the timestamp rules of transformers' timestamp logits processor, by the tokens so far:
                          <|notimestamps|> never; a timestamp first, at most
                          MAX_INITIAL_S into the window; after a timestamp that ends a segment, another timestamp or
                          end of text; after a pair, text; timestamps never decrease (a segment's start may equal
                          the previous end). transformers' further rule (text banned when the timestamps' total
                          probability exceeds every text token's) depends on the logits, not the tokens, and is not
                          applied.

Both only remove tokens (their log-probability becomes -inf), so they are the same whether applied to logits, to
log-probabilities or to a standardized distribution: beam search applies them to the target's log-probabilities
(runtime/decoding/strategies/beam_book.py), greedy and sampling add them as a 0 / -inf mask to the logits rows of p and
q alike inside the head (export/head.py), which keeps speculative sampling exact for the processed target distribution.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Processors:
    eos_id: int
    min_new_tokens: int = 0
    no_repeat_ngram_size: int = 0
    prompt: int = 1                   # decoder tokens before the first generated one (T5: the start token)
    suppress: tuple = ()              # never generated (suppress_tokens: SuppressTokensLogitsProcessor)
    begin_suppress: tuple = ()        # not generated first (begin_suppress_tokens: SuppressTokensAtBegin...)
    timestamps: tuple = ()            # with timestamps: (id of <|0.00|>, their count, the latest first
    #                                   timestamp's index, <|notimestamps|>'s id)

    @property
    def active(self) -> bool:
        return self.min_new_tokens > 0 or self.no_repeat_ngram_size > 0 or bool(self.suppress) or \
            bool(self.begin_suppress) or bool(self.timestamps)

    def banned(self, seq, repeats: bool = True) -> list:
        """Tokens banned after `seq` (decoder tokens, the prompt first). `repeats` False leaves out the no-repeat
        n-gram bans, which depend on the tokens drawn after `seq`: the rest may stand for a whole proposal (a q row
        that bans a little more or less than p's is still exact, the verification sees the q it was drawn from)."""
        out = list(self.suppress)
        generated = len(seq) - self.prompt
        if generated == 0:
            out.extend(self.begin_suppress)
        if generated < self.min_new_tokens:
            out.append(self.eos_id)
        if self.timestamps:
            out.extend(self._timestamp_bans(seq[self.prompt:], repeats))
        n = self.no_repeat_ngram_size if repeats else 0
        if n > 0 and len(seq) + 1 >= n:
            key = tuple(seq[len(seq) + 1 - n:])
            out.extend(seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i:i + n - 1]) == key)
        return out

    def _timestamp_bans(self, generated, exact: bool) -> range | list:
        """The timestamp rules after `generated` (module docstring); `exact` False: only the tokens banned at
        every position (a draft's proposal loop uses one row for all its steps)."""
        begin, count, initial, no_timestamps = self.timestamps
        out = [no_timestamps]
        if not exact:
            return out
        end = begin + count
        if not generated:
            return out + list(range(begin)) + list(range(begin + initial + 1, end))
        last = generated[-1] >= begin
        penultimate = len(generated) < 2 or generated[-2] >= begin
        if last:
            out += range(begin, end) if penultimate else range(self.eos_id)
        stamps = [t for t in generated if t >= begin]
        if stamps:
            out += range(begin, stamps[-1] + (0 if last and not penultimate else 1))
        return out
