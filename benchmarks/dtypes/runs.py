"""The interleaved run of `specdec-bench dtypes` over the weight variants and CTranslate2 (variants.py's docstring
has the method), its summary, the verdicts against GOALS and the lines it prints.
"""

from __future__ import annotations

import statistics
import sys
import time

from ..common.tables import markdown_table
from .variants import WO_ACCURACY

CT2_TYPES = ("int8", "float32")
GOALS = {"int8_target_step_speedup": 1.5, "int8_draft_c": 0.08, "specdec_int8_over_ct2_int8": 1.0}
ALPHA = 0.7                                   # the middle of the paper's 0.6-0.8, for the Theorem 3.8 column
LOOP_STATS = ("target_s", "draft_s", "encoder_s", "target_calls", "draft_calls", "proposed", "accepted",
              "new_tokens")


def loop_summary(parts: dict) -> dict:
    """The timed runs' Stats summed: tokens per target call, accepted/proposed, ms per target and draft call."""
    calls = max(parts["target_calls"], 1)
    return {"tokens_per_target_call": parts["new_tokens"] / calls,
            "accepted_over_proposed": parts["accepted"] / parts["proposed"] if parts["proposed"] else None,
            "target_ms_per_call": 1000.0 * parts["target_s"] / calls,
            "draft_ms_per_call": 1000.0 * parts["draft_s"] / parts["draft_calls"] if parts["draft_calls"] else None,
            **{k: parts[k] for k in LOOP_STATS}}


class _Spec:
    """specdec greedy at one gamma on one variant's decoder; collects Stats for the loop's own split."""

    def __init__(self, variant: str, dec, gamma: int):
        self.variant, self.dec, self.gamma = variant, dec, gamma
        self.name = f"{variant} g={gamma}"
        self.parts = {k: 0 for k in LOOP_STATS}

    def run(self, ids, max_new_tokens, record: bool = False):
        res = self.dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft="draft", gamma=self.gamma,
                                temperature=0.0)
        if record:
            for key in self.parts:
                self.parts[key] += getattr(res.stats, key)
        return list(res.token_ids)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(decs: dict, ct2: dict, prompts, gamma: int, max_new_tokens: int, rounds: int, probe_repeats: int,
            past: int, threads: int = 0, progress=None) -> dict:
    """The interleaved run. `decs`: {variant: SpeculativeDecoder}; `ct2`: {compute_type: peers.CT2Engine}."""
    from ..common import costs

    per_round = max(1, -(-probe_repeats // rounds))
    gamma_max = min(d.gamma_max for d in decs.values())
    counts = range(1, gamma_max + 2)
    engines = [_Spec(v, d, g) for v, d in decs.items() for g in dict.fromkeys((0, gamma))]
    engines += [ct2[t] for t in ct2]
    probes = {v: [] for v in decs}
    times = {e.name: [] for e in engines}

    # first pass: every engine's greedy tokens (correctness and warm-up)
    outputs = {e.name: [e.run(p.ids, max_new_tokens) for p in prompts] for e in engines}
    if progress:
        progress.update(1)
    names = list(decs)
    for r in range(rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            p = costs.probe(decs[v], prompts[0].ids, past, repeats=per_round, warmup=2, counts=counts,
                            threads=threads, head_temperatures=(), head_guesses=[0])
            probes[v].append({"target_step_ms": p["target_step_ms"], "draft_step_ms": p["draft_step_ms"],
                              "verify_ms": p["verify_ms"], "past_length": p["past_length"]})
            if progress:
                progress.update(1)
        for e in engines[r % len(engines):] + engines[:r % len(engines)]:
            e.run(prompts[0].ids, max_new_tokens)          # unmeasured: wakes this engine's threads
            seconds, tokens = 0.0, 0
            for p in prompts:
                started = time.perf_counter()
                out = e.run(p.ids, max_new_tokens, record=True) if isinstance(e, _Spec) else \
                    e.run(p.ids, max_new_tokens)
                seconds += time.perf_counter() - started
                tokens += len(out)
            times[e.name].append((seconds, tokens))
            if progress:
                progress.update(1)
    loops = {e.name: loop_summary(e.parts) for e in engines if isinstance(e, _Spec)}
    return {"probes": probes, "times": times, "outputs": outputs, "engines": engines, "gamma": gamma, "loops": loops,
            "gamma_max": gamma_max, "probe_repeats_per_round": per_round}


def summarize(raw: dict, weights: dict) -> dict:
    """Rows per variant and CT2 compute type, the per-round ratios and the verdicts against GOALS."""
    from ..common import theory

    probes, times, outputs, gamma = raw["probes"], raw["times"], raw["outputs"], raw["gamma"]
    rounds = len(next(iter(probes.values())))
    ms_tok = {name: [1000.0 * s / max(n, 1) for s, n in t] for name, t in times.items()}
    ref_tokens = outputs["fp32 g=0"]

    def per_round(fn):
        return [fn(i) for i in range(rounds)]

    def step(v, i):
        return probes[v][i]["target_step_ms"]

    variants = {}
    for v, rows in probes.items():
        t_step = per_round(lambda i: rows[i]["target_step_ms"])
        d_step = per_round(lambda i: rows[i]["draft_step_ms"])
        c = per_round(lambda i: rows[i]["draft_step_ms"] / rows[i]["target_step_ms"])
        verify = {k: _median([rows[i]["verify_ms"][k] / rows[i]["target_step_ms"] for i in range(rounds)])
                  for k in rows[0]["verify_ms"]}
        g0, gs = f"{v} g=0", f"{v} g={gamma}"
        c_med = _median(c)
        gm = max(int(k) for k in verify) - 1
        best_g, best_s = theory.best_gamma(ALPHA, c_med, gm)
        with_costs = {g: theory.speedup_with_costs(ALPHA, g, c_med, verify[str(g + 1)]) for g in range(1, gm + 1)}
        g_cost = max(with_costs, key=with_costs.get)
        variants[v] = {
            "weights": {"target": weights[v]["target"], "draft": weights[v]["draft"]},
            "target_step_ms": _spread(t_step), "draft_step_ms": _spread(d_step), "c": _spread(c),
            "verify_ratio": verify,
            "target_step_speedup_vs_fp32": _spread([step("fp32", i) / step(v, i) for i in range(rounds)]),
            "target_only_ms_per_token": _spread(ms_tok[g0]),
            "speculative_ms_per_token": _spread(ms_tok[gs]) if gamma and gs in ms_tok else None,
            "target_only_vs_fp32": _spread([a / b for a, b in zip(ms_tok["fp32 g=0"], ms_tok[g0])]),
            "theorem_3_8": {"alpha": ALPHA, "best_gamma": best_g, "speedup": best_s,
                            "with_verify_cost_best_gamma": g_cost, "with_verify_cost": with_costs[g_cost]},
            "same_tokens_as_fp32_target_only": {
                "gamma0": sum(a == b for a, b in zip(outputs[g0], ref_tokens)),
                "speculative": sum(a == b for a, b in zip(outputs[gs], ref_tokens)) if gamma else None,
                "prompts": len(ref_tokens)},
            "speculative_equals_own_target_only": (sum(a == b for a, b in zip(outputs[gs], outputs[g0]))
                                                   if gamma else None),
            "target_only_loop": raw["loops"][g0],
            "speculative_loop": raw["loops"][gs] if gamma else None,
        }
    ct2 = {}
    for e in raw["engines"]:
        if isinstance(e, _Spec):
            continue
        ct2[e.compute_type] = {"name": e.name, "ms_per_token": _spread(ms_tok[e.name]),
                               "same_tokens_as_fp32_target_only": sum(a == b for a, b in
                                                                       zip(outputs[e.name], ref_tokens)),
                               "same_tokens_as_own_variant": None, "prompts": len(ref_tokens)}
        own = {"int8": "int8 g=0", "float32": "fp32 g=0"}.get(e.compute_type)
        if own in outputs:
            ct2[e.compute_type]["same_tokens_as_own_variant"] = sum(a == b for a, b in zip(outputs[e.name],
                                                                                           outputs[own]))
        for v in probes:
            ct2[e.compute_type][f"ratio_{v}_target_only_over_this"] = _spread(
                [a / b for a, b in zip(ms_tok[f"{v} g=0"], ms_tok[e.name])])
    return {"variants": variants, "ct2": ct2, "verdicts": verdicts(variants, ct2), "rounds": rounds}


def verdicts(variants: dict, ct2: dict) -> dict:
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
            wo = variants[name]["target_step_ms"]["median"]
            dyn = variants["int8"]["target_step_ms"]["median"]
            out[f"{name}_vs_dynamic_target_step"] = {
                "variant": name, "accuracy_level": WO_ACCURACY[name], "dynamic_ms": dyn, "weight_only_ms": wo,
                "faster": "dynamic" if dyn <= wo else "weight-only", "weight_only_over_dynamic": wo / dyn}
    return out


# -- text --------------------------------------------------------------------------------------------------------
def _ms(s: dict | None, fmt: str = ".2f") -> str:
    if not s:
        return "-"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})" if s["n"] > 1 else f"{s['median']:{fmt}}"


def table_lines(result: dict, gamma: int) -> tuple[list[str], list[list[str]]]:
    headers = ["variant", "weights T/D", "target step ms", "vs fp32", "draft step ms", "c", "verify 5 ×",
               "target-only ms/tok", f"spec ms/tok (γ={gamma})", "tok/call", f"Thm3.8 α={ALPHA}", "same tokens"]
    lines = []
    for v, r in result["variants"].items():
        same = r["same_tokens_as_fp32_target_only"]
        v5 = r["verify_ratio"].get("5")
        lines.append([v, f"{r['weights']['target']}/{r['weights']['draft']}", _ms(r["target_step_ms"]),
                      f"{r['target_step_speedup_vs_fp32']['median']:.2f}×", _ms(r["draft_step_ms"]),
                      f"{r['c']['median']:.3f}", "-" if v5 is None else f"{v5:.2f}",
                      _ms(r["target_only_ms_per_token"]), _ms(r["speculative_ms_per_token"]),
                      f"{r['speculative_loop']['tokens_per_target_call']:.2f}" if r["speculative_loop"] else "-",
                      f"{r['theorem_3_8']['speedup']:.2f} (γ={r['theorem_3_8']['best_gamma']})",
                      f"g0 {same['gamma0']}/{same['prompts']}"
                      + (f", spec {same['speculative']}/{same['prompts']}, spec=own g0 "
                         f"{r['speculative_equals_own_target_only']}/{same['prompts']}"
                         if same["speculative"] is not None else "")])
    for t, r in result["ct2"].items():
        lines.append([f"ctranslate2 {t}", "target only", "-", "-", "-", "-", "-", _ms(r["ms_per_token"]), "-", "-",
                      "-",
                      f"{r['same_tokens_as_fp32_target_only']}/{r['prompts']}"])
    return headers, lines


def verdict_lines(result: dict) -> list[str]:
    v = result["verdicts"]
    out = []
    if "int8_target_step_speedup" in v:
        e = v["int8_target_step_speedup"]
        out.append(f"int8 target step: {e['value']:.2f}× faster than fp32 (goal >= 1.5×): "
                   f"{'met' if e['met'] else 'MISSED'}")
    for key, kind in (("int8_draft_c", "an int8"), ("int8_wo_draft_c", "a weight-only int8")):
        if key in v:
            e = v[key]
            out.append(f"c with {kind} draft ({e['variant']}, fp32 target): {e['value']:.3f} (goal <= 0.08; fp32 "
                       f"draft in this run {e['fp32_c']:.3f}): {'met' if e['met'] else 'MISSED'}")
    if "specdec_int8_over_ct2_int8" in v:
        e = v["specdec_int8_over_ct2_int8"]
        out.append(f"specdec int8 target-only {e['specdec_ms_per_token']:.2f} ms/token vs CTranslate2 int8 greedy "
                   f"{e['ct2_ms_per_token']:.2f}: {e['value']:.2f}× CTranslate2's time (goal <= 1.0): "
                   f"{'met' if e['met'] else 'MISSED'}")
    elif "int8" in result["variants"]:
        out.append("specdec int8 vs CTranslate2 int8: not measured (CTranslate2 missing or failed)")
    for name in WO_ACCURACY:
        e = v.get(f"{name}_vs_dynamic_target_step")
        if e:
            out.append(f"weight-only ({name}, accuracy_level {e['accuracy_level']}) vs dynamic int8 target step: "
                       f"{e['weight_only_ms']:.2f} vs {e['dynamic_ms']:.2f} ms "
                       f"({e['weight_only_over_dynamic']:.2f}×): {e['faster']} is faster")
    return out


def log_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def markdown_sections(report: dict) -> list[str]:
    """The report of `dtypes` in Markdown (after the machine line)."""
    s = report["settings"]
    ck = report["checkpoints"]
    parts = [f"{s['prompts']} random prompts of {s['source_length']} tokens, {s['max_new_tokens']} new tokens, "
             f"T = 0, {s['rounds']} rounds (interleaved); per-call costs at past {s['probe_past']} "
             f"({s['probe_repeats_per_round']} repeats per round, median per round, then median (min-max) over "
             f"rounds); speculative γ = {s['gamma']}; CTranslate2 intra_threads {s['ct2_intra_threads']}. Same "
             f"checkpoints for every variant (target sha256 {ck['target']['sha256'][:12]}, draft "
             f"{ck['draft']['sha256'][:12]})."]
    parts.append(markdown_table(*table_lines(report, s["gamma"])))
    parts.append("\n".join(f"* {line}" for line in verdict_lines(report)))
    return parts
