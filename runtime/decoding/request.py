"""One request on its way through a decoder: what every strategy (decoding/strategies/) shares.

A `Request` holds the prompt's ids, the checked Params, the Stats, the clock and the stop reason. A strategy's
`run(request)` yields the tokens each iteration adds and sets `request.stop_reason` on the last; the scheduler's one
request path times every iteration the same way and makes a stream's pieces or a generate's Result from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..core.params import Params
from ..core.stats import Stats
from .plan import Plan
from .prompt import DecoderPrompt


@dataclass
class Request:
    ids: np.ndarray                  # the prompt's token ids (checked: inside the vocabulary and max_length), or
    #                                  the samples its family's encoder reads (float32, checked)
    params: Params                   # checked
    plan: Plan                       # what it runs (decoding/plan.py): the only reading of its gamma and draft
    prompt: DecoderPrompt | None = None    # its family's decoder prompt and suppressed tokens (None: the start token)
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = ""            # "eos", "max_new_tokens" or "max_length" once it has ended
    sequences: list = field(default_factory=list)    # beam search: the num_return_sequences best, best first
    scores: list = field(default_factory=list)
    began: float = field(default_factory=time.perf_counter)
    cancelled: bool = False          # set by another thread: a batch drops the request at its next round

    def tick(self) -> None:
        """Time so far: the whole request, and the host's share (what no ONNX Runtime run took)."""
        s = self.stats
        s.total_s = time.perf_counter() - self.began
        s.host_s = s.total_s - (s.encoder_s + s.draft_s + s.target_s)

    def stop(self, tokens: list, eos_id: int, at_max_length: bool) -> str:
        """The stop reason after `tokens` were produced ("" while the request goes on), recorded on the request."""
        self.stop_reason = ("eos" if tokens and tokens[-1] == eos_id
                            else "max_new_tokens" if len(tokens) >= self.params.max_new_tokens
                            else "max_length" if at_max_length else "")
        return self.stop_reason
