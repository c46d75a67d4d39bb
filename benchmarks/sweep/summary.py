"""The sweep's summary: one row per (temperature, filter, gamma), and what is read off the rows: the best gamma per
(filter, temperature), greedy exactness, what a filter costs, and where an iteration's time goes."""

from __future__ import annotations

import statistics

from specdec.runtime import Params

from ..common import costs, theory
from ..common.runs import PLAIN, filter_key, per_repeat_ratios, spread


def encoder_runs(pooled: dict, gamma: int, draft_encoder: bool = True) -> int:
    """The target's encoder per request, the draft's too at gamma > 0 if it has one (a Whisper draft may not)."""
    return pooled["requests"] * (2 if gamma > 0 and draft_encoder else 1)


def ort_runs_per_iteration(pooled: dict, gamma: int, draft_encoder: bool = True) -> float:
    return (pooled["ort_runs"] - encoder_runs(pooled, gamma, draft_encoder)) / max(pooled["target_calls"], 1)


def head_ms_per_token(probe: dict | None, pooled: dict, gamma: int, temperature: float, top_k: int = 0,
                      top_p: float = 1.0, runs_by_guesses: dict | None = None) -> float | None:
    """NOTES' head_ms_per_token_estimated (without `runs_by_guesses`, every run verifies gamma), or None."""
    if not pooled["new_tokens"]:
        return None
    mix = {int(k): n for k, n in (runs_by_guesses or {}).items() if n} or {gamma: 1}
    heads = [costs.head_lookup(probe, "target", k, temperature, top_k, top_p) for k in mix]
    draft = costs.head_lookup(probe, "draft", 0, temperature, top_k, top_p) if pooled["draft_calls"] else 0.0
    if None in heads or draft is None:
        return None
    per_run = sum(ms * n for ms, n in zip(heads, mix.values())) / sum(mix.values())
    return (draft * pooled["draft_calls"] + per_run * pooled["target_calls"]) / pooled["new_tokens"]


def summarize(cells: dict, gamma_max: int, acceptance: dict, probe: dict, base: Params) -> list[dict]:
    """One row per (temperature, filter, gamma); speedups against gamma = 0 of the same T and filter."""
    rows = []
    for (t, f, g), cell in cells.items():
        p, ms = cell.pooled(), cell.ms_per_token()
        iters, tokens = max(p["target_calls"], 1), max(p["new_tokens"], 1)
        acc = acceptance[(t, f, g)]
        mix = acc.runs_by_guesses
        head = head_ms_per_token(probe, p, g, t, *f, mix)
        host_per_token = 1000.0 * p["host_s"] / tokens
        rate = p["accepted"] / p["proposed"] if p["proposed"] else None
        row = {"temperature": t, "gamma": g, "top_k": f[0], "top_p": f[1], "lenience": base.lenience,
               "repeats": len(ms),
               **{k: p[k] for k in ("new_tokens", "target_calls", "draft_calls", "ort_runs")},
               "encoder_runs": encoder_runs(p, g), "ms_per_token": spread(ms),
               "tokens_per_s": 1000.0 / statistics.median(ms), "acceptance_rate": rate,
               "alpha": acc.alpha if acc.alpha is not None else rate,     # alpha-hat, or the (biased) pooled rate
               "tokens_per_target_call": p["new_tokens"] / iters,
               "ort_runs_per_iteration": ort_runs_per_iteration(p, g),
               "iteration_ms": 1000.0 * (p["total_s"] - p["encoder_s"]) / iters,
               "host_ms_per_iteration": 1000.0 * p["host_s"] / iters, "host_ms_per_token": host_per_token,
               "host_fraction": p["host_s"] / p["total_s"] if p["total_s"] else 0.0,
               "head_ms_per_token_estimated": head,
               "sampling_host_ms_per_token": host_per_token + head if head is not None else None,
               "target_ms_per_call": 1000.0 * p["target_s"] / iters,
               "draft_ms_per_call": 1000.0 * p["draft_s"] / p["draft_calls"] if p["draft_calls"] else None,
               "ms_per_token_by_part": {part: 1000.0 * p[f"{part}_s"] / tokens
                                        for part in ("encoder", "draft", "target", "host")}}
        if mix:
            row["target_runs_by_guesses"] = {str(k): n for k, n in sorted(mix.items())}
        if acc.alpha is not None:
            row.update(alpha_by_position=acc.by_position(), alpha_iterations=acc.iterations)
        baseline = cells.get((t, f, 0))
        if baseline is not None:
            bp = baseline.pooled()
            step = 1000.0 * bp["target_s"] / max(bp["target_calls"], 1)     # gamma = 0's target run, head included
            row.update(target_step_ms=step, baseline_ms_per_token=statistics.median(baseline.ms_per_token()),
                       speedup=spread(per_repeat_ratios(baseline, cell)), verify_ratio=row["target_ms_per_call"] / step)
            alpha = row["alpha"]
            if g > 0 and row["draft_ms_per_call"] is not None and alpha is not None:
                c = row["draft_ms_per_call"] / step
                base_over = 1000.0 * bp["host_s"] / max(bp["target_calls"], 1) / step
                row.update(c=c, expected_tokens_per_call=theory.expected_tokens(alpha, g),
                           predicted_speedup=theory.predicted_speedup(alpha, g, c),
                           predicted_with_costs=theory.speedup_with_costs(
                               alpha, g, c, row["verify_ratio"], row["host_ms_per_iteration"] / step, base_over))
                row["measured_over_predicted"] = row["speedup"]["median"] / row["predicted_speedup"]
                row["best_gamma"], row["best_gamma_predicted_speedup"] = theory.best_gamma(alpha, c, gamma_max)
            else:
                one = 1.0 if g == 0 else None
                row.update(c=None, predicted_speedup=one, predicted_with_costs=one, best_gamma=None,
                           measured_over_predicted=row["speedup"]["median"] if g == 0 else None,
                           best_gamma_predicted_speedup=None)
        rows.append(row)
    return rows


def row_filter(row: dict) -> tuple:
    return row["top_k"], row["top_p"]


def best_by_filter_and_temperature(rows: list[dict], gamma_max: int) -> dict:
    """Per (filter, T): the best measured gamma against gamma = 0, and Theorem 3.8's for the median alpha and c."""
    out = {}
    for t, f in dict.fromkeys((r["temperature"], row_filter(r)) for r in rows):
        same = [r for r in rows if r["temperature"] == t and row_filter(r) == f]
        spec = [r for r in same if r["gamma"] > 0 and r.get("c") is not None]
        if not spec:
            continue
        best = max(spec, key=lambda r: r["speedup"]["median"])
        base = next(r for r in same if r["gamma"] == 0)
        alpha, c = statistics.median(r["alpha"] for r in spec), statistics.median(r["c"] for r in spec)
        g_star, s_star = theory.best_gamma(alpha, c, gamma_max)
        out[filter_key(t, f)] = {
            "temperature": t, "top_k": f[0], "top_p": f[1], "measured_best_gamma": best["gamma"],
            "measured_speedup": best["speedup"]["median"],
            **{k: best[k] for k in ("predicted_speedup", "measured_over_predicted", "predicted_with_costs")},
            "baseline_ms_per_token": base["ms_per_token"]["median"],
            "best_ms_per_token": best["ms_per_token"]["median"],
            **{f"{who}_{k}": r[k] for who, r in (("baseline", base), ("best", best))
               for k in ("sampling_host_ms_per_token", "ort_runs_per_iteration")},
            "alpha_median": alpha, "c_median": c, "theorem_best_gamma": g_star, "theorem_best_speedup": s_star,
            "gap": gap(best, base)}
    return out


def greedy_agreement(outputs: dict) -> dict:
    """At T = 0, per (filter, gamma): the prompts where it gives gamma = 0's tokens with the same filter."""
    return {filter_key(g, f): {"agree": sum(a == b for a, b in zip(seqs, outputs[(t, f, 0)])),
                               "prompts": len(outputs[(t, f, 0)])}
            for (t, f, g), seqs in outputs.items() if t == 0 and (t, f, 0) in outputs}


def filter_cost(cells: dict) -> list[dict]:
    """NOTES' filter_cost; empty when the sweep has no plain filter."""
    return [{"temperature": t, "gamma": g, "top_k": f[0], "top_p": f[1],
             "ms_per_token": statistics.median(cell.ms_per_token()),
             "plain_ms_per_token": statistics.median(cells[(t, PLAIN, g)].ms_per_token()),
             "ratio_to_plain": spread(per_repeat_ratios(cell, cells[(t, PLAIN, g)]))}
            for (t, f, g), cell in cells.items() if f != PLAIN and (t, PLAIN, g) in cells]


def gap(row: dict, base: dict) -> dict:
    """Where an iteration's time goes, in ms: Theorem 3.8 charges (gamma c + 1) target steps (gamma = 0's target run);
    the measured iteration also pays the target run's extra, the host work and the encoders (spread over iterations)."""
    step, iters = row["target_step_ms"], max(row["target_calls"], 1)
    per_iter = {k: v * row["new_tokens"] / iters for k, v in row["ms_per_token_by_part"].items()}
    base_parts = {k: v * base["new_tokens"] / max(base["target_calls"], 1)
                  for k, v in base["ms_per_token_by_part"].items()}
    head = row.get("head_ms_per_token_estimated")
    return {"target_step_ms": step, "theorem_iteration_ms": (row["gamma"] * row["c"] + 1.0) * step,
            "measured_iteration_ms": sum(per_iter.values()), "draft_ms": per_iter["draft"],
            "target_ms": per_iter["target"], "target_extra_over_one_step_ms": per_iter["target"] - step,
            "host_ms": per_iter["host"], "encoders_ms": per_iter["encoder"],
            "head_ms_estimated": head * row["new_tokens"] / iters if head is not None else None,
            "ort_runs_per_iteration": row["ort_runs_per_iteration"],
            "baseline_iteration_ms": sum(base_parts.values()),
            "baseline_overhead_ms": base_parts["host"] + base_parts["encoder"],
            "tokens_per_call": row["tokens_per_target_call"],
            "expected_tokens_per_call": row["expected_tokens_per_call"]}
