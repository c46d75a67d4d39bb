"""The sweep's summary: one row per (temperature, filter, gamma) from its cells (measure.py) -- latency, alpha-hat,
costs, ORT runs, measured and predicted speedups against gamma = 0 of the same temperature and filter -- and what
is read off the rows: the best gamma per (filter, temperature), greedy exactness, what a filter costs, and where an
iteration's time goes against Theorem 3.8's model of it.

An export has no sampler graphs: the sampling work runs inside the draft runs (standardize/draw) and the
target runs (accept/residual), so Stats splits a request into encoder_s, draft_s, target_s and host_s. The in-graph
sampling share is not observable from the loop; "samp+host" adds the head's cost as the cost probe timed it alone
(common/costs.py) to the measured host time, and says that part is an estimate.
"""

from __future__ import annotations

import statistics

from specdec.runtime import Params

from ..common import costs, theory
from ..common.runs import PLAIN, filter_key, per_repeat_ratios, spread

PARTS = ("encoder", "draft", "target", "host")     # where the time goes; Stats.<part>_s


def encoder_runs(pooled: dict, gamma: int, draft_encoder: bool = True) -> int:
    """Encoder runs of a configuration: the target's once per request, the draft's too when gamma > 0 (at
    gamma = 0 the runtime never starts the draft) and it has an encoder of its own (`draft_encoder`; a Whisper draft
    that keeps the target's encoder has none)."""
    return pooled["requests"] * (2 if gamma > 0 and draft_encoder else 1)


def ort_runs_per_iteration(pooled: dict, gamma: int, draft_encoder: bool = True) -> float:
    """ONNX Runtime runs per iteration (target call), the encoders left out: 1 at gamma = 0, k + 1 for an
    iteration that drafts k guesses (k draft steps + 1 target run)."""
    return (pooled["ort_runs"] - encoder_runs(pooled, gamma, draft_encoder)) / max(pooled["target_calls"], 1)


def head_ms_per_token(probe: dict | None, pooled: dict, gamma: int, temperature: float, top_k: int = 0,
                      top_p: float = 1.0, runs_by_guesses: dict | None = None) -> float | None:
    """The speculative head's in-graph cost per generated token, ESTIMATED from the cost probe's head-alone
    timings: head(G = 0) x draft runs + head(G = k) x target runs that verified k guesses, over the tokens.
    `runs_by_guesses` ({k: target runs}, from the untimed stream pass) gives the mix of k; without it every target
    run is taken to verify gamma guesses. None when the probe has no head timings for this setting."""
    tokens = pooled["new_tokens"]
    if not tokens:
        return None
    mix = {int(k): n for k, n in (runs_by_guesses or {}).items() if n}
    if not mix:
        mix = {gamma: 1}
    total = sum(mix.values())
    per_target_run = 0.0
    for k, n in mix.items():
        ms = costs.head_lookup(probe, "target", k, temperature, top_k, top_p)
        if ms is None:
            return None
        per_target_run += ms * n / total
    draft = 0.0
    if pooled["draft_calls"]:
        ms = costs.head_lookup(probe, "draft", 0, temperature, top_k, top_p)
        if ms is None:
            return None
        draft = ms * pooled["draft_calls"]
    return (draft + per_target_run * pooled["target_calls"]) / tokens


def summarize(cells: dict, gamma_max: int, acceptance: dict | None = None, probe: dict | None = None,
              base: Params | None = None) -> list[dict]:
    """One row per (temperature, filter, gamma), in the sweep's order: latency, alpha-hat, costs, ORT runs,
    measured and predicted speedups (against gamma = 0 of the same temperature and filter). `probe`: the cost probe
    (for the head's estimated in-graph cost); `base`: the sweep's shared parameters (lenience)."""
    rows = []
    acceptance = acceptance or {}
    base = base or Params()
    for (t, f, g), cell in cells.items():
        baseline = cells.get((t, f, 0))
        top_k, top_p = f
        pooled = cell.pooled()
        ms = cell.ms_per_token()
        iters = max(pooled["target_calls"], 1)
        tokens = max(pooled["new_tokens"], 1)
        acc = acceptance.get((t, f, g))
        mix = acc.runs_by_guesses if acc is not None else None
        head = head_ms_per_token(probe, pooled, g, t, top_k, top_p, mix)
        host_per_token = 1000.0 * pooled["host_s"] / tokens
        row = {
            "temperature": t, "gamma": g, "top_k": top_k, "top_p": top_p, "lenience": base.lenience,
            "repeats": len(ms),
            "new_tokens": pooled["new_tokens"], "target_calls": pooled["target_calls"],
            "draft_calls": pooled["draft_calls"], "ort_runs": pooled["ort_runs"],
            "encoder_runs": encoder_runs(pooled, g),
            "ms_per_token": spread(ms),
            "tokens_per_s": 1000.0 / statistics.median(ms),
            "acceptance_rate": pooled["accepted"] / pooled["proposed"] if pooled["proposed"] else None,
            "alpha": None,
            "tokens_per_target_call": pooled["new_tokens"] / iters,
            "ort_runs_per_iteration": ort_runs_per_iteration(pooled, g),
            "iteration_ms": 1000.0 * (pooled["total_s"] - pooled["encoder_s"]) / iters,
            "host_ms_per_iteration": 1000.0 * pooled["host_s"] / iters,
            "host_ms_per_token": host_per_token,
            "host_fraction": pooled["host_s"] / pooled["total_s"] if pooled["total_s"] else 0.0,
            "head_ms_per_token_estimated": head,
            "sampling_host_ms_per_token": host_per_token + head if head is not None else None,
            "target_ms_per_call": 1000.0 * pooled["target_s"] / iters,
            "draft_ms_per_call": 1000.0 * pooled["draft_s"] / pooled["draft_calls"] if pooled["draft_calls"]
            else None,
            "ms_per_token_by_part": {part: 1000.0 * pooled[f"{part}_s"] / tokens for part in PARTS},
        }
        if mix:
            row["target_runs_by_guesses"] = {str(k): n for k, n in sorted(mix.items())}
        if acc is not None and acc.alpha is not None:
            row["alpha"] = acc.alpha
            row["alpha_by_position"] = acc.by_position()
            row["alpha_iterations"] = acc.iterations
        elif pooled["proposed"]:          # no per-iteration data: the (biased for gamma > 1) pooled rate
            row["alpha"] = row["acceptance_rate"]
        if baseline is not None:
            bp = baseline.pooled()
            base_iters = max(bp["target_calls"], 1)
            step_ms = 1000.0 * bp["target_s"] / base_iters        # one target run at gamma = 0, its head included
            base_over = 1000.0 * bp["host_s"] / base_iters / step_ms
            speedups = per_repeat_ratios(baseline, cell)
            row["target_step_ms"] = step_ms
            row["baseline_ms_per_token"] = statistics.median(baseline.ms_per_token())
            row["speedup"] = spread(speedups)
            row["verify_ratio"] = row["target_ms_per_call"] / step_ms
            if g > 0 and row["draft_ms_per_call"] is not None and row["alpha"] is not None:
                c = row["draft_ms_per_call"] / step_ms
                alpha = row["alpha"]
                over = row["host_ms_per_iteration"] / step_ms
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


def row_filter(row: dict) -> tuple:
    return row["top_k"], row["top_p"]


def best_by_filter_and_temperature(rows: list[dict], gamma_max: int) -> dict:
    """Per (filter, temperature), keyed filter_key(temperature, filter) ("0.0", "1.0@50:0.9"): the gamma with the
    best measured speedup, its prediction, and the gamma Theorem 3.8 favours for the typical (median over gamma)
    alpha-hat and c; with gamma = 0's and the best gamma's ms/token, samp+host ms/token and ORT runs per iteration
    (the acceptance summary)."""
    out = {}
    for t, f in dict.fromkeys((r["temperature"], row_filter(r)) for r in rows):
        same = [r for r in rows if r["temperature"] == t and row_filter(r) == f]
        spec = [r for r in same if r["gamma"] > 0 and r.get("c") is not None]
        if not spec:
            continue
        best = max(spec, key=lambda r: r["speedup"]["median"])
        base = next(r for r in same if r["gamma"] == 0)
        alpha = statistics.median(r["alpha"] for r in spec)
        c = statistics.median(r["c"] for r in spec)
        g_star, s_star = theory.best_gamma(alpha, c, gamma_max)
        out[filter_key(t, f)] = {
            "temperature": t, "top_k": f[0], "top_p": f[1],
            "measured_best_gamma": best["gamma"],
            "measured_speedup": best["speedup"]["median"],
            "predicted_speedup": best["predicted_speedup"],
            "measured_over_predicted": best["measured_over_predicted"],
            "predicted_with_costs": best["predicted_with_costs"],
            "baseline_ms_per_token": base["ms_per_token"]["median"],
            "best_ms_per_token": best["ms_per_token"]["median"],
            "baseline_sampling_host_ms_per_token": base["sampling_host_ms_per_token"],
            "best_sampling_host_ms_per_token": best["sampling_host_ms_per_token"],
            "baseline_ort_runs_per_iteration": base["ort_runs_per_iteration"],
            "best_ort_runs_per_iteration": best["ort_runs_per_iteration"],
            "alpha_median": alpha, "c_median": c,
            "theorem_best_gamma": g_star, "theorem_best_speedup": s_star,
            "gap": gap(best, base),
        }
    return out


def greedy_agreement(outputs: dict) -> dict:
    """At temperature 0 every gamma must give the tokens of gamma = 0 with the same filter (exactness); per
    (filter, gamma), keyed filter_key(gamma, filter) ("2", "2@50:0.9"): prompts that agree."""
    out = {}
    for (t, f, g), seqs in outputs.items():
        if t != 0 or (t, f, 0) not in outputs:
            continue
        base = outputs[(t, f, 0)]
        out[filter_key(g, f)] = {"agree": sum(a == b for a, b in zip(seqs, base)), "prompts": len(base)}
    return out


def filter_cost(cells: dict) -> list[dict]:
    """What a filter costs per generated token: for every (temperature, gamma) and every filter other than PLAIN,
    its ms/token (median over repeats) next to the plain filter's at the same temperature and gamma, and the ratio
    filtered / plain (per repeat, both interleaved in it; `ratio_to_plain` {median, min, max, p25, p75} over
    repeats). Empty when the sweep has no plain filter."""
    out = []
    for (t, f, g), cell in cells.items():
        plain = cells.get((t, PLAIN, g))
        if f == PLAIN or plain is None:
            continue
        out.append({"temperature": t, "gamma": g, "top_k": f[0], "top_p": f[1],
                    "ms_per_token": statistics.median(cell.ms_per_token()),
                    "plain_ms_per_token": statistics.median(plain.ms_per_token()),
                    "ratio_to_plain": spread(per_repeat_ratios(cell, plain))})
    return out


def gap(row: dict, base: dict) -> dict:
    """Where an iteration's time goes against Theorem 3.8's model of it, in ms per iteration.

    Theorem 3.8 charges an iteration (gamma c + 1) target steps and the baseline 1 step per token, a step being
    gamma = 0's target run (decoder + its sampling head). The measured iteration also pays: the target run's
    extra cost over one step (k+1 tokens, accept/residual), the host work and the encoders (per request, spread
    over the iterations); the baseline pays its own host and encoder time. The sampling heads are inside the
    draft and target runs; `head_ms_estimated` is their share as the cost probe estimates it."""
    step = row["target_step_ms"]
    g = row["gamma"]
    iters, base_iters = max(row["target_calls"], 1), max(base["target_calls"], 1)
    per_iter = {k: v * row["new_tokens"] / iters for k, v in row["ms_per_token_by_part"].items()}
    base_parts = {k: v * base["new_tokens"] / base_iters for k, v in base["ms_per_token_by_part"].items()}
    head = row.get("head_ms_per_token_estimated")
    return {
        "target_step_ms": step,
        "theorem_iteration_ms": (g * row["c"] + 1.0) * step,
        "measured_iteration_ms": sum(per_iter.values()),
        "draft_ms": per_iter["draft"], "target_ms": per_iter["target"],
        "target_extra_over_one_step_ms": per_iter["target"] - step,
        "host_ms": per_iter["host"], "encoders_ms": per_iter["encoder"],
        "head_ms_estimated": head * row["new_tokens"] / iters if head is not None else None,
        "ort_runs_per_iteration": row["ort_runs_per_iteration"],
        "baseline_iteration_ms": sum(base_parts.values()),
        "baseline_overhead_ms": base_parts["host"] + base_parts["encoder"],
        "tokens_per_call": row["tokens_per_target_call"],
        "expected_tokens_per_call": row["expected_tokens_per_call"],
    }
