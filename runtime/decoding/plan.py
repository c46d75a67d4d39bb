"""The request plan: what a checked request runs, decided once. `plan()` is the only reader of a request's gamma,
draft and num_beams; the strategies (Sampling and BeamSearching in request.py, a batch's rows in batch.py) and the
sources (learned.py) receive the plan and never see "auto".

    where          "sampling" (speculative sampling, greedy included), "beams" (beam search) or "batch" (a row of a
                   batch, whose guesses come from the lookup)
    source         the source's name (a draft model, "lookup", or a chain lowest level first: "lookup,draft"), a
                   DraftSource object the request passed, or None: target only, or auto's pick (choose_source)
    choose_source  the source is picked each round among none, lookup, draft and lookup,draft (draft="auto")
    gamma          guesses per round: fixed, or the most the adaptive choice may take
    adaptive       gamma is chosen each round from measured acceptance and costs (gamma="auto")
    num_beams      beam search's width (1 otherwise)

What `draft=` may say:

    "none"               target only (as gamma = 0)
    "lookup"             copy from the output so far, the source and the export's datastore (decoding/sources/lookup.py)
    "draft", or another  a draft model of the export (specdec-export --draft NAME=CHECKPOINT adds more)
    model name
    "a,b,...,m"          a chain, lowest level first: a proposes to b, which verifies and proposes to ..., m
                         proposes to the target (decoding/sources/model_draft.py). "lookup" may only come first; "+" is
                         the earlier spelling of ",".
    "auto"               each round, the best of none, lookup, draft and lookup,draft (decoding/sources/auto.py)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import SpecdecError
from ..core.params import Params
from .sources.contract import DraftSource

AUTO = "auto"
BATCH_GAMMA = 4          # a lookup row's most guesses a round at gamma="auto": every row's run grows with the widest


def choices(models) -> str:
    if not models:              # a target-only export (specdec-export --target alone)
        return "none, auto or lookup"
    names = ["none", "auto", "lookup", *models]
    chains = ["lookup," + m for m in models]
    return ", ".join(names + chains[:1]) + " or any chain of them, lowest level first (e.g. 'lookup," + \
        ",".join(models) + "')"


def parse(spec: str, models) -> list[str]:
    """The chain's levels, lowest first; a one-line SpecdecError naming the choices for anything else."""
    if not isinstance(spec, str):
        raise SpecdecError(f"draft must be a name or a DraftSource (got {type(spec).__name__})",
                           f"use {choices(models)}")
    parts = [p.strip() for p in spec.replace("+", ",").split(",")]
    if not spec.strip() or any(not p for p in parts):
        raise SpecdecError(f"draft chain {spec!r} is empty or has an empty level", f"use {choices(models)}")
    if len(parts) > 1 and ({"none", "auto"} & set(parts)):
        raise SpecdecError(f"draft chain {spec!r}: 'none' and 'auto' cannot be chain levels",
                           f"use {choices(models)}")
    for p in parts:
        if p not in ("none", "auto", "lookup") and p not in models:
            raise SpecdecError(f"unknown draft {p!r}" + (f" in chain {spec!r}" if len(parts) > 1 else "") +
                               (" (this export's draft models: " + ", ".join(models) + ")" if models else
                                " (this export has no draft model)"),
                               f"use {choices(models)}, or export " +
                               ("another draft with specdec-export --draft NAME=CHECKPOINT" if models else
                                "the target again with a draft: specdec-export --target ... --draft CHECKPOINT"))
    if "lookup" in parts[1:]:
        raise SpecdecError(f"draft chain {spec!r}: 'lookup' verifies nothing, so it can only be the first level",
                           f"use {choices(models)}")
    if len(set(parts)) < len(parts):
        raise SpecdecError(f"draft chain {spec!r} names a level twice (one model has one cache)",
                           f"use {choices(models)}")
    return parts


@dataclass(frozen=True)
class Plan:
    where: str
    source: object = None
    choose_source: bool = False
    gamma: int = 0
    adaptive: bool = False
    candidates: int = 0
    num_beams: int = 1

    @property
    def speculative(self) -> bool:
        """Whether rounds propose guesses at all (False: target-only decoding)."""
        return self.choose_source or self.source is not None


def plan(params: Params, models, gamma_max: int, batch: bool = False) -> Plan:
    """The plan of a checked request on an export with these draft models (names) and gamma_max, alone or as a row
    of a batch; a one-line SpecdecError for a draft that way of decoding does not run."""
    adaptive = params.gamma == AUTO
    gamma = gamma_max if adaptive else int(params.gamma)
    if batch:
        return _row(params, adaptive, gamma)
    if params.num_beams > 1:
        return _beams(params, list(models), adaptive, gamma)
    if isinstance(params.draft, DraftSource):
        on = adaptive or gamma > 0
        return Plan("sampling", params.draft if on else None, False, gamma, adaptive, params.candidates)
    parts = parse(params.draft, list(models))
    if (gamma == 0 and not adaptive) or parts == ["none"]:
        return Plan("sampling", candidates=params.candidates)
    if parts == [AUTO]:
        return Plan("sampling", None, True, gamma, adaptive, params.candidates)
    return Plan("sampling", ",".join(parts), False, gamma, adaptive, params.candidates)


def plans(params: Params, models, gamma_max: int) -> tuple:
    """A checked request planned once both ways: (its plan alone, its plan as a row of a batch), each a Plan or the
    SpecdecError that says why that way does not run it."""
    out = []
    for batch in (False, True):
        try:
            out.append(plan(params, models, gamma_max, batch))
        except SpecdecError as err:
            out.append(err)
    return tuple(out)


def _beams(params: Params, models: list, adaptive: bool, gamma: int) -> Plan:
    """Beam search speculates with one draft model (or none): the name is parsed as for sampling, and must then be
    "none", "auto" (the model named "draft", if the export has one) or one draft model."""
    parts = parse(params.draft, models) if isinstance(params.draft, str) else None
    if (gamma == 0 and not adaptive) or parts == ["none"]:
        return Plan("beams", num_beams=params.num_beams)
    if parts == [AUTO]:
        source = "draft" if "draft" in models else None
    elif parts is not None and len(parts) == 1 and parts[0] in models:
        source = parts[0]
    else:
        raise SpecdecError(f"beam search speculates with a draft model, not with draft={params.as_dict()['draft']!r}",
                           f"use draft='auto', 'none' or one of {', '.join(models) or '(none in this export)'}")
    if source is None:
        return Plan("beams", num_beams=params.num_beams)
    return Plan("beams", source, False, gamma, adaptive, num_beams=params.num_beams)


def _row(params: Params, adaptive: bool, gamma: int) -> Plan:
    """A batch row: target steps, or the lookup's copies; a one-line error for what a batch does not run."""
    if params.num_beams > 1:
        raise SpecdecError("beam search cannot run in a batch", "generate it alone with generate(num_beams=...)")
    if params.min_new_tokens or params.no_repeat_ngram_size:
        raise SpecdecError("logits processors (min_new_tokens, no_repeat_ngram_size) do not run in a batch yet",
                           "generate this request alone with generate()")
    if params.lenience != 1:
        raise SpecdecError("lenience < 1 does not run in a batch", "generate this request alone with generate()")
    if (gamma == 0 and not adaptive) or params.draft == "none":
        return Plan("batch")
    if params.draft in (AUTO, "lookup"):
        return Plan("batch", "lookup", False, BATCH_GAMMA if adaptive else gamma, adaptive)
    raise SpecdecError(f"draft={params.draft!r} does not run in a batch: a batch's guesses come from the lookup",
                       "use draft='auto', 'lookup' or 'none' in generate_batch, or generate this request alone")
