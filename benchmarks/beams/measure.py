"""Beam search (`specdec-bench beams --export DIR --num-beams W`): target-only beam search, exact speculative beam
search at fixed gammas, gamma="auto", and transformers' own beam search on the same weights, per task, in one run.

Configurations (labels as the report spells them):

    none           specdec, draft="none": target-only beam search, the baseline every speedup is taken against
    draft:G        specdec, draft="draft", gamma=G: exact speculative beam search (runtime/decoding/beam_decode.py); its
                   outputs must equal none's, and every one is compared
    auto           specdec, draft="draft", gamma="auto": a speculative round of some gamma, or a target-only step,
                   chosen per round by measured beam steps per second (BeamEstimates)
    transformers   T5ForConditionalGeneration.generate(num_beams=W, do_sample=False, ...) on the checkpoint the
                   export was made from (PyTorch, fp32), the same prompts and beam settings

Order: the runs learn in a fresh `dec.learning()` (a cold start for auto), then one untimed warm-up pass runs every prompt with every
configuration (ONNX Runtime's arenas, PyTorch's first calls; auto learns its estimates here, and the target's and
the draft's run shapes are recorded for the cost probe). Then the repeats: the specdec configurations interleaved
per prompt (for each prompt, every configuration back to back, the list rotated by one position per prompt and per
repeat), and transformers as one block over all prompts after one unmeasured call (as --peers does: PyTorch's and
ONNX Runtime's worker threads keep spinning for a while after a call, so alternating engines prompt by prompt would
slow whichever runs next); the block comes before the specdec configurations in even repeats and after them in odd
ones. auto keeps learning during the timed repeats, as it would serving.

Per (task, configuration): ms per output token (wall time over the best sequence's tokens) and per request, the
speedup over none and over transformers (per repeat: their wall time over this configuration's on the same prompts,
median and min-max over repeats), beam steps per target call, speculative rounds and what they made, where the time
went (Stats: target_s, draft_s, encoder_s, host_s over total_s), and how many outputs equal none's (every prompt of
every repeat and of the warm-up pass).

Per-call costs: costs.py; the rows of the report and the predictions: summary.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from specdec.runtime import Params, SpecdecError, Stats

from ..common.runs import Cell, rotated, task_of, tasks_of

SUMMED = ("total_s", "requests", "new_tokens", "target_calls", "draft_calls", "target_s", "draft_s", "encoder_s",
          "host_s", "steps")
SOURCE_KEYS = ("rounds", "proposed", "accepted", "tokens")
TRANSFORMERS = "transformers"
DEFAULT_GAMMAS = (1, 2, 4)
ESTIMATES_NOTE = ("auto's estimates (dec.beam_estimates: beam steps per second by gamma, 0 = a target-only step) were "
                  "reset before the warm-up pass and learned on it; they keep learning during the timed repeats.")


@dataclass(frozen=True)
class BeamSettings:
    """What every configuration shares: transformers' generate arguments of the same names."""
    num_beams: int
    max_new_tokens: int
    early_stopping: object = False
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0

    def as_dict(self) -> dict:
        return {"num_beams": self.num_beams, "max_new_tokens": self.max_new_tokens,
                "early_stopping": self.early_stopping, "length_penalty": self.length_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size, "min_new_tokens": self.min_new_tokens}


@dataclass(frozen=True)
class BeamConfig:
    label: str           # "none", "draft:2", "auto", "transformers"
    draft: str           # the runtime's draft name ("none", "draft"); "" for transformers
    gamma: object        # an int, "auto", or None for transformers

    @property
    def specdec(self) -> bool:
        return self.label != TRANSFORMERS

    def params(self, settings: BeamSettings) -> Params:
        return Params.of(draft=self.draft, gamma=self.gamma, **settings.as_dict())

    def as_dict(self) -> dict:
        return {"label": self.label, "engine": "specdec" if self.specdec else TRANSFORMERS, "draft": self.draft,
                "gamma": self.gamma}


NONE = BeamConfig("none", "none", 0)
AUTO = BeamConfig("auto", "draft", "auto")
HF = BeamConfig(TRANSFORMERS, "", None)


def configs(gammas, auto: bool = True, transformers: bool = True) -> list[BeamConfig]:
    """none, draft:G for every gamma > 0 (in order, once), auto, transformers."""
    out = [NONE] + [BeamConfig(f"draft:{g}", "draft", g) for g in dict.fromkeys(int(g) for g in gammas) if g > 0]
    return out + ([AUTO] if auto else []) + ([HF] if transformers else [])


def check(dec, cfgs, settings: BeamSettings) -> None:
    """Every specdec configuration's parameters are valid for this export (one-line errors)."""
    if any(c.specdec and c.draft == "draft" for c in cfgs) and "draft" not in dec.manifest.models:
        raise SpecdecError("speculative beam search needs the export's draft model 'draft'",
                           "export a pair, or run --num-beams with --gamma 0 (target-only beam search)")
    for c in cfgs:
        if c.specdec:
            try:
                c.params(settings).checked(dec.gamma_max)
            except SpecdecError as err:
                raise SpecdecError(f"--num-beams {settings.num_beams}, {c.label}: {err.problem}", err.fix) from None


# -- transformers -----------------------------------------------------------------------------------------------

class TransformersBeam:
    """transformers' beam search on the target checkpoint, with the benchmark's beam settings."""

    def __init__(self, model, eos_id: int, settings: BeamSettings):
        import torch

        self.torch, self.model, self.eos_id, self.settings = torch, model, eos_id, settings

    def run(self, ids: list) -> list:
        from ..common.peer_engines import normalize

        torch, s = self.torch, self.settings
        x = torch.tensor([ids], dtype=torch.long)
        with torch.inference_mode():
            out = self.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                      num_beams=s.num_beams, num_return_sequences=1,
                                      max_new_tokens=s.max_new_tokens, early_stopping=s.early_stopping,
                                      length_penalty=s.length_penalty, no_repeat_ngram_size=s.no_repeat_ngram_size,
                                      min_new_tokens=s.min_new_tokens)
        return normalize(out[0].tolist(), self.eos_id, drop_first=True)


def load_transformers(dec, settings: BeamSettings, checkpoint: str | None, threads: int):
    """(TransformersBeam or None, status, checkpoint path): the target checkpoint of the export's manifest unless
    given; "not installed" / the error when it cannot run."""
    from pathlib import Path

    from ..common.peer_engines import load_hf
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
        return None, "not installed (pip install 'specdec[export]')", path
    return TransformersBeam(model, special_id(dec, "eos_token_id"), settings), "ok", path


# -- the run ----------------------------------------------------------------------------------------------------

class ShapeCensus:
    """Records the (rows, tokens) of every run of a BeamModel while active (untimed passes only): the instance's
    `run` is wrapped and put back on exit."""

    def __init__(self, model):
        self.model, self.shapes = model, []

    def __enter__(self):
        run = self.model.run

        def recording(tokens):
            self.shapes.append(tuple(int(n) for n in tokens.shape))
            return run(tokens)

        self.model.run = recording
        return self

    def __exit__(self, *exc):
        del self.model.run                  # the class's method again
        return False


class BeamCell(Cell):
    """One (task, configuration): sums over the task's prompts, one entry per repeat, and Stats.sources pooled."""
    summed = SUMMED
    source_keys = SOURCE_KEYS

    def stat(self, key: str, stats: Stats) -> float:
        return sum(s.tokens for s in stats.sources.values()) if key == "steps" else super().stat(key, stats)

    def add_wall(self, repeat: int, seconds: float, new_tokens: int) -> None:
        """A request timed from outside (transformers): wall time and output length only."""
        r = self.repeat_sums(repeat)
        r["total_s"] += seconds
        r["requests"] += 1
        r["new_tokens"] += new_tokens

    def seconds(self) -> list:
        return [r["total_s"] for r in self.per_repeat]


def estimates_snapshot(est) -> dict:
    """What gamma="auto" learned (BeamEstimates): beam steps per second by gamma (0 = a target-only step; decayed
    sums of steps over decayed seconds), the rounds each gamma ran, and the gamma with the best rate."""
    try:
        rates = est.rates()
        return {"steps_per_s": {str(g): r for g, r in rates.items()},
                "rounds_seen": {str(g): n for g, n in sorted(est.seen.items())},
                "best": max(rates, key=rates.get) if rates else None}
    except (AttributeError, TypeError, ValueError) as err:      # the runtime changed what it keeps: report it
        return {"unavailable": f"{type(err).__name__}: {err}"}


def run_beams(dec, prompts, cfgs, settings: BeamSettings, repeats: int, hf=None, progress=None):
    """Run everything (module docstring). Returns (cells {(task, label): BeamCell}, equality {(task, label):
    {equal, compared, first_mismatch}} against none, agreement of none with transformers likewise under
    (task, "transformers"), shapes {"target"|"draft": [(rows, tokens)]} of the warm-up pass, what the runs learned
    (`dec.learning()`, fresh: a cold start for auto) and its estimates snapshot after the warm-up pass)."""
    tasks = list(tasks_of(prompts))
    spec = [c for c in cfgs if c.specdec]
    use_hf = hf is not None and any(not c.specdec for c in cfgs)
    labels = [c.label for c in spec] + ([TRANSFORMERS] if use_hf else [])
    cells = {(task, label): BeamCell() for task in tasks for label in labels}
    equality = {(task, label): {"equal": 0, "compared": 0, "first_mismatch": None}
                for task in tasks for label in labels if label != NONE.label}
    params = {c.label: c.params(settings) for c in spec}
    reference: dict = {}                      # (pass, prompt index) -> none's sequences
    hf_outputs: dict = {}                     # (pass, prompt index) -> [transformers' tokens]

    def tick():
        if progress:
            progress.update(1)

    def compare(key, pass_id, i, seqs):
        ref = reference.get((pass_id, i))
        if ref is None or key not in equality:
            return
        e = equality[key]
        e["compared"] += 1
        if seqs == ref:
            e["equal"] += 1
        elif e["first_mismatch"] is None:
            e["first_mismatch"] = {"pass": pass_id, "prompt": i}

    def run_spec(pass_id, i, p, config, repeat=None):
        res = dec.generate(input_ids=p.ids, params=params[config.label], learned=learning)
        seqs = [list(s) for s in res.sequences]
        if config.label == NONE.label:
            reference[(pass_id, i)] = seqs
        if repeat is not None:
            cells[(task_of(p), config.label)].add(repeat, res.stats)
        return seqs

    def spec_pass(pass_id, shift, repeat=None):
        for i, p in enumerate(prompts):
            order = rotated(spec, shift + i)
            got = {}
            for c in order:
                got[c.label] = run_spec(pass_id, i, p, c, repeat)
                tick()
            for label, seqs in got.items():       # none ran somewhere in the order: compare once all are in
                compare((task_of(p), label), pass_id, i, seqs)

    def hf_pass(pass_id, repeat=None):
        if not use_hf:
            return
        if repeat is not None:
            hf.run(prompts[0].ids)                # unmeasured: PyTorch's threads spin up
            tick()
        for i, p in enumerate(prompts):
            t = time.perf_counter()
            out = hf.run(p.ids)
            seconds = time.perf_counter() - t
            if repeat is not None:
                cells[(task_of(p), TRANSFORMERS)].add_wall(repeat, seconds, len(out))
            hf_outputs[(pass_id, i)] = [out]
            tick()

    learning = dec.learning()            # a cold start for auto
    target_model = dec.beam_model("target")
    models = {"target": target_model}
    if any(c.draft == "draft" for c in spec):
        models["draft"] = dec.beam_model("draft")
    censuses = {name: ShapeCensus(m) for name, m in models.items()}
    with contextlib.ExitStack() as stack:
        for census in censuses.values():
            stack.enter_context(census)
        spec_pass("warmup", 0)
    hf_pass("warmup")
    learned = estimates_snapshot(learning.beam_estimates)
    for r in range(repeats):
        blocks = [lambda r=r: spec_pass(r, r, r), lambda r=r: hf_pass(r, r)]
        for block in (blocks if r % 2 else blocks[::-1]):
            block()
    if use_hf:
        for (pass_id, i), out in hf_outputs.items():
            compare((task_of(prompts[i]), TRANSFORMERS), pass_id, i, out)
    shapes = {name: census.shapes for name, census in censuses.items()}
    return cells, equality, shapes, learning, learned
