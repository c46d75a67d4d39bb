"""`specdec-bench drafts --export DIR --draft none draft lookup lookup,draft auto`: which source of guesses pays, per
task of the prompts x temperature x draft configuration, interleaved on one export. On a Whisper export the prompts
are audio clips: --prompts FILE.jsonl with {"audio": "clips/0001.wav"} lines (16 kHz WAV files, paths relative to the
JSONL file; optional "reference", "task", "language", default en)."""

from __future__ import annotations

import time

from specdec.runtime.core.errors import SpecdecError

from ..common import options, running as common
from ..common.tables import Table, fmt, snapshot_lines

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


def run(args) -> int:
    from ..common import prompts as prompts_mod
    from ..sweep.cli import settings
    from . import measure as drafts

    common.export_checked(args)
    common.one_filter(args, "drafts")
    configs = drafts.parse_configs(args.draft)
    base = common.base_params(args)
    dec = common.load(args.engine, args.provider, args.threads, args.graph_capture)
    if args.peers and dec.manifest.speech is not None:
        raise SpecdecError("--peers times T5 engines (transformers, CTranslate2, Optimum), and this export is a "
                           "Whisper model", "drop --peers")
    drafts.check_configs(dec, configs, base)
    prompts, origin = prompts_mod.load(args.prompts, args.num_prompts, dec, every_task=True, audio=True)
    mach = common.begin(f"specdec-bench: {args.engine}" + (" (graph capture)" if args.graph_capture else ""),
                        dec.provider, args.threads)

    started = time.perf_counter()
    probe = common.probe(dec, prompts, args, args.temperature, dec.gamma_max)
    runs = len(args.temperature) * (1 + args.repeat) * len(prompts) * len(configs)
    with common.progress(args, runs, "specdec-bench drafts") as bar:
        cells, outputs, learned = drafts.run_drafts(dec, prompts, configs, args.temperature, args.max_new_tokens,
                                                    args.repeat, bar, base=base)
    rows = drafts.summarize(cells, configs, probe)
    gamma = args.peer_gamma if args.peer_gamma is not None else min(4, dec.gamma_max)
    out = {"mode": "drafts", "machine": mach, "engine": common.engine_info(dec),
           "settings": {"drafts": [c.as_dict() for c in configs], **settings(args, prompts, origin),
                        "audio_seconds": prompts_mod.audio_seconds(prompts),
                        "prompts_per_task": drafts.tasks_of(prompts)},
           "notes": NOTES, "cost_probe": probe, "draft_results": rows, "draft_best": drafts.best_by_task(rows),
           "draft_greedy_agreement": drafts.greedy_agreement(outputs),
           "auto_estimates": {str(t): e for t, e in learned.items()}, "auto_estimates_note": drafts.ESTIMATES_NOTE,
           # after the drafts: the peers' loads and exports overlap none of them
           "peers": common.time_peers(args, dec, prompts, gamma, default=True) if args.peers else None,
           "elapsed_s": time.perf_counter() - started}
    common.report(out, args, sections)
    return 0


def _sources_text(sources: dict) -> str:
    """`lookup a=0.80 62%, none 38%, lookup> a=0.22`: the target-level sources by tokens, then lower levels."""
    top = sorted(((s["tokens"], n) for n, s in sources.items() if not n.endswith(">")), reverse=True)
    return ", ".join([n + ("" if n == "none" or sources[n]["alpha"] is None else f" a={sources[n]['alpha']:.2f}")
                      + f" {fmt(100 * (sources[n]['share'] or 0.0), '.0f')}%" for _, n in top]
                     + [f"{n} a={fmt(sources[n]['alpha'])}" for n in sorted(n for n in sources if n.endswith(">"))])


def _switch(sw, when: str) -> str:
    if not sw or "auto_rounds_lead" not in sw:
        return ""
    ms = ", ".join(f"{mode} {sw[key]:.3f} ms/token" for mode, key in
                   (("auto's rounds", "auto_ms_per_token"), ("plain steps", "plain_ms_per_token"))
                   if sw.get(key) is not None)
    lead = {True: "auto's rounds lead", False: "plain steps lead", None: "still measuring"}[sw["auto_rounds_lead"]]
    return f"; switch{when}: {ms or 'not measured'}, {lead} (the other runs {sw['slower_share']:.0%} of the rounds)"


def _estimate_line(when: str, e: dict) -> str:
    def joined(d, spec):
        return ", ".join(f"{k} {v:{spec}}" for k, v in d.items()) or "-"
    return (f"{when} ({e['rounds']} rounds): alpha {joined(e['alpha'], '.2f')}; cost per guess ms "
            f"{joined(e['cost_per_guess_ms'], '.3f')}; target run ms by guesses "
            f"{', '.join(f'{k}: {v:.3f}' for k, v in e['target_run_ms'].items()) or '-'}; host ms per round "
            f"{e['host_ms_per_round']:.3f}" + _switch(e.get("switch"), "")
            + _switch(e.get("switch_at_end"), " after the timed repeats"))


def _explored(e: dict | None) -> str:
    """`auto explored 3 choice rounds + 40 switch rounds of 320 rounds (target calls), 250 of them chosen by auto`"""
    if not e:
        return ""
    return (f"; auto explored {fmt(e['choice_rounds'], 'd', 'n/a')} choice rounds + "
            f"{fmt(e['switch_rounds'], 'd', 'n/a')} switch rounds of {e['rounds']} rounds (target calls), "
            f"{fmt(e['auto_rounds'], 'd', 'n/a')} of them chosen by auto")


def _best_line(task: str, t: str, b: dict) -> str:
    """`best ...; auto 1.31x vs best fixed draft:3 1.37x: 0.96, decode-only 1.35x vs 1.40x: 0.96; auto explored ...`"""
    auto, fixed = b.get("auto_speedup"), b.get("best_fixed")
    line = (f"{task}, T={float(t):g}: best {b['best']} {b['best_speedup']:.2f}x, decode-only "
            f"{b['best_decode_speedup']:.2f}x ({b['best_ms_per_token']:.3f} vs {b['baseline_ms_per_token']:.3f} "
            f"ms/token for none)")
    if auto is None:
        return line + (f"; best fixed {fixed} {b['best_fixed_speedup']:.2f}x" if fixed is not None else "")
    if fixed is None:
        return line + f"; auto {auto:.2f}x, decode-only {b['auto_decode_speedup']:.2f}x" + _explored(
            b.get("auto_explore"))
    return (line + f"; auto {auto:.2f}x vs best fixed {fixed} {b['best_fixed_speedup']:.2f}x: "
            f"{fmt(b['auto_over_best_fixed'])}, decode-only {b['auto_decode_speedup']:.2f}x vs "
            f"{b['best_fixed_decode_speedup']:.2f}x: {fmt(b['auto_decode_over_best_fixed'])}"
            + _explored(b.get("auto_explore")))


def _config(r: dict) -> list[str]:
    return [r["task"], fmt(r["temperature"], "g"), r["draft"]]


def _draft_row(r: dict) -> list[str]:
    ms, sp = r["ms_per_token"], r.get("speedup")
    return _config(r) + [fmt(ms["median"], ".3f"), fmt((ms["max"] - ms["min"]) / 2, ".3f"),
                         fmt(sp and sp["median"]), f"{sp['min']:.2f}-{sp['max']:.2f}" if sp else "-",
                         fmt(r["decode_ms_per_token"]["median"], ".3f"),
                         fmt(r.get("decode_speedup") and r["decode_speedup"]["median"]),
                         fmt(r["tokens_per_target_call"]), fmt(r["draft_calls_per_token"]),
                         _sources_text(r["sources"])]


def _prediction_row(r: dict) -> list[str]:
    p = r["prediction"]
    return _config(r) + [p["source"], fmt(p["alpha"]), fmt(p["mean_gamma"]), fmt(p["c"], ".3f"),
                         fmt(p["verify_cost"]), fmt(p["expected_tokens"]), fmt(p["tokens_per_round"]),
                         fmt(r["predicted_speedup"]), fmt(r.get("speedup", {}).get("median")),
                         fmt(r.get("measured_over_predicted")), fmt(r["predicted_mixture"]),
                         fmt(r.get("measured_over_mixture"))]


def sections(report: dict) -> list:
    from ..common.report import peers_parts, probe_parts
    from ..sweep.tables import agreement_text, settings_text

    s, rows = report["settings"], report["draft_results"]
    n, seconds = s["prompts"], s.get("audio_seconds")
    what = f"{n} prompt{'s' * (n != 1)}" if seconds is None else \
        f"{n} audio clip{'s' * (n != 1)}, {seconds:.1f} s in all"
    tasks = ", ".join(f"{task} {k}" for task, k in s["prompts_per_task"].items())
    parts = [settings_text(s, f"draft {', '.join(d['label'] for d in s['drafts'])} interleaved",
                           what, f" ({tasks})"), *probe_parts(report["cost_probe"]),
             Table("draft sources per task (ms/tok: median over repeats, +-: half the min-max range; speedup: median "
                   "of per-repeat ratios to none of the same task and T, min-max over repeats; decode ms/tok, decode "
                   "speedup: the same without the encoder runs (Stats.encoder_s), the decoder's own; tok/call: "
                   "tokens per target call (a Whisper prompt's prefill run counts, so none is just below 1 there); "
                   "sources: per source alpha = accepted/(accepted + rejections) per guess "
                   "and share of the tokens, lookup> = the lookup as the draft model checked it in lookup,draft)",
                   ("task", "T", "draft", "ms/tok", "+-", "speedup", "min-max", "decode ms/tok", "decode speedup",
                    "tok/call", "draft runs/tok", "sources: alpha, share of tokens"), [_draft_row(r) for r in rows]),
             Table("Theorem 3.8 for the dominant source with measured costs: thm3.8 = E(alpha, g)/(g c + T(g)/T(0)), "
                   "g: mean guesses per round, T(g)/T(0): the probe's target run over g+1 tokens over one token, c: "
                   "the probe's draft step / target step (0 for lookup; x draft runs per guess for lookup,draft); "
                   "tok/round: the source's measured tokens per round, against E[tok]; mixture: the same over every "
                   "kind of round the configuration had (target-only rounds included); meas/...: measured speedup "
                   "over the prediction", ("task", "T", "draft", "source", "alpha", "mean g", "c", "T(g)/T(0)",
                                           "E[tok]", "tok/round", "thm3.8", "speedup", "meas/thm", "mixture",
                                           "meas/mix"), [_prediction_row(r) for r in rows])]
    learned = snapshot_lines({f"T={float(t):g}": e for t, e in (report.get("auto_estimates") or {}).items()},
                             _estimate_line)
    parts.append(f"{report['auto_estimates_note']} What auto had learned at the end of each warm-up pass:\n"
                 + "\n".join(f"- {line}" for line in learned))
    best = [_best_line(task, t, b) for task, by_t in (report.get("draft_best") or {}).items() for t, b in by_t.items()]
    if best:
        parts.append("best per task and temperature (best fixed: the best of none and the NAME:G configurations; "
                     "auto / best fixed: the ratio of their median speedups; auto explored: over auto's timed runs, "
                     "rounds its choice explored and rounds its switch ran the mode that measured slower):\n"
                     + "\n".join(f"- {line}" for line in best))
    agreement = {f"{task}/{label}": a for task, by in report["draft_greedy_agreement"].items()
                 for label, a in by.items()}
    if agreement:
        parts.append(agreement_text(agreement, s["lenience"], "none", "every draft configuration gives none's tokens "
                                                                      "on every prompt of every task"))
    return parts + peers_parts(report, ", all tasks; specdec default = draft and gamma 'auto'")


NOTES = {
    "draft_results": "one row per (task, temperature, draft configuration); draft: the label as given to --draft "
                     "(NAME or NAME:G), draft_name: the runtime's name, gamma: an int or 'auto'",
    "speedup": "per repeat: none's ms/token over this configuration's, same task and temperature (interleaved in "
               "every repeat); spread over repeats",
    "sources": "Stats.sources summed over the timed runs: rounds, proposed, accepted, rejections, tokens; alpha = "
               "accepted / (accepted + rejections) per guess; share = tokens / all tokens the target emitted; "
               "'lookup>' is the lookup as the draft model checked it inside lookup,draft (share null)",
    "prediction": "for the dominant source s (the proposing source with the most tokens): E(alpha_s, g) / (g c_s + "
                  "T(g)/T(0)), g = mean guesses per round, T(g)/T(0) = cost_probe verify_ratio at g+1 tokens "
                  "(interpolated), c_s = cost_probe c for the draft model, 0 for lookup, c x (proposed - lookup> "
                  "accepted) / proposed for lookup,draft; tokens_per_round: the source's measured tokens per round, "
                  "what expected_tokens predicts",
    "predicted_mixture": "the same expectation over every kind of round of the configuration (target-only rounds: "
                         "1 token for 1 step): sum rounds E / sum rounds (g c + T(g)/T(0))",
    "draft_best": "per task and str(temperature): best, the configuration with the highest median speedup; "
                  "best_fixed, the same among the fixed ones (none and NAME:G: not auto, not NAME without :G); "
                  "auto_over_best_fixed (auto_decode_over_best_fixed): auto's median (decode-only) speedup over the "
                  "best fixed one's; auto_explore: over auto's timed runs, choice_rounds (AutoDraft.explored: rounds "
                  "whose source or gamma was chosen to explore), switch_rounds (Switch.explored: rounds in the mode "
                  "that measured slower), auto_rounds (Estimates.round: rounds auto chose), each null where the "
                  "runtime keeps no such count, and rounds (target calls)",
    "auto_estimates": "what auto learned (runtime/decoding/sources/auto.py), snapshot after each temperature's warm-up pass",
}
