"""Plain-text tables for stdout, the JSON report and the measured-vs-predicted plot."""

from __future__ import annotations

import json
from pathlib import Path

from .sweep import filter_label, row_filter

SCHEMA = "specdec-bench/1"


def _f(value, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def table(headers: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


SAMP_HOST_NOTE = ("samp+host: host ms per generated token (measured) + the sampling heads' in-graph cost per token "
                  "(ESTIMATED: head-alone timings of the cost probe x draft and target runs)")


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


def filter_text(r: dict) -> str:
    parts = []
    if r.get("top_k"):
        parts.append(f"top_k {r['top_k']}")
    if r.get("top_p") is not None and r["top_p"] < 1.0:
        parts.append(f"top_p {r['top_p']:g}")
    if r.get("lenience") is not None and r["lenience"] < 1.0:
        parts.append(f"lenience {r['lenience']:g}")
    return ", ".join(parts) or "plain"


def sweep_filters_text(settings: dict) -> str:
    """The sweep's filters and lenience (JSON `settings`): `every configuration: top_k 5, top_p 0.9` for one
    filter, `filters (top_k:top_p) none, 50:0.9, interleaved; every configuration: lenience 1` for several."""
    filters = settings["filters"]
    if len(filters) == 1:
        return f"every configuration: {filter_text({**filters[0], 'lenience': settings['lenience']})}"
    labels = ", ".join(filter_label((f["top_k"], f["top_p"])) for f in filters)
    return f"filters (top_k:top_p) {labels}, interleaved; every configuration: lenience {settings['lenience']:g}"


def sweep_table(rows: list[dict]) -> str:
    headers = ["T", "filter", "gamma", "ms/tok", "+-", "tok/s", "acc.rate", "alpha", "tok/call", "ORT/iter", "c",
               "verify_x", "host/iter", "samp+host/tok", "speedup", "thm3.8", "ratio", "w/costs", "best_g"]
    lines = []
    for r in rows:
        ms = r["ms_per_token"]
        lines.append([_f(r["temperature"], "g"), filter_label(row_filter(r)), str(r["gamma"]), _f(ms["median"]),
                      _f((ms["max"] - ms["min"]) / 2), _f(r["tokens_per_s"], ".1f"), _f(r.get("acceptance_rate")),
                      _f(r["alpha"]), _f(r["tokens_per_target_call"]), _f(r["ort_runs_per_iteration"]),
                      _f(r.get("c"), ".3f"), _f(r.get("verify_ratio")), _f(r["host_ms_per_iteration"], ".3f") + " ms",
                      _f(r.get("sampling_host_ms_per_token"), ".3f") + " ms",
                      _f(r.get("speedup", {}).get("median")), _f(r.get("predicted_speedup")),
                      _f(r.get("measured_over_predicted")), _f(r.get("predicted_with_costs")),
                      _f(r.get("best_gamma"), "d")])
    return table(headers, lines)


def time_table(rows: list[dict]) -> str:
    """Where the time goes, ms per generated token: encoders, draft runs, target runs, host (and, estimated, the
    sampling heads' share of the draft and target runs)."""
    headers = ["T", "filter", "gamma", "encoders", "draft runs", "target runs", "host", "total", "host %",
               "heads in runs (est.)"]
    lines = []
    for r in rows:
        parts = r["ms_per_token_by_part"]
        total = sum(parts.values())
        lines.append([_f(r["temperature"], "g"), filter_label(row_filter(r)), str(r["gamma"])] +
                     [_f(parts[k], ".3f") for k in
                     ("encoder", "draft", "target", "host")] + [_f(total, ".3f"),
                     _f(100 * r["host_fraction"], ".1f"), _f(r.get("head_ms_per_token_estimated"), ".3f")])
    return table(headers, lines)


def summary_lines(rows: list[dict], best: dict) -> tuple[list[str], list[list[str]]]:
    """The acceptance summary, one line per (temperature, filter): ms/token at gamma = 0 and at the best measured
    gamma, samp+host ms/token and ORT runs per iteration at both, measured / Theorem 3.8."""
    headers = ["T", "filter", "ms/tok g=0", "best g", "ms/tok best g", "speedup", "measured/thm3.8",
               "samp+host/tok g=0", "samp+host/tok best g", "ORT runs/iter g=0", "ORT runs/iter best g"]
    lines = []
    for b in best.values():
        base = next((r for r in rows if r["temperature"] == b["temperature"] and row_filter(r) == row_filter(b)
                     and r["gamma"] == 0), {})
        lines.append([_f(b["temperature"], "g"), filter_text(base), _f(b["baseline_ms_per_token"], ".3f"),
                      str(b["measured_best_gamma"]), _f(b["best_ms_per_token"], ".3f"), _f(b["measured_speedup"]),
                      _f(b["measured_over_predicted"]), _f(b.get("baseline_sampling_host_ms_per_token"), ".3f"),
                      _f(b.get("best_sampling_host_ms_per_token"), ".3f"),
                      _f(b["baseline_ort_runs_per_iteration"]), _f(b["best_ort_runs_per_iteration"])])
    return headers, lines


def summary_table(rows: list[dict], best: dict) -> str:
    return table(*summary_lines(rows, best))


def filter_cost_lines(entries: list[dict]) -> tuple[list[str], list[list[str]]]:
    """What each filter costs per generated token (JSON `filter_cost`), one line per (temperature, filter, gamma):
    its ms/token, plain sampling's at the same temperature and gamma, and the median and min-max of the per-repeat
    ratios."""
    headers = ["T", "filter", "gamma", "ms/tok", "ms/tok none", "x none", "x none min-max"]
    lines = []
    for e in entries:
        ratio = e["ratio_to_plain"]
        lines.append([_f(e["temperature"], "g"), filter_label(row_filter(e)), str(e["gamma"]),
                      _f(e["ms_per_token"], ".3f"), _f(e["plain_ms_per_token"], ".3f"), _f(ratio["median"], ".3f"),
                      f"{ratio['min']:.3f}-{ratio['max']:.3f}"])
    return headers, lines


def filter_cost_table(entries: list[dict]) -> str:
    return table(*filter_cost_lines(entries))


def _head_grid(probe: dict) -> tuple[list[str], list[list[str]]]:
    """The head-alone timings as a grid: one line per (temperature, filter), draft G=0 then target G=0..max."""
    entries = probe.get("head_ms") or []
    guesses = sorted({e["guesses"] for e in entries if e["role"] == "target"})
    settings = list(dict.fromkeys((e["temperature"], e["top_k"], e["top_p"]) for e in entries))
    index = {(e["role"], e["guesses"], e["temperature"], e["top_k"], e["top_p"]): e["ms"] for e in entries}
    headers = ["T", "filter", "draft G=0"] + [f"target G={g}" for g in guesses]
    lines = []
    for t, k, p in settings:
        lines.append([_f(t, "g"), filter_text({"top_k": k, "top_p": p}),
                      _f(index.get(("draft", 0, t, k, p)), ".3f")] +
                     [_f(index.get(("target", g, t, k, p)), ".3f") for g in guesses])
    return headers, lines


def probe_table(probe: dict) -> str:
    headers = ["tokens k", "target run ms", "x one-token step"]
    lines = [[k, _f(probe["verify_ms"][k], ".3f"), _f(probe["verify_ratio"].get(k))] for k in probe["verify_ms"]]
    s = probe["settings"]
    head = (f"per-call costs at past length {probe['past_length']} (source {probe['source_length']} tokens, "
            f"median of {probe['repeats']}; fused runs, decoder + sampling head, at T={s['temperature']:g}, "
            f"{filter_text(s)}): target step {_f(probe['target_step_ms'], '.3f')} ms, draft step "
            f"{_f(probe['draft_step_ms'], '.3f')} ms, c = {_f(probe['c'], '.3f')} (without the heads, estimated: "
            f"{_f(probe.get('c_without_head'), '.3f')})")
    out = head + "\n" + table(headers, lines)
    if probe.get("head_ms"):
        out += (f"\n\nsampling head alone, ms (G guesses; vocab {probe['head_vocab']}; an estimate of its cost "
                f"inside a fused run):\n" + table(*_head_grid(probe)))
    else:
        out += f"\nsampling head: {probe.get('head_note')}"
    return out


def peers_table(peers: dict) -> str:
    headers = ["engine", "ms/tok", "tok/s", "vs specdec spec", "vs own AR", "vs specdec g=0", "same tokens", "note"]
    lines = []
    for name, p in peers["engines"].items():
        if p.get("status") != "ok":
            lines.append([name, "-", "-", "-", "-", "-", "-", p.get("status", "")])
            continue
        agree = p.get("agreement")
        lines.append([name, _f(p["ms_per_token"]["median"]), _f(p["tokens_per_s"], ".1f"),
                      _f(p["ratio_to_specdec_speculative"]), _f(p.get("ratio_to_own_autoregressive")),
                      _f(p["ratio_to_specdec_gamma0"]),
                      f"{agree['agree']}/{agree['prompts']}" if agree else "-", p.get("note", "")])
    return table(headers, lines)


DRAFT_NOTES = {
    "draft_results": "one row per (task, temperature, draft configuration); draft: the label as given to --draft "
                     "(NAME or NAME:G), draft_name: the runtime's name, gamma: an int or 'auto'",
    "speedup": "per repeat: none's ms/token over this configuration's, same task and temperature (interleaved in "
               "every repeat); spread over repeats",
    "sources": "Stats.sources summed over the timed runs: rounds, proposed, accepted, rejections, tokens; alpha = "
               "accepted / (accepted + rejections) per guess; share = tokens / all tokens the target emitted; "
               "'lookup>' is the lookup as the draft model checked it inside lookup+draft (share null)",
    "prediction": "for the dominant source s (the proposing source with the most tokens): E(alpha_s, g) / (g c_s + "
                  "T(g)/T(0)), g = mean guesses per round, T(g)/T(0) = cost_probe verify_ratio at g+1 tokens "
                  "(interpolated), c_s = cost_probe c for the draft model, 0 for lookup, c x (proposed - lookup> "
                  "accepted) / proposed for lookup+draft; tokens_per_round: the source's measured tokens per round, "
                  "what expected_tokens predicts",
    "predicted_mixture": "the same expectation over every kind of round of the configuration (target-only rounds: "
                         "1 token for 1 step): sum rounds E / sum rounds (g c + T(g)/T(0))",
    "auto_estimates": "what auto learned (runtime/decoding/auto.py), snapshot after each temperature's warm-up pass",
}


def _source_text(sources: dict) -> str:
    """`lookup a=0.80 62%, none 38%, lookup> a=0.22`: the target-level sources by tokens, then lower levels."""
    top = sorted(((s["tokens"], n) for n, s in sources.items() if not n.endswith(">")), reverse=True)
    low = sorted(n for n in sources if n.endswith(">"))
    parts = []
    for _, name in top:
        s = sources[name]
        alpha = "" if name == "none" or s["alpha"] is None else f" a={s['alpha']:.2f}"
        parts.append(f"{name}{alpha} {_f(100 * (s['share'] or 0.0), '.0f')}%")
    parts += [f"{name} a={_f(sources[name]['alpha'])}" for name in low]
    return ", ".join(parts)


def draft_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "T", "draft", "ms/tok", "+-", "speedup", "min-max", "tok/call", "draft runs/tok",
               "sources: alpha, share of tokens"]
    lines = []
    for r in rows:
        ms, sp = r["ms_per_token"], r.get("speedup")
        lines.append([r["task"], _f(r["temperature"], "g"), r["draft"], _f(ms["median"], ".3f"),
                      _f((ms["max"] - ms["min"]) / 2, ".3f"), _f(sp and sp["median"]),
                      f"{sp['min']:.2f}-{sp['max']:.2f}" if sp else "-", _f(r["tokens_per_target_call"]),
                      _f(r["draft_calls_per_token"]), _source_text(r["sources"])])
    return headers, lines


def draft_prediction_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "T", "draft", "source", "alpha", "mean g", "c", "T(g)/T(0)", "E[tok]", "tok/round",
               "thm3.8", "speedup", "meas/thm", "mixture", "meas/mix"]
    lines = []
    for r in rows:
        p = r["prediction"]
        lines.append([r["task"], _f(r["temperature"], "g"), r["draft"], p["source"], _f(p["alpha"]),
                      _f(p["mean_gamma"]), _f(p["c"], ".3f"), _f(p["verify_cost"]), _f(p["expected_tokens"]),
                      _f(p["tokens_per_round"]), _f(r["predicted_speedup"]),
                      _f(r.get("speedup", {}).get("median")), _f(r.get("measured_over_predicted")),
                      _f(r["predicted_mixture"]), _f(r.get("measured_over_mixture"))])
    return headers, lines


def draft_table(rows: list[dict]) -> str:
    return table(*draft_lines(rows))


def draft_prediction_table(rows: list[dict]) -> str:
    return table(*draft_prediction_lines(rows))


def draft_best_lines(best: dict) -> list[str]:
    out = []
    for task, by_t in best.items():
        for t, b in by_t.items():
            auto = b.get("auto_speedup")
            out.append(f"{task}, T={float(t):g}: best {b['best']} {b['best_speedup']:.2f}x ({b['best_ms_per_token']:.3f} "
                       f"vs {b['baseline_ms_per_token']:.3f} ms/token for none)"
                       + (f"; auto {auto:.2f}x" if auto is not None else ""))
    return out


def estimates_lines(learned: dict) -> list[str]:
    """One line per temperature: what auto had learned at the end of its warm-up pass."""
    out = []
    for t, e in learned.items():
        if "unavailable" in e:
            out.append(f"T={float(t):g}: {e['unavailable']}")
            continue
        alpha = ", ".join(f"{n} {a:.2f}" for n, a in e["alpha"].items()) or "-"
        cost = ", ".join(f"{n} {c:.3f}" for n, c in e["cost_per_guess_ms"].items()) or "-"
        runs = ", ".join(f"{k}: {v:.3f}" for k, v in e["target_run_ms"].items()) or "-"
        out.append(f"T={float(t):g} ({e['rounds']} rounds): alpha {alpha}; cost per guess ms {cost}; target run ms "
                   f"by guesses {runs}; host ms per round {e['host_ms_per_round']:.3f}")
    return out


BEAM_NOTES = {
    "beam_results": "one row per (task, configuration); config: none (specdec target-only beam search, draft='none'), "
                    "draft:G (exact speculative beam search, draft='draft', gamma=G), auto (gamma='auto'), "
                    "transformers (PyTorch generate(num_beams=W) on the target checkpoint)",
    "ms_per_token": "per repeat: wall time over the task's prompts / tokens of the best sequences (Stats.new_tokens; "
                    "for transformers its output up to EOS); spread over repeats. ms_per_request likewise per request",
    "speedup_vs_none": "per repeat: none's wall time over the task's prompts / this configuration's (the same "
                       "prompts, equal outputs); spread over repeats. speedup_vs_transformers likewise with "
                       "transformers' wall time",
    "beam_steps_per_target_call": "beam steps (a target-only round makes 1, a speculative round 1 .. g+1: "
                                  "Stats.sources tokens) / target runs",
    "speculative": "Stats.sources summed over the timed runs: rounds, proposed, accepted and steps of the "
                   "speculative rounds (source 'draft'), target_only_rounds (source 'none'), round_share = "
                   "speculative rounds / target runs, steps_per_round, accepted_per_guess = accepted / proposed",
    "time_share": "Stats target_s, draft_s (the draft runs and the proposal's host work between them), encoder_s, "
                  "host_s over total_s, pooled over the timed runs",
    "outputs_equal_none": "sequences equal to none's (the reference: not on its own rows) on the same prompt in the "
                          "same pass (the warm-up pass and every repeat); for transformers its best sequence against "
                          "none's best (agreement, not required: PyTorch and ONNX Runtime logits differ by round-off)",
    "beam_costs": "the batched sessions' run times at past_length, median over repeats: target W x 1 "
                  "(target_step_ms), target R x (g+1) for R = W, W (g+1) and the median rows seen in the warm-up "
                  "pass (scoring[g]), the draft's W x 1 step; c = draft step / target step. Each target shape runs "
                  "twice in a row: ms is the second run, after_switch_ms the first (right after another shape)",
    "prediction": "for draft:G: s / (g c + T(R, g+1)/T(W, 1)), s = measured beam steps per speculative round; "
                  "host time left out; ceiling = s / (g c + 1) (a scoring run as cheap as a W x 1 step); "
                  "c_in_loop = draft ms per call (Stats, the proposal's host work included) / none's target ms per "
                  "call, verify_ratio_in_loop = target ms per call / none's, predicted_in_loop = s / (draft runs per "
                  "round x c_in_loop + verify_ratio_in_loop); "
                  "verify_break_even = s - g c, c_break_even = (s - T(R, g+1)/T(W, 1)) / g",
}


def beam_costs_lines(costs: dict) -> tuple[list[str], list[list[str]]]:
    seen = {int(g) + 1: e["rows_seen"] for g, e in costs["scoring"].items()}
    headers = ["target run", "rows", "tokens", "ms", "x W x 1", "after a switch ms", "x", "rows seen (median, min-max)"]
    lines = []
    for t in costs["target_runs"]:
        rs = seen.get(t["tokens"])
        lines.append(["W x 1" if t["tokens"] == 1 else f"R x {t['tokens']}", str(t["rows"]), str(t["tokens"]),
                      _f(t["ms"], ".3f"), _f(t["over_step"]), _f(t.get("after_switch_ms"), ".3f"),
                      _f(t.get("after_switch_over_step")),
                      f"{rs['median']:g} ({rs['min']}-{rs['max']}, {rs['runs']} runs)" if rs else "-"])
    return headers, lines


def beam_costs_text(costs: dict) -> str:
    head = (f"per-call costs (batched sessions, past length {costs['past_length']}, W = {costs['num_beams']}, median "
            f"of {costs['repeats']}): target W x 1 step {costs['target_step_ms']:.3f} ms "
            f"({_f(costs.get('target_step_after_switch_ms'), '.3f')} ms right after a run of another shape)")
    if costs.get("draft_step_ms") is not None:
        head += (f"; draft W x 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}; the draft's first step "
                 f"of a round reads {_f(costs.get('draft_first_step_tokens_mean'))} tokens on average")
    return head + "\n" + table(*beam_costs_lines(costs))


def _pct(share: dict | None, part: str) -> str:
    return "-" if not share else f"{100 * share[part]:.0f}"


def beam_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "config", "ms/tok", "+-", "ms/req", "vs none", "min-max", "vs transformers", "steps/call",
               "spec rounds", "steps/round", "target %", "draft %", "enc %", "host %", "= none"]
    lines = []
    for r in rows:
        ms, sn, st = r["ms_per_token"], r.get("speedup_vs_none"), r.get("speedup_vs_transformers")
        spec = r.get("speculative") or {}
        eq = r.get("outputs_equal_none")
        share = r.get("time_share")
        lines.append([r["task"], r["config"], _f(ms["median"], ".3f"), _f((ms["max"] - ms["min"]) / 2, ".3f"),
                      _f(r["ms_per_request"]["median"], ".1f"), _f(sn and sn["median"]),
                      f"{sn['min']:.2f}-{sn['max']:.2f}" if sn else "-", _f(st and st["median"]),
                      _f(r.get("beam_steps_per_target_call")),
                      "-" if not spec else f"{100 * spec['round_share']:.0f}%",
                      _f(spec.get("steps_per_round")), _pct(share, "target"), _pct(share, "draft"),
                      _pct(share, "encoder"), _pct(share, "host"),
                      f"{eq['equal']}/{eq['compared']}" if eq else "-"])
    return headers, lines


def beam_prediction_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "config", "s", "R", "c", "T(R,g+1)/T(W,1)", "pred", "ceiling", "T-ratio b-e", "c b-e",
               "c loop", "T-ratio loop", "pred loop", "speedup", "meas/pred"]
    lines = []
    for r in rows:
        p = r["prediction"]
        lines.append([r["task"], r["config"], _f(p["steps_per_round"]), _f(p["rows"], "d"), _f(p["c"], ".3f"),
                      _f(p["verify_ratio"]), _f(p["predicted_speedup"]), _f(p["ceiling"]),
                      _f(p["verify_break_even"]), _f(p["c_break_even"], ".3f"), _f(p["c_in_loop"], ".3f"),
                      _f(p["verify_ratio_in_loop"]), _f(p["predicted_in_loop"]),
                      _f(r.get("speedup_vs_none", {}).get("median")), _f(p["measured_over_predicted"])])
    return headers, lines


def beam_table(rows: list[dict]) -> str:
    return table(*beam_lines(rows))


def beam_prediction_table(rows: list[dict]) -> str:
    return table(*beam_prediction_lines(rows))


def beam_estimates_lines(snapshots: dict) -> list[str]:
    out = []
    for when, e in snapshots.items():
        if "unavailable" in e:
            out.append(f"{when}: {e['unavailable']}")
            continue
        rates = ", ".join(f"gamma {g}: {r:.0f}" for g, r in e["steps_per_s"].items()) or "-"
        seen = ", ".join(f"{g}: {n}" for g, n in e["rounds_seen"].items()) or "-"
        out.append(f"{when}: beam steps/s {rates} (best: gamma {e['best']}); rounds by gamma {seen}")
    return out


def write_json(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": SCHEMA, **report}, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
    except ImportError:
        pass
    return str(value)


def plot(rows: list[dict], path: str | Path, title: str) -> Path:
    """Measured speedup (median, min-max bars) and the Theorem 3.8 prediction over gamma, one panel per
    (T, filter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["temperature"], row_filter(r)) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (t, f) in zip(axes[0], panels):
        rs = sorted((r for r in rows if r["temperature"] == t and row_filter(r) == f and "speedup" in r),
                    key=lambda r: r["gamma"])
        gs = [r["gamma"] for r in rs]
        med = [r["speedup"]["median"] for r in rs]
        lo = [m - r["speedup"]["min"] for m, r in zip(med, rs)]
        hi = [r["speedup"]["max"] - m for m, r in zip(med, rs)]
        ax.errorbar(gs, med, yerr=[lo, hi], fmt="o-", capsize=3, label="measured")
        pred = [(r["gamma"], r["predicted_speedup"]) for r in rs if r.get("predicted_speedup") is not None]
        ax.plot([g for g, _ in pred], [s for _, s in pred], "s--", label="Theorem 3.8 (measured alpha, c)")
        cost = [(r["gamma"], r["predicted_with_costs"]) for r in rs if r.get("predicted_with_costs") is not None]
        ax.plot([g for g, _ in cost], [s for _, s in cost], "^:", label="with measured costs (target run, host)")
        ax.axhline(1.0, color="grey", lw=0.8)
        alphas = [r["alpha"] for r in rs if r.get("alpha") is not None]
        label = (f"T = {t:g}, filter {filter_label(f)}" + (f" (alpha-hat {min(alphas):.2f}-{max(alphas):.2f})"
                                                            if alphas else ""))
        ax.set_title(label)
        ax.set_xlabel("gamma (draft tokens per target call)")
        ax.set_ylabel("speedup over gamma = 0")
        ax.set_xticks(gs)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _save(fig, path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_shapes(result: dict, path: str | Path, title: str) -> Path:
    """Real shapes: Theorem 3.8's speedup over gamma for the paper's alpha values, with the measured c (and the
    prediction with the measured verify cost and overhead)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (alpha, curve) in enumerate(result["predictions"].items()):
        gs = [int(g) for g in curve]
        ax.plot(gs, [curve[str(g)]["theorem_3_8"] for g in gs], "o-", color=f"C{i}", label=f"alpha {alpha}: Thm 3.8")
        ax.plot(gs, [curve[str(g)]["with_costs"] for g in gs], "x:", color=f"C{i}",
                label=f"alpha {alpha}: with measured verify cost")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("gamma")
    ax.set_ylabel("predicted speedup")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def _md(headers: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(l) + " |" for l in lines]
    return "\n".join(out)


def _peers_markdown(report: dict) -> list:
    pe = report.get("peers")
    if not pe:
        return []
    lines = []
    for name, p in pe["engines"].items():
        if p.get("status") != "ok":
            lines.append([name, "-", "-", "-", "-", "-", "-", p.get("status", "")])
            continue
        a = p["agreement"]
        lines.append([name, _f(p["ms_per_token"]["median"], ".3f"), _f(p["tokens_per_s"], ".0f"),
                      _f(p["ratio_to_specdec_speculative"]), _f(p.get("ratio_to_own_autoregressive")),
                      _f(p["ratio_to_specdec_gamma0"]), f"{a['agree']}/{a['prompts']}", p.get("note", "")])
    first = next(iter(pe["engines"]))
    return [f"Peers (greedy, every task's prompts, {pe['repeats']} repeats; assistants γ = {pe['gamma']}; "
            f"latency ÷ X > 1: X is faster):\n\n" +
            _md(["engine", "ms/token", "tokens/s", f"latency ÷ {first}", "latency ÷ own autoregressive",
                 "latency ÷ specdec γ=0", "same tokens", "note"], lines)]


def markdown(report: dict) -> str:
    """The report's tables as Markdown (what benchmarks/README.md quotes)."""
    m = report["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores, {m.get('memory_gib')} GiB, provider "
            f"{m['provider']}, onnxruntime {m['onnxruntime']}, {m['date_utc']}; load average "
            f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end; CPU "
            f"{100 * (m.get('cpu_busy_before_run') or 0):.0f}% busy just before the run"
            + (" (**taken under load**: other processes were using the CPU)." if m.get("under_load") else "."))
    parts = [head]
    probe = report.get("cost_probe")
    if report["mode"] == "beams":
        parts += _beam_markdown(report)
    elif report["mode"] == "dtypes":
        parts += _dtypes_markdown(report)
    elif report["mode"] == "drafts":
        parts += _draft_markdown(report) + _peers_markdown(report)
    elif report["mode"] == "engine":
        s = report["settings"]
        parts.append(f"{s['prompts']} prompts ({s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
                     f"{s['repeats']} repeats; {sweep_filters_text(s)}.")
        if len(s["filters"]) > 1:
            parts.append("Filters (ms per generated token, median over repeats; × none: the filter's ms/token over "
                         "plain sampling's at the same T and γ, per repeat (interleaved), median and min-max over "
                         "repeats):\n\n" + _md(*filter_cost_lines(report["filter_cost"])))
        if report.get("best"):
            parts.append("Summary (per temperature and filter: γ = 0 and the best measured γ; samp+host = host "
                         "time measured + the sampling heads' in-graph cost *estimated* from the cost probe):\n\n" +
                         _md(*summary_lines(report["results"], report["best"])))
        lines = []
        for r in report["results"]:
            ms = r["ms_per_token"]
            lines.append([_f(r["temperature"], "g"), filter_label(row_filter(r)), str(r["gamma"]),
                          f"{ms['median']:.3f} ({ms['min']:.3f}-{ms['max']:.3f})", _f(r["tokens_per_s"], ".0f"),
                          _f(r.get("acceptance_rate")), _f(r["alpha"]), _f(r["tokens_per_target_call"]),
                          _f(r["ort_runs_per_iteration"]), _f(r.get("c"), ".3f"), _f(r.get("verify_ratio")),
                          _f(r["host_ms_per_iteration"], ".3f"), _f(r.get("sampling_host_ms_per_token"), ".3f"),
                          _f(r.get("speedup", {}).get("median")), _f(r.get("predicted_speedup")),
                          _f(r.get("measured_over_predicted")), _f(r.get("predicted_with_costs")),
                          _f(r.get("best_gamma"), "d")])
        parts.append(_md(["T", "filter", "γ", "ms/token (min-max)", "tokens/s", "accepted/proposed", "α̂",
                          "tokens/call", "ORT runs/iter", "c", "verify ×", "host ms/iter", "samp+host ms/tok (est.)",
                          "speedup", "Thm 3.8", "measured/Thm", "w/ costs", "best γ"], lines))
        lines = []
        for r in report["results"]:
            p = r["ms_per_token_by_part"]
            lines.append([_f(r["temperature"], "g"), filter_label(row_filter(r)), str(r["gamma"])] +
                         [_f(p[k], ".3f") for k in ("encoder", "draft", "target", "host")] +
                         [_f(100 * r["host_fraction"], ".1f"), _f(r.get("head_ms_per_token_estimated"), ".3f")])
        parts.append("Where the time goes, ms per generated token (the sampling heads run inside the draft and "
                     "target runs; their share is estimated from the cost probe):\n\n" +
                     _md(["T", "filter", "γ", "encoders", "draft runs", "target runs", "host", "host %",
                          "heads in runs (est.)"], lines))
        parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head): target "
                     f"step {_f(probe['target_step_ms'], '.3f')} ms, draft step {_f(probe['draft_step_ms'], '.3f')} "
                     f"ms, c = {_f(probe['c'], '.3f')} (without the heads, estimated: "
                     f"{_f(probe.get('c_without_head'), '.3f')}); verify ratio " +
                     ", ".join(f"{k} tokens {v:.2f}×" for k, v in probe["verify_ratio"].items()) + ".")
        if probe.get("head_ms"):
            parts.append(f"Sampling head alone, ms (G guesses, vocab {probe['head_vocab']}; an estimate of its cost "
                         f"inside a fused run):\n\n" + _md(*_head_grid(probe)))
        parts += _peers_markdown(report)
    else:
        acc = report["acceptance"]
        parts.append(f"Per-call costs at past length {probe['past_length']} (source {probe['source_length']} "
                     f"tokens; fused runs, decoder + sampling head): target step {probe['target_step_ms']:.2f} ms, "
                     f"draft step {probe['draft_step_ms']:.2f} ms, c = {probe['c']:.3f}; the head alone: "
                     f"{_f(probe.get('target_step_head_ms'), '.3f')} ms for a target step's draw, "
                     f"{_f(probe.get('draft_step_head_ms'), '.3f')} ms for a draft step's (estimates).")
        parts.append(_md(["verify tokens", "ms", "× one-token step"],
                         [[k, f"{probe['verify_ms'][k]:.2f}", f"{probe['verify_ratio'][k]:.2f}"]
                          for k in probe["verify_ms"]]))
        if probe.get("head_ms"):
            parts.append(f"Sampling head alone, ms (G guesses, vocab {probe['head_vocab']}):\n\n" +
                         _md(*_head_grid(probe)))
        parts.append(_md(["γ", "iteration ms", "target runs ms", "draft runs ms", "host ms", "host %",
                          "ORT runs/iter", "samp+host ms/tok (est.)"],
                         [[g, f"{r['iteration_ms']:.2f}", f"{r['target_ms_per_iteration']:.2f}",
                           f"{r['draft_ms_per_iteration']:.2f}", f"{r['host_ms_per_iteration']:.3f}",
                           f"{100 * r['host_fraction_of_iteration']:.2f}", _f(r["ort_runs_per_iteration"]),
                           _f(r.get("sampling_host_ms_per_token"), ".3f")]
                          for g, r in report["generation"].items()]))
        gs = sorted({g for c in report["predictions"].values() for g in c}, key=int)
        parts.append("Predicted speedup, Theorem 3.8 / with the measured costs (fused target pass of γ+1 tokens, "
                     "host time; sampling is inside the runs):\n\n" +
                     _md(["α"] + [f"γ={g}" for g in gs] + ["best γ (Thm)", "best γ (w/ costs)"],
                         [[a] + [f"{c[g]['theorem_3_8']:.2f} / {c[g]['with_costs']:.2f}" for g in gs] +
                          [str(report["best"][a]["theorem_best_gamma"]), str(report["best"][a]["with_costs_best_gamma"])]
                          for a, c in report["predictions"].items()]))
        loop = acc.get("verify_5_over_step_in_loop")
        v5 = acc.get("verify_5_over_step")
        parts.append("Acceptance: verify of 5 tokens = " + (f"{v5:.2f}× a one-token step" if v5 is not None
                                                              else "not measured (gamma_max < 4)")
                     + (f" ({loop:.2f}× in the real loop, γ = 4 vs γ = 0)" if loop is not None else "") + "; host "
                     f"overhead at most {100 * acc['host_fraction_worst']:.2f}% of an iteration.")
    return "\n\n".join(parts) + "\n"


def _dtypes_markdown(report: dict) -> list[str]:
    from .variants import table_lines, verdict_lines

    s = report["settings"]
    ck = report["checkpoints"]
    parts = [f"{s['prompts']} random prompts of {s['source_length']} tokens, {s['max_new_tokens']} new tokens, "
             f"T = 0, {s['rounds']} rounds (interleaved); per-call costs at past {s['probe_past']} "
             f"({s['probe_repeats_per_round']} repeats per round, median per round, then median (min-max) over "
             f"rounds); speculative γ = {s['gamma']}; CTranslate2 intra_threads {s['ct2_intra_threads']}. Same "
             f"checkpoints for every variant (target sha256 {ck['target']['sha256'][:12]}, draft "
             f"{ck['draft']['sha256'][:12]})."]
    parts.append(_md(*table_lines(report, s["gamma"])))
    parts.append("\n".join(f"* {line}" for line in verdict_lines(report)))
    return parts


def _draft_markdown(report: dict) -> list[str]:
    s, probe = report["settings"], report["cost_probe"]
    tasks = ", ".join(f"{task} {n}" for task, n in s["prompts_per_task"].items())
    parts = [f"{s['prompts']} prompts ({tasks}; {s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
             f"{s['repeats']} repeats, draft configurations {', '.join(d['label'] for d in s['drafts'])} "
             f"interleaved; {sweep_filters_text(s)}. {report['auto_estimates_note']}"]
    best = draft_best_lines(report.get("draft_best") or {})
    if best:
        parts.append("Best per task and temperature:\n\n" + "\n".join(f"- {line}" for line in best))
    parts.append("ms per generated token (median over repeats, ± half the min-max range), speedup over none of the "
                 "same task and T (median of per-repeat ratios, min-max), tokens per target call, draft-model runs "
                 "per token, and per source α = accepted/(accepted + rejections) and its share of the tokens:\n\n"
                 + _md(*draft_lines(report["draft_results"])))
    parts.append("Theorem 3.8 for each configuration's dominant source with measured costs, E(α, ḡ) / (ḡ c + "
                 "T(ḡ)/T(0)) (ḡ: mean guesses per round; T(ḡ)/T(0): the probe's target run over ḡ+1 tokens over "
                 "one token; c: the probe's draft step over target step, 0 for lookup, scaled by draft runs per "
                 "guess for lookup+draft); mixture: the same over every kind of round the configuration had:\n\n"
                 + _md(*draft_prediction_lines(report["draft_results"])))
    parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head, T=0): target "
                 f"step {_f(probe['target_step_ms'], '.3f')} ms, draft step {_f(probe['draft_step_ms'], '.3f')} "
                 f"ms, c = {_f(probe['c'], '.3f')}; verify ratio " +
                 ", ".join(f"{k} tokens {v:.2f}×" for k, v in probe["verify_ratio"].items()) + ".")
    learned = estimates_lines(report.get("auto_estimates") or {})
    if learned:
        parts.append("What auto had learned at the end of each warm-up pass:\n\n"
                     + "\n".join(f"- {line}" for line in learned))
    return parts


def _beam_markdown(report: dict) -> list[str]:
    s, costs = report["settings"], report["beam_costs"]
    tasks = ", ".join(f"{task} {n}" for task, n in s["prompts_per_task"].items())
    hf = s["transformers"]
    parts = [f"{s['prompts']} prompts ({tasks}; {s['prompts_origin']}), W = {s['num_beams']}, max_new_tokens "
             f"{s['max_new_tokens']}, early_stopping {s['early_stopping']}, length_penalty {s['length_penalty']:g}, "
             f"no_repeat_ngram_size {s['no_repeat_ngram_size']}, min_new_tokens {s['min_new_tokens']}, "
             f"{s['repeats']} repeats; configurations {', '.join(c['label'] for c in s['configs'])} (transformers: "
             f"{hf['status']}, torch threads {hf['torch_threads']}). {report['auto_estimates_note']}"]
    parts.append("Per task and configuration: ms per output token (median over repeats, ± half the min-max range) "
                 "and per request; speedup = the other's wall time ÷ this configuration's on the same prompts "
                 "(median of per-repeat ratios, min-max for none); beam steps per target run; share of the rounds "
                 "that were speculative and beam steps per speculative round; time shares (target runs, draft runs "
                 "with the proposal's host work, encoders, host); outputs equal to none's / compared:\n\n"
                 + _md(*beam_lines(report["beam_results"])))
    predicted = [r for r in report["beam_results"] if r.get("prediction")]
    if predicted:
        parts.append("What the runs predict for draft:G: pred = s / (g c + T(R, g+1)/T(W, 1)) (s: measured beam "
                     "steps per speculative round; R: median rows of its scoring run; host time left out); "
                     "ceiling = s / (g c + 1), the same if the scoring run cost one W × 1 step; it pays when "
                     "g c + T(R, g+1)/T(W, 1) < s: T-ratio b-e = s − g c, c b-e = (s − T(R, g+1)/T(W, 1)) / g; "
                     "c loop and T-ratio loop: the same costs as the loop paid them (Stats: draft ms per call with the "
                     "proposal's host work, target ms per call, over none's target ms per call), pred loop = s / "
                     "(draft runs per round × c loop + T-ratio loop):\n\n"
                     + _md(*beam_prediction_lines(predicted)))
    draft = (f"; draft W × 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}"
             if costs.get("draft_step_ms") is not None else "")
    parts.append(f"Per-call costs (batched sessions, past length {costs['past_length']}, median of "
                 f"{costs['repeats']}): target W × 1 step {costs['target_step_ms']:.3f} ms{draft}:\n\n"
                 + _md(*beam_costs_lines(costs)))
    learned = beam_estimates_lines({"after the warm-up pass": report["auto_estimates"]["after_warmup"],
                                    "at the end": report["auto_estimates"]["at_end"]})
    parts.append("What auto had learned:\n\n" + "\n".join(f"- {line}" for line in learned))
    return parts
