"""The measured sweep: every (temperature, gamma) on the same sessions and prompts, interleaved with gamma = 0.

Order: for each repeat, for each prompt, for each temperature, every gamma of the list (gamma = 0 included) runs
back to back, the list rotated by one position per repeat. A configuration and its baseline are therefore never
more than a few generate calls apart, so slow drift (thermal, a neighbour's load) hits both alike; the speedup of
a repeat is its baseline's ms/token over the configuration's, and the reported speedup is the median over repeats.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from . import theory

SUMMED = ("total_s", "new_tokens", "target_calls", "draft_calls", "proposed", "accepted", "encoder_s", "draft_s",
          "verify_s", "sampling_s", "host_s")


@dataclass
class Cell:
    """Stats of one (temperature, gamma) configuration, summed over prompts, one entry per repeat."""
    per_repeat: list = field(default_factory=list)     # [{stat: sum over prompts}]

    def add(self, repeat: int, stats) -> None:
        while len(self.per_repeat) <= repeat:
            self.per_repeat.append({k: 0 for k in SUMMED})
        for k in SUMMED:
            self.per_repeat[repeat][k] += getattr(stats, k)

    def pooled(self) -> dict:
        return {k: sum(r[k] for r in self.per_repeat) for k in SUMMED}

    def ms_per_token(self) -> list:
        return [1000.0 * r["total_s"] / max(r["new_tokens"], 1) for r in self.per_repeat]


@dataclass
class Acceptance:
    """Per-iteration acceptance counts of one (temperature, gamma), from stream() (exact n and gamma per iteration).

    Algorithm 1 stops testing at the first rejection, so accepted / proposed (Stats.acceptance_rate) is not the
    per-token acceptance probability alpha of Theorem 3.8: with gamma guesses it estimates
    (alpha + ... + alpha^gamma) / gamma, which falls as gamma grows even when alpha does not. The maximum-likelihood
    estimate of alpha under the theorem's i.i.d. model counts the guesses actually tested: every accepted one and
    the first rejected one of each iteration: alpha-hat = accepted / (accepted + rejections)."""
    accepted: int = 0
    rejections: int = 0
    iterations: int = 0
    tested_at: list = field(default_factory=list)      # position k (1-based) -> guesses tested there
    accepted_at: list = field(default_factory=list)

    def add(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        self.iterations += 1
        self.accepted += accepted
        self.rejections += accepted < proposed
        while len(self.tested_at) < proposed:
            self.tested_at.append(0)
            self.accepted_at.append(0)
        for k in range(min(accepted + 1, proposed)):
            self.tested_at[k] += 1
            if k < accepted:
                self.accepted_at[k] += 1

    @property
    def alpha(self) -> float | None:
        tested = self.accepted + self.rejections
        return self.accepted / tested if tested else None

    def by_position(self) -> list:
        return [a / t if t else None for a, t in zip(self.accepted_at, self.tested_at)]


def measure_acceptance(dec, prompts, gamma: int, temperature: float, max_new_tokens: int, repeat: int = 0
                       ) -> tuple[Acceptance, list]:
    """Stream every prompt once (the seeds of `repeat`): per-iteration accepted/proposed, and the token ids."""
    acc, outputs = Acceptance(), []
    for i, p in enumerate(prompts):
        last_p = last_a = 0
        tokens = []
        for piece in dec.stream(input_ids=p.ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                temperature=temperature, seed=seed_for(repeat, i)):
            tokens.extend(piece.token_ids)
            st = piece.stats
            acc.add(st.proposed - last_p, st.accepted - last_a)
            last_p, last_a = st.proposed, st.accepted
        outputs.append(tokens)
    return acc, outputs


def seed_for(repeat: int, prompt_index: int) -> int:
    return 1000 * repeat + prompt_index


def run_sweep(dec, prompts, gammas, temperatures, max_new_tokens: int, repeats: int, progress=None,
              warmup: bool = True):
    """Run everything; returns ({(T, gamma): Cell}, {(T, gamma): [token ids per prompt]} (repeat 0's seeds),
    {(T, gamma): Acceptance})."""
    gammas = list(gammas)
    cells = {(t, g): Cell() for t in temperatures for g in gammas}
    outputs = {(t, g): [] for t in temperatures for g in gammas}
    if warmup:          # first calls allocate arenas and fill caches: never measured
        for t in temperatures:
            for g in gammas:
                dec.generate(input_ids=prompts[0].ids, max_new_tokens=max_new_tokens, gamma=g, temperature=t,
                             seed=0)
                if progress:
                    progress.update(1)
    acceptance = {}
    for t in temperatures:       # untimed: stream() decodes text every iteration, which the timed runs must not pay
        for g in gammas:
            acceptance[(t, g)], outputs[(t, g)] = measure_acceptance(dec, prompts, g, t, max_new_tokens)
            if progress:
                progress.update(1)
    for r in range(repeats):
        order = gammas[r % len(gammas):] + gammas[:r % len(gammas)]
        for i, p in enumerate(prompts):
            for t in temperatures:
                for g in order:
                    res = dec.generate(input_ids=p.ids, max_new_tokens=max_new_tokens, gamma=g, temperature=t,
                                       seed=seed_for(r, i))
                    cells[(t, g)].add(r, res.stats)
                    if progress:
                        progress.update(1)
    return cells, outputs, acceptance


def _spread(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "p25": _quantile(values, 0.25), "p75": _quantile(values, 0.75)}


def _quantile(values, q: float) -> float:
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(cells: dict, gamma_max: int, acceptance: dict | None = None) -> list[dict]:
    """One row per (temperature, gamma): latency, alpha-hat, costs, measured and predicted speedups."""
    rows = []
    acceptance = acceptance or {}
    for (t, g), cell in sorted(cells.items()):
        base = cells[(t, 0)] if (t, 0) in cells else None
        pooled = cell.pooled()
        ms = cell.ms_per_token()
        iters = max(pooled["target_calls"], 1)
        tokens = max(pooled["new_tokens"], 1)
        row = {
            "temperature": t, "gamma": g, "repeats": len(ms),
            "new_tokens": pooled["new_tokens"], "target_calls": pooled["target_calls"],
            "draft_calls": pooled["draft_calls"],
            "ms_per_token": _spread(ms),
            "tokens_per_s": 1000.0 / statistics.median(ms),
            "acceptance_rate": pooled["accepted"] / pooled["proposed"] if pooled["proposed"] else None,
            "alpha": None,
            "tokens_per_target_call": pooled["new_tokens"] / iters,
            "iteration_ms": 1000.0 * (pooled["total_s"] - pooled["encoder_s"]) / iters,
            "host_ms_per_iteration": 1000.0 * pooled["host_s"] / iters,
            "host_fraction": pooled["host_s"] / pooled["total_s"] if pooled["total_s"] else 0.0,
            "sampling_ms_per_iteration": 1000.0 * pooled["sampling_s"] / iters,
            "verify_ms_per_call": 1000.0 * pooled["verify_s"] / iters,
            "draft_ms_per_call": 1000.0 * pooled["draft_s"] / pooled["draft_calls"] if pooled["draft_calls"]
            else None,
            "ms_per_token_by_part": {part: 1000.0 * pooled[f"{part}_s"] / tokens
                                     for part in ("encoder", "draft", "verify", "sampling", "host")},
        }
        acc = acceptance.get((t, g))
        if acc is not None and acc.alpha is not None:
            row["alpha"] = acc.alpha
            row["alpha_by_position"] = acc.by_position()
            row["alpha_iterations"] = acc.iterations
        elif pooled["proposed"]:          # no per-iteration data: the (biased for gamma > 1) pooled rate
            row["alpha"] = row["acceptance_rate"]
        if base is not None:
            bp = base.pooled()
            step_ms = 1000.0 * bp["verify_s"] / max(bp["target_calls"], 1)
            base_over = 1000.0 * (bp["sampling_s"] + bp["host_s"]) / max(bp["target_calls"], 1) / step_ms
            speedups = [b / m for b, m in zip(base.ms_per_token(), ms)]
            row["target_step_ms"] = step_ms
            row["speedup"] = _spread(speedups)
            row["verify_ratio"] = row["verify_ms_per_call"] / step_ms
            if g > 0 and row["draft_ms_per_call"] is not None and row["alpha"] is not None:
                c = row["draft_ms_per_call"] / step_ms
                alpha = row["alpha"]
                over = (row["sampling_ms_per_iteration"] + row["host_ms_per_iteration"]) / step_ms
                row["c"] = c
                row["expected_tokens_per_call"] = theory.expected_tokens(alpha, g)
                row["predicted_speedup"] = theory.predicted_speedup(alpha, g, c)
                row["measured_over_predicted"] = row["speedup"]["median"] / row["predicted_speedup"]
                row["predicted_with_costs"] = theory.speedup_with_costs(alpha, g, c, row["verify_ratio"], over,
                                                                        base_over)
                row["best_gamma"], row["best_gamma_predicted_speedup"] = theory.best_gamma(alpha, c, gamma_max)
            else:
                row.update(c=None, predicted_speedup=1.0 if g == 0 else None,
                           measured_over_predicted=row["speedup"]["median"] if g == 0 else None,
                           predicted_with_costs=1.0 if g == 0 else None, best_gamma=None,
                           best_gamma_predicted_speedup=None)
        rows.append(row)
    return rows


def best_by_temperature(rows: list[dict], gamma_max: int) -> dict:
    """Per temperature: the gamma with the best measured speedup, its prediction, and the gamma Theorem 3.8
    favours for the typical (median over gamma) alpha-hat and c."""
    out = {}
    for t in sorted({r["temperature"] for r in rows}):
        spec = [r for r in rows if r["temperature"] == t and r["gamma"] > 0 and r.get("c") is not None]
        if not spec:
            continue
        best = max(spec, key=lambda r: r["speedup"]["median"])
        alpha = statistics.median(r["alpha"] for r in spec)
        c = statistics.median(r["c"] for r in spec)
        g_star, s_star = theory.best_gamma(alpha, c, gamma_max)
        out[str(t)] = {
            "measured_best_gamma": best["gamma"],
            "measured_speedup": best["speedup"]["median"],
            "predicted_speedup": best["predicted_speedup"],
            "measured_over_predicted": best["measured_over_predicted"],
            "predicted_with_costs": best["predicted_with_costs"],
            "alpha_median": alpha, "c_median": c,
            "theorem_best_gamma": g_star, "theorem_best_speedup": s_star,
            "gap": gap(best, next(r for r in rows if r["temperature"] == t and r["gamma"] == 0)),
        }
    return out


def greedy_agreement(outputs: dict) -> dict:
    """At temperature 0 every gamma must give the gamma = 0 tokens (exactness); per gamma: prompts that agree."""
    out = {}
    for (t, g), seqs in outputs.items():
        if t != 0 or (t, 0) not in outputs:
            continue
        base = outputs[(t, 0)]
        out[str(g)] = {"agree": sum(a == b for a, b in zip(seqs, base)), "prompts": len(base)}
    return out


def gap(row: dict, base: dict) -> dict:
    """Where an iteration's time goes against Theorem 3.8's model of it, in ms per iteration.

    Theorem 3.8 charges an iteration (gamma c + 1) target steps and the baseline 1 step per token. The measured
    iteration also pays: the verify pass's extra cost over one step, the sampler graphs, the host work, and the
    encoders (per request, spread over the iterations); the baseline pays its own sampler, host and encoder time."""
    step = row["target_step_ms"]
    g = row["gamma"]
    iters, base_iters = max(row["target_calls"], 1), max(base["target_calls"], 1)
    parts = row["ms_per_token_by_part"]
    per_iter = {k: v * row["new_tokens"] / iters for k, v in parts.items()}
    base_parts = {k: v * base["new_tokens"] / base_iters for k, v in base["ms_per_token_by_part"].items()}
    return {
        "target_step_ms": step,
        "theorem_iteration_ms": (g * row["c"] + 1.0) * step,
        "measured_iteration_ms": sum(per_iter.values()),
        "draft_ms": per_iter["draft"], "verify_ms": per_iter["verify"],
        "verify_extra_over_one_step_ms": per_iter["verify"] - step,
        "sampling_ms": per_iter["sampling"], "host_ms": per_iter["host"], "encoders_ms": per_iter["encoder"],
        "baseline_iteration_ms": sum(base_parts.values()),
        "baseline_overhead_ms": base_parts["sampling"] + base_parts["host"] + base_parts["encoder"],
        "tokens_per_call": row["tokens_per_target_call"],
        "expected_tokens_per_call": row["expected_tokens_per_call"],
    }
