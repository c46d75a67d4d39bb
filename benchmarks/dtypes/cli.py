"""`specdec-bench dtypes T:D --dtypes fp32,int8-draft,int8,...`: the weight variants of one pair of random-weight
real-shape checkpoints, exported side by side from the same kept checkpoints and measured in one interleaved run,
with CTranslate2 greedy (compute_type int8 and float32) on the same target checkpoint.

Variants (export directories under WORK_DIR/shapes/T_D-gG-lL/):

    fp32          export/               both models fp32 (what `specdec-bench shapes` measures)
    int8-draft    export-int8-draft/    specdec-export --draft-dtype int8: int8 draft, fp32 target
    int8-wo-draft export-int8-wo-draft/ specdec-export --draft-dtype int8-wo: weight-only int8 draft, fp32 target
    int8          export-int8/          specdec-export --dtype int8: both int8 (dynamic quantization)
    int8-wo       export-int8-wo/       benchmark-made: the fp32 export's graphs through onnxruntime's weight-only
                                        MatMulNBitsQuantizer (8 bits, symmetric, accuracy_level 4: int8 compute)
    int8-wo-fp32  export-int8-wo-fp32/  the same with accuracy_level 0 (fp32 compute on dequantized weights)

The checkpoints are built once (seeds 1 and 2) and kept with their sha256; a cached variant made from other weights
or by other quantization code is exported again. Every round runs each variant's cost probe, then every engine's
block of greedy generations (each variant at gamma 0 and at the speculative gamma, then CTranslate2), in rotating
order; costs are the median over rounds of each round's median, ratios between variants per round. With random
weights alpha is whatever two random models agree on: a trained pair's speedup is Theorem 3.8's from the measured c.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from ..common import options, running as common
from ..common.runs import rotated
from ..common.tables import Table
from . import variants
from .variants import WO_ACCURACY


HELP = "int8 and weight-only variants of real-shape models against fp32 and CTranslate2, one interleaved run"
CT2_TYPES = ("int8", "float32")
GOALS = {"int8_target_step_speedup": 1.5, "int8_draft_c": 0.08, "specdec_int8_over_ct2_int8": 1.0}
ALPHA = 0.7                                   # the middle of the paper's 0.6-0.8, for the Theorem 3.8 column
LOOP_STATS = ("target_s", "draft_s", "encoder_s", "target_calls", "draft_calls", "proposed", "accepted",
              "new_tokens")


def add_parser(commands) -> None:
    p = options.command(commands, "dtypes", HELP, run, [
        options.random_prompts(),
        options.run(max_new_tokens=32, repeat=3, repeat_help="rounds", past="64"),
        options.output(),
        options.export_shapes(keep=False)])
    options.pair(p)
    p.add_argument("--dtypes", required=True, metavar="fp32,int8-draft,int8-wo-draft,int8,int8-wo,int8-wo-fp32",
                   help="the variants to measure (listed above; fp32 always, the reference; int8-wo and "
                        "int8-wo-fp32 need onnx-ir): per variant target step, draft step, c, verify ratio, target-only "
                        "and speculative ms/token, with CTranslate2 greedy at compute_type int8 and float32 on the "
                        "same target checkpoint when ctranslate2 is installed")
    p.add_argument("--gamma", type=options.int_list, default=[0, 4], metavar="0,G",
                   help="0 and the one speculative gamma (at most the exports' gamma_max; default 0,4)")


def _log(message: str) -> None:          # sys.stderr as it is at the call
    print(message, file=sys.stderr)


def run(args) -> int:
    from ..common import peers as peer_engines, prompts as prompts_mod
    from ..shapes import measure as shapes

    if len([g for g in args.gamma if g > 0]) > 1:
        raise SpecdecError(f"dtypes measures one speculative gamma (got --gamma {','.join(map(str, args.gamma))})",
                           "e.g. --gamma 0,4")
    names = variants.parse(args.dtypes)
    common.runs_checked(args, past=64)
    args.gamma = common.with_baseline(args.gamma)
    target, draft = shapes.parse_pair(args.pair)
    common.needs_torch("dtypes")
    dirs, infos, ckpts = variants.ensure_variants(target, draft, Path(args.work_dir), args.gamma_max,
                                                   args.max_length, names, log=_log)
    decs = {n: common.load(d, args.provider, args.threads) for n, d in dirs.items()}
    gamma = max(g for g in args.gamma if g <= min(d.gamma_max for d in decs.values()))
    first = decs["fp32"]
    threads = args.threads or os.cpu_count() or 1
    eos = prompts_mod.special_id(first, "eos_token_id")
    ct2, ct2_status = peer_engines.ct2_engines(ckpts["target"]["path"], Path(args.work_dir), threads,
                                               first.tokenizer, eos, _log, CT2_TYPES)
    mach = common.begin("\n".join([f"specdec-bench dtypes {target}:{draft} --dtypes {','.join(names)}: exports"]
                                   + [f"  {n}: {d}" for n, d in dirs.items()]), first.provider, args.threads)
    prompts = prompts_mod.random_prompts(first.vocabulary.tokenizer_size, args.num_prompts if args.num_prompts > 0
                                         else 4, length=args.source_length, eos_id=eos)
    prompts = prompts_mod.tokenize(prompts, first.tokenizer, first.max_length)
    started = time.perf_counter()
    engines = [_Spec(v, d, g) for v, d in decs.items() for g in dict.fromkeys((0, gamma))] + list(ct2.values())
    with common.progress(args, 1 + args.repeat * (len(decs) + len(engines)), "specdec-bench dtypes") as bar:
        raw = measure(decs, engines, prompts, gamma, args, bar)
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
                                        "accuracy_level": {n: WO_ACCURACY[n] for n in names if n in WO_ACCURACY}}},
           "notes": {"method": __doc__.strip()},
           **summarize(raw, {n: variants.export_weights(d) for n, d in dirs.items()}),
           "per_round": {"probes": raw["probes"], "ms_per_token": raw["ms_per_token"]},
           "elapsed_s": time.perf_counter() - started}
    common.report(out, args, sections)
    return 0


class _Spec:
    """specdec greedy at one gamma on one variant's decoder; sums the timed runs' Stats."""

    def __init__(self, variant: str, dec, gamma: int):
        self.dec, self.gamma, self.name = dec, gamma, f"{variant} g={gamma}"
        self.parts = {k: 0 for k in LOOP_STATS}

    def run(self, ids, max_new_tokens, record: bool = False):
        res = self.dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft="draft", gamma=self.gamma,
                                temperature=0.0)
        for key in self.parts if record else ():
            self.parts[key] += getattr(res.stats, key)
        return list(res.token_ids)

    def summary(self) -> dict:
        p = self.parts
        calls = max(p["target_calls"], 1)
        return {"tokens_per_target_call": p["new_tokens"] / calls,
                "accepted_over_proposed": p["accepted"] / p["proposed"] if p["proposed"] else None,
                "target_ms_per_call": 1000.0 * p["target_s"] / calls,
                "draft_ms_per_call": 1000.0 * p["draft_s"] / p["draft_calls"] if p["draft_calls"] else None, **p}


def measure(decs: dict, engines: list, prompts, gamma: int, args, bar) -> dict:
    """Every engine's greedy tokens (correctness, warm-up), then per round the cost probes and the timed blocks."""
    from ..common import costs

    per_round = max(1, -(-args.probe_repeats // args.repeat))
    counts = range(1, min(d.gamma_max for d in decs.values()) + 2)
    probes, times = {v: [] for v in decs}, {e.name: [] for e in engines}
    outputs = {e.name: [e.run(p.ids, args.max_new_tokens) for p in prompts] for e in engines}
    bar.update(1)
    for r in range(args.repeat):
        for v in rotated(list(decs), r):
            p = costs.probe(decs[v], prompts[0].ids, args.past, repeats=per_round, warmup=2, counts=counts,
                            threads=args.threads, head_temperatures=(), head_guesses=[0])
            probes[v].append({k: p[k] for k in ("target_step_ms", "draft_step_ms", "verify_ms", "past_length")})
            bar.update(1)
        for e in rotated(engines, r):
            e.run(prompts[0].ids, args.max_new_tokens)          # unmeasured: wakes this engine's threads
            timed = functools.partial(e.run, record=True) if isinstance(e, _Spec) else e.run
            started = time.perf_counter()
            tokens = sum(len(timed(p.ids, args.max_new_tokens)) for p in prompts)
            times[e.name].append(1000.0 * (time.perf_counter() - started) / max(tokens, 1))
            bar.update(1)
    return {"probes": probes, "ms_per_token": times, "outputs": outputs, "engines": engines, "gamma": gamma,
            "probe_repeats_per_round": per_round}


def _spread(values) -> dict | None:
    values = [v for v in values if v is not None]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)} \
        if values else None


def _same(outputs, others) -> int:
    return sum(a == b for a, b in zip(outputs, others))


def _ratios(numerators, denominators) -> dict | None:
    return _spread([a / b for a, b in zip(numerators, denominators)])


def summarize(raw: dict, weights: dict) -> dict:
    from ..common import theory

    probes, ms_tok, outputs, gamma = raw["probes"], raw["ms_per_token"], raw["outputs"], raw["gamma"]
    ref = outputs["fp32 g=0"]
    loops = {e.name: e.summary() for e in raw["engines"] if isinstance(e, _Spec)}
    variants = {}
    for v, rows in probes.items():
        c = [r["draft_step_ms"] / r["target_step_ms"] for r in rows]
        verify = {k: statistics.median([r["verify_ms"][k] / r["target_step_ms"] for r in rows])
                  for k in rows[0]["verify_ms"]}
        g0, gs = f"{v} g=0", f"{v} g={gamma}"
        c_med, gm = statistics.median(c), max(int(k) for k in verify) - 1
        best_g, best_s = theory.best_gamma(ALPHA, c_med, gm)
        with_costs = {g: theory.speedup_with_costs(ALPHA, g, c_med, verify[str(g + 1)]) for g in range(1, gm + 1)}
        g_cost = max(with_costs, key=with_costs.get)
        variants[v] = {
            "weights": {"target": weights[v]["target"], "draft": weights[v]["draft"]},
            "target_step_ms": _spread([r["target_step_ms"] for r in rows]),
            "draft_step_ms": _spread([r["draft_step_ms"] for r in rows]), "c": _spread(c), "verify_ratio": verify,
            "target_step_speedup_vs_fp32": _ratios([f["target_step_ms"] for f in probes["fp32"]],
                                                   [r["target_step_ms"] for r in rows]),
            "target_only_ms_per_token": _spread(ms_tok[g0]),
            "speculative_ms_per_token": _spread(ms_tok[gs]) if gamma else None,
            "target_only_vs_fp32": _ratios(ms_tok["fp32 g=0"], ms_tok[g0]),
            "theorem_3_8": {"alpha": ALPHA, "best_gamma": best_g, "speedup": best_s,
                            "with_verify_cost_best_gamma": g_cost, "with_verify_cost": with_costs[g_cost]},
            "same_tokens_as_fp32_target_only": {"gamma0": _same(outputs[g0], ref),
                                                "speculative": _same(outputs[gs], ref) if gamma else None,
                                                "prompts": len(ref)},
            "speculative_equals_own_target_only": _same(outputs[gs], outputs[g0]) if gamma else None,
            "target_only_loop": loops[g0], "speculative_loop": loops[gs] if gamma else None}
    ct2 = {}
    for e in raw["engines"]:
        if not isinstance(e, _Spec):
            own = {"int8": "int8 g=0", "float32": "fp32 g=0"}.get(e.compute_type)
            ct2[e.compute_type] = {
                "name": e.name, "ms_per_token": _spread(ms_tok[e.name]),
                "same_tokens_as_fp32_target_only": _same(outputs[e.name], ref),
                "same_tokens_as_own_variant": _same(outputs[e.name], outputs[own]) if own in outputs else None,
                "prompts": len(ref),
                **{f"ratio_{v}_target_only_over_this": _ratios(ms_tok[f"{v} g=0"], ms_tok[e.name]) for v in probes}}
    return {"variants": variants, "ct2": ct2, "verdicts": verdicts(variants, ct2), "rounds": len(probes["fp32"])}


def verdicts(variants: dict, ct2: dict) -> dict:
    """The int8 results against GOALS, and the weight-only variants' target step against dynamic int8's."""
    out = {}
    if "int8" in variants:
        s = variants["int8"]["target_step_speedup_vs_fp32"]["median"]
        out["int8_target_step_speedup"] = {"value": s, "goal": f">= {GOALS['int8_target_step_speedup']}",
                                           "met": s >= GOALS["int8_target_step_speedup"]}
    for name, key in (("int8-draft", "int8_draft_c"), ("int8-wo-draft", "int8_wo_draft_c")):
        if name in variants:
            c = variants[name]["c"]["median"]
            out[key] = {"value": c, "goal": f"<= {GOALS['int8_draft_c']}", "met": c <= GOALS["int8_draft_c"],
                        "fp32_c": variants["fp32"]["c"]["median"], "variant": name}
    if "int8" in variants and "int8" in ct2:
        r = ct2["int8"]["ratio_int8_target_only_over_this"]["median"]
        out["specdec_int8_over_ct2_int8"] = {"value": r, "goal": "<= 1.0 (specdec at most equal)",
                                             "met": r <= GOALS["specdec_int8_over_ct2_int8"],
                                             "specdec_ms_per_token": variants["int8"]["target_only_ms_per_token"]
                                             ["median"], "ct2_ms_per_token": ct2["int8"]["ms_per_token"]["median"]}
    for name in WO_ACCURACY:
        if name in variants and "int8" in variants:
            wo, dyn = variants[name]["target_step_ms"]["median"], variants["int8"]["target_step_ms"]["median"]
            out[f"{name}_vs_dynamic_target_step"] = {
                "variant": name, "accuracy_level": WO_ACCURACY[name], "dynamic_ms": dyn, "weight_only_ms": wo,
                "faster": "dynamic" if dyn <= wo else "weight-only", "weight_only_over_dynamic": wo / dyn}
    return out


def _ms(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})" if s["n"] > 1 else f"{s['median']:.2f}"


def _met(e: dict) -> str:
    return "met" if e["met"] else "MISSED"


def sections(report: dict) -> list:
    s, ck, v = report["settings"], report["checkpoints"], report["verdicts"]
    gamma = s["gamma"]
    rows = []
    for name, r in report["variants"].items():
        same, v5, loop = r["same_tokens_as_fp32_target_only"], r["verify_ratio"].get("5"), r["speculative_loop"]
        rows.append([name, f"{r['weights']['target']}/{r['weights']['draft']}", _ms(r["target_step_ms"]),
                     f"{r['target_step_speedup_vs_fp32']['median']:.2f}×", _ms(r["draft_step_ms"]),
                     f"{r['c']['median']:.3f}", "-" if v5 is None else f"{v5:.2f}",
                     _ms(r["target_only_ms_per_token"]), _ms(r["speculative_ms_per_token"]),
                     f"{loop['tokens_per_target_call']:.2f}" if loop else "-",
                     f"{r['theorem_3_8']['speedup']:.2f} (γ={r['theorem_3_8']['best_gamma']})",
                     f"g0 {same['gamma0']}/{same['prompts']}"
                     + (f", spec {same['speculative']}/{same['prompts']}, spec=own g0 "
                        f"{r['speculative_equals_own_target_only']}/{same['prompts']}"
                        if same["speculative"] is not None else "")])
    rows += [[f"ctranslate2 {t}", "target only", "-", "-", "-", "-", "-", _ms(r["ms_per_token"]), "-", "-", "-",
              f"{r['same_tokens_as_fp32_target_only']}/{r['prompts']}"] for t, r in report["ct2"].items()]
    table = Table(
        f"Variants (median over {report['rounds']} rounds, (min-max); steps at past {s['probe_past']}, fused runs "
        f"with their heads; vs fp32: fp32 target step / this one's, per round; c: draft step / this variant's target "
        f"step; verify 5 ×: 5-token target pass / one-token step; ms/tok: wall time per generated token incl. "
        f"encoders; tok/call: tokens per target call of the speculative runs (random weights: what two random models "
        f"happen to agree on, not a trained pair's alpha); Thm3.8: predicted speedup over its own target-only at "
        f"α = {ALPHA} from this c, best γ; same tokens: prompts whose greedy output at γ = 0 (g0) and at γ = {gamma} "
        f"(spec) equals fp32 target-only's, and spec=own g0: the speculative output equals this variant's own "
        f"target-only output):",
        ("variant", "weights T/D", "target step ms", "vs fp32", "draft step ms", "c", "verify 5 ×",
         "target-only ms/tok", f"spec ms/tok (γ={gamma})", "tok/call", f"Thm3.8 α={ALPHA}", "same tokens"), rows)
    lines = []
    if "int8_target_step_speedup" in v:
        e = v["int8_target_step_speedup"]
        lines.append(f"int8 target step: {e['value']:.2f}× faster than fp32 (goal >= 1.5×): {_met(e)}")
    for key, kind in (("int8_draft_c", "an int8"), ("int8_wo_draft_c", "a weight-only int8")):
        if key in v:
            e = v[key]
            lines.append(f"c with {kind} draft ({e['variant']}, fp32 target): {e['value']:.3f} (goal <= 0.08; fp32 "
                         f"draft in this run {e['fp32_c']:.3f}): {_met(e)}")
    if "specdec_int8_over_ct2_int8" in v:
        e = v["specdec_int8_over_ct2_int8"]
        lines.append(f"specdec int8 target-only {e['specdec_ms_per_token']:.2f} ms/token vs CTranslate2 int8 greedy "
                     f"{e['ct2_ms_per_token']:.2f}: {e['value']:.2f}× CTranslate2's time (goal <= 1.0): {_met(e)}")
    elif "int8" in report["variants"]:
        lines.append("specdec int8 vs CTranslate2 int8: not measured (CTranslate2 missing or failed)")
    for e in (v.get(f"{name}_vs_dynamic_target_step") for name in WO_ACCURACY):
        if e:
            lines.append(f"weight-only ({e['variant']}, accuracy_level {e['accuracy_level']}) vs dynamic int8 target "
                         f"step: {e['weight_only_ms']:.2f} vs {e['dynamic_ms']:.2f} ms "
                         f"({e['weight_only_over_dynamic']:.2f}×): {e['faster']} is faster")
    return [f"{report['shapes']['target']}:{report['shapes']['draft']}, random weights at the official "
            f"configurations, the same checkpoints for every variant (target sha256 {ck['target']['sha256'][:12]}, "
            f"draft {ck['draft']['sha256'][:12]}): {s['prompts']} random prompts of {s['source_length']} tokens, "
            f"{s['max_new_tokens']} new tokens, T = 0, {s['rounds']} rounds (interleaved); per-call costs at past "
            f"{s['probe_past']} ({s['probe_repeats_per_round']} repeats per round for --probe-repeats "
            f"{s['probe_repeats']}, median per round, then median (min-max) over rounds); speculative γ = {gamma}; "
            f"target threads {s['threads'] or 'default'}, draft 1, CTranslate2 intra_threads "
            f"{s['ct2_intra_threads']}."
            + "".join(f" CTranslate2 {t}: {why}." for t, why in report["ct2_status"].items() if why != "ok"),
            table, "\n".join(f"- {line}" for line in lines)]
