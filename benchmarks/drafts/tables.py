"""The tables and lines of `specdec-bench drafts` (the same on stdout and in Markdown)."""

from __future__ import annotations

from .tables import fmt, lines, same


def _source_text(sources: dict) -> str:
    """`lookup a=0.80 62%, none 38%, lookup> a=0.22`: the target-level sources by tokens, then lower levels."""
    top = sorted(((s["tokens"], n) for n, s in sources.items() if not n.endswith(">")), reverse=True)
    low = sorted(n for n in sources if n.endswith(">"))
    parts = []
    for _, name in top:
        s = sources[name]
        alpha = "" if name == "none" or s["alpha"] is None else f" a={s['alpha']:.2f}"
        parts.append(f"{name}{alpha} {fmt(100 * (s['share'] or 0.0), '.0f')}%")
    parts += [f"{name} a={fmt(sources[name]['alpha'])}" for name in low]
    return ", ".join(parts)


def _speedup_range(r: dict) -> str:
    sp = r.get("speedup")
    return f"{sp['min']:.2f}-{sp['max']:.2f}" if sp else "-"


_CONFIG = (same("task", lambda r: r["task"]), same("T", lambda r: fmt(r["temperature"], "g")),
           same("draft", lambda r: r["draft"]))

DRAFTS = _CONFIG + (
    same("ms/tok", lambda r: fmt(r["ms_per_token"]["median"], ".3f")),
    same("+-", lambda r: fmt((r["ms_per_token"]["max"] - r["ms_per_token"]["min"]) / 2, ".3f")),
    same("speedup", lambda r: fmt(r.get("speedup") and r["speedup"]["median"])),
    same("min-max", _speedup_range),
    same("decode ms/tok", lambda r: fmt(r["decode_ms_per_token"]["median"], ".3f")),
    same("decode speedup", lambda r: fmt(r.get("decode_speedup") and r["decode_speedup"]["median"])),
    same("tok/call", lambda r: fmt(r["tokens_per_target_call"])),
    same("draft runs/tok", lambda r: fmt(r["draft_calls_per_token"])),
    same("sources: alpha, share of tokens", lambda r: _source_text(r["sources"])))


def _prediction(key: str, spec: str = ".2f"):
    return lambda r: fmt(r["prediction"][key], spec)


PREDICTIONS = _CONFIG + (
    same("source", lambda r: r["prediction"]["source"]), same("alpha", _prediction("alpha")),
    same("mean g", _prediction("mean_gamma")), same("c", _prediction("c", ".3f")),
    same("T(g)/T(0)", _prediction("verify_cost")), same("E[tok]", _prediction("expected_tokens")),
    same("tok/round", _prediction("tokens_per_round")), same("thm3.8", lambda r: fmt(r["predicted_speedup"])),
    same("speedup", lambda r: fmt(r.get("speedup", {}).get("median"))),
    same("meas/thm", lambda r: fmt(r.get("measured_over_predicted"))),
    same("mixture", lambda r: fmt(r["predicted_mixture"])),
    same("meas/mix", lambda r: fmt(r.get("measured_over_mixture"))))


def draft_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    return lines(DRAFTS, rows)


def draft_prediction_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    return lines(PREDICTIONS, rows)


def draft_best_lines(best: dict) -> list[str]:
    out = []
    for task, by_t in best.items():
        for t, b in by_t.items():
            auto = b.get("auto_speedup")
            out.append(f"{task}, T={float(t):g}: best {b['best']} {b['best_speedup']:.2f}x, decode-only "
                       f"{b['best_decode_speedup']:.2f}x ({b['best_ms_per_token']:.3f} vs "
                       f"{b['baseline_ms_per_token']:.3f} ms/token for none)"
                       + (f"; auto {auto:.2f}x, decode-only {b['auto_decode_speedup']:.2f}x"
                          if auto is not None else ""))
    return out


def estimates_lines(learned: dict) -> list[str]:
    """One line per temperature: what auto had learned at the end of its warm-up pass."""
    out = []
    for t, e in learned.items():
        if "unavailable" in e:
            out.append(f"T={float(t):g}: {e['unavailable']}")
            continue
        alpha = ", ".join(f"{n} {a:.2f}" for n, a in e["alpha"].items()) or "-"
        cost = ", ".join(f"{n} {c:.3f}" for n, c in e["cost_per_guess_ms"].items()) or "-"
        runs = ", ".join(f"{k}: {v:.3f}" for k, v in e["target_run_ms"].items()) or "-"
        out.append(f"T={float(t):g} ({e['rounds']} rounds): alpha {alpha}; cost per guess ms {cost}; target run ms "
                   f"by guesses {runs}; host ms per round {e['host_ms_per_round']:.3f}"
                   + _switch(e.get("switch"), "") + _switch(e.get("switch_at_end"), " after the timed repeats"))
    return out


def _switch(sw, when: str) -> str:
    """auto's switch (runtime/decoding/switch.py) as measured: ms per token of auto's rounds and of plain steps."""
    if not sw or "auto_rounds_lead" not in sw:
        return ""
    ms = ", ".join(f"{mode} {sw[key]:.3f} ms/token" for mode, key in
                   (("auto's rounds", "auto_ms_per_token"), ("plain steps", "plain_ms_per_token"))
                   if sw.get(key) is not None)
    lead = {True: "auto's rounds lead", False: "plain steps lead", None: "still measuring"}[sw["auto_rounds_lead"]]
    return f"; switch{when}: {ms or 'not measured'}, {lead} (the other runs {sw['slower_share']:.0%} of the rounds)"
