"""The tables and lines of `specdec-bench drafts` (the same on stdout and in Markdown)."""

from __future__ import annotations

from ..common.report import peers_part, sweep_filters_text, verify_ratios_text
from ..common.tables import field, fmt, lines, markdown_table, same, snapshot_lines


def _source_text(sources: dict) -> str:
    """`lookup a=0.80 62%, none 38%, lookup> a=0.22`: the target-level sources by tokens, then lower levels."""
    top = sorted(((s["tokens"], n) for n, s in sources.items() if not n.endswith(">")), reverse=True)
    low = sorted(n for n in sources if n.endswith(">"))
    parts = []
    for _, name in top:
        s = sources[name]
        alpha = "" if name == "none" or s["alpha"] is None else f" a={s['alpha']:.2f}"
        parts.append(f"{name}{alpha} {fmt(100 * (s['share'] or 0.0), '.0f')}%")
    parts += [f"{name} a={fmt(sources[name]['alpha'])}" for name in low]
    return ", ".join(parts)


def _speedup_range(r: dict) -> str:
    sp = r.get("speedup")
    return f"{sp['min']:.2f}-{sp['max']:.2f}" if sp else "-"


_CONFIG = (same("task", lambda r: r["task"]), same("T", lambda r: fmt(r["temperature"], "g")),
           same("draft", lambda r: r["draft"]))

DRAFTS = _CONFIG + (
    same("ms/tok", lambda r: fmt(r["ms_per_token"]["median"], ".3f")),
    same("+-", lambda r: fmt((r["ms_per_token"]["max"] - r["ms_per_token"]["min"]) / 2, ".3f")),
    same("speedup", lambda r: fmt(r.get("speedup") and r["speedup"]["median"])),
    same("min-max", _speedup_range),
    same("decode ms/tok", lambda r: fmt(r["decode_ms_per_token"]["median"], ".3f")),
    same("decode speedup", lambda r: fmt(r.get("decode_speedup") and r["decode_speedup"]["median"])),
    same("tok/call", lambda r: fmt(r["tokens_per_target_call"])),
    same("draft runs/tok", lambda r: fmt(r["draft_calls_per_token"])),
    same("sources: alpha, share of tokens", lambda r: _source_text(r["sources"])))


PREDICTIONS = _CONFIG + (
    same("source", lambda r: r["prediction"]["source"]), same("alpha", field("alpha")),
    same("mean g", field("mean_gamma")), same("c", field("c", ".3f")),
    same("T(g)/T(0)", field("verify_cost")), same("E[tok]", field("expected_tokens")),
    same("tok/round", field("tokens_per_round")), same("thm3.8", lambda r: fmt(r["predicted_speedup"])),
    same("speedup", lambda r: fmt(r.get("speedup", {}).get("median"))),
    same("meas/thm", lambda r: fmt(r.get("measured_over_predicted"))),
    same("mixture", lambda r: fmt(r["predicted_mixture"])),
    same("meas/mix", lambda r: fmt(r.get("measured_over_mixture"))))


def draft_best_lines(best: dict) -> list[str]:
    out = []
    for task, by_t in best.items():
        for t, b in by_t.items():
            auto = b.get("auto_speedup")
            out.append(f"{task}, T={float(t):g}: best {b['best']} {b['best_speedup']:.2f}x, decode-only "
                       f"{b['best_decode_speedup']:.2f}x ({b['best_ms_per_token']:.3f} vs "
                       f"{b['baseline_ms_per_token']:.3f} ms/token for none)"
                       + (f"; auto {auto:.2f}x, decode-only {b['auto_decode_speedup']:.2f}x"
                          if auto is not None else ""))
    return out


def estimates_lines(learned: dict) -> list[str]:
    """One line per temperature: what auto had learned at the end of its warm-up pass."""
    def line(when: str, e: dict) -> str:
        alpha = ", ".join(f"{n} {a:.2f}" for n, a in e["alpha"].items()) or "-"
        cost = ", ".join(f"{n} {c:.3f}" for n, c in e["cost_per_guess_ms"].items()) or "-"
        runs = ", ".join(f"{k}: {v:.3f}" for k, v in e["target_run_ms"].items()) or "-"
        return (f"{when} ({e['rounds']} rounds): alpha {alpha}; cost per guess ms {cost}; target run ms by guesses "
                f"{runs}; host ms per round {e['host_ms_per_round']:.3f}"
                + _switch(e.get("switch"), "") + _switch(e.get("switch_at_end"), " after the timed repeats"))
    return snapshot_lines({f"T={float(t):g}": e for t, e in learned.items()}, line)


def _switch(sw, when: str) -> str:
    """auto's switch (runtime/decoding/switch.py) as measured: ms per token of auto's rounds and of plain steps."""
    if not sw or "auto_rounds_lead" not in sw:
        return ""
    ms = ", ".join(f"{mode} {sw[key]:.3f} ms/token" for mode, key in
                   (("auto's rounds", "auto_ms_per_token"), ("plain steps", "plain_ms_per_token"))
                   if sw.get(key) is not None)
    lead = {True: "auto's rounds lead", False: "plain steps lead", None: "still measuring"}[sw["auto_rounds_lead"]]
    return f"; switch{when}: {ms or 'not measured'}, {lead} (the other runs {sw['slower_share']:.0%} of the rounds)"


DRAFT_NOTES = {
    "draft_results": "one row per (task, temperature, draft configuration); draft: the label as given to --draft "
                     "(NAME or NAME:G), draft_name: the runtime's name, gamma: an int or 'auto'",
    "speedup": "per repeat: none's ms/token over this configuration's, same task and temperature (interleaved in "
               "every repeat); spread over repeats",
    "sources": "Stats.sources summed over the timed runs: rounds, proposed, accepted, rejections, tokens; alpha = "
               "accepted / (accepted + rejections) per guess; share = tokens / all tokens the target emitted; "
               "'lookup>' is the lookup as the draft model checked it inside lookup,draft (share null)",
    "prediction": "for the dominant source s (the proposing source with the most tokens): E(alpha_s, g) / (g c_s + "
                  "T(g)/T(0)), g = mean guesses per round, T(g)/T(0) = cost_probe verify_ratio at g+1 tokens "
                  "(interpolated), c_s = cost_probe c for the draft model, 0 for lookup, c x (proposed - lookup> "
                  "accepted) / proposed for lookup,draft; tokens_per_round: the source's measured tokens per round, "
                  "what expected_tokens predicts",
    "predicted_mixture": "the same expectation over every kind of round of the configuration (target-only rounds: "
                         "1 token for 1 step): sum rounds E / sum rounds (g c + T(g)/T(0))",
    "auto_estimates": "what auto learned (runtime/decoding/auto.py), snapshot after each temperature's warm-up pass",
}


def markdown_sections(report: dict) -> list[str]:
    """The report of `drafts` in Markdown (after the machine line)."""
    s, probe = report["settings"], report["cost_probe"]
    tasks = ", ".join(f"{task} {n}" for task, n in s["prompts_per_task"].items())
    seconds = s.get("audio_seconds")
    what = f"{s['prompts']} prompts" if seconds is None else f"{s['prompts']} audio clips, {seconds:.1f} s in all"
    parts = [f"{what} ({tasks}; {s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
             f"{s['repeats']} repeats, draft configurations {', '.join(d['label'] for d in s['drafts'])} "
             f"interleaved; {sweep_filters_text(s)}. {report['auto_estimates_note']}"]
    best = draft_best_lines(report.get("draft_best") or {})
    if best:
        parts.append("Best per task and temperature:\n\n" + "\n".join(f"- {line}" for line in best))
    parts.append("ms per generated token (median over repeats, ± half the min-max range), speedup over none of the "
                 "same task and T (median of per-repeat ratios, min-max), the same two without the encoder runs "
                 "(decode-only: the decoder's own time, which speculation changes), tokens per target call, "
                 "draft-model runs per token, and per source α = accepted/(accepted + rejections) and its share of "
                 "the tokens:\n\n"
                 + markdown_table(*lines(DRAFTS, report["draft_results"])))
    parts.append("Theorem 3.8 for each configuration's dominant source with measured costs, E(α, ḡ) / (ḡ c + "
                 "T(ḡ)/T(0)) (ḡ: mean guesses per round; T(ḡ)/T(0): the probe's target run over ḡ+1 tokens over "
                 "one token; c: the probe's draft step over target step, 0 for lookup, scaled by draft runs per "
                 "guess for lookup,draft); mixture: the same over every kind of round the configuration had:\n\n"
                 + markdown_table(*lines(PREDICTIONS, report["draft_results"])))
    parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head, T=0): target "
                 f"step {fmt(probe['target_step_ms'], '.3f')} ms, draft step {fmt(probe['draft_step_ms'], '.3f')} "
                 f"ms, c = {fmt(probe['c'], '.3f')}; verify ratio " + verify_ratios_text(probe) + ".")
    learned = estimates_lines(report.get("auto_estimates") or {})
    if learned:
        parts.append("What auto had learned at the end of each warm-up pass:\n\n"
                     + "\n".join(f"- {line}" for line in learned))
    return parts + peers_part(report)
