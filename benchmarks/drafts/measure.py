"""The draft-source sweep (`specdec-bench drafts --draft none draft lookup lookup,draft auto`): which source of
guesses pays, per task and temperature, on the same sessions and prompts.

A configuration is a draft name as the runtime takes it (Params.draft: "none", "lookup", a draft model's name, a
chain such as "lookup,draft", or "auto") with a gamma:
"lookup" searches the output and the source only, ",datastore" adds the export's datastore ("lookup,datastore",
"lookup,datastore,draft"), and "auto" is the runtime's default, with the datastore when the export has one;
`NAME:G` fixes it (e.g. `draft:3`), `NAME` alone runs with gamma="auto" (the runtime picks it each round from what
it learned, runtime/decoding/auto.py). `NAME*B` sets Params.candidates: a lookup round verifies up to B
continuations in one target run, as a token tree (`lookup,datastore*4`, `lookup,datastore*4:8`); without it the
runtime's default, 0 (auto, runtime/decoding/width.py). `none` is target-only decoding (gamma 0), the baseline; it is always added.

Order: temperature by temperature. Each temperature starts from fresh auto estimates (the learned state's `reset()`),
then one untimed warm-up pass generates every prompt with every configuration (it allocates ONNX Runtime's arenas
and is what auto's estimates -- kept across the requests of a decoder -- are learned on), then the timed repeats:
for each repeat, for each prompt, every configuration back to back, the list rotated by one position per prompt and
per repeat, so a configuration and its baseline are never more than a few generate calls apart and drift hits all
alike. The prompts alternate between tasks (prompts.select), so auto's estimates follow a mixed workload, as they
would serving one. A prompt is generated from what it holds (Prompt.kwargs): token ids, or on a Whisper export its
audio samples and language.

Results are grouped by the prompts' task: per (task, temperature, configuration), ms per generated token, the
speedup over `none` (per repeat, same task and temperature, median over repeats), both again without the encoder
runs (decode-only: Stats.encoder_s left out, so a long source, or a Whisper export's encoder, a large fixed cost
per request that no draft touches, does not dilute the loop's speed), tokens per target call, and per source
(Stats.sources) its per-guess alpha = accepted / (accepted + rejections) and its share of the tokens. The
prediction for the configuration's dominant source s (the proposing source with the most tokens) is Theorem 3.8 with
measured costs: E(alpha_s, g) / (g c_s + T(g)/T(0)), g the mean guesses s proposed per round, T(g)/T(0) the cost
probe's target run over g+1 tokens over its one-token step (interpolated at a mean g), c_s from the probe: the draft
step over the target step for the draft model, 0 for a lookup, and for "lookup,draft" the draft step times the draft
runs per guess ((proposed - guesses the draft kept of the lookup's) / proposed: one draft run checks several copied
tokens). The mixture prediction weighs every kind of round the configuration had (target-only rounds included: a
lookup that finds nothing is a plain step).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specdec.runtime import Params, SpecdecError

from ..common import theory
from ..common.runs import Cell, per_repeat_ratios, rotated, seed_for, spread, task_of, tasks_of

ESTIMATES_NOTE = ("auto's estimates (draft=auto, and gamma=auto of every other configuration) were reset at the start "
                  "of each temperature and learned on its warm-up pass (one untimed generate per prompt and "
                  "configuration); they keep learning during the timed runs.")
SOURCE_KEYS = ("rounds", "proposed", "accepted", "rejections", "tokens")
WARMUP_SEED = 10 ** 6          # the warm-up pass's seeds: 10**6 + prompt index (the timed runs': seed_for)


@dataclass(frozen=True)
class DraftConfig:
    label: str          # as the report spells it: "none", "draft:3", "lookup,draft", "lookup,datastore", "auto"
    draft: str          # as the runtime takes it: "none", "draft", "lookup,draft", "auto"
    gamma: object       # an int (fixed) or "auto"
    store: bool = False     # the lookup also searches the export's datastore (",datastore"; "auto" always does)
    candidates: int = 0     # Params.candidates ("*B"; 0: the runtime chooses)

    @property
    def uses_store(self) -> bool:
        return self.store or self.draft == "auto"

    def params(self, base: Params, temperature: float, max_new_tokens: int) -> Params:
        return Params.of(base, draft=self.draft, gamma=self.gamma, temperature=temperature,
                         max_new_tokens=max_new_tokens, candidates=self.candidates)

    def as_dict(self) -> dict:
        return {"label": self.label, "draft": self.draft, "gamma": self.gamma, "candidates": self.candidates}


NONE = DraftConfig("none", "none", 0)


def parse_item(item: str) -> DraftConfig:
    """One --draft entry: NAME, NAME:G, NAME*B or NAME*B:G; NAME a draft name, or a chain with "," between its levels
    lowest first (lookup,draft; "+" is the earlier spelling of ",")."""
    name, colon, gamma_text = item.strip().partition(":")
    name, star, width_text = name.partition("*")
    candidates = _integer(width_text, item, "the number of candidates after '*'",
                          "e.g. lookup,datastore*4 or lookup,datastore*4:8") if star else 0
    levels = [p.strip() for p in name.replace("+", ",").split(",")]
    if not name.strip() or any(not p for p in levels):
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
    runtime_name = ",".join(levels)
    if not colon:
        return NONE if label == "none" else DraftConfig(label, runtime_name, "auto", store, candidates)
    gamma = _integer(gamma_text, item, "the gamma after ':'", "e.g. draft:3, or the name alone for gamma=auto")
    if gamma < 0:
        raise SpecdecError(f"--draft entry '{item}': gamma must be >= 0")
    if label == "none" or gamma == 0:
        if label != "none":
            raise SpecdecError(f"--draft entry '{item}': gamma 0 is target-only decoding", "write none")
        return NONE
    return DraftConfig(f"{label}:{gamma}", runtime_name, gamma, store, candidates)


def _integer(text: str, item: str, what: str, fix: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecdecError(f"--draft entry '{item}': {what} must be an integer", fix) from None


def parse_configs(texts) -> list[DraftConfig]:
    """The configurations of the --draft option (one entry per argument, repeatable), `none` first, duplicates
    dropped. An argument with a "+" is the earlier form, a comma-separated list with "+" inside chains (lookup+draft),
    accepted for one release."""
    configs = [parse_item(item) for text in texts for item in (text.split(",") if "+" in text else [text])
               if item.strip()]
    if not configs:
        raise SpecdecError("--draft is empty", "e.g. --draft none draft lookup lookup,draft auto")
    return list({c.label: c for c in [NONE] + configs}.values())


def check_configs(dec, configs, base: Params) -> None:
    """Every configuration is valid for this export (draft names, gamma <= gamma_max, a datastore where asked):
    one-line errors."""
    for config in configs:
        if config.store and dec.datastore is None:
            raise SpecdecError(f"--draft {config.label}: this export has no datastore",
                               "export with specdec-export --datastore-text TEXT, or drop ,datastore")
        try:
            params = config.params(base, 0.0, 1).checked(dec.gamma_max)
            dec.source(params)
        except SpecdecError as err:
            raise SpecdecError(f"--draft {config.label}: {err.problem}", err.fix) from None


class DraftCell(Cell):
    """One (task, temperature, configuration): Stats sums per repeat and Stats.sources summed over every timed run."""
    source_keys = SOURCE_KEYS


def estimates_snapshot(est) -> dict:
    """What draft="auto" and gamma="auto" have learned (runtime/decoding/auto.py Estimates), in ms: per-guess alpha and
    cost per guess by source, the target run by guesses k (the line fitted to the measured runs), the host time of a
    target-only round."""
    try:
        return {"alpha": {name: est.alpha(name) for name in est.counts},
                "cost_per_guess_ms": {name: 1000.0 * max(m.get(0.0), 0.0) for name, m in est.cost.items()},
                "target_run_ms": {str(k): 1000.0 * t for k, t in enumerate(est.times(8))},   # the fitted line
                "host_ms_per_round": 1000.0 * est.host.get(0.0),
                "rounds": est.round}
    except (AttributeError, TypeError) as err:         # the runtime changed what it keeps: report, do not fail
        return {"unavailable": f"{type(err).__name__}: {err}"}


def switch_snapshot(dec, learned) -> dict:
    """Where draft="auto"'s switch (runtime/decoding/switch.py) stands in `learned`: the measured ms per token of
    auto's rounds and of plain target steps, which leads (True: auto's rounds, None: still measuring) and the
    other's share of the rounds now."""
    try:
        switch = dec.source(Params(draft="auto"), learned=learned).switch
        ms = {mode: switch.seconds_per_token(mode) for mode in (True, False)}
        return {"auto_ms_per_token": None if ms[True] is None else 1000.0 * ms[True],
                "plain_ms_per_token": None if ms[False] is None else 1000.0 * ms[False],
                "auto_rounds_lead": switch.lead, "slower_share": switch.share()}
    except (AttributeError, TypeError) as err:
        return {"unavailable": f"{type(err).__name__}: {err}"}


def run_drafts(dec, prompts, configs, temperatures, max_new_tokens: int, repeats: int, progress=None,
               base: Params | None = None):
    """Run everything (module docstring). Returns ({(task, T, label): DraftCell}, {(task, T, label): [token ids of
    repeat 0, one per prompt of the task]}, {T: estimates_snapshot after the warm-up pass}).

    Every configuration runs on the one decoder and its workspace, learning in an object of its kind passed per
    request (`learned=`): the decoder's own (`dec.learned`, with the export's datastore) for the configurations that
    search the datastore, `dec.learning(datastore=False)` for the others (a lookup over the output and the source
    only, and auto estimates of their own). Two decoders of one export, generating the same target-only requests
    alternately, differed by 2-3 % (which one was faster depended on the order they were loaded), enough to hide
    what is measured."""
    base = base or Params()
    kinds = {True: dec.learned, False: dec.learning(datastore=False) if dec.datastore is not None else dec.learned}
    uses = {c.label: kinds[c.uses_store] for c in configs}
    tasks = list(tasks_of(prompts))
    cells = {(task, t, c.label): DraftCell() for t in temperatures for task in tasks for c in configs}
    outputs = {key: [] for key in cells}
    learned = {}

    def tick():
        if progress:
            progress.update(1)

    for t in temperatures:
        params = {c.label: c.params(base, t, max_new_tokens) for c in configs}
        for kind in {id(k): k for k in kinds.values()}.values():
            kind.reset()
        for i, p in enumerate(prompts):              # warm-up: untimed; auto learns its estimates here
            for c in rotated(configs, i):
                dec.generate(**p.kwargs(), params=params[c.label], seed=WARMUP_SEED + i, learned=uses[c.label])
                tick()
        learned[t] = {**estimates_snapshot(kinds[True].estimates), "switch": switch_snapshot(dec, kinds[True])}
        for r in range(repeats):
            for i, p in enumerate(prompts):
                for c in rotated(configs, r + i):
                    res = dec.generate(**p.kwargs(), params=params[c.label], seed=seed_for(r, i),
                                       learned=uses[c.label])
                    key = (task_of(p), t, c.label)
                    cells[key].add(r, res.stats)
                    if r == 0:
                        outputs[key].append(list(res.token_ids))
                    tick()
        learned[t]["switch_at_end"] = switch_snapshot(dec, kinds[True])
    return cells, outputs, learned


# -- summaries ---------------------------------------------------------------------------------------------------

def is_target_level(name: str) -> bool:
    """A source verified by the target ("none", "draft", "lookup,draft"), not a chain's lower level ("lookup>")."""
    return not name.endswith(">")


def source_rows(sums: dict) -> dict:
    """name -> the summed counts, alpha (None without a tested guess), mean guesses per round and, for the sources
    the target verified, tokens per round (what E(alpha, g) predicts) and the share of the tokens (of all
    target-level tokens)."""
    total = sum(s["tokens"] for name, s in sums.items() if is_target_level(name))
    out = {}
    for name, s in sums.items():
        tested = s["accepted"] + s["rejections"]
        out[name] = {**s, "alpha": s["accepted"] / tested if tested else None,
                     "mean_proposed": s["proposed"] / s["rounds"] if s["rounds"] else 0.0,
                     "tokens_per_round": s["tokens"] / s["rounds"] if s["rounds"] and is_target_level(name) else None,
                     "share": s["tokens"] / total if is_target_level(name) and total else None}
    return out


def source_cost(name: str, sums: dict, probe: dict) -> float | None:
    """c of a source in target steps per guess (module docstring); None where the probe measured nothing for it."""
    c = probe.get("c")
    if name in ("lookup", "datastore"):         # copies: no model run
        return 0.0
    if name == "draft":
        return c
    if name == "lookup,draft" and c is not None:
        proposed = sums[name]["proposed"]
        kept = sums.get("lookup>", {}).get("accepted", 0)
        return c * max(proposed - kept, 0) / proposed if proposed else c
    return None


def dominant_source(sources: dict) -> str:
    """The proposing source (target level, not "none") with the most tokens; "none" when nothing was proposed."""
    proposing = [(s["tokens"], name) for name, s in sources.items() if is_target_level(name) and name != "none"
                 and s["rounds"]]
    return max(proposing)[1] if proposing else "none"


def prediction(name: str, sources: dict, sums: dict, probe: dict) -> dict:
    """Theorem 3.8 with measured costs for one source: alpha, the mean gamma g, c, T(g)/T(0), E, the speedup."""
    if name == "none":
        return {"source": "none", "alpha": None, "mean_gamma": 0.0, "c": 0.0, "verify_cost": 1.0,
                "expected_tokens": 1.0, "tokens_per_round": 1.0, "predicted_speedup": 1.0}
    s = sources[name]
    g, alpha = s["mean_proposed"], s["alpha"]
    c = source_cost(name, sums, probe)
    v = theory.verify_cost(probe.get("verify_ratio"), g)
    out = {"source": name, "alpha": alpha, "mean_gamma": g, "c": c, "verify_cost": v,
           "expected_tokens": theory.expected_tokens_at(alpha, g) if alpha is not None else None,
           "tokens_per_round": s["tokens_per_round"],
           "predicted_speedup": None}
    if None not in (alpha, c, v):
        out["predicted_speedup"] = theory.speedup_with_verify_cost(alpha, g, c, v)
    return out


def mixture_prediction(sources: dict, sums: dict, probe: dict) -> float | None:
    rounds = []
    for name, s in sources.items():
        if not is_target_level(name) or not s["rounds"]:
            continue
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
        config = by_label[label]
        pooled = cell.pooled()
        ms = cell.ms_per_token()
        baseline = cells.get((task, t, NONE.label))
        sources = source_rows(cell.sources)
        dominant = dominant_source(sources)
        pred = prediction(dominant, sources, cell.sources, probe)
        tokens = max(pooled["new_tokens"], 1)
        row = {"task": task, "temperature": t, "draft": label, "draft_name": config.draft, "gamma": config.gamma,
               "repeats": len(ms), "requests": pooled["requests"], "new_tokens": pooled["new_tokens"],
               "target_calls": pooled["target_calls"], "draft_calls": pooled["draft_calls"],
               "ms_per_token": spread(ms), "tokens_per_s": 1000.0 / statistics.median(ms),
               "decode_ms_per_token": spread(cell.ms_per_token(decode_only=True)),
               "tokens_per_target_call": pooled["new_tokens"] / max(pooled["target_calls"], 1),
               "draft_calls_per_token": pooled["draft_calls"] / tokens,
               "ms_per_token_by_part": {part: 1000.0 * pooled[f"{part}_s"] / tokens
                                        for part in ("encoder", "draft", "target", "host")},
               "sources": sources, "dominant_source": dominant, "prediction": pred,
               "predicted_speedup": pred["predicted_speedup"],
               "predicted_mixture": mixture_prediction(sources, cell.sources, probe)}
        if baseline is not None:
            speedups = per_repeat_ratios(baseline, cell)
            row["baseline_ms_per_token"] = statistics.median(baseline.ms_per_token())
            row["speedup"] = spread(speedups)
            median = row["speedup"]["median"]
            row["measured_over_predicted"] = (median / row["predicted_speedup"]
                                              if row["predicted_speedup"] else None)
            row["measured_over_mixture"] = median / row["predicted_mixture"] if row["predicted_mixture"] else None
            row["decode_speedup"] = spread(per_repeat_ratios(baseline, cell, decode_only=True))
        rows.append(row)
    return rows


def best_by_task(rows: list[dict]) -> dict:
    """Per task and temperature (keys task, then str(T)): the configuration with the best measured speedup, and
    auto's where the sweep has it."""
    out: dict = {}
    for task, t in dict.fromkeys((r["task"], r["temperature"]) for r in rows):
        same = [r for r in rows if r["task"] == task and r["temperature"] == t and "speedup" in r]
        if not same:
            continue
        best = max(same, key=lambda r: r["speedup"]["median"])
        auto = next((r for r in same if r["draft"] == "auto"), None)
        out.setdefault(task, {})[str(t)] = {
            "best": best["draft"], "best_speedup": best["speedup"]["median"],
            "best_decode_speedup": best["decode_speedup"]["median"],
            "best_ms_per_token": best["ms_per_token"]["median"],
            "baseline_ms_per_token": best["baseline_ms_per_token"],
            "auto_speedup": auto["speedup"]["median"] if auto else None,
            "auto_decode_speedup": auto["decode_speedup"]["median"] if auto else None}
    return out


def greedy_agreement(outputs: dict) -> dict:
    """At temperature 0 every configuration must give `none`'s tokens (exactness): task -> label -> {agree,
    prompts}."""
    out: dict = {}
    for (task, t, label), seqs in outputs.items():
        base = outputs.get((task, t, NONE.label))
        if t != 0 or base is None:
            continue
        out.setdefault(task, {})[label] = {"agree": sum(a == b for a, b in zip(seqs, base)), "prompts": len(base)}
    return out
