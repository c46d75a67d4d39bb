"""`specdec-bench`: latency, acceptance rate, cost ratio and speedup of an export, measured on this machine.

    specdec-bench --engine DIR [--prompts FILE] [--gamma 0,1,2,3,4,6,8] [--temperature 0,1]
                  [--top-k K] [--top-p P | --filters none,K:P,...] [--lenience L]
                  [--max-new-tokens N] [--repeat R] [--json OUT.json] [--plot OUT.png]
                  [--peers [--peer-python PYTHON]]
    specdec-bench --engine DIR --draft none,draft,lookup,lookup+draft,auto [--temperature 0,1] [--num-prompts N]
                  [--max-new-tokens N] [--repeat R] [--json OUT.json] [--markdown OUT.md]
    specdec-bench --engine DIR --num-beams W [--gamma 1,2,4] [--early-stopping true|false|never]
                  [--length-penalty L] [--num-prompts N] [--max-new-tokens N] [--repeat R] [--json OUT.json]
                  [--markdown OUT.md]
    specdec-bench --shapes t5-large:t5-small [--workdir bench-results] [--json OUT.json] [--plot OUT.png]
    specdec-bench --shapes t5-large:t5-small --num-beams W [--gamma 1,2,4] [--beam-rows 4,8,12,16]
                  (beam search's per-call costs at real shapes)
    specdec-bench --shapes t5-large:t5-small --dtypes fp32,int8-draft,int8-wo-draft,int8[,int8-wo,int8-wo-fp32]
                  [--repeat R]
                  (weight variants of the same random weights and CTranslate2 int8/float32, one interleaved run)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError, run_cli

from . import machine, report
from .beam_tables import beam_costs_text, beam_estimates_lines, beam_lines, beam_prediction_lines
from .draft_tables import draft_best_lines, draft_lines, draft_prediction_lines, estimates_lines
from .markdown import markdown
from .sweep_tables import (SAMP_HOST_NOTE, filter_cost_lines, generation_lines, peers_lines, prediction_lines,
                           probe_text, summary_lines, sweep_filters_text, sweep_lines, time_lines)
from .tables import table


def _number_list(text: str, kind, example: str, what: str) -> list:
    try:
        values = sorted({kind(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, e.g. {example} (got '{text}')") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected {what} >= 0 (got '{text}')")
    return values


def _int_list(text: str) -> list[int]:
    return _number_list(text, int, "0,2,4", "integers")


def _float_list(text: str) -> list[float]:
    return _number_list(text, float, "0,1", "temperatures")


def _print_machine(mach: dict) -> None:
    """The machine line, and a warning (recorded in the JSON) when other work competes for the CPU."""
    print(f"machine: {machine.one_line(mach)}")
    warning = machine.busy_warning(mach)
    if warning:
        print(warning)
        mach["under_load"] = True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdec-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--engine", help="export directory made by specdec-export")
    what.add_argument("--shapes", metavar="TARGET:DRAFT",
                      help="real-shape mode: random-initialised models with official configurations "
                           "(t5-small, t5-base, t5-large), e.g. t5-large:t5-small; costs only")
    p.add_argument("--prompts", help="JSONL ({\"source\": ...} a line) or plain text, one prompt a line "
                                     "(default: the bundled test prompts for the bundled pair, else random ids)")
    p.add_argument("--num-prompts", type=int, default=8,
                   help="prompts to use, round-robin over the prompts' tasks, so N gives N/tasks of each (default 8; "
                        "0 = all; --draft: at least one per task)")
    p.add_argument("--gamma", type=_int_list, default=None,
                   help="draft tokens per target call of the draft model; 0 (the baseline) is always added "
                        "(default 0,1,2,3,4,6,8; 0,4 with --shapes); not with --draft")
    p.add_argument("--draft", action="append", metavar="none,draft,lookup,lookup+draft,auto",
                   help="compare draft sources instead of gammas: a comma-separated list (repeatable) of "
                        "none (target only, the baseline, always added), lookup (copy from the source and the "
                        "output), a draft model's name (draft), a chain lowest level first with '+' (lookup+draft) "
                        "and auto (the runtime picks source and gamma each round); NAME:G fixes gamma (draft:3), "
                        "NAME alone runs with gamma=auto. Interleaved like --gamma; results per task of the "
                        "prompts x temperature x draft, with alpha and token share per source and Theorem 3.8 "
                        "for the dominant source with measured costs. Each temperature starts from fresh auto "
                        "estimates, learned on one untimed warm-up pass over the prompts. One filter; no --gamma, "
                        "--filters with several, --plot, --profile")
    p.add_argument("--num-beams", type=int, default=1, metavar="W",
                   help="W > 1: beam search instead of a gamma sweep: per task, target-only beam search (none), "
                        "exact speculative beam search at each --gamma (default 1,2,4), gamma=auto and "
                        "transformers' generate(num_beams=W) on the same checkpoint, interleaved in one run; ms per "
                        "token and request, speedups over none and transformers, beam steps per target call, where "
                        "the time goes, outputs equal to none's, and the per-call costs of W x 1 and R x (g+1) "
                        "target runs. Temperature 0 only; no --draft, --filters, --plot, --peers, --profile")
    p.add_argument("--early-stopping", choices=("true", "false", "never"), default="false",
                   help="--num-beams: transformers' early_stopping (default false: its heuristic)")
    p.add_argument("--length-penalty", type=float, default=1.0, help="--num-beams: length_penalty (default 1.0)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0,
                   help="--num-beams: no_repeat_ngram_size (default 0: off)")
    p.add_argument("--min-new-tokens", type=int, default=0, help="--num-beams: min_new_tokens (default 0)")
    p.add_argument("--no-transformers", action="store_true",
                   help="--num-beams: leave transformers' beam search out (no torch needed)")
    p.add_argument("--temperature", type=_float_list, default=None,
                   help="temperatures (default 0,1; --shapes: 0)")
    p.add_argument("--top-k", type=int, default=None,
                   help="top-k filter for every configuration (default 0: none); --filters compares several")
    p.add_argument("--top-p", type=float, default=None,
                   help="nucleus (top-p) filter for every configuration (default 1.0: none)")
    p.add_argument("--filters", action="append", metavar="none,K:P,...",
                   help="top_k:top_p filters to sweep, interleaved like gamma, e.g. none,50:0.9 (none = 0:1, plain "
                        "sampling; repeatable); with more than one, none is always added and a table gives each "
                        "filter's ms/token over plain sampling's (default: the one filter of --top-k/--top-p)")
    p.add_argument("--lenience", type=float, default=1.0,
                   help="lenience l in (0, 1] for every configuration (default 1.0: exact; < 1 keeps more guesses "
                        "and gives up exactness, so greedy outputs may differ from gamma=0)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per generation (default 64; "
                                                                    "--shapes: 32)")
    p.add_argument("--repeat", type=int, default=None, help="repeats of the whole sweep (default 5; --shapes: 2)")
    p.add_argument("--provider", default="auto", choices=("auto", "cpu", "cuda", "tensorrt"))
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per model (0: onnxruntime's default)")
    p.add_argument("--probe-repeats", type=int, default=30, help="repeats of each per-call cost measurement")
    p.add_argument("--beam-rows", type=_int_list, default=None,
                   help="--shapes with --num-beams W: the rows R of the scoring runs to time (default W,2W,3W,4W)")
    p.add_argument("--past", type=int, default=None,
                   help="decoder past length for the per-call costs (default max_new_tokens/2; --shapes: 64)")
    p.add_argument("--json", metavar="OUT.json", help="write the full report as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="write measured vs predicted speedup over gamma")
    p.add_argument("--markdown", metavar="OUT.md", help="write the tables as Markdown")
    p.add_argument("--peers", action="store_true",
                   help="also time transformers greedy, transformers assisted generation and CTranslate2 greedy "
                        "(and Optimum's ONNX Runtime T5 with --peer-python) on the same checkpoints and prompts "
                        "(temperature 0); with --draft, beside specdec's default (draft and gamma 'auto') after the "
                        "draft table")
    p.add_argument("--peer-gamma", type=int, default=None,
                   help="gamma for specdec's speculative path and transformers' assistant in the peer comparison "
                        "(default: the best measured gamma at temperature 0; with --draft, the assistants' gamma, "
                        "default min(4, gamma_max))")
    p.add_argument("--peer-repeat", type=int, default=None, help="repeats of the peer comparison (default --repeat)")
    p.add_argument("--peer-python", metavar="PYTHON",
                   help="--peers: also time Optimum's ONNX Runtime T5 (optimum-onnx's ORTModelForSeq2SeqLM, greedy "
                        "and assisted generate) with this interpreter of a separate venv that has optimum-onnx, "
                        "onnxruntime and torch, in its own process (benchmarks/optimum_peer.py; its ONNX exports are "
                        "cached under --workdir/optimum)")
    p.add_argument("--peer-timeout", type=float, default=None, metavar="S",
                   help="--peer-python: seconds the Optimum worker may take, exports included (default 1800)")
    p.add_argument("--target-checkpoint", help="the target checkpoint the export was made from (default: the path "
                                               "in its manifest)")
    p.add_argument("--draft-checkpoint", help="the draft checkpoint (default: the path in the export's manifest)")
    p.add_argument("--workdir", default="bench-results",
                   help="cache for --shapes exports and CTranslate2 conversions (default ./bench-results)")
    p.add_argument("--gamma-max", type=int, default=8, help="--shapes: gamma_max of the export (default 8)")
    p.add_argument("--max-length", type=int, default=256, help="--shapes: max_length of the export (default 256)")
    p.add_argument("--source-length", type=int, default=48, help="--shapes: random prompt length (default 48)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="--shapes: keep the random PyTorch checkpoints next to the export")
    p.add_argument("--dtypes", metavar="fp32,int8-draft,int8-wo-draft,int8,int8-wo,int8-wo-fp32",
                   help="--shapes: compare weight variants of the same random checkpoints (kept in the workdir) in "
                        "one interleaved run: fp32 (always measured, the reference), int8-draft (specdec-export "
                        "--draft-dtype int8), int8-wo-draft (--draft-dtype int8-wo), int8 (--dtype int8: dynamic "
                        "int8, both models; the target's encoder and LM head fp32), int8-wo and int8-wo-fp32 "
                        "(weight-only int8 through onnxruntime's MatMulNBitsQuantizer, accuracy_level 4: int8 compute, "
                        "and 0: fp32 compute; made by the benchmark from the fp32 export; need onnx-ir); per variant "
                        "target step, draft step, c, verify ratio, target-only and speculative ms/token (the "
                        "largest --gamma), with CTranslate2 greedy at compute_type int8 and float32 on the same "
                        "target checkpoint when ctranslate2 is installed. T=0, one filter; "
                        "--repeat: rounds (default 3)")
    p.add_argument("--profile", metavar="OUT.txt",
                   help="cProfile one pass over the prompts at the best measured gamma (T=0) and write the "
                        "functions where the host time goes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _bar_factory(disabled: bool):
    from tqdm import tqdm

    def make(total, desc):
        # stderr, so stdout stays the tables; disable=None hides it when stderr is not a terminal
        return tqdm(total=total, desc=desc, unit="run", dynamic_ncols=True, leave=False,
                    disable=True if disabled else None, file=sys.stderr)
    return make


def _engine_info(dec) -> dict:
    m = dec.manifest
    return {"path": str(m.root), "dtype": m.dtype, "gamma_max": m.gamma_max, "max_length": m.max_length,
            "vocab_size": m.vocab_size, "target": {"source": m.models["target"].source, **m.models["target"].arch},
            "draft": {"source": m.models["draft"].source, **m.models["draft"].arch}}


def _defaults(args, shapes: bool) -> None:
    if args.gamma is None:
        args.gamma = [0, 4] if shapes else [0, 1, 2, 3, 4, 6, 8]
    if args.temperature is None:
        args.temperature = [0.0] if shapes else [0.0, 1.0]
    if args.max_new_tokens is None:
        args.max_new_tokens = 32 if shapes else 64
    if args.repeat is None:
        args.repeat = 2 if shapes else 5
    if args.past is None:
        args.past = 64 if shapes else max(1, args.max_new_tokens // 2)
    if args.max_new_tokens < 1 or args.repeat < 1:
        raise SpecdecError("--max-new-tokens and --repeat must be at least 1")
    if not 0.0 < args.lenience <= 1.0:
        raise SpecdecError(f"--lenience must be in (0, 1] (got {args.lenience:g})", "use 1.0 for exact sampling")
    if 0 not in args.gamma:
        args.gamma = [0] + args.gamma
    args.filters = _filters(args)


def _checked_filter(top_k, top_p, k_name: str = "--top-k", p_name: str = "--top-p") -> tuple[int, float]:
    if top_k < 0:
        raise SpecdecError(f"{k_name} must be an integer >= 0 (got {top_k})", "use 0 to disable top-k")
    if not 0.0 < top_p <= 1.0:
        raise SpecdecError(f"{p_name} must be in (0, 1] (got {top_p:g})", "use 1.0 to disable top-p")
    return int(top_k), float(top_p)


def _parse_filter(item: str) -> tuple[int, float]:
    """One --filters entry: `none` (no filter) or TOP_K:TOP_P."""
    from .sweep import PLAIN

    if item.lower() == "none":
        return PLAIN
    try:
        k_text, p_text = item.split(":")
        top_k, top_p = int(k_text), float(p_text)
    except ValueError:
        raise SpecdecError(f"--filters takes none or TOP_K:TOP_P entries (got '{item}')",
                           "e.g. --filters none,50:0.9") from None
    return _checked_filter(top_k, top_p, f"top_k in --filters '{item}'", f"top_p in --filters '{item}'")


def _filters(args) -> list[tuple[int, float]]:
    """The sweep's (top_k, top_p) filters: the --filters entries in order, `none` first whenever there are
    several (each filter's cost is compared with it), or else the one filter of --top-k/--top-p."""
    from .sweep import PLAIN

    if not args.filters:
        return [_checked_filter(0 if args.top_k is None else args.top_k, 1.0 if args.top_p is None else args.top_p)]
    if args.top_k is not None or args.top_p is not None:
        raise SpecdecError("--filters and --top-k/--top-p both given", "give every filter in --filters, e.g. "
                                                                      "--filters none,50:0.9")
    filters = list(dict.fromkeys(_parse_filter(item.strip()) for text in args.filters
                                 for item in text.split(",") if item.strip()))
    if not filters:
        raise SpecdecError("--filters is empty", "e.g. --filters none,50:0.9")
    return list(dict.fromkeys([PLAIN] + filters)) if len(filters) > 1 else filters


def _base_params(args):
    """The request parameters every configuration shares, with the sweep's first filter (gamma, temperature, the
    filter and seed are set per call)."""
    from specdec.runtime import Params

    top_k, top_p = args.filters[0]
    return Params(top_k=top_k, top_p=top_p, lenience=args.lenience)


def _filter_settings(args) -> dict:
    """`filters` (every one swept), `lenience`, and `top_k`/`top_p`: the filter when there is one, else None."""
    single = args.filters[0] if len(args.filters) == 1 else (None, None)
    return {"filters": [{"top_k": k, "top_p": p} for k, p in args.filters], "top_k": single[0],
            "top_p": single[1], "lenience": args.lenience}


def _probe(dec, prompts, args, temperatures, max_gamma: int):
    """The cost probe: fused runs at temperature 0 with the sweep's first filter, the head alone at temperature 0
    and every temperature of the sweep (1.0 too when the sweep has no positive one), with every filter of the
    sweep, for G = 0 .. the largest gamma."""
    from . import costs

    head_temps = sorted({float(t) for t in temperatures if t > 0} or {1.0})
    top_k, top_p = args.filters[0]
    return costs.probe(dec, prompts[0].ids, args.past, repeats=args.probe_repeats, temperature=0.0,
                       top_k=top_k, top_p=top_p, lenience=args.lenience, threads=args.threads,
                       head_temperatures=head_temps, head_guesses=range(max_gamma + 1), sweep_filters=args.filters)


def _load(engine, provider, threads):
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(engine, provider=provider, threads=threads)


def _check_gammas(args, dec) -> None:
    too_big = [g for g in args.gamma if g > dec.gamma_max]
    if too_big:
        print(f"note: gamma {', '.join(map(str, too_big))} > the export's gamma_max {dec.gamma_max}: skipped",
              file=sys.stderr)
        args.gamma = [g for g in args.gamma if g <= dec.gamma_max]


def _setting_name(entry: dict, several: bool) -> str:
    """`T=1` of a `best` entry, with its filter when the sweep has several (`T=1, filter 50:0.9`)."""
    from .sweep import filter_label
    from .sweep_summary import row_filter

    return f"T={entry['temperature']:g}" + (f", filter {filter_label(row_filter(entry))}" if several else "")


def _print_agreement(agreement: dict, lenience: float, several: bool) -> None:
    """The greedy exactness check (per gamma, and per filter when there are several: keys `g@K:P`)."""
    bad = [key for key, a in agreement.items() if a["agree"] != a["prompts"]]
    what = "gamma@filter" if several else "gamma"
    if lenience < 1.0:
        print(f"greedy agreement with gamma=0 (not expected: lenience {lenience:g} < 1 is not exact): "
              + ", ".join(f"{what} {key} {a['agree']}/{a['prompts']}" for key, a in agreement.items()))
    elif bad:
        print(f"greedy exactness: MISMATCH for {what} {', '.join(bad)}")
    else:
        print("greedy exactness: every gamma gives the gamma=0 tokens on every prompt"
              + (" with every filter (against gamma=0 with the same filter)" if several else ""))


def _main_engine(args) -> int:
    from . import prompts as prompts_mod, sweep, sweep_summary
    from .plots import plot

    _defaults(args, shapes=False)
    bars = _bar_factory(args.no_progress)
    dec = _load(args.engine, args.provider, args.threads)
    _check_gammas(args, dec)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench: {args.engine}")
    _print_machine(mach)
    print(f"prompts: {len(prompts)} from {origin}; max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, "
          f"gamma {','.join(map(str, args.gamma))}, temperature {','.join(f'{t:g}' for t in args.temperature)}; "
          f"{sweep_filters_text(_filter_settings(args))}")
    base = _base_params(args)
    several = len(args.filters) > 1

    started = time.perf_counter()
    probe = _probe(dec, prompts, args, args.temperature, max(args.gamma))
    print()
    print(probe_text(probe))

    total = (args.repeat * len(prompts) + 2) * len(args.temperature) * len(args.filters) * len(args.gamma)
    bar = bars(total, "specdec-bench")
    try:
        cells, outputs, acceptance = sweep.run_sweep(dec, prompts, args.gamma, args.temperature,
                                                     args.max_new_tokens, args.repeat, bar, base=base,
                                                     filters=args.filters)
    finally:
        bar.close()
    rows = sweep_summary.summarize(cells, dec.gamma_max, acceptance, probe, base)
    best = sweep_summary.best_by_filter_and_temperature(rows, dec.gamma_max)
    greedy_best = best.get(sweep.filter_key(0.0, args.filters[0]), {})
    agreement = sweep_summary.greedy_agreement(outputs)
    filter_cost = sweep_summary.filter_cost(cells)
    print()
    print("sweep (filter: top_k:top_p, none = plain sampling; "
          "ms/tok: median over repeats, +-: half the min-max range; acc.rate: accepted/proposed; alpha: "
          "accepted/(accepted + rejections), the per-token acceptance probability; ORT/iter: ONNX Runtime runs per "
          "iteration, encoders left out; c: draft run / gamma=0's target run, both with their sampling head; "
          "verify_x: target run at this gamma / gamma=0's; speedup: median of per-repeat ratios to gamma=0 of the "
          "same T and filter; "
          "thm3.8: (1-a^(g+1))/((1-a)(g c+1)); ratio: measured/thm3.8; w/costs: the prediction with the measured "
          "target-run cost and host time; best_g: gamma maximising thm3.8)")
    print(f"{SAMP_HOST_NOTE}")
    print(table(*sweep_lines(rows)))
    print()
    print("where the time goes (ms per generated token; the sampling heads run inside the draft and target runs, "
          "their share estimated from the cost probe)")
    print(table(*time_lines(rows)))
    if several:
        print()
        print("filters (ms/tok per generated token, median over repeats; x none: this filter's ms/token over plain "
              "sampling's at the same T and gamma, per repeat (interleaved), median over repeats, and its min-max)")
        print(table(*filter_cost_lines(filter_cost)))
    if best:
        print()
        print("summary (per temperature and filter: gamma=0 and the best measured gamma)")
        print(table(*summary_lines(rows, best)))
    verdicts = {}
    if greedy_best:
        verdicts["measured_ge_0.9_prediction_at_T0"] = greedy_best["measured_over_predicted"] >= 0.9
    for b in best.values():
        print(f"\n{_setting_name(b, several)}: best measured gamma {b['measured_best_gamma']}: "
              f"{b['best_ms_per_token']:.3f} ms/token "
              f"vs {b['baseline_ms_per_token']:.3f} at gamma=0, speedup "
              f"{b['measured_speedup']:.2f}x vs Theorem 3.8 {b['predicted_speedup']:.2f}x "
              f"(ratio {b['measured_over_predicted']:.2f}; with measured costs {b['predicted_with_costs']:.2f}x); "
              f"Theorem 3.8 favours gamma {b['theorem_best_gamma']} ({b['theorem_best_speedup']:.2f}x) at "
              f"alpha {b['alpha_median']:.2f}, c {b['c_median']:.3f}")
        gp = b["gap"]
        head = gp["head_ms_estimated"]
        print(f"  per iteration: Theorem 3.8 charges {gp['theorem_iteration_ms']:.3f} ms (gamma c + 1 steps of "
              f"{gp['target_step_ms']:.3f}); measured {gp['measured_iteration_ms']:.3f} ms = draft runs "
              f"{gp['draft_ms']:.3f} + target run {gp['target_ms']:.3f} "
              f"({gp['target_extra_over_one_step_ms']:+.3f} over one step) + host {gp['host_ms']:.3f} + encoders "
              f"{gp['encoders_ms']:.3f}; of the runs, sampling heads ~{_fmt(head)} (estimated); "
              f"{gp['ort_runs_per_iteration']:.2f} ORT runs; tokens/call {gp['tokens_per_call']:.2f} (expected "
              f"from alpha {gp['expected_tokens_per_call']:.2f}); the baseline's step costs "
              f"{gp['baseline_iteration_ms']:.3f} ms")
    if agreement:
        _print_agreement(agreement, args.lenience, several)

    profile = None
    if args.profile:
        from .profiling import profile_host

        gamma = greedy_best.get("measured_best_gamma") or max(args.gamma)
        profile = profile_host(dec, prompts, gamma, args.max_new_tokens, args.profile, base=base)
        print(f"\nhost profile (gamma {gamma}, T=0, {profile['iterations']} iterations): "
              f"{profile['host_ms_per_iteration']:.3f} ms host per iteration; top functions by own time "
              f"outside ONNX Runtime runs:")
        for f in profile["top"][:8]:
            print(f"  {f['own_ms_per_iteration']:.4f} ms/iter  {f['calls_per_iteration']:.1f} calls/iter  "
                  f"{f['function']}")
        print(f"full listing: {args.profile}")

    peers = None
    if args.peers:
        gamma = args.peer_gamma if args.peer_gamma is not None else \
            (greedy_best.get("measured_best_gamma") or min(4, dec.gamma_max))
        peers = _peers(args, dec, prompts, gamma, default=False, what="")

    elapsed = time.perf_counter() - started
    mach["load_average_at_end"] = machine.load_average()
    out = {"mode": "engine", "machine": mach, "engine": _engine_info(dec),
           "settings": {"gammas": args.gamma, "temperatures": args.temperature,
                        "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
                        "prompts": len(prompts), "prompts_origin": origin, "probe_past": args.past,
                        "threads": args.threads, **_filter_settings(args)},
           "notes": report.NOTES,
           "cost_probe": probe, "results": rows, "best": best, "filter_cost": filter_cost,
           "greedy_agreement": agreement,
           "acceptance": verdicts, "profile": profile, "peers": peers, "elapsed_s": elapsed}
    _write(out, args)
    if args.plot:
        title = (f"{Path(args.engine).name}: {mach['cpu_model']}, {mach['cpu_cores']} cores, {dec.provider}; "
                 f"{len(prompts)} prompts x {args.repeat}, {args.max_new_tokens} new tokens")
        print(f"plot: {plot(rows, args.plot, title)}")
    return 0


def _peers(args, dec, prompts, gamma: int, default: bool, what: str) -> dict:
    """Time the peers (benchmarks/peers.py) beside specdec's speculative path (the draft at `gamma`, or with
    `default` specdec's default) and print their table; `what` goes into its heading."""
    from .optimum_client import OPTIMUM_TIMEOUT_S
    from .peers import run_peers

    peers = run_peers(dec, prompts, args.max_new_tokens, gamma, args.peer_repeat or args.repeat, Path(args.workdir),
                      args.threads, args.target_checkpoint, args.draft_checkpoint, _bar_factory(args.no_progress),
                      log=lambda m: print(m, file=sys.stderr), peer_python=args.peer_python,
                      peer_timeout=args.peer_timeout or OPTIMUM_TIMEOUT_S, default=default)
    print()
    print(f"peers (greedy, same checkpoints and prompts, max_new_tokens {args.max_new_tokens}{what}; ratio = its "
          f"latency / the other's, >1: the other is faster; same tokens: prompts whose greedy output equals "
          f"specdec's)")
    print(table(*peers_lines(peers)))
    return peers


def _draft_conflicts(args) -> None:
    """--draft replaces the gamma sweep: the options that belong to it are one-line errors."""
    if args.gamma is not None:
        raise SpecdecError("--gamma and --draft both given",
                           "give a fixed gamma per draft as NAME:G, e.g. --draft none,draft:3,lookup,auto")
    for flag, given in (("--plot", args.plot), ("--profile", args.profile)):
        if given:
            raise SpecdecError(f"{flag} belongs to the gamma sweep, not to --draft", "run it without --draft")


def _main_drafts(args) -> int:
    from . import drafts, prompts as prompts_mod
    from .sweep import filter_label

    _draft_conflicts(args)
    _defaults(args, shapes=False)
    if len(args.filters) > 1:
        raise SpecdecError(f"--draft compares draft sources with one filter (got --filters "
                           f"{','.join(map(filter_label, args.filters))})", "give --filters a single entry")
    configs = drafts.parse_configs(args.draft)
    base = _base_params(args)
    dec = _load(args.engine, args.provider, args.threads)
    drafts.check_configs(dec, configs, base)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True)
    tasks = drafts.tasks_of(prompts)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench: {args.engine}")
    _print_machine(mach)
    print(f"prompts: {len(prompts)} from {origin} ({', '.join(f'{t} {n}' for t, n in tasks.items())}); "
          f"max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, "
          f"draft {', '.join(c.label for c in configs)}, temperature {','.join(f'{t:g}' for t in args.temperature)}; "
          f"{sweep_filters_text(_filter_settings(args))}")

    started = time.perf_counter()
    probe = _probe(dec, prompts, args, args.temperature, dec.gamma_max)
    print()
    print(probe_text(probe))

    total = len(args.temperature) * (1 + args.repeat) * len(prompts) * len(configs)
    bar = _bar_factory(args.no_progress)(total, "specdec-bench --draft")
    try:
        cells, outputs, learned = drafts.run_drafts(dec, prompts, configs, args.temperature, args.max_new_tokens,
                                                    args.repeat, bar, base=base)
    finally:
        bar.close()
    rows = drafts.summarize(cells, configs, probe)
    best = drafts.best_by_task(rows)
    agreement = drafts.greedy_agreement(outputs)
    print()
    print("draft sources per task (ms/tok: median over repeats, +-: half the min-max range; speedup: median of "
          "per-repeat ratios to none of the same task and T, min-max over repeats; tok/call: tokens per target "
          "call; sources: per source alpha = accepted/(accepted + rejections) per guess and share of the tokens, "
          "lookup> = the lookup as the draft model checked it in lookup+draft)")
    print(table(*draft_lines(rows)))
    print()
    print("Theorem 3.8 for the dominant source with measured costs: thm3.8 = E(alpha, g)/(g c + T(g)/T(0)), g: mean "
          "guesses per round, T(g)/T(0): the probe's target run over g+1 tokens over one token, c: the probe's "
          "draft step / target step (0 for lookup; x draft runs per guess for lookup+draft); tok/round: the "
          "source's measured tokens per round, against E[tok]; mixture: the same "
          "over every kind of round the configuration had (target-only rounds included); meas/...: measured "
          "speedup over the prediction")
    print(table(*draft_prediction_lines(rows)))
    print()
    print(drafts.ESTIMATES_NOTE + " At the end of each warm-up pass:")
    for line in estimates_lines(learned):
        print(f"  {line}")
    if best:
        print()
        for line in draft_best_lines(best):
            print(line)
    if agreement:
        bad = [f"{task}/{label} {a['agree']}/{a['prompts']}" for task, by in agreement.items()
               for label, a in by.items() if a["agree"] != a["prompts"]]
        if args.lenience < 1.0:
            print(f"greedy agreement with none (not expected: lenience {args.lenience:g} < 1 is not exact): "
                  + (", ".join(bad) or "all agree"))
        elif bad:
            print(f"greedy exactness: MISMATCH for {', '.join(bad)}")
        else:
            print("greedy exactness: every draft configuration gives none's tokens on every prompt of every task")

    peers = None
    if args.peers:                          # after the drafts: the peers' loads and exports overlap none of them
        gamma = args.peer_gamma if args.peer_gamma is not None else min(4, dec.gamma_max)
        peers = _peers(args, dec, prompts, gamma, default=True,
                       what=f", all tasks; specdec default = draft and gamma 'auto'; assistants gamma {gamma}")

    mach["load_average_at_end"] = machine.load_average()
    out = {"mode": "drafts", "machine": mach, "engine": _engine_info(dec),
           "settings": {"drafts": [c.as_dict() for c in configs], "temperatures": args.temperature,
                        "max_new_tokens": args.max_new_tokens, "repeats": args.repeat, "prompts": len(prompts),
                        "prompts_per_task": tasks, "prompts_origin": origin, "probe_past": args.past,
                        "threads": args.threads, **_filter_settings(args)},
           "notes": report.DRAFT_NOTES, "cost_probe": probe, "draft_results": rows, "draft_best": best,
           "draft_greedy_agreement": agreement,
           "auto_estimates": {str(t): e for t, e in learned.items()}, "auto_estimates_note": drafts.ESTIMATES_NOTE,
           "peers": peers, "elapsed_s": time.perf_counter() - started}
    _write(out, args)
    return 0


def _main_shapes(args) -> int:
    from . import prompts as prompts_mod, shapes
    from .plots import plot_shapes
    from .sweep import filter_label

    _defaults(args, shapes=True)
    target, draft = shapes.parse_pair(args.shapes)
    if len(args.filters) > 1:
        raise SpecdecError(f"--shapes measures one filter (got --filters "
                           f"{','.join(map(filter_label, args.filters))})", "give --filters a single entry")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise SpecdecError("--shapes builds and exports PyTorch models: torch and transformers are not installed",
                           "pip install 'specdec[bench]'") from None
    export_dir, info = shapes.ensure_export(target, draft, Path(args.workdir), args.gamma_max, args.max_length,
                                            args.keep_checkpoints, log=lambda m: print(m, file=sys.stderr))
    dec = _load(export_dir, args.provider, args.threads)
    _check_gammas(args, dec)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench --shapes {target}:{draft} (random weights, official configurations; export {export_dir})")
    _print_machine(mach)
    prompts = prompts_mod.random_prompts(dec.vocab_size, args.num_prompts if args.num_prompts > 0 else 4,
                                         length=args.source_length, eos_id=prompts_mod.special_id(dec, "eos_token_id"))
    prompts = prompts_mod.tokenize(prompts, dec.tokenizer, dec.max_length)
    started = time.perf_counter()
    base = _base_params(args)
    probe = _probe(dec, prompts, args, [0.0], dec.gamma_max)     # the head for every G the predictions use
    print()
    print(probe_text(probe))
    bars = _bar_factory(args.no_progress)
    bar = bars((args.repeat * len(prompts) + 2) * len(args.gamma), "specdec-bench --shapes")
    try:
        runs = shapes.run_generations(dec, prompts, args.gamma, args.max_new_tokens, args.repeat, bar, probe, base)
    finally:
        bar.close()
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
    mach["load_average_at_end"] = machine.load_average()
    out = {"mode": "shapes", "machine": mach, "shapes": {"target": target, "draft": draft,
                                                         "configs": {n: shapes.CONFIGS[n] for n in (target, draft)},
                                                         "common": shapes.COMMON},
           "engine": _engine_info(dec), "export_info": info,
           "settings": {"gammas": args.gamma, "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
                        "prompts": len(prompts), "source_length": args.source_length, "probe_past": args.past,
                        "threads": args.threads, **_filter_settings(args)},
           "notes": report.NOTES,
           "cost_probe": probe, "generation": runs, **analysis, "acceptance": verdict,
           "elapsed_s": time.perf_counter() - started}
    _write(out, args)
    if args.plot:
        title = f"{target}:{draft} real shapes (random weights), {mach['cpu_model']}, {mach['cpu_cores']} cores"
        print(f"plot: {plot_shapes(analysis, args.plot, title)}")
    return 0


def _dtypes_conflicts(args) -> None:
    if not args.shapes:
        raise SpecdecError("--dtypes compares the weight variants of --shapes models",
                           "use --shapes TARGET:DRAFT --dtypes ...; for an --engine export, --peers times CTranslate2 "
                           "int8 and float32, and an int8 export is measured by passing it as --engine")
    for flag, given in (("--draft", args.draft), ("--plot", args.plot), ("--peers", args.peers),
                        ("--profile", args.profile), ("--peer-gamma", args.peer_gamma is not None),
                        ("--peer-python", args.peer_python)):
        if given:
            raise SpecdecError(f"{flag} does not apply to --dtypes", f"run it without {flag}")
    if args.temperature is not None and any(t > 0 for t in args.temperature):
        raise SpecdecError("--dtypes compares greedy decoding: temperature 0 only", "drop --temperature")
    if args.filters or args.top_k is not None or args.top_p is not None or args.lenience != 1.0:
        raise SpecdecError("--dtypes compares plain greedy decoding", "drop --filters/--top-k/--top-p/--lenience")
    if args.gamma is not None and len([g for g in args.gamma if g > 0]) > 1:
        raise SpecdecError(f"--dtypes measures one speculative gamma (got --gamma {','.join(map(str, args.gamma))})",
                           "e.g. --gamma 0,4")


def _main_dtypes(args) -> int:
    """--shapes T:D --dtypes ...: the weight variants of one pair of random checkpoints and CTranslate2, one run."""
    from . import peer_engines, prompts as prompts_mod, shapes, variant_runs, variants

    _dtypes_conflicts(args)
    names = variants.parse(args.dtypes)
    if args.repeat is None:
        args.repeat = 3
    _defaults(args, shapes=True)
    target, draft = shapes.parse_pair(args.shapes)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise SpecdecError("--shapes builds and exports PyTorch models: torch and transformers are not installed",
                           "pip install 'specdec[bench]'") from None
    log = variant_runs.log_stderr
    dirs, infos, ckpts = variants.ensure_variants(target, draft, Path(args.workdir), args.gamma_max,
                                                   args.max_length, names, log=log)
    decs = {n: _load(d, args.provider, args.threads) for n, d in dirs.items()}
    gamma_max = min(d.gamma_max for d in decs.values())
    gamma = max(g for g in args.gamma if g <= gamma_max)
    first = decs["fp32"]
    threads = args.threads or os.cpu_count() or 1
    ct2, ct2_status = peer_engines.ct2_engines(ckpts["target"]["path"], Path(args.workdir), threads, first.tokenizer,
                                               prompts_mod.special_id(first, "eos_token_id"), log,
                                               variant_runs.CT2_TYPES)
    mach = machine.describe(first.provider, args.threads)
    print(f"specdec-bench --shapes {target}:{draft} --dtypes {','.join(names)} (random weights, official "
          f"configurations, the same checkpoints for every variant: target sha256 {ckpts['target']['sha256'][:12]}, "
          f"draft {ckpts['draft']['sha256'][:12]})")
    _print_machine(mach)
    for n, d in dirs.items():
        print(f"  {n}: {d}")
    for t, why in ct2_status.items():
        if why != "ok":
            print(f"  ctranslate2 {t}: {why}")
    eos = prompts_mod.special_id(first, "eos_token_id")
    prompts = prompts_mod.random_prompts(first.vocab_size, args.num_prompts if args.num_prompts > 0 else 4,
                                         length=args.source_length, eos_id=eos)
    prompts = prompts_mod.tokenize(prompts, first.tokenizer, first.max_length)
    print(f"{len(prompts)} random prompts of {args.source_length} tokens, {args.max_new_tokens} new tokens, T=0, "
          f"{args.repeat} rounds, speculative gamma {gamma}, probe at past {args.past} with {args.probe_repeats} "
          f"repeats over the rounds; target threads {args.threads or 'default'}, draft 1, CTranslate2 intra_threads "
          f"{threads}")
    started = time.perf_counter()
    bar = _bar_factory(args.no_progress)(1 + args.repeat * (len(decs) + len(decs) * (2 if gamma else 1) + len(ct2)),
                                         "specdec-bench --dtypes")
    try:
        raw = variant_runs.measure(decs, ct2, prompts, gamma, args.max_new_tokens, args.repeat, args.probe_repeats,
                               args.past, args.threads, bar)
    finally:
        bar.close()
    weights = {n: variants.export_weights(d) for n, d in dirs.items()}
    result = variant_runs.summarize(raw, weights)
    print()
    print(f"variants (median over {result['rounds']} rounds, (min-max); steps at past {args.past}, fused runs with "
          f"their heads; vs fp32: fp32 target step / this one's, per round; c: draft step / this variant's target "
          f"step; verify 5 ×: 5-token target pass / one-token step; ms/tok: wall time per generated token incl. "
          f"encoders; spec: gamma {gamma}; tok/call: tokens per target call of the speculative runs (random weights: "
          f"what two random models happen to agree on, not a trained pair's alpha); "
          f"Thm3.8: predicted speedup over its own target-only at alpha {variant_runs.ALPHA} from this c, best "
          f"gamma; "
          f"same tokens: prompts whose greedy output at gamma 0 (g0) and at gamma {gamma} (spec) equals fp32 "
          f"target-only's, and spec=own g0: the speculative output equals this variant's own target-only output)")
    print(table(*variant_runs.table_lines(result, gamma)))
    print()
    for line in variant_runs.verdict_lines(result):
        print(line)
    mach["load_average_at_end"] = machine.load_average()
    out = {"mode": "dtypes", "machine": mach,
           "shapes": {"target": target, "draft": draft, "configs": {n: shapes.CONFIGS[n] for n in (target, draft)}},
           "checkpoints": ckpts, "exports": {n: str(d) for n, d in dirs.items()}, "export_info": infos,
           "ct2_status": ct2_status,
           "settings": {"dtypes": names, "gamma": gamma, "max_new_tokens": args.max_new_tokens,
                        "rounds": args.repeat, "prompts": len(prompts), "source_length": args.source_length,
                        "probe_past": args.past, "probe_repeats": args.probe_repeats,
                        "probe_repeats_per_round": raw["probe_repeats_per_round"], "threads": args.threads,
                        "ct2_intra_threads": threads,
                        "weight_only": {"bits": variants.WO_BITS, "block_size": variants.WO_BLOCK,
                                        "accuracy_level": {n: variants.WO_ACCURACY[n] for n in names
                                                           if n in variants.WO_ACCURACY}}},
           "notes": {"method": variants.__doc__.strip()},
           **result, "per_round": {"probes": raw["probes"],
                                   "ms_per_token": {k: [1000.0 * s / max(n, 1) for s, n in v]
                                                    for k, v in raw["times"].items()}},
           "elapsed_s": time.perf_counter() - started}
    _write(out, args)
    return 0


def _fmt(value, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _write(out: dict, args) -> None:
    if args.json:
        print(f"\nJSON: {report.write_json(out, args.json)}")
    if args.markdown:
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(out))
        print(f"Markdown: {path}")


def verify_text(verdict: dict) -> str:
    v = verdict["verify_5_over_step"]
    if v is None:
        return "not measured (gamma_max < 4)"
    loop = verdict.get("verify_5_over_step_in_loop")
    return (f"{v:.2f}x a one-token step ({'<=' if verdict['verify_5_ok'] else '>'} 1.5x)"
            + (f" (in the real loop: {loop:.2f}x)" if loop is not None else ""))


def _beam_conflicts(args) -> None:
    """--num-beams replaces the gamma sweep: the options that do not apply are one-line errors."""
    if args.num_beams < 2:
        raise SpecdecError(f"--num-beams must be at least 2 for beam search (got {args.num_beams})",
                           "leave --num-beams out for greedy and sampling")
    for flag, given in (("--draft", args.draft), ("--plot", args.plot), ("--peers", args.peers),
                        ("--profile", args.profile), ("--peer-gamma", args.peer_gamma is not None),
                        ("--peer-python", args.peer_python), ("--filters", args.filters),
                        ("--top-k", args.top_k is not None), ("--top-p", args.top_p is not None),
                        ("--lenience", args.lenience != 1.0)):
        if given:
            raise SpecdecError(f"{flag} does not apply to --num-beams", f"run it without {flag}")
    if args.temperature is not None and any(t > 0 for t in args.temperature):
        raise SpecdecError("beam search is deterministic: --num-beams takes temperature 0 only",
                           "drop --temperature")


def _main_beam_shapes(args) -> int:
    """--shapes T:D --num-beams W: the per-call costs of beam search at real shapes (random weights, so no
    generation): the target's W x 1 step against R x (g+1) scoring runs for the --beam-rows R, and the draft's
    W x 1 step, as beam_costs.probe measures them on an --engine export."""
    import numpy as np

    from . import beam_costs, beams, shapes

    target, draft = shapes.parse_pair(args.shapes)
    gammas = [g for g in (args.gamma if args.gamma is not None else beams.DEFAULT_GAMMAS) if g > 0]
    export_dir, _ = shapes.ensure_export(target, draft, Path(args.workdir), max(gammas), args.max_length,
                                         args.keep_checkpoints, log=lambda m: print(m, file=sys.stderr))
    dec = _load(export_dir, args.provider, args.threads)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench --shapes {target}:{draft} --num-beams {args.num_beams}: per-call costs only (random "
          f"weights, official configurations; export {export_dir})")
    _print_machine(mach)
    rows = args.beam_rows or [args.num_beams * k for k in (1, 2, 3, 4)]
    census = {"target": [(r, g + 1) for g in gammas for r in rows]}
    ids = np.random.default_rng(0).integers(3, dec.vocab_size, size=args.source_length)
    past = 32 if args.past is None else args.past
    costs = beam_costs.probe(dec, ids, args.num_beams, gammas, census, past, args.probe_repeats, extra_rows=rows)
    print()
    print(beam_costs_text(costs))
    _write({"mode": "beam-shapes", "shapes": args.shapes, "machine": mach, "costs": costs}, args)
    return 0


def _main_beams(args) -> int:
    from . import beam_costs, beam_summary, beams, prompts as prompts_mod

    _beam_conflicts(args)
    if args.shapes:
        return _main_beam_shapes(args)
    gammas = [g for g in (args.gamma if args.gamma is not None else beams.DEFAULT_GAMMAS) if g > 0]
    args.max_new_tokens = 64 if args.max_new_tokens is None else args.max_new_tokens
    args.repeat = 5 if args.repeat is None else args.repeat
    if args.max_new_tokens < 1 or args.repeat < 1:
        raise SpecdecError("--max-new-tokens and --repeat must be at least 1")
    past = max(1, args.max_new_tokens // 2) if args.past is None else args.past
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    settings = beams.BeamSettings(args.num_beams, args.max_new_tokens, early, args.length_penalty,
                                  args.no_repeat_ngram_size, args.min_new_tokens)
    dec = _load(args.engine, args.provider, args.threads)
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
    print(f"specdec-bench --num-beams {args.num_beams}: {args.engine}")
    _print_machine(mach)
    print(f"prompts: {len(prompts)} from {origin} ({', '.join(f'{t} {n}' for t, n in tasks.items())}); "
          f"max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, configurations "
          f"{', '.join(c.label for c in configs)}; early_stopping {early}, length_penalty {args.length_penalty:g}, "
          f"no_repeat_ngram_size {args.no_repeat_ngram_size}, min_new_tokens {args.min_new_tokens}")

    spec = [c for c in configs if c.specdec]
    per_pass = len(prompts) * len(spec) + (len(prompts) if hf else 0)
    bar = _bar_factory(args.no_progress)(per_pass * (1 + args.repeat) + (args.repeat if hf else 0),
                                         "specdec-bench --num-beams")
    try:
        cells, equality, shapes, learned = beams.run_beams(dec, prompts, configs, settings, args.repeat, hf, bar)
    finally:
        bar.close()
    costs = beam_costs.probe(dec, prompts[0].ids, args.num_beams, gammas if has_draft else [], shapes, past,
                        args.probe_repeats)
    rows = beam_summary.summarize(cells, configs, equality, costs)
    exact = beam_summary.equality_summary(rows)
    auto_end = beams.estimates_snapshot(dec.beam_estimates)

    print()
    print(beam_costs_text(costs))
    print()
    print("beam search per task (ms/tok: wall time per output token of the best sequence, median over repeats, +-: "
          "half the min-max range; ms/req: per request; vs none / vs transformers: their wall time over this "
          "configuration's on the same prompts, median of per-repeat ratios (min-max); steps/call: beam steps per "
          "target run; spec: share of the rounds that were speculative, and beam steps per speculative round; "
          "time shares of target runs, draft runs (with the proposal's host work), encoders, host; = none: outputs "
          "equal to target-only beam search / compared)")
    print(table(*beam_lines(rows)))
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
        print(table(*beam_prediction_lines(predicted)))
    print()
    print(beams.ESTIMATES_NOTE)
    for line in beam_estimates_lines({"after warm-up": learned, "at the end": auto_end}):
        print(f"  {line}")
    print()
    bad = [f"{task}/{label} {e['mismatches']} of {e['compared']}" for task, by in exact.items()
           for label, e in by.items() if label != beams.TRANSFORMERS and e["mismatches"]]
    if bad:
        print(f"beam exactness: MISMATCH with none for {', '.join(bad)}")
    else:
        compared = sum(e["compared"] for by in exact.values() for label, e in by.items()
                       if label != beams.TRANSFORMERS)
        print(f"beam exactness: every specdec configuration gave none's sequences on every prompt of every pass "
              f"({compared} compared)")
    hf_agree = [f"{task} {by[beams.TRANSFORMERS]['equal']}/{by[beams.TRANSFORMERS]['compared']}"
                for task, by in exact.items() if beams.TRANSFORMERS in by]
    if hf_agree:
        print(f"transformers' beam search equals none's best sequence: {', '.join(hf_agree)}")

    mach["load_average_at_end"] = machine.load_average()
    out = {"mode": "beams", "machine": mach, "engine": _engine_info(dec),
           "settings": {**settings.as_dict(), "gammas": gammas if has_draft else [],
                        "configs": [c.as_dict() for c in configs], "repeats": args.repeat,
                        "prompts": len(prompts), "prompts_per_task": tasks, "prompts_origin": origin,
                        "probe_past": costs["past_length"], "threads": args.threads,
                        "transformers": {"status": hf_status, "checkpoint": checkpoint, "torch_threads": hf_threads}},
           "notes": report.BEAM_NOTES, "beam_costs": costs, "beam_results": rows, "beam_outputs_equal": exact,
           "auto_estimates": {"after_warmup": learned, "at_end": auto_end},
           "auto_estimates_note": beams.ESTIMATES_NOTE,
           "target_run_shapes_seen": _shape_counts(shapes.get("target", [])),
           "elapsed_s": time.perf_counter() - started}
    _write(out, args)
    return 0


def _shape_counts(shapes) -> list:
    """[{rows, tokens, runs}] of a shape census, most frequent first."""
    counts: dict = {}
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    return [{"rows": r, "tokens": n, "runs": k} for (r, n), k in sorted(counts.items(), key=lambda kv: -kv[1])]


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if args.dtypes is not None and args.num_beams != 1:
        raise SpecdecError("--dtypes does not apply to --num-beams", "run it without --num-beams")
    if args.num_beams != 1:
        return _main_beams(args)
    for flag, given in (("--early-stopping", args.early_stopping != "false"), ("--length-penalty",
                        args.length_penalty != 1.0), ("--no-repeat-ngram-size", args.no_repeat_ngram_size != 0),
                        ("--min-new-tokens", args.min_new_tokens != 0), ("--no-transformers", args.no_transformers)):
        if given:
            raise SpecdecError(f"{flag} belongs to beam search", "add --num-beams W (W >= 2)")
    if args.draft and args.shapes:
        raise SpecdecError("--draft compares draft sources on an --engine export", "drop --shapes or --draft")
    if (args.peer_python or args.peer_timeout is not None) and not args.peers and args.dtypes is None:
        raise SpecdecError("--peer-python and --peer-timeout add Optimum to the --peers comparison", "add --peers")
    if args.peer_timeout is not None and args.peer_timeout <= 0:
        raise SpecdecError(f"--peer-timeout must be positive (got {args.peer_timeout:g})",
                           "e.g. --peer-timeout 1800")
    if args.dtypes is not None:
        return _main_dtypes(args)
    if args.draft:
        return _main_drafts(args)
    return _main_shapes(args) if args.shapes else _main_engine(args)


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
