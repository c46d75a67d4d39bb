"""Whether auto's rounds are worth running at all, measured: auto on, or plain target steps (exactly gamma = 0).

Auto's choice (auto.py) predicts each round from its estimates, and a prediction can be wrong in a way no round
shows: the rounds it chooses may each beat a target step while the whole of it, the probes of the lookup, the
bookkeeping, the wider runs of its few copies, costs more than they bring (at T = 1 nothing pays on a small model,
and auto's rounds were 2-4 % slower than target-only decoding). So a `Switch` measures the whole: the wall seconds
per token of the rounds auto runs and of plain target steps, each a decayed mean over stretches of rounds in that
mode, and runs the faster one. The slower mode still runs one EPOCH-round stretch after each stretch of the faster
one, so a change (other prompts, another temperature) is seen; the faster one's stretch doubles each time it
stays faster, up to MAX_STRETCH rounds, so measuring the slower one costs at most EPOCH / MAX_STRETCH of the rounds
in the end. A plain step costs the switch one clock reading; the output's distribution does not depend on the
mode (every round is exact either way), only the speed does.

A request's first round is measured from its start (the encoder run and the sources' set-up are not a round), and
its last round not at all: the clock of a round runs from its `plain()` call to the next one in the same request.
"""

from __future__ import annotations

import time

EPOCH = 32            # rounds of the slower mode after each stretch of the faster one
FIRST = 96            # rounds auto runs before plain steps are measured for the first time
MAX_STRETCH = 4096    # the longest stretch of the faster mode
KEEP = 0.7            # weight of a mode's earlier stretches when one more is folded into its mean
MARGIN = 0.01         # auto is kept only when its seconds per token are this much below the plain steps'


class Switch:
    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.auto = True                  # the mode of the stretch at hand
        self.left = FIRST                 # its rounds left
        self.best = None                  # the faster mode at the last decision (None before both are measured)
        self.stretch = EPOCH              # the faster mode's next stretch
        self.spent = {True: [0.0, 0.0], False: [0.0, 0.0]}   # mode -> decayed [seconds, tokens] of past stretches
        self._now = [0.0, 0.0]            # this stretch's [seconds, tokens]
        self._last = None                 # (clock, tokens produced) at the last round's start in this request

    def start(self) -> None:
        """A new request: its set-up is not a round's time."""
        self._last = None

    def plain(self, produced: int) -> bool:
        """Called at each round's start with the tokens the request has produced: True when the round is to be a
        plain target step."""
        now = self.clock()
        if self._last is not None:
            self._now[0] += now - self._last[0]
            self._now[1] += produced - self._last[1]
        self._last = (now, produced)
        self.left -= 1
        if self.left <= 0:
            self._next()
        return not self.auto

    def seconds_per_token(self, auto: bool) -> float | None:
        seconds, tokens = self.spent[auto]
        return seconds / tokens if tokens > 0 else None

    def faster(self) -> bool | None:
        """The faster mode (True: auto) by the measurements so far; None until both are measured."""
        on, off = self.seconds_per_token(True), self.seconds_per_token(False)
        if on is None or off is None:
            return None
        return on < off * (1 - MARGIN)

    def _next(self) -> None:
        """Fold the stretch that ended into its mode's mean and choose the next stretch."""
        spent = self.spent[self.auto]
        spent[0] = spent[0] * KEEP + self._now[0]
        spent[1] = spent[1] * KEEP + self._now[1]
        self._now = [0.0, 0.0]
        best = self.faster()
        if best is None:                  # plain steps not measured yet
            self.auto, self.left = False, EPOCH
            return
        if best != self.best:             # a new leader: measure the other mode again soon
            self.best, self.stretch = best, EPOCH
        if self.auto == best:             # the faster mode's stretch ended: one epoch of the slower one
            self.auto, self.left = not best, EPOCH
        else:
            self.auto, self.left = best, self.stretch
            self.stretch = min(2 * self.stretch, MAX_STRETCH)
