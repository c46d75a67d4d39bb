"""The tables and lines of `specdec-bench beams` (the same on stdout and in Markdown)."""

from __future__ import annotations

from ..common.tables import field, fmt, lines, markdown_table, same, snapshot_lines, table


def beam_costs_lines(costs: dict) -> tuple[list[str], list[list[str]]]:
    seen = {int(g) + 1: e["rows_seen"] for g, e in costs["scoring"].items()}

    def rows_seen(t):
        rs = seen.get(t["tokens"])
        return f"{rs['median']:g} ({rs['min']}-{rs['max']}, {rs['runs']} runs)" if rs else "-"

    columns = (same("target run", lambda t: "W x 1" if t["tokens"] == 1 else f"R x {t['tokens']}"),
               same("rows", lambda t: str(t["rows"])), same("tokens", lambda t: str(t["tokens"])),
               same("ms", lambda t: fmt(t["ms"], ".3f")), same("x W x 1", lambda t: fmt(t["over_step"])),
               same("after a switch ms", lambda t: fmt(t.get("after_switch_ms"), ".3f")),
               same("x", lambda t: fmt(t.get("after_switch_over_step"))),
               same("rows seen (median, min-max)", rows_seen))
    return lines(columns, costs["target_runs"])


def beam_costs_text(costs: dict) -> str:
    head = (f"per-call costs (batched sessions, past length {costs['past_length']}, W = {costs['num_beams']}, median "
            f"of {costs['repeats']}): target W x 1 step {costs['target_step_ms']:.3f} ms "
            f"({fmt(costs.get('target_step_after_switch_ms'), '.3f')} ms right after a run of another shape)")
    if costs.get("draft_step_ms") is not None:
        head += (f"; draft W x 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}; the draft's first step "
                 f"of a round reads {fmt(costs.get('draft_first_step_tokens_mean'))} tokens on average")
    return head + "\n" + table(*beam_costs_lines(costs))


def _pct(part: str):
    return lambda r: "-" if not r.get("time_share") else f"{100 * r['time_share'][part]:.0f}"


def _median(key: str):
    return lambda r: fmt(r.get(key) and r[key]["median"])


def _spec(r: dict) -> dict:
    return r.get("speculative") or {}


def _vs_none_range(r: dict) -> str:
    sn = r.get("speedup_vs_none")
    return f"{sn['min']:.2f}-{sn['max']:.2f}" if sn else "-"


def _equal(r: dict) -> str:
    eq = r.get("outputs_equal_none")
    return f"{eq['equal']}/{eq['compared']}" if eq else "-"


_CONFIG = (same("task", lambda r: r["task"]), same("config", lambda r: r["config"]))

BEAMS = _CONFIG + (
    same("ms/tok", lambda r: fmt(r["ms_per_token"]["median"], ".3f")),
    same("+-", lambda r: fmt((r["ms_per_token"]["max"] - r["ms_per_token"]["min"]) / 2, ".3f")),
    same("ms/req", lambda r: fmt(r["ms_per_request"]["median"], ".1f")),
    same("vs none", _median("speedup_vs_none")), same("min-max", _vs_none_range),
    same("vs transformers", _median("speedup_vs_transformers")),
    same("steps/call", lambda r: fmt(r.get("beam_steps_per_target_call"))),
    same("spec rounds", lambda r: "-" if not _spec(r) else f"{100 * _spec(r)['round_share']:.0f}%"),
    same("steps/round", lambda r: fmt(_spec(r).get("steps_per_round"))),
    same("target %", _pct("target")), same("draft %", _pct("draft")), same("enc %", _pct("encoder")),
    same("host %", _pct("host")), same("= none", _equal))


PREDICTIONS = _CONFIG + (
    same("s", field("steps_per_round")), same("R", field("rows", "d")), same("c", field("c", ".3f")),
    same("T(R,g+1)/T(W,1)", field("verify_ratio")), same("pred", field("predicted_speedup")),
    same("ceiling", field("ceiling")), same("T-ratio b-e", field("verify_break_even")),
    same("c b-e", field("c_break_even", ".3f")), same("c loop", field("c_in_loop", ".3f")),
    same("T-ratio loop", field("verify_ratio_in_loop")), same("pred loop", field("predicted_in_loop")),
    same("speedup", lambda r: fmt(r.get("speedup_vs_none", {}).get("median"))),
    same("meas/pred", field("measured_over_predicted")))


def beam_estimates_lines(snapshots: dict) -> list[str]:
    def line(when: str, e: dict) -> str:
        rates = ", ".join(f"gamma {g}: {r:.0f}" for g, r in e["steps_per_s"].items()) or "-"
        seen = ", ".join(f"{g}: {n}" for g, n in e["rounds_seen"].items()) or "-"
        return f"{when}: beam steps/s {rates} (best: gamma {e['best']}); rounds by gamma {seen}"
    return snapshot_lines(snapshots, line)


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


def markdown_sections(report: dict) -> list[str]:
    """The report of `beams` in Markdown (after the machine line)."""
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
                 + markdown_table(*lines(BEAMS, report["beam_results"])))
    predicted = [r for r in report["beam_results"] if r.get("prediction")]
    if predicted:
        parts.append("What the runs predict for draft:G: pred = s / (g c + T(R, g+1)/T(W, 1)) (s: measured beam "
                     "steps per speculative round; R: median rows of its scoring run; host time left out); "
                     "ceiling = s / (g c + 1), the same if the scoring run cost one W × 1 step; it pays when "
                     "g c + T(R, g+1)/T(W, 1) < s: T-ratio b-e = s − g c, c b-e = (s − T(R, g+1)/T(W, 1)) / g; "
                     "c loop and T-ratio loop: the same costs as the loop paid them (Stats: draft ms per call with the "
                     "proposal's host work, target ms per call, over none's target ms per call), pred loop = s / "
                     "(draft runs per round × c loop + T-ratio loop):\n\n"
                     + markdown_table(*lines(PREDICTIONS, predicted)))
    draft = (f"; draft W × 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}"
             if costs.get("draft_step_ms") is not None else "")
    parts.append(f"Per-call costs (batched sessions, past length {costs['past_length']}, median of "
                 f"{costs['repeats']}): target W × 1 step {costs['target_step_ms']:.3f} ms{draft}:\n\n"
                 + markdown_table(*beam_costs_lines(costs)))
    learned = beam_estimates_lines({"after the warm-up pass": report["auto_estimates"]["after_warmup"],
                                    "at the end": report["auto_estimates"]["at_end"]})
    parts.append("What auto had learned:\n\n" + "\n".join(f"- {line}" for line in learned))
    return parts
