"""The export's vocabulary: one definition for every artefact that records or checks one.

A model's vocabulary (its embedding and logit rows) may be larger than its tokenizer's: every real T5 checkpoint,
t5-small to t5-11b, has 32,128 rows for the 32,100 ids its tokenizer makes (padded for the hardware). So an export
has two sizes, and each check uses the one it means:

    rows            the model's rows: the manifest's vocab_size, the logits and every buffer over them, the ids a
                    graph takes (input_ids, the C API's ids) and the ids the runtime may return. The sampler keeps a
                    padded row's (tiny) probability exactly as the target gives it, so the output distribution is
                    exactly the target's; decoding text skips such an id. A draft must have the target's rows
                    (p and q are compared row by row).
    tokenizer_size  the ids the tokenizer can make, 0 .. tokenizer_size - 1 (its largest id + 1, added tokens
                    included): at most `rows`. A datastore holds ids below it (its separator is tokenizer_size), and
                    the lookup never proposes an id at or past it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Vocabulary:
    rows: int               # the model's logit rows (the manifest's vocab_size)
    tokenizer_size: int     # ids the tokenizer makes: 0 .. tokenizer_size - 1

    @property
    def padded(self) -> int:
        """Rows no text maps to (28 for a real T5)."""
        return self.rows - self.tokenizer_size


def tokenizer_size(tokenizer) -> int:
    """The ids a `tokenizers.Tokenizer` can make: its largest id + 1, added tokens included (0 when it has none)."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1
