"""The per-call costs of beam search's runs (`specdec-bench beams`).

Per-call costs (`probe`): on the batched sessions (`dec.beam_model`), at one past length, the target's run over W
rows x 1 token (a target-only step) and over R rows x (g+1) tokens (a speculative round's scoring run) for the rows
R seen in the warm-up pass (median), R = W (one path per beam) and R = W (g+1) (the most a round scores), and the
draft's W x 1 step. Each shape is run twice in a row: the second run is its cost (`ms`), the first, right after a
run of another shape, is `after_switch_ms` (ONNX Runtime's per-shape work on a change of shape, which the
speculative loop pays on most target runs: its scoring runs change rows from round to round). The prediction uses
the steady costs (what grows with the model), and beside them the costs measured in the loop: the draft's and the
target's mean time per call in Stats, as c_in_loop = draft ms per call / none's target ms per call and
verify_ratio_in_loop = this configuration's target ms per call / none's (the draft's time includes the proposal's
host work between its runs). A speculative round of g guesses that makes s beam steps pays, run time alone, when
g c + T(R, g+1) / T(W, 1) < s (c = the draft step / the target's W x 1 step): `verify_break_even` = s - g c is the
largest scoring-run ratio at which it would, `c_break_even` = (s - T(R, g+1)/T(W, 1)) / g the largest c; `ceiling`
= s / (g c + 1) is the speedup if the scoring run cost no more than a W x 1 step (hardware where a run's cost does
not grow with its rows and tokens: the limit for large models on a GPU).
"""

from __future__ import annotations

import statistics

import numpy as np

from specdec.runtime import Stats

from ..common.runs import rotated


def rows_seen(shapes: list, guesses: int) -> dict | None:
    """The rows of the target's scoring runs over guesses+1 tokens in a shape census: {min, median, mean, max,
    runs}; None when there was none."""
    rows = [r for r, n in shapes if n == guesses + 1]
    if not rows:
        return None
    return {"min": min(rows), "median": statistics.median(rows), "mean": statistics.fmean(rows), "max": max(rows),
            "runs": len(rows)}


def probe(dec, ids, width: int, gammas, shapes: dict, past: int, repeats: int, extra_rows=()) -> dict:
    """Per-call run times (module docstring), ms, median over `repeats`, the order of the shapes rotated between
    repeats. Each run is rolled back (`length` set back to `past`), so every one sees the same past."""
    stats = Stats()
    gammas = sorted({int(g) for g in gammas if g > 0})
    g_max = max(gammas, default=0)
    past = max(1, min(past, dec.max_length - g_max - 2))
    src = np.asarray(ids, np.int64)
    wanted = [(width, 1)]
    seen = {}
    for g in gammas:
        seen[g] = rows_seen(shapes.get("target", []), g)
        candidates = [width, width * (g + 1), *extra_rows] + ([int(round(seen[g]["median"]))] if seen[g] else [])
        wanted += [(r, g + 1) for r in sorted(set(candidates))]
    wanted = list(dict.fromkeys(wanted))
    target = dec.beam_model("target")
    target.encode(src, width, stats, max(r for r, _ in wanted), g_max + 1)
    for k in range(past):
        target.run(np.full((width, 1), src[k % src.size], np.int64))
    times = {shape: [] for shape in wanted}
    switched = {shape: [] for shape in wanted}
    for rep in range(repeats):
        for rows, count in rotated(wanted, rep):
            if target.rows != rows:
                target.gather([i % width for i in range(rows)])
            for into in (switched, times):              # the first run after a change of shape, then another
                target.run(np.resize(src, (rows, count)))
                into[(rows, count)].append(target.elapsed)
                target.length = past
    ms = {shape: 1000.0 * statistics.median(ts) for shape, ts in times.items()}
    ms_switched = {shape: 1000.0 * statistics.median(ts) for shape, ts in switched.items()}
    step, step_switched = ms[(width, 1)], ms_switched[(width, 1)]
    out = {"past_length": past, "num_beams": width, "repeats": repeats, "target_step_ms": step,
           "target_step_after_switch_ms": step_switched,
           "target_runs": [{"rows": r, "tokens": n, "ms": v, "over_step": v / step,
                            "after_switch_ms": ms_switched[(r, n)],
                            "after_switch_over_step": ms_switched[(r, n)] / step_switched}
                           for (r, n), v in ms.items()],
           "scoring": {}}
    for g in gammas:
        entry = {"rows_seen": seen[g], "rows_min_ms": ms[(width, g + 1)], "rows_max_ms": ms[(width * (g + 1), g + 1)]}
        if seen[g]:
            r = int(round(seen[g]["median"]))
            entry.update({"rows": r, "ms": ms[(r, g + 1)], "over_step": ms[(r, g + 1)] / step})
        else:
            entry.update({"rows": None, "ms": None, "over_step": None})
        out["scoring"][str(g)] = entry
    out["draft_step_ms"] = out["c"] = None
    if "draft" in dec.manifest.models:
        draft = dec.beam_model("draft")
        draft.encode(src, width, stats)
        for k in range(past):
            draft.run(np.full((width, 1), src[k % src.size], np.int64))
        ts = []
        for _ in range(repeats):                            # one shape throughout: no switch to absorb
            draft.run(np.resize(src, (width, 1)))
            ts.append(draft.elapsed)
            draft.length = past
        out["draft_step_ms"] = 1000.0 * statistics.median(ts)
        out["c"] = out["draft_step_ms"] / step
        first = [n for r, n in shapes.get("draft", []) if n > 1]
        out["draft_first_step_tokens_mean"] = statistics.fmean(first) if first else None
    return out
