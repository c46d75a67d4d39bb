"""What a decoder learns across requests, in one object (Learned): the DraftSource each planned source is (built by
sources/factory.py, kept), with what auto, beam search's gamma and the batches learn (the names a request's
`draft=` may say are parsed by the planner, decoding/plan.py)."""

from __future__ import annotations

from .sources.auto import AutoDraft, Estimates
from .strategies.beam_search import BeamEstimates
from .sources.factory import build
from .sources.model_draft import DraftSource
from .sources.lookup import configured
from .plan import Plan
from .adaptive.switch import SWITCH_FIRST, Switch
from .sources.width import Width

AUTO_CANDIDATES = ("lookup", "draft", "lookup,draft")
DEFAULT_PLAN = Plan("sampling", choose_source=True, adaptive=True)   # draft="auto", gamma="auto"


class Learned:
    """What a decoder learns across requests, in one object that `reset()` forgets: the sources a request's plan
    asks for (made on first use and kept, so a lookup's or a model's state is not rebuilt per request), what auto
    learns (`estimates`, and `beam_estimates` for beam search's gamma), the width choice, and per kind of batch its
    switch and what each origin's copies were worth (`batch_state`); with `datastore`, what the lookups search
    besides the output and the source. `tokenizer_size`: the ids a lookup may propose (loading/vocabulary.py)."""

    def __init__(self, models: dict, datastore=None, tokenizer_size: int | None = None):
        self.models, self.datastore, self.tokenizer_size = models, datastore, tokenizer_size
        self.reset()

    def reset(self) -> None:
        """Forget the sources made and everything learned."""
        self.beam_estimates, self._made, self._object_auto = BeamEstimates(), {}, (None, None)
        self.width = Width()        # how many candidates a lookup round verifies, when a request leaves it open
        self._batches = {}          # kind of batch -> (its Switch, origin -> what its copies were worth)

    def batch_state(self, kind, switched: bool) -> tuple:
        """(switch or None, acceptance by origin) a kind of batch keeps across its batches
        (decoding/strategies/batch.py)."""
        switch, acceptance = self._batches.setdefault(kind, (Switch(first=SWITCH_FIRST), {}))
        return (switch if switched else None), acceptance

    @property
    def estimates(self) -> Estimates:
        """What the default request (draft="auto", gamma="auto", candidates=0) has learned. Each kind of
        gamma="auto" request (its draft and candidates) learns its own: their rounds cost differently (a lookup
        asked for 4 candidates searches the datastore for them), and one kind's costs would mislead another's
        choice."""
        return self.for_sampling(DEFAULT_PLAN).estimates

    def for_sampling(self, plan: Plan) -> DraftSource | None:
        """The source of a sampling request's plan (decoding/plan.py); None for target-only decoding."""
        if isinstance(plan.source, DraftSource):
            draft = plan.source
            if draft.widens:                        # a lookup object proposes to the target itself
                configured(draft, top=not plan.adaptive, chooser=self.width)
            if not plan.adaptive:
                return draft
            key = (draft, plan.candidates)      # kept, with what it learned, while requests pass the same object;
            if self._object_auto[0] != key:     # one slot, so a new object per request does not pile them up
                self._object_auto = (key, AutoDraft({draft.name: draft}, Estimates()))
            return self._object_auto[1]
        if not plan.speculative:
            return None
        key = (plan.choose_source, plan.source, plan.adaptive, plan.candidates if plan.adaptive else None)
        if key not in self._made:
            if plan.choose_source:
                lookup = configured(datastore=self.datastore, tokenizer_size=self.tokenizer_size)
                made = {spec: build(spec.split(","), self.models, lookup) for spec in AUTO_CANDIDATES
                        if all(p == "lookup" or p in self.models for p in spec.split(","))}
                source = self._made[key] = AutoDraft(made, Estimates(), adaptive=plan.adaptive)
            else:
                made = build(plan.source.split(","), self.models, datastore=self.datastore,
                             tokenizer_size=self.tokenizer_size)
                source = self._made[key] = AutoDraft({plan.source: made}, Estimates()) if plan.adaptive else made
            for level in source.levels():      # the whole draft at a fixed gamma proposes to the target itself
                if level.widens:                # (auto's: through auto)
                    configured(level, top=level is source, chooser=self.width)
        return self._made[key]
