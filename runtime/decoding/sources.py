"""Draft names: what `draft=` may say, and the DraftSource each name builds.

    "none"               target only (as gamma = 0)
    "lookup"             copy from the output so far, the source and the export's datastore (runtime/decoding/lookup.py)
    "draft", or another  a draft model of the export (specdec-export --draft NAME=CHECKPOINT adds more)
    model name
    "a,b,...,m"          a chain, lowest level first: a proposes to b, which verifies and proposes to ..., m
                         proposes to the target (runtime/decoding/draft.py). "lookup" may only come first. "+" may stand
                         for "," ("lookup+draft", handy where a list is comma-separated, as in specdec-bench).
    "auto"               each round, the best of none, lookup, draft and lookup,draft (runtime/decoding/auto.py)
"""

from __future__ import annotations

from ..core.errors import SpecdecError
from ..core.params import Params
from .auto import AutoDraft, Estimates
from .beam_decode import BeamEstimates
from .draft import DraftSource, ModelDraft
from .lookup import LookupDraft
from .width import Width

AUTO_CANDIDATES = ("lookup", "draft", "lookup,draft")


def choices(models) -> str:
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
                               " (this export's draft models: " + ", ".join(models) + ")",
                               f"use {choices(models)}, or export another draft with specdec-export --draft "
                               f"NAME=CHECKPOINT")
    if "lookup" in parts[1:]:
        raise SpecdecError(f"draft chain {spec!r}: 'lookup' verifies nothing, so it can only be the first level",
                           f"use {choices(models)}")
    if len(set(parts)) < len(parts):
        raise SpecdecError(f"draft chain {spec!r} names a level twice (one model has one cache)",
                           f"use {choices(models)}")
    return parts


def build(parts: list[str], models: dict, lookup: LookupDraft | None = None, datastore=None,
          tokenizer_size: int | None = None) -> DraftSource:
    """The source for a parsed chain (not "none" or "auto"); `models`: name -> CachedSeq2Seq; `lookup`: the
    LookupDraft to use (when None, a new one searching `datastore` too, if given, and proposing no id at or past
    `tokenizer_size`)."""
    source = None
    for i, part in enumerate(parts):            # level 0 proposes to the target, level len - 1 is the lowest
        if part == "lookup":
            source = lookup or LookupDraft(datastore=datastore, tokenizer_size=tokenizer_size)
        else:
            source = ModelDraft(models[part], below=source, name=",".join(parts[:i + 1]), level=len(parts) - 1 - i)
    return source


class Sources:
    """What a request's `draft` and `gamma` resolve to on one decoder, for sampling and for beam search alike: the
    sources (made on first use and kept, so a lookup's or a model's state is not rebuilt per request), what auto
    learns across requests (`estimates`, and `beam_estimates` for beam search's gamma), and `datastore`, what the
    lookups search besides the output and the source. `tokenizer_size`: the ids a lookup may propose
    (runtime/loading/vocabulary.py)."""

    def __init__(self, models: dict, datastore=None, tokenizer_size: int | None = None):
        self.models, self.datastore, self.tokenizer_size = models, datastore, tokenizer_size
        self.reset()

    def reset(self) -> None:
        """Forget the sources made and what auto learned."""
        self.beam_estimates, self._made, self._object_auto = BeamEstimates(), {}, (None, None)
        self.width = Width()        # how many candidates a lookup round verifies, when a request leaves it open

    @property
    def estimates(self) -> Estimates:
        """What the default request (draft="auto", gamma="auto", candidates=0) has learned. Each kind of
        gamma="auto" request (its draft and candidates) learns its own: their rounds cost differently (a lookup
        asked for 4 candidates searches the datastore for them), and one kind's costs would mislead another's
        choice."""
        return self.for_sampling(Params()).estimates

    def for_sampling(self, params: Params) -> DraftSource | None:
        """The source a sampling request asks for; None for target-only decoding. A bad name is a one-line
        SpecdecError naming the choices."""
        draft, gamma = params.draft, params.gamma
        if isinstance(draft, DraftSource):
            if isinstance(draft, LookupDraft):      # a lookup object proposes to the target itself
                draft.top, draft.chooser = gamma != "auto", draft.chooser or self.width
            if gamma != "auto":
                return None if gamma == 0 else draft
            key = (draft, params.candidates)    # kept, with what it learned, while requests pass the same object;
            if self._object_auto[0] != key:     # one slot, so a new object per request does not pile them up
                self._object_auto = (key, AutoDraft({draft.name: draft}, Estimates()))
            return self._object_auto[1]
        parts = parse(draft, list(self.models))
        if gamma == 0 or parts == ["none"]:
            return None
        draft = ",".join(parts)                  # one spelling per chain ("lookup+draft" is "lookup,draft")
        key = (draft, gamma == "auto", params.candidates if gamma == "auto" else None)
        if key not in self._made:
            if parts == ["auto"]:
                lookup = LookupDraft(datastore=self.datastore, tokenizer_size=self.tokenizer_size)
                made = {spec: build(spec.split(","), self.models, lookup) for spec in AUTO_CANDIDATES
                        if all(p == "lookup" or p in self.models for p in spec.split(","))}
                self._made[key] = AutoDraft(made, Estimates(), adaptive=gamma == "auto")
            else:
                made = build(parts, self.models, datastore=self.datastore, tokenizer_size=self.tokenizer_size)
                if isinstance(made, LookupDraft):
                    made.top = gamma != "auto"           # it proposes to the target itself (auto's: via auto)
                self._made[key] = AutoDraft({draft: made}, Estimates()) if gamma == "auto" else made
            for level in _levels(self._made[key]):
                if isinstance(level, LookupDraft):
                    level.chooser = self.width
        return self._made[key]

    def for_beams(self, params: Params) -> str | None:
        """The draft model a beam search request speculates with, or None for target-only beam search: the name is
        parsed as for sampling, and must then be "none", "auto" or one draft model."""
        draft, gamma = params.draft, params.gamma
        parts = parse(draft, list(self.models)) if isinstance(draft, str) else None
        if gamma == 0 or parts == ["none"]:
            return None
        if parts == ["auto"]:
            return "draft" if "draft" in self.models else None
        if parts is not None and len(parts) == 1 and parts[0] in self.models:
            return parts[0]
        raise SpecdecError(f"beam search speculates with a draft model, not with draft={params.as_dict()['draft']!r}",
                           f"use draft='auto', 'none' or one of {', '.join(self.models) or '(none in this export)'}")


def _levels(source) -> list:
    """Every source a choice or a chain is made of (auto's candidates, the levels below a model)."""
    out, todo = [], [source]
    while todo:
        s = todo.pop()
        if s is None or s in out:
            continue
        out.append(s)
        todo += list(getattr(s, "candidates", {}).values()) + [getattr(s, "below", None)]
    return out
