"""Whether auto's rounds are worth running at all, measured: auto's round, or a plain target step (exactly gamma = 0).

Auto's choice (auto.py) predicts each round from its estimates, and a prediction can be wrong in a way no single
round shows: the rounds it chooses may each beat a target step while the whole of it (the lookup's probes, the
bookkeeping, the wider runs of copies that are rarely kept) costs more than it brings. At T = 1 on a small model
nothing pays, and auto's rounds were 2-4 % slower than target-only decoding. So a `Switch` measures the whole: the
wall seconds per token of auto's rounds and of plain target steps, and runs the faster.

The comparison is made on the same work. Which mode a round runs is decided round by round, interleaved (a golden-
ratio sequence: no random state is used), so both modes see the same prompts, tasks and positions; a comparison of
stretches of rounds would compare whatever the prompts of each stretch cost. The first `first` rounds (FIRST) are
run half and half; before them, while auto's estimates are young (each source has run a few rounds, auto.py's
SETTLE), every round is auto's and none is measured. From then on the rule is auto's own (auto.py): each mode runs
in proportion to the chance that it is the faster (probability matching, the expectation of Thompson sampling), from
both modes' seconds per token and their sampling variances (estimators.faster_chance), recomputed every DECIDE
rounds. The mode with the lower seconds per token leads; the other runs that chance of the rounds, at least
MIN_SHARE (so that a change, other prompts or another temperature, is seen) and at most half. A clear difference (at
t5-large size auto's rounds measured 1.5x faster per token than plain steps) leaves the slower mode MIN_SHARE within
a few dozen rounds; modes within the noise of each other share the rounds, which costs nothing since neither is the
slower. Measurements are decayed sums with a half-life of HALF_LIFE rounds.

A plain step costs the switch a clock reading and a few additions. The output's distribution does not depend on
the mode: every round is exact either way; only the speed does. A round's clock runs from its `plain()` call to the
next one in the same request: a request's set-up (the encoder run) is no round's time, and its last round is not
measured.
"""

from __future__ import annotations

import time

from .controller import GammaController
from .estimators import Ratio, faster_chance

FIRST = 32            # rounds measured half and half before the shares follow the chance
MIN_SHARE = 1 / 32    # the slower mode's least share of the rounds
HALF_LIFE = 4096      # rounds after which a measurement weighs half
DECIDE = 8            # rounds between two updates of the shares
SWITCH_FIRST = 64     # a batch's switch measures 64 rounds half and half (each round carries up to B rows' tokens)
_DECAY = 0.5 ** (1 / HALF_LIFE)
_STEP = 0.6180339887498949      # the golden ratio's fraction: an evenly spread sequence of phases


class Switch(GammaController):
    """`first`: rounds measured half and half (FIRST; a batch's rounds each carry many requests' tokens, so a batch
    measures more). `explored`: rounds run in the mode that measured slower at the time. As a GammaController
    (controller.py) it chooses between the cap (the measured rounds: auto's, or a batch's lookup rounds) and 0 (a
    plain target step); it times its rounds itself, from one choice to the next, and learns each at the next
    choice."""

    def __init__(self, clock=time.perf_counter, first: int = FIRST):
        self.clock, self.first = clock, first
        self.rounds = 0                   # rounds asked about
        self.lead = None                  # the faster mode (True: auto's rounds), None while measuring
        self.explored = 0
        self.spent = {True: Ratio(), False: Ratio()}        # mode -> decayed seconds over tokens
        self.measured = {True: 0, False: 0}                 # mode -> rounds measured
        self._share = 0.5                 # the slower mode's share of the rounds now
        self._phase = 0.0
        self._last = None                 # (clock, tokens produced, mode) at the start of the round at hand

    def start(self) -> None:
        """A new request: its set-up is not a round's time."""
        self._last = None

    def plain(self, produced: int, idle: float = 0.0, hold: bool = False) -> bool:
        """Called at each round's start with the tokens the request has produced: True when the round is to be a
        plain target step (`choose(1, ...)` is 0). `idle`: seconds since the last call that were no round's work (a
        batch's joining requests' encoder runs), left out of the last round's time. `hold`: the round is auto's,
        unmeasured and not counted (auto's estimates are still young: its rounds are not yet what it will run)."""
        return self.choose(1, produced, idle, hold) == 0

    def choose(self, cap: int, produced: int = 0, idle: float = 0.0, hold: bool = False) -> int:
        """The next round's gamma: `cap` (a measured round: auto's, or a batch's lookup round) or 0 (a plain target
        step); `produced`, `idle` and `hold` as in `plain`. The round before, timed from its choice to this one, is
        learned first."""
        now = self.clock()
        if self._last is not None:
            began, before, mode = self._last
            self.learn(mode, now - began - idle, produced - before)
        if hold:
            self._last = None
            return cap
        self.rounds += 1
        if self.rounds % DECIDE == 0 and self.rounds >= self.first:
            self._decide()
        self._phase = (self._phase + _STEP) % 1.0
        lead = True if self.lead is None else self.lead
        auto = (not lead) if self._phase < self._share else lead
        if self.lead is not None:
            self._chose(auto, self.lead)
        self._last = (now, produced, auto)
        return cap if auto else 0

    def learn(self, auto: bool, seconds: float, tokens: int) -> None:
        """A round of the mode `auto` (True: a measured round, False: a plain step) took `seconds` for `tokens`."""
        for spent in self.spent.values():
            spent.fade(_DECAY)
        self.spent[auto].add(seconds, tokens)
        self.measured[auto] += 1

    def share(self) -> float:
        """The slower mode's share of the rounds now."""
        return self._share

    def seconds_per_token(self, auto: bool) -> float | None:
        return self.spent[auto].get()

    def auto_faster_chance(self) -> float | None:
        """The chance that auto's rounds take fewer seconds per token than plain steps (None before both ran)."""
        return faster_chance(self.spent[True], self.spent[False])

    def _decide(self) -> None:
        chance = self.auto_faster_chance()
        if chance is None or min(self.measured.values()) < 2:
            return
        self.lead = chance >= 0.5
        self._share = min(0.5, max(MIN_SHARE, min(chance, 1 - chance)))
