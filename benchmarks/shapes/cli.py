"""`specdec-bench shapes T:D`: what the costs are at real sizes. Random-initialised models with the official
configurations are built and exported once (cached under --work-dir, measure.py); then the cost probe, the real loop
at temperature 0 on random prompts for each --gamma, and Theorem 3.8 for the paper's alpha values with the measured
c (alpha itself is meaningless with random weights). A Whisper pair (whisper.py, whisper_costs.py) also
times each encoder per request and predicts the speedup of a whole request, the encoders included."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import machine, options, running as common

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
    from ..common.report import SAMP_HOST_NOTE
    from ..common.tables import table
    from ..sweep.plots import plot_shapes
    from ..sweep.tables import NOTES
    from . import measure as shapes, whisper as whisper_shapes
    from .measure import verify_text
    from .tables import generation_lines, markdown_sections, prediction_lines

    common.runs_checked(args, past=64)
    common.sampling_checked(args)
    args.gamma = common.with_baseline(args.gamma)
    family, target, draft = whisper_shapes.parse_pair(args.pair)
    common.one_filter(args, "shapes")
    if args.encoder_repeats < 1 or args.request_tokens < 1:
        raise SpecdecError("--encoder-repeats and --request-tokens must be at least 1")
    common.needs_torch("shapes")
    if family == "whisper":
        from .whisper_cli import run as run_whisper

        return run_whisper(args, target, draft)
    if args.num_prompts is None:
        args.num_prompts = 8
    export_dir, info = shapes.ensure_export(target, draft, Path(args.work_dir), args.gamma_max, args.max_length,
                                            args.keep_checkpoints, log=lambda m: print(m, file=sys.stderr))
    dec = common.load(export_dir, args.provider, args.threads)
    common.check_gammas(args, dec)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench shapes {target}:{draft} (random weights, official configurations; export {export_dir})")
    common.print_machine(mach)
    prompts = prompts_mod.random_prompts(dec.vocabulary.tokenizer_size, args.num_prompts if args.num_prompts > 0 else 4,
                                         length=args.source_length, eos_id=prompts_mod.special_id(dec, "eos_token_id"))
    prompts = prompts_mod.tokenize(prompts, dec.tokenizer, dec.max_length)
    started = time.perf_counter()
    base = common.base_params(args)
    probe = common.probe(dec, prompts, args, [0.0], dec.gamma_max)     # the head for every G the predictions use
    with common.progress(args, (args.repeat * len(prompts) + 2) * len(args.gamma), "specdec-bench shapes") as bar:
        runs = shapes.run_generations(dec, prompts, args.gamma, args.max_new_tokens, args.repeat, bar, probe, base)
    analysis = shapes.analyse(probe, runs, dec.gamma_max)
    verdict = shapes.acceptance(probe, runs)
    print()
    print(f"real loop on {len(prompts)} random prompts x {args.repeat}, {args.max_new_tokens} new tokens, T=0 "
          f"(alpha is meaningless with random weights)")
    print(SAMP_HOST_NOTE)
    print(table(*generation_lines(runs)))
    print()
    print(f"Theorem 3.8 with the measured c = {probe['c']:.3f} for the paper's alpha values "
          f"(w/costs: with the measured fused target pass of gamma+1 tokens and host time; sampling is inside the "
          f"runs)")
    print(table(*prediction_lines(analysis)))
    print()
    print(f"acceptance: verify of 5 tokens = {verify_text(verdict)}; host overhead worst "
          f"{100 * verdict['host_fraction_worst']:.2f}% of an iteration "
          f"({'<=' if verdict['host_ok'] else '>'} 5%)")
    out = {"mode": "shapes", "machine": mach, "shapes": {"target": target, "draft": draft,
                                                         "configs": {n: shapes.CONFIGS[n] for n in (target, draft)},
                                                         "common": shapes.COMMON},
           "engine": common.engine_info(dec), "export_info": info,
           "settings": {"gammas": args.gamma, "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
                        "prompts": len(prompts), "source_length": args.source_length, "probe_past": args.past,
                        "threads": args.threads, **common.filter_settings(args)},
           "notes": NOTES,
           "cost_probe": probe, "generation": runs, **analysis, "acceptance": verdict,
           "elapsed_s": time.perf_counter() - started}
    common.finish(out, args, markdown_sections)
    if args.plot:
        title = f"{target}:{draft} real shapes (random weights), {mach['cpu_model']}, {mach['cpu_cores']} cores"
        print(f"plot: {plot_shapes(analysis, args.plot, title)}")
    return 0
