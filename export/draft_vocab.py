"""A draft's output projection over part of the vocabulary (`specdec-export --draft-vocab K`).

At real vocabulary sizes a small draft spends most of its step in its output projection: tens of thousands of rows
(32,128 for T5), against a few thousand tokens that the output text actually uses. With `--draft-vocab K` each
draft model's projection keeps the rows of the K tokens that are most frequent in a text (the datastore's text, or
`--draft-vocab-text`), plus every special token of the tokenizer; the logits of every other token are -inf, so the
draft's standardized distribution q is 0 there and the draft never proposes them.

The output stays exactly the target's: speculative sampling is exact for any draft distribution q, one that is 0
on most tokens included (a token the draft cannot propose reaches the output through the residual
norm(max(0, p - q)) = p there, or the target's own draw after the last guess). Only how often guesses are kept
changes, by the target's probability mass outside the kept rows.

The graph computes the K rows' logits (one [K, d] matrix product instead of [V, d]) and scatters them into a row of
V logits filled with -inf, so every graph input and output keeps the vocabulary's width and the head, the proposal
loop, chains, beams and batches see a distribution over the whole vocabulary as before. The target is never
restricted: its p decides every token.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import torch
from torch import nn

from specdec.runtime.core.errors import SpecdecError


class SubsetHead(nn.Module):
    """An output projection over the rows `ids` of `head` (an nn.Linear [V, d], maybe tied to the embeddings), the
    other rows' logits -inf. A drop-in for the model's output embeddings: forward(x [..., d]) -> [..., V]."""

    def __init__(self, head: nn.Linear, ids: np.ndarray, vocab: int):
        super().__init__()
        index = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        self.weight = nn.Parameter(head.weight.detach()[index].clone(), requires_grad=False)
        bias = getattr(head, "bias", None)
        self.bias = None if bias is None else nn.Parameter(bias.detach()[index].clone(), requires_grad=False)
        self.register_buffer("ids", index)
        self.vocab = vocab

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = nn.functional.linear(x, self.weight, self.bias)                       # [..., K]
        shape = (*kept.shape[:-1], self.vocab)
        full = torch.full_like(kept[..., :1], float("-inf")).expand(shape)           # [..., V] of -inf
        return full.scatter(-1, self.ids.expand(*kept.shape[:-1], -1), kept)


def restrict(model, ids: np.ndarray) -> None:
    """Give `model` (a Hugging Face seq2seq model) the output projection over `ids` only, in place."""
    head = model.get_output_embeddings()
    model.set_output_embeddings(SubsetHead(head, ids, head.weight.shape[0]))


def special_ids(tokenizer, config) -> set:
    """Every id the tokenizer marks as added or special, and the model's pad, eos, unk and decoder start ids."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    found = set(backend.get_added_tokens_decoder())
    for name in ("pad_token_id", "eos_token_id", "unk_token_id", "decoder_start_token_id", "bos_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            found.add(value)
    return found


def choose(tokenizer, config, texts, k: int, vocab: int) -> np.ndarray:
    """The sorted ids a draft keeps: the `k` most frequent in `texts` (ties by the smaller id), other than the
    specials, then every special id. Each segment is counted as written and after a space (a byte-level BPE makes
    a word after a space a token of its own)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    specials = {i for i in special_ids(tokenizer, config) if 0 <= i < vocab}
    counts, batch = Counter(), []

    def flush():
        for encoding in backend.encode_batch(batch, add_special_tokens=False):
            counts.update(encoding.ids)
        batch.clear()

    for text in texts:
        batch += [text, " " + text]
        if len(batch) >= 1024:
            flush()
    flush()
    ranked = sorted(((n, -i) for i, n in counts.items() if i not in specials and 0 <= i < vocab), reverse=True)
    if len(ranked) < k:
        raise SpecdecError(f"--draft-vocab {k}: the text has only {len(ranked):,} distinct tokens",
                           f"pass --draft-vocab {len(ranked)} or less, or more text with --draft-vocab-text")
    return np.array(sorted({-i for _, i in ranked[:k]} | specials), dtype=np.int64)


def entry(ids: np.ndarray, k: int, texts: list) -> dict:
    """The manifest's record of a restricted draft: how many rows it keeps, which, and what text chose them."""
    return {"rows": int(len(ids)), "most_frequent": int(k), "ids": [int(i) for i in ids],
            "ids_sha256": hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest(),
            "counted": [str(t) for t in texts]}
