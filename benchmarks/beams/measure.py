"""Beam search on an export, per task: none (draft="none", target-only: every speedup's baseline), draft:G (exact
speculative beam search: outputs must equal none's), auto (gamma="auto") and transformers (generate(num_beams=W)).
After an untimed warm-up pass (auto learns from a cold start; the run shapes are recorded for the cost probe), each
repeat runs the specdec configurations interleaved per prompt (rotated), and transformers as one block after an
unmeasured call (threads keep spinning after a call, slowing whichever engine runs next), first in even repeats.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import numpy as np

from specdec.runtime import Params, SpecdecError, Stats

from ..common.runs import Cell, rotated, spread, task_of, tasks_of

SOURCE_KEYS = ("rounds", "proposed", "accepted", "tokens")
PARTS = ("target", "draft", "encoder", "host")     # where the time went: Stats.<part>_s
TRANSFORMERS = "transformers"
DEFAULT_GAMMAS = (1, 2, 4)
ESTIMATES_NOTE = ("auto's estimates (dec.beam_estimates: beam steps per second by gamma, 0 = a target-only step) were "
                  "reset before the warm-up pass and learned on it; they keep learning during the timed repeats.")
NOTES = {
    "beam_results": "one row per (task, configuration); config: none (specdec target-only beam search), draft:G "
                    "(exact speculative beam search, gamma=G), auto (gamma='auto'), transformers (PyTorch "
                    "generate(num_beams=W) on the target checkpoint)",
    "ms_per_token": "per repeat: wall time over the task's prompts / tokens of the best sequences (for transformers "
                    "its output up to EOS); spread over repeats. ms_per_request likewise per request",
    "speedup_vs_none": "per repeat: none's wall time over the task's prompts / this configuration's; spread over "
                       "repeats. speedup_vs_transformers likewise with transformers' wall time",
    "beam_steps_per_target_call": "beam steps (a target-only round makes 1, a speculative one 1 .. g+1) / target runs",
    "speculative": "Stats.sources over the timed runs: rounds, proposed, accepted and steps of the speculative rounds "
                   "(source 'draft'), target_only_rounds (source 'none'), round_share = speculative rounds / target "
                   "runs, steps_per_round, accepted_per_guess = accepted / proposed",
    "time_share": "Stats target_s, draft_s (the draft runs and the proposal's host work), encoder_s, host_s over "
                  "total_s, pooled over the timed runs",
    "outputs_equal_none": "sequences equal to none's on the same prompt in the same pass (warm-up and every repeat); "
                          "for transformers its best sequence against none's (agreement, not required: PyTorch and "
                          "ONNX Runtime logits differ by round-off)",
    "beam_costs": "run times at past_length on the batched sessions, median over repeats: target W x 1 "
                  "(target_step_ms), target R x (g+1) for R = W, W (g+1) and the median rows seen in the warm-up "
                  "(scoring[g]), the draft's W x 1 step; c = draft step / target step. ms: a shape's second run in a "
                  "row; after_switch_ms: its first, right after another shape (ONNX Runtime's per-shape work, which "
                  "the loop pays on most scoring runs)",
    "prediction": "for draft:G: s / (g c + T(R, g+1)/T(W, 1)), s = measured beam steps per speculative round, host "
                  "time left out; ceiling = s / (g c + 1); a round pays when g c + T(R, g+1)/T(W, 1) < s: "
                  "verify_break_even = s - g c, c_break_even = (s - T(R, g+1)/T(W, 1)) / g; in the loop (Stats, over "
                  "none's target ms per call): c_in_loop = draft ms per call, verify_ratio_in_loop = target ms per "
                  "call, predicted_in_loop = s / (draft runs per round x c_in_loop + verify_ratio_in_loop)",
}


@dataclass(frozen=True)
class BeamSettings:
    """What every configuration shares: transformers' generate arguments of the same names."""
    num_beams: int
    max_new_tokens: int
    early_stopping: object = False
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0


@dataclass(frozen=True)
class BeamConfig:
    label: str           # "none", "draft:2", "auto", "transformers"
    draft: str           # the runtime's draft name ("none", "draft"); "" for transformers
    gamma: object        # an int, "auto", or None for transformers

    @property
    def specdec(self) -> bool:
        return self.label != TRANSFORMERS

    def params(self, settings: BeamSettings) -> Params:
        return Params.of(draft=self.draft, gamma=self.gamma, **dataclasses.asdict(settings))

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "engine": "specdec" if self.specdec else TRANSFORMERS}


NONE = BeamConfig("none", "none", 0)


def configs(gammas, auto: bool = True, transformers: bool = True) -> list[BeamConfig]:
    """none, draft:G for every gamma > 0 (in order, once), auto, transformers."""
    out = [NONE] + [BeamConfig(f"draft:{g}", "draft", g) for g in dict.fromkeys(int(g) for g in gammas) if g > 0]
    return (out + ([BeamConfig("auto", "draft", "auto")] if auto else [])
            + ([BeamConfig(TRANSFORMERS, "", None)] if transformers else []))


def check(dec, cfgs, settings: BeamSettings) -> None:
    if any(c.draft == "draft" for c in cfgs) and "draft" not in dec.manifest.models:
        raise SpecdecError("speculative beam search needs the export's draft model 'draft'",
                           "export a pair, or run --num-beams with --gamma 0 (target-only beam search)")
    for c in (c for c in cfgs if c.specdec):
        try:
            c.params(settings).checked(dec.gamma_max)
        except SpecdecError as err:
            raise SpecdecError(f"--num-beams {settings.num_beams}, {c.label}: {err.problem}", err.fix) from None


def load_transformers(dec, settings: BeamSettings, checkpoint: str | None, threads: int):
    """(run(ids) -> tokens, or None where transformers is not installed; status; checkpoint path)."""
    from pathlib import Path

    from ..common.peers import load_hf, normalize
    from ..common.prompts import special_id

    path = checkpoint or dec.manifest.models["target"].source
    if not Path(path).is_dir():
        raise SpecdecError(f"the target checkpoint '{path}' (from the export's manifest) is not a local directory",
                           "pass --target-checkpoint DIR with the checkpoint the export was made from, or "
                           "--no-transformers")
    try:
        import torch

        torch.set_num_threads(threads)
        model = load_hf(path)
    except ImportError:
        return None, 'not installed (pip install -e ".[export]")', path
    eos = special_id(dec, "eos_token_id")

    def run(ids: list) -> list:
        x = torch.tensor([ids], dtype=torch.long)
        with torch.inference_mode():
            out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                 num_return_sequences=1, **dataclasses.asdict(settings))
        return normalize(out[0].tolist(), eos, drop_first=True)
    return run, "ok", path


# -- the run ----------------------------------------------------------------------------------------------------

def recording(run, shapes: list):
    """`run` (a BeamModel's) that records the (rows, tokens) of every call into `shapes`."""
    def recorded(tokens):
        shapes.append(tokens.shape)
        return run(tokens)
    return recorded


class BeamCell(Cell):
    summed = ("total_s", "requests", "new_tokens", "target_calls", "draft_calls", "target_s", "draft_s", "encoder_s",
              "host_s", "steps")
    source_keys = SOURCE_KEYS

    def stat(self, key: str, stats: Stats) -> float:
        return sum(s.tokens for s in stats.sources.values()) if key == "steps" else super().stat(key, stats)

    def add_wall(self, repeat: int, seconds: float, new_tokens: int) -> None:
        """A request timed from outside (transformers)."""
        for key, value in (("total_s", seconds), ("requests", 1), ("new_tokens", new_tokens)):
            self.repeat_sums(repeat)[key] += value

    def seconds(self) -> list:
        return [r["total_s"] for r in self.per_repeat]


def estimates_snapshot(est) -> dict:
    rates = est.rates()
    return {"steps_per_s": {str(g): r for g, r in rates.items()},
            "rounds_seen": {str(g): n for g, n in sorted(est.seen.items())},
            "best": max(rates, key=rates.get) if rates else None}


def run_beams(dec, prompts, cfgs, settings: BeamSettings, repeats: int, hf, progress):
    """(cells {(task, label): BeamCell}, equality {(task, label): counts} against none, the warm-up pass's run
    shapes {"target"|"draft": [(rows, tokens)]}, the learning, its estimates after the warm-up)."""
    spec = [c for c in cfgs if c.specdec]
    use_hf = hf is not None and len(spec) < len(cfgs)
    labels = [c.label for c in spec] + ([TRANSFORMERS] if use_hf else [])
    cells = {(task, label): BeamCell() for task in tasks_of(prompts) for label in labels}
    params = {c.label: c.params(settings) for c in spec}
    outputs = {}                              # (pass, prompt index) -> label -> sequences
    learning = dec.learning()                 # a cold start for auto

    def spec_pass(repeat=None):               # None: the untimed warm-up pass
        for i, p in enumerate(prompts):
            got = outputs.setdefault(("warmup" if repeat is None else repeat, i), {})
            for c in rotated(spec, (repeat or 0) + i):
                res = dec.generate(input_ids=p.ids, params=params[c.label], learned=learning)
                got[c.label] = [list(s) for s in res.sequences]
                if repeat is not None:
                    cells[(task_of(p), c.label)].add(repeat, res.stats)
                progress.update(1)

    def hf_pass(repeat=None):
        if not use_hf:
            return
        if repeat is not None:
            hf(prompts[0].ids)                # unmeasured: PyTorch's threads spin up
            progress.update(1)
        for i, p in enumerate(prompts):
            t = time.perf_counter()
            out = hf(p.ids)
            if repeat is not None:
                cells[(task_of(p), TRANSFORMERS)].add_wall(repeat, time.perf_counter() - t, len(out))
            outputs.setdefault(("warmup" if repeat is None else repeat, i), {})[TRANSFORMERS] = [out]
            progress.update(1)

    shapes = {"target": []} | ({"draft": []} if any(c.draft == "draft" for c in spec) else {})
    models = {name: dec.scheduler.beam_model(name) for name in shapes}
    for name, model in models.items():
        model.run = recording(model.run, shapes[name])
    spec_pass()
    for model in models.values():
        del model.run                  # the class's method again
    hf_pass()
    learned = estimates_snapshot(learning.beam_estimates)
    for r in range(repeats):
        for block in ((spec_pass, hf_pass) if r % 2 else (hf_pass, spec_pass)):
            block(r)
    equality = {key: {"equal": 0, "compared": 0, "first_mismatch": None} for key in cells if key[1] != NONE.label}
    for (pass_id, i), got in outputs.items():
        for label, seqs in got.items():
            e = equality.get((task_of(prompts[i]), label))
            if e is None:
                continue
            e["compared"] += 1
            if seqs == got[NONE.label]:
                e["equal"] += 1
            elif e["first_mismatch"] is None:
                e["first_mismatch"] = {"pass": pass_id, "prompt": i}
    return cells, equality, shapes, learning, learned


# -- the per-call costs -------------------------------------------------------------------------------------------

def rows_seen(shapes: list, guesses: int) -> dict | None:
    """The rows of the target's scoring runs over guesses+1 tokens in a shape census; None when there was none."""
    rows = [r for r, n in shapes if n == guesses + 1]
    return {"min": min(rows), "median": statistics.median(rows), "mean": statistics.fmean(rows), "max": max(rows),
            "runs": len(rows)} if rows else None


def probe(dec, ids, width: int, gammas, shapes: dict, past: int, repeats: int, extra_rows=()) -> dict:
    """Per-call run times on the batched sessions (NOTES["beam_costs"]), the order of the shapes rotated between
    repeats. Each run is rolled back (`length` set back to `past`): every one sees one past."""
    gammas = sorted({int(g) for g in gammas if g > 0})
    g_max = max(gammas, default=0)
    past = max(1, min(past, dec.max_length - g_max - 2))
    src = np.asarray(ids, np.int64)
    wanted, seen = [(width, 1)], {}
    for g in gammas:
        seen[g] = rows_seen(shapes.get("target", []), g)
        candidates = [width, width * (g + 1), *extra_rows] + ([int(round(seen[g]["median"]))] if seen[g] else [])
        wanted += [(r, g + 1) for r in sorted(set(candidates))]
    wanted = list(dict.fromkeys(wanted))

    def filled(name, *size):
        model = dec.scheduler.beam_model(name)
        model.encode(src, width, Stats(), *size)
        for k in range(past):
            model.run(np.full((width, 1), src[k % src.size], np.int64))
        return model

    target = filled("target", max(r for r, _ in wanted), g_max + 1)
    times, switched = {s: [] for s in wanted}, {s: [] for s in wanted}
    for rep in range(repeats):
        for rows, count in rotated(wanted, rep):
            if target.rows != rows:
                target.gather([i % width for i in range(rows)])
            for into in (switched, times):              # the first run after a change of shape, then another
                target.run(np.resize(src, (rows, count)))
                into[(rows, count)].append(target.elapsed)
                target.length = past
    ms = {s: 1000.0 * statistics.median(ts) for s, ts in times.items()}
    after = {s: 1000.0 * statistics.median(ts) for s, ts in switched.items()}
    step, step_after = ms[(width, 1)], after[(width, 1)]
    out = {"past_length": past, "num_beams": width, "repeats": repeats, "target_step_ms": step,
           "target_step_after_switch_ms": step_after,
           "target_runs": [{"rows": r, "tokens": n, "ms": v, "over_step": v / step, "after_switch_ms": after[(r, n)],
                            "after_switch_over_step": after[(r, n)] / step_after} for (r, n), v in ms.items()],
           "scoring": {}, "draft_step_ms": None, "c": None}
    for g in gammas:
        r = int(round(seen[g]["median"])) if seen[g] else None
        out["scoring"][str(g)] = {"rows_seen": seen[g], "rows_min_ms": ms[(width, g + 1)],
                                  "rows_max_ms": ms[(width * (g + 1), g + 1)], "rows": r,
                                  "ms": ms[(r, g + 1)] if r else None,
                                  "over_step": ms[(r, g + 1)] / step if r else None}
    if "draft" in dec.manifest.models:
        draft, ts = filled("draft"), []
        for _ in range(repeats):                            # one shape throughout: no switch to absorb
            draft.run(np.resize(src, (width, 1)))
            ts.append(draft.elapsed)
            draft.length = past
        out["draft_step_ms"] = 1000.0 * statistics.median(ts)
        out["c"] = out["draft_step_ms"] / step
        first = [n for r, n in shapes.get("draft", []) if n > 1]
        out["draft_first_step_tokens_mean"] = statistics.fmean(first) if first else None
    return out


# -- the rows of the report ---------------------------------------------------------------------------------------

def summarize(cells: dict, cfgs, equality: dict, costs: dict | None) -> list[dict]:
    """One row per (task, configuration), in the order of `cells` (NOTES)."""
    by_label = {c.label: c for c in cfgs}
    rows = []
    for (task, label), cell in cells.items():
        config, pooled = by_label[label], cell.pooled()
        ms_tok = cell.ms_per_token()
        ms_req = [1000.0 * r["total_s"] / max(r["requests"], 1) for r in cell.per_repeat]
        row = {"task": task, "config": label, "engine": "specdec" if config.specdec else TRANSFORMERS,
               "draft": config.draft, "gamma": config.gamma, "repeats": len(cell.per_repeat),
               "requests": pooled["requests"], "new_tokens": pooled["new_tokens"],
               "ms_per_token": spread(ms_tok), "ms_per_request": spread(ms_req),
               "tokens_per_s": 1000.0 / statistics.median(ms_tok)}
        for other, key in ((NONE.label, "speedup_vs_none"), (TRANSFORMERS, "speedup_vs_transformers")):
            if (task, other) in cells:
                row[key] = spread([a / b for a, b in zip(cells[(task, other)].seconds(), cell.seconds()) if b > 0])
        eq = equality.get((task, label))
        if eq is not None:
            row["outputs_equal_none"] = {**eq, "mismatches": eq["compared"] - eq["equal"]}
        if config.specdec:
            row.update(_specdec_parts(pooled, cell.sources))
        rows.append(row)
    by_key = {(r["task"], r["config"]): r for r in rows}
    for r in rows:
        if r["engine"] == "specdec":
            r["prediction"] = prediction(r, by_label[r["config"]], costs, by_key.get((r["task"], NONE.label)))
    return rows


def _specdec_parts(pooled: dict, sources: dict) -> dict:
    total, calls, requests = pooled["total_s"] or 1e-12, max(pooled["target_calls"], 1), max(pooled["requests"], 1)
    draft, none = (sources.get(k, dict.fromkeys(SOURCE_KEYS, 0)) for k in ("draft", "none"))
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


def prediction(row: dict, config: BeamConfig, costs: dict | None, none: dict | None) -> dict | None:
    """NOTES["prediction"] for draft:G (`none`: none's row of the same task); None for other configurations."""
    if not costs or not isinstance(config.gamma, int) or config.gamma < 1:
        return None
    spec = row["speculative"]
    g, s, c = config.gamma, spec["steps_per_round"], costs.get("c")
    scoring = costs["scoring"].get(str(g)) or {}
    v = scoring.get("over_step")
    out = {"gamma": g, "steps_per_round": s, "rows": scoring.get("rows"), "c": c, "verify_ratio": v,
           **dict.fromkeys(("predicted_speedup", "measured_over_predicted", "ceiling", "verify_break_even",
                            "c_break_even", "c_in_loop", "verify_ratio_in_loop", "predicted_in_loop"))}
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
    """task -> label -> {equal, compared, mismatches, first_mismatch}."""
    out: dict = {}
    for r in (r for r in rows if "outputs_equal_none" in r):
        e = r["outputs_equal_none"]
        out.setdefault(r["task"], {})[r["config"]] = {k: e[k] for k in ("equal", "compared", "mismatches",
                                                                       "first_mismatch")}
    return out
