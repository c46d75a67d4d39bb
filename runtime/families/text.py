"""The text family (T5 and the like): a request is a prompt text or token ids, tokenized and checked against the
vocabulary and max_length; every such request may run as a row of a batch."""

from __future__ import annotations

import numpy as np

from ..core.errors import SpecdecError


class TextFamily:
    """A text export's input checks (family_of picks it). Its requests take no input keywords."""

    inputs = ()                  # request keywords of its input besides a prompt or input_ids
    batchable = True             # its requests may be rows of a batch
    refusal = None               # why a batch cannot run its requests (None: it can)
    drafts_apart = None          # why draft= from another export cannot load (None: it can)

    @staticmethod
    def shared_encoders(manifest) -> list:
        """The draft models that run the target's encoder instead of their own (text: none)."""
        return []

    def __init__(self, manifest, tokenizer, start_id: int, eos_id: int):
        self.manifest, self.tokenizer, self.start_id, self.eos_id = manifest, tokenizer, start_id, eos_id
        self.vocab_size, self.max_length = manifest.vocab_size, manifest.max_length

    def read(self, given: dict) -> dict:
        """The request's input keywords (`inputs`) as the family reads them once (text: it takes none)."""
        return given

    def whole(self, given: dict) -> bool:
        """Whether the input is longer than the encoder's window and is decoded window by window (text: never)."""
        return False

    def choices(self, given: dict) -> None:
        """Check the choices an input longer than the window is decoded with (text: none)."""

    def input(self, prompt, input_ids, given: dict) -> tuple:
        """(checked token ids, None): a one-line SpecdecError for anything else."""
        return self.ids(prompt, input_ids), None

    def ids(self, prompt, input_ids) -> np.ndarray:
        """A prompt text tokenized, or input_ids checked: inside the vocabulary, at most max_length."""
        if (prompt is None) == (input_ids is None):
            raise SpecdecError("pass exactly one of a prompt text or input_ids")
        if input_ids is None:
            if not isinstance(prompt, str) or not prompt.strip():
                raise SpecdecError("the prompt is empty", "pass some text to generate from")
            ids = np.asarray(self.tokenizer.encode(prompt).ids, dtype=np.int64)
        else:
            try:
                ids = np.asarray(list(input_ids), dtype=np.int64).reshape(-1)
            except (TypeError, ValueError, OverflowError):
                raise SpecdecError("input_ids must be a sequence of integers") from None
            if ids.size == 0:
                raise SpecdecError("input_ids is empty", "pass at least one token id")
            bad = ids[(ids < 0) | (ids >= self.vocab_size)]
            if bad.size:
                raise SpecdecError(f"input_ids contains {int(bad[0])}, outside the vocabulary 0..{self.vocab_size - 1}")
        if ids.size > self.max_length:
            raise SpecdecError(f"the prompt is {ids.size} tokens, longer than max_length {self.max_length}",
                               "shorten it, or re-export with a larger --max-length")
        return ids

    def segments(self, tokens) -> list:
        """The transcript's timed segments (text: none)."""
        return []
