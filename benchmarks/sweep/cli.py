"""`specdec-bench sweep --export DIR`: latency, alpha, c and the speedup over gamma = 0 of every (temperature,
filter, gamma), interleaved on one export, against Theorem 3.8's prediction with the measured costs."""

from __future__ import annotations

import time
from pathlib import Path

from ..common import options, running as common

HELP = "gamma sweep on an export: latency, alpha, c and speedup per temperature, filter and gamma"

# the graphs' execution, left out of the host profile: cProfile books the C++ run under the builtin called just
# before it in the wrapper (onnxruntime >= 1.2x: is_webgpu_graph_capture_enabled, 0.1 us when timed on its own)
ORT_RUN = ("run_with_iobinding", "is_webgpu_graph_capture_enabled")


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


def profile_host(dec, prompts, gamma: int, max_new_tokens: int, out_path: str, base) -> dict:
    """Where the host time goes (Stats.host_s): cProfile over one pass at T=0, the Python functions by own time."""
    import cProfile
    import io
    import pstats

    def generate(ids):
        return dec.generate(input_ids=ids, params=base, max_new_tokens=max_new_tokens, draft="draft", gamma=gamma,
                            temperature=0.0)

    generate(prompts[0].ids)                  # warm
    prof = cProfile.Profile()
    prof.enable()
    stats = [generate(p.ids).stats for p in prompts]
    prof.disable()
    iterations = sum(s.target_calls for s in stats)
    per = max(iterations, 1)
    rows = sorted(({"function": f"{Path(file).name}:{line}({name})" if file != "~" else name,
                    "calls_per_iteration": nc / per, "own_ms_per_iteration": 1000.0 * tt / per}
                   for (file, line, name), (_, nc, tt, _, _) in pstats.Stats(prof).stats.items()
                   if not any(k in name for k in ORT_RUN)), key=lambda r: -r["own_ms_per_iteration"])
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(text.getvalue())
    return {"gamma": gamma, "iterations": iterations,
            "host_ms_per_iteration": 1000.0 * sum(s.host_s for s in stats) / per,
            "ort_runs": sum(s.ort_runs for s in stats), "listing": str(out_path),
            "note": "cProfile adds its own overhead to every Python call: read the ranking, not the absolute ms",
            "top": rows[:25]}


def settings(args, prompts, origin: str) -> dict:          # shared with drafts
    return {"temperatures": args.temperature, "max_new_tokens": args.max_new_tokens, "repeats": args.repeat,
            "prompts": len(prompts), "prompts_origin": origin, "probe_past": args.past, "threads": args.threads,
            "graph_capture": args.graph_capture,
            **common.filter_settings(args)}


def run(args) -> int:
    from ..common import prompts as prompts_mod, runs
    from . import measure as sweep, summary
    from .plots import plot
    from .tables import NOTES, sections

    common.export_checked(args)
    args.gamma = common.with_baseline(args.gamma)
    dec = common.load(args.engine, args.provider, args.threads, args.graph_capture)
    common.check_gammas(args, dec)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec)
    mach = common.begin(f"specdec-bench: {args.engine}" + (" (graph capture)" if args.graph_capture else ""),
                        dec.provider, args.threads)
    base = common.base_params(args)

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
    verdicts = {"measured_ge_0.9_prediction_at_T0": greedy_best["measured_over_predicted"] >= 0.9} \
        if greedy_best else {}
    best_gamma = greedy_best.get("measured_best_gamma")
    profile = profile_host(dec, prompts, best_gamma or max(args.gamma), args.max_new_tokens, args.profile, base) \
        if args.profile else None
    gamma = args.peer_gamma if args.peer_gamma is not None else (best_gamma or min(4, dec.gamma_max))
    out = {"mode": "engine", "machine": mach, "engine": common.engine_info(dec),
           "settings": {"gammas": args.gamma, **settings(args, prompts, origin)}, "notes": NOTES,
           "cost_probe": probe, "results": rows, "best": best, "filter_cost": summary.filter_cost(cells),
           "greedy_agreement": summary.greedy_agreement(outputs), "acceptance": verdicts, "profile": profile,
           "peers": common.time_peers(args, dec, prompts, gamma, default=False) if args.peers else None,
           "elapsed_s": time.perf_counter() - started}
    common.report(out, args, sections)
    if args.plot:
        title = (f"{Path(args.engine).name}: {mach['cpu_model']}, {mach['cpu_cores']} cores, {dec.provider}; "
                 f"{len(prompts)} prompts x {args.repeat}, {args.max_new_tokens} new tokens")
        print(f"plot: {plot(rows, args.plot, title)}")
    return 0
