"""`specdec-bench shapes TARGET:DRAFT` for a Whisper pair (cli.py checked the flags and the names and calls
this): build and export the pair once (whisper.py), time the encoders, the cost probe and the real loop on
random audio requests, predict the speedups (whisper_costs.py) and print / write the report."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..common import machine, running as common
from . import measure as shapes, whisper as whisper_shapes
from .measure import verify_text
from .whisper_costs import ALPHAS, AUDIO_REQUESTS, LABEL, SKIP_CHECK, audio_requests, request_predictions, speech_text, time_encoders


def run(args, target: str, draft: str) -> int:
    """`specdec-bench shapes` on a Whisper pair (cli.py checked the flags and the names)."""
    from ..common.report import SAMP_HOST_NOTE, probe_text
    from ..common.tables import table
    from ..sweep.plots import plot_shapes
    from ..sweep.tables import NOTES
    from .tables import generation_lines, prediction_lines
    from .whisper_costs import markdown_sections

    def log(message):
        print(message, file=sys.stderr)

    note = whisper_shapes.vocabulary_note(target, draft)
    if note:
        log(f"note: {note}")

    def build(ckpt: Path):
        with common.progress(args, 2, "building checkpoints") as bar:
            return whisper_shapes.build_pair(target, draft, ckpt, log, bar)

    export_dir, info = shapes.ensure_export(target, draft, Path(args.work_dir), args.gamma_max, args.max_length,
                                            args.keep_checkpoints, log=log, build=build, skip_check=SKIP_CHECK)
    dec = common.load(export_dir, args.provider, args.threads)
    common.check_gammas(args, dec)
    mach = machine.describe(dec.provider, args.threads)
    names = f"{whisper_shapes.hub_id(target)}:{whisper_shapes.hub_id(draft)}"
    print(f"specdec-bench shapes {names} (random weights, official configurations; export {export_dir})")
    if note:
        print(f"note: {note}")
    common.print_machine(mach)
    speech = dec.manifest.speech
    requests = audio_requests(speech, args.num_prompts or AUDIO_REQUESTS)
    started = time.perf_counter()
    with common.progress(args, args.encoder_repeats + 1, "encoders") as bar:
        encoders = time_encoders(dec, requests[0].audio, args.encoder_repeats, progress=bar)
    probe = common.probe(dec, requests, args, [0.0], dec.gamma_max, source=requests[0].audio, show=False)
    own_encoder = not encoders["draft_keeps_target_encoder"]
    with common.progress(args, (args.repeat * len(requests) + 2) * len(args.gamma), "specdec-bench shapes") as bar:
        runs = shapes.run_generations(dec, requests, args.gamma, args.max_new_tokens, args.repeat, bar, probe,
                                      common.base_params(args), draft_encoder=own_encoder)
    analysis = shapes.analyse(probe, runs, dec.gamma_max, alphas=ALPHAS)
    request = request_predictions(analysis, probe, runs, encoders, args.request_tokens)
    verdict = shapes.acceptance(probe, runs)
    out = {"mode": "shapes", "family": "whisper", "machine": mach,
           "shapes": {"target": whisper_shapes.hub_id(target), "draft": whisper_shapes.hub_id(draft),
                      "configs": {whisper_shapes.hub_id(n): whisper_shapes.CONFIGS[n] for n in (target, draft)},
                      "common": whisper_shapes.COMMON, "vocab_size": dec.vocab_size, "vocabulary_note": note,
                      "parameters": {role: whisper_shapes.parameters(n, dec.vocab_size)
                                     for role, n in (("target", target), ("draft", draft))}},
           "engine": common.engine_info(dec), "export_info": info,
           "settings": {"gammas": args.gamma, "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
                        "audio_requests": len(requests), "audio_seconds": encoders["audio_seconds"],
                        "language": requests[0].language, "task": "transcribe", "probe_past": args.past,
                        "encoder_repeats": args.encoder_repeats, "request_tokens": args.request_tokens,
                        "threads": args.threads, **common.filter_settings(args)},
           "notes": NOTES, "prediction_label": LABEL,
           "speech": {"encoder": encoders, "shares_target_encoder": speech.get("shares_target_encoder", []),
                      "draft_encoder_graph": dec.manifest.models["draft"].encoder is not None},
           "cost_probe": probe, "generation": runs, **analysis, "request": request, "acceptance": verdict}
    before, after = speech_text(out)
    print()
    print(before)
    print()
    print(probe_text(probe))
    print()
    print(f"real loop on {len(requests)} random audio requests x {args.repeat}, {args.max_new_tokens} new tokens, "
          f"T=0 (alpha is meaningless with random weights)")
    print(SAMP_HOST_NOTE)
    print(table(*generation_lines(runs)))
    print()
    print(f"{LABEL}: decoder speedup with c = {probe['c']:.3f} (w/costs: with the measured fused target pass of "
          f"gamma+1 tokens and host time), Thm 3.8/w-costs:")
    print(table(*prediction_lines(analysis)))
    print()
    print(after)
    print()
    print(f"verify of 5 tokens = {verify_text(verdict)}; host overhead worst "
          f"{100 * verdict['host_fraction_worst']:.2f}% of an iteration")
    out["elapsed_s"] = time.perf_counter() - started
    common.finish(out, args, markdown_sections)
    if args.plot:
        title = f"{names} real shapes (random weights), {mach['cpu_model']}, {mach['cpu_cores']} cores"
        print(f"plot: {plot_shapes(analysis, args.plot, title)}")
    return 0
