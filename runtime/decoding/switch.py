"""Whether auto's rounds are worth running at all, measured: auto's round, or a plain target step (exactly gamma = 0).

Auto's choice (auto.py) predicts each round from its estimates, and a prediction can be wrong in a way no single
round shows: the rounds it chooses may each beat a target step while the whole of it (the lookup's probes, the
bookkeeping, the wider runs of copies that are rarely kept) costs more than it brings. At T = 1 on a small model
nothing pays, and auto's rounds were 2-4 % slower than target-only decoding. So a `Switch` measures the whole: the
wall seconds per token of auto's rounds and of plain target steps, and runs the faster.

The comparison is made on the same work. Which mode a round runs is decided round by round, interleaved (a
golden-ratio sequence: no random state is used), so both modes see the same prompts, tasks and positions; a
comparison of stretches of rounds would compare whatever the prompts of each stretch cost. While the modes are
measured (the first FIRST rounds) each runs half the rounds; then the slower one's share falls as
FIRST / (2 (FIRST + n)) after n rounds with the same leader, down to MIN_SHARE, which it keeps so that a change
(other prompts, another temperature) is seen. A clear difference is acted on at once: when one mode's seconds per
token are CLEAR lower after EARLY rounds of each, it leads before FIRST, and while a lead is that clear the slower
mode keeps only MIN_SHARE (at t5-large size auto's rounds measured 1.5x faster per token than plain steps, and the
half-and-half measuring of FIRST rounds spent a quarter of a short run's tokens on plain steps).
Measurements are decayed means with a half-life of HALF_LIFE rounds.
Auto's rounds take the lead only when they are MARGIN faster, and keep it while they are KEEP_MARGIN faster: a
small difference is within the noise of a share of 1/32 of the rounds, and plain steps are what cannot lose.

A plain step costs the switch a clock reading and a few additions. The output's distribution does not depend on
the mode: every round is exact either way; only the speed does. A round's clock runs from its `plain()` call to the
next one in the same request: a request's set-up (the encoder run) is no round's time, and its last round is not
measured.
"""

from __future__ import annotations

import time

from .estimators import Ratio

FIRST = 256           # rounds measured half and half before a mode leads
MIN_SHARE = 1 / 32    # the slower mode's least share of the rounds
HALF_LIFE = 4096      # rounds after which a measurement weighs half
DECIDE = 32           # rounds between two comparisons
MARGIN = 0.03         # auto's rounds take the lead only when their seconds per token are this much lower,
KEEP_MARGIN = 0.01    # and keep it while they are this much lower (a lead that flips on noise costs a new measuring)
EARLY = 16            # rounds of each mode after which a clear difference leads before FIRST
CLEAR = 0.25          # a difference is clear when one mode's seconds per token are this much lower
SWITCH_FIRST = 64     # a batch's switch measures 64 rounds half and half (each round carries up to B rows' tokens)
_DECAY = 0.5 ** (1 / HALF_LIFE)
_STEP = 0.6180339887498949      # the golden ratio's fraction: an evenly spread sequence of phases


class Switch:
    """`first`: rounds measured half and half (FIRST; a batch's rounds each carry many requests' tokens, so a batch
    measures fewer)."""

    def __init__(self, clock=time.perf_counter, first: int = FIRST):
        self.clock, self.first = clock, first
        self.rounds = 0                   # rounds asked about
        self.lead = None                  # the faster mode (True: auto's rounds), None while measuring
        self.led = 0                      # rounds since the lead last changed
        self.spent = {True: Ratio(), False: Ratio()}        # mode -> decayed seconds over tokens
        self.measured = {True: 0, False: 0}                 # mode -> rounds measured
        self._phase = 0.0
        self._last = None                 # (clock, tokens produced, mode) at the start of the round at hand

    def start(self) -> None:
        """A new request: its set-up is not a round's time."""
        self._last = None

    def plain(self, produced: int, idle: float = 0.0) -> bool:
        """Called at each round's start with the tokens the request has produced: True when the round is to be a
        plain target step. `idle`: seconds since the last call that were no round's work (a batch's joining
        requests' encoder runs), left out of the last round's time."""
        now = self.clock()
        if self._last is not None:
            began, before, mode = self._last
            for spent in self.spent.values():
                spent.fade(_DECAY)
            self.spent[mode].add(now - began - idle, produced - before)
            self.measured[mode] += 1
        self.rounds += 1
        self.led += 1
        if self.rounds % DECIDE == 0 and (self.rounds >= self.first or self._clear()):
            self._decide()
        self._phase = (self._phase + _STEP) % 1.0
        lead = True if self.lead is None else self.lead
        auto = (not lead) if self._phase < self.share() else lead
        self._last = (now, produced, auto)
        return not auto

    def share(self) -> float:
        """The slower mode's share of the rounds now."""
        if self.lead is None:
            return 0.5
        if self._clear():
            return MIN_SHARE
        return max(MIN_SHARE, 0.5 * self.first / (self.first + self.led))

    def _clear(self) -> bool:
        """Both modes measured EARLY rounds or more, and one is CLEAR faster per token."""
        if min(self.measured.values()) < EARLY:
            return False
        on, off = self.seconds_per_token(True), self.seconds_per_token(False)
        return on is not None and off is not None and min(on, off) < (1 - CLEAR) * max(on, off)

    def seconds_per_token(self, auto: bool) -> float | None:
        return self.spent[auto].get()

    def _decide(self) -> None:
        on, off = self.seconds_per_token(True), self.seconds_per_token(False)
        if on is None or off is None:
            return
        lead = on < off * (1 - (KEEP_MARGIN if self.lead else MARGIN))
        if lead != self.lead:
            self.lead, self.led = lead, 0
