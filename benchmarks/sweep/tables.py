"""The tables of `specdec-bench sweep`, each in both renderings (common/tables.py), the notes of its JSON keys and
its Markdown report."""

from __future__ import annotations

from ..common.report import filter_text, head_grid_part, peers_part, sweep_filters_text, verify_ratios_text
from ..common.runs import filter_label
from ..common.tables import Column, fmt, lines, markdown_table, same
from .summary import row_filter


def _ms_spread(r: dict) -> str:
    ms = r["ms_per_token"]
    return f"{ms['median']:.3f} ({ms['min']:.3f}-{ms['max']:.3f})"


def _half_range(spread: dict, spec: str = ".2f") -> str:
    return fmt((spread["max"] - spread["min"]) / 2, spec)


_SETTING = (same("T", lambda r: fmt(r["temperature"], "g")),
            same("filter", lambda r: filter_label(row_filter(r))),
            Column("gamma", "γ", lambda r: str(r["gamma"])))

SWEEP = _SETTING + (
    Column("ms/tok", "ms/token (min-max)", lambda r: fmt(r["ms_per_token"]["median"]), _ms_spread),
    Column("+-", None, lambda r: _half_range(r["ms_per_token"])),
    Column("tok/s", "tokens/s", lambda r: fmt(r["tokens_per_s"], ".1f"), lambda r: fmt(r["tokens_per_s"], ".0f")),
    Column("acc.rate", "accepted/proposed", lambda r: fmt(r.get("acceptance_rate"))),
    Column("alpha", "α̂", lambda r: fmt(r["alpha"])),
    Column("tok/call", "tokens/call", lambda r: fmt(r["tokens_per_target_call"])),
    Column("ORT/iter", "ORT runs/iter", lambda r: fmt(r["ort_runs_per_iteration"])),
    same("c", lambda r: fmt(r.get("c"), ".3f")),
    Column("verify_x", "verify ×", lambda r: fmt(r.get("verify_ratio"))),
    Column("host/iter", "host ms/iter", lambda r: fmt(r["host_ms_per_iteration"], ".3f") + " ms",
           lambda r: fmt(r["host_ms_per_iteration"], ".3f")),
    Column("samp+host/tok", "samp+host ms/tok (est.)",
           lambda r: fmt(r.get("sampling_host_ms_per_token"), ".3f") + " ms",
           lambda r: fmt(r.get("sampling_host_ms_per_token"), ".3f")),
    same("speedup", lambda r: fmt(r.get("speedup", {}).get("median"))),
    Column("thm3.8", "Thm 3.8", lambda r: fmt(r.get("predicted_speedup"))),
    Column("ratio", "measured/Thm", lambda r: fmt(r.get("measured_over_predicted"))),
    Column("w/costs", "w/ costs", lambda r: fmt(r.get("predicted_with_costs"))),
    Column("best_g", "best γ", lambda r: fmt(r.get("best_gamma"), "d")))


def _part(name: str):
    return lambda r: fmt(r["ms_per_token_by_part"][name], ".3f")


# where the time goes, ms per generated token: encoders, draft runs, target runs, host (and, estimated, the
# sampling heads' share of the draft and target runs)
TIME = _SETTING + (
    same("encoders", _part("encoder")), same("draft runs", _part("draft")), same("target runs", _part("target")),
    same("host", _part("host")),
    Column("total", None, lambda r: fmt(sum(r["ms_per_token_by_part"].values()), ".3f")),
    same("host %", lambda r: fmt(100 * r["host_fraction"], ".1f")),
    same("heads in runs (est.)", lambda r: fmt(r.get("head_ms_per_token_estimated"), ".3f")))


def summary_lines(rows: list[dict], best: dict) -> tuple[list[str], list[list[str]]]:
    """The acceptance summary, one line per (temperature, filter): ms/token at gamma = 0 and at the best measured
    gamma, samp+host ms/token and ORT runs per iteration at both, measured / Theorem 3.8."""
    headers = ["T", "filter", "ms/tok g=0", "best g", "ms/tok best g", "speedup", "measured/thm3.8",
               "samp+host/tok g=0", "samp+host/tok best g", "ORT runs/iter g=0", "ORT runs/iter best g"]
    out = []
    for b in best.values():
        base = next((r for r in rows if r["temperature"] == b["temperature"] and row_filter(r) == row_filter(b)
                     and r["gamma"] == 0), {})
        out.append([fmt(b["temperature"], "g"), filter_text(base), fmt(b["baseline_ms_per_token"], ".3f"),
                    str(b["measured_best_gamma"]), fmt(b["best_ms_per_token"], ".3f"), fmt(b["measured_speedup"]),
                    fmt(b["measured_over_predicted"]), fmt(b.get("baseline_sampling_host_ms_per_token"), ".3f"),
                    fmt(b.get("best_sampling_host_ms_per_token"), ".3f"),
                    fmt(b["baseline_ort_runs_per_iteration"]), fmt(b["best_ort_runs_per_iteration"])])
    return headers, out


def filter_cost_lines(entries: list[dict]) -> tuple[list[str], list[list[str]]]:
    """What each filter costs per generated token (JSON `filter_cost`), one line per (temperature, filter, gamma):
    its ms/token, plain sampling's at the same temperature and gamma, and the median and min-max of the per-repeat
    ratios."""
    headers = ["T", "filter", "gamma", "ms/tok", "ms/tok none", "x none", "x none min-max"]
    out = []
    for e in entries:
        ratio = e["ratio_to_plain"]
        out.append([fmt(e["temperature"], "g"), filter_label(row_filter(e)), str(e["gamma"]),
                    fmt(e["ms_per_token"], ".3f"), fmt(e["plain_ms_per_token"], ".3f"), fmt(ratio["median"], ".3f"),
                    f"{ratio['min']:.3f}-{ratio['max']:.3f}"])
    return headers, out


NOTES = {
    "export_format_2": "no sampler graphs: each draft run is decoder + standardize/draw (G = 0) and each target run "
                       "decoder + accept/residual over the G guesses (G = 0 at gamma = 0); Stats splits the time "
                       "into encoder_s, draft_s, target_s and host_s",
    "ort_runs_per_iteration": "(stats.ort_runs - encoder runs) / target_calls: 1 at gamma = 0, k + 1 for an "
                              "iteration that drafts k guesses",
    "sampling_host_ms_per_token": "host_ms_per_token (measured) + head_ms_per_token_estimated",
    "head_ms_per_token_estimated": "ESTIMATED from cost_probe.head_ms (the head timed alone): head(G=0) x draft "
                                   "runs + head(G=k) x target runs verifying k guesses (mix of k from the untimed "
                                   "stream pass), over generated tokens",
    "c": "draft_s / draft_calls over gamma = 0's target_s / target_calls; both include their sampling head",
    "predicted_with_costs": "E[tokens] (1 + o0) / (gamma c + verify_ratio + o), o and o0 = host ms per iteration "
                            "(speculative, baseline) in target steps; no separate sampler term",
    "filter_cost": "per (temperature, gamma, filter other than none): ms/token (median over repeats), plain "
                   "sampling's at the same temperature and gamma, and ratio_to_plain: per repeat filtered / plain "
                   "ms/token (interleaved), spread over repeats",
    "best": "keyed by the temperature for plain sampling ('0.0') and 'T@K:P' for a top_k:top_p filter "
            "('1.0@50:0.9'); greedy_agreement likewise by gamma ('2', '2@50:0.9')",
}


def markdown_sections(report: dict) -> list[str]:
    """The sweep's report in Markdown (after the machine line)."""
    s, probe = report["settings"], report["cost_probe"]
    parts = [f"{s['prompts']} prompts ({s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
             f"{s['repeats']} repeats; {sweep_filters_text(s)}."]
    if len(s["filters"]) > 1:
        parts.append("Filters (ms per generated token, median over repeats; × none: the filter's ms/token over "
                     "plain sampling's at the same T and γ, per repeat (interleaved), median and min-max over "
                     "repeats):\n\n" + markdown_table(*filter_cost_lines(report["filter_cost"])))
    if report.get("best"):
        parts.append("Summary (per temperature and filter: γ = 0 and the best measured γ; samp+host = host "
                     "time measured + the sampling heads' in-graph cost *estimated* from the cost probe):\n\n" +
                     markdown_table(*summary_lines(report["results"], report["best"])))
    parts.append(markdown_table(*lines(SWEEP, report["results"], markdown=True)))
    parts.append("Where the time goes, ms per generated token (the sampling heads run inside the draft and "
                 "target runs; their share is estimated from the cost probe):\n\n" +
                 markdown_table(*lines(TIME, report["results"], markdown=True)))
    parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head): target "
                 f"step {fmt(probe['target_step_ms'], '.3f')} ms, draft step {fmt(probe['draft_step_ms'], '.3f')} "
                 f"ms, c = {fmt(probe['c'], '.3f')} (without the heads, estimated: "
                 f"{fmt(probe.get('c_without_head'), '.3f')}); verify ratio " + verify_ratios_text(probe) + ".")
    parts += head_grid_part(probe, "; an estimate of its cost inside a fused run")
    return parts + peers_part(report)
