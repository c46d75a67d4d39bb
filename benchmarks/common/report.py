"""The JSON report (`--json`): its schema name, the notes that explain its keys, and writing it."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "specdec-bench/1"


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
