"""`specdec-bench shapes` for a Whisper pair (whisper.py builds and exports it): what a request costs at real
sizes. Requests are random audio filling the encoder's 30 s window (random weights make the transcript, and so
alpha, meaningless, as for T5). Measured: each encoder per request (PCM -> log-mel -> cross K/V; the target's
encoder graph also gives the cross K/V of a draft that keeps it; a draft with an encoder of its own runs it too), the
cost probe (target step, draft step, c, the verify-cost ratio for 1..gamma_max+1 tokens), and the real loop per
gamma (ORT runs and host time per iteration, the encoders per request). Predicted, from those costs: Theorem 3.8's
decoder speedup at alpha 0.7 and 0.8, and the speedup of a whole request of N tokens, the encoders included:

    request speedup = (E_target + N t) / (E_target + E_draft + N t / S)

(t: the baseline's time per token, the target step (with costs: + the host time per iteration); S: the decoder
speedup; E_draft: 0 for a draft that keeps the target's encoder, whose cross K/V come with the target's run).
"""

from __future__ import annotations

import statistics

import numpy as np

from ..common.prompts import Prompt, random_audio

ALPHAS = (0.7, 0.8)
REQUEST_TOKENS = 100            # about 30 s of English speech: ~75 words at ~1.3 tokens a word
AUDIO_REQUESTS = 2              # --num-prompts' default for a Whisper pair (each request runs the encoder)
LABEL = "prediction (Theorem 3.8 with measured c; random weights)"
# The export's parity check runs PyTorch's float64 forward: 12 GB for large-v3 alone, beside the other model and the
# graphs, past a 24 GB machine. These are random weights measured for costs; the graphs' parity is what the test
# suite checks on tiny Whisper models.
SKIP_CHECK = ("random-weight Whisper at a real size, measured for costs only; the graphs' parity against PyTorch is "
              "tested on tiny Whisper models")


def audio_requests(speech: dict, count: int, seed: int = 0) -> list[Prompt]:
    """`count` requests of random audio filling the encoder's window (prompts.random_audio: Gaussian noise, 0.1
    RMS), in the export's first language (by id), so no request spends a run on language detection."""
    return random_audio(speech, count, seed)


def time_encoders(dec, audio, repeats: int, warmup: int = 1, progress=None) -> dict:
    """Each encoder run per request, median of `repeats` (after `warmup`), target and draft interleaved: the
    target's encoder graph (with a draft that keeps it, its run writes that draft's cross K/V too) and the draft's
    own encoder, if it has one. Times are the encoder runs alone (Stats.encoder_s)."""
    from specdec.runtime import Stats

    target, draft = dec.target, dec.models.get("draft")
    own = draft is not None and draft.encoder is not None
    pcm = np.asarray(audio, dtype=np.float32)
    times = {"target": [], "draft": []}
    for rep in range(warmup + repeats):
        for role, model in (("target", target), ("draft", draft if own else None)):
            if model is None:
                continue
            stats = Stats()
            model.encode(pcm, stats)
            if rep >= warmup:
                times[role].append(stats.encoder_s)
        if progress is not None:
            progress.update(1)
    speech = dec.manifest.speech
    return {"target_encoder_ms": 1000.0 * statistics.median(times["target"]),
            "draft_encoder_ms": 1000.0 * statistics.median(times["draft"]) if own else None,
            "draft_keeps_target_encoder": not own, "repeats": repeats,
            "audio_seconds": pcm.size / int(speech["sampling_rate"]), "encoder_frames": int(speech["frames"])}


def request_predictions(analysis: dict, probe: dict, runs: dict, encoders: dict, tokens: int) -> dict:
    """The speedup of a whole request of `tokens` tokens, the encoders included, for every alpha and gamma of
    `analysis` (shapes.analyse): from Theorem 3.8's decoder speedup over the target step, and from the speedup with
    the measured costs over the target step plus the baseline's host time per iteration."""
    step = probe["target_step_ms"]
    per_token = {"theorem_3_8": step, "with_costs": step + runs["0"]["host_ms_per_iteration"]}
    e_target, e_draft = encoders["target_encoder_ms"], encoders["draft_encoder_ms"] or 0.0
    predictions, best = {}, {}
    for alpha, curve in analysis["predictions"].items():
        predictions[alpha] = {g: {kind: (e_target + tokens * t) / (e_target + e_draft + tokens * t / point[kind])
                                  for kind, t in per_token.items()}
                              for g, point in curve.items()}
        best[alpha] = {}
        for kind in per_token:          # gamma = 0 (target-only, speedup 1) unless a gamma beats it
            g, s = max(((int(g), v[kind]) for g, v in predictions[alpha].items()), key=lambda gs: (gs[1], -gs[0]),
                       default=(0, 1.0))
            best[alpha][f"{kind}_best_gamma"], best[alpha][f"{kind}_best_speedup"] = (g, s) if s > 1.0 else (0, 1.0)
    baseline = e_target + tokens * per_token["theorem_3_8"]
    return {"tokens": tokens, "label": LABEL, "predictions": predictions, "best": best,
            "baseline_request_ms": baseline, "encoder_share_of_baseline": e_target / baseline,
            "formula": "(E_target + N t) / (E_target + E_draft + N t / S); t: target step (with_costs: + baseline host "
                       "ms per iteration); S: the decoder speedup (theorem_3_8 or with_costs); E_draft: 0 when the "
                       "draft keeps the target's encoder"}


def request_lines(request: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """Request-level speedup per alpha and gamma (Theorem 3.8 / with costs), and the best gammas."""
    from .tables import prediction_lines

    best = {a: {"theorem_best_gamma": b["theorem_3_8_best_gamma"], "with_costs_best_gamma": b["with_costs_best_gamma"]}
            for a, b in request["best"].items()}
    return prediction_lines({"predictions": request["predictions"], "best": best}, markdown)


def encoder_lines(report: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """One row per model: its encoder per request, median of the timed runs and as the real loop paid it."""
    from ..common.tables import fmt

    enc, shapes = report["speech"]["encoder"], report["shapes"]
    loop = report["generation"]
    in_loop = [r["encoder_ms_per_request"] for g, r in loop.items() if g != "0"]
    rows = [[f"target {shapes['target']}", fmt(enc["target_encoder_ms"], ".1f"),
             fmt(loop["0"]["encoder_ms_per_request"], ".1f") if "0" in loop else "-"]]
    if enc["draft_keeps_target_encoder"]:
        rows.append([f"draft {shapes['draft']}", "0 (the target's run)", "-"])
    else:
        draft_loop = max(in_loop) - loop["0"]["encoder_ms_per_request"] if in_loop and "0" in loop else None
        rows.append([f"draft {shapes['draft']}", fmt(enc["draft_encoder_ms"], ".1f"), fmt(draft_loop, ".1f")])
    return ["model", "encoder ms/request", "in the loop ms/request"], rows


def speech_text(report: dict) -> tuple[str, str]:
    """The Whisper parts of the report as text: before the per-call costs (the encoders) and after the decoder
    predictions (the request-level ones)."""
    from ..common.tables import table

    enc, req = report["speech"]["encoder"], report["request"]
    before = (f"encoders per request ({enc['audio_seconds']:.0f} s window, {enc['encoder_frames']} frames; median "
              f"of {enc['repeats']}; in the loop: the real loop's encoder time per request, the draft's = gamma > 0 "
              f"minus gamma = 0):\n" + table(*encoder_lines(report)))
    after = (f"{LABEL}, per request of N = {req['tokens']} tokens with the encoders (the target's encoder is "
             f"{100 * req['encoder_share_of_baseline']:.1f}% of a target-only request), Thm 3.8/w-costs:\n"
             + table(*request_lines(req)))
    return before, after


def markdown_sections(report: dict) -> list[str]:
    """The report of `shapes` on a Whisper pair in Markdown: `shapes`' own, with the encoders before the per-call
    costs and the whole request's predictions after the decoder's."""
    from ..common.tables import markdown_table
    from .tables import markdown_sections as decoder_sections

    enc, req, note = report["speech"]["encoder"], report["request"], report["shapes"].get("vocabulary_note")
    before = ([f"Note: {note}."] if note else []) + [
        f"Encoders per request ({enc['audio_seconds']:.0f} s window, {enc['encoder_frames']} frames; median of "
        f"{enc['repeats']} runs; in the loop: the real loop's encoder time per request):\n\n"
        + markdown_table(*encoder_lines(report, markdown=True))]
    after = [f"Whole request of N = {req['tokens']} tokens with the encoders, {LABEL} / with the measured costs "
             f"(the target's encoder is {100 * req['encoder_share_of_baseline']:.1f}% of a target-only request):\n\n"
             + markdown_table(*request_lines(req, markdown=True))]
    return decoder_sections(report, before, after)
