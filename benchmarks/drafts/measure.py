"""The draft-source sweep (`specdec-bench drafts`). A configuration is a draft name as the runtime takes it with a
gamma (`NAME:G` fixed, `NAME` alone "auto") and candidates (`NAME*B`: a lookup round verifies up to B continuations
as a token tree); `none`, the baseline, is always added. Per temperature: fresh auto estimates, one untimed warm-up
pass (auto learns on it), then the timed repeats, every configuration back to back per prompt, rotated per prompt
and repeat so drift hits all alike."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specdec.runtime import Params, SpecdecError

from ..common import theory
from ..common.runs import Cell, per_repeat_ratios, rotated, seed_for, spread, task_of, tasks_of

ESTIMATES_NOTE = ("auto's estimates (draft=auto, and gamma=auto of every other configuration) were reset at the start "
                  "of each temperature and learned on its warm-up pass (one untimed generate per prompt and "
                  "configuration); they keep learning during the timed runs.")
WARMUP_SEED = 10 ** 6          # the warm-up pass's seeds: 10**6 + prompt index (the timed runs': seed_for)


@dataclass(frozen=True)
class DraftConfig:
    label: str          # as the report spells it: "none", "draft:3", "lookup,draft", "lookup,datastore", "auto"
    draft: str          # as the runtime takes it: "none", "draft", "lookup,draft", "auto"
    gamma: object       # an int (fixed) or "auto"
    store: bool = False     # the lookup also searches the export's datastore (",datastore"; "auto" always does)
    candidates: int = 0     # Params.candidates ("*B"; 0: the runtime chooses)

    def params(self, base: Params, temperature: float, max_new_tokens: int) -> Params:
        return Params.of(base, draft=self.draft, gamma=self.gamma, temperature=temperature,
                         max_new_tokens=max_new_tokens, candidates=self.candidates)

    def as_dict(self) -> dict:
        return {"label": self.label, "draft": self.draft, "gamma": self.gamma, "candidates": self.candidates}

    @property
    def fixed(self) -> bool:
        """Source and gamma both fixed (`none` too): not auto, and not NAME without :G."""
        return self.draft != "auto" and self.gamma != "auto"


NONE = DraftConfig("none", "none", 0)


def _integer(text: str, item: str, what: str, fix: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecdecError(f"--draft entry '{item}': {what} must be an integer", fix) from None


def parse_item(item: str) -> DraftConfig:
    """One --draft entry: NAME, NAME:G, NAME*B or NAME*B:G; NAME a draft name, or a chain with "," between its levels
    lowest first (lookup,draft; "+" is the earlier spelling of ",")."""
    name, colon, gamma_text = item.strip().partition(":")
    name, star, width_text = name.partition("*")
    candidates = _integer(width_text, item, "the number of candidates after '*'",
                          "e.g. lookup,datastore*4 or lookup,datastore*4:8") if star else 0
    levels = [p.strip() for p in name.replace("+", ",").split(",")]
    if not name.strip() or not all(levels):
        raise SpecdecError(f"--draft entry '{item}' has an empty name",
                           "e.g. --draft none draft lookup lookup,draft auto, or draft:3")
    if len(levels) > 1 and ({"none", "auto"} & set(levels) or len(set(levels)) < len(levels)):
        raise SpecdecError(f"--draft entry '{item}' is not a chain", "separate configurations with spaces and a "
                           "chain's levels with commas, e.g. --draft none draft lookup lookup,draft auto")
    label, store = ",".join(levels) + (f"*{candidates}" if star else ""), "datastore" in levels
    levels = [p for p in levels if p != "datastore"]
    if store and "lookup" not in levels:
        raise SpecdecError(f"--draft entry '{item}': the datastore is what the lookup searches",
                           "write lookup,datastore (or lookup,datastore,draft)")
    if not colon:
        return NONE if label == "none" else DraftConfig(label, ",".join(levels), "auto", store, candidates)
    gamma = _integer(gamma_text, item, "the gamma after ':'", "e.g. draft:3, or the name alone for gamma=auto")
    if gamma < 0:
        raise SpecdecError(f"--draft entry '{item}': gamma must be >= 0")
    if label != "none" and gamma == 0:
        raise SpecdecError(f"--draft entry '{item}': gamma 0 is target-only decoding", "write none")
    return NONE if label == "none" else DraftConfig(f"{label}:{gamma}", ",".join(levels), gamma, store, candidates)


def parse_configs(texts) -> list[DraftConfig]:
    """The --draft configurations (one entry per argument), `none` first, duplicates dropped. An argument with a "+"
    is the earlier form, a comma-separated list with "+" inside chains (lookup+draft), accepted for one release."""
    configs = [parse_item(item) for text in texts for item in (text.split(",") if "+" in text else [text])
               if item.strip()]
    if not configs:
        raise SpecdecError("--draft is empty", "e.g. --draft none draft lookup lookup,draft auto")
    return list({c.label: c for c in [NONE] + configs}.values())


def check_configs(dec, configs, base: Params) -> None:
    for config in configs:
        if config.store and dec.datastore is None:
            raise SpecdecError(f"--draft {config.label}: this export has no datastore",
                               "export with specdec-export --datastore-text TEXT, or drop ,datastore")
        try:
            dec.scheduler.source(config.params(base, 0.0, 1).checked(dec.gamma_max))
        except SpecdecError as err:
            raise SpecdecError(f"--draft {config.label}: {err.problem}", err.fix) from None


EXPLORE_KEYS = ("choice_rounds", "switch_rounds", "auto_rounds")


def auto_object(dec, params: Params, learned):
    """The AutoDraft a request with `params` runs with `learned` (None where the runtime gives none)."""
    try:
        return dec.scheduler.source(params.checked(dec.gamma_max), learned=learned)
    except (SpecdecError, AttributeError, TypeError):
        return None


def explore_counters(auto) -> dict:
    """auto's cumulative counters: rounds whose choice explored (AutoDraft.explored), rounds its switch ran the mode
    that measured slower (Switch.explored), rounds auto chose (Estimates.round); None where the runtime keeps none."""
    values = {"choice_rounds": getattr(auto, "explored", None),
              "switch_rounds": getattr(getattr(auto, "switch", None), "explored", None),
              "auto_rounds": getattr(getattr(auto, "estimates", None), "round", None)}
    return {k: v if isinstance(v, int) and not isinstance(v, bool) else None for k, v in values.items()}


@dataclass
class DraftCell(Cell):
    """One (task, temperature, configuration): Stats sums per repeat and Stats.sources summed over every timed run;
    `explore` (configurations whose source or gamma auto chooses): explore_counters' growth over each timed run,
    summed, and the runs' rounds (target calls)."""
    source_keys = ("rounds", "proposed", "accepted", "rejections", "tokens")
    explore: dict | None = None

    def add_explore(self, before: dict, after: dict, rounds: int) -> None:
        if self.explore is None:
            self.explore = {**dict.fromkeys(EXPLORE_KEYS, 0), "rounds": 0}
        for k in EXPLORE_KEYS:
            values = (self.explore[k], before[k], after[k])
            self.explore[k] = None if None in values else values[0] + values[2] - values[1]
        self.explore["rounds"] += rounds


def estimates_snapshot(est) -> dict:
    """What auto has learned, in ms: per source alpha and cost per guess, target run by guesses, host per round."""
    try:
        return {"alpha": {name: est.alpha(name) for name in est.counts},
                "cost_per_guess_ms": {name: 1000.0 * max(m.get(0.0), 0.0) for name, m in est.cost.items()},
                "target_run_ms": {str(k): 1000.0 * t for k, t in enumerate(est.times(8))},
                "host_ms_per_round": 1000.0 * est.host.get(0.0), "rounds": est.round}
    except (AttributeError, TypeError) as err:      # the runtime changed what it keeps: report, do not fail
        return {"unavailable": f"{type(err).__name__}: {err}"}


def switch_snapshot(dec, learned) -> dict:
    """Where auto's switch stands: ms/token of auto's rounds and of plain steps, which leads, the other's share."""
    try:
        switch = dec.scheduler.source(Params(draft="auto"), learned=learned).switch
        ms = {mode: switch.seconds_per_token(mode) for mode in (True, False)}
        return {"auto_ms_per_token": None if ms[True] is None else 1000.0 * ms[True],
                "plain_ms_per_token": None if ms[False] is None else 1000.0 * ms[False],
                "auto_rounds_lead": switch.lead, "slower_share": switch.share()}
    except (AttributeError, TypeError) as err:      # the runtime changed what it keeps: report, do not fail
        return {"unavailable": f"{type(err).__name__}: {err}"}


def run_drafts(dec, prompts, configs, temperatures, max_new_tokens: int, repeats: int, progress=None,
               base: Params | None = None):
    """({(task, T, label): DraftCell}, {(task, T, label): [repeat 0's token ids per prompt]}, {T: what auto learned}).
    One decoder runs every configuration (two decoders of one export differ by 2-3 %)."""
    base = base or Params()
    kinds = {True: dec.learned, False: dec.learning(datastore=False) if dec.datastore is not None else dec.learned}
    uses = {c.label: kinds[c.store or c.draft == "auto"] for c in configs}
    cells = {(task, t, c.label): DraftCell() for t in temperatures for task in tasks_of(prompts) for c in configs}
    outputs = {key: [] for key in cells}
    learned = {}
    tick = progress.update if progress else (lambda n: None)
    for t in temperatures:
        params = {c.label: c.params(base, t, max_new_tokens) for c in configs}
        for kind in {id(k): k for k in kinds.values()}.values():
            kind.reset()
        for i, p in enumerate(prompts):              # warm-up: untimed; auto learns its estimates here
            for c in rotated(configs, i):
                dec.generate(**p.kwargs(), params=params[c.label], seed=WARMUP_SEED + i, learned=uses[c.label])
                tick(1)
        learned[t] = {**estimates_snapshot(kinds[True].estimates), "switch": switch_snapshot(dec, kinds[True])}
        for r in range(repeats):
            for i, p in enumerate(prompts):
                for c in rotated(configs, r + i):
                    auto = None if c.fixed else auto_object(dec, params[c.label], uses[c.label])
                    before = explore_counters(auto)
                    res = dec.generate(**p.kwargs(), params=params[c.label], seed=seed_for(r, i),
                                       learned=uses[c.label])
                    key = (task_of(p), t, c.label)
                    cells[key].add(r, res.stats)
                    if not c.fixed:
                        cells[key].add_explore(before, explore_counters(auto), res.stats.target_calls)
                    if r == 0:
                        outputs[key].append(list(res.token_ids))
                    tick(1)
        learned[t]["switch_at_end"] = switch_snapshot(dec, kinds[True])
    return cells, outputs, learned


def _target_level(name: str) -> bool:
    """A source verified by the target ("none", "draft", "lookup,draft"), not a chain's lower level ("lookup>")."""
    return not name.endswith(">")


def source_rows(sums: dict) -> dict:
    """name -> the summed counts, alpha, mean guesses and (target-level sources) tokens per round and share."""
    total = sum(s["tokens"] for name, s in sums.items() if _target_level(name))
    out = {}
    for name, s in sums.items():
        tested, top = s["accepted"] + s["rejections"], _target_level(name)
        out[name] = {**s, "alpha": s["accepted"] / tested if tested else None,
                     "mean_proposed": s["proposed"] / s["rounds"] if s["rounds"] else 0.0,
                     "tokens_per_round": s["tokens"] / s["rounds"] if s["rounds"] and top else None,
                     "share": s["tokens"] / total if top and total else None}
    return out


def source_cost(name: str, sums: dict, probe: dict) -> float | None:
    """c of a source in target steps per guess (NOTES' prediction); None where the probe measured nothing for it."""
    c = probe.get("c")
    if name in ("lookup", "datastore"):         # copies: no model run
        return 0.0
    if name == "draft":
        return c
    if name == "lookup,draft" and c is not None:
        proposed = sums[name]["proposed"]
        return c * max(proposed - sums.get("lookup>", {}).get("accepted", 0), 0) / proposed if proposed else c
    return None


def prediction(name: str, sources: dict, sums: dict, probe: dict) -> dict:
    """Theorem 3.8 with measured costs for one source: alpha, the mean gamma g, c, T(g)/T(0), E, the speedup."""
    if name == "none":
        return {"source": "none", "alpha": None, "mean_gamma": 0.0, "c": 0.0, "verify_cost": 1.0,
                "expected_tokens": 1.0, "tokens_per_round": 1.0, "predicted_speedup": 1.0}
    s = sources[name]
    g, alpha, c = s["mean_proposed"], s["alpha"], source_cost(name, sums, probe)
    v = theory.verify_cost(probe.get("verify_ratio"), g)
    return {"source": name, "alpha": alpha, "mean_gamma": g, "c": c, "verify_cost": v,
            "expected_tokens": theory.expected_tokens_at(alpha, g) if alpha is not None else None,
            "tokens_per_round": s["tokens_per_round"],
            "predicted_speedup": None if None in (alpha, c, v) else theory.speedup_with_verify_cost(alpha, g, c, v)}


def mixture_prediction(sources: dict, sums: dict, probe: dict) -> float | None:
    rounds = []
    for name, s in sources.items():
        if _target_level(name) and s["rounds"]:
            p = prediction(name, sources, sums, probe)
            if p["predicted_speedup"] is None:
                return None
            rounds.append((s["rounds"], p["alpha"] or 0.0, p["mean_gamma"], p["c"], p["verify_cost"]))
    return theory.mixture_speedup(rounds)


def summarize(cells: dict, configs, probe: dict) -> list[dict]:
    """One row per (task, temperature, configuration), in the sweep's order."""
    by_label = {c.label: c for c in configs}
    rows = []
    for (task, t, label), cell in cells.items():
        pooled, ms = cell.pooled(), cell.ms_per_token()
        sources = source_rows(cell.sources)
        proposing = [(s["tokens"], name) for name, s in sources.items()
                     if _target_level(name) and name != "none" and s["rounds"]]
        dominant = max(proposing)[1] if proposing else "none"     # the proposing source with the most tokens
        pred = prediction(dominant, sources, cell.sources, probe)
        tokens = max(pooled["new_tokens"], 1)
        row = {"task": task, "temperature": t, "draft": label, "draft_name": by_label[label].draft,
               "gamma": by_label[label].gamma, "repeats": len(ms),
               **{k: pooled[k] for k in ("requests", "new_tokens", "target_calls", "draft_calls")},
               "ms_per_token": spread(ms), "tokens_per_s": 1000.0 / statistics.median(ms),
               "decode_ms_per_token": spread(cell.ms_per_token(decode_only=True)),
               "tokens_per_target_call": pooled["new_tokens"] / max(pooled["target_calls"], 1),
               "draft_calls_per_token": pooled["draft_calls"] / tokens,
               "ms_per_token_by_part": {part: 1000.0 * pooled[f"{part}_s"] / tokens
                                        for part in ("encoder", "draft", "target", "host")},
               "sources": sources, "dominant_source": dominant, "prediction": pred,
               "predicted_speedup": pred["predicted_speedup"],
               "predicted_mixture": mixture_prediction(sources, cell.sources, probe)}
        if getattr(cell, "explore", None) is not None:
            row["auto_explore"] = dict(cell.explore)
        baseline = cells.get((task, t, NONE.label))
        if baseline is not None:
            row["baseline_ms_per_token"] = statistics.median(baseline.ms_per_token())
            row["speedup"] = spread(per_repeat_ratios(baseline, cell))
            median = row["speedup"]["median"]
            row["measured_over_predicted"] = median / row["predicted_speedup"] if row["predicted_speedup"] else None
            row["measured_over_mixture"] = median / row["predicted_mixture"] if row["predicted_mixture"] else None
            row["decode_speedup"] = spread(per_repeat_ratios(baseline, cell, decode_only=True))
        rows.append(row)
    return rows


def _ratio(a, b):
    return a / b if a is not None and b else None


def best_by_task(rows: list[dict]) -> dict:
    """task -> str(T) -> the configuration with the best measured speedup, the best fixed one (source and gamma
    fixed, `none` included: not auto, not NAME without :G), and auto's where the sweep has it: its speedups over the
    best fixed one's, and what it explored in the timed runs (row auto_explore)."""
    out: dict = {}
    for task, t in dict.fromkeys((r["task"], r["temperature"]) for r in rows):
        same = [r for r in rows if r["task"] == task and r["temperature"] == t and "speedup" in r]
        if not same:
            continue
        best = max(same, key=lambda r: r["speedup"]["median"])
        fixed = max((r for r in same if r["draft_name"] != "auto" and r["gamma"] != "auto"),
                    key=lambda r: r["speedup"]["median"], default=None)
        auto = next((r for r in same if r["draft"] == "auto"), None)
        b = out.setdefault(task, {})[str(t)] = {
            "best": best["draft"], "best_speedup": best["speedup"]["median"],
            "best_decode_speedup": best["decode_speedup"]["median"],
            "best_ms_per_token": best["ms_per_token"]["median"],
            "baseline_ms_per_token": best["baseline_ms_per_token"],
            "best_fixed": fixed and fixed["draft"],
            "best_fixed_speedup": fixed and fixed["speedup"]["median"],
            "best_fixed_decode_speedup": fixed and fixed["decode_speedup"]["median"],
            "auto_speedup": auto["speedup"]["median"] if auto else None,
            "auto_decode_speedup": auto["decode_speedup"]["median"] if auto else None,
            "auto_explore": auto.get("auto_explore") if auto else None}
        b["auto_over_best_fixed"] = _ratio(b["auto_speedup"], b["best_fixed_speedup"])
        b["auto_decode_over_best_fixed"] = _ratio(b["auto_decode_speedup"], b["best_fixed_decode_speedup"])
    return out


def greedy_agreement(outputs: dict) -> dict:
    """At T = 0 every configuration must give `none`'s tokens: task -> label -> {agree, prompts}."""
    out: dict = {}
    for (task, t, label), seqs in outputs.items():
        base = outputs.get((task, t, NONE.label))
        if t == 0 and base is not None:
            out.setdefault(task, {})[label] = {"agree": sum(a == b for a, b in zip(seqs, base)), "prompts": len(base)}
    return out
