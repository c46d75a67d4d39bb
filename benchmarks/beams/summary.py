"""The rows of `specdec-bench beams`: per (task, configuration) from the cells beams.run_beams filled, with
the speedups, where the time went, the outputs equal to none's, and what the runs predict (costs.py has the
costs they use).
"""

from __future__ import annotations

import statistics

from ..common.runs import spread
from .measure import NONE, SOURCE_KEYS, TRANSFORMERS, BeamConfig

PARTS = ("target", "draft", "encoder", "host")     # where the time went: Stats.<part>_s


def _ratios(num: list, den: list) -> list:
    return [a / b for a, b in zip(num, den) if b > 0]


def summarize(cells: dict, cfgs, equality: dict, costs: dict | None) -> list[dict]:
    """One row per (task, configuration), tasks in order of appearance, configurations in the run's order."""
    by_label = {c.label: c for c in cfgs}
    rows = []
    for (task, label), cell in cells.items():
        config = by_label[label]
        pooled = cell.pooled()
        requests = max(pooled["requests"], 1)
        ms_tok = [1000.0 * r["total_s"] / max(r["new_tokens"], 1) for r in cell.per_repeat]
        ms_req = [1000.0 * r["total_s"] / max(r["requests"], 1) for r in cell.per_repeat]
        row = {"task": task, "config": label, "engine": "specdec" if config.specdec else TRANSFORMERS,
               "draft": config.draft, "gamma": config.gamma, "repeats": len(cell.per_repeat),
               "requests": pooled["requests"], "new_tokens": pooled["new_tokens"],
               "ms_per_token": spread(ms_tok), "ms_per_request": spread(ms_req),
               "tokens_per_s": 1000.0 / statistics.median(ms_tok)}
        none = cells.get((task, NONE.label))
        if none is not None:
            row["speedup_vs_none"] = spread(_ratios(none.seconds(), cell.seconds()))
        hf = cells.get((task, TRANSFORMERS))
        if hf is not None:
            row["speedup_vs_transformers"] = spread(_ratios(hf.seconds(), cell.seconds()))
        eq = equality.get((task, label))
        if eq is not None:
            row["outputs_equal_none"] = {**eq, "mismatches": eq["compared"] - eq["equal"]}
        if config.specdec:
            row.update(_specdec_parts(pooled, cell.sources, requests))
        rows.append(row)
    by_key = {(r["task"], r["config"]): r for r in rows}
    for r in rows:
        if r["engine"] == "specdec":
            r["prediction"] = prediction(r, by_label[r["config"]], costs, by_key.get((r["task"], NONE.label)))
    return rows


def _specdec_parts(pooled: dict, sources: dict, requests: int) -> dict:
    total = pooled["total_s"] or 1e-12
    calls = max(pooled["target_calls"], 1)
    draft = sources.get("draft", {k: 0 for k in SOURCE_KEYS})
    none = sources.get("none", {k: 0 for k in SOURCE_KEYS})
    rounds = draft["rounds"]
    return {
        "target_calls": pooled["target_calls"], "draft_calls": pooled["draft_calls"], "beam_steps": pooled["steps"],
        "beam_steps_per_target_call": pooled["steps"] / calls,
        "time_share": {p: pooled[f"{p}_s"] / total for p in PARTS},
        "ms_per_request_by_part": {p: 1000.0 * pooled[f"{p}_s"] / requests for p in PARTS},
        "target_ms_per_call": 1000.0 * pooled["target_s"] / calls,
        "draft_ms_per_call": 1000.0 * pooled["draft_s"] / pooled["draft_calls"] if pooled["draft_calls"] else None,
        "host_ms_per_target_call": 1000.0 * pooled["host_s"] / calls,
        "speculative": {"rounds": rounds, "proposed": draft["proposed"], "accepted": draft["accepted"],
                        "steps": draft["tokens"], "target_only_rounds": none["rounds"],
                        "round_share": rounds / calls,
                        "mean_gamma": draft["proposed"] / rounds if rounds else None,
                        "steps_per_round": draft["tokens"] / rounds if rounds else None,
                        "accepted_per_guess": draft["accepted"] / draft["proposed"] if draft["proposed"] else None},
    }


def prediction(row: dict, config: BeamConfig, costs: dict | None, none: dict | None = None) -> dict | None:
    """For draft:G: the speedup the runs alone predict, s / (g c + T(R, g+1)/T(W, 1)), with the probe's costs and
    the measured beam steps per speculative round s, the ceiling s / (g c + 1) and the break-even values; and the
    same with the costs in the loop (`none`: none's row of the same task) (module docstring)."""
    if not costs or not isinstance(config.gamma, int) or config.gamma < 1:
        return None
    spec = row["speculative"]
    g, s, c = config.gamma, spec["steps_per_round"], costs.get("c")
    scoring = costs["scoring"].get(str(g)) or {}
    v = scoring.get("over_step")
    out = {"gamma": g, "steps_per_round": s, "rows": scoring.get("rows"), "c": c, "verify_ratio": v,
           "predicted_speedup": None, "measured_over_predicted": None, "ceiling": None, "verify_break_even": None,
           "c_break_even": None, "c_in_loop": None, "verify_ratio_in_loop": None, "predicted_in_loop": None}
    base = none and none.get("target_ms_per_call")
    if base and row.get("draft_ms_per_call") is not None:
        out["c_in_loop"] = row["draft_ms_per_call"] / base
        out["verify_ratio_in_loop"] = row["target_ms_per_call"] / base
        if s is not None:                                  # draft runs per round: g, fewer when the proposal stops
            runs = row["draft_calls"] / spec["rounds"]
            out["predicted_in_loop"] = s / (runs * out["c_in_loop"] + out["verify_ratio_in_loop"])
    if s is None or c is None:
        return out
    out["ceiling"] = s / (g * c + 1.0)
    out["verify_break_even"] = s - g * c
    if v is not None:
        out["predicted_speedup"] = s / (g * c + v)
        out["c_break_even"] = (s - v) / g
        measured = row.get("speedup_vs_none", {}).get("median")
        out["measured_over_predicted"] = measured / out["predicted_speedup"] if measured else None
    return out


def equality_summary(rows: list[dict]) -> dict:
    """task -> label -> {equal, compared, mismatches} for the specdec configurations (must all be equal) and
    transformers (agreement, informative: PyTorch and ONNX Runtime logits differ by round-off)."""
    out: dict = {}
    for r in rows:
        if "outputs_equal_none" in r:
            e = r["outputs_equal_none"]
            out.setdefault(r["task"], {})[r["config"]] = {k: e[k] for k in ("equal", "compared", "mismatches",
                                                                           "first_mismatch")}
    return out
