"""What the measuring commands share: per-repeat sums of a configuration's runs (Cell), the acceptance counts of an
untimed stream pass (Acceptance), the filters' names, the seeds, the interleaving order, tasks, spreads."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from specdec.runtime import Params

from . import costs

SUMMED = ("total_s", "new_tokens", "target_calls", "draft_calls", "proposed", "accepted", "ort_runs", "encoder_s",
          "draft_s", "target_s", "host_s", "requests")
PLAIN = costs.PLAIN                                # the filter (top_k, top_p) `none`: plain sampling


def filter_label(f) -> str:
    """A (top_k, top_p) filter as --filters spells it: `none` or `K:P` (e.g. `50:0.9`)."""
    return "none" if tuple(f) == PLAIN else f"{f[0]}:{f[1]:g}"


def filter_key(name, f) -> str:
    """The JSON key of `name` (a temperature, a gamma) under filter `f`: `name`, or `name@K:P` when filtered."""
    return str(name) if tuple(f) == PLAIN else f"{name}@{filter_label(f)}"


@dataclass
class Cell:
    """Stats of one configuration summed over prompts, per repeat; with `source_keys`, Stats.sources summed too."""
    per_repeat: list = field(default_factory=list)     # [{stat: sum over prompts}]
    sources: dict = field(default_factory=dict)        # source name -> {key of source_keys: sum}
    summed = SUMMED
    source_keys = ()

    def repeat_sums(self, repeat: int) -> dict:
        while len(self.per_repeat) <= repeat:
            self.per_repeat.append(dict.fromkeys(self.summed, 0))
        return self.per_repeat[repeat]

    def add(self, repeat: int, stats) -> None:
        r = self.repeat_sums(repeat)
        for k in self.summed:
            r[k] += self.stat(k, stats)
        for name, s in stats.sources.items() if self.source_keys else ():
            sums = self.sources.setdefault(name, dict.fromkeys(self.source_keys, 0))
            for k in self.source_keys:
                sums[k] += getattr(s, k)

    def stat(self, key: str, stats) -> float:
        """What one request adds to `key`."""
        return 1 if key == "requests" else getattr(stats, key)

    def pooled(self) -> dict:
        return {k: sum(r[k] for r in self.per_repeat) for k in self.summed}

    def ms_per_token(self, decode_only: bool = False) -> list:
        """Per repeat; `decode_only`: without the encoder runs (Stats.encoder_s)."""
        return [1000.0 * (r["total_s"] - (r["encoder_s"] if decode_only else 0.0)) / max(r["new_tokens"], 1)
                for r in self.per_repeat]


@dataclass
class Acceptance:
    """Per-iteration acceptance counts from stream(). alpha-hat = accepted / (accepted + rejections): the guesses
    actually tested (Algorithm 1 stops at the first rejection), Theorem 3.8's alpha's maximum-likelihood estimate."""
    accepted: int = 0
    rejections: int = 0
    iterations: int = 0
    tested_at: list = field(default_factory=list)      # position k (1-based) -> guesses tested there
    accepted_at: list = field(default_factory=list)
    runs_by_guesses: Counter = field(default_factory=Counter)    # guesses k verified by a target run -> target runs

    def add(self, proposed: int, accepted: int) -> None:
        self.runs_by_guesses[proposed] += 1
        if proposed <= 0:
            return
        self.iterations += 1
        self.accepted += accepted
        self.rejections += accepted < proposed
        grow = proposed - len(self.tested_at)
        self.tested_at += [0] * grow
        self.accepted_at += [0] * grow
        for k in range(min(accepted + 1, proposed)):
            self.tested_at[k] += 1
            self.accepted_at[k] += k < accepted

    @property
    def alpha(self) -> float | None:
        tested = self.accepted + self.rejections
        return self.accepted / tested if tested else None

    def by_position(self) -> list:
        return [a / t if t else None for a, t in zip(self.accepted_at, self.tested_at)]


def measure_acceptance(dec, prompts, params: Params, repeat: int = 0) -> tuple[Acceptance, list]:
    """Stream every prompt once with `params` (the seeds of `repeat`): (Acceptance, the token ids)."""
    acc, outputs = Acceptance(), []
    for i, p in enumerate(prompts):
        last_p = last_a = 0
        tokens = []
        for piece in dec.stream(**p.kwargs(), params=params, seed=seed_for(repeat, i)):
            tokens.extend(piece.token_ids)
            st = piece.stats
            acc.add(st.proposed - last_p, st.accepted - last_a)
            last_p, last_a = st.proposed, st.accepted
        outputs.append(tokens)
    return acc, outputs


def seed_for(repeat: int, prompt_index: int) -> int:
    return 1000 * repeat + prompt_index


def rotated(configs: list, shift: int) -> list:
    shift %= len(configs)
    return configs[shift:] + configs[:shift]


def task_of(prompt) -> str:
    return prompt.task or "-"


def tasks_of(prompts) -> dict:
    """task -> how many prompts it has, in the order tasks first appear."""
    return dict(Counter(map(task_of, prompts)))


def per_repeat_ratios(numerator: Cell, denominator: Cell, decode_only: bool = False) -> list:
    """ms/token of `numerator` over `denominator`, repeat by repeat (both ran interleaved in every repeat)."""
    return [a / b for a, b in zip(numerator.ms_per_token(decode_only), denominator.ms_per_token(decode_only))]


def spread(values) -> dict:
    p25, p75 = (float(q) for q in np.percentile(values, [25, 75]))
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "p25": p25, "p75": p75}
