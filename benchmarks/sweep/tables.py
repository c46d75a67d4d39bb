"""The report of `specdec-bench sweep` (`sections`), the notes of its JSON keys, and the lines `drafts` shares."""

from __future__ import annotations

from ..common.report import SAMP_HOST_NOTE, filter_text, peers_parts, probe_parts, sweep_filters_text
from ..common.runs import filter_label
from ..common.tables import Table, fmt
from .summary import row_filter


def settings_text(s: dict, swept: str, prompts: str | None = None, tasks: str = "") -> str:
    """The prompts' line: how many (`prompts`, default the count), from where, the configurations swept."""
    return (f"prompts: {prompts or s['prompts']} from {s['prompts_origin']}{tasks}; max_new_tokens "
            f"{s['max_new_tokens']}, "
            f"repeats {s['repeats']}, {swept}, temperature {','.join(f'{t:g}' for t in s['temperatures'])}; "
            f"{sweep_filters_text(s)}")


def agreement_text(entries: dict, lenience: float, against: str, every: str) -> str:
    """Greedy exactness: `entries` name -> {agree, prompts} against `against`; `every`: the line when all agree."""
    counts = {name: f"{name} {a['agree']}/{a['prompts']}" for name, a in entries.items()}
    bad = [counts[name] for name, a in entries.items() if a["agree"] != a["prompts"]]
    if lenience < 1.0:
        return (f"greedy agreement with {against} (not expected: lenience {lenience:g} < 1 is not exact): "
                + ", ".join(counts.values()))
    return f"greedy exactness: MISMATCH for {', '.join(bad)}" if bad else f"greedy exactness: {every}"


SWEEP = ("T", "filter", "gamma", "ms/tok", "+-", "min-max", "tok/s", "acc.rate", "alpha", "tok/call", "ORT/iter", "c",
         "verify_x", "host ms/iter", "samp+host ms/tok (est.)", "speedup", "thm3.8", "ratio", "w/costs", "best_g")
TIME = ("T", "filter", "gamma", "encoders", "draft runs", "target runs", "host", "total", "host %",
        "heads in runs (est.)")
SUMMARY = ("T", "filter", "ms/tok g=0", "best g", "ms/tok best g", "speedup", "measured/thm3.8", "samp+host/tok g=0",
           "samp+host/tok best g", "ORT runs/iter g=0", "ORT runs/iter best g")


def _setting(r: dict) -> list[str]:
    return [fmt(r["temperature"], "g"), filter_label(row_filter(r)), str(r["gamma"])]


def _sweep_row(r: dict) -> list[str]:
    ms = r["ms_per_token"]
    return _setting(r) + [
        fmt(ms["median"], ".3f"), fmt((ms["max"] - ms["min"]) / 2, ".3f"), f"{ms['min']:.3f}-{ms['max']:.3f}",
        fmt(r["tokens_per_s"], ".1f"), fmt(r.get("acceptance_rate")), fmt(r["alpha"]), fmt(r["tokens_per_target_call"]),
        fmt(r["ort_runs_per_iteration"]), fmt(r.get("c"), ".3f"), fmt(r.get("verify_ratio")),
        fmt(r["host_ms_per_iteration"], ".3f"), fmt(r.get("sampling_host_ms_per_token"), ".3f"),
        fmt(r.get("speedup", {}).get("median")), fmt(r.get("predicted_speedup")),
        fmt(r.get("measured_over_predicted")), fmt(r.get("predicted_with_costs")), fmt(r.get("best_gamma"), "d")]


def _time_row(r: dict) -> list[str]:
    parts = r["ms_per_token_by_part"]
    return _setting(r) + [fmt(parts[p], ".3f") for p in ("encoder", "draft", "target", "host")] + [
        fmt(sum(parts.values()), ".3f"), fmt(100 * r["host_fraction"], ".1f"),
        fmt(r.get("head_ms_per_token_estimated"), ".3f")]


def _summary_row(b: dict) -> list[str]:
    return [fmt(b["temperature"], "g"), filter_text(b), fmt(b["baseline_ms_per_token"], ".3f"),
            str(b["measured_best_gamma"]), fmt(b["best_ms_per_token"], ".3f"), fmt(b["measured_speedup"]),
            fmt(b["measured_over_predicted"]), fmt(b.get("baseline_sampling_host_ms_per_token"), ".3f"),
            fmt(b.get("best_sampling_host_ms_per_token"), ".3f"), fmt(b["baseline_ort_runs_per_iteration"]),
            fmt(b["best_ort_runs_per_iteration"])]


def _best_text(b: dict, several: bool) -> str:
    gp = b["gap"]
    return (f"T={b['temperature']:g}" + (f", filter {filter_label(row_filter(b))}" if several else "")
            + f": best measured gamma {b['measured_best_gamma']}: {b['best_ms_per_token']:.3f} ms/token vs "
            f"{b['baseline_ms_per_token']:.3f} at gamma=0, speedup {b['measured_speedup']:.2f}x vs Theorem 3.8 "
            f"{b['predicted_speedup']:.2f}x (ratio {b['measured_over_predicted']:.2f}; with measured costs "
            f"{b['predicted_with_costs']:.2f}x); Theorem 3.8 favours gamma {b['theorem_best_gamma']} "
            f"({b['theorem_best_speedup']:.2f}x) at alpha {b['alpha_median']:.2f}, c {b['c_median']:.3f}\n"
            f"  per iteration: Theorem 3.8 charges {gp['theorem_iteration_ms']:.3f} ms (gamma c + 1 steps of "
            f"{gp['target_step_ms']:.3f}); measured {gp['measured_iteration_ms']:.3f} ms = draft runs "
            f"{gp['draft_ms']:.3f} + target run {gp['target_ms']:.3f} ({gp['target_extra_over_one_step_ms']:+.3f} "
            f"over one step) + host {gp['host_ms']:.3f} + encoders {gp['encoders_ms']:.3f}; of the runs, sampling "
            f"heads ~{fmt(gp['head_ms_estimated'], '.3f')} (estimated); {gp['ort_runs_per_iteration']:.2f} ORT runs; "
            f"tokens/call {gp['tokens_per_call']:.2f} (expected from alpha {gp['expected_tokens_per_call']:.2f}); "
            f"the baseline's step costs {gp['baseline_iteration_ms']:.3f} ms")


def sections(report: dict) -> list:
    s, rows, best = report["settings"], report["results"], report.get("best") or {}
    several = len(s["filters"]) > 1
    parts = [settings_text(s, f"gamma {','.join(map(str, s['gammas']))}"), *probe_parts(report["cost_probe"]),
             Table("sweep (filter: top_k:top_p, none = plain; ms/tok: median over repeats, +-: half the min-max range; "
                   "acc.rate: accepted/proposed; alpha: accepted/(accepted + rejections), the per-token acceptance "
                   "probability; ORT/iter: ONNX Runtime runs per iteration, encoders left out; c: draft run / "
                   "gamma=0's target run, heads included; verify_x: target run / gamma=0's; speedup: median of "
                   "per-repeat ratios to gamma=0 of the same T and filter; thm3.8: (1-a^(g+1))/((1-a)(g c+1)); ratio: "
                   "measured/thm3.8; w/costs: the prediction with the measured target-run cost and host time; best_g: "
                   f"gamma maximising thm3.8)\n{SAMP_HOST_NOTE}",
                   SWEEP, [_sweep_row(r) for r in rows]),
             Table("where the time goes (ms per generated token; the sampling heads run inside the draft and target "
                   "runs, their share estimated from the cost probe)", TIME, [_time_row(r) for r in rows])]
    if several:
        cost = [_setting(e) + [fmt(e["ms_per_token"], ".3f"), fmt(e["plain_ms_per_token"], ".3f"),
                               fmt(e["ratio_to_plain"]["median"], ".3f"),
                               f"{e['ratio_to_plain']['min']:.3f}-{e['ratio_to_plain']['max']:.3f}"]
                for e in report["filter_cost"]]
        parts.append(Table("filters (ms/tok per generated token, median over repeats; x none: this filter's ms/token "
                           "over plain sampling's at the same T and gamma, per repeat (interleaved), median over "
                           "repeats, and its min-max)",
                           ("T", "filter", "gamma", "ms/tok", "ms/tok none", "x none", "x none min-max"), cost))
    if best:
        parts.append(Table("summary (per temperature and filter: gamma=0 and the best measured gamma)", SUMMARY,
                           [_summary_row({**b, "lenience": s["lenience"]}) for b in best.values()]))
        parts += [_best_text(b, several) for b in best.values()]
    if report["greedy_agreement"]:
        what = "gamma@filter" if several else "gamma"
        parts.append(agreement_text({f"{what} {k}": a for k, a in report["greedy_agreement"].items()}, s["lenience"],
                                    "gamma=0", "every gamma gives the gamma=0 tokens on every prompt"
                                    + (" with every filter (against gamma=0 with the same filter)" if several else "")))
    pr = report.get("profile")
    if pr:
        parts.append(Table(f"host profile (gamma {pr['gamma']}, T=0, {pr['iterations']} iterations): "
                           f"{pr['host_ms_per_iteration']:.3f} ms host per iteration; top functions by own time "
                           f"outside ONNX Runtime runs (full listing: {pr['listing']})",
                           ("ms/iter", "calls/iter", "function"),
                           [[f"{f['own_ms_per_iteration']:.4f}", f"{f['calls_per_iteration']:.1f}", f["function"]]
                            for f in pr["top"][:8]]))
    return parts + peers_parts(report)


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
