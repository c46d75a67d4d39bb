"""Admission: a request checked and planned once, where it enters, into the one object every path carries.

`Admission.admit` checks the parameters (Params.checked), the input through the export's family (a prompt text or
token ids, or its family's own input keywords), and plans the request both ways in one planner call (decoding/plan.py
`plans`): alone (speculative sampling or beam search) and as a row of a batch. The `Admitted` it returns is what
generate(), a stream, a batch and the batcher's tickets run: nothing below plans or checks it again."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import SpecdecError
from ..core.params import Params
from ..decoding.plan import Plan, plan, plans
from ..decoding.request import Request
from ..engine.capture import NO_EAGER, NO_EAGER_FIX
from ..families import INPUTS, refuse_foreign


@dataclass
class Admitted:
    """A checked, planned request. `source`: its checked input (token ids, or what its family encodes); `prompt`: the
    decoder prompt its family made, or None; `whole`: set when the input is longer than the encoder's window and its
    family decodes it window by window (`source` is then None); `given`: the family's input keywords as read;
    `row`: the Request a batch runs it as, or None (it runs alone)."""
    params: Params
    plan: Plan | SpecdecError           # alone (an error when only a batch runs it)
    source: object = None
    prompt: object = None
    whole: bool = False
    given: dict = field(default_factory=dict)
    row: Request | None = None

    @property
    def timestamps(self) -> bool:
        """Whether its Result carries the transcript's timed segments."""
        return bool(self.given.get("timestamps", False))

    def alone(self) -> Plan:
        """Its plan alone, or its one-line error."""
        if isinstance(self.plan, SpecdecError):
            raise self.plan
        return self.plan

    def request(self) -> Request:
        """A fresh Request to run it alone."""
        return Request(self.source, self.params, self.alone(), prompt=self.prompt)


class Admission:
    """Checks and plans requests for one decoder: its family, draft models, gamma_max, and whether it runs the
    capturable graphs (no batches then)."""

    def __init__(self, family, models, gamma_max: int, captured: bool):
        self.family, self.models, self.gamma_max, self.captured = family, models, gamma_max, captured

    def params(self, params=None, overrides: dict | None = None) -> Params:
        """The request's checked Params (keywords override fields of `params`)."""
        return Params.of(params, **(overrides or {})).checked(self.gamma_max)

    def admit(self, prompt=None, input_ids=None, params=None, overrides: dict | None = None) -> Admitted:
        """A request checked and planned once; a bad one raises its one-line SpecdecError. `overrides`: fields of
        Params, and the keywords of a family's input (families/: INPUTS)."""
        overrides = dict(overrides or {})
        given = {name: overrides.pop(name) for name in INPUTS if name in overrides}
        checked = self.params(params, overrides)
        alone, row = plans(checked, self.models, self.gamma_max)
        batched = not isinstance(row, SpecdecError) and not self.captured and self.family.batchable
        refuse_foreign(self.family, given)
        given = self.family.read(given)
        if self.family.whole(given):        # checked window by window when it runs; its choices now
            self.family.choices(given)
            admitted = Admitted(checked, alone, whole=True, given=given)
        else:
            source, prompt_made = self.family.input(prompt, input_ids, given)
            admitted = Admitted(checked, alone, source, prompt_made, given=given)
            if batched:
                admitted.row = Request(source, checked, row)
        if admitted.row is None:
            admitted.alone()                # it runs alone: its own plan must hold
        return admitted

    def admit_plan(self, params):
        """A checked request's plan alone, without its input (what `SpeculativeDecoder.scheduler.source` asks)."""
        return plan(params, self.models, self.gamma_max)

    def row(self, prompt, input_ids, params, overrides: dict) -> Request:
        """A checked, planned row of a batch (what generate_batch queues): a one-line SpecdecError if a batch cannot
        run it."""
        if not self.family.batchable:
            raise SpecdecError(*self.family.refusal)
        checked = self.params(params, overrides)
        if self.captured:
            raise SpecdecError(NO_EAGER, NO_EAGER_FIX)
        _, row = plans(checked, self.models, self.gamma_max)
        if isinstance(row, SpecdecError):
            raise row
        return Request(self.family.input(prompt, input_ids, {})[0], checked, row)
