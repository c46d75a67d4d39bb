"""`specdec-bench beams (--export DIR | --shapes T:D) --num-beams W`: beam search. On an export: per task,
target-only beam search (none), exact speculative beam search at each --gamma, gamma=auto and transformers'
generate(num_beams=W) on the same checkpoint, interleaved in one run. At real shapes (random weights,
so no generation): the per-call costs of W x 1 and R x (g+1) target runs."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import Counter
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import options, running as common
from ..common.runs import tasks_of
from ..common.tables import Table, fmt, snapshot_lines
from . import measure as beams

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
    costs.add_argument("--source-length", type=int, default=48, metavar="N",
                       help="random prompt length, at most --max-length (default 48)")


def run(args) -> int:
    if args.num_beams < 2:
        raise SpecdecError(f"--num-beams must be at least 2 for beam search (got {args.num_beams})",
                           "use specdec-bench sweep for greedy and sampling")
    form, other = ("--shapes", ENGINE_ONLY) if args.shapes else ("--export", SHAPES_ONLY)
    for flag, default in other.items():
        if getattr(args, flag[2:].replace("-", "_")) != default:
            raise SpecdecError(f"{flag} does not apply to beams {form}", "see specdec-bench beams --help")
    if args.shapes and args.source_length > args.max_length:
        raise SpecdecError(f"--source-length {args.source_length} is longer than --max-length {args.max_length}",
                           f"pass --source-length {args.max_length} or less, or a larger --max-length")
    args.gamma = [g for g in (args.gamma if args.gamma is not None else beams.DEFAULT_GAMMAS) if g > 0]
    return _shapes(args) if args.shapes else _engine(args)


def _shapes(args) -> int:
    import numpy as np

    from ..shapes import measure as shapes

    target, draft = shapes.parse_pair(args.shapes)
    export_dir, _ = shapes.ensure_export(target, draft, Path(args.work_dir), max(args.gamma), args.max_length,
                                         args.keep_checkpoints, log=lambda m: print(m, file=sys.stderr))
    dec = common.load(export_dir, args.provider, args.threads)
    mach = common.begin(f"specdec-bench beams --shapes {target}:{draft} --num-beams {args.num_beams}: per-call costs "
                        f"only (random weights, official configurations; export {export_dir})", dec.provider,
                        args.threads)
    rows = args.beam_rows or [args.num_beams * k for k in (1, 2, 3, 4)]
    census = {"target": [(r, g + 1) for g in args.gamma for r in rows]}
    ids = np.random.default_rng(0).integers(3, dec.vocab_size, size=args.source_length)
    costs = beams.probe(dec, ids, args.num_beams, args.gamma, census, 32 if args.past is None else args.past,
                        args.probe_repeats, extra_rows=rows)
    out = {"mode": "beam-shapes", "shapes": args.shapes, "machine": mach, "costs": costs}
    common.report(out, args, lambda r: costs_parts(r["costs"]))
    return 0


def _engine(args) -> int:
    from ..common import prompts as prompts_mod

    common.runs_checked(args, past=max(1, args.max_new_tokens // 2))
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    settings = beams.BeamSettings(args.num_beams, args.max_new_tokens, early, args.length_penalty,
                                  args.no_repeat_ngram_size, args.min_new_tokens)
    dec = common.load(args.engine, args.provider, args.threads)
    has_draft = "draft" in dec.manifest.models
    gammas = args.gamma if has_draft else []
    if args.gamma and not has_draft:
        print("note: the export has no draft model 'draft': target-only beam search and transformers only",
              file=sys.stderr)
    configs = beams.configs(gammas, auto=has_draft, transformers=not args.no_transformers)
    beams.check(dec, configs, settings)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True)
    started = time.perf_counter()
    hf, hf_status, checkpoint = None, "left out (--no-transformers)", None
    hf_threads = args.threads or os.cpu_count() or 1
    if not args.no_transformers:
        hf, hf_status, checkpoint = beams.load_transformers(dec, settings, args.target_checkpoint, hf_threads)
        if hf is None:
            print(f"transformers: {hf_status}", file=sys.stderr)
            configs = [c for c in configs if c.specdec]
    mach = common.begin(f"specdec-bench beams --num-beams {args.num_beams}: {args.engine}", dec.provider, args.threads)
    per_pass = len(prompts) * len([c for c in configs if c.specdec]) + (len(prompts) if hf else 0)
    with common.progress(args, per_pass * (1 + args.repeat) + (args.repeat if hf else 0),
                         "specdec-bench beams") as bar:
        cells, equality, shapes, learning, learned = beams.run_beams(dec, prompts, configs, settings, args.repeat,
                                                                     hf, bar)
    costs = beams.probe(dec, prompts[0].ids, args.num_beams, gammas, shapes, args.past, args.probe_repeats)
    rows = beams.summarize(cells, configs, equality, costs)
    out = {"mode": "beams", "machine": mach, "engine": common.engine_info(dec),
           "settings": {**dataclasses.asdict(settings), "gammas": gammas,
                        "configs": [c.as_dict() for c in configs], "repeats": args.repeat,
                        "prompts": len(prompts), "prompts_per_task": tasks_of(prompts),
                        "prompts_origin": origin, "probe_past": costs["past_length"], "threads": args.threads,
                        "transformers": {"status": hf_status, "checkpoint": checkpoint, "torch_threads": hf_threads}},
           "notes": beams.NOTES, "beam_costs": costs, "beam_results": rows,
           "beam_outputs_equal": beams.equality_summary(rows),
           "auto_estimates": {"after_warmup": learned, "at_end": beams.estimates_snapshot(learning.beam_estimates)},
           "auto_estimates_note": beams.ESTIMATES_NOTE,
           "target_run_shapes_seen": [{"rows": r, "tokens": n, "runs": k}          # most frequent first
                                      for (r, n), k in Counter(shapes["target"]).most_common()],
           "elapsed_s": time.perf_counter() - started}
    common.report(out, args, sections)
    return 0


# -- the report ---------------------------------------------------------------------------------------------------

def _at(path: str, spec: str = ".2f"):
    """A cell: the record's value at a dotted path, formatted; "-" where it is missing."""
    def cell(record):
        for key in path.split("."):
            record = record.get(key) if isinstance(record, dict) else None
        return fmt(record, spec)
    return cell


def _columns(*specs) -> tuple:
    """Columns from (header, dotted path, format) or (header, cell function)."""
    return tuple(s if callable(s[1]) else (s[0], _at(*s[1:])) for s in specs)


def costs_parts(costs: dict) -> list:
    seen = {int(g) + 1: e["rows_seen"] for g, e in costs["scoring"].items()}

    def rows_seen(t):
        rs = seen.get(t["tokens"])
        return f"{rs['median']:g} ({rs['min']}-{rs['max']}, {rs['runs']} runs)" if rs else "-"

    head = (f"per-call costs (batched sessions, past length {costs['past_length']}, W = {costs['num_beams']}, median "
            f"of {costs['repeats']}): target W x 1 step {costs['target_step_ms']:.3f} ms "
            f"({fmt(costs.get('target_step_after_switch_ms'), '.3f')} ms right after a run of another shape)")
    if costs.get("draft_step_ms") is not None:
        head += (f"; draft W x 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}; the draft's first step "
                 f"of a round reads {fmt(costs.get('draft_first_step_tokens_mean'))} tokens on average")
    head += "\n(x: over the W x 1 step's ms; after a switch: the first run after a run of another shape)"
    columns = _columns(("target run", lambda t: "W x 1" if t["tokens"] == 1 else f"R x {t['tokens']}"),
                       ("rows", "rows", "d"), ("tokens", "tokens", "d"), ("ms", "ms", ".3f"), ("x", "over_step"),
                       ("after a switch ms", "after_switch_ms", ".3f"), ("x", "after_switch_over_step"),
                       ("rows seen (median, min-max)", rows_seen))
    return [Table(head, columns, costs["target_runs"])]


_CONFIG = (("task", lambda r: r["task"]), ("config", lambda r: r["config"]))
BEAMS = _CONFIG + _columns(
    ("ms/tok", "ms_per_token.median", ".3f"),
    ("+-", lambda r: fmt((r["ms_per_token"]["max"] - r["ms_per_token"]["min"]) / 2, ".3f")),
    ("ms/req", "ms_per_request.median", ".1f"), ("vs none", "speedup_vs_none.median"),
    ("min-max", lambda r: f"{r['speedup_vs_none']['min']:.2f}-{r['speedup_vs_none']['max']:.2f}"
     if r.get("speedup_vs_none") else "-"),
    ("vs transformers", "speedup_vs_transformers.median"), ("steps/call", "beam_steps_per_target_call"),
    ("spec rounds", "speculative.round_share", ".0%"), ("steps/round", "speculative.steps_per_round"),
    ("target", "time_share.target", ".0%"), ("draft", "time_share.draft", ".0%"),
    ("enc", "time_share.encoder", ".0%"), ("host", "time_share.host", ".0%"),
    ("= none", lambda r: f"{r['outputs_equal_none']['equal']}/{r['outputs_equal_none']['compared']}"
     if r.get("outputs_equal_none") else "-"))
PREDICTIONS = _CONFIG + _columns(*((h, f"prediction.{key}", spec) for h, key, spec in (
    ("s", "steps_per_round", ".2f"), ("R", "rows", "d"), ("c", "c", ".3f"), ("T(R,g+1)/T(W,1)", "verify_ratio", ".2f"),
    ("pred", "predicted_speedup", ".2f"), ("ceiling", "ceiling", ".2f"), ("T-ratio b-e", "verify_break_even", ".2f"),
    ("c b-e", "c_break_even", ".3f"), ("c loop", "c_in_loop", ".3f"), ("T-ratio loop", "verify_ratio_in_loop", ".2f"),
    ("pred loop", "predicted_in_loop", ".2f"))), ("speedup", "speedup_vs_none.median"),
    ("meas/pred", "prediction.measured_over_predicted"))


def _estimates(when: str, e: dict) -> str:
    rates = ", ".join(f"gamma {g}: {r:.0f}" for g, r in e["steps_per_s"].items()) or "-"
    seen = ", ".join(f"{g}: {n}" for g, n in e["rounds_seen"].items()) or "-"
    return f"{when}: beam steps/s {rates} (best: gamma {e['best']}); rounds by gamma {seen}"


def sections(report: dict) -> list:
    s, rows, exact = report["settings"], report["beam_results"], report["beam_outputs_equal"]
    parts = [f"prompts: {s['prompts']} from {s['prompts_origin']} "
             f"({', '.join(f'{t} {n}' for t, n in s['prompts_per_task'].items())}); W = {s['num_beams']}, "
             f"max_new_tokens {s['max_new_tokens']}, repeats {s['repeats']}, configurations "
             f"{', '.join(c['label'] for c in s['configs'])}; early_stopping {s['early_stopping']}, length_penalty "
             f"{s['length_penalty']:g}, no_repeat_ngram_size {s['no_repeat_ngram_size']}, min_new_tokens "
             f"{s['min_new_tokens']}; transformers: {s['transformers']['status']}, torch threads "
             f"{s['transformers']['torch_threads']}"]
    parts += costs_parts(report["beam_costs"])
    parts.append(Table(
        "beam search per task (ms/tok: per output token, median over repeats, +- half the min-max range; vs none / "
        "vs transformers: speedup, median of per-repeat ratios; steps/call: beam steps per target run; spec rounds: "
        "share of speculative rounds; steps/round: beam steps per speculative one; target, draft, enc, host: time "
        "shares; = none: outputs equal to none's / compared)", BEAMS, rows))
    predicted = [r for r in rows if r.get("prediction")]
    if predicted:
        parts.append(Table(
            "what the runs predict for draft:G (notes.prediction: pred = s/(g c + T(R,g+1)/T(W,1)), ceiling = "
            "s/(g c + 1), b-e: the break-even T-ratio and c, loop: as the loop paid them; speedup: measured, vs none)",
            PREDICTIONS, predicted))
    learned = report["auto_estimates"]
    parts.append("\n".join([f"what auto had learned: {report['auto_estimates_note']}",
                            *(f"- {line}" for line in snapshot_lines(
                                {"after the warm-up pass": learned["after_warmup"], "at the end": learned["at_end"]},
                                _estimates))]))
    spec = [(task, label, e) for task, by in exact.items() for label, e in by.items() if label != beams.TRANSFORMERS]
    bad = [f"{task}/{label} {e['mismatches']} of {e['compared']}" for task, label, e in spec if e["mismatches"]]
    parts.append(f"beam exactness: MISMATCH with none for {', '.join(bad)}" if bad else
                 f"beam exactness: every specdec configuration gave none's sequences on every prompt of every pass "
                 f"({sum(e['compared'] for _, _, e in spec)} compared)")
    hf = [f"{task} {by[beams.TRANSFORMERS]['equal']}/{by[beams.TRANSFORMERS]['compared']}"
          for task, by in exact.items() if beams.TRANSFORMERS in by]
    if hf:
        parts.append(f"transformers' beam search equals none's best sequence: {', '.join(hf)}")
    return parts
