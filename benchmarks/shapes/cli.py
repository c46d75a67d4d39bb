"""`specdec-bench shapes T:D`: what the costs are at real sizes. Random-initialised models with the official
configurations are built and exported once (cached under --work-dir); then the cost probe, the real loop at
temperature 0 on random prompts for each --gamma, and Theorem 3.8 for the paper's alpha values with the measured c
(alpha itself is meaningless with random weights). A Whisper pair also times each encoder per request and predicts
the speedup of a whole request, the encoders included."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import options, running as common
from ..common.report import SAMP_HOST_NOTE
from ..common.tables import Table, fmt
from . import measure as shapes, whisper

HELP = ("costs at real sizes (T5 small/base/large, Whisper tiny ... large-v3 and distil-large-v3; random "
        "weights): c, verify ratio, encoders, predicted speedup")


def add_parser(commands) -> None:
    p = options.command(commands, "shapes", HELP, run, [
        options.random_prompts(audio=True),
        options.sampling(temperatures=False, several_filters=False),
        options.run(max_new_tokens=32, repeat=2, repeat_help="repeats of the real loop", past="64"),
        options.output(plot=True),
        options.export_shapes(),
        options.speech_shapes()])
    options.pair(p, whisper=True)
    p.add_argument("--gamma", type=options.int_list, default=[0, 4], metavar="G,...",
                   help="gammas of the real loop; 0 (the baseline) is always added (default 0,4)")


def run(args) -> int:
    from ..common import prompts as prompts_mod
    from ..sweep.plots import plot_shapes
    from ..sweep.tables import NOTES

    common.runs_checked(args, past=64)
    common.sampling_checked(args)
    args.gamma = common.with_baseline(args.gamma)
    family, target, draft = whisper.parse_pair(args.pair)
    common.one_filter(args, "shapes")
    if args.encoder_repeats < 1 or args.request_tokens < 1:
        raise SpecdecError("--encoder-repeats and --request-tokens must be at least 1")
    common.needs_torch("shapes")
    speech = family == "whisper"

    def log(message):
        print(message, file=sys.stderr)

    def build(ckpt: Path):
        with common.progress(args, 2, "building checkpoints") as bar:
            return whisper.build_pair(target, draft, ckpt, log, bar)

    note = whisper.vocabulary_note(target, draft) if speech else None
    if note:
        log(f"note: {note}")
    export_dir, info = shapes.ensure_export(target, draft, Path(args.work_dir), args.gamma_max, args.max_length,
                                            args.keep_checkpoints, log=log, build=build if speech else None,
                                            skip_check=whisper.SKIP_CHECK if speech else "")
    dec = common.load(export_dir, args.provider, args.threads)
    common.check_gammas(args, dec)
    names = [whisper.hub_id(n) for n in (target, draft)]
    mach = common.begin(f"specdec-bench shapes {':'.join(names)} (random weights, official configurations; export "
                        f"{export_dir})", dec.provider, args.threads)
    started = time.perf_counter()
    settings = {"gammas": args.gamma, "max_new_tokens": args.max_new_tokens, "repeats": args.repeat}
    if speech:
        prompts = prompts_mod.random_audio(dec.manifest.speech, args.num_prompts or whisper.AUDIO_REQUESTS)
        with common.progress(args, args.encoder_repeats + 1, "encoders") as bar:
            encoders = whisper.time_encoders(dec, prompts[0].audio, args.encoder_repeats, bar)
        settings.update(audio_requests=len(prompts), audio_seconds=encoders["audio_seconds"],
                        language=prompts[0].language, task="transcribe", encoder_repeats=args.encoder_repeats,
                        request_tokens=args.request_tokens)
    else:
        count = 8 if args.num_prompts is None else args.num_prompts if args.num_prompts > 0 else 4
        prompts = prompts_mod.random_prompts(dec.vocabulary.tokenizer_size, count, length=args.source_length,
                                             eos_id=prompts_mod.special_id(dec, "eos_token_id"))
        prompts = prompts_mod.tokenize(prompts, dec.tokenizer, dec.max_length)
        settings.update(prompts=len(prompts), source_length=args.source_length)
    probe = common.probe(dec, prompts, args, [0.0], dec.gamma_max)    # the head for every G predicted
    with common.progress(args, (args.repeat * len(prompts) + 2) * len(args.gamma), "specdec-bench shapes") as bar:
        runs = shapes.run_generations(dec, prompts, args.gamma, args.max_new_tokens, args.repeat, bar, probe,
                                      common.base_params(args),
                                      draft_encoder=not speech or not encoders["draft_keeps_target_encoder"])
    analysis = shapes.analyse(probe, runs, dec.gamma_max, whisper.ALPHAS if speech else shapes.PAPER_ALPHAS)
    settings.update(probe_past=args.past, threads=args.threads, **common.filter_settings(args))
    configs = whisper.CONFIGS if speech else shapes.CONFIGS
    out = {"mode": "shapes", "machine": mach,
           "shapes": {"target": names[0], "draft": names[1],
                      "configs": {whisper.hub_id(n): configs[n] for n in (target, draft)},
                      "common": whisper.COMMON if speech else shapes.COMMON},
           "engine": common.engine_info(dec), "export_info": info, "settings": settings, "notes": NOTES,
           "cost_probe": probe, "generation": runs, **analysis, "acceptance": shapes.acceptance(probe, runs)}
    if speech:
        out["family"], out["prediction_label"] = "whisper", whisper.LABEL
        out["shapes"].update(vocab_size=dec.vocab_size, vocabulary_note=note,
                             parameters={role: whisper.parameters(n, dec.vocab_size)
                                         for role, n in (("target", target), ("draft", draft))})
        out["speech"] = {"encoder": encoders,
                         "shares_target_encoder": dec.manifest.speech.get("shares_target_encoder", []),
                         "draft_encoder_graph": dec.manifest.models["draft"].encoder is not None}
        out["request"] = whisper.request_predictions(analysis, probe, runs, encoders, args.request_tokens)
    out["elapsed_s"] = time.perf_counter() - started
    common.report(out, args, sections)
    if args.plot:
        title = f"{':'.join(names)} real shapes (random weights), {mach['cpu_model']}, {mach['cpu_cores']} cores"
        print(f"plot: {plot_shapes(analysis, args.plot, title)}")
    return 0


# -- the report ---------------------------------------------------------------------------------------------------

GENERATION = (("iteration ms", "iteration_ms", ".2f"), ("target runs ms", "target_ms_per_iteration", ".2f"),
              ("draft runs ms", "draft_ms_per_iteration", ".2f"), ("host ms", "host_ms_per_iteration", ".3f"),
              ("host", "host_fraction_of_iteration", ".2%"), ("ORT/iter", "ort_runs_per_iteration", ".2f"),
              ("samp+host ms/tok", "sampling_host_ms_per_token", ".3f"))


def _speedups(predictions: dict, best: dict, theorem_key: str) -> tuple:
    """Theorem 3.8 / with-costs speedup per alpha and gamma, and the best gammas: (headers, rows)."""
    gs = sorted({g for curve in predictions.values() for g in curve}, key=int)
    return (["alpha", *(f"g={g}" for g in gs), "best g", "best g w/costs"],
            [[a, *(f"{curve[g]['theorem_3_8']:.2f}/{curve[g]['with_costs']:.2f}" for g in gs),
              str(best[a][theorem_key]), str(best[a]["with_costs_best_gamma"])] for a, curve in predictions.items()])


def _encoders(report: dict) -> Table:
    enc, runs, names = report["speech"]["encoder"], report["generation"], report["shapes"]
    loop0 = runs.get("0", {}).get("encoder_ms_per_request")
    in_loop = [r["encoder_ms_per_request"] for g, r in runs.items() if g != "0"]
    draft_loop = max(in_loop) - loop0 if in_loop and loop0 is not None else None
    draft = (["0 (the target's run)", "-"] if enc["draft_keeps_target_encoder"] else
             [fmt(enc["draft_encoder_ms"], ".1f"), fmt(draft_loop, ".1f")])
    return Table(f"Encoders per request ({enc['audio_seconds']:.0f} s window, {enc['encoder_frames']} frames; median "
                 f"of {enc['repeats']}; in the loop: the real loop's encoder time per request, the draft's = gamma > 0 "
                 f"minus gamma = 0)", ["model", "encoder ms/request", "in the loop ms/request"],
                 [[f"target {names['target']}", fmt(enc["target_encoder_ms"], ".1f"), fmt(loop0, ".1f")],
                  [f"draft {names['draft']}", *draft]])


def sections(report: dict) -> list:
    from ..common.report import probe_parts

    probe, acc, s, runs = report["cost_probe"], report["acceptance"], report["settings"], report["generation"]
    speech, label, note = report.get("speech"), report.get("prediction_label"), report["shapes"].get("vocabulary_note")
    parts = ([f"Note: {note}"] if note else []) + ([_encoders(report)] if speech else []) + probe_parts(probe)
    parts.append(f"The sampling head alone (estimates): {fmt(probe.get('target_step_head_ms'), '.3f')} ms for a target "
                 f"step's draw, {fmt(probe.get('draft_step_head_ms'), '.3f')} ms for a draft step's.")
    requests = f"{s['audio_requests']} random audio requests" if speech else f"{s['prompts']} random prompts"
    parts.append(Table(
        f"Real loop on {requests} x {s['repeats']}, {s['max_new_tokens']} new tokens, T=0 (alpha is meaningless with "
        f"random weights; per iteration; host: its share of one)\n{SAMP_HOST_NOTE}",
        ["gamma", *(h for h, _, _ in GENERATION)],
        [[g, *(fmt(r.get(key), spec) for _, key, spec in GENERATION)] for g, r in runs.items()]))
    parts.append(Table(
        f"{'Decoder speedup, ' + label if label else 'Predicted speedup'}: Theorem 3.8 with the measured c = "
        f"{probe['c']:.3f} / with the costs (the measured fused target pass of gamma+1 tokens and host time; sampling "
        f"is inside the runs)", *_speedups(report["predictions"], report["best"], "theorem_best_gamma")))
    if speech:
        req = report["request"]
        parts.append(Table(
            f"Whole request of N = {req['tokens']} tokens with the encoders, {label}, Theorem 3.8 / with the costs "
            f"(the target's encoder is {100 * req['encoder_share_of_baseline']:.1f}% of a target-only request)",
            *_speedups(req["predictions"], req["best"], "theorem_3_8_best_gamma")))
    v5, loop = acc["verify_5_over_step"], acc.get("verify_5_over_step_in_loop")
    verify = ("not measured (gamma_max < 4)" if v5 is None else
              f"{v5:.2f}x a one-token step ({'<=' if acc['verify_5_ok'] else '>'} 1.5x)"
              + (f" ({loop:.2f}x in the real loop, gamma = 4 vs gamma = 0)" if loop is not None else ""))
    parts.append(f"Acceptance: verify of 5 tokens = {verify}; host overhead at most "
                 f"{100 * acc['host_fraction_worst']:.2f}% of an iteration ({'<=' if acc['host_ok'] else '>'} 5%)")
    return parts
