"""`specdec-bench drafts --export DIR --draft none draft lookup lookup,draft auto`: which source of guesses pays, per
task of the prompts x temperature x draft configuration, interleaved on one export (measure.py). On a Whisper export
the prompts are audio clips: --prompts FILE.jsonl with {"audio": "clips/0001.wav"} lines (16 kHz WAV files, paths
relative to the JSONL file; optional "reference", "task", "language", default en)."""

from __future__ import annotations

import time

from specdec.runtime.core.errors import SpecdecError

from ..common import machine, options, running as common

HELP = "draft sources on an export: none, a draft model, lookup, chains and auto, per task and temperature"


def add_parser(commands) -> None:
    p = options.command(commands, "drafts", HELP, run, options.on_export(False, "repeats of every configuration", (
        "specdec's default (draft and gamma 'auto'), after the draft table",
        "the assistants (default min(4, gamma_max))")))
    p.add_argument("--draft", nargs="+", action="extend", required=True, metavar="NAME[:G]",
                   help="the draft configurations, separated by spaces: none (target only, the baseline, always "
                        "added), lookup (copy from the source and the output), lookup,datastore (and the export's "
                        "datastore), a draft model's name (draft), a chain lowest level first with commas "
                        "(lookup,draft) and auto (the runtime picks source and gamma each round); NAME:G "
                        "fixes gamma (draft:3), NAME alone runs with gamma=auto. Each temperature starts from fresh "
                        "auto estimates, learned on one untimed warm-up pass over the prompts")


def _print_agreement(agreement: dict, lenience: float) -> None:
    bad = [f"{task}/{label} {a['agree']}/{a['prompts']}" for task, by in agreement.items()
           for label, a in by.items() if a["agree"] != a["prompts"]]
    if lenience < 1.0:
        print(f"greedy agreement with none (not expected: lenience {lenience:g} < 1 is not exact): "
              + (", ".join(bad) or "all agree"))
    elif bad:
        print(f"greedy exactness: MISMATCH for {', '.join(bad)}")
    else:
        print("greedy exactness: every draft configuration gives none's tokens on every prompt of every task")


def run(args) -> int:
    from ..common import prompts as prompts_mod
    from ..common.report import sweep_filters_text
    from ..common.tables import lines, table
    from . import measure as drafts
    from .tables import DRAFTS, DRAFT_NOTES, PREDICTIONS, draft_best_lines, estimates_lines, markdown_sections

    common.export_checked(args)
    common.one_filter(args, "drafts")
    configs = drafts.parse_configs(args.draft)
    base = common.base_params(args)
    dec = common.load(args.engine, args.provider, args.threads)
    if args.peers and dec.manifest.speech is not None:
        raise SpecdecError("--peers times T5 engines (transformers, CTranslate2, Optimum), and this export is a "
                           "Whisper model", "drop --peers")
    drafts.check_configs(dec, configs, base)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True, audio=True)
    tasks = drafts.tasks_of(prompts)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench: {args.engine}")
    common.print_machine(mach)
    print(f"prompts: {prompts_mod.describe(prompts)} from {origin} "
          f"({', '.join(f'{t} {n}' for t, n in tasks.items())}); "
          f"max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, "
          f"draft {', '.join(c.label for c in configs)}, temperature {','.join(f'{t:g}' for t in args.temperature)}; "
          f"{sweep_filters_text(common.filter_settings(args))}")

    started = time.perf_counter()
    probe = common.probe(dec, prompts, args, args.temperature, dec.gamma_max)

    runs = len(args.temperature) * (1 + args.repeat) * len(prompts) * len(configs)
    with common.progress(args, runs, "specdec-bench drafts") as bar:
        cells, outputs, learned = drafts.run_drafts(dec, prompts, configs, args.temperature, args.max_new_tokens,
                                                    args.repeat, bar, base=base)
    rows = drafts.summarize(cells, configs, probe)
    best, agreement = drafts.best_by_task(rows), drafts.greedy_agreement(outputs)
    print()
    print("draft sources per task (ms/tok: median over repeats, +-: half the min-max range; speedup: median of "
          "per-repeat ratios to none of the same task and T, min-max over repeats; decode ms/tok, decode speedup: "
          "the same without the encoder runs (Stats.encoder_s), the decoder's own; tok/call: tokens per target "
          "call; sources: per source alpha = accepted/(accepted + rejections) per guess and share of the tokens, "
          "lookup> = the lookup as the draft model checked it in lookup,draft)")
    print(table(*lines(DRAFTS, rows)))
    print()
    print("Theorem 3.8 for the dominant source with measured costs: thm3.8 = E(alpha, g)/(g c + T(g)/T(0)), g: mean "
          "guesses per round, T(g)/T(0): the probe's target run over g+1 tokens over one token, c: the probe's "
          "draft step / target step (0 for lookup; x draft runs per guess for lookup,draft); tok/round: the "
          "source's measured tokens per round, against E[tok]; mixture: the same "
          "over every kind of round the configuration had (target-only rounds included); meas/...: measured "
          "speedup over the prediction")
    print(table(*lines(PREDICTIONS, rows)))
    print()
    print(drafts.ESTIMATES_NOTE + " At the end of each warm-up pass:")
    for line in estimates_lines(learned):
        print(f"  {line}")
    if best:
        print()
        for line in draft_best_lines(best):
            print(line)
    if agreement:
        _print_agreement(agreement, args.lenience)

    peers = None
    if args.peers:                          # after the drafts: the peers' loads and exports overlap none of them
        gamma = args.peer_gamma if args.peer_gamma is not None else min(4, dec.gamma_max)
        peers = common.time_peers(args, dec, prompts, gamma, default=True,
                                  what=f", all tasks; specdec default = draft and gamma 'auto'; assistants gamma "
                                       f"{gamma}")

    out = {"mode": "drafts", "machine": mach, "engine": common.engine_info(dec),
           "settings": {"drafts": [c.as_dict() for c in configs], "temperatures": args.temperature,
                        "max_new_tokens": args.max_new_tokens, "repeats": args.repeat, "prompts": len(prompts),
                        "audio_seconds": prompts_mod.audio_seconds(prompts),
                        "prompts_per_task": tasks, "prompts_origin": origin, "probe_past": args.past,
                        "threads": args.threads, **common.filter_settings(args)},
           "notes": DRAFT_NOTES, "cost_probe": probe, "draft_results": rows, "draft_best": best,
           "draft_greedy_agreement": agreement,
           "auto_estimates": {str(t): e for t, e in learned.items()}, "auto_estimates_note": drafts.ESTIMATES_NOTE,
           "peers": peers, "elapsed_s": time.perf_counter() - started}
    common.finish(out, args, markdown_sections)
    return 0
