"""SpeculativeDecoder: load an export directory once, then generate or stream with exact speculative decoding."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .device import device_of, resolve_provider
from .draft import ModelDraft
from .errors import SpecdecError
from .manifest import load_manifest
from .model import CachedSeq2Seq
from .sampler import Samplers
from .speculative import speculative_step, target_step
from .stats import Result, Stats
from .workspace import Workspace


@dataclass
class Piece:
    """What stream() yields as soon as tokens are accepted."""
    token_ids: list
    text: str
    stats: Stats | None = None      # the request's statistics so far
    stop_reason: str = ""           # set on the last piece: "eos", "max_new_tokens" or "max_length"


def _belongs_together(target, draft) -> None:
    for what, a, b in (("tokenizer", target.files.get("tokenizer.json"), draft.files.get("tokenizer.json")),
                       ("vocabulary size", target.vocab_size, draft.vocab_size),
                       ("special token ids", target.special_ids, draft.special_ids),
                       ("dtype", target.dtype, draft.dtype)):
        if a != b:
            raise SpecdecError(f"draft export '{draft.root}' does not belong with target export '{target.root}' "
                               f"(their {what} differ)", "export the pair together with one specdec-export run")
    if draft.max_length < target.max_length:
        raise SpecdecError(f"draft export '{draft.root}' has max_length {draft.max_length} < the target's "
                           f"{target.max_length}", "export the pair together with one specdec-export run")


class SpeculativeDecoder:
    """Sessions, KV caches and device buffers are created once here and reused by every request."""

    def __init__(self, manifest, provider: str, threads: int = 0, draft_manifest=None):
        from tokenizers import Tokenizer

        self.manifest = manifest
        self.provider = provider
        self.device = device_of(provider)
        self.gamma_max, self.max_length = manifest.gamma_max, manifest.max_length
        self.vocab_size = manifest.vocab_size
        ids = manifest.special_ids
        self.eos_id, self.start_id = int(ids["eos_token_id"]), int(ids["decoder_start_token_id"])
        self.tokenizer = Tokenizer.from_file(str(manifest.path(manifest.raw["tokenizer"])))
        self.target = CachedSeq2Seq(manifest, "target", provider, self.device, self.gamma_max + 1, threads)
        # the draft's one-token steps are too small to split across cores: one thread unless told otherwise
        draft_model = CachedSeq2Seq(draft_manifest or manifest, "draft", provider, self.device, 2, threads or 1,
                                    max_length=self.max_length)
        self.samplers = Samplers(manifest, provider, self.device)
        self.draft = ModelDraft(draft_model, self.samplers)
        self.workspace = Workspace(self.gamma_max, self.vocab_size, self.device)

    @classmethod
    def load(cls, export_dir: str | Path, provider: str = "auto", threads: int = 0,
             draft: str | Path | None = None) -> "SpeculativeDecoder":
        """Open an export directory (checksums verified). `draft`: take the draft from another export directory
        made for the same target (same tokenizer); by default the pair exported together is used."""
        manifest = load_manifest(export_dir)
        draft_manifest = None
        if draft is not None:
            draft_manifest = load_manifest(draft)
            _belongs_together(manifest, draft_manifest)
        return cls(manifest, resolve_provider(provider), threads, draft_manifest)

    # -- requests -------------------------------------------------------------------------------------------
    def _check(self, prompt, input_ids, max_new_tokens, gamma, temperature, top_k, top_p, lenience) -> np.ndarray:
        if not isinstance(gamma, (int, np.integer)) or not 0 <= gamma <= self.gamma_max:
            raise SpecdecError(f"gamma must be an integer in 0..{self.gamma_max} (got {gamma!r})",
                               f"use 0 <= gamma <= {self.gamma_max}" + (
                                   f", or re-export with --gamma-max {gamma}" if isinstance(gamma, int) and
                                   gamma > self.gamma_max else ""))
        if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise SpecdecError(f"max_new_tokens must be a positive integer (got {max_new_tokens!r})")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise SpecdecError(f"temperature must be a finite number >= 0 (got {temperature!r})",
                               "use 0 for greedy decoding")
        if not isinstance(top_k, (int, np.integer)) or top_k < 0:
            raise SpecdecError(f"top_k must be an integer >= 0 (got {top_k!r})", "use 0 to disable top-k")
        if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
            raise SpecdecError(f"top_p must be in (0, 1] (got {top_p!r})", "use 1.0 to disable top-p")
        if not (isinstance(lenience, (int, float)) and 0 < lenience <= 1):
            raise SpecdecError(f"lenience must be in (0, 1] (got {lenience!r})", "use 1.0 for exact sampling")
        if (prompt is None) == (input_ids is None):
            raise SpecdecError("pass exactly one of a prompt text or input_ids")
        if input_ids is None:
            if not isinstance(prompt, str) or not prompt.strip():
                raise SpecdecError("the prompt is empty", "pass some text to generate from")
            ids = np.asarray(self.tokenizer.encode(prompt).ids, dtype=np.int64)
        else:
            try:
                ids = np.asarray(list(input_ids), dtype=np.int64).reshape(-1)
            except (TypeError, ValueError):
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

    def _run(self, ids, max_new_tokens, gamma, temperature, top_k, top_p, lenience, seed, stats: Stats):
        """Yield the tokens each iteration adds (target-only steps when gamma = 0)."""
        self.samplers.params.set(float(temperature), int(top_k), float(top_p), float(lenience))
        ws = self.workspace
        ws.reset(self.start_id, seed)
        self.target.encode(ids, stats)
        if gamma > 0:
            self.draft.start(ids, stats)
        produced = 0
        while True:
            g = min(gamma, max_new_tokens - produced - 1, self.max_length - self.target.length - 1)
            if g >= 1:
                new = speculative_step(ws, self.target, self.draft, self.samplers, g, stats)
            else:
                new = target_step(ws, self.target, self.samplers, stats)
            new = new[:max_new_tokens - produced]
            if self.eos_id in new:
                new = new[:new.index(self.eos_id) + 1]
            produced += len(new)
            stats.new_tokens = produced
            done = ("eos" if new[-1] == self.eos_id else "max_new_tokens" if produced >= max_new_tokens
                    else "max_length" if self.target.length >= self.max_length else "")
            yield new, done
            if done:
                return

    def _stream(self, prompt, input_ids, max_new_tokens, gamma, temperature, top_k, top_p, lenience, seed):
        ids = self._check(prompt, input_ids, max_new_tokens, gamma, temperature, top_k, top_p, lenience)
        stats = Stats()
        began = time.perf_counter()
        for new, done in self._run(ids, max_new_tokens, gamma, temperature, top_k, top_p, lenience, int(seed),
                                   stats):
            stats.total_s = time.perf_counter() - began
            stats.host_s = stats.total_s - (stats.encoder_s + stats.draft_s + stats.verify_s + stats.sampling_s)
            yield new, done, stats

    def generate(self, prompt: str | None = None, *, input_ids=None, max_new_tokens: int = 64, gamma: int = 4,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, lenience: float = 1.0,
                 seed: int = 0) -> Result:
        """Generate from a prompt (text) or input_ids. gamma=0 is target-only decoding on the same sessions."""
        out, reason, stats = [], "", Stats()
        for new, reason, stats in self._stream(prompt, input_ids, max_new_tokens, gamma, temperature, top_k,
                                               top_p, lenience, seed):
            out.extend(new)
        return Result(self.decode(out), out, stats, reason)

    def stream(self, prompt: str | None = None, *, input_ids=None, max_new_tokens: int = 64, gamma: int = 4,
               temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, lenience: float = 1.0,
               seed: int = 0):
        """Yield Piece(token_ids, text) as soon as each iteration's tokens are accepted; `text` is the new text."""
        out, shown = [], ""
        for new, done, stats in self._stream(prompt, input_ids, max_new_tokens, gamma, temperature, top_k, top_p,
                                             lenience, seed):
            out.extend(new)
            text = self.decode(out)
            yield Piece(new, text[len(shown):] if text.startswith(shown) else text, stats, done)
            shown = text

    def decode(self, token_ids) -> str:
        return self.tokenizer.decode([int(t) for t in token_ids], skip_special_tokens=True)
