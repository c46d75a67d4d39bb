"""`specdec-bench beams (--export DIR | --shapes T:D) --num-beams W`: beam search. On an export: per task,
target-only beam search (none), exact speculative beam search at each --gamma, gamma=auto and transformers'
generate(num_beams=W) on the same checkpoint, interleaved in one run (measure.py). At real shapes (random weights,
so no generation): the per-call costs of W x 1 and R x (g+1) target runs (costs.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import machine, options, running as common

HELP = "beam search: none, speculative and auto beam search and transformers' on an export, or costs at real shapes"

# flags of one of the two forms only, and their defaults (a flag that differs from its default was given)
ENGINE_ONLY = {"--prompts": None, "--num-prompts": 8, "--max-new-tokens": 64, "--repeat": 5,
               "--early-stopping": "false", "--length-penalty": 1.0, "--no-repeat-ngram-size": 0,
               "--min-new-tokens": 0, "--no-transformers": False, "--target-checkpoint": None, "--markdown": None}
SHAPES_ONLY = {"--beam-rows": None, "--source-length": 48, "--work-dir": "bench-results", "--max-length": 256,
               "--keep-checkpoints": False}


def add_parser(commands) -> None:
    p = options.command(commands, "beams", HELP, run, [
        options.prompts(every_task=True),
        options.run(max_new_tokens=64, repeat=5, repeat_help="repeats of every configuration",
                    past="max_new_tokens/2; with --shapes: 32"),
        options.output(markdown="write the tables as Markdown (--export)"),
        options.export_shapes(gamma_max=False, title="real-shape models (--shapes)")])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--export", dest="engine", metavar="DIR", help="export directory made by specdec-export")
    what.add_argument("--shapes", metavar="TARGET:DRAFT",
                      help="real shapes: random-initialised models with official configurations (t5-small, t5-base, "
                           "t5-large), e.g. t5-large:t5-small; the per-call costs only")
    p.add_argument("--num-beams", type=int, required=True, metavar="W", help="beams, at least 2")
    p.add_argument("--gamma", type=options.int_list, default=None, metavar="G,...",
                   help="the gammas of exact speculative beam search (draft:G), beside none and gamma=auto; "
                        "0 is none (default 1,2,4)")
    beam = p.add_argument_group("beam search (--export; transformers' generate arguments of the same names)")
    beam.add_argument("--early-stopping", choices=("true", "false", "never"), default="false",
                      help=f"{options.declared('early_stopping')} (default false)")
    beam.add_argument("--length-penalty", type=float, default=1.0, metavar="L",
                      help=f"{options.declared('length_penalty')} (default 1.0)")
    beam.add_argument("--no-repeat-ngram-size", type=int, default=0, metavar="N",
                      help=f"{options.declared('no_repeat_ngram_size')} (default 0: off)")
    beam.add_argument("--min-new-tokens", type=int, default=0, metavar="N",
                      help=f"{options.declared('min_new_tokens')} (default 0)")
    beam.add_argument("--no-transformers", action="store_true",
                      help="leave transformers' beam search out (no torch needed)")
    beam.add_argument("--target-checkpoint", metavar="DIR",
                      help="the target checkpoint the export was made from, for transformers (default: the path in "
                           "its manifest)")
    costs = p.add_argument_group("per-call costs (--shapes)")
    costs.add_argument("--beam-rows", type=options.int_list, default=None, metavar="R,...",
                       help="the rows R of the scoring runs to time (default W,2W,3W,4W)")
    costs.add_argument("--source-length", type=int, default=48, metavar="N", help="random prompt length (default 48)")


def _form_checked(args) -> None:
    """--num-beams is beam search; a flag of the other form (--export or --shapes) is a one-line error."""
    if args.num_beams < 2:
        raise SpecdecError(f"--num-beams must be at least 2 for beam search (got {args.num_beams})",
                           "use specdec-bench sweep for greedy and sampling")
    form, other = ("--shapes", ENGINE_ONLY) if args.shapes else ("--export", SHAPES_ONLY)
    for flag, default in other.items():
        if getattr(args, flag[2:].replace("-", "_")) != default:
            raise SpecdecError(f"{flag} does not apply to beams {form}", "see specdec-bench beams --help")


def run(args) -> int:
    _form_checked(args)
    return _shapes(args) if args.shapes else _engine(args)


def _shapes(args) -> int:
    """The per-call costs of beam search at real shapes (random weights, so no generation): the target's W x 1
    step against R x (g+1) scoring runs for the --beam-rows R, and the draft's W x 1 step, as beam_costs.probe
    measures them on an export."""
    import numpy as np

    from ..shapes import measure as shapes
    from . import costs as beam_costs, measure as beams
    from .tables import beam_costs_text

    target, draft = shapes.parse_pair(args.shapes)
    gammas = [g for g in (args.gamma if args.gamma is not None else beams.DEFAULT_GAMMAS) if g > 0]
    export_dir, _ = shapes.ensure_export(target, draft, Path(args.work_dir), max(gammas), args.max_length,
                                         args.keep_checkpoints, log=lambda m: print(m, file=sys.stderr))
    dec = common.load(export_dir, args.provider, args.threads)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench beams --shapes {target}:{draft} --num-beams {args.num_beams}: per-call costs only (random "
          f"weights, official configurations; export {export_dir})")
    common.print_machine(mach)
    rows = args.beam_rows or [args.num_beams * k for k in (1, 2, 3, 4)]
    census = {"target": [(r, g + 1) for g in gammas for r in rows]}
    ids = np.random.default_rng(0).integers(3, dec.vocab_size, size=args.source_length)
    past = 32 if args.past is None else args.past
    costs = beam_costs.probe(dec, ids, args.num_beams, gammas, census, past, args.probe_repeats, extra_rows=rows)
    print()
    print(beam_costs_text(costs))
    common.write({"mode": "beam-shapes", "shapes": args.shapes, "machine": mach, "costs": costs}, args)
    return 0


def _engine(args) -> int:
    from ..common import prompts as prompts_mod
    from . import costs as beam_costs, measure as beams, summary as beam_summary
    from .tables import BEAM_NOTES, markdown_sections

    gammas = [g for g in (args.gamma if args.gamma is not None else beams.DEFAULT_GAMMAS) if g > 0]
    common.runs_checked(args, past=max(1, args.max_new_tokens // 2))
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    settings = beams.BeamSettings(args.num_beams, args.max_new_tokens, early, args.length_penalty,
                                  args.no_repeat_ngram_size, args.min_new_tokens)
    dec = common.load(args.engine, args.provider, args.threads)
    has_draft = "draft" in dec.manifest.models
    if gammas and not has_draft:
        print("note: the export has no draft model 'draft': target-only beam search and transformers only",
              file=sys.stderr)
    configs = beams.configs(gammas if has_draft else [], auto=has_draft, transformers=not args.no_transformers)
    beams.check(dec, configs, settings)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True)
    tasks = beams.tasks_of(prompts)
    started = time.perf_counter()
    hf, hf_status, checkpoint = None, "left out (--no-transformers)", None
    hf_threads = args.threads or os.cpu_count() or 1
    if not args.no_transformers:
        hf, hf_status, checkpoint = beams.load_transformers(dec, settings, args.target_checkpoint, hf_threads)
        if hf is None:
            print(f"transformers: {hf_status}", file=sys.stderr)
            configs = [c for c in configs if c.specdec]
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench beams --num-beams {args.num_beams}: {args.engine}")
    common.print_machine(mach)
    print(f"prompts: {len(prompts)} from {origin} ({', '.join(f'{t} {n}' for t, n in tasks.items())}); "
          f"max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, configurations "
          f"{', '.join(c.label for c in configs)}; early_stopping {early}, length_penalty {args.length_penalty:g}, "
          f"no_repeat_ngram_size {args.no_repeat_ngram_size}, min_new_tokens {args.min_new_tokens}")

    per_pass = len(prompts) * len([c for c in configs if c.specdec]) + (len(prompts) if hf else 0)
    with common.progress(args, per_pass * (1 + args.repeat) + (args.repeat if hf else 0),
                         "specdec-bench beams") as bar:
        cells, equality, shapes, learning, learned = beams.run_beams(dec, prompts, configs, settings, args.repeat, hf, bar)
    costs = beam_costs.probe(dec, prompts[0].ids, args.num_beams, gammas if has_draft else [], shapes, args.past,
                             args.probe_repeats)
    rows = beam_summary.summarize(cells, configs, equality, costs)
    exact = beam_summary.equality_summary(rows)
    auto_end = beams.estimates_snapshot(learning.beam_estimates)
    _print_report(costs, rows, exact, learned, auto_end)

    out = {"mode": "beams", "machine": mach, "engine": common.engine_info(dec),
           "settings": {**settings.as_dict(), "gammas": gammas if has_draft else [],
                        "configs": [c.as_dict() for c in configs], "repeats": args.repeat,
                        "prompts": len(prompts), "prompts_per_task": tasks, "prompts_origin": origin,
                        "probe_past": costs["past_length"], "threads": args.threads,
                        "transformers": {"status": hf_status, "checkpoint": checkpoint, "torch_threads": hf_threads}},
           "notes": BEAM_NOTES, "beam_costs": costs, "beam_results": rows, "beam_outputs_equal": exact,
           "auto_estimates": {"after_warmup": learned, "at_end": auto_end},
           "auto_estimates_note": beams.ESTIMATES_NOTE,
           "target_run_shapes_seen": _shape_counts(shapes.get("target", [])),
           "elapsed_s": time.perf_counter() - started}
    common.finish(out, args, markdown_sections)
    return 0


def _print_report(costs: dict, rows: list, exact: dict, learned: dict, auto_end: dict) -> None:
    from ..common.tables import lines, table
    from .measure import ESTIMATES_NOTE, TRANSFORMERS
    from .tables import BEAMS, PREDICTIONS, beam_costs_text, beam_estimates_lines

    print()
    print(beam_costs_text(costs))
    print()
    print("beam search per task (ms/tok: wall time per output token of the best sequence, median over repeats, +-: "
          "half the min-max range; ms/req: per request; vs none / vs transformers: their wall time over this "
          "configuration's on the same prompts, median of per-repeat ratios (min-max); steps/call: beam steps per "
          "target run; spec: share of the rounds that were speculative, and beam steps per speculative round; "
          "time shares of target runs, draft runs (with the proposal's host work), encoders, host; = none: outputs "
          "equal to target-only beam search / compared)")
    print(table(*lines(BEAMS, rows)))
    predicted = [r for r in rows if r.get("prediction")]
    if predicted:
        print()
        print("what the runs predict for draft:G (s: beam steps per speculative round, measured; R: rows of its "
              "scoring run, median seen; c: draft W x 1 step / target W x 1 step; T(R,g+1)/T(W,1) from the probe; "
              "pred = s/(g c + T(R,g+1)/T(W,1)), host time left out; ceiling = s/(g c + 1): the same if the "
              "scoring run cost one W x 1 step; pays when g c + T(R,g+1)/T(W,1) < s: "
              "T-ratio b-e = s - g c is the largest scoring-run ratio, c b-e = (s - T-ratio)/g the largest c at "
              "which it would; c loop, T-ratio loop: the same costs as the loop paid them (Stats: draft ms per "
              "call, the proposal's host work included, and target ms per call, over none's target ms per call), "
              "pred loop = s/(draft runs per round x c loop + T-ratio loop); speedup: measured, vs none)")
        print(table(*lines(PREDICTIONS, predicted)))
    print()
    print(ESTIMATES_NOTE)
    for line in beam_estimates_lines({"after warm-up": learned, "at the end": auto_end}):
        print(f"  {line}")
    print()
    bad = [f"{task}/{label} {e['mismatches']} of {e['compared']}" for task, by in exact.items()
           for label, e in by.items() if label != TRANSFORMERS and e["mismatches"]]
    if bad:
        print(f"beam exactness: MISMATCH with none for {', '.join(bad)}")
    else:
        compared = sum(e["compared"] for by in exact.values() for label, e in by.items() if label != TRANSFORMERS)
        print(f"beam exactness: every specdec configuration gave none's sequences on every prompt of every pass "
              f"({compared} compared)")
    hf_agree = [f"{task} {by[TRANSFORMERS]['equal']}/{by[TRANSFORMERS]['compared']}"
                for task, by in exact.items() if TRANSFORMERS in by]
    if hf_agree:
        print(f"transformers' beam search equals none's best sequence: {', '.join(hf_agree)}")


def _shape_counts(shapes) -> list:
    """[{rows, tokens, runs}] of a shape census, most frequent first."""
    counts: dict = {}
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    return [{"rows": r, "tokens": n, "runs": k} for (r, n), k in sorted(counts.items(), key=lambda kv: -kv[1])]
