"""`specdec-bench sweep --export DIR`: latency, alpha, c and the speedup over gamma = 0 of every (temperature,
filter, gamma), interleaved on one export (measure.py), against Theorem 3.8's prediction with the measured costs."""

from __future__ import annotations

import time
from pathlib import Path

from ..common import machine, options, running as common

HELP = "gamma sweep on an export: latency, alpha, c and speedup per temperature, filter and gamma"


def add_parser(commands) -> None:
    p = options.command(commands, "sweep", HELP, run, options.on_export(True, "repeats of the whole sweep", (
        "specdec's speculative path at --peer-gamma",
        "specdec's speculative path and the assistants (default: the best measured gamma at T=0)")))
    p.add_argument("--gamma", type=options.int_list, default=[0, 1, 2, 3, 4, 6, 8], metavar="G,...",
                   help="draft tokens per target call of the draft model; 0 (the baseline) is always added (default "
                        "0,1,2,3,4,6,8)")
    p.add_argument("--profile", metavar="OUT.txt",
                   help="cProfile one pass over the prompts at the best measured gamma (T=0) and write the "
                        "functions where the host time goes")


def _setting_name(entry: dict, several: bool) -> str:
    """`T=1` of a `best` entry, with its filter when the sweep has several (`T=1, filter 50:0.9`)."""
    from ..common.runs import filter_label
    from .summary import row_filter

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


def _print_best(b: dict, several: bool) -> None:
    from ..common.tables import fmt

    print(f"\n{_setting_name(b, several)}: best measured gamma {b['measured_best_gamma']}: "
          f"{b['best_ms_per_token']:.3f} ms/token "
          f"vs {b['baseline_ms_per_token']:.3f} at gamma=0, speedup "
          f"{b['measured_speedup']:.2f}x vs Theorem 3.8 {b['predicted_speedup']:.2f}x "
          f"(ratio {b['measured_over_predicted']:.2f}; with measured costs {b['predicted_with_costs']:.2f}x); "
          f"Theorem 3.8 favours gamma {b['theorem_best_gamma']} ({b['theorem_best_speedup']:.2f}x) at "
          f"alpha {b['alpha_median']:.2f}, c {b['c_median']:.3f}")
    gp = b["gap"]
    print(f"  per iteration: Theorem 3.8 charges {gp['theorem_iteration_ms']:.3f} ms (gamma c + 1 steps of "
          f"{gp['target_step_ms']:.3f}); measured {gp['measured_iteration_ms']:.3f} ms = draft runs "
          f"{gp['draft_ms']:.3f} + target run {gp['target_ms']:.3f} "
          f"({gp['target_extra_over_one_step_ms']:+.3f} over one step) + host {gp['host_ms']:.3f} + encoders "
          f"{gp['encoders_ms']:.3f}; of the runs, sampling heads ~{fmt(gp['head_ms_estimated'], '.3f')} (estimated); "
          f"{gp['ort_runs_per_iteration']:.2f} ORT runs; tokens/call {gp['tokens_per_call']:.2f} (expected "
          f"from alpha {gp['expected_tokens_per_call']:.2f}); the baseline's step costs "
          f"{gp['baseline_iteration_ms']:.3f} ms")


def _profile(args, dec, prompts, gamma: int, base) -> dict:
    from .profiling import profile_host

    profile = profile_host(dec, prompts, gamma, args.max_new_tokens, args.profile, base=base)
    print(f"\nhost profile (gamma {gamma}, T=0, {profile['iterations']} iterations): "
          f"{profile['host_ms_per_iteration']:.3f} ms host per iteration; top functions by own time "
          f"outside ONNX Runtime runs:")
    for f in profile["top"][:8]:
        print(f"  {f['own_ms_per_iteration']:.4f} ms/iter  {f['calls_per_iteration']:.1f} calls/iter  "
              f"{f['function']}")
    print(f"full listing: {args.profile}")
    return profile


def run(args) -> int:
    from ..common import prompts as prompts_mod, runs
    from ..common.report import SAMP_HOST_NOTE, sweep_filters_text
    from ..common.tables import lines, table
    from . import measure as sweep, summary
    from .plots import plot
    from .tables import NOTES, SWEEP, TIME, filter_cost_lines, markdown_sections, summary_lines

    common.export_checked(args)
    args.gamma = common.with_baseline(args.gamma)
    dec = common.load(args.engine, args.provider, args.threads)
    common.check_gammas(args, dec)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec)
    mach = machine.describe(dec.provider, args.threads)
    print(f"specdec-bench: {args.engine}")
    common.print_machine(mach)
    print(f"prompts: {len(prompts)} from {origin}; max_new_tokens {args.max_new_tokens}, repeats {args.repeat}, "
          f"gamma {','.join(map(str, args.gamma))}, temperature {','.join(f'{t:g}' for t in args.temperature)}; "
          f"{sweep_filters_text(common.filter_settings(args))}")
    base = common.base_params(args)
    several = len(args.filters) > 1

    started = time.perf_counter()
    probe = common.probe(dec, prompts, args, args.temperature, max(args.gamma))

    total = (args.repeat * len(prompts) + 2) * len(args.temperature) * len(args.filters) * len(args.gamma)
    with common.progress(args, total, "specdec-bench") as bar:
        cells, outputs, acceptance = sweep.run_sweep(dec, prompts, args.gamma, args.temperature,
                                                     args.max_new_tokens, args.repeat, bar, base=base,
                                                     filters=args.filters)
    rows = summary.summarize(cells, dec.gamma_max, acceptance, probe, base)
    best = summary.best_by_filter_and_temperature(rows, dec.gamma_max)
    greedy_best = best.get(runs.filter_key(0.0, args.filters[0]), {})
    agreement = summary.greedy_agreement(outputs)
    filter_cost = summary.filter_cost(cells)
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
    print(table(*lines(SWEEP, rows)))
    print()
    print("where the time goes (ms per generated token; the sampling heads run inside the draft and target runs, "
          "their share estimated from the cost probe)")
    print(table(*lines(TIME, rows)))
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
        _print_best(b, several)
    if agreement:
        _print_agreement(agreement, args.lenience, several)

    profile = None
    if args.profile:
        profile = _profile(args, dec, prompts, greedy_best.get("measured_best_gamma") or max(args.gamma), base)

    peers = None
    if args.peers:
        gamma = args.peer_gamma if args.peer_gamma is not None else \
            (greedy_best.get("measured_best_gamma") or min(4, dec.gamma_max))
        peers = common.time_peers(args, dec, prompts, gamma, default=False, what="")

    elapsed = time.perf_counter() - started
    out = {"mode": "engine", "machine": mach, "engine": common.engine_info(dec),
           "settings": {"gammas": args.gamma, "temperatures": args.temperature,
                        "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
                        "prompts": len(prompts), "prompts_origin": origin, "probe_past": args.past,
                        "threads": args.threads, **common.filter_settings(args)},
           "notes": NOTES,
           "cost_probe": probe, "results": rows, "best": best, "filter_cost": filter_cost,
           "greedy_agreement": agreement,
           "acceptance": verdicts, "profile": profile, "peers": peers, "elapsed_s": elapsed}
    common.finish(out, args, markdown_sections)
    if args.plot:
        title = (f"{Path(args.engine).name}: {mach['cpu_model']}, {mach['cpu_cores']} cores, {dec.provider}; "
                 f"{len(prompts)} prompts x {args.repeat}, {args.max_new_tokens} new tokens")
        print(f"plot: {plot(rows, args.plot, title)}")
    return 0
