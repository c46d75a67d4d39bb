"""One request's decoding parameters: made where a request enters (Python call, CLI, C struct), checked once, passed
whole to the decoding loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from .errors import SpecdecError

MAX_BEAMS = 16               # beam rows are allocated per request; speculative rounds score up to W x (gamma+1) rows


@dataclass(frozen=True)
class Params:
    max_new_tokens: int = 64     # output is at most this many tokens (an EOS included)
    gamma: int | str = "auto"    # guesses per target call, 0 .. the export's gamma_max (0 = target only), or
    #                              "auto": chosen each round from measured acceptance and costs (runtime/decoding/auto.py)
    draft: object = "auto"       # "auto", "none", "lookup", a draft model's name ("draft"), a chain lowest level
    #                              first ("lookup,draft"), or a DraftSource object (runtime/decoding/sources.py)
    temperature: float = 0.0     # 0 = greedy
    top_k: int = 0               # 0 = no top-k filter
    top_p: float = 1.0           # 1 = no nucleus filter
    lenience: float = 1.0        # 1 = exact; < 1 keeps more guesses (paper A.5; at temperature 0: p(x) >= l max p)
    seed: int = 0                # random seed (unused when greedy)
    num_beams: int = 1           # > 1: beam search (runtime/decoding/beam_decode.py), transformers' semantics; greedy only
    length_penalty: float = 1.0  # beam search: finished scores are sum log p / length ** length_penalty
    early_stopping: object = False   # beam search: True, False (heuristic) or "never", as in transformers
    num_return_sequences: int = 1    # beam search: how many of the best finished beams to return (<= num_beams)
    min_new_tokens: int = 0      # EOS banned before this many tokens (runtime/decoding/processors.py)
    no_repeat_ngram_size: int = 0    # > 0: no n-gram of this size occurs twice (runtime/decoding/processors.py)

    @classmethod
    def of(cls, params: "Params | None" = None, **overrides) -> "Params":
        """`params` (or the defaults) with keyword overrides; an unknown keyword is a SpecdecError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise SpecdecError(f"unknown parameter {unknown[0]!r}", f"use {', '.join(sorted(known))}")
        if params is not None and not isinstance(params, Params):
            raise SpecdecError(f"params must be a specdec.runtime.Params (got {type(params).__name__})")
        return replace(params or cls(), **overrides)

    def checked(self, gamma_max: int) -> "Params":
        """Raise a one-line SpecdecError for any value out of range; returns self."""
        gamma = self.gamma
        if gamma != "auto" and (not _is_int(gamma) or not 0 <= gamma <= gamma_max):
            raise SpecdecError(f"gamma must be an integer in 0..{gamma_max} (got {gamma!r})",
                               f"use 0 <= gamma <= {gamma_max}" + (
                                   f", or re-export with --gamma-max {gamma}" if _is_int(gamma) and gamma > gamma_max
                                   else ""))
        if not isinstance(self.draft, str) and not _is_source(self.draft):
            raise SpecdecError(f"draft must be a name such as 'auto', 'lookup', 'draft' or 'lookup,draft', or a "
                               f"DraftSource (got {type(self.draft).__name__})")
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise SpecdecError(f"max_new_tokens must be a positive integer (got {self.max_new_tokens!r})")
        if not (_is_real(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise SpecdecError(f"temperature must be a finite number >= 0 (got {self.temperature!r})",
                               "use 0 for greedy decoding")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise SpecdecError(f"top_k must be an integer >= 0 (got {self.top_k!r})", "use 0 to disable top-k")
        if not (_is_real(self.top_p) and 0 < self.top_p <= 1):
            raise SpecdecError(f"top_p must be in (0, 1] (got {self.top_p!r})", "use 1.0 to disable top-p")
        if not (_is_real(self.lenience) and 0 < self.lenience <= 1):
            raise SpecdecError(f"lenience must be in (0, 1] (got {self.lenience!r})", "use 1.0 for exact sampling")
        if not _is_int(self.seed) or self.seed < 0:
            raise SpecdecError(f"seed must be an integer >= 0 (got {self.seed!r})")
        self._check_beams()
        return self

    def _check_beams(self) -> None:
        if not _is_int(self.num_beams) or not 1 <= self.num_beams <= MAX_BEAMS:
            raise SpecdecError(f"num_beams must be an integer in 1..{MAX_BEAMS} (got {self.num_beams!r})",
                               "use num_beams=1 for greedy or sampling, 2..16 for beam search")
        if not _is_int(self.num_return_sequences) or not 1 <= self.num_return_sequences <= self.num_beams:
            raise SpecdecError(f"num_return_sequences must be an integer in 1..num_beams ({self.num_beams}) "
                               f"(got {self.num_return_sequences!r})",
                               "ask for at most num_beams sequences, or raise num_beams")
        if not (_is_real(self.length_penalty) and math.isfinite(self.length_penalty)):
            raise SpecdecError(f"length_penalty must be a finite number (got {self.length_penalty!r})",
                               "use 1.0 (the default), > 0 to favour longer, < 0 shorter sequences")
        if not (self.early_stopping is True or self.early_stopping is False or self.early_stopping == "never"):
            raise SpecdecError(f"early_stopping must be True, False or 'never' (got {self.early_stopping!r})")
        if not _is_int(self.min_new_tokens) or self.min_new_tokens < 0:
            raise SpecdecError(f"min_new_tokens must be an integer >= 0 (got {self.min_new_tokens!r})")
        if not _is_int(self.no_repeat_ngram_size) or self.no_repeat_ngram_size < 0:
            raise SpecdecError(f"no_repeat_ngram_size must be an integer >= 0 (got {self.no_repeat_ngram_size!r})",
                               "use 0 to allow repeats")
        if self.num_beams > 1 and self.temperature > 0:
            raise SpecdecError(f"beam search is deterministic: temperature {self.temperature} with num_beams "
                               f"{self.num_beams} is not supported", "use temperature=0 with beams, or num_beams=1 "
                               "to sample")

    def as_dict(self) -> dict:
        """Fields by name; a DraftSource object is given by its name."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not isinstance(out["draft"], str):
            out["draft"] = getattr(out["draft"], "name", type(out["draft"]).__name__)
        return out


def _is_source(value) -> bool:
    """A DraftSource (runtime/decoding/round.py) by what it does: the request layer does not import decoding."""
    return all(callable(getattr(value, method, None)) for method in ("start", "propose", "commit"))


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
