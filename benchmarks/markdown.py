"""The report's tables as Markdown (`--markdown`; what the benchmark's results pages quote): the machine line,
then the sections of the report's mode."""

from __future__ import annotations

from .beam_tables import beam_costs_lines, beam_estimates_lines, beam_lines, beam_prediction_lines
from .draft_tables import draft_best_lines, draft_lines, draft_prediction_lines, estimates_lines
from .sweep_tables import (filter_cost_lines, generation_lines, head_grid, peers_lines, prediction_lines,
                           source_text, summary_lines, sweep_filters_text, sweep_lines, time_lines, verify_lines)
from .tables import fmt, markdown_table


def markdown(report: dict) -> str:
    m = report["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores, {m.get('memory_gib')} GiB, provider "
            f"{m['provider']}, onnxruntime {m['onnxruntime']}, {m['date_utc']}; load average "
            f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end; CPU "
            f"{100 * (m.get('cpu_busy_before_run') or 0):.0f}% busy just before the run"
            + (" (**taken under load**: other processes were using the CPU)." if m.get("under_load") else "."))
    sections = {"beams": _beams, "dtypes": _dtypes, "drafts": _drafts, "engine": _sweep}
    return "\n\n".join([head] + sections.get(report["mode"], _shapes)(report)) + "\n"


def _verify_ratios(probe: dict) -> str:
    return ", ".join(f"{k} tokens {v:.2f}×" for k, v in probe["verify_ratio"].items())


def _head_grid(probe: dict, what: str) -> list[str]:
    if not probe.get("head_ms"):
        return []
    return [f"Sampling head alone, ms (G guesses, vocab {probe['head_vocab']}{what}):\n\n"
            + markdown_table(*head_grid(probe))]


def _sweep(report: dict) -> list[str]:
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
    parts.append(markdown_table(*sweep_lines(report["results"], markdown=True)))
    parts.append("Where the time goes, ms per generated token (the sampling heads run inside the draft and "
                 "target runs; their share is estimated from the cost probe):\n\n" +
                 markdown_table(*time_lines(report["results"], markdown=True)))
    parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head): target "
                 f"step {fmt(probe['target_step_ms'], '.3f')} ms, draft step {fmt(probe['draft_step_ms'], '.3f')} "
                 f"ms, c = {fmt(probe['c'], '.3f')} (without the heads, estimated: "
                 f"{fmt(probe.get('c_without_head'), '.3f')}); verify ratio " + _verify_ratios(probe) + ".")
    parts += _head_grid(probe, "; an estimate of its cost inside a fused run")
    return parts + _peers(report)


def _shapes(report: dict) -> list[str]:
    probe, acc = report["cost_probe"], report["acceptance"]
    before, after = [], []
    if report.get("family") == "whisper":          # the encoders, and the speedup of a whole request
        from .whisper_costs import markdown_parts

        before, after = markdown_parts(report)
    label = f" ({report['prediction_label']})" if report.get("prediction_label") else ""
    parts = before + [
        f"Per-call costs at past length {probe['past_length']} (source {source_text(probe)}; fused runs, decoder + "
        f"sampling head): target step {probe['target_step_ms']:.2f} ms, draft step {probe['draft_step_ms']:.2f} ms, "
        f"c = {probe['c']:.3f}; the head alone: {fmt(probe.get('target_step_head_ms'), '.3f')} ms for a target "
        f"step's draw, {fmt(probe.get('draft_step_head_ms'), '.3f')} ms for a draft step's (estimates).",
        markdown_table(*verify_lines(probe, markdown=True))]
    parts += _head_grid(probe, "")
    parts.append(markdown_table(*generation_lines(report["generation"], markdown=True)))
    parts.append(f"Predicted {'decoder ' if label else ''}speedup{label}, Theorem 3.8 / with the measured costs "
                 "(fused target pass of γ+1 tokens, host time; sampling is inside the runs):\n\n" +
                 markdown_table(*prediction_lines(report, markdown=True)))
    parts += after
    loop = acc.get("verify_5_over_step_in_loop")
    v5 = acc.get("verify_5_over_step")
    parts.append("Acceptance: verify of 5 tokens = " + (f"{v5:.2f}× a one-token step" if v5 is not None
                                                          else "not measured (gamma_max < 4)")
                 + (f" ({loop:.2f}× in the real loop, γ = 4 vs γ = 0)" if loop is not None else "") + "; host "
                 f"overhead at most {100 * acc['host_fraction_worst']:.2f}% of an iteration.")
    return parts


def _peers(report: dict) -> list[str]:
    pe = report.get("peers")
    if not pe:
        return []
    return [f"Peers (greedy, every task's prompts, {pe['repeats']} repeats; assistants γ = {pe['gamma']}; "
            f"latency ÷ X > 1: X is faster):\n\n" + markdown_table(*peers_lines(pe, markdown=True))]


def _dtypes(report: dict) -> list[str]:
    from .variant_runs import table_lines, verdict_lines

    s = report["settings"]
    ck = report["checkpoints"]
    parts = [f"{s['prompts']} random prompts of {s['source_length']} tokens, {s['max_new_tokens']} new tokens, "
             f"T = 0, {s['rounds']} rounds (interleaved); per-call costs at past {s['probe_past']} "
             f"({s['probe_repeats_per_round']} repeats per round, median per round, then median (min-max) over "
             f"rounds); speculative γ = {s['gamma']}; CTranslate2 intra_threads {s['ct2_intra_threads']}. Same "
             f"checkpoints for every variant (target sha256 {ck['target']['sha256'][:12]}, draft "
             f"{ck['draft']['sha256'][:12]})."]
    parts.append(markdown_table(*table_lines(report, s["gamma"])))
    parts.append("\n".join(f"* {line}" for line in verdict_lines(report)))
    return parts


def _drafts(report: dict) -> list[str]:
    s, probe = report["settings"], report["cost_probe"]
    tasks = ", ".join(f"{task} {n}" for task, n in s["prompts_per_task"].items())
    parts = [f"{s['prompts']} prompts ({tasks}; {s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
             f"{s['repeats']} repeats, draft configurations {', '.join(d['label'] for d in s['drafts'])} "
             f"interleaved; {sweep_filters_text(s)}. {report['auto_estimates_note']}"]
    best = draft_best_lines(report.get("draft_best") or {})
    if best:
        parts.append("Best per task and temperature:\n\n" + "\n".join(f"- {line}" for line in best))
    parts.append("ms per generated token (median over repeats, ± half the min-max range), speedup over none of the "
                 "same task and T (median of per-repeat ratios, min-max), the same two without the encoder runs "
                 "(decode-only), tokens per target call, draft-model runs "
                 "per token, and per source α = accepted/(accepted + rejections) and its share of the tokens:\n\n"
                 + markdown_table(*draft_lines(report["draft_results"])))
    parts.append("Theorem 3.8 for each configuration's dominant source with measured costs, E(α, ḡ) / (ḡ c + "
                 "T(ḡ)/T(0)) (ḡ: mean guesses per round; T(ḡ)/T(0): the probe's target run over ḡ+1 tokens over "
                 "one token; c: the probe's draft step over target step, 0 for lookup, scaled by draft runs per "
                 "guess for lookup,draft); mixture: the same over every kind of round the configuration had:\n\n"
                 + markdown_table(*draft_prediction_lines(report["draft_results"])))
    parts.append(f"Per-call costs at past length {probe['past_length']} (fused runs, decoder + head, T=0): target "
                 f"step {fmt(probe['target_step_ms'], '.3f')} ms, draft step {fmt(probe['draft_step_ms'], '.3f')} "
                 f"ms, c = {fmt(probe['c'], '.3f')}; verify ratio " + _verify_ratios(probe) + ".")
    learned = estimates_lines(report.get("auto_estimates") or {})
    if learned:
        parts.append("What auto had learned at the end of each warm-up pass:\n\n"
                     + "\n".join(f"- {line}" for line in learned))
    return parts + _peers(report)


def _beams(report: dict) -> list[str]:
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
                 + markdown_table(*beam_lines(report["beam_results"])))
    predicted = [r for r in report["beam_results"] if r.get("prediction")]
    if predicted:
        parts.append("What the runs predict for draft:G: pred = s / (g c + T(R, g+1)/T(W, 1)) (s: measured beam "
                     "steps per speculative round; R: median rows of its scoring run; host time left out); "
                     "ceiling = s / (g c + 1), the same if the scoring run cost one W × 1 step; it pays when "
                     "g c + T(R, g+1)/T(W, 1) < s: T-ratio b-e = s − g c, c b-e = (s − T(R, g+1)/T(W, 1)) / g; "
                     "c loop and T-ratio loop: the same costs as the loop paid them (Stats: draft ms per call with the "
                     "proposal's host work, target ms per call, over none's target ms per call), pred loop = s / "
                     "(draft runs per round × c loop + T-ratio loop):\n\n"
                     + markdown_table(*beam_prediction_lines(predicted)))
    draft = (f"; draft W × 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}"
             if costs.get("draft_step_ms") is not None else "")
    parts.append(f"Per-call costs (batched sessions, past length {costs['past_length']}, median of "
                 f"{costs['repeats']}): target W × 1 step {costs['target_step_ms']:.3f} ms{draft}:\n\n"
                 + markdown_table(*beam_costs_lines(costs)))
    learned = beam_estimates_lines({"after the warm-up pass": report["auto_estimates"]["after_warmup"],
                                    "at the end": report["auto_estimates"]["at_end"]})
    parts.append("What auto had learned:\n\n" + "\n".join(f"- {line}" for line in learned))
    return parts
