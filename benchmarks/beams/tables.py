"""The tables and lines of `specdec-bench beams` (the same on stdout and in Markdown)."""

from __future__ import annotations

from .tables import fmt, lines, same, table


def beam_costs_lines(costs: dict) -> tuple[list[str], list[list[str]]]:
    seen = {int(g) + 1: e["rows_seen"] for g, e in costs["scoring"].items()}

    def rows_seen(t):
        rs = seen.get(t["tokens"])
        return f"{rs['median']:g} ({rs['min']}-{rs['max']}, {rs['runs']} runs)" if rs else "-"

    columns = (same("target run", lambda t: "W x 1" if t["tokens"] == 1 else f"R x {t['tokens']}"),
               same("rows", lambda t: str(t["rows"])), same("tokens", lambda t: str(t["tokens"])),
               same("ms", lambda t: fmt(t["ms"], ".3f")), same("x W x 1", lambda t: fmt(t["over_step"])),
               same("after a switch ms", lambda t: fmt(t.get("after_switch_ms"), ".3f")),
               same("x", lambda t: fmt(t.get("after_switch_over_step"))),
               same("rows seen (median, min-max)", rows_seen))
    return lines(columns, costs["target_runs"])


def beam_costs_text(costs: dict) -> str:
    head = (f"per-call costs (batched sessions, past length {costs['past_length']}, W = {costs['num_beams']}, median "
            f"of {costs['repeats']}): target W x 1 step {costs['target_step_ms']:.3f} ms "
            f"({fmt(costs.get('target_step_after_switch_ms'), '.3f')} ms right after a run of another shape)")
    if costs.get("draft_step_ms") is not None:
        head += (f"; draft W x 1 step {costs['draft_step_ms']:.3f} ms, c = {costs['c']:.3f}; the draft's first step "
                 f"of a round reads {fmt(costs.get('draft_first_step_tokens_mean'))} tokens on average")
    return head + "\n" + table(*beam_costs_lines(costs))


def _pct(part: str):
    return lambda r: "-" if not r.get("time_share") else f"{100 * r['time_share'][part]:.0f}"


def _median(key: str):
    return lambda r: fmt(r.get(key) and r[key]["median"])


def _spec(r: dict) -> dict:
    return r.get("speculative") or {}


def _vs_none_range(r: dict) -> str:
    sn = r.get("speedup_vs_none")
    return f"{sn['min']:.2f}-{sn['max']:.2f}" if sn else "-"


def _equal(r: dict) -> str:
    eq = r.get("outputs_equal_none")
    return f"{eq['equal']}/{eq['compared']}" if eq else "-"


_CONFIG = (same("task", lambda r: r["task"]), same("config", lambda r: r["config"]))

BEAMS = _CONFIG + (
    same("ms/tok", lambda r: fmt(r["ms_per_token"]["median"], ".3f")),
    same("+-", lambda r: fmt((r["ms_per_token"]["max"] - r["ms_per_token"]["min"]) / 2, ".3f")),
    same("ms/req", lambda r: fmt(r["ms_per_request"]["median"], ".1f")),
    same("vs none", _median("speedup_vs_none")), same("min-max", _vs_none_range),
    same("vs transformers", _median("speedup_vs_transformers")),
    same("steps/call", lambda r: fmt(r.get("beam_steps_per_target_call"))),
    same("spec rounds", lambda r: "-" if not _spec(r) else f"{100 * _spec(r)['round_share']:.0f}%"),
    same("steps/round", lambda r: fmt(_spec(r).get("steps_per_round"))),
    same("target %", _pct("target")), same("draft %", _pct("draft")), same("enc %", _pct("encoder")),
    same("host %", _pct("host")), same("= none", _equal))


def _prediction(key: str, spec: str = ".2f"):
    return lambda r: fmt(r["prediction"][key], spec)


PREDICTIONS = _CONFIG + (
    same("s", _prediction("steps_per_round")), same("R", _prediction("rows", "d")), same("c", _prediction("c", ".3f")),
    same("T(R,g+1)/T(W,1)", _prediction("verify_ratio")), same("pred", _prediction("predicted_speedup")),
    same("ceiling", _prediction("ceiling")), same("T-ratio b-e", _prediction("verify_break_even")),
    same("c b-e", _prediction("c_break_even", ".3f")), same("c loop", _prediction("c_in_loop", ".3f")),
    same("T-ratio loop", _prediction("verify_ratio_in_loop")), same("pred loop", _prediction("predicted_in_loop")),
    same("speedup", lambda r: fmt(r.get("speedup_vs_none", {}).get("median"))),
    same("meas/pred", _prediction("measured_over_predicted")))


def beam_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    return lines(BEAMS, rows)


def beam_prediction_lines(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    return lines(PREDICTIONS, rows)


def beam_estimates_lines(snapshots: dict) -> list[str]:
    out = []
    for when, e in snapshots.items():
        if "unavailable" in e:
            out.append(f"{when}: {e['unavailable']}")
            continue
        rates = ", ".join(f"gamma {g}: {r:.0f}" for g, r in e["steps_per_s"].items()) or "-"
        seen = ", ".join(f"{g}: {n}" for g, n in e["rounds_seen"].items()) or "-"
        out.append(f"{when}: beam steps/s {rates} (best: gamma {e['best']}); rounds by gamma {seen}")
    return out
